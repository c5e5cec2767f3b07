-- Audit rows of queued changes (cancellations) carry the change's id, the same on every retry of
-- the request that queued it (a SCIM deactivation retried before its cancellations were applied, a
-- bulk cancel sent again): one row per change, whatever the retries.
ALTER TABLE audit_events ADD COLUMN change_id UUID;
CREATE UNIQUE INDEX audit_events_change_idx ON audit_events (change_id) WHERE change_id IS NOT NULL;

-- GET /v1/audit-events filters by target (an assignment's history of changes) and by action (every
-- cancellation) in keyset pages, newest first: one index range each, however long the trail.
CREATE INDEX audit_events_target_idx ON audit_events (org_id, target, id DESC);
CREATE INDEX audit_events_action_idx ON audit_events (org_id, action, id DESC);
