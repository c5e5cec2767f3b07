//! The workflow-efficiency reads of one flow (issue 39, design §18): the module funnel, the time
//! spent per module, the time to complete (overall and per period) and the share completed by
//! the due date, over the flow's assignments made in a range `[lower, upper)`. Cancelled
//! assignments are left out, as the flow report leaves them out by default.
//!
//! The parameters are numbered the same way everywhere: `$1` flow, `$2` lower, `$3` upper. Every
//! query starts from `assignments_flow_assigned_idx` (flow, assigned_at) and reads each
//! assignment and its module progress once; the funnel folds them per module position inside the
//! statement, so its cost follows the assignments of the range and their progress.
//! docs/analysis.md has the definitions.

use chrono::{DateTime, Utc};
use flow_domain::ids::{FlowId, ModuleId};
use sqlx::{FromRow, PgExecutor};

/// What an analysis reads: one flow, a range of assignment times, the reading time.
#[derive(Debug, Clone, Copy)]
pub struct Scope {
    /// The flow (already checked to belong to the caller's organization).
    pub flow_id: FlowId,
    /// Inclusive lower bound of `assigned_at`.
    pub lower: DateTime<Utc>,
    /// Exclusive upper bound of `assigned_at`.
    pub upper: DateTime<Utc>,
    /// The reading time: an open assignment is stalled when its last activity is older than
    /// `now` − `stalled_after_days` days.
    pub now: DateTime<Utc>,
    /// Days without activity after which an open assignment counts as stalled.
    pub stalled_after_days: i32,
}

/// The assignments of the range the analysis counts (every one but the cancelled).
const SCOPED: &str = "SELECT a.id, a.status, a.assigned_at, a.started_at, a.completed_at, a.due_at
    FROM assignments a
    WHERE a.flow_id = $1 AND a.assigned_at >= $2 AND a.assigned_at < $3
      AND a.status <> 'cancelled'";

/// A module of the flow, in flow order.
#[derive(Debug, Clone, PartialEq, FromRow)]
pub struct ModuleRow {
    pub id: ModuleId,
    /// Position in the flow (0 first).
    pub position: i32,
    pub name: String,
}

/// The modules of `flow_id` in order.
pub async fn modules<'e>(
    executor: impl PgExecutor<'e>,
    flow_id: FlowId,
) -> Result<Vec<ModuleRow>, sqlx::Error> {
    sqlx::query_as("SELECT id, position, name FROM modules WHERE flow_id = $1 ORDER BY position")
        .bind(flow_id)
        .fetch_all(executor)
        .await
}

/// One module's step of the funnel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, FromRow)]
pub struct FunnelRow {
    /// The module's position.
    pub position: i32,
    /// Assignments with progress on this module or a later one, or completed.
    pub reached: i64,
    /// Assignments that completed this module.
    pub completed: i64,
    /// Open assignments whose first module not completed is this one, with no activity for
    /// `stalled_after_days` days.
    pub stalled: i64,
}

/// The funnel of the scope, one row per module of the flow in order.
pub async fn funnel<'e>(
    executor: impl PgExecutor<'e>,
    scope: &Scope,
) -> Result<Vec<FunnelRow>, sqlx::Error> {
    // One pass over the assignments and their progress (`per_assignment`), then small folds per
    // module position; every part is MATERIALIZED so it is computed once, not per module.
    // `furthest`: the last position with any progress; a completed assignment reached every
    // module (2147483647 stands above every position). `done`: the positions completed.
    // `last_activity`: the latest of the assignment's own instants and its progress' (`greatest`
    // ignores NULLs). An assignment stalls in its first position not in `done`.
    let sql = format!(
        "WITH per_assignment AS MATERIALIZED (
             SELECT s.id,
                    s.status IN ('pending', 'in_progress', 'overdue') AS open,
                    CASE WHEN s.status = 'completed' THEN 2147483647 ELSE max(m.position) END
                        AS furthest,
                    array_agg(m.position) FILTER (WHERE p.status = 'completed') AS done,
                    greatest(s.assigned_at, s.started_at, max(p.started_at), max(p.completed_at))
                        AS last_activity
             FROM ({SCOPED}) AS s
             LEFT JOIN module_progress p ON p.assignment_id = s.id
             LEFT JOIN modules m ON m.id = p.module_id
             GROUP BY s.id, s.status, s.assigned_at, s.started_at
         ),
         positions AS MATERIALIZED (SELECT position FROM modules WHERE flow_id = $1),
         reach AS MATERIALIZED (
             SELECT furthest, count(*) AS n FROM per_assignment
             WHERE furthest IS NOT NULL GROUP BY furthest
         ),
         completions AS MATERIALIZED (
             SELECT done.position, count(*) AS n
             FROM per_assignment pa CROSS JOIN LATERAL unnest(pa.done) AS done(position)
             GROUP BY done.position
         ),
         stalls AS MATERIALIZED (
             SELECT next.position, count(*) AS n
             FROM per_assignment pa
             CROSS JOIN LATERAL (
                 SELECT min(m.position) AS position FROM positions m
                 WHERE pa.done IS NULL OR m.position <> ALL (pa.done)
             ) AS next
             WHERE pa.open AND pa.last_activity < $4 - make_interval(days => $5)
             GROUP BY next.position
         )
         SELECT m.position,
                coalesce((SELECT sum(r.n) FROM reach r WHERE r.furthest >= m.position), 0)::int8
                    AS reached,
                coalesce((SELECT c.n FROM completions c WHERE c.position = m.position), 0)
                    AS completed,
                coalesce((SELECT st.n FROM stalls st WHERE st.position = m.position), 0) AS stalled
         FROM positions m
         ORDER BY m.position"
    );
    sqlx::query_as(sqlx::AssertSqlSafe(sql))
        .bind(scope.flow_id)
        .bind(scope.lower)
        .bind(scope.upper)
        .bind(scope.now)
        .bind(scope.stalled_after_days)
        .fetch_all(executor)
        .await
}

/// A median and 90th percentile of durations, in seconds, and how many there were.
#[derive(Debug, Clone, Copy, PartialEq, Default, FromRow)]
pub struct Spread {
    /// Durations counted.
    pub samples: i64,
    /// Their median (`percentile_cont(0.5)`); `None` without samples.
    pub median: Option<f64>,
    /// Their 90th percentile (`percentile_cont(0.9)`); `None` without samples.
    pub p90: Option<f64>,
}

/// The time spent in one module.
#[derive(Debug, Clone, Copy, PartialEq, FromRow)]
pub struct ModuleTime {
    /// The module.
    pub module_id: ModuleId,
    /// Its durations.
    #[sqlx(flatten)]
    pub spread: Spread,
}

/// The time spent per module over the completed module progress of the scope: the duration the
/// content reported (`duration_seconds`) when there is one, else `completed_at − started_at`;
/// progress with neither (or a negative difference) is not counted. Modules without a sample
/// have no row.
pub async fn module_times<'e>(
    executor: impl PgExecutor<'e>,
    scope: &Scope,
) -> Result<Vec<ModuleTime>, sqlx::Error> {
    let sql = format!(
        "WITH scoped AS ({SCOPED})
         SELECT p.module_id,
                count(*) AS samples,
                percentile_cont(0.5) WITHIN GROUP (ORDER BY spent.seconds) AS median,
                percentile_cont(0.9) WITHIN GROUP (ORDER BY spent.seconds) AS p90
         FROM scoped s
         JOIN module_progress p ON p.assignment_id = s.id
         CROSS JOIN LATERAL (
             SELECT coalesce(p.duration_seconds::float8,
                             extract(epoch FROM p.completed_at - p.started_at)::float8) AS seconds
         ) AS spent
         WHERE p.status = 'completed' AND spent.seconds >= 0
         GROUP BY p.module_id"
    );
    sqlx::query_as(sqlx::AssertSqlSafe(sql))
        .bind(scope.flow_id)
        .bind(scope.lower)
        .bind(scope.upper)
        .fetch_all(executor)
        .await
}

/// The completions of the scope.
#[derive(Debug, Clone, Copy, PartialEq, Default, FromRow)]
pub struct Completions {
    /// Assignments of the range (cancelled ones left out).
    pub assignments: i64,
    /// Time to complete (`completed_at − assigned_at`) of the completed ones.
    #[sqlx(flatten)]
    pub spread: Spread,
    /// Completed ones that had a due date.
    pub with_due_date: i64,
    /// Of those, completed at or before it.
    pub on_time: i64,
}

/// Time to complete and the on-time counts over the whole scope.
pub async fn completions<'e>(
    executor: impl PgExecutor<'e>,
    scope: &Scope,
) -> Result<Completions, sqlx::Error> {
    let sql = format!(
        "WITH scoped AS ({SCOPED})
         SELECT count(*) AS assignments,
                count(*) FILTER (WHERE done) AS samples,
                percentile_cont(0.5) WITHIN GROUP (ORDER BY seconds) FILTER (WHERE done) AS median,
                percentile_cont(0.9) WITHIN GROUP (ORDER BY seconds) FILTER (WHERE done) AS p90,
                count(*) FILTER (WHERE done AND s.due_at IS NOT NULL) AS with_due_date,
                count(*) FILTER (WHERE done AND s.completed_at <= s.due_at) AS on_time
         FROM scoped s
         CROSS JOIN LATERAL (
             SELECT s.status = 'completed' AND s.completed_at IS NOT NULL AS done,
                    extract(epoch FROM s.completed_at - s.assigned_at)::float8 AS seconds
         ) AS completion"
    );
    sqlx::query_as(sqlx::AssertSqlSafe(sql))
        .bind(scope.flow_id)
        .bind(scope.lower)
        .bind(scope.upper)
        .fetch_one(executor)
        .await
}

/// Time to complete of the assignments made in each of `periods` (and in the scope's range),
/// one row per period in the order given; a period without completions has `samples` 0 and no
/// median or p90.
pub async fn completion_trend<'e>(
    executor: impl PgExecutor<'e>,
    scope: &Scope,
    periods: &[(DateTime<Utc>, DateTime<Utc>)],
) -> Result<Vec<Spread>, sqlx::Error> {
    let (starts, ends): (Vec<DateTime<Utc>>, Vec<DateTime<Utc>>) = periods.iter().copied().unzip();
    let sql = format!(
        "WITH scoped AS ({SCOPED})
         SELECT count(s.id) AS samples,
                percentile_cont(0.5) WITHIN GROUP
                    (ORDER BY extract(epoch FROM s.completed_at - s.assigned_at)::float8) AS median,
                percentile_cont(0.9) WITHIN GROUP
                    (ORDER BY extract(epoch FROM s.completed_at - s.assigned_at)::float8) AS p90
         FROM unnest($4::timestamptz[], $5::timestamptz[]) WITH ORDINALITY
              AS period(period_start, period_end, n)
         LEFT JOIN scoped s
             ON s.assigned_at >= period.period_start AND s.assigned_at < period.period_end
            AND s.status = 'completed' AND s.completed_at IS NOT NULL
         GROUP BY period.n
         ORDER BY period.n"
    );
    sqlx::query_as(sqlx::AssertSqlSafe(sql))
        .bind(scope.flow_id)
        .bind(scope.lower)
        .bind(scope.upper)
        .bind(starts)
        .bind(ends)
        .fetch_all(executor)
        .await
}
