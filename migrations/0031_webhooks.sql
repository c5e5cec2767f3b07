-- Customer webhook endpoints and the deliveries of events to them.
CREATE TABLE webhook_endpoints (
    id                   UUID PRIMARY KEY,
    org_id               UUID NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    url                  TEXT NOT NULL,
    description          TEXT,
    -- Event types delivered; empty means every type.
    events               TEXT[] NOT NULL DEFAULT '{}',
    enabled              BOOLEAN NOT NULL DEFAULT true,
    -- Why the service disabled it ('gone' on a 410, 'failing' after days of failures).
    disabled_reason      TEXT,
    secret               TEXT NOT NULL,
    -- After a rotation the previous secret still signs (beside the new one) until it expires.
    previous_secret      TEXT,
    previous_secret_expires_at TIMESTAMPTZ,
    -- Start of the current run of failed attempts (NULL while deliveries succeed).
    failing_since        TIMESTAMPTZ,
    created_at           TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at           TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX webhook_endpoints_org_idx ON webhook_endpoints (org_id, id);

-- One event to one endpoint. The row is the job: the webhook-worker that fans an event out claims
-- its rows at once (status 'delivering' with a lease); retries wait in 'pending' until
-- next_attempt_at; a worker that dies leaves rows whose lease expires and any worker takes them.
CREATE TABLE webhook_deliveries (
    id              UUID PRIMARY KEY,
    org_id          UUID NOT NULL,
    endpoint_id     UUID NOT NULL REFERENCES webhook_endpoints (id) ON DELETE CASCADE,
    event_id        UUID NOT NULL,
    event_type      TEXT NOT NULL,
    payload         JSONB NOT NULL,
    status          TEXT NOT NULL DEFAULT 'pending'
                    CHECK (status IN ('pending', 'delivering', 'succeeded', 'failed')),
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    lease_until     TIMESTAMPTZ,
    last_status_code INTEGER,
    last_error      TEXT,
    created_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    -- When the event's state change was committed (latency is measured from it).
    event_at        TIMESTAMPTZ NOT NULL,
    delivered_at    TIMESTAMPTZ,
    -- Consumers dedupe by event id: a redelivered event creates no second delivery.
    UNIQUE (endpoint_id, event_id)
);
-- Due retries and expired leases.
CREATE INDEX webhook_deliveries_due_idx ON webhook_deliveries (next_attempt_at)
    WHERE status = 'pending';
CREATE INDEX webhook_deliveries_lease_idx ON webhook_deliveries (lease_until)
    WHERE status = 'delivering';
-- Listing an endpoint's deliveries, newest first.
CREATE INDEX webhook_deliveries_endpoint_idx ON webhook_deliveries (endpoint_id, created_at DESC, id DESC);

-- Every attempt of a delivery.
CREATE TABLE webhook_attempts (
    delivery_id      UUID NOT NULL REFERENCES webhook_deliveries (id) ON DELETE CASCADE,
    attempt          INTEGER NOT NULL,
    attempted_at     TIMESTAMPTZ NOT NULL,
    status_code      INTEGER,
    latency_ms       INTEGER NOT NULL,
    error            TEXT,
    response_excerpt TEXT,
    PRIMARY KEY (delivery_id, attempt)
);
