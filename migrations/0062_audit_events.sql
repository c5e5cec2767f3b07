-- Who changed what in an organization's control plane: keys generated, revoked or rolled,
-- webhook endpoints created, changed, rotated or deleted, dashboard accounts invited.
CREATE TABLE audit_events (
    id          BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    org_id      UUID NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    occurred_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    -- 'account' (a dashboard account's e-mail), 'api_key' (the key's prefix) or 'flowctl'.
    actor_kind  TEXT NOT NULL CHECK (actor_kind IN ('account', 'api_key', 'flowctl')),
    actor       TEXT NOT NULL,
    action      TEXT NOT NULL,
    -- The id of what changed (key_…, whe_…, acc_…) and a human description of it.
    target      TEXT NOT NULL,
    detail      TEXT NOT NULL DEFAULT ''
);
CREATE INDEX audit_events_org_idx ON audit_events (org_id, id DESC);
