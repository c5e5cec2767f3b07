//! Events in: `POST /v1/events`, CloudEvents 1.0 over HTTP in its three modes (structured,
//! batch, binary), answered per event (docs/events.md). This surface only unwraps the mode; the
//! checks, the triggers and the exactly-once recording are `flow_app::events`'.

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use chrono::Utc;
use flow_app::events::cloudevent::{CloudEvent, MAX_EVENTS, Received};
use flow_app::events::{self as service, EventResult};
use flow_domain::ids::AssignmentId;
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::error::{ApiError, ErrorBody, RateHeaders};
use crate::extract::{Auth, RawBody};
use crate::state::AppState;

/// Routes of this module.
pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(post_events))
}

/// The structured mode's content type: the body is one event.
pub const STRUCTURED: &str = "application/cloudevents+json";

/// The batch mode's content type: the body is an array of events.
pub const BATCH: &str = "application/cloudevents-batch+json";

/// The prefix of the binary mode's attribute headers.
const BINARY_PREFIX: &str = "ce-";

/// What became of one event.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct EventResultView {
    /// The event's `id` (empty when it had none).
    pub id: String,
    /// The event's `source` (empty when it had none).
    pub source: String,
    /// accepted (recorded now; its triggers acted), duplicate (recorded before: nothing acted
    /// again), ignored (recorded now; no trigger matched, or nothing was open to cancel) or
    /// invalid (not recorded: see `reason`).
    #[schema(example = "accepted")]
    pub status: String,
    /// The assignments its triggers made (or cancelled), for accepted and duplicate events.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub assignment_ids: Vec<AssignmentId>,
    /// Why, for invalid and ignored events.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl From<EventResult> for EventResultView {
    fn from(result: EventResult) -> Self {
        Self {
            id: result.id,
            source: result.source,
            status: result.status.as_str().to_owned(),
            assignment_ids: result.assignment_ids,
            reason: result.reason,
        }
    }
}

/// The answer to a request of events.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct EventsResponse {
    /// One result per event, in request order.
    pub results: Vec<EventResultView>,
}

/// Send events (CloudEvents 1.0): the organization's event triggers assign flows to, or cancel
/// assignments of, the people they name.
///
/// Three modes: structured (`Content-Type: application/cloudevents+json`, the body is one
/// event), batch (`application/cloudevents-batch+json`, an array of at most 1,000 events) and
/// binary (`ce-id`, `ce-source`, `ce-type`, `ce-specversion` headers; the body is the event's
/// `data`, of the request's Content-Type). At most 1 MiB. Each event is answered on its own:
/// `accepted`, `duplicate` (its `source` and `id` were received in the last 7 days: nothing acts
/// twice), `ignored` or `invalid` with the reason. Costs one write request per event and one
/// assign request per assignment made (429 for the whole request, nothing recorded). A 503 means
/// the events were recorded but their actions not queued: send them again.
#[utoipa::path(
    post,
    path = "/v1/events",
    tag = "events",
    request_body(content = Object, content_type = "application/cloudevents+json",
        description = "One CloudEvent (structured mode); or an array of them as application/cloudevents-batch+json (batch mode); or the data of one, with ce-id, ce-source, ce-type and ce-specversion headers (binary mode)"),
    responses(
        (status = 202, description = "A result per event, in request order", body = EventsResponse),
        (status = 400, description = "The body is not JSON, or a batch is not an array or has more than 1,000 events", body = ErrorBody),
        (status = 413, description = "The body is larger than 1 MiB", body = ErrorBody),
        (status = 415, description = "Neither a CloudEvents content type nor binary-mode ce- headers", body = ErrorBody),
        (status = 429, description = "Write or assign limit exceeded", body = ErrorBody),
        (status = 503, description = "Recorded, but the actions could not be queued: send the events again", body = ErrorBody),
    )
)]
pub async fn post_events(
    State(state): State<AppState>,
    auth: Auth,
    headers: HeaderMap,
    RawBody(body): RawBody,
) -> Result<(StatusCode, RateHeaders, Json<EventsResponse>), ApiError> {
    let received = unwrap_mode(&headers, &body)?;
    let ingested = service::ingest(&state, auth.acting(), received, Utc::now()).await?;
    Ok((
        StatusCode::ACCEPTED,
        RateHeaders(ingested.rate),
        Json(EventsResponse {
            results: ingested
                .results
                .into_iter()
                .map(EventResultView::from)
                .collect(),
        }),
    ))
}

/// The request's media type, lower-cased, without parameters.
fn media_type(headers: &HeaderMap) -> String {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.split(';').next())
        .map(|value| value.trim().to_ascii_lowercase())
        .unwrap_or_default()
}

/// Whether a media type is JSON (`application/json` or `…+json`).
fn is_json(media: &str) -> bool {
    media == "application/json" || (media.starts_with("application/") && media.ends_with("+json"))
}

/// The body as JSON, or a 400 saying where it breaks.
fn parse_json(body: &[u8]) -> Result<Value, ApiError> {
    serde_json::from_slice(body)
        .map_err(|error| ApiError::InvalidRequest(format!("the body is not valid JSON: {error}")))
}

/// The events of the request, by its mode.
fn unwrap_mode(headers: &HeaderMap, body: &[u8]) -> Result<Vec<Received>, ApiError> {
    let media = media_type(headers);
    if media == STRUCTURED {
        return Ok(vec![CloudEvent::from_json(parse_json(body)?)]);
    }
    if media == BATCH {
        let Value::Array(items) = parse_json(body)? else {
            return Err(ApiError::InvalidRequest(
                "a batch (application/cloudevents-batch+json) must be a JSON array of events"
                    .into(),
            ));
        };
        if items.len() > MAX_EVENTS {
            return Err(ApiError::InvalidRequest(format!(
                "a batch has at most {MAX_EVENTS} events ({} sent); send more in several \
                 requests",
                items.len()
            )));
        }
        return Ok(items.into_iter().map(CloudEvent::from_json).collect());
    }
    if headers.contains_key("ce-specversion") {
        return binary(headers, &media, body).map(|event| vec![event]);
    }
    Err(ApiError::UnsupportedMediaTypeSaying(format!(
        "send events as {STRUCTURED} (one event), {BATCH} (an array) or in binary mode \
         (ce-specversion, ce-id, ce-source and ce-type headers, the data as the body)"
    )))
}

/// The event of a binary-mode request: its `ce-` headers are its attributes, the body its data
/// (JSON for a JSON content type, else text), the content type its `datacontenttype`.
fn binary(headers: &HeaderMap, media: &str, body: &[u8]) -> Result<Received, ApiError> {
    let mut attributes = Vec::new();
    for (name, value) in headers {
        let Some(attribute) = name.as_str().strip_prefix(BINARY_PREFIX) else {
            continue;
        };
        let value = value.to_str().map_err(|_| {
            ApiError::InvalidRequest(format!("header {name} must be visible ASCII"))
        })?;
        attributes.push((attribute.to_owned(), value.to_owned()));
    }
    if let Some(content_type) = headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
    {
        attributes.push(("datacontenttype".into(), content_type.to_owned()));
    }
    let data = if body.is_empty() {
        None
    } else if is_json(media) {
        Some(parse_json(body)?)
    } else {
        let text = std::str::from_utf8(body).map_err(|_| {
            ApiError::InvalidRequest("a binary event's non-JSON data must be UTF-8 text".into())
        })?;
        Some(Value::String(text.to_owned()))
    };
    Ok(CloudEvent::from_binary(attributes, data))
}
