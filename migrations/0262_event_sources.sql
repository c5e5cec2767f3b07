-- Signed event sources (issue 38, docs/events.md): senders that cannot hold an API key post to
-- /v1/events/inbound/{id}, signed under the source's secret (Standard Webhooks), or with it as
-- their Authorization header (Okta event hooks). The body becomes events the triggers match.
CREATE TABLE event_sources (
    id                      UUID PRIMARY KEY,
    org_id                  UUID NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    name                    TEXT NOT NULL,
    kind                    TEXT NOT NULL CHECK (kind IN ('standard_webhooks', 'okta')),
    -- standard_webhooks: the event `type` at a JSON Pointer into the body, or a fixed one.
    type_pointer            TEXT,
    fixed_type              TEXT,
    -- The CloudEvents `source` its events carry (what triggers' match.source selects).
    event_source            TEXT NOT NULL,
    -- The secret, sealed with WEBHOOK_SECRET_KEY for this source (enc:v2:…).
    secret                  TEXT NOT NULL,
    -- The secret before the last rotation, accepted until previous_secret_expires_at.
    previous_secret         TEXT,
    previous_secret_expires_at TIMESTAMPTZ,
    created_at              TIMESTAMPTZ NOT NULL DEFAULT now(),
    secret_rotated_at       TIMESTAMPTZ,
    CHECK ((kind = 'okta' AND type_pointer IS NULL AND fixed_type IS NULL)
        OR (kind = 'standard_webhooks' AND num_nonnulls(type_pointer, fixed_type) = 1)),
    CHECK (num_nonnulls(previous_secret, previous_secret_expires_at) IN (0, 2)),
    UNIQUE (org_id, event_source)
);
CREATE INDEX event_sources_org_idx ON event_sources (org_id, id);
