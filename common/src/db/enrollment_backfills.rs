//! Backfills of enrollment rules as background jobs (migration 0202): requested by a surface,
//! claimed by a scheduler under a lease, advanced a page of users at a time (so a job whose
//! scheduler died resumes after the last user it finished), and read back by the surfaces.

use std::time::Duration;

use chrono::{DateTime, Utc};
pub use flow_domain::enrollment::BackfillStatus;
use flow_domain::ids::{BackfillId, EnrollmentRuleId, KeyId, OrgId, UserId};
use sqlx::{FromRow, PgConnection, PgExecutor, PgPool};

use super::audit::Actor;
use super::enrollment_rules::millis;

/// A stored backfill.
#[derive(Debug, Clone, FromRow)]
pub struct Backfill {
    pub id: BackfillId,
    /// Owning organization.
    pub org_id: OrgId,
    /// The rule it runs.
    pub rule_id: EnrollmentRuleId,
    /// Where it stands.
    pub status: BackfillStatus,
    /// Who asked: `account`, `api_key` or `flowctl` (see [`Backfill::actor`]).
    pub actor_kind: String,
    /// The account's e-mail, for an account.
    pub actor_account: Option<String>,
    /// The key, for an API key.
    pub actor_key: Option<KeyId>,
    /// Active users the rule matched so far.
    pub matching: i64,
    /// Assignments queued so far.
    pub queued: i64,
    /// The last user done.
    pub after_user_id: Option<UserId>,
    /// Times a scheduler took it up.
    pub attempts: i32,
    /// Why it failed, once it has.
    pub error: Option<String>,
    /// When it was requested.
    pub created_at: DateTime<Utc>,
    /// When a scheduler first took it up.
    pub started_at: Option<DateTime<Utc>>,
    /// When it succeeded or failed.
    pub finished_at: Option<DateTime<Utc>>,
}

impl Backfill {
    /// Who asked, as the audit trail names them.
    pub fn actor(&self) -> Option<Actor<'_>> {
        Actor::from_parts(
            &self.actor_kind,
            self.actor_account.as_deref(),
            self.actor_key,
        )
    }
}

const COLUMNS: &str = "id, org_id, rule_id, status, actor_kind, actor_account, actor_key,
    matching, queued, after_user_id, attempts, error, created_at, started_at, finished_at";

/// Most backfills an organization may have queued or running at once (one per rule at most).
pub const MAX_UNFINISHED: i64 = 20;

/// What a request of a backfill did.
#[derive(Debug, Clone)]
pub enum Requested {
    /// A new job, queued.
    Created(Backfill),
    /// The rule's job that is queued or running already.
    Existing(Backfill),
    /// The organization has [`MAX_UNFINISHED`] backfills queued or running: nothing queued.
    Full,
}

/// Queues a backfill of the rule, unless one is queued or running already (answered instead),
/// or the organization has [`MAX_UNFINISHED`] unfinished ones. Requests of one organization take
/// turns (they lock its row of `enrollment_backfill_turns`), so concurrent ones cannot pass the
/// cap.
pub async fn request(
    connection: &mut PgConnection,
    org_id: OrgId,
    rule_id: EnrollmentRuleId,
    actor: Actor<'_>,
) -> Result<Requested, sqlx::Error> {
    lock_turn(&mut *connection, org_id).await?;
    let existing: Option<Backfill> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {COLUMNS} FROM enrollment_backfills
         WHERE org_id = $1 AND rule_id = $2 AND status IN ('queued', 'running')"
    )))
    .bind(org_id)
    .bind(rule_id)
    .fetch_optional(&mut *connection)
    .await?;
    if let Some(existing) = existing {
        return Ok(Requested::Existing(existing));
    }
    let unfinished: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM enrollment_backfills
         WHERE org_id = $1 AND status IN ('queued', 'running')",
    )
    .bind(org_id)
    .fetch_one(&mut *connection)
    .await?;
    if unfinished >= MAX_UNFINISHED {
        return Ok(Requested::Full);
    }
    // The organization's turn row is locked: no other request of it can insert meanwhile, and a
    // job that ends does not make one for the rule.
    let created: Backfill = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "INSERT INTO enrollment_backfills (id, org_id, rule_id, actor_kind, actor_account,
                                           actor_key)
         VALUES ($1, $2, $3, $4, $5, $6)
         RETURNING {COLUMNS}"
    )))
    .bind(BackfillId::new())
    .bind(org_id)
    .bind(rule_id)
    .bind(actor.kind())
    .bind(actor.account())
    .bind(actor.key())
    .fetch_one(&mut *connection)
    .await?;
    Ok(Requested::Created(created))
}

/// Locks the organization's turn row (made if missing) until the transaction ends.
async fn lock_turn(connection: &mut PgConnection, org_id: OrgId) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO enrollment_backfill_turns (org_id) VALUES ($1)
         ON CONFLICT (org_id) DO NOTHING",
    )
    .bind(org_id)
    .execute(&mut *connection)
    .await?;
    sqlx::query("SELECT org_id FROM enrollment_backfill_turns WHERE org_id = $1 FOR UPDATE")
        .bind(org_id)
        .execute(&mut *connection)
        .await?;
    Ok(())
}

/// One backfill of the organization's rule.
pub async fn get<'e>(
    executor: impl PgExecutor<'e>,
    org_id: OrgId,
    rule_id: EnrollmentRuleId,
    id: BackfillId,
) -> Result<Option<Backfill>, sqlx::Error> {
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {COLUMNS} FROM enrollment_backfills
         WHERE org_id = $1 AND rule_id = $2 AND id = $3"
    )))
    .bind(org_id)
    .bind(rule_id)
    .bind(id)
    .fetch_optional(executor)
    .await
}

/// The latest backfill of each of the organization's rules that has one.
pub async fn latest<'e>(
    executor: impl PgExecutor<'e>,
    org_id: OrgId,
) -> Result<Vec<Backfill>, sqlx::Error> {
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT DISTINCT ON (rule_id) {COLUMNS} FROM enrollment_backfills
         WHERE org_id = $1 ORDER BY rule_id, created_at DESC, id DESC"
    )))
    .bind(org_id)
    .fetch_all(executor)
    .await
}

/// A backfill a scheduler took up, with the token its updates must carry.
#[derive(Debug, Clone)]
pub struct Claimed {
    /// The job as it stood when claimed (status `running`).
    pub backfill: Backfill,
    /// Proves the lease: an update without it (another scheduler took the job over) changes
    /// nothing.
    pub token: uuid::Uuid,
}

/// What a scheduler may take up: queued, or running under a lease that ended (its scheduler
/// died, or it gave its turn back).
const CLAIMABLE: &str = "(status = 'queued' OR (status = 'running' AND lease_until < now()))";

/// Organizations looked at per claim: the first that can be locked and has a job to run wins.
const CLAIM_CANDIDATES: i64 = 8;

/// Takes up a backfill for `lease`, in turns per organization: among the organizations with a
/// backfill to take up and none running (under a live lease), the one served least recently (or
/// never); of its backfills, the oldest. At most one backfill of an organization runs at a time,
/// with any number of schedulers: the claim locks the organization's turn row
/// (`FOR UPDATE SKIP LOCKED`, so schedulers take different organizations) and checks again,
/// under that lock, that none of its backfills runs.
pub async fn claim(pool: &PgPool, lease: Duration) -> Result<Option<Claimed>, sqlx::Error> {
    let candidates: Vec<OrgId> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT b.org_id
         FROM (SELECT org_id, created_at FROM enrollment_backfills WHERE {CLAIMABLE}) b
         LEFT JOIN enrollment_backfill_turns t ON t.org_id = b.org_id
         WHERE NOT EXISTS (SELECT 1 FROM enrollment_backfills r
                           WHERE r.org_id = b.org_id AND r.status = 'running'
                             AND r.lease_until >= now())
         GROUP BY b.org_id, t.served_at
         ORDER BY t.served_at NULLS FIRST, min(b.created_at), b.org_id
         LIMIT $1"
    )))
    .bind(CLAIM_CANDIDATES)
    .fetch_all(pool)
    .await?;
    for org_id in candidates {
        let mut transaction = pool.begin().await?;
        sqlx::query(
            "INSERT INTO enrollment_backfill_turns (org_id) VALUES ($1)
             ON CONFLICT (org_id) DO NOTHING",
        )
        .bind(org_id)
        .execute(&mut *transaction)
        .await?;
        let locked: Option<OrgId> = sqlx::query_scalar(
            "SELECT org_id FROM enrollment_backfill_turns WHERE org_id = $1
             FOR UPDATE SKIP LOCKED",
        )
        .bind(org_id)
        .fetch_optional(&mut *transaction)
        .await?;
        if locked.is_none() {
            // Another scheduler is claiming for it, or a request is queueing one.
            continue;
        }
        // A statement of its own, so it sees what a claim committed before the lock was taken.
        if let Some(claimed) = claim_of(&mut transaction, org_id, lease).await? {
            sqlx::query("UPDATE enrollment_backfill_turns SET served_at = now() WHERE org_id = $1")
                .bind(org_id)
                .execute(&mut *transaction)
                .await?;
            transaction.commit().await?;
            return Ok(Some(claimed));
        }
    }
    Ok(None)
}

/// Takes up the organization's oldest backfill to take up, unless one of its backfills runs.
async fn claim_of(
    connection: &mut PgConnection,
    org_id: OrgId,
    lease: Duration,
) -> Result<Option<Claimed>, sqlx::Error> {
    let token = uuid::Uuid::new_v4();
    let backfill: Option<Backfill> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "UPDATE enrollment_backfills b
         SET status = 'running', lease_token = $1,
             lease_until = now() + $2 * interval '1 millisecond',
             attempts = b.attempts + 1, started_at = COALESCE(b.started_at, now())
         FROM (SELECT id FROM enrollment_backfills
               WHERE org_id = $3 AND {CLAIMABLE}
                 AND NOT EXISTS (SELECT 1 FROM enrollment_backfills r
                                 WHERE r.org_id = $3 AND r.status = 'running'
                                   AND r.lease_until >= now())
               ORDER BY created_at, id
               LIMIT 1
               FOR UPDATE SKIP LOCKED) c
         WHERE b.id = c.id
         RETURNING {}",
        COLUMNS
            .split(',')
            .map(|column| format!("b.{}", column.trim()))
            .collect::<Vec<_>>()
            .join(", ")
    )))
    .bind(token)
    .bind(millis(lease))
    .bind(org_id)
    .fetch_optional(&mut *connection)
    .await?;
    Ok(backfill.map(|backfill| Claimed { backfill, token }))
}

/// Gives the job back without counting the attempt, to be taken up again from where it stopped
/// at `until` at the earliest: at once when its turn is over (other organizations go first, as
/// they were served less recently), or when the organization's assign limit has room again
/// (`reason` says so to whoever reads the job meanwhile). False when the lease was lost.
pub async fn pause<'e>(
    executor: impl PgExecutor<'e>,
    claimed: &Claimed,
    until: Duration,
    reason: Option<&str>,
) -> Result<bool, sqlx::Error> {
    let updated = sqlx::query(
        "UPDATE enrollment_backfills
         SET error = $3, lease_until = now() + $4 * interval '1 millisecond',
             attempts = greatest(attempts - 1, 0)
         WHERE id = $1 AND lease_token = $2 AND status = 'running'",
    )
    .bind(claimed.backfill.id)
    .bind(claimed.token)
    .bind(reason)
    .bind(millis(until))
    .execute(executor)
    .await?;
    Ok(updated.rows_affected() == 1)
}

/// Records a page done: the last user, the counts to add, and a fresh lease. False when the
/// lease was lost (another scheduler has the job, or it was deleted with its rule).
pub async fn advance<'e>(
    executor: impl PgExecutor<'e>,
    claimed: &Claimed,
    after: UserId,
    matching: u64,
    queued: u64,
    lease: Duration,
) -> Result<bool, sqlx::Error> {
    let updated = sqlx::query(
        "UPDATE enrollment_backfills
         SET after_user_id = $3, matching = matching + $4, queued = queued + $5,
             lease_until = now() + $6 * interval '1 millisecond'
         WHERE id = $1 AND lease_token = $2 AND status = 'running'",
    )
    .bind(claimed.backfill.id)
    .bind(claimed.token)
    .bind(after)
    .bind(i64::try_from(matching).unwrap_or(i64::MAX))
    .bind(i64::try_from(queued).unwrap_or(i64::MAX))
    .bind(millis(lease))
    .execute(executor)
    .await?;
    Ok(updated.rows_affected() == 1)
}

/// Ends the job: `succeeded`, or `failed` with `error`. False when the lease was lost.
pub async fn finish<'e>(
    executor: impl PgExecutor<'e>,
    claimed: &Claimed,
    error: Option<&str>,
) -> Result<bool, sqlx::Error> {
    let status = match error {
        None => BackfillStatus::Succeeded,
        Some(_) => BackfillStatus::Failed,
    };
    let updated = sqlx::query(
        "UPDATE enrollment_backfills
         SET status = $3, error = $4, finished_at = now(), lease_token = NULL, lease_until = NULL
         WHERE id = $1 AND lease_token = $2 AND status = 'running'",
    )
    .bind(claimed.backfill.id)
    .bind(claimed.token)
    .bind(status.as_str())
    .bind(error)
    .execute(executor)
    .await?;
    Ok(updated.rows_affected() == 1)
}

/// Gives the job back after a failure that may pass (the broker, the database), so a scheduler
/// tries it again after `backoff`, from where it stopped. False when the lease was lost.
pub async fn release<'e>(
    executor: impl PgExecutor<'e>,
    claimed: &Claimed,
    error: &str,
    backoff: Duration,
) -> Result<bool, sqlx::Error> {
    let updated = sqlx::query(
        "UPDATE enrollment_backfills
         SET error = $3, lease_until = now() + $4 * interval '1 millisecond'
         WHERE id = $1 AND lease_token = $2 AND status = 'running'",
    )
    .bind(claimed.backfill.id)
    .bind(claimed.token)
    .bind(error)
    .bind(millis(backoff))
    .execute(executor)
    .await?;
    Ok(updated.rows_affected() == 1)
}

/// Backfills queued or running, all organizations together (for the gauge).
pub async fn waiting_count<'e>(executor: impl PgExecutor<'e>) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT count(*) FROM enrollment_backfills WHERE status IN ('queued', 'running')",
    )
    .fetch_one(executor)
    .await
}
