-- Backfills of enrollment rules as background jobs (docs/enrollment-rules.md, "Backfill"):
-- requested through the API or the dashboard, run by a scheduler, resumable.
CREATE TABLE enrollment_backfills (
    id                UUID PRIMARY KEY,
    org_id            UUID NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    rule_id           UUID NOT NULL REFERENCES enrollment_rules (id) ON DELETE CASCADE,
    status            TEXT NOT NULL DEFAULT 'queued'
                      CHECK (status IN ('queued', 'running', 'succeeded', 'failed')),
    -- Who asked, as the audit trail names them (the assignments' audit rows name them too).
    actor_kind        TEXT NOT NULL CHECK (actor_kind IN ('account', 'api_key', 'flowctl')),
    actor_account     TEXT,
    actor_key         UUID,
    -- Active users the rule matched, and assignments queued, so far.
    matching          BIGINT NOT NULL DEFAULT 0,
    queued            BIGINT NOT NULL DEFAULT 0,
    -- The last user done (users are walked in id order): a resumed job starts after it.
    after_user_id     UUID,
    -- The scheduler running it, and until when: past it, another scheduler resumes the job.
    lease_token       UUID,
    lease_until       TIMESTAMPTZ,
    attempts          INTEGER NOT NULL DEFAULT 0,
    error             TEXT,
    created_at        TIMESTAMPTZ NOT NULL DEFAULT now(),
    started_at        TIMESTAMPTZ,
    finished_at       TIMESTAMPTZ
);
-- One unfinished backfill per rule: a second request answers the first.
CREATE UNIQUE INDEX enrollment_backfills_active_idx ON enrollment_backfills (rule_id)
    WHERE status IN ('queued', 'running');
-- What a scheduler claims next.
CREATE INDEX enrollment_backfills_claim_idx ON enrollment_backfills (created_at)
    WHERE status IN ('queued', 'running');
