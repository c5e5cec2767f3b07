-- Report figures that do not grow with the number of assignments.
--
-- Every change to `assignments` (insert, update, delete, COPY) is folded by statement-level
-- triggers into one delta row per (flow, quarter hour of assigned_at, stored status) touched by
-- the statement. Deltas are insert-only, so concurrent writers never wait on each other's rollup
-- rows; a merger (the scheduler) moves them into `assignment_rollups` (per quarter hour) and
-- `flow_rollups` (per flow), where only mergers write. A reader sums rollups and the deltas not
-- merged yet, so figures are exact at read time; active assignments whose due date has passed
-- since their last write are moved to 'overdue' by a small query over the overdue-scan index.
--
-- Quarter hours: every time zone in use today is a whole number of quarter hours from UTC, so a
-- day, week, month, quarter or year of any of them starts on a bucket boundary; a range bound or
-- period edge that does not is counted from the rows of its partial bucket.

CREATE FUNCTION flow_rollup_bucket(at TIMESTAMPTZ)
RETURNS TIMESTAMPTZ
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN date_bin('15 minutes', at, TIMESTAMPTZ '2000-01-01 00:00:00+00');

-- Completion time (assigned → completed) of a completed assignment in seconds, 0 otherwise, as
-- the report's `averageCompletionTime` sums it.
CREATE FUNCTION flow_completion_seconds(status TEXT, assigned_at TIMESTAMPTZ, completed_at TIMESTAMPTZ)
RETURNS FLOAT8
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN CASE WHEN status = 'completed'
            THEN COALESCE(date_part('epoch', completed_at) - date_part('epoch', assigned_at), 0)
            ELSE 0 END;

-- Duration (started → completed) of a completed assignment in seconds, NULL when it has none, as
-- the aggregates' `average_duration` averages it.
CREATE FUNCTION flow_duration_seconds(status TEXT, started_at TIMESTAMPTZ, completed_at TIMESTAMPTZ)
RETURNS FLOAT8
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN CASE WHEN status = 'completed'
            THEN date_part('epoch', completed_at) - date_part('epoch', started_at) END;

-- Figures per (flow, quarter hour of assigned_at, stored status).
CREATE TABLE assignment_rollups (
    flow_id            UUID NOT NULL,
    bucket             TIMESTAMPTZ NOT NULL,
    status             TEXT NOT NULL,
    assignments        BIGINT NOT NULL,
    completion_seconds FLOAT8 NOT NULL,
    duration_seconds   FLOAT8 NOT NULL,
    durations          BIGINT NOT NULL,
    PRIMARY KEY (flow_id, bucket, status)
        INCLUDE (assignments, completion_seconds, duration_seconds, durations)
);

-- The same figures per (flow, stored status), for figures over a flow's whole life.
CREATE TABLE flow_rollups (
    flow_id            UUID NOT NULL,
    status             TEXT NOT NULL,
    assignments        BIGINT NOT NULL,
    completion_seconds FLOAT8 NOT NULL,
    duration_seconds   FLOAT8 NOT NULL,
    durations          BIGINT NOT NULL,
    PRIMARY KEY (flow_id, status)
);

-- Changes not merged yet: one row per (statement, flow, bucket, status) touched.
CREATE TABLE assignment_rollup_deltas (
    id                 BIGSERIAL PRIMARY KEY,
    flow_id            UUID NOT NULL,
    bucket             TIMESTAMPTZ NOT NULL,
    status             TEXT NOT NULL,
    assignments        BIGINT NOT NULL,
    completion_seconds FLOAT8 NOT NULL,
    duration_seconds   FLOAT8 NOT NULL,
    durations          BIGINT NOT NULL
);
CREATE INDEX assignment_rollup_deltas_flow_idx ON assignment_rollup_deltas (flow_id, bucket);

CREATE FUNCTION flow_rollup_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO assignment_rollup_deltas
        (flow_id, bucket, status, assignments, completion_seconds, duration_seconds, durations)
    SELECT flow_id, flow_rollup_bucket(assigned_at), status, count(*),
           sum(flow_completion_seconds(status, assigned_at, completed_at)),
           COALESCE(sum(flow_duration_seconds(status, started_at, completed_at)), 0),
           count(flow_duration_seconds(status, started_at, completed_at))
    FROM new_rows
    GROUP BY 1, 2, 3;
    RETURN NULL;
END $$;

CREATE FUNCTION flow_rollup_updated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO assignment_rollup_deltas
        (flow_id, bucket, status, assignments, completion_seconds, duration_seconds, durations)
    SELECT flow_id, bucket, status, sum(sign), sum(sign * completion), sum(sign * COALESCE(duration, 0)),
           sum(CASE WHEN duration IS NULL THEN 0 ELSE sign END)
    FROM (
        SELECT o.flow_id, flow_rollup_bucket(o.assigned_at) AS bucket, o.status, -1 AS sign,
               flow_completion_seconds(o.status, o.assigned_at, o.completed_at) AS completion,
               flow_duration_seconds(o.status, o.started_at, o.completed_at) AS duration
        FROM old_rows o
        UNION ALL
        SELECT n.flow_id, flow_rollup_bucket(n.assigned_at), n.status, 1,
               flow_completion_seconds(n.status, n.assigned_at, n.completed_at),
               flow_duration_seconds(n.status, n.started_at, n.completed_at)
        FROM new_rows n
    ) changes
    GROUP BY 1, 2, 3
    -- An update that moves nothing between keys or figures (a note, a start time) leaves no delta.
    HAVING sum(sign) <> 0 OR sum(sign * completion) <> 0
        OR sum(sign * COALESCE(duration, 0)) <> 0
        OR sum(CASE WHEN duration IS NULL THEN 0 ELSE sign END) <> 0;
    RETURN NULL;
END $$;

CREATE FUNCTION flow_rollup_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO assignment_rollup_deltas
        (flow_id, bucket, status, assignments, completion_seconds, duration_seconds, durations)
    SELECT flow_id, flow_rollup_bucket(assigned_at), status, -count(*),
           -sum(flow_completion_seconds(status, assigned_at, completed_at)),
           -COALESCE(sum(flow_duration_seconds(status, started_at, completed_at)), 0),
           -count(flow_duration_seconds(status, started_at, completed_at))
    FROM old_rows
    GROUP BY 1, 2, 3;
    RETURN NULL;
END $$;

CREATE TRIGGER assignments_rollup_insert AFTER INSERT ON assignments
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION flow_rollup_inserted();
CREATE TRIGGER assignments_rollup_update AFTER UPDATE ON assignments
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION flow_rollup_updated();
CREATE TRIGGER assignments_rollup_delete AFTER DELETE ON assignments
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION flow_rollup_deleted();

-- Assignments that exist already (a database migrated with data) start in the rollups.
INSERT INTO assignment_rollups
    (flow_id, bucket, status, assignments, completion_seconds, duration_seconds, durations)
SELECT flow_id, flow_rollup_bucket(assigned_at), status, count(*),
       sum(flow_completion_seconds(status, assigned_at, completed_at)),
       COALESCE(sum(flow_duration_seconds(status, started_at, completed_at)), 0),
       count(flow_duration_seconds(status, started_at, completed_at))
FROM assignments
GROUP BY 1, 2, 3;
INSERT INTO flow_rollups
    (flow_id, status, assignments, completion_seconds, duration_seconds, durations)
SELECT flow_id, status, sum(assignments), sum(completion_seconds), sum(duration_seconds),
       sum(durations)
FROM assignment_rollups
GROUP BY 1, 2;
