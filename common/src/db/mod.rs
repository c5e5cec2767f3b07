//! Postgres access, one module per aggregate. Plain SQL close to the function that uses it.

pub mod accounts;
pub mod assignments;
pub mod audit;
pub mod dashboard;
pub mod dead_letters;
pub mod exports;
pub mod flows;
pub mod keys;
pub mod lifecycle;
pub mod message_attempts;
pub mod orgs;
pub mod outbox;
pub mod rate_limits;
pub mod reports;
pub mod rollups;
pub mod schedules;
pub mod secrets;
pub mod sessions;
pub mod snapshot;
pub mod users;
pub mod webhooks;

use std::time::Duration;

use sqlx::PgPool;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

/// Migrations embedded from `migrations/`.
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations");

/// Postgres notification channel on which control-plane changes are announced, so every API
/// replica drops its cached copy at once. Payloads: `keys`, `orgs`, `flows`, `users`.
pub const INVALIDATE_CHANNEL: &str = "flow_invalidate";

/// Postgres notification channel that wakes the outbox relay.
pub const OUTBOX_CHANNEL: &str = "flow_outbox";

/// Postgres notification channel that wakes the webhook-workers (a test ping, a manual retry).
pub const WEBHOOK_CHANNEL: &str = "flow_webhooks";

/// Postgres notification channel that wakes the report-workers (an export was requested).
pub const EXPORT_CHANNEL: &str = "flow_exports";

/// Opens a pool of at most `max_connections`.
pub async fn connect(url: &str, max_connections: u32) -> Result<PgPool, sqlx::Error> {
    let options: PgConnectOptions = url.parse()?;
    PgPoolOptions::new()
        .max_connections(max_connections)
        .min_connections(0)
        .acquire_timeout(Duration::from_secs(5))
        .idle_timeout(Duration::from_secs(300))
        .connect_with(options)
        .await
}

/// Applies pending migrations (an advisory lock serialises concurrent callers).
pub async fn migrate(pool: &PgPool) -> Result<(), sqlx::migrate::MigrateError> {
    MIGRATOR.run(pool).await
}

/// True when retrying the same work later may succeed: connectivity, pool exhaustion, deadlocks,
/// serialization failures, server shutdown. False for errors the data itself causes (constraint
/// violations, invalid values), which no retry can fix.
pub fn is_transient(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Database(database) => {
            let code = database.code();
            let code = code.as_deref().unwrap_or("");
            // 40: transaction rollback (serialization, deadlock); 53: insufficient resources;
            // 57: operator intervention (shutdown, cancel); 08: connection exception; 58: system.
            ["40", "53", "57", "08", "58"]
                .iter()
                .any(|class| code.starts_with(class))
        }
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed
        | sqlx::Error::Protocol(_) => true,
        _ => false,
    }
}

/// Sends a notification on `channel` (delivered when the surrounding transaction commits).
pub async fn notify<'e, E>(executor: E, channel: &str, payload: &str) -> Result<(), sqlx::Error>
where
    E: sqlx::PgExecutor<'e>,
{
    sqlx::query("SELECT pg_notify($1, $2)")
        .bind(channel)
        .bind(payload)
        .execute(executor)
        .await
        .map(|_| ())
}

/// Connects, retrying with backoff while Postgres is unreachable (start-up ordering in compose,
/// restarts), until `shutdown`. `connect` opens one connection, so a pool proves Postgres reachable.
pub async fn connect_with_retry(
    url: &str,
    max_connections: u32,
    shutdown: &tokio_util::sync::CancellationToken,
) -> Result<PgPool, sqlx::Error> {
    let retrying = crate::runtime::Backoff::reconnect().retry(
        "connecting to Postgres",
        shutdown,
        is_transient,
        || connect(url, max_connections),
    );
    shutdown
        .run_until_cancelled(retrying)
        .await
        .unwrap_or(Err(sqlx::Error::PoolClosed))
}
