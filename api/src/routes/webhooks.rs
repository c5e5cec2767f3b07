//! Webhook endpoints (the seed's dashboard configuration, as API): create (the secret is shown
//! once), list, get, update, delete, rotate the secret, send a test ping, list deliveries with
//! their attempts, retry a delivery.

use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use flow_common::db::audit::{self, Actor};
use flow_common::db::webhooks::{self, DeliveryRecord, Endpoint, EndpointChanges, RetryRefusal};
use flow_common::webhook::address::check_endpoint_url;
use flow_domain::events::{TEST_EVENT_TYPE, TestEventData, event_body};
use flow_domain::ids::{DeliveryId, EventId, WebhookEndpointId};
use flow_domain::report::{decode_keyset, encode_keyset};
use flow_domain::webhook::endpoint;
use flow_domain::webhook::signing::generate_secret;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::pagination::{Page, PageQuery};
use crate::error::{ApiError, ErrorBody};
use crate::extract::{ApiJson, ApiPath, ApiQuery, Auth};
use crate::ratelimit::{Operation, RateInfo, page_cost};
use crate::state::AppState;

/// How long a rotated-out secret keeps signing beside the new one.
pub const ROTATION_OVERLAP: Duration = Duration::from_secs(24 * 3600);

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
    #[schema(required = true, value_type = String, example = "https://hr.example.com/flow-events")]
    pub url: Option<String>,
    /// Event types to deliver (default: all): flow.assigned, flow.started, flow.completed,
    /// flow.overdue.
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
    /// Event types delivered; empty means all.
    pub events: Vec<String>,
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

impl From<Endpoint> for EndpointView {
    fn from(endpoint: Endpoint) -> Self {
        Self {
            webhook_id: endpoint.id,
            url: endpoint.url,
            description: endpoint.description,
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

fn parse_events(events: Option<Vec<String>>) -> Result<Option<Vec<String>>, ApiError> {
    Ok(events
        .map(|events| endpoint::parse_events(&events))
        .transpose()?)
}

fn parse_description(description: Option<String>) -> Result<Option<Option<String>>, ApiError> {
    Ok(description
        .map(|text| endpoint::parse_description(&text))
        .transpose()?)
}

async fn parse_url(state: &AppState, text: &str) -> Result<String, ApiError> {
    check_endpoint_url(text, state.config.webhook_policy)
        .await
        .map(|url| url.to_string())
        .map_err(|invalid| ApiError::InvalidRequest(invalid.0))
}

/// The secret of endpoint `id` as stored: sealed for that endpoint.
fn seal(state: &AppState, id: WebhookEndpointId, secret: &str) -> Result<String, ApiError> {
    state
        .config
        .webhook_secrets
        .seal(id, secret)
        .map_err(|error| ApiError::Internal(anyhow::anyhow!(error)))
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
) -> Result<(StatusCode, RateInfo, Json<EndpointWithSecret>), ApiError> {
    let rate = state.limiter.check(&auth, Operation::Write, 1).await?;
    let url_text = request
        .url
        .filter(|url| !url.trim().is_empty())
        .ok_or_else(|| ApiError::InvalidRequest("url is required".into()))?;
    let events = parse_events(request.events)?.unwrap_or_default();
    let description = parse_description(request.description)?.flatten();
    let url = parse_url(&state, &url_text).await?;
    let id = WebhookEndpointId::new();
    let secret = generate_secret();
    let stored = seal(&state, id, &secret)?;
    let mut transaction = state.db.begin().await?;
    let endpoint = webhooks::create(
        &mut transaction,
        auth.org_id(),
        &webhooks::NewEndpoint {
            id,
            url,
            description,
            events,
            secret: stored,
        },
    )
    .await?
    .ok_or_else(|| {
        ApiError::Conflict(format!(
            "an organization may have at most {} webhook endpoints",
            webhooks::MAX_ENDPOINTS_PER_ORG
        ))
    })?;
    audit::record(
        &mut *transaction,
        auth.org_id(),
        Actor::ApiKey(auth.key_id),
        "webhook.created",
        &endpoint.id.to_string(),
        &endpoint.url,
    )
    .await?;
    transaction.commit().await?;
    tracing::info!(webhook_id = %endpoint.id, "webhook endpoint created");
    Ok((
        StatusCode::CREATED,
        rate,
        Json(EndpointWithSecret {
            endpoint: endpoint.into(),
            secret,
        }),
    ))
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
) -> Result<(RateInfo, Json<Page<EndpointView>>), ApiError> {
    let limit = page.limit()?;
    let after = page.cursor(WebhookEndpointId::parse)?;
    let rate = state
        .limiter
        .check(&auth, Operation::Read, page_cost(limit))
        .await?;
    let rows = webhooks::list(&state.db, auth.org_id(), after, limit + 1).await?;
    let page = Page::from_rows(
        rows,
        limit,
        |endpoint| endpoint.id.to_string(),
        EndpointView::from,
    );
    Ok((rate, Json(page)))
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
) -> Result<(RateInfo, Json<EndpointView>), ApiError> {
    let rate = state.limiter.check(&auth, Operation::Read, 1).await?;
    let endpoint = webhooks::get(&state.db, auth.org_id(), endpoint_id(&id)?)
        .await?
        .ok_or_else(|| ApiError::not_found("webhook endpoint"))?;
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
    let events = parse_events(request.events)?;
    let description = parse_description(request.description)?;
    let url = match request.url.as_deref() {
        Some(text) => Some(parse_url(&state, text).await?),
        None => None,
    };
    let changes = EndpointChanges {
        url,
        description,
        events,
        enabled: request.enabled,
    };
    // The change and its audit row commit together, or neither does.
    let mut transaction = state.db.begin().await?;
    let endpoint = webhooks::update(
        &mut *transaction,
        auth.org_id(),
        endpoint_id(&id)?,
        &changes,
    )
    .await?
    .ok_or_else(|| ApiError::not_found("webhook endpoint"))?;
    audit::record(
        &mut *transaction,
        auth.org_id(),
        Actor::ApiKey(auth.key_id),
        "webhook.updated",
        &endpoint.id.to_string(),
        &endpoint.url,
    )
    .await?;
    transaction.commit().await?;
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
) -> Result<(RateInfo, StatusCode), ApiError> {
    let rate = state.limiter.check(&auth, Operation::Write, 1).await?;
    let mut transaction = state.db.begin().await?;
    if !webhooks::delete(&mut transaction, auth.org_id(), endpoint_id(&id)?).await? {
        return Err(ApiError::not_found("webhook endpoint"));
    }
    audit::record(
        &mut *transaction,
        auth.org_id(),
        Actor::ApiKey(auth.key_id),
        "webhook.deleted",
        &id,
        "",
    )
    .await?;
    transaction.commit().await?;
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
    let id = endpoint_id(&id)?;
    let secret = generate_secret();
    // The new secret and its audit row commit together, or neither does.
    let mut transaction = state.db.begin().await?;
    let endpoint = webhooks::rotate_secret(
        &mut *transaction,
        auth.org_id(),
        id,
        &seal(&state, id, &secret)?,
        ROTATION_OVERLAP,
    )
    .await?
    .ok_or_else(|| ApiError::not_found("webhook endpoint"))?;
    audit::record(
        &mut *transaction,
        auth.org_id(),
        Actor::ApiKey(auth.key_id),
        "webhook.secret_rotated",
        &endpoint.id.to_string(),
        &endpoint.url,
    )
    .await?;
    transaction.commit().await?;
    tracing::info!(webhook_id = %endpoint.id, "webhook secret rotated");
    Ok(Json(EndpointWithSecret {
        endpoint: endpoint.into(),
        secret,
    }))
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
) -> Result<(StatusCode, RateInfo, Json<TestQueued>), ApiError> {
    let rate = state
        .limiter
        .check(&auth, Operation::WebhookSend, 1)
        .await?;
    let endpoint = webhooks::get(&state.db, auth.org_id(), endpoint_id(&id)?)
        .await?
        .ok_or_else(|| ApiError::not_found("webhook endpoint"))?;
    let event_id = EventId::new();
    let now = Utc::now();
    let body = event_body(
        event_id,
        TEST_EVENT_TYPE,
        now,
        TestEventData {
            webhook_id: endpoint.id,
            message: "This is a test event from Flow.".to_owned(),
        },
    );
    let mut transaction = state.db.begin().await?;
    let delivery_id =
        webhooks::create_test_delivery(&mut transaction, &endpoint, event_id, &body, now)
            .await?
            .ok_or_else(|| ApiError::not_found("webhook endpoint"))?;
    transaction.commit().await?;
    Ok((
        StatusCode::ACCEPTED,
        rate,
        Json(TestQueued {
            delivery_id,
            event_id,
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
    /// pending, delivering, succeeded or failed.
    pub status: String,
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
            next_attempt_at: (record.status == "pending").then_some(record.next_attempt_at),
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
    /// Only deliveries in this state: pending, delivering, succeeded or failed.
    pub status: Option<String>,
}

const DELIVERY_STATUSES: [&str; 4] = ["pending", "delivering", "succeeded", "failed"];

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
) -> Result<(RateInfo, Json<Page<DeliveryView>>), ApiError> {
    let limit = page.limit()?;
    let before = page.cursor(decode_keyset)?;
    if let Some(status) = filter.status.as_deref()
        && !DELIVERY_STATUSES.contains(&status)
    {
        return Err(ApiError::InvalidRequest(format!(
            "status must be one of: {}",
            DELIVERY_STATUSES.join(", ")
        )));
    }
    let rate = state
        .limiter
        .check(&auth, Operation::Read, page_cost(limit))
        .await?;
    let endpoint = webhooks::get(&state.db, auth.org_id(), endpoint_id(&id)?)
        .await?
        .ok_or_else(|| ApiError::not_found("webhook endpoint"))?;
    let rows = webhooks::list_deliveries(
        &state.db,
        auth.org_id(),
        endpoint.id,
        filter.status.as_deref(),
        before.map(|(at, id)| (at, DeliveryId(id))),
        limit + 1,
    )
    .await?;
    let ids: Vec<DeliveryId> = rows.iter().map(|row| row.id).collect();
    let mut attempts = webhooks::attempts(&state.db, &ids).await?;
    let page = Page::from_rows(
        rows,
        limit,
        |row| encode_keyset(row.created_at, &row.id.0),
        |row| {
            let log = attempts
                .extract_if(.., |attempt| attempt.delivery_id == row.id)
                .map(attempt_view)
                .collect();
            DeliveryView::new(row, log)
        },
    );
    Ok((rate, Json(page)))
}

fn attempt_view(attempt: webhooks::AttemptRecord) -> AttemptView {
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
) -> Result<(StatusCode, RateInfo, Json<DeliveryView>), ApiError> {
    let rate = state
        .limiter
        .check(&auth, Operation::WebhookSend, 1)
        .await?;
    let id = DeliveryId::parse(&id).ok_or_else(|| ApiError::not_found("delivery"))?;
    let mut transaction = state.db.begin().await?;
    let record = match webhooks::retry(&mut transaction, auth.org_id(), id).await? {
        Ok(record) => record,
        Err(RetryRefusal::NotFound) => return Err(ApiError::not_found("delivery")),
        Err(RetryRefusal::InFlight) => {
            return Err(ApiError::Conflict(
                "an attempt of this delivery is under way; retry when it has finished".into(),
            ));
        }
        Err(RetryRefusal::Succeeded) => {
            return Err(ApiError::Conflict(
                "this delivery succeeded already; it is not sent again".into(),
            ));
        }
    };
    transaction.commit().await?;
    let attempts = webhooks::attempts(&state.db, &[record.id]).await?;
    Ok((
        StatusCode::ACCEPTED,
        rate,
        Json(DeliveryView::new(
            record,
            attempts.into_iter().map(attempt_view).collect(),
        )),
    ))
}
