//! What needs attention in an organization (the dashboard's home page, design §16): its open
//! assignments overdue or due soon (counted exactly, and the most urgent listed), its webhook
//! endpoints that fail or were disabled, its enrollment backfills whose latest run failed, and
//! its assignments that could not be persisted (a bulk or CSV assign whose command was
//! dead-lettered), and its completions whose validity ends soon (expiring).
//!
//! The due reads stay on the partial index `assignments_open_due_by_org_idx` (migration 0245):
//! one range of `(org_id, due_at, id)` per count or list, whatever the organization's number of
//! completed or undated assignments.

use chrono::{DateTime, Utc};
use flow_domain::AssignmentStatus;
use flow_domain::ids::{
    AssignmentId, BackfillId, EnrollmentRuleId, FlowId, OrgId, UserId, WebhookEndpointId,
};
use sqlx::{FromRow, PgExecutor};

/// The organization's open assignments with a due date (the predicate of the partial index).
const OPEN_DUE: &str = "a.status IN ('pending', 'in_progress', 'overdue') AND a.due_at IS NOT NULL";

/// How many open assignments are overdue, and due soon.
#[derive(Debug, Clone, Copy, PartialEq, Eq, FromRow)]
pub struct DueCounts {
    /// Open and due at or before the reading time.
    pub overdue: i64,
    /// Open and due after the reading time, until the end of the window.
    pub due_soon: i64,
}

/// The counts of the organization's open assignments due at or before `now` (overdue) and due
/// after `now` until `until` (due soon).
pub async fn due_counts<'e>(
    executor: impl PgExecutor<'e>,
    org_id: OrgId,
    now: DateTime<Utc>,
    until: DateTime<Utc>,
) -> Result<DueCounts, sqlx::Error> {
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT count(*) FILTER (WHERE a.due_at <= $2) AS overdue,
                count(*) FILTER (WHERE a.due_at > $2) AS due_soon
         FROM assignments a
         WHERE a.org_id = $1 AND {OPEN_DUE} AND a.due_at <= $3"
    )))
    .bind(org_id)
    .bind(now)
    .bind(until)
    .fetch_one(executor)
    .await
}

/// An assignment listed on the home page: which one, whose, of which flow.
#[derive(Debug, Clone, FromRow)]
pub struct ListedAssignment {
    pub id: AssignmentId,
    pub flow_id: FlowId,
    /// The flow's name.
    pub flow_name: String,
    pub user_id: UserId,
    /// The assignee's e-mail.
    pub email: String,
    /// The assignee's name.
    pub name: Option<String>,
}

/// The columns of a [`ListedAssignment`], of `assignments a`, `flows f` and `users u`.
const LISTED_COLUMNS: &str = "a.id, a.flow_id, f.name AS flow_name, a.user_id, u.email, u.name";

/// An open assignment with its due date, and who and what it is.
#[derive(Debug, Clone, FromRow)]
pub struct DueAssignment {
    #[sqlx(flatten)]
    pub listed: ListedAssignment,
    /// As stored (`overdue` once the scheduler marked it).
    pub status: AssignmentStatus,
    pub due_at: DateTime<Utc>,
    /// Modules completed.
    pub completed_modules: i64,
    /// Modules of the flow.
    pub total_modules: i64,
}

/// Up to `limit` of the organization's open assignments due after `after` (when given) and at
/// or before `until`, soonest due first (for overdue ones: the longest overdue first).
pub async fn due_between<'e>(
    executor: impl PgExecutor<'e>,
    org_id: OrgId,
    after: Option<DateTime<Utc>>,
    until: DateTime<Utc>,
    limit: i64,
) -> Result<Vec<DueAssignment>, sqlx::Error> {
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {LISTED_COLUMNS}, a.status, a.due_at,
                (SELECT count(*) FROM module_progress p
                 WHERE p.assignment_id = a.id AND p.status = 'completed') AS completed_modules,
                (SELECT count(*) FROM modules m WHERE m.flow_id = a.flow_id) AS total_modules
         FROM assignments a JOIN flows f ON f.id = a.flow_id JOIN users u ON u.id = a.user_id
         WHERE a.org_id = $1 AND {OPEN_DUE}
           AND ($2::timestamptz IS NULL OR a.due_at > $2) AND a.due_at <= $3
         ORDER BY a.due_at, a.id
         LIMIT $4"
    )))
    .bind(org_id)
    .bind(after)
    .bind(until)
    .bind(limit)
    .fetch_all(executor)
    .await
}

/// Completions of the organization whose validity has not lapsed yet (not settled by the
/// scheduler) and whose renewal is not completed, of active users: what "expiring" counts.
/// Stays on the partial index `assignments_expiring_by_org_idx` (migration 0246).
const EXPIRING: &str = "a.status = 'completed' AND a.expires_at IS NOT NULL
    AND a.expiry_settled_at IS NULL
    AND NOT EXISTS (SELECT 1 FROM assignments r
                    WHERE r.id = a.renewal_id AND r.status = 'completed')
    AND EXISTS (SELECT 1 FROM users u WHERE u.id = a.user_id AND u.active)";

/// How many of the organization's completions expire after `now` and at or before `until`
/// (their renewal not completed yet).
pub async fn expiring_count<'e>(
    executor: impl PgExecutor<'e>,
    org_id: OrgId,
    now: DateTime<Utc>,
    until: DateTime<Utc>,
) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT count(*) FROM assignments a
         WHERE a.org_id = $1 AND {EXPIRING} AND a.expires_at > $2 AND a.expires_at <= $3"
    )))
    .bind(org_id)
    .bind(now)
    .bind(until)
    .fetch_one(executor)
    .await
}

/// A completion whose validity ends soon.
#[derive(Debug, Clone, FromRow)]
pub struct ExpiringCompletion {
    #[sqlx(flatten)]
    pub listed: ListedAssignment,
    pub expires_at: DateTime<Utc>,
    /// The renewal assignment, once the renewal window opened.
    pub renewal_id: Option<AssignmentId>,
}

/// Up to `limit` of the organization's completions expiring after `now` and at or before
/// `until`, the soonest first.
pub async fn expiring<'e>(
    executor: impl PgExecutor<'e>,
    org_id: OrgId,
    now: DateTime<Utc>,
    until: DateTime<Utc>,
    limit: i64,
) -> Result<Vec<ExpiringCompletion>, sqlx::Error> {
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {LISTED_COLUMNS}, a.expires_at, a.renewal_id
         FROM assignments a JOIN flows f ON f.id = a.flow_id JOIN users u ON u.id = a.user_id
         WHERE a.org_id = $1 AND {EXPIRING} AND a.expires_at > $2 AND a.expires_at <= $3
         ORDER BY a.expires_at, a.id
         LIMIT $4"
    )))
    .bind(org_id)
    .bind(now)
    .bind(until)
    .bind(limit)
    .fetch_all(executor)
    .await
}

/// A webhook endpoint whose deliveries fail, or that the service disabled.
#[derive(Debug, Clone, FromRow)]
pub struct FailingEndpoint {
    pub id: WebhookEndpointId,
    pub url: String,
    pub description: Option<String>,
    /// Whether deliveries still go out.
    pub enabled: bool,
    /// Why the service disabled it (`gone`, `failing`).
    pub disabled_reason: Option<String>,
    /// Start of the current run of failures.
    pub failing_since: Option<DateTime<Utc>>,
}

/// The organization's endpoints in a run of failures or disabled by the service (an
/// organization has at most 50 endpoints), the longest failing first.
pub async fn failing_endpoints<'e>(
    executor: impl PgExecutor<'e>,
    org_id: OrgId,
) -> Result<Vec<FailingEndpoint>, sqlx::Error> {
    sqlx::query_as(
        "SELECT id, url, description, enabled, disabled_reason, failing_since
         FROM webhook_endpoints
         WHERE org_id = $1 AND (failing_since IS NOT NULL OR disabled_reason IS NOT NULL)
         ORDER BY failing_since NULLS LAST, id",
    )
    .bind(org_id)
    .fetch_all(executor)
    .await
}

/// A rule whose latest backfill failed.
#[derive(Debug, Clone, FromRow)]
pub struct FailedBackfill {
    pub id: BackfillId,
    pub rule_id: EnrollmentRuleId,
    /// The rule's name.
    pub rule_name: String,
    /// Why it failed.
    pub error: Option<String>,
    /// When it failed.
    pub finished_at: Option<DateTime<Utc>>,
}

/// The organization's rules whose latest backfill failed (a later backfill that succeeded, or
/// one queued or running, takes it off), the latest failure first.
pub async fn failed_backfills<'e>(
    executor: impl PgExecutor<'e>,
    org_id: OrgId,
) -> Result<Vec<FailedBackfill>, sqlx::Error> {
    sqlx::query_as(
        "SELECT b.id, b.rule_id, r.name AS rule_name, b.error, b.finished_at
         FROM (SELECT DISTINCT ON (rule_id) id, rule_id, status, error, finished_at
               FROM enrollment_backfills WHERE org_id = $1
               ORDER BY rule_id, created_at DESC, id DESC) b
         JOIN enrollment_rules r ON r.id = b.rule_id
         WHERE b.status = 'failed'
         ORDER BY b.finished_at DESC NULLS LAST, b.id",
    )
    .bind(org_id)
    .fetch_all(executor)
    .await
}

/// An assignment that could not be persisted: what was asked for, and why it failed.
#[derive(Debug, Clone, FromRow)]
pub struct FailedAssign {
    /// The id the caller was answered with.
    pub assignment_id: AssignmentId,
    /// The assignee's e-mail, as the command carried it.
    pub email: Option<String>,
    /// The flow, when it still exists.
    pub flow_id: Option<FlowId>,
    /// Its name now, else as the command carried it.
    pub flow_name: Option<String>,
    /// Why it failed.
    pub reason: String,
    /// When.
    pub failed_at: DateTime<Utc>,
}

/// How many of the organization's assignments could not be persisted (their commands are
/// dead-lettered and not replayed), and the latest `limit` of them.
pub async fn failed_assigns(
    connection: &mut sqlx::PgConnection,
    org_id: OrgId,
    limit: i64,
) -> Result<(i64, Vec<FailedAssign>), sqlx::Error> {
    let count: i64 =
        sqlx::query_scalar("SELECT count(*) FROM assignment_failures WHERE org_id = $1")
            .bind(org_id)
            .fetch_one(&mut *connection)
            .await?;
    if count == 0 {
        return Ok((0, Vec::new()));
    }
    let rows = sqlx::query_as(
        "SELECT x.assignment_id, x.command ->> 'assigneeEmail' AS email, f.id AS flow_id,
                COALESCE(f.name, x.command ->> 'flowName') AS flow_name, x.reason, x.failed_at
         FROM assignment_failures x
         LEFT JOIN flows f ON f.org_id = x.org_id
                          AND 'flow_' || replace(f.id::text, '-', '') = x.command ->> 'flowId'
         WHERE x.org_id = $1
         ORDER BY x.failed_at DESC, x.assignment_id
         LIMIT $2",
    )
    .bind(org_id)
    .bind(limit)
    .fetch_all(&mut *connection)
    .await?;
    Ok((count, rows))
}

/// A person's manager as a user of the organization.
#[derive(Debug, Clone, FromRow)]
pub struct ManagerUser {
    pub id: UserId,
    pub email: String,
    pub name: Option<String>,
}

/// The user of the organization that the identity provider's manager id `manager_id` names:
/// the user with that SCIM id (`usr_…`, given as `as_user`) or that `externalId`; none when no
/// user (not deleted through SCIM, not erased) is either.
pub async fn manager<'e>(
    executor: impl PgExecutor<'e>,
    org_id: OrgId,
    manager_id: &str,
    as_user: Option<UserId>,
) -> Result<Option<ManagerUser>, sqlx::Error> {
    sqlx::query_as(
        "SELECT id, email, name FROM users
         WHERE org_id = $1 AND (id = $3 OR external_id = $2)
           AND scim_deleted_at IS NULL AND erased_at IS NULL
         ORDER BY (id = $3) DESC NULLS LAST, id
         LIMIT 1",
    )
    .bind(org_id)
    .bind(manager_id)
    .bind(as_user)
    .fetch_optional(executor)
    .await
}
