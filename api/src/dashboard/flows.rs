//! Flows: each flow with its assignments, completion rate and overdue count; a flow's page with
//! whom it is required of (nobody, everyone, or an enrollment rule's audience; admins change it
//! there), the report's metrics, a completion-by-week chart, where people stall (the module funnel and
//! the time per module of `flow_app::analysis`, charted and tabled, loaded after the page), the assignments table
//! (status tabs, search by e-mail, pages) and exports (CSV, Excel, PDF) that show their
//! progress, then the download.
//!
//! Metrics, the weekly figures and exports come from the report service the API's report
//! operation uses ([`flow_app::reports`]) and downloads from the export service, so the
//! dashboard shows exactly what the API answers, and counts against the same report limit.

use std::collections::HashMap;

use askama::Template;
use askama_web::WebTemplate;
use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use chrono::Utc;
use flow_app::ServiceError;
use flow_app::analysis::{self, AnalysisRequest, FlowAnalysis};
use flow_app::exports::{self, Opened};
use flow_app::flows::{AssignmentFilter, FlowEditFields};
use flow_app::reports::{self, ReportAnswer, ReportQuery};
use flow_common::db::dashboard::FlowCounts;
use flow_domain::AssignmentStatus;
use flow_domain::duration::humanize_seconds;
use flow_domain::ids::{ExportId, FlowId};
use flow_domain::report::{ExportFormat, ExportStatus, PageCursor, completion_rate, whole_seconds};
use serde::{Deserialize, Serialize};

use super::auth::SignedIn;
use super::chart::{self, Chart, Row, RowValue, RowsChart, Week};
use super::session::flash;
use super::view::{Layout, Section, count, label, percent, plural};
use super::{HtmlForm, HtmlQuery, PageError, PageResult};
use crate::state::AppState;

/// Flows per page of the list.
const FLOWS_PER_PAGE: i64 = 50;
/// Assignments per page of a flow's table.
const ASSIGNMENTS_PER_PAGE: i64 = 25;
/// Weeks the chart shows.
const CHART_WEEKS: usize = 12;

/// Routes of this module.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/flows", get(list))
        .route("/flows/{id}", get(show))
        .route("/flows/{id}/efficiency", get(efficiency))
        .route("/flows/{id}/required", post(set_required))
        .route("/flows/{id}/exports", post(request_export))
        .route("/exports/{id}", get(export_status))
        .route("/exports/{id}/download", get(download))
}

/// A flow as the list shows it.
pub struct FlowRow {
    pub id: String,
    pub name: String,
    pub modules: i64,
    pub assignments: String,
    /// Completion rate.
    pub completion: String,
    /// Completion rate as a number (for the bar).
    pub completion_value: f64,
    /// Overdue now.
    pub overdue: String,
    /// Whether any are overdue.
    pub has_overdue: bool,
}

#[derive(Template, WebTemplate)]
#[template(path = "dashboard/flows.html")]
struct ListPage {
    layout: Layout,
    flows: Vec<FlowRow>,
    next: Option<String>,
    paged: bool,
}

/// Query of the flow list.
#[derive(Debug, Default, Deserialize)]
pub struct ListQuery {
    /// Show flows after this one.
    pub after: Option<String>,
}

async fn list(
    State(state): State<AppState>,
    account: SignedIn,
    HtmlQuery(query): HtmlQuery<ListQuery>,
) -> PageResult<ListPage> {
    let layout = Layout::new(&account, Section::Flows).await;
    let after = query.after.as_deref().and_then(FlowId::parse);
    let mut rows =
        flow_app::flows::list(&state, account.acting(), after, FLOWS_PER_PAGE + 1).await?;
    let page_size = usize::try_from(FLOWS_PER_PAGE).unwrap_or(usize::MAX);
    let next = if rows.len() > page_size {
        rows.truncate(page_size);
        rows.last().map(|flow| flow.id.to_string())
    } else {
        None
    };
    let ids: Vec<FlowId> = rows.iter().map(|flow| flow.id).collect();
    let counts: HashMap<FlowId, FlowCounts> =
        flow_app::flows::counts(&state, account.acting(), &ids)
            .await?
            .into_iter()
            .map(|counts| (counts.flow_id, counts))
            .collect();
    Ok(ListPage {
        flows: rows
            .iter()
            .map(|flow| {
                let counts = counts.get(&flow.id);
                let total = counts.map_or(0, |counts| counts.total);
                let completed = counts.map_or(0, |counts| counts.completed);
                let overdue = counts.map_or(0, |counts| counts.overdue);
                let rate = completion_rate(completed, total);
                FlowRow {
                    id: flow.id.to_string(),
                    name: flow.name.clone(),
                    modules: flow.module_count,
                    assignments: count(total),
                    completion: percent(rate),
                    completion_value: rate,
                    overdue: count(overdue),
                    has_overdue: overdue > 0,
                }
            })
            .collect(),
        layout,
        next,
        paged: after.is_some(),
    })
}

/// Query of a flow's page.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct FlowQuery {
    /// Status tab.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// Part of an assignee's e-mail.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub email: Option<String>,
    /// Cursor of the page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
}

/// A status tab.
pub struct Tab {
    /// Its address.
    pub url: String,
    /// Its label.
    pub text: String,
    /// Whether it is the current one.
    pub current: bool,
}

/// An assignment in the table.
pub struct AssignmentRow {
    pub id: String,
    /// Assignee.
    pub email: String,
    /// The assignee's page.
    pub user_id: String,
    /// Whether it can be changed or cancelled (pending, in progress or overdue).
    pub open: bool,
    pub status: String,
    /// Status in words.
    pub status_text: String,
    /// Modules completed of all.
    pub progress: String,
    /// Modules completed, in percent.
    pub progress_value: i64,
    pub priority: String,
    /// Assignment time.
    pub assigned: String,
    /// Due date.
    pub due: String,
    /// Completion time.
    pub completed: String,
    /// Why it was cancelled, for a cancelled one.
    pub cancel_reason: String,
}

/// An export button.
pub struct FormatChoice {
    /// Wire name.
    pub value: &'static str,
    /// Its words.
    pub label: &'static str,
}

/// The report figures shown.
pub struct MetricsView {
    /// Assignments.
    pub total: String,
    pub completed: String,
    /// Completion rate.
    pub rate: String,
    /// In progress.
    pub in_progress: String,
    pub pending: String,
    pub overdue: String,
    /// Mean time to complete, or a dash.
    pub average: String,
}

/// One module's row of the efficiency table.
pub struct ModuleEfficiency {
    pub name: String,
    pub reached: String,
    pub completed: String,
    /// Stalled in it now.
    pub stalled: String,
    /// Median time spent in it, or a dash.
    pub median: String,
    /// 90th percentile, or a dash.
    pub p90: String,
}

/// The efficiency section of a flow's page (`flow_app::analysis` over the recent range).
pub struct EfficiencyView {
    /// Days the range covers.
    pub days: i64,
    /// Days without activity that make an open assignment stalled.
    pub stalled_after_days: i32,
    /// Assignments of the range.
    pub assignments: String,
    /// Median time to complete, or a dash.
    pub median: String,
    /// 90th percentile time to complete, or a dash.
    pub p90: String,
    /// Completed by the due date, or a dash.
    pub on_time: String,
    pub funnel: RowsChart,
    pub times: RowsChart,
    pub modules: Vec<ModuleEfficiency>,
}

/// A duration of seconds in words, or a dash.
fn duration_text(seconds: Option<f64>) -> String {
    seconds
        .map(whole_seconds)
        .map_or_else(|| "–".to_owned(), humanize_seconds)
}

impl EfficiencyView {
    fn new(analysis: &FlowAnalysis) -> Self {
        let request = &analysis.request;
        let days = (request.to - request.from).num_days();
        let funnel_rows: Vec<Row> = analysis
            .modules
            .iter()
            .map(|module| Row {
                label: module.name.clone(),
                values: vec![
                    RowValue {
                        class: "bar-reached",
                        name: "reached",
                        value: module.reached as f64,
                        text: count(module.reached),
                    },
                    RowValue {
                        class: "bar-completed",
                        name: "completed",
                        value: module.completed as f64,
                        text: count(module.completed),
                    },
                    RowValue {
                        class: "bar-stalled",
                        name: "stalled now",
                        value: module.stalled as f64,
                        text: count(module.stalled),
                    },
                ],
            })
            .collect();
        let time_rows: Vec<Row> = analysis
            .modules
            .iter()
            .map(|module| Row {
                label: module.name.clone(),
                values: vec![
                    RowValue {
                        class: "bar-median",
                        name: "median",
                        value: module.time.median.unwrap_or(0.0),
                        text: duration_text(module.time.median),
                    },
                    RowValue {
                        class: "bar-p90",
                        name: "p90",
                        value: module.time.p90.unwrap_or(0.0),
                        text: duration_text(module.time.p90),
                    },
                ],
            })
            .collect();
        let stalled: i64 = analysis.modules.iter().map(|module| module.stalled).sum();
        Self {
            days,
            stalled_after_days: request.stalled_after_days,
            assignments: count(analysis.assignments),
            median: duration_text(analysis.time_to_complete.median),
            p90: duration_text(analysis.time_to_complete.p90),
            on_time: analysis::on_time_share(
                analysis.completed_on_time,
                analysis.completed_with_due_date,
            )
            .map_or_else(|| "–".to_owned(), percent),
            funnel: chart::rows(
                &funnel_rows,
                format!(
                    "For each of the {} modules, the assignments of the last {days} days that \
                     reached it, completed it, and are stalled in it now ({stalled} in all).",
                    analysis.modules.len()
                ),
            ),
            times: chart::rows(
                &time_rows,
                "For each module, the median and 90th percentile of the time spent in it."
                    .to_owned(),
            ),
            modules: analysis
                .modules
                .iter()
                .map(|module| ModuleEfficiency {
                    name: module.name.clone(),
                    reached: count(module.reached),
                    completed: count(module.completed),
                    stalled: count(module.stalled),
                    median: duration_text(module.time.median),
                    p90: duration_text(module.time.p90),
                })
                .collect(),
        }
    }
}

/// A choice of whom a flow is required of: `none`, `everyone` or a rule's id.
pub struct RequiredChoice {
    /// The form's value.
    pub value: String,
    /// Its words.
    pub label: String,
    /// Whether it is the flow's now.
    pub selected: bool,
}

/// The form's value for "not required".
const NOT_REQUIRED: &str = "none";
/// The form's value for "required of everyone".
const EVERYONE: &str = "everyone";

/// Whom the flow is required of, in words, and the choices of the form (nobody, everyone, each
/// enrollment rule's audience).
async fn required_of(
    state: &AppState,
    account: &SignedIn,
    flow: &flow_common::db::flows::FlowSummary,
) -> Result<(String, Vec<RequiredChoice>), PageError> {
    let rules = flow_app::enrollment::list(
        state,
        account.acting(),
        None,
        flow_app::enrollment::MAX_RULES,
    )
    .await?;
    let current = match (flow.required, flow.required_for_rule_id) {
        (false, _) => NOT_REQUIRED.to_owned(),
        (true, None) => EVERYONE.to_owned(),
        (true, Some(rule)) => rule.to_string(),
    };
    let text = match (flow.required, flow.required_for_rule_id) {
        (false, _) => "Not required: the compliance report covers it only when named.".to_owned(),
        (true, None) => "Required of everyone in the organization.".to_owned(),
        (true, Some(rule)) => {
            let name = rules
                .iter()
                .find(|record| record.id == rule)
                .map_or_else(|| rule.to_string(), |record| record.name.clone());
            format!(
                "Required of the audience of the rule \u{201c}{name}\u{201d}: the people it \
                 matches now. For anyone else it is not required."
            )
        }
    };
    let choices = [
        (NOT_REQUIRED.to_owned(), "Not required".to_owned()),
        (EVERYONE.to_owned(), "Everyone".to_owned()),
    ]
    .into_iter()
    .chain(rules.iter().map(|record| {
        (
            record.id.to_string(),
            format!("The audience of the rule \u{201c}{}\u{201d}", record.name),
        )
    }))
    .map(|(value, label)| RequiredChoice {
        selected: value == current,
        value,
        label,
    })
    .collect();
    Ok((text, choices))
}

#[derive(Template, WebTemplate)]
#[template(path = "dashboard/flow.html")]
struct FlowPage {
    layout: Layout,
    /// Whom it is required of, in words.
    required_text: String,
    /// The choices of whom it is required of (admins change it).
    required_choices: Vec<RequiredChoice>,
    /// The export buttons.
    formats: Vec<FormatChoice>,
    id: String,
    name: String,
    modules: i64,
    metrics: MetricsView,
    chart: Chart,
    tabs: Vec<Tab>,
    status: String,
    email: String,
    email_error: Option<String>,
    assignments: Vec<AssignmentRow>,
    next_url: Option<String>,
    first_url: Option<String>,
    filtered: bool,
    /// This page's address, where the row actions come back to.
    back: String,
}

impl FlowPage {
    /// Whether a row can be selected (an open one): the form of the rows selected is shown only
    /// then.
    fn selectable(&self) -> bool {
        self.assignments.iter().any(|row| row.open)
    }
}

/// The report on a flow of the signed-in organization: with `format`, its export (of the rows
/// with `status`); without, its figures by week.
async fn report_on(
    state: &AppState,
    account: &SignedIn,
    flow_id: FlowId,
    format: Option<ExportFormat>,
    status: Option<AssignmentStatus>,
) -> Result<ReportAnswer, PageError> {
    let query = ReportQuery::of_flow(
        flow_id,
        account.zone(),
        status,
        format.is_none().then(reports::weekly_completion),
        format,
        1,
    );
    Ok(reports::report(state, account.acting(), query, None).await?)
}

fn flow_url(id: FlowId, query: &FlowQuery) -> String {
    let query = serde_html_form::to_string(query).unwrap_or_default();
    if query.is_empty() {
        format!("/dashboard/flows/{id}#assignments")
    } else {
        format!("/dashboard/flows/{id}?{query}#assignments")
    }
}

async fn show(
    State(state): State<AppState>,
    account: SignedIn,
    Path(id): Path<String>,
    HtmlQuery(query): HtmlQuery<FlowQuery>,
) -> PageResult {
    let flow_id = FlowId::parse(&id).ok_or_else(PageError::not_found)?;
    let flow = flow_app::flows::summary(&state, account.acting(), flow_id).await?;
    let layout = Layout::new(&account, Section::Flows).await;
    let answer = report_on(&state, &account, flow.id, None, None).await?;
    let status = query
        .status
        .as_deref()
        .and_then(|text| text.parse::<AssignmentStatus>().ok());
    let email = query
        .email
        .as_deref()
        .map(str::trim)
        .filter(|text| !text.is_empty())
        .map(str::to_owned);
    let email_error = email
        .as_ref()
        .filter(|text| text.chars().count() > 320)
        .map(|_| "Search with at most 320 characters.".to_owned());
    let after = query.after.as_deref().and_then(PageCursor::decode);
    let mut now = Utc::now();
    let mut rows = if email_error.is_some() {
        Vec::new()
    } else {
        let filter = AssignmentFilter {
            email: email.as_deref(),
            status,
            after: after.map(|cursor| (cursor.assigned_at, cursor.id)),
        };
        let (rows, read_at) = flow_app::flows::assignments(
            &state,
            account.acting(),
            flow.id,
            filter,
            ASSIGNMENTS_PER_PAGE + 1,
        )
        .await?;
        now = read_at;
        rows
    };
    let filters = FlowQuery {
        status: status.map(|status| status.as_str().to_owned()),
        email: email.clone(),
        after: None,
    };
    let page_size = usize::try_from(ASSIGNMENTS_PER_PAGE).unwrap_or(usize::MAX);
    let next_url = if rows.len() > page_size {
        rows.truncate(page_size);
        rows.last().map(|last| {
            let cursor = PageCursor {
                assigned_at: last.assigned_at,
                id: last.id,
            };
            flow_url(
                flow.id,
                &FlowQuery {
                    after: Some(cursor.encode()),
                    ..filters.clone()
                },
            )
        })
    } else {
        None
    };
    let tabs = std::iter::once(None)
        .chain(AssignmentStatus::ALL.iter().copied().map(Some))
        .map(|tab| Tab {
            url: flow_url(
                flow.id,
                &FlowQuery {
                    status: tab.map(|status| status.as_str().to_owned()),
                    email: email.clone(),
                    after: None,
                },
            ),
            text: tab.map_or_else(|| "All".to_owned(), |status| label(status.as_str())),
            current: tab == status,
        })
        .collect();
    let weeks: Vec<Week> = match (&answer.parameters.aggregate, &answer.report.aggregates) {
        (Some(spec), Some(periods)) => periods
            .iter()
            .rev()
            .take(CHART_WEEKS)
            .rev()
            .map(|period| Week {
                label: spec.by.label(period.local_start),
                total: period.total,
                completed: period.completed,
            })
            .collect(),
        _ => Vec::new(),
    };
    let metrics = &answer.report.metrics;
    let (required_text, required_choices) = required_of(&state, &account, &flow).await?;
    let page = FlowPage {
        required_text,
        required_choices,
        id: flow.id.to_string(),
        name: flow.name.clone(),
        modules: flow.module_count,
        metrics: MetricsView {
            total: count(metrics.total),
            completed: count(metrics.completed),
            rate: percent(completion_rate(metrics.completed, metrics.total)),
            in_progress: count(metrics.in_progress),
            pending: count(metrics.pending),
            overdue: count(metrics.overdue),
            average: metrics
                .average_completion_seconds
                .map(whole_seconds)
                .map_or_else(|| "–".to_owned(), humanize_seconds),
        },
        formats: format_choices(),
        chart: chart::completion_by_week(&weeks),
        tabs,
        status: status
            .map(|status| status.as_str().to_owned())
            .unwrap_or_default(),
        email: email.clone().unwrap_or_default(),
        email_error,
        assignments: rows
            .iter()
            .map(|row| {
                let status = row.status(now);
                AssignmentRow {
                    id: row.id.to_string(),
                    email: row.assignee_email.clone(),
                    user_id: row.user_id.to_string(),
                    open: matches!(
                        status,
                        AssignmentStatus::Pending
                            | AssignmentStatus::InProgress
                            | AssignmentStatus::Overdue
                    ),
                    status: status.as_str().to_owned(),
                    status_text: label(status.as_str()),
                    progress: format!("{} / {}", row.completed_modules, row.total_modules),
                    progress_value: if row.total_modules > 0 {
                        row.completed_modules * 100 / row.total_modules
                    } else {
                        0
                    },
                    priority: label(row.priority.as_str()),
                    assigned: layout.time(&row.assigned_at),
                    due: layout.time_or(&row.due_at, "–"),
                    completed: layout.time_or(&row.completed_at, "–"),
                    cancel_reason: row.cancel_reason.clone().unwrap_or_default(),
                }
            })
            .collect(),
        next_url,
        first_url: after.map(|_| flow_url(flow.id, &filters)),
        filtered: status.is_some() || email.is_some(),
        back: flow_url(
            flow.id,
            &FlowQuery {
                after: query.after.clone().filter(|_| after.is_some()),
                ..filters.clone()
            },
        ),
        layout,
    };
    let code = if page.email_error.is_some() {
        StatusCode::BAD_REQUEST
    } else {
        StatusCode::OK
    };
    Ok((code, page).into_response())
}

/// The form of whom a flow is required of.
#[derive(Debug, Deserialize)]
pub struct RequiredForm {
    /// `none`, `everyone` or an enrollment rule's id.
    #[serde(default)]
    pub required_of: String,
}

/// Sets whom the flow is required of with the flow edit of the API (`required`,
/// `requiredForRuleId`), then shows the flow's page with what was done or refused.
async fn set_required(
    State(state): State<AppState>,
    account: SignedIn,
    Path(id): Path<String>,
    HtmlForm(form): HtmlForm<RequiredForm>,
) -> PageResult {
    account.require_admin()?;
    let flow_id = FlowId::parse(&id).ok_or_else(PageError::not_found)?;
    let (required, required_for_rule_id) = match form.required_of.trim() {
        NOT_REQUIRED => (false, None),
        EVERYONE => (true, Some(None)),
        rule => (true, Some(Some(rule.to_owned()))),
    };
    let back = Redirect::to(&format!("/dashboard/flows/{flow_id}")).into_response();
    let edit = flow_app::flows::check_edit(FlowEditFields {
        required: Some(required),
        required_for_rule_id,
        ..FlowEditFields::default()
    });
    let outcome = match edit {
        Err(invalid) => Err(invalid.to_string()),
        Ok(edit) => match flow_app::flows::edit(&state, account.acting(), flow_id, &edit).await {
            Ok(_) => Ok(()),
            Err(ServiceError::NotFound("enrollment rule")) => {
                Err("That rule no longer exists: choose another.".to_owned())
            }
            Err(other) => return Err(other.into()),
        },
    };
    match outcome {
        Ok(()) => {
            flash(
                &account.session,
                "success",
                "Saved: the compliance report judges this flow of whom it is required now.",
            )
            .await;
        }
        Err(message) => flash(&account.session, "error", message).await,
    }
    Ok(back)
}

/// The export buttons' form.
#[derive(Debug, Deserialize)]
pub struct ExportForm {
    /// csv, excel or pdf.
    #[serde(default)]
    pub format: String,
    /// The status tab shown, to export the same rows.
    pub status: Option<String>,
}

async fn request_export(
    State(state): State<AppState>,
    account: SignedIn,
    Path(id): Path<String>,
    HtmlForm(form): HtmlForm<ExportForm>,
) -> PageResult {
    let flow_id = FlowId::parse(&id).ok_or_else(PageError::not_found)?;
    let format = export_format(&form.format)?;
    let status = form
        .status
        .as_deref()
        .filter(|text| !text.is_empty())
        .map(|text| {
            text.parse::<AssignmentStatus>()
                .map_err(|_| PageError::bad_request("That status does not exist."))
        })
        .transpose()?;
    let answer = report_on(&state, &account, flow_id, Some(format), status).await?;
    let export = answer
        .export
        .ok_or_else(|| PageError::internal("the report answered without its export"))?;
    Ok(Redirect::to(&format!("/dashboard/exports/{}", export.id)).into_response())
}

/// The export buttons of a page, one per format.
pub(super) fn format_choices() -> Vec<FormatChoice> {
    ExportFormat::ALL
        .iter()
        .map(|format| FormatChoice {
            value: format.as_str(),
            label: format.label(),
        })
        .collect()
}

/// The format an export button sent; 400 naming the choices for anything else.
pub(super) fn export_format(text: &str) -> Result<ExportFormat, PageError> {
    text.parse::<ExportFormat>().map_err(|_| {
        let labels: Vec<&str> = ExportFormat::ALL
            .iter()
            .map(|format| format.label())
            .collect();
        PageError::bad_request(format!("Choose {}.", in_words(&labels)))
    })
}

/// `A, B or C`.
fn in_words(items: &[&str]) -> String {
    match items.split_last() {
        None => String::new(),
        Some((last, [])) => (*last).to_owned(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
    }
}

#[derive(Template, WebTemplate)]
#[template(path = "dashboard/flow_efficiency.html")]
struct EfficiencySection {
    efficiency: EfficiencyView,
}

#[derive(Template, WebTemplate)]
#[template(path = "dashboard/flow_efficiency_page.html")]
struct EfficiencyPage {
    layout: Layout,
    id: String,
    name: String,
    efficiency: EfficiencyView,
}

/// Where people stall in a flow (`flow_app::analysis` over the last 90 days): the section the
/// flow's page loads after it is shown (htmx), so a flow with a long history shows its report
/// and assignments at once; without script, a page of its own.
async fn efficiency(
    State(state): State<AppState>,
    account: SignedIn,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> PageResult {
    let flow_id = FlowId::parse(&id).ok_or_else(PageError::not_found)?;
    let flow = flow_app::flows::summary(&state, account.acting(), flow_id).await?;
    let analysed = analysis::analyse(
        &state,
        account.acting(),
        flow.id,
        AnalysisRequest::recent(account.zone(), Utc::now()),
    )
    .await?;
    let efficiency = EfficiencyView::new(&analysed);
    if super::is_htmx(&headers) {
        return Ok(EfficiencySection { efficiency }.into_response());
    }
    Ok(EfficiencyPage {
        layout: Layout::new(&account, Section::Flows).await,
        id: flow.id.to_string(),
        name: flow.name.clone(),
        efficiency,
    }
    .into_response())
}

/// The state of an export as its panel shows it.
pub struct ExportView {
    pub id: String,
    /// Where it was asked from: its flow's page, or the Compliance page.
    pub back: String,
    /// CSV, Excel or PDF.
    pub format: String,
    /// pending, running, ready, failed or expired.
    pub status: String,
    /// Percent done.
    pub progress: String,
    /// Percent done, 0 to 100.
    pub progress_value: i64,
    /// Rows written of the total.
    pub rows: String,
    /// Whether the panel should keep polling.
    pub working: bool,
    /// Why it failed.
    pub error: String,
    /// Until when it can be downloaded.
    pub expires: String,
    /// File name.
    pub file_name: String,
}

impl ExportView {
    /// What [`Self::back`] leads to, in words.
    pub fn back_label(&self) -> &'static str {
        if self.back.starts_with("/dashboard/flows/") {
            "the flow"
        } else {
            "the compliance report"
        }
    }
}

#[derive(Template, WebTemplate)]
#[template(path = "dashboard/export.html")]
struct ExportPage {
    layout: Layout,
    flow_name: String,
    export: ExportView,
}

#[derive(Template, WebTemplate)]
#[template(path = "dashboard/export_panel.html")]
struct ExportPanel {
    export: ExportView,
}

async fn export_status(
    State(state): State<AppState>,
    account: SignedIn,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> PageResult {
    let id = ExportId::parse(&id).ok_or_else(PageError::not_found)?;
    let export = exports::get(&state, account.acting(), id).await?;
    let layout = Layout::new(&account, Section::Flows).await;
    let status = exports::status_at(&export, Utc::now());
    let view = ExportView {
        id: export.id.to_string(),
        back: export.flow_id.map_or_else(
            || "/dashboard/compliance".to_owned(),
            |flow_id| format!("/dashboard/flows/{flow_id}"),
        ),
        format: export.format.label().to_owned(),
        status: status.as_str().to_owned(),
        progress: percent(export.progress_percent()),
        progress_value: export.progress_percent().round() as i64,
        rows: match export.rows_total {
            Some(total) => format!("{} of {}", count(export.rows_written), plural(total, "row")),
            None => plural(export.rows_written, "row"),
        },
        working: matches!(status, ExportStatus::Pending | ExportStatus::Running),
        error: export.error.clone().unwrap_or_default(),
        expires: layout.time(&export.expires_at),
        file_name: export.file_name.clone().unwrap_or_default(),
    };
    if super::is_htmx(&headers) {
        return Ok(ExportPanel { export: view }.into_response());
    }
    let flow_name = match export.flow_id {
        Some(flow_id) => flow_app::flows::find(&state, account.acting(), flow_id)
            .await?
            .map(|flow| flow.name)
            .unwrap_or_default(),
        None => "Compliance report".to_owned(),
    };
    Ok(ExportPage {
        layout,
        flow_name,
        export: view,
    }
    .into_response())
}

async fn download(
    State(state): State<AppState>,
    account: SignedIn,
    Path(id): Path<String>,
) -> PageResult<Response> {
    let export_id = ExportId::parse(&id).ok_or_else(PageError::not_found)?;
    let (opened, _) = exports::open(&state, account.acting(), export_id).await?;
    match opened {
        Opened::Ready(file) => Ok(crate::download::attachment(file)),
        Opened::Working(_) => {
            Ok(Redirect::to(&format!("/dashboard/exports/{export_id}")).into_response())
        }
        Opened::Failed(_) => Err(PageError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "This export failed. Request a new export from the flow's page.",
        )),
    }
}
