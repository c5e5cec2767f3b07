-- The dashboard's home page, "what needs attention" (design §16): the organization's open
-- assignments that are overdue or due within 7 days, counted exactly and listed most urgent
-- first. The per-flow index of 0242 would need one range scan per flow of the organization; this
-- one answers both counts and both lists with one index range each (an index-only scan for the
-- counts), whatever the number of the organization's other assignments. `id` is the lists' tie
-- break (many assignments share a due date: the end of the same day), so a list stops after its
-- rows instead of sorting every assignment due at the same instant.
CREATE INDEX assignments_open_due_by_org_idx ON assignments (org_id, due_at, id)
    WHERE status IN ('pending', 'in_progress', 'overdue') AND due_at IS NOT NULL;

-- Assignments of an organization that could not be persisted (their commands were
-- dead-lettered), newest first: what the home page counts and lists.
CREATE INDEX assignment_failures_org_idx ON assignment_failures (org_id, failed_at DESC);
