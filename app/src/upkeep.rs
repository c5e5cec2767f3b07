//! The scheduler's rounds of upkeep over Postgres, and an operator's check of what they keep:
//! assignments past their due date become overdue (with their `flow.overdue` events),
//! completions are renewed and expire (`flow.expiring`, `flow.expired`), the
//! report-rollup deltas are merged, old message start counts are pruned, and the rollups are
//! verified against a recount (`flowctl reports verify`). Each call is one transaction; errors
//! are Postgres's own.

use chrono::{DateTime, Utc};
use flow_common::db::renewals;
pub use flow_common::db::renewals::RenewalCommand;
use flow_common::db::rollups::{self, Mismatch};
use flow_common::db::{lifecycle, message_attempts};
use sqlx::PgPool;

/// Moves up to `limit` open assignments due at or before `now` to overdue, each with one
/// `flow.overdue` event, in one transaction; returns how many changed.
pub async fn mark_overdue(
    pool: &PgPool,
    now: DateTime<Utc>,
    limit: i64,
) -> Result<usize, sqlx::Error> {
    let mut transaction = pool.begin().await?;
    let changed = lifecycle::mark_overdue(&mut transaction, now, limit).await?;
    transaction.commit().await?;
    Ok(changed)
}

/// Sends up to `limit` reminders whose time has come at `now`, each with one `flow.reminder`
/// event, in one transaction; returns how many. A failed scan rolls back before it returns: its
/// transaction holds the scan's advisory lock, and a dropped transaction's rollback waits for the
/// pooled connection's release, while every other scheduler's scan would answer 0.
pub async fn send_reminders(
    pool: &PgPool,
    now: DateTime<Utc>,
    limit: i64,
) -> Result<usize, sqlx::Error> {
    let mut transaction = pool.begin().await?;
    match flow_common::db::reminders::send_due(&mut transaction, now, limit).await {
        Ok(sent) => {
            transaction.commit().await?;
            Ok(sent)
        }
        Err(error) => {
            if let Err(rolling_back) = transaction.rollback().await {
                tracing::warn!(error = %rolling_back, "rolling the failed reminder scan back");
            }
            Err(error)
        }
    }
}

/// Completions whose renewal window opened, claimed in a transaction of their own (the
/// [`RenewalClaim`]): their `flow.expiring` events are written in it, and the renewal
/// assignments it answers are to be published (bulk lane) before it [`commit`](RenewalClaim::commit)s.
/// Dropped uncommitted (a publish failed, the scheduler died), nothing of it happened and the
/// next scan claims the same completions again, with the same renewal ids.
pub struct RenewalClaim {
    transaction: sqlx::Transaction<'static, sqlx::Postgres>,
    /// How many completions were claimed (renewed, linked, or settled as completed again).
    pub claimed: usize,
    /// The renewal assignments to publish.
    pub renewals: Vec<RenewalCommand>,
}

/// Claims up to `limit` completions whose renewal window is open at `now` (see
/// [`flow_common::db::renewals::claim_renewals`]).
pub async fn claim_renewals(
    pool: &PgPool,
    now: DateTime<Utc>,
    limit: i64,
) -> Result<RenewalClaim, sqlx::Error> {
    let mut transaction = pool.begin().await?;
    let (claimed, renewals) = renewals::claim_renewals(&mut transaction, now, limit).await?;
    Ok(RenewalClaim {
        transaction,
        claimed,
        renewals,
    })
}

impl RenewalClaim {
    /// Commits the claim once its renewal assignments are confirmed by the broker.
    pub async fn commit(self) -> Result<(), sqlx::Error> {
        self.transaction.commit().await
    }
}

/// Settles up to `limit` completions whose validity lapsed at `now` (`flow.expired` unless renewed
/// in time), in one transaction; returns how many.
pub async fn expire_completions(
    pool: &PgPool,
    now: DateTime<Utc>,
    limit: i64,
) -> Result<usize, sqlx::Error> {
    let mut transaction = pool.begin().await?;
    let settled = renewals::expire_due(&mut transaction, now, limit).await?;
    transaction.commit().await?;
    Ok(settled)
}

/// Merges up to `limit` report-rollup deltas into the rollups; returns how many moved.
pub async fn merge_rollups(pool: &PgPool, limit: i64) -> Result<u64, sqlx::Error> {
    rollups::merge(pool, limit).await
}

/// Deletes the start counts of messages not touched since `before` (dead-lettered or purged
/// since); returns how many.
pub async fn prune_message_attempts(
    pool: &PgPool,
    before: DateTime<Utc>,
) -> Result<u64, sqlx::Error> {
    message_attempts::prune(pool, before).await
}

/// Recounts every assignment by flow, quarter hour and status and returns the keys whose rollups
/// (plus unmerged deltas) differ, the rows, rollups and deltas read in one snapshot (a write
/// committing meanwhile cannot show up in one and not the others). Reads every assignment.
pub async fn verify_rollups(pool: &PgPool) -> Result<Vec<Mismatch>, sqlx::Error> {
    let mut transaction = pool.begin().await?;
    sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        .execute(&mut *transaction)
        .await?;
    let mismatches = rollups::verify(&mut *transaction).await?;
    transaction.commit().await?;
    Ok(mismatches)
}
