//! Enrollment rules: their rows, the user attributes they are evaluated on, the ledger that
//! makes each (rule, user, generation) assign at most once (migration 0190), and the users whose
//! evaluation is pending (migration 0200).

use std::time::Duration;

use chrono::{DateTime, Utc};
use flow_domain::ids::{AssignmentId, EnrollmentRuleId, FlowId, OrgId, UserId};
use sqlx::{FromRow, PgConnection, PgExecutor};

/// A stored rule.
#[derive(Debug, Clone, FromRow)]
pub struct RuleRecord {
    pub id: EnrollmentRuleId,
    /// Owning organization.
    pub org_id: OrgId,
    /// What the organization calls it.
    pub name: String,
    /// The condition, as the API takes it (validated before it was stored).
    pub condition: serde_json::Value,
    /// The flow it assigns.
    pub flow_id: FlowId,
    /// The flow's name.
    pub flow_name: String,
    /// Days from `due_from` to the due date; no due date without.
    pub due_days: Option<i32>,
    /// `start_date` or `matched`.
    pub due_from: String,
    /// Priority of its assignments.
    pub priority: String,
    /// Notes of its assignments.
    pub notes: Option<String>,
    /// Whether a user who stops matching and matches again is assigned again.
    pub reassign: bool,
    /// Whether the open assignments it made for a user are cancelled when they stop matching.
    pub cancel_on_unmatch: bool,
    /// Creation time.
    pub created_at: DateTime<Utc>,
    /// Last change.
    pub updated_at: DateTime<Utc>,
}

/// A rule's fields, to create or replace one.
#[derive(Debug, Clone)]
pub struct RuleFields {
    /// Name.
    pub name: String,
    /// Condition, validated.
    pub condition: serde_json::Value,
    /// Flow.
    pub flow_id: FlowId,
    /// Days to the due date.
    pub due_days: Option<i32>,
    /// `start_date` or `matched`.
    pub due_from: &'static str,
    /// Priority.
    pub priority: String,
    /// Notes.
    pub notes: Option<String>,
    /// Re-assign on a re-match.
    pub reassign: bool,
    /// Cancel its open assignments of a user who stops matching.
    pub cancel_on_unmatch: bool,
}

const RULE_COLUMNS: &str = "r.id, r.org_id, r.name, r.condition, r.flow_id, f.name AS flow_name,
    r.due_days, r.due_from, r.priority, r.notes, r.reassign, r.cancel_on_unmatch, r.created_at,
    r.updated_at";

/// Creates a rule.
pub async fn create(
    connection: &mut PgConnection,
    org_id: OrgId,
    fields: &RuleFields,
) -> Result<RuleRecord, sqlx::Error> {
    let id = EnrollmentRuleId::new();
    let insert = sqlx::query(
        "INSERT INTO enrollment_rules (id, org_id, name, condition, flow_id, due_days, due_from,
                                       priority, notes, reassign, cancel_on_unmatch)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
    )
    .bind(id)
    .bind(org_id);
    bind_fields(insert, fields)
        .execute(&mut *connection)
        .await?;
    get(&mut *connection, org_id, id)
        .await?
        .ok_or(sqlx::Error::RowNotFound)
}

/// A statement of the rules table, its ids bound as `$1` and `$2`.
type FieldsQuery<'q> = sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>;

/// Binds a rule's fields as parameters $3 to $11, in this order: name, condition, flow_id,
/// due_days, due_from, priority, notes, reassign, cancel_on_unmatch. One binding for the insert and the update, so
/// they cannot drift apart.
fn bind_fields<'q>(query: FieldsQuery<'q>, fields: &'q RuleFields) -> FieldsQuery<'q> {
    query
        .bind(&fields.name)
        .bind(&fields.condition)
        .bind(fields.flow_id)
        .bind(fields.due_days)
        .bind(fields.due_from)
        .bind(&fields.priority)
        .bind(fields.notes.as_deref())
        .bind(fields.reassign)
        .bind(fields.cancel_on_unmatch)
}

/// Replaces a rule's fields; false when the organization has no such rule.
pub async fn update(
    connection: &mut PgConnection,
    org_id: OrgId,
    id: EnrollmentRuleId,
    fields: &RuleFields,
) -> Result<bool, sqlx::Error> {
    let update = sqlx::query(
        "UPDATE enrollment_rules SET name = $3, condition = $4, flow_id = $5, due_days = $6,
                due_from = $7, priority = $8, notes = $9, reassign = $10, cancel_on_unmatch = $11,
                updated_at = now()
         WHERE org_id = $1 AND id = $2",
    )
    .bind(org_id)
    .bind(id);
    let updated = bind_fields(update, fields)
        .execute(&mut *connection)
        .await?;
    Ok(updated.rows_affected() == 1)
}

/// One rule of the organization.
pub async fn get<'e>(
    executor: impl PgExecutor<'e>,
    org_id: OrgId,
    id: EnrollmentRuleId,
) -> Result<Option<RuleRecord>, sqlx::Error> {
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {RULE_COLUMNS} FROM enrollment_rules r JOIN flows f ON f.id = r.flow_id
         WHERE r.org_id = $1 AND r.id = $2"
    )))
    .bind(org_id)
    .bind(id)
    .fetch_optional(executor)
    .await
}

/// The organization's rules in id order (creation order), after `after` when given.
pub async fn list<'e>(
    executor: impl PgExecutor<'e>,
    org_id: OrgId,
    after: Option<EnrollmentRuleId>,
    limit: i64,
) -> Result<Vec<RuleRecord>, sqlx::Error> {
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {RULE_COLUMNS} FROM enrollment_rules r JOIN flows f ON f.id = r.flow_id
         WHERE r.org_id = $1 AND ($2::uuid IS NULL OR r.id > $2)
         ORDER BY r.id LIMIT $3"
    )))
    .bind(org_id)
    .bind(after)
    .bind(limit)
    .fetch_all(executor)
    .await
}

/// How many rules the organization has.
pub async fn count<'e>(executor: impl PgExecutor<'e>, org_id: OrgId) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar("SELECT count(*) FROM enrollment_rules WHERE org_id = $1")
        .bind(org_id)
        .fetch_one(executor)
        .await
}

/// Deletes a rule (its matches with it; its assignments and ledger rows stay); false when the
/// organization has no such rule.
pub async fn delete<'e>(
    executor: impl PgExecutor<'e>,
    org_id: OrgId,
    id: EnrollmentRuleId,
) -> Result<bool, sqlx::Error> {
    let deleted = sqlx::query("DELETE FROM enrollment_rules WHERE org_id = $1 AND id = $2")
        .bind(org_id)
        .bind(id)
        .execute(executor)
        .await?;
    Ok(deleted.rows_affected() == 1)
}

pub use flow_domain::enrollment::Profile;

/// The profile columns, with the user's groups, over a set of users `u`.
const PROFILE_SELECT: &str = "SELECT u.id, u.email, u.name, u.active, u.department, u.title,
           u.start_date,
           COALESCE(array_agg(g.id) FILTER (WHERE g.id IS NOT NULL), '{}') AS group_ids,
           COALESCE(array_agg(lower(g.display_name)) FILTER (WHERE g.id IS NOT NULL), '{}')
               AS group_names
    FROM selected u
    LEFT JOIN user_group_members m ON m.user_id = u.id
    LEFT JOIN user_groups g ON g.id = m.group_id
    GROUP BY u.id, u.email, u.name, u.active, u.department, u.title, u.start_date
    ORDER BY u.id";

/// The profiles of the organization's users among `ids`, in id order.
pub async fn profiles<'e>(
    executor: impl PgExecutor<'e>,
    org_id: OrgId,
    ids: &[UserId],
) -> Result<Vec<Profile>, sqlx::Error> {
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "WITH selected AS (SELECT * FROM users WHERE org_id = $1 AND id = ANY($2))
         {PROFILE_SELECT}"
    )))
    .bind(org_id)
    .bind(ids)
    .fetch_all(executor)
    .await
}

/// A page of the organization's profiles in id order, after `after` when given (a backfill's or
/// a preview's walk over every user, in bounded memory).
pub async fn profiles_page<'e>(
    executor: impl PgExecutor<'e>,
    org_id: OrgId,
    after: Option<UserId>,
    limit: i64,
) -> Result<Vec<Profile>, sqlx::Error> {
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "WITH selected AS (SELECT * FROM users
                           WHERE org_id = $1 AND ($2::uuid IS NULL OR id > $2)
                           ORDER BY id LIMIT $3)
         {PROFILE_SELECT}"
    )))
    .bind(org_id)
    .bind(after)
    .bind(limit)
    .fetch_all(executor)
    .await
}

/// One (rule, user) as evaluated now.
#[derive(Debug, Clone, Copy)]
pub struct Evaluated {
    /// The rule.
    pub rule_id: EnrollmentRuleId,
    /// The (active) user.
    pub user_id: UserId,
    /// Whether the rule's condition holds for them.
    pub matching: bool,
}

/// A (rule, user) that matches, at its current generation.
#[derive(Debug, Clone, Copy, FromRow)]
pub struct Match {
    /// The rule.
    pub rule_id: EnrollmentRuleId,
    /// The user.
    pub user_id: UserId,
    /// 1 at the first match; more after re-matches of a rule that re-assigns.
    pub generation: i32,
    /// When this generation matched.
    pub matched_at: DateTime<Utc>,
    /// Whether the generation's assignment is persisted (made, or resolved to an active
    /// assignment of the same flow the user already had).
    pub persisted: bool,
}

/// Records what an evaluation found, in `connection`'s transaction: pairs that no longer match
/// are marked so; pairs that match are claimed (generation 1 at a first match, one more at a
/// re-match of a rule whose `reassign` is set, unchanged otherwise). Answers every matching
/// pair with its generation and whether its assignment is persisted already. Concurrent callers
/// serialise on the pairs' rows and agree on their generations.
pub async fn record_matches(
    connection: &mut PgConnection,
    org_id: OrgId,
    evaluated: &[Evaluated],
    now: DateTime<Utc>,
) -> Result<Vec<Match>, sqlx::Error> {
    let rules: Vec<EnrollmentRuleId> = evaluated.iter().map(|pair| pair.rule_id).collect();
    let users: Vec<UserId> = evaluated.iter().map(|pair| pair.user_id).collect();
    let matching: Vec<bool> = evaluated.iter().map(|pair| pair.matching).collect();
    // Rows are locked in one order (rule, user) so concurrent evaluations cannot deadlock.
    sqlx::query(
        "UPDATE enrollment_matches m SET matching = false
         FROM (SELECT * FROM UNNEST($1::uuid[], $2::uuid[], $3::bool[]) AS t(rule_id, user_id, matching)
               ORDER BY rule_id, user_id) i
         WHERE m.rule_id = i.rule_id AND m.user_id = i.user_id AND NOT i.matching AND m.matching",
    )
    .bind(&rules)
    .bind(&users)
    .bind(&matching)
    .execute(&mut *connection)
    .await?;
    sqlx::query(
        "INSERT INTO enrollment_matches AS m (rule_id, user_id, org_id, matching, generation,
                                              matched_at)
         SELECT i.rule_id, i.user_id, $4, true, 1, $5
         FROM UNNEST($1::uuid[], $2::uuid[], $3::bool[]) AS i(rule_id, user_id, matching)
         JOIN enrollment_rules r ON r.id = i.rule_id AND r.org_id = $4
         WHERE i.matching
         ORDER BY i.rule_id, i.user_id
         ON CONFLICT (rule_id, user_id) DO UPDATE SET
             matching = true,
             generation = m.generation
                 + (SELECT CASE WHEN r.reassign THEN 1 ELSE 0 END
                    FROM enrollment_rules r WHERE r.id = EXCLUDED.rule_id),
             matched_at = CASE
                 WHEN (SELECT r.reassign FROM enrollment_rules r WHERE r.id = EXCLUDED.rule_id)
                 THEN EXCLUDED.matched_at ELSE m.matched_at END
         WHERE NOT m.matching",
    )
    .bind(&rules)
    .bind(&users)
    .bind(&matching)
    .bind(org_id)
    .bind(now)
    .execute(&mut *connection)
    .await?;
    sqlx::query_as(
        "SELECT m.rule_id, m.user_id, m.generation, m.matched_at,
                EXISTS (SELECT 1 FROM enrollment_assignments e
                        WHERE e.rule_id = m.rule_id AND e.user_id = m.user_id
                          AND e.generation = m.generation
                          AND (EXISTS (SELECT 1 FROM assignments a WHERE a.id = e.assignment_id)
                               OR EXISTS (SELECT 1 FROM assignment_aliases x
                                          WHERE x.alias_id = e.assignment_id))) AS persisted
         FROM UNNEST($1::uuid[], $2::uuid[], $3::bool[]) AS i(rule_id, user_id, matching)
         JOIN enrollment_matches m ON m.rule_id = i.rule_id AND m.user_id = i.user_id
         WHERE i.matching AND m.matching",
    )
    .bind(&rules)
    .bind(&users)
    .bind(&matching)
    .fetch_all(&mut *connection)
    .await
}

/// One generation's assignment, for the ledger.
#[derive(Debug, Clone, Copy)]
pub struct LedgerEntry {
    /// The assignment id derived from the rest.
    pub assignment_id: AssignmentId,
    /// The rule.
    pub rule_id: EnrollmentRuleId,
    /// The user.
    pub user_id: UserId,
    /// The generation.
    pub generation: i32,
}

/// Writes the ledger rows of `entries` (those already there stay as they are); answers the
/// assignment ids written now, the first time, which are the ones to audit.
pub async fn record_ledger(
    connection: &mut PgConnection,
    org_id: OrgId,
    entries: &[LedgerEntry],
) -> Result<Vec<AssignmentId>, sqlx::Error> {
    let ids: Vec<AssignmentId> = entries.iter().map(|entry| entry.assignment_id).collect();
    let rules: Vec<EnrollmentRuleId> = entries.iter().map(|entry| entry.rule_id).collect();
    let users: Vec<UserId> = entries.iter().map(|entry| entry.user_id).collect();
    let generations: Vec<i32> = entries.iter().map(|entry| entry.generation).collect();
    sqlx::query_scalar(
        "INSERT INTO enrollment_assignments (assignment_id, rule_id, user_id, org_id, generation)
         SELECT t.id, t.rule_id, t.user_id, $5, t.generation
         FROM UNNEST($1::uuid[], $2::uuid[], $3::uuid[], $4::int[])
             AS t(id, rule_id, user_id, generation)
         ORDER BY t.id
         ON CONFLICT DO NOTHING
         RETURNING assignment_id",
    )
    .bind(&ids)
    .bind(&rules)
    .bind(&users)
    .bind(&generations)
    .bind(org_id)
    .fetch_all(&mut *connection)
    .await
}

/// A user whose evaluation is pending, as queued (by a trigger, in the transaction of the write
/// that changed them: migration 0200).
#[derive(Debug, Clone, Copy, PartialEq, Eq, FromRow)]
pub struct Pending {
    /// The organization.
    pub org_id: OrgId,
    /// The user.
    pub user_id: UserId,
    /// The queueing it stands for: the row is deleted only while it is still this one.
    pub version: i64,
}

/// The pending rows of these users of the organization, as they stand.
pub async fn pending<'e>(
    executor: impl PgExecutor<'e>,
    org_id: OrgId,
    user_ids: &[UserId],
) -> Result<Vec<Pending>, sqlx::Error> {
    sqlx::query_as(
        "SELECT org_id, user_id, version FROM enrollment_pending
         WHERE org_id = $1 AND user_id = ANY($2)",
    )
    .bind(org_id)
    .bind(user_ids)
    .fetch_all(executor)
    .await
}

/// Deletes the pending rows an evaluation handled, each only if it was not queued again since
/// it was read (its version is the same) and is not being queued again right now (a row locked
/// by a write is skipped: that write queues it anew). Answers how many were deleted.
pub async fn delete_pending<'e>(
    executor: impl PgExecutor<'e>,
    handled: &[Pending],
) -> Result<u64, sqlx::Error> {
    if handled.is_empty() {
        return Ok(0);
    }
    let orgs: Vec<OrgId> = handled.iter().map(|row| row.org_id).collect();
    let users: Vec<UserId> = handled.iter().map(|row| row.user_id).collect();
    let versions: Vec<i64> = handled.iter().map(|row| row.version).collect();
    let deleted = sqlx::query(
        "DELETE FROM enrollment_pending p
         USING (SELECT q.org_id, q.user_id
                FROM enrollment_pending q
                JOIN UNNEST($1::uuid[], $2::uuid[], $3::bigint[]) AS h(org_id, user_id, version)
                  ON q.org_id = h.org_id AND q.user_id = h.user_id AND q.version = h.version
                ORDER BY q.org_id, q.user_id
                FOR UPDATE OF q SKIP LOCKED) l
         WHERE p.org_id = l.org_id AND p.user_id = l.user_id",
    )
    .bind(&orgs)
    .bind(&users)
    .bind(&versions)
    .execute(executor)
    .await?;
    Ok(deleted.rows_affected())
}

/// Claims up to `limit` pending rows queued more than `grace` ago and not claimed (or deferred)
/// by another scheduler, for `lease`: other schedulers skip them until it ends (a scheduler that
/// dies leaves them to the next after that). In turns per organization: each organization's
/// rows are ranked oldest first, and the first of every organization is taken before the second
/// of any, so one organization's large import does not hold up another's few users.
/// `FOR UPDATE SKIP LOCKED`, so schedulers share the rows and none waits on a write that is
/// queueing one.
pub async fn claim_pending<'e>(
    executor: impl PgExecutor<'e>,
    grace: Duration,
    lease: Duration,
    limit: i64,
) -> Result<Vec<Pending>, sqlx::Error> {
    sqlx::query_as(
        "WITH ranked AS (
            SELECT org_id, user_id, queued_at,
                   row_number() OVER (PARTITION BY org_id ORDER BY queued_at, user_id) AS turn
            FROM enrollment_pending
            WHERE queued_at < clock_timestamp() - $1 * interval '1 millisecond'
              AND (claimed_until IS NULL OR claimed_until < clock_timestamp())
         ),
         picked AS (
            SELECT p.org_id, p.user_id
            FROM enrollment_pending p
            JOIN (SELECT org_id, user_id, turn, queued_at FROM ranked
                  ORDER BY turn, queued_at, org_id LIMIT $3) r
              ON r.org_id = p.org_id AND r.user_id = p.user_id
            WHERE p.claimed_until IS NULL OR p.claimed_until < clock_timestamp()
            FOR UPDATE OF p SKIP LOCKED
         )
         UPDATE enrollment_pending p
         SET claimed_until = clock_timestamp() + $2 * interval '1 millisecond'
         FROM picked c
         WHERE p.org_id = c.org_id AND p.user_id = c.user_id
         RETURNING p.org_id, p.user_id, p.version",
    )
    .bind(millis(grace))
    .bind(millis(lease))
    .bind(limit)
    .fetch_all(executor)
    .await
}

/// Leaves these users of the organization pending, not to be claimed for `delay`: their
/// evaluation found assignments over the organization's assign limit, which a scheduler
/// publishes once the limit has room again. Each row gets a fresh version, so the evaluation
/// that deferred them does not delete it.
pub async fn defer_pending<'e>(
    executor: impl PgExecutor<'e>,
    org_id: OrgId,
    user_ids: &[UserId],
    delay: Duration,
) -> Result<(), sqlx::Error> {
    if user_ids.is_empty() {
        return Ok(());
    }
    sqlx::query(
        "INSERT INTO enrollment_pending AS p (org_id, user_id, claimed_until)
         SELECT $1, u.user_id, clock_timestamp() + $3 * interval '1 millisecond'
         FROM UNNEST($2::uuid[]) AS u(user_id) ORDER BY u.user_id
         ON CONFLICT (org_id, user_id) DO UPDATE
             SET version = EXCLUDED.version, claimed_until = EXCLUDED.claimed_until",
    )
    .bind(org_id)
    .bind(user_ids)
    .bind(millis(delay))
    .execute(executor)
    .await?;
    Ok(())
}

/// How many users the organization has (active or not): what a preview walks.
pub async fn user_count<'e>(
    executor: impl PgExecutor<'e>,
    org_id: OrgId,
) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar("SELECT count(*) FROM users WHERE org_id = $1")
        .bind(org_id)
        .fetch_one(executor)
        .await
}

/// Pending rows, all organizations together (for the gauge and the tests).
pub async fn pending_count<'e>(executor: impl PgExecutor<'e>) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar("SELECT count(*) FROM enrollment_pending")
        .fetch_one(executor)
        .await
}

/// A duration in milliseconds, for `$n * interval '1 millisecond'`.
pub(crate) fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// Which of the flows `flow_ids` of the organization are archived (their rules assign nothing).
pub async fn archived_flows<'e>(
    executor: impl PgExecutor<'e>,
    org_id: OrgId,
    flow_ids: &[FlowId],
) -> Result<Vec<FlowId>, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT id FROM flows WHERE org_id = $1 AND id = ANY($2) AND archived_at IS NOT NULL",
    )
    .bind(org_id)
    .bind(flow_ids)
    .fetch_all(executor)
    .await
}
