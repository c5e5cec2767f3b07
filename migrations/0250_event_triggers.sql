-- Event triggers (issue 38, docs/events.md): an organization's rules over inbound events
-- (`POST /v1/events`), each assigning a flow to, or cancelling the open assignment of a flow of,
-- the person whose e-mail the event carries at a JSON Pointer.
CREATE TABLE event_triggers (
    id                UUID PRIMARY KEY,
    org_id            UUID NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    name              TEXT NOT NULL,
    -- The event `type` matched exactly, or by prefix: one of the two.
    match_type        TEXT,
    match_type_prefix TEXT,
    -- The event `source`, matched exactly when set.
    match_source      TEXT,
    -- Where the person's e-mail is in the event (RFC 6901).
    email_pointer     TEXT NOT NULL,
    action            TEXT NOT NULL CHECK (action IN ('assign', 'cancel')),
    flow_id           UUID NOT NULL REFERENCES flows (id) ON DELETE CASCADE,
    -- The due date of an assignment: days after the event, or a date at a pointer; none without.
    due_days          INTEGER,
    due_pointer       TEXT,
    priority          TEXT NOT NULL,
    notes             TEXT,
    created_at        TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at        TIMESTAMPTZ NOT NULL DEFAULT now(),
    CHECK (num_nonnulls(match_type, match_type_prefix) = 1),
    CHECK (num_nonnulls(due_days, due_pointer) <= 1)
);
CREATE INDEX event_triggers_org_idx ON event_triggers (org_id, id);
