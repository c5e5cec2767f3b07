//! Dashboard sessions, shared by every API replica: one row per session id with its data (JSON)
//! and the instant it expires. Expired rows read as absent and are pruned as new sessions start.
//! Only [`insert`] creates a row; [`save`] updates one that still exists, so a deleted session
//! stays deleted.

use chrono::{DateTime, Utc};
use sqlx::PgExecutor;

/// The key of a session's data holding its dashboard account's id (`acc_…`), which
/// [`delete_for_account`] and the index of migration 0121 read.
pub const ACCOUNT_KEY: &str = "account";

/// Inserts a new session; false when the id is taken (the caller draws another).
pub async fn insert<'e>(
    executor: impl PgExecutor<'e>,
    id: &str,
    data: &serde_json::Value,
    expires_at: DateTime<Utc>,
) -> Result<bool, sqlx::Error> {
    sqlx::query(
        "WITH pruned AS (
            DELETE FROM dashboard_sessions
            WHERE id IN (SELECT id FROM dashboard_sessions WHERE expires_at < now() LIMIT 100)
         )
         INSERT INTO dashboard_sessions (id, data, expires_at) VALUES ($1, $2, $3)
         ON CONFLICT (id) DO NOTHING",
    )
    .bind(id)
    .bind(data)
    .bind(expires_at)
    .execute(executor)
    .await
    .map(|result| result.rows_affected() == 1)
}

/// Writes the data and expiry of a session that still exists; false when it is gone (signed out,
/// expired and pruned, or ended for its account). It never inserts: a request that loaded a
/// session before it was signed out must not bring it back when it saves on the way out. Only
/// [`insert`] creates a session.
pub async fn save<'e>(
    executor: impl PgExecutor<'e>,
    id: &str,
    data: &serde_json::Value,
    expires_at: DateTime<Utc>,
) -> Result<bool, sqlx::Error> {
    sqlx::query("UPDATE dashboard_sessions SET data = $2, expires_at = $3 WHERE id = $1")
        .bind(id)
        .bind(data)
        .bind(expires_at)
        .execute(executor)
        .await
        .map(|result| result.rows_affected() == 1)
}

/// A live session's data and expiry.
pub async fn load<'e>(
    executor: impl PgExecutor<'e>,
    id: &str,
) -> Result<Option<(serde_json::Value, DateTime<Utc>)>, sqlx::Error> {
    sqlx::query_as(
        "SELECT data, expires_at FROM dashboard_sessions WHERE id = $1 AND expires_at > now()",
    )
    .bind(id)
    .fetch_optional(executor)
    .await
}

/// Deletes a session.
pub async fn delete<'e>(executor: impl PgExecutor<'e>, id: &str) -> Result<(), sqlx::Error> {
    sqlx::query("DELETE FROM dashboard_sessions WHERE id = $1")
        .bind(id)
        .execute(executor)
        .await
        .map(|_| ())
}

/// Deletes every session of a dashboard account (`account_id` as the session stores it,
/// `acc_…`); returns how many there were.
pub async fn delete_for_account<'e>(
    executor: impl PgExecutor<'e>,
    account_id: &str,
) -> Result<u64, sqlx::Error> {
    sqlx::query("DELETE FROM dashboard_sessions WHERE data ->> 'account' = $1")
        .bind(account_id)
        .execute(executor)
        .await
        .map(|result| result.rows_affected())
}
