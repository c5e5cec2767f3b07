//! Reads and bulk actions only the dashboard needs: webhook endpoint health, one delivery of the
//! log and "recover every failed delivery since T", per-flow counts, user search, the
//! assignments of a flow searched by e-mail, and the list of schedules.

use chrono::{DateTime, Utc};
use flow_domain::AssignmentStatus;
use flow_domain::ids::{
    AssignmentId, DeliveryId, FlowId, GroupId, OrgId, ScheduleId, UserId, WebhookEndpointId,
};
use sqlx::{FromRow, PgConnection, PgExecutor};

use super::assignments::{AssignmentRecord, ListQuery, list_where};
use super::schedules::{RECORD_SELECT, ScheduleRecord};
use super::users::User;
use super::webhooks::log::{DELIVERY_COLUMNS, DeliveryRecord};

/// An endpoint's health over the last 24 hours.
#[derive(Debug, Clone, FromRow)]
pub struct EndpointHealth {
    /// Endpoint.
    pub endpoint_id: WebhookEndpointId,
    /// Attempts made in the last 24 hours.
    pub attempts: i64,
    /// Of those, answered 2xx.
    pub succeeded: i64,
    /// The latest failed attempt in the last 24 hours.
    pub last_failure_at: Option<DateTime<Utc>>,
    /// Its status code, when the endpoint answered.
    pub last_failure_status: Option<i32>,
    /// Its transport error, when it did not.
    pub last_failure_error: Option<String>,
}

impl EndpointHealth {
    /// Share of successful attempts in percent, one decimal; `None` without attempts.
    pub fn success_rate(&self) -> Option<f64> {
        (self.attempts > 0)
            .then(|| (self.succeeded as f64 * 1000.0 / self.attempts as f64).round() / 10.0)
    }
}

/// The 24-hour health of some endpoints of an organization (endpoints without attempts are
/// absent). Attempts are reached through the deliveries of the last three days, which covers the
/// whole retry schedule and keeps the read on the deliveries' endpoint index.
pub async fn endpoint_health<'e>(
    executor: impl PgExecutor<'e>,
    org_id: OrgId,
    endpoints: &[WebhookEndpointId],
) -> Result<Vec<EndpointHealth>, sqlx::Error> {
    sqlx::query_as(
        "WITH recent AS (
            SELECT d.endpoint_id, a.attempted_at, a.status_code, a.error,
                   (a.status_code BETWEEN 200 AND 299) AS ok
            FROM webhook_deliveries d JOIN webhook_attempts a ON a.delivery_id = d.id
            WHERE d.org_id = $1 AND d.endpoint_id = ANY ($2)
              AND d.created_at > now() - interval '3 days'
              AND a.attempted_at > now() - interval '24 hours'
         ), last_failure AS (
            SELECT DISTINCT ON (endpoint_id) endpoint_id, attempted_at, status_code, error
            FROM recent WHERE NOT COALESCE(ok, false)
            ORDER BY endpoint_id, attempted_at DESC
         )
         SELECT r.endpoint_id, count(*) AS attempts,
                count(*) FILTER (WHERE r.ok) AS succeeded,
                f.attempted_at AS last_failure_at, f.status_code AS last_failure_status,
                f.error AS last_failure_error
         FROM recent r LEFT JOIN last_failure f ON f.endpoint_id = r.endpoint_id
         GROUP BY r.endpoint_id, f.attempted_at, f.status_code, f.error",
    )
    .bind(org_id)
    .bind(endpoints)
    .fetch_all(executor)
    .await
}

/// One delivery of an endpoint of the organization.
pub async fn delivery<'e>(
    executor: impl PgExecutor<'e>,
    org_id: OrgId,
    endpoint_id: WebhookEndpointId,
    id: DeliveryId,
) -> Result<Option<DeliveryRecord>, sqlx::Error> {
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {DELIVERY_COLUMNS} FROM webhook_deliveries d
         WHERE d.id = $1 AND d.endpoint_id = $2 AND d.org_id = $3"
    )))
    .bind(id)
    .bind(endpoint_id)
    .bind(org_id)
    .fetch_optional(executor)
    .await
}

/// How many deliveries of the endpoint failed (no attempts left) among those created since
/// `since`.
pub async fn count_failed_since<'e>(
    executor: impl PgExecutor<'e>,
    org_id: OrgId,
    endpoint_id: WebhookEndpointId,
    since: DateTime<Utc>,
) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT count(*) FROM webhook_deliveries
         WHERE endpoint_id = $1 AND org_id = $2 AND status = 'failed' AND created_at >= $3",
    )
    .bind(endpoint_id)
    .bind(org_id)
    .bind(since)
    .fetch_one(executor)
    .await
}

/// Queues failed deliveries of the endpoint created since `since` for one more attempt now (as a
/// manual retry does for one), the oldest first and at most `limit`, and wakes the
/// webhook-workers. Returns how many. Deliveries another recovery is queueing at the same moment
/// are skipped, not waited for.
pub async fn recover_failed_since(
    connection: &mut PgConnection,
    org_id: OrgId,
    endpoint_id: WebhookEndpointId,
    since: DateTime<Utc>,
    limit: i64,
) -> Result<u64, sqlx::Error> {
    let recovered = sqlx::query(
        "UPDATE webhook_deliveries SET status = 'pending', next_attempt_at = now(),
                lease_until = NULL
         WHERE id IN (
            SELECT id FROM webhook_deliveries
            WHERE endpoint_id = $1 AND org_id = $2 AND status = 'failed' AND created_at >= $3
            ORDER BY created_at, id
            LIMIT $4
            FOR UPDATE SKIP LOCKED)",
    )
    .bind(endpoint_id)
    .bind(org_id)
    .bind(since)
    .bind(limit)
    .execute(&mut *connection)
    .await?
    .rows_affected();
    if recovered > 0 {
        super::notify(&mut *connection, super::WEBHOOK_CHANNEL, "").await?;
    }
    Ok(recovered)
}

/// Assignment counts of one flow as of a reading time.
#[derive(Debug, Clone, Copy, FromRow)]
pub struct FlowCounts {
    /// Flow.
    pub flow_id: FlowId,
    /// Every assignment.
    pub total: i64,
    pub completed: i64,
    /// Past due and not completed.
    pub overdue: i64,
}

/// The counts of some flows of an organization (flows without assignments are absent), with
/// overdue read at `now` as reports read it: from the report rollups, so a page of flows costs
/// the same whatever their number of assignments. Flows of other organizations are left out.
pub async fn flow_counts(
    connection: &mut sqlx::PgConnection,
    org_id: OrgId,
    flows: &[FlowId],
    now: DateTime<Utc>,
) -> Result<Vec<FlowCounts>, sqlx::Error> {
    let owned: Vec<FlowId> =
        sqlx::query_scalar("SELECT id FROM flows WHERE org_id = $1 AND id = ANY ($2)")
            .bind(org_id)
            .bind(flows)
            .fetch_all(&mut *connection)
            .await?;
    let figures = super::rollups::lifetime_figures(&mut *connection, &owned, now).await?;
    Ok(owned
        .into_iter()
        .zip(figures)
        .filter(|(_, figures)| figures.total > 0)
        .map(|(flow_id, figures)| FlowCounts {
            flow_id,
            total: figures.total,
            completed: figures.completed,
            overdue: figures.overdue,
        })
        .collect())
}

/// A page of an organization's users whose e-mail or name contains `query` (case-insensitive;
/// every user without one), in id order after `after`.
pub async fn search_users<'e>(
    executor: impl PgExecutor<'e>,
    org_id: OrgId,
    query: Option<&str>,
    after: Option<UserId>,
    limit: i64,
) -> Result<Vec<User>, sqlx::Error> {
    sqlx::query_as(
        "SELECT id, org_id, email, name, active, created_at FROM users
         WHERE org_id = $1 AND ($2::uuid IS NULL OR id > $2)
           AND ($3::text IS NULL
                OR strpos(email_normalized, lower($3)) > 0
                OR strpos(lower(COALESCE(name, '')), lower($3)) > 0)
         ORDER BY id LIMIT $4",
    )
    .bind(org_id)
    .bind(after)
    .bind(query)
    .bind(limit)
    .fetch_all(executor)
    .await
}

/// A page of a flow's assignments in (`assignedAt`, id) order after the cursor: those whose
/// assignee e-mail contains `email` (case-insensitive) and whose status at `now` is `status`,
/// when given.
#[allow(clippy::too_many_arguments)]
pub async fn flow_assignments<'e>(
    executor: impl PgExecutor<'e>,
    org_id: OrgId,
    flow_id: FlowId,
    email: Option<&str>,
    status: Option<AssignmentStatus>,
    after: Option<(DateTime<Utc>, AssignmentId)>,
    limit: i64,
    now: DateTime<Utc>,
) -> Result<Vec<AssignmentRecord>, sqlx::Error> {
    let query = ListQuery {
        flow_id: Some(flow_id),
        email_normalized: None,
        email_containing: email,
        status,
        include_cancelled: false,
    };
    list_where(executor, org_id, &query, after, limit, now).await
}

/// A page of an organization's live schedules, newest first, before `before`, with statuses
/// read at `now`.
pub async fn list_schedules<'e>(
    executor: impl PgExecutor<'e>,
    org_id: OrgId,
    before: Option<ScheduleId>,
    limit: i64,
    now: DateTime<Utc>,
) -> Result<Vec<ScheduleRecord>, sqlx::Error> {
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "{RECORD_SELECT}
         WHERE s.org_id = $1 AND s.deleted_at IS NULL AND ($2::uuid IS NULL OR s.id < $2)
         ORDER BY s.id DESC LIMIT $4"
    )))
    .bind(org_id)
    .bind(before)
    .bind(now)
    .bind(limit)
    .fetch_all(executor)
    .await
}

/// A team the assign form offers: a department (`kind` `department`, `key` its name) or a group
/// (`group`, `key` its id, `grp_…`), with its active members.
#[derive(Debug, Clone, FromRow)]
pub struct TeamChoice {
    pub kind: String,
    pub key: String,
    pub label: String,
    pub members: i64,
}

/// Most teams the assign form lists.
pub const MAX_TEAM_CHOICES: i64 = 500;

/// The organization's departments (as identity providers set them on active users) and groups,
/// each with its active members, departments first, by name; at most [`MAX_TEAM_CHOICES`].
pub async fn team_choices<'e>(
    executor: impl PgExecutor<'e>,
    org_id: OrgId,
) -> Result<Vec<TeamChoice>, sqlx::Error> {
    sqlx::query_as(
        "SELECT kind, key, label, members FROM (
             SELECT 'department' AS kind, department AS key, department AS label,
                    count(*) AS members
             FROM users
             WHERE org_id = $1 AND active AND erased_at IS NULL AND department <> ''
             GROUP BY department
             UNION ALL
             SELECT 'group', 'grp_' || replace(g.id::text, '-', ''), g.display_name, count(u.id)
             FROM user_groups g
             LEFT JOIN user_group_members m ON m.group_id = g.id
             LEFT JOIN users u ON u.id = m.user_id AND u.active AND u.erased_at IS NULL
             WHERE g.org_id = $1
             GROUP BY g.id, g.display_name
         ) teams
         ORDER BY kind, lower(label), key
         LIMIT $2",
    )
    .bind(org_id)
    .bind(MAX_TEAM_CHOICES)
    .fetch_all(executor)
    .await
}

/// The e-mails of up to `limit` active members of a department, by e-mail.
pub async fn department_emails<'e>(
    executor: impl PgExecutor<'e>,
    org_id: OrgId,
    department: &str,
    limit: i64,
) -> Result<Vec<String>, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT email FROM users
         WHERE org_id = $1 AND active AND erased_at IS NULL AND department = $2
         ORDER BY email LIMIT $3",
    )
    .bind(org_id)
    .bind(department)
    .bind(limit)
    .fetch_all(executor)
    .await
}

/// The e-mails of up to `limit` active members of a group of the organization, by e-mail.
pub async fn group_emails<'e>(
    executor: impl PgExecutor<'e>,
    org_id: OrgId,
    group: GroupId,
    limit: i64,
) -> Result<Vec<String>, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT u.email FROM user_group_members m
         JOIN users u ON u.id = m.user_id
         WHERE m.org_id = $1 AND m.group_id = $2 AND u.active AND u.erased_at IS NULL
         ORDER BY u.email LIMIT $3",
    )
    .bind(org_id)
    .bind(group)
    .bind(limit)
    .fetch_all(executor)
    .await
}
