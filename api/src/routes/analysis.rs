//! `GET /v1/flows/{id}/analysis` (issue 39): the workflow efficiency of one flow — module
//! funnel, time per module, time to complete and its trend, share completed by the due date —
//! over the assignments made in a range. The rules live in `flow_app::analysis`; this file holds
//! the wire types and the handler. See docs/analysis.md.

use axum::Json;
use axum::extract::State;
use chrono::{DateTime, Utc};
use flow_app::analysis::{self as service, AnalysisFields, FlowAnalysis, on_time_share};
use flow_app::ratelimit::Operation;
use flow_common::db::analysis::Spread;
use flow_domain::duration::humanize_seconds;
use flow_domain::ids::{FlowId, ModuleId};
use flow_domain::report::whole_seconds;
use flow_domain::timestamp;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::download::DataAsOf;
use crate::error::{ApiError, ErrorBody, RateHeaders};
use crate::extract::{ApiPath, ApiQuery, Auth};
use crate::state::AppState;

/// Routes of this module.
pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(flow_analysis))
}

/// What to analyse.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(rename_all = "camelCase")]
pub struct AnalysisQuery {
    /// Start of the range of `assignedAt`, inclusive: RFC 3339, or `YYYY-MM-DD` (the start of
    /// that day in the organization's time zone). Default: 90 days before `to`.
    #[param(example = "2026-09-01")]
    pub from: Option<String>,
    /// End of the range, exclusive, the same way; after `from`, at most 731 days after it.
    /// Default: now.
    #[param(example = "2026-12-01")]
    pub to: Option<String>,
    /// Length of the trend's periods, cut in the organization's time zone: `week` (ISO, the
    /// default) or `month`.
    #[param(example = "month")]
    pub period: Option<String>,
    /// Days without activity after which an open assignment counts as stalled, 1 to 365
    /// (default 7).
    #[param(minimum = 1, maximum = 365, example = 7)]
    pub stalled_after_days: Option<i64>,
}

/// A duration as a median and 90th percentile.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DurationSpreadView {
    /// Durations counted.
    pub samples: i64,
    /// Their median (`percentile_cont(0.5)`), in whole seconds; null without samples.
    pub median_seconds: Option<u64>,
    /// The same in words.
    #[schema(example = "2 days 4 hours")]
    pub median: Option<String>,
    /// Their 90th percentile (`percentile_cont(0.9)`), in whole seconds; null without samples.
    pub p90_seconds: Option<u64>,
    /// The same in words.
    #[schema(example = "6 days 2 hours")]
    pub p90: Option<String>,
}

fn spread_view(spread: Spread) -> DurationSpreadView {
    let median = spread.median.map(whole_seconds);
    let p90 = spread.p90.map(whole_seconds);
    DurationSpreadView {
        samples: spread.samples,
        median_seconds: median,
        median: median.map(humanize_seconds),
        p90_seconds: p90,
        p90: p90.map(humanize_seconds),
    }
}

/// One module's step of the funnel.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct FunnelStepView {
    /// The module.
    pub module_id: ModuleId,
    /// Its name.
    pub name: String,
    /// Its position in the flow (0 first).
    pub position: i32,
    /// Assignments with progress on this module or a later one, or completed.
    pub reached: i64,
    /// Assignments that completed this module.
    pub completed: i64,
    /// Open assignments whose first module not completed is this one, with no activity
    /// (assignment, start, module progress) for `stalledAfterDays` days.
    pub stalled_now: i64,
}

/// The time spent in one module.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModuleTimeView {
    /// The module.
    pub module_id: ModuleId,
    /// Its name.
    pub name: String,
    /// Over its completed progress: the duration the content reported, else completedAt −
    /// startedAt.
    #[serde(flatten)]
    pub time: DurationSpreadView,
}

/// Time to complete of the assignments made in one period.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TrendPeriodView {
    /// Label: `2026-W47` or `2026-11`.
    pub period: String,
    /// First instant of the period (in the organization's time zone, shown in UTC).
    #[serde(serialize_with = "timestamp::serialize")]
    #[schema(value_type = String, format = DateTime)]
    pub period_start: DateTime<Utc>,
    /// First instant of the next period.
    #[serde(serialize_with = "timestamp::serialize")]
    #[schema(value_type = String, format = DateTime)]
    pub period_end: DateTime<Utc>,
    /// Assignments made in the period (and in the range) that are completed; 0 with null
    /// median and p90 for a period without.
    pub completed: i64,
    /// Their median time to complete, in whole seconds.
    pub median_seconds: Option<u64>,
    /// The same in words.
    pub median: Option<String>,
    /// Their 90th percentile, in whole seconds.
    pub p90_seconds: Option<u64>,
    /// The same in words.
    pub p90: Option<String>,
}

/// Time to complete: completedAt − assignedAt of the completed assignments.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TimeToCompleteView {
    /// Over the whole range (`samples`: the completed assignments).
    #[serde(flatten)]
    pub overall: DurationSpreadView,
    /// Per period of assignment, first to last, empty periods included.
    pub trend: Vec<TrendPeriodView>,
}

/// The range analysed.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AnalysisRangeView {
    /// Inclusive start of `assignedAt`.
    #[serde(serialize_with = "timestamp::serialize")]
    #[schema(value_type = String, format = DateTime)]
    pub from: DateTime<Utc>,
    /// Exclusive end.
    #[serde(serialize_with = "timestamp::serialize")]
    #[schema(value_type = String, format = DateTime)]
    pub to: DateTime<Utc>,
    /// Time zone of plain dates and periods (the organization's).
    pub timezone: String,
    /// `week` or `month`.
    pub period: String,
    /// Days without activity after which an open assignment is stalled.
    pub stalled_after_days: i32,
}

/// The workflow efficiency of a flow.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct FlowAnalysisResponse {
    /// The flow.
    pub flow_id: FlowId,
    /// Its name.
    pub flow_name: String,
    /// The instant statuses and stalls were judged at.
    #[serde(serialize_with = "timestamp::serialize")]
    #[schema(value_type = String, format = DateTime)]
    pub generated_at: DateTime<Utc>,
    /// What was analysed.
    pub range: AnalysisRangeView,
    /// Assignments made in the range (cancelled ones left out): everything below counts them.
    pub assignments: i64,
    /// Each module in flow order.
    pub funnel: Vec<FunnelStepView>,
    /// Each module in flow order.
    pub time_per_module: Vec<ModuleTimeView>,
    /// Time to complete, overall and per period.
    pub time_to_complete: TimeToCompleteView,
    /// Completed assignments that had a due date.
    pub completed_with_due_date: i64,
    /// Of those, completed at or before it.
    pub completed_on_time: i64,
    /// `completedOnTime` of `completedWithDueDate` in percent, to one decimal; null when no
    /// completed assignment had a due date.
    #[schema(example = 87.5)]
    pub on_time_share: Option<f64>,
}

fn response(analysis: FlowAnalysis) -> FlowAnalysisResponse {
    let period = analysis.request.period;
    FlowAnalysisResponse {
        flow_id: analysis.flow.id,
        flow_name: analysis.flow.name.clone(),
        generated_at: analysis.generated_at,
        range: AnalysisRangeView {
            from: analysis.request.from,
            to: analysis.request.to,
            timezone: analysis.request.zone.name().to_owned(),
            period: period.as_str().to_owned(),
            stalled_after_days: analysis.request.stalled_after_days,
        },
        assignments: analysis.assignments,
        funnel: analysis
            .modules
            .iter()
            .map(|module| FunnelStepView {
                module_id: module.id,
                name: module.name.clone(),
                position: module.position,
                reached: module.reached,
                completed: module.completed,
                stalled_now: module.stalled,
            })
            .collect(),
        time_per_module: analysis
            .modules
            .iter()
            .map(|module| ModuleTimeView {
                module_id: module.id,
                name: module.name.clone(),
                time: spread_view(module.time),
            })
            .collect(),
        time_to_complete: TimeToCompleteView {
            overall: spread_view(analysis.time_to_complete),
            trend: analysis
                .trend
                .iter()
                .map(|row| {
                    let time = spread_view(row.time);
                    TrendPeriodView {
                        period: period.label(row.bounds.local_start),
                        period_start: row.bounds.period_start,
                        period_end: row.bounds.period_end,
                        completed: time.samples,
                        median_seconds: time.median_seconds,
                        median: time.median,
                        p90_seconds: time.p90_seconds,
                        p90: time.p90,
                    }
                })
                .collect(),
        },
        completed_with_due_date: analysis.completed_with_due_date,
        completed_on_time: analysis.completed_on_time,
        on_time_share: on_time_share(analysis.completed_on_time, analysis.completed_with_due_date),
    }
}

/// Analyse a flow's efficiency.
///
/// Over the flow's assignments made in `[from, to)` (cancelled ones left out): the module funnel
/// (reached, completed, stalled now), the time spent per module (median and p90), the time to
/// complete (median and p90) overall and per week or month of assignment, and the share
/// completed by the due date. Exact at read time; definitions in docs/analysis.md. Read on a
/// replica where one is configured (`X-Data-As-Of`). Counts as one report request.
#[utoipa::path(
    get,
    path = "/v1/flows/{id}/analysis",
    tag = "reports",
    params(("id" = String, Path, description = "Flow id (flow_…)"), AnalysisQuery),
    responses(
        (status = 200, description = "The flow's efficiency over the range", body = FlowAnalysisResponse,
            headers(("X-Data-As-Of" = String, description = "The instant the data is current to (RFC 3339)"))),
        (status = 400, description = "Invalid query: a bad date, to not after from, a range over 731 days, a period other than week or month, stalledAfterDays outside 1..365", body = ErrorBody),
        (status = 404, description = "No such flow in this organization", body = ErrorBody),
        (status = 429, description = "Report limit exceeded", body = ErrorBody),
    )
)]
pub async fn flow_analysis(
    State(state): State<AppState>,
    auth: Auth,
    ApiPath(id): ApiPath<String>,
    ApiQuery(query): ApiQuery<AnalysisQuery>,
) -> Result<(RateHeaders, DataAsOf, Json<FlowAnalysisResponse>), ApiError> {
    let request = service::check(
        AnalysisFields {
            from: query.from,
            to: query.to,
            period: query.period,
            stalled_after_days: query.stalled_after_days,
        },
        auth.zone,
        Utc::now(),
    )?;
    let Some(flow_id) = FlowId::parse(&id) else {
        return Err(super::unknown_id(&state, &auth, Operation::Report, "flow").await);
    };
    let analysis = service::analyse(&state, auth.acting(), flow_id, request).await?;
    Ok((
        RateHeaders(analysis.rate),
        DataAsOf(analysis.data_as_of),
        Json(response(analysis)),
    ))
}
