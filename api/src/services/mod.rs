//! The operations every surface shares (the `/v1` routes, the dashboard, and later SCIM): each
//! takes typed input, owns its validation, its transaction and its audit row, and answers with a
//! typed result or a [`ServiceError`]. Surfaces only translate: their input into these calls,
//! the results into their answers (JSON, pages), the errors into their own (the API's error
//! body, the dashboard's form messages). No surface calls another surface's handler or builds
//! its wire types.
//!
//! One module per resource: [`assign`] (assigning flows, one or many), [`webhooks`] (endpoints, test pings, retries and recoveries),
//! [`keys`], [`team`] (dashboard accounts), [`users`], [`enrollment`] (rules that assign on their own), [`flows`], [`schedules`], [`reports`] and
//! [`exports`]. Rate limits that apply whatever the surface (reports, test pings and retries,
//! export downloads) are checked here; the `/v1` read and write limits per request stay in the
//! routes.

pub mod assign;
pub mod enrollment;
pub mod erasure;
pub mod exports;
pub mod flows;
pub mod keys;
pub mod reports;
pub mod schedules;
pub mod team;
pub mod users;
pub mod webhooks;

use flow_common::db::audit::Actor;
use flow_common::db::exports::{CapReached, CreateError};
use flow_common::report::engine::ReportError;
use flow_domain::Invalid;
use flow_domain::ids::OrgId;

use crate::caches::CacheError;
use crate::caller::Caller;
use crate::ratelimit::RateLimitError;

/// Who asks for an operation: the organization it acts in (with its tier, limits and time zone)
/// and who the audit trail names.
#[derive(Debug, Clone, Copy)]
pub struct Acting<'a> {
    /// The organization, as the caches and the rate limiter know it.
    pub caller: &'a Caller,
    /// Who the audit rows name: an API key or a dashboard account.
    pub actor: Actor<'a>,
}

impl Acting<'_> {
    /// The organization's id.
    pub fn org_id(&self) -> OrgId {
        self.caller.org_id()
    }
}

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
    /// The broker could not take the work durably (503): nothing is lost, retrying does it.
    #[error("{0}")]
    Unavailable(String),
    /// Postgres failed (transient failures become 503 at the surfaces).
    #[error(transparent)]
    Database(#[from] sqlx::Error),
    /// Anything else; logged by the surface, not shown.
    #[error("internal error: {0:#}")]
    Internal(#[from] anyhow::Error),
}

impl ServiceError {
    /// Every field problem of the error (none when it is not about fields).
    pub fn field_problems(&self) -> &[FieldProblem] {
        match self {
            Self::Fields(problems) => problems,
            _ => &[],
        }
    }
}

impl From<CacheError> for ServiceError {
    fn from(error: CacheError) -> Self {
        match error {
            CacheError::Database(error) => Self::Database(error),
            CacheError::TooManyUnknownKeys { retry_after } => Self::Throttled {
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
