//! Settings → API Keys: the organization's keys (name, prefix, created, last used, state);
//! Generate New Key shows the secret once; revoke (every replica drops it at once, as with
//! `flowctl key revoke`); roll a key, keeping the old one working for a chosen time.

use std::time::Duration;

use askama::Template;
use askama_web::WebTemplate;
use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect};
use axum::routing::{get, post};
use chrono::Utc;
use flow_app::ProblemKind;
use flow_app::keys as service;
use flow_common::db::keys::ApiKey;
use flow_domain::ids::KeyId;
use serde::Deserialize;

use super::auth::SignedIn;
use super::session::flash;
use super::view::{Layout, Section};
use super::{HtmlForm, PageError, PageResult};
use crate::state::AppState;
pub use flow_app::keys::MAX_NAME_CHARS;

/// How long a rolled key may keep working, as offered in the form.
pub const ROLL_CHOICES: [(&str, &str, u64); 4] = [
    ("now", "old key stops now", 0),
    ("1h", "old key works 1 more hour", 3_600),
    ("24h", "old key works 24 more hours", 86_400),
    ("7d", "old key works 7 more days", 7 * 86_400),
];

/// Routes of this module.
pub fn router() -> Router<AppState> {
    Router::new()
        .route(
            "/settings",
            get(|| async { Redirect::to("/dashboard/settings/api-keys") }),
        )
        .route("/settings/api-keys", get(list).post(generate))
        .route("/settings/api-keys/{id}/revoke", post(revoke))
        .route("/settings/api-keys/{id}/roll", post(roll))
}

/// A key as the list shows it.
pub struct KeyRow {
    /// Id (`key_…`).
    pub id: String,
    pub name: String,
    /// Visible prefix.
    pub prefix: String,
    /// Creation time.
    pub created: String,
    /// Last use, or "Never".
    pub last_used: String,
    /// Active, Expires …, Expired or Revoked.
    pub state: String,
    /// CSS modifier of the state.
    pub state_class: &'static str,
    /// Whether it still works (so it can be revoked or rolled).
    pub working: bool,
    /// Restricted to SCIM provisioning.
    pub scim_only: bool,
}

impl KeyRow {
    fn new(key: &ApiKey, layout: &Layout) -> Self {
        let now = Utc::now();
        let (state, state_class, working) = match key.expires_at {
            _ if key.revoked_at.is_some() => (
                format!("Revoked {}", layout.time_or(&key.revoked_at, "")),
                "muted",
                false,
            ),
            Some(at) if at <= now => (format!("Expired {}", layout.time(&at)), "muted", false),
            Some(at) => (format!("Expires {}", layout.time(&at)), "warning", true),
            None => ("Active".to_owned(), "success", true),
        };
        Self {
            id: key.id.to_string(),
            name: if key.name.is_empty() {
                "(unnamed)".to_owned()
            } else {
                key.name.clone()
            },
            prefix: format!("{}…", key.prefix),
            created: layout.time(&key.created_at),
            last_used: layout.time_or(&key.last_used_at, "Never"),
            state,
            state_class,
            working,
            scim_only: key.scim_only,
        }
    }
}

/// A secret shown once.
pub struct NewSecret {
    /// The key's name.
    pub name: String,
    /// The secret.
    pub secret: String,
    /// What else to know (for a roll: until when the old key works).
    pub note: Option<String>,
}

#[derive(Template, WebTemplate)]
#[template(path = "dashboard/settings_keys.html")]
struct KeysPage {
    layout: Layout,
    keys: Vec<KeyRow>,
    new_key: Option<NewSecret>,
    name: String,
    name_error: Option<String>,
    roll_choices: Vec<(&'static str, &'static str)>,
}

async fn page(
    state: &AppState,
    account: &SignedIn,
    new_key: Option<NewSecret>,
    name: String,
    name_error: Option<String>,
) -> Result<KeysPage, PageError> {
    let layout = Layout::new(account, Section::Settings).await;
    let mut rows = service::list(state, account.acting()).await?;
    rows.reverse();
    Ok(KeysPage {
        keys: rows.iter().map(|key| KeyRow::new(key, &layout)).collect(),
        layout,
        new_key,
        name,
        name_error,
        roll_choices: ROLL_CHOICES
            .iter()
            .map(|(value, text, _)| (*value, *text))
            .collect(),
    })
}

async fn list(State(state): State<AppState>, account: SignedIn) -> PageResult<KeysPage> {
    page(&state, &account, None, String::new(), None).await
}

/// The Generate New Key form.
#[derive(Debug, Deserialize)]
pub struct GenerateForm {
    /// A name saying who uses the key.
    #[serde(default)]
    pub name: String,
    /// The "SCIM provisioning only" box: present when ticked.
    #[serde(default)]
    pub scim_only: Option<String>,
}

async fn generate(
    State(state): State<AppState>,
    account: SignedIn,
    HtmlForm(form): HtmlForm<GenerateForm>,
) -> PageResult {
    account.require_admin()?;
    let generated = match service::generate(
        &state,
        account.acting(),
        &form.name,
        form.scim_only.is_some(),
    )
    .await
    {
        Ok(generated) => generated,
        Err(error) => {
            let Some(problem) = error.field_problems().first() else {
                return Err(error.into());
            };
            let message = match problem.kind {
                ProblemKind::Missing => {
                    "Give the key a name that says who uses it, e.g. \"HR sync\".".to_owned()
                }
                ProblemKind::TooLong(max) => format!("Use at most {max} characters."),
                ProblemKind::Invalid => super::webhooks::sentence(&problem.problem.0),
            };
            let page = page(&state, &account, None, form.name, Some(message)).await?;
            return Ok((StatusCode::BAD_REQUEST, page).into_response());
        }
    };
    let new_key = NewSecret {
        name: generated.key.name,
        secret: generated.secret,
        note: None,
    };
    Ok(page(&state, &account, Some(new_key), String::new(), None)
        .await?
        .into_response())
}

fn key_id(text: &str) -> Result<KeyId, PageError> {
    KeyId::parse(text).ok_or_else(PageError::not_found)
}

async fn revoke(
    State(state): State<AppState>,
    account: SignedIn,
    Path(id): Path<String>,
) -> PageResult {
    account.require_admin()?;
    // Another organization's key, or one already revoked: not found.
    service::revoke(&state, account.acting(), key_id(&id)?).await?;
    flash(
        &account.session,
        "success",
        "The key is revoked: every request with it is refused from now on.",
    )
    .await;
    Ok(Redirect::to("/dashboard/settings/api-keys").into_response())
}

/// The roll form.
#[derive(Debug, Deserialize)]
pub struct RollForm {
    /// One of [`ROLL_CHOICES`].
    #[serde(default)]
    pub expires_in: String,
}

async fn roll(
    State(state): State<AppState>,
    account: SignedIn,
    Path(id): Path<String>,
    HtmlForm(form): HtmlForm<RollForm>,
) -> PageResult {
    account.require_admin()?;
    let id = key_id(&id)?;
    let seconds = ROLL_CHOICES
        .iter()
        .find(|(value, _, _)| *value == form.expires_in)
        .map(|(_, _, seconds)| *seconds)
        .ok_or_else(|| PageError::bad_request("Choose when the old key stops working."))?;
    let rolled = service::roll(&state, account.acting(), id, Duration::from_secs(seconds)).await?;
    let layout_zone = account.zone();
    let note = if seconds == 0 {
        "The old key has stopped working.".to_owned()
    } else {
        format!(
            "The old key keeps working until {} ({}); switch your systems to the new key before then.",
            super::view::time_in(layout_zone, Utc::now() + Duration::from_secs(seconds)),
            layout_zone.name()
        )
    };
    let new_key = NewSecret {
        name: rolled.key.name,
        secret: rolled.secret,
        note: Some(note),
    };
    Ok(page(&state, &account, Some(new_key), String::new(), None)
        .await?
        .into_response())
}
