//! Compliance (issue 39): the compliance report of `flow_app::compliance` — the organization's
//! required flows, now — as a page: the report's filters (department, group, manager, active),
//! the totals of the filtered population, and either a page of people with their status per
//! flow (each linking to the person's page) or the roll-up per department, manager or group
//! (each group linking to its people). Pages follow the report's keyset cursor. Linked from the
//! home and Users pages rather than the navigation, which holds eight sections at phone width.

use askama::Template;
use askama_web::WebTemplate;
use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use chrono::Utc;
use flow_app::ServiceError;
use flow_app::compliance::{self as service, ComplianceAnswer, ComplianceFields, percent};
use flow_common::db::compliance::Counts;
use serde::{Deserialize, Serialize};

use super::auth::SignedIn;
use super::view::{self, Layout, Section, count, label};
use super::{HtmlQuery, PageResult};
use crate::state::AppState;

/// People (or groups) per page.
const PAGE_SIZE: i64 = 50;

/// Routes of this module.
pub fn router() -> Router<AppState> {
    Router::new().route("/compliance", get(show))
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
        Self {
            department: keep(self.department),
            group: keep(self.group),
            manager: keep(self.manager),
            active: keep(self.active),
            by: keep(self.by),
            cursor: keep(self.cursor),
        }
    }

    fn url(&self) -> String {
        let query = serde_html_form::to_string(self).unwrap_or_default();
        if query.is_empty() {
            "/dashboard/compliance".to_owned()
        } else {
            format!("/dashboard/compliance?{query}")
        }
    }

    /// Whether anything narrows or shapes the default report.
    fn is_default(&self) -> bool {
        self.department.is_none()
            && self.group.is_none()
            && self.manager.is_none()
            && self.active.is_none()
            && self.by.is_none()
            && self.cursor.is_none()
    }
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
    department: String,
    group: String,
    manager: String,
    active_choices: Vec<Choice>,
    by_choices: Vec<Choice>,
    /// Why the report could not be shown.
    error: Option<String>,
    /// The instant judged.
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
    let active = match query.active.as_deref() {
        Some("active") => Some(true),
        Some("inactive") => Some(false),
        _ => None,
    };
    let fields = ComplianceFields {
        flow_ids: None,
        department: query.department.clone(),
        group_id: query.group.clone(),
        manager_id: query.manager.clone(),
        active,
        user_emails: None,
        group_by: query.by.clone(),
        as_of: None,
        cursor: query.cursor.clone(),
        limit: Some(PAGE_SIZE),
        format: None,
    };
    let outcome = match service::check(fields, account.zone(), Utc::now()) {
        Ok(request) => service::report(&state, account.acting(), request).await,
        Err(error) => Err(error),
    };
    let (answer, error) = match outcome {
        Ok(answer) => (Some(answer), None),
        Err(ServiceError::Invalid(problem)) => (None, Some(problem.0)),
        Err(other) => return Err(other.into()),
    };
    // A refused filter is the request's fault; an organization without required flows is not.
    let code = if error.is_some() && !query.is_default() {
        StatusCode::BAD_REQUEST
    } else {
        StatusCode::OK
    };
    let page = page(layout, &query, answer, error);
    Ok((code, page).into_response())
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
    let mut page = CompliancePage {
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
    page.as_of = page.layout.time(&answer.at);
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
            summary: format!("{} of {}", person.compliant, person.flows.len()),
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
