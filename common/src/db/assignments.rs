//! Assignments: batch persistence from assign commands (with aliases for duplicates and the
//! `flow.assigned` outbox row in the same transaction), the API's batched pre-publish lookup, and
//! reads.

use std::collections::HashSet;

use chrono::{DateTime, Utc};
use sqlx::{FromRow, PgConnection, PgExecutor};

use crate::domain::AssignmentStatus;
use crate::events::{AssignmentSnapshot, EventType, event_body, event_data};
use crate::ids::{AssignmentId, EventId, FlowId, ModuleId, OrgId, ScheduleId, UserId};
use crate::messages::AssignCommand;

/// What a batch did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct BatchOutcome {
    /// New assignments created (each with its `flow.assigned` outbox row).
    pub inserted: u64,
    /// Ids recorded as aliases of an existing active assignment.
    pub aliased: u64,
    /// Commands already applied before (redeliveries, retried requests).
    pub already_applied: u64,
}

/// Why a batch of assign commands could not be applied.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// The database failed.
    #[error(transparent)]
    Database(#[from] sqlx::Error),
    /// Commands whose flow or user does not exist in their organization: they can never apply.
    #[error("the flow or user of {0:?} does not exist in the organization")]
    Orphans(Vec<AssignmentId>),
    /// Concurrent changes kept some commands from settling; trying again later will.
    #[error("{0} assign commands did not settle against concurrent changes")]
    Unsettled(usize),
}

impl ApplyError {
    /// True when applying the same commands later may succeed.
    pub fn is_transient(&self) -> bool {
        match self {
            Self::Database(error) => super::is_transient(error),
            Self::Orphans(_) => false,
            Self::Unsettled(_) => true,
        }
    }
}

/// Applies assign commands inside `transaction`: inserts new assignments and their outbox events,
/// and records every other handed-out id as an alias of the assignment it resolved to. Idempotent:
/// applying the same commands again changes nothing.
pub async fn apply_batch(
    connection: &mut PgConnection,
    commands: &[AssignCommand],
) -> Result<BatchOutcome, ApplyError> {
    let mut outcome = BatchOutcome::default();
    // Alias-only commands: the API answered with an existing assignment.
    let (alias_only, creating): (Vec<&AssignCommand>, Vec<&AssignCommand>) = commands
        .iter()
        .partition(|command| command.existing_assignment_id.is_some());
    if !alias_only.is_empty() {
        outcome.aliased += record_explicit_aliases(&mut *connection, &alias_only).await?;
    }
    let mut pending: Vec<&AssignCommand> = creating;
    // A concurrent transaction may commit a conflicting active assignment, or complete the one we
    // aliased to, between statements; a few rounds settle it.
    for _ in 0..5 {
        if pending.is_empty() {
            break;
        }
        let inserted = insert_new(&mut *connection, &pending).await?;
        outcome.inserted += inserted.len() as u64;
        pending.retain(|command| !inserted.contains(&command.assignment_id));
        if pending.is_empty() {
            break;
        }
        let settled = alias_to_active(&mut *connection, &pending).await?;
        if !settled.orphans.is_empty() {
            return Err(ApplyError::Orphans(settled.orphans));
        }
        outcome.aliased += settled.aliased;
        outcome.already_applied += settled.applied;
        pending.retain(|command| settled.unresolved.contains(&command.assignment_id));
    }
    if !pending.is_empty() {
        return Err(ApplyError::Unsettled(pending.len()));
    }
    if outcome.inserted > 0 {
        super::notify(&mut *connection, super::OUTBOX_CHANNEL, "").await?;
    }
    Ok(outcome)
}

/// Inserts what does not conflict, with one outbox row per inserted assignment; returns the ids
/// inserted.
async fn insert_new(
    connection: &mut PgConnection,
    commands: &[&AssignCommand],
) -> Result<HashSet<AssignmentId>, sqlx::Error> {
    let ids: Vec<AssignmentId> = commands.iter().map(|c| c.assignment_id).collect();
    let orgs: Vec<OrgId> = commands.iter().map(|c| c.org_id).collect();
    let flows: Vec<FlowId> = commands.iter().map(|c| c.flow_id).collect();
    let users: Vec<UserId> = commands.iter().map(|c| c.user_id).collect();
    let priorities: Vec<&str> = commands.iter().map(|c| c.priority.as_str()).collect();
    let notes: Vec<Option<&str>> = commands.iter().map(|c| c.notes.as_deref()).collect();
    let due: Vec<Option<DateTime<Utc>>> = commands.iter().map(|c| c.due_at).collect();
    let assigned: Vec<DateTime<Utc>> = commands.iter().map(|c| c.assigned_at).collect();
    let request_ids: Vec<Option<&str>> = commands.iter().map(|c| c.request_id.as_deref()).collect();
    let schedules: Vec<Option<ScheduleId>> = commands.iter().map(|c| c.schedule_id).collect();
    let event_ids: Vec<EventId> = commands.iter().map(|_| EventId::new()).collect();
    let payloads: Vec<serde_json::Value> = commands
        .iter()
        .zip(&event_ids)
        .map(|(command, event_id)| assigned_event(command, *event_id))
        .collect();
    let rows: Vec<(AssignmentId,)> = sqlx::query_as(
        "WITH input AS (
            SELECT * FROM UNNEST($1::uuid[], $2::uuid[], $3::uuid[], $4::uuid[], $5::text[],
                                 $6::text[], $7::timestamptz[], $8::timestamptz[], $9::text[],
                                 $10::uuid[], $11::uuid[], $12::jsonb[])
                AS t(id, org_id, flow_id, user_id, priority, notes, due_at, assigned_at,
                     request_id, schedule_id, event_id, payload)
         ), inserted AS (
            INSERT INTO assignments (id, org_id, flow_id, user_id, priority, notes, due_at,
                                     assigned_at, request_id, schedule_id)
            SELECT i.id, i.org_id, i.flow_id, i.user_id, i.priority, i.notes, i.due_at,
                   i.assigned_at, i.request_id, i.schedule_id
            FROM input i
            -- The parents must exist in the same organization (checked here, not by foreign
            -- keys: see migration 0009). LATERAL … LIMIT 1 keeps the plan an index probe per
            -- row whatever the planner guesses about the input's size.
            CROSS JOIN LATERAL (SELECT 1 FROM flows f
                                WHERE f.id = i.flow_id AND f.org_id = i.org_id LIMIT 1) flow
            CROSS JOIN LATERAL (SELECT 1 FROM users u
                                WHERE u.id = i.user_id AND u.org_id = i.org_id LIMIT 1) assignee
            ON CONFLICT DO NOTHING
            RETURNING id
         ), events AS (
            INSERT INTO outbox (event_id, org_id, event_type, assignment_id, payload)
            SELECT i.event_id, i.org_id, 'flow.assigned', i.id, i.payload
            FROM input i JOIN inserted USING (id)
         ), current_schedules AS (
            UPDATE schedules s SET current_assignment_id = i.id
            FROM input i JOIN inserted USING (id)
            WHERE i.schedule_id IS NOT NULL AND s.id = i.schedule_id
         )
         SELECT id FROM inserted",
    )
    .bind(&ids)
    .bind(&orgs)
    .bind(&flows)
    .bind(&users)
    .bind(&priorities)
    .bind(&notes)
    .bind(&due)
    .bind(&assigned)
    .bind(&request_ids)
    .bind(&schedules)
    .bind(&event_ids)
    .bind(&payloads)
    .fetch_all(&mut *connection)
    .await?;
    Ok(rows.into_iter().map(|(id,)| id).collect())
}

/// What became of commands that were not inserted.
#[derive(Debug, Default)]
struct Settled {
    aliased: u64,
    applied: u64,
    unresolved: HashSet<AssignmentId>,
    orphans: Vec<AssignmentId>,
}

/// For commands that were not inserted: already applied ones are left alone; those whose flow or
/// user is missing are orphans; the others are recorded as aliases of the active assignment of
/// the same flow and user, or stay unresolved (a concurrent change; another round settles them).
async fn alias_to_active(
    connection: &mut PgConnection,
    commands: &[&AssignCommand],
) -> Result<Settled, sqlx::Error> {
    let ids: Vec<AssignmentId> = commands.iter().map(|c| c.assignment_id).collect();
    let orgs: Vec<OrgId> = commands.iter().map(|c| c.org_id).collect();
    let flows: Vec<FlowId> = commands.iter().map(|c| c.flow_id).collect();
    let users: Vec<UserId> = commands.iter().map(|c| c.user_id).collect();
    #[derive(FromRow)]
    struct Row {
        id: AssignmentId,
        state: String,
    }
    let rows: Vec<Row> = sqlx::query_as(
        "WITH input AS (
            SELECT * FROM UNNEST($1::uuid[], $2::uuid[], $3::uuid[], $4::uuid[])
                AS t(id, org_id, flow_id, user_id)
         ), classified AS (
            SELECT i.*,
                   EXISTS (SELECT 1 FROM assignments a WHERE a.id = i.id)
                   OR EXISTS (SELECT 1 FROM assignment_aliases x WHERE x.alias_id = i.id) AS applied,
                   NOT EXISTS (SELECT 1 FROM flows f WHERE f.id = i.flow_id AND f.org_id = i.org_id)
                   OR NOT EXISTS (SELECT 1 FROM users u WHERE u.id = i.user_id AND u.org_id = i.org_id)
                       AS orphan,
                   (SELECT a.id FROM assignments a
                    WHERE a.flow_id = i.flow_id AND a.user_id = i.user_id
                      AND a.status IN ('pending', 'in_progress', 'overdue')
                    LIMIT 1) AS active_id
            FROM input i
         ), aliased AS (
            INSERT INTO assignment_aliases (alias_id, assignment_id, org_id, returned_id)
            SELECT id, active_id, org_id, id FROM classified
            WHERE NOT applied AND NOT orphan AND active_id IS NOT NULL
            ON CONFLICT (alias_id) DO NOTHING
            RETURNING alias_id
         )
         SELECT c.id,
                CASE WHEN c.applied THEN 'applied'
                     WHEN c.orphan THEN 'orphan'
                     WHEN c.active_id IS NOT NULL THEN 'aliased'
                     ELSE 'unresolved' END AS state
         FROM classified c",
    )
    .bind(&ids)
    .bind(&orgs)
    .bind(&flows)
    .bind(&users)
    .fetch_all(&mut *connection)
    .await?;
    let mut settled = Settled::default();
    for row in rows {
        match row.state.as_str() {
            "applied" => settled.applied += 1,
            "aliased" => settled.aliased += 1,
            "orphan" => settled.orphans.push(row.id),
            _ => {
                settled.unresolved.insert(row.id);
            }
        }
    }
    Ok(settled)
}

/// Records ids the API answered with an existing assignment (idempotent retries resolve to it).
async fn record_explicit_aliases(
    connection: &mut PgConnection,
    commands: &[&AssignCommand],
) -> Result<u64, sqlx::Error> {
    let ids: Vec<AssignmentId> = commands.iter().map(|c| c.assignment_id).collect();
    let targets: Vec<Option<AssignmentId>> =
        commands.iter().map(|c| c.existing_assignment_id).collect();
    let orgs: Vec<OrgId> = commands.iter().map(|c| c.org_id).collect();
    let result = sqlx::query(
        "INSERT INTO assignment_aliases (alias_id, assignment_id, org_id, returned_id)
         SELECT t.id, t.target, t.org_id, t.target
         FROM UNNEST($1::uuid[], $2::uuid[], $3::uuid[]) AS t(id, target, org_id)
         JOIN assignments a ON a.id = t.target AND a.org_id = t.org_id
         WHERE NOT EXISTS (SELECT 1 FROM assignments b WHERE b.id = t.id)
         ON CONFLICT (alias_id) DO NOTHING",
    )
    .bind(&ids)
    .bind(&targets)
    .bind(&orgs)
    .execute(&mut *connection)
    .await?;
    Ok(result.rows_affected())
}

/// The `flow.assigned` event body (design §7).
fn assigned_event(command: &AssignCommand, event_id: EventId) -> serde_json::Value {
    let snapshot = AssignmentSnapshot {
        id: command.assignment_id,
        org_id: command.org_id,
        flow_id: command.flow_id,
        flow_name: command.flow_name.clone(),
        assignee_email: command.assignee_email.clone(),
        status: AssignmentStatus::Pending.as_str().to_owned(),
        priority: command.priority.as_str().to_owned(),
        due_at: command.due_at,
        assigned_at: command.assigned_at,
        started_at: None,
        completed_at: None,
    };
    event_body(
        event_id,
        EventType::Assigned.as_str(),
        command.assigned_at,
        event_data(&snapshot),
    )
}

/// One item of the API's pre-publish lookup.
#[derive(Debug, Clone)]
pub struct LookupKey {
    /// Caller's organization.
    pub org_id: OrgId,
    /// Flow to assign.
    pub flow_id: FlowId,
    /// Normalized e-mail of the assignee.
    pub email_normalized: String,
    /// Id derived from the caller's `X-Request-ID`, if any.
    pub request_assignment_id: Option<AssignmentId>,
}

/// An assignment that already answers a request.
#[derive(Debug, Clone, FromRow)]
pub struct ExistingAssignment {
    /// The id to answer with.
    pub answer_id: AssignmentId,
    /// The assignment it resolves to.
    pub assignment_id: AssignmentId,
    /// Its flow.
    pub flow_id: FlowId,
    /// Its assignee.
    pub user_id: UserId,
    /// When it was assigned.
    pub assigned_at: DateTime<Utc>,
}

/// What the lookup found for one key.
#[derive(Debug, Clone, Default)]
pub struct LookupResult {
    /// The assignee, when the e-mail exists in the organization: (id, e-mail as stored).
    pub user: Option<(UserId, String)>,
    /// An earlier request with the same `X-Request-ID`, resolved.
    pub by_request: Option<ExistingAssignment>,
    /// The assignee's active assignment of this flow.
    pub active: Option<ExistingAssignment>,
}

/// Resolves many assign requests in one round trip: the user by e-mail, an earlier request with
/// the same id, and an active assignment of the same flow. Results are in input order.
pub async fn lookup<'e>(
    executor: impl PgExecutor<'e>,
    keys: &[LookupKey],
) -> Result<Vec<LookupResult>, sqlx::Error> {
    let orgs: Vec<OrgId> = keys.iter().map(|k| k.org_id).collect();
    let flows: Vec<FlowId> = keys.iter().map(|k| k.flow_id).collect();
    let emails: Vec<&str> = keys.iter().map(|k| k.email_normalized.as_str()).collect();
    let request_ids: Vec<Option<AssignmentId>> =
        keys.iter().map(|k| k.request_assignment_id).collect();
    #[derive(FromRow)]
    struct Row {
        ord: i64,
        user_id: Option<UserId>,
        user_email: Option<String>,
        request_answer_id: Option<AssignmentId>,
        request_assignment_id: Option<AssignmentId>,
        request_flow_id: Option<FlowId>,
        request_user_id: Option<UserId>,
        request_assigned_at: Option<DateTime<Utc>>,
        active_id: Option<AssignmentId>,
        active_assigned_at: Option<DateTime<Utc>>,
    }
    let rows: Vec<Row> = sqlx::query_as(
        "SELECT q.ord, u.id AS user_id, u.email AS user_email,
                r.answer_id AS request_answer_id, r.id AS request_assignment_id,
                r.flow_id AS request_flow_id, r.user_id AS request_user_id,
                r.assigned_at AS request_assigned_at,
                act.id AS active_id, act.assigned_at AS active_assigned_at
         FROM UNNEST($1::uuid[], $2::uuid[], $3::text[], $4::uuid[])
              WITH ORDINALITY AS q(org_id, flow_id, email, request_id, ord)
         LEFT JOIN users u ON u.org_id = q.org_id AND u.email_normalized = q.email
         LEFT JOIN LATERAL (
            SELECT a.id AS answer_id, a.id, a.flow_id, a.user_id, a.assigned_at
            FROM assignments a WHERE a.id = q.request_id AND a.org_id = q.org_id
            UNION ALL
            SELECT x.returned_id, a.id, a.flow_id, a.user_id, a.assigned_at
            FROM assignment_aliases x JOIN assignments a ON a.id = x.assignment_id
            WHERE x.alias_id = q.request_id AND x.org_id = q.org_id
            LIMIT 1
         ) r ON q.request_id IS NOT NULL
         LEFT JOIN LATERAL (
            SELECT a.id, a.assigned_at FROM assignments a
            WHERE a.flow_id = q.flow_id AND a.user_id = u.id
              AND a.status IN ('pending', 'in_progress', 'overdue')
            LIMIT 1
         ) act ON u.id IS NOT NULL
         ORDER BY q.ord",
    )
    .bind(&orgs)
    .bind(&flows)
    .bind(&emails)
    .bind(&request_ids)
    .fetch_all(executor)
    .await?;
    let mut results = vec![LookupResult::default(); keys.len()];
    for row in rows {
        let Some(slot) = usize::try_from(row.ord - 1)
            .ok()
            .and_then(|i| results.get_mut(i))
        else {
            continue;
        };
        slot.user = row.user_id.zip(row.user_email);
        if let (Some(answer_id), Some(assignment_id), Some(flow_id), Some(user_id), Some(at)) = (
            row.request_answer_id,
            row.request_assignment_id,
            row.request_flow_id,
            row.request_user_id,
            row.request_assigned_at,
        ) {
            slot.by_request = Some(ExistingAssignment {
                answer_id,
                assignment_id,
                flow_id,
                user_id,
                assigned_at: at,
            });
        }
        if let (Some(id), Some(at), Some((user_id, _))) =
            (row.active_id, row.active_assigned_at, slot.user.as_ref())
        {
            slot.active = Some(ExistingAssignment {
                answer_id: id,
                assignment_id: id,
                flow_id: keys[usize::try_from(row.ord - 1).unwrap_or_default()].flow_id,
                user_id: *user_id,
                assigned_at: at,
            });
        }
    }
    Ok(results)
}

/// An assignment as the API shows it.
#[derive(Debug, Clone, FromRow)]
pub struct AssignmentRecord {
    /// Id.
    pub id: AssignmentId,
    /// Owning organization.
    pub org_id: OrgId,
    /// Flow.
    pub flow_id: FlowId,
    /// Flow name.
    pub flow_name: String,
    /// Assignee.
    pub user_id: UserId,
    /// Assignee e-mail.
    pub assignee_email: String,
    /// Stored status (see [`AssignmentRecord::status`] for the reported one).
    pub status: String,
    /// Priority.
    pub priority: String,
    /// Notes.
    pub notes: Option<String>,
    /// Due date.
    pub due_at: Option<DateTime<Utc>>,
    /// Assignment time.
    pub assigned_at: DateTime<Utc>,
    /// First module activity.
    pub started_at: Option<DateTime<Utc>>,
    /// Completion.
    pub completed_at: Option<DateTime<Utc>>,
    /// When the scheduler recorded it overdue.
    pub overdue_at: Option<DateTime<Utc>>,
    /// Schedule that created it.
    pub schedule_id: Option<ScheduleId>,
    /// Modules completed.
    pub completed_modules: i64,
    /// Modules in the flow.
    pub total_modules: i64,
}

impl AssignmentRecord {
    /// The status to report now (overdue derived at read time).
    pub fn status(&self, now: DateTime<Utc>) -> AssignmentStatus {
        self.status
            .parse::<AssignmentStatus>()
            .unwrap_or(AssignmentStatus::Pending)
            .effective(self.due_at, now)
    }
}

/// Columns of [`AssignmentRecord`], for queries over `assignments a JOIN flows f JOIN users u`.
pub const RECORD_COLUMNS: &str = "a.id, a.org_id, a.flow_id, f.name AS flow_name, a.user_id,
    u.email AS assignee_email, a.status, a.priority, a.notes, a.due_at, a.assigned_at,
    a.started_at, a.completed_at, a.overdue_at, a.schedule_id,
    (SELECT count(*) FROM module_progress p WHERE p.assignment_id = a.id AND p.status = 'completed')
        AS completed_modules,
    (SELECT count(*) FROM modules m WHERE m.flow_id = a.flow_id) AS total_modules";

/// One assignment of an organization by id, or by an alias that resolves to it.
pub async fn get<'e>(
    executor: impl PgExecutor<'e>,
    org_id: OrgId,
    id: AssignmentId,
) -> Result<Option<AssignmentRecord>, sqlx::Error> {
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {RECORD_COLUMNS}
         FROM assignments a JOIN flows f ON f.id = a.flow_id JOIN users u ON u.id = a.user_id
         WHERE a.org_id = $1 AND a.id = COALESCE(
             (SELECT x.assignment_id FROM assignment_aliases x WHERE x.alias_id = $2 AND x.org_id = $1),
             $2)"
    )))
    .bind(org_id)
    .bind(id)
    .fetch_optional(executor)
    .await
}

/// Progress of one module within an assignment, joined with the module.
#[derive(Debug, Clone, FromRow)]
pub struct ModuleProgressRecord {
    /// Assignment.
    pub assignment_id: AssignmentId,
    /// Module.
    pub module_id: ModuleId,
    /// Module name.
    pub module_name: String,
    /// Module position in the flow.
    pub position: i32,
    /// `in_progress` or `completed`.
    pub status: String,
    /// When it was started.
    pub started_at: Option<DateTime<Utc>>,
    /// When it was completed.
    pub completed_at: Option<DateTime<Utc>>,
}

/// Module progress of several assignments, in flow order within each.
pub async fn module_progress<'e>(
    executor: impl PgExecutor<'e>,
    assignment_ids: &[AssignmentId],
) -> Result<Vec<ModuleProgressRecord>, sqlx::Error> {
    sqlx::query_as(
        "SELECT p.assignment_id, p.module_id, m.name AS module_name, m.position, p.status,
                p.started_at, p.completed_at
         FROM module_progress p JOIN modules m ON m.id = p.module_id
         WHERE p.assignment_id = ANY($1)
         ORDER BY p.assignment_id, m.position",
    )
    .bind(assignment_ids)
    .fetch_all(executor)
    .await
}

/// Filters of the assignment list; every field narrows it.
#[derive(Debug, Clone, Default)]
pub struct ListFilter {
    /// Only this flow.
    pub flow_id: Option<FlowId>,
    /// Only this assignee (normalized e-mail).
    pub email_normalized: Option<String>,
    /// Only this status, as reported at the reading time.
    pub status: Option<AssignmentStatus>,
}

/// An organization's assignments that pass `filter`, in (`assignedAt`, id) order after the
/// cursor, statuses as of `now`.
pub async fn list<'e>(
    executor: impl PgExecutor<'e>,
    org_id: OrgId,
    filter: &ListFilter,
    after: Option<(DateTime<Utc>, AssignmentId)>,
    limit: i64,
    now: DateTime<Utc>,
) -> Result<Vec<AssignmentRecord>, sqlx::Error> {
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {RECORD_COLUMNS}
         FROM assignments a JOIN flows f ON f.id = a.flow_id JOIN users u ON u.id = a.user_id
         WHERE a.org_id = $1
           AND ($2::uuid IS NULL OR a.flow_id = $2)
           AND ($3::text IS NULL OR u.email_normalized = $3)
           AND ($4::text IS NULL OR (CASE WHEN a.status IN ('pending', 'in_progress')
                                               AND a.due_at <= $5
                                          THEN 'overdue' ELSE a.status END) = $4)
           AND ($6::timestamptz IS NULL OR (a.assigned_at, a.id) > ($6, $7))
         ORDER BY a.assigned_at, a.id
         LIMIT $8"
    )))
    .bind(org_id)
    .bind(filter.flow_id)
    .bind(filter.email_normalized.as_deref())
    .bind(filter.status.map(AssignmentStatus::as_str))
    .bind(now)
    .bind(after.map(|(at, _)| at))
    .bind(after.map(|(_, id)| id))
    .bind(limit)
    .fetch_all(executor)
    .await
}
