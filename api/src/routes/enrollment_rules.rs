//! Enrollment rules: `GET|POST /v1/enrollment-rules`, `GET|PUT|DELETE /v1/enrollment-rules/{id}`,
//! `POST /v1/enrollment-rules/preview`, `POST /v1/enrollment-rules/{id}/backfill` (a background
//! job) and `GET /v1/enrollment-rules/{id}/backfills/{backfillId}`. The condition language and
//! the guarantees are in docs/enrollment-rules.md.

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use chrono::{DateTime, Utc};
use flow_app::enrollment::{self as service, RuleInput};
use flow_app::ratelimit::{Operation, page_cost};
use flow_common::db::enrollment_backfills::Backfill;
use flow_common::db::enrollment_rules::{Profile, RuleRecord};
use flow_domain::enrollment::BackfillStatus;
use flow_domain::ids::{BackfillId, EnrollmentRuleId, FlowId, UserId};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::error::{ApiError, ErrorBody, RateHeaders};
use crate::extract::{ApiJson, ApiPath, ApiQuery, Auth};
use crate::routes::pagination::{Page, PageQuery};
use crate::routes::unknown_id;
use crate::state::AppState;

/// Routes of this module.
pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_rules, create_rule))
        .routes(routes!(preview_rule))
        .routes(routes!(get_rule, update_rule, delete_rule))
        .routes(routes!(backfill_rule))
        .routes(routes!(get_backfill))
}

/// A rule to create, replace or preview.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RuleRequest {
    /// What the organization calls the rule: one line, at most 200 characters.
    #[schema(required = true, value_type = String, example = "Sales onboarding")]
    pub name: Option<String>,
    /// Which users the rule assigns: one term (`departmentEquals`, `titleContains`, `memberOf`,
    /// `startDatePresent`) or a combination (`all`, `any`: lists; `not`: one condition). At most
    /// 5 levels deep, 50 terms, 200 characters a text.
    #[schema(required = true, value_type = Object, example = json!({"all": [{"departmentEquals": "Sales"}, {"not": {"titleContains": "Intern"}}]}))]
    pub condition: Option<Value>,
    /// The flow to assign.
    #[schema(required = true, value_type = String)]
    pub flow_id: Option<String>,
    /// When the assignment is due; none without.
    pub due: Option<DueRequest>,
    /// low, medium (default) or high.
    pub priority: Option<String>,
    /// Notes of each assignment, at most 2,000 characters.
    #[schema(max_length = 2000)]
    pub notes: Option<String>,
    /// Whether a user who stops matching and later matches again is assigned again (default
    /// false: once per user).
    pub reassign_on_rematch: Option<bool>,
    /// Whether the open assignments (pending, in progress, overdue) this rule made for a user
    /// are cancelled when the user no longer matches it (default false): each once, with a
    /// `flow.cancelled` whose reason names the rule. Assignments made by hand or by another
    /// rule are never touched.
    pub cancel_on_unmatch: Option<bool>,
}

/// A due date relative to the user's start date or to the match.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct DueRequest {
    /// Days, 1 to 3,650.
    #[schema(required = true, minimum = 1, maximum = 3650, value_type = i32)]
    pub days: Option<i32>,
    /// `matched` (default: the moment the rule matched the user) or `start_date` (the end of
    /// the user's start date plus the days, in the organization's time zone; the match for a
    /// user without a start date, or when that day has passed).
    #[schema(example = "start_date")]
    pub from: Option<String>,
}

impl From<RuleRequest> for RuleInput {
    fn from(request: RuleRequest) -> Self {
        let (due_days, due_from) = match request.due {
            // A `due` without `days` is refused by name (`due.days is required with due.from`).
            Some(due) => (
                due.days,
                Some(due.from.unwrap_or_else(|| "matched".to_owned())),
            ),
            None => (None, None),
        };
        Self {
            name: request.name,
            condition: request.condition,
            flow_id: request.flow_id,
            due_days,
            due_from,
            priority: request.priority,
            notes: request.notes,
            reassign: request.reassign_on_rematch,
            cancel_on_unmatch: request.cancel_on_unmatch,
        }
    }
}

/// A due date as stored.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DueView {
    /// Days.
    pub days: i32,
    /// `start_date` or `matched`.
    pub from: String,
}

/// A rule.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RuleView {
    /// Identifier.
    pub rule_id: EnrollmentRuleId,
    /// Name.
    pub name: String,
    /// Condition.
    #[schema(value_type = Object)]
    pub condition: Value,
    /// Flow assigned.
    pub flow_id: FlowId,
    /// Its name.
    pub flow_name: String,
    /// Due date, if any.
    pub due: Option<DueView>,
    /// Priority.
    pub priority: String,
    /// Notes.
    pub notes: Option<String>,
    /// Whether a re-match assigns again.
    pub reassign_on_rematch: bool,
    /// Whether the rule cancels its open assignments of a user who no longer matches.
    pub cancel_on_unmatch: bool,
    /// Creation time.
    #[serde(serialize_with = "flow_domain::timestamp::serialize")]
    #[schema(value_type = String, format = DateTime)]
    pub created_at: DateTime<Utc>,
    /// Last change.
    #[serde(serialize_with = "flow_domain::timestamp::serialize")]
    #[schema(value_type = String, format = DateTime)]
    pub updated_at: DateTime<Utc>,
}

impl From<RuleRecord> for RuleView {
    fn from(record: RuleRecord) -> Self {
        Self {
            rule_id: record.id,
            name: record.name,
            condition: record.condition,
            flow_id: record.flow_id,
            flow_name: record.flow_name,
            due: record.due_days.map(|days| DueView {
                days,
                from: record.due_from,
            }),
            priority: record.priority,
            notes: record.notes,
            reassign_on_rematch: record.reassign,
            cancel_on_unmatch: record.cancel_on_unmatch,
            created_at: record.created_at,
            updated_at: record.updated_at,
        }
    }
}

/// A user a rule matches.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct MatchedUser {
    /// Identifier.
    pub user_id: UserId,
    /// E-mail.
    pub email: String,
    /// Display name.
    pub name: Option<String>,
}

impl From<Profile> for MatchedUser {
    fn from(profile: Profile) -> Self {
        Self {
            user_id: profile.id,
            email: profile.email,
            name: profile.name,
        }
    }
}

/// What a rule would assign now.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PreviewView {
    /// Active users the rule matches now.
    pub matching: u64,
    /// The first 20 of them, in id order.
    pub users: Vec<MatchedUser>,
}

/// A backfill: a background job assigning the rule's flow to every active user who matches it.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct BackfillView {
    /// Identifier.
    pub backfill_id: BackfillId,
    /// The rule.
    pub rule_id: EnrollmentRuleId,
    /// queued, running, succeeded or failed.
    pub status: BackfillStatus,
    /// Active users the rule matched so far.
    pub matching: u64,
    /// Assignments queued so far: users it had not assigned yet (the others were assigned
    /// before). A job resumed after its scheduler stopped may count a page's assignments twice;
    /// each is made once.
    pub queued: u64,
    /// Why it failed (or, while it runs, why its last attempt stopped).
    pub error: Option<String>,
    /// When it was requested.
    #[serde(serialize_with = "flow_domain::timestamp::serialize")]
    #[schema(value_type = String, format = DateTime)]
    pub created_at: DateTime<Utc>,
    /// When a scheduler took it up.
    #[serde(serialize_with = "flow_domain::timestamp::option::serialize")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub started_at: Option<DateTime<Utc>>,
    /// When it succeeded or failed.
    #[serde(serialize_with = "flow_domain::timestamp::option::serialize")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub finished_at: Option<DateTime<Utc>>,
}

impl From<Backfill> for BackfillView {
    fn from(backfill: Backfill) -> Self {
        Self {
            backfill_id: backfill.id,
            rule_id: backfill.rule_id,
            status: backfill.status,
            matching: u64::try_from(backfill.matching).unwrap_or(0),
            queued: u64::try_from(backfill.queued).unwrap_or(0),
            error: backfill.error,
            created_at: backfill.created_at,
            started_at: backfill.started_at,
            finished_at: backfill.finished_at,
        }
    }
}

/// List the organization's enrollment rules.
#[utoipa::path(
    get,
    path = "/v1/enrollment-rules",
    tag = "enrollment rules",
    params(PageQuery),
    responses(
        (status = 200, description = "A page of rules", body = Page<RuleView>),
        (status = 400, description = "Invalid query", body = ErrorBody),
        (status = 429, description = "Read limit exceeded", body = ErrorBody),
    )
)]
pub async fn list_rules(
    State(state): State<AppState>,
    auth: Auth,
    ApiQuery(page): ApiQuery<PageQuery>,
) -> Result<(RateHeaders, Json<Page<RuleView>>), ApiError> {
    let limit = page.limit()?;
    let after = page.cursor(EnrollmentRuleId::parse)?;
    let rate = state
        .limiter
        .check(&auth, Operation::Read, page_cost(limit))
        .await?;
    let rows = service::list(&state, auth.acting(), after, limit + 1).await?;
    let page = Page::from_rows(rows, limit, |rule| rule.id.to_string(), RuleView::from);
    Ok((RateHeaders(rate), Json(page)))
}

/// Create an enrollment rule.
///
/// It applies to users created or changed from now on; to assign the users who match already,
/// call the backfill. An organization has at most 100 rules.
#[utoipa::path(
    post,
    path = "/v1/enrollment-rules",
    tag = "enrollment rules",
    request_body = RuleRequest,
    responses(
        (status = 201, description = "Created", body = RuleView),
        (status = 400, description = "Invalid request (the message names the field)", body = ErrorBody),
        (status = 404, description = "Flow not found", body = ErrorBody),
        (status = 409, description = "The organization has 100 rules already, or the flow is archived", body = ErrorBody),
        (status = 429, description = "Write limit exceeded", body = ErrorBody),
    )
)]
pub async fn create_rule(
    State(state): State<AppState>,
    auth: Auth,
    ApiJson(request): ApiJson<RuleRequest>,
) -> Result<(StatusCode, RateHeaders, Json<RuleView>), ApiError> {
    let rate = RateHeaders(state.limiter.check(&auth, Operation::Write, 1).await?);
    let record = service::create(&state, auth.acting(), request.into()).await?;
    Ok((StatusCode::CREATED, rate, Json(record.into())))
}

/// Preview a rule without saving it: how many active users it matches now, and the first 20.
///
/// Reads every user of the organization: charged as one read request per started 1,000 users of
/// the organization (429 when the read limit has not that much left).
#[utoipa::path(
    post,
    path = "/v1/enrollment-rules/preview",
    tag = "enrollment rules",
    request_body = RuleRequest,
    responses(
        (status = 200, description = "What the rule would assign now", body = PreviewView),
        (status = 400, description = "Invalid request (the message names the field)", body = ErrorBody),
        (status = 404, description = "Flow not found", body = ErrorBody),
        (status = 429, description = "Read limit exceeded (a preview costs one read per started 1,000 users)", body = ErrorBody),
    )
)]
pub async fn preview_rule(
    State(state): State<AppState>,
    auth: Auth,
    ApiJson(request): ApiJson<RuleRequest>,
) -> Result<(RateHeaders, Json<PreviewView>), ApiError> {
    let preview = service::preview(&state, auth.acting(), request.into()).await?;
    Ok((
        RateHeaders(preview.rate),
        Json(PreviewView {
            matching: preview.matching,
            users: preview.users.into_iter().map(MatchedUser::from).collect(),
        }),
    ))
}

/// Get an enrollment rule.
#[utoipa::path(
    get,
    path = "/v1/enrollment-rules/{id}",
    tag = "enrollment rules",
    params(("id" = String, Path, description = "Rule id (enr_…)")),
    responses(
        (status = 200, description = "The rule", body = RuleView),
        (status = 404, description = "No such rule in this organization", body = ErrorBody),
        (status = 429, description = "Read limit exceeded", body = ErrorBody),
    )
)]
pub async fn get_rule(
    State(state): State<AppState>,
    auth: Auth,
    ApiPath(id): ApiPath<String>,
) -> Result<(RateHeaders, Json<RuleView>), ApiError> {
    let Some(id) = EnrollmentRuleId::parse(&id) else {
        return Err(unknown_id(&state, &auth, Operation::Read, "enrollment rule").await);
    };
    let rate = RateHeaders(state.limiter.check(&auth, Operation::Read, 1).await?);
    let record = service::get(&state, auth.acting(), id).await?;
    Ok((rate, Json(record.into())))
}

/// Replace an enrollment rule (every field, as on creation).
///
/// Users it has assigned are not assigned again because it changed.
#[utoipa::path(
    put,
    path = "/v1/enrollment-rules/{id}",
    tag = "enrollment rules",
    params(("id" = String, Path, description = "Rule id (enr_…)")),
    request_body = RuleRequest,
    responses(
        (status = 200, description = "Replaced", body = RuleView),
        (status = 400, description = "Invalid request (the message names the field)", body = ErrorBody),
        (status = 404, description = "No such rule, or flow not found", body = ErrorBody),
        (status = 409, description = "The flow is archived (it takes no new assignments)", body = ErrorBody),
        (status = 429, description = "Write limit exceeded", body = ErrorBody),
    )
)]
pub async fn update_rule(
    State(state): State<AppState>,
    auth: Auth,
    ApiPath(id): ApiPath<String>,
    ApiJson(request): ApiJson<RuleRequest>,
) -> Result<(RateHeaders, Json<RuleView>), ApiError> {
    let Some(id) = EnrollmentRuleId::parse(&id) else {
        return Err(unknown_id(&state, &auth, Operation::Write, "enrollment rule").await);
    };
    let rate = RateHeaders(state.limiter.check(&auth, Operation::Write, 1).await?);
    let record = service::update(&state, auth.acting(), id, request.into()).await?;
    Ok((rate, Json(record.into())))
}

/// Delete an enrollment rule; the assignments it made stay.
///
/// Refused (409, naming them) while flows are required of the rule's audience
/// (`requiredForRuleId`): make them required of everyone or of another rule first.
#[utoipa::path(
    delete,
    path = "/v1/enrollment-rules/{id}",
    tag = "enrollment rules",
    params(("id" = String, Path, description = "Rule id (enr_…)")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 404, description = "No such rule in this organization", body = ErrorBody),
        (status = 409, description = "Flows are required of the rule's audience (requiredForRuleId); the message names them", body = ErrorBody),
        (status = 429, description = "Write limit exceeded", body = ErrorBody),
    )
)]
pub async fn delete_rule(
    State(state): State<AppState>,
    auth: Auth,
    ApiPath(id): ApiPath<String>,
) -> Result<(RateHeaders, StatusCode), ApiError> {
    let Some(id) = EnrollmentRuleId::parse(&id) else {
        return Err(unknown_id(&state, &auth, Operation::Write, "enrollment rule").await);
    };
    let rate = RateHeaders(state.limiter.check(&auth, Operation::Write, 1).await?);
    service::delete(&state, auth.acting(), id).await?;
    Ok((rate, StatusCode::NO_CONTENT))
}

/// Start a backfill: assign the rule's flow to every active user who matches it and has not been
/// assigned by it, through the organization's bulk queue.
///
/// Answers at once with the job (`Location` is its address); a scheduler runs it, a page of
/// 1,000 users at a time, and resumes it from where it stopped should it stop. While a backfill
/// of the rule is queued or running, answers that one instead of starting another. Starting one
/// again later queues only what is still missing. An organization has at most 20 backfills
/// queued or running (409 past it). Its assignments are charged to the organization's assign
/// limit: past it the backfill pauses, and resumes when the limit has room. Charged as one
/// write request.
#[utoipa::path(
    post,
    path = "/v1/enrollment-rules/{id}/backfill",
    tag = "enrollment rules",
    params(("id" = String, Path, description = "Rule id (enr_…)")),
    responses(
        (status = 202, description = "Queued (or the backfill already queued or running)", body = BackfillView,
            headers(("Location" = String, description = "The backfill: /v1/enrollment-rules/{id}/backfills/{backfillId}"))),
        (status = 404, description = "No such rule in this organization", body = ErrorBody),
        (status = 409, description = "The organization has 20 backfills queued or running", body = ErrorBody),
        (status = 429, description = "Write limit exceeded", body = ErrorBody),
    )
)]
pub async fn backfill_rule(
    State(state): State<AppState>,
    auth: Auth,
    ApiPath(id): ApiPath<String>,
) -> Result<
    (
        StatusCode,
        RateHeaders,
        [(header::HeaderName, HeaderValue); 1],
        Json<BackfillView>,
    ),
    ApiError,
> {
    let Some(id) = EnrollmentRuleId::parse(&id) else {
        return Err(unknown_id(&state, &auth, Operation::Write, "enrollment rule").await);
    };
    let rate = RateHeaders(state.limiter.check(&auth, Operation::Write, 1).await?);
    let (backfill, _) = service::backfill(&state, auth.acting(), id).await?;
    let location = format!("/v1/enrollment-rules/{id}/backfills/{}", backfill.id);
    let location = HeaderValue::from_str(&location).map_err(anyhow::Error::new)?;
    Ok((
        StatusCode::ACCEPTED,
        rate,
        [(header::LOCATION, location)],
        Json(backfill.into()),
    ))
}

/// Get a backfill: where it stands and what it did so far.
#[utoipa::path(
    get,
    path = "/v1/enrollment-rules/{id}/backfills/{backfillId}",
    tag = "enrollment rules",
    params(
        ("id" = String, Path, description = "Rule id (enr_…)"),
        ("backfillId" = String, Path, description = "Backfill id (bkf_…)"),
    ),
    responses(
        (status = 200, description = "The backfill", body = BackfillView),
        (status = 404, description = "No such backfill of this rule in this organization", body = ErrorBody),
        (status = 429, description = "Read limit exceeded", body = ErrorBody),
    )
)]
pub async fn get_backfill(
    State(state): State<AppState>,
    auth: Auth,
    ApiPath((id, backfill_id)): ApiPath<(String, String)>,
) -> Result<(RateHeaders, Json<BackfillView>), ApiError> {
    let (Some(id), Some(backfill_id)) = (
        EnrollmentRuleId::parse(&id),
        BackfillId::parse(&backfill_id),
    ) else {
        return Err(unknown_id(&state, &auth, Operation::Read, "backfill").await);
    };
    let rate = RateHeaders(state.limiter.check(&auth, Operation::Read, 1).await?);
    let backfill = service::backfill_status(&state, auth.acting(), id, backfill_id).await?;
    Ok((rate, Json(backfill.into())))
}
