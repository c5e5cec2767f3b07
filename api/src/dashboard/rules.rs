//! Enrollment rules: the organization's rules (list), a form to create or edit one with a preview
//! of what it would assign now, delete and backfill (a background job: the list shows each
//! rule's latest one). Every action is one call of `flow_app::enrollment`; the condition is
//! built with pickers (rows of term and value, all or any of them: [`super::rule_terms`]) or
//! written as the API's JSON (docs/enrollment-rules.md) when it nests deeper.

use askama::Template;
use askama_web::WebTemplate;
use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use flow_app::ServiceError;
use flow_app::enrollment::{self as service, MAX_RULES, RuleInput};
use flow_common::db::enrollment_backfills::{Backfill, BackfillStatus};
use flow_common::db::enrollment_rules::RuleRecord;
use flow_domain::ids::EnrollmentRuleId;
use serde::Deserialize;

use super::auth::SignedIn;
use super::rule_terms::{self, TermRow};
use super::session::flash;
use super::view::{Layout, Section, plural};
use super::{HtmlForm, PageError, PageResult};
use crate::state::AppState;

/// Flows offered in the form's list.
const FLOW_CHOICES: i64 = 500;

/// Routes of this module.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/rules", get(list).post(create))
        .route("/rules/new", get(new))
        .route("/rules/{id}", get(edit).post(update))
        .route("/rules/{id}/delete", post(delete))
        .route("/rules/{id}/backfill", post(backfill))
}

/// A rule in the list.
pub struct RuleRow {
    pub id: String,
    pub name: String,
    pub flow: String,
    pub condition: String,
    pub due: String,
    /// The latest backfill's status (empty without one) and what it did.
    pub backfill_status: &'static str,
    pub backfill: String,
}

impl RuleRow {
    fn new(record: &RuleRecord, backfill: Option<&Backfill>) -> Self {
        Self {
            id: record.id.to_string(),
            name: record.name.clone(),
            flow: record.flow_name.clone(),
            condition: record.condition.to_string(),
            due: record.due_days.map_or_else(
                || "–".to_owned(),
                |days| {
                    let from = if record.due_from == "start_date" {
                        "start date"
                    } else {
                        "match"
                    };
                    format!("{days} days after {from}")
                },
            ),
            backfill_status: backfill.map_or("", |backfill| backfill.status.as_str()),
            backfill: backfill.map_or_else(|| "–".to_owned(), describe_backfill),
        }
    }
}

/// A backfill in a sentence.
fn describe_backfill(backfill: &Backfill) -> String {
    let counts = |so_far: &str| {
        let matching = plural(backfill.matching, "user");
        let verb = if backfill.matching == 1 {
            "matches"
        } else {
            "match"
        };
        format!(
            "{matching} {verb}{so_far}; {} queued",
            plural(backfill.queued, "assignment")
        )
    };
    match backfill.status {
        BackfillStatus::Queued => "Queued".to_owned(),
        BackfillStatus::Running => format!("Running: {}", counts(" so far")),
        BackfillStatus::Succeeded => format!("Succeeded: {}", counts("")),
        BackfillStatus::Failed => format!(
            "Failed: {}",
            backfill.error.as_deref().unwrap_or("unknown error")
        ),
    }
}

#[derive(Template, WebTemplate)]
#[template(path = "dashboard/rules.html")]
struct RulesPage {
    layout: Layout,
    rules: Vec<RuleRow>,
    /// Whether the organization may add one (an admin, under the cap).
    can_add: bool,
}

/// A flow the form offers.
pub struct FlowChoice {
    pub id: String,
    /// Its name and module count.
    pub name: String,
    pub selected: bool,
}

/// A user a preview lists.
pub struct PreviewRow {
    pub email: String,
    pub name: String,
}

/// What a preview found.
pub struct PreviewShown {
    /// Active users matching.
    pub matching: u64,
    /// The first of them.
    pub users: Vec<PreviewRow>,
}

/// A priority the form offers.
pub struct PriorityChoice {
    pub value: &'static str,
    pub selected: bool,
}

/// The form's fields, as sent.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct RuleForm {
    #[serde(default)]
    pub name: String,
    /// The condition as JSON, used when `mode` is not `pickers`.
    #[serde(default)]
    pub condition: String,
    /// `pickers` to build the condition from the rows; anything else uses the JSON.
    #[serde(default)]
    pub mode: String,
    /// `all` or `any` of the rows.
    #[serde(default)]
    pub combine: String,
    /// Each row's term (blank rows are skipped).
    #[serde(default)]
    pub term_kind: Vec<String>,
    /// Each row's value.
    #[serde(default)]
    pub term_value: Vec<String>,
    #[serde(default)]
    pub flow_id: String,
    #[serde(default)]
    pub due_days: String,
    #[serde(default)]
    pub due_from: String,
    #[serde(default)]
    pub priority: String,
    #[serde(default)]
    pub notes: String,
    /// `on` when ticked.
    pub reassign: Option<String>,
    /// `on` when ticked.
    pub cancel_on_unmatch: Option<String>,
    /// `preview` to preview instead of saving.
    pub intent: Option<String>,
}

#[derive(Template, WebTemplate)]
#[template(path = "dashboard/rule_form.html")]
struct RuleFormPage {
    layout: Layout,
    editing: Option<String>,
    form: RuleForm,
    flows: Vec<FlowChoice>,
    priorities: Vec<PriorityChoice>,
    from_start_date: bool,
    error: Option<String>,
    preview: Option<PreviewShown>,
    /// Whether the condition is built with the pickers (else written as JSON).
    pickers: bool,
    /// Whether the rows combine with "any" (else "all").
    combine_any: bool,
    term_rows: Vec<TermRow>,
    /// Departments and groups offered as values.
    values: Vec<String>,
}

async fn list(State(state): State<AppState>, account: SignedIn) -> PageResult<RulesPage> {
    let layout = Layout::new(&account, Section::Rules).await;
    let records = service::list(&state, account.acting(), None, MAX_RULES).await?;
    let backfills = service::latest_backfills(&state, account.acting()).await?;
    Ok(RulesPage {
        can_add: layout.is_admin && (records.len() as i64) < MAX_RULES,
        layout,
        rules: records
            .iter()
            .map(|record| {
                let backfill = backfills
                    .iter()
                    .find(|backfill| backfill.rule_id == record.id);
                RuleRow::new(record, backfill)
            })
            .collect(),
    })
}

async fn form_page(
    state: &AppState,
    account: &SignedIn,
    editing: Option<String>,
    form: RuleForm,
    error: Option<String>,
    preview: Option<PreviewShown>,
) -> PageResult<RuleFormPage> {
    let layout = Layout::new(account, Section::Rules).await;
    let flows = flow_app::flows::list(state, account.acting(), None, FLOW_CHOICES)
        .await?
        .into_iter()
        .map(|flow| FlowChoice {
            selected: flow.id.to_string() == form.flow_id,
            id: flow.id.to_string(),
            name: format!("{} ({})", flow.name, plural(flow.module_count, "module")),
        })
        .collect();
    let priorities = ["low", "medium", "high"]
        .into_iter()
        .map(|value| PriorityChoice {
            value,
            selected: form.priority == value,
        })
        .collect();
    let values = flow_app::users::team_choices(state, account.acting())
        .await?
        .into_iter()
        .map(|team| team.label)
        .collect();
    let terms: Vec<(String, String)> = form
        .term_kind
        .iter()
        .zip(
            form.term_value
                .iter()
                .chain(std::iter::repeat(&String::new())),
        )
        .filter(|(kind, value)| !kind.is_empty() || !value.trim().is_empty())
        .map(|(kind, value)| (kind.clone(), value.clone()))
        .collect();
    Ok(RuleFormPage {
        layout,
        editing,
        from_start_date: form.due_from == "start_date",
        pickers: form.mode == "pickers",
        combine_any: form.combine == "any",
        term_rows: rule_terms::rows(&terms),
        values,
        form,
        flows,
        priorities,
        error,
        preview,
    })
}

async fn new(State(state): State<AppState>, account: SignedIn) -> PageResult<RuleFormPage> {
    account.require_admin()?;
    let form = RuleForm {
        condition: "{\"departmentEquals\": \"Sales\"}".to_owned(),
        mode: "pickers".to_owned(),
        combine: "all".to_owned(),
        term_kind: vec!["department_is".to_owned()],
        priority: "medium".to_owned(),
        due_from: "matched".to_owned(),
        ..RuleForm::default()
    };
    form_page(&state, &account, None, form, None, None).await
}

async fn edit(
    State(state): State<AppState>,
    account: SignedIn,
    Path(id): Path<String>,
) -> PageResult<RuleFormPage> {
    let id = EnrollmentRuleId::parse(&id).ok_or_else(PageError::not_found)?;
    let record = service::get(&state, account.acting(), id).await?;
    // The pickers show the condition when they can; a deeper one stays JSON.
    let (mode, combine, terms) = match rule_terms::read(&record.condition) {
        Some((combine, terms)) => ("pickers", combine, terms),
        None => ("json", "all".to_owned(), Vec::new()),
    };
    let (term_kind, term_value) = terms.into_iter().unzip();
    let form = RuleForm {
        name: record.name.clone(),
        condition: serde_json::to_string_pretty(&record.condition).unwrap_or_default(),
        mode: mode.to_owned(),
        combine,
        term_kind,
        term_value,
        flow_id: record.flow_id.to_string(),
        due_days: record
            .due_days
            .map(|days| days.to_string())
            .unwrap_or_default(),
        due_from: record.due_from.clone(),
        priority: record.priority.clone(),
        notes: record.notes.clone().unwrap_or_default(),
        reassign: record.reassign.then(|| "on".to_owned()),
        cancel_on_unmatch: record.cancel_on_unmatch.then(|| "on".to_owned()),
        intent: None,
    };
    form_page(&state, &account, Some(id.to_string()), form, None, None).await
}

/// The form as the service takes it: the condition from the pickers' rows, or from the JSON (a
/// condition that is not JSON is refused here, by name).
fn input(form: &RuleForm) -> Result<RuleInput, String> {
    let condition = if form.mode == "pickers" {
        rule_terms::build(&form.combine, &form.term_kind, &form.term_value)?
    } else {
        serde_json::from_str(&form.condition)
            .map_err(|error| format!("condition is not valid JSON: {error}"))?
    };
    let due_days = match form.due_days.trim() {
        "" => None,
        text => Some(
            text.parse::<i32>()
                .map_err(|_| "due.days must be a whole number of days".to_owned())?,
        ),
    };
    let optional = |text: &str| (!text.trim().is_empty()).then(|| text.to_owned());
    Ok(RuleInput {
        name: Some(form.name.clone()),
        condition: Some(condition),
        flow_id: Some(form.flow_id.clone()),
        due_from: due_days.and(optional(&form.due_from)),
        due_days,
        priority: optional(&form.priority),
        notes: optional(&form.notes),
        reassign: Some(form.reassign.is_some()),
        cancel_on_unmatch: Some(form.cancel_on_unmatch.is_some()),
    })
}

/// Creates, updates or previews, as the form asks; a refusal shows the form again with it.
async fn submit(
    state: &AppState,
    account: &SignedIn,
    editing: Option<EnrollmentRuleId>,
    form: RuleForm,
) -> PageResult<Response> {
    let shown = editing.map(|id| id.to_string());
    let refuse = |message: String| (StatusCode::BAD_REQUEST, message);
    let outcome: Result<Option<PreviewShown>, (StatusCode, String)> = match input(&form) {
        Err(message) => Err(refuse(message)),
        Ok(input) => {
            let result = if form.intent.as_deref() == Some("preview") {
                service::preview(state, account.acting(), input)
                    .await
                    .map(|preview| {
                        Some(PreviewShown {
                            matching: preview.matching,
                            users: preview
                                .users
                                .into_iter()
                                .map(|user| PreviewRow {
                                    email: user.email,
                                    name: user.name.unwrap_or_default(),
                                })
                                .collect(),
                        })
                    })
            } else {
                match editing {
                    Some(id) => service::update(state, account.acting(), id, input)
                        .await
                        .map(|_| None),
                    None => service::create(state, account.acting(), input)
                        .await
                        .map(|_| None),
                }
            };
            match result {
                Ok(done) => Ok(done),
                Err(error @ (ServiceError::Invalid(_) | ServiceError::Fields(_))) => {
                    Err(refuse(error.to_string()))
                }
                Err(ServiceError::NotFound("flow")) => {
                    Err(refuse("Choose one of the organization's flows.".to_owned()))
                }
                Err(ServiceError::Conflict(message)) => Err((StatusCode::CONFLICT, message)),
                Err(error @ ServiceError::RateLimited(_)) => {
                    Err((StatusCode::TOO_MANY_REQUESTS, error.to_string()))
                }
                Err(other) => return Err(other.into()),
            }
        }
    };
    match outcome {
        Ok(None) => {
            flash(&account.session, "success", "The rule is saved. It applies to users as they are created or changed; run a backfill to assign those who match already.").await;
            Ok(Redirect::to("/dashboard/rules").into_response())
        }
        Ok(Some(preview)) => Ok(form_page(state, account, shown, form, None, Some(preview))
            .await?
            .into_response()),
        Err((status, message)) => Ok((
            status,
            form_page(state, account, shown, form, Some(message), None).await?,
        )
            .into_response()),
    }
}

async fn create(
    State(state): State<AppState>,
    account: SignedIn,
    HtmlForm(form): HtmlForm<RuleForm>,
) -> PageResult {
    // A preview walks every user of the organization and spends its read limit: admins only,
    // like the rest of the form (viewers cannot save a rule either).
    account.require_admin()?;
    submit(&state, &account, None, form).await
}

async fn update(
    State(state): State<AppState>,
    account: SignedIn,
    Path(id): Path<String>,
    HtmlForm(form): HtmlForm<RuleForm>,
) -> PageResult {
    account.require_admin()?;
    let id = EnrollmentRuleId::parse(&id).ok_or_else(PageError::not_found)?;
    submit(&state, &account, Some(id), form).await
}

async fn delete(
    State(state): State<AppState>,
    account: SignedIn,
    Path(id): Path<String>,
) -> PageResult {
    account.require_admin()?;
    let id = EnrollmentRuleId::parse(&id).ok_or_else(PageError::not_found)?;
    // A rule that flows are required of is kept: the list says which flows to change first.
    match service::delete(&state, account.acting(), id).await {
        Ok(()) => {}
        Err(ServiceError::Conflict(message)) => {
            flash(
                &account.session,
                "error",
                format!("The rule is not deleted: {message}."),
            )
            .await;
            return Ok(Redirect::to("/dashboard/rules").into_response());
        }
        Err(other) => return Err(other.into()),
    }
    flash(
        &account.session,
        "success",
        "The rule is deleted; assignments it made stay.",
    )
    .await;
    Ok(Redirect::to("/dashboard/rules").into_response())
}

async fn backfill(
    State(state): State<AppState>,
    account: SignedIn,
    Path(id): Path<String>,
) -> PageResult {
    account.require_admin()?;
    let id = EnrollmentRuleId::parse(&id).ok_or_else(PageError::not_found)?;
    let created = match service::backfill(&state, account.acting(), id).await {
        Ok((_, created)) => created,
        Err(ServiceError::Conflict(message)) => {
            flash(
                &account.session,
                "error",
                format!("No backfill started: {message}."),
            )
            .await;
            return Ok(Redirect::to("/dashboard/rules").into_response());
        }
        Err(other) => return Err(other.into()),
    };
    let message = if created {
        "The backfill has started: it runs in the background, and its progress shows in the list (reload to follow it)."
    } else {
        "A backfill of this rule is already queued or running; its progress shows in the list."
    };
    flash(&account.session, "success", message).await;
    Ok(Redirect::to("/dashboard/rules").into_response())
}
