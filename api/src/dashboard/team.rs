//! Settings → Team: the organization's dashboard accounts. Admins invite people (a one-time
//! sign-in link, valid 24 hours, shown once), issue new links (which reset the password: the old
//! one and every session end at once), remove, disable and enable accounts and change their role.
//! Removing, disabling and demoting end the account's sessions on every replica; the last admin
//! cannot be removed, disabled or demoted; each change is in the audit log.

use askama::Template;
use askama_web::WebTemplate;
use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use flow_app::ServiceError;
use flow_app::team::{self as service, IssuedLink};
use flow_common::db::accounts::AccountChange;
use flow_domain::Role;
use flow_domain::ids::AccountId;
use serde::Deserialize;

use super::auth::SignedIn;
use super::session::{Flash, flash};
use super::view::{Layout, Section};
use super::{HtmlForm, PageError, PageResult};
use crate::state::AppState;

/// Routes of this module.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/settings/team", get(list).post(invite))
        .route("/settings/team/{id}/link", post(new_link))
        .route("/settings/team/{id}/remove", post(remove))
        .route("/settings/team/{id}/disable", post(disable))
        .route("/settings/team/{id}/enable", post(enable))
        .route("/settings/team/{id}/role", post(set_role))
}

/// An account as the list shows it.
pub struct AccountRow {
    pub id: String,
    /// E-mail.
    pub email: String,
    /// Admin or Viewer.
    pub role: String,
    /// Active, Invited while no password is set, or Disabled.
    pub state: &'static str,
    /// `admin` or `viewer`.
    pub role_name: String,
    /// Whether the account is disabled.
    pub disabled: bool,
    /// Creation time.
    pub created: String,
    /// Whether this is the signed-in account.
    pub is_you: bool,
}

/// A link shown once.
pub struct ShownLink {
    /// Whose.
    pub email: String,
    /// The address.
    pub url: String,
    /// Until when it works.
    pub expires: String,
}

#[derive(Template, WebTemplate)]
#[template(path = "dashboard/settings_team.html")]
struct TeamPage {
    layout: Layout,
    accounts: Vec<AccountRow>,
    link: Option<ShownLink>,
    email: String,
    role: String,
    email_error: Option<String>,
}

async fn page(
    state: &AppState,
    account: &SignedIn,
    link: Option<ShownLink>,
    form: Option<(String, String, String)>,
) -> Result<TeamPage, PageError> {
    let layout = Layout::new(account, Section::Settings).await;
    let rows = service::list(state, account.acting()).await?;
    let (email, role, email_error) = match form {
        Some((email, role, error)) => (email, role, Some(error)),
        None => (String::new(), "viewer".to_owned(), None),
    };
    Ok(TeamPage {
        accounts: rows
            .iter()
            .map(|row| AccountRow {
                id: row.id.to_string(),
                email: row.email.clone(),
                role: super::view::label(row.role.as_str()),
                state: if row.disabled {
                    "Disabled"
                } else if row.has_password {
                    "Active"
                } else {
                    "Invited"
                },
                role_name: row.role.to_string(),
                disabled: row.disabled,
                created: layout.time(&row.created_at),
                is_you: row.id == account.account.id,
            })
            .collect(),
        layout,
        link,
        email,
        role,
        email_error,
    })
}

async fn list(State(state): State<AppState>, account: SignedIn) -> PageResult<TeamPage> {
    page(&state, &account, None, None).await
}

/// The invite form.
#[derive(Debug, Deserialize)]
pub struct InviteForm {
    /// The person's e-mail.
    #[serde(default)]
    pub email: String,
    /// `admin` or `viewer`.
    #[serde(default)]
    pub role: String,
}

async fn invite(
    State(state): State<AppState>,
    account: SignedIn,
    HtmlForm(form): HtmlForm<InviteForm>,
) -> PageResult {
    account.require_admin()?;
    let role = role(&form.role)?;
    let refuse = |message: String| (form.email.clone(), form.role.clone(), message);
    let issued = match service::invite(&state, account.acting(), &form.email, role).await {
        Ok(issued) => issued,
        Err(error) => {
            let (status, message) = match error {
                ServiceError::Fields(_) => (
                    StatusCode::BAD_REQUEST,
                    "Enter a valid e-mail address.".to_owned(),
                ),
                ServiceError::Conflict(message) => (StatusCode::CONFLICT, message),
                other => return Err(other.into()),
            };
            let page = page(&state, &account, None, Some(refuse(message))).await?;
            return Ok((status, page).into_response());
        }
    };
    Ok(page(&state, &account, Some(shown(&account, issued)), None)
        .await?
        .into_response())
}

/// What an admin may invite as: `admin` or `viewer`.
fn role(text: &str) -> Result<Role, PageError> {
    text.parse()
        .map_err(|_| PageError::bad_request("The role must be admin or viewer."))
}

/// A link as the page shows it.
fn shown(account: &SignedIn, issued: IssuedLink) -> ShownLink {
    ShownLink {
        email: issued.account.email,
        url: issued.url,
        expires: super::view::time_in(account.zone(), issued.expires_at),
    }
}

/// What the invite form says about an address it cannot invite that is not on this team.
pub use flow_app::team::cannot_invite;

async fn new_link(
    State(state): State<AppState>,
    account: SignedIn,
    Path(id): Path<String>,
) -> PageResult {
    account.require_admin()?;
    let id = AccountId::parse(&id).ok_or_else(PageError::not_found)?;
    let issued = match service::new_link(&state, account.acting(), id).await {
        Ok(issued) => issued,
        Err(error) => return refused(&state, &account, error).await,
    };
    Ok(page(&state, &account, Some(shown(&account, issued)), None)
        .await?
        .into_response())
}

/// The team page again with why a change was refused (409), or the error page.
async fn refused(state: &AppState, account: &SignedIn, error: ServiceError) -> PageResult {
    let ServiceError::Conflict(message) = error else {
        return Err(error.into());
    };
    let mut page = page(state, account, None, None).await?;
    page.layout.flash = Some(Flash {
        kind: "error".to_owned(),
        text: message,
    });
    Ok((StatusCode::CONFLICT, page).into_response())
}

/// Applies `change` to the account `id` and goes back to the team page with what happened.
async fn apply(
    state: &AppState,
    account: &SignedIn,
    id: &str,
    change: AccountChange,
) -> PageResult {
    account.require_admin()?;
    let id = AccountId::parse(id).ok_or_else(PageError::not_found)?;
    let changed = match service::change(state, account.acting(), id, change).await {
        Ok(changed) => changed,
        Err(error) => return refused(state, account, error).await,
    };
    let email = &changed.account.email;
    let text = match (change, changed.changed) {
        (_, false) => format!("Nothing to change: {email} is already so."),
        (AccountChange::Remove, true) => {
            format!("{email} is removed; their sessions have ended.")
        }
        (AccountChange::Disable, true) => {
            format!("{email} is disabled: they cannot sign in, and their sessions have ended.")
        }
        (AccountChange::Enable, true) => format!("{email} is enabled and can sign in again."),
        (AccountChange::SetRole(Role::Viewer), true) => {
            format!("{email} is now a viewer; their sessions have ended.")
        }
        (AccountChange::SetRole(Role::Admin), true) => format!("{email} is now an admin."),
    };
    flash(&account.session, "success", text).await;
    Ok(Redirect::to("/dashboard/settings/team").into_response())
}

async fn remove(
    State(state): State<AppState>,
    account: SignedIn,
    Path(id): Path<String>,
) -> PageResult {
    apply(&state, &account, &id, AccountChange::Remove).await
}

async fn disable(
    State(state): State<AppState>,
    account: SignedIn,
    Path(id): Path<String>,
) -> PageResult {
    apply(&state, &account, &id, AccountChange::Disable).await
}

async fn enable(
    State(state): State<AppState>,
    account: SignedIn,
    Path(id): Path<String>,
) -> PageResult {
    apply(&state, &account, &id, AccountChange::Enable).await
}

/// The role form.
#[derive(Debug, Deserialize)]
pub struct RoleForm {
    /// `admin` or `viewer`.
    #[serde(default)]
    pub role: String,
}

async fn set_role(
    State(state): State<AppState>,
    account: SignedIn,
    Path(id): Path<String>,
    HtmlForm(form): HtmlForm<RoleForm>,
) -> Result<Response, PageError> {
    account.require_admin()?;
    let role = role(&form.role)?;
    apply(&state, &account, &id, AccountChange::SetRole(role)).await
}
