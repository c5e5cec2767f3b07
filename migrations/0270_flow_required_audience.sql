-- A flow required of a rule's audience (issue 39, design §18): a required flow may be required
-- only of the people an enrollment rule matches now (`enrollment_matches.matching`) instead of
-- everyone. Null: everyone (when `required`). Only a required flow has an audience. Deleting a
-- rule some flow is required for is refused (the flows name it; docs/compliance.md), hence no
-- ON DELETE action: the organization's own deletion removes both in one statement. Adding a
-- nullable column rewrites nothing; the check holds for every existing row (all null).
ALTER TABLE flows
    ADD COLUMN required_for_rule_id UUID REFERENCES enrollment_rules (id),
    ADD CONSTRAINT flows_audience_required CHECK (required_for_rule_id IS NULL OR required);
-- Which flows a rule is the audience of (looked up when the rule is deleted).
CREATE INDEX flows_required_for_rule_idx ON flows (required_for_rule_id)
    WHERE required_for_rule_id IS NOT NULL;
