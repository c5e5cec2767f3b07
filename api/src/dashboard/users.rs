//! Users: the organization's assignees, searched by e-mail or name, and a CSV import (`email`,
//! optional `name`) that upserts the valid rows and reports each invalid one by line; and a page
//! per person (design §16): their attributes as the identity provider sent them (department,
//! title, manager — linked to the manager's page when the manager is a user here —, groups,
//! active), every assignment of theirs with its progress, and for admins the actions of
//! [`super::actions`] on them.

use askama::Template;
use askama_web::WebTemplate;
use axum::Router;
use axum::extract::{DefaultBodyLimit, Multipart, Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use chrono::Utc;
use flow_app::ServiceError;
use flow_app::ratelimit::{Operation, RateLimitError, page_cost};
use flow_app::user_import::{ImportProblem, MAX_IMPORT_BYTES, parse_import};
use flow_app::users as service;
use flow_common::db::assignments::ListFilter;
use flow_domain::AssignmentStatus;
use flow_domain::ids::UserId;
use flow_domain::report::PageCursor;
use serde::{Deserialize, Serialize};

use super::auth::SignedIn;
use super::csv_upload::{parse_off_runtime, read_upload};
use super::view::{Layout, Section, label};
use super::{HtmlQuery, PageError, PageResult};
use crate::state::AppState;

/// Users per page.
const PAGE_SIZE: i64 = 50;

/// A person's assignments per page.
const PERSON_ASSIGNMENTS: i64 = 100;

/// Routes of this module.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/users", get(list).post(import))
        .route("/users/{id}", get(person))
        .layer(DefaultBodyLimit::max(MAX_IMPORT_BYTES))
}

/// A user in the list.
pub struct UserRow {
    /// The person's page.
    pub id: String,
    /// E-mail.
    pub email: String,
    /// Name, or empty.
    pub name: String,
    /// Creation time.
    pub created: String,
    /// False once deactivated (offboarded): shown, and refused new assigns.
    pub active: bool,
}

/// What an import did.
pub struct ImportSummary {
    /// The file.
    pub file_name: String,
    /// New users.
    pub created: usize,
    /// Users whose name was updated.
    pub updated: usize,
    /// Refused rows.
    pub problems: Vec<ImportProblem>,
}

/// Query of the list.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct UsersQuery {
    /// Part of an e-mail or name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub search: Option<String>,
    /// Cursor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
}

#[derive(Template, WebTemplate)]
#[template(path = "dashboard/users.html")]
struct UsersPage {
    layout: Layout,
    users: Vec<UserRow>,
    search: String,
    next_url: Option<String>,
    first_url: Option<String>,
    import: Option<ImportSummary>,
    import_error: Option<String>,
}

async fn page(
    state: &AppState,
    account: &SignedIn,
    query: UsersQuery,
    import: Option<ImportSummary>,
    import_error: Option<String>,
) -> Result<UsersPage, PageError> {
    let layout = Layout::new(account, Section::Users).await;
    let search = query
        .search
        .as_deref()
        .map(str::trim)
        .filter(|text| !text.is_empty())
        .map(|text| text.chars().take(320).collect::<String>());
    let after = query.after.as_deref().and_then(UserId::parse);
    let mut rows = service::list_matching(
        state,
        account.acting(),
        search.as_deref(),
        after,
        PAGE_SIZE + 1,
    )
    .await?;
    let url = |after: Option<String>| {
        let query = serde_html_form::to_string(UsersQuery {
            search: search.clone(),
            after,
        })
        .unwrap_or_default();
        format!("/dashboard/users?{query}")
    };
    let page_size = usize::try_from(PAGE_SIZE).unwrap_or(usize::MAX);
    let next_url = if rows.len() > page_size {
        rows.truncate(page_size);
        rows.last().map(|user| url(Some(user.id.to_string())))
    } else {
        None
    };
    Ok(UsersPage {
        users: rows
            .iter()
            .map(|user| UserRow {
                id: user.id.to_string(),
                email: user.email.clone(),
                name: user.name.clone().unwrap_or_default(),
                created: layout.time(&user.created_at),
                active: user.active,
            })
            .collect(),
        layout,
        first_url: after.map(|_| url(None)),
        search: search.unwrap_or_default(),
        next_url,
        import,
        import_error,
    })
}

async fn list(
    State(state): State<AppState>,
    account: SignedIn,
    HtmlQuery(query): HtmlQuery<UsersQuery>,
) -> PageResult<UsersPage> {
    page(&state, &account, query, None, None).await
}

async fn import(
    State(state): State<AppState>,
    account: SignedIn,
    multipart: Multipart,
) -> PageResult {
    account.require_admin()?;
    let (file_name, parsed) = match read_upload(multipart, "users.csv").await?.file {
        None => (
            String::new(),
            Err("Choose a CSV file to import.".to_owned()),
        ),
        Some((file_name, file)) => (file_name, parse_off_runtime(file, parse_import).await?),
    };
    let (new_users, problems) = match parsed {
        Ok(parsed) => parsed,
        Err(message) => {
            let page = page(&state, &account, UsersQuery::default(), None, Some(message)).await?;
            return Ok((StatusCode::BAD_REQUEST, page).into_response());
        }
    };
    // Charged like `POST /v1/users/bulk`: one write request per started 100 users, so a file
    // cannot write (and have the rules assign) more than the organization's write limit allows.
    let cost = page_cost(i64::try_from(new_users.len()).unwrap_or(i64::MAX));
    match state
        .limiter
        .check(&account.caller, Operation::Write, cost)
        .await
    {
        Ok(_) => {}
        Err(error @ RateLimitError::Exceeded { .. }) => {
            let message = format!(
                "Nothing was imported: {error}. An import of {} users costs {cost} write requests \
             (one per started {}); try again later, or split the file.",
                new_users.len(),
                flow_app::ratelimit::ITEMS_PER_REQUEST
            );
            let page = page(&state, &account, UsersQuery::default(), None, Some(message)).await?;
            return Ok((StatusCode::TOO_MANY_REQUESTS, page).into_response());
        }
        Err(other) => return Err(ServiceError::from(other).into()),
    }
    let imported = service::import(&state, account.acting(), new_users).await?;
    let summary = ImportSummary {
        file_name,
        created: imported.created,
        updated: imported.updated,
        problems,
    };
    Ok(
        page(&state, &account, UsersQuery::default(), Some(summary), None)
            .await?
            .into_response(),
    )
}

/// The person's manager as the page shows them.
pub struct ManagerView {
    /// The manager's page, when the manager is a user of the organization.
    pub user_id: Option<String>,
    /// Their name (else e-mail, else the provider's id).
    pub text: String,
}

/// An assignment of the person.
pub struct PersonAssignmentRow {
    pub id: String,
    pub flow_id: String,
    pub flow_name: String,
    pub status: String,
    /// Status in words.
    pub status_text: String,
    /// Whether it can be changed or cancelled.
    pub open: bool,
    /// Modules completed of all.
    pub progress: String,
    /// Modules completed, in percent.
    pub progress_value: i64,
    pub assigned: String,
    pub due: String,
    pub completed: String,
    /// Why it was cancelled, for a cancelled one.
    pub cancel_reason: String,
}

#[derive(Template, WebTemplate)]
#[template(path = "dashboard/person.html")]
struct PersonPage {
    layout: Layout,
    id: String,
    email: String,
    name: String,
    active: bool,
    title: String,
    department: String,
    employee_number: String,
    manager: Option<ManagerView>,
    groups: Vec<String>,
    start_date: String,
    created: String,
    assignments: Vec<PersonAssignmentRow>,
    next_url: Option<String>,
    first_url: Option<String>,
    /// This page's address, where the row actions come back to.
    back: String,
}

impl PersonPage {
    /// Whether a row can be selected (an open one): the form of the rows selected is shown only
    /// then.
    fn selectable(&self) -> bool {
        self.assignments.iter().any(|row| row.open)
    }
}

/// Query of a person's page.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct PersonQuery {
    /// Cursor of the assignments.
    pub after: Option<String>,
}

async fn person(
    State(state): State<AppState>,
    account: SignedIn,
    Path(id): Path<String>,
    HtmlQuery(query): HtmlQuery<PersonQuery>,
) -> PageResult<PersonPage> {
    let user_id = UserId::parse(id.trim()).ok_or_else(PageError::not_found)?;
    let (profile, groups) = service::person(&state, account.acting(), user_id).await?;
    let manager = match profile.manager_id.as_deref() {
        None => None,
        Some(manager_id) => {
            let found = flow_app::attention::manager(&state, account.acting(), manager_id).await?;
            Some(match found {
                Some(user) => ManagerView {
                    user_id: Some(user.id.to_string()),
                    text: profile
                        .manager_name
                        .clone()
                        .or(user.name)
                        .filter(|name| !name.is_empty())
                        .unwrap_or(user.email),
                },
                None => ManagerView {
                    user_id: None,
                    text: profile
                        .manager_name
                        .clone()
                        .filter(|name| !name.is_empty())
                        .unwrap_or_else(|| manager_id.to_owned()),
                },
            })
        }
    };
    let after = query.after.as_deref().and_then(PageCursor::decode);
    let now = Utc::now();
    let filter = ListFilter {
        flow_id: None,
        email_normalized: Some(profile.email.to_lowercase()),
        status: None,
        include_cancelled: true,
    };
    let mut rows = flow_app::assignments::list(
        &state,
        account.acting(),
        &filter,
        after.map(|cursor| (cursor.assigned_at, cursor.id)),
        PERSON_ASSIGNMENTS + 1,
        now,
    )
    .await?;
    let base = format!("/dashboard/users/{user_id}");
    let page_size = usize::try_from(PERSON_ASSIGNMENTS).unwrap_or(usize::MAX);
    let next_url = if rows.len() > page_size {
        rows.truncate(page_size);
        rows.last().map(|last| {
            let cursor = PageCursor {
                assigned_at: last.assigned_at,
                id: last.id,
            };
            let query =
                serde_html_form::to_string([("after", cursor.encode())]).unwrap_or_default();
            format!("{base}?{query}#assignments")
        })
    } else {
        None
    };
    let back = match (&query.after, after) {
        (Some(text), Some(_)) => {
            let query = serde_html_form::to_string([("after", text)]).unwrap_or_default();
            format!("{base}?{query}#assignments")
        }
        _ => format!("{base}#assignments"),
    };
    let layout = Layout::new(&account, Section::Users).await;
    Ok(PersonPage {
        id: user_id.to_string(),
        email: profile.email.clone(),
        name: profile.name.clone().unwrap_or_default(),
        active: profile.active,
        title: profile.title.clone().unwrap_or_default(),
        department: profile.department.clone().unwrap_or_default(),
        employee_number: profile.employee_number.clone().unwrap_or_default(),
        manager,
        groups: groups.into_iter().map(|group| group.display_name).collect(),
        start_date: profile
            .start_date
            .map(|date| date.to_string())
            .unwrap_or_default(),
        created: layout.time(&profile.created_at),
        assignments: rows
            .iter()
            .map(|row| {
                let status = row.status(now);
                PersonAssignmentRow {
                    id: row.id.to_string(),
                    flow_id: row.flow_id.to_string(),
                    flow_name: row.flow_name.clone(),
                    status: status.as_str().to_owned(),
                    status_text: label(status.as_str()),
                    open: matches!(
                        status,
                        AssignmentStatus::Pending
                            | AssignmentStatus::InProgress
                            | AssignmentStatus::Overdue
                    ),
                    progress: format!("{} / {}", row.completed_modules, row.total_modules),
                    progress_value: if row.total_modules > 0 {
                        row.completed_modules * 100 / row.total_modules
                    } else {
                        0
                    },
                    assigned: layout.time(&row.assigned_at),
                    due: layout.time_or(&row.due_at, "–"),
                    completed: layout.time_or(&row.completed_at, "–"),
                    cancel_reason: row.cancel_reason.clone().unwrap_or_default(),
                }
            })
            .collect(),
        next_url,
        first_url: after.map(|_| format!("{base}#assignments")),
        back,
        layout,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn import_keeps_valid_rows_and_names_the_lines_of_the_others() {
        let (users, problems) = parse_import(
            b"Email,Name\nalice@example.com,Alice\nnot-an-email,Bob\n,\ncarol@example.com,\n",
        )
        .unwrap();
        assert_eq!(users.len(), 2);
        assert_eq!(users[0].name.as_deref(), Some("Alice"));
        assert_eq!(users[1].name, None);
        assert_eq!(problems.len(), 1);
        assert_eq!(problems[0].line, 3);
        assert_eq!(problems[0].email, "not-an-email");
        assert!(parse_import(b"name\nx\n").is_err());
    }
}
