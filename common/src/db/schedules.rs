//! Schedules: recurring (or one-off) assignment of a flow to a user. The scheduler claims due
//! schedules with `FOR UPDATE SKIP LOCKED`, assigns the occurrence through the assign queue and
//! advances the schedule in the same transaction.

use chrono::{DateTime, Utc};
use flow_domain::ids::{AssignmentId, FlowId, OrgId, ScheduleId, UserId};
use flow_domain::recurrence::Recurrence;
use flow_domain::{AssignmentStatus, Priority};
use sqlx::{FromRow, PgConnection, PgExecutor};

/// A new schedule.
#[derive(Debug, Clone)]
pub struct NewSchedule {
    /// Organization.
    pub org_id: OrgId,
    /// Flow.
    pub flow_id: FlowId,
    /// Assignee.
    pub user_id: UserId,
    /// First occurrence.
    pub scheduled_at: DateTime<Utc>,
    /// Repetition.
    pub recurrence: Recurrence,
    /// Each assignment is due this many days after its occurrence.
    pub due_in_days: Option<i32>,
    /// Priority of the assignments.
    pub priority: Priority,
    /// Notes of the assignments.
    pub notes: Option<String>,
}

/// A schedule as the API and the dashboard show it.
#[derive(Debug, Clone, FromRow)]
pub struct ScheduleRecord {
    pub id: ScheduleId,
    /// Flow.
    pub flow_id: FlowId,
    /// Flow name.
    pub flow_name: String,
    /// Assignee e-mail.
    pub assignee_email: String,
    /// Next (or only) occurrence.
    pub scheduled_at: DateTime<Utc>,
    /// Repetition.
    pub recurrence: Recurrence,
    /// Occurrences assigned so far.
    pub occurrence: i32,
    /// Due offset in days.
    pub due_in_days: Option<i32>,
    pub priority: Priority,
    pub notes: Option<String>,
    /// False once a one-off schedule ran.
    pub active: bool,
    /// Assignment of the latest occurrence.
    pub current_assignment_id: Option<AssignmentId>,
    /// Status of the current occurrence at the reading time (`pending` before the first).
    pub status: AssignmentStatus,
    /// Creation.
    pub created_at: DateTime<Utc>,
}

/// What every read of [`ScheduleRecord`]s selects, from `schedules s`; `$3` is the reading time
/// of the status. The caller adds its `WHERE` (and order).
pub(crate) const RECORD_SELECT: &str = "SELECT s.id, s.flow_id, f.name AS flow_name,
        u.email AS assignee_email, s.scheduled_at, s.recurrence, s.occurrence, s.due_in_days,
        s.priority, s.notes, s.active, s.current_assignment_id, s.created_at,
        COALESCE(flow_effective_status(a.status, a.due_at, $3), 'pending') AS status
     FROM schedules s
     JOIN flows f ON f.id = s.flow_id
     JOIN users u ON u.id = s.user_id
     LEFT JOIN assignments a ON a.id = s.current_assignment_id";

/// Creates a schedule and returns it.
pub async fn create(
    connection: &mut PgConnection,
    schedule: &NewSchedule,
) -> Result<ScheduleRecord, sqlx::Error> {
    let id = ScheduleId::new();
    sqlx::query(
        "INSERT INTO schedules (id, org_id, flow_id, user_id, anchor_at, scheduled_at, recurrence,
                                due_in_days, priority, notes)
         VALUES ($1, $2, $3, $4, $5, $5, $6, $7, $8, $9)",
    )
    .bind(id)
    .bind(schedule.org_id)
    .bind(schedule.flow_id)
    .bind(schedule.user_id)
    .bind(schedule.scheduled_at)
    .bind(schedule.recurrence.as_str())
    .bind(schedule.due_in_days)
    .bind(schedule.priority.as_str())
    .bind(&schedule.notes)
    .execute(&mut *connection)
    .await?;
    let record = get(&mut *connection, schedule.org_id, id, Utc::now()).await?;
    record.ok_or(sqlx::Error::RowNotFound)
}

/// One live schedule of an organization, its status read at `now`.
pub async fn get<'e>(
    executor: impl PgExecutor<'e>,
    org_id: OrgId,
    id: ScheduleId,
    now: DateTime<Utc>,
) -> Result<Option<ScheduleRecord>, sqlx::Error> {
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "{RECORD_SELECT} WHERE s.id = $1 AND s.org_id = $2 AND s.deleted_at IS NULL"
    )))
    .bind(id)
    .bind(org_id)
    .bind(now)
    .fetch_optional(executor)
    .await
}

/// Deletes a schedule (no further occurrences; its assignments stay). False when it does not
/// exist in the organization.
pub async fn delete<'e>(
    executor: impl PgExecutor<'e>,
    org_id: OrgId,
    id: ScheduleId,
) -> Result<bool, sqlx::Error> {
    sqlx::query(
        "UPDATE schedules SET active = false, deleted_at = now()
         WHERE id = $1 AND org_id = $2 AND deleted_at IS NULL",
    )
    .bind(id)
    .bind(org_id)
    .execute(executor)
    .await
    .map(|result| result.rows_affected() == 1)
}

/// A schedule whose occurrence is due, locked by the caller's transaction.
#[derive(Debug, Clone, FromRow)]
pub struct DueSchedule {
    pub id: ScheduleId,
    /// Organization.
    pub org_id: OrgId,
    /// The organization's time zone (the calendar of the series).
    pub timezone: String,
    /// Flow.
    pub flow_id: FlowId,
    /// Flow name.
    pub flow_name: String,
    /// Assignee.
    pub user_id: UserId,
    /// Assignee e-mail.
    pub assignee_email: String,
    /// First occurrence of the series.
    pub anchor_at: DateTime<Utc>,
    /// This occurrence.
    pub scheduled_at: DateTime<Utc>,
    /// Its index in the series.
    pub occurrence: i32,
    /// Repetition.
    pub recurrence: Recurrence,
    /// Due offset in days.
    pub due_in_days: Option<i32>,
    pub priority: Priority,
    pub notes: Option<String>,
    /// The organization's place in the bulk lane (its occurrences are bulk work).
    pub bulk_lane: i64,
    /// Whether the flow is archived: the occurrence is skipped, not assigned.
    pub flow_archived: bool,
}

/// Locks up to `limit` schedules due at `now`, skipping those another scheduler holds and those
/// of deactivated users.
pub async fn claim_due(
    connection: &mut PgConnection,
    now: DateTime<Utc>,
    limit: i64,
) -> Result<Vec<DueSchedule>, sqlx::Error> {
    sqlx::query_as(
        "SELECT s.id, s.org_id, o.timezone, s.flow_id, f.name AS flow_name, s.user_id,
                u.email AS assignee_email, s.anchor_at, s.scheduled_at, s.occurrence, s.recurrence,
                s.due_in_days, s.priority, s.notes, o.bulk_lane,
                f.archived_at IS NOT NULL AS flow_archived
         FROM schedules s
         JOIN organizations o ON o.id = s.org_id
         JOIN flows f ON f.id = s.flow_id
         JOIN users u ON u.id = s.user_id
         WHERE s.active AND s.deleted_at IS NULL AND s.scheduled_at <= $1
           -- A deactivated assignee's schedules wait, due, until they are reactivated (then
           -- the latest occurrence is assigned, as after any pause).
           AND u.active
         ORDER BY s.scheduled_at
         LIMIT $2
         FOR UPDATE OF s SKIP LOCKED",
    )
    .bind(now)
    .bind(limit)
    .fetch_all(&mut *connection)
    .await
}

/// Moves a schedule to its occurrence `occurrence` at `next` (`None`: the series is over).
pub async fn advance(
    connection: &mut PgConnection,
    id: ScheduleId,
    occurrence: i32,
    next: Option<DateTime<Utc>>,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "UPDATE schedules SET occurrence = $2, scheduled_at = COALESCE($3, scheduled_at),
                              active = $3 IS NOT NULL
         WHERE id = $1",
    )
    .bind(id)
    .bind(occurrence)
    .bind(next)
    .execute(&mut *connection)
    .await
    .map(|_| ())
}

/// Active schedules whose occurrence is due and not yet assigned (for the gauge).
pub async fn due_count<'e>(executor: impl PgExecutor<'e>) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT count(*) FROM schedules
         WHERE active AND deleted_at IS NULL AND scheduled_at <= now()",
    )
    .fetch_one(executor)
    .await
}
