//! Exports: the row the API writes for an export request is also the job, and writing it is the
//! request's one commit point: the same transaction `NOTIFY`s the report-workers, and a worker
//! that missed the notification finds the row by polling. A report-worker claims it (`running`,
//! its id, a lease), renews the lease while it works and fences every later write on still
//! holding it, so a job is only ever worked on by one worker at a time; a job whose lease lapsed
//! (its worker died) is claimable again.
//!
//! Organizations share the workers fairly: each may have a few exports waiting or running and a
//! bounded number of bytes of files at a time ([`ExportCaps`], checked when an export is
//! requested), and claims go round the organizations that have exports waiting
//! ([`claim_next`]), so one organization's backlog does not delay another's export.

use std::time::Duration;

use chrono::{DateTime, Utc};
use flow_domain::ids::{ExportId, FlowId, OrgId};

use super::compliance::ComplianceParameters;
use super::orgs::Tier;
use super::replicas::{Source, WalPosition};
use flow_domain::report::{EXPORT_VALIDITY, ExportFormat, ReportParameters};
pub use flow_domain::report::{ExportKind, ExportStatus};
use sqlx::types::Json;
use sqlx::{FromRow, PgExecutor, PgPool};

/// An export row.
#[derive(Debug, Clone, FromRow)]
pub struct ExportRecord {
    pub id: ExportId,
    /// Owning organization.
    pub org_id: OrgId,
    /// What it is an export of (a stored name this build does not know fails the read).
    pub kind: ExportKind,
    /// Flow reported on (flow reports only).
    pub flow_id: Option<FlowId>,
    /// File format (a stored name this build does not know fails the read).
    pub format: ExportFormat,
    /// The request to replay, of the export's kind ([`ExportRecord::parameters`] reads it).
    pub parameters: Json<serde_json::Value>,
    /// Lifecycle status, as stored (see `flow-api`'s `status_at` for the status at an instant).
    pub status: ExportStatus,
    /// Claims so far.
    pub attempts: i32,
    /// Rows the file will hold, once known.
    pub rows_total: Option<i64>,
    /// Rows written so far.
    pub rows_written: i64,
    /// Key of the file in the export store, when ready.
    pub object_key: Option<String>,
    /// Download file name.
    pub file_name: Option<String>,
    /// `Content-Type` of the file.
    pub content_type: Option<String>,
    /// File size in bytes.
    pub size_bytes: Option<i64>,
    /// Why it failed, worded for the caller.
    pub error: Option<String>,
    /// The `X-Request-ID` of the request.
    pub request_id: Option<String>,
    /// Request time.
    pub created_at: DateTime<Utc>,
    /// When the current (or last) attempt started.
    pub started_at: Option<DateTime<Utc>>,
    /// When it became ready or failed.
    pub finished_at: Option<DateTime<Utc>>,
    /// When the download stops working.
    pub expires_at: DateTime<Utc>,
    /// The primary's WAL position when the export was requested: a replica generates it only
    /// once it has replayed this far.
    pub requested_wal_position: Option<WalPosition>,
    /// The instant the data of the file is current to, once read.
    pub data_as_of: Option<DateTime<Utc>>,
    /// The server it was read on (`primary`, or a replica's `host:port`), once read.
    pub read_on: Option<String>,
}

impl ExportRecord {
    /// The request to replay, read as the export's kind says: parameters that do not fit it are
    /// an error, never a default.
    pub fn parameters(&self) -> Result<ExportParameters, serde_json::Error> {
        let value = self.parameters.0.clone();
        Ok(match self.kind {
            ExportKind::FlowReport => ExportParameters::FlowReport(serde_json::from_value(value)?),
            ExportKind::Compliance => ExportParameters::Compliance(serde_json::from_value(value)?),
        })
    }

    /// The format.
    pub fn format(&self) -> ExportFormat {
        self.format
    }

    /// Percent of rows written, 0 to 100.
    pub fn progress_percent(&self) -> f64 {
        match (self.status, self.rows_total) {
            (ExportStatus::Ready, _) => 100.0,
            (_, Some(total)) if total > 0 => {
                let percent = self.rows_written as f64 * 100.0 / total as f64;
                (percent.clamp(0.0, 100.0) * 10.0).floor() / 10.0
            }
            _ => 0.0,
        }
    }
}

/// The request an export replays, per kind.
#[derive(Debug, Clone, PartialEq)]
pub enum ExportParameters {
    /// A flow report.
    FlowReport(ReportParameters),
    /// A compliance report.
    Compliance(ComplianceParameters),
}

impl ExportParameters {
    /// The kind of export.
    pub fn kind(&self) -> ExportKind {
        match self {
            Self::FlowReport(_) => ExportKind::FlowReport,
            Self::Compliance(_) => ExportKind::Compliance,
        }
    }

    /// The flow reported on, for a flow report.
    pub fn flow_id(&self) -> Option<FlowId> {
        match self {
            Self::FlowReport(parameters) => Some(parameters.flow_id),
            Self::Compliance(_) => None,
        }
    }

    fn to_json(&self) -> Result<serde_json::Value, serde_json::Error> {
        match self {
            Self::FlowReport(parameters) => serde_json::to_value(parameters),
            Self::Compliance(parameters) => serde_json::to_value(parameters),
        }
    }
}

impl From<ReportParameters> for ExportParameters {
    fn from(parameters: ReportParameters) -> Self {
        Self::FlowReport(parameters)
    }
}

impl From<ComplianceParameters> for ExportParameters {
    fn from(parameters: ComplianceParameters) -> Self {
        Self::Compliance(parameters)
    }
}

const COLUMNS: &str = "id, org_id, kind, flow_id, format, parameters, status, attempts, rows_total, \
    rows_written, object_key, file_name, content_type, size_bytes, error, request_id, created_at, \
    started_at, finished_at, expires_at, requested_wal_position, data_as_of, read_on";

/// What creating an export takes.
#[derive(Debug, Clone)]
pub struct NewExport {
    /// Id (chosen by the API).
    pub id: ExportId,
    /// Owning organization.
    pub org_id: OrgId,
    pub format: ExportFormat,
    /// The validated request, of its kind.
    pub parameters: ExportParameters,
    /// Rows it will hold, as counted when it was requested.
    pub rows_total: i64,
    /// The caller's request id.
    pub request_id: Option<String>,
    /// Request time.
    pub created_at: DateTime<Utc>,
    /// When the download expires.
    pub expires_at: DateTime<Utc>,
}

impl NewExport {
    /// An export of the report `parameters` describe, requested at `now`, downloadable for
    /// [`EXPORT_VALIDITY`].
    pub fn new(
        org_id: OrgId,
        format: ExportFormat,
        parameters: impl Into<ExportParameters>,
        rows_total: i64,
        request_id: Option<&str>,
        now: DateTime<Utc>,
    ) -> Self {
        Self {
            id: ExportId::new(),
            org_id,
            format,
            parameters: parameters.into(),
            rows_total,
            request_id: request_id.map(str::to_owned),
            created_at: now,
            expires_at: now + EXPORT_VALIDITY,
        }
    }
}

/// How much of the report-workers and of the export store one organization may hold at a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExportCaps {
    /// Exports waiting or running at once.
    pub queued: i64,
    /// Bytes of files of unexpired exports.
    pub stored_bytes: i64,
}

/// One gibibyte.
const GIB: i64 = 1 << 30;

impl ExportCaps {
    /// The caps of a tier: standard 5 exports waiting or running and 1 GiB of files,
    /// enterprise 20 and 10 GiB.
    pub fn for_tier(tier: Tier) -> Self {
        match tier {
            Tier::Standard => Self {
                queued: 5,
                stored_bytes: GIB,
            },
            Tier::Enterprise => Self {
                queued: 20,
                stored_bytes: 10 * GIB,
            },
        }
    }
}

/// What an organization's unexpired exports hold now.
#[derive(Debug, Clone, Copy, FromRow)]
pub struct ExportUsage {
    /// Exports waiting or running.
    pub queued: i64,
    /// Bytes of the files of ready exports.
    pub stored_bytes: i64,
    /// When the oldest ready export expires (its file then stops counting).
    pub oldest_expiry: Option<DateTime<Utc>>,
}

/// Why an organization may not request another export now.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CapReached {
    /// As many exports as allowed are waiting or running.
    #[error(
        "this organization has {queued} exports waiting or running, the most allowed at once; \
         request another once one of them is ready"
    )]
    Queued {
        /// The cap.
        queued: i64,
    },
    /// The files of unexpired exports take the organization's whole allowance.
    #[error(
        "this organization's unexpired export files take {} MiB of its {} MiB of export storage; \
         new exports are refused until older ones expire (24 hours after they were requested)",
        stored_bytes / (1 << 20),
        cap_bytes / (1 << 20)
    )]
    Stored {
        /// Bytes held now.
        stored_bytes: i64,
        /// The cap.
        cap_bytes: i64,
        /// When the oldest file expires.
        oldest_expiry: Option<DateTime<Utc>>,
    },
}

impl ExportUsage {
    /// Whether one more export fits within `caps`.
    pub fn check(&self, caps: ExportCaps) -> Result<(), CapReached> {
        if self.queued >= caps.queued {
            return Err(CapReached::Queued {
                queued: caps.queued,
            });
        }
        if self.stored_bytes >= caps.stored_bytes {
            return Err(CapReached::Stored {
                stored_bytes: self.stored_bytes,
                cap_bytes: caps.stored_bytes,
                oldest_expiry: self.oldest_expiry,
            });
        }
        Ok(())
    }
}

/// What the unexpired exports of `org_id` hold now.
pub async fn usage<'e>(
    executor: impl PgExecutor<'e>,
    org_id: OrgId,
) -> Result<ExportUsage, sqlx::Error> {
    sqlx::query_as(
        "SELECT count(*) FILTER (WHERE status IN ('pending', 'running')) AS queued,
                coalesce(sum(size_bytes) FILTER (WHERE status = 'ready'), 0)::BIGINT AS stored_bytes,
                min(expires_at) FILTER (WHERE status = 'ready') AS oldest_expiry
         FROM exports
         WHERE org_id = $1 AND status IN ('pending', 'running', 'ready') AND expires_at > now()",
    )
    .bind(org_id)
    .fetch_one(executor)
    .await
}

/// Why an export was not created.
#[derive(Debug, thiserror::Error)]
pub enum CreateError {
    /// The organization is at one of its caps.
    #[error(transparent)]
    Cap(#[from] CapReached),
    /// Postgres failed.
    #[error(transparent)]
    Database(#[from] sqlx::Error),
}

impl From<serde_json::Error> for CreateError {
    fn from(error: serde_json::Error) -> Self {
        Self::Database(sqlx::Error::Encode(Box::new(error)))
    }
}

/// Inserts a pending export, if the organization is within `caps`, and wakes the report-workers
/// when it commits. It records the primary's WAL position, which a replica must have replayed
/// to generate the export (every write committed before the request lies before it). Requests of one organization take turns on a transaction-scoped lock, so two
/// at once cannot both take its last place.
pub async fn create(
    pool: &PgPool,
    new: &NewExport,
    caps: ExportCaps,
) -> Result<ExportRecord, CreateError> {
    let mut transaction = pool.begin().await?;
    sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended('exports of ' || $1::text, 0))")
        .bind(new.org_id)
        .execute(&mut *transaction)
        .await?;
    usage(&mut *transaction, new.org_id).await?.check(caps)?;
    let parameters = new.parameters.to_json()?;
    let record = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "INSERT INTO exports (id, org_id, kind, flow_id, format, parameters, rows_total,
                              request_id, created_at, available_at, expires_at,
                              requested_wal_position)
         VALUES ($1, $2, $10, $3, $4, $5, $6, $7, $8, $8, $9,
                 (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint)
         RETURNING {COLUMNS}"
    )))
    .bind(new.id)
    .bind(new.org_id)
    .bind(new.parameters.flow_id())
    .bind(new.format)
    .bind(Json(parameters))
    .bind(new.rows_total)
    .bind(new.request_id.as_deref())
    .bind(new.created_at)
    .bind(new.expires_at)
    .bind(new.parameters.kind())
    .fetch_one(&mut *transaction)
    .await?;
    super::notify(&mut *transaction, super::EXPORT_CHANNEL, "").await?;
    transaction.commit().await?;
    Ok(record)
}

/// One export of an organization.
pub async fn get<'e>(
    executor: impl PgExecutor<'e>,
    org_id: OrgId,
    id: ExportId,
) -> Result<Option<ExportRecord>, sqlx::Error> {
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {COLUMNS} FROM exports WHERE id = $1 AND org_id = $2"
    )))
    .bind(id)
    .bind(org_id)
    .fetch_optional(executor)
    .await
}

/// Up to `limit` of an organization's exports before `before`, newest first (expired ones too,
/// until the report-worker purges their rows).
pub async fn list<'e>(
    executor: impl PgExecutor<'e>,
    org_id: OrgId,
    before: Option<ExportId>,
    limit: i64,
) -> Result<Vec<ExportRecord>, sqlx::Error> {
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {COLUMNS} FROM exports
         WHERE org_id = $1 AND ($2::uuid IS NULL OR id < $2)
         ORDER BY id DESC LIMIT $3"
    )))
    .bind(org_id)
    .bind(before)
    .bind(limit)
    .fetch_all(executor)
    .await
}

/// Exports a worker may claim: waiting (and not backing off), or left by a worker whose lease
/// lapsed, and not expired.
const CLAIMABLE: &str = "((status = 'pending' AND available_at <= now())
                          OR (status = 'running' AND lease_until < now()))
                         AND expires_at > now()";

fn interval_ms(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// Claims an export that is waiting (and not backing off), or whose worker stopped renewing its
/// lease, for `worker_id` until `lease` from now; organizations take turns.
///
/// Each claimable export gets a place in line: its rank among its organization's claimable
/// exports (oldest first) plus the organization's exports running now. The lowest place goes
/// first, so every organization's first export waiting comes before anyone's second, and an
/// organization with exports running waits behind those with none; among equal places the
/// organization whose last claim is the oldest (or that never had one) goes first, then the
/// oldest export. `SKIP LOCKED` lets any number of workers claim side by side: one that finds the
/// first in line locked by another takes the next (rechecked as still claimable once locked).
pub async fn claim_next<'e>(
    executor: impl PgExecutor<'e>,
    worker_id: &str,
    lease: Duration,
    max_attempts: i32,
) -> Result<Option<ExportRecord>, sqlx::Error> {
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "WITH waiting AS (
            SELECT id, org_id, created_at,
                   row_number() OVER (PARTITION BY org_id ORDER BY created_at, id) AS rank
            FROM exports
            WHERE {CLAIMABLE} AND attempts < $3
         ),
         organizations AS (
            SELECT queued.org_id, turns.last_claimed_at,
                   (SELECT count(*) FROM exports running
                    WHERE running.org_id = queued.org_id AND running.status = 'running'
                      AND running.lease_until >= now() AND running.expires_at > now()) AS running
            FROM (SELECT DISTINCT org_id FROM waiting) queued
            LEFT JOIN export_claim_turns turns ON turns.org_id = queued.org_id
         ),
         next AS (
            SELECT exports.id FROM exports
            JOIN waiting ON waiting.id = exports.id
            JOIN organizations ON organizations.org_id = waiting.org_id
            WHERE {CLAIMABLE} AND exports.attempts < $3
            ORDER BY waiting.rank + organizations.running,
                     organizations.last_claimed_at NULLS FIRST,
                     waiting.created_at, waiting.id
            LIMIT 1
            FOR UPDATE OF exports SKIP LOCKED
         ),
         claimed AS (
            UPDATE exports SET status = 'running', worker_id = $1,
                   lease_until = now() + $2 * interval '1 millisecond',
                   attempts = attempts + 1, started_at = now(), rows_written = 0, error = NULL,
                   data_as_of = NULL, read_on = NULL
            WHERE id = (SELECT id FROM next)
            RETURNING {COLUMNS}
         ),
         turn AS (
            INSERT INTO export_claim_turns (org_id, last_claimed_at)
            SELECT org_id, now() FROM claimed
            ON CONFLICT (org_id) DO UPDATE SET last_claimed_at = excluded.last_claimed_at
         )
         SELECT {COLUMNS} FROM claimed"
    )))
    .bind(worker_id)
    .bind(interval_ms(lease))
    .bind(max_attempts)
    .fetch_optional(executor)
    .await
}

/// Exports a worker could claim now (what [`claim_next`] takes, counted; attempts aside).
pub async fn waiting_count<'e>(executor: impl PgExecutor<'e>) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT count(*) FROM exports WHERE {CLAIMABLE}"
    )))
    .fetch_one(executor)
    .await
}

/// Fails exports that used up their attempts without finishing (their workers kept dying).
/// Returns how many.
pub async fn fail_exhausted<'e>(
    executor: impl PgExecutor<'e>,
    max_attempts: i32,
) -> Result<u64, sqlx::Error> {
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "UPDATE exports SET status = 'failed', finished_at = now(), worker_id = NULL,
                lease_until = NULL,
                error = 'the report-worker stopped while generating this export '
                        || attempts || ' times; request a new export'
         WHERE attempts >= $1 AND {CLAIMABLE}"
    )))
    .bind(max_attempts)
    .execute(executor)
    .await
    .map(|result| result.rows_affected())
}

/// Extends `worker_id`'s lease and records progress. False when the worker no longer holds the
/// job (its lease lapsed and another worker took it): it must stop.
pub async fn renew_lease<'e>(
    executor: impl PgExecutor<'e>,
    id: ExportId,
    worker_id: &str,
    lease: Duration,
    rows_written: i64,
) -> Result<bool, sqlx::Error> {
    let result = sqlx::query(
        "UPDATE exports SET lease_until = now() + $3 * interval '1 millisecond', rows_written = $4
         WHERE id = $1 AND worker_id = $2 AND status = 'running'",
    )
    .bind(id)
    .bind(worker_id)
    .bind(interval_ms(lease))
    .bind(rows_written)
    .execute(executor)
    .await?;
    Ok(result.rows_affected() == 1)
}

/// Records what the export's snapshot holds: the exact number of rows the file will hold, the
/// instant its data is current to, and the server it is read on.
pub async fn record_read<'e>(
    executor: impl PgExecutor<'e>,
    id: ExportId,
    worker_id: &str,
    rows_total: i64,
    source: &Source,
) -> Result<bool, sqlx::Error> {
    let result = sqlx::query(
        "UPDATE exports SET rows_total = $3, data_as_of = $4, read_on = $5
         WHERE id = $1 AND worker_id = $2 AND status = 'running'",
    )
    .bind(id)
    .bind(worker_id)
    .bind(rows_total)
    .bind(source.data_as_of)
    .bind(&*source.server)
    .execute(executor)
    .await?;
    Ok(result.rows_affected() == 1)
}

/// The file that was written.
#[derive(Debug, Clone)]
pub struct ExportFile {
    /// Key in the export store.
    pub object_key: String,
    /// Download file name.
    pub file_name: String,
    /// `Content-Type`.
    pub content_type: String,
    /// Size in bytes.
    pub size_bytes: i64,
    /// Rows written.
    pub rows_written: i64,
}

/// Marks the export ready, if `worker_id` still holds it.
pub async fn complete<'e>(
    executor: impl PgExecutor<'e>,
    id: ExportId,
    worker_id: &str,
    file: &ExportFile,
) -> Result<bool, sqlx::Error> {
    let result = sqlx::query(
        "UPDATE exports SET status = 'ready', object_key = $3, file_name = $4, content_type = $5,
                size_bytes = $6, rows_written = $7, finished_at = now(), lease_until = NULL
         WHERE id = $1 AND worker_id = $2 AND status = 'running'",
    )
    .bind(id)
    .bind(worker_id)
    .bind(&file.object_key)
    .bind(&file.file_name)
    .bind(&file.content_type)
    .bind(file.size_bytes)
    .bind(file.rows_written)
    .execute(executor)
    .await?;
    Ok(result.rows_affected() == 1)
}

/// Marks the export failed, if `worker_id` still holds it: `error` is the reason worded for the
/// caller, `detail` the internal error chain kept for operators only.
pub async fn fail<'e>(
    executor: impl PgExecutor<'e>,
    id: ExportId,
    worker_id: &str,
    error: &str,
    detail: Option<&str>,
) -> Result<bool, sqlx::Error> {
    let result = sqlx::query(
        "UPDATE exports SET status = 'failed', error = $3, error_detail = $4, finished_at = now(),
                lease_until = NULL
         WHERE id = $1 AND worker_id = $2 AND status = 'running'",
    )
    .bind(id)
    .bind(worker_id)
    .bind(error)
    .bind(detail)
    .execute(executor)
    .await?;
    Ok(result.rows_affected() == 1)
}

/// Fails the export whatever worker holds it, unless it is already over (ready, failed,
/// expired): the request that recorded it could not answer. `error` is worded for the caller. A
/// worker writing it then finds it failed and leaves it so.
pub async fn withdraw<'e>(
    executor: impl PgExecutor<'e>,
    id: ExportId,
    error: &str,
) -> Result<bool, sqlx::Error> {
    let result = sqlx::query(
        "UPDATE exports SET status = 'failed', error = $2, finished_at = now(), lease_until = NULL
         WHERE id = $1 AND status IN ('pending', 'running')",
    )
    .bind(id)
    .bind(error)
    .execute(executor)
    .await?;
    Ok(result.rows_affected() == 1)
}

/// Gives the job back so a worker retries it after `delay`. A release on shutdown does not count
/// as an attempt (`count_attempt` false); one after a transient failure does.
pub async fn release<'e>(
    executor: impl PgExecutor<'e>,
    id: ExportId,
    worker_id: &str,
    delay: Duration,
    count_attempt: bool,
) -> Result<bool, sqlx::Error> {
    let result = sqlx::query(
        "UPDATE exports SET status = 'pending', worker_id = NULL, lease_until = NULL,
                available_at = now() + $3 * interval '1 millisecond', rows_written = 0,
                attempts = CASE WHEN $4 THEN attempts ELSE greatest(attempts - 1, 0) END
         WHERE id = $1 AND worker_id = $2 AND status = 'running'",
    )
    .bind(id)
    .bind(worker_id)
    .bind(interval_ms(delay))
    .bind(count_attempt)
    .execute(executor)
    .await?;
    Ok(result.rows_affected() == 1)
}

/// Takes up to `limit` exports past their expiry that still have a file (or may get one), locking
/// them for the caller's transaction.
pub async fn lock_expired<'e>(
    executor: impl PgExecutor<'e>,
    limit: i64,
) -> Result<Vec<ExportId>, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT id FROM exports WHERE status <> 'expired' AND expires_at <= now()
         ORDER BY expires_at LIMIT $1 FOR UPDATE SKIP LOCKED",
    )
    .bind(limit)
    .fetch_all(executor)
    .await
}

/// Records that exports' files were purged.
pub async fn mark_expired<'e>(
    executor: impl PgExecutor<'e>,
    ids: &[ExportId],
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "UPDATE exports SET status = 'expired', object_key = NULL, worker_id = NULL,
                lease_until = NULL
         WHERE id = ANY($1)",
    )
    .bind(ids)
    .execute(executor)
    .await
    .map(|_| ())
}

/// Forgets exports that expired more than `retention` ago (they answered 410 until then).
pub async fn delete_forgotten<'e>(
    executor: impl PgExecutor<'e>,
    retention: Duration,
) -> Result<u64, sqlx::Error> {
    sqlx::query(
        "DELETE FROM exports
         WHERE status = 'expired' AND expires_at < now() - $1 * interval '1 millisecond'",
    )
    .bind(interval_ms(retention))
    .execute(executor)
    .await
    .map(|result| result.rows_affected())
}
