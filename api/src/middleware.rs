//! Cross-cutting request handling: the request id, logs and metrics, and panics.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{MatchedPath, Request};
use axum::http::HeaderValue;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tracing::Instrument;

use crate::error::ApiError;
use crate::extract::RequestId;

/// Header carrying the request id.
pub const REQUEST_ID_HEADER: &str = "x-request-id";

/// Longest accepted `X-Request-ID`.
pub const MAX_REQUEST_ID_LEN: usize = 200;

/// Validates or generates the request id, echoes it on the response, and logs the request in a
/// span that carries it. The span names the request's route template (`route`, e.g.
/// `/dashboard/welcome/{token}`, recorded by [`record_metrics`] once the router has matched it;
/// absent for an unmatched request), never its path or query: those can carry secrets, such as
/// the one-time token of a sign-in link, and every log line and exported span would repeat them.
pub async fn request_context(mut request: Request, next: Next) -> Response {
    let started = Instant::now();
    let supplied = request.headers().get(REQUEST_ID_HEADER).cloned();
    let (request_id, invalid) = match supplied {
        Some(value) => match valid_request_id(&value) {
            Some(id) => (
                RequestId {
                    value: Arc::from(id),
                    from_caller: true,
                },
                false,
            ),
            None => (generated(), true),
        },
        None => (generated(), false),
    };
    let method = request.method().clone();
    let span = tracing::info_span!(
        "request",
        request_id = %request_id.value,
        %method,
        route = tracing::field::Empty,
    );
    // A caller's W3C trace continues here, and on into the messages this request publishes.
    flow_common::telemetry::continue_trace(
        &span,
        request
            .headers()
            .get(flow_common::telemetry::TRACEPARENT)
            .and_then(|value| value.to_str().ok()),
    );
    let mut response = if invalid {
        ApiError::InvalidRequest(format!(
            "X-Request-ID must be 1 to {MAX_REQUEST_ID_LEN} printable ASCII characters"
        ))
        .into_response()
    } else {
        request.extensions_mut().insert(request_id.clone());
        next.run(request).instrument(span.clone()).await
    };
    if let Ok(value) = HeaderValue::from_str(&request_id.value) {
        response.headers_mut().insert(REQUEST_ID_HEADER, value);
    }
    let status = response.status();
    let elapsed_ms = started.elapsed().as_secs_f64() * 1000.0;
    span.in_scope(|| {
        if status.is_server_error() {
            tracing::warn!(status = status.as_u16(), elapsed_ms, "request failed");
        } else if status.is_client_error() {
            tracing::info!(status = status.as_u16(), elapsed_ms, "request rejected");
        } else {
            tracing::debug!(status = status.as_u16(), elapsed_ms, "request served");
        }
    });
    response
}

fn generated() -> RequestId {
    RequestId {
        value: Arc::from(uuid::Uuid::now_v7().simple().to_string()),
        from_caller: false,
    }
}

fn valid_request_id(value: &HeaderValue) -> Option<&str> {
    let text = value.to_str().ok()?;
    let ok = !text.is_empty()
        && text.len() <= MAX_REQUEST_ID_LEN
        && text.bytes().all(|byte| (0x20..0x7f).contains(&byte));
    ok.then_some(text)
}

/// Counts requests and their latency by route template and status, and names the route template
/// in the request's span (see [`request_context`]). Runs as a route layer, after routing, where
/// the template is known.
pub async fn record_metrics(request: Request, next: Next) -> Response {
    let started = Instant::now();
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map(|path| path.as_str().to_owned())
        .unwrap_or_else(|| "unmatched".to_owned());
    tracing::Span::current().record("route", route.as_str());
    let method = request.method().to_string();
    let response = next.run(request).await;
    let status = response.status().as_u16().to_string();
    let labels = [("route", route), ("method", method), ("status", status)];
    metrics::counter!("flow_http_requests_total", &labels).increment(1);
    metrics::histogram!("flow_http_request_duration_seconds", &labels)
        .record(started.elapsed().as_secs_f64());
    response
}

/// Turns a handler panic into a logged 500 with the error body.
pub fn panic_response(panic: Box<dyn std::any::Any + Send + 'static>) -> Response {
    let detail = panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|text| (*text).to_owned()))
        .unwrap_or_else(|| "unknown panic".to_owned());
    ApiError::Internal(anyhow::anyhow!("handler panicked: {detail}")).into_response()
}
