-- Lanes in the outbox: events of interactive work (a single assign, module progress) are relayed
-- apart from bulk work's, with a cursor of their own, so a bulk flood of events never stands
-- between a single caller and its webhook. Existing rows (and every bulk event) stay in the bulk
-- lane, relayed by cursor 1 as before; cursor 2 relays the interactive lane, starting where
-- cursor 1 stands (no interactive row exists before this migration).
ALTER TABLE outbox ADD COLUMN interactive BOOLEAN NOT NULL DEFAULT false;
CREATE INDEX outbox_interactive_order_idx ON outbox (tx, seq) WHERE interactive;

ALTER TABLE outbox_cursor DROP CONSTRAINT outbox_cursor_id_check;
ALTER TABLE outbox_cursor ADD CONSTRAINT outbox_cursor_id_check CHECK (id IN (1, 2));
INSERT INTO outbox_cursor (id, tx, seq) SELECT 2, tx, seq FROM outbox_cursor WHERE id = 1;

-- Events written and not yet published: past the cursor of their own lane.
CREATE OR REPLACE VIEW outbox_unpublished AS
SELECT o.* FROM outbox o
JOIN outbox_cursor c ON c.id = CASE WHEN o.interactive THEN 2 ELSE 1 END
WHERE (o.tx, o.seq) > (c.tx, c.seq);

-- The backlog as the relay's gauges read it (see migration 0113), over both lanes: each read past
-- its lane's cursor in that lane's order index.
CREATE OR REPLACE FUNCTION flow_outbox_backlog(max_count BIGINT)
RETURNS TABLE (backlog BIGINT, oldest TIMESTAMPTZ)
LANGUAGE sql STABLE PARALLEL SAFE
SET enable_seqscan = off
SET max_parallel_workers_per_gather = 0
SET jit = off
AS $$
    SELECT least(sum(n), max_count)::bigint, min(oldest) FROM (
        SELECT count(*) AS n, min(o.created_at) AS oldest
        FROM outbox_cursor c
        CROSS JOIN LATERAL (SELECT o.created_at FROM outbox o
                            WHERE (o.tx, o.seq) > (c.tx, c.seq) AND NOT o.interactive
                            ORDER BY o.tx, o.seq
                            LIMIT max_count) o
        WHERE c.id = 1
        UNION ALL
        SELECT count(*), min(o.created_at)
        FROM outbox_cursor c
        CROSS JOIN LATERAL (SELECT o.created_at FROM outbox o
                            WHERE (o.tx, o.seq) > (c.tx, c.seq) AND o.interactive
                            ORDER BY o.tx, o.seq
                            LIMIT max_count) o
        WHERE c.id = 2
    ) lanes
$$;
