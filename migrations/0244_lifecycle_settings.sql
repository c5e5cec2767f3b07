-- Lifecycle settings (issue 37, design §16): an organization may ask that deactivating a user
-- (SCIM `active: false`) cancels their open assignments, and may give a default reminder policy
-- for its flows without one of their own; an enrollment rule may cancel the open assignments it
-- made when a user no longer matches it.
ALTER TABLE organizations ADD COLUMN cancel_on_deactivate BOOLEAN NOT NULL DEFAULT false;
ALTER TABLE organizations ADD COLUMN reminders JSONB;
ALTER TABLE enrollment_rules ADD COLUMN cancel_on_unmatch BOOLEAN NOT NULL DEFAULT false;

-- The reminder scan reads the flows of the organizations with a default policy (and the flows
-- with their own, flows_with_reminders_idx), then their open assignments with a due date
-- (assignments_open_due_by_flow_idx).
CREATE INDEX organizations_with_reminders_idx ON organizations (id) WHERE reminders IS NOT NULL;

-- The open assignments a rule made for a user, for the rule's cancel on unmatch.
CREATE INDEX assignments_open_by_rule_idx ON assignments (enrollment_rule_id, user_id)
    WHERE enrollment_rule_id IS NOT NULL AND status IN ('pending', 'in_progress', 'overdue');
