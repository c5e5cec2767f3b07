//! Settings → Audit log: who generated, revoked or rolled keys, created, changed, rotated or
//! deleted webhook endpoints, and invited, removed, disabled, enabled or changed the role of
//! people (or reset them with a new link), from the dashboard, the API or `flowctl`. Each action
//! is shown in the words of [`flow_domain::audit::AuditAction::description`]; a stored action
//! this build does not know fails the page (500, the log naming it), as an unknown event type of
//! an endpoint does.

use askama::Template;
use askama_web::WebTemplate;
use axum::Router;
use axum::extract::State;
use axum::routing::get;
use serde::Deserialize;

use super::auth::SignedIn;
use super::view::{Layout, Section};
use super::{HtmlQuery, PageResult};
use crate::state::AppState;

/// Events per page.
const PAGE_SIZE: i64 = 50;

/// Routes of this module.
pub fn router() -> Router<AppState> {
    Router::new().route("/settings/audit", get(list))
}

/// An event as the log shows it.
pub struct EventRow {
    /// When.
    pub at: String,
    /// Who.
    pub actor: String,
    /// Through what: Dashboard, API or flowctl.
    pub via: &'static str,
    /// What, in words ([`flow_domain::audit::AuditAction::description`]).
    pub action: &'static str,
    /// The id of what changed.
    pub target: String,
    /// Its name or address.
    pub detail: String,
}

#[derive(Template, WebTemplate)]
#[template(path = "dashboard/settings_audit.html")]
struct AuditPage {
    layout: Layout,
    events: Vec<EventRow>,
    next: Option<i64>,
    paged: bool,
}

/// Query of the log.
#[derive(Debug, Default, Deserialize)]
pub struct AuditQuery {
    /// Show events older than this one.
    pub before: Option<i64>,
}

async fn list(
    State(state): State<AppState>,
    account: SignedIn,
    HtmlQuery(query): HtmlQuery<AuditQuery>,
) -> PageResult<AuditPage> {
    let layout = Layout::new(&account, Section::Settings).await;
    let mut rows = flow_app::audit::list(
        &state,
        account.acting(),
        Default::default(),
        query.before,
        PAGE_SIZE + 1,
    )
    .await?;
    let next = if rows.len() > usize::try_from(PAGE_SIZE).unwrap_or(usize::MAX) {
        rows.truncate(usize::try_from(PAGE_SIZE).unwrap_or(usize::MAX));
        rows.last().map(|row| row.id)
    } else {
        None
    };
    Ok(AuditPage {
        events: rows
            .iter()
            .map(|row| EventRow {
                at: layout.time(&row.occurred_at),
                actor: row.actor.clone(),
                via: match row.actor_kind.as_str() {
                    "account" => "Dashboard",
                    "api_key" => "API",
                    "scheduler" => "Scheduler",
                    "event_source" => "Event source",
                    _ => "flowctl",
                },
                action: row.action.description(),
                target: row.target.clone(),
                detail: row.detail.clone(),
            })
            .collect(),
        layout,
        next,
        paged: query.before.is_some(),
    })
}
