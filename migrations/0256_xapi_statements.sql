-- xAPI in (issue 38). Modules and flows may carry the activity IRI learning content names them
-- by (`object.id` of its statements): a module's is unique within its flow, a flow's own (the
-- activity `satisfied` is sent about, cmi5's course) within its organization.
ALTER TABLE modules ADD COLUMN activity_id TEXT;
CREATE UNIQUE INDEX modules_flow_activity_idx ON modules (flow_id, activity_id)
    WHERE activity_id IS NOT NULL;
CREATE INDEX modules_activity_idx ON modules (activity_id) WHERE activity_id IS NOT NULL;
ALTER TABLE flows ADD COLUMN activity_id TEXT;
CREATE UNIQUE INDEX flows_org_activity_idx ON flows (org_id, activity_id)
    WHERE activity_id IS NOT NULL;

-- Every statement an organization's content sent, as sent (with the id Flow gave it when it had
-- none): ids unique per organization, so a re-sent statement is recognized (same content: stored
-- once; other content: refused). `matched` says whether it mapped onto progress.
CREATE TABLE xapi_statements (
    org_id        UUID NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    id            UUID NOT NULL,
    statement     JSONB NOT NULL,
    matched       BOOLEAN NOT NULL,
    assignment_id UUID,
    stored_at     TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (org_id, id)
);
