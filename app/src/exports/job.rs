//! An export as the report-worker generates it: claim the next one (organizations take turns),
//! hold its lease while recording progress, read what the file holds in the export's snapshot
//! (the flow and its modules, the figures the Excel sheets and the PDF chart need, the rows, in
//! one statement or two halves), record where it was read, then complete, fail or hand it back;
//! and sweep (fail exports that used up their attempts, purge expired files, forget old rows).
//! Every write about a claimed export is fenced on holding its lease. Errors are Postgres's own,
//! so the worker can tell a transient one and retry.

use std::time::Duration;

use chrono::{DateTime, Utc};
use flow_common::db::compliance::{self, Cell, GroupBy, GroupCounts, ReportFlow};
use flow_common::db::exports::{self, ExportFile, ExportRecord};
use flow_common::db::flows::{self, Flow, Module};
use flow_common::db::replicas::Source;
use flow_common::db::reports::{self, AggregateRow, RowsShape, Scope};
use flow_common::db::snapshot::Snapshot;
use flow_common::export_store::ExportStore;
use flow_domain::ids::{ExportId, FlowId, OrgId};
use flow_domain::report::{AggregateMetric, AggregateSpec, ExportFormat, Period};
use sqlx::{PgConnection, PgPool};

use crate::engine::report::{self as engine, Report, ReportError};

/// Claims the next waiting export for `worker_id` with a lease of `lease`: the organization with
/// the fewest exports running and waiting ahead first, then the one whose last claim is the
/// oldest; an export claimed `max_attempts` times already is left to the sweep.
pub async fn claim_next(
    pool: &PgPool,
    worker_id: &str,
    lease: Duration,
    max_attempts: i32,
) -> Result<Option<ExportRecord>, sqlx::Error> {
    exports::claim_next(pool, worker_id, lease, max_attempts).await
}

/// An export claimed by a worker: every write about it is fenced on the worker still holding
/// its lease (each answers `false`, having changed nothing, when another worker took it over).
#[derive(Debug, Clone, Copy)]
pub struct Claim<'a> {
    /// Postgres (the primary).
    pub pool: &'a PgPool,
    /// The export.
    pub id: ExportId,
    /// The worker holding the lease.
    pub worker_id: &'a str,
}

impl Claim<'_> {
    /// Extends the lease to `lease` from now and records `rows_written`.
    pub async fn renew(&self, lease: Duration, rows_written: i64) -> Result<bool, sqlx::Error> {
        exports::renew_lease(self.pool, self.id, self.worker_id, lease, rows_written).await
    }

    /// Records how many rows the export holds and where its data was read (`source`).
    pub async fn record_read(&self, rows_total: i64, source: &Source) -> Result<bool, sqlx::Error> {
        exports::record_read(self.pool, self.id, self.worker_id, rows_total, source).await
    }

    /// Marks the export ready with its `file`.
    pub async fn complete(&self, file: &ExportFile) -> Result<bool, sqlx::Error> {
        exports::complete(self.pool, self.id, self.worker_id, file).await
    }

    /// Fails the export for good: `reason` is worded for the caller, `detail` (the error chain)
    /// stays in the row's `error_detail`.
    pub async fn fail(&self, reason: &str, detail: Option<&str>) -> Result<bool, sqlx::Error> {
        exports::fail(self.pool, self.id, self.worker_id, reason, detail).await
    }

    /// Hands the export back to wait `delay` for another claim, counting this claim as an
    /// attempt when `count_attempt` (not on shutdown).
    pub async fn release(&self, delay: Duration, count_attempt: bool) -> Result<bool, sqlx::Error> {
        exports::release(self.pool, self.id, self.worker_id, delay, count_attempt).await
    }
}

/// The flow `flow_id` of `org_id` with its modules in order, read on the export's snapshot;
/// `None` when it no longer exists.
pub async fn flow(
    snapshot: &mut Snapshot,
    org_id: OrgId,
    flow_id: FlowId,
) -> Result<Option<(Flow, Vec<Module>)>, sqlx::Error> {
    let Some(flow) = flows::get(snapshot.connection(), org_id, flow_id).await? else {
        return Ok(None);
    };
    let modules = flows::modules(snapshot.connection(), flow.id).await?;
    Ok(Some((flow, modules)))
}

/// The flows of a compliance export, in its order, read on the export's snapshot; `None` when
/// one of them no longer exists.
pub async fn compliance_flows(
    snapshot: &mut Snapshot,
    org_id: OrgId,
    ids: &[FlowId],
) -> Result<Option<Vec<ReportFlow>>, sqlx::Error> {
    let found = compliance::flows_of(snapshot.connection(), org_id, ids).await?;
    Ok(ids
        .iter()
        .map(|id| found.iter().find(|flow| flow.id == *id).cloned())
        .collect())
}

/// How many people a compliance export's population holds.
pub async fn compliance_population(
    connection: &mut PgConnection,
    scope: &compliance::Scope,
) -> Result<i64, sqlx::Error> {
    compliance::population_size(connection, scope).await
}

/// Every cell of a compliance export's population (user id order, each person's cells in flow
/// order), as one statement read as it streams.
pub fn compliance_cells<'c>(
    connection: &'c mut PgConnection,
    scope: &'c compliance::Scope,
) -> futures::stream::BoxStream<'c, Result<Cell, sqlx::Error>> {
    compliance::every_cell(connection, scope)
}

/// Every group of a compliance export's roll-up by `by`, in key order, read in one statement
/// (one pass over the population's cells, however many groups: a manager's roll-up of 100,000
/// people holds thousands).
pub async fn compliance_groups(
    connection: &mut PgConnection,
    scope: &compliance::Scope,
    by: GroupBy,
) -> Result<Vec<GroupCounts>, sqlx::Error> {
    compliance::groups(connection, scope, by, None, i64::MAX).await
}

/// Module progress rows of the assignments the export of `scope` holds (sizes the Excel sheets),
/// read on the export's snapshot.
pub async fn module_progress_count(
    snapshot: &mut Snapshot,
    scope: &Scope,
) -> Result<i64, sqlx::Error> {
    reports::export_module_progress_count(snapshot.connection(), scope).await
}

/// Completion by period for the PDF chart of a report that did not aggregate: total and
/// completed assignments by a period chosen from the span of the data.
pub async fn chart(
    snapshot: &mut Snapshot,
    scope: &Scope,
    timezone: &str,
) -> Result<(Period, Vec<AggregateRow>), ReportError> {
    let Some((first, last)) = reports::aggregation_window(snapshot.connection(), scope).await?
    else {
        return Ok((Period::Day, Vec::new()));
    };
    let spec = AggregateSpec {
        by: chart_period(first, last),
        metrics: vec![
            AggregateMetric::TotalAssignments,
            AggregateMetric::CompletedAssignments,
        ],
    };
    let rows = engine::aggregates(snapshot, scope, &spec, timezone).await?;
    Ok((spec.by, rows))
}

/// The chart period for a span when the request did not aggregate: about 5 to 60 bars.
fn chart_period(first: DateTime<Utc>, last: DateTime<Utc>) -> Period {
    let days = (last - first).num_days();
    if days <= 45 {
        Period::Day
    } else if days <= 300 {
        Period::Week
    } else if days <= 1_800 {
        Period::Month
    } else if days <= 5_400 {
        Period::Quarter
    } else {
        Period::Year
    }
}

/// Gives the rest of the snapshot's transaction on `connection` the memory of one export's sorts
/// and hash joins.
pub async fn allow_export_memory(connection: &mut PgConnection) -> Result<(), sqlx::Error> {
    reports::allow_export_memory(connection).await
}

/// Where the rows of the export of `report` in `format` split into two halves of assigned time
/// read side by side ([`Report::half_rows`]): for an export of every row without module details
/// of at least `split_rows` rows, the instant that splits them about in half; `None` reads them
/// in one statement ([`Report::rows`]).
pub async fn split_point(
    connection: &mut PgConnection,
    report: &Report,
    format: ExportFormat,
    detailed: bool,
    split_rows: i64,
) -> Result<Option<DateTime<Utc>>, sqlx::Error> {
    let whole = RowsShape::of(detailed, format.row_limit()) == RowsShape::Whole;
    if whole && report.export_row_count(format) >= split_rows {
        reports::midpoint(&mut *connection, &report.scope).await
    } else {
        Ok(None)
    }
}

/// Expired exports purged in one transaction.
const EXPIRED_BATCH: i64 = 100;

/// One sweep: fails exports claimed `max_attempts` times without finishing, purges the files of
/// expired exports from `store` (one whose file could not be deleted waits for the next sweep),
/// and forgets expired exports `retention` after they expired.
pub async fn sweep(
    pool: &PgPool,
    store: &ExportStore,
    max_attempts: i32,
    retention: Duration,
) -> Result<(), sqlx::Error> {
    let failed = exports::fail_exhausted(pool, max_attempts).await?;
    if failed > 0 {
        tracing::warn!(failed, "exports failed after using up their attempts");
    }
    loop {
        let mut transaction = pool.begin().await?;
        let expired = exports::lock_expired(&mut *transaction, EXPIRED_BATCH).await?;
        let mut purged: Vec<ExportId> = Vec::with_capacity(expired.len());
        for id in &expired {
            match store.delete_export(*id).await {
                Ok(_) => purged.push(*id),
                Err(error) => {
                    tracing::warn!(export_id = %id, %error, "could not purge an expired export")
                }
            }
        }
        exports::mark_expired(&mut *transaction, &purged).await?;
        transaction.commit().await?;
        if !purged.is_empty() {
            tracing::info!(count = purged.len(), "expired exports purged");
        }
        if (expired.len() as i64) < EXPIRED_BATCH || purged.is_empty() {
            break;
        }
    }
    exports::delete_forgotten(pool, retention).await?;
    Ok(())
}
