//! Settings → Team: the organization's dashboard accounts; admins invite people (a one-time
//! sign-in link, valid 24 hours, shown once) and issue new links (a forgotten password).

use askama::Template;
use askama_web::WebTemplate;
use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::{get, post};
use flow_common::db::accounts::{self, Role};
use flow_common::db::audit;
use flow_domain::Email;
use flow_domain::ids::AccountId;
use serde::Deserialize;

use super::auth::SignedIn;
use super::view::{Layout, Section};
use super::{HtmlForm, PageError, PageResult};
use crate::state::AppState;

/// Routes of this module.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/settings/team", get(list).post(invite))
        .route("/settings/team/{id}/link", post(new_link))
}

/// An account as the list shows it.
pub struct AccountRow {
    pub id: String,
    /// E-mail.
    pub email: String,
    /// Admin or Viewer.
    pub role: String,
    /// Active, or Invited while no password is set.
    pub state: &'static str,
    /// Creation time.
    pub created: String,
    /// Whether this is the signed-in account.
    pub is_you: bool,
}

/// A link shown once.
pub struct IssuedLink {
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
    link: Option<IssuedLink>,
    email: String,
    role: String,
    email_error: Option<String>,
}

async fn page(
    state: &AppState,
    account: &SignedIn,
    link: Option<IssuedLink>,
    form: Option<(String, String, String)>,
) -> Result<TeamPage, PageError> {
    let layout = Layout::new(account, Section::Settings).await;
    let rows = accounts::list(&state.db, account.org.id).await?;
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
                role: super::view::label(&row.role),
                state: if row.has_password {
                    "Active"
                } else {
                    "Invited"
                },
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
    let role = Role::parse(&form.role)
        .ok_or_else(|| PageError::bad_request("The role must be admin or viewer."))?;
    let refuse = |message: String| (form.email.clone(), form.role.clone(), message);
    let email = match Email::parse("email", form.email.trim()) {
        Ok(email) => email,
        Err(_) => {
            let page = page(
                &state,
                &account,
                None,
                Some(refuse("Enter a valid e-mail address.".to_owned())),
            )
            .await?;
            return Ok((StatusCode::BAD_REQUEST, page).into_response());
        }
    };
    let mut transaction = state.db.begin().await?;
    let Some((invited, token, expires_at)) =
        accounts::invite(&mut transaction, account.org.id, &email, role).await?
    else {
        let page = page(
            &state,
            &account,
            None,
            Some(refuse(format!(
                "{email} already has a dashboard account (accounts belong to one organization)."
            ))),
        )
        .await?;
        return Ok((StatusCode::CONFLICT, page).into_response());
    };
    audit::record(
        &mut *transaction,
        account.org.id,
        account.actor(),
        "account.invited",
        &invited.id.to_string(),
        &format!("{} ({})", invited.email, invited.role),
    )
    .await?;
    transaction.commit().await?;
    let link = IssuedLink {
        email: invited.email,
        url: accounts::link_url(&state.config.public_base_url, &token),
        expires: super::view::time_in(account.zone(), expires_at),
    };
    Ok(page(&state, &account, Some(link), None)
        .await?
        .into_response())
}

async fn new_link(
    State(state): State<AppState>,
    account: SignedIn,
    Path(id): Path<String>,
) -> PageResult {
    account.require_admin()?;
    let id = AccountId::parse(&id).ok_or_else(PageError::not_found)?;
    let mut transaction = state.db.begin().await?;
    let target = accounts::get(&mut *transaction, account.org.id, id)
        .await?
        .ok_or_else(PageError::not_found)?;
    let (token, expires_at) = accounts::issue_link(&mut transaction, target.id).await?;
    audit::record(
        &mut *transaction,
        account.org.id,
        account.actor(),
        "account.link_issued",
        &target.id.to_string(),
        &target.email,
    )
    .await?;
    transaction.commit().await?;
    let link = IssuedLink {
        email: target.email,
        url: accounts::link_url(&state.config.public_base_url, &token),
        expires: super::view::time_in(account.zone(), expires_at),
    };
    Ok(page(&state, &account, Some(link), None)
        .await?
        .into_response())
}
