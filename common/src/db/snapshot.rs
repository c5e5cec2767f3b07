//! One consistent view of the database read over several connections at once.
//!
//! A [`Snapshot`] is a read-only repeatable-read transaction that exports its snapshot
//! (`pg_export_snapshot`), so helper connections can import it (`SET TRANSACTION SNAPSHOT`) and
//! read exactly the same data in parallel: a report's metrics, aggregates and rows always agree,
//! however many cores Postgres spends on them.
//!
//! Helpers are a speed-up, never a requirement. A part of the work asks for a [`Lane`]: the
//! snapshot's own connection when it is free, else a helper if the pool hands one over within
//! [`HELPER_WAIT`], else the own connection once it is free again. So a report never waits for a
//! connection while holding one beyond that short bound, and a busy pool only makes it sequential.

use std::ops::{Deref, DerefMut};
use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::pool::PoolConnection;
use sqlx::{AssertSqlSafe, Connection, PgConnection, PgPool, Postgres, Transaction};
use tokio::sync::{Mutex, MutexGuard};

/// Longest a part of the work waits for a helper connection before it queues for the snapshot's
/// own connection instead.
pub const HELPER_WAIT: Duration = Duration::from_millis(100);

/// Starts a snapshot's transaction, own or helper. Every statement of a report is planned for
/// its own parameters (a cached generic plan, chosen after five executions, assumes a typical
/// flow and range, and one flow may hold millions of assignments while the next holds ten),
/// without JIT compilation (at millions of rows the estimates pass its threshold and compiling
/// costs more than the index reads it would speed up) and without parallel workers (a report
/// reads rollups and index ranges; its parts already run side by side on the snapshot's lanes).
const BEGIN: &str = "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY; \
    SET LOCAL plan_cache_mode = force_custom_plan; SET LOCAL jit = off; \
    SET LOCAL max_parallel_workers_per_gather = 0";

/// A read-only repeatable-read transaction whose snapshot helper connections can share.
pub struct Snapshot {
    own: Mutex<Transaction<'static, Postgres>>,
    id: String,
    now: DateTime<Utc>,
    pool: PgPool,
}

impl Snapshot {
    /// Begins the snapshot on a connection of `pool`.
    pub async fn begin(pool: &PgPool) -> Result<Self, sqlx::Error> {
        let mut transaction = pool.begin_with(BEGIN).await?;
        let (id, now): (String, DateTime<Utc>) =
            sqlx::query_as("SELECT pg_export_snapshot(), now()")
                .fetch_one(&mut *transaction)
                .await?;
        // Snapshot names are hex digits and dashes; anything else must not reach a statement.
        if !id.chars().all(|c| c.is_ascii_hexdigit() || c == '-') {
            return Err(sqlx::Error::Protocol(format!(
                "unexpected snapshot name {id:?}"
            )));
        }
        Ok(Self {
            own: Mutex::new(transaction),
            id,
            now,
            pool: pool.clone(),
        })
    }

    /// The instant the snapshot was taken (the transaction's `now()`): the reading time of every
    /// status derived from a due date.
    pub fn now(&self) -> DateTime<Utc> {
        self.now
    }

    /// The snapshot's own connection, for work that runs alone (a row stream).
    pub fn connection(&mut self) -> &mut PgConnection {
        self.own.get_mut()
    }

    /// A connection reading this snapshot for one part of the work (see the module docs).
    pub async fn lane(&self) -> Result<Lane<'_>, sqlx::Error> {
        if let Ok(own) = self.own.try_lock() {
            return Ok(Lane::Own(own));
        }
        if let Some(helper) = self.helper().await {
            return Ok(helper);
        }
        Ok(Lane::Own(self.own.lock().await))
    }

    /// A helper connection reading this snapshot, if the pool hands one over within
    /// [`HELPER_WAIT`]; never the snapshot's own (for work that runs beside a part holding it).
    pub async fn helper(&self) -> Option<Lane<'_>> {
        match tokio::time::timeout(HELPER_WAIT, self.pool.acquire()).await {
            Ok(Ok(connection)) => Some(Lane::Helper {
                connection,
                snapshot: &self.id,
            }),
            _ => None,
        }
    }

    /// Ends the snapshot (it only read, so nothing is lost either way).
    pub async fn close(self) -> Result<(), sqlx::Error> {
        self.own.into_inner().rollback().await
    }
}

/// A connection given to one part of the work; [`Lane::join`] makes it read the snapshot.
pub enum Lane<'s> {
    /// The snapshot's own connection, taken for the time of this part.
    Own(MutexGuard<'s, Transaction<'static, Postgres>>),
    /// A helper from the pool; it imports the snapshot when joined.
    Helper {
        /// The connection.
        connection: PoolConnection<Postgres>,
        /// Name of the snapshot to import.
        snapshot: &'s str,
    },
}

impl Lane<'_> {
    /// The connection, reading the snapshot. A helper's transaction ends (rolls back) when the
    /// returned value is dropped.
    pub async fn join(&mut self) -> Result<Joined<'_>, sqlx::Error> {
        match self {
            Lane::Own(own) => Ok(Joined::Own(own)),
            Lane::Helper {
                connection,
                snapshot,
            } => {
                // The import is its own statement inside the transaction sqlx tracks, so a failed
                // import (the snapshot's transaction has just failed and taken its export with
                // it) rolls back when the transaction drops. Sent as part of a custom BEGIN, its
                // failure left sqlx counting no transaction, and the connection went back to the
                // pool inside the aborted one: every later user of it failed ("current
                // transaction is aborted"), including the worker recording the export's failure.
                let mut transaction = connection.begin_with(BEGIN).await?;
                sqlx::query(AssertSqlSafe(format!(
                    "SET TRANSACTION SNAPSHOT '{snapshot}'"
                )))
                .execute(&mut *transaction)
                .await?;
                Ok(Joined::Helper(transaction))
            }
        }
    }
}

/// A connection reading a snapshot.
pub enum Joined<'l> {
    /// The snapshot's own.
    Own(&'l mut PgConnection),
    /// A helper's transaction on the imported snapshot.
    Helper(Transaction<'l, Postgres>),
}

impl Deref for Joined<'_> {
    type Target = PgConnection;

    fn deref(&self) -> &PgConnection {
        match self {
            Joined::Own(connection) => connection,
            Joined::Helper(transaction) => transaction,
        }
    }
}

impl DerefMut for Joined<'_> {
    fn deref_mut(&mut self) -> &mut PgConnection {
        match self {
            Joined::Own(connection) => connection,
            Joined::Helper(transaction) => transaction,
        }
    }
}
