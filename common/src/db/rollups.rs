//! Report figures from maintained rollups (migration 0090), so their cost follows the number of
//! quarter hours and flows read, not the number of assignments.
//!
//! Triggers on `assignments` fold every statement's changes into insert-only delta rows; [`merge`]
//! (run by the scheduler) moves them into the rollups. Readers sum the rollups and the deltas not
//! merged yet, read the rows of a range's partial quarter hours directly, and move active
//! assignments whose due date has passed to `overdue` (the one status rule, migration 0070), so
//! every figure is what a count over the rows would give at the reading time. [`verify`] is that
//! count, compared key by key.

use chrono::{DateTime, Utc};
use flow_domain::ids::FlowId;
use sqlx::{FromRow, PgExecutor};

/// Counts and sums over a set of assignments, by the status each reports at the reading time.
#[derive(Debug, Clone, Copy, Default, PartialEq, FromRow)]
pub struct Figures {
    /// Every assignment of the set but the cancelled ones (a report leaves them out unless
    /// asked, design §16).
    pub total: i64,
    /// Cancelled ones.
    pub cancelled: i64,
    /// Completed ones.
    pub completed: i64,
    /// In progress and not past due.
    pub in_progress: i64,
    /// Pending and not past due.
    pub pending: i64,
    /// Marked overdue, or active and past due.
    pub overdue: i64,
    /// Sum of completedAt − assignedAt over completed ones, in seconds.
    pub completion_seconds: f64,
    /// Sum of completedAt − startedAt over completed ones that were started, in seconds.
    pub duration_seconds: f64,
    /// How many completed ones were started (the divisor of `duration_seconds`).
    pub durations: i64,
}

/// The sums every figures query ends with, over rows of `(status, assignments,
/// completion_seconds, duration_seconds, durations)`.
const SUMS: &str =
    "COALESCE(sum(assignments) FILTER (WHERE status <> 'cancelled'), 0)::int8 AS total,
    COALESCE(sum(assignments) FILTER (WHERE status = 'cancelled'), 0)::int8 AS cancelled,
    COALESCE(sum(assignments) FILTER (WHERE status = 'completed'), 0)::int8 AS completed,
    COALESCE(sum(assignments) FILTER (WHERE status = 'in_progress'), 0)::int8 AS in_progress,
    COALESCE(sum(assignments) FILTER (WHERE status = 'pending'), 0)::int8 AS pending,
    COALESCE(sum(assignments) FILTER (WHERE status = 'overdue'), 0)::int8 AS overdue,
    COALESCE(sum(completion_seconds), 0)::float8 AS completion_seconds,
    COALESCE(sum(duration_seconds), 0)::float8 AS duration_seconds,
    COALESCE(sum(durations), 0)::int8 AS durations";

/// Moves up to `limit` delta rows into the rollups in one statement; returns how many moved.
/// Safe with several mergers (each takes rows the others have not locked, and upserts keys in
/// one order, so two mergers cannot deadlock).
pub async fn merge<'e>(executor: impl PgExecutor<'e>, limit: i64) -> Result<u64, sqlx::Error> {
    let (moved,): (i64,) = sqlx::query_as(
        "WITH taken AS (
            SELECT id FROM assignment_rollup_deltas ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED
         ), moved AS (
            DELETE FROM assignment_rollup_deltas d USING taken WHERE d.id = taken.id
            RETURNING d.flow_id, d.bucket, d.status, d.assignments, d.completion_seconds,
                      d.duration_seconds, d.durations
         ), buckets AS (
            INSERT INTO assignment_rollups AS r
                (flow_id, bucket, status, assignments, completion_seconds, duration_seconds,
                 durations)
            SELECT flow_id, bucket, status, sum(assignments), sum(completion_seconds),
                   sum(duration_seconds), sum(durations)
            FROM moved GROUP BY 1, 2, 3 ORDER BY 1, 2, 3
            ON CONFLICT (flow_id, bucket, status) DO UPDATE SET
                assignments = r.assignments + EXCLUDED.assignments,
                completion_seconds = r.completion_seconds + EXCLUDED.completion_seconds,
                duration_seconds = r.duration_seconds + EXCLUDED.duration_seconds,
                durations = r.durations + EXCLUDED.durations
         ), flows AS (
            INSERT INTO flow_rollups AS r
                (flow_id, status, assignments, completion_seconds, duration_seconds, durations)
            SELECT flow_id, status, sum(assignments), sum(completion_seconds),
                   sum(duration_seconds), sum(durations)
            FROM moved GROUP BY 1, 2 ORDER BY 1, 2
            ON CONFLICT (flow_id, status) DO UPDATE SET
                assignments = r.assignments + EXCLUDED.assignments,
                completion_seconds = r.completion_seconds + EXCLUDED.completion_seconds,
                duration_seconds = r.duration_seconds + EXCLUDED.duration_seconds,
                durations = r.durations + EXCLUDED.durations
         )
         SELECT count(*) FROM moved",
    )
    .bind(limit)
    .fetch_one(executor)
    .await?;
    Ok(u64::try_from(moved).unwrap_or(0))
}

/// The figures of each interval `[start, end)` of assigned times (periods of an aggregate, or
/// one range), clipped to `[lower, upper)`, with statuses read at `now`; in the order given.
///
/// Whole quarter hours come from the rollups and unmerged deltas; the partial quarter hours at
/// each interval's edges come from the rows (the report index covers them: index-only); active
/// assignments of the whole quarter hours that are past due at `now` move from their stored
/// status to `overdue` (read by `flow_past_due_unmarked` over `assignments_overdue_scan_idx`,
/// which holds only active rows with a due date; the scheduler keeps the past-due part of it
/// small by marking them).
pub async fn interval_figures<'e>(
    executor: impl PgExecutor<'e>,
    flow_id: FlowId,
    intervals: &[(DateTime<Utc>, DateTime<Utc>)],
    lower: DateTime<Utc>,
    upper: DateTime<Utc>,
    now: DateTime<Utc>,
) -> Result<Vec<Figures>, sqlx::Error> {
    if intervals.is_empty() {
        return Ok(Vec::new());
    }
    let starts: Vec<DateTime<Utc>> = intervals.iter().map(|(start, _)| *start).collect();
    let ends: Vec<DateTime<Utc>> = intervals.iter().map(|(_, end)| *end).collect();
    let sql = format!(
        "WITH clipped AS (
            SELECT position, greatest(s, $2) AS lo, least(e, $3) AS hi
            FROM unnest($5::timestamptz[], $6::timestamptz[]) WITH ORDINALITY AS p(s, e, position)
         ), bounds AS (
            SELECT position, lo, hi,
                   CASE WHEN flow_rollup_bucket(lo) = lo THEN lo
                        ELSE flow_rollup_bucket(lo) + interval '15 minutes' END AS whole_lo,
                   flow_rollup_bucket(hi) AS whole_hi
            FROM clipped WHERE lo < hi
         ), late AS MATERIALIZED (
            -- Active and past due at $4 but not marked yet, read once for every interval. Every
            -- flow's, filtered by flow after: the scheduler keeps them few, and the probe
            -- (migration 0112) reads them over the partial index whatever the planner estimates.
            SELECT * FROM flow_past_due_unmarked($4)
         ), edges AS (
            -- Whole buckets [whole_lo, whole_hi) when there are any; the rest from the rows.
            SELECT position, lo, hi, whole_lo, whole_hi, whole_lo < whole_hi AS has_whole,
                   CASE WHEN whole_lo < whole_hi THEN whole_lo ELSE hi END AS head_hi,
                   CASE WHEN whole_lo < whole_hi THEN whole_hi ELSE hi END AS tail_lo
            FROM bounds
         ), parts AS (
            SELECT e.position, r.status, r.assignments, r.completion_seconds,
                   r.duration_seconds, r.durations
            FROM edges e JOIN assignment_rollups r
              ON r.flow_id = $1 AND e.has_whole AND r.bucket >= e.whole_lo AND r.bucket < e.whole_hi
            UNION ALL
            SELECT e.position, d.status, d.assignments, d.completion_seconds,
                   d.duration_seconds, d.durations
            FROM edges e JOIN assignment_rollup_deltas d
              ON d.flow_id = $1 AND e.has_whole AND d.bucket >= e.whole_lo AND d.bucket < e.whole_hi
            UNION ALL
            SELECT e.position, flow_effective_status(a.status, a.due_at, $4), 1,
                   flow_completion_seconds(a.status, a.assigned_at, a.completed_at),
                   COALESCE(flow_duration_seconds(a.status, a.started_at, a.completed_at), 0),
                   (flow_duration_seconds(a.status, a.started_at, a.completed_at) IS NOT NULL)::int
            FROM edges e CROSS JOIN LATERAL (
                SELECT a.status, a.due_at, a.assigned_at, a.started_at, a.completed_at
                FROM assignments a
                WHERE a.flow_id = $1 AND a.assigned_at >= e.lo AND a.assigned_at < e.head_hi
                UNION ALL
                SELECT a.status, a.due_at, a.assigned_at, a.started_at, a.completed_at
                FROM assignments a
                WHERE a.flow_id = $1 AND a.assigned_at >= e.tail_lo AND a.assigned_at < e.hi
            ) a
            UNION ALL
            SELECT e.position, moved.status, moved.assignments, 0, 0, 0
            FROM late a JOIN edges e
              ON a.flow_id = $1 AND e.has_whole
             AND a.assigned_at >= e.whole_lo AND a.assigned_at < e.whole_hi
            CROSS JOIN LATERAL (VALUES (a.status, -1), ('overdue', 1)) AS moved(status, assignments)
         )
         SELECT p.position, {SUMS}
         FROM unnest($5::timestamptz[]) WITH ORDINALITY AS p(s, position)
         LEFT JOIN parts USING (position)
         GROUP BY p.position
         ORDER BY p.position"
    );
    let rows: Vec<PositionFigures> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
        .bind(flow_id)
        .bind(lower)
        .bind(upper)
        .bind(now)
        .bind(&starts)
        .bind(&ends)
        .fetch_all(executor)
        .await?;
    Ok(rows.into_iter().map(|row| row.figures).collect())
}

#[derive(FromRow)]
struct PositionFigures {
    #[sqlx(rename = "position")]
    _position: i64,
    #[sqlx(flatten)]
    figures: Figures,
}

/// The figures of every assignment of each flow, whatever its assigned time, with statuses read
/// at `now` (a dashboard's list of flows): per-flow rollups, unmerged deltas and the past-due
/// correction; in the order given.
pub async fn lifetime_figures<'e>(
    executor: impl PgExecutor<'e>,
    flows: &[FlowId],
    now: DateTime<Utc>,
) -> Result<Vec<Figures>, sqlx::Error> {
    if flows.is_empty() {
        return Ok(Vec::new());
    }
    let sql = format!(
        "WITH wanted AS (
            SELECT flow_id, position FROM unnest($1::uuid[]) WITH ORDINALITY AS w(flow_id, position)
         ), late AS MATERIALIZED (
            -- Past due and not marked yet, as in `interval_figures`.
            SELECT flow_id, status FROM flow_past_due_unmarked($2)
         ), parts AS (
            SELECT w.position, r.status, r.assignments, r.completion_seconds,
                   r.duration_seconds, r.durations
            FROM wanted w JOIN flow_rollups r USING (flow_id)
            UNION ALL
            SELECT w.position, d.status, d.assignments, d.completion_seconds,
                   d.duration_seconds, d.durations
            FROM wanted w JOIN assignment_rollup_deltas d USING (flow_id)
            UNION ALL
            SELECT w.position, moved.status, moved.assignments, 0, 0, 0
            FROM wanted w JOIN late a USING (flow_id)
            CROSS JOIN LATERAL (VALUES (a.status, -1), ('overdue', 1)) AS moved(status, assignments)
         )
         SELECT w.position, {SUMS}
         FROM wanted w LEFT JOIN parts USING (position)
         GROUP BY w.position
         ORDER BY w.position"
    );
    let rows: Vec<PositionFigures> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
        .bind(flows)
        .bind(now)
        .fetch_all(executor)
        .await?;
    Ok(rows.into_iter().map(|row| row.figures).collect())
}

/// A key whose maintained figures differ from a recount over the rows.
#[derive(Debug, Clone, PartialEq, FromRow)]
pub struct Mismatch {
    /// `bucket` (per quarter hour) or `flow` (per flow).
    pub level: String,
    /// The flow.
    pub flow_id: FlowId,
    /// The quarter hour (NULL at the flow level).
    pub bucket: Option<DateTime<Utc>>,
    /// The stored status.
    pub status: String,
    /// Assignments counted from the rows.
    pub counted: i64,
    /// Assignments the rollups and deltas hold.
    pub maintained: i64,
}

/// Recounts every key from the rows and returns those whose rollups (plus unmerged deltas)
/// differ, in counts or sums (sums compared to a millisecond per assignment). Reads every
/// assignment: an operator's check (`flowctl reports verify`), not a report path. Run it in a
/// REPEATABLE READ transaction (the rows, rollups and deltas of one snapshot).
pub async fn verify<'e>(executor: impl PgExecutor<'e>) -> Result<Vec<Mismatch>, sqlx::Error> {
    let sql = format!(
        "WITH counted AS (
            SELECT flow_id, flow_rollup_bucket(assigned_at) AS bucket, status,
                   count(*) AS assignments,
                   sum(flow_completion_seconds(status, assigned_at, completed_at)) AS completion_seconds,
                   COALESCE(sum(flow_duration_seconds(status, started_at, completed_at)), 0)
                       AS duration_seconds,
                   count(flow_duration_seconds(status, started_at, completed_at)) AS durations
            FROM assignments GROUP BY 1, 2, 3
         ), maintained AS (
            SELECT flow_id, bucket, status, sum(assignments) AS assignments,
                   sum(completion_seconds) AS completion_seconds,
                   sum(duration_seconds) AS duration_seconds, sum(durations) AS durations
            FROM (SELECT flow_id, bucket, status, assignments, completion_seconds,
                         duration_seconds, durations FROM assignment_rollups
                  UNION ALL
                  SELECT flow_id, bucket, status, assignments, completion_seconds,
                         duration_seconds, durations FROM assignment_rollup_deltas) both_sources
            GROUP BY 1, 2, 3
         ), flow_maintained AS (
            SELECT flow_id, status, sum(assignments) AS assignments,
                   sum(completion_seconds) AS completion_seconds,
                   sum(duration_seconds) AS duration_seconds, sum(durations) AS durations
            FROM (SELECT flow_id, status, assignments, completion_seconds, duration_seconds,
                         durations FROM flow_rollups
                  UNION ALL
                  SELECT flow_id, status, assignments, completion_seconds, duration_seconds,
                         durations FROM assignment_rollup_deltas) both_sources
            GROUP BY 1, 2
         ), flow_counted AS (
            SELECT flow_id, status, sum(assignments) AS assignments,
                   sum(completion_seconds) AS completion_seconds,
                   sum(duration_seconds) AS duration_seconds, sum(durations) AS durations
            FROM counted GROUP BY 1, 2
         )
         SELECT 'bucket' AS level, flow_id, bucket, status,
                COALESCE(c.assignments, 0)::int8 AS counted,
                COALESCE(m.assignments, 0)::int8 AS maintained
         FROM counted c FULL JOIN maintained m USING (flow_id, bucket, status)
         WHERE {DIFFERS}
         UNION ALL
         SELECT 'flow', flow_id, NULL, status,
                COALESCE(c.assignments, 0)::int8, COALESCE(m.assignments, 0)::int8
         FROM flow_counted c FULL JOIN flow_maintained m USING (flow_id, status)
         WHERE {DIFFERS}
         ORDER BY 1, 2, 3, 4"
    );
    sqlx::query_as(sqlx::AssertSqlSafe(sql))
        .fetch_all(executor)
        .await
}

/// When a recount `c` and the maintained figures `m` of one key differ: in a count, or in a sum
/// by more than a millisecond per assignment (float sums merged in another order round apart).
const DIFFERS: &str = "COALESCE(c.assignments, 0) <> COALESCE(m.assignments, 0)
            OR COALESCE(c.durations, 0) <> COALESCE(m.durations, 0)
            OR abs(COALESCE(c.completion_seconds, 0) - COALESCE(m.completion_seconds, 0))
               > 0.001 * greatest(COALESCE(c.assignments, 0), 1)
            OR abs(COALESCE(c.duration_seconds, 0) - COALESCE(m.duration_seconds, 0))
               > 0.001 * greatest(COALESCE(c.assignments, 0), 1)";
