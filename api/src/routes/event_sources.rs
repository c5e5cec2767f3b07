//! Signed event sources: `GET|POST /v1/event-sources`, `GET|DELETE /v1/event-sources/{id}` and
//! `POST /v1/event-sources/{id}/rotate-secret`. What a source is, its limits and how senders sign
//! are in docs/events.md ("Signed sources"); the deliveries themselves are [`super::inbound`]'s.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use flow_app::events::sources::{self as service, SourceInput, WithSecret};
use flow_app::ratelimit::{Operation, page_cost};
use flow_common::db::event_sources::SourceRecord;
use flow_domain::ids::EventSourceId;
use serde::{Deserialize, Serialize};
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
        .routes(routes!(list_sources, create_source))
        .routes(routes!(get_source, delete_source))
        .routes(routes!(rotate_source_secret))
}

/// A source to create.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct EventSourceRequest {
    /// What the organization calls the source: one line, at most 200 characters.
    #[schema(required = true, value_type = String, example = "HR system")]
    pub name: Option<String>,
    /// `standard_webhooks` (any JSON body signed with the Standard Webhooks scheme) or `okta`
    /// (Okta event hooks).
    #[schema(required = true, value_type = String, example = "standard_webhooks")]
    pub kind: Option<String>,
    /// standard_webhooks: JSON Pointer (RFC 6901) to the event type in the body, at most 256
    /// characters; or give `type`.
    #[schema(example = "/event")]
    pub type_pointer: Option<String>,
    /// standard_webhooks: the event type of every delivery, at most 500 characters; or give
    /// `typePointer`.
    #[serde(rename = "type")]
    pub fixed_type: Option<String>,
    /// The CloudEvents `source` of its events, at most 500 characters, unique in the
    /// organization; `flow:event-sources/<sourceId>` when left out.
    #[schema(example = "https://hr.example.com")]
    pub source: Option<String>,
    /// okta: the header Okta sends the secret in (the hook's "Authentication field"), an HTTP
    /// header name of at most 64 characters; `Authorization` when left out.
    #[schema(example = "X-Flow-Secret")]
    pub auth_header: Option<String>,
}

impl From<EventSourceRequest> for SourceInput {
    fn from(request: EventSourceRequest) -> Self {
        Self {
            name: request.name,
            kind: request.kind,
            type_pointer: request.type_pointer,
            fixed_type: request.fixed_type,
            source: request.source,
            auth_header: request.auth_header,
        }
    }
}

/// A source (without its secret).
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct EventSourceView {
    /// Identifier.
    pub source_id: EventSourceId,
    /// Name.
    pub name: String,
    /// `standard_webhooks` or `okta`.
    pub kind: String,
    /// Where the event type is in the body (standard_webhooks).
    pub type_pointer: Option<String>,
    /// The fixed event type (standard_webhooks).
    #[serde(rename = "type")]
    pub fixed_type: Option<String>,
    /// The CloudEvents `source` its events carry (what a trigger's `match.source` selects).
    pub source: String,
    /// okta: the header its deliveries carry the secret in, lower-case (`authorization` unless
    /// another was given); null for standard_webhooks.
    pub auth_header: Option<String>,
    /// Where the sender posts: `/v1/events/inbound/{sourceId}` on the service's address.
    pub inbound_path: String,
    /// Until when the secret before the last rotation is still accepted.
    #[serde(serialize_with = "flow_domain::timestamp::option::serialize")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub previous_secret_expires_at: Option<DateTime<Utc>>,
    /// Creation time.
    #[serde(serialize_with = "flow_domain::timestamp::serialize")]
    #[schema(value_type = String, format = DateTime)]
    pub created_at: DateTime<Utc>,
    /// Last rotation of the secret.
    #[serde(serialize_with = "flow_domain::timestamp::option::serialize")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub secret_rotated_at: Option<DateTime<Utc>>,
}

impl From<SourceRecord> for EventSourceView {
    fn from(record: SourceRecord) -> Self {
        let auth_header = (record.kind == "okta").then(|| {
            record
                .auth_header
                .clone()
                .unwrap_or_else(|| "authorization".to_owned())
        });
        Self {
            auth_header,
            inbound_path: format!("/v1/events/inbound/{}", record.id),
            source_id: record.id,
            name: record.name,
            kind: record.kind,
            type_pointer: record.type_pointer,
            fixed_type: record.fixed_type,
            source: record.event_source,
            previous_secret_expires_at: record
                .previous_secret_expires_at
                .filter(|at| *at > Utc::now()),
            created_at: record.created_at,
            secret_rotated_at: record.secret_rotated_at,
        }
    }
}

/// A source with its secret, shown only at creation and rotation.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct EventSourceWithSecret {
    /// The source.
    #[serde(flatten)]
    pub source: EventSourceView,
    /// The secret (`whsec_…`): Standard Webhooks senders sign with it, Okta sends it as its
    /// Authorization header. Store it; it is not shown again.
    pub secret: String,
}

impl From<WithSecret> for EventSourceWithSecret {
    fn from(created: WithSecret) -> Self {
        Self {
            source: created.source.into(),
            secret: created.secret,
        }
    }
}

/// List the organization's signed event sources.
#[utoipa::path(
    get,
    path = "/v1/event-sources",
    tag = "events",
    params(PageQuery),
    responses(
        (status = 200, description = "A page of sources", body = Page<EventSourceView>),
        (status = 400, description = "Invalid query", body = ErrorBody),
        (status = 429, description = "Read limit exceeded", body = ErrorBody),
    )
)]
pub async fn list_sources(
    State(state): State<AppState>,
    auth: Auth,
    ApiQuery(page): ApiQuery<PageQuery>,
) -> Result<(RateHeaders, Json<Page<EventSourceView>>), ApiError> {
    let limit = page.limit()?;
    let after = page.cursor(EventSourceId::parse)?;
    let rate = state
        .limiter
        .check(&auth, Operation::Read, page_cost(limit))
        .await?;
    let rows = service::list(&state, auth.acting(), after, limit + 1).await?;
    let page = Page::from_rows(rows, limit, |row| row.id.to_string(), EventSourceView::from);
    Ok((RateHeaders(rate), Json(page)))
}

/// Create a signed event source.
///
/// Senders without an API key post to `/v1/events/inbound/{sourceId}`, authenticated by the
/// source's secret, which this answer shows once. An organization has at most 50 sources.
#[utoipa::path(
    post,
    path = "/v1/event-sources",
    tag = "events",
    request_body = EventSourceRequest,
    responses(
        (status = 201, description = "Created; the secret is shown this once", body = EventSourceWithSecret),
        (status = 400, description = "Invalid request (the message names the field)", body = ErrorBody),
        (status = 409, description = "The organization has 50 sources already, or one with this CloudEvents source", body = ErrorBody),
        (status = 429, description = "Write limit exceeded", body = ErrorBody),
    )
)]
pub async fn create_source(
    State(state): State<AppState>,
    auth: Auth,
    ApiJson(request): ApiJson<EventSourceRequest>,
) -> Result<(StatusCode, RateHeaders, Json<EventSourceWithSecret>), ApiError> {
    let rate = RateHeaders(state.limiter.check(&auth, Operation::Write, 1).await?);
    let created = service::create(&state, auth.acting(), request.into()).await?;
    Ok((StatusCode::CREATED, rate, Json(created.into())))
}

/// Get a signed event source (without its secret).
#[utoipa::path(
    get,
    path = "/v1/event-sources/{id}",
    tag = "events",
    params(("id" = String, Path, description = "Source id (evs_…)")),
    responses(
        (status = 200, description = "The source", body = EventSourceView),
        (status = 404, description = "No such source in this organization", body = ErrorBody),
        (status = 429, description = "Read limit exceeded", body = ErrorBody),
    )
)]
pub async fn get_source(
    State(state): State<AppState>,
    auth: Auth,
    ApiPath(id): ApiPath<String>,
) -> Result<(RateHeaders, Json<EventSourceView>), ApiError> {
    let Some(id) = EventSourceId::parse(&id) else {
        return Err(unknown_id(&state, &auth, Operation::Read, "event source").await);
    };
    let rate = RateHeaders(state.limiter.check(&auth, Operation::Read, 1).await?);
    let record = service::get(&state, auth.acting(), id).await?;
    Ok((rate, Json(record.into())))
}

/// Delete a signed event source: its deliveries are refused (401) from now on; the events it
/// delivered and what they made stay.
#[utoipa::path(
    delete,
    path = "/v1/event-sources/{id}",
    tag = "events",
    params(("id" = String, Path, description = "Source id (evs_…)")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 404, description = "No such source in this organization", body = ErrorBody),
        (status = 429, description = "Write limit exceeded", body = ErrorBody),
    )
)]
pub async fn delete_source(
    State(state): State<AppState>,
    auth: Auth,
    ApiPath(id): ApiPath<String>,
) -> Result<(RateHeaders, StatusCode), ApiError> {
    let Some(id) = EventSourceId::parse(&id) else {
        return Err(unknown_id(&state, &auth, Operation::Write, "event source").await);
    };
    let rate = RateHeaders(state.limiter.check(&auth, Operation::Write, 1).await?);
    service::delete(&state, auth.acting(), id).await?;
    Ok((rate, StatusCode::NO_CONTENT))
}

/// Rotate a signed event source's secret.
///
/// The new secret is shown once. The previous one is still accepted for 24 hours, so the sender
/// can switch without losing deliveries; a second rotation within them ends it at once.
#[utoipa::path(
    post,
    path = "/v1/event-sources/{id}/rotate-secret",
    tag = "events",
    params(("id" = String, Path, description = "Source id (evs_…)")),
    responses(
        (status = 200, description = "The source with its new secret", body = EventSourceWithSecret),
        (status = 404, description = "No such source in this organization", body = ErrorBody),
        (status = 429, description = "Write limit exceeded", body = ErrorBody),
    )
)]
pub async fn rotate_source_secret(
    State(state): State<AppState>,
    auth: Auth,
    ApiPath(id): ApiPath<String>,
) -> Result<(RateHeaders, Json<EventSourceWithSecret>), ApiError> {
    let Some(id) = EventSourceId::parse(&id) else {
        return Err(unknown_id(&state, &auth, Operation::Write, "event source").await);
    };
    let rate = RateHeaders(state.limiter.check(&auth, Operation::Write, 1).await?);
    let rotated = service::rotate_secret(&state, auth.acting(), id).await?;
    Ok((rate, Json(rotated.into())))
}
