//! The one error type of the API: every failure becomes a status and the `{error, message}` body
//! (plus `retry_after` on 429). Internal errors are logged with context and answered without
//! details. It converts from the application layer's [`ServiceError`] alone (one table; Postgres,
//! the broker, the caches and the limiter reach it through `ServiceError`), and writes the
//! `RateLimit-*` headers, which successful answers of rate-limited operations carry too.

use axum::Json;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, IntoResponseParts, Response, ResponseParts};
use flow_app::caches::CacheError;
use flow_app::ratelimit::{RateInfo, RateLimitError};
use flow_app::{DATABASE_UNAVAILABLE, ServiceError, VALUE_REFUSED, data_exception};
use flow_common::amqp::PublishError;
use flow_domain::Invalid;
use serde::Serialize;
use utoipa::ToSchema;

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
    /// 403 `forbidden`: the key works but may not do this (a SCIM-only key on `/v1`).
    #[error("{0}")]
    Forbidden(&'static str),
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
    /// 415 `unsupported_media_type`, saying which types the route takes.
    #[error("{0}")]
    UnsupportedMediaTypeSaying(String),
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
            Self::Forbidden(_) => StatusCode::FORBIDDEN,
            Self::NotFound(_) => StatusCode::NOT_FOUND,
            Self::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            Self::Conflict(_) | Self::NotYet => StatusCode::CONFLICT,
            Self::Gone(_) => StatusCode::GONE,
            Self::PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            Self::UnsupportedMediaType | Self::UnsupportedMediaTypeSaying(_) => {
                StatusCode::UNSUPPORTED_MEDIA_TYPE
            }
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
            Self::Forbidden(_) => "forbidden",
            Self::NotFound(_) => "not_found",
            Self::MethodNotAllowed => "method_not_allowed",
            Self::Conflict(_) | Self::NotYet => "conflict",
            Self::Gone(_) => "gone",
            Self::PayloadTooLarge(_) => "payload_too_large",
            Self::UnsupportedMediaType | Self::UnsupportedMediaTypeSaying(_) => {
                "unsupported_media_type"
            }
            Self::RateLimited { .. } | Self::Throttled { .. } => "rate_limit_exceeded",
            Self::Unavailable(_) => "service_unavailable",
            Self::Internal(_) => "internal_error",
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

/// The one table from the failures below the surfaces to the API's answers: a service's
/// refusal as the API words it (the same messages, with the status of its kind). What a handler
/// meets outside an operation (a read of its own, its per-request limit, the key cache) goes
/// through it too, as the `ServiceError` the application layer makes of it.
impl From<ServiceError> for ApiError {
    fn from(error: ServiceError) -> Self {
        match error {
            ServiceError::Invalid(invalid) => invalid.into(),
            fields @ ServiceError::Fields(_) => Self::InvalidRequest(fields.to_string()),
            ServiceError::NotFound(what) => Self::not_found(what),
            ServiceError::NotFoundSaying(message) => Self::NotFound(message),
            ServiceError::Conflict(message) => Self::Conflict(message),
            ServiceError::NotYet => Self::NotYet,
            ServiceError::Gone(message) => Self::Gone(message),
            ServiceError::RateLimited(RateLimitError::Exceeded {
                operation,
                retry_after,
                info,
            }) => Self::RateLimited {
                operation: operation.as_str(),
                retry_after,
                info,
            },
            ServiceError::RateLimited(RateLimitError::Database(error))
            | ServiceError::Database(error) => database(error),
            ServiceError::Throttled {
                message,
                retry_after,
            } => Self::Throttled {
                message,
                retry_after,
            },
            ServiceError::Unavailable(message) => Self::Unavailable(message),
            ServiceError::Internal(error) => Self::Internal(error),
        }
    }
}

/// A Postgres failure as the API answers it: 503 when transient, 400 for a value Postgres
/// refused, else 500.
fn database(error: sqlx::Error) -> ApiError {
    if flow_common::db::is_transient(&error) {
        tracing::warn!(%error, "database unavailable");
        ApiError::Unavailable(DATABASE_UNAVAILABLE.into())
    } else if let Some(code) = data_exception(&error) {
        // Validation should have refused the value first; this is the net under it, so the
        // caller gets a 400 and operators a log line saying which check is missing.
        tracing::warn!(%code, %error, "Postgres refused a value of the request");
        ApiError::InvalidRequest(VALUE_REFUSED.into())
    } else {
        ApiError::Internal(anyhow::Error::new(error).context("database query failed"))
    }
}

/// The failures a handler meets outside an operation, through the one table above.
macro_rules! through_service_error {
    ($($failure:ty),*) => {$(
        impl From<$failure> for ApiError {
            fn from(error: $failure) -> Self {
                ServiceError::from(error).into()
            }
        }
    )*};
}

through_service_error!(sqlx::Error, PublishError, CacheError, RateLimitError);

/// Where the caller stands with a rate limit, as the `RateLimit-*` headers of a rate-limited
/// operation's answer.
#[derive(Debug, Clone, Copy)]
pub struct RateHeaders(pub RateInfo);

impl IntoResponseParts for RateHeaders {
    type Error = std::convert::Infallible;

    fn into_response_parts(self, mut parts: ResponseParts) -> Result<ResponseParts, Self::Error> {
        write_rate_headers(&self.0, parts.headers_mut());
        Ok(parts)
    }
}

/// Writes the `RateLimit-Limit`, `RateLimit-Remaining` and `RateLimit-Reset` headers.
fn write_rate_headers(info: &RateInfo, headers: &mut HeaderMap) {
    headers.insert("ratelimit-limit", HeaderValue::from(info.limit));
    headers.insert("ratelimit-remaining", HeaderValue::from(info.remaining));
    headers.insert("ratelimit-reset", HeaderValue::from(info.reset_seconds));
}

#[cfg(test)]
mod tests {
    use super::*;
    use flow_app::ratelimit::Operation;

    /// The answer the API gives for `error`: status, code, message and `Retry-After`.
    fn answer(error: ServiceError) -> (StatusCode, &'static str, String, Option<u64>) {
        let error = ApiError::from(error);
        let body = error.body();
        (error.status(), body.error, body.message, body.retry_after)
    }

    #[test]
    fn a_failure_shared_by_several_items_is_answered_the_same_for_each() {
        let failures = [
            ServiceError::Database(sqlx::Error::PoolTimedOut),
            ServiceError::Database(sqlx::Error::RowNotFound),
            ServiceError::Unavailable("the service is shutting down".into()),
            ServiceError::RateLimited(RateLimitError::Exceeded {
                operation: Operation::Assign,
                retry_after: 7,
                info: RateInfo {
                    limit: 100,
                    remaining: 0,
                    reset_seconds: 7,
                },
            }),
            ServiceError::NotFoundSaying("user a@b.c not found in this organization".into()),
            ServiceError::Internal(anyhow::anyhow!("cause")),
        ];
        for failure in failures {
            let again = failure.again();
            assert_eq!(answer(again), answer(failure));
        }
    }

    #[test]
    fn unavailable_is_503_with_retry_after() {
        let response =
            ApiError::from(ServiceError::Unavailable("broker down".into())).into_response();
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(response.headers()[header::RETRY_AFTER], "1");
    }
}
