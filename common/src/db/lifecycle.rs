//! Lifecycle transitions after assignment: module progress (pending → in_progress → completed)
//! and the overdue scan. Each transition writes its outbox event in the same transaction, and is
//! guarded by the assignment's status so applying it twice emits nothing the second time.

use chrono::{DateTime, Utc};
use flow_domain::events::{EventData, EventType, NewEvent, Transition};
use flow_domain::ids::{AssignmentId, FlowId, ModuleId, OrgId};
use flow_domain::lane::Lane;
use flow_domain::messages::ProgressCommand;
use flow_domain::{AssignmentStatus, ModuleStatus, Priority, format_timestamp};
use sqlx::PgConnection;
use tracing::Instrument;

/// The assignment as an event describes it: read in the transaction that changed it (built from
/// the command for `flow.assigned`).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct AssignmentSnapshot {
    /// Assignment.
    pub id: AssignmentId,
    /// Owning organization.
    pub org_id: OrgId,
    /// Flow.
    pub flow_id: FlowId,
    /// Flow name.
    pub flow_name: String,
    /// Assignee e-mail.
    pub assignee_email: String,
    /// Status after the change; a name this build does not know fails the read.
    pub status: AssignmentStatus,
    pub priority: Priority,
    /// Due date.
    pub due_at: Option<DateTime<Utc>>,
    /// Assignment time.
    pub assigned_at: DateTime<Utc>,
    /// First module activity.
    pub started_at: Option<DateTime<Utc>>,
    /// Completion.
    pub completed_at: Option<DateTime<Utc>>,
    /// How many times the due date was changed (the key of a later `flow.overdue`).
    pub due_changes: i32,
}

/// Columns of [`AssignmentSnapshot`] over `assignments a JOIN flows f JOIN users u`.
pub const SNAPSHOT_COLUMNS: &str = "a.id, a.org_id, a.flow_id, f.name AS flow_name, \
    u.email AS assignee_email, a.status, a.priority, a.due_at, a.assigned_at, a.started_at, \
    a.completed_at, a.due_changes";

impl AssignmentSnapshot {
    /// The event of type `event_type` about this assignment, happening at `at`, caused by the
    /// work whose trace context is `traceparent`.
    pub fn event(
        &self,
        event_type: EventType,
        at: DateTime<Utc>,
        traceparent: Option<&str>,
    ) -> NewEvent {
        NewEvent::about(
            self.org_id,
            EventData::from(self),
            self.assigned_at,
            event_type,
            at,
            traceparent,
        )
    }

    /// The event of the transition `transition` (one that may recur), with `data` adjusted by
    /// `fill` (a change's `changed`, a cancellation's `reason`).
    pub fn transition_event(
        &self,
        transition: Transition,
        event_type: EventType,
        at: DateTime<Utc>,
        traceparent: Option<&str>,
        fill: impl FnOnce(&mut EventData),
    ) -> NewEvent {
        let mut data = EventData::from(self);
        fill(&mut data);
        NewEvent::keyed(
            self.org_id,
            data,
            self.assigned_at,
            event_type,
            &transition.key(),
            at,
            traceparent,
        )
    }
}

impl From<&AssignmentSnapshot> for EventData {
    fn from(snapshot: &AssignmentSnapshot) -> Self {
        Self {
            assignment_id: snapshot.id,
            flow_id: snapshot.flow_id,
            flow_name: snapshot.flow_name.clone(),
            assignee_email: snapshot.assignee_email.clone(),
            status: snapshot.status.as_str().to_owned(),
            assigned_at: format_timestamp(snapshot.assigned_at),
            due_date: snapshot.due_at.map(format_timestamp),
            started_at: snapshot.started_at.map(format_timestamp),
            completed_at: snapshot.completed_at.map(format_timestamp),
            priority: snapshot.priority.as_str().to_owned(),
            source: None,
            changed: None,
            reason: None,
            reminder: None,
            expiry: None,
        }
    }
}

/// When a completion at `$2` of the assignment `a` expires, and when its renewal window opens:
/// `$2` plus its flow's validity on the organization's calendar (same local time; a month end
/// clamps, as Postgres adds months), and that minus the flow's `renew_before_days` local days (or
/// the expiry itself without a window); both NULL for a flow without a validity. The expiry is
/// fixed at completion (a later change of the validity leaves it); the window follows the flow's
/// (see [`super::flows::edit`]). Public for `flowctl bench lifecycle`, which seeds completions
/// with it (`$2::timestamptz` replaced by their `completed_at`).
pub const EXPIRY_AND_RENEWAL: &str = "(SELECT e.expires_at,
                   ((e.expires_at AT TIME ZONE e.zone)
                       - make_interval(days => COALESCE(e.renew_before_days, 0)))
                       AT TIME ZONE e.zone
              FROM (SELECT (($2::timestamptz AT TIME ZONE o.timezone)
                               + make_interval(months => COALESCE(f.valid_for_months, 0),
                                               days => COALESCE(f.valid_for_days, 0)))
                               AT TIME ZONE o.timezone AS expires_at,
                           o.timezone AS zone, f.renew_before_days
                    FROM flows f JOIN organizations o ON o.id = f.org_id
                    WHERE f.id = a.flow_id
                      AND (f.valid_for_months IS NOT NULL OR f.valid_for_days IS NOT NULL)) e)";

/// What one progress command did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProgressOutcome {
    /// Recorded; the assignment may have started or completed.
    Applied,
    /// The assignment was already completed: nothing changes (completed is final).
    AlreadyCompleted,
    /// The assignment was cancelled: it takes no more progress.
    Cancelled,
    /// No such assignment or module in the organization (it was deleted since the API checked).
    Missing,
}

/// Applies one progress command inside the caller's transaction and returns what it did, with the
/// events it caused (already written to the outbox, continuing the trace `traceparent`: the
/// command's request).
pub async fn apply_progress(
    connection: &mut PgConnection,
    command: &ProgressCommand,
    traceparent: Option<&str>,
) -> Result<(ProgressOutcome, Vec<EventType>), sqlx::Error> {
    // Lock the assignment: concurrent progress of one assignment applies one at a time, so
    // exactly one of them sees the transition.
    let snapshot = locked_snapshot(connection, command.org_id, command.assignment_id).await?;
    let Some(snapshot) = snapshot else {
        return Ok((ProgressOutcome::Missing, Vec::new()));
    };
    if snapshot.status == AssignmentStatus::Completed {
        return Ok((ProgressOutcome::AlreadyCompleted, Vec::new()));
    }
    if snapshot.status == AssignmentStatus::Cancelled {
        return Ok((ProgressOutcome::Cancelled, Vec::new()));
    }
    let recorded = record_module(connection, command).await?;
    if !recorded {
        return Ok((ProgressOutcome::Missing, Vec::new()));
    }
    let mut events = Vec::new();
    let mut snapshot = snapshot;
    if snapshot.started_at.is_none() {
        snapshot = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "WITH changed AS (
                UPDATE assignments SET started_at = $2, updated_at = now(),
                       status = CASE WHEN status = 'pending' THEN 'in_progress' ELSE status END
                WHERE id = $1 RETURNING *)
             SELECT {SNAPSHOT_COLUMNS} FROM changed a
             JOIN flows f ON f.id = a.flow_id JOIN users u ON u.id = a.user_id"
        )))
        .bind(snapshot.id)
        .bind(command.at.max(snapshot.assigned_at))
        .fetch_one(&mut *connection)
        .await?;
        events.push(snapshot.event(EventType::Started, Utc::now(), traceparent));
    }
    let all_done: bool = sqlx::query_scalar(
        "SELECT count(*) FILTER (WHERE p.status = 'completed') = count(*)
         FROM modules m LEFT JOIN module_progress p ON p.module_id = m.id AND p.assignment_id = $1
         WHERE m.flow_id = $2",
    )
    .bind(snapshot.id)
    .bind(snapshot.flow_id)
    .fetch_one(&mut *connection)
    .await?;
    if all_done {
        let started = snapshot.started_at.unwrap_or(snapshot.assigned_at);
        snapshot = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "WITH changed AS (
                UPDATE assignments a SET status = 'completed', completed_at = $2,
                       updated_at = now(),
                       (expires_at, renew_at) = {EXPIRY_AND_RENEWAL}
                WHERE id = $1 RETURNING *)
             SELECT {SNAPSHOT_COLUMNS} FROM changed a
             JOIN flows f ON f.id = a.flow_id JOIN users u ON u.id = a.user_id"
        )))
        .bind(snapshot.id)
        .bind(command.at.max(started))
        .fetch_one(&mut *connection)
        .await?;
        events.push(snapshot.event(EventType::Completed, Utc::now(), traceparent));
    }
    if events.is_empty() {
        // A module's progress that neither starts nor completes the assignment is still a change
        // of it (the change feed, migration 0248, lists it again).
        sqlx::query("UPDATE assignments SET updated_at = now() WHERE id = $1")
            .bind(snapshot.id)
            .execute(&mut *connection)
            .await?;
    }
    // Module activity is one person's work (the interactive lane), unless it came in bulk.
    let lane = if command.bulk {
        Lane::Bulk
    } else {
        Lane::Interactive
    };
    super::outbox::insert(connection, lane, &events).await?;
    Ok((
        ProgressOutcome::Applied,
        events.iter().map(|event| event.event_type).collect(),
    ))
}

pub(crate) async fn locked_snapshot(
    connection: &mut PgConnection,
    org_id: OrgId,
    id: AssignmentId,
) -> Result<Option<AssignmentSnapshot>, sqlx::Error> {
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {SNAPSHOT_COLUMNS} FROM assignments a
         JOIN flows f ON f.id = a.flow_id JOIN users u ON u.id = a.user_id
         WHERE a.id = $1 AND a.org_id = $2
         FOR UPDATE OF a"
    )))
    .bind(id)
    .bind(org_id)
    .fetch_optional(&mut *connection)
    .await
}

/// Records the module's progress; a completed module stays completed. False when the module is
/// not part of the assignment's flow.
async fn record_module(
    connection: &mut PgConnection,
    command: &ProgressCommand,
) -> Result<bool, sqlx::Error> {
    if !module_in_flow(&mut *connection, command.assignment_id, command.module_id).await? {
        return Ok(false);
    }
    // A result given replaces the stored one field by field (a later attempt's score counts); a
    // completed module stays completed whatever comes after.
    let sql = match command.status {
        ModuleStatus::InProgress => {
            "INSERT INTO module_progress
                 (assignment_id, module_id, status, started_at, score, success, duration_seconds)
             VALUES ($1, $2, 'in_progress', $3, $4, $5, $6)
             ON CONFLICT (assignment_id, module_id) DO UPDATE
             SET score = COALESCE(EXCLUDED.score, module_progress.score),
                 success = COALESCE(EXCLUDED.success, module_progress.success),
                 duration_seconds = COALESCE(EXCLUDED.duration_seconds, module_progress.duration_seconds)
             WHERE num_nonnulls(EXCLUDED.score, EXCLUDED.success, EXCLUDED.duration_seconds) > 0"
        }
        ModuleStatus::Completed => {
            "INSERT INTO module_progress (assignment_id, module_id, status, started_at, completed_at,
                                          score, success, duration_seconds)
             VALUES ($1, $2, 'completed', $3, $3, $4, $5, $6)
             ON CONFLICT (assignment_id, module_id) DO UPDATE
             SET status = 'completed',
                 completed_at = CASE WHEN module_progress.status = 'completed'
                                     THEN module_progress.completed_at
                                     ELSE GREATEST(EXCLUDED.completed_at, module_progress.started_at) END,
                 score = COALESCE(EXCLUDED.score, module_progress.score),
                 success = COALESCE(EXCLUDED.success, module_progress.success),
                 duration_seconds = COALESCE(EXCLUDED.duration_seconds, module_progress.duration_seconds)
             WHERE module_progress.status <> 'completed'
                OR num_nonnulls(EXCLUDED.score, EXCLUDED.success, EXCLUDED.duration_seconds) > 0"
        }
    };
    sqlx::query(sql)
        .bind(command.assignment_id)
        .bind(command.module_id)
        .bind(command.at)
        .bind(command.result.score)
        .bind(command.result.success)
        .bind(command.result.duration_seconds)
        .execute(&mut *connection)
        .await?;
    Ok(true)
}

/// The status of `module` in assignment `id`; `None` before any progress of it.
pub async fn module_status<'e>(
    executor: impl sqlx::PgExecutor<'e>,
    id: AssignmentId,
    module: ModuleId,
) -> Result<Option<ModuleStatus>, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT status FROM module_progress WHERE assignment_id = $1 AND module_id = $2",
    )
    .bind(id)
    .bind(module)
    .fetch_optional(executor)
    .await
}

/// Whether `module` belongs to the flow of assignment `id` (the API's check before publishing).
pub async fn module_in_flow<'e>(
    executor: impl sqlx::PgExecutor<'e>,
    id: AssignmentId,
    module: ModuleId,
) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM modules m JOIN assignments a ON a.flow_id = m.flow_id
                        WHERE m.id = $1 AND a.id = $2)",
    )
    .bind(module)
    .bind(id)
    .fetch_one(executor)
    .await
}

/// Moves up to `limit` pending or in-progress assignments whose due date is at or before `now` to
/// overdue, with one `flow.overdue` event each; those of deactivated users stay as they are.
/// Rows another scheduler (or a progress update) holds are skipped and picked up by the next
/// scan. Returns how many changed.
pub async fn mark_overdue(
    connection: &mut PgConnection,
    now: DateTime<Utc>,
    limit: i64,
) -> Result<usize, sqlx::Error> {
    let changed: Vec<AssignmentSnapshot> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "WITH due AS (
            SELECT id FROM assignments
            WHERE status IN ('pending', 'in_progress') AND due_at IS NOT NULL AND due_at <= $1
              -- A deactivated user's open assignments fire no `flow.overdue`.
              AND NOT EXISTS (SELECT 1 FROM users u WHERE u.id = assignments.user_id
                              AND NOT u.active)
            ORDER BY due_at
            LIMIT $2
            FOR UPDATE SKIP LOCKED
         ), changed AS (
            UPDATE assignments a SET status = 'overdue', overdue_at = $1, updated_at = now()
            FROM due WHERE a.id = due.id AND a.status IN ('pending', 'in_progress')
            RETURNING a.*
         )
         SELECT {SNAPSHOT_COLUMNS} FROM changed a
         JOIN flows f ON f.id = a.flow_id JOIN users u ON u.id = a.user_id"
    )))
    .bind(now)
    .bind(limit)
    .fetch_all(&mut *connection)
    .await?;
    if changed.is_empty() {
        return Ok(0);
    }
    // No request caused these: the transitions of one scan share a trace of their own, which
    // their publication and webhook deliveries continue (a span only when something changed, so
    // idle scans leave no traces).
    let span = tracing::info_span!("overdue scan", assignments = changed.len());
    let traceparent = crate::telemetry::traceparent(&span);
    // Once per due date: an assignment overdue again after its due date moved has an event of
    // its own.
    let events: Vec<NewEvent> = changed
        .iter()
        .map(|snapshot| {
            snapshot.transition_event(
                Transition::overdue(snapshot.due_changes),
                EventType::Overdue,
                now,
                traceparent.as_deref(),
                |_| {},
            )
        })
        .collect();
    // A scan of many assignments: the bulk lane.
    super::outbox::insert(connection, Lane::Bulk, &events)
        .instrument(span)
        .await?;
    Ok(changed.len())
}
