-- Assignments are written in batches by concurrent workers, and nearly all of them reference the
-- same few parent rows (one organization, a few flows). A foreign key makes every insert take a
-- KEY SHARE lock on its parents; concurrent transactions locking the same parent row turn that
-- lock into a MultiXact, which made concurrent batches stall each other (p99 in the hundreds of
-- milliseconds). The assign-worker now checks the parents in the insert itself (a plain join, no
-- row lock); flows, users and organizations are never deleted while assignments reference them.
ALTER TABLE assignments DROP CONSTRAINT assignments_org_id_fkey;
ALTER TABLE assignments DROP CONSTRAINT assignments_flow_id_fkey;
ALTER TABLE assignments DROP CONSTRAINT assignments_user_id_fkey;
