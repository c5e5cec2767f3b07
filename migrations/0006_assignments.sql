-- Assignments of a flow to a user, and their module-level progress.
CREATE TABLE assignments (
    id           UUID PRIMARY KEY,
    org_id       UUID NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    flow_id      UUID NOT NULL REFERENCES flows (id) ON DELETE CASCADE,
    user_id      UUID NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    status       TEXT NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'in_progress', 'completed', 'overdue')),
    priority     TEXT NOT NULL DEFAULT 'medium' CHECK (priority IN ('low', 'medium', 'high')),
    notes        TEXT,
    due_at       TIMESTAMPTZ,
    assigned_at  TIMESTAMPTZ NOT NULL,
    started_at   TIMESTAMPTZ,
    completed_at TIMESTAMPTZ,
    overdue_at   TIMESTAMPTZ,
    request_id   TEXT,
    schedule_id  UUID REFERENCES schedules (id) ON DELETE SET NULL,
    updated_at   TIMESTAMPTZ NOT NULL DEFAULT now()
);
-- At most one active assignment of a flow per user (design §2, guarantee 3).
CREATE UNIQUE INDEX assignments_one_active_idx ON assignments (flow_id, user_id)
    WHERE status IN ('pending', 'in_progress', 'overdue');
-- Report pages: keyset on (assigned_at, id) within a flow.
CREATE INDEX assignments_flow_assigned_idx ON assignments (flow_id, assigned_at, id);
-- The overdue scan only looks at active rows with a due date.
CREATE INDEX assignments_overdue_scan_idx ON assignments (due_at)
    WHERE status IN ('pending', 'in_progress') AND due_at IS NOT NULL;
-- Listing a user's assignments.
CREATE INDEX assignments_user_idx ON assignments (user_id, assigned_at, id);
-- Listing an organization's assignments.
CREATE INDEX assignments_org_idx ON assignments (org_id, assigned_at, id);

-- Ids handed out for a request that resolved to another assignment: a concurrent duplicate, or a
-- retried X-Request-ID answered with the existing assignment. Every id the API returns resolves.
CREATE TABLE assignment_aliases (
    alias_id      UUID PRIMARY KEY,
    assignment_id UUID NOT NULL REFERENCES assignments (id) ON DELETE CASCADE,
    org_id        UUID NOT NULL,
    -- The id the API answered with for this request: the alias itself, or the existing assignment.
    returned_id   UUID NOT NULL,
    created_at    TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX assignment_aliases_target_idx ON assignment_aliases (assignment_id);

CREATE TABLE module_progress (
    assignment_id UUID NOT NULL REFERENCES assignments (id) ON DELETE CASCADE,
    module_id     UUID NOT NULL REFERENCES modules (id) ON DELETE CASCADE,
    status        TEXT NOT NULL CHECK (status IN ('in_progress', 'completed')),
    started_at    TIMESTAMPTZ,
    completed_at  TIMESTAMPTZ,
    PRIMARY KEY (assignment_id, module_id)
);
