-- Changing and cancelling an assignment (design §16). A cancelled assignment keeps its row and
-- its progress; it is not active (the one-active index and the overdue scan leave it out, so the
-- flow can be assigned to the person again), takes no more progress and never goes overdue.
ALTER TABLE assignments DROP CONSTRAINT assignments_status_check;
ALTER TABLE assignments ADD CONSTRAINT assignments_status_check
    CHECK (status IN ('pending', 'in_progress', 'completed', 'overdue', 'cancelled'));
ALTER TABLE assignments ADD COLUMN cancelled_at TIMESTAMPTZ;
ALTER TABLE assignments ADD COLUMN cancel_reason TEXT;

-- Every change and cancellation the API accepted, by the id it was given when it was accepted:
-- the worker applying the queued command inserts its row in the transaction that applies it, so
-- a redelivered command finds its row and changes nothing again (exactly once, whatever the
-- retries). The row is also the assignment's history of changes: what changed, from what to
-- what, and what came of it (who asked is in the audit trail).
CREATE TABLE assignment_changes (
    id            UUID PRIMARY KEY,
    org_id        UUID NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    assignment_id UUID NOT NULL,
    kind          TEXT NOT NULL CHECK (kind IN ('update', 'cancel')),
    -- The fields changed, `{field: {from, to}}` (empty when nothing changed or nothing applied).
    changed       JSONB NOT NULL DEFAULT '{}',
    reason        TEXT,
    -- applied, unchanged (nothing to change, or already cancelled), refused (completed, or
    -- cancelled for an update: the state changed after the API checked), missing.
    outcome       TEXT NOT NULL CHECK (outcome IN ('applied', 'unchanged', 'refused', 'missing')),
    requested_at  TIMESTAMPTZ NOT NULL,
    applied_at    TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX assignment_changes_assignment_idx ON assignment_changes (assignment_id, requested_at);

-- How many times the due date was changed: the key of the assignment's `flow.overdue` event after
-- a change (an assignment overdue, moved to a later due date, then overdue again emits a second
-- `flow.overdue`, once per due date; the first keeps the key it always had).
ALTER TABLE assignments ADD COLUMN due_changes INTEGER NOT NULL DEFAULT 0;
