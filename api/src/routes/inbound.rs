//! Deliveries of signed event sources: `POST /v1/events/inbound/{sourceId}` (no API key: the
//! source's secret authenticates) and Okta's verification `GET` on the same path
//! (docs/events.md "Signed sources"). This surface only reads the headers and the body; the
//! authentication and the events are `flow_app::events::sources`'.

use std::net::SocketAddr;

use axum::extract::{ConnectInfo, State};
use axum::http::{HeaderMap, StatusCode};
use axum::{Extension, Json};
use chrono::Utc;
use flow_app::events::sources::{self as service, DeliveryHeaders, InboundError, Kind, REFUSED};
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::error::{ApiError, ErrorBody, RateHeaders};
use crate::extract::{ApiPath, RawBody};
use crate::routes::events::{EventResultView, EventsResponse};
use crate::state::AppState;

/// Routes of this module.
pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(receive_delivery, verify_okta_hook))
}

/// The header Okta sends its one-time verification challenge in.
pub const OKTA_CHALLENGE: &str = "x-okta-verification-challenge";

/// The answer to Okta's verification: the challenge, back.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct OktaVerification {
    /// The value of the request's `X-Okta-Verification-Challenge`.
    #[schema(example = "2eFmSSd5u8rnGdZGjBNSE0Oo3wVJ3nQTfU1zaw0t")]
    pub verification: String,
}

/// A header as text, when present and visible ASCII.
fn header(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get(name)
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned)
}

/// The headers of a delivery with a text (visible ASCII) value, as the service reads them.
fn delivery_headers(headers: &HeaderMap) -> DeliveryHeaders {
    DeliveryHeaders {
        all: headers
            .iter()
            .filter_map(|(name, value)| {
                Some((name.as_str().to_owned(), value.to_str().ok()?.to_owned()))
            })
            .collect(),
    }
}

impl From<InboundError> for ApiError {
    fn from(error: InboundError) -> Self {
        match error {
            InboundError::Refused => ApiError::Unauthorized(REFUSED),
            InboundError::Service(error) => error.into(),
        }
    }
}

/// Deliver events from a signed event source (no API key).
///
/// A `standard_webhooks` source: the body is one JSON value, signed with the Standard Webhooks
/// scheme under the source's secret (`webhook-id`, `webhook-timestamp` within 5 minutes of now,
/// `webhook-signature`); it becomes one event (id the `webhook-id`, type from the source's
/// pointer, data the body). An `okta` source: an Okta event hook delivery, the secret as its
/// `Authorization` header; each item of `data.events` becomes an event (id its `uuid`, type its
/// `eventType`, data the item). The events then go as `POST /v1/events` takes them: answered
/// each (`accepted`, `duplicate`, `ignored`, `invalid`), deduplicated for 7 days, counted against
/// the organization's write and assign limits. 202 for a Standard Webhooks delivery, 200 for an
/// Okta one (what Okta expects). Any failure to authenticate, an unknown source included, is the
/// same 401, and records nothing.
#[utoipa::path(
    post,
    path = "/v1/events/inbound/{sourceId}",
    tag = "events",
    security(()),
    params(
        ("sourceId" = String, Path, description = "Source id (evs_…)"),
        ("webhook-id" = Option<String>, Header, description = "Standard Webhooks: the delivery's id, the event's id"),
        ("webhook-timestamp" = Option<String>, Header, description = "Standard Webhooks: seconds since the epoch, within 5 minutes of now"),
        ("webhook-signature" = Option<String>, Header, description = "Standard Webhooks: space-separated v1,<base64 HMAC-SHA256> signatures"),
    ),
    request_body(content = Object, content_type = "application/json",
        description = "Any JSON value (standard_webhooks), or an Okta event hook delivery (okta); at most 1 MiB"),
    responses(
        (status = 200, description = "Okta: a result per event of data.events, in order", body = EventsResponse),
        (status = 202, description = "Standard Webhooks: the result of the delivery's event", body = EventsResponse),
        (status = 400, description = "The body is not JSON, or an Okta delivery has no data.events array or more than 1,000 events", body = ErrorBody),
        (status = 401, description = "Not authenticated: unknown source, or a missing or wrong signature or secret, or a timestamp more than 5 minutes from now", body = ErrorBody),
        (status = 413, description = "The body is larger than 1 MiB", body = ErrorBody),
        (status = 429, description = "The organization's write or assign limit exceeded, or this client address had 20 deliveries refused (401) in the last minute (Retry-After)", body = ErrorBody),
        (status = 503, description = "Recorded, but the actions could not be queued: deliver again", body = ErrorBody),
    )
)]
pub async fn receive_delivery(
    State(state): State<AppState>,
    ApiPath(source_id): ApiPath<String>,
    client: Option<Extension<ConnectInfo<SocketAddr>>>,
    headers: HeaderMap,
    RawBody(body): RawBody,
) -> Result<(StatusCode, RateHeaders, Json<EventsResponse>), ApiError> {
    let delivered = service::receive(
        &state,
        &source_id,
        &delivery_headers(&headers),
        &body,
        client.map(|Extension(ConnectInfo(address))| address.ip()),
        Utc::now(),
    )
    .await?;
    let status = match delivered.kind {
        Kind::Okta => StatusCode::OK,
        Kind::StandardWebhooks => StatusCode::ACCEPTED,
    };
    Ok((
        status,
        RateHeaders(delivered.ingested.rate),
        Json(EventsResponse {
            results: delivered
                .ingested
                .results
                .into_iter()
                .map(EventResultView::from)
                .collect(),
        }),
    ))
}

/// Okta's one-time verification of an event hook (no API key): answers the
/// `X-Okta-Verification-Challenge` back, when the `Authorization` header is the source's secret.
#[utoipa::path(
    get,
    path = "/v1/events/inbound/{sourceId}",
    tag = "events",
    security(()),
    params(
        ("sourceId" = String, Path, description = "Source id (evs_…) of an okta source"),
        ("X-Okta-Verification-Challenge" = String, Header, description = "The challenge Okta sends, at most 1,000 characters"),
    ),
    responses(
        (status = 200, description = "The challenge, back", body = OktaVerification),
        (status = 400, description = "The challenge header is missing or longer than 1,000 characters", body = ErrorBody),
        (status = 401, description = "Not authenticated: unknown source, not an okta source, or the Authorization header is not its secret", body = ErrorBody),
        (status = 429, description = "This client address had 20 deliveries refused (401) in the last minute (Retry-After)", body = ErrorBody),
    )
)]
pub async fn verify_okta_hook(
    State(state): State<AppState>,
    ApiPath(source_id): ApiPath<String>,
    client: Option<Extension<ConnectInfo<SocketAddr>>>,
    headers: HeaderMap,
) -> Result<Json<OktaVerification>, ApiError> {
    let challenge = header(&headers, OKTA_CHALLENGE);
    let verification = service::verify_okta(
        &state,
        &source_id,
        &delivery_headers(&headers),
        challenge.as_deref(),
        client.map(|Extension(ConnectInfo(address))| address.ip()),
        Utc::now(),
    )
    .await?;
    Ok(Json(OktaVerification { verification }))
}
