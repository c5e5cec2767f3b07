//! Webhooks: endpoints with their health over 24 hours; create and edit (URL, event kinds,
//! description, enabled) with the API's address policy; the signing secret shown once at creation
//! and rotation; a test event; per endpoint a delivery log with multi-select filters (status,
//! event kind), a time range, search by event, delivery or assignment id, and keyset pages; each
//! delivery with its attempts and a resend; "recover every failed delivery since T", counted
//! before it is done, at most [`MAX_RECOVERY`] at a time and each delivery charged to the
//! organization's `webhook_send` limit, like a resend.

use std::collections::HashMap;

use askama::Template;
use askama_web::WebTemplate;
use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use chrono::{DateTime, Duration as TimeSpan, NaiveDate, NaiveDateTime, TimeZone, Utc};
use flow_app::ratelimit::{Operation, RateLimitError};
use flow_app::webhooks::{self as service, DeliveryWithAttempts, EndpointFields, MAX_RECOVERY};
use flow_app::{ProblemKind, ServiceError};
use flow_common::db::dashboard::EndpointHealth;
use flow_common::db::webhooks::endpoints::{Endpoint, MAX_ENDPOINTS_PER_ORG};
use flow_common::db::webhooks::log::DeliveryRecord;
use flow_common::db::webhooks::log::DeliverySearch;
use flow_domain::events::{EventType, TEST_EVENT_TYPE};
use flow_domain::ids::{AssignmentId, DeliveryId, EventId, WebhookEndpointId};
use flow_domain::report::{decode_keyset, encode_keyset};
use flow_domain::webhook::DeliveryStatus;
use serde::{Deserialize, Serialize};

use super::auth::SignedIn;
use super::session::flash;
use super::view::{ErrorText, Layout, Section, label, percent, plural};
use super::{HtmlForm, HtmlQuery, PageError, PageResult};
use crate::state::AppState;

/// Deliveries per page of the log.
const PAGE_SIZE: i64 = 25;

/// Statuses a delivery can have, in the order the filter offers them (outcomes first).
const DELIVERY_STATUSES: [DeliveryStatus; 4] = [
    DeliveryStatus::Succeeded,
    DeliveryStatus::Failed,
    DeliveryStatus::Pending,
    DeliveryStatus::Delivering,
];
// A status added to the domain must be placed in the filter's order too.
const _: () = assert!(DELIVERY_STATUSES.len() == DeliveryStatus::ALL.len());

/// Routes of this module.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/webhooks", get(list).post(create))
        .route("/webhooks/new", get(new_form))
        .route("/webhooks/{id}", get(show))
        .route("/webhooks/{id}/edit", get(edit_form).post(update))
        .route("/webhooks/{id}/delete", post(delete))
        .route("/webhooks/{id}/rotate", post(rotate))
        .route("/webhooks/{id}/test", post(send_test))
        .route("/webhooks/{id}/recover", get(recover_preview).post(recover))
        .route("/webhooks/{id}/deliveries/{delivery}", get(delivery))
        .route("/webhooks/{id}/deliveries/{delivery}/resend", post(resend))
}

fn endpoint_id(text: &str) -> Result<WebhookEndpointId, PageError> {
    WebhookEndpointId::parse(text).ok_or_else(PageError::not_found)
}

async fn endpoint(state: &AppState, account: &SignedIn, id: &str) -> Result<Endpoint, PageError> {
    Ok(service::get(state, account.acting(), endpoint_id(id)?).await?)
}

/// An endpoint as the list and its page show it.
pub struct EndpointRow {
    pub id: String,
    pub url: String,
    /// Description, or empty.
    pub description: String,
    /// Event kinds delivered, in words.
    pub events: String,
    /// Enabled, or why not.
    pub state: String,
    /// CSS modifier of the state.
    pub state_class: &'static str,
    /// Success rate over 24 hours, e.g. `98.5%`, or a dash.
    pub success_rate: String,
    /// CSS modifier of the rate.
    pub rate_class: &'static str,
    /// Attempts over 24 hours.
    pub attempts: i64,
    /// The same, in words (`1 attempt`).
    pub attempts_text: String,
    /// The latest failure in 24 hours: when and its answer, in words.
    pub last_failure: String,
    /// The latest failure's transport error, when it was one.
    pub last_failure_error: Option<ErrorText>,
    /// Creation time.
    pub created: String,
}

impl EndpointRow {
    fn new(endpoint: &Endpoint, health: Option<&EndpointHealth>, layout: &Layout) -> Self {
        let (state, state_class) = if endpoint.enabled {
            ("Enabled".to_owned(), "success")
        } else {
            let reason = match endpoint.disabled_reason.as_deref() {
                Some("gone") => "Disabled: the endpoint answered 410 Gone",
                Some("failing") => "Disabled after days of failures",
                _ => "Disabled",
            };
            (reason.to_owned(), "danger")
        };
        let rate = health.and_then(EndpointHealth::success_rate);
        let rate_class = match rate {
            None => "muted",
            Some(rate) if rate >= 99.0 => "success",
            Some(rate) if rate >= 90.0 => "warning",
            Some(_) => "danger",
        };
        let (last_failure, last_failure_error) = match health
            .and_then(|health| health.last_failure_at.map(|at| (health, at)))
        {
            None => ("None".to_owned(), None),
            Some((health, at)) => {
                let (what, error) = match (health.last_failure_status, &health.last_failure_error) {
                    (Some(code), _) => (format!("HTTP {code}"), None),
                    (None, Some(error)) => {
                        let error = ErrorText::new(error);
                        (error.kind.to_owned(), Some(error))
                    }
                    (None, None) => ("no answer".to_owned(), None),
                };
                (format!("{} · {what}", layout.time(&at)), error)
            }
        };
        Self {
            id: endpoint.id.to_string(),
            url: endpoint.url.clone(),
            description: endpoint.description.clone().unwrap_or_default(),
            events: if endpoint.events.is_empty() {
                "All events".to_owned()
            } else {
                let names: Vec<&str> = endpoint.events.iter().map(|kind| kind.as_str()).collect();
                names.join(", ")
            },
            state,
            state_class,
            success_rate: rate.map_or_else(|| "–".to_owned(), percent),
            rate_class,
            attempts: health.map_or(0, |health| health.attempts),
            attempts_text: plural(health.map_or(0, |health| health.attempts), "attempt"),
            last_failure,
            last_failure_error,
            created: layout.time(&endpoint.created_at),
        }
    }
}

#[derive(Template, WebTemplate)]
#[template(path = "dashboard/webhooks.html")]
struct ListPage {
    layout: Layout,
    endpoints: Vec<EndpointRow>,
    /// The kinds of event an endpoint can take.
    event_kinds: Vec<&'static str>,
}

async fn list(State(state): State<AppState>, account: SignedIn) -> PageResult<ListPage> {
    let layout = Layout::new(&account, Section::Webhooks).await;
    let endpoints = service::list(&state, account.acting(), None, MAX_ENDPOINTS_PER_ORG).await?;
    let ids: Vec<WebhookEndpointId> = endpoints.iter().map(|endpoint| endpoint.id).collect();
    let health: HashMap<WebhookEndpointId, EndpointHealth> =
        service::health(&state, account.acting(), &ids)
            .await?
            .into_iter()
            .map(|health| (health.endpoint_id, health))
            .collect();
    Ok(ListPage {
        endpoints: endpoints
            .iter()
            .map(|endpoint| EndpointRow::new(endpoint, health.get(&endpoint.id), &layout))
            .collect(),
        layout,
        event_kinds: EventType::ALL.iter().map(|kind| kind.as_str()).collect(),
    })
}

/// The endpoint form as typed (kept when it is shown again with errors).
#[derive(Debug, Clone, Default, Deserialize)]
pub struct EndpointForm {
    /// URL.
    #[serde(default)]
    pub url: String,
    /// Event kinds ticked; none means all.
    #[serde(default)]
    pub events: Vec<String>,
    /// Description.
    #[serde(default)]
    pub description: String,
    /// Present when "enabled" is ticked (edit only).
    pub enabled: Option<String>,
}

/// A checkbox of the event kinds.
pub struct EventChoice {
    /// Wire name.
    pub value: &'static str,
    /// Ticked.
    pub checked: bool,
}

/// The checkboxes with the kinds named in `ticked` ticked (names as the form sent them, or an
/// endpoint's kinds).
fn event_choices<S: AsRef<str>>(ticked: &[S]) -> Vec<EventChoice> {
    EventType::ALL
        .iter()
        .map(|event| EventChoice {
            value: event.as_str(),
            checked: ticked.iter().any(|tick| tick.as_ref() == event.as_str()),
        })
        .collect()
}

/// Errors of the endpoint form, by field.
#[derive(Debug, Default)]
pub struct FormErrors {
    /// Of the URL.
    pub url: Option<String>,
    /// Of the event kinds.
    pub events: Option<String>,
    /// Of the description.
    pub description: Option<String>,
    /// Not about one field.
    pub general: Option<String>,
}

#[derive(Template, WebTemplate)]
#[template(path = "dashboard/webhook_form.html")]
struct FormPage {
    layout: Layout,
    /// The endpoint being edited; `None` when creating.
    editing: Option<String>,
    url: String,
    description: String,
    enabled: bool,
    events: Vec<EventChoice>,
    errors: FormErrors,
}

/// A rule's message as a sentence beside its field: `description must …` → `Description must ….`
pub(super) fn sentence(message: &str) -> String {
    let mut characters = message.chars();
    let first: String = characters
        .next()
        .map(|first| first.to_uppercase().collect())
        .unwrap_or_default();
    format!("{first}{}.", characters.as_str())
}

impl EndpointForm {
    /// The fields as the service takes them; the form always sends every one.
    fn fields(&self) -> EndpointFields {
        EndpointFields {
            url: Some(self.url.clone()),
            events: Some(self.events.clone()),
            description: Some(self.description.clone()),
            enabled: Some(self.enabled.is_some()),
        }
    }
}

/// The problems of the fields, each beside its field in the form's words; `None` when the error
/// is not about fields.
fn form_errors(error: &ServiceError) -> Option<FormErrors> {
    let problems = error.field_problems();
    if problems.is_empty() {
        return None;
    }
    let mut errors = FormErrors::default();
    for problem in problems {
        match (problem.field, problem.kind == ProblemKind::Missing) {
            ("url", true) => errors.url = Some("Enter the address events are sent to.".to_owned()),
            ("url", false) => errors.url = Some(problem.problem.0.clone()),
            ("events", _) => {
                errors.events = Some(format!("Choose among: {}.", EventType::allowed()));
            }
            ("description", _) => errors.description = Some(sentence(&problem.problem.0)),
            (_, _) => errors.general = Some(sentence(&problem.problem.0)),
        }
    }
    Some(errors)
}

async fn new_form(account: SignedIn) -> PageResult<FormPage> {
    account.require_admin()?;
    Ok(FormPage {
        layout: Layout::new(&account, Section::Webhooks).await,
        editing: None,
        url: String::new(),
        description: String::new(),
        enabled: true,
        events: event_choices::<EventType>(&[]),
        errors: FormErrors::default(),
    })
}

async fn form_again(
    account: &SignedIn,
    editing: Option<String>,
    form: EndpointForm,
    errors: FormErrors,
) -> Response {
    let page = FormPage {
        layout: Layout::new(account, Section::Webhooks).await,
        editing,
        url: form.url,
        description: form.description,
        enabled: form.enabled.is_some(),
        events: event_choices(&form.events),
        errors,
    };
    (StatusCode::BAD_REQUEST, page).into_response()
}

#[derive(Template, WebTemplate)]
#[template(path = "dashboard/webhook_secret.html")]
struct SecretPage {
    layout: Layout,
    endpoint_id: String,
    url: String,
    secret: String,
    rotated: bool,
    previous_until: String,
}

async fn create(
    State(state): State<AppState>,
    account: SignedIn,
    HtmlForm(form): HtmlForm<EndpointForm>,
) -> PageResult {
    account.require_admin()?;
    let created = match service::create(&state, account.acting(), &form.fields()).await {
        Ok(created) => created,
        Err(error) => {
            let errors = match (form_errors(&error), error) {
                (Some(errors), _) => errors,
                (None, ServiceError::Conflict(_)) => FormErrors {
                    general: Some(format!(
                        "An organization may have at most {} endpoints; delete one first.",
                        MAX_ENDPOINTS_PER_ORG
                    )),
                    ..FormErrors::default()
                },
                (None, error) => return Err(error.into()),
            };
            return Ok(form_again(&account, None, form, errors).await);
        }
    };
    Ok(SecretPage {
        layout: Layout::new(&account, Section::Webhooks).await,
        endpoint_id: created.endpoint.id.to_string(),
        url: created.endpoint.url,
        secret: created.secret,
        rotated: false,
        previous_until: String::new(),
    }
    .into_response())
}

async fn edit_form(
    State(state): State<AppState>,
    account: SignedIn,
    Path(id): Path<String>,
) -> PageResult<FormPage> {
    account.require_admin()?;
    let endpoint = endpoint(&state, &account, &id).await?;
    Ok(FormPage {
        layout: Layout::new(&account, Section::Webhooks).await,
        editing: Some(endpoint.id.to_string()),
        events: event_choices(&endpoint.events),
        url: endpoint.url,
        description: endpoint.description.unwrap_or_default(),
        enabled: endpoint.enabled,
        errors: FormErrors::default(),
    })
}

async fn update(
    State(state): State<AppState>,
    account: SignedIn,
    Path(id): Path<String>,
    HtmlForm(form): HtmlForm<EndpointForm>,
) -> PageResult {
    account.require_admin()?;
    let current = endpoint(&state, &account, &id).await?;
    let updated = match service::update(&state, account.acting(), current.id, &form.fields()).await
    {
        Ok(updated) => updated,
        Err(error) => match form_errors(&error) {
            Some(errors) => {
                return Ok(form_again(&account, Some(current.id.to_string()), form, errors).await);
            }
            None => return Err(error.into()),
        },
    };
    flash(&account.session, "success", "The endpoint is saved.").await;
    Ok(Redirect::to(&format!("/dashboard/webhooks/{}", updated.id)).into_response())
}

async fn delete(
    State(state): State<AppState>,
    account: SignedIn,
    Path(id): Path<String>,
) -> PageResult {
    account.require_admin()?;
    let deleted = service::delete(&state, account.acting(), endpoint_id(&id)?).await?;
    flash(
        &account.session,
        "success",
        format!(
            "The endpoint {} and its delivery log are deleted.",
            deleted.url
        ),
    )
    .await;
    Ok(Redirect::to("/dashboard/webhooks").into_response())
}

async fn rotate(
    State(state): State<AppState>,
    account: SignedIn,
    Path(id): Path<String>,
) -> PageResult {
    account.require_admin()?;
    let rotated = service::rotate_secret(&state, account.acting(), endpoint_id(&id)?).await?;
    let layout = Layout::new(&account, Section::Webhooks).await;
    Ok(SecretPage {
        previous_until: layout.time_or(&rotated.endpoint.previous_secret_expires_at, ""),
        layout,
        endpoint_id: rotated.endpoint.id.to_string(),
        url: rotated.endpoint.url,
        secret: rotated.secret,
        rotated: true,
    }
    .into_response())
}

async fn send_test(
    State(state): State<AppState>,
    account: SignedIn,
    Path(id): Path<String>,
) -> PageResult {
    account.require_admin()?;
    let current = endpoint(&state, &account, &id).await?;
    service::send_test(&state, account.acting(), current.id).await?;
    flash(
        &account.session,
        "success",
        "A webhook.test event is on its way; it appears in the log below.",
    )
    .await;
    Ok(Redirect::to(&format!("/dashboard/webhooks/{}", current.id)).into_response())
}

/// Filters of the delivery log, as in the page's address.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct LogQuery {
    /// Statuses ticked.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub status: Vec<String>,
    /// Event kinds ticked.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub event: Vec<String>,
    /// Created at or after (the organization's local time).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// Created before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    /// An event, delivery or assignment id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub search: Option<String>,
    /// Cursor of the page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before: Option<String>,
}

/// Parses a `datetime-local` value (or a plain date) in `zone`.
fn local_time(text: &str, zone: chrono_tz::Tz) -> Option<DateTime<Utc>> {
    let text = text.trim();
    let naive = NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M")
        .or_else(|_| NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M:%S"))
        .ok()
        .or_else(|| {
            NaiveDate::parse_from_str(text, "%Y-%m-%d")
                .ok()
                .and_then(|date| date.and_hms_opt(0, 0, 0))
        })?;
    zone.from_local_datetime(&naive)
        .earliest()
        .map(|at| at.with_timezone(&Utc))
}

/// The value of a `datetime-local` input for `at` in `zone`.
fn local_input(at: DateTime<Utc>, zone: chrono_tz::Tz) -> String {
    at.with_timezone(&zone).format("%Y-%m-%dT%H:%M").to_string()
}

/// A filter checkbox.
pub struct Choice {
    pub value: &'static str,
    /// Label.
    pub text: String,
    /// Ticked.
    pub checked: bool,
}

/// A delivery as the log shows it.
pub struct DeliveryRow {
    pub id: String,
    /// Event id.
    pub event_id: String,
    /// Event kind.
    pub event_type: String,
    pub status: String,
    /// Status in words.
    pub status_text: String,
    /// Attempts made.
    pub attempts: i32,
    /// Last answer: `HTTP 200`, an error's kind, or a dash.
    pub last_result: String,
    /// The last attempt's transport error, when it was one.
    pub last_error: Option<ErrorText>,
    /// Creation time.
    pub created: String,
    /// Next attempt, while pending.
    pub next_attempt: String,
}

impl DeliveryRow {
    fn new(record: &DeliveryRecord, layout: &Layout) -> Self {
        Self {
            id: record.id.to_string(),
            event_id: record.event_id.to_string(),
            event_type: record.event_type.clone(),
            status: record.status.as_str().to_owned(),
            status_text: label(record.status.as_str()),
            attempts: record.attempts,
            last_result: match (record.last_status_code, &record.last_error) {
                (Some(code), _) => format!("HTTP {code}"),
                (None, Some(error)) => ErrorText::new(error).kind.to_owned(),
                (None, None) => "–".to_owned(),
            },
            last_error: match (record.last_status_code, &record.last_error) {
                (None, Some(error)) => Some(ErrorText::new(error)),
                _ => None,
            },
            created: layout.time(&record.created_at),
            next_attempt: if record.status == DeliveryStatus::Pending {
                layout.time(&record.next_attempt_at)
            } else {
                String::new()
            },
        }
    }
}

#[derive(Template, WebTemplate)]
#[template(path = "dashboard/webhook.html")]
struct EndpointPage {
    layout: Layout,
    endpoint: EndpointRow,
    disabled: bool,
    rotation_until: String,
    statuses: Vec<Choice>,
    events: Vec<Choice>,
    from: String,
    to: String,
    search: String,
    filter_error: Option<String>,
    filtered: bool,
    deliveries: Vec<DeliveryRow>,
    next_url: Option<String>,
    first_url: Option<String>,
    recover_since: String,
}

async fn show(
    State(state): State<AppState>,
    account: SignedIn,
    Path(id): Path<String>,
    HtmlQuery(query): HtmlQuery<LogQuery>,
) -> PageResult {
    let current = endpoint(&state, &account, &id).await?;
    let layout = Layout::new(&account, Section::Webhooks).await;
    let zone = account.zone();
    let mut problems = Vec::new();
    let statuses: Vec<String> = query
        .status
        .iter()
        .filter(|status| status.parse::<DeliveryStatus>().is_ok())
        .cloned()
        .collect();
    let kinds: Vec<&str> = EventType::ALL
        .iter()
        .map(|event| event.as_str())
        .chain([TEST_EVENT_TYPE])
        .collect();
    let event_types: Vec<String> = query
        .event
        .iter()
        .filter(|event| kinds.contains(&event.as_str()))
        .cloned()
        .collect();
    let mut time = |text: &Option<String>, what: &str| match text.as_deref().map(str::trim) {
        None | Some("") => None,
        Some(text) => local_time(text, zone).or_else(|| {
            problems.push(format!("The {what} time is not a date and time."));
            None
        }),
    };
    let from = time(&query.from, "start");
    let to = time(&query.to, "end");
    let mut search = DeliverySearch {
        statuses,
        event_types,
        from,
        to,
        ..DeliverySearch::default()
    };
    let search_text = query.search.as_deref().map(str::trim).unwrap_or("");
    if !search_text.is_empty() {
        if let Some(event) = EventId::parse(search_text) {
            search.event_id = Some(event);
        } else if let Some(delivery) = DeliveryId::parse(search_text) {
            search.delivery_id = Some(delivery);
        } else if let Some(assignment) = AssignmentId::parse(search_text) {
            search.assignment_id = Some(assignment);
        } else {
            problems.push(
                "Search by an event id (evt_…), a delivery id (dlv_…) or an assignment id (asg_…)."
                    .to_owned(),
            );
        }
    }
    let before = match query.before.as_deref() {
        None | Some("") => None,
        Some(text) => match decode_keyset(text) {
            Some((at, id)) => Some((at, DeliveryId(id))),
            None => {
                problems
                    .push("That page no longer exists; showing the newest deliveries.".to_owned());
                None
            }
        },
    };
    let mut rows = service::search_deliveries(
        &state,
        account.acting(),
        current.id,
        &search,
        before,
        PAGE_SIZE + 1,
    )
    .await?;
    let page_size = usize::try_from(PAGE_SIZE).unwrap_or(usize::MAX);
    let filters = LogQuery {
        before: None,
        ..query.clone()
    };
    let next_url = if rows.len() > page_size {
        rows.truncate(page_size);
        rows.last().map(|last| {
            let next = LogQuery {
                before: Some(encode_keyset(last.created_at, &last.id.0)),
                ..filters.clone()
            };
            log_url(current.id, &next)
        })
    } else {
        None
    };
    let health = service::health(&state, account.acting(), &[current.id]).await?;
    let page = EndpointPage {
        endpoint: EndpointRow::new(&current, health.first(), &layout),
        disabled: !current.enabled,
        rotation_until: layout.time_or(
            &current
                .previous_secret_expires_at
                .filter(|at| *at > Utc::now()),
            "",
        ),
        statuses: DELIVERY_STATUSES
            .iter()
            .map(|status| Choice {
                value: status.as_str(),
                text: label(status.as_str()),
                checked: search
                    .statuses
                    .iter()
                    .any(|ticked| ticked == status.as_str()),
            })
            .collect(),
        events: kinds
            .iter()
            .map(|kind| Choice {
                value: kind,
                text: (*kind).to_owned(),
                checked: search.event_types.iter().any(|ticked| ticked == kind),
            })
            .collect(),
        from: query.from.clone().unwrap_or_default(),
        to: query.to.clone().unwrap_or_default(),
        search: search_text.to_owned(),
        filtered: !search.statuses.is_empty()
            || !search.event_types.is_empty()
            || search.from.is_some()
            || search.to.is_some()
            || !search_text.is_empty(),
        deliveries: rows
            .iter()
            .map(|row| DeliveryRow::new(row, &layout))
            .collect(),
        next_url,
        first_url: before.map(|_| log_url(current.id, &filters)),
        recover_since: local_input(Utc::now() - TimeSpan::hours(24), zone),
        filter_error: (!problems.is_empty()).then(|| problems.join(" ")),
        layout,
    };
    let status = if page.filter_error.is_some() {
        StatusCode::BAD_REQUEST
    } else {
        StatusCode::OK
    };
    Ok((status, page).into_response())
}

fn log_url(id: WebhookEndpointId, query: &LogQuery) -> String {
    let query = serde_html_form::to_string(query).unwrap_or_default();
    if query.is_empty() {
        format!("/dashboard/webhooks/{id}#deliveries")
    } else {
        format!("/dashboard/webhooks/{id}?{query}#deliveries")
    }
}

/// An attempt as the delivery page shows it.
pub struct AttemptRow {
    pub number: i32,
    /// When.
    pub at: String,
    /// `200`, or a dash.
    pub status_code: String,
    /// Whether it succeeded.
    pub ok: bool,
    pub latency: String,
    /// Transport error.
    pub error: Option<ErrorText>,
    /// Start of the response body.
    pub response: String,
}

#[derive(Template, WebTemplate)]
#[template(path = "dashboard/delivery.html")]
struct DeliveryPage {
    layout: Layout,
    endpoint_id: String,
    endpoint_url: String,
    delivery: DeliveryRow,
    delivered: String,
    attempts: Vec<AttemptRow>,
    payload: String,
    can_resend: bool,
}

async fn delivery(
    State(state): State<AppState>,
    account: SignedIn,
    Path((id, delivery_id)): Path<(String, String)>,
) -> PageResult<DeliveryPage> {
    let current = endpoint(&state, &account, &id).await?;
    let delivery_id = DeliveryId::parse(&delivery_id).ok_or_else(PageError::not_found)?;
    let DeliveryWithAttempts {
        delivery: record,
        attempts,
    } = service::delivery_with_attempts(&state, account.acting(), current.id, delivery_id).await?;
    let layout = Layout::new(&account, Section::Webhooks).await;
    Ok(DeliveryPage {
        endpoint_id: current.id.to_string(),
        endpoint_url: current.url,
        delivered: layout.time_or(&record.delivered_at, "Not yet"),
        attempts: attempts
            .iter()
            .map(|attempt| AttemptRow {
                number: attempt.attempt,
                at: layout.time(&attempt.attempted_at),
                status_code: attempt
                    .status_code
                    .map_or_else(|| "–".to_owned(), |code| code.to_string()),
                ok: attempt
                    .status_code
                    .is_some_and(|code| (200..300).contains(&code)),
                latency: format!("{} ms", attempt.latency_ms),
                error: attempt.error.as_deref().map(ErrorText::new),
                response: attempt.response_excerpt.clone().unwrap_or_default(),
            })
            .collect(),
        payload: serde_json::to_string_pretty(&record.payload).unwrap_or_default(),
        can_resend: layout.is_admin && record.status != DeliveryStatus::Delivering,
        delivery: DeliveryRow::new(&record, &layout),
        layout,
    })
}

async fn resend(
    State(state): State<AppState>,
    account: SignedIn,
    Path((id, delivery_id)): Path<(String, String)>,
) -> PageResult {
    account.require_admin()?;
    let current = endpoint(&state, &account, &id).await?;
    let delivery_id = DeliveryId::parse(&delivery_id).ok_or_else(PageError::not_found)?;
    service::delivery(&state, account.acting(), current.id, delivery_id).await?;
    let target = format!(
        "/dashboard/webhooks/{}/deliveries/{delivery_id}",
        current.id
    );
    // One more attempt now, with the same event id.
    match service::retry_delivery(&state, account.acting(), delivery_id).await {
        Ok(_) => {
            flash(
                &account.session,
                "success",
                "Queued for another attempt now.",
            )
            .await
        }
        Err(ServiceError::Conflict(message)) => flash(&account.session, "error", message).await,
        Err(error) => return Err(error.into()),
    }
    Ok(Redirect::to(&target).into_response())
}

/// The time of the recover form.
#[derive(Debug, Default, Deserialize)]
pub struct RecoverQuery {
    /// Recover failed deliveries created since (local time).
    pub since: Option<String>,
}

#[derive(Template, WebTemplate)]
#[template(path = "dashboard/recover.html")]
struct RecoverPage {
    layout: Layout,
    endpoint_id: String,
    endpoint_url: String,
    since: String,
    since_text: String,
    count: i64,
    disabled: bool,
    error: Option<String>,
    /// [`MAX_RECOVERY`].
    max_recovery: i64,
    /// The organization's `webhook_send` limit, per minute.
    send_limit: u32,
}

async fn recover_preview(
    State(state): State<AppState>,
    account: SignedIn,
    Path(id): Path<String>,
    HtmlQuery(query): HtmlQuery<RecoverQuery>,
) -> PageResult {
    let current = endpoint(&state, &account, &id).await?;
    let zone = account.zone();
    let layout = Layout::new(&account, Section::Webhooks).await;
    let text = query.since.unwrap_or_default();
    let Some(since) = local_time(&text, zone) else {
        let page = RecoverPage {
            layout,
            endpoint_id: current.id.to_string(),
            endpoint_url: current.url,
            since: local_input(Utc::now() - TimeSpan::hours(24), zone),
            since_text: String::new(),
            count: 0,
            disabled: !current.enabled,
            error: Some("Choose the date and time to recover from.".to_owned()),
            max_recovery: MAX_RECOVERY,
            send_limit: Operation::WebhookSend.limit(&account.caller),
        };
        return Ok((StatusCode::BAD_REQUEST, page).into_response());
    };
    let count = service::failed_since(&state, account.acting(), current.id, since).await?;
    Ok(RecoverPage {
        since: local_input(since, zone),
        since_text: layout.time(&since),
        layout,
        endpoint_id: current.id.to_string(),
        endpoint_url: current.url,
        count,
        disabled: !current.enabled,
        error: None,
        max_recovery: MAX_RECOVERY,
        send_limit: Operation::WebhookSend.limit(&account.caller),
    }
    .into_response())
}

/// The recover confirmation.
#[derive(Debug, Deserialize)]
pub struct RecoverForm {
    /// Recover failed deliveries created since (local time).
    #[serde(default)]
    pub since: String,
}

/// Queues failed deliveries since a time for another attempt: the oldest first, at most
/// [`MAX_RECOVERY`], and no more than the organization's `webhook_send` allowance grants now
/// (one per delivery); the action itself is limited too (`webhook_recover`). Says how many were
/// queued and how many are left.
async fn recover(
    State(state): State<AppState>,
    account: SignedIn,
    Path(id): Path<String>,
    HtmlForm(form): HtmlForm<RecoverForm>,
) -> PageResult {
    account.require_admin()?;
    let current = endpoint(&state, &account, &id).await?;
    let since = local_time(&form.since, account.zone())
        .ok_or_else(|| PageError::bad_request("Choose the date and time to recover from."))?;
    let send_limit = Operation::WebhookSend.limit(&account.caller);
    let recovery = match service::recover_failed(&state, account.acting(), current.id, since).await
    {
        Ok(recovery) => recovery,
        Err(ServiceError::RateLimited(RateLimitError::Exceeded {
            operation: Operation::WebhookRecover,
            retry_after,
            info,
        })) => {
            return Err(PageError::too_many(
                format!(
                    "Recoveries are limited to {} a minute. Try again in {retry_after} s.",
                    info.limit
                ),
                retry_after,
            ));
        }
        Err(ServiceError::RateLimited(RateLimitError::Exceeded {
            operation: Operation::WebhookSend,
            retry_after,
            ..
        })) => {
            return Err(PageError::too_many(
                format!(
                    "Nothing was queued: each recovered delivery counts against the webhook send \
                     limit ({send_limit} a minute, shared with test events and resends), and it \
                     is used up. Try again in {retry_after} s."
                ),
                retry_after,
            ));
        }
        Err(error) => return Err(error.into()),
    };
    if recovery.failed == 0 {
        flash(
            &account.session,
            "success",
            "There were no failed deliveries to recover.",
        )
        .await;
        return Ok(Redirect::to(&format!("/dashboard/webhooks/{}", current.id)).into_response());
    }
    let recovered = recovery.recovered;
    let queued = match recovered {
        0 => "No failed delivery was queued.".to_owned(),
        1 => "1 failed delivery is queued for another attempt.".to_owned(),
        many => format!("{many} failed deliveries are queued for another attempt."),
    };
    let left = recovery.left();
    let kind = if left == 0 { "success" } else { "warning" };
    let text = if left == 0 {
        queued
    } else if recovery.limited_by_allowance {
        format!(
            "{queued} {left} more failed since then: the webhook send limit ({send_limit} a \
             minute) allows no more now. Recover again in {} s for the next ones, oldest first.",
            recovery.reset_seconds.max(1)
        )
    } else {
        format!(
            "{queued} {left} more failed since then: one recovery queues at most \
             {MAX_RECOVERY}. Recover again for the next ones, oldest first."
        )
    };
    flash(&account.session, kind, text).await;
    Ok(Redirect::to(&format!("/dashboard/webhooks/{}", current.id)).into_response())
}
