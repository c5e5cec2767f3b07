//! The one error type of the API: every failure becomes a status and the `{error, message}` body
//! (plus `retry_after` on 429). Internal errors are logged with context and answered without
//! details. The services' own errors (caches, lookups, rate limits, publishing, Postgres) become
//! it here, at the edge; so do the `RateLimit-*` headers, which successful answers of
//! rate-limited operations carry too.

use axum::Json;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, IntoResponseParts, Response, ResponseParts};
use flow_common::amqp::PublishError;
use flow_domain::Invalid;
use serde::Serialize;
use utoipa::ToSchema;

use crate::caches::CacheError;
use crate::lookup::LookupError;
use crate::ratelimit::{RateInfo, RateLimitError};
use crate::services::ServiceError;

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
    /// 429 `rate_limit_exceeded` for a cap that is not a per-minute rate (queued or stored
    /// exports, unknown keys from one address): `Retry-After` without the `RateLimit-*` headers.
    #[error("{message}")]
    Throttled {
        /// What was refused and why, with what to do.
        message: String,
        /// Seconds to wait.
        retry_after: u64,
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
            Self::RateLimited { .. } | Self::Throttled { .. } => StatusCode::TOO_MANY_REQUESTS,
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
            Self::RateLimited { .. } | Self::Throttled { .. } => "rate_limit_exceeded",
            Self::Unavailable(_) => "service_unavailable",
            Self::Internal(_) => "internal_error",
        }
    }

    /// The same failure once more, for the next of several items one cause failed together (a
    /// bulk request's lookup or broker message); an internal error's cause is kept as text.
    pub fn again(&self) -> Self {
        match self {
            Self::InvalidRequest(message) => Self::InvalidRequest(message.clone()),
            Self::Unauthorized(message) => Self::Unauthorized(message),
            Self::NotFound(message) => Self::NotFound(message.clone()),
            Self::MethodNotAllowed => Self::MethodNotAllowed,
            Self::Conflict(message) => Self::Conflict(message.clone()),
            Self::NotYet => Self::NotYet,
            Self::Gone(message) => Self::Gone(message.clone()),
            Self::PayloadTooLarge(limit) => Self::PayloadTooLarge(*limit),
            Self::UnsupportedMediaType => Self::UnsupportedMediaType,
            Self::RateLimited {
                operation,
                retry_after,
                info,
            } => Self::RateLimited {
                operation,
                retry_after: *retry_after,
                info: *info,
            },
            Self::Throttled {
                message,
                retry_after,
            } => Self::Throttled {
                message: message.clone(),
                retry_after: *retry_after,
            },
            Self::Unavailable(message) => Self::Unavailable(message.clone()),
            Self::Internal(cause) => Self::Internal(anyhow::anyhow!("{cause:#}")),
        }
    }

    /// Seconds to wait before retrying, on a 429.
    pub fn retry_after(&self) -> Option<u64> {
        match self {
            Self::RateLimited { retry_after, .. } | Self::Throttled { retry_after, .. } => {
                Some(*retry_after)
            }
            _ => None,
        }
    }

    /// The body as sent (also used per item by bulk endpoints).
    pub fn body(&self) -> ErrorBody {
        let message = match self {
            Self::Internal(_) => "an internal error occurred; it has been logged".to_owned(),
            other => other.to_string(),
        };
        let retry_after = self.retry_after();
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
                write_rate_headers(info, headers);
            }
            Self::Throttled { retry_after, .. } => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from(*retry_after));
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

impl From<CacheError> for ApiError {
    fn from(error: CacheError) -> Self {
        match error {
            CacheError::Database(error) => error.into(),
            CacheError::TooManyUnknownKeys { retry_after } => Self::Throttled {
                message: error.to_string(),
                retry_after,
            },
        }
    }
}

impl From<LookupError> for ApiError {
    fn from(error: LookupError) -> Self {
        match error {
            LookupError::ShuttingDown => Self::Unavailable(error.to_string()),
            LookupError::Database(error) => error.into(),
        }
    }
}

impl From<RateLimitError> for ApiError {
    fn from(error: RateLimitError) -> Self {
        match error {
            RateLimitError::Exceeded {
                operation,
                retry_after,
                info,
            } => Self::RateLimited {
                operation: operation.as_str(),
                retry_after,
                info,
            },
            RateLimitError::Database(error) => error.into(),
        }
    }
}

/// A service's refusal as the API words it: the same messages, with the status of its kind.
impl From<ServiceError> for ApiError {
    fn from(error: ServiceError) -> Self {
        match error {
            ServiceError::Invalid(invalid) => invalid.into(),
            fields @ ServiceError::Fields(_) => Self::InvalidRequest(fields.to_string()),
            ServiceError::NotFound(what) => Self::not_found(what),
            ServiceError::NotFoundSaying(message) => Self::NotFound(message),
            ServiceError::Conflict(message) => Self::Conflict(message),
            ServiceError::Gone(message) => Self::Gone(message),
            ServiceError::RateLimited(error) => error.into(),
            ServiceError::Throttled {
                message,
                retry_after,
            } => Self::Throttled {
                message,
                retry_after,
            },
            ServiceError::Unavailable(message) => Self::Unavailable(message),
            ServiceError::Database(error) => error.into(),
            ServiceError::Internal(error) => Self::Internal(error),
        }
    }
}

/// A rate-limited operation's answer says where the caller stands.
impl IntoResponseParts for RateInfo {
    type Error = std::convert::Infallible;

    fn into_response_parts(self, mut parts: ResponseParts) -> Result<ResponseParts, Self::Error> {
        write_rate_headers(&self, parts.headers_mut());
        Ok(parts)
    }
}

/// Writes the `RateLimit-Limit`, `RateLimit-Remaining` and `RateLimit-Reset` headers.
fn write_rate_headers(info: &RateInfo, headers: &mut HeaderMap) {
    headers.insert("ratelimit-limit", HeaderValue::from(info.limit));
    headers.insert("ratelimit-remaining", HeaderValue::from(info.remaining));
    headers.insert("ratelimit-reset", HeaderValue::from(info.reset_seconds));
}
