//! Dead letters, for the recorder that keeps them (the assign-worker) and the operator who lists
//! and replays them (`flowctl dlq`): record a batch of them with the assignment commands they
//! carried (whose ids then resolve to the failure), list those waiting, count them, and mark one
//! replayed (its ids accepted again). Errors are Postgres's own, so a worker can tell a transient
//! one and retry.

use flow_common::db::dead_letters::{self, DeadLetter, NewDeadLetter};
use flow_domain::messages::AssignCommand;
use sqlx::PgPool;

/// Records `letters`, each with the assign commands it carried, in one transaction; returns how
/// many dead letters wait for an operator after it.
pub async fn record(
    pool: &PgPool,
    letters: &[(NewDeadLetter<'_>, &[AssignCommand])],
) -> Result<i64, sqlx::Error> {
    let mut transaction = pool.begin().await?;
    for (letter, commands) in letters {
        dead_letters::record(&mut transaction, letter, commands).await?;
    }
    let pending = dead_letters::pending_count(&mut *transaction).await?;
    transaction.commit().await?;
    Ok(pending)
}

/// Up to `limit` dead letters not replayed yet, oldest first.
pub async fn pending(pool: &PgPool, limit: i64) -> Result<Vec<DeadLetter>, sqlx::Error> {
    dead_letters::pending(pool, 0, limit).await
}

/// How many dead letters wait for an operator.
pub async fn pending_count(pool: &PgPool) -> Result<i64, sqlx::Error> {
    dead_letters::pending_count(pool).await
}

/// Marks the dead letter `id` replayed (its message is back in its queue): the assignment ids it
/// carried are accepted again rather than failed.
pub async fn mark_replayed(pool: &PgPool, id: i64) -> Result<(), sqlx::Error> {
    let mut transaction = pool.begin().await?;
    dead_letters::mark_replayed(&mut transaction, id).await?;
    transaction.commit().await
}
