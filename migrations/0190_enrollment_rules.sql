-- Enrollment rules (issue 29): an organization's conditions on user attributes and group
-- membership, each assigning one flow to the users it matches (docs/enrollment-rules.md).
CREATE TABLE enrollment_rules (
    id          UUID PRIMARY KEY,
    org_id      UUID NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    name        TEXT NOT NULL,
    -- The condition as the API takes it (validated before it is stored).
    condition   JSONB NOT NULL,
    flow_id     UUID NOT NULL REFERENCES flows (id) ON DELETE CASCADE,
    -- The due date: `due_days` after the user's start date or after the match; none without.
    due_days    INTEGER,
    due_from    TEXT NOT NULL CHECK (due_from IN ('start_date', 'matched')),
    priority    TEXT NOT NULL,
    notes       TEXT,
    -- Whether a user who stops matching and matches again is assigned again.
    reassign    BOOLEAN NOT NULL DEFAULT false,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX enrollment_rules_org_idx ON enrollment_rules (org_id, id);

-- Where each (rule, user) stands: matching now or not, and its generation (1 at the first match;
-- one more at each re-match of a rule that re-assigns). Claimed with INSERT … ON CONFLICT, so
-- replicas and retries agree on one generation.
CREATE TABLE enrollment_matches (
    rule_id    UUID NOT NULL REFERENCES enrollment_rules (id) ON DELETE CASCADE,
    user_id    UUID NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    org_id     UUID NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    matching   BOOLEAN NOT NULL,
    generation INTEGER NOT NULL,
    -- When the current generation matched: the assignment's time and the base of its due date,
    -- the same for every retry.
    matched_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (rule_id, user_id)
);
CREATE INDEX enrollment_matches_user_idx ON enrollment_matches (user_id);

-- The ledger: one row per (rule, user, generation), with the assignment id derived from them.
-- The assign-worker reads it to put the rule's id on the assignment and its `flow.assigned`.
-- The rule id is kept without a foreign key: an assignment outlives the rule that made it.
CREATE TABLE enrollment_assignments (
    assignment_id UUID PRIMARY KEY,
    rule_id       UUID NOT NULL,
    user_id       UUID NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    org_id        UUID NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    generation    INTEGER NOT NULL,
    created_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
    UNIQUE (rule_id, user_id, generation)
);

-- The rule that made an assignment, if a rule did.
ALTER TABLE assignments ADD COLUMN enrollment_rule_id UUID;
