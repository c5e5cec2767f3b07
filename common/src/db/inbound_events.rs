//! Inbound events (migration 0251, docs/events.md): the (source, id) of each event an
//! organization sent, kept for the retention so a re-sent event acts nothing twice, and what each
//! caused (its actions), written in the same transaction.

use std::collections::HashSet;

use chrono::{DateTime, Utc};
use flow_domain::ids::{AssignmentId, EventTriggerId, FlowId, OrgId, UserId};
use sqlx::{FromRow, PgConnection, PgExecutor};
use uuid::Uuid;

/// An event to record.
#[derive(Debug, Clone)]
pub struct NewEvent<'a> {
    /// `source`.
    pub source: &'a str,
    /// `id`.
    pub id: &'a str,
    /// `type`.
    pub event_type: &'a str,
    /// `accepted` or `ignored`.
    pub status: &'static str,
}

/// Records the events not recorded yet for `org_id` and answers the (source, id) of those it
/// recorded now; the others were recorded before (duplicates). A concurrent transaction
/// recording the same event makes this one wait for its outcome: then one of the two records
/// it. Rows are inserted in (source, id) order, so two batches overlapping wait rather than
/// deadlock.
pub async fn record(
    connection: &mut PgConnection,
    org_id: OrgId,
    events: &[NewEvent<'_>],
) -> Result<HashSet<(String, String)>, sqlx::Error> {
    let sources: Vec<&str> = events.iter().map(|event| event.source).collect();
    let ids: Vec<&str> = events.iter().map(|event| event.id).collect();
    let types: Vec<&str> = events.iter().map(|event| event.event_type).collect();
    let statuses: Vec<&str> = events.iter().map(|event| event.status).collect();
    let rows: Vec<(String, String)> = sqlx::query_as(
        "INSERT INTO inbound_events (org_id, source, event_id, event_type, status)
         SELECT $1, t.source, t.id, t.event_type, t.status
         FROM UNNEST($2::text[], $3::text[], $4::text[], $5::text[])
             AS t(source, id, event_type, status)
         ORDER BY t.source, t.id
         ON CONFLICT (org_id, source, event_id) DO NOTHING
         RETURNING source, event_id",
    )
    .bind(org_id)
    .bind(&sources)
    .bind(&ids)
    .bind(&types)
    .bind(&statuses)
    .fetch_all(&mut *connection)
    .await?;
    Ok(rows.into_iter().collect())
}

/// What an event caused, to record.
#[derive(Debug, Clone)]
pub struct NewAction {
    /// The action's key (`flow_domain::ids::EventActionKey`).
    pub key: Uuid,
    /// The event's `source`.
    pub source: String,
    /// The event's `id`.
    pub event_id: String,
    /// The event's `type`.
    pub event_type: String,
    /// The trigger that matched.
    pub trigger_id: EventTriggerId,
    /// `assign` or `cancel`.
    pub action: &'static str,
    /// The assignment made (assign) or cancelled (cancel).
    pub assignment_id: AssignmentId,
    /// The assign command, until it is published.
    pub command: Option<serde_json::Value>,
    /// The cancellation's reason.
    pub reason: Option<String>,
    /// The flow assigned (assign) or whose assignment is cancelled (cancel).
    pub flow_id: FlowId,
    /// The person.
    pub user_id: UserId,
    /// A cancel of an assignment an earlier event is still making: published once it is
    /// persisted ([`waiting_cancels`]).
    pub waits: bool,
}

/// Records the actions of events recorded in the same transaction.
pub async fn record_actions(
    connection: &mut PgConnection,
    org_id: OrgId,
    actions: &[NewAction],
) -> Result<(), sqlx::Error> {
    if actions.is_empty() {
        return Ok(());
    }
    let keys: Vec<Uuid> = actions.iter().map(|action| action.key).collect();
    let sources: Vec<&str> = actions
        .iter()
        .map(|action| action.source.as_str())
        .collect();
    let ids: Vec<&str> = actions
        .iter()
        .map(|action| action.event_id.as_str())
        .collect();
    let types: Vec<&str> = actions
        .iter()
        .map(|action| action.event_type.as_str())
        .collect();
    let triggers: Vec<EventTriggerId> = actions.iter().map(|action| action.trigger_id).collect();
    let kinds: Vec<&str> = actions.iter().map(|action| action.action).collect();
    let assignments: Vec<AssignmentId> =
        actions.iter().map(|action| action.assignment_id).collect();
    let commands: Vec<Option<serde_json::Value>> = actions
        .iter()
        .map(|action| action.command.clone())
        .collect();
    let reasons: Vec<Option<&str>> = actions
        .iter()
        .map(|action| action.reason.as_deref())
        .collect();
    let flows: Vec<FlowId> = actions.iter().map(|action| action.flow_id).collect();
    let users: Vec<UserId> = actions.iter().map(|action| action.user_id).collect();
    let waits: Vec<bool> = actions.iter().map(|action| action.waits).collect();
    sqlx::query(
        "INSERT INTO inbound_event_actions (key, org_id, source, event_id, event_type, trigger_id,
                                            action, assignment_id, command, reason, flow_id,
                                            user_id, waits)
         SELECT t.key, $1, t.source, t.event_id, t.event_type, t.trigger_id, t.action,
                t.assignment_id, t.command, t.reason, t.flow_id, t.user_id, t.waits
         FROM UNNEST($2::uuid[], $3::text[], $4::text[], $5::text[], $6::uuid[], $7::text[],
                     $8::uuid[], $9::jsonb[], $10::text[], $11::uuid[], $12::uuid[], $13::bool[])
             AS t(key, source, event_id, event_type, trigger_id, action, assignment_id, command,
                  reason, flow_id, user_id, waits)
         ON CONFLICT (key) DO NOTHING",
    )
    .bind(org_id)
    .bind(&keys)
    .bind(&sources)
    .bind(&ids)
    .bind(&types)
    .bind(&triggers)
    .bind(&kinds)
    .bind(&assignments)
    .bind(&commands)
    .bind(&reasons)
    .bind(&flows)
    .bind(&users)
    .bind(&waits)
    .execute(&mut *connection)
    .await?;
    Ok(())
}

/// A recorded action.
#[derive(Debug, Clone, FromRow)]
pub struct ActionRecord {
    /// The action's key.
    pub key: Uuid,
    /// The organization.
    pub org_id: OrgId,
    /// The event's `source`.
    pub source: String,
    /// The event's `id`.
    pub event_id: String,
    /// The trigger that matched.
    pub trigger_id: EventTriggerId,
    /// `assign` or `cancel`.
    pub action: String,
    /// The assignment made or cancelled.
    pub assignment_id: AssignmentId,
    /// The assign command, while unpublished.
    pub command: Option<serde_json::Value>,
    /// The cancellation's reason.
    pub reason: Option<String>,
    /// When the broker confirmed it; none while unpublished.
    pub published_at: Option<DateTime<Utc>>,
    /// A cancel waiting for its assignment to be persisted.
    pub waits: bool,
}

const ACTION_COLUMNS: &str = "key, org_id, source, event_id, trigger_id, action, assignment_id,
    command, reason, published_at, waits";

/// The actions of the organization's events (source, id) among `events`, in key order.
pub async fn actions_of<'e>(
    executor: impl PgExecutor<'e>,
    org_id: OrgId,
    events: &[(String, String)],
) -> Result<Vec<ActionRecord>, sqlx::Error> {
    let (sources, ids): (Vec<&str>, Vec<&str>) = events
        .iter()
        .map(|(source, id)| (source.as_str(), id.as_str()))
        .unzip();
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {ACTION_COLUMNS} FROM inbound_event_actions
         WHERE org_id = $1 AND (source, event_id) IN (
             SELECT * FROM UNNEST($2::text[], $3::text[]))
         ORDER BY key"
    )))
    .bind(org_id)
    .bind(&sources)
    .bind(&ids)
    .fetch_all(executor)
    .await
}

/// Actions left for the scheduler's sweep, oldest first: those still unpublished `grace` after
/// they were recorded (their request's publish failed, or its API stopped between the commit and
/// the publish), and waiting cancels whose assignment is settled now (persisted, or failed).
pub async fn unpublished<'e>(
    executor: impl PgExecutor<'e>,
    grace: std::time::Duration,
    limit: i64,
) -> Result<Vec<ActionRecord>, sqlx::Error> {
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {ACTION_COLUMNS} FROM (
             (SELECT {ACTION_COLUMNS}, created_at FROM inbound_event_actions
              WHERE published_at IS NULL AND NOT waits
                AND created_at < now() - make_interval(secs => $1)
              ORDER BY created_at LIMIT $2)
             UNION ALL
             (SELECT {ACTION_COLUMNS}, created_at FROM inbound_event_actions x
              WHERE waits AND published_at IS NULL
                AND (EXISTS (SELECT 1 FROM assignments a WHERE a.id = x.assignment_id)
                     OR EXISTS (SELECT 1 FROM assignment_aliases s
                                WHERE s.alias_id = x.assignment_id)
                     OR EXISTS (SELECT 1 FROM assignment_failures f
                                WHERE f.assignment_id = x.assignment_id))
              ORDER BY created_at LIMIT $2)
         ) due ORDER BY created_at LIMIT $2"
    )))
    .bind(grace.as_secs_f64())
    .bind(limit)
    .fetch_all(executor)
    .await
}

/// Where a cancel's assignment stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelTarget {
    /// Persisted: this is the assignment to cancel (an alias resolved to the assignment it
    /// stands for).
    Persisted(AssignmentId),
    /// Its command failed (dead-lettered): there is nothing to cancel.
    Failed,
    /// Still being made: the cancel waits.
    Pending,
}

/// Where each of `ids` (cancels' assignments) stands, in the order given.
pub async fn cancel_targets<'e>(
    executor: impl PgExecutor<'e>,
    ids: &[AssignmentId],
) -> Result<Vec<CancelTarget>, sqlx::Error> {
    let rows: Vec<(Option<AssignmentId>, bool)> = sqlx::query_as(
        "SELECT COALESCE(a.id, s.assignment_id), f.assignment_id IS NOT NULL
         FROM UNNEST($1::uuid[]) WITH ORDINALITY AS t(id, position)
         LEFT JOIN assignments a ON a.id = t.id
         LEFT JOIN assignment_aliases s ON s.alias_id = t.id
         LEFT JOIN assignment_failures f ON f.assignment_id = t.id
         ORDER BY t.position",
    )
    .bind(ids)
    .fetch_all(executor)
    .await?;
    Ok(rows
        .into_iter()
        .map(|row| match row {
            (Some(id), _) => CancelTarget::Persisted(id),
            (None, true) => CancelTarget::Failed,
            (None, false) => CancelTarget::Pending,
        })
        .collect())
}

/// Marks actions published (the broker confirmed them) and drops their commands.
pub async fn mark_published<'e>(
    executor: impl PgExecutor<'e>,
    keys: &[Uuid],
) -> Result<(), sqlx::Error> {
    if keys.is_empty() {
        return Ok(());
    }
    sqlx::query(
        "UPDATE inbound_event_actions SET published_at = now(), command = NULL
         WHERE key = ANY($1) AND published_at IS NULL",
    )
    .bind(keys)
    .execute(executor)
    .await?;
    Ok(())
}

/// Deletes up to `limit` events received before `before`, with their actions; answers how many.
pub async fn prune<'e>(
    executor: impl PgExecutor<'e>,
    before: DateTime<Utc>,
    limit: i64,
) -> Result<u64, sqlx::Error> {
    let deleted = sqlx::query(
        "DELETE FROM inbound_events WHERE ctid IN (
             SELECT ctid FROM inbound_events WHERE received_at < $1 LIMIT $2)",
    )
    .bind(before)
    .bind(limit)
    .execute(executor)
    .await?;
    Ok(deleted.rows_affected())
}

/// A person an event names, as the organization has them.
#[derive(Debug, Clone, FromRow)]
pub struct Person {
    /// Their e-mail, lower-cased (the lookup key).
    pub email_normalized: String,
    /// Their id.
    pub id: UserId,
    /// Their e-mail as stored.
    pub email: String,
    /// Whether they are active (a deactivated user is assigned nothing).
    pub active: bool,
}

/// The organization's users whose lower-cased e-mail is among `emails`.
pub async fn people<'e>(
    executor: impl PgExecutor<'e>,
    org_id: OrgId,
    emails: &[String],
) -> Result<Vec<Person>, sqlx::Error> {
    sqlx::query_as(
        "SELECT email_normalized, id, email, active FROM users
         WHERE org_id = $1 AND email_normalized = ANY($2)",
    )
    .bind(org_id)
    .bind(emails)
    .fetch_all(executor)
    .await
}

/// The open (pending, in progress, overdue) assignment of each (flow, user) of `pairs` that has
/// one, as (flow, user, assignment).
pub async fn open_assignments<'e>(
    executor: impl PgExecutor<'e>,
    org_id: OrgId,
    pairs: &[(FlowId, UserId)],
) -> Result<Vec<(FlowId, UserId, AssignmentId)>, sqlx::Error> {
    assignment_per_pair(
        executor,
        "SELECT p.flow_id, p.user_id, a.id
         FROM UNNEST($2::uuid[], $3::uuid[]) AS p(flow_id, user_id)
         CROSS JOIN LATERAL (SELECT a.id FROM assignments a
                             WHERE a.org_id = $1 AND a.flow_id = p.flow_id
                               AND a.user_id = p.user_id AND flow_is_active(a.status)
                             LIMIT 1) a",
        org_id,
        pairs,
    )
    .await
}

/// The assignment of each (flow, user) of `pairs` that an event's assign action is still making
/// (its command queued, not yet persisted nor failed, and no cancel waiting for it), the latest
/// when several are, as (flow, user, assignment).
pub async fn assignments_being_made<'e>(
    executor: impl PgExecutor<'e>,
    org_id: OrgId,
    pairs: &[(FlowId, UserId)],
) -> Result<Vec<(FlowId, UserId, AssignmentId)>, sqlx::Error> {
    assignment_per_pair(
        executor,
        "SELECT DISTINCT ON (x.flow_id, x.user_id) x.flow_id, x.user_id, x.assignment_id
         FROM UNNEST($2::uuid[], $3::uuid[]) AS p(flow_id, user_id)
         JOIN inbound_event_actions x
           ON x.org_id = $1 AND x.action = 'assign' AND x.flow_id = p.flow_id
          AND x.user_id = p.user_id
         WHERE NOT EXISTS (SELECT 1 FROM assignments a WHERE a.id = x.assignment_id)
           AND NOT EXISTS (SELECT 1 FROM assignment_aliases s WHERE s.alias_id = x.assignment_id)
           AND NOT EXISTS (SELECT 1 FROM assignment_failures f
                           WHERE f.assignment_id = x.assignment_id)
           AND NOT EXISTS (SELECT 1 FROM inbound_event_actions c
                           WHERE c.action = 'cancel' AND c.assignment_id = x.assignment_id)
         ORDER BY x.flow_id, x.user_id, x.created_at DESC",
        org_id,
        pairs,
    )
    .await
}

/// Runs `statement`, a query over the organization `$1` and the (flow, user) pairs unnested
/// from `$2` (flows) and `$3` (users) that answers (flow, user, assignment) rows.
async fn assignment_per_pair<'e>(
    executor: impl PgExecutor<'e>,
    statement: &'static str,
    org_id: OrgId,
    pairs: &[(FlowId, UserId)],
) -> Result<Vec<(FlowId, UserId, AssignmentId)>, sqlx::Error> {
    let (flows, users): (Vec<FlowId>, Vec<UserId>) = pairs.iter().copied().unzip();
    sqlx::query_as(statement)
        .bind(org_id)
        .bind(&flows)
        .bind(&users)
        .fetch_all(executor)
        .await
}
