//! Changing and cancelling assignments from a flow's assignment table and a person's page: per
//! row (a new due date; cancel with an optional reason) and for the rows selected (cancel them,
//! or give them a new due date). Admins only. Every action goes through [`flow_app::changes`],
//! as the API's do: queued durably, applied exactly once with one `flow.updated` or
//! `flow.cancelled`, audited with the signed-in account as the actor, and counted against the
//! organization's write limit (one write per assignment). The page the form came from is shown
//! again with a notice of what happened to each assignment.

use std::collections::BTreeMap;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::post;
use chrono::Utc;
use flow_app::ServiceError;
use flow_app::changes::{self, ChangeFields, ChangeInput, Target};
use flow_app::ratelimit::{Operation, RateLimitError};
use serde::Deserialize;

use super::auth::SignedIn;
use super::session::flash;
use super::view::plural;
use super::{HtmlForm, PageError, PageResult};
use crate::state::AppState;

/// Most assignments one bulk action of the dashboard takes (a page of a person's assignments).
pub const MAX_SELECTED: usize = 100;

/// Longest return address a form may carry.
const MAX_BACK_CHARS: usize = 2_000;

/// Routes of this module.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/assignments/{id}/cancel", post(cancel))
        .route("/assignments/{id}/due-date", post(change_due_date))
        .route("/assignments/bulk", post(bulk))
}

/// A row's cancel form.
#[derive(Debug, Deserialize)]
pub struct CancelForm {
    /// Why (optional, at most 500 characters).
    #[serde(default)]
    pub reason: String,
    /// The page to show again.
    #[serde(default)]
    pub back: String,
}

/// A row's due date form.
#[derive(Debug, Deserialize)]
pub struct DueDateForm {
    /// `YYYY-MM-DD` (the end of that day in the organization's zone) or RFC 3339.
    #[serde(default)]
    pub due_date: String,
    /// The page to show again.
    #[serde(default)]
    pub back: String,
}

/// The form of the rows selected.
#[derive(Debug, Deserialize)]
pub struct BulkForm {
    /// The assignments selected (their checkboxes).
    #[serde(default)]
    pub ids: Vec<String>,
    /// `cancel` or `due_date` (the button pressed).
    #[serde(default)]
    pub action: String,
    /// Why, for `cancel` (optional).
    #[serde(default)]
    pub reason: String,
    /// The new due date, for `due_date`.
    #[serde(default)]
    pub due_date: String,
    /// The page to show again.
    #[serde(default)]
    pub back: String,
}

/// Where to go back to: a dashboard page of this service, else the home page.
fn back_to(back: &str) -> String {
    let back = back.trim();
    let safe = (back == "/dashboard" || back.starts_with("/dashboard/"))
        && !back.starts_with("//")
        && !back.contains('\\')
        && !back.starts_with("/dashboard/sign-")
        && back.chars().count() <= MAX_BACK_CHARS
        && !back.chars().any(char::is_control);
    if safe {
        back.to_owned()
    } else {
        "/dashboard".to_owned()
    }
}

/// Takes `count` write requests of the organization's allowance, or says when to try again.
async fn charge(state: &AppState, account: &SignedIn, count: usize) -> Result<(), PageError> {
    let cost = u32::try_from(count).unwrap_or(u32::MAX);
    match state
        .limiter
        .check(&account.caller, Operation::Write, cost)
        .await
    {
        Ok(_) => Ok(()),
        Err(error @ RateLimitError::Exceeded { retry_after, .. }) => Err(PageError::too_many(
            format!(
                "Nothing was changed: {error}. Changing {count} assignment(s) costs {cost} write \
                 request(s); try again later, or select fewer."
            ),
            retry_after,
        )),
        Err(other) => Err(ServiceError::from(other).into()),
    }
}

/// The reason as the service checks it (a refusal is a 400 page).
fn reason(text: String) -> Result<Option<String>, PageError> {
    let text = (!text.trim().is_empty()).then_some(text);
    Ok(changes::parse_reason(text)?)
}

/// The due date change as the service checks it (a refusal is a 400 page naming the rule).
fn due_date_change(account: &SignedIn, text: &str) -> Result<ChangeInput, PageError> {
    if text.trim().is_empty() {
        return Err(PageError::bad_request("Choose the new due date."));
    }
    ChangeInput::parse(
        ChangeFields {
            due_date: Some(Some(text.trim().to_owned())),
            ..ChangeFields::default()
        },
        account.zone(),
        Utc::now(),
    )
    .map_err(|error| {
        PageError::bad_request(format!(
            "Nothing was changed: {}.",
            PageError::from(error).message
        ))
    })
}

/// The outcomes of an action, counted: how many succeeded, and the refusals by their reason.
struct Outcomes {
    succeeded: usize,
    refused: BTreeMap<String, usize>,
}

impl Outcomes {
    fn of<T>(results: impl IntoIterator<Item = Result<T, ServiceError>>) -> Self {
        let mut outcomes = Self {
            succeeded: 0,
            refused: BTreeMap::new(),
        };
        for result in results {
            match result {
                Ok(_) => outcomes.succeeded += 1,
                Err(error) => {
                    *outcomes
                        .refused
                        .entry(PageError::from(error).message)
                        .or_default() += 1;
                }
            }
        }
        outcomes
    }

    /// `2 assignments cancelled. 1 not: the assignment is completed …`, and the notice's kind.
    fn notice(&self, done: &str) -> (&'static str, String) {
        let mut text = format!(
            "{} {done}.",
            plural(
                i64::try_from(self.succeeded).unwrap_or(i64::MAX),
                "assignment"
            )
        );
        for (reason, count) in &self.refused {
            text.push_str(&format!(" {count} not: {reason}."));
        }
        let kind = match (self.succeeded, self.refused.is_empty()) {
            (_, true) => "success",
            (0, false) => "error",
            _ => "warning",
        };
        (kind, text)
    }
}

/// Stores the notice of `outcomes` and goes back.
async fn done(account: &SignedIn, outcomes: &Outcomes, what: &str, back: &str) -> Response {
    let (kind, text) = outcomes.notice(what);
    flash(&account.session, kind, text).await;
    Redirect::to(&back_to(back)).into_response()
}

async fn cancel(
    State(state): State<AppState>,
    account: SignedIn,
    Path(id): Path<String>,
    HtmlForm(form): HtmlForm<CancelForm>,
) -> PageResult {
    account.require_admin()?;
    let reason = reason(form.reason)?;
    charge(&state, &account, 1).await?;
    let result = changes::cancel(&state, account.acting(), &id, reason, None).await;
    if let Err(ServiceError::NotFound(_)) = &result {
        return Err(PageError::not_found());
    }
    let outcomes = Outcomes::of([result]);
    Ok(done(&account, &outcomes, "cancelled", &form.back).await)
}

async fn change_due_date(
    State(state): State<AppState>,
    account: SignedIn,
    Path(id): Path<String>,
    HtmlForm(form): HtmlForm<DueDateForm>,
) -> PageResult {
    account.require_admin()?;
    let input = due_date_change(&account, &form.due_date)?;
    charge(&state, &account, 1).await?;
    let result = changes::update(&state, account.acting(), &id, input, None).await;
    if let Err(ServiceError::NotFound(_)) = &result {
        return Err(PageError::not_found());
    }
    let outcomes = Outcomes::of([result]);
    Ok(done(&account, &outcomes, "given the new due date", &form.back).await)
}

async fn bulk(
    State(state): State<AppState>,
    account: SignedIn,
    HtmlForm(form): HtmlForm<BulkForm>,
) -> PageResult {
    account.require_admin()?;
    let mut ids: Vec<String> = Vec::with_capacity(form.ids.len());
    for id in form.ids {
        let id = id.trim().to_owned();
        if !id.is_empty() && !ids.contains(&id) {
            ids.push(id);
        }
    }
    if ids.is_empty() {
        return Err(PageError::bad_request(
            "Select the assignments first (the boxes at the start of their rows).",
        ));
    }
    if ids.len() > MAX_SELECTED {
        return Err(PageError::bad_request(format!(
            "Select at most {MAX_SELECTED} assignments at a time ({} were selected).",
            ids.len()
        )));
    }
    match form.action.as_str() {
        "cancel" => {
            let reason = reason(form.reason)?;
            charge(&state, &account, ids.len()).await?;
            let targets = ids.into_iter().map(|id| Ok(Target::Id(id))).collect();
            let results =
                changes::cancel_many(&state, account.acting(), targets, reason, None).await;
            let outcomes = Outcomes::of(results);
            Ok(done(&account, &outcomes, "cancelled", &form.back).await)
        }
        "due_date" => {
            let input = due_date_change(&account, &form.due_date)?;
            charge(&state, &account, ids.len()).await?;
            let mut results = Vec::with_capacity(ids.len());
            for id in &ids {
                results
                    .push(changes::update(&state, account.acting(), id, input.clone(), None).await);
            }
            let outcomes = Outcomes::of(results);
            Ok(done(&account, &outcomes, "given the new due date", &form.back).await)
        }
        _ => Err(PageError::new(
            StatusCode::BAD_REQUEST,
            "Choose what to do with the selected assignments: cancel them or change their due \
             date.",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_dashboard_pages_are_gone_back_to() {
        assert_eq!(
            back_to("/dashboard/flows/flow_1?status=overdue#assignments"),
            "/dashboard/flows/flow_1?status=overdue#assignments"
        );
        assert_eq!(back_to("/dashboard"), "/dashboard");
        for bad in [
            "",
            "https://evil.example/dashboard",
            "//evil.example/dashboard",
            "/dashboardx",
            "/dashboard/sign-out",
            "/dashboard/\\evil",
            "/other",
        ] {
            assert_eq!(back_to(bad), "/dashboard", "{bad}");
        }
    }

    #[test]
    fn outcomes_are_counted_by_reason() {
        let outcomes = Outcomes::of::<()>([
            Ok(()),
            Ok(()),
            Err(ServiceError::Conflict("the assignment is completed".into())),
        ]);
        let (kind, text) = outcomes.notice("cancelled");
        assert_eq!(kind, "warning");
        assert!(text.starts_with("2 assignments cancelled."), "{text}");
        assert!(
            text.contains("1 not: the assignment is completed."),
            "{text}"
        );
    }
}
