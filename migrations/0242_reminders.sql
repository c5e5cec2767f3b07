-- Reminders (design §16): a flow's policy (days before and after the due date, and after how many
-- overdue days to escalate to the manager), and the reminders sent, one row per (assignment, due
-- date, kind, offset): the scheduler claims a reminder by inserting its row in the transaction
-- that writes its `flow.reminder` event, so two schedulers, retries and kills send it once.
ALTER TABLE flows ADD COLUMN reminders JSONB;

CREATE TABLE assignment_reminders (
    assignment_id UUID NOT NULL REFERENCES assignments (id) ON DELETE CASCADE,
    due_at        TIMESTAMPTZ NOT NULL,
    kind          TEXT NOT NULL CHECK (kind IN ('due_soon', 'overdue', 'escalation')),
    offset_days   INTEGER NOT NULL,
    remind_at     TIMESTAMPTZ NOT NULL,
    sent_at       TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (assignment_id, due_at, kind, offset_days)
);

-- The scan reads the open assignments with a due date of the flows that have a policy.
CREATE INDEX flows_with_reminders_idx ON flows (id) WHERE reminders IS NOT NULL;
CREATE INDEX assignments_open_due_by_flow_idx ON assignments (flow_id, due_at)
    WHERE status IN ('pending', 'in_progress', 'overdue') AND due_at IS NOT NULL;
