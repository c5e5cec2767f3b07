-- Recurring (or one-off) assignment of a flow to a user.
CREATE TABLE schedules (
    id             UUID PRIMARY KEY,
    org_id         UUID NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    flow_id        UUID NOT NULL REFERENCES flows (id) ON DELETE CASCADE,
    user_id        UUID NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    -- Local wall-clock anchor of the series, so month-end clamping does not drift (Jan 31 -> Feb 28 -> Mar 31).
    anchor_at      TIMESTAMPTZ NOT NULL,
    scheduled_at   TIMESTAMPTZ NOT NULL,
    occurrence     INTEGER NOT NULL DEFAULT 0,
    recurrence     TEXT NOT NULL CHECK (recurrence IN ('none', 'daily', 'weekly', 'monthly', 'quarterly', 'yearly')),
    due_in_days    INTEGER CHECK (due_in_days > 0),
    priority       TEXT NOT NULL DEFAULT 'medium' CHECK (priority IN ('low', 'medium', 'high')),
    notes          TEXT,
    -- The assignment created by the latest occurrence; its status is the schedule's status.
    current_assignment_id UUID,
    active         BOOLEAN NOT NULL DEFAULT true,
    created_at     TIMESTAMPTZ NOT NULL DEFAULT now(),
    deleted_at     TIMESTAMPTZ
);
CREATE INDEX schedules_flow_idx ON schedules (flow_id, scheduled_at, id);
CREATE INDEX schedules_due_idx ON schedules (scheduled_at) WHERE active;
