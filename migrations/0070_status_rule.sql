-- The one definition of the status an assignment reports at a reading time (README guarantee 5):
-- an assignment that is pending or in progress and whose due date has passed reports as
-- 'overdue' even before the scheduler records it. Every query that reads a status calls this;
-- its Rust twin is `AssignmentStatus::effective`, and a test checks that the two agree.
-- A SQL-standard body keeps it inlinable, so report queries stay index-only scans.
CREATE FUNCTION flow_effective_status(status TEXT, due_at TIMESTAMPTZ, at TIMESTAMPTZ)
RETURNS TEXT
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN CASE WHEN status IN ('pending', 'in_progress') AND due_at <= at THEN 'overdue' ELSE status END;

-- The one definition of the active set (one active assignment per flow and user; the unique
-- index `assignments_active_idx` of migration 0006 has the same predicate, which an inlined call
-- still matches). Rust's twin is `AssignmentStatus::ACTIVE`.
CREATE FUNCTION flow_is_active(status TEXT)
RETURNS BOOLEAN
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN status IN ('pending', 'in_progress', 'overdue');
