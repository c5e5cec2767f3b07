-- API keys: only a SHA-256 of the secret is stored, with a short prefix to recognise it.
CREATE TABLE api_keys (
    id           UUID PRIMARY KEY,
    org_id       UUID NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    name         TEXT NOT NULL DEFAULT '',
    key_hash     BYTEA NOT NULL UNIQUE,
    prefix       TEXT NOT NULL,
    created_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    revoked_at   TIMESTAMPTZ,
    last_used_at TIMESTAMPTZ
);
CREATE INDEX api_keys_org_idx ON api_keys (org_id);
