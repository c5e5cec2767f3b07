-- Active assignments past their due date at `at` that the scheduler has not marked overdue yet:
-- the correction every report figure applies to the rollups (their status moves to `overdue`
-- at reading time without a write). The scheduler marks them every scan, so they are few, and
-- `assignments_overdue_scan_idx` holds exactly the active rows with a due date. But the planner
-- estimates `status IN (...)` and `due_at <= at` from independent column statistics: on a flow
-- of 10 million assignments it expected 9% of the table and read all of it in parallel (1.6 s
-- for 19 rows), which made every report cost what the rollups were built to avoid. This function
-- plans its one statement without sequential scans or parallel workers, so it always reads the
-- partial index (its WHERE repeats the index's predicate word for word so the index applies),
-- and without JIT compilation, which the same estimate triggers (8 ms to compile a read of 20
-- rows, whoever the caller). Not inlined, on purpose: the SET clauses keep its plan apart from
-- its caller's.
CREATE FUNCTION flow_past_due_unmarked(at TIMESTAMPTZ)
RETURNS TABLE (flow_id UUID, status TEXT, assigned_at TIMESTAMPTZ)
LANGUAGE sql STABLE PARALLEL SAFE ROWS 100
SET enable_seqscan = off
SET max_parallel_workers_per_gather = 0
SET jit = off
AS $$
    SELECT a.flow_id, a.status, a.assigned_at FROM assignments a
    WHERE a.status IN ('pending', 'in_progress') AND a.due_at IS NOT NULL AND a.due_at <= at
$$;
