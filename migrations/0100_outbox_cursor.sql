-- The relay keeps a cursor over the outbox instead of marking every row it publishes: an UPDATE
-- per event (a new row version, an entry in every index, a dead version for vacuum, a claim that
-- walks them) cost the relay more than reading the events did.
--
-- Rows are read in the order (tx, seq): `tx` is the id of the transaction that wrote the row. A
-- reader sees a row only once its transaction committed, and transactions do not commit in the
-- order of their ids or sequence numbers, so the relay reads only rows whose transaction is older
-- than the oldest one still running (the xmin of its snapshot): no transaction that could still
-- commit has a smaller id, so nothing can later appear behind the cursor.
ALTER TABLE outbox ADD COLUMN tx xid8 NOT NULL DEFAULT pg_current_xact_id();
CREATE INDEX outbox_order_idx ON outbox (tx, seq);

-- Where the relay stands: the last event published (one row; relays take turns on its lock).
CREATE TABLE outbox_cursor (
    id  INTEGER PRIMARY KEY CHECK (id = 1),
    tx  xid8 NOT NULL,
    seq BIGINT NOT NULL
);
-- Every row written before this migration has its transaction id: start just before the first
-- one not yet published (published ones after it go out again; consumers dedupe by event id).
INSERT INTO outbox_cursor (id, tx, seq)
SELECT 1, pg_current_xact_id(),
       COALESCE((SELECT min(seq) - 1 FROM outbox WHERE published_at IS NULL),
                (SELECT max(seq) FROM outbox), 0);

DROP INDEX outbox_unpublished_idx;
DROP INDEX outbox_published_idx;
ALTER TABLE outbox DROP COLUMN published_at;

-- Events written and not yet published: the one definition every reader uses.
CREATE VIEW outbox_unpublished AS
SELECT o.* FROM outbox o, outbox_cursor c WHERE (o.tx, o.seq) > (c.tx, c.seq);
