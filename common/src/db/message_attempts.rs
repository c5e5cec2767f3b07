//! How many times a worker started handling a redelivered message without finishing: the
//! poison-message count. RabbitMQ's own delivery count also rises when a connection drops with
//! messages only prefetched, so a few reconnects would dead-letter commands that did nothing wrong;
//! this count rises only when a handler started a message and never came back from it (the worker
//! died, a panic), which is what a message that kills its worker looks like.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use sqlx::PgExecutor;

/// Counts one more start of each of `keys` (messages of `queue`) and returns, per key, the starts
/// counted so far including this one.
pub async fn start<'e>(
    executor: impl PgExecutor<'e>,
    queue: &str,
    keys: &[String],
) -> Result<HashMap<String, i32>, sqlx::Error> {
    let mut unique: Vec<&str> = keys.iter().map(String::as_str).collect();
    unique.sort_unstable();
    unique.dedup();
    let rows: Vec<(String, i32)> = sqlx::query_as(
        "INSERT INTO message_attempts (queue, message_key, attempts)
         SELECT $1, key, 1 FROM UNNEST($2::text[]) AS key
         ON CONFLICT (queue, message_key)
         DO UPDATE SET attempts = message_attempts.attempts + 1, updated_at = now()
         RETURNING message_key, attempts",
    )
    .bind(queue)
    .bind(&unique)
    .fetch_all(executor)
    .await?;
    Ok(rows.into_iter().collect())
}

/// Forgets `keys`: their handling came to an end (applied, rejected or handed back on purpose).
pub async fn finish<'e>(
    executor: impl PgExecutor<'e>,
    queue: &str,
    keys: &[String],
) -> Result<(), sqlx::Error> {
    sqlx::query("DELETE FROM message_attempts WHERE queue = $1 AND message_key = ANY($2)")
        .bind(queue)
        .bind(keys)
        .execute(executor)
        .await
        .map(|_| ())
}

/// Deletes counts not touched since `before` (messages that were dead-lettered or purged).
pub async fn prune<'e>(
    executor: impl PgExecutor<'e>,
    before: DateTime<Utc>,
) -> Result<u64, sqlx::Error> {
    sqlx::query("DELETE FROM message_attempts WHERE updated_at < $1")
        .bind(before)
        .execute(executor)
        .await
        .map(|result| result.rows_affected())
}
