//! Assignments: batch persistence from assign commands (with aliases for duplicates and the
//! `flow.assigned` outbox row in the same transaction), the API's batched pre-publish lookup, and
//! reads.

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Utc};
use flow_domain::events::{EventData, EventSource, EventType, InboundEventRef, NewEvent};
use flow_domain::ids::{
    AssignmentId, EnrollmentRuleId, FlowId, ModuleId, OrgId, ScheduleId, UserId,
};
use flow_domain::lane::Lane;
use flow_domain::messages::AssignCommand;
use flow_domain::{AssignmentStatus, ModuleStatus, Priority};
use sqlx::types::Json;
use sqlx::{FromRow, PgConnection, PgExecutor};

use super::lifecycle::AssignmentSnapshot;
use super::{Conflicts, outbox};

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
    /// Commands whose id is already taken by an assignment of another flow, assignee or
    /// organization (an id collision or a forged command): applying them would silently merge two
    /// different requests, so they fail visibly instead.
    #[error("the id of {0:?} already belongs to another assignment")]
    Collisions(Vec<AssignmentId>),
    /// Concurrent changes kept some commands from settling; trying again later will.
    #[error("{0} assign commands did not settle against concurrent changes")]
    Unsettled(usize),
}

impl ApplyError {
    /// True when applying the same commands later may succeed.
    pub fn is_transient(&self) -> bool {
        match self {
            Self::Database(error) => super::is_transient(error),
            Self::Orphans(_) | Self::Collisions(_) => false,
            Self::Unsettled(_) => true,
        }
    }
}

/// Applies assign commands inside `transaction`: inserts new assignments and their outbox events,
/// and records every other handed-out id as an alias of the assignment it resolved to. Idempotent:
/// applying the same commands again changes nothing, and a command repeated within the batch (a
/// retried request, a scheduler retry) is applied once.
pub async fn apply_batch(
    connection: &mut PgConnection,
    lane: Lane,
    commands: &[AssignCommand],
) -> Result<BatchOutcome, ApplyError> {
    let mut outcome = BatchOutcome::default();
    let mut seen = HashSet::with_capacity(commands.len());
    let mut unique = Vec::with_capacity(commands.len());
    for command in commands {
        if seen.insert(command.assignment_id) {
            unique.push(command);
        } else {
            outcome.already_applied += 1;
        }
    }
    // Alias-only commands: the API answered with an existing assignment.
    let (alias_only, creating): (Vec<&AssignCommand>, Vec<&AssignCommand>) = unique
        .into_iter()
        .partition(|command| command.existing_assignment_id.is_some());
    if !alias_only.is_empty() {
        outcome.aliased += record_explicit_aliases(&mut *connection, &alias_only).await?;
    }
    let mut pending: Vec<&AssignCommand> = creating;
    // A concurrent transaction may commit a conflicting active assignment, or complete the one we
    // aliased to, between statements; a few rounds settle it.
    for round in 0..5 {
        if pending.is_empty() {
            break;
        }
        let inserted = if round == 0 {
            // Most batches are new assignments only: tried as a plain insert first.
            super::insert_optimistically!(connection, |conflicts| {
                insert_new(&mut *connection, &pending, lane, conflicts).await
            })?
        } else {
            insert_new(&mut *connection, &pending, lane, Conflicts::Handle).await?
        };
        outcome.inserted += inserted.len() as u64;
        pending.retain(|command| !inserted.contains(&command.assignment_id));
        if pending.is_empty() {
            break;
        }
        let settled = alias_to_active(&mut *connection, &pending).await?;
        if !settled.orphans.is_empty() {
            return Err(ApplyError::Orphans(settled.orphans));
        }
        if !settled.collisions.is_empty() {
            return Err(ApplyError::Collisions(settled.collisions));
        }
        outcome.aliased += settled.aliased;
        outcome.already_applied += settled.applied;
        pending.retain(|command| settled.unresolved.contains(&command.assignment_id));
    }
    if !pending.is_empty() {
        return Err(ApplyError::Unsettled(pending.len()));
    }
    Ok(outcome)
}

/// The statement of [`insert_new`], with what follows the assignments' insert (`ON CONFLICT …`,
/// or nothing for a plain insert).
macro_rules! insert_statement {
    ($assignments_conflict:literal) => {
        concat!(
            "WITH input AS (
            SELECT * FROM UNNEST($1::uuid[], $2::uuid[], $3::uuid[], $4::uuid[], $5::text[],
                                 $6::text[], $7::timestamptz[], $8::timestamptz[], $9::text[],
                                 $10::uuid[])
                AS t(id, org_id, flow_id, user_id, priority, notes, due_at, assigned_at,
                     request_id, schedule_id)
         ), inserted AS (
            INSERT INTO assignments (id, org_id, flow_id, user_id, priority, notes, due_at,
                                     assigned_at, request_id, schedule_id, enrollment_rule_id,
                                     event_source)
            SELECT i.id, i.org_id, i.flow_id, i.user_id, i.priority, i.notes, i.due_at,
                   i.assigned_at, i.request_id, i.schedule_id, ledger.rule_id, inbound.source
            FROM input i
            -- An enrollment rule's assignment: its ledger row (written before the command was
            -- published) names the rule, for the assignment and its event.
            LEFT JOIN LATERAL (SELECT e.rule_id FROM enrollment_assignments e
                               WHERE e.assignment_id = i.id AND e.org_id = i.org_id) ledger ON true
            -- An inbound event's assignment: its action row (written with the event's dedupe
            -- row, before the command was published) names the event and the trigger.
            LEFT JOIN LATERAL (SELECT jsonb_build_object(
                                   'source', x.source, 'type', x.event_type, 'id', x.event_id,
                                   'triggerId', 'etr_' || replace(x.trigger_id::text, '-', ''))
                                   AS source
                               FROM inbound_event_actions x
                               WHERE x.assignment_id = i.id AND x.org_id = i.org_id
                                 AND x.action = 'assign') inbound ON true
            -- The parents must exist in the same organization (checked here, not by foreign
            -- keys: see migration 0009). LATERAL … LIMIT 1 keeps the plan an index probe per
            -- row whatever the planner guesses about the input's size.
            CROSS JOIN LATERAL (SELECT 1 FROM flows f
                                WHERE f.id = i.flow_id AND f.org_id = i.org_id LIMIT 1) flow
            CROSS JOIN LATERAL (SELECT 1 FROM users u
                                WHERE u.id = i.user_id AND u.org_id = i.org_id LIMIT 1) assignee
            ",
            $assignments_conflict,
            "
            RETURNING id, enrollment_rule_id, event_source
         ), current_schedules AS (
            UPDATE schedules s SET current_assignment_id = i.id
            FROM input i JOIN inserted USING (id)
            WHERE i.schedule_id IS NOT NULL AND s.id = i.schedule_id
         )
         SELECT id, enrollment_rule_id, event_source FROM inserted"
        )
    };
}

/// Inserts the commands' assignments, then one `flow.assigned` outbox row per inserted assignment
/// (through [`outbox::write`], in `lane`); returns the ids inserted. With [`Conflicts::Handle`],
/// what conflicts is skipped; with [`Conflicts::Fail`], a taken key fails the statement.
async fn insert_new(
    connection: &mut PgConnection,
    commands: &[&AssignCommand],
    lane: Lane,
    conflicts: Conflicts,
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
    let rows: Vec<(
        AssignmentId,
        Option<EnrollmentRuleId>,
        Option<Json<InboundEventRef>>,
    )> = sqlx::query_as(match conflicts {
        Conflicts::Fail => insert_statement!(""),
        Conflicts::Handle => insert_statement!("ON CONFLICT DO NOTHING"),
    })
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
    .fetch_all(&mut *connection)
    .await?;
    let inserted: HashMap<AssignmentId, Option<EventSource>> = rows
        .into_iter()
        .map(|(id, rule, event)| (id, EventSource::of(rule, event.map(|json| json.0))))
        .collect();
    // Each event continues its command's request; a command that names none (sent before commands
    // carried it, or by untraced work) joins the trace of the batch applying it.
    let batch_trace = crate::telemetry::current_traceparent();
    let events: Vec<NewEvent> = commands
        .iter()
        .filter_map(|command| {
            let source = inserted.get(&command.assignment_id)?;
            Some(assigned_event(
                command,
                source.clone(),
                batch_trace.as_deref(),
            ))
        })
        .collect();
    outbox::write(&mut *connection, lane, &events, conflicts).await?;
    Ok(inserted.into_keys().collect())
}

/// What became of commands that were not inserted.
#[derive(Debug, Default)]
struct Settled {
    aliased: u64,
    applied: u64,
    unresolved: HashSet<AssignmentId>,
    orphans: Vec<AssignmentId>,
    collisions: Vec<AssignmentId>,
}

/// For commands that were not inserted: already applied ones are left alone; those whose id is
/// taken by an assignment of another flow or assignee are collisions; those whose flow or user is
/// missing are orphans; the others are recorded as aliases of the active assignment of
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
                   EXISTS (SELECT 1 FROM assignments a
                           WHERE a.id = i.id AND a.org_id = i.org_id
                             AND a.flow_id = i.flow_id AND a.user_id = i.user_id)
                   OR EXISTS (SELECT 1 FROM assignment_aliases x
                              JOIN assignments a ON a.id = x.assignment_id
                              WHERE x.alias_id = i.id AND x.org_id = i.org_id
                                AND a.flow_id = i.flow_id AND a.user_id = i.user_id) AS applied,
                   EXISTS (SELECT 1 FROM assignments a WHERE a.id = i.id)
                   OR EXISTS (SELECT 1 FROM assignment_aliases x WHERE x.alias_id = i.id) AS taken,
                   NOT EXISTS (SELECT 1 FROM flows f WHERE f.id = i.flow_id AND f.org_id = i.org_id)
                   OR NOT EXISTS (SELECT 1 FROM users u WHERE u.id = i.user_id AND u.org_id = i.org_id)
                       AS orphan,
                   (SELECT a.id FROM assignments a
                    WHERE a.flow_id = i.flow_id AND a.user_id = i.user_id
                      AND flow_is_active(a.status)
                    LIMIT 1) AS active_id
            FROM input i
         ), aliased AS (
            INSERT INTO assignment_aliases (alias_id, assignment_id, org_id, returned_id)
            SELECT id, active_id, org_id, id FROM classified
            WHERE NOT taken AND NOT orphan AND active_id IS NOT NULL
            ON CONFLICT (alias_id) DO NOTHING
            RETURNING alias_id
         )
         SELECT c.id,
                CASE WHEN c.applied THEN 'applied'
                     WHEN c.taken THEN 'collision'
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
            "collision" => settled.collisions.push(row.id),
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

/// The `flow.assigned` event of a command's new assignment, with the body every consumer
/// receives; `batch_trace` is its trace when the command names none.
fn assigned_event(
    command: &AssignCommand,
    source: Option<EventSource>,
    batch_trace: Option<&str>,
) -> NewEvent {
    let snapshot = AssignmentSnapshot {
        id: command.assignment_id,
        org_id: command.org_id,
        flow_id: command.flow_id,
        flow_name: command.flow_name.clone(),
        assignee_email: command.assignee_email.clone(),
        status: AssignmentStatus::Pending,
        priority: command.priority,
        due_at: command.due_at,
        assigned_at: command.assigned_at,
        started_at: None,
        completed_at: None,
        due_changes: 0,
    };
    // An enrollment rule's assignment names its rule (`data.source.enrollmentRuleId`), an
    // inbound event's its event (`data.source.event`).
    let data = EventData {
        source,
        ..EventData::from(&snapshot)
    };
    NewEvent::about(
        command.org_id,
        data,
        command.assigned_at,
        EventType::Assigned,
        command.assigned_at,
        command.traceparent.as_deref().or(batch_trace),
    )
}

/// The idempotency key of a request with an `X-Request-ID`, as the API claims it.
#[derive(Debug, Clone)]
pub struct RequestKey {
    /// The assignment id derived from the organization and the `X-Request-ID`.
    pub assignment_id: AssignmentId,
    /// SHA-256 of the validated request; a different request under the same key is a conflict.
    pub fingerprint: [u8; 32],
    /// The time to answer with when this request is the first with its key.
    pub assigned_at: DateTime<Utc>,
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
    /// The request's idempotency key, when it has an `X-Request-ID`.
    pub request: Option<RequestKey>,
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

/// The claim of an idempotency key, as first written by whichever request came first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestClaim {
    /// Fingerprint of the request that claimed the key.
    pub fingerprint: Vec<u8>,
    /// The id every request with this key is answered with.
    pub answer_id: AssignmentId,
    /// The `assignedAt` every request with this key is answered with.
    pub assigned_at: DateTime<Utc>,
}

/// What the lookup found for one key.
#[derive(Debug, Clone, Default)]
pub struct LookupResult {
    /// The assignee, when the e-mail exists in the organization: (id, e-mail as stored).
    pub user: Option<(UserId, String)>,
    /// The assignee was deactivated: new assigns to them are refused.
    pub user_inactive: bool,
    /// An earlier request with the same `X-Request-ID`, persisted and resolved.
    pub by_request: Option<ExistingAssignment>,
    /// The claim of the request's idempotency key (present when the request has one and the
    /// assignee exists): this request's own claim when it came first, else the first one's.
    pub claim: Option<RequestClaim>,
    /// The assignee's active assignment of this flow.
    pub active: Option<ExistingAssignment>,
}

/// Resolves many assign requests in one round trip: the user by e-mail, an earlier persisted
/// request with the same id, an active assignment of the same flow, and — for requests with an
/// `X-Request-ID` — claims the idempotency key or reads the claim that holds it (on any replica,
/// whichever request's statement commits first wins). Results are in input order.
pub async fn lookup<'e>(
    executor: impl PgExecutor<'e>,
    keys: &[LookupKey],
) -> Result<Vec<LookupResult>, sqlx::Error> {
    // One statement may claim a key only once: a key repeated in the batch is sent once and its
    // later occurrences copy the first one's answer.
    let mut first_with_key: std::collections::HashMap<AssignmentId, usize> =
        std::collections::HashMap::new();
    let mut copies: Vec<(usize, usize)> = Vec::new();
    let mut requests: Vec<Option<&RequestKey>> = Vec::with_capacity(keys.len());
    for (index, key) in keys.iter().enumerate() {
        match &key.request {
            Some(request) => match first_with_key.entry(request.assignment_id) {
                std::collections::hash_map::Entry::Occupied(first) => {
                    copies.push((index, *first.get()));
                    requests.push(None);
                }
                std::collections::hash_map::Entry::Vacant(slot) => {
                    slot.insert(index);
                    requests.push(Some(request));
                }
            },
            None => requests.push(None),
        }
    }
    let orgs: Vec<OrgId> = keys.iter().map(|k| k.org_id).collect();
    let flows: Vec<FlowId> = keys.iter().map(|k| k.flow_id).collect();
    let emails: Vec<&str> = keys.iter().map(|k| k.email_normalized.as_str()).collect();
    let request_ids: Vec<Option<AssignmentId>> = requests
        .iter()
        .map(|request| request.map(|r| r.assignment_id))
        .collect();
    let fingerprints: Vec<Option<&[u8]>> = requests
        .iter()
        .map(|request| request.map(|r| r.fingerprint.as_slice()))
        .collect();
    let proposed: Vec<Option<DateTime<Utc>>> = requests
        .iter()
        .map(|request| request.map(|r| r.assigned_at))
        .collect();
    #[derive(FromRow)]
    struct Row {
        ord: i64,
        user_id: Option<UserId>,
        user_email: Option<String>,
        user_active: Option<bool>,
        request_answer_id: Option<AssignmentId>,
        request_assignment_id: Option<AssignmentId>,
        request_flow_id: Option<FlowId>,
        request_user_id: Option<UserId>,
        request_assigned_at: Option<DateTime<Utc>>,
        active_id: Option<AssignmentId>,
        active_assigned_at: Option<DateTime<Utc>>,
        claim_fingerprint: Option<Vec<u8>>,
        claim_answer_id: Option<AssignmentId>,
        claim_assigned_at: Option<DateTime<Utc>>,
    }
    let rows: Vec<Row> = sqlx::query_as(
        "WITH resolved AS (
            SELECT q.ord, q.org_id, q.request_id, q.fingerprint, q.proposed_at,
                   u.id AS user_id, u.email AS user_email, u.active AS user_active,
                   r.answer_id AS request_answer_id, r.id AS request_assignment_id,
                   r.flow_id AS request_flow_id, r.user_id AS request_user_id,
                   r.assigned_at AS request_assigned_at,
                   act.id AS active_id, act.assigned_at AS active_assigned_at
            FROM UNNEST($1::uuid[], $2::uuid[], $3::text[], $4::uuid[], $5::bytea[],
                        $6::timestamptz[])
                 WITH ORDINALITY AS q(org_id, flow_id, email, request_id, fingerprint,
                                      proposed_at, ord)
            -- LATERAL … LIMIT 1: an index probe per key. As a plain join, a bulk request's
            -- 1,000 keys were planned as a hash join over a sequential scan of every user of
            -- the server, on every call.
            LEFT JOIN LATERAL (SELECT u.id, u.email, u.active FROM users u
                               WHERE u.org_id = q.org_id AND u.email_normalized = q.email
                               LIMIT 1) u ON true
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
                 AND flow_is_active(a.status)
               LIMIT 1
            ) act ON u.id IS NOT NULL
         ), claimed AS (
            -- The first request with a key writes its fingerprint and answer; any later one
            -- (a retry, a duplicate on another replica) takes the row lock, waits for the first
            -- to commit and reads what it wrote. Keys are claimed in one order, the keys' own:
            -- two replicas' statements holding the same retried requests in their arrival
            -- orders locked the rows in opposite orders, and Postgres aborted one as a deadlock.
            INSERT INTO request_claims (assignment_id, org_id, fingerprint, answer_id, assigned_at)
            SELECT request_id, org_id, fingerprint,
                   COALESCE(request_answer_id, active_id, request_id),
                   COALESCE(request_assigned_at, active_assigned_at, proposed_at)
            FROM resolved
            WHERE request_id IS NOT NULL AND user_id IS NOT NULL AND user_active
            ORDER BY request_id
            ON CONFLICT (assignment_id) DO UPDATE SET org_id = request_claims.org_id
            RETURNING assignment_id, fingerprint, answer_id, assigned_at
         )
         SELECT r.ord, r.user_id, r.user_email, r.user_active, r.request_answer_id,
                r.request_assignment_id,
                r.request_flow_id, r.request_user_id, r.request_assigned_at, r.active_id,
                r.active_assigned_at, c.fingerprint AS claim_fingerprint,
                c.answer_id AS claim_answer_id, c.assigned_at AS claim_assigned_at
         FROM resolved r LEFT JOIN claimed c ON c.assignment_id = r.request_id
         ORDER BY r.ord",
    )
    .bind(&orgs)
    .bind(&flows)
    .bind(&emails)
    .bind(&request_ids)
    .bind(&fingerprints)
    .bind(&proposed)
    .fetch_all(executor)
    .await?;
    let mut results = vec![LookupResult::default(); keys.len()];
    for row in rows {
        let Some(index) = usize::try_from(row.ord - 1)
            .ok()
            .filter(|index| *index < keys.len())
        else {
            continue;
        };
        let slot = &mut results[index];
        slot.user = row.user_id.zip(row.user_email);
        slot.user_inactive = row.user_active == Some(false);
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
        if let (Some(fingerprint), Some(answer_id), Some(assigned_at)) = (
            row.claim_fingerprint,
            row.claim_answer_id,
            row.claim_assigned_at,
        ) {
            slot.claim = Some(RequestClaim {
                fingerprint,
                answer_id,
                assigned_at,
            });
        }
        if let (Some(id), Some(at), Some((user_id, _))) =
            (row.active_id, row.active_assigned_at, slot.user.as_ref())
        {
            slot.active = Some(ExistingAssignment {
                answer_id: id,
                assignment_id: id,
                flow_id: keys[index].flow_id,
                user_id: *user_id,
                assigned_at: at,
            });
        }
    }
    for (index, first) in copies {
        let copied = results[first].clone();
        // The same key may come with another e-mail or flow: only what the key decides is
        // copied; the assignee and the active assignment are this request's own.
        if results[index].user.is_some() {
            results[index].by_request = copied.by_request;
            results[index].claim = copied.claim;
        }
    }
    Ok(results)
}

/// An assignment as the API shows it.
#[derive(Debug, Clone, FromRow)]
pub struct AssignmentRecord {
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
    /// Stored status (see [`AssignmentRecord::status`] for the reported one); a name this
    /// build does not know fails the read.
    pub status: AssignmentStatus,
    pub priority: Priority,
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
    /// When it was cancelled.
    pub cancelled_at: Option<DateTime<Utc>>,
    /// Why, as the canceller said.
    pub cancel_reason: Option<String>,
    /// Schedule that created it.
    pub schedule_id: Option<ScheduleId>,
    /// Enrollment rule that created it.
    pub enrollment_rule_id: Option<EnrollmentRuleId>,
    /// Inbound event (and trigger) that created it.
    pub event_source: Option<Json<InboundEventRef>>,
    /// When the completion expires (a flow with a validity), fixed at completion.
    pub expires_at: Option<DateTime<Utc>>,
    /// When it expired (recorded by the scheduler; the status stays `completed`).
    pub expired_at: Option<DateTime<Utc>>,
    /// Its last change (made, progressed, changed, cancelled, renewed, expired).
    pub updated_at: DateTime<Utc>,
    /// The renewal assignment of this completion (an alias resolved to its assignment).
    pub renewed_by: Option<AssignmentId>,
    /// The completion this assignment renews.
    pub renewal_of: Option<AssignmentId>,
    /// Modules completed.
    pub completed_modules: i64,
    /// Modules in the flow.
    pub total_modules: i64,
}

impl AssignmentRecord {
    /// The status to report now (overdue derived at read time).
    pub fn status(&self, now: DateTime<Utc>) -> AssignmentStatus {
        self.status.effective(self.due_at, now)
    }
}

/// Columns of [`AssignmentRecord`], for queries over `assignments a JOIN flows f JOIN users u`.
pub const RECORD_COLUMNS: &str = "a.id, a.org_id, a.flow_id, f.name AS flow_name, a.user_id,
    u.email AS assignee_email, a.status, a.priority, a.notes, a.due_at, a.assigned_at,
    a.started_at, a.completed_at, a.overdue_at, a.cancelled_at, a.cancel_reason, a.schedule_id,
    a.enrollment_rule_id, a.event_source, a.expires_at, a.expired_at, a.updated_at,
    COALESCE((SELECT x.assignment_id FROM assignment_aliases x WHERE x.alias_id = a.renewal_id),
             a.renewal_id) AS renewed_by,
    COALESCE((SELECT r.id FROM assignments r WHERE r.renewal_id = a.id LIMIT 1),
             (SELECT r.id FROM assignment_aliases x JOIN assignments r ON r.renewal_id = x.alias_id
              WHERE x.assignment_id = a.id LIMIT 1)) AS renewal_of,
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
    /// `in_progress` or `completed`; a name this build does not know fails the read.
    pub status: ModuleStatus,
    /// When it was started.
    pub started_at: Option<DateTime<Utc>>,
    /// When it was completed.
    pub completed_at: Option<DateTime<Utc>>,
    /// Scaled score, -1..1, when reported.
    pub score: Option<f64>,
    /// Passed or failed, when reported.
    pub success: Option<bool>,
    /// Time spent in seconds, when reported.
    pub duration_seconds: Option<i64>,
}

/// Module progress of several assignments, in flow order within each.
pub async fn module_progress<'e>(
    executor: impl PgExecutor<'e>,
    assignment_ids: &[AssignmentId],
) -> Result<Vec<ModuleProgressRecord>, sqlx::Error> {
    sqlx::query_as(
        "SELECT p.assignment_id, p.module_id, m.name AS module_name, m.position, p.status,
                p.started_at, p.completed_at, p.score, p.success, p.duration_seconds
         FROM module_progress p JOIN modules m ON m.id = p.module_id
         WHERE p.assignment_id = ANY($1)
         ORDER BY p.assignment_id, m.position",
    )
    .bind(assignment_ids)
    .fetch_all(executor)
    .await
}

/// One module of an assignment's flow, in flow order: what was reported of it, or nothing yet.
#[derive(Debug, Clone)]
pub enum ModuleState {
    /// No progress on the module yet.
    NotStarted {
        /// Module.
        module_id: ModuleId,
        /// Module name.
        module_name: String,
    },
    /// Started or completed.
    Reported(ModuleProgressRecord),
}

/// A row of [`module_states`]: a module with its progress columns, null when none was reported.
#[derive(FromRow)]
struct ModuleStateRow {
    assignment_id: AssignmentId,
    module_id: ModuleId,
    module_name: String,
    position: i32,
    status: Option<ModuleStatus>,
    started_at: Option<DateTime<Utc>>,
    completed_at: Option<DateTime<Utc>>,
    score: Option<f64>,
    success: Option<bool>,
    duration_seconds: Option<i64>,
}

impl From<ModuleStateRow> for ModuleState {
    fn from(row: ModuleStateRow) -> Self {
        match row.status {
            None => Self::NotStarted {
                module_id: row.module_id,
                module_name: row.module_name,
            },
            Some(status) => Self::Reported(ModuleProgressRecord {
                assignment_id: row.assignment_id,
                module_id: row.module_id,
                module_name: row.module_name,
                position: row.position,
                status,
                started_at: row.started_at,
                completed_at: row.completed_at,
                score: row.score,
                success: row.success,
                duration_seconds: row.duration_seconds,
            }),
        }
    }
}

/// Every module of the flow of assignment `assignment_id` (persisted, not an alias), in flow
/// order, with its progress when any was reported: one statement, so one snapshot.
pub async fn module_states<'e>(
    executor: impl PgExecutor<'e>,
    assignment_id: AssignmentId,
) -> Result<Vec<ModuleState>, sqlx::Error> {
    let rows: Vec<ModuleStateRow> = sqlx::query_as(
        "SELECT a.id AS assignment_id, m.id AS module_id, m.name AS module_name, m.position,
                p.status, p.started_at, p.completed_at, p.score, p.success, p.duration_seconds
         FROM assignments a
         JOIN modules m ON m.flow_id = a.flow_id
         LEFT JOIN module_progress p ON p.assignment_id = a.id AND p.module_id = m.id
         WHERE a.id = $1
         ORDER BY m.position",
    )
    .bind(assignment_id)
    .fetch_all(executor)
    .await?;
    Ok(rows.into_iter().map(ModuleState::from).collect())
}

/// Filters of the assignment list; every field narrows it.
#[derive(Debug, Clone, Default)]
pub struct ListFilter {
    /// Only this flow.
    pub flow_id: Option<FlowId>,
    /// Only this assignee (normalized e-mail).
    pub email_normalized: Option<String>,
    /// Only this status, as reported at the reading time. Without one, cancelled assignments are
    /// left out unless `include_cancelled` (the rule of every list and report, design §16).
    pub status: Option<AssignmentStatus>,
    /// Whether cancelled assignments are listed when no status is asked for.
    pub include_cancelled: bool,
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
    let query = ListQuery {
        flow_id: filter.flow_id,
        email_normalized: filter.email_normalized.as_deref(),
        email_containing: None,
        status: filter.status,
        include_cancelled: filter.include_cancelled,
    };
    list_where(executor, org_id, &query, after, limit, now).await
}

/// What narrows an assignment list (the API's, and the dashboard's list of a flow); `None` does
/// not narrow.
pub(crate) struct ListQuery<'a> {
    /// Only this flow.
    pub flow_id: Option<FlowId>,
    /// Only this assignee (normalized e-mail).
    pub email_normalized: Option<&'a str>,
    /// Only assignees whose e-mail contains this, case-insensitive.
    pub email_containing: Option<&'a str>,
    /// Only this status, as reported at the reading time (without one, cancelled assignments only
    /// with `include_cancelled`).
    pub status: Option<AssignmentStatus>,
    /// Whether cancelled assignments are listed when no status is asked for.
    pub include_cancelled: bool,
}

/// The one query of every assignment list: an organization's assignments that `query` lets
/// through, in (`assignedAt`, id) order after the cursor, statuses as of `now`.
pub(crate) async fn list_where<'e>(
    executor: impl PgExecutor<'e>,
    org_id: OrgId,
    query: &ListQuery<'_>,
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
           AND ($4::text IS NULL OR strpos(u.email_normalized, lower($4)) > 0)
           AND (($5::text IS NULL AND ($10 OR a.status <> 'cancelled'))
                OR flow_effective_status(a.status, a.due_at, $6) = $5)
           AND ($7::timestamptz IS NULL OR (a.assigned_at, a.id) > ($7, $8))
         ORDER BY a.assigned_at, a.id
         LIMIT $9"
    )))
    .bind(org_id)
    .bind(query.flow_id)
    .bind(query.email_normalized)
    .bind(query.email_containing)
    .bind(query.status.map(AssignmentStatus::as_str))
    .bind(now)
    .bind(after.map(|(at, _)| at))
    .bind(after.map(|(_, id)| id))
    .bind(limit)
    .bind(query.include_cancelled)
    .fetch_all(executor)
    .await
}

/// Where a reader of the change feed is: after the change of transaction `seq` to `id`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChangePosition {
    /// The transaction of the change (`change_xid`).
    pub seq: i64,
    pub id: AssignmentId,
}

/// An assignment as the change feed lists it, with its position.
#[derive(Debug, Clone, FromRow)]
pub struct ChangedAssignment {
    #[sqlx(flatten)]
    pub record: AssignmentRecord,
    /// The transaction of its last change.
    pub change_seq: i64,
}

/// Where the change feed starts.
#[derive(Debug, Clone, Copy)]
pub enum ChangeStart {
    /// At the first change made at or after this instant (by `updated_at`; reads the
    /// organization's assignments once to find it).
    Since(DateTime<Utc>),
    /// After this position (a cursor handed out before).
    After(ChangePosition),
}

/// Up to `limit` of the organization's assignments (cancelled ones too) in the order of their
/// last change from `start`, narrowed to a flow and an assignee when given: only changes of
/// transactions older than every transaction still running, so a change committed later always
/// lands after every position handed out (migration 0248).
pub async fn changes<'e>(
    executor: impl PgExecutor<'e>,
    org_id: OrgId,
    flow_id: Option<FlowId>,
    email_normalized: Option<&str>,
    start: ChangeStart,
    limit: i64,
) -> Result<Vec<ChangedAssignment>, sqlx::Error> {
    let (since, after) = match start {
        ChangeStart::Since(at) => (Some(at), None),
        ChangeStart::After(position) => (None, Some(position)),
    };
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "WITH horizon AS (SELECT pg_snapshot_xmin(pg_current_snapshot()) AS xmin),
         first AS (SELECT min(s.change_xid) AS xid FROM assignments s
                   WHERE $4::timestamptz IS NOT NULL AND s.org_id = $1 AND s.updated_at >= $4)
         SELECT {RECORD_COLUMNS}, a.change_xid::text::bigint AS change_seq
         FROM assignments a JOIN flows f ON f.id = a.flow_id JOIN users u ON u.id = a.user_id
         WHERE a.org_id = $1
           AND a.change_xid < (SELECT xmin FROM horizon)
           AND ($2::uuid IS NULL OR a.flow_id = $2)
           AND ($3::text IS NULL OR u.email_normalized = $3)
           AND ($4::timestamptz IS NULL OR a.change_xid >= (SELECT xid FROM first))
           AND ($5::bigint IS NULL OR (a.change_xid, a.id) > ($5::text::xid8, $6))
         ORDER BY a.change_xid, a.id
         LIMIT $7"
    )))
    .bind(org_id)
    .bind(flow_id)
    .bind(email_normalized)
    .bind(since)
    .bind(after.map(|position| position.seq))
    .bind(after.map(|position| position.id))
    .bind(limit)
    .fetch_all(executor)
    .await
}

/// True when `id` is the key of an `X-Request-ID` request of `org` that was claimed (answered or
/// being answered), or the assignment of an inbound event's action (answered to its sender),
/// whether or not its assignment is persisted yet.
pub async fn claimed<'e>(
    executor: impl PgExecutor<'e>,
    org_id: OrgId,
    id: AssignmentId,
) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM request_claims WHERE assignment_id = $1 AND org_id = $2)
             OR EXISTS (SELECT 1 FROM inbound_event_actions
                        WHERE assignment_id = $1 AND org_id = $2 AND action = 'assign')",
    )
    .bind(id)
    .bind(org_id)
    .fetch_one(executor)
    .await
}
