-- Nothing in the service looks events up by assignment (event ids are derived from the assignment
-- and the transition, and are unique on their own); the index only cost every event an entry.
DROP INDEX outbox_assignment_idx;
