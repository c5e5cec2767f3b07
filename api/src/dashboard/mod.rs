//! The dashboard: server-rendered pages under `/dashboard` for an organization's accounts (the
//! home page of what needs attention, API keys, webhooks and their delivery log, flows with
//! reports and exports, assign, users and a page per person, compliance across flows, changing
//! and cancelling assignments, schedules, team, audit trail, and for admins the operations view
//! of the lanes).
//!
//! Pages are askama templates checked at compile time; every value is HTML-escaped by them.
//! Forms are plain HTML and work without JavaScript; htmx (vendored, served from the binary) only
//! enhances a few of them. Sessions live in Postgres; unsafe requests from another site are
//! refused by `Origin`/`Sec-Fetch-Site` (tower-http's CSRF layer) on top of `SameSite=Lax`
//! cookies; the Content-Security-Policy allows no inline script or style. Every read and write is
//! scoped to the signed-in account's organization, and goes through the same functions as the
//! API (assign, reports, exports, webhook endpoints).

pub mod actions;
mod assets;
pub mod assign;
pub mod audit;
pub mod auth;
mod chart;
pub mod compliance;
pub mod csv_upload;
pub mod events;
pub mod flows;
pub mod home;
pub mod keys;
pub mod operations;
pub mod org_settings;
pub mod rule_terms;
pub mod rules;
pub mod schedules;
pub mod session;
pub mod team;
pub mod users;
pub mod view;
pub mod webhooks;

use askama::Template;
use askama_web::WebTemplate;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;
use tower_sessions::cookie::SameSite;
use tower_sessions::{Expiry, SessionManagerLayer};

use crate::error::ApiError;
use crate::state::AppState;

/// Content-Security-Policy of every dashboard response: scripts, styles and images from the
/// service itself only, nothing inline, no framing.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
    style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; \
    frame-ancestors 'none'; base-uri 'none'";

/// The dashboard's routes (mounted at `/dashboard`), with sessions, CSRF protection and security
/// headers.
pub fn router(state: &AppState) -> Router<AppState> {
    let secure = state.config.public_base_url.starts_with("https://");
    let idle = tower_sessions::cookie::time::Duration::seconds(
        i64::try_from(state.config.dashboard.session_idle.as_secs())
            .unwrap_or(i64::MAX)
            .max(1),
    );
    let sessions = SessionManagerLayer::new(session::PostgresStore::new(state.db.clone()))
        .with_name("flow_session")
        .with_path("/dashboard")
        .with_http_only(true)
        .with_secure(secure)
        .with_same_site(SameSite::Lax)
        .with_expiry(Expiry::OnInactivity(idle))
        // Saving on every request is what makes the idle expiry slide.
        .with_always_save(true);
    let csrf = tower_http::csrf::CsrfLayer::new().with_rejection_response(
        |_error: tower_http::csrf::ProtectionError| {
            PageError::new(
                StatusCode::FORBIDDEN,
                "This request came from another site and was refused. Open the dashboard \
                 directly and try again.",
            )
            .into_response()
        },
    );
    let pages = Router::new()
        .merge(home::router())
        .merge(auth::router())
        .merge(keys::router())
        .merge(team::router())
        .merge(audit::router())
        .merge(operations::router())
        .merge(org_settings::router())
        .merge(webhooks::router())
        .merge(flows::router())
        .merge(assign::router())
        .merge(users::router())
        .merge(compliance::router())
        .merge(schedules::router())
        .merge(rules::router())
        .merge(events::router())
        .merge(actions::router())
        .fallback(|| async { PageError::not_found() })
        .layer(sessions);
    Router::new()
        .merge(pages)
        .merge(assets::router())
        .layer(csrf)
        .layer(axum::middleware::from_fn(security_headers))
}

/// Security headers on every dashboard response; pages are never cached.
async fn security_headers(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    for (name, value) in [
        (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "same-origin"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    headers
        .entry(header::CACHE_CONTROL)
        .or_insert(HeaderValue::from_static("no-store"));
    response
}

/// An error answered as a page: the status and a sentence saying what to do.
#[derive(Debug)]
pub struct PageError {
    status: StatusCode,
    message: String,
    /// Seconds to wait, sent as `Retry-After` (on 429).
    retry_after: Option<u64>,
}

#[derive(Template, WebTemplate)]
#[template(path = "dashboard/error.html")]
struct ErrorPage {
    title: &'static str,
    message: String,
}

impl PageError {
    /// An error with this status and message.
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
            retry_after: None,
        }
    }

    /// 429: a limit is used up; `Retry-After` says when to try again.
    pub fn too_many(message: impl Into<String>, retry_after: u64) -> Self {
        Self {
            retry_after: Some(retry_after),
            ..Self::new(StatusCode::TOO_MANY_REQUESTS, message)
        }
    }

    /// 404: what was asked for does not exist in the organization.
    pub fn not_found() -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "There is nothing here, or it belongs to another organization.",
        )
    }

    /// 403: viewers cannot change anything.
    pub fn viewer() -> Self {
        Self::new(
            StatusCode::FORBIDDEN,
            "Your account can view this organization but not change it. Ask an admin of your \
             organization.",
        )
    }

    /// 400 with a message.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }

    /// 500 for an unexpected failure, logged here.
    pub fn internal(error: impl std::fmt::Display) -> Self {
        tracing::error!(error = %error, "dashboard request failed");
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "Something went wrong on our side; it has been logged. Try again in a moment.",
        )
    }
}

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        let title = match self.status {
            StatusCode::NOT_FOUND => "Not found",
            StatusCode::FORBIDDEN => "Not allowed",
            StatusCode::TOO_MANY_REQUESTS => "Too many requests",
            StatusCode::SERVICE_UNAVAILABLE => "Temporarily unavailable",
            StatusCode::GONE => "Expired",
            StatusCode::CONFLICT => "Conflict",
            status if status.is_client_error() => "Cannot do that",
            _ => "Something went wrong",
        };
        let page = ErrorPage {
            title,
            message: self.message,
        };
        let mut response = (self.status, page).into_response();
        if let Some(seconds) = self.retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}

impl From<ApiError> for PageError {
    fn from(error: ApiError) -> Self {
        match &error {
            ApiError::Internal(cause) => Self::internal(format!("{cause:#}")),
            ApiError::NotFound(_) => Self::not_found(),
            other => {
                if matches!(other, ApiError::Unavailable(_)) {
                    tracing::warn!(error = %other, "dependency unavailable");
                }
                Self {
                    retry_after: other.retry_after(),
                    ..Self::new(other.status(), other.body().message)
                }
            }
        }
    }
}

/// A service's refusal as a page: the API's wording, with the page's own for what is missing.
impl From<flow_app::ServiceError> for PageError {
    fn from(error: flow_app::ServiceError) -> Self {
        ApiError::from(error).into()
    }
}

impl From<sqlx::Error> for PageError {
    fn from(error: sqlx::Error) -> Self {
        ApiError::from(error).into()
    }
}

impl From<tower_sessions::session::Error> for PageError {
    fn from(error: tower_sessions::session::Error) -> Self {
        Self::internal(format!("session: {error}"))
    }
}

/// Result of a page handler.
pub type PageResult<T = Response> = Result<T, PageError>;

/// A form body (`application/x-www-form-urlencoded`) read as browsers send it: repeated names
/// (checkboxes, multi-selects) become lists. Malformed bodies are a 400 page.
#[derive(Debug, Clone)]
pub struct HtmlForm<T>(pub T);

impl<S, T> FromRequest<S> for HtmlForm<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = PageError;

    async fn from_request(request: Request, state: &S) -> Result<Self, PageError> {
        let urlencoded = request
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .is_some_and(|value| value.starts_with("application/x-www-form-urlencoded"));
        if !urlencoded {
            return Err(PageError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "This form must be sent as a web form.",
            ));
        }
        let bytes = Bytes::from_request(request, state)
            .await
            .map_err(|rejection| PageError::new(rejection.status(), rejection.body_text()))?;
        serde_html_form::from_bytes(&bytes)
            .map(HtmlForm)
            .map_err(|error| PageError::bad_request(format!("The form is not valid: {error}")))
    }
}

/// Query parameters read like [`HtmlForm`] (repeated names become lists).
#[derive(Debug, Clone)]
pub struct HtmlQuery<T>(pub T);

impl<S, T> FromRequestParts<S> for HtmlQuery<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = PageError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, PageError> {
        serde_html_form::from_str(parts.uri.query().unwrap_or(""))
            .map(HtmlQuery)
            .map_err(|error| PageError::bad_request(format!("The address is not valid: {error}")))
    }
}

/// Whether htmx sent the request (it then wants a fragment, not a whole page).
pub fn is_htmx(headers: &axum::http::HeaderMap) -> bool {
    headers.contains_key("hx-request")
}
