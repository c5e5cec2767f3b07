//! Report queries over one flow and a range of assignment times `[lower, upper)`: metrics,
//! schedules, per-period aggregates, and the assignment rows (a keyset page of them, or all of them
//! for an export). How they combine into a report is `flow_app::engine::report`'s business.
//!
//! Every query reads statuses as they stand at `now`: an active assignment past its due date is
//! `overdue` even before the scheduler records it (README guarantee 5). The parameters are
//! numbered the same way everywhere: `$1` flow, `$2` lower, `$3` upper, `$4` now, then `$5` the
//! status filter (NULL for none) where the list is filtered. `assignments_report_idx` (migration
//! 0020) covers the columns the metrics and aggregates read, so they are index-only scans.

use std::sync::LazyLock;

use chrono::{DateTime, NaiveDateTime, Utc};
use flow_domain::ids::{AssignmentId, FlowId, ScheduleId};
use flow_domain::recurrence::Recurrence;
use flow_domain::report::{PageCursor, Period, ReportParameters};
use flow_domain::{AssignmentStatus, ModuleStatus, Priority};
use futures::stream::BoxStream;
use sqlx::{AssertSqlSafe, FromRow, PgConnection, PgExecutor};

/// The status assignment `a` reports at `$4` (the one rule, migration 0070).
const EFFECTIVE_STATUS: &str = "flow_effective_status(a.status, a.due_at, $4)";

/// The status filter of a report's rows, `$5` as [`Scope::status_filter`] binds it: a status, or
/// NULL for every assignment but the cancelled ones, or `*` for every assignment.
const STATUS_FILTER: &str = "(($5::text IS NULL AND a.status <> 'cancelled') OR $5 = '*'
    OR flow_effective_status(a.status, a.due_at, $4) = $5)";

/// What the report is about: one flow, a range, a status filter, and the reading time.
#[derive(Debug, Clone, Copy)]
pub struct Scope {
    /// The flow (already checked to belong to the caller's organization).
    pub flow_id: FlowId,
    /// Inclusive lower bound of `assigned_at` (schedules: `scheduled_at`).
    pub lower: DateTime<Utc>,
    /// Exclusive upper bound.
    pub upper: DateTime<Utc>,
    /// Statuses are read as of this instant.
    pub now: DateTime<Utc>,
    /// Filter of the assignments and schedules lists (not of the metrics).
    pub status: Option<AssignmentStatus>,
    /// Whether cancelled assignments count in the metrics and are listed without a status
    /// filter (design §16: left out unless asked for).
    pub include_cancelled: bool,
}

impl Scope {
    /// The schedules' status filter.
    fn status_text(&self) -> Option<&'static str> {
        self.status.map(AssignmentStatus::as_str)
    }

    /// `$5` of [`STATUS_FILTER`].
    fn status_filter(&self) -> Option<&'static str> {
        match self.status {
            Some(status) => Some(status.as_str()),
            None if self.include_cancelled => Some("*"),
            None => None,
        }
    }
}

/// Figures over every assignment of the scope's range, whatever the status filter.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Metrics {
    /// Assignments in the range.
    pub total: i64,
    /// Of those, completed.
    pub completed: i64,
    /// In progress (and not past due).
    pub in_progress: i64,
    /// Pending (and not past due).
    pub pending: i64,
    /// Overdue now.
    pub overdue: i64,
    /// Cancelled ones, when the report includes cancelled assignments (then also in `total`).
    pub cancelled: Option<i64>,
    /// Mean of completedAt − assignedAt over completed ones, in seconds.
    pub average_completion_seconds: Option<f64>,
    /// Assignments the status filter keeps (the rows an export holds).
    pub matching: i64,
}

impl Metrics {
    /// Metrics from counts by reported status; `overdue` is what is neither completed, in
    /// progress nor pending (stored overdue, or active and past due).
    /// `counts.total` leaves cancelled ones out; `include_cancelled` adds them.
    fn from_counts(
        counts: &StatusCounts,
        status: Option<AssignmentStatus>,
        include_cancelled: bool,
    ) -> Self {
        let overdue = counts.total - counts.completed - counts.in_progress - counts.pending;
        let total = if include_cancelled {
            counts.total + counts.cancelled
        } else {
            counts.total
        };
        let matching = match status {
            None => total,
            Some(AssignmentStatus::Completed) => counts.completed,
            Some(AssignmentStatus::InProgress) => counts.in_progress,
            Some(AssignmentStatus::Pending) => counts.pending,
            Some(AssignmentStatus::Overdue) => overdue,
            Some(AssignmentStatus::Cancelled) => counts.cancelled,
        };
        Self {
            total,
            cancelled: include_cancelled.then_some(counts.cancelled),
            completed: counts.completed,
            in_progress: counts.in_progress,
            pending: counts.pending,
            overdue,
            average_completion_seconds: (counts.completed > 0)
                .then(|| counts.completion_seconds / counts.completed as f64)
                .filter(|seconds| seconds.is_finite()),
            matching,
        }
    }
}

/// Counts by reported status, and the summed completion time.
#[derive(Debug, Clone, Copy, FromRow)]
struct StatusCounts {
    /// Every assignment but the cancelled ones.
    total: i64,
    cancelled: i64,
    completed: i64,
    in_progress: i64,
    pending: i64,
    completion_seconds: f64,
}

/// The metrics of the scope, from the report rollups (`super::rollups`): their cost follows the
/// number of quarter hours in the range (or of statuses, over a flow's whole life), not the
/// number of assignments, and they equal a count over the rows at `scope.now`.
pub async fn metrics<'e>(
    executor: impl PgExecutor<'e>,
    scope: &Scope,
) -> Result<Metrics, sqlx::Error> {
    let figures = if (scope.lower, scope.upper) == ReportParameters::open_bounds() {
        super::rollups::lifetime_figures(executor, &[scope.flow_id], scope.now).await?
    } else {
        super::rollups::interval_figures(
            executor,
            scope.flow_id,
            &[(scope.lower, scope.upper)],
            scope.lower,
            scope.upper,
            scope.now,
        )
        .await?
    };
    let figures = figures.first().copied().unwrap_or_default();
    let counts = StatusCounts {
        total: figures.total,
        cancelled: figures.cancelled,
        completed: figures.completed,
        in_progress: figures.in_progress,
        pending: figures.pending,
        completion_seconds: figures.completion_seconds,
    };
    Ok(Metrics::from_counts(
        &counts,
        scope.status,
        scope.include_cancelled,
    ))
}

/// One assignment of a report.
#[derive(Debug, Clone, PartialEq, FromRow)]
pub struct ReportRow {
    pub id: AssignmentId,
    /// Assignee e-mail.
    pub assignee_email: String,
    /// False when the assignee was deactivated since (their history stays in reports).
    pub user_active: bool,
    /// Assignment time.
    pub assigned_at: DateTime<Utc>,
    /// Status at the reading time; a name this build does not know fails the read.
    pub status: AssignmentStatus,
    pub priority: Priority,
    /// Due date.
    pub due_at: Option<DateTime<Utc>>,
    /// First module activity.
    pub started_at: Option<DateTime<Utc>>,
    /// Completion.
    pub completed_at: Option<DateTime<Utc>>,
    /// When the completion expires (flows with a validity).
    pub expires_at: Option<DateTime<Utc>>,
    /// Modules completed.
    pub completed_modules: i64,
}

impl ReportRow {
    /// The cursor that continues after this row.
    pub fn cursor(&self) -> PageCursor {
        PageCursor {
            assigned_at: self.assigned_at,
            id: self.id,
        }
    }
}

const ROW_COLUMNS: &str = "a.id, u.email AS assignee_email, u.active AS user_active, a.assigned_at, \
     {status} AS status, a.priority, a.due_at, a.started_at, a.completed_at, a.expires_at";

fn row_columns() -> String {
    ROW_COLUMNS.replace("{status}", EFFECTIVE_STATUS)
}

/// A schedule of the flow.
#[derive(Debug, Clone, PartialEq, FromRow)]
pub struct ScheduleRow {
    pub id: ScheduleId,
    /// Assignee e-mail.
    pub assignee_email: String,
    /// Next (or only) occurrence.
    pub scheduled_at: DateTime<Utc>,
    /// Status of the current occurrence at the reading time (`pending` before the first).
    pub status: AssignmentStatus,
    /// How often it repeats.
    pub recurrence: Recurrence,
}

static SCHEDULES_SQL: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT * FROM (
            SELECT s.id, u.email AS assignee_email, s.scheduled_at, s.recurrence,
                   COALESCE({EFFECTIVE_STATUS}, 'pending') AS status
            FROM schedules s
            JOIN users u ON u.id = s.user_id
            LEFT JOIN assignments a ON a.id = s.current_assignment_id
            WHERE s.flow_id = $1 AND s.deleted_at IS NULL
              AND s.scheduled_at >= $2 AND s.scheduled_at < $3
         ) s
         WHERE $5::text IS NULL OR s.status = $5
         ORDER BY s.scheduled_at, s.id"
    )
});

/// The flow's schedules whose `scheduledAt` is in the range and whose status passes the filter.
pub async fn schedules<'e>(
    executor: impl PgExecutor<'e>,
    scope: &Scope,
) -> Result<Vec<ScheduleRow>, sqlx::Error> {
    sqlx::query_as(AssertSqlSafe(SCHEDULES_SQL.as_str()))
        .bind(scope.flow_id)
        .bind(scope.lower)
        .bind(scope.upper)
        .bind(scope.now)
        .bind(scope.status_text())
        .fetch_all(executor)
        .await
}

/// The first and last assignment times in the range (`None` when it holds no assignment):
/// where aggregation starts and ends when the request leaves a bound open.
pub async fn assigned_span<'e>(
    executor: impl PgExecutor<'e>,
    scope: &Scope,
) -> Result<Option<(DateTime<Utc>, DateTime<Utc>)>, sqlx::Error> {
    let (first, last): (Option<DateTime<Utc>>, Option<DateTime<Utc>>) = sqlx::query_as(
        "SELECT min(a.assigned_at), max(a.assigned_at) FROM assignments a
         WHERE a.flow_id = $1 AND a.assigned_at >= $2 AND a.assigned_at < $3",
    )
    .bind(scope.flow_id)
    .bind(scope.lower)
    .bind(scope.upper)
    .fetch_one(executor)
    .await?;
    Ok(first.zip(last))
}

/// Figures of one aggregation period.
#[derive(Debug, Clone, PartialEq, FromRow)]
pub struct AggregateRow {
    /// Local wall-clock start of the period (labels are derived from it).
    pub local_start: NaiveDateTime,
    /// First instant of the period.
    pub period_start: DateTime<Utc>,
    /// First instant of the next period.
    pub period_end: DateTime<Utc>,
    /// Assignments made in the period (and in the range).
    pub total: i64,
    /// Of those, completed.
    pub completed: i64,
    /// In progress now (not past due).
    pub in_progress: i64,
    /// Pending now (not past due).
    pub pending: i64,
    /// Mean of completedAt − startedAt over the completed ones, in seconds.
    pub average_duration_seconds: Option<f64>,
}

impl AggregateRow {
    /// Overdue now: neither completed, in progress nor pending.
    pub fn overdue(&self) -> i64 {
        self.total - self.completed - self.in_progress - self.pending
    }
}

/// One aggregation period: its local start (labels come from it) and its instants.
#[derive(Debug, Clone, Copy, PartialEq, FromRow)]
pub struct PeriodBounds {
    /// Local wall-clock start.
    pub local_start: NaiveDateTime,
    /// First instant.
    pub period_start: DateTime<Utc>,
    /// First instant of the next period.
    pub period_end: DateTime<Utc>,
}

/// The step between two starts of `period`, as a Postgres interval.
fn interval(period: Period) -> &'static str {
    match period {
        Period::Day => "1 day",
        Period::Week => "1 week",
        Period::Month => "1 month",
        Period::Quarter => "3 months",
        Period::Year => "1 year",
    }
}

/// The periods of length `period` in time zone `zone` from the one containing `first` to the one
/// containing `last`, cut by Postgres (`date_trunc` and `generate_series` on local time, then
/// back to instants: a day is 23 or 25 hours long across a clock change).
pub async fn periods<'e>(
    executor: impl PgExecutor<'e>,
    period: Period,
    zone: &str,
    first: DateTime<Utc>,
    last: DateTime<Utc>,
) -> Result<Vec<PeriodBounds>, sqlx::Error> {
    sqlx::query_as(
        "SELECT local_start,
                local_start AT TIME ZONE $1 AS period_start,
                (local_start + $3::interval) AT TIME ZONE $1 AS period_end
         FROM generate_series(date_trunc($2, $4 AT TIME ZONE $1),
                              date_trunc($2, $5 AT TIME ZONE $1),
                              $3::interval) AS local_start
         ORDER BY local_start",
    )
    .bind(zone)
    // `date_trunc` names the periods as they are spelled.
    .bind(period.as_str())
    .bind(interval(period))
    .bind(first)
    .bind(last)
    .fetch_all(executor)
    .await
}

/// The figures of each period, counting only assignments within the scope's range, from the
/// report rollups (periods of any time zone start on quarter hours; a range bound that does not
/// is counted from the rows of its quarter hour). Aggregates describe every assignment whatever
/// the status filter, like the metrics.
pub async fn period_figures(
    connection: &mut PgConnection,
    scope: &Scope,
    periods: &[PeriodBounds],
) -> Result<Vec<AggregateRow>, sqlx::Error> {
    let intervals: Vec<(DateTime<Utc>, DateTime<Utc>)> = periods
        .iter()
        .map(|period| (period.period_start, period.period_end))
        .collect();
    let figures = super::rollups::interval_figures(
        connection,
        scope.flow_id,
        &intervals,
        scope.lower,
        scope.upper,
        scope.now,
    )
    .await?;
    Ok(periods
        .iter()
        .zip(figures)
        .map(|(period, figures)| AggregateRow {
            local_start: period.local_start,
            period_start: period.period_start,
            period_end: period.period_end,
            total: figures.total,
            completed: figures.completed,
            in_progress: figures.in_progress,
            pending: figures.pending,
            average_duration_seconds: (figures.durations > 0)
                .then(|| figures.duration_seconds / figures.durations as f64),
        })
        .collect())
}

/// First and last instants to aggregate: the range bounds given, else the assignments' span.
pub async fn aggregation_window(
    connection: &mut PgConnection,
    scope: &Scope,
) -> Result<Option<(DateTime<Utc>, DateTime<Utc>)>, sqlx::Error> {
    let (open_lower, open_upper) = ReportParameters::open_bounds();
    let given_first = (scope.lower != open_lower).then_some(scope.lower);
    // The end is exclusive: its period is the one holding the instant just before it.
    let given_last =
        (scope.upper != open_upper).then(|| scope.upper - chrono::Duration::microseconds(1));
    let span = if given_first.is_some() && given_last.is_some() {
        None
    } else {
        assigned_span(&mut *connection, scope).await?
    };
    let first = given_first.or(span.map(|(first, _)| first));
    let last = given_last.or(span.map(|(_, last)| last));
    Ok(match (first, last) {
        (Some(first), Some(last)) if first <= last => Some((first, last)),
        (Some(only), None) | (None, Some(only)) => Some((only, only)),
        _ => None,
    })
}

/// One assignment row of a report, with its module progress as arrays when detailed (what the
/// export formats write; the inline page keeps only the assignment).
#[derive(Debug, Clone, PartialEq, FromRow)]
pub struct ExportRow {
    /// The assignment.
    #[sqlx(flatten)]
    pub assignment: ReportRow,
    /// Positions of the modules started or completed, in flow order.
    pub module_positions: Option<Vec<i32>>,
    /// Their statuses; a name this build does not know fails the read.
    pub module_statuses: Option<Vec<ModuleStatus>>,
    /// When each was started.
    pub module_started: Option<Vec<Option<DateTime<Utc>>>>,
    /// When each was completed.
    pub module_completed: Option<Vec<Option<DateTime<Utc>>>>,
    /// Each one's scaled score (-1..1), when reported.
    pub module_scores: Option<Vec<Option<f64>>>,
    /// Whether each was passed, when reported.
    pub module_success: Option<Vec<Option<bool>>>,
    /// Seconds spent in each, when reported.
    pub module_durations: Option<Vec<Option<i64>>>,
}

/// How a report's rows are read: a bounded page, every row of the scope, or every row with its
/// module progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowsShape {
    /// At most `$8` rows (an inline page, a PDF): each row's completed modules counted by its
    /// own index probe, so the first rows come at once.
    Page,
    /// Every row of the scope (a CSV or Excel export): completed modules counted by one grouped
    /// join over the progress of the scope's assignments, so Postgres may read them in one pass
    /// (a million probes cost twice the rest of the export; a small flow still probes).
    Whole,
    /// With module progress as arrays in flow order (a detailed export or page).
    Detailed,
}

impl RowsShape {
    /// How rows are read with or without module details, at most `limit` of them (all: `None`).
    pub fn of(detailed: bool, limit: Option<i64>) -> Self {
        match (detailed, limit) {
            (true, _) => Self::Detailed,
            (false, Some(_)) => Self::Page,
            (false, None) => Self::Whole,
        }
    }
}

/// The SELECT of a report's rows: the assignments of the scope passing the status filter, in
/// (`assignedAt`, id) order after (`$6`, `$7`), at most `$8` (NULL: all). Public so the
/// benchmark can time Postgres's own `COPY` of the same rows.
pub fn rows_sql(shape: RowsShape) -> String {
    const NO_PROGRESS: &str = "NULL::int[] AS module_positions, NULL::text[] AS module_statuses,
             NULL::timestamptz[] AS module_started, NULL::timestamptz[] AS module_completed,
             NULL::float8[] AS module_scores, NULL::bool[] AS module_success,
             NULL::int8[] AS module_durations";
    let (progress_columns, progress_join) = match shape {
        RowsShape::Detailed => (
            "COALESCE(mp.completed_modules, 0) AS completed_modules, mp.module_positions, \
             mp.module_statuses, mp.module_started, mp.module_completed, mp.module_scores, \
             mp.module_success, mp.module_durations"
                .to_owned(),
            "LEFT JOIN LATERAL (
                SELECT count(*) FILTER (WHERE p.status = 'completed') AS completed_modules,
                       array_agg(m.position ORDER BY m.position) AS module_positions,
                       array_agg(p.status ORDER BY m.position) AS module_statuses,
                       array_agg(p.started_at ORDER BY m.position) AS module_started,
                       array_agg(p.completed_at ORDER BY m.position) AS module_completed,
                       array_agg(p.score ORDER BY m.position) AS module_scores,
                       array_agg(p.success ORDER BY m.position) AS module_success,
                       array_agg(p.duration_seconds ORDER BY m.position) AS module_durations
                FROM module_progress p JOIN modules m ON m.id = p.module_id
                WHERE p.assignment_id = a.id
             ) mp ON true",
        ),
        RowsShape::Page => (
            format!(
                "(SELECT count(*) FROM module_progress p
                  WHERE p.assignment_id = a.id AND p.status = 'completed') AS completed_modules,
                 {NO_PROGRESS}"
            ),
            "",
        ),
        RowsShape::Whole => (
            format!("COALESCE(mp.completed_modules, 0) AS completed_modules, {NO_PROGRESS}"),
            "LEFT JOIN (
                SELECT p.assignment_id, count(*) AS completed_modules FROM module_progress p
                WHERE p.status = 'completed' AND p.assignment_id IN (
                    SELECT s.id FROM assignments s
                    WHERE s.flow_id = $1 AND s.assigned_at >= $2 AND s.assigned_at < $3)
                GROUP BY p.assignment_id
             ) mp ON mp.assignment_id = a.id",
        ),
    };
    format!(
        "SELECT {columns}, {progress_columns}
         FROM assignments a JOIN users u ON u.id = a.user_id
         {progress_join}
         WHERE a.flow_id = $1 AND a.assigned_at >= $2 AND a.assigned_at < $3
           AND {STATUS_FILTER}
           AND (a.assigned_at, a.id) > ($6, $7)
         ORDER BY a.assigned_at, a.id
         LIMIT $8",
        columns = row_columns()
    )
}

static PAGE_SQL: LazyLock<String> = LazyLock::new(|| rows_sql(RowsShape::Page));
static WHOLE_SQL: LazyLock<String> = LazyLock::new(|| rows_sql(RowsShape::Whole));
static DETAILED_SQL: LazyLock<String> = LazyLock::new(|| rows_sql(RowsShape::Detailed));

/// Streams the scope's rows after `after` (from the start when `None`), at most `limit` (all when
/// `None`), from `connection` as Postgres produces them, so memory stays flat whatever the size.
/// Keyset order never shifts: an assignment inserted meanwhile lands at its own place and cannot
/// push another one across a page boundary.
pub fn rows<'c>(
    connection: &'c mut PgConnection,
    scope: &Scope,
    detailed: bool,
    after: Option<PageCursor>,
    limit: Option<i64>,
) -> BoxStream<'c, Result<ExportRow, sqlx::Error>> {
    let sql = match RowsShape::of(detailed, limit) {
        RowsShape::Detailed => DETAILED_SQL.as_str(),
        RowsShape::Page => PAGE_SQL.as_str(),
        RowsShape::Whole => WHOLE_SQL.as_str(),
    };
    let (after_at, after_id) = match after {
        Some(cursor) => (cursor.assigned_at, cursor.id.0),
        None => (scope.lower, uuid::Uuid::nil()),
    };
    sqlx::query_as(AssertSqlSafe(sql))
        .bind(scope.flow_id)
        .bind(scope.lower)
        .bind(scope.upper)
        .bind(scope.now)
        .bind(scope.status_filter())
        .bind(after_at)
        .bind(after_id)
        .bind(limit)
        .fetch(connection)
}

/// The quarter hour of assigned time that splits the scope's assignments about in half, read
/// from the rollups and unmerged deltas (so it costs what the number of quarter hours does);
/// `None` when no such instant lies strictly inside the scope's range.
pub async fn midpoint<'e>(
    executor: impl PgExecutor<'e>,
    scope: &Scope,
) -> Result<Option<DateTime<Utc>>, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT bucket FROM (
            SELECT bucket, sum(sum(n)) OVER (ORDER BY bucket) AS running, sum(sum(n)) OVER () AS total
            FROM (SELECT bucket, assignments AS n FROM assignment_rollups
                  WHERE flow_id = $1 AND bucket >= $2 AND bucket < $3
                  UNION ALL
                  SELECT bucket, assignments FROM assignment_rollup_deltas
                  WHERE flow_id = $1 AND bucket >= $2 AND bucket < $3) parts
            GROUP BY bucket
         ) counted
         WHERE running * 2 >= total AND bucket > $2
         ORDER BY bucket
         LIMIT 1",
    )
    .bind(scope.flow_id)
    .bind(scope.lower)
    .bind(scope.upper)
    .fetch_optional(executor)
    .await
}

/// Memory for the sort and hash joins of one export's rows (`RowsShape::Whole` sorts the whole
/// scope by assigned time once its joins are done), set for the rest of the snapshot's
/// transaction: at Postgres's default of 4 MB a million rows sort on disk in many runs, and
/// this is one statement per running export, not per connection.
pub const EXPORT_WORK_MEM: &str = "64MB";

/// Gives the rest of the transaction on `connection` [`EXPORT_WORK_MEM`] per sort or hash.
pub async fn allow_export_memory(connection: &mut PgConnection) -> Result<(), sqlx::Error> {
    sqlx::query("SELECT set_config('work_mem', $1, true)")
        .bind(EXPORT_WORK_MEM)
        .execute(connection)
        .await
        .map(|_| ())
}

/// Module progress rows of the assignments an export holds (sizes the Excel sheets).
pub async fn export_module_progress_count<'e>(
    executor: impl PgExecutor<'e>,
    scope: &Scope,
) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT count(*) FROM assignments a JOIN module_progress p ON p.assignment_id = a.id
         WHERE a.flow_id = $1 AND a.assigned_at >= $2 AND a.assigned_at < $3
           AND {STATUS_FILTER}"
    )))
    .bind(scope.flow_id)
    .bind(scope.lower)
    .bind(scope.upper)
    .bind(scope.now)
    .bind(scope.status_filter())
    .fetch_one(executor)
    .await
}
