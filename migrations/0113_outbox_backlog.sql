-- Events written and not yet published, as the outbox-relay's backlog gauges read them: how many
-- (at most `max_count`) and when the oldest was written. The `outbox_unpublished` view compares
-- each row with the cursor's row, a comparison the planner cannot bound: with the published
-- rows kept for the retention (millions under load) it read the whole table on every poll (4 s
-- a poll under the assign bench, on a machine already saturated). This reads past the cursor in
-- the relay's own order index, planned without sequential scans, parallel workers or JIT, and
-- stops after `max_count` rows however large an incident's backlog grows. Not inlined, on
-- purpose: the SET clauses keep its plan apart from its caller's.
CREATE FUNCTION flow_outbox_backlog(max_count BIGINT)
RETURNS TABLE (backlog BIGINT, oldest TIMESTAMPTZ)
LANGUAGE sql STABLE PARALLEL SAFE
SET enable_seqscan = off
SET max_parallel_workers_per_gather = 0
SET jit = off
AS $$
    SELECT count(*), min(o.created_at)
    FROM outbox_cursor c
    CROSS JOIN LATERAL (SELECT o.created_at FROM outbox o
                        WHERE (o.tx, o.seq) > (c.tx, c.seq)
                        ORDER BY o.tx, o.seq
                        LIMIT max_count) o
    WHERE c.id = 1
$$;
