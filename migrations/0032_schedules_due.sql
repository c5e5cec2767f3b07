-- The scheduler claims due schedules of live series only.
DROP INDEX IF EXISTS schedules_due_idx;
CREATE INDEX schedules_due_idx ON schedules (scheduled_at) WHERE active AND deleted_at IS NULL;
-- Reading one organization's schedules.
CREATE INDEX schedules_org_idx ON schedules (org_id, id);
