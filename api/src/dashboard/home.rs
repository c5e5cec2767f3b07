//! The home page, where a signed-in account lands: what needs attention in the organization
//! (design §16) — open assignments overdue (with the days overdue) and due within 7 days across
//! every flow, counted exactly; completions expiring within as many days; failing webhook endpoints; rules whose latest backfill failed;
//! assignments that could not be persisted. Each item links to the page where it is fixed: the
//! person's page, the flow's page, the endpoint's page, the rule's page. The figures come from
//! [`flow_app::attention`].

use askama::Template;
use askama_web::WebTemplate;
use axum::Router;
use axum::extract::State;
use axum::routing::get;
use flow_app::attention::{self, DUE_SOON_DAYS, DueItem};
use flow_common::db::attention::ListedAssignment;

use super::PageResult;
use super::auth::SignedIn;
use super::view::{Layout, Section, count, label, plural};
use crate::state::AppState;

/// Routes of this module.
pub fn router() -> Router<AppState> {
    Router::new().route("/", get(show))
}

/// Whose assignment of which flow a listed row is, with links to both (the cells
/// `assignee_flow_cells.html` draws).
pub struct Listed {
    /// Assignment id.
    pub id: String,
    /// The assignee's page.
    pub user_id: String,
    /// The assignee: name, else e-mail.
    pub who: String,
    pub email: String,
    pub flow_id: String,
    pub flow_name: String,
}

impl Listed {
    fn of(listed: &ListedAssignment) -> Self {
        Self {
            id: listed.id.to_string(),
            user_id: listed.user_id.to_string(),
            who: listed
                .name
                .clone()
                .filter(|name| !name.is_empty())
                .unwrap_or_else(|| listed.email.clone()),
            email: listed.email.clone(),
            flow_id: listed.flow_id.to_string(),
            flow_name: listed.flow_name.clone(),
        }
    }
}

/// An overdue or due-soon assignment as the home page lists it.
pub struct DueRow {
    pub listed: Listed,
    /// Due date.
    pub due: String,
    /// `3 days overdue`, `due today`, `due in 2 days`.
    pub when: String,
    /// Modules completed of all.
    pub progress: String,
    pub status: String,
    /// Status in words.
    pub status_text: String,
}

/// A completion expiring soon.
pub struct ExpiringRow {
    pub listed: Listed,
    /// When the completion expires.
    pub expires: String,
    /// `expires today`, `expires in 3 days`.
    pub when: String,
    /// Whether its renewal is assigned already.
    pub renewal_assigned: bool,
}

/// A failing endpoint.
pub struct EndpointRow {
    pub id: String,
    pub url: String,
    /// Disabled by the service, or failing since.
    pub state: String,
}

/// A rule whose latest backfill failed.
pub struct BackfillRow {
    pub rule_id: String,
    pub rule_name: String,
    /// Why.
    pub error: String,
    /// When.
    pub at: String,
}

/// An assignment that could not be persisted.
pub struct FailedAssignRow {
    pub id: String,
    pub email: String,
    /// The flow's page, when the flow still exists.
    pub flow_id: Option<String>,
    pub flow_name: String,
    pub reason: String,
    pub at: String,
}

#[derive(Template, WebTemplate)]
#[template(path = "dashboard/home.html")]
struct HomePage {
    layout: Layout,
    /// The window of "due soon", in days.
    soon_days: i64,
    overdue_count: String,
    has_overdue: bool,
    /// Whether more are overdue than listed.
    overdue_more: bool,
    due_soon_count: String,
    /// Whether more are due soon than listed.
    due_soon_more: bool,
    overdue: Vec<DueRow>,
    due_soon: Vec<DueRow>,
    expiring_count: String,
    /// Whether more expire soon than listed.
    expiring_more: bool,
    expiring: Vec<ExpiringRow>,
    endpoints: Vec<EndpointRow>,
    backfills: Vec<BackfillRow>,
    failed_assigns_count: String,
    failed_assigns: Vec<FailedAssignRow>,
    /// Whether nothing needs attention at all.
    all_clear: bool,
}

async fn show(State(state): State<AppState>, account: SignedIn) -> PageResult<HomePage> {
    let found = attention::read(&state, account.acting()).await?;
    let layout = Layout::new(&account, Section::Home).await;
    let row = |item: &DueItem, overdue: bool| {
        let assignment = &item.assignment;
        let when = match (overdue, item.days) {
            (true, days) if days <= 0 => "overdue since today".to_owned(),
            (true, days) => format!("{} overdue", plural(days, "day")),
            (false, days) if days <= 0 => "due today".to_owned(),
            (false, days) => format!("due in {}", plural(days, "day")),
        };
        DueRow {
            listed: Listed::of(&assignment.listed),
            due: layout.time(&assignment.due_at),
            when,
            progress: format!(
                "{} / {}",
                assignment.completed_modules, assignment.total_modules
            ),
            status: item.status.as_str().to_owned(),
            status_text: label(item.status.as_str()),
        }
    };
    let overdue: Vec<DueRow> = found.overdue.iter().map(|item| row(item, true)).collect();
    let due_soon: Vec<DueRow> = found.due_soon.iter().map(|item| row(item, false)).collect();
    let (expiring_total, expiring) = &found.expiring;
    let expiring: Vec<ExpiringRow> = expiring
        .iter()
        .map(|(completion, days)| ExpiringRow {
            listed: Listed::of(&completion.listed),
            expires: layout.time(&completion.expires_at),
            when: if *days <= 0 {
                "expires today".to_owned()
            } else {
                format!("expires in {}", plural(*days, "day"))
            },
            renewal_assigned: completion.renewal_id.is_some(),
        })
        .collect();
    let endpoints: Vec<EndpointRow> = found
        .failing_endpoints
        .iter()
        .map(|endpoint| EndpointRow {
            id: endpoint.id.to_string(),
            url: endpoint.url.clone(),
            state: match (&endpoint.disabled_reason, endpoint.failing_since) {
                (Some(reason), _) if !endpoint.enabled => {
                    format!("disabled by the service ({reason})")
                }
                (_, Some(since)) => format!("failing since {}", layout.time(&since)),
                _ => "disabled".to_owned(),
            },
        })
        .collect();
    let backfills: Vec<BackfillRow> = found
        .failed_backfills
        .iter()
        .map(|backfill| BackfillRow {
            rule_id: backfill.rule_id.to_string(),
            rule_name: backfill.rule_name.clone(),
            error: backfill.error.clone().unwrap_or_default(),
            at: layout.time_or(&backfill.finished_at, "–"),
        })
        .collect();
    let (failed_total, failed) = &found.failed_assigns;
    let failed_assigns: Vec<FailedAssignRow> = failed
        .iter()
        .map(|failure| FailedAssignRow {
            id: failure.assignment_id.to_string(),
            email: failure.email.clone().unwrap_or_default(),
            flow_id: failure.flow_id.map(|id| id.to_string()),
            flow_name: failure.flow_name.clone().unwrap_or_default(),
            reason: failure.reason.clone(),
            at: layout.time(&failure.failed_at),
        })
        .collect();
    let counts = found.counts;
    Ok(HomePage {
        soon_days: DUE_SOON_DAYS,
        overdue_count: count(counts.overdue),
        has_overdue: counts.overdue > 0,
        overdue_more: counts.overdue > i64::try_from(overdue.len()).unwrap_or(i64::MAX),
        due_soon_count: count(counts.due_soon),
        due_soon_more: counts.due_soon > i64::try_from(due_soon.len()).unwrap_or(i64::MAX),
        all_clear: counts.overdue == 0
            && counts.due_soon == 0
            && *expiring_total == 0
            && endpoints.is_empty()
            && backfills.is_empty()
            && *failed_total == 0,
        overdue,
        due_soon,
        expiring_count: count(*expiring_total),
        expiring_more: *expiring_total > i64::try_from(expiring.len()).unwrap_or(i64::MAX),
        expiring,
        endpoints,
        backfills,
        failed_assigns_count: count(*failed_total),
        failed_assigns,
        layout,
    })
}
