//! Changing and cancelling assignments (design §16): the queued [`ChangeCommand`]s applied by the
//! progress worker, each exactly once (its id is recorded in `assignment_changes` in the
//! transaction that applies it) and under the assignment's lock, so a change, a cancellation and
//! module activity of one assignment apply one at a time and each transition emits its event once.

use chrono::{DateTime, Utc};
use flow_domain::events::{EventType, NewEvent, Transition};
use flow_domain::ids::{AssignmentId, EnrollmentRuleId, FlowId, OrgId, UserId};
use flow_domain::lane::Lane;
use flow_domain::messages::{Change, ChangeCommand, SetTo};
use flow_domain::{AssignmentStatus, Priority, format_timestamp};
use serde_json::{Map, Value, json};
use sqlx::{FromRow, PgConnection, PgExecutor};

use super::lifecycle::{AssignmentSnapshot, SNAPSHOT_COLUMNS, locked_snapshot};

/// What one change command came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeOutcome {
    /// Applied, with its event.
    Applied,
    /// Nothing to change: the fields already held those values, or it was already cancelled.
    Unchanged,
    /// The assignment was completed (or, for an update, cancelled) after the API checked it.
    Refused,
    /// No such assignment in the organization.
    Missing,
    /// This change was applied before (a redelivered message): nothing happens again.
    Duplicate,
}

impl ChangeOutcome {
    /// The name stored in `assignment_changes.outcome` and used in metrics and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Applied => "applied",
            Self::Unchanged => "unchanged",
            Self::Refused => "refused",
            Self::Missing => "missing",
            Self::Duplicate => "duplicate",
        }
    }
}

/// Applies `command` inside the caller's transaction; returns what it did and the event it wrote
/// (continuing the trace `traceparent`).
pub async fn apply_change(
    connection: &mut PgConnection,
    command: &ChangeCommand,
    traceparent: Option<&str>,
) -> Result<(ChangeOutcome, Option<EventType>), sqlx::Error> {
    let kind = match command.change {
        Change::Update { .. } => "update",
        Change::Cancel { .. } => "cancel",
    };
    // Claim the change's id first: a redelivered command finds it taken and does nothing.
    let claimed: Option<uuid::Uuid> = sqlx::query_scalar(
        "INSERT INTO assignment_changes (id, org_id, assignment_id, kind, outcome, requested_at)
         SELECT $1, $2, $3, $4, 'missing', $5 WHERE EXISTS (SELECT 1 FROM organizations WHERE id = $2)
         ON CONFLICT (id) DO NOTHING RETURNING id",
    )
    .bind(command.change_id)
    .bind(command.org_id)
    .bind(command.assignment_id)
    .bind(kind)
    .bind(command.requested_at)
    .fetch_optional(&mut *connection)
    .await?;
    if claimed.is_none() {
        return Ok((ChangeOutcome::Duplicate, None));
    }
    let Some(snapshot) = locked_snapshot(connection, command.org_id, command.assignment_id).await?
    else {
        return Ok((ChangeOutcome::Missing, None));
    };
    let at = Utc::now();
    let (outcome, changed, event) = match &command.change {
        Change::Cancel { reason } => cancel(connection, command, snapshot, reason, at, traceparent)
            .await
            .map(|(outcome, event)| (outcome, Map::new(), event))?,
        Change::Update {
            due_at,
            priority,
            notes,
        } => {
            let asked = Asked {
                due_at: due_at.clone().map(SetTo::into_option),
                priority: *priority,
                notes: notes.clone().map(SetTo::into_option),
            };
            update(connection, command, snapshot, asked, at, traceparent).await?
        }
    };
    let reason = match &command.change {
        Change::Cancel { reason } => reason.as_deref(),
        Change::Update { .. } => None,
    };
    sqlx::query(
        "UPDATE assignment_changes SET outcome = $2, changed = $3, reason = $4, applied_at = $5
         WHERE id = $1",
    )
    .bind(command.change_id)
    .bind(outcome.as_str())
    .bind(Value::Object(changed))
    .bind(reason)
    .bind(at)
    .execute(&mut *connection)
    .await?;
    let event_type = event.as_ref().map(|event| event.event_type);
    if let Some(event) = event {
        let lane = if command.bulk {
            Lane::Bulk
        } else {
            Lane::Interactive
        };
        super::outbox::insert(connection, lane, &[event]).await?;
    }
    Ok((outcome, event_type))
}

async fn cancel(
    connection: &mut PgConnection,
    command: &ChangeCommand,
    snapshot: AssignmentSnapshot,
    reason: &Option<String>,
    at: DateTime<Utc>,
    traceparent: Option<&str>,
) -> Result<(ChangeOutcome, Option<NewEvent>), sqlx::Error> {
    match snapshot.status {
        AssignmentStatus::Completed => return Ok((ChangeOutcome::Refused, None)),
        AssignmentStatus::Cancelled => return Ok((ChangeOutcome::Unchanged, None)),
        AssignmentStatus::Pending | AssignmentStatus::InProgress | AssignmentStatus::Overdue => {}
    }
    let snapshot: AssignmentSnapshot = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "WITH changed AS (
            UPDATE assignments SET status = 'cancelled', cancelled_at = $2, cancel_reason = $3,
                   updated_at = now()
            WHERE id = $1 RETURNING *)
         SELECT {SNAPSHOT_COLUMNS} FROM changed a
         JOIN flows f ON f.id = a.flow_id JOIN users u ON u.id = a.user_id"
    )))
    .bind(snapshot.id)
    .bind(command.requested_at)
    .bind(reason)
    .fetch_one(&mut *connection)
    .await?;
    let event = snapshot.transition_event(
        Transition::Once(EventType::Cancelled),
        EventType::Cancelled,
        at,
        command.traceparent.as_deref().or(traceparent),
        |data| data.reason = reason.clone(),
    );
    Ok((ChangeOutcome::Applied, Some(event)))
}

/// The fields an update sets (`Some(None)`: cleared).
struct Asked {
    due_at: Option<Option<DateTime<Utc>>>,
    priority: Option<Priority>,
    notes: Option<Option<String>>,
}

async fn update(
    connection: &mut PgConnection,
    command: &ChangeCommand,
    snapshot: AssignmentSnapshot,
    asked: Asked,
    at: DateTime<Utc>,
    traceparent: Option<&str>,
) -> Result<(ChangeOutcome, Map<String, Value>, Option<NewEvent>), sqlx::Error> {
    match snapshot.status {
        AssignmentStatus::Completed | AssignmentStatus::Cancelled => {
            return Ok((ChangeOutcome::Refused, Map::new(), None));
        }
        AssignmentStatus::Pending | AssignmentStatus::InProgress | AssignmentStatus::Overdue => {}
    }
    let notes: Option<String> = sqlx::query_scalar("SELECT notes FROM assignments WHERE id = $1")
        .bind(snapshot.id)
        .fetch_one(&mut *connection)
        .await?;
    let mut changed = Map::new();
    let due_at = asked.due_at.filter(|due| *due != snapshot.due_at);
    if let Some(due) = due_at {
        changed.insert(
            "dueDate".into(),
            json!({
                "from": snapshot.due_at.map(format_timestamp),
                "to": due.map(format_timestamp),
            }),
        );
    }
    let priority = asked
        .priority
        .filter(|priority| *priority != snapshot.priority);
    if let Some(priority) = priority {
        changed.insert(
            "priority".into(),
            json!({ "from": snapshot.priority.as_str(), "to": priority.as_str() }),
        );
    }
    let new_notes = asked.notes.filter(|new| *new != notes);
    if let Some(new) = &new_notes {
        changed.insert("notes".into(), json!({ "from": notes, "to": new }));
    }
    if changed.is_empty() {
        return Ok((ChangeOutcome::Unchanged, changed, None));
    }
    // A due date moved to the future (or removed) takes an overdue assignment back to pending or
    // in progress; it may become overdue again at its new due date (a `flow.overdue` of its own).
    let snapshot: AssignmentSnapshot = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "WITH changed AS (
            UPDATE assignments SET
                due_at = CASE WHEN $2 THEN $3 ELSE due_at END,
                due_changes = due_changes + CASE WHEN $2 THEN 1 ELSE 0 END,
                priority = COALESCE($4, priority),
                notes = CASE WHEN $5 THEN $6 ELSE notes END,
                status = CASE WHEN $2 AND status = 'overdue' AND ($3 IS NULL OR $3 > $7)
                              THEN CASE WHEN started_at IS NULL THEN 'pending' ELSE 'in_progress' END
                              ELSE status END,
                overdue_at = CASE WHEN $2 AND status = 'overdue' AND ($3 IS NULL OR $3 > $7)
                                  THEN NULL ELSE overdue_at END,
                updated_at = now()
            WHERE id = $1 RETURNING *)
         SELECT {SNAPSHOT_COLUMNS} FROM changed a
         JOIN flows f ON f.id = a.flow_id JOIN users u ON u.id = a.user_id"
    )))
    .bind(snapshot.id)
    .bind(due_at.is_some())
    .bind(due_at.flatten())
    .bind(priority.map(Priority::as_str))
    .bind(new_notes.is_some())
    .bind(new_notes.flatten())
    .bind(at)
    .fetch_one(&mut *connection)
    .await?;
    let event = snapshot.transition_event(
        Transition::Change(command.change_id),
        EventType::Updated,
        at,
        command.traceparent.as_deref().or(traceparent),
        |data| data.changed = Some(changed.clone()),
    );
    Ok((ChangeOutcome::Applied, changed, Some(event)))
}

/// A change as its assignment's history shows it.
#[derive(Debug, Clone, FromRow)]
pub struct ChangeRecord {
    /// The change's id.
    pub id: uuid::Uuid,
    /// `update` or `cancel`.
    pub kind: String,
    /// `{field: {from, to}}`.
    pub changed: Value,
    /// A cancellation's reason.
    pub reason: Option<String>,
    /// applied, unchanged, refused or missing.
    pub outcome: String,
    /// When it was asked for.
    pub requested_at: DateTime<Utc>,
}

/// The changes of an assignment, oldest first.
pub async fn history<'e>(
    executor: impl PgExecutor<'e>,
    org_id: OrgId,
    assignment_id: AssignmentId,
) -> Result<Vec<ChangeRecord>, sqlx::Error> {
    sqlx::query_as(
        "SELECT id, kind, changed, reason, outcome, requested_at FROM assignment_changes
         WHERE org_id = $1 AND assignment_id = $2 ORDER BY requested_at, id",
    )
    .bind(org_id)
    .bind(assignment_id)
    .fetch_all(executor)
    .await
}

/// The assignment a change by (flow, assignee) means: the active one, else the latest one (a
/// cancelled or completed one, which the caller answers about), `None` when the person was never
/// assigned the flow.
pub async fn by_flow_and_email<'e>(
    executor: impl PgExecutor<'e>,
    org_id: OrgId,
    flow_id: FlowId,
    email_normalized: &str,
) -> Result<Option<AssignmentId>, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT a.id FROM assignments a JOIN users u ON u.id = a.user_id
         WHERE a.org_id = $1 AND a.flow_id = $2 AND u.org_id = $1 AND u.email_normalized = $3
         ORDER BY flow_is_active(a.status) DESC, a.assigned_at DESC, a.id DESC
         LIMIT 1",
    )
    .bind(org_id)
    .bind(flow_id)
    .bind(email_normalized)
    .fetch_optional(executor)
    .await
}

/// Which of the change ids `ids` were applied (or are being applied) already: a change queued
/// again with a derived id is left out when its first queueing was applied.
pub async fn recorded<'e>(
    executor: impl PgExecutor<'e>,
    ids: &[uuid::Uuid],
) -> Result<Vec<uuid::Uuid>, sqlx::Error> {
    sqlx::query_scalar("SELECT id FROM assignment_changes WHERE id = ANY($1)")
        .bind(ids)
        .fetch_all(executor)
        .await
}

/// The open assignments (pending, in progress, overdue) of the user, in id order.
pub async fn open_of_user<'e>(
    executor: impl PgExecutor<'e>,
    org_id: OrgId,
    user_id: UserId,
) -> Result<Vec<AssignmentId>, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT id FROM assignments
         WHERE org_id = $1 AND user_id = $2 AND status IN ('pending', 'in_progress', 'overdue')
         ORDER BY id",
    )
    .bind(org_id)
    .bind(user_id)
    .fetch_all(executor)
    .await
}

/// The open assignments each (rule, user) pair's rule made for that user: (rule, assignment),
/// in id order. An assignment made by hand or by another rule is not one of them.
pub async fn open_made_by_rules<'e>(
    executor: impl PgExecutor<'e>,
    org_id: OrgId,
    rules: &[EnrollmentRuleId],
    users: &[UserId],
) -> Result<Vec<(EnrollmentRuleId, AssignmentId)>, sqlx::Error> {
    sqlx::query_as(
        "SELECT a.enrollment_rule_id, a.id
         FROM UNNEST($2::uuid[], $3::uuid[]) AS p(rule_id, user_id)
         JOIN assignments a ON a.enrollment_rule_id = p.rule_id AND a.user_id = p.user_id
         WHERE a.org_id = $1 AND a.enrollment_rule_id IS NOT NULL
           AND a.status IN ('pending', 'in_progress', 'overdue')
         ORDER BY a.id",
    )
    .bind(org_id)
    .bind(rules)
    .bind(users)
    .fetch_all(executor)
    .await
}
