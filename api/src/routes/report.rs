//! `POST /v1/flows/report`: metrics, schedules and a keyset page of assignments of one flow,
//! optionally aggregated by period and exported as a file.
//!
//! Figures are exact at read time: the queries derive `overdue` from the due date, so the status
//! filter, the lists and the metrics agree with what the scheduler will record. An export request
//! answers with the normal report plus where the file will be; the report-worker writes the file.

use std::collections::HashMap;

use axum::Json;
use axum::extract::State;
use chrono::{DateTime, Utc};
use flow_common::amqp::{Outgoing, QueueKind};
use flow_common::db::assignments::{self, ModuleProgressRecord};
use flow_common::db::exports::{self, NewExport};
use flow_common::db::flows::FlowSummary;
use flow_common::db::reports::{
    self, AggregateError, AggregateRow, Metrics, ReportRow, ScheduleRow, Scope,
};
use flow_common::domain::{
    AssignmentStatus, DayBound, Invalid, parse_date_input, parse_timezone, timestamp,
};
use flow_common::duration::humanize_seconds;
use flow_common::ids::{AssignmentId, ExportId, FlowId, ScheduleId};
use flow_common::messages::{EXPORT_COMMAND_VERSION, ExportCommand};
use flow_common::report::{
    AggregateMetric, AggregateSpec, DEFAULT_PAGE_LIMIT, EXPORT_VALIDITY, ExportFormat,
    MAX_PAGE_LIMIT, PDF_ROW_LIMIT, PageCursor, ReportParameters, check_range, completion_rate,
    whole_seconds,
};
use serde::{Deserialize, Serialize};
use sqlx::PgPool;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::AppState;
use crate::error::{ApiError, ErrorBody};
use crate::extract::{ApiJson, Auth, Caller, RequestId};
use crate::ratelimit::{Operation, RateInfo};
use crate::routes::assignments::ModuleProgressView;

/// Rows of an export that cost one more report request.
const EXPORT_ROWS_PER_REQUEST: i64 = 10_000;
/// Rows of an inline page that cost one report request.
const PAGE_ROWS_PER_REQUEST: i64 = 1_000;

/// Routes of this module.
pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(report))
}

/// Body of the report operation.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ReportRequest {
    /// Flow to report on.
    #[schema(required = true, value_type = String, example = "flow_0193a1b2c3d47e8f9a0b1c2d3e4f5a6b")]
    pub flow_id: Option<String>,
    /// Start of the range of `assignedAt` (schedules: `scheduledAt`), inclusive: RFC 3339, or
    /// `YYYY-MM-DD` (start of that day in the report's time zone).
    #[schema(example = "2026-11-01")]
    pub start_date: Option<String>,
    /// End of the range, exclusive; must be after `startDate`.
    #[schema(example = "2026-12-01")]
    pub end_date: Option<String>,
    /// Keep only assignments and schedules with this status (pending, in_progress, completed,
    /// overdue). The metrics and aggregates still describe every assignment in the range.
    #[schema(example = "overdue")]
    pub status: Option<String>,
    /// Include each assignment's module progress (modules started or completed, in flow order).
    pub detailed: Option<bool>,
    /// Also export the whole report as a file: csv, excel or pdf.
    #[schema(example = "csv")]
    pub format: Option<String>,
    /// Group the assignments by period.
    pub aggregate: Option<AggregateRequest>,
    /// IANA time zone of plain dates and of the aggregation periods (default: the organization's).
    #[schema(example = "Europe/Paris")]
    pub timezone: Option<String>,
    /// Assignments per page, 1 to 10,000 (default 1,000). Each started 1,000 counts as one report
    /// request for rate limiting.
    #[schema(minimum = 1, maximum = 10000)]
    pub limit: Option<i64>,
    /// The `nextCursor` of the previous page.
    pub cursor: Option<String>,
}

/// The `aggregate` object of a report request.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AggregateRequest {
    /// day, week (ISO), month, quarter or year.
    #[schema(required = true, value_type = String, example = "week")]
    pub by: Option<String>,
    /// completion_rate, average_duration, total_assignments, completed_assignments,
    /// overdue_assignments; empty or missing means all.
    #[schema(example = json!(["completion_rate", "average_duration"]))]
    pub metrics: Option<Vec<String>>,
}

/// A validated report request.
#[derive(Debug, Clone)]
pub struct ReportInput {
    /// The flow; `None` when the text was not a flow id (it then does not exist: 404).
    pub flow_id: Option<FlowId>,
    /// Range start.
    pub start: Option<DateTime<Utc>>,
    /// Range end.
    pub end: Option<DateTime<Utc>>,
    /// Status filter.
    pub status: Option<AssignmentStatus>,
    /// Module progress wanted.
    pub detailed: bool,
    /// Export format.
    pub format: Option<ExportFormat>,
    /// Aggregation.
    pub aggregate: Option<AggregateSpec>,
    /// Time zone of plain dates and periods.
    pub zone: chrono_tz::Tz,
    /// Page size.
    pub limit: i64,
    /// Position after which the page starts.
    pub cursor: Option<PageCursor>,
}

impl ReportInput {
    /// Validates a request; `org_zone` applies unless the request names a time zone.
    pub fn parse(request: ReportRequest, org_zone: chrono_tz::Tz) -> Result<Self, ApiError> {
        let flow_text = request.flow_id.unwrap_or_default();
        if flow_text.trim().is_empty() {
            return Err(ApiError::InvalidRequest("flowId is required".into()));
        }
        let zone = match request.timezone.as_deref() {
            None => org_zone,
            Some(name) => parse_timezone("timezone", name.trim())?,
        };
        let date = |field: &str, text: Option<&str>| {
            text.map(|text| parse_date_input(field, text, zone, DayBound::Start))
                .transpose()
        };
        let start = date("startDate", request.start_date.as_deref())?;
        let end = date("endDate", request.end_date.as_deref())?;
        check_range(start, end)?;
        let status = request
            .status
            .as_deref()
            .map(|text| AssignmentStatus::parse_field("status", text))
            .transpose()?;
        let format = request
            .format
            .as_deref()
            .map(|text| ExportFormat::parse_field("format", text))
            .transpose()?;
        let aggregate = request
            .aggregate
            .map(|aggregate| {
                let by = aggregate
                    .by
                    .ok_or_else(|| Invalid::new("aggregate.by is required"))?;
                AggregateSpec::parse(&by, aggregate.metrics.as_deref())
            })
            .transpose()?;
        let limit = match request.limit {
            None => i64::from(DEFAULT_PAGE_LIMIT),
            Some(limit) if (1..=i64::from(MAX_PAGE_LIMIT)).contains(&limit) => limit,
            Some(_) => {
                return Err(ApiError::InvalidRequest(format!(
                    "limit must be between 1 and {MAX_PAGE_LIMIT}"
                )));
            }
        };
        let cursor = match request.cursor.as_deref() {
            None | Some("") => None,
            Some(text) => Some(PageCursor::decode(text).ok_or_else(|| {
                ApiError::InvalidRequest(
                    "cursor is not valid: pass the nextCursor of the previous page".into(),
                )
            })?),
        };
        Ok(Self {
            flow_id: FlowId::parse(flow_text.trim()),
            start,
            end,
            status,
            detailed: request.detailed.unwrap_or(false),
            format,
            aggregate,
            zone,
            limit,
            cursor,
        })
    }

    /// The parameters an export replays.
    pub fn parameters(&self, flow_id: FlowId) -> ReportParameters {
        ReportParameters {
            flow_id,
            start: self.start,
            end: self.end,
            status: self.status,
            detailed: self.detailed,
            aggregate: self.aggregate.clone(),
            timezone: self.zone.name().to_owned(),
        }
    }
}

/// Result of the report operation.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReportResponse {
    /// Flow reported on.
    pub flow_id: FlowId,
    /// Name of the flow.
    pub flow_name: String,
    /// The instant statuses and figures were read at.
    #[serde(serialize_with = "timestamp::serialize")]
    #[schema(value_type = String, format = DateTime)]
    pub generated_at: DateTime<Utc>,
    /// The range and time zone applied.
    pub range: RangeView,
    /// Figures over every assignment in the range (whatever the status filter).
    pub metrics: MetricsView,
    /// Schedules of the flow (scheduledAt in the range, status filter applied).
    pub schedules: Vec<ScheduleView>,
    /// One page of assignments in (assignedAt, assignmentId) order (status filter applied).
    pub assignments: Vec<ReportAssignment>,
    /// Cursor of the next page; null on the last page.
    pub next_cursor: Option<String>,
    /// One row per period, first to last in range, empty periods included (when asked).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub aggregates: Option<Vec<AggregateView>>,
    /// Identifier of the export (only when a format was asked).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub export_id: Option<ExportId>,
    /// `{base_url}/v1/exports/<exportId>`: 202 while it is generated, then the file (only when a
    /// format was asked).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub download_url: Option<String>,
    /// When the download address expires, request time + 24 hours (only when a format was
    /// asked).
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "timestamp::option::serialize"
    )]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub expires_at: Option<DateTime<Utc>>,
    /// `pending` at first; see `GET /v1/exports/{id}` (only when a format was asked).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub export_status: Option<String>,
}

impl ReportResponse {
    /// Adds where the export will be. The fields sit beside the report's own rather than in a
    /// nested object, as the contract shows them.
    fn with_export(mut self, export: ExportResult) -> Self {
        self.export_id = Some(export.export_id);
        self.download_url = Some(export.download_url);
        self.expires_at = Some(export.expires_at);
        self.export_status = Some(export.export_status);
        self
    }
}

/// The range a report covers.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RangeView {
    /// Inclusive start, or null.
    #[serde(serialize_with = "timestamp::option::serialize")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub start_date: Option<DateTime<Utc>>,
    /// Exclusive end, or null.
    #[serde(serialize_with = "timestamp::option::serialize")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub end_date: Option<DateTime<Utc>>,
    /// Time zone of plain dates and periods.
    pub timezone: String,
}

/// Report metrics.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct MetricsView {
    /// Assignments in the range.
    pub total_assignments: i64,
    /// Of those, completed.
    pub completed_assignments: i64,
    /// Mean of completedAt − assignedAt over completed assignments, as text; null when none.
    #[schema(example = "2 days 4 hours")]
    pub average_completion_time: Option<String>,
    /// The same in whole seconds; null when none.
    pub average_completion_seconds: Option<u64>,
    /// completed / total × 100, rounded half away from zero to one decimal; 0 when there are none.
    #[schema(example = 66.7)]
    pub completion_rate: f64,
    /// In progress now.
    pub in_progress_assignments: i64,
    /// Pending now.
    pub pending_assignments: i64,
    /// Overdue now (past due and not completed).
    pub overdue_assignments: i64,
}

impl From<Metrics> for MetricsView {
    fn from(metrics: Metrics) -> Self {
        let seconds = metrics.average_completion_seconds.map(whole_seconds);
        Self {
            total_assignments: metrics.total,
            completed_assignments: metrics.completed,
            average_completion_time: seconds.map(humanize_seconds),
            average_completion_seconds: seconds,
            completion_rate: completion_rate(metrics.completed, metrics.total),
            in_progress_assignments: metrics.in_progress,
            pending_assignments: metrics.pending,
            overdue_assignments: metrics.overdue,
        }
    }
}

/// A schedule of the flow.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScheduleView {
    /// Identifier.
    pub schedule_id: ScheduleId,
    /// Assignee.
    pub assignee_email: String,
    /// Scheduled time.
    #[serde(serialize_with = "timestamp::serialize")]
    #[schema(value_type = String, format = DateTime)]
    pub scheduled_at: DateTime<Utc>,
    /// Status of the current occurrence (pending before the first).
    pub status: AssignmentStatus,
    /// none, daily, weekly, monthly, quarterly or yearly.
    pub recurrence: String,
}

impl From<ScheduleRow> for ScheduleView {
    fn from(row: ScheduleRow) -> Self {
        Self {
            status: row.status(),
            schedule_id: row.id,
            assignee_email: row.assignee_email,
            scheduled_at: row.scheduled_at,
            recurrence: row.recurrence,
        }
    }
}

/// An assignment in a report.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReportAssignment {
    /// Identifier.
    pub assignment_id: AssignmentId,
    /// Assignee.
    pub assignee_email: String,
    /// Assignment time.
    #[serde(serialize_with = "timestamp::serialize")]
    #[schema(value_type = String, format = DateTime)]
    pub assigned_at: DateTime<Utc>,
    /// Status at `generatedAt` (overdue as soon as the due date passes).
    pub status: AssignmentStatus,
    /// Modules completed.
    pub completed_modules: i64,
    /// Modules in the flow.
    pub total_modules: i64,
    /// Due date.
    #[serde(serialize_with = "timestamp::option::serialize")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub due_date: Option<DateTime<Utc>>,
    /// First module activity.
    #[serde(serialize_with = "timestamp::option::serialize")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub started_at: Option<DateTime<Utc>>,
    /// Completion time.
    #[serde(serialize_with = "timestamp::option::serialize")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub completed_at: Option<DateTime<Utc>>,
    /// low, medium or high.
    pub priority: String,
    /// Modules started or completed, in flow order (when `detailed`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub module_progress: Option<Vec<ModuleProgressView>>,
}

impl ReportAssignment {
    fn new(
        row: ReportRow,
        total_modules: i64,
        module_progress: Option<Vec<ModuleProgressView>>,
    ) -> Self {
        Self {
            status: row.status(),
            assignment_id: row.id,
            assignee_email: row.assignee_email,
            assigned_at: row.assigned_at,
            completed_modules: row.completed_modules,
            total_modules,
            due_date: row.due_at,
            started_at: row.started_at,
            completed_at: row.completed_at,
            priority: row.priority,
            module_progress,
        }
    }
}

/// Figures of one period. `totalAssignments` is always there; the others when asked.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AggregateView {
    /// Label: `2026-11-22`, `2026-W47`, `2026-11`, `2026-Q4` or `2026`.
    pub period: String,
    /// First instant of the period (in the report's time zone, shown in UTC).
    #[serde(serialize_with = "timestamp::serialize")]
    #[schema(value_type = String, format = DateTime)]
    pub period_start: DateTime<Utc>,
    /// First instant of the next period.
    #[serde(serialize_with = "timestamp::serialize")]
    #[schema(value_type = String, format = DateTime)]
    pub period_end: DateTime<Utc>,
    /// Assignments made in the period (within the requested range).
    pub total_assignments: i64,
    /// Of those, completed (completed_assignments).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub completed_assignments: Option<i64>,
    /// Of those, overdue now (overdue_assignments).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub overdue_assignments: Option<i64>,
    /// completed / total × 100, one decimal (completion_rate).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub completion_rate: Option<f64>,
    /// Mean of completedAt − startedAt over completed ones, as text; null when none
    /// (average_duration).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub average_duration: Option<Option<String>>,
    /// The same in whole seconds (average_duration).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<u64>)]
    pub average_duration_seconds: Option<Option<u64>>,
}

impl AggregateView {
    /// The view of a row with the figures `spec` asks for.
    pub fn new(row: &AggregateRow, spec: &AggregateSpec) -> Self {
        let seconds = row.average_duration_seconds.map(whole_seconds);
        let wants = |metric| spec.wants(metric);
        Self {
            period: spec.by.label(row.local_start),
            period_start: row.period_start,
            period_end: row.period_end,
            total_assignments: row.total,
            completed_assignments: wants(AggregateMetric::CompletedAssignments)
                .then_some(row.completed),
            overdue_assignments: wants(AggregateMetric::OverdueAssignments)
                .then_some(row.overdue()),
            completion_rate: wants(AggregateMetric::CompletionRate)
                .then(|| completion_rate(row.completed, row.total)),
            average_duration: wants(AggregateMetric::AverageDuration)
                .then(|| seconds.map(humanize_seconds)),
            average_duration_seconds: wants(AggregateMetric::AverageDuration).then_some(seconds),
        }
    }
}

/// Where an export will be downloaded.
#[derive(Debug, Clone)]
pub struct ExportResult {
    /// Identifier of the export.
    pub export_id: ExportId,
    /// `{base_url}/v1/exports/<exportId>`.
    pub download_url: String,
    /// When the download address expires.
    pub expires_at: DateTime<Utc>,
    /// `pending` at first.
    pub export_status: String,
}

/// Report on a flow.
///
/// Metrics and aggregates describe every assignment whose `assignedAt` is in the range; `status`
/// narrows the `assignments` and `schedules` lists. Pages follow `nextCursor`. With `format`, the
/// response also says where the whole report will be downloadable once generated.
#[utoipa::path(
    post,
    path = "/v1/flows/report",
    tag = "reports",
    request_body = ReportRequest,
    responses(
        (status = 200, description = "The report (and the export result when a format was asked)", body = ReportResponse),
        (status = 400, description = "Invalid request, e.g. endDate not after startDate", body = ErrorBody),
        (status = 404, description = "No such flow in this organization", body = ErrorBody),
        (status = 429, description = "Rate limit exceeded", body = ErrorBody),
        (status = 503, description = "The export could not be queued durably; nothing was accepted", body = ErrorBody),
    )
)]
pub async fn report(
    State(state): State<AppState>,
    auth: Auth,
    request_id: RequestId,
    ApiJson(request): ApiJson<ReportRequest>,
) -> Result<(RateInfo, Json<ReportResponse>), ApiError> {
    let now = Utc::now();
    let input = ReportInput::parse(request, auth.zone)?;
    let limit = Operation::Report.limit(&auth);
    let page_cost = ceil_div(input.limit, PAGE_ROWS_PER_REQUEST);
    let mut rate = state
        .limiter
        .check(&auth, Operation::Report, capped_cost(page_cost, limit))
        .await?;
    let flow = match input.flow_id {
        Some(flow_id) => state.caches.flow(&state.db, auth.org_id(), flow_id).await?,
        None => None,
    }
    .ok_or_else(|| ApiError::not_found("flow"))?;
    let parameters = input.parameters(flow.id);
    let response = build(
        &state.db,
        &flow,
        &parameters,
        input.cursor,
        input.limit,
        now,
    )
    .await?;
    if let Some(format) = input.format {
        // A PDF shows at most PDF_ROW_LIMIT rows; CSV and Excel hold every matching one.
        let rows = match format {
            ExportFormat::Pdf => response.metrics_matching.min(PDF_ROW_LIMIT),
            ExportFormat::Csv | ExportFormat::Excel => response.metrics_matching,
        };
        let export_cost = ceil_div(rows, EXPORT_ROWS_PER_REQUEST);
        if export_cost > 0 {
            rate = state
                .limiter
                .check(&auth, Operation::Report, capped_cost(export_cost, limit))
                .await?;
        }
        let export = request_export(
            &state,
            &auth,
            &parameters,
            format,
            rows,
            request_id.caller_supplied(),
            now,
        )
        .await?;
        return Ok((rate, Json(response.report.with_export(export))));
    }
    Ok((rate, Json(response.report)))
}

/// `value / divisor` rounded up, for non-negative values.
fn ceil_div(value: i64, divisor: i64) -> i64 {
    (value.max(0) + divisor - 1) / divisor
}

/// A cost never above the limit: a bucket of `limit` tokens could never grant more, so a larger
/// request takes the whole allowance instead of being refused forever.
fn capped_cost(cost: i64, limit: u32) -> u32 {
    u32::try_from(cost)
        .unwrap_or(u32::MAX)
        .clamp(1, limit.max(1))
}

/// A report and the number of rows its status filter keeps (what an export holds).
struct Built {
    report: ReportResponse,
    metrics_matching: i64,
}

async fn build(
    pool: &PgPool,
    flow: &FlowSummary,
    parameters: &ReportParameters,
    cursor: Option<PageCursor>,
    limit: i64,
    now: DateTime<Utc>,
) -> Result<Built, ApiError> {
    let (lower, upper) = parameters.bounds();
    let scope = Scope {
        flow_id: flow.id,
        lower,
        upper,
        now,
        status: parameters.status,
    };
    // An aggregated report reads the range once: its metrics are the sums of the periods.
    let figures = async {
        match &parameters.aggregate {
            Some(spec) => {
                let rows = aggregate(pool, &scope, spec, &parameters.timezone).await?;
                let metrics = Metrics::from_aggregates(&rows, parameters.status);
                let views = rows
                    .iter()
                    .map(|row| AggregateView::new(row, spec))
                    .collect();
                Ok::<_, ApiError>((metrics, Some(views)))
            }
            None => Ok((reports::metrics(pool, &scope).await?, None)),
        }
    };
    let ((metrics, aggregates), mut rows, schedules) = tokio::try_join!(
        figures,
        async {
            reports::page(pool, &scope, cursor, limit + 1)
                .await
                .map_err(ApiError::from)
        },
        async {
            reports::schedules(pool, &scope)
                .await
                .map_err(ApiError::from)
        },
    )?;
    let page_size = usize::try_from(limit).unwrap_or(usize::MAX);
    let next_cursor = if rows.len() > page_size {
        rows.truncate(page_size);
        rows.last().map(|row| row.cursor().encode())
    } else {
        None
    };
    let mut progress = if parameters.detailed && !rows.is_empty() {
        let ids: Vec<AssignmentId> = rows.iter().map(|row| row.id).collect();
        group_progress(assignments::module_progress(pool, &ids).await?)
    } else {
        HashMap::new()
    };
    let assignments = rows
        .into_iter()
        .map(|row| {
            let modules = parameters
                .detailed
                .then(|| progress.remove(&row.id).unwrap_or_default());
            ReportAssignment::new(row, flow.module_count, modules)
        })
        .collect();
    Ok(Built {
        metrics_matching: metrics.matching,
        report: ReportResponse {
            flow_id: flow.id,
            flow_name: flow.name.clone(),
            generated_at: now,
            range: RangeView {
                start_date: parameters.start,
                end_date: parameters.end,
                timezone: parameters.timezone.clone(),
            },
            metrics: metrics.into(),
            schedules: schedules.into_iter().map(ScheduleView::from).collect(),
            assignments,
            next_cursor,
            aggregates,
            export_id: None,
            download_url: None,
            expires_at: None,
            export_status: None,
        },
    })
}

fn group_progress(
    records: Vec<ModuleProgressRecord>,
) -> HashMap<AssignmentId, Vec<ModuleProgressView>> {
    let mut grouped: HashMap<AssignmentId, Vec<ModuleProgressView>> = HashMap::new();
    // Records come ordered by assignment, then module position.
    for record in records {
        grouped
            .entry(record.assignment_id)
            .or_default()
            .push(ModuleProgressView::from(record));
    }
    grouped
}

/// Periods aggregated together before the work is split across two connections.
const PERIODS_PER_QUERY: usize = 8;

/// The aggregate rows of the scope. A long list of periods is read in two halves on two
/// connections at once, so Postgres works on both on separate cores.
async fn aggregate(
    pool: &PgPool,
    scope: &Scope,
    spec: &AggregateSpec,
    zone: &str,
) -> Result<Vec<AggregateRow>, ApiError> {
    let mut connection = pool.acquire().await?;
    let periods = reports::aggregate_periods(&mut connection, scope, spec, zone)
        .await
        .map_err(|error| match error {
            AggregateError::Invalid(invalid) => ApiError::from(invalid),
            AggregateError::Database(error) => ApiError::from(error),
        })?;
    if periods.len() < 2 * PERIODS_PER_QUERY {
        return Ok(reports::period_figures(&mut connection, scope, &periods).await?);
    }
    let (first, second) = periods.split_at(periods.len() / 2);
    let (mut rows, rest) = tokio::try_join!(
        reports::period_figures(&mut connection, scope, first),
        async {
            let mut other = pool.acquire().await?;
            reports::period_figures(&mut other, scope, second).await
        },
    )?;
    rows.extend(rest);
    Ok(rows)
}

/// Records the export and queues it for a report-worker. If the command cannot be queued
/// durably, the row is removed again and the caller gets 503: nothing is left half-done.
async fn request_export(
    state: &AppState,
    caller: &Caller,
    parameters: &ReportParameters,
    format: ExportFormat,
    rows: i64,
    request_id: Option<&str>,
    now: DateTime<Utc>,
) -> Result<ExportResult, ApiError> {
    let id = ExportId::new();
    let expires_at = now + EXPORT_VALIDITY;
    exports::create(
        &state.db,
        &NewExport {
            id,
            org_id: caller.org_id(),
            format,
            parameters: parameters.clone(),
            rows_total: rows,
            request_id: request_id.map(str::to_owned),
            created_at: now,
            expires_at,
        },
    )
    .await?;
    let command = ExportCommand {
        version: EXPORT_COMMAND_VERSION,
        export_id: id,
        org_id: caller.org_id(),
    };
    let published = match serde_json::to_vec(&command) {
        Ok(payload) => {
            let exchange = state.topology().commands_exchange();
            let message_id = id.to_string();
            state
                .publisher
                .publish(Outgoing {
                    exchange: &exchange,
                    routing_key: QueueKind::Export.suffix(),
                    payload: &payload,
                    message_id: &message_id,
                    kind: "export",
                    request_id,
                    headers: &[],
                })
                .await
                .map_err(ApiError::from)
        }
        Err(error) => Err(ApiError::Internal(
            anyhow::Error::new(error).context("encoding an export command"),
        )),
    };
    if let Err(error) = published {
        if let Err(cleanup) = exports::delete(&state.db, id).await {
            // A worker still finds the row by polling, so the export is not lost either way.
            tracing::error!(%cleanup, export_id = %id, "could not remove an export that was not queued");
        }
        return Err(error);
    }
    Ok(ExportResult {
        export_id: id,
        download_url: format!(
            "{}/v1/exports/{id}",
            state.config.public_base_url.trim_end_matches('/')
        ),
        expires_at,
        export_status: "pending".to_owned(),
    })
}
