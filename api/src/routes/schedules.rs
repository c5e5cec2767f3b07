//! Recurring training: `POST /v1/flows/schedule`, `GET /v1/schedules` (newest first),
//! `GET /v1/schedules/{id}`, `DELETE /v1/schedules/{id}`. The scheduler assigns each occurrence
//! through the normal assign path when it comes.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use flow_app::assign::{AssignFields, AssignInput};
use flow_app::ratelimit::{Operation, page_cost};
use flow_app::schedules::{self as service, ScheduleFields};
use flow_common::db::schedules;
use flow_domain::ids::{AssignmentId, FlowId, ScheduleId};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::pagination::{Page, PageQuery};
use crate::error::{ApiError, ErrorBody, RateHeaders};
use crate::extract::{ApiJson, ApiPath, ApiQuery, Auth};
use crate::state::AppState;

/// Routes of this module.
pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(create_schedule))
        .routes(routes!(list_schedules))
        .routes(routes!(get_schedule, delete_schedule))
}

/// Body of the schedule operation.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ScheduleRequest {
    /// Flow to assign.
    #[schema(required = true, value_type = String)]
    pub flow_id: Option<String>,
    /// Assignee; must exist in the organization.
    #[schema(required = true, value_type = String, example = "alice@example.com")]
    pub user_email: Option<String>,
    /// First occurrence: RFC 3339, or `YYYY-MM-DD` (start of that day in the organization's time
    /// zone). A time in the past (at most one year ago) is assigned at once.
    #[schema(required = true, value_type = String, example = "2027-01-31T09:00:00Z")]
    pub scheduled_at: Option<String>,
    /// none (default), daily, weekly, monthly, quarterly or yearly.
    #[schema(example = "monthly")]
    pub recurrence: Option<String>,
    /// Each assignment is due this many days after its occurrence (1 to 3,650).
    #[schema(minimum = 1, maximum = 3650)]
    pub due_in_days: Option<i32>,
    /// low, medium (default) or high.
    pub priority: Option<String>,
    /// Notes of each assignment, at most 2,000 characters (line breaks allowed).
    #[schema(max_length = 2000)]
    pub notes: Option<String>,
}

/// A schedule.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScheduleView {
    /// Identifier.
    pub schedule_id: ScheduleId,
    /// Flow.
    pub flow_id: FlowId,
    /// Flow name.
    pub flow_name: String,
    /// Assignee.
    pub assignee_email: String,
    /// Next (or only) occurrence.
    #[serde(serialize_with = "flow_domain::timestamp::serialize")]
    #[schema(value_type = String, format = DateTime)]
    pub scheduled_at: DateTime<Utc>,
    /// Status of the current occurrence's assignment (pending before the first).
    pub status: String,
    /// none, daily, weekly, monthly, quarterly or yearly.
    pub recurrence: String,
    /// Occurrences assigned so far.
    pub occurrences: i32,
    /// False once a one-off schedule has run.
    pub active: bool,
    /// Days from an occurrence to its due date.
    pub due_in_days: Option<i32>,
    /// Priority of the assignments.
    pub priority: String,
    /// Notes of the assignments.
    pub notes: Option<String>,
    /// The assignment of the latest occurrence.
    pub current_assignment_id: Option<AssignmentId>,
    /// Creation time.
    #[serde(serialize_with = "flow_domain::timestamp::serialize")]
    #[schema(value_type = String, format = DateTime)]
    pub created_at: DateTime<Utc>,
}

impl From<schedules::ScheduleRecord> for ScheduleView {
    fn from(record: schedules::ScheduleRecord) -> Self {
        Self {
            schedule_id: record.id,
            flow_id: record.flow_id,
            flow_name: record.flow_name,
            assignee_email: record.assignee_email,
            scheduled_at: record.scheduled_at,
            status: record.status.as_str().to_owned(),
            recurrence: record.recurrence.as_str().to_owned(),
            occurrences: record.occurrence,
            active: record.active,
            due_in_days: record.due_in_days,
            priority: record.priority.as_str().to_owned(),
            notes: record.notes,
            current_assignment_id: record.current_assignment_id,
            created_at: record.created_at,
        }
    }
}

/// Schedule a flow for a user, once or recurring.
///
/// Occurrences follow the organization's calendar: a monthly schedule on the 31st falls on the
/// last day of shorter months and returns to the 31st after. Counts as one assign request.
#[utoipa::path(
    post,
    path = "/v1/flows/schedule",
    tag = "schedules",
    request_body = ScheduleRequest,
    responses(
        (status = 201, description = "Scheduled", body = ScheduleView),
        (status = 400, description = "Invalid request", body = ErrorBody),
        (status = 404, description = "Flow or user not found", body = ErrorBody),
        (status = 409, description = "The flow is archived, or the user deactivated", body = ErrorBody),
        (status = 429, description = "Rate limit exceeded", body = ErrorBody),
    )
)]
pub async fn create_schedule(
    State(state): State<AppState>,
    auth: Auth,
    ApiJson(request): ApiJson<ScheduleRequest>,
) -> Result<(StatusCode, RateHeaders, Json<ScheduleView>), ApiError> {
    let rate = RateHeaders(state.limiter.check(&auth, Operation::Assign, 1).await?);
    // The fields a schedule shares with an assign request are validated the same way.
    let input = AssignInput::parse(
        AssignFields {
            flow_id: request.flow_id,
            user_email: request.user_email,
            due_date: None,
            priority: request.priority,
            notes: request.notes,
        },
        auth.zone,
        Utc::now(),
    )?;
    let fields = ScheduleFields {
        flow_id: input.flow_id,
        email: input.email,
        priority: input.priority,
        notes: input.notes,
        scheduled_at: request.scheduled_at,
        recurrence: request.recurrence,
        due_in_days: request.due_in_days,
    };
    let record = service::create(&state, auth.acting(), fields).await?;
    Ok((StatusCode::CREATED, rate, Json(record.into())))
}

/// List the organization's schedules, newest first, in keyset pages: deleted ones are left out,
/// one-off schedules that have run are listed with `active: false`.
#[utoipa::path(
    get,
    path = "/v1/schedules",
    tag = "schedules",
    params(PageQuery),
    responses(
        (status = 200, description = "A page of schedules", body = Page<ScheduleView>),
        (status = 400, description = "Invalid limit or cursor", body = ErrorBody),
        (status = 429, description = "Read limit exceeded", body = ErrorBody),
    )
)]
pub async fn list_schedules(
    State(state): State<AppState>,
    auth: Auth,
    ApiQuery(page): ApiQuery<PageQuery>,
) -> Result<(RateHeaders, Json<Page<ScheduleView>>), ApiError> {
    let limit = page.limit()?;
    let before = page.cursor(ScheduleId::parse)?;
    let rate = state
        .limiter
        .check(&auth, Operation::Read, page_cost(limit))
        .await?;
    let rows = service::list(&state, auth.acting(), before, limit + 1, Utc::now()).await?;
    let page = Page::from_rows(
        rows,
        limit,
        |schedule| schedule.id.to_string(),
        ScheduleView::from,
    );
    Ok((RateHeaders(rate), Json(page)))
}

/// Get a schedule.
#[utoipa::path(
    get,
    path = "/v1/schedules/{id}",
    tag = "schedules",
    params(("id" = String, Path, description = "Schedule id (sch_…)")),
    responses(
        (status = 200, description = "The schedule", body = ScheduleView),
        (status = 404, description = "No such schedule in this organization", body = ErrorBody),
        (status = 429, description = "Read limit exceeded", body = ErrorBody),
    )
)]
pub async fn get_schedule(
    State(state): State<AppState>,
    auth: Auth,
    ApiPath(id): ApiPath<String>,
) -> Result<(RateHeaders, Json<ScheduleView>), ApiError> {
    let rate = RateHeaders(state.limiter.check(&auth, Operation::Read, 1).await?);
    let id = ScheduleId::parse(&id).ok_or_else(|| ApiError::not_found("schedule"))?;
    let record = service::get(&state, auth.acting(), id).await?;
    Ok((rate, Json(record.into())))
}

/// Delete a schedule: no further occurrences; assignments already made stay.
#[utoipa::path(
    delete,
    path = "/v1/schedules/{id}",
    tag = "schedules",
    params(("id" = String, Path, description = "Schedule id (sch_…)")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 404, description = "No such schedule in this organization", body = ErrorBody),
        (status = 429, description = "Write limit exceeded", body = ErrorBody),
    )
)]
pub async fn delete_schedule(
    State(state): State<AppState>,
    auth: Auth,
    ApiPath(id): ApiPath<String>,
) -> Result<(RateHeaders, StatusCode), ApiError> {
    let rate = RateHeaders(state.limiter.check(&auth, Operation::Write, 1).await?);
    let id = ScheduleId::parse(&id).ok_or_else(|| ApiError::not_found("schedule"))?;
    service::cancel(&state, auth.acting(), id).await?;
    Ok((rate, StatusCode::NO_CONTENT))
}
