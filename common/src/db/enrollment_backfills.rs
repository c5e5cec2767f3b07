//! Backfills of enrollment rules as background jobs (migration 0202): requested by a surface,
//! claimed by a scheduler under a lease, advanced a page of users at a time (so a job whose
//! scheduler died resumes after the last user it finished), and read back by the surfaces.

use std::time::Duration;

use chrono::{DateTime, Utc};
pub use flow_domain::enrollment::BackfillStatus;
use flow_domain::ids::{BackfillId, EnrollmentRuleId, KeyId, OrgId, UserId};
use sqlx::{FromRow, PgConnection, PgExecutor};

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

/// Queues a backfill of the rule, unless one is queued or running already: answers the new one
/// (`true`) or that one (`false`).
pub async fn request(
    connection: &mut PgConnection,
    org_id: OrgId,
    rule_id: EnrollmentRuleId,
    actor: Actor<'_>,
) -> Result<(Backfill, bool), sqlx::Error> {
    // A request racing with the end of the unfinished one finds neither on its first try.
    for _ in 0..3 {
        let created: Option<Backfill> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "INSERT INTO enrollment_backfills (id, org_id, rule_id, actor_kind, actor_account,
                                               actor_key)
             VALUES ($1, $2, $3, $4, $5, $6)
             ON CONFLICT (rule_id) WHERE status IN ('queued', 'running') DO NOTHING
             RETURNING {COLUMNS}"
        )))
        .bind(BackfillId::new())
        .bind(org_id)
        .bind(rule_id)
        .bind(actor.kind())
        .bind(actor.account())
        .bind(actor.key())
        .fetch_optional(&mut *connection)
        .await?;
        if let Some(created) = created {
            return Ok((created, true));
        }
        let existing: Option<Backfill> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT {COLUMNS} FROM enrollment_backfills
             WHERE org_id = $1 AND rule_id = $2 AND status IN ('queued', 'running')"
        )))
        .bind(org_id)
        .bind(rule_id)
        .fetch_optional(&mut *connection)
        .await?;
        if let Some(existing) = existing {
            return Ok((existing, false));
        }
    }
    Err(sqlx::Error::RowNotFound)
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

/// Takes up the oldest backfill that is queued, or running under a lease that ended (its
/// scheduler died), for `lease`. `FOR UPDATE SKIP LOCKED`: schedulers take different jobs.
pub async fn claim<'e>(
    executor: impl PgExecutor<'e>,
    lease: Duration,
) -> Result<Option<Claimed>, sqlx::Error> {
    let token = uuid::Uuid::new_v4();
    let backfill: Option<Backfill> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "UPDATE enrollment_backfills b
         SET status = 'running', lease_token = $1,
             lease_until = now() + $2 * interval '1 millisecond',
             attempts = b.attempts + 1, started_at = COALESCE(b.started_at, now())
         FROM (SELECT id FROM enrollment_backfills
               WHERE status = 'queued' OR (status = 'running' AND lease_until < now())
               ORDER BY created_at
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
    .fetch_optional(executor)
    .await?;
    Ok(backfill.map(|backfill| Claimed { backfill, token }))
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
