-- Reports read a flow's assignments in (assigned_at, id) order. This covering index lets the
-- metrics, the aggregates and the status filter run as index-only scans over a date range. It has
-- the key of assignments_flow_assigned_idx (0006), which it replaces.
DROP INDEX IF EXISTS assignments_flow_assigned_idx;
CREATE INDEX assignments_report_idx ON assignments (flow_id, assigned_at, id)
    INCLUDE (status, due_at, started_at, completed_at);
