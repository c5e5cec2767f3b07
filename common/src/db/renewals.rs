//! Expiry and renewal of completions (design §16), the scheduler's two steps over the completions
//! of flows with a validity (`assignments.expires_at`, fixed at completion):
//!
//! - [`claim_renewals`]: when the renewal window opens (`expires_at` minus the flow's
//!   `renew_before_days` local days, or `expires_at` without one), the completion gets its
//!   renewal: an assign command with an id derived from the completion
//!   ([`AssignmentId::for_renewal`]), due at `expires_at`, for the caller to publish to the bulk
//!   lane before committing, and a `flow.expiring` event. When the user already has an open
//!   assignment of the flow, that one is linked instead and nothing is assigned; when they
//!   completed the flow again since, nothing is sent and the completion never expires.
//! - [`expire_due`]: at `expires_at`, the completion is settled: `flow.expired` (and
//!   `expired_at`) unless a completion of the same flow by the same user came after it and by
//!   `expires_at` (the renewal, or any later one); a deactivated user's lapse is recorded
//!   without an event.
//!
//! Each step is claimed by a conditional update of the assignment (`renewal_id`,
//! `expiry_settled_at`) on rows locked `FOR UPDATE SKIP LOCKED`, in the transaction that writes
//! its event, so it happens once per completion whatever the number of schedulers, retries and
//! kills. Deactivated users get neither renewal nor `flow.expiring`; their completions wait (a
//! reactivation before expiry renews them).

use chrono::{DateTime, Utc};
use flow_domain::Priority;
use flow_domain::events::{EventType, ExpiryData, NewEvent, Transition};
use flow_domain::format_timestamp;
use flow_domain::ids::{AssignmentId, FlowId, OrgId, UserId};
use flow_domain::lane::Lane;
use flow_domain::messages::{ASSIGN_COMMAND_VERSION, AssignCommand};
use sqlx::PgConnection;

use super::lifecycle::{AssignmentSnapshot, SNAPSHOT_COLUMNS};

/// A renewal assignment to publish: its command and the organization's place in the bulk lane.
#[derive(Debug, Clone)]
pub struct RenewalCommand {
    /// The assign command (id derived from the completion renewed).
    pub command: AssignCommand,
    /// The organization's bulk lane (`organizations.bulk_lane`).
    pub bulk_lane: i64,
}

#[derive(sqlx::FromRow)]
struct Due {
    id: AssignmentId,
    org_id: OrgId,
    flow_id: FlowId,
    flow_name: String,
    user_id: UserId,
    assignee_email: String,
    priority: Priority,
    expires_at: DateTime<Utc>,
    bulk_lane: i64,
    open_id: Option<AssignmentId>,
    superseded: bool,
}

#[derive(sqlx::FromRow)]
struct Renewed {
    #[sqlx(flatten)]
    snapshot: AssignmentSnapshot,
    expires_at: DateTime<Utc>,
    renewal_id: Option<AssignmentId>,
}

/// Claims up to `limit` completions whose renewal window is open at `now`, in the caller's
/// transaction: links each to its renewal (`renewal_id`) and writes its `flow.expiring` event.
/// Answers how many were claimed and the renewal assignments to publish (those not linked to an
/// open assignment) — published before the transaction commits, so a failure to publish rolls
/// the claim back and the next scan tries again with the same ids.
pub async fn claim_renewals(
    connection: &mut PgConnection,
    now: DateTime<Utc>,
    limit: i64,
) -> Result<(usize, Vec<RenewalCommand>), sqlx::Error> {
    let due: Vec<Due> = sqlx::query_as(
        "SELECT a.id, a.org_id, a.flow_id, f.name AS flow_name, a.user_id,
                u.email AS assignee_email, a.priority, a.expires_at, o.bulk_lane,
                (SELECT b.id FROM assignments b
                 WHERE b.flow_id = a.flow_id AND b.user_id = a.user_id
                   AND flow_is_active(b.status)
                 LIMIT 1) AS open_id,
                EXISTS (SELECT 1 FROM assignments b
                        WHERE b.flow_id = a.flow_id AND b.user_id = a.user_id
                          AND b.status = 'completed' AND b.completed_at > a.completed_at)
                    AS superseded
         FROM assignments a
         JOIN flows f ON f.id = a.flow_id
         JOIN organizations o ON o.id = a.org_id
         JOIN users u ON u.id = a.user_id
         WHERE a.renew_at <= $1 AND a.renewal_id IS NULL AND a.expiry_settled_at IS NULL
           AND a.status = 'completed'
           -- Nothing for deactivated users: their completions wait.
           AND u.active
         ORDER BY a.renew_at
         LIMIT $2
         FOR UPDATE OF a SKIP LOCKED",
    )
    .bind(now)
    .bind(limit)
    .fetch_all(&mut *connection)
    .await?;
    if due.is_empty() {
        return Ok((0, Vec::new()));
    }
    // Completed again since: settled, never renewed nor expired.
    let superseded: Vec<AssignmentId> = due
        .iter()
        .filter(|due| due.superseded)
        .map(|due| due.id)
        .collect();
    if !superseded.is_empty() {
        sqlx::query(
            "UPDATE assignments SET expiry_settled_at = $2
             WHERE id = ANY($1) AND expiry_settled_at IS NULL",
        )
        .bind(&superseded)
        .bind(now)
        .execute(&mut *connection)
        .await?;
    }
    let renewing: Vec<&Due> = due.iter().filter(|due| !due.superseded).collect();
    let ids: Vec<AssignmentId> = renewing.iter().map(|due| due.id).collect();
    let renewal_ids: Vec<AssignmentId> = renewing
        .iter()
        .map(|due| {
            due.open_id
                .unwrap_or_else(|| AssignmentId::for_renewal(due.id))
        })
        .collect();
    let renewed: Vec<Renewed> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "WITH changed AS (
            UPDATE assignments a SET renewal_id = t.renewal_id
            FROM UNNEST($1::uuid[], $2::uuid[]) AS t(id, renewal_id)
            WHERE a.id = t.id AND a.renewal_id IS NULL
            RETURNING a.*
         )
         SELECT {SNAPSHOT_COLUMNS}, a.expires_at, a.renewal_id FROM changed a
         JOIN flows f ON f.id = a.flow_id JOIN users u ON u.id = a.user_id"
    )))
    .bind(&ids)
    .bind(&renewal_ids)
    .fetch_all(&mut *connection)
    .await?;
    let span = tracing::info_span!("renewals", renewals = renewed.len());
    let traceparent = crate::telemetry::traceparent(&span);
    let events: Vec<NewEvent> = renewed
        .iter()
        .map(|renewed| {
            renewed.snapshot.transition_event(
                Transition::Once(EventType::Expiring),
                EventType::Expiring,
                now,
                traceparent.as_deref(),
                |data| {
                    data.expiry = Some(ExpiryData {
                        expires_at: format_timestamp(renewed.expires_at),
                        renewal_assignment_id: renewed.renewal_id,
                    });
                },
            )
        })
        .collect();
    // A scan of many assignments: the bulk lane.
    super::outbox::insert(connection, Lane::Bulk, &events).await?;
    let commands = renewing
        .iter()
        .filter(|due| due.open_id.is_none())
        .filter(|due| renewed.iter().any(|renewed| renewed.snapshot.id == due.id))
        .map(|due| RenewalCommand {
            command: AssignCommand {
                version: ASSIGN_COMMAND_VERSION,
                assignment_id: AssignmentId::for_renewal(due.id),
                existing_assignment_id: None,
                org_id: due.org_id,
                flow_id: due.flow_id,
                flow_name: due.flow_name.clone(),
                user_id: due.user_id,
                assignee_email: due.assignee_email.clone(),
                priority: due.priority,
                notes: None,
                due_at: Some(due.expires_at),
                assigned_at: now,
                request_id: None,
                schedule_id: None,
                traceparent: traceparent.clone(),
            },
            bulk_lane: due.bulk_lane,
        })
        .collect();
    Ok((superseded.len() + renewed.len(), commands))
}

#[derive(sqlx::FromRow)]
struct Settled {
    #[sqlx(flatten)]
    snapshot: AssignmentSnapshot,
    expires_at: DateTime<Utc>,
    renewal_id: Option<AssignmentId>,
    renewed: bool,
    user_active: bool,
}

/// Settles up to `limit` completions whose `expires_at` is at or before `now`, in the caller's
/// transaction, each once: expired (`expired_at`, with one `flow.expired` event, none for a
/// deactivated user) unless completed again in time. A completion of an active user waits for its
/// renewal step (so `flow.expiring` comes first). Returns how many were settled.
pub async fn expire_due(
    connection: &mut PgConnection,
    now: DateTime<Utc>,
    limit: i64,
) -> Result<usize, sqlx::Error> {
    let settled: Vec<Settled> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "WITH due AS (
            SELECT a.id, u.active,
                   EXISTS (SELECT 1 FROM assignments b
                           WHERE b.flow_id = a.flow_id AND b.user_id = a.user_id
                             AND b.status = 'completed' AND b.completed_at > a.completed_at
                             AND b.completed_at <= a.expires_at) AS renewed
            FROM assignments a JOIN users u ON u.id = a.user_id
            WHERE a.expires_at IS NOT NULL AND a.expiry_settled_at IS NULL AND a.expires_at <= $1
              AND a.status = 'completed'
              AND (a.renewal_id IS NOT NULL OR NOT u.active)
            ORDER BY a.expires_at
            LIMIT $2
            FOR UPDATE OF a SKIP LOCKED
         ), changed AS (
            UPDATE assignments a SET expiry_settled_at = $1,
                   expired_at = CASE WHEN due.renewed THEN NULL ELSE a.expires_at END
            FROM due WHERE a.id = due.id AND a.expiry_settled_at IS NULL
            RETURNING a.*, due.renewed, due.active AS user_active
         )
         SELECT {SNAPSHOT_COLUMNS}, a.expires_at, a.renewal_id, a.renewed, a.user_active
         FROM changed a JOIN flows f ON f.id = a.flow_id JOIN users u ON u.id = a.user_id"
    )))
    .bind(now)
    .bind(limit)
    .fetch_all(&mut *connection)
    .await?;
    if settled.is_empty() {
        return Ok(0);
    }
    let span = tracing::info_span!("expiries", settled = settled.len());
    let traceparent = crate::telemetry::traceparent(&span);
    let events: Vec<NewEvent> = settled
        .iter()
        .filter(|settled| !settled.renewed && settled.user_active)
        .map(|settled| {
            settled.snapshot.transition_event(
                Transition::Once(EventType::Expired),
                EventType::Expired,
                now,
                traceparent.as_deref(),
                |data| {
                    data.expiry = Some(ExpiryData {
                        expires_at: format_timestamp(settled.expires_at),
                        renewal_assignment_id: settled.renewal_id,
                    });
                },
            )
        })
        .collect();
    super::outbox::insert(connection, Lane::Bulk, &events).await?;
    Ok(settled.len())
}
