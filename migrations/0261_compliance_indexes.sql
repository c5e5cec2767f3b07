-- The compliance report (issue 39) reads, per person and flow, the latest assignment assigned by
-- an instant and the latest completion by it: for a page, one short backward range of each index
-- per (person, flow); for the totals of a whole organization, one ordered pass of each over the
-- organization's assignments (DISTINCT ON without a sort).
CREATE INDEX assignments_org_person_flow_idx
    ON assignments (org_id, user_id, flow_id, assigned_at DESC, id DESC);
CREATE INDEX assignments_org_person_flow_completed_idx
    ON assignments (org_id, user_id, flow_id, completed_at DESC, id DESC)
    WHERE completed_at IS NOT NULL;
