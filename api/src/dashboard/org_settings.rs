//! Settings → Organization: the organization's lifecycle settings (issue 37), from
//! [`flow_app::org_settings`]: whether deactivating a user cancels their open assignments, and
//! the default reminder policy of flows without one. Everyone sees them; admins change them.

use askama::Template;
use askama_web::WebTemplate;
use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect};
use axum::routing::get;
use flow_app::ServiceError;
use flow_app::org_settings::{self as service, SettingsFields};
use flow_common::db::orgs::OrgSettings;
use flow_domain::reminders::ReminderPolicy;
use serde::Deserialize;

use super::auth::SignedIn;
use super::session::flash;
use super::view::{Layout, Section};
use super::{HtmlForm, PageResult};
use crate::state::AppState;

/// Routes of this module.
pub fn router() -> Router<AppState> {
    Router::new().route("/settings/organization", get(show).post(save))
}

/// The form's fields, as sent (and as shown).
#[derive(Debug, Clone, Default, Deserialize)]
pub struct SettingsForm {
    /// `on` when ticked.
    pub cancel_on_deactivate: Option<String>,
    /// Days before the due date, separated by commas.
    #[serde(default)]
    pub before_due_days: String,
    /// Days after the due date, separated by commas.
    #[serde(default)]
    pub after_due_days: String,
    /// Days after the due date to escalate; empty for none.
    #[serde(default)]
    pub escalate_after_days: String,
}

impl SettingsForm {
    fn of(settings: &OrgSettings) -> Self {
        let list = |days: &[i32]| {
            days.iter()
                .map(i32::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        };
        let policy = settings.reminders.as_ref().map(|policy| &policy.0);
        Self {
            cancel_on_deactivate: settings.cancel_on_deactivate.then(|| "on".to_owned()),
            before_due_days: policy.map_or_else(String::new, |p| list(&p.before_due_days)),
            after_due_days: policy.map_or_else(String::new, |p| list(&p.after_due_days)),
            escalate_after_days: policy
                .and_then(|p| p.escalate_after_days)
                .map_or_else(String::new, |days| days.to_string()),
        }
    }

    /// The change the form asks for: every field is set; the three reminder fields left empty
    /// remove the default policy.
    fn fields(&self) -> Result<SettingsFields, String> {
        let days = |field: &str, text: &str| -> Result<Vec<i32>, String> {
            text.split(',')
                .map(str::trim)
                .filter(|part| !part.is_empty())
                .map(|part| {
                    part.parse::<i32>().map_err(|_| {
                        format!("{field} must be whole numbers of days, separated by commas")
                    })
                })
                .collect()
        };
        let before_due_days = days("reminders.beforeDueDays", &self.before_due_days)?;
        let after_due_days = days("reminders.afterDueDays", &self.after_due_days)?;
        let escalate_after_days = match self.escalate_after_days.trim() {
            "" => None,
            text => Some(text.parse::<i32>().map_err(|_| {
                "reminders.escalateAfterDays must be a whole number of days".to_owned()
            })?),
        };
        let reminders = (!before_due_days.is_empty()
            || !after_due_days.is_empty()
            || escalate_after_days.is_some())
        .then_some(ReminderPolicy {
            before_due_days,
            after_due_days,
            escalate_after_days,
        });
        Ok(SettingsFields {
            cancel_on_deactivate: Some(self.cancel_on_deactivate.is_some()),
            reminders: Some(reminders),
        })
    }
}

#[derive(Template, WebTemplate)]
#[template(path = "dashboard/settings_organization.html")]
struct SettingsPage {
    layout: Layout,
    form: SettingsForm,
    error: Option<String>,
}

async fn show(State(state): State<AppState>, account: SignedIn) -> PageResult<SettingsPage> {
    let layout = Layout::new(&account, Section::Settings).await;
    let settings = service::get(&state, account.acting()).await?;
    Ok(SettingsPage {
        layout,
        form: SettingsForm::of(&settings),
        error: None,
    })
}

async fn save(
    State(state): State<AppState>,
    account: SignedIn,
    HtmlForm(form): HtmlForm<SettingsForm>,
) -> PageResult {
    account.require_admin()?;
    let outcome = match form.fields() {
        Err(message) => Err(message),
        Ok(fields) => match service::check(fields) {
            Err(invalid) => Err(invalid.0),
            Ok(edit) => match service::update(&state, account.acting(), &edit).await {
                Ok(_) => Ok(()),
                Err(ServiceError::Fields(problems)) => Err(problems
                    .iter()
                    .map(|problem| problem.problem.0.clone())
                    .collect::<Vec<_>>()
                    .join("; ")),
                Err(other) => return Err(other.into()),
            },
        },
    };
    match outcome {
        Ok(()) => {
            flash(&account.session, "success", "The settings are saved.").await;
            Ok(Redirect::to("/dashboard/settings/organization").into_response())
        }
        Err(message) => {
            let layout = Layout::new(&account, Section::Settings).await;
            let page = SettingsPage {
                layout,
                form,
                error: Some(message),
            };
            Ok((StatusCode::BAD_REQUEST, page).into_response())
        }
    }
}
