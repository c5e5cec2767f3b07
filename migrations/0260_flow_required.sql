-- Required flows (issue 39, design §18): a flow marked `required` is one every person of the
-- organization must hold; the compliance report covers the required flows when no flow is named.
ALTER TABLE flows ADD COLUMN required BOOLEAN NOT NULL DEFAULT false;
-- The compliance report's default set: an organization's required flows.
CREATE INDEX flows_required_idx ON flows (org_id, id) WHERE required;
