-- The rollup triggers (0090) call these two for every row a statement writes to `assignments`.
-- Declared IMMUTABLE, their bodies could not be inlined: `date_part('epoch', timestamptz)` is
-- STABLE in Postgres, and an IMMUTABLE function is only inlined when its body is immutable too.
-- Each call then ran as a separate SQL-function execution (about 80 µs per assigned row, a third
-- of the assign-worker's insert statement, found with auto_explain's nested statements under the
-- whole-system bench). Declared STABLE — what their bodies are — the planner inlines them into
-- the triggers' and the readers' queries. Nothing indexes them, which is all IMMUTABLE was for;
-- results are bit-for-bit the same expressions.
ALTER FUNCTION flow_completion_seconds(TEXT, TIMESTAMPTZ, TIMESTAMPTZ) STABLE;
ALTER FUNCTION flow_duration_seconds(TEXT, TIMESTAMPTZ, TIMESTAMPTZ) STABLE;
