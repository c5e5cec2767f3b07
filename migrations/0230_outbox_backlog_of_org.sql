-- Events of one organization written and not yet published, for that organization's operations
-- view: the count over every organization's outbox named other tenants' activity. Reads past each
-- lane's cursor in that lane's order index, as flow_outbox_backlog does, at most `max_scan` rows
-- a lane whoever wrote them, and counts the organization's among them; `complete` is false when a
-- lane held more than `max_scan` unpublished rows (the count is then a lower bound).
CREATE FUNCTION flow_outbox_backlog_of(org UUID, max_scan BIGINT)
RETURNS TABLE (backlog BIGINT, complete BOOLEAN)
LANGUAGE sql STABLE PARALLEL SAFE
SET enable_seqscan = off
SET max_parallel_workers_per_gather = 0
SET jit = off
AS $$
    SELECT coalesce(sum(own), 0)::bigint, bool_and(scanned < max_scan) FROM (
        SELECT count(*) FILTER (WHERE o.org_id = org) AS own, count(*) AS scanned
        FROM outbox_cursor c
        CROSS JOIN LATERAL (SELECT o.org_id FROM outbox o
                            WHERE (o.tx, o.seq) > (c.tx, c.seq) AND NOT o.interactive
                            ORDER BY o.tx, o.seq
                            LIMIT max_scan) o
        WHERE c.id = 1
        UNION ALL
        SELECT count(*) FILTER (WHERE o.org_id = org), count(*)
        FROM outbox_cursor c
        CROSS JOIN LATERAL (SELECT o.org_id FROM outbox o
                            WHERE (o.tx, o.seq) > (c.tx, c.seq) AND o.interactive
                            ORDER BY o.tx, o.seq
                            LIMIT max_scan) o
        WHERE c.id = 2
    ) lanes
$$;
