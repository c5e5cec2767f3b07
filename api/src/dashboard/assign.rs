//! Assign: a form (flow, user, due date, priority, notes), several people picked with a type-ahead
//! or pasted, a department or group, and a CSV upload for bulk, all through
//! the API's own path — [`AssignInput::parse`], [`assign_one`] and [`assign_many`], the assign rate limit, the
//! queue and its guarantees — with a result per row for uploads. The form carries a request id
//! drawn when it is shown, so submitting it twice assigns once.

use std::collections::HashMap;

use askama::Template;
use askama_web::WebTemplate;
use axum::Router;
use axum::extract::{Multipart, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect};
use axum::routing::{get, post};
use chrono::Utc;
use flow_app::ServiceError;
use flow_app::assign::{AssignFields, AssignInput, MAX_BULK_ITEMS, assign_many, assign_one};
use flow_app::csv_lines::record_line;
use flow_app::ratelimit::Operation;
use flow_app::users::Team;
use flow_common::amqp::Lane;
use flow_common::db::flows::FlowSummary;
use flow_domain::Invalid;
use flow_domain::ids::FlowId;
use serde::Deserialize;

use super::auth::SignedIn;
use super::csv_upload::{Upload, parse_off_runtime, read_upload};
use super::session::flash;
use super::view::{Layout, Section, count, plural};
use super::{HtmlForm, PageError, PageResult};
use crate::error::ApiError;
use crate::state::AppState;

/// Routes of this module.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/assign", get(form_page).post(assign))
        .route("/assign/upload", post(upload))
        .route("/assign/team", post(assign_team))
        .route("/assign/people", get(people_matches).post(assign_people))
}

/// A flow to choose.
pub struct FlowChoice {
    pub id: String,
    /// Its name and module count: `Security Basics (3 modules)`.
    pub name: String,
    /// Whether it is selected.
    pub selected: bool,
}

/// Errors of the form, by field.
#[derive(Debug, Default)]
pub struct AssignErrors {
    /// Of the flow.
    pub flow: Option<String>,
    /// Of the e-mail.
    pub email: Option<String>,
    /// Of the due date.
    pub due_date: Option<String>,
    /// Of the priority.
    pub priority: Option<String>,
    /// Of the notes.
    pub notes: Option<String>,
    /// Not about one field (rate limit, broker down).
    pub general: Option<String>,
}

/// The form as typed.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct AssignForm {
    /// Flow id.
    #[serde(default)]
    pub flow: String,
    /// Assignee e-mail.
    #[serde(default)]
    pub email: String,
    /// `YYYY-MM-DD`, optional.
    #[serde(default)]
    pub due_date: String,
    /// low, medium or high.
    #[serde(default)]
    pub priority: String,
    /// Notes.
    #[serde(default)]
    pub notes: String,
    /// Drawn when the form was shown; makes resubmission idempotent.
    #[serde(default)]
    pub request_id: String,
}

/// A department or group to choose, with its active members.
pub struct TeamOption {
    /// `department:<name>` or `group:<id>`.
    pub value: String,
    /// `Sales (department, 12 people)`.
    pub label: String,
}

/// The team form as sent.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct TeamForm {
    /// Flow id.
    #[serde(default)]
    pub flow: String,
    /// `department:<name>` or `group:<id>`.
    #[serde(default)]
    pub team: String,
    /// `YYYY-MM-DD`, optional.
    #[serde(default)]
    pub due_date: String,
    /// low, medium or high.
    #[serde(default)]
    pub priority: String,
    /// Notes.
    #[serde(default)]
    pub notes: String,
}

#[derive(Template, WebTemplate)]
#[template(path = "dashboard/assign.html")]
struct AssignPage {
    layout: Layout,
    flows: Vec<FlowChoice>,
    teams: Vec<TeamOption>,
    form: AssignForm,
    errors: AssignErrors,
    priorities: Vec<(&'static str, &'static str)>,
}

const PRIORITIES: [(&str, &str); 3] = [("low", "Low"), ("medium", "Medium"), ("high", "High")];

async fn org_flows(state: &AppState, account: &SignedIn) -> Result<Vec<FlowSummary>, PageError> {
    let mut flows = flow_app::flows::list(state, account.acting(), None, 1_000).await?;
    flows.sort_by_key(|flow| flow.name.to_lowercase());
    Ok(flows)
}

async fn render(
    state: &AppState,
    account: &SignedIn,
    mut form: AssignForm,
    errors: AssignErrors,
) -> Result<AssignPage, PageError> {
    let flows = org_flows(state, account).await?;
    if form.request_id.is_empty() {
        form.request_id = format!("dashboard-{}", uuid::Uuid::new_v4().simple());
    }
    if form.priority.is_empty() {
        form.priority = "medium".to_owned();
    }
    let teams = flow_app::users::team_choices(state, account.acting())
        .await?
        .into_iter()
        .map(|team| TeamOption {
            value: format!("{}:{}", team.kind, team.key),
            label: format!("{} ({}, {})", team.label, team.kind, people(team.members)),
        })
        .collect();
    Ok(AssignPage {
        layout: Layout::new(account, Section::Assign).await,
        teams,
        flows: flows
            .iter()
            .map(|flow| FlowChoice {
                id: flow.id.to_string(),
                name: format!("{} ({})", flow.name, plural(flow.module_count, "module")),
                selected: flow.id.to_string() == form.flow,
            })
            .collect(),
        form,
        errors,
        priorities: PRIORITIES.to_vec(),
    })
}

async fn form_page(State(state): State<AppState>, account: SignedIn) -> PageResult<AssignPage> {
    render(
        &state,
        &account,
        AssignForm::default(),
        AssignErrors::default(),
    )
    .await
}

/// The API's field names as the form calls them.
fn reword(message: &str) -> String {
    message
        .replace("userEmail", "E-mail")
        .replace("dueDate", "Due date")
        .replace("flowId", "Flow")
        .replace("priority must", "Priority must")
        .replace("notes must", "Notes must")
}

/// Puts an error of the assign path next to the field it is about, by the field the service
/// names (or the kind of thing not found), worded as the API words it; answers its status.
fn place(error: ServiceError, errors: &mut AssignErrors) -> StatusCode {
    let field = error.field_problems().first().map(|problem| problem.field);
    let slot = match (&error, field) {
        (_, Some("flowId")) | (ServiceError::NotFound("flow"), _) => &mut errors.flow,
        (_, Some("userEmail"))
        | (ServiceError::NotFound(_) | ServiceError::NotFoundSaying(_), _) => &mut errors.email,
        (_, Some("dueDate")) => &mut errors.due_date,
        (_, Some("priority")) => &mut errors.priority,
        (_, Some("notes")) => &mut errors.notes,
        _ => &mut errors.general,
    };
    let error = ApiError::from(error);
    if let ApiError::Internal(cause) = &error {
        tracing::error!(error = format!("{cause:#}"), "dashboard assign failed");
    }
    *slot = Some(reword(&error.body().message));
    error.status()
}

fn request(form: &AssignForm) -> AssignFields {
    let optional = |text: &str| Some(text.trim().to_owned()).filter(|text| !text.is_empty());
    AssignFields {
        flow_id: Some(form.flow.clone()),
        user_email: Some(form.email.trim().to_owned()),
        due_date: optional(&form.due_date),
        priority: optional(&form.priority),
        notes: Some(form.notes.clone()).filter(|notes| !notes.is_empty()),
    }
}

async fn assign(
    State(state): State<AppState>,
    account: SignedIn,
    HtmlForm(form): HtmlForm<AssignForm>,
) -> PageResult {
    account.require_admin()?;
    let now = Utc::now();
    let result: Result<_, ServiceError> = async {
        state
            .limiter
            .check(&account.caller, Operation::Assign, 1)
            .await?;
        let input = AssignInput::parse(request(&form), account.zone(), now)?;
        let request_id = Some(form.request_id.as_str()).filter(|id| {
            !id.is_empty() && id.len() <= 200 && id.bytes().all(|byte| (0x20..0x7f).contains(&byte))
        });
        assign_one(&state, &account.caller, input, request_id, now).await
    }
    .await;
    match result {
        Ok(assigned) => {
            flash(
                &account.session,
                "success",
                format!("{} ({}).", assigned.message(), assigned.assignment_id),
            )
            .await;
            Ok(Redirect::to("/dashboard/assign").into_response())
        }
        Err(error) => {
            // Worded as the API words it, placed beside its field.
            let mut errors = AssignErrors::default();
            let status = place(error, &mut errors);
            let page = render(&state, &account, form, errors).await?;
            Ok((status, page).into_response())
        }
    }
}

/// The outcome of one uploaded row.
pub struct RowResult {
    /// Line in the file (the header is line 1).
    pub line: usize,
    /// Assignee.
    pub email: String,
    /// Flow, as named in the row or chosen in the form.
    pub flow: String,
    /// Whether it was assigned (or already was).
    pub ok: bool,
    /// What happened.
    pub message: String,
    /// The assignment, on success.
    pub assignment_id: String,
}

#[derive(Template, WebTemplate)]
#[template(path = "dashboard/assign_results.html")]
struct ResultsPage {
    layout: Layout,
    file_name: String,
    rows: Vec<RowResult>,
    succeeded: usize,
    failed: usize,
}

/// One parsed row of an upload.
#[derive(Debug)]
struct UploadRow {
    line: usize,
    email: String,
    flow: String,
    due_date: String,
    priority: String,
    notes: String,
}

/// Reads the upload's CSV: a header row with `email` (or `userEmail`) and optionally `flow` (an id
/// or a name; `flowId` too), `dueDate`, `priority`, `notes`. Records with every cell empty are
/// skipped but count toward the row limit, so the file is read no further than that.
fn parse_rows(bytes: &[u8]) -> Result<Vec<UploadRow>, String> {
    let (mut reader, headers) = flow_app::csv_lines::open(bytes)?;
    let column = |names: &[&str]| {
        headers.iter().position(|header| {
            let key: String = header
                .chars()
                .filter(char::is_ascii_alphanumeric)
                .collect::<String>()
                .to_ascii_lowercase();
            names.contains(&key.as_str())
        })
    };
    let email = column(&["email", "useremail"]).ok_or(
        "The file needs an `email` column (and optionally flow, dueDate, priority, notes).",
    )?;
    let flow = column(&["flow", "flowid", "flowname"]);
    let due = column(&["duedate", "due"]);
    let priority = column(&["priority"]);
    let notes = column(&["notes", "note"]);
    let mut rows = Vec::new();
    for (index, record) in reader.records().enumerate() {
        if index >= MAX_BULK_ITEMS {
            return Err(format!(
                "The file has more than {MAX_BULK_ITEMS} rows; split it into several uploads."
            ));
        }
        let record = record.map_err(|error| format!("The file is not valid CSV: {error}"))?;
        if record.iter().all(str::is_empty) {
            continue;
        }
        let line = record_line(bytes, record.position());
        let cell = |position: Option<usize>| {
            position
                .and_then(|position| record.get(position))
                .unwrap_or("")
                .to_owned()
        };
        rows.push(UploadRow {
            line,
            email: cell(Some(email)),
            flow: cell(flow),
            due_date: cell(due),
            priority: cell(priority),
            notes: cell(notes),
        });
    }
    if rows.is_empty() {
        return Err("The file has no rows under its header.".to_owned());
    }
    Ok(rows)
}

async fn upload(
    State(state): State<AppState>,
    account: SignedIn,
    multipart: Multipart,
) -> PageResult {
    account.require_admin()?;
    let Upload { file, mut fields } = read_upload(multipart, "upload.csv").await?;
    let default_flow = fields.remove("flow").unwrap_or_default();
    let refuse = |message: String| async {
        let errors = AssignErrors {
            general: Some(message),
            ..AssignErrors::default()
        };
        render(&state, &account, AssignForm::default(), errors)
            .await
            .map(|page| (StatusCode::BAD_REQUEST, page).into_response())
    };
    let Some((file_name, file)) = file else {
        return refuse("Choose a CSV file to upload.".to_owned()).await;
    };
    let rows = match parse_off_runtime(file, parse_rows).await? {
        Ok(rows) => rows,
        Err(message) => return refuse(message).await,
    };
    let results = assign_rows(&state, &account, &rows, &default_flow).await?;
    let succeeded = results.iter().filter(|row| row.ok).count();
    Ok(ResultsPage {
        layout: Layout::new(&account, Section::Assign).await,
        file_name,
        failed: results.len() - succeeded,
        succeeded,
        rows: results,
    }
    .into_response())
}

/// Assigns the chosen flow to every active member of a department or group (at most
/// [`MAX_BULK_ITEMS`]; a bigger team is refused, pointing at enrollment rules) through the bulk
/// lane, and shows each person's outcome as an upload's are shown.
async fn assign_team(
    State(state): State<AppState>,
    account: SignedIn,
    HtmlForm(form): HtmlForm<TeamForm>,
) -> PageResult {
    account.require_admin()?;
    let refuse = |message: String| async {
        let errors = AssignErrors {
            general: Some(message),
            ..AssignErrors::default()
        };
        render(&state, &account, AssignForm::default(), errors)
            .await
            .map(|page| (StatusCode::BAD_REQUEST, page).into_response())
    };
    if form.flow.trim().is_empty() {
        return refuse("Choose the flow to assign to the team.".to_owned()).await;
    }
    let Some(team) = Team::parse(&form.team) else {
        return refuse("Choose a department or group.".to_owned()).await;
    };
    let limit = i64::try_from(MAX_BULK_ITEMS).unwrap_or(i64::MAX);
    let emails = flow_app::users::team_emails(&state, account.acting(), &team, limit + 1).await?;
    if emails.is_empty() {
        return refuse("That department or group has no active people.".to_owned()).await;
    }
    if emails.len() > MAX_BULK_ITEMS {
        return refuse(format!(
            "That department or group has more than {} active people: an enrollment rule (Rules) \
             assigns a team of any size, and everyone who joins it later.",
            count(limit)
        ))
        .await;
    }
    let rows = rows_for(
        emails,
        &form.flow,
        &form.due_date,
        &form.priority,
        &form.notes,
    );
    let results = assign_rows(&state, &account, &rows, &form.flow).await?;
    let succeeded = results.iter().filter(|row| row.ok).count();
    let value = team.value();
    let team_name = flow_app::users::team_choices(&state, account.acting())
        .await?
        .into_iter()
        .find(|choice| format!("{}:{}", choice.kind, choice.key) == value)
        .map_or_else(
            || "the team".to_owned(),
            |choice| format!("{} ({})", choice.label, choice.kind),
        );
    Ok(ResultsPage {
        layout: Layout::new(&account, Section::Assign).await,
        file_name: team_name,
        failed: results.len() - succeeded,
        succeeded,
        rows: results,
    }
    .into_response())
}

/// One row per person, each with the same flow, due date, priority and notes.
fn rows_for(
    emails: Vec<String>,
    flow: &str,
    due_date: &str,
    priority: &str,
    notes: &str,
) -> Vec<UploadRow> {
    emails
        .into_iter()
        .enumerate()
        .map(|(index, email)| UploadRow {
            line: index + 1,
            email,
            flow: flow.to_owned(),
            due_date: due_date.to_owned(),
            priority: priority.to_owned(),
            notes: notes.to_owned(),
        })
        .collect()
}

/// `1 person`, `12 people`.
fn people(n: i64) -> String {
    if n == 1 {
        "1 person".to_owned()
    } else {
        format!("{} people", count(n))
    }
}

/// People the type-ahead offers at most.
const MAX_MATCHES: i64 = 10;

/// What the type-ahead is asked: part of an e-mail or name.
#[derive(Debug, Default, Deserialize)]
struct PeopleQuery {
    #[serde(default)]
    q: String,
}

/// A person the type-ahead offers.
struct PersonMatch {
    email: String,
    name: String,
    active: bool,
}

#[derive(Template, WebTemplate)]
#[template(path = "dashboard/assign_people.html")]
struct PeopleMatches {
    query: String,
    people: Vec<PersonMatch>,
}

/// The type-ahead of "Several people": up to [`MAX_MATCHES`] of the organization's people whose
/// e-mail or name contains the text (2 to 320 characters; less matches nobody), as buttons that
/// add the e-mail to the list (app.js), an HTML fragment for htmx.
async fn people_matches(
    State(state): State<AppState>,
    account: SignedIn,
    axum::extract::Query(query): axum::extract::Query<PeopleQuery>,
) -> PageResult<PeopleMatches> {
    account.require_admin()?;
    let text = query.q.trim();
    let people = if (2..=320).contains(&text.chars().count()) {
        flow_app::users::list_matching(&state, account.acting(), Some(text), None, MAX_MATCHES)
            .await?
            .into_iter()
            .map(|user| PersonMatch {
                name: user.name.unwrap_or_default(),
                email: user.email,
                active: user.active,
            })
            .collect()
    } else {
        Vec::new()
    };
    Ok(PeopleMatches {
        query: text.to_owned(),
        people,
    })
}

/// The "Several people" form as sent.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct PeopleForm {
    /// Flow id.
    #[serde(default)]
    pub flow: String,
    /// E-mails, separated by commas, semicolons, spaces or lines.
    #[serde(default)]
    pub people: String,
    /// `YYYY-MM-DD`, optional.
    #[serde(default)]
    pub due_date: String,
    /// low, medium or high.
    #[serde(default)]
    pub priority: String,
    /// Notes.
    #[serde(default)]
    pub notes: String,
}

/// The e-mails of a list as typed or picked, each once (the first spelling kept, compared
/// without regard to case), in order; an error when there is none or more than
/// [`MAX_BULK_ITEMS`].
fn people_list(text: &str) -> Result<Vec<String>, String> {
    let mut seen = std::collections::HashSet::new();
    let emails: Vec<String> = text
        .split(|c: char| c == ',' || c == ';' || c.is_whitespace())
        .filter(|email| !email.is_empty())
        .filter(|email| seen.insert(email.to_lowercase()))
        .map(str::to_owned)
        .collect();
    match emails.len() {
        0 => Err(
            "Add at least one person: type part of a name or e-mail and pick them, or \
                  paste e-mails."
                .to_owned(),
        ),
        n if n > MAX_BULK_ITEMS => Err(format!(
            "The list has {} different e-mails; at most {} at once (a CSV upload takes as \
             many, an enrollment rule any number).",
            count(i64::try_from(n).unwrap_or(i64::MAX)),
            count(i64::try_from(MAX_BULK_ITEMS).unwrap_or(i64::MAX))
        )),
        _ => Ok(emails),
    }
}

/// Assigns the chosen flow to each person of the list (picked with the type-ahead or pasted)
/// through the bulk lane, and shows each person's outcome as an upload's are shown; a person
/// listed twice is assigned once.
async fn assign_people(
    State(state): State<AppState>,
    account: SignedIn,
    HtmlForm(form): HtmlForm<PeopleForm>,
) -> PageResult {
    account.require_admin()?;
    let refuse = |message: String| async {
        let errors = AssignErrors {
            general: Some(message),
            ..AssignErrors::default()
        };
        render(&state, &account, AssignForm::default(), errors)
            .await
            .map(|page| (StatusCode::BAD_REQUEST, page).into_response())
    };
    if form.flow.trim().is_empty() {
        return refuse("Choose the flow to assign to these people.".to_owned()).await;
    }
    let emails = match people_list(&form.people) {
        Ok(emails) => emails,
        Err(message) => return refuse(message).await,
    };
    let listed = people(i64::try_from(emails.len()).unwrap_or(i64::MAX));
    let rows = rows_for(
        emails,
        &form.flow,
        &form.due_date,
        &form.priority,
        &form.notes,
    );
    let results = assign_rows(&state, &account, &rows, &form.flow).await?;
    let succeeded = results.iter().filter(|row| row.ok).count();
    Ok(ResultsPage {
        layout: Layout::new(&account, Section::Assign).await,
        file_name: listed,
        failed: results.len() - succeeded,
        succeeded,
        rows: results,
    }
    .into_response())
}

/// Assigns each row (its flow by id or name, else `default_flow`) through the bulk lane, as far
/// as the organization's assign limit allows, and answers each row's outcome in order.
async fn assign_rows(
    state: &AppState,
    account: &SignedIn,
    rows: &[UploadRow],
    default_flow: &str,
) -> Result<Vec<RowResult>, PageError> {
    let flows = org_flows(state, account).await?;
    // Names are not unique: a name that several flows have names none of them.
    let mut by_name: HashMap<String, Vec<&FlowSummary>> = HashMap::new();
    for flow in &flows {
        by_name
            .entry(flow.name.to_lowercase())
            .or_default()
            .push(flow);
    }
    let by_id: HashMap<FlowId, &FlowSummary> = flows.iter().map(|flow| (flow.id, flow)).collect();
    let resolve = |text: &str| -> (String, String, Option<String>) {
        let text = if text.trim().is_empty() {
            default_flow.trim()
        } else {
            text.trim()
        };
        if let Some(flow) = FlowId::parse(text).and_then(|id| by_id.get(&id)) {
            return (flow.id.to_string(), flow.name.clone(), None);
        }
        match by_name.get(&text.to_lowercase()).map(Vec::as_slice) {
            Some([flow]) => (flow.id.to_string(), flow.name.clone(), None),
            Some(named) => (
                text.to_owned(),
                text.to_owned(),
                Some(format!(
                    "Not assigned: {} flows are named \"{text}\"; name the flow by its id (flow_…) \
                     in this column.",
                    named.len()
                )),
            ),
            // Not an id or name of this organization: the assign path answers 404 for it.
            None => (text.to_owned(), text.to_owned(), None),
        }
    };
    let (granted, _, _) = state
        .limiter
        .check_up_to(
            &account.caller,
            Operation::Assign,
            u32::try_from(rows.len()).unwrap_or(u32::MAX),
        )
        .await
        .map_err(ApiError::from)?;
    let granted = usize::try_from(granted).unwrap_or(0);
    let now = Utc::now();
    let caller = &account.caller;
    let mut flow_names = Vec::with_capacity(rows.len());
    let items = rows
        .iter()
        .enumerate()
        .map(|(index, row)| {
            let (flow_id, flow_name, ambiguous) = resolve(&row.flow);
            flow_names.push(flow_name);
            let form = AssignForm {
                flow: flow_id,
                email: row.email.clone(),
                due_date: row.due_date.clone(),
                priority: row.priority.clone(),
                notes: row.notes.clone(),
                request_id: String::new(),
            };
            let input = if let Some(message) = ambiguous {
                Err(ServiceError::Invalid(Invalid(message)))
            } else if index >= granted {
                Err(ServiceError::Invalid(Invalid(
                    "Not assigned: the organization's assign limit per minute is used up; upload this row again in a minute.".to_owned(),
                )))
            } else {
                AssignInput::parse(request(&form), caller.zone, now)
            };
            (input, None)
        })
        .collect();
    // An upload is bulk work: it goes to the organization's bulk queue.
    let outcomes = assign_many(state, caller, Lane::Bulk, items, now).await;
    let results: Vec<RowResult> = rows
        .iter()
        .zip(flow_names)
        .zip(outcomes)
        .map(|((row, flow_name), outcome)| match outcome {
            Ok(assigned) => RowResult {
                line: row.line,
                email: row.email.clone(),
                flow: flow_name,
                ok: true,
                message: assigned.message(),
                assignment_id: assigned.assignment_id.to_string(),
            },
            Err(error) => {
                let error = ApiError::from(error);
                if let ApiError::Internal(cause) = &error {
                    tracing::error!(error = format!("{cause:#}"), "dashboard upload row failed");
                }
                RowResult {
                    line: row.line,
                    email: row.email.clone(),
                    flow: flow_name,
                    ok: false,
                    message: reword(&error.body().message),
                    assignment_id: String::new(),
                }
            }
        })
        .collect();
    Ok(results)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Where the form shows the refusal of `form`, in its words.
    fn placed(form: AssignForm) -> (StatusCode, AssignErrors) {
        let error = AssignInput::parse(request(&form), chrono_tz::Tz::UTC, Utc::now())
            .expect_err("refused");
        let mut errors = AssignErrors::default();
        let status = place(error, &mut errors);
        (status, errors)
    }

    #[test]
    fn form_errors_are_placed_by_the_field_the_service_names() {
        let valid = AssignForm {
            flow: "flow_x".into(),
            email: "alice@example.com".into(),
            ..AssignForm::default()
        };
        let (status, errors) = placed(AssignForm {
            flow: String::new(),
            ..valid.clone()
        });
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert_eq!(errors.flow.as_deref(), Some("Flow is required"));
        let (_, errors) = placed(AssignForm {
            email: "alice".into(),
            ..valid.clone()
        });
        assert_eq!(
            errors.email.as_deref(),
            Some("E-mail must be a valid e-mail address")
        );
        let (_, errors) = placed(AssignForm {
            due_date: "2000-01-01".into(),
            ..valid.clone()
        });
        assert_eq!(
            errors.due_date.as_deref(),
            Some("Due date must be in the future")
        );
        let (_, errors) = placed(AssignForm {
            priority: "urgent".into(),
            ..valid.clone()
        });
        assert_eq!(
            errors.priority.as_deref(),
            Some("Priority must be one of: low, medium, high")
        );
        let (_, errors) = placed(AssignForm {
            notes: "x".repeat(2_001),
            ..valid
        });
        assert_eq!(
            errors.notes.as_deref(),
            Some("Notes must be at most 2000 characters")
        );
        assert!(errors.general.is_none() && errors.flow.is_none() && errors.email.is_none());
    }

    #[test]
    fn what_was_not_found_is_placed_beside_its_field() {
        let mut errors = AssignErrors::default();
        let status = place(ServiceError::NotFound("flow"), &mut errors);
        assert_eq!(status, StatusCode::NOT_FOUND);
        assert_eq!(errors.flow.as_deref(), Some("flow not found"));
        let mut errors = AssignErrors::default();
        place(
            ServiceError::NotFoundSaying(
                "user bob@example.com not found in this organization".into(),
            ),
            &mut errors,
        );
        assert!(errors.flow.is_none());
        assert!(errors.email.is_some());
        let mut errors = AssignErrors::default();
        place(
            ServiceError::Conflict("user is deactivated".into()),
            &mut errors,
        );
        assert_eq!(errors.general.as_deref(), Some("user is deactivated"));
    }

    #[test]
    fn upload_columns_are_found_by_name_whatever_their_spelling() {
        let rows = parse_rows(
            b"User Email,Flow,Due date,Priority,Notes\nalice@example.com,Security Basics,2030-01-31,high,Hi\n\nbob@example.com,,,,\n",
        )
        .unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].email, "alice@example.com");
        assert_eq!(rows[0].flow, "Security Basics");
        assert_eq!(rows[0].due_date, "2030-01-31");
        assert_eq!(rows[0].priority, "high");
        assert_eq!(rows[1].line, 4);
        assert!(parse_rows(b"name\nAlice\n").unwrap_err().contains("email"));
        assert!(parse_rows(b"email\n").unwrap_err().contains("no rows"));
    }
}
