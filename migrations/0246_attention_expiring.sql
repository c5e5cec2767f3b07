-- The dashboard's home page counts and lists an organization's completions expiring soon
-- (design §16): completed, with a validity, not settled by the scheduler yet. One index range of
-- `(org_id, expires_at)` per count or list, whatever the organization's other assignments.
CREATE INDEX assignments_expiring_by_org_idx ON assignments (org_id, expires_at, id)
    WHERE status = 'completed' AND expires_at IS NOT NULL AND expiry_settled_at IS NULL;
