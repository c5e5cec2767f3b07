//! Event triggers: `GET|POST /v1/event-triggers`, `GET|PUT|DELETE /v1/event-triggers/{id}` and
//! `POST /v1/event-triggers/preview`. What they match and do, and the limits, are in
//! docs/events.md.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use flow_app::events::cloudevent::CloudEvent;
use flow_app::events::triggers::{self as service, TriggerInput};
use flow_app::events::{self as events, PreviewMatch};
use flow_app::ratelimit::{Operation, page_cost};
use flow_common::db::event_triggers::TriggerRecord;
use flow_domain::ids::{EventTriggerId, FlowId};
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
        .routes(routes!(list_triggers, create_trigger))
        .routes(routes!(preview_triggers))
        .routes(routes!(get_trigger, update_trigger, delete_trigger))
}

/// Which events a trigger matches: `type` (exactly) or `typePrefix`, one of the two; and
/// `source` (exactly) when given. Each at most 500 characters.
#[derive(Debug, Clone, Default, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct MatchRequest {
    /// The event `type`, exactly.
    #[serde(rename = "type")]
    #[schema(example = "com.example.hr.employee.hired")]
    pub event_type: Option<String>,
    /// The start of the event `type`.
    #[schema(example = "com.example.hr.")]
    pub type_prefix: Option<String>,
    /// The event `source`, exactly.
    #[schema(example = "https://hr.example.com")]
    pub source: Option<String>,
}

/// When an assignment a trigger makes is due: `days` after the event, or the date found at
/// `fromPointer` in the event, one of the two.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TriggerDueRequest {
    /// Days after the event is received, 1 to 3,650.
    #[schema(minimum = 1, maximum = 3650)]
    pub days: Option<i32>,
    /// JSON Pointer to a date (`YYYY-MM-DD`: the end of that day in the organization's time
    /// zone) or an RFC 3339 timestamp in the event; at most 256 characters.
    #[schema(example = "/data/startDate")]
    pub from_pointer: Option<String>,
}

/// A trigger to create or replace.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TriggerRequest {
    /// What the organization calls the trigger: one line, at most 200 characters.
    #[schema(required = true, value_type = String, example = "New hires get onboarding")]
    pub name: Option<String>,
    /// Which events it matches.
    #[schema(required = true, value_type = MatchRequest)]
    #[serde(rename = "match")]
    pub matches: Option<MatchRequest>,
    /// JSON Pointer (RFC 6901) to the person's e-mail in the event (the whole CloudEvent:
    /// attributes and `data`); at most 256 characters.
    #[schema(required = true, value_type = String, example = "/data/email")]
    pub user_email_pointer: Option<String>,
    /// `assign` (the flow, once per event) or `cancel` (the person's open assignment of the
    /// flow).
    #[schema(required = true, value_type = String, example = "assign")]
    pub action: Option<String>,
    /// The flow.
    #[schema(required = true, value_type = String)]
    pub flow_id: Option<String>,
    /// When the assignment is due (assign only); none without.
    pub due: Option<TriggerDueRequest>,
    /// low, medium (default) or high (assign only).
    pub priority: Option<String>,
    /// Notes of each assignment, at most 2,000 characters (assign only).
    #[schema(max_length = 2000)]
    pub notes: Option<String>,
}

impl From<TriggerRequest> for TriggerInput {
    fn from(request: TriggerRequest) -> Self {
        let matches = request.matches.unwrap_or_default();
        let (due_days, due_from_pointer) = match request.due {
            Some(due) => (due.days, due.from_pointer),
            None => (None, None),
        };
        Self {
            name: request.name,
            match_type: matches.event_type,
            match_type_prefix: matches.type_prefix,
            match_source: matches.source,
            user_email_pointer: request.user_email_pointer,
            action: request.action,
            flow_id: request.flow_id,
            due_days,
            due_from_pointer,
            priority: request.priority,
            notes: request.notes,
        }
    }
}

/// A trigger.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TriggerView {
    /// Identifier.
    pub trigger_id: EventTriggerId,
    /// Name.
    pub name: String,
    /// Which events it matches.
    #[serde(rename = "match")]
    pub matches: MatchView,
    /// Where the e-mail is in the event.
    pub user_email_pointer: String,
    /// `assign` or `cancel`.
    pub action: String,
    /// The flow.
    pub flow_id: FlowId,
    /// Its name.
    pub flow_name: String,
    /// When its assignments are due, if set.
    pub due: Option<TriggerDueView>,
    /// Priority of its assignments.
    pub priority: String,
    /// Notes of its assignments.
    pub notes: Option<String>,
    /// Creation time.
    #[serde(serialize_with = "flow_domain::timestamp::serialize")]
    #[schema(value_type = String, format = DateTime)]
    pub created_at: DateTime<Utc>,
    /// Last change.
    #[serde(serialize_with = "flow_domain::timestamp::serialize")]
    #[schema(value_type = String, format = DateTime)]
    pub updated_at: DateTime<Utc>,
}

/// Which events a trigger matches, as stored.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct MatchView {
    /// The exact type, if it matches by type.
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub event_type: Option<String>,
    /// The type prefix, if it matches by prefix.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub type_prefix: Option<String>,
    /// The source, if it matches one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

/// A due date as stored: one of the two.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TriggerDueView {
    /// Days after the event.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub days: Option<i32>,
    /// Where the date is in the event.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from_pointer: Option<String>,
}

impl From<TriggerRecord> for TriggerView {
    fn from(record: TriggerRecord) -> Self {
        let due =
            (record.due_days.is_some() || record.due_pointer.is_some()).then(|| TriggerDueView {
                days: record.due_days,
                from_pointer: record.due_pointer.clone(),
            });
        Self {
            trigger_id: record.id,
            name: record.name,
            matches: MatchView {
                event_type: record.match_type,
                type_prefix: record.match_type_prefix,
                source: record.match_source,
            },
            user_email_pointer: record.email_pointer,
            action: record.action,
            flow_id: record.flow_id,
            flow_name: record.flow_name,
            due,
            priority: record.priority,
            notes: record.notes,
            created_at: record.created_at,
            updated_at: record.updated_at,
        }
    }
}

/// A sample event to run through the triggers.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PreviewRequest {
    /// A CloudEvent in its structured form (`specversion`, `id`, `source`, `type`, `data`…).
    #[schema(value_type = Object, example = json!({"specversion": "1.0", "id": "42", "source": "https://hr.example.com", "type": "com.example.hr.employee.hired", "data": {"email": "ada@example.com"}}))]
    pub event: Value,
}

/// A trigger that matches the sample event, and what it would do.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PreviewMatchView {
    /// The trigger.
    pub trigger_id: EventTriggerId,
    /// Its name.
    pub trigger_name: String,
    /// `assign` or `cancel`.
    pub action: String,
    /// The flow.
    pub flow_id: FlowId,
    /// Its name.
    pub flow_name: String,
    /// The e-mail found in the event.
    pub user_email: String,
    /// Whether the organization has an active user with that e-mail.
    pub user_found: bool,
    /// The due date an assignment would get.
    #[serde(serialize_with = "flow_domain::timestamp::option::serialize")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub due_date: Option<DateTime<Utc>>,
}

impl From<PreviewMatch> for PreviewMatchView {
    fn from(found: PreviewMatch) -> Self {
        Self {
            trigger_id: found.trigger_id,
            trigger_name: found.trigger_name,
            action: found.action.as_str().to_owned(),
            flow_id: found.flow_id,
            flow_name: found.flow_name,
            user_email: found.user_email,
            user_found: found.user_found,
            due_date: found.due_at,
        }
    }
}

/// What the triggers would make of the sample event.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = TriggerPreviewView)]
pub struct PreviewView {
    /// accepted, ignored or invalid: how `POST /v1/events` would answer it now (if it is not a
    /// duplicate).
    pub status: String,
    /// Why, for ignored and invalid.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The triggers that match it, in creation order.
    pub matches: Vec<PreviewMatchView>,
}

/// List the organization's event triggers.
#[utoipa::path(
    get,
    path = "/v1/event-triggers",
    tag = "events",
    params(PageQuery),
    responses(
        (status = 200, description = "A page of triggers", body = Page<TriggerView>),
        (status = 400, description = "Invalid query", body = ErrorBody),
        (status = 429, description = "Read limit exceeded", body = ErrorBody),
    )
)]
pub async fn list_triggers(
    State(state): State<AppState>,
    auth: Auth,
    ApiQuery(page): ApiQuery<PageQuery>,
) -> Result<(RateHeaders, Json<Page<TriggerView>>), ApiError> {
    let limit = page.limit()?;
    let after = page.cursor(EventTriggerId::parse)?;
    let rate = state
        .limiter
        .check(&auth, Operation::Read, page_cost(limit))
        .await?;
    let rows = service::list(&state, auth.acting(), after, limit + 1).await?;
    let page = Page::from_rows(rows, limit, |row| row.id.to_string(), TriggerView::from);
    Ok((RateHeaders(rate), Json(page)))
}

/// Create an event trigger.
///
/// It acts on events received from now on. An organization has at most 100 triggers.
#[utoipa::path(
    post,
    path = "/v1/event-triggers",
    tag = "events",
    request_body = TriggerRequest,
    responses(
        (status = 201, description = "Created", body = TriggerView),
        (status = 400, description = "Invalid request (the message names the field)", body = ErrorBody),
        (status = 404, description = "Flow not found", body = ErrorBody),
        (status = 409, description = "The organization has 100 triggers already, or the flow is archived", body = ErrorBody),
        (status = 429, description = "Write limit exceeded", body = ErrorBody),
    )
)]
pub async fn create_trigger(
    State(state): State<AppState>,
    auth: Auth,
    ApiJson(request): ApiJson<TriggerRequest>,
) -> Result<(StatusCode, RateHeaders, Json<TriggerView>), ApiError> {
    let rate = RateHeaders(state.limiter.check(&auth, Operation::Write, 1).await?);
    let record = service::create(&state, auth.acting(), request.into()).await?;
    Ok((StatusCode::CREATED, rate, Json(record.into())))
}

/// Run a sample event through the organization's triggers without recording or acting on it:
/// which triggers match, the e-mail each found, and what each would do.
#[utoipa::path(
    post,
    path = "/v1/event-triggers/preview",
    tag = "events",
    request_body = PreviewRequest,
    responses(
        (status = 200, description = "What the triggers would do", body = PreviewView),
        (status = 400, description = "Invalid request", body = ErrorBody),
        (status = 429, description = "Read limit exceeded", body = ErrorBody),
    )
)]
pub async fn preview_triggers(
    State(state): State<AppState>,
    auth: Auth,
    ApiJson(request): ApiJson<PreviewRequest>,
) -> Result<(RateHeaders, Json<PreviewView>), ApiError> {
    let rate = RateHeaders(state.limiter.check(&auth, Operation::Read, 1).await?);
    let event = CloudEvent::from_json(request.event);
    let preview = events::preview(&state, auth.acting(), event, Utc::now()).await?;
    Ok((
        rate,
        Json(PreviewView {
            status: preview.status.as_str().to_owned(),
            reason: preview.reason,
            matches: preview
                .matches
                .into_iter()
                .map(PreviewMatchView::from)
                .collect(),
        }),
    ))
}

/// Get an event trigger.
#[utoipa::path(
    get,
    path = "/v1/event-triggers/{id}",
    tag = "events",
    params(("id" = String, Path, description = "Trigger id (etr_…)")),
    responses(
        (status = 200, description = "The trigger", body = TriggerView),
        (status = 404, description = "No such trigger in this organization", body = ErrorBody),
        (status = 429, description = "Read limit exceeded", body = ErrorBody),
    )
)]
pub async fn get_trigger(
    State(state): State<AppState>,
    auth: Auth,
    ApiPath(id): ApiPath<String>,
) -> Result<(RateHeaders, Json<TriggerView>), ApiError> {
    let Some(id) = EventTriggerId::parse(&id) else {
        return Err(unknown_id(&state, &auth, Operation::Read, "event trigger").await);
    };
    let rate = RateHeaders(state.limiter.check(&auth, Operation::Read, 1).await?);
    let record = service::get(&state, auth.acting(), id).await?;
    Ok((rate, Json(record.into())))
}

/// Replace an event trigger (every field, as on creation).
#[utoipa::path(
    put,
    path = "/v1/event-triggers/{id}",
    tag = "events",
    params(("id" = String, Path, description = "Trigger id (etr_…)")),
    request_body = TriggerRequest,
    responses(
        (status = 200, description = "Replaced", body = TriggerView),
        (status = 400, description = "Invalid request (the message names the field)", body = ErrorBody),
        (status = 404, description = "No such trigger, or flow not found", body = ErrorBody),
        (status = 409, description = "The flow is archived", body = ErrorBody),
        (status = 429, description = "Write limit exceeded", body = ErrorBody),
    )
)]
pub async fn update_trigger(
    State(state): State<AppState>,
    auth: Auth,
    ApiPath(id): ApiPath<String>,
    ApiJson(request): ApiJson<TriggerRequest>,
) -> Result<(RateHeaders, Json<TriggerView>), ApiError> {
    let Some(id) = EventTriggerId::parse(&id) else {
        return Err(unknown_id(&state, &auth, Operation::Write, "event trigger").await);
    };
    let rate = RateHeaders(state.limiter.check(&auth, Operation::Write, 1).await?);
    let record = service::update(&state, auth.acting(), id, request.into()).await?;
    Ok((rate, Json(record.into())))
}

/// Delete an event trigger; what it made stays.
#[utoipa::path(
    delete,
    path = "/v1/event-triggers/{id}",
    tag = "events",
    params(("id" = String, Path, description = "Trigger id (etr_…)")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 404, description = "No such trigger in this organization", body = ErrorBody),
        (status = 429, description = "Write limit exceeded", body = ErrorBody),
    )
)]
pub async fn delete_trigger(
    State(state): State<AppState>,
    auth: Auth,
    ApiPath(id): ApiPath<String>,
) -> Result<(RateHeaders, StatusCode), ApiError> {
    let Some(id) = EventTriggerId::parse(&id) else {
        return Err(unknown_id(&state, &auth, Operation::Write, "event trigger").await);
    };
    let rate = RateHeaders(state.limiter.check(&auth, Operation::Write, 1).await?);
    service::delete(&state, auth.acting(), id).await?;
    Ok((rate, StatusCode::NO_CONTENT))
}
