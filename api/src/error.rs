//! The one error type of the API: every failure becomes a status and the `{error, message}` body
//! (plus `retry_after` on 429). Internal errors are logged with context and answered without
//! details.

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use flow_common::amqp::PublishError;
use flow_common::domain::Invalid;
use serde::Serialize;
use utoipa::ToSchema;

use crate::ratelimit::RateInfo;

/// The error body of every failed request.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ErrorBody {
    /// Machine-readable code, e.g. `not_found`.
    pub error: &'static str,
    /// Human-readable text.
    pub message: String,
    /// Only on 429: seconds to wait before retrying.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_after: Option<u64>,
}

/// Everything a handler can fail with.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// 400 `invalid_request`.
    #[error("{0}")]
    InvalidRequest(String),
    /// 401 `unauthorized`.
    #[error("{0}")]
    Unauthorized(&'static str),
    /// 404 `not_found`.
    #[error("{0}")]
    NotFound(String),
    /// 405 `method_not_allowed`.
    #[error("method not allowed")]
    MethodNotAllowed,
    /// 409 `conflict`.
    #[error("{0}")]
    Conflict(String),
    /// 409 `conflict` with `Retry-After`: the assignment was accepted and is not persisted yet.
    #[error("the assignment is accepted and not persisted yet; retry shortly")]
    NotYet,
    /// 410 `gone`.
    #[error("{0}")]
    Gone(String),
    /// 413 `payload_too_large`.
    #[error("request body is larger than {0} bytes")]
    PayloadTooLarge(usize),
    /// 415 `unsupported_media_type`.
    #[error("Content-Type must be application/json")]
    UnsupportedMediaType,
    /// 429 `rate_limit_exceeded`.
    #[error("rate limit of {} {operation} requests per minute exceeded; retry after {retry_after} s", info.limit)]
    RateLimited {
        /// Operation name.
        operation: &'static str,
        /// Seconds to wait.
        retry_after: u64,
        /// The `RateLimit-*` headers.
        info: RateInfo,
    },
    /// 503 `service_unavailable`: a dependency is down; nothing was accepted.
    #[error("{0}")]
    Unavailable(String),
    /// 500 `internal_error`; the cause is logged, not returned.
    #[error("internal error: {0:#}")]
    Internal(#[from] anyhow::Error),
}

impl ApiError {
    /// 404 for a resource kind, worded consistently.
    pub fn not_found(what: &str) -> Self {
        Self::NotFound(format!("{what} not found"))
    }

    /// The status code.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::InvalidRequest(_) => StatusCode::BAD_REQUEST,
            Self::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            Self::NotFound(_) => StatusCode::NOT_FOUND,
            Self::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            Self::Conflict(_) | Self::NotYet => StatusCode::CONFLICT,
            Self::Gone(_) => StatusCode::GONE,
            Self::PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            Self::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Self::RateLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
            Self::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            Self::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::InvalidRequest(_) => "invalid_request",
            Self::Unauthorized(_) => "unauthorized",
            Self::NotFound(_) => "not_found",
            Self::MethodNotAllowed => "method_not_allowed",
            Self::Conflict(_) | Self::NotYet => "conflict",
            Self::Gone(_) => "gone",
            Self::PayloadTooLarge(_) => "payload_too_large",
            Self::UnsupportedMediaType => "unsupported_media_type",
            Self::RateLimited { .. } => "rate_limit_exceeded",
            Self::Unavailable(_) => "service_unavailable",
            Self::Internal(_) => "internal_error",
        }
    }

    /// The body as sent (also used per item by bulk endpoints).
    pub fn body(&self) -> ErrorBody {
        let message = match self {
            Self::Internal(_) => "an internal error occurred; it has been logged".to_owned(),
            other => other.to_string(),
        };
        let retry_after = match self {
            Self::RateLimited { retry_after, .. } => Some(*retry_after),
            _ => None,
        };
        ErrorBody {
            error: self.code(),
            message,
            retry_after,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        match &self {
            Self::Internal(error) => {
                tracing::error!(error = format!("{error:#}"), "request failed")
            }
            Self::Unavailable(reason) => tracing::warn!(%reason, "dependency unavailable"),
            _ => {}
        }
        let status = self.status();
        let mut response = (status, Json(self.body())).into_response();
        let headers = response.headers_mut();
        match &self {
            Self::RateLimited {
                retry_after, info, ..
            } => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from(*retry_after));
                info.write(headers);
            }
            Self::Unauthorized(_) => {
                headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            Self::Unavailable(_) | Self::NotYet => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            }
            _ => {}
        }
        response
    }
}

impl From<Invalid> for ApiError {
    fn from(invalid: Invalid) -> Self {
        Self::InvalidRequest(invalid.0)
    }
}

impl From<sqlx::Error> for ApiError {
    fn from(error: sqlx::Error) -> Self {
        if flow_common::db::is_transient(&error) {
            tracing::warn!(%error, "database unavailable");
            Self::Unavailable("the database is unavailable; retry shortly".into())
        } else if let Some(code) = data_exception(&error) {
            // Validation should have refused the value first; this is the net under it, so the
            // caller gets a 400 and operators a log line saying which check is missing.
            tracing::warn!(%code, %error, "Postgres refused a value of the request");
            Self::InvalidRequest(
                "a value in the request is out of range or not valid text; check dates, numbers and text fields"
                    .into(),
            )
        } else {
            Self::Internal(anyhow::Error::new(error).context("database query failed"))
        }
    }
}

/// The SQLSTATE of a Postgres data exception (class 22: a value out of range, badly encoded or
/// of the wrong form), which a request's own values caused.
fn data_exception(error: &sqlx::Error) -> Option<String> {
    match error {
        sqlx::Error::Database(database) => database
            .code()
            .filter(|code| code.starts_with("22"))
            .map(|code| code.into_owned()),
        _ => None,
    }
}

impl From<PublishError> for ApiError {
    fn from(error: PublishError) -> Self {
        match error {
            PublishError::Unroutable(_) => {
                Self::Internal(anyhow::Error::new(error).context("publishing a command"))
            }
            other => Self::Unavailable(format!(
                "the request could not be queued durably ({other}); nothing was accepted, retry shortly"
            )),
        }
    }
}

/// Adds to every operation of the OpenAPI document the error responses that the shared machinery
/// (extractors, middleware) can give it, so that the document lists every status a caller can get
/// without each handler repeating them: 401 everywhere, 400 where there is a body or a query
/// string, 413 and 415 where there is a body, 503 everywhere (Postgres or RabbitMQ unreachable).
pub struct CommonResponses;

impl utoipa::Modify for CommonResponses {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::path::ParameterIn;
        use utoipa::openapi::{ContentBuilder, Ref, RefOr, ResponseBuilder};

        let error_response = |description: &str| {
            RefOr::T(
                ResponseBuilder::new()
                    .description(description)
                    .content(
                        "application/json",
                        ContentBuilder::new()
                            .schema(Some(Ref::from_schema_name("ErrorBody")))
                            .build(),
                    )
                    .build(),
            )
        };
        for item in openapi.paths.paths.values_mut() {
            for operation in [
                &mut item.get,
                &mut item.post,
                &mut item.put,
                &mut item.patch,
                &mut item.delete,
            ]
            .into_iter()
            .flatten()
            {
                let has_body = operation.request_body.is_some();
                let has_query = operation.parameters.iter().flatten().any(|parameter| {
                    matches!(parameter, RefOr::T(parameter) if parameter.parameter_in == ParameterIn::Query)
                });
                let mut responses = vec![
                    ("401", "Missing or invalid API key"),
                    (
                        "503",
                        "Postgres or RabbitMQ unreachable (nothing was accepted), or the request took longer than REQUEST_TIMEOUT; retry",
                    ),
                ];
                if has_body || has_query {
                    responses.push(("400", "Invalid request"));
                }
                if has_body {
                    responses.push(("413", "Request body over 1 MiB"));
                    responses.push(("415", "Content-Type is not application/json"));
                }
                for (status, description) in responses {
                    operation
                        .responses
                        .responses
                        .entry(status.to_owned())
                        .or_insert_with(|| error_response(description));
                }
            }
        }
    }
}
