-- Idempotency keys: the first request with an X-Request-ID claims its key (the assignment id
-- derived from the organization and the key) with a fingerprint of the whole request and the
-- answer it got, before anything is published. A retry with the same fingerprint gets the same
-- answer on any replica, persisted yet or not; a different request under the same key is a 409.
CREATE TABLE request_claims (
    assignment_id UUID PRIMARY KEY,
    org_id        UUID NOT NULL,
    -- SHA-256 of the validated request (flow, assignee, due date, priority, notes).
    fingerprint   BYTEA NOT NULL,
    -- The id answered: the derived id itself, or the assignee's active assignment of the flow.
    answer_id     UUID NOT NULL,
    assigned_at   TIMESTAMPTZ NOT NULL,
    created_at    TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- Secrets generated once and shared by every replica through the database (the key that signs
-- the assignment ids the API mints, so an id handed out but not persisted yet is recognised).
CREATE TABLE service_secrets (
    name       TEXT PRIMARY KEY,
    secret     BYTEA NOT NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- Messages a worker started handling after a redelivery and has not finished: a message whose
-- handling keeps dying with the worker is dead-lettered after DELIVERY_LIMIT starts, while a
-- broker connection drop (which redelivers what was only prefetched) costs nothing.
CREATE TABLE message_attempts (
    queue       TEXT NOT NULL,
    message_key TEXT NOT NULL,
    attempts    INTEGER NOT NULL,
    updated_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (queue, message_key)
);

-- Dead-lettered messages, moved out of the dead-letter queue by the recorder so operators can list
-- and replay them with their reason, and so an id whose command died resolves to that failure.
CREATE TABLE dead_letters (
    id               BIGSERIAL PRIMARY KEY,
    -- SHA-256 of (origin queue, message id, body): a message recorded twice is one row.
    message_key      BYTEA NOT NULL UNIQUE,
    origin_queue     TEXT,
    message_id       TEXT,
    kind             TEXT,
    reason           TEXT NOT NULL,
    payload          BYTEA NOT NULL,
    dead_lettered_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    replayed_at      TIMESTAMPTZ
);
CREATE INDEX dead_letters_pending_idx ON dead_letters (id) WHERE replayed_at IS NULL;

-- Assignment ids whose command was dead-lettered (and not replayed since).
CREATE TABLE assignment_failures (
    assignment_id  UUID PRIMARY KEY,
    org_id         UUID NOT NULL,
    dead_letter_id BIGINT NOT NULL REFERENCES dead_letters (id) ON DELETE CASCADE,
    reason         TEXT NOT NULL,
    -- The command, to show what was asked for.
    command        JSONB NOT NULL,
    failed_at      TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX assignment_failures_dead_letter_idx ON assignment_failures (dead_letter_id);
