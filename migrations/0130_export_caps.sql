-- Per-organization caps on exports: how many may wait or run at once, and how many bytes of
-- unexpired files an organization may keep. The API counts an organization's unexpired exports
-- that wait, run or hold a file before it accepts another; this index serves that count (and
-- the report-workers' count of an organization's running exports when they choose what to
-- claim next).
CREATE INDEX exports_org_active_idx ON exports (org_id, expires_at)
    WHERE status IN ('pending', 'running', 'ready');
