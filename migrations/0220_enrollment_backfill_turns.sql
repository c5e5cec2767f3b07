-- Backfills are claimed in turns per organization, not oldest first across all of them
-- (docs/enrollment-rules.md, "Backfill"): at most one runs per organization at a time, and the
-- next claim goes to the organization with a backfill waiting that was served least recently
-- (or never). This table remembers when each organization was last served; its row is also what
-- a claim and a request lock, so two schedulers cannot start two backfills of one organization
-- and concurrent requests cannot pass the cap on backfills waiting.
CREATE TABLE enrollment_backfill_turns (
    org_id    UUID PRIMARY KEY REFERENCES organizations (id) ON DELETE CASCADE,
    served_at TIMESTAMPTZ
);

INSERT INTO enrollment_backfill_turns (org_id)
SELECT DISTINCT org_id FROM enrollment_backfills WHERE status IN ('queued', 'running');

-- An organization's unfinished backfills, oldest first: what a claim takes in its turn, and what
-- a request counts against the cap.
CREATE INDEX enrollment_backfills_org_idx ON enrollment_backfills (org_id, created_at)
    WHERE status IN ('queued', 'running');
