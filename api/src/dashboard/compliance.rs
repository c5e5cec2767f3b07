//! Compliance (issue 39): the compliance report of `flow_app::compliance` as a page: the flows
//! judged (the organization's required flows unless others are ticked), the instant (now, or the
//! end of an `asOf` day in the organization's time zone), the report's filters (department,
//! group, manager, active), the totals of the filtered population, and either a page of people
//! with their status per flow (each linking to the person's page) or the roll-up per department,
//! manager or group (each group linking to its people). Pages follow the report's keyset
//! cursor. The export buttons record the report's export of the same scope (the API's `format`)
//! and show it in the flows' export panel. Linked from the home and Users pages rather than the
//! navigation, which holds eight sections at phone width.

use askama::Template;
use askama_web::WebTemplate;
use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect};
use axum::routing::{get, post};
use chrono::{DateTime, NaiveDate, Utc};
use flow_app::ServiceError;
use flow_app::compliance::{self as service, ComplianceAnswer, ComplianceFields, percent};
use flow_common::db::compliance::Counts;
use flow_domain::report::ExportFormat;
use serde::{Deserialize, Serialize};

use super::auth::SignedIn;
use super::flows::{FormatChoice, export_format, format_choices};
use super::view::{self, Layout, Section, count, label, plural};
use super::{HtmlForm, HtmlQuery, PageError, PageResult};
use crate::state::AppState;

/// People (or groups) per page.
const PAGE_SIZE: i64 = 50;
/// Flows the picker offers (the organization's first, by id; the report takes at most
/// [`service::MAX_FLOWS`] of them at once).
const FLOW_CHOICES: i64 = 500;

/// Routes of this module.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/compliance", get(show))
        .route("/compliance/exports", post(request_export))
}

/// Query of the page: the report's filters, the roll-up and the cursor.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ComplianceQuery {
    /// Department (case-insensitive).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub department: Option<String>,
    /// Group id (`grp_…`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// Manager id (the identity provider's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manager: Option<String>,
    /// `active`, `inactive`, or anyone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active: Option<String>,
    /// Roll up by `department`, `manager` or `group`; people otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    /// The flows ticked (`flow_…`); none: the organization's required flows.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub flow: Vec<String>,
    /// The day judged (`YYYY-MM-DD`, its end in the organization's time zone) or an RFC 3339
    /// instant, as the API's `asOf`; absent: now.
    #[serde(default, rename = "asOf", skip_serializing_if = "Option::is_none")]
    pub as_of: Option<String>,
    /// The report's `nextCursor`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
}

impl ComplianceQuery {
    /// The query without empty fields (an empty form field means "not given").
    fn given(self) -> Self {
        let keep = |text: Option<String>| {
            text.map(|text| text.trim().to_owned())
                .filter(|text| !text.is_empty())
        };
        let mut flows: Vec<String> = Vec::with_capacity(self.flow.len());
        for flow in self.flow.into_iter().filter_map(|flow| keep(Some(flow))) {
            if !flows.contains(&flow) {
                flows.push(flow);
            }
        }
        Self {
            department: keep(self.department),
            group: keep(self.group),
            manager: keep(self.manager),
            active: keep(self.active),
            by: keep(self.by),
            flow: flows,
            as_of: keep(self.as_of),
            cursor: keep(self.cursor),
        }
    }

    /// The report request of this page (with `format`, its export: every page, so no cursor).
    fn fields(&self, format: Option<ExportFormat>) -> ComplianceFields {
        ComplianceFields {
            flow_ids: (!self.flow.is_empty()).then(|| self.flow.clone()),
            department: self.department.clone(),
            group_id: self.group.clone(),
            manager_id: self.manager.clone(),
            active: match self.active.as_deref() {
                Some("active") => Some(true),
                Some("inactive") => Some(false),
                _ => None,
            },
            user_emails: None,
            group_by: self.by.clone(),
            as_of: self.as_of.clone(),
            cursor: self.cursor.clone().filter(|_| format.is_none()),
            limit: Some(PAGE_SIZE),
            format: format.map(|format| format.as_str().to_owned()),
        }
    }

    fn url(&self) -> String {
        self.url_of("/dashboard/compliance")
    }

    /// `path` with this query.
    fn url_of(&self, path: &str) -> String {
        let query = serde_html_form::to_string(self).unwrap_or_default();
        if query.is_empty() {
            path.to_owned()
        } else {
            format!("{path}?{query}")
        }
    }

    /// Whether anything narrows or shapes the default report.
    fn is_default(&self) -> bool {
        self.department.is_none()
            && self.group.is_none()
            && self.manager.is_none()
            && self.active.is_none()
            && self.by.is_none()
            && self.flow.is_empty()
            && self.as_of.is_none()
            && self.cursor.is_none()
    }
}

/// A flow the picker offers.
pub struct FlowPick {
    pub id: String,
    pub name: String,
    /// Required of everyone (judged when nothing is ticked).
    pub required: bool,
    /// Judged on this page.
    pub checked: bool,
}

/// A flow's column.
pub struct FlowColumn {
    pub id: String,
    pub name: String,
}

/// A person's standing in one flow.
pub struct StatusCell {
    /// The status (the badge's class).
    pub status: String,
    /// In words.
    pub text: String,
    /// The date that matters for it (due, completed, expires), or empty.
    pub detail: String,
}

/// A person's row.
pub struct PersonRow {
    /// Their page.
    pub user_id: String,
    /// Name, else e-mail.
    pub who: String,
    pub email: String,
    pub department: String,
    pub active: bool,
    pub cells: Vec<StatusCell>,
    /// `2 of 3`.
    pub summary: String,
}

/// A group of the roll-up.
pub struct GroupRow {
    /// The department, manager or group; `(none)` for the people without one.
    pub name: String,
    /// Its people, when it has a key.
    pub url: Option<String>,
    pub people: String,
    pub people_compliant: String,
    pub percent: String,
    pub overdue: String,
    pub expired: String,
    pub not_assigned: String,
}

/// A count of one status.
pub struct StatusTotal {
    pub status: &'static str,
    pub text: String,
    pub count: String,
}

/// The population's totals.
pub struct TotalsView {
    pub people: String,
    pub people_compliant: String,
    /// Compliant pairs of the required ones, in percent.
    pub percent: String,
    pub statuses: Vec<StatusTotal>,
}

/// A choice of a select.
pub struct Choice {
    pub value: &'static str,
    pub text: &'static str,
    pub selected: bool,
}

#[derive(Template, WebTemplate)]
#[template(path = "dashboard/compliance.html")]
struct CompliancePage {
    layout: Layout,
    /// The organization's flows that are not archived, to tick.
    flow_picks: Vec<FlowPick>,
    /// Whether flows are ticked (else the required flows are judged).
    picked: bool,
    /// The picker's summary: `2 flows ticked`, or `The required flows`.
    picked_summary: String,
    /// The `asOf` field as given.
    as_of_day: String,
    /// The `asOf` asked for in words (`30 Jun 2026, end of day, Europe/Paris`), when one is.
    as_of_words: Option<String>,
    /// Today in the organization's time zone (the date field's latest).
    today: String,
    /// The export buttons, and where they post (this page's scope, without its cursor).
    formats: Vec<FormatChoice>,
    export_url: String,
    department: String,
    group: String,
    manager: String,
    active_choices: Vec<Choice>,
    by_choices: Vec<Choice>,
    /// Why the report could not be shown.
    error: Option<String>,
    /// The instant judged, to the second, in the organization's time zone.
    as_of: String,
    flows: Vec<FlowColumn>,
    totals: Option<TotalsView>,
    people: Vec<PersonRow>,
    groups: Option<Vec<GroupRow>>,
    /// What the groups are (`Department`).
    group_heading: &'static str,
    next_url: Option<String>,
    first_url: Option<String>,
}

fn choices(options: &[(&'static str, &'static str)], current: Option<&str>) -> Vec<Choice> {
    options
        .iter()
        .map(|(value, text)| Choice {
            value,
            text,
            selected: current.unwrap_or("") == *value,
        })
        .collect()
}

fn totals_view(counts: &Counts) -> TotalsView {
    let statuses = [
        ("compliant", counts.compliant),
        ("due_soon", counts.due_soon),
        ("overdue", counts.overdue),
        ("expired", counts.expired),
        ("in_progress", counts.in_progress),
        ("pending", counts.pending),
        ("not_assigned", counts.not_assigned),
        ("cancelled", counts.cancelled),
        ("not_required", counts.not_required),
    ];
    TotalsView {
        people: count(counts.people),
        people_compliant: count(counts.people_compliant),
        percent: percent(counts.compliant, counts.cells)
            .map_or_else(|| "–".to_owned(), view::percent),
        statuses: statuses
            .into_iter()
            .map(|(status, value)| StatusTotal {
                status,
                text: label(status),
                count: count(value),
            })
            .collect(),
    }
}

async fn show(
    State(state): State<AppState>,
    account: SignedIn,
    HtmlQuery(query): HtmlQuery<ComplianceQuery>,
) -> PageResult {
    let query = query.given();
    let layout = Layout::new(&account, Section::Users).await;
    let flows = flow_app::flows::list(&state, account.acting(), None, FLOW_CHOICES).await?;
    let outcome = match service::check(query.fields(None), account.zone(), Utc::now()) {
        Ok(request) => service::report(&state, account.acting(), request).await,
        Err(error) => Err(error),
    };
    let (answer, error) = match outcome {
        Ok(answer) => (Some(answer), None),
        Err(error) => (None, Some(refusal(error)?)),
    };
    // A refused filter is the request's fault; an organization without required flows is not.
    let code = if error.is_some() && !query.is_default() {
        StatusCode::BAD_REQUEST
    } else {
        StatusCode::OK
    };
    let mut page = page(layout, &query, answer, error);
    page.flow_picks = flows
        .into_iter()
        .filter(|flow| !flow.archived)
        .map(|flow| {
            let id = flow.id.to_string();
            FlowPick {
                checked: if query.flow.is_empty() {
                    flow.required
                } else {
                    query.flow.contains(&id)
                },
                id,
                name: flow.name,
                required: flow.required,
            }
        })
        .collect();
    page.flow_picks
        .sort_by_cached_key(|flow| (flow.name.to_lowercase(), flow.id.clone()));
    Ok((code, page).into_response())
}

/// A refusal of the report as the page words it (shown above it), or the error page for
/// anything else.
fn refusal(error: ServiceError) -> Result<String, PageError> {
    match error {
        ServiceError::Invalid(problem) => Ok(problem.0),
        // A ticked flow that is not (or no longer) the organization's.
        ServiceError::NotFound("flow") => {
            Ok("Tick flows of this organization: one of them does not exist.".to_owned())
        }
        other => Err(other.into()),
    }
}

/// The `asOf` asked for, in words: a date as its end of day in `zone` (`today, now` for
/// today's), an instant as written.
fn as_of_words(text: &str, zone: chrono_tz::Tz, now: DateTime<Utc>) -> String {
    match NaiveDate::parse_from_str(text, "%Y-%m-%d") {
        Ok(day) if day == now.with_timezone(&zone).date_naive() => "today, now".to_owned(),
        Ok(day) => format!("{}, end of day, {}", day.format("%-d %b %Y"), zone.name()),
        Err(_) => text.to_owned(),
    }
}

/// The export buttons: the report of this page's scope (flows, filters, roll-up, `asOf`; every
/// page) with a format, through the API's compliance report, then its panel. Open to every
/// account, as a flow's exports are (an export changes nothing).
async fn request_export(
    State(state): State<AppState>,
    account: SignedIn,
    HtmlQuery(query): HtmlQuery<ComplianceQuery>,
    HtmlForm(form): HtmlForm<ExportForm>,
) -> PageResult {
    let format = export_format(&form.format)?;
    let query = query.given();
    let request = service::check(query.fields(Some(format)), account.zone(), Utc::now()).map_err(
        |error| match refusal(error) {
            Ok(message) => PageError::bad_request(message),
            Err(page) => page,
        },
    )?;
    let answer = service::report(&state, account.acting(), request).await?;
    let export = answer
        .export
        .ok_or_else(|| PageError::internal("the compliance report answered without its export"))?;
    Ok(Redirect::to(&format!("/dashboard/exports/{}", export.id)).into_response())
}

/// The export buttons' form: the format; the scope is in the address.
#[derive(Debug, Deserialize)]
pub struct ExportForm {
    /// csv, excel or pdf.
    #[serde(default)]
    pub format: String,
}

fn page(
    layout: Layout,
    query: &ComplianceQuery,
    answer: Option<ComplianceAnswer>,
    error: Option<String>,
) -> CompliancePage {
    let group_heading = match query.by.as_deref() {
        Some("manager") => "Manager",
        Some("group") => "Group",
        _ => "Department",
    };
    let today = Utc::now().with_timezone(&layout.zone).date_naive();
    let picked_count = i64::try_from(query.flow.len()).unwrap_or(i64::MAX);
    let mut page = CompliancePage {
        flow_picks: Vec::new(),
        picked: !query.flow.is_empty(),
        picked_summary: if query.flow.is_empty() {
            "The required flows".to_owned()
        } else {
            format!("{} ticked", plural(picked_count, "flow"))
        },
        as_of_day: query.as_of.clone().unwrap_or_default(),
        as_of_words: query
            .as_of
            .as_deref()
            .map(|text| as_of_words(text, layout.zone, Utc::now())),
        today: today.format("%Y-%m-%d").to_string(),
        formats: format_choices(),
        export_url: ComplianceQuery {
            cursor: None,
            ..query.clone()
        }
        .url_of("/dashboard/compliance/exports"),
        department: query.department.clone().unwrap_or_default(),
        group: query.group.clone().unwrap_or_default(),
        manager: query.manager.clone().unwrap_or_default(),
        active_choices: choices(
            &[
                ("", "Anyone"),
                ("active", "Active"),
                ("inactive", "Deactivated"),
            ],
            query.active.as_deref(),
        ),
        by_choices: choices(
            &[
                ("", "People"),
                ("department", "Department"),
                ("manager", "Manager"),
                ("group", "Group"),
            ],
            query.by.as_deref(),
        ),
        error,
        as_of: String::new(),
        flows: Vec::new(),
        totals: None,
        people: Vec::new(),
        groups: None,
        group_heading,
        next_url: None,
        first_url: query.cursor.is_some().then(|| {
            ComplianceQuery {
                cursor: None,
                ..query.clone()
            }
            .url()
        }),
        layout,
    };
    let Some(answer) = answer else {
        return page;
    };
    page.as_of = answer
        .at
        .with_timezone(&page.layout.zone)
        .format("%Y-%m-%d %H:%M:%S")
        .to_string();
    page.flows = answer
        .flows
        .iter()
        .map(|flow| FlowColumn {
            id: flow.id.to_string(),
            name: flow.name.clone(),
        })
        .collect();
    page.totals = Some(totals_view(&answer.totals));
    let layout = &page.layout;
    page.people = answer
        .people
        .iter()
        .map(|person| PersonRow {
            user_id: person.user_id.to_string(),
            who: person
                .name
                .clone()
                .filter(|name| !name.is_empty())
                .unwrap_or_else(|| person.email.clone()),
            email: person.email.clone(),
            department: person.department.clone().unwrap_or_default(),
            active: person.active,
            cells: person
                .flows
                .iter()
                .map(|cell| {
                    let detail = match cell.status.as_str() {
                        "compliant" => cell
                            .expires_at
                            .map(|at| format!("until {}", layout.time(&at)))
                            .or_else(|| cell.completed_at.map(|at| layout.time(&at))),
                        "expired" => cell.expires_at.map(|at| format!("on {}", layout.time(&at))),
                        "due_soon" | "overdue" | "pending" | "in_progress" => {
                            cell.due_at.map(|at| format!("due {}", layout.time(&at)))
                        }
                        _ => None,
                    };
                    StatusCell {
                        text: label(&cell.status),
                        status: cell.status.clone(),
                        detail: detail.unwrap_or_default(),
                    }
                })
                .collect(),
            summary: format!("{} of {}", person.compliant, person.required),
        })
        .collect();
    page.groups = answer.groups.as_ref().map(|groups| {
        groups
            .iter()
            .map(|group| {
                let url = group.key.as_ref().map(|key| {
                    let mut filtered = ComplianceQuery {
                        by: None,
                        cursor: None,
                        ..query.clone()
                    };
                    match query.by.as_deref() {
                        Some("manager") => filtered.manager = Some(key.clone()),
                        Some("group") => filtered.group = Some(key.clone()),
                        _ => filtered.department = Some(key.clone()),
                    }
                    filtered.url()
                });
                GroupRow {
                    name: group
                        .name
                        .clone()
                        .or_else(|| group.key.clone())
                        .unwrap_or_else(|| "(none)".to_owned()),
                    url,
                    people: count(group.counts.people),
                    people_compliant: count(group.counts.people_compliant),
                    percent: percent(group.counts.compliant, group.counts.cells)
                        .map_or_else(|| "–".to_owned(), view::percent),
                    overdue: count(group.counts.overdue),
                    expired: count(group.counts.expired),
                    not_assigned: count(group.counts.not_assigned),
                }
            })
            .collect()
    });
    page.next_url = answer.next_cursor.map(|cursor| {
        ComplianceQuery {
            cursor: Some(cursor),
            ..query.clone()
        }
        .url()
    });
    page
}
