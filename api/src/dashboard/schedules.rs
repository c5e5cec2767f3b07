//! Schedules: the organization's recurring (and one-off) assignments, newest first, with their
//! next occurrence and the status of the current one; admins cancel them (no further
//! occurrences; assignments already made stay).

use askama::Template;
use askama_web::WebTemplate;
use axum::Router;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Redirect};
use axum::routing::{get, post};
use chrono::Utc;
use flow_app::schedules as service;
use flow_domain::ids::ScheduleId;
use flow_domain::recurrence::Recurrence;
use serde::Deserialize;

use super::auth::SignedIn;
use super::session::flash;
use super::view::{Layout, Section, label};
use super::{HtmlQuery, PageError, PageResult};
use crate::state::AppState;

/// Schedules per page.
const PAGE_SIZE: i64 = 50;

/// Routes of this module.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/schedules", get(list))
        .route("/schedules/{id}/cancel", post(cancel))
}

/// A schedule in the list.
pub struct ScheduleRow {
    pub id: String,
    /// Flow id.
    pub flow_id: String,
    /// Flow name.
    pub flow: String,
    /// Assignee.
    pub email: String,
    /// Next occurrence, or when the one-off ran.
    pub next: String,
    /// Repetition in words.
    pub recurrence: String,
    /// Occurrences so far.
    pub occurrences: i32,
    /// Due offset.
    pub due: String,
    /// Status of the current occurrence.
    pub status: String,
    /// In words.
    pub status_text: String,
    /// Whether more occurrences will come.
    pub active: bool,
}

#[derive(Template, WebTemplate)]
#[template(path = "dashboard/schedules.html")]
struct SchedulesPage {
    layout: Layout,
    schedules: Vec<ScheduleRow>,
    next: Option<String>,
    paged: bool,
}

/// Query of the list.
#[derive(Debug, Default, Deserialize)]
pub struct ScheduleQuery {
    /// Show schedules older than this one.
    pub before: Option<String>,
}

async fn list(
    State(state): State<AppState>,
    account: SignedIn,
    HtmlQuery(query): HtmlQuery<ScheduleQuery>,
) -> PageResult<SchedulesPage> {
    let layout = Layout::new(&account, Section::Schedules).await;
    let before = query.before.as_deref().and_then(ScheduleId::parse);
    let mut rows =
        service::list(&state, account.acting(), before, PAGE_SIZE + 1, Utc::now()).await?;
    let page_size = usize::try_from(PAGE_SIZE).unwrap_or(usize::MAX);
    let next = if rows.len() > page_size {
        rows.truncate(page_size);
        rows.last().map(|row| row.id.to_string())
    } else {
        None
    };
    Ok(SchedulesPage {
        schedules: rows
            .iter()
            .map(|row| ScheduleRow {
                id: row.id.to_string(),
                flow_id: row.flow_id.to_string(),
                flow: row.flow_name.clone(),
                email: row.assignee_email.clone(),
                next: if row.active {
                    layout.time(&row.scheduled_at)
                } else {
                    "Done".to_owned()
                },
                recurrence: if row.recurrence == Recurrence::None {
                    "Once".to_owned()
                } else {
                    label(row.recurrence.as_str())
                },
                occurrences: row.occurrence,
                due: row
                    .due_in_days
                    .map_or_else(|| "–".to_owned(), |days| format!("{days} days after")),
                status: row.status.as_str().to_owned(),
                status_text: label(row.status.as_str()),
                active: row.active,
            })
            .collect(),
        layout,
        next,
        paged: before.is_some(),
    })
}

async fn cancel(
    State(state): State<AppState>,
    account: SignedIn,
    Path(id): Path<String>,
) -> PageResult {
    account.require_admin()?;
    let id = ScheduleId::parse(&id).ok_or_else(PageError::not_found)?;
    service::cancel(&state, account.acting(), id).await?;
    flash(
        &account.session,
        "success",
        "The schedule is cancelled; assignments it already made stay.",
    )
    .await;
    Ok(Redirect::to("/dashboard/schedules").into_response())
}
