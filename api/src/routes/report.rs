//! `POST /v1/flows/report`: metrics, schedules and a keyset page of assignments of one flow,
//! optionally aggregated by period and exported as a file.
//!
//! Figures are exact at read time: the queries derive `overdue` from the due date, so the status
//! filter, the lists and the metrics agree with what the scheduler will record. An export request
//! answers with the normal report plus where the file will be; the report-worker writes the file.
//! Validation and the rate cost live in `flow_domain::report` (`params`, `cost`), assembly in
//! `flow_app::engine::report`; this file holds the wire types and the handler.

use axum::Json;
use axum::extract::State;
use chrono::{DateTime, Utc};
use flow_app::engine::report::{Page, Report};
use flow_app::reports::{self, ReportQuery};
use flow_common::db::exports::ExportRecord;
use flow_common::db::flows::FlowSummary;
use flow_common::db::reports::{AggregateRow, Metrics, ReportRow, ScheduleRow};
use flow_domain::duration::humanize_seconds;
use flow_domain::ids::{AssignmentId, ExportId, FlowId, ScheduleId};
use flow_domain::report::params::{AggregateFields, ReportFields, ReportParams};
use flow_domain::report::{
    AggregateMetric, AggregateSpec, ExportFormat, ExportStatus, ReportParameters, completion_rate,
    whole_seconds,
};
use flow_domain::{AssignmentStatus, timestamp};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::download::DataAsOf;
use crate::error::{ApiError, ErrorBody, RateHeaders};
use crate::extract::{ApiJson, Auth, RequestId};
use crate::routes::assignments::ModuleProgressView;
use crate::state::AppState;

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
    /// overdue, cancelled). The metrics and aggregates still describe every assignment in the
    /// range (but the cancelled ones, unless `includeCancelled`).
    #[schema(example = "overdue")]
    pub status: Option<String>,
    /// Count cancelled assignments in the metrics and list them (default false: a report leaves
    /// them out, so it reads as it did before cancelling existed). `status: cancelled` implies it.
    pub include_cancelled: Option<bool>,
    /// Include each assignment's module progress (modules started or completed, in flow order).
    /// A page then holds at most 100,000 module-progress entries (limit × the flow's modules): a
    /// larger `limit` is refused (400), and without one the page shrinks to fit. Each started
    /// 10,000 entries counts as one more report request.
    pub detailed: Option<bool>,
    /// Also export the whole report as a file of this format.
    #[schema(value_type = Option<ExportFormat>, example = "csv")]
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

impl From<ReportRequest> for ReportFields {
    fn from(request: ReportRequest) -> Self {
        Self {
            flow_id: request.flow_id,
            start_date: request.start_date,
            end_date: request.end_date,
            status: request.status,
            include_cancelled: request.include_cancelled,
            detailed: request.detailed,
            format: request.format,
            aggregate: request.aggregate.map(|aggregate| AggregateFields {
                by: aggregate.by,
                metrics: aggregate.metrics,
            }),
            timezone: request.timezone,
            limit: request.limit,
            cursor: request.cursor,
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
    pub export_status: Option<ExportStatus>,
}

impl ReportResponse {
    /// The answer for a report on `flow` and one page of its assignments.
    fn new(
        flow: &FlowSummary,
        parameters: &ReportParameters,
        report: Report,
        mut page: Page,
    ) -> Self {
        let assignments = page
            .rows
            .into_iter()
            .map(|row| {
                let modules = parameters.detailed.then(|| {
                    page.progress
                        .remove(&row.id)
                        .unwrap_or_default()
                        .into_iter()
                        .map(ModuleProgressView::from)
                        .collect()
                });
                ReportAssignment::new(row, flow.module_count, modules)
            })
            .collect();
        let aggregates = parameters.aggregate.as_ref().map(|spec| {
            report
                .aggregates
                .unwrap_or_default()
                .iter()
                .map(|row| AggregateView::new(row, spec))
                .collect()
        });
        Self {
            flow_id: flow.id,
            flow_name: flow.name.clone(),
            generated_at: report.generated_at,
            range: RangeView {
                start_date: parameters.start,
                end_date: parameters.end,
                timezone: parameters.timezone.clone(),
            },
            metrics: report.metrics.into(),
            schedules: report
                .schedules
                .into_iter()
                .map(ScheduleView::from)
                .collect(),
            assignments,
            next_cursor: page.next.map(|cursor| cursor.encode()),
            aggregates,
            export_id: None,
            download_url: None,
            expires_at: None,
            export_status: None,
        }
    }

    /// Adds where the export will be. The fields sit beside the report's own rather than in a
    /// nested object, as the contract shows them.
    fn with_export(mut self, export: &ExportRecord, base_url: &str) -> Self {
        self.export_id = Some(export.id);
        self.download_url = Some(format!(
            "{}/v1/exports/{}",
            base_url.trim_end_matches('/'),
            export.id
        ));
        self.expires_at = Some(export.expires_at);
        self.export_status = Some(export.status);
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
    /// Cancelled, counted in `totalAssignments` (only when the request has `includeCancelled`
    /// or asks for `status: cancelled`; cancelled assignments are left out otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub cancelled_assignments: Option<i64>,
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
            cancelled_assignments: metrics.cancelled,
        }
    }
}

/// A schedule of the flow.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = ReportScheduleView)]
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
            status: row.status,
            schedule_id: row.id,
            assignee_email: row.assignee_email,
            scheduled_at: row.scheduled_at,
            recurrence: row.recurrence.as_str().to_owned(),
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
    /// False when the assignee has been deactivated (offboarded): the assignment stays in
    /// reports as compliance history.
    pub user_active: bool,
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
    /// When the completion expires, for a flow with a validity (`validFor`); absent otherwise.
    /// An expired completion keeps `status` `completed`: the report of its cycle stays as it was.
    #[serde(
        serialize_with = "timestamp::option::serialize",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub expires_at: Option<DateTime<Utc>>,
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
            status: row.status,
            assignment_id: row.id,
            assignee_email: row.assignee_email,
            user_active: row.user_active,
            assigned_at: row.assigned_at,
            completed_modules: row.completed_modules,
            total_modules,
            due_date: row.due_at,
            started_at: row.started_at,
            completed_at: row.completed_at,
            expires_at: row.expires_at,
            priority: row.priority.as_str().to_owned(),
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
    /// completed / total × 100, one decimal (completion_rate); null for a period without
    /// assignments (no data, rather than 0 %).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<f64>)]
    pub completion_rate: Option<Option<f64>>,
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
                .then(|| (row.total > 0).then(|| completion_rate(row.completed, row.total))),
            average_duration: wants(AggregateMetric::AverageDuration)
                .then(|| seconds.map(humanize_seconds)),
            average_duration_seconds: wants(AggregateMetric::AverageDuration).then_some(seconds),
        }
    }
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
        (status = 200, description = "The report (and the export result when a format was asked)", body = ReportResponse,
            headers(("X-Data-As-Of" = String, description = "The instant the report's data is current to (RFC 3339): reports may be read on a replica up to REPORT_MAX_STALENESS (default 5 s) behind the primary"))),
        (status = 400, description = "Invalid request, e.g. endDate not after startDate", body = ErrorBody),
        (status = 404, description = "No such flow in this organization", body = ErrorBody),
        (status = 429, description = "Rate limit exceeded, or (with a format) the organization has as many exports waiting or running, or as many bytes of export files, as allowed", body = ErrorBody),
        (status = 503, description = "The database is unavailable; no export was recorded", body = ErrorBody),
    )
)]
pub async fn report(
    State(state): State<AppState>,
    auth: Auth,
    request_id: RequestId,
    ApiJson(request): ApiJson<ReportRequest>,
) -> Result<(RateHeaders, DataAsOf, Json<ReportResponse>), ApiError> {
    let limit_given = request.limit.is_some();
    let query = ReportQuery {
        params: ReportParams::parse(request.into(), auth.zone)?,
        limit_given,
    };
    let answer =
        reports::report(&state, auth.acting(), query, request_id.caller_supplied()).await?;
    let mut response =
        ReportResponse::new(&answer.flow, &answer.parameters, answer.report, answer.page);
    if let Some(export) = &answer.export {
        response = response.with_export(export, &state.config.public_base_url);
    }
    Ok((
        RateHeaders(answer.rate),
        DataAsOf(answer.data_as_of),
        Json(response),
    ))
}
