//! Postgres access, one module per aggregate. Plain SQL close to the function that uses it.

pub mod accounts;
pub mod analysis;
pub mod assignments;
pub mod attention;
pub mod audit;
pub mod changes;
pub mod compliance;
pub mod dashboard;
pub mod dead_letters;
pub mod enrollment_backfills;
pub mod enrollment_rules;
pub mod erasure;
pub mod event_sources;
pub mod event_triggers;
pub mod exports;
pub mod flows;
pub mod groups;
pub mod inbound_events;
pub mod keys;
pub mod lifecycle;
pub mod message_attempts;
pub mod orgs;
pub mod outbox;
pub mod rate_limits;
pub mod reminders;
pub mod renewals;
pub mod replicas;
pub mod reports;
pub mod rollups;
pub mod schedules;
pub mod scim_filter;
pub mod secrets;
pub mod sessions;
pub mod snapshot;
pub mod users;
pub mod webhooks;
pub mod xapi;

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

/// How an insert treats rows whose unique keys are already taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Conflicts {
    /// A plain insert: a taken key fails the statement.
    Fail,
    /// `ON CONFLICT`: a taken key is skipped (or handled as the statement says).
    Handle,
}

/// Evaluates `$insert` (an async insert, awaited, given `$conflicts`) as a plain insert under a
/// savepoint and, when a unique key it writes is already taken, rolls back to the savepoint and
/// evaluates it again with [`Conflicts::Handle`] (`ON CONFLICT`). The hot inserts almost never
/// meet a taken key (the API resolves duplicates before publishing; redeliveries are rare), and
/// `ON CONFLICT` costs every row a speculative insertion: a probe of each unique index before the
/// insert and a confirmation record after it, 2.5 µs of the 15 µs an assignment row takes.
/// Use inside a transaction, in a function whose errors convert from `sqlx::Error` (`?` is applied
/// to the savepoint's statements). The savepoint is left open (the transaction's end releases it),
/// so each use adds one subtransaction.
macro_rules! insert_optimistically {
    ($connection:expr, |$conflicts:ident| $insert:expr) => {{
        sqlx::raw_sql("SAVEPOINT flow_plain_insert")
            .execute(&mut *$connection)
            .await?;
        let $conflicts = $crate::db::Conflicts::Fail;
        match $insert {
            Err(sqlx::Error::Database(error)) if error.is_unique_violation() => {
                tracing::debug!(%error, "a key was taken; inserting again with ON CONFLICT");
                sqlx::raw_sql("ROLLBACK TO SAVEPOINT flow_plain_insert")
                    .execute(&mut *$connection)
                    .await?;
                let $conflicts = $crate::db::Conflicts::Handle;
                $insert
            }
            result => result,
        }
    }};
}
pub(crate) use insert_optimistically;

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
