//! Why an operation did not happen ([`ServiceError`]), with the field problems a form shows
//! beside each field, and the one table that turns the failures of what the operations stand on
//! (Postgres, the broker, the caches, the limiter, the lookups, the report engine, the export
//! caps) into it. Each surface words a `ServiceError` its own way (the API's error body, the
//! dashboard's pages and forms, `flowctl`'s messages) and converts from nothing else.

use flow_common::amqp::PublishError;
use flow_common::db::exports::{CapReached, CreateError};
use flow_domain::Invalid;

use crate::caches::CacheError;
use crate::engine::report::ReportError;
use crate::lookup::LookupError;
use crate::ratelimit::RateLimitError;

/// A field of an input that breaks a rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldProblem {
    /// The field, as the API names it (`url`, `events`, `description`).
    pub field: &'static str,
    /// Which rule it breaks, for a surface that words it its own way.
    pub kind: ProblemKind,
    /// What is wrong, worded for an API caller (`url is required`).
    pub problem: Invalid,
}

/// Which rule a field breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProblemKind {
    /// It is missing or empty.
    Missing,
    /// It is longer than this many characters.
    TooLong(usize),
    /// Anything else: its message says what.
    Invalid,
}

impl FieldProblem {
    /// `field` is missing: `{field} is required`.
    pub fn missing(field: &'static str) -> Self {
        Self {
            field,
            kind: ProblemKind::Missing,
            problem: Invalid(format!("{field} is required")),
        }
    }

    /// `field` breaks the rule `problem` words.
    pub fn invalid(field: &'static str, problem: Invalid) -> Self {
        Self {
            field,
            kind: ProblemKind::Invalid,
            problem,
        }
    }
}

/// Why an operation did not happen.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// The input breaks a rule (400); the message names the field as the API spells it.
    #[error("{0}")]
    Invalid(#[from] Invalid),
    /// Several fields break their rules (400), in the order the API reports them; each surface
    /// says as much as it can show (the API the first, a form each beside its field).
    #[error("{}", .0.first().map_or("the input is not valid", |first| first.problem.0.as_str()))]
    Fields(Vec<FieldProblem>),
    /// Nothing of that kind in the organization (404): `what` names the kind, e.g. `flow`.
    #[error("{0} not found")]
    NotFound(&'static str),
    /// The same as [`ServiceError::NotFound`] with a sentence of its own.
    #[error("{0}")]
    NotFoundSaying(String),
    /// The state of things refuses the operation (409).
    #[error("{0}")]
    Conflict(String),
    /// The assignment was accepted and is not persisted yet: to retry shortly (409).
    #[error("the assignment is accepted and not persisted yet; retry shortly")]
    NotYet,
    /// What was asked for existed and is gone (410).
    #[error("{0}")]
    Gone(String),
    /// A per-minute limit is used up (429), or the limiter's store failed.
    #[error(transparent)]
    RateLimited(#[from] RateLimitError),
    /// A cap that is not a rate (exports waiting, bytes stored, unknown keys): 429.
    #[error("{message}")]
    Throttled {
        /// What was refused and why, with what to do.
        message: String,
        /// Seconds to wait.
        retry_after: u64,
    },
    /// A dependency (the broker, the lookup batcher) is down or did not confirm; nothing was
    /// accepted (503, to retry shortly).
    #[error("{0}")]
    Unavailable(String),
    /// Postgres failed (transient failures become 503 at the surfaces).
    #[error(transparent)]
    Database(#[from] sqlx::Error),
    /// Anything else; logged by the surface, not shown.
    #[error("internal error: {0:#}")]
    Internal(#[from] anyhow::Error),
}

/// A read over a replica is tried again elsewhere when its database error is a passing one.
impl flow_common::db::replicas::ReadError for ServiceError {
    fn database_error(&self) -> Option<&sqlx::Error> {
        match self {
            Self::Database(error) => Some(error),
            _ => None,
        }
    }
}

impl ServiceError {
    /// Every field problem of the error (none when it is not about fields).
    pub fn field_problems(&self) -> &[FieldProblem] {
        match self {
            Self::Fields(problems) => problems,
            _ => &[],
        }
    }

    /// The same failure once more, for the next of several items one cause failed together (a
    /// bulk request's lookup): a database error as the surfaces answer it (503 when transient,
    /// 400 for a value Postgres refused), an internal error's cause kept as text.
    pub fn again(&self) -> Self {
        match self {
            Self::Invalid(invalid) => Self::Invalid(invalid.clone()),
            Self::Fields(problems) => Self::Fields(problems.clone()),
            Self::NotFound(what) => Self::NotFound(what),
            Self::NotFoundSaying(message) => Self::NotFoundSaying(message.clone()),
            Self::Conflict(message) => Self::Conflict(message.clone()),
            Self::NotYet => Self::NotYet,
            Self::Gone(message) => Self::Gone(message.clone()),
            Self::RateLimited(RateLimitError::Exceeded {
                operation,
                retry_after,
                info,
            }) => Self::RateLimited(RateLimitError::Exceeded {
                operation: *operation,
                retry_after: *retry_after,
                info: *info,
            }),
            Self::RateLimited(RateLimitError::Database(error)) | Self::Database(error) => {
                database_again(error)
            }
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
}

/// What the surfaces say when Postgres is unavailable (a transient failure).
pub const DATABASE_UNAVAILABLE: &str = "the database is unavailable; retry shortly";

/// What the surfaces say when Postgres refused a value of the request (a data exception).
pub const VALUE_REFUSED: &str = "a value in the request is out of range or not valid text; check dates, numbers and text fields";

/// The SQLSTATE of a Postgres data exception (class 22: a value out of range, badly encoded or
/// of the wrong form), which a request's own values caused.
pub fn data_exception(error: &sqlx::Error) -> Option<String> {
    match error {
        sqlx::Error::Database(database) => database
            .code()
            .filter(|code| code.starts_with("22"))
            .map(|code| code.into_owned()),
        _ => None,
    }
}

/// A database failure seen once more by another item: what the surfaces make of it, since the
/// driver's error cannot be copied.
fn database_again(error: &sqlx::Error) -> ServiceError {
    if flow_common::db::is_transient(error) {
        ServiceError::Unavailable(DATABASE_UNAVAILABLE.to_owned())
    } else if data_exception(error).is_some() {
        ServiceError::Invalid(Invalid(VALUE_REFUSED.to_owned()))
    } else {
        ServiceError::Internal(anyhow::anyhow!("database query failed: {error}"))
    }
}

impl From<LookupError> for ServiceError {
    fn from(error: LookupError) -> Self {
        match error {
            LookupError::ShuttingDown => Self::Unavailable(error.to_string()),
            LookupError::Database(error) => Self::Database(error),
        }
    }
}

/// A command the broker did not take: a route missing is a bug (500); anything else (no
/// confirm, a nack, the connection down) leaves nothing accepted, to retry (503).
impl From<PublishError> for ServiceError {
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

impl From<CacheError> for ServiceError {
    fn from(error: CacheError) -> Self {
        match error {
            CacheError::Database(error) => Self::Database(error),
            CacheError::TooManyUnknownKeys { retry_after }
            | CacheError::TooManyRefusedDeliveries { retry_after } => Self::Throttled {
                message: error.to_string(),
                retry_after,
            },
        }
    }
}

impl From<ReportError> for ServiceError {
    fn from(error: ReportError) -> Self {
        match error {
            ReportError::Invalid(invalid) => Self::Invalid(invalid),
            ReportError::Database(error) => Self::Database(error),
        }
    }
}

/// Seconds a caller at its cap of exports waiting or running is asked to wait: about what a
/// small export takes; `GET /v1/exports/{id}` says when one is ready.
const QUEUED_RETRY_AFTER_SECONDS: u64 = 15;

/// An organization at one of its export caps: to retry once an export finishes (the cap of
/// exports waiting or running) or once the oldest file expires (the cap of stored bytes).
impl From<CapReached> for ServiceError {
    fn from(reached: CapReached) -> Self {
        let retry_after = match &reached {
            CapReached::Queued { .. } => QUEUED_RETRY_AFTER_SECONDS,
            CapReached::Stored { oldest_expiry, .. } => oldest_expiry
                .map(|expiry| {
                    (expiry - chrono::Utc::now())
                        .num_seconds()
                        .saturating_add(1)
                })
                .unwrap_or(60)
                .max(1)
                .unsigned_abs(),
        };
        Self::Throttled {
            message: reached.to_string(),
            retry_after,
        }
    }
}

impl From<CreateError> for ServiceError {
    fn from(error: CreateError) -> Self {
        match error {
            CreateError::Cap(reached) => reached.into(),
            CreateError::Database(error) => error.into(),
        }
    }
}
