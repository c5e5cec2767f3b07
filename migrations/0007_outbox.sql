-- Transactional outbox: each lifecycle event is written with the state change that causes it and
-- published to RabbitMQ by the relay afterwards.
CREATE TABLE outbox (
    seq           BIGSERIAL PRIMARY KEY,
    event_id      UUID NOT NULL UNIQUE,
    org_id        UUID NOT NULL,
    event_type    TEXT NOT NULL,
    assignment_id UUID,
    payload       JSONB NOT NULL,
    created_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
    published_at  TIMESTAMPTZ
);
CREATE INDEX outbox_unpublished_idx ON outbox (seq) WHERE published_at IS NULL;
