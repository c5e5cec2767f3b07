//! Signing in and out, one-time sign-in links (where a person sets a password), and the
//! extractors that give every page its signed-in account. The decisions (the throttle of
//! attempts, the password check and rules, the hashing) are `flow_app::sign_in`'s; this page
//! words them and keeps the session.
//!
//! A session remembers the account, its session generation and when it signed in: it ends
//! after [`crate::config::DashboardConfig::session_idle`] without a request (the store's expiry
//! slides on each request), [`crate::config::DashboardConfig::session_max`] after sign-in
//! whatever the activity, and as soon as the account is disabled or its generation moves on
//! (removed, demoted, password set or reset). The session id changes at sign-in.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use askama::Template;
use askama_web::WebTemplate;
use axum::Router;
use axum::extract::connect_info::ConnectInfo;
use axum::extract::{FromRequestParts, OptionalFromRequestParts, OriginalUri, Path, State};
use axum::http::request::Parts;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use chrono::Utc;
use flow_app::caller::Caller;
use flow_app::sign_in::{self, PasswordSet, SignIn, Throttled};
use flow_common::db::accounts::{Account, Role};
use flow_common::db::orgs::Organization;
use flow_domain::Email;
use flow_domain::ids::AccountId;
use serde::Deserialize;
use tower_sessions::Session;

use super::session::flash;
use super::{HtmlForm, PageError, PageResult};
use crate::state::AppState;

/// Session key of the signed-in account's id (what ending an account's sessions looks for).
const ACCOUNT_KEY: &str = flow_common::db::sessions::ACCOUNT_KEY;
/// Session key of the sign-in time (Unix seconds).
const SIGNED_IN_KEY: &str = "signed_in_at";
/// Session key of the account's session generation at sign-in.
const GENERATION_KEY: &str = "generation";

/// Routes of this module.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/sign-in", get(sign_in_page).post(sign_in))
        .route("/sign-out", post(sign_out))
        .route("/welcome/{token}", get(welcome_page).post(set_password))
}

/// The signed-in account of a page request, its organization, and the caller the API's
/// functions take (the organization, without an API key).
pub struct SignedIn {
    /// The account.
    pub account: Account,
    /// Its organization.
    pub org: Organization,
    /// The organization as the API's assign, report and export functions take it.
    pub caller: Arc<Caller>,
    /// The session (for notices).
    pub session: Session,
}

impl SignedIn {
    /// Whether the account may change things.
    pub fn is_admin(&self) -> bool {
        self.account.role() == Role::Admin
    }

    /// The organization's time zone.
    pub fn zone(&self) -> chrono_tz::Tz {
        self.caller.zone
    }

    /// The account as an audit actor.
    pub fn actor(&self) -> flow_common::db::audit::Actor<'_> {
        flow_common::db::audit::Actor::Account(&self.account.email)
    }

    /// The account as the services take it: its organization, audited by e-mail.
    pub fn acting(&self) -> flow_app::Acting<'_> {
        flow_app::Acting {
            caller: &self.caller,
            actor: self.actor(),
        }
    }

    /// 403 for viewers, before any change.
    pub fn require_admin(&self) -> Result<(), PageError> {
        if self.is_admin() {
            Ok(())
        } else {
            Err(PageError::viewer())
        }
    }
}

/// Why a request has no signed-in account: it is sent to the sign-in page.
pub struct SignInRequired {
    next: String,
    expired: bool,
    htmx: bool,
}

impl IntoResponse for SignInRequired {
    fn into_response(self) -> Response {
        let query = serde_html_form::to_string([("next", self.next.as_str())]).unwrap_or_default();
        let mut target = format!("/dashboard/sign-in?{query}");
        if self.expired {
            target.push_str("&expired=1");
        }
        if self.htmx {
            // htmx follows redirects inside the page; this makes it load the whole sign-in page.
            let mut response = StatusCode::UNAUTHORIZED.into_response();
            if let Ok(value) = HeaderValue::from_str(&target) {
                response.headers_mut().insert("hx-redirect", value);
            }
            return response;
        }
        Redirect::to(&target).into_response()
    }
}

/// Either the sign-in page (no session) or an error page.
pub enum Rejection {
    /// Not signed in, or the session ended.
    SignIn(SignInRequired),
    /// The session could not be read.
    Failed(PageError),
}

impl IntoResponse for Rejection {
    fn into_response(self) -> Response {
        match self {
            Self::SignIn(required) => required.into_response(),
            Self::Failed(error) => error.into_response(),
        }
    }
}

impl FromRequestParts<AppState> for SignedIn {
    type Rejection = Rejection;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Rejection> {
        let session = Session::from_request_parts(parts, state)
            .await
            .map_err(|(_, message)| Rejection::Failed(PageError::internal(message)))?;
        let next = if parts.method == axum::http::Method::GET {
            // The router is nested: the original address still has its `/dashboard` prefix.
            let uri = parts
                .extensions
                .get::<OriginalUri>()
                .map_or(&parts.uri, |original| &original.0);
            uri.path_and_query()
                .map_or("/dashboard", |path| path.as_str())
                .to_owned()
        } else {
            "/dashboard".to_owned()
        };
        let htmx = super::is_htmx(&parts.headers);
        let required = |expired| {
            Rejection::SignIn(SignInRequired {
                next: next.clone(),
                expired,
                htmx,
            })
        };
        let failed = |error: tower_sessions::session::Error| Rejection::Failed(error.into());
        let account_id: Option<AccountId> = session
            .get::<String>(ACCOUNT_KEY)
            .await
            .map_err(failed)?
            .and_then(|text| AccountId::parse(&text));
        let signed_in_at: Option<i64> = session.get(SIGNED_IN_KEY).await.map_err(failed)?;
        let (Some(account_id), Some(signed_in_at)) = (account_id, signed_in_at) else {
            return Err(required(false));
        };
        // Sessions from before generations existed started under generation 0.
        let generation: i64 = session
            .get(GENERATION_KEY)
            .await
            .map_err(failed)?
            .unwrap_or(0);
        let max_age =
            i64::try_from(state.config.dashboard.session_max.as_secs()).unwrap_or(i64::MAX);
        if Utc::now().timestamp().saturating_sub(signed_in_at) >= max_age {
            session.flush().await.map_err(failed)?;
            return Err(required(true));
        }
        let found = match sign_in::session(state, account_id, generation)
            .await
            .map_err(|error| Rejection::Failed(error.into()))?
        {
            sign_in::Session::Valid(found) => found,
            sign_in::Session::Gone => {
                session.flush().await.map_err(failed)?;
                return Err(required(false));
            }
            sign_in::Session::Ended => {
                // Disabled, demoted, or its password set or reset since this session began.
                session.flush().await.map_err(failed)?;
                return Err(required(true));
            }
        };
        Ok(Self {
            // The dashboard acts for the organization, not through an API key.
            caller: Arc::new(Caller::without_key(found.org.clone())),
            account: found.account,
            org: found.org,
            session,
        })
    }
}

impl OptionalFromRequestParts<AppState> for SignedIn {
    type Rejection = PageError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Option<Self>, PageError> {
        match <Self as FromRequestParts<AppState>>::from_request_parts(parts, state).await {
            Ok(signed_in) => Ok(Some(signed_in)),
            Err(Rejection::SignIn(_)) => Ok(None),
            Err(Rejection::Failed(error)) => Err(error),
        }
    }
}

/// The client's address group (for throttling); `unknown` when the server was not given it.
fn client_address(parts_address: Option<&ConnectInfo<SocketAddr>>) -> String {
    parts_address.map_or_else(|| "unknown".to_owned(), |info| address_group(info.0.ip()))
}

/// What sign-in attempts are throttled by for a client address: an IPv4 address itself (also
/// when it arrives IPv4-mapped, `::ffff:a.b.c.d`), and an IPv6 address's /64, the smallest block
/// a network is given, which one client can fill with addresses at will.
pub fn address_group(address: IpAddr) -> String {
    match address {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => v4.to_string(),
            None => {
                let network = u128::from(v6) & !(u128::from(u64::MAX));
                format!("{}/64", std::net::Ipv6Addr::from(network))
            }
        },
    }
}

/// Where to go after signing in: only a dashboard page of this service.
fn safe_next(next: Option<&str>) -> String {
    match next {
        Some(next)
            if next.starts_with("/dashboard")
                && !next.starts_with("//")
                && !next.contains('\\')
                && !next.starts_with("/dashboard/sign-") =>
        {
            next.to_owned()
        }
        _ => "/dashboard".to_owned(),
    }
}

#[derive(Template, WebTemplate)]
#[template(path = "dashboard/sign_in.html")]
struct SignInPage {
    email: String,
    next: String,
    error: Option<String>,
    notice: Option<&'static str>,
}

/// Query of the sign-in page.
#[derive(Debug, Default, Deserialize)]
pub struct SignInQuery {
    /// The page to return to.
    pub next: Option<String>,
    /// Set when a session ended.
    pub expired: Option<String>,
    /// Set after signing out.
    pub signed_out: Option<String>,
}

async fn sign_in_page(
    signed_in: Option<SignedIn>,
    super::HtmlQuery(query): super::HtmlQuery<SignInQuery>,
) -> Response {
    let next = safe_next(query.next.as_deref());
    if signed_in.is_some() {
        return Redirect::to(&next).into_response();
    }
    let notice = if query.expired.is_some() {
        Some("Your session has ended. Sign in again to continue.")
    } else if query.signed_out.is_some() {
        Some("You have signed out.")
    } else {
        None
    };
    SignInPage {
        email: String::new(),
        next,
        error: None,
        notice,
    }
    .into_response()
}

/// The sign-in form.
#[derive(Debug, Deserialize)]
pub struct SignInForm {
    /// E-mail.
    #[serde(default)]
    pub email: String,
    /// Password.
    #[serde(default)]
    pub password: String,
    /// The page to return to.
    pub next: Option<String>,
}

async fn sign_in(
    State(state): State<AppState>,
    session: Session,
    address: Option<axum::Extension<ConnectInfo<SocketAddr>>>,
    HtmlForm(form): HtmlForm<SignInForm>,
) -> PageResult {
    let next = safe_next(form.next.as_deref());
    let refuse = |status: StatusCode, message: &str| {
        (
            status,
            SignInPage {
                email: form.email.clone(),
                next: next.clone(),
                error: Some(message.to_owned()),
                notice: None,
            },
        )
            .into_response()
    };
    let Ok(email) = Email::parse("email", form.email.trim()) else {
        return Ok(refuse(
            StatusCode::BAD_REQUEST,
            "Enter the e-mail address of your dashboard account.",
        ));
    };
    let address = client_address(address.as_ref().map(|extension| &extension.0));
    let account = match sign_in::sign_in(&state, &email, form.password.clone(), &address).await? {
        SignIn::SignedIn(account) => account,
        SignIn::Wait(wait, throttled) => {
            let whose = match throttled {
                Throttled::Account => "for this e-mail address",
                Throttled::Address => "from your network address",
            };
            let seconds = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
            let mut response = refuse(
                StatusCode::TOO_MANY_REQUESTS,
                &format!(
                    "Too many failed sign-ins {whose}. Wait {} and try again, or ask an admin for a \
                     new sign-in link.",
                    in_words(seconds)
                ),
            );
            response
                .headers_mut()
                .insert(axum::http::header::RETRY_AFTER, HeaderValue::from(seconds));
            return Ok(response);
        }
        SignIn::Refused => {
            return Ok(refuse(
                StatusCode::UNAUTHORIZED,
                "The e-mail or the password is not right.",
            ));
        }
        SignIn::Disabled => {
            return Ok(refuse(
                StatusCode::FORBIDDEN,
                "This account is disabled. Ask an admin of your organization to enable it.",
            ));
        }
    };
    start_session(&session, &account).await?;
    Ok(Redirect::to(&next).into_response())
}

/// A wait in words: seconds under two minutes, whole minutes (rounded up) above.
fn in_words(seconds: u64) -> String {
    match seconds {
        1 => "1 second".to_owned(),
        0..120 => format!("{seconds} seconds"),
        _ => format!("{} minutes", seconds.div_ceil(60)),
    }
}

/// Signs `account` in on a fresh session id, under its current session generation.
async fn start_session(session: &Session, account: &Account) -> Result<(), PageError> {
    session.cycle_id().await?;
    session.clear().await;
    session.insert(ACCOUNT_KEY, account.id.to_string()).await?;
    session
        .insert(SIGNED_IN_KEY, Utc::now().timestamp())
        .await?;
    session
        .insert(GENERATION_KEY, account.session_generation)
        .await?;
    Ok(())
}

async fn sign_out(session: Session) -> PageResult {
    session.flush().await?;
    Ok(Redirect::to("/dashboard/sign-in?signed_out=1").into_response())
}

#[derive(Template, WebTemplate)]
#[template(path = "dashboard/welcome.html")]
struct WelcomePage {
    token: String,
    email: String,
    has_password: bool,
    error: Option<String>,
}

#[derive(Template, WebTemplate)]
#[template(path = "dashboard/link_invalid.html")]
struct LinkInvalidPage;

fn link_invalid() -> Response {
    (StatusCode::GONE, LinkInvalidPage).into_response()
}

async fn welcome_page(State(state): State<AppState>, Path(token): Path<String>) -> PageResult {
    let Some(account) = sign_in::link(&state, &token).await? else {
        return Ok(link_invalid());
    };
    Ok(WelcomePage {
        token,
        email: account.email,
        has_password: account.has_password,
        error: None,
    }
    .into_response())
}

/// The set-password form.
#[derive(Debug, Deserialize)]
pub struct PasswordForm {
    /// New password.
    #[serde(default)]
    pub password: String,
    /// The same again.
    #[serde(default)]
    pub confirm: String,
}

async fn set_password(
    State(state): State<AppState>,
    session: Session,
    Path(token): Path<String>,
    HtmlForm(form): HtmlForm<PasswordForm>,
) -> PageResult {
    let account = match sign_in::set_password(&state, &token, form.password, &form.confirm).await? {
        PasswordSet::Set(account) => account,
        PasswordSet::LinkInvalid => return Ok(link_invalid()),
        PasswordSet::Problem(account, problem) => {
            return Ok((
                StatusCode::BAD_REQUEST,
                WelcomePage {
                    token,
                    email: account.email,
                    has_password: account.has_password,
                    error: Some(problem),
                },
            )
                .into_response());
        }
    };
    start_session(&session, &account).await?;
    flash(
        &session,
        "success",
        format!(
            "Welcome! Your password is set; you are signed in as {}.",
            account.email
        ),
    )
    .await;
    Ok(Redirect::to("/dashboard").into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(text: &str) -> String {
        address_group(text.parse().expect("an address"))
    }

    #[test]
    fn ipv6_addresses_of_one_64_share_a_throttle_and_ipv4_ones_do_not() {
        assert_eq!(group("2001:db8:1:2::1"), "2001:db8:1:2::/64");
        assert_eq!(
            group("2001:db8:1:2:ffff:ffff:ffff:ffff"),
            group("2001:db8:1:2::1")
        );
        assert_ne!(group("2001:db8:1:3::1"), group("2001:db8:1:2::1"));
        assert_eq!(group("203.0.113.7"), "203.0.113.7");
        assert_ne!(group("203.0.113.8"), group("203.0.113.7"));
        assert_eq!(group("::ffff:203.0.113.7"), "203.0.113.7");
    }

    #[test]
    fn waits_read_in_seconds_then_minutes() {
        assert_eq!(in_words(1), "1 second");
        assert_eq!(in_words(60), "60 seconds");
        assert_eq!(in_words(900), "15 minutes");
        assert_eq!(in_words(601), "11 minutes");
    }
}
