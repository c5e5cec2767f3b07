-- Inbound events (issue 38, docs/events.md): each event an organization sent, by its CloudEvents
-- (source, id), kept 7 days so a re-sent event acts nothing twice. The row is written in the
-- transaction that records what the event caused (its actions below), so both or neither exist.
CREATE TABLE inbound_events (
    org_id      UUID NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    source      TEXT NOT NULL,
    event_id    TEXT NOT NULL,
    event_type  TEXT NOT NULL,
    -- accepted (a trigger acted) or ignored (none matched).
    status      TEXT NOT NULL CHECK (status IN ('accepted', 'ignored')),
    received_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (org_id, source, event_id)
);
-- The scheduler's pruning of events past the retention.
CREATE INDEX inbound_events_received_idx ON inbound_events (received_at);

-- What each event caused, one row per matching trigger: an assignment (its command, published to
-- the organization's bulk queue after the commit) or the cancellation of an open assignment. The
-- key and the ids are derived from (organization, source, id, trigger), so publishing again (a
-- re-sent event, the scheduler's sweep of rows left unpublished) applies once. The command is
-- cleared once the broker confirmed it. The assign-worker reads `assign` rows to put the event on
-- the assignment and its `flow.assigned`.
CREATE TABLE inbound_event_actions (
    key           UUID PRIMARY KEY,
    org_id        UUID NOT NULL,
    source        TEXT NOT NULL,
    event_id      TEXT NOT NULL,
    event_type    TEXT NOT NULL,
    -- Kept without a foreign key: the assignment outlives the trigger.
    trigger_id    UUID NOT NULL,
    action        TEXT NOT NULL CHECK (action IN ('assign', 'cancel')),
    -- assign: the assignment made; cancel: the assignment cancelled.
    assignment_id UUID NOT NULL,
    command       JSONB,
    reason        TEXT,
    published_at  TIMESTAMPTZ,
    created_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
    FOREIGN KEY (org_id, source, event_id)
        REFERENCES inbound_events (org_id, source, event_id) ON DELETE CASCADE
);
CREATE INDEX inbound_event_actions_event_idx ON inbound_event_actions (org_id, source, event_id);
CREATE UNIQUE INDEX inbound_event_actions_assignment_idx ON inbound_event_actions (assignment_id)
    WHERE action = 'assign';
CREATE INDEX inbound_event_actions_unpublished_idx ON inbound_event_actions (created_at)
    WHERE published_at IS NULL;

-- The inbound event that made an assignment, if one did: {source, type, id, triggerId}.
ALTER TABLE assignments ADD COLUMN event_source JSONB;
