-- Report exports. The API inserts the row and publishes a wake-up on flow.export; the row is the
-- job itself: a report-worker claims it (status 'running', worker_id, lease_until), renews the
-- lease while it works, and any worker may take over a job whose lease has expired. The file lives
-- in the export store under object_key until expires_at, when it is purged.
CREATE TABLE exports (
    id           UUID PRIMARY KEY,
    org_id       UUID NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    flow_id      UUID NOT NULL REFERENCES flows (id) ON DELETE CASCADE,
    format       TEXT NOT NULL CHECK (format IN ('csv', 'excel', 'pdf')),
    -- The validated report request (dates resolved to instants), as the worker replays it.
    parameters   JSONB NOT NULL,
    status       TEXT NOT NULL DEFAULT 'pending'
                 CHECK (status IN ('pending', 'running', 'ready', 'failed', 'expired')),
    attempts     INTEGER NOT NULL DEFAULT 0,
    -- A job is not claimed before this (backoff after a transient failure).
    available_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    worker_id    TEXT,
    lease_until  TIMESTAMPTZ,
    rows_total   BIGINT,
    rows_written BIGINT NOT NULL DEFAULT 0,
    object_key   TEXT,
    file_name    TEXT,
    content_type TEXT,
    size_bytes   BIGINT,
    error        TEXT,
    request_id   TEXT,
    created_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    started_at   TIMESTAMPTZ,
    finished_at  TIMESTAMPTZ,
    expires_at   TIMESTAMPTZ NOT NULL
);
-- Claiming the oldest job that is waiting, or whose worker stopped renewing its lease.
CREATE INDEX exports_queue_idx ON exports (created_at) WHERE status IN ('pending', 'running');
-- Purging expired files.
CREATE INDEX exports_expiry_idx ON exports (expires_at) WHERE status <> 'expired';
