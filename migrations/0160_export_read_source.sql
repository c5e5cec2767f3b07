-- Exports read on a streaming replica (DATABASE_REPLICA_URLS) must see what was committed before
-- they were requested: the primary's WAL position at the request (a pg_lsn as its byte offset,
-- `lsn - '0/0'`) is the least a replica must have replayed to generate the export. Once read,
-- the export records the instant its data is current to and which server it was read on.
ALTER TABLE exports
    ADD COLUMN requested_wal_position BIGINT,
    ADD COLUMN data_as_of TIMESTAMPTZ,
    ADD COLUMN read_on TEXT;
