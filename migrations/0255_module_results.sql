-- What learning content reports about a module beyond its status (issue 38): the score (scaled,
-- -1..1, as xAPI's result.score.scaled), whether it was passed (success) and the time spent in
-- seconds. Nullable: progress without a result records none; a later result replaces an earlier
-- one field by field. Adding nullable columns without defaults rewrites nothing.
ALTER TABLE module_progress
    ADD COLUMN score DOUBLE PRECISION CHECK (score BETWEEN -1 AND 1),
    ADD COLUMN success BOOLEAN,
    ADD COLUMN duration_seconds BIGINT CHECK (duration_seconds >= 0);
