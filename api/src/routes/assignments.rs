//! Assignments after they are made: `GET /v1/assignments/{id}` (with module progress; ids handed
//! out for duplicates resolve to the assignment they joined), `GET /v1/assignments` (filtered,
//! keyset pages), `POST /v1/assignments/{id}/progress` (module activity), and changing and
//! cancelling (`PATCH /v1/assignments/{id}`, `POST /v1/assignments/{id}/cancel`, and
//! `POST /v1/assignments/cancel/bulk`): each applied by the assign-worker through the progress
//! queue.

use axum::Json;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use flow_app::assignments::{self as service, ChangePosition, ChangeStart, Found};
use flow_app::changes::{self, ChangeFields, ChangeInput, MAX_BULK_CANCELS, Target};
use flow_app::progress::{self, ProgressFields, ProgressInput};
use flow_app::ratelimit::{Operation, RateInfo, page_cost};
use flow_common::db::assignments::{
    AssignmentRecord, ListFilter, ModuleProgressRecord, ModuleState,
};
use flow_common::db::dead_letters::AssignmentFailure;
use flow_domain::events::InboundEventRef;
use flow_domain::ids::{AssignmentId, EnrollmentRuleId, FlowId, ModuleId, ScheduleId, UserId};
use flow_domain::messages::AssignCommand;
use flow_domain::report::PageCursor;
use flow_domain::{AssignmentStatus, DayBound, Email, ModuleStatus, parse_date_input};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::pagination::{Page, PageQuery};
use crate::error::{ApiError, ErrorBody, RateHeaders};
use crate::extract::{ApiJson, ApiPath, ApiQuery, Auth, OptionalApiJson, RequestId, present};
use crate::routes::bulk::{self, Allowance};
use crate::state::AppState;

/// Routes of this module.
pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(get_assignment, update_assignment))
        .routes(routes!(list_assignments))
        .routes(routes!(list_user_assignments))
        .routes(routes!(record_progress))
        .routes(routes!(cancel_assignment))
        .routes(routes!(cancel_bulk))
}

/// An assignment.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AssignmentView {
    /// Identifier.
    pub assignment_id: AssignmentId,
    /// Flow.
    pub flow_id: FlowId,
    /// Flow name.
    pub flow_name: String,
    /// Assignee.
    pub user_id: UserId,
    /// Assignee e-mail.
    pub assignee_email: String,
    /// pending, in_progress, completed, overdue (as soon as the due date passes) or cancelled;
    /// `failed` only for an id whose command could not be persisted.
    pub status: AssignmentState,
    /// low, medium or high.
    pub priority: String,
    /// Notes for the assignee.
    pub notes: Option<String>,
    /// Due date.
    #[serde(serialize_with = "flow_domain::timestamp::option::serialize")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub due_date: Option<DateTime<Utc>>,
    /// Assignment time.
    #[serde(serialize_with = "flow_domain::timestamp::serialize")]
    #[schema(value_type = String, format = DateTime)]
    pub assigned_at: DateTime<Utc>,
    /// First module activity.
    #[serde(serialize_with = "flow_domain::timestamp::option::serialize")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub started_at: Option<DateTime<Utc>>,
    /// Completion time.
    #[serde(serialize_with = "flow_domain::timestamp::option::serialize")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub completed_at: Option<DateTime<Utc>>,
    /// When it was cancelled (status `cancelled` only).
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "flow_domain::timestamp::option::serialize"
    )]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub cancelled_at: Option<DateTime<Utc>>,
    /// Why it was cancelled, when the canceller said (status `cancelled` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cancellation_reason: Option<String>,
    /// When this completion expires (a flow with a validity, `validFor`): completion plus the
    /// validity on the organization's calendar, fixed at completion.
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "flow_domain::timestamp::option::serialize"
    )]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub expires_at: Option<DateTime<Utc>>,
    /// When it expired without a renewal completed in time (the status stays `completed`: the
    /// completion still counts for its cycle).
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "flow_domain::timestamp::option::serialize"
    )]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub expired_at: Option<DateTime<Utc>>,
    /// The renewal assignment made for this completion.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub renewed_by: Option<AssignmentId>,
    /// The completion this assignment renews.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub renewal_of: Option<AssignmentId>,
    /// Its last change (made, progressed, changed, cancelled, renewed, expired); absent for a
    /// `failed` id. The change feed (`updatedSince`) lists assignments in the order of it.
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "flow_domain::timestamp::option::serialize"
    )]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub updated_at: Option<DateTime<Utc>>,
    /// Modules completed.
    pub completed_modules: i64,
    /// Modules in the flow.
    pub total_modules: i64,
    /// The schedule that created it, if any.
    pub schedule_id: Option<ScheduleId>,
    /// What made it when it was not a direct assign: the enrollment rule, for a rule's
    /// assignment (`{"enrollmentRuleId": "enr_…"}`), or the inbound event and its trigger
    /// (`{"event": {"source", "type", "id", "triggerId"}}`), as in its `flow.assigned` event.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<AssignmentSource>,
    /// Why the assignment could not be persisted (status `failed` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure_reason: Option<String>,
    /// When it failed (status `failed` only).
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "flow_domain::timestamp::option::serialize"
    )]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub failed_at: Option<DateTime<Utc>>,
    /// Every module of the flow in flow order, each with its status (`not_started` when nothing
    /// was reported of it), on `GET /v1/assignments/{id}`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub module_progress: Option<Vec<ModuleProgressView>>,
}

/// What made an assignment that no assign request made: one of the two.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AssignmentSource {
    /// The enrollment rule that assigned it.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub enrollment_rule_id: Option<EnrollmentRuleId>,
    /// The inbound event (`POST /v1/events`) whose trigger assigned it.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub event: Option<InboundEventRef>,
}

impl AssignmentView {
    /// The view of a record at `now` (status derived at read time).
    pub fn new(
        record: AssignmentRecord,
        module_progress: Option<Vec<ModuleProgressView>>,
        now: DateTime<Utc>,
    ) -> Self {
        Self {
            status: record.status(now).into(),
            assignment_id: record.id,
            flow_id: record.flow_id,
            flow_name: record.flow_name,
            user_id: record.user_id,
            assignee_email: record.assignee_email,
            priority: record.priority.as_str().to_owned(),
            notes: record.notes,
            due_date: record.due_at,
            assigned_at: record.assigned_at,
            started_at: record.started_at,
            completed_at: record.completed_at,
            cancelled_at: record.cancelled_at,
            cancellation_reason: record.cancel_reason,
            expires_at: record.expires_at,
            expired_at: record.expired_at,
            renewed_by: record.renewed_by,
            renewal_of: record.renewal_of,
            updated_at: Some(record.updated_at),
            completed_modules: record.completed_modules,
            total_modules: record.total_modules,
            schedule_id: record.schedule_id,
            source: (record.enrollment_rule_id.is_some() || record.event_source.is_some()).then(
                || AssignmentSource {
                    enrollment_rule_id: record.enrollment_rule_id,
                    event: record.event_source.map(|json| json.0),
                },
            ),
            failure_reason: None,
            failed_at: None,
            module_progress,
        }
    }
}

/// The status an assignment reads with: its lifecycle status, or `failed` for an id whose command
/// could not be persisted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum AssignmentState {
    /// Not started.
    Pending,
    /// Started.
    InProgress,
    /// Every module completed.
    Completed,
    /// Past its due date and not completed.
    Overdue,
    /// Cancelled before completion.
    Cancelled,
    /// Its command was dead-lettered (see `failureReason`).
    Failed,
}

impl From<AssignmentStatus> for AssignmentState {
    fn from(status: AssignmentStatus) -> Self {
        match status {
            AssignmentStatus::Pending => Self::Pending,
            AssignmentStatus::InProgress => Self::InProgress,
            AssignmentStatus::Completed => Self::Completed,
            AssignmentStatus::Overdue => Self::Overdue,
            AssignmentStatus::Cancelled => Self::Cancelled,
        }
    }
}

/// Where a module stands within an assignment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ModuleProgressStatus {
    /// Nothing reported of it yet (listed by `GET /v1/assignments/{id}`, which shows every
    /// module; reports list only modules started or completed).
    NotStarted,
    /// Started, not finished.
    InProgress,
    /// Finished.
    Completed,
}

impl From<ModuleStatus> for ModuleProgressStatus {
    fn from(status: ModuleStatus) -> Self {
        match status {
            ModuleStatus::InProgress => Self::InProgress,
            ModuleStatus::Completed => Self::Completed,
        }
    }
}

/// Progress of one module.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModuleProgressView {
    /// Module.
    pub module_id: ModuleId,
    /// Module name.
    pub module_name: String,
    /// completed, in_progress, or not_started (only where every module is listed).
    pub status: ModuleProgressStatus,
    /// Present for completed modules.
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "flow_domain::timestamp::option::serialize"
    )]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub completed_at: Option<DateTime<Utc>>,
    /// When the module was started (present for modules in progress).
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "flow_domain::timestamp::option::serialize"
    )]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub started_at: Option<DateTime<Utc>>,
    /// Scaled score, -1..1 (as xAPI's `result.score.scaled`; 0.85 is 85 %), when reported.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub score: Option<f64>,
    /// Whether the learner passed the module, when reported.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub success: Option<bool>,
    /// Time spent in the module, in seconds, when reported.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duration_seconds: Option<i64>,
}

impl From<ModuleProgressRecord> for ModuleProgressView {
    fn from(record: ModuleProgressRecord) -> Self {
        let status = record.status;
        Self {
            module_id: record.module_id,
            module_name: record.module_name,
            completed_at: if status == ModuleStatus::Completed {
                record.completed_at
            } else {
                None
            },
            started_at: record.started_at,
            status: status.into(),
            score: record.score,
            success: record.success,
            duration_seconds: record.duration_seconds,
        }
    }
}

impl From<ModuleState> for ModuleProgressView {
    fn from(state: ModuleState) -> Self {
        match state {
            ModuleState::Reported(record) => record.into(),
            ModuleState::NotStarted {
                module_id,
                module_name,
            } => Self {
                module_id,
                module_name,
                status: ModuleProgressStatus::NotStarted,
                completed_at: None,
                started_at: None,
                score: None,
                success: None,
                duration_seconds: None,
            },
        }
    }
}

/// An assignment id that was answered with a 200 but is not persisted yet.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AssignmentAccepted {
    /// Identifier.
    pub assignment_id: AssignmentId,
    /// Always `accepted`: durably queued, to be persisted by the assign-worker.
    #[schema(example = "accepted")]
    pub status: &'static str,
    /// Human-readable explanation.
    pub message: String,
}

/// Get an assignment.
///
/// An id answered by assign is never unknown: until the assign-worker persists it the answer is
/// 202 with `Retry-After`; if its command could not be persisted (dead-lettered), the assignment
/// reads with status `failed` and the reason.
#[utoipa::path(
    get,
    path = "/v1/assignments/{id}",
    tag = "assignments",
    params(("id" = String, Path, description = "Assignment id (asg_…)")),
    responses(
        (status = 200, description = "The assignment with module progress (status `failed` with `failureReason` when its command could not be persisted)", body = AssignmentView),
        (status = 202, description = "Accepted and not persisted yet; retry after `Retry-After` seconds", body = AssignmentAccepted,
            headers(("Retry-After" = u64, description = "Seconds to wait before reading again"))),
        (status = 404, description = "No such assignment in this organization", body = ErrorBody),
        (status = 429, description = "Read limit exceeded", body = ErrorBody),
    )
)]
pub async fn get_assignment(
    State(state): State<AppState>,
    auth: Auth,
    ApiPath(id): ApiPath<String>,
) -> Result<(RateHeaders, Response), ApiError> {
    let rate = RateHeaders(state.limiter.check(&auth, Operation::Read, 1).await?);
    let id = AssignmentId::parse(&id).ok_or_else(|| ApiError::not_found("assignment"))?;
    let response = match service::get(&state, auth.acting(), id).await? {
        Found::Persisted { record, modules } => {
            let progress = modules.into_iter().map(ModuleProgressView::from).collect();
            Ok(Json(AssignmentView::new(*record, Some(progress), Utc::now())).into_response())
        }
        Found::Failed {
            command,
            failure,
            total_modules,
        } => Ok(Json(AssignmentView::failed(id, *command, failure, total_modules)).into_response()),
        Found::Accepted => Ok((
            StatusCode::ACCEPTED,
            [(header::RETRY_AFTER, "1")],
            Json(AssignmentAccepted {
                assignment_id: id,
                status: "accepted",
                message: "the assignment is durably queued and not persisted yet; retry shortly"
                    .into(),
            }),
        )
            .into_response()),
        Found::Unknown => Err(ApiError::not_found("assignment")),
    }?;
    Ok((rate, response))
}

impl AssignmentView {
    /// The view of an id whose command was dead-lettered, from the command itself.
    fn failed(
        id: AssignmentId,
        command: AssignCommand,
        failure: AssignmentFailure,
        total_modules: i64,
    ) -> Self {
        Self {
            assignment_id: id,
            flow_id: command.flow_id,
            flow_name: command.flow_name,
            user_id: command.user_id,
            assignee_email: command.assignee_email,
            status: AssignmentState::Failed,
            priority: command.priority.as_str().to_owned(),
            notes: command.notes,
            due_date: command.due_at,
            assigned_at: command.assigned_at,
            started_at: None,
            completed_at: None,
            cancelled_at: None,
            cancellation_reason: None,
            expires_at: None,
            expired_at: None,
            renewed_by: None,
            renewal_of: None,
            updated_at: None,
            completed_modules: 0,
            total_modules,
            schedule_id: command.schedule_id,
            source: None,
            failure_reason: Some(failure.reason),
            failed_at: Some(failure.failed_at),
            module_progress: Some(Vec::new()),
        }
    }
}

/// Filters of `GET /v1/assignments`.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(rename_all = "camelCase")]
pub struct AssignmentFilter {
    /// Only assignments of this flow.
    pub flow_id: Option<String>,
    /// Only assignments of this assignee (case-insensitive).
    pub user_email: Option<String>,
    /// Only this status (pending, in_progress, completed, overdue, cancelled; overdue as soon as
    /// the due date passes).
    pub status: Option<String>,
    /// List cancelled assignments too when no status is given (default false: cancelled ones are
    /// left out unless asked for).
    pub include_cancelled: Option<bool>,
    /// The change feed: every assignment (cancelled ones too) changed at or after this instant
    /// (RFC 3339, or `YYYY-MM-DD` from the start of that day in the organization's time zone),
    /// in the order of its last change; follow `nextCursor`, and keep the last one to read only
    /// what changed since. With `flowId` and `userEmail`, not with `status`.
    pub updated_since: Option<String>,
}

/// List assignments.
///
/// In (`assignedAt`, id) order, `limit` per page (default 100, at most 1,000). A page counts as one
/// read request per started 100 of its `limit`.
#[utoipa::path(
    get,
    path = "/v1/assignments",
    tag = "assignments",
    params(AssignmentFilter, PageQuery),
    responses(
        (status = 200, description = "A page of assignments", body = Page<AssignmentView>),
        (status = 400, description = "Invalid filter", body = ErrorBody),
        (status = 429, description = "Read limit exceeded", body = ErrorBody),
    )
)]
pub async fn list_assignments(
    State(state): State<AppState>,
    auth: Auth,
    ApiQuery(page): ApiQuery<PageQuery>,
    ApiQuery(filter): ApiQuery<AssignmentFilter>,
) -> Result<(RateHeaders, Json<Page<AssignmentView>>), ApiError> {
    if filter.updated_since.is_some()
        || page
            .cursor
            .as_deref()
            .is_some_and(|cursor| cursor.starts_with(CHANGE_CURSOR))
    {
        return list_changes(&state, &auth, &page, &filter).await;
    }
    let (limit, rate, after, status) =
        list_start(&state, &auth, &page, filter.status.as_deref()).await?;
    let email = filter
        .user_email
        .as_deref()
        .map(|text| Email::parse("userEmail", text))
        .transpose()?;
    let Some(flow_id) = flow_filter(filter.flow_id.as_deref()) else {
        return Ok(empty_page(rate));
    };
    let filter = ListFilter {
        flow_id,
        email_normalized: email.map(|email| email.normalized()),
        status,
        include_cancelled: filter.include_cancelled.unwrap_or(false),
    };
    let page = list_page(&state, &auth, &filter, after, limit).await?;
    Ok((RateHeaders(rate), Json(page)))
}

/// What starts a change cursor (`chg_{transaction}_{assignment id}`).
const CHANGE_CURSOR: &str = "chg_";

fn encode_change(position: ChangePosition) -> String {
    format!("{CHANGE_CURSOR}{}_{}", position.seq, position.id)
}

fn decode_change(text: &str) -> Option<ChangePosition> {
    let (seq, id) = text.strip_prefix(CHANGE_CURSOR)?.split_once('_')?;
    Some(ChangePosition {
        seq: seq.parse().ok().filter(|seq: &i64| *seq >= 0)?,
        id: AssignmentId::parse(id)?,
    })
}

/// A page of the change feed (`updatedSince`, or a change cursor): the organization's
/// assignments in the order of their last change, each change once.
async fn list_changes(
    state: &AppState,
    auth: &Auth,
    page: &PageQuery,
    filter: &AssignmentFilter,
) -> Result<(RateHeaders, Json<Page<AssignmentView>>), ApiError> {
    if filter.status.is_some() || filter.include_cancelled.is_some() {
        return Err(ApiError::InvalidRequest(
            "updatedSince lists every change, cancelled assignments too: it takes flowId and \
             userEmail, not status or includeCancelled"
                .into(),
        ));
    }
    let limit = page.limit()?;
    let after = page.cursor(decode_change)?;
    let since = filter
        .updated_since
        .as_deref()
        .map(|text| parse_date_input("updatedSince", text, auth.zone, DayBound::Start))
        .transpose()?;
    let start = match (after, since) {
        (Some(position), _) => ChangeStart::After(position),
        (None, Some(since)) => ChangeStart::Since(since),
        (None, None) => {
            return Err(ApiError::InvalidRequest(
                "cursor is not valid: a change cursor comes from a page of updatedSince".into(),
            ));
        }
    };
    let email = filter
        .user_email
        .as_deref()
        .map(|text| Email::parse("userEmail", text))
        .transpose()?
        .map(|email| email.normalized());
    let rate = state
        .limiter
        .check(auth, Operation::Read, page_cost(limit))
        .await?;
    let Some(flow_id) = flow_filter(filter.flow_id.as_deref()) else {
        return Ok(empty_page(rate));
    };
    let now = Utc::now();
    let rows = flow_app::assignments::changes(
        state,
        auth.acting(),
        flow_id,
        email.as_deref(),
        start,
        limit,
    )
    .await?;
    // Every page but an empty one hands out the position after its last change: a sync job
    // keeps the last cursor it got and starts there next time.
    let next_cursor = rows.last().map(|row| {
        encode_change(ChangePosition {
            seq: row.change_seq,
            id: row.record.id,
        })
    });
    Ok((
        RateHeaders(rate),
        Json(Page {
            data: rows
                .into_iter()
                .map(|row| AssignmentView::new(row.record, None, now))
                .collect(),
            next_cursor,
        }),
    ))
}

/// The `flowId` filter: `Some(None)` when absent, `Some(Some(id))` for a flow id, and `None` for
/// a text that is not a flow id, which matches no flow (an empty list, like an unknown flow).
fn flow_filter(text: Option<&str>) -> Option<Option<FlowId>> {
    match text {
        None => Some(None),
        Some(text) => FlowId::parse(text.trim()).map(Some),
    }
}

/// The page a filter that matches nothing answers.
fn empty_page(rate: RateInfo) -> (RateHeaders, Json<Page<AssignmentView>>) {
    (
        RateHeaders(rate),
        Json(Page {
            data: Vec::new(),
            next_cursor: None,
        }),
    )
}

/// What every assignment list starts with: its page size (charged as reads), its cursor and its
/// status filter.
async fn list_start(
    state: &AppState,
    auth: &Auth,
    page: &PageQuery,
    status: Option<&str>,
) -> Result<
    (
        i64,
        flow_app::ratelimit::RateInfo,
        Option<PageCursor>,
        Option<AssignmentStatus>,
    ),
    ApiError,
> {
    let limit = page.limit()?;
    let rate = state
        .limiter
        .check(auth, Operation::Read, page_cost(limit))
        .await?;
    let after = page.cursor(PageCursor::decode)?;
    let status = status
        .map(|text| AssignmentStatus::parse_field("status", text))
        .transpose()?;
    Ok((limit, rate, after, status))
}

/// A page of the organization's assignments that `filter` lets through, after `after`.
async fn list_page(
    state: &AppState,
    auth: &Auth,
    filter: &ListFilter,
    after: Option<PageCursor>,
    limit: i64,
) -> Result<Page<AssignmentView>, ApiError> {
    let now = Utc::now();
    let rows = service::list(
        state,
        auth.acting(),
        filter,
        after.map(|cursor| (cursor.assigned_at, cursor.id)),
        limit + 1,
        now,
    )
    .await?;
    Ok(Page::from_rows(
        rows,
        limit,
        |row| {
            PageCursor {
                assigned_at: row.assigned_at,
                id: row.id,
            }
            .encode()
        },
        |row| AssignmentView::new(row, None, now),
    ))
}

/// Filters of `GET /v1/users/{id}/assignments`.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(rename_all = "camelCase")]
pub struct PersonAssignmentFilter {
    /// Only this status (pending, in_progress, completed, overdue, cancelled).
    pub status: Option<String>,
    /// List cancelled assignments too when no status is given (default false).
    pub include_cancelled: Option<bool>,
}

/// List a person's assignments.
///
/// Every assignment of the user, across flows, in (`assignedAt`, id) order, `limit` per page
/// (default 100, at most 1,000); cancelled ones only when asked for. A page counts as one read
/// request per started 100 of its `limit`.
#[utoipa::path(
    get,
    path = "/v1/users/{id}/assignments",
    tag = "users",
    params(("id" = String, Path, description = "User id (usr_…)"), PersonAssignmentFilter, PageQuery),
    responses(
        (status = 200, description = "A page of the person's assignments", body = Page<AssignmentView>),
        (status = 400, description = "Invalid filter", body = ErrorBody),
        (status = 404, description = "No such user in this organization", body = ErrorBody),
        (status = 429, description = "Read limit exceeded", body = ErrorBody),
    )
)]
pub async fn list_user_assignments(
    State(state): State<AppState>,
    auth: Auth,
    ApiPath(id): ApiPath<String>,
    ApiQuery(page): ApiQuery<PageQuery>,
    ApiQuery(filter): ApiQuery<PersonAssignmentFilter>,
) -> Result<(RateHeaders, Json<Page<AssignmentView>>), ApiError> {
    let (limit, rate, after, status) =
        list_start(&state, &auth, &page, filter.status.as_deref()).await?;
    let id = UserId::parse(id.trim()).ok_or_else(|| ApiError::not_found("user"))?;
    let (person, _) = flow_app::users::person(&state, auth.acting(), id).await?;
    let filter = ListFilter {
        flow_id: None,
        email_normalized: Some(person.email.to_lowercase()),
        status,
        include_cancelled: filter.include_cancelled.unwrap_or(false),
    };
    let page = list_page(&state, &auth, &filter, after, limit).await?;
    Ok((RateHeaders(rate), Json(page)))
}

/// Body of the progress operation.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ProgressRequest {
    /// The module (of the assignment's flow).
    #[schema(required = true, value_type = String, example = "mod_0193a1b2c3d47e8f9a0b1c2d3e4f5a6b")]
    pub module_id: Option<String>,
    /// in_progress or completed.
    #[schema(required = true, value_type = String, example = "completed")]
    pub status: Option<String>,
    /// When it happened (RFC 3339, or `YYYY-MM-DD`); default now. Not in the future, not before
    /// the assignment.
    pub at: Option<String>,
    /// Scaled score, -1..1 (as xAPI's `result.score.scaled`: 0.85 for 85 %).
    pub score: Option<f64>,
    /// Whether the learner passed the module.
    pub success: Option<bool>,
    /// Time spent in the module, in seconds (0..=31,622,400).
    pub duration_seconds: Option<i64>,
}

/// Progress accepted for processing.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProgressAccepted {
    /// Always true on a 202.
    pub accepted: bool,
    /// The assignment (an alias resolves to the assignment it joined).
    pub assignment_id: AssignmentId,
    /// The module.
    pub module_id: ModuleId,
    /// The module's new status.
    pub status: ModuleStatus,
    /// When it happened.
    #[serde(serialize_with = "flow_domain::timestamp::serialize")]
    #[schema(value_type = String, format = DateTime)]
    pub at: DateTime<Utc>,
}

/// Record module progress.
///
/// The first module activity starts the assignment (`flow.started`); completing every module
/// completes it (`flow.completed`), also when it is overdue. Completed is final. Applied by a
/// worker moments after the 202. Counts against the organization's write limit.
#[utoipa::path(
    post,
    path = "/v1/assignments/{id}/progress",
    tag = "assignments",
    request_body = ProgressRequest,
    params(("id" = String, Path, description = "Assignment id (asg_…)")),
    responses(
        (status = 202, description = "Accepted; applied moments later", body = ProgressAccepted),
        (status = 400, description = "Invalid request", body = ErrorBody),
        (status = 404, description = "No such assignment, or module not in its flow", body = ErrorBody),
        (status = 409, description = "The assignment is already completed, not persisted yet (with `Retry-After`), or could not be persisted", body = ErrorBody),
        (status = 429, description = "Write limit exceeded", body = ErrorBody),
        (status = 503, description = "Could not be queued durably; nothing was accepted", body = ErrorBody),
    )
)]
pub async fn record_progress(
    State(state): State<AppState>,
    auth: Auth,
    request_id: RequestId,
    ApiPath(id): ApiPath<String>,
    ApiJson(request): ApiJson<ProgressRequest>,
) -> Result<(StatusCode, RateHeaders, Json<ProgressAccepted>), ApiError> {
    let input = ProgressInput::parse(
        ProgressFields {
            module_id: request.module_id,
            status: request.status,
            at: request.at,
            score: request.score,
            success: request.success,
            duration_seconds: request.duration_seconds,
        },
        auth.zone,
        Utc::now(),
    )?;
    let rate = RateHeaders(state.limiter.check(&auth, Operation::Write, 1).await?);
    let recorded = progress::record(&state, auth.acting(), &id, input, &request_id.value).await?;
    Ok((
        StatusCode::ACCEPTED,
        rate,
        Json(ProgressAccepted {
            accepted: true,
            assignment_id: recorded.assignment_id,
            module_id: recorded.module_id,
            status: recorded.status,
            at: recorded.at,
        }),
    ))
}

/// Body of the change operation: each field given is set (`null` clears `dueDate` or `notes`);
/// a field left out stays as it is.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct UpdateAssignmentRequest {
    /// New due date: RFC 3339, or `YYYY-MM-DD` (the end of that day in the organization's time
    /// zone); in the future; `null` removes it.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<String>, example = "2026-12-31")]
    pub due_date: Option<Option<String>>,
    /// low, medium or high.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<String>, example = "high")]
    pub priority: Option<Option<String>>,
    /// Notes for the assignee, at most 2,000 characters; `null` removes them.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<String>)]
    pub notes: Option<Option<String>>,
}

/// Change an assignment.
///
/// Sets its due date, priority or notes (same rules as assign). An overdue assignment whose due
/// date moves to the future is pending or in progress again, and can become overdue again at
/// its new due date (one `flow.overdue` per due date). Emits one `flow.updated` naming what
/// changed, from what to what. Applied by a worker moments after the answer, which shows the
/// assignment as the change leaves it. Counts against the organization's write limit.
#[utoipa::path(
    patch,
    path = "/v1/assignments/{id}",
    tag = "assignments",
    request_body = UpdateAssignmentRequest,
    params(("id" = String, Path, description = "Assignment id (asg_…)")),
    responses(
        (status = 200, description = "The assignment as the change leaves it", body = AssignmentView),
        (status = 400, description = "Invalid request, or nothing to change", body = ErrorBody),
        (status = 404, description = "No such assignment in this organization", body = ErrorBody),
        (status = 409, description = "The assignment is completed or cancelled, not persisted yet (with `Retry-After`), or could not be persisted", body = ErrorBody),
        (status = 429, description = "Write limit exceeded", body = ErrorBody),
        (status = 503, description = "Could not be queued durably; nothing changed", body = ErrorBody),
    )
)]
pub async fn update_assignment(
    State(state): State<AppState>,
    auth: Auth,
    request_id: RequestId,
    ApiPath(id): ApiPath<String>,
    ApiJson(request): ApiJson<UpdateAssignmentRequest>,
) -> Result<(RateHeaders, Json<AssignmentView>), ApiError> {
    let now = Utc::now();
    let input = ChangeInput::parse(
        ChangeFields {
            due_date: request.due_date,
            priority: request.priority,
            notes: request.notes,
        },
        auth.zone,
        now,
    )?;
    let rate = RateHeaders(state.limiter.check(&auth, Operation::Write, 1).await?);
    let record =
        changes::update(&state, auth.acting(), &id, input, Some(&request_id.value)).await?;
    Ok((rate, Json(AssignmentView::new(record, None, Utc::now()))))
}

/// Body of the cancel operation (may be left out).
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CancelRequest {
    /// Why, at most 500 characters (shown with the assignment and in `flow.cancelled`).
    #[schema(example = "Left the team")]
    pub reason: Option<String>,
}

/// Cancel an assignment.
///
/// Withdraws an assignment that is not completed: it keeps its row and progress, takes no more
/// progress, never goes overdue, leaves reports and lists unless they ask for cancelled ones,
/// and the flow can be assigned to the person again. Emits one `flow.cancelled`. Idempotent: an
/// assignment already cancelled is answered as it is. A completed assignment cannot be cancelled
/// (409): it is compliance history. Counts against the organization's write limit.
#[utoipa::path(
    post,
    path = "/v1/assignments/{id}/cancel",
    tag = "assignments",
    request_body(content = CancelRequest, description = "Optional"),
    params(("id" = String, Path, description = "Assignment id (asg_…)")),
    responses(
        (status = 200, description = "The assignment, cancelled", body = AssignmentView),
        (status = 400, description = "Invalid request", body = ErrorBody),
        (status = 404, description = "No such assignment in this organization", body = ErrorBody),
        (status = 409, description = "The assignment is completed, not persisted yet (with `Retry-After`), or could not be persisted", body = ErrorBody),
        (status = 429, description = "Write limit exceeded", body = ErrorBody),
        (status = 503, description = "Could not be queued durably; nothing changed", body = ErrorBody),
    )
)]
pub async fn cancel_assignment(
    State(state): State<AppState>,
    auth: Auth,
    request_id: RequestId,
    ApiPath(id): ApiPath<String>,
    OptionalApiJson(request): OptionalApiJson<CancelRequest>,
) -> Result<(RateHeaders, Json<AssignmentView>), ApiError> {
    let reason = changes::parse_reason(request.reason)?;
    let rate = RateHeaders(state.limiter.check(&auth, Operation::Write, 1).await?);
    let record =
        changes::cancel(&state, auth.acting(), &id, reason, Some(&request_id.value)).await?;
    Ok((rate, Json(AssignmentView::new(record, None, Utc::now()))))
}

/// One item of a bulk cancel: an assignment id, or a flow and an assignee.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CancelItem {
    /// The assignment (asg_…); or give `flowId` and `userEmail`.
    pub assignment_id: Option<String>,
    /// The flow whose active assignment of `userEmail` to cancel.
    pub flow_id: Option<String>,
    /// The assignee.
    pub user_email: Option<String>,
}

/// Body of the bulk cancel operation.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct BulkCancelRequest {
    /// Up to 1,000 items.
    pub items: Vec<CancelItem>,
    /// Why, for every item, at most 500 characters.
    pub reason: Option<String>,
}

/// Outcome of one bulk cancel item.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct BulkCancelItemResult {
    /// Position in the request.
    pub index: usize,
    /// The status a single cancel would have answered.
    pub status: u16,
    /// The assignment, cancelled, on success.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<AssignmentView>,
    /// The error, on failure.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorBody>,
}

/// Result of the bulk cancel operation.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct BulkCancelResponse {
    /// One entry per item, in request order.
    pub results: Vec<BulkCancelItemResult>,
    /// Items answered 200.
    pub succeeded: usize,
    /// Items that failed.
    pub failed: usize,
}

impl CancelItem {
    /// The assignment the item names, or why it names none.
    fn target(self) -> Result<Target, flow_app::ServiceError> {
        use flow_app::{FieldProblem, ServiceError};
        match (self.assignment_id, self.flow_id, self.user_email) {
            (Some(id), None, None) => Ok(Target::Id(id)),
            (None, Some(flow_id), Some(email)) => Ok(Target::FlowAndUser {
                flow_id,
                email: Email::parse("userEmail", &email).map_err(|problem| {
                    ServiceError::Fields(vec![FieldProblem::invalid("userEmail", problem)])
                })?,
            }),
            _ => Err(flow_domain::Invalid(
                "give either assignmentId, or flowId and userEmail".into(),
            )
            .into()),
        }
    }
}

/// Cancel many assignments at once (partial success).
///
/// For offboarding and role changes: each item names an assignment by id, or by flow and
/// assignee (their active assignment of the flow). Each item is answered as a single cancel
/// would be; the events travel in the bulk lane, so interactive work never waits behind them.
/// Each item counts as one write request; items beyond the remaining allowance fail with 429
/// individually.
#[utoipa::path(
    post,
    path = "/v1/assignments/cancel/bulk",
    tag = "assignments",
    request_body = BulkCancelRequest,
    responses(
        (status = 200, description = "Per-item results", body = BulkCancelResponse),
        (status = 400, description = "Invalid request", body = ErrorBody),
        (status = 429, description = "No allowance left for any item", body = ErrorBody),
    )
)]
pub async fn cancel_bulk(
    State(state): State<AppState>,
    auth: Auth,
    request_id: RequestId,
    ApiJson(request): ApiJson<BulkCancelRequest>,
) -> Result<(RateHeaders, Json<BulkCancelResponse>), ApiError> {
    let count = request.items.len();
    if count == 0 || count > MAX_BULK_CANCELS {
        return Err(ApiError::InvalidRequest(format!(
            "items must contain between 1 and {MAX_BULK_CANCELS} items"
        )));
    }
    let reason = changes::parse_reason(request.reason)?;
    let allowance = Allowance::take(&state, &auth, Operation::Write, count).await?;
    let targets = request
        .items
        .into_iter()
        .enumerate()
        .map(|(index, item)| allowance.item(index, || item.target()))
        .collect();
    let now = Utc::now();
    let results: Vec<BulkCancelItemResult> = changes::cancel_many(
        &state,
        auth.acting(),
        targets,
        reason,
        Some(&request_id.value),
    )
    .await
    .into_iter()
    .enumerate()
    .map(|(index, outcome)| {
        let (status, result, error) = bulk::answer(index, outcome, "bulk cancel", |record| {
            AssignmentView::new(record, None, now)
        });
        BulkCancelItemResult {
            index,
            status,
            result,
            error,
        }
    })
    .collect();
    let succeeded = results.iter().filter(|item| item.status == 200).count();
    Ok((
        RateHeaders(allowance.rate),
        Json(BulkCancelResponse {
            failed: results.len() - succeeded,
            succeeded,
            results,
        }),
    ))
}
