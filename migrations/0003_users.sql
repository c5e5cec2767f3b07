-- Assignees. E-mail is unique per organization, compared case-insensitively.
CREATE TABLE users (
    id               UUID PRIMARY KEY,
    org_id           UUID NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    email            TEXT NOT NULL,
    email_normalized TEXT NOT NULL,
    name             TEXT,
    created_at       TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at       TIMESTAMPTZ NOT NULL DEFAULT now(),
    UNIQUE (org_id, email_normalized)
);
-- Keyset listing of an organization's users.
CREATE INDEX users_org_id_idx ON users (org_id, id);
