//! Events in: the organization's event triggers (list, a form to create one, a page to edit one,
//! delete, and a preview of what a pasted event would do) and its signed event sources (create,
//! with the secret shown once and how a sender signs; rotate; delete). Under the Rules section
//! (the navigation holds eight links at phone width); every action is one call of
//! `flow_app::events` (docs/events.md).

use askama::Template;
use askama_web::WebTemplate;
use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use chrono::Utc;
use flow_app::ServiceError;
use flow_app::events::cloudevent::CloudEvent;
use flow_app::events::sources::{self, ROTATION_OVERLAP, SourceInput, WithSecret};
use flow_app::events::triggers::{self, MAX_TRIGGERS, TriggerInput};
use flow_common::db::event_sources::SourceRecord;
use flow_common::db::event_triggers::TriggerRecord;
use flow_domain::ids::{EventSourceId, EventTriggerId};
use serde::Deserialize;

use super::auth::SignedIn;
use super::rules::{FlowChoice, PriorityChoice};
use super::session::flash;
use super::view::{Layout, Section, plural};
use super::{HtmlForm, PageError, PageResult};
use crate::state::AppState;

/// Flows offered in the trigger form's list.
const FLOW_CHOICES: i64 = 500;

/// Where the page lives.
const PAGE: &str = "/dashboard/events";

/// Routes of this module.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/events", get(page))
        .route("/events/triggers", post(create_trigger))
        .route(
            "/events/triggers/{id}",
            get(edit_trigger_page).post(update_trigger),
        )
        .route("/events/triggers/{id}/delete", post(delete_trigger))
        .route("/events/preview", post(preview))
        .route("/events/sources", post(create_source))
        .route("/events/sources/{id}/rotate", post(rotate_source))
        .route("/events/sources/{id}/delete", post(delete_source))
}

/// A trigger in the list.
pub struct TriggerRow {
    pub id: String,
    pub name: String,
    /// Its match in words: the type (or prefix) and the source.
    pub matches: String,
    pub pointer: String,
    pub action: String,
    pub flow: String,
}

impl From<&TriggerRecord> for TriggerRow {
    fn from(record: &TriggerRecord) -> Self {
        let mut matches = match (&record.match_type, &record.match_type_prefix) {
            (Some(exact), _) => format!("type {exact}"),
            (None, Some(prefix)) => format!("type starting {prefix}"),
            (None, None) => String::new(),
        };
        if let Some(source) = &record.match_source {
            matches.push_str(&format!(", source {source}"));
        }
        Self {
            id: record.id.to_string(),
            name: record.name.clone(),
            matches,
            pointer: record.email_pointer.clone(),
            action: record.action.clone(),
            flow: record.flow_name.clone(),
        }
    }
}

/// A source in the list.
pub struct SourceRow {
    pub id: String,
    pub name: String,
    pub kind: &'static str,
    /// Where its events' type comes from.
    pub event_type: String,
    pub source: String,
}

impl From<&SourceRecord> for SourceRow {
    fn from(record: &SourceRecord) -> Self {
        let okta = record.kind == "okta";
        Self {
            id: record.id.to_string(),
            name: record.name.clone(),
            kind: if okta { "Okta" } else { "Standard Webhooks" },
            event_type: match (&record.type_pointer, &record.fixed_type) {
                _ if okta => "Okta's eventType".to_owned(),
                (_, Some(fixed)) => fixed.clone(),
                (Some(pointer), None) => format!("at {pointer}"),
                (None, None) => String::new(),
            },
            source: record.event_source.clone(),
        }
    }
}

/// The trigger form's fields, as sent.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct TriggerForm {
    #[serde(default)]
    pub name: String,
    /// `exact` or `prefix`.
    #[serde(default)]
    pub type_match: String,
    #[serde(default)]
    pub event_type: String,
    #[serde(default)]
    pub source: String,
    #[serde(default)]
    pub email_pointer: String,
    #[serde(default)]
    pub action: String,
    #[serde(default)]
    pub flow_id: String,
    #[serde(default)]
    pub due_days: String,
    /// JSON Pointer to the due date in the event (instead of `due_days`).
    #[serde(default)]
    pub due_from_pointer: String,
    /// low, medium or high.
    #[serde(default)]
    pub priority: String,
    #[serde(default)]
    pub notes: String,
}

impl TriggerForm {
    /// A stored trigger's values, to edit them.
    fn of(record: &TriggerRecord) -> Self {
        let (type_match, event_type) = match (&record.match_type, &record.match_type_prefix) {
            (None, Some(prefix)) => ("prefix", prefix.clone()),
            (exact, _) => ("exact", exact.clone().unwrap_or_default()),
        };
        Self {
            name: record.name.clone(),
            type_match: type_match.to_owned(),
            event_type,
            source: record.match_source.clone().unwrap_or_default(),
            email_pointer: record.email_pointer.clone(),
            action: record.action.clone(),
            flow_id: record.flow_id.to_string(),
            due_days: record
                .due_days
                .map(|days| days.to_string())
                .unwrap_or_default(),
            due_from_pointer: record.due_pointer.clone().unwrap_or_default(),
            priority: record.priority.clone(),
            notes: record.notes.clone().unwrap_or_default(),
        }
    }

    /// The form as the service takes it. The due date, priority and notes are sent for the
    /// assign action only (a cancel ignores what the form still holds of them); a due in days
    /// that is not a number is refused here, by the API's field name.
    fn input(&self) -> Result<TriggerInput, flow_domain::Invalid> {
        let assign = self.action == "assign";
        let due_days = match self.due_days.trim() {
            "" => None,
            text => Some(text.parse::<i32>().map_err(|_| {
                flow_domain::Invalid::new("due.days must be a whole number of days")
            })?),
        };
        let prefix = self.type_match == "prefix";
        Ok(TriggerInput {
            name: Some(self.name.clone()),
            match_type: optional(&self.event_type).filter(|_| !prefix),
            match_type_prefix: optional(&self.event_type).filter(|_| prefix),
            match_source: optional(&self.source),
            user_email_pointer: Some(self.email_pointer.trim().to_owned()),
            action: Some(self.action.clone()),
            flow_id: Some(self.flow_id.clone()),
            due_days: due_days.filter(|_| assign),
            due_from_pointer: optional(&self.due_from_pointer).filter(|_| assign),
            priority: optional(&self.priority).filter(|_| assign),
            notes: optional(&self.notes).filter(|_| assign),
        })
    }

    /// The priorities offered, this form's selected.
    fn priorities(&self) -> Vec<PriorityChoice> {
        ["low", "medium", "high"]
            .into_iter()
            .map(|value| PriorityChoice {
                value,
                selected: self.priority == value,
            })
            .collect()
    }
}

/// The source form's fields, as sent.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct SourceForm {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub type_pointer: String,
    #[serde(default)]
    pub source: String,
}

/// The preview form: a pasted CloudEvent.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct PreviewForm {
    #[serde(default)]
    pub event: String,
}

/// What a preview found, in words.
pub struct PreviewShown {
    pub status: &'static str,
    pub reason: String,
    /// One line per matching trigger.
    pub matches: Vec<String>,
}

#[derive(Template, WebTemplate)]
#[template(path = "dashboard/events.html")]
struct EventsPage {
    layout: Layout,
    triggers: Vec<TriggerRow>,
    sources: Vec<SourceRow>,
    flows: Vec<FlowChoice>,
    priorities: Vec<PriorityChoice>,
    trigger_form: TriggerForm,
    source_form: SourceForm,
    preview_form: PreviewForm,
    preview: Option<PreviewShown>,
    /// A refusal of one of the forms, shown above it: (form, message).
    error: Option<(&'static str, String)>,
    can_add_trigger: bool,
    can_add_source: bool,
}

/// A trigger's own page: its form, filled in with its values.
#[derive(Template, WebTemplate)]
#[template(path = "dashboard/event_trigger.html")]
struct TriggerPage {
    layout: Layout,
    /// The trigger's id.
    id: String,
    flows: Vec<FlowChoice>,
    priorities: Vec<PriorityChoice>,
    trigger_form: TriggerForm,
    /// Why the last save was refused.
    error: Option<String>,
}

#[derive(Template, WebTemplate)]
#[template(path = "dashboard/event_source_secret.html")]
struct SecretPage {
    layout: Layout,
    name: String,
    okta: bool,
    inbound_url: String,
    secret: String,
    rotated: bool,
    overlap_hours: u64,
}

/// What the page shows besides its lists.
#[derive(Default)]
struct Shown {
    trigger_form: TriggerForm,
    source_form: SourceForm,
    preview_form: PreviewForm,
    preview: Option<PreviewShown>,
    error: Option<(&'static str, String)>,
}

/// The flows a trigger's form offers: those taking assignments, and `selected` whatever its
/// state (a cancel trigger may keep an archived flow).
async fn flow_choices(
    state: &AppState,
    account: &SignedIn,
    selected: &str,
) -> Result<Vec<FlowChoice>, PageError> {
    Ok(
        flow_app::flows::list(state, account.acting(), None, FLOW_CHOICES)
            .await?
            .into_iter()
            .filter(|flow| !flow.archived || flow.id.to_string() == selected)
            .map(|flow| FlowChoice {
                selected: flow.id.to_string() == selected,
                id: flow.id.to_string(),
                name: format!(
                    "{} ({}){}",
                    flow.name,
                    plural(flow.module_count, "module"),
                    if flow.archived { ", archived" } else { "" }
                ),
            })
            .collect(),
    )
}

async fn render(state: &AppState, account: &SignedIn, shown: Shown) -> PageResult<EventsPage> {
    let layout = Layout::new(account, Section::Rules).await;
    let acting = account.acting();
    let triggers = triggers::list(state, acting, None, MAX_TRIGGERS).await?;
    let sources = sources::list(state, acting, None, sources::MAX_SOURCES).await?;
    let flows = flow_choices(state, account, &shown.trigger_form.flow_id).await?;
    Ok(EventsPage {
        can_add_trigger: layout.is_admin && (triggers.len() as i64) < MAX_TRIGGERS,
        can_add_source: layout.is_admin && (sources.len() as i64) < sources::MAX_SOURCES,
        layout,
        triggers: triggers.iter().map(TriggerRow::from).collect(),
        sources: sources.iter().map(SourceRow::from).collect(),
        flows,
        priorities: shown.trigger_form.priorities(),
        trigger_form: shown.trigger_form,
        source_form: shown.source_form,
        preview_form: shown.preview_form,
        preview: shown.preview,
        error: shown.error,
    })
}

async fn page(State(state): State<AppState>, account: SignedIn) -> PageResult<EventsPage> {
    let shown = Shown {
        trigger_form: TriggerForm {
            type_match: "exact".into(),
            email_pointer: "/data/email".into(),
            action: "assign".into(),
            priority: "medium".into(),
            ..TriggerForm::default()
        },
        source_form: SourceForm {
            kind: "standard_webhooks".into(),
            type_pointer: "/type".into(),
            ..SourceForm::default()
        },
        ..Shown::default()
    };
    render(&state, &account, shown).await
}

/// A refusal the page shows beside its form (400 for input, 409 for the state of things, 429),
/// or the error page for anything else.
fn refusal(error: ServiceError) -> Result<(StatusCode, String), PageError> {
    match error {
        error @ (ServiceError::Invalid(_) | ServiceError::Fields(_)) => {
            Ok((StatusCode::BAD_REQUEST, error.to_string()))
        }
        ServiceError::NotFound("flow") => Ok((
            StatusCode::BAD_REQUEST,
            "Choose one of the organization's flows.".to_owned(),
        )),
        ServiceError::Conflict(message) => Ok((StatusCode::CONFLICT, message)),
        error @ ServiceError::RateLimited(_) => {
            Ok((StatusCode::TOO_MANY_REQUESTS, error.to_string()))
        }
        other => Err(other.into()),
    }
}

/// The page again with a form's refusal.
async fn refused(
    state: &AppState,
    account: &SignedIn,
    form: &'static str,
    error: ServiceError,
    mut shown: Shown,
) -> PageResult<Response> {
    let (status, message) = refusal(error)?;
    shown.error = Some((form, message));
    Ok((status, render(state, account, shown).await?).into_response())
}

fn optional(text: &str) -> Option<String> {
    let text = text.trim();
    (!text.is_empty()).then(|| text.to_owned())
}

async fn create_trigger(
    State(state): State<AppState>,
    account: SignedIn,
    HtmlForm(form): HtmlForm<TriggerForm>,
) -> PageResult {
    account.require_admin()?;
    let created = match form.input() {
        Ok(input) => triggers::create(&state, account.acting(), input)
            .await
            .map(|_| ()),
        Err(problem) => Err(problem.into()),
    };
    if let Err(error) = created {
        let shown = Shown {
            trigger_form: form,
            ..Shown::default()
        };
        return refused(&state, &account, "trigger", error, shown).await;
    }
    flash(
        &account.session,
        "success",
        "The trigger is saved: it acts on events received from now on.",
    )
    .await;
    Ok(Redirect::to(PAGE).into_response())
}

/// The trigger's page: its form filled in with its values (another organization's: 404).
async fn edit_trigger_page(
    State(state): State<AppState>,
    account: SignedIn,
    Path(id): Path<String>,
) -> PageResult<TriggerPage> {
    let id = EventTriggerId::parse(&id).ok_or_else(PageError::not_found)?;
    let record = triggers::get(&state, account.acting(), id).await?;
    trigger_page(&state, &account, id, TriggerForm::of(&record), None).await
}

async fn trigger_page(
    state: &AppState,
    account: &SignedIn,
    id: EventTriggerId,
    form: TriggerForm,
    error: Option<String>,
) -> PageResult<TriggerPage> {
    Ok(TriggerPage {
        layout: Layout::new(account, Section::Rules).await,
        id: id.to_string(),
        flows: flow_choices(state, account, &form.flow_id).await?,
        priorities: form.priorities(),
        trigger_form: form,
        error,
    })
}

/// Saves a trigger's form through the operation `PUT /v1/event-triggers/{id}` calls (which
/// audits it); a refusal shows the form again with the message, which names the field.
async fn update_trigger(
    State(state): State<AppState>,
    account: SignedIn,
    Path(id): Path<String>,
    HtmlForm(form): HtmlForm<TriggerForm>,
) -> PageResult {
    account.require_admin()?;
    let id = EventTriggerId::parse(&id).ok_or_else(PageError::not_found)?;
    // Another organization's trigger is not found, whatever the form holds.
    triggers::get(&state, account.acting(), id).await?;
    let updated = match form.input() {
        Ok(input) => triggers::update(&state, account.acting(), id, input)
            .await
            .map(|_| ()),
        Err(problem) => Err(problem.into()),
    };
    if let Err(error) = updated {
        let (status, message) = refusal(error)?;
        let page = trigger_page(&state, &account, id, form, Some(message)).await?;
        return Ok((status, page).into_response());
    }
    flash(
        &account.session,
        "success",
        "The trigger is saved: it acts on events received from now on.",
    )
    .await;
    Ok(Redirect::to(PAGE).into_response())
}

async fn delete_trigger(
    State(state): State<AppState>,
    account: SignedIn,
    Path(id): Path<String>,
) -> PageResult {
    account.require_admin()?;
    let id = EventTriggerId::parse(&id).ok_or_else(PageError::not_found)?;
    triggers::delete(&state, account.acting(), id).await?;
    flash(
        &account.session,
        "success",
        "The trigger is deleted; assignments it made stay.",
    )
    .await;
    Ok(Redirect::to(PAGE).into_response())
}

async fn preview(
    State(state): State<AppState>,
    account: SignedIn,
    HtmlForm(form): HtmlForm<PreviewForm>,
) -> PageResult {
    let event = match serde_json::from_str(&form.event) {
        Ok(event) => event,
        Err(error) => {
            let error = flow_domain::Invalid(format!("the event is not valid JSON: {error}"));
            let shown = Shown {
                preview_form: form,
                ..Shown::default()
            };
            return refused(&state, &account, "preview", error.into(), shown).await;
        }
    };
    let found = flow_app::events::preview(
        &state,
        account.acting(),
        CloudEvent::from_json(event),
        Utc::now(),
    )
    .await?;
    let layout_zone = account.zone();
    let shown = PreviewShown {
        status: found.status.as_str(),
        reason: found.reason.unwrap_or_default(),
        matches: found
            .matches
            .iter()
            .map(|found| {
                let who = if found.user_found {
                    found.user_email.clone()
                } else {
                    format!("{} (no active user with this e-mail)", found.user_email)
                };
                let due = found.due_at.map_or_else(String::new, |due| {
                    format!(", due {}", super::view::time_in(layout_zone, due))
                });
                format!(
                    "{}: {} \"{}\" for {who}{due}",
                    found.trigger_name,
                    found.action.as_str(),
                    found.flow_name
                )
            })
            .collect(),
    };
    let shown = Shown {
        preview_form: form,
        preview: Some(shown),
        ..Shown::default()
    };
    Ok(render(&state, &account, shown).await?.into_response())
}

/// The page showing a source's secret this once, with how to use it.
async fn secret_page(
    state: &AppState,
    account: &SignedIn,
    shown: WithSecret,
    rotated: bool,
) -> SecretPage {
    let okta = shown.source.kind == "okta";
    SecretPage {
        layout: Layout::new(account, Section::Rules).await,
        name: shown.source.name,
        okta,
        inbound_url: format!(
            "{}/v1/events/inbound/{}",
            state.config.public_base_url.trim_end_matches('/'),
            shown.source.id
        ),
        secret: shown.secret,
        rotated,
        overlap_hours: ROTATION_OVERLAP.as_secs() / 3600,
    }
}

async fn create_source(
    State(state): State<AppState>,
    account: SignedIn,
    HtmlForm(form): HtmlForm<SourceForm>,
) -> PageResult {
    account.require_admin()?;
    let okta = form.kind == "okta";
    let input = SourceInput {
        name: Some(form.name.clone()),
        kind: Some(form.kind.clone()),
        type_pointer: optional(&form.type_pointer).filter(|_| !okta),
        fixed_type: None,
        source: optional(&form.source),
        auth_header: None,
    };
    match sources::create(&state, account.acting(), input).await {
        Ok(created) => Ok(secret_page(&state, &account, created, false)
            .await
            .into_response()),
        Err(error) => {
            let shown = Shown {
                source_form: form,
                ..Shown::default()
            };
            refused(&state, &account, "source", error, shown).await
        }
    }
}

async fn rotate_source(
    State(state): State<AppState>,
    account: SignedIn,
    Path(id): Path<String>,
) -> PageResult {
    account.require_admin()?;
    let id = EventSourceId::parse(&id).ok_or_else(PageError::not_found)?;
    let rotated = sources::rotate_secret(&state, account.acting(), id).await?;
    Ok(secret_page(&state, &account, rotated, true)
        .await
        .into_response())
}

async fn delete_source(
    State(state): State<AppState>,
    account: SignedIn,
    Path(id): Path<String>,
) -> PageResult {
    account.require_admin()?;
    let id = EventSourceId::parse(&id).ok_or_else(PageError::not_found)?;
    sources::delete(&state, account.acting(), id).await?;
    flash(
        &account.session,
        "success",
        "The source is deleted: its deliveries are refused from now on.",
    )
    .await;
    Ok(Redirect::to(PAGE).into_response())
}
