-- Exports of more than one report (issue 39): an export is of a kind, `flow_report` (the flow
-- report, every row so far) or `compliance` (the compliance report across flows, which has no
-- single flow). `parameters` holds the request of its kind. Existing rows are flow reports and
-- keep their flow; a compliance export has none. Adding a column with a constant default and
-- relaxing NOT NULL rewrite nothing; the check is validated over the existing rows, which all
-- have a flow.
ALTER TABLE exports
    ADD COLUMN kind TEXT NOT NULL DEFAULT 'flow_report'
        CHECK (kind IN ('flow_report', 'compliance')),
    ALTER COLUMN flow_id DROP NOT NULL,
    ADD CONSTRAINT exports_kind_flow CHECK ((kind = 'flow_report') = (flow_id IS NOT NULL));
