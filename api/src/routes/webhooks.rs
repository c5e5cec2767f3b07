//! Webhook endpoints (the seed's dashboard configuration, as API): create (the secret is shown
//! once), list, get, update, delete, rotate the secret, send a test ping, list deliveries with
//! their attempts, retry a delivery.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use flow_app::ratelimit::{Operation, page_cost};
use flow_app::webhooks::{self as service, EndpointFields, WithSecret};
use flow_common::db::webhooks::endpoints::Endpoint;
use flow_common::db::webhooks::log::{AttemptRecord, DeliveryRecord};
use flow_domain::events::EventType;
use flow_domain::ids::{DeliveryId, EventId, WebhookEndpointId};
use flow_domain::report::{decode_keyset, encode_keyset};
use flow_domain::webhook::DeliveryStatus;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::pagination::{Page, PageQuery};
use super::unknown_id;
use crate::error::{ApiError, ErrorBody, RateHeaders};
use crate::extract::{ApiJson, ApiPath, ApiQuery, Auth};
use crate::state::AppState;

/// Routes of this module.
pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(create_endpoint, list_endpoints))
        .routes(routes!(get_endpoint, update_endpoint, delete_endpoint))
        .routes(routes!(rotate_secret))
        .routes(routes!(send_test))
        .routes(routes!(list_deliveries))
        .routes(routes!(retry_delivery))
}

/// Body of endpoint creation.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CreateEndpointRequest {
    /// Where events are POSTed: https (http only where the service allows it), not a loopback,
    /// private, link-local or metadata address.
    #[schema(required = true, value_type = String, example = "https://example.com/flow-events")]
    pub url: Option<String>,
    /// Event types to deliver (default: all).
    #[schema(value_type = Option<Vec<EventType>>)]
    pub events: Option<Vec<String>>,
    /// Free text, at most 500 characters.
    #[schema(max_length = 500)]
    pub description: Option<String>,
}

/// Body of endpoint update; absent fields stay as they are.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct UpdateEndpointRequest {
    /// New URL.
    pub url: Option<String>,
    /// New event filter (an empty list means all).
    #[schema(value_type = Option<Vec<EventType>>)]
    pub events: Option<Vec<String>>,
    /// New description, at most 500 characters (an empty string clears it).
    #[schema(max_length = 500)]
    pub description: Option<String>,
    /// Enable or disable; enabling clears the reason it was disabled.
    pub enabled: Option<bool>,
}

/// An endpoint (without its secret).
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct EndpointView {
    /// Identifier.
    pub webhook_id: WebhookEndpointId,
    /// Where events are POSTed.
    pub url: String,
    /// Free text.
    pub description: Option<String>,
    /// Event types delivered as chosen; empty means all.
    pub events: Vec<EventType>,
    /// Whether every event type is delivered, those added to Flow later too (`events` empty).
    pub all_events: bool,
    /// Whether deliveries go out.
    pub enabled: bool,
    /// Why it is disabled: `gone` (it answered 410), `failing` (days of failures), or by the
    /// organization.
    pub disabled_reason: Option<String>,
    /// Start of the current run of failed attempts.
    #[serde(serialize_with = "flow_domain::timestamp::option::serialize")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub failing_since: Option<DateTime<Utc>>,
    /// Until when the previous secret also signs (after a rotation).
    #[serde(serialize_with = "flow_domain::timestamp::option::serialize")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub previous_secret_expires_at: Option<DateTime<Utc>>,
    /// Creation time.
    #[serde(serialize_with = "flow_domain::timestamp::serialize")]
    #[schema(value_type = String, format = DateTime)]
    pub created_at: DateTime<Utc>,
    /// Last change.
    #[serde(serialize_with = "flow_domain::timestamp::serialize")]
    #[schema(value_type = String, format = DateTime)]
    pub updated_at: DateTime<Utc>,
}

impl From<WithSecret> for EndpointWithSecret {
    fn from(created: WithSecret) -> Self {
        Self {
            endpoint: created.endpoint.into(),
            secret: created.secret,
        }
    }
}

impl From<Endpoint> for EndpointView {
    fn from(endpoint: Endpoint) -> Self {
        Self {
            webhook_id: endpoint.id,
            url: endpoint.url,
            description: endpoint.description,
            all_events: endpoint.events.is_empty(),
            events: endpoint.events,
            enabled: endpoint.enabled,
            disabled_reason: endpoint.disabled_reason,
            failing_since: endpoint.failing_since,
            previous_secret_expires_at: endpoint
                .previous_secret_expires_at
                .filter(|at| *at > Utc::now()),
            created_at: endpoint.created_at,
            updated_at: endpoint.updated_at,
        }
    }
}

/// An endpoint with its signing secret, shown only at creation and rotation.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct EndpointWithSecret {
    /// The endpoint.
    #[serde(flatten)]
    pub endpoint: EndpointView,
    /// Signing secret (`whsec_…`); store it, it is not shown again.
    pub secret: String,
}

fn endpoint_id(text: &str) -> Result<WebhookEndpointId, ApiError> {
    WebhookEndpointId::parse(text).ok_or_else(|| ApiError::not_found("webhook endpoint"))
}

/// Create a webhook endpoint.
#[utoipa::path(
    post,
    path = "/v1/webhooks",
    tag = "webhooks",
    request_body = CreateEndpointRequest,
    responses(
        (status = 201, description = "Created; the secret is shown this once", body = EndpointWithSecret),
        (status = 400, description = "Invalid request (including a refused address)", body = ErrorBody),
        (status = 409, description = "The organization has the most endpoints allowed", body = ErrorBody),
        (status = 429, description = "Write limit exceeded", body = ErrorBody),
    )
)]
pub async fn create_endpoint(
    State(state): State<AppState>,
    auth: Auth,
    ApiJson(request): ApiJson<CreateEndpointRequest>,
) -> Result<(StatusCode, RateHeaders, Json<EndpointWithSecret>), ApiError> {
    let rate = RateHeaders(state.limiter.check(&auth, Operation::Write, 1).await?);
    let fields = EndpointFields {
        url: request.url,
        events: request.events,
        description: request.description,
        enabled: None,
    };
    let created = service::create(&state, auth.acting(), &fields).await?;
    Ok((StatusCode::CREATED, rate, Json(created.into())))
}

/// List webhook endpoints.
#[utoipa::path(
    get,
    path = "/v1/webhooks",
    tag = "webhooks",
    params(PageQuery),
    responses(
        (status = 200, description = "A page of endpoints", body = Page<EndpointView>),
        (status = 429, description = "Read limit exceeded", body = ErrorBody),
    )
)]
pub async fn list_endpoints(
    State(state): State<AppState>,
    auth: Auth,
    ApiQuery(page): ApiQuery<PageQuery>,
) -> Result<(RateHeaders, Json<Page<EndpointView>>), ApiError> {
    let limit = page.limit()?;
    let after = page.cursor(WebhookEndpointId::parse)?;
    let rate = state
        .limiter
        .check(&auth, Operation::Read, page_cost(limit))
        .await?;
    let rows = service::list(&state, auth.acting(), after, limit + 1).await?;
    let page = Page::from_rows(
        rows,
        limit,
        |endpoint| endpoint.id.to_string(),
        EndpointView::from,
    );
    Ok((RateHeaders(rate), Json(page)))
}

/// Get a webhook endpoint.
#[utoipa::path(
    get,
    path = "/v1/webhooks/{id}",
    tag = "webhooks",
    params(("id" = String, Path, description = "Endpoint id (whe_…)")),
    responses(
        (status = 200, description = "The endpoint", body = EndpointView),
        (status = 404, description = "No such endpoint in this organization", body = ErrorBody),
        (status = 429, description = "Read limit exceeded", body = ErrorBody),
    )
)]
pub async fn get_endpoint(
    State(state): State<AppState>,
    auth: Auth,
    ApiPath(id): ApiPath<String>,
) -> Result<(RateHeaders, Json<EndpointView>), ApiError> {
    let rate = RateHeaders(state.limiter.check(&auth, Operation::Read, 1).await?);
    let endpoint = service::get(&state, auth.acting(), endpoint_id(&id)?).await?;
    Ok((rate, Json(endpoint.into())))
}

/// Update a webhook endpoint.
#[utoipa::path(
    patch,
    path = "/v1/webhooks/{id}",
    tag = "webhooks",
    request_body = UpdateEndpointRequest,
    params(("id" = String, Path, description = "Endpoint id (whe_…)")),
    responses(
        (status = 200, description = "The updated endpoint", body = EndpointView),
        (status = 400, description = "Invalid request", body = ErrorBody),
        (status = 404, description = "No such endpoint in this organization", body = ErrorBody),
    )
)]
pub async fn update_endpoint(
    State(state): State<AppState>,
    auth: Auth,
    ApiPath(id): ApiPath<String>,
    ApiJson(request): ApiJson<UpdateEndpointRequest>,
) -> Result<Json<EndpointView>, ApiError> {
    let fields = EndpointFields {
        url: request.url,
        events: request.events,
        description: request.description,
        enabled: request.enabled,
    };
    let endpoint = service::update(&state, auth.acting(), endpoint_id(&id)?, &fields).await?;
    Ok(Json(endpoint.into()))
}

/// Delete a webhook endpoint and its delivery history.
#[utoipa::path(
    delete,
    path = "/v1/webhooks/{id}",
    tag = "webhooks",
    params(("id" = String, Path, description = "Endpoint id (whe_…)")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 404, description = "No such endpoint in this organization", body = ErrorBody),
        (status = 429, description = "Write limit exceeded", body = ErrorBody),
    )
)]
pub async fn delete_endpoint(
    State(state): State<AppState>,
    auth: Auth,
    ApiPath(id): ApiPath<String>,
) -> Result<(RateHeaders, StatusCode), ApiError> {
    let rate = RateHeaders(state.limiter.check(&auth, Operation::Write, 1).await?);
    service::delete(&state, auth.acting(), endpoint_id(&id)?).await?;
    Ok((rate, StatusCode::NO_CONTENT))
}

/// Rotate an endpoint's signing secret.
///
/// The new secret is shown once. For 24 hours deliveries carry two signatures, by the new and the
/// previous secret, so the receiver can switch without losing events.
#[utoipa::path(
    post,
    path = "/v1/webhooks/{id}/rotate-secret",
    tag = "webhooks",
    params(("id" = String, Path, description = "Endpoint id (whe_…)")),
    responses(
        (status = 200, description = "The endpoint with its new secret", body = EndpointWithSecret),
        (status = 404, description = "No such endpoint in this organization", body = ErrorBody),
    )
)]
pub async fn rotate_secret(
    State(state): State<AppState>,
    auth: Auth,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<EndpointWithSecret>, ApiError> {
    let rotated = service::rotate_secret(&state, auth.acting(), endpoint_id(&id)?).await?;
    Ok(Json(rotated.into()))
}

/// A test delivery, queued.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TestQueued {
    /// The delivery (see the endpoint's deliveries).
    pub delivery_id: DeliveryId,
    /// Its event id (the `webhook-id` header).
    pub event_id: EventId,
}

/// Send a `webhook.test` event to the endpoint (even when it is disabled, so it can be checked
/// before it is enabled again).
///
/// Test pings and manual retries share a per-organization limit (60 a minute, 600 for enterprise
/// organizations).
#[utoipa::path(
    post,
    path = "/v1/webhooks/{id}/test",
    tag = "webhooks",
    params(("id" = String, Path, description = "Endpoint id (whe_…)")),
    responses(
        (status = 202, description = "Queued for delivery", body = TestQueued),
        (status = 404, description = "No such endpoint in this organization", body = ErrorBody),
        (status = 429, description = "Too many test pings and retries", body = ErrorBody),
    )
)]
pub async fn send_test(
    State(state): State<AppState>,
    auth: Auth,
    ApiPath(id): ApiPath<String>,
) -> Result<(StatusCode, RateHeaders, Json<TestQueued>), ApiError> {
    let Some(id) = WebhookEndpointId::parse(&id) else {
        return Err(unknown_id(&state, &auth, Operation::WebhookSend, "webhook endpoint").await);
    };
    let (queued, rate) = service::send_test(&state, auth.acting(), id).await?;
    Ok((
        StatusCode::ACCEPTED,
        RateHeaders(rate),
        Json(TestQueued {
            delivery_id: queued.delivery_id,
            event_id: queued.event_id,
        }),
    ))
}

/// One attempt of a delivery.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AttemptView {
    /// Number, from 1.
    pub attempt: i32,
    /// When it was sent.
    #[serde(serialize_with = "flow_domain::timestamp::serialize")]
    #[schema(value_type = String, format = DateTime)]
    pub attempted_at: DateTime<Utc>,
    /// HTTP status, when the endpoint answered.
    pub status_code: Option<i32>,
    /// Time to the answer or failure.
    pub latency_ms: i32,
    /// Transport error or refusal.
    pub error: Option<String>,
    /// Start of the response body (1 KiB at most).
    pub response_excerpt: Option<String>,
}

/// A delivery of one event to the endpoint.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeliveryView {
    /// Identifier.
    pub delivery_id: DeliveryId,
    /// Endpoint.
    pub webhook_id: WebhookEndpointId,
    /// Event id (the `webhook-id` header, the same on every attempt).
    pub event_id: EventId,
    /// Event type.
    pub event_type: String,
    /// Where it stands.
    pub status: DeliveryStatus,
    /// Attempts made.
    pub attempts: i32,
    /// Next attempt, while pending.
    #[serde(serialize_with = "flow_domain::timestamp::option::serialize")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub next_attempt_at: Option<DateTime<Utc>>,
    /// Status code of the last attempt.
    pub last_status_code: Option<i32>,
    /// Error of the last attempt.
    pub last_error: Option<String>,
    /// Creation time.
    #[serde(serialize_with = "flow_domain::timestamp::serialize")]
    #[schema(value_type = String, format = DateTime)]
    pub created_at: DateTime<Utc>,
    /// When it succeeded.
    #[serde(serialize_with = "flow_domain::timestamp::option::serialize")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub delivered_at: Option<DateTime<Utc>>,
    /// The body sent.
    #[schema(value_type = Object)]
    pub payload: serde_json::Value,
    /// Every attempt, oldest first.
    pub attempt_log: Vec<AttemptView>,
}

impl DeliveryView {
    fn new(record: DeliveryRecord, attempt_log: Vec<AttemptView>) -> Self {
        Self {
            delivery_id: record.id,
            webhook_id: record.endpoint_id,
            event_id: record.event_id,
            event_type: record.event_type,
            next_attempt_at: (record.status == DeliveryStatus::Pending)
                .then_some(record.next_attempt_at),
            status: record.status,
            attempts: record.attempts,
            last_status_code: record.last_status_code,
            last_error: record.last_error,
            created_at: record.created_at,
            delivered_at: record.delivered_at,
            payload: record.payload,
            attempt_log,
        }
    }
}

/// Filter of the delivery list.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct DeliveryFilter {
    /// Only deliveries in this state.
    #[param(value_type = Option<DeliveryStatus>)]
    pub status: Option<String>,
}

/// List an endpoint's deliveries, newest first, with their attempts.
#[utoipa::path(
    get,
    path = "/v1/webhooks/{id}/deliveries",
    tag = "webhooks",
    params(("id" = String, Path, description = "Endpoint id (whe_…)"), DeliveryFilter, PageQuery),
    responses(
        (status = 200, description = "A page of deliveries", body = Page<DeliveryView>),
        (status = 400, description = "Invalid filter", body = ErrorBody),
        (status = 404, description = "No such endpoint in this organization", body = ErrorBody),
        (status = 429, description = "Read limit exceeded", body = ErrorBody),
    )
)]
pub async fn list_deliveries(
    State(state): State<AppState>,
    auth: Auth,
    ApiPath(id): ApiPath<String>,
    ApiQuery(page): ApiQuery<PageQuery>,
    ApiQuery(filter): ApiQuery<DeliveryFilter>,
) -> Result<(RateHeaders, Json<Page<DeliveryView>>), ApiError> {
    let limit = page.limit()?;
    let before = page.cursor(decode_keyset)?;
    let status = filter
        .status
        .as_deref()
        .map(|text| DeliveryStatus::parse_field("status", text))
        .transpose()?;
    let rate = state
        .limiter
        .check(&auth, Operation::Read, page_cost(limit))
        .await?;
    let rows = service::deliveries(
        &state,
        auth.acting(),
        endpoint_id(&id)?,
        status,
        before.map(|(at, id)| (at, DeliveryId(id))),
        limit + 1,
    )
    .await?;
    let page = Page::from_rows(
        rows,
        limit,
        |row| encode_keyset(row.delivery.created_at, &row.delivery.id.0),
        |row| {
            let log = row.attempts.into_iter().map(attempt_view).collect();
            DeliveryView::new(row.delivery, log)
        },
    );
    Ok((RateHeaders(rate), Json(page)))
}

fn attempt_view(attempt: AttemptRecord) -> AttemptView {
    AttemptView {
        attempt: attempt.attempt,
        attempted_at: attempt.attempted_at,
        status_code: attempt.status_code,
        latency_ms: attempt.latency_ms,
        error: attempt.error,
        response_excerpt: attempt.response_excerpt,
    }
}

/// Retry a delivery now.
///
/// A failed delivery gets one more attempt; a pending one is brought forward. The event keeps
/// its id, so the receiver can recognise it. A delivery that succeeded stays as it is. Manual
/// retries and test pings share a per-organization limit (60 a minute, 600 for enterprise
/// organizations).
#[utoipa::path(
    post,
    path = "/v1/webhooks/deliveries/{id}/retry",
    tag = "webhooks",
    params(("id" = String, Path, description = "Delivery id (dlv_…)")),
    responses(
        (status = 202, description = "Queued for an attempt", body = DeliveryView),
        (status = 404, description = "No such delivery in this organization", body = ErrorBody),
        (status = 409, description = "An attempt is under way, or the delivery succeeded already", body = ErrorBody),
        (status = 429, description = "Too many test pings and retries", body = ErrorBody),
    )
)]
pub async fn retry_delivery(
    State(state): State<AppState>,
    auth: Auth,
    ApiPath(id): ApiPath<String>,
) -> Result<(StatusCode, RateHeaders, Json<DeliveryView>), ApiError> {
    let Some(id) = DeliveryId::parse(&id) else {
        return Err(unknown_id(&state, &auth, Operation::WebhookSend, "delivery").await);
    };
    let (retried, rate) = service::retry_delivery(&state, auth.acting(), id).await?;
    Ok((
        StatusCode::ACCEPTED,
        RateHeaders(rate),
        Json(DeliveryView::new(
            retried.delivery,
            retried.attempts.into_iter().map(attempt_view).collect(),
        )),
    ))
}
