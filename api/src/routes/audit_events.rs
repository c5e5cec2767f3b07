//! The organization's audit trail over the API (issue 39): the rows the dashboard's Settings →
//! Audit log shows, filtered by actor, action, target and time, newest first in keyset pages.

use axum::Json;
use axum::extract::State;
use chrono::{DateTime, Utc};
use flow_app::ratelimit::{Operation, page_cost};
use flow_common::db::audit::{AuditEvent, AuditFilter};
use flow_domain::audit::AuditAction;
use flow_domain::{DayBound, Invalid, parse_date_input, timestamp};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::pagination::{Page, PageQuery};
use crate::error::{ApiError, ErrorBody, RateHeaders};
use crate::extract::{ApiQuery, Auth};
use crate::state::AppState;

/// Longest `actor` or `target` filter, in characters.
pub const MAX_FILTER_CHARS: usize = 320;

/// Routes of this module.
pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(list_audit_events))
}

/// One recorded change.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AuditEventView {
    /// Position in the trail: larger is later.
    pub id: i64,
    /// When it happened.
    #[serde(serialize_with = "timestamp::serialize")]
    #[schema(value_type = String, format = DateTime)]
    pub occurred_at: DateTime<Utc>,
    /// Through what: `account` (the dashboard), `api_key`, `flowctl`, `scheduler` or
    /// `event_source` (a signed delivery to `/v1/events/inbound/{sourceId}`).
    pub actor_kind: String,
    /// Who: the account's e-mail, the API key's prefix, `flowctl`, `scheduler` or
    /// `event source evs_…`.
    pub actor: String,
    /// What was done, e.g. `assignment.cancelled`, `key.created`.
    pub action: AuditAction,
    /// The same in words, as the dashboard shows it.
    pub description: &'static str,
    /// The id of what changed (`asg_…`, `key_…`, `whe_…`, …).
    pub target: String,
    /// Its name, address or the reason given.
    pub detail: String,
}

fn view(row: AuditEvent) -> AuditEventView {
    AuditEventView {
        id: row.id,
        occurred_at: row.occurred_at,
        actor_kind: row.actor_kind,
        actor: row.actor,
        description: row.action.description(),
        action: row.action,
        target: row.target,
        detail: row.detail,
    }
}

/// Filters of the audit trail.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(rename_all = "camelCase")]
pub struct AuditEventFilter {
    /// Only changes made by this actor (an account's e-mail, an API key's prefix, `flowctl`,
    /// `scheduler`), exactly; at most 320 characters.
    pub actor: Option<String>,
    /// Only this action (`key.created`, `assignment.cancelled`, …).
    pub action: Option<String>,
    /// Only changes of this target (an id such as `asg_…`), exactly; at most 320 characters.
    pub target: Option<String>,
    /// Only changes at or after this instant (RFC 3339), or from the start of this day
    /// (`YYYY-MM-DD`, in the organization's time zone).
    pub since: Option<String>,
    /// Only changes at or before this instant (RFC 3339), or until the end of this day
    /// (`YYYY-MM-DD`, in the organization's time zone).
    pub until: Option<String>,
}

/// A text filter: trimmed, not empty, at most [`MAX_FILTER_CHARS`].
fn text_filter<'a>(field: &str, text: Option<&'a str>) -> Result<Option<&'a str>, Invalid> {
    match text.map(str::trim) {
        None => Ok(None),
        Some("") => Err(Invalid(format!("{field} must not be empty when given"))),
        Some(text) if text.chars().count() > MAX_FILTER_CHARS => Err(Invalid(format!(
            "{field} must be at most {MAX_FILTER_CHARS} characters"
        ))),
        Some(text) => Ok(Some(text)),
    }
}

/// List the audit trail.
///
/// Every recorded change of the organization — keys, webhook endpoints, dashboard accounts,
/// users and groups (SCIM), enrollment rules, assignment changes and cancellations, flow edits,
/// settings — by whom and through what, newest first, `limit` per page (default 100, at most
/// 1,000) with `nextCursor`. The rows are the dashboard's Settings → Audit log; pages never
/// repeat or skip a row. A page counts as one read request per started 100 of its `limit`.
#[utoipa::path(
    get,
    path = "/v1/audit-events",
    tag = "audit",
    params(AuditEventFilter, PageQuery),
    responses(
        (status = 200, description = "A page of the audit trail, newest first", body = Page<AuditEventView>),
        (status = 400, description = "Invalid filter or cursor", body = ErrorBody),
        (status = 429, description = "Read limit exceeded", body = ErrorBody),
    )
)]
pub async fn list_audit_events(
    State(state): State<AppState>,
    auth: Auth,
    ApiQuery(page): ApiQuery<PageQuery>,
    ApiQuery(filter): ApiQuery<AuditEventFilter>,
) -> Result<(RateHeaders, Json<Page<AuditEventView>>), ApiError> {
    let limit = page.limit()?;
    let before = page.cursor(|text| text.parse::<i64>().ok().filter(|id| *id > 0))?;
    let zone = auth.zone;
    let action = filter
        .action
        .as_deref()
        .map(|text| AuditAction::parse_field("action", text.trim()))
        .transpose()?;
    let since = filter
        .since
        .as_deref()
        .map(|text| parse_date_input("since", text, zone, DayBound::Start))
        .transpose()?;
    // `until` is inclusive: an instant up to its microsecond, a day to its end.
    let before_time = filter
        .until
        .as_deref()
        .map(|text| {
            parse_date_input("until", text, zone, DayBound::End).map(|at| {
                if DateTime::parse_from_rfc3339(text.trim()).is_ok() {
                    at + chrono::Duration::microseconds(1)
                } else {
                    at + chrono::Duration::seconds(1)
                }
            })
        })
        .transpose()?;
    if let (Some(since), Some(before_time)) = (since, before_time)
        && before_time <= since
    {
        return Err(Invalid::new("until must not be before since").into());
    }
    let filter = AuditFilter {
        actor: text_filter("actor", filter.actor.as_deref())?,
        action,
        target: text_filter("target", filter.target.as_deref())?,
        since,
        before_time,
    };
    let rate = state
        .limiter
        .check(&auth, Operation::Read, page_cost(limit))
        .await?;
    let rows = flow_app::audit::list(&state, auth.acting(), filter, before, limit + 1).await?;
    let page = Page::from_rows(rows, limit, |row| row.id.to_string(), view);
    Ok((RateHeaders(rate), Json(page)))
}
