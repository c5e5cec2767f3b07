//! The one place a report is assembled: given its parameters and a [`Snapshot`], it reads the
//! metrics, the schedules, the aggregates and the assignment rows. The API answers inline with
//! [`Report::with_page`]; the report-worker writes every export format from [`Report::read`] and
//! the [`Report::rows`] stream. Everything is read in that one snapshot, so the figures and the
//! rows of a report agree with each other; the parts run side by side on the snapshot's lanes.
//!
//! Two sources are one function each, so either can be replaced without touching the rest: the
//! metrics source, `reports::metrics` (a count over the range, called only from [`metrics`]), and
//! the row source, `reports::rows` (a streamed keyset SELECT, giving both the inline page and the
//! export's rows).

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use flow_domain::Invalid;
use flow_domain::ids::AssignmentId;
use flow_domain::report::params::PageRequest;
use flow_domain::report::{AggregateSpec, ExportFormat, MAX_PERIODS, PageCursor, ReportParameters};
use futures::TryStreamExt;
use futures::stream::BoxStream;
use sqlx::PgConnection;

use flow_common::db::assignments::{self, ModuleProgressRecord};
use flow_common::db::reports::{
    self, AggregateRow, ExportRow, Metrics, PeriodBounds, ReportRow, ScheduleRow, Scope,
};
use flow_common::db::snapshot::Snapshot;

/// Periods aggregated together before the work is split across two lanes.
const PERIODS_PER_QUERY: usize = 8;

/// Why a report could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// The request cannot be answered as asked (an aggregation with too many periods).
    #[error(transparent)]
    Invalid(#[from] Invalid),
    /// The database failed.
    #[error(transparent)]
    Database(#[from] sqlx::Error),
}

impl flow_common::db::replicas::ReadError for ReportError {
    fn database_error(&self) -> Option<&sqlx::Error> {
        match self {
            Self::Database(error) => Some(error),
            Self::Invalid(_) => None,
        }
    }
}

/// A report's figures and lists, read in one snapshot; the rows come apart (a page, or the
/// [`rows`] stream), since an export holds far more of them than memory should.
#[derive(Debug, Clone)]
pub struct Report {
    /// The instant statuses and figures were read at (the snapshot's).
    pub generated_at: DateTime<Utc>,
    /// What the queries read; the rows of the report come from the same scope.
    pub scope: Scope,
    /// Figures over every assignment in the range, whatever the status filter.
    pub metrics: Metrics,
    /// Schedules of the flow in the range, status filter applied.
    pub schedules: Vec<ScheduleRow>,
    /// One row per period, when the parameters aggregate.
    pub aggregates: Option<Vec<AggregateRow>>,
}

/// One keyset page of a report's assignments.
#[derive(Debug, Clone)]
pub struct Page {
    /// The assignments, in (`assignedAt`, id) order.
    pub rows: Vec<ReportRow>,
    /// Where the next page starts; `None` on the last page.
    pub next: Option<PageCursor>,
    /// Module progress of the page's assignments, in flow order (detailed reports; empty
    /// otherwise).
    pub progress: HashMap<AssignmentId, Vec<ModuleProgressRecord>>,
}

impl Report {
    /// Reads the metrics, schedules and aggregates of the report `parameters` describe.
    pub async fn read(
        snapshot: &Snapshot,
        parameters: &ReportParameters,
    ) -> Result<Self, ReportError> {
        let scope = scope(parameters, snapshot.now());
        let aggregates = async {
            match &parameters.aggregate {
                Some(spec) => aggregates(snapshot, &scope, spec, &parameters.timezone)
                    .await
                    .map(Some),
                None => Ok(None),
            }
        };
        // Every lane is awaited, so a failure is reported by its root cause (see [`root_cause`]).
        let (metrics, schedules, aggregates) = match futures::join!(
            metrics(snapshot, &scope),
            schedules(snapshot, &scope),
            aggregates
        ) {
            (Ok(metrics), Ok(schedules), Ok(aggregates)) => (metrics, schedules, aggregates),
            (metrics, schedules, aggregates) => {
                return Err(root_cause([
                    metrics.err(),
                    schedules.err(),
                    aggregates.err(),
                ]));
            }
        };
        Ok(Self {
            generated_at: snapshot.now(),
            scope,
            metrics,
            schedules,
            aggregates,
        })
    }

    /// The report with one page of its assignments: what the API answers inline.
    pub async fn with_page(
        snapshot: &Snapshot,
        parameters: &ReportParameters,
        request: PageRequest,
    ) -> Result<(Self, Page), ReportError> {
        let scope = scope(parameters, snapshot.now());
        match futures::join!(
            Self::read(snapshot, parameters),
            page(snapshot, &scope, parameters.detailed, request)
        ) {
            (Ok(report), Ok(page)) => Ok((report, page)),
            (report, page) => Err(root_cause([report.err(), page.err()])),
        }
    }

    /// How many rows an export of this report in `format` holds: every row the status filter
    /// keeps, up to the format's limit.
    pub fn export_row_count(&self, format: ExportFormat) -> i64 {
        let matching = self.metrics.matching;
        format
            .row_limit()
            .map_or(matching, |limit| matching.min(limit))
    }

    /// The rows of an export of this report in `format`, streamed from `connection` (the
    /// snapshot's own) as Postgres produces them, so memory stays flat whatever the size.
    pub fn rows<'c>(
        &self,
        connection: &'c mut PgConnection,
        format: ExportFormat,
        detailed: bool,
    ) -> BoxStream<'c, Result<ExportRow, sqlx::Error>> {
        reports::rows(connection, &self.scope, detailed, None, format.row_limit())
    }

    /// One half of the rows of an export of every row without module details, split at `at`
    /// (from `exports::job::split_point`): the rows assigned before it, or from it on. The halves
    /// are disjoint ranges of the ordering key, so the first followed by the second is the one
    /// order of [`Report::rows`].
    pub fn half_rows<'c>(
        &self,
        connection: &'c mut PgConnection,
        at: DateTime<Utc>,
        half: Half,
    ) -> BoxStream<'c, Result<ExportRow, sqlx::Error>> {
        let scope = match half {
            Half::Before => Scope {
                upper: at,
                ..self.scope
            },
            Half::From => Scope {
                lower: at,
                ..self.scope
            },
        };
        reports::rows(connection, &scope, false, None, None)
    }
}

/// Which half of an export's rows [`Report::half_rows`] reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Half {
    /// The rows assigned before the split point.
    Before,
    /// The rows assigned at the split point or after it.
    From,
}

fn scope(parameters: &ReportParameters, now: DateTime<Utc>) -> Scope {
    let (lower, upper) = parameters.bounds();
    Scope {
        flow_id: parameters.flow_id,
        lower,
        upper,
        now,
        status: parameters.status,
        include_cancelled: parameters.include_cancelled,
    }
}

/// The error of lanes that ran at once to report: the first that is not a helper's failure to
/// import the snapshot. When the snapshot's own transaction fails (a query on its own lane), a
/// helper importing it at that moment fails too ("could not import the requested snapshot"):
/// that is a consequence, and an operator needs the cause.
fn root_cause<const N: usize>(errors: [Option<ReportError>; N]) -> ReportError {
    let mut errors: Vec<ReportError> = errors.into_iter().flatten().collect();
    let cause = errors
        .iter()
        .position(|error| !is_snapshot_import_failure(error))
        .unwrap_or(0);
    errors.swap_remove(cause)
}

/// Whether `error` is a helper lane's failed `SET TRANSACTION SNAPSHOT`.
fn is_snapshot_import_failure(error: &ReportError) -> bool {
    matches!(
        error,
        ReportError::Database(sqlx::Error::Database(database))
            if database.message().contains("could not import the requested snapshot")
    )
}

/// The metrics source: figures over every assignment of the range.
///
/// Every report reads its metrics this one way, the export's as the inline answer's. Summing an
/// aggregated report's periods instead (as the API once did to read the range once) is only right
/// when the periods exactly cover the range, which rests on how Postgres cuts local days across
/// clock changes and on the first and last assignment bounding an open range; and adding the
/// periods' completion-time sums in another order than one sum can round the average completion
/// time to a different second. A count over the range is right in every case, and runs on its own
/// lane beside the aggregates.
async fn metrics(snapshot: &Snapshot, scope: &Scope) -> Result<Metrics, ReportError> {
    let mut lane = snapshot.lane().await?;
    Ok(reports::metrics(&mut *lane.join().await?, scope).await?)
}

async fn schedules(snapshot: &Snapshot, scope: &Scope) -> Result<Vec<ScheduleRow>, ReportError> {
    let mut lane = snapshot.lane().await?;
    Ok(reports::schedules(&mut *lane.join().await?, scope).await?)
}

/// The page `request` asks for, with module progress when `detailed`.
async fn page(
    snapshot: &Snapshot,
    scope: &Scope,
    detailed: bool,
    request: PageRequest,
) -> Result<Page, ReportError> {
    let mut lane = snapshot.lane().await?;
    let mut connection = lane.join().await?;
    // One row more than the page tells whether another page follows.
    let mut rows: Vec<ReportRow> = reports::rows(
        &mut connection,
        scope,
        false,
        request.after,
        Some(request.limit + 1),
    )
    .map_ok(|row| row.assignment)
    .try_collect()
    .await?;
    let page_size = usize::try_from(request.limit).unwrap_or(usize::MAX);
    let next = if rows.len() > page_size {
        rows.truncate(page_size);
        rows.last().map(ReportRow::cursor)
    } else {
        None
    };
    let mut progress: HashMap<AssignmentId, Vec<ModuleProgressRecord>> = HashMap::new();
    if detailed && !rows.is_empty() {
        let ids: Vec<AssignmentId> = rows.iter().map(|row| row.id).collect();
        // Records come ordered by assignment, then module position.
        for record in assignments::module_progress(&mut *connection, &ids).await? {
            progress
                .entry(record.assignment_id)
                .or_default()
                .push(record);
        }
    }
    Ok(Page {
        rows,
        next,
        progress,
    })
}

/// The aggregate rows of the scope by `spec.by` in time zone `zone`. A long list of periods is
/// read in two halves on two lanes at once, so Postgres works on both on separate cores.
pub async fn aggregates(
    snapshot: &Snapshot,
    scope: &Scope,
    spec: &AggregateSpec,
    zone: &str,
) -> Result<Vec<AggregateRow>, ReportError> {
    let periods = {
        let mut lane = snapshot.lane().await?;
        periods(&mut *lane.join().await?, scope, spec, zone).await?
    };
    if periods.len() < 2 * PERIODS_PER_QUERY {
        return figures(snapshot, scope, &periods).await;
    }
    let (first, second) = periods.split_at(periods.len() / 2);
    let (mut rows, rest) = futures::try_join!(
        figures(snapshot, scope, first),
        figures(snapshot, scope, second)
    )?;
    rows.extend(rest);
    Ok(rows)
}

async fn figures(
    snapshot: &Snapshot,
    scope: &Scope,
    periods: &[PeriodBounds],
) -> Result<Vec<AggregateRow>, ReportError> {
    let mut lane = snapshot.lane().await?;
    Ok(reports::period_figures(&mut *lane.join().await?, scope, periods).await?)
}

/// The periods of an aggregation by `spec.by` in `zone`: from the period of the range start (or
/// of the first assignment when the range is open) to the period of the range end (or of the last
/// assignment). Refuses aggregations wider than [`MAX_PERIODS`] periods.
pub async fn periods(
    connection: &mut PgConnection,
    scope: &Scope,
    spec: &AggregateSpec,
    zone: &str,
) -> Result<Vec<PeriodBounds>, ReportError> {
    let Some((first, last)) = reports::aggregation_window(connection, scope).await? else {
        return Ok(Vec::new());
    };
    let tz: chrono_tz::Tz = zone.parse().unwrap_or(chrono_tz::Tz::UTC);
    let count = spec.by.count_between(
        first.with_timezone(&tz).date_naive(),
        last.with_timezone(&tz).date_naive(),
    );
    if count > MAX_PERIODS {
        return Err(Invalid::new(format!(
            "aggregating by {} over this range gives {count} periods; at most {MAX_PERIODS} are \
             allowed: narrow startDate/endDate or aggregate by a longer period",
            spec.by
        ))
        .into());
    }
    Ok(reports::periods(&mut *connection, spec.by, zone, first, last).await?)
}
