-- Flows and their ordered modules.
CREATE TABLE flows (
    id          UUID PRIMARY KEY,
    org_id      UUID NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    name        TEXT NOT NULL,
    description TEXT,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX flows_org_id_idx ON flows (org_id, id);

CREATE TABLE modules (
    id                UUID PRIMARY KEY,
    flow_id           UUID NOT NULL REFERENCES flows (id) ON DELETE CASCADE,
    position          INTEGER NOT NULL CHECK (position >= 0),
    name              TEXT NOT NULL,
    estimated_minutes INTEGER NOT NULL DEFAULT 0 CHECK (estimated_minutes >= 0),
    UNIQUE (flow_id, position)
);
