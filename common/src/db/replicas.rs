//! Report reads on Postgres streaming replicas, within a measured staleness bound.
//!
//! Reports, export generation and the dashboard's report views read through a [`ReadRouter`]:
//! one of the replicas in `DATABASE_REPLICA_URLS` whose data is fresh enough, else the primary.
//! Everything that decides (claims, leases, look-ups, request-id claims, authentication, rate
//! limits, sessions) keeps using the primary's pool directly.
//!
//! Staleness is measured, not assumed. A few times a second the router samples the primary's WAL
//! position with the primary's clock, and asks each replica how far it has replayed. A replica's
//! data is current to the newest sample whose position it has replayed (every transaction that
//! committed before that sample was taken is there), so its age is the time since that sample
//! was taken; an idle primary keeps being sampled at the same position, so an idle replica stays
//! young. A replica older than the bound, unreachable, or no longer in recovery is skipped until
//! a later round finds it fresh again; with no fresh replica, reads go to the primary.
//!
//! At each read the choice is checked again on the chosen replica itself: its replayed position is
//! read just before the read's snapshot is taken, so the snapshot holds at least the data that
//! position dates, which is what the read reports as its data's age ([`Source::data_as_of`]). A
//! read that fails on a replica for a passing cause (a conflict with recovery, a lost connection)
//! is read again elsewhere, the primary last.
//!
//! Each process that routes reads runs its own sampler (one small query per replica and one on
//! the primary every [`SAMPLE_INTERVAL`]): no table to write on the primary, no clock shared
//! between hosts (ages are measured on this process's monotonic clock), and an API replica never
//! depends on another one's bookkeeping.

use std::collections::VecDeque;
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::snapshot::Snapshot;
use crate::config::ReplicaConfig;
use crate::runtime::Supervisor;

/// How often the primary's WAL position is sampled and each replica's replay checked.
pub const SAMPLE_INTERVAL: Duration = Duration::from_millis(250);

/// Longest a sample or a check may take; a replica slower than this counts as unreachable.
const CHECK_TIMEOUT: Duration = Duration::from_secs(1);

/// Samples are kept for the staleness bound plus this much: a replica behind every sample kept
/// is too old anyway.
const SAMPLE_MARGIN: Duration = Duration::from_secs(2);

/// The label of the primary in logs and metrics.
pub const PRIMARY: &str = "primary";

/// A position in the primary's write-ahead log, as a byte offset (`pg_lsn - '0/0'`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, sqlx::Type)]
#[sqlx(transparent)]
pub struct WalPosition(pub i64);

impl fmt::Display for WalPosition {
    /// As Postgres writes an LSN: `16/B374D848`.
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        let position = self.0 as u64;
        write!(
            formatter,
            "{:X}/{:X}",
            position >> 32,
            position & 0xFFFF_FFFF
        )
    }
}

/// What a read is for, in logs and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadPurpose {
    /// An inline report (`POST /v1/flows/report`).
    Report,
    /// The generation of an export file.
    Export,
    /// A report view of the dashboard (flow lists and tables).
    Dashboard,
}

impl ReadPurpose {
    /// The label.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Report => "report",
            Self::Export => "export",
            Self::Dashboard => "dashboard",
        }
    }
}

/// An error of work done on a read snapshot, as far as reading again elsewhere goes.
pub trait ReadError {
    /// The database error behind it, if one is.
    fn database_error(&self) -> Option<&sqlx::Error>;
}

impl ReadError for sqlx::Error {
    fn database_error(&self) -> Option<&sqlx::Error> {
        Some(self)
    }
}

/// Where a read's data came from.
#[derive(Debug, Clone)]
pub struct Source {
    /// [`PRIMARY`], or the replica's `host:port`.
    pub server: Arc<str>,
    /// Whether that is a replica.
    pub on_replica: bool,
    /// The instant the data is current to: on the primary, the snapshot's; on a replica, when
    /// the primary was at the newest position the replica had replayed when the snapshot began.
    pub data_as_of: DateTime<Utc>,
}

/// A read's result and where it was read.
#[derive(Debug)]
pub struct Served<T> {
    /// The result.
    pub value: T,
    /// Where it was read.
    pub source: Source,
}

/// Chooses where report reads run (see the module docs). Cheap to clone.
#[derive(Clone)]
pub struct ReadRouter(Arc<Inner>);

struct Inner {
    primary: PgPool,
    replicas: Vec<Replica>,
    max_staleness: Duration,
    /// The primary's WAL position over the last moments, oldest first.
    samples: Mutex<VecDeque<Sample>>,
    /// Spreads reads over the fresh replicas in turn.
    turn: AtomicUsize,
    /// Counts the sampler's rounds, so a read waiting for a replica to catch up wakes with each.
    rounds: watch::Sender<u64>,
}

/// The primary's WAL position at an instant.
#[derive(Debug, Clone, Copy)]
struct Sample {
    position: WalPosition,
    /// The primary's clock then.
    at: DateTime<Utc>,
    /// This process's clock just before asking (an age measured from it errs on the old side).
    taken: Instant,
}

struct Replica {
    /// `host:port`: never the connection string, which may hold a password.
    server: Arc<str>,
    /// Read-only sessions for reads.
    pool: PgPool,
    /// One read-only session for the sampler's checks.
    checks: PgPool,
    state: Mutex<ReplicaState>,
}

/// Whether a replica may serve reads, as the last check found it.
#[derive(Debug, Clone, PartialEq)]
enum Standing {
    /// Not checked yet.
    Unknown,
    /// Within the staleness bound.
    Fresh,
    /// Further behind than the bound (or behind every sample kept).
    Stale,
    /// Did not answer.
    Unreachable(String),
    /// Answered, but is no longer in recovery: promoted, or not a replica at all.
    Promoted,
}

#[derive(Debug, Clone)]
struct ReplicaState {
    standing: Standing,
    /// The position it had replayed at the last check.
    replayed: Option<WalPosition>,
}

impl ReadRouter {
    /// A router over `primary` and the replicas `config` lists, each with a pool of at most
    /// `max_connections` read-only sessions (opened on first use: a replica that is down at
    /// start-up is skipped, not waited for). Call [`ReadRouter::start`] to begin measuring;
    /// until then, and with no replicas, every read goes to the primary.
    pub fn new(
        primary: PgPool,
        config: &ReplicaConfig,
        max_connections: u32,
    ) -> Result<Self, sqlx::Error> {
        let mut replicas = Vec::new();
        for url in config.urls.iter().map(|url| url.trim()) {
            if url.is_empty() {
                continue;
            }
            let options: PgConnectOptions = url.parse()?;
            let server: Arc<str> = format!("{}:{}", options.get_host(), options.get_port()).into();
            // A replica refuses writes anyway; a promoted one must too.
            let options = options.options([("default_transaction_read_only", "on")]);
            let pool = PgPoolOptions::new()
                .max_connections(max_connections)
                .min_connections(0)
                .acquire_timeout(Duration::from_secs(1))
                .idle_timeout(Duration::from_secs(300))
                .connect_lazy_with(options.clone());
            // The checks have a connection of their own, so a pool busy with long exports is
            // never taken for a server that does not answer.
            let checks = PgPoolOptions::new()
                .max_connections(1)
                .min_connections(0)
                .acquire_timeout(CHECK_TIMEOUT)
                .connect_lazy_with(options);
            replicas.push(Replica {
                server,
                pool,
                checks,
                state: Mutex::new(ReplicaState {
                    standing: Standing::Unknown,
                    replayed: None,
                }),
            });
        }
        Ok(Self(Arc::new(Inner {
            primary,
            replicas,
            max_staleness: config.max_staleness,
            samples: Mutex::new(VecDeque::new()),
            turn: AtomicUsize::new(0),
            rounds: watch::Sender::new(0),
        })))
    }

    /// A router that reads everything on `primary`.
    pub fn primary_only(primary: PgPool) -> Self {
        Self::new(primary, &ReplicaConfig::default(), 1).expect("no replica to parse")
    }

    /// Starts measuring the replicas' staleness under `supervisor` (nothing to do without
    /// replicas).
    pub fn start(&self, supervisor: &Supervisor) {
        if self.0.replicas.is_empty() {
            return;
        }
        let servers: Vec<&str> = self.0.replicas.iter().map(|r| &*r.server).collect();
        tracing::info!(
            replicas = ?servers,
            max_staleness_ms = self.0.max_staleness.as_millis() as u64,
            "report reads may use replicas"
        );
        let router = self.clone();
        supervisor.spawn("replica sampler", |stop| router.sample(stop));
    }

    /// The primary's pool.
    pub fn primary(&self) -> &PgPool {
        &self.0.primary
    }

    /// The primary's current WAL position: every transaction committed so far lies before it.
    pub async fn primary_position(&self) -> Result<WalPosition, sqlx::Error> {
        sqlx::query_scalar("SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint")
            .fetch_one(&self.0.primary)
            .await
    }

    /// A read for `purpose`: [`Read::begin`] gives a read-only snapshot of a fresh replica, else
    /// of the primary, and [`Read::end`] says whether the work done on it stands or must be done
    /// again on the next server. With `floor`, only a replica that has replayed the primary's WAL
    /// up to it qualifies (read-your-writes); one that is fresh but short of it is waited for up
    /// to the staleness bound.
    ///
    /// ```ignore
    /// let mut read = router.read(ReadPurpose::Report, None);
    /// let served = loop {
    ///     let (mut snapshot, source) = read.begin().await?;
    ///     let outcome = work(&mut snapshot).await;
    ///     if let Some(served) = read.end(snapshot, source, outcome).await? {
    ///         break served;
    ///     }
    /// };
    /// ```
    pub fn read(&self, purpose: ReadPurpose, floor: Option<WalPosition>) -> Read<'_> {
        Read {
            router: self,
            purpose,
            floor,
            tried: Vec::new(),
            replica: None,
        }
    }

    /// The replicas reads may go to now (fresh at the last check), by `host:port`.
    pub fn fresh_replicas(&self) -> Vec<Arc<str>> {
        self.0
            .replicas
            .iter()
            .filter(|replica| {
                replica.state.lock().expect("replica state").standing == Standing::Fresh
            })
            .map(|replica| replica.server.clone())
            .collect()
    }

    /// A fresh replica not tried yet that has replayed `floor`, in turn. Waits up to the
    /// staleness bound for one that is fresh but short of `floor`, or not checked yet (just
    /// started). `None`: the primary.
    async fn choose(&self, floor: Option<WalPosition>, tried: &[usize]) -> Option<usize> {
        let inner = &self.0;
        if inner.replicas.is_empty() {
            return None;
        }
        let mut rounds = inner.rounds.subscribe();
        let deadline = Instant::now() + inner.max_staleness;
        loop {
            // Replicas that are, or may turn out to be, fresh.
            let mut candidates = 0;
            let mut ready = Vec::new();
            for (index, replica) in inner.replicas.iter().enumerate() {
                if tried.contains(&index) {
                    continue;
                }
                let state = replica.state.lock().expect("replica state").clone();
                match state.standing {
                    Standing::Fresh => {}
                    Standing::Unknown => {
                        candidates += 1;
                        continue;
                    }
                    _ => continue,
                }
                candidates += 1;
                if floor.is_none_or(|floor| state.replayed.is_some_and(|at| at >= floor)) {
                    ready.push(index);
                }
            }
            if !ready.is_empty() {
                let turn = inner.turn.fetch_add(1, Ordering::Relaxed);
                return Some(ready[turn % ready.len()]);
            }
            if candidates == 0 {
                return None;
            }
            match tokio::time::timeout_at(deadline, rounds.changed()).await {
                Ok(Ok(())) => {}
                _ => return None,
            }
        }
    }

    /// Begins a snapshot on `replica` if it is still fresh (and has replayed `floor`), measured
    /// on the replica just before the snapshot is taken; `None` if it no longer qualifies.
    async fn begin_on(
        &self,
        replica: &Replica,
        floor: Option<WalPosition>,
    ) -> Result<Option<(Snapshot, Source)>, sqlx::Error> {
        let (in_recovery, replayed) = replay_position(&replica.pool).await?;
        if !in_recovery {
            replica.update(Standing::Promoted, None, None, self.0.max_staleness);
            return Ok(None);
        }
        let Some(replayed) = replayed else {
            return Ok(None);
        };
        if floor.is_some_and(|floor| replayed < floor) {
            return Ok(None);
        }
        let Some(sample) = self.replayed_sample(replayed) else {
            replica.update(Standing::Stale, Some(replayed), None, self.0.max_staleness);
            return Ok(None);
        };
        let age = sample.taken.elapsed();
        if age > self.0.max_staleness {
            replica.update(
                Standing::Stale,
                Some(replayed),
                Some(age),
                self.0.max_staleness,
            );
            return Ok(None);
        }
        let snapshot = Snapshot::begin(&replica.pool).await?;
        Ok(Some((
            snapshot,
            Source {
                server: replica.server.clone(),
                on_replica: true,
                data_as_of: sample.at,
            },
        )))
    }

    /// The newest sample of the primary at or before `replayed`.
    fn replayed_sample(&self, replayed: WalPosition) -> Option<Sample> {
        newest_replayed(&self.0.samples.lock().expect("samples"), replayed)
    }

    /// A read on `replica` failed for a passing cause: logged and counted; a lost connection
    /// also takes the replica out of the choice until the next check finds it again.
    fn read_failed(&self, replica: &Replica, purpose: ReadPurpose, error: &sqlx::Error) {
        let reason = if is_recovery_conflict(error) {
            "recovery_conflict"
        } else if matches!(error, sqlx::Error::PoolTimedOut) {
            // Every read session busy, or the server refusing new ones: the checks, on their own
            // session, tell which.
            "busy"
        } else if is_connection_failure(error) {
            replica.update(
                Standing::Unreachable(error.to_string()),
                None,
                None,
                self.0.max_staleness,
            );
            "connection"
        } else {
            "transient"
        };
        tracing::warn!(
            server = %replica.server, purpose = purpose.as_str(), reason, %error,
            "a read on a replica failed; reading again elsewhere"
        );
        metrics::counter!(
            "flow_replica_read_retries_total",
            "server" => replica.server.to_string(),
            "reason" => reason
        )
        .increment(1);
    }

    /// Samples the primary and checks every replica each [`SAMPLE_INTERVAL`] until `stop`.
    async fn sample(self, stop: CancellationToken) {
        let mut ticks = tokio::time::interval(SAMPLE_INTERVAL);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        while stop.run_until_cancelled(ticks.tick()).await.is_some() {
            self.round().await;
        }
    }

    /// One round: a sample of the primary, then a check of each replica.
    async fn round(&self) {
        let inner = &self.0;
        let taken = Instant::now();
        let sampled = tokio::time::timeout(
            CHECK_TIMEOUT,
            sqlx::query_as::<_, (WalPosition, DateTime<Utc>)>(
                "SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint, clock_timestamp()",
            )
            .fetch_one(&inner.primary),
        )
        .await;
        match sampled {
            Ok(Ok((position, at))) => {
                let mut samples = inner.samples.lock().expect("samples");
                samples.push_back(Sample {
                    position,
                    at,
                    taken,
                });
                let keep = inner.max_staleness + SAMPLE_MARGIN;
                while samples.len() > 1 && samples[0].taken.elapsed() > keep {
                    samples.pop_front();
                }
            }
            // Without new samples the replicas age, and reads move to the primary, whose own
            // failures the requests report.
            Ok(Err(error)) => {
                tracing::debug!(%error, "could not sample the primary's WAL position")
            }
            Err(_) => tracing::debug!("sampling the primary's WAL position timed out"),
        }
        futures::future::join_all(inner.replicas.iter().map(|replica| self.check(replica))).await;
        inner.rounds.send_modify(|round| *round += 1);
    }

    async fn check(&self, replica: &Replica) {
        let max = self.0.max_staleness;
        match tokio::time::timeout(CHECK_TIMEOUT, replay_position(&replica.checks)).await {
            Err(_) => replica.update(
                Standing::Unreachable(format!("no answer within {} ms", CHECK_TIMEOUT.as_millis())),
                None,
                None,
                max,
            ),
            Ok(Err(error)) => {
                replica.update(Standing::Unreachable(error.to_string()), None, None, max)
            }
            Ok(Ok((false, _))) => replica.update(Standing::Promoted, None, None, max),
            Ok(Ok((true, None))) => replica.update(Standing::Stale, None, None, max),
            Ok(Ok((true, Some(replayed)))) => match self.replayed_sample(replayed) {
                Some(sample) => {
                    let age = sample.taken.elapsed();
                    let standing = if age <= max {
                        Standing::Fresh
                    } else {
                        Standing::Stale
                    };
                    replica.update(standing, Some(replayed), Some(age), max);
                }
                None => replica.update(Standing::Stale, Some(replayed), None, max),
            },
        }
    }
}

/// One read: tried on a fresh replica, then, while a replica fails it for a passing cause (a
/// conflict with recovery, a lost connection), on another one, the primary last.
pub struct Read<'r> {
    router: &'r ReadRouter,
    purpose: ReadPurpose,
    floor: Option<WalPosition>,
    /// The replicas tried so far.
    tried: Vec<usize>,
    /// The replica of the current attempt; `None` on the primary.
    replica: Option<usize>,
}

impl Read<'_> {
    /// A read-only snapshot of the next server to try, and where it is.
    pub async fn begin(&mut self) -> Result<(Snapshot, Source), sqlx::Error> {
        let router = self.router;
        while let Some(index) = router.choose(self.floor, &self.tried).await {
            self.tried.push(index);
            let replica = &router.0.replicas[index];
            match router.begin_on(replica, self.floor).await {
                Ok(Some(begun)) => {
                    self.replica = Some(index);
                    return Ok(begun);
                }
                Ok(None) => {}
                Err(error) => router.read_failed(replica, self.purpose, &error),
            }
        }
        self.replica = None;
        let snapshot = Snapshot::begin(&router.0.primary).await?;
        let source = Source {
            server: PRIMARY.into(),
            on_replica: false,
            data_as_of: snapshot.now(),
        };
        Ok((snapshot, source))
    }

    /// Ends the snapshot of an attempt and judges what the work on it gave: the result, counted
    /// and logged with its source; `None` when it failed on a replica for a passing cause and must
    /// be done again from [`Read::begin`]; any other failure, or one on the primary, as it is.
    pub async fn end<T, E: ReadError>(
        &mut self,
        snapshot: Snapshot,
        source: Source,
        outcome: Result<T, E>,
    ) -> Result<Option<Served<T>>, E> {
        close(snapshot).await;
        let error = match outcome {
            Ok(value) => return Ok(Some(served(self.purpose, value, source))),
            Err(error) => error,
        };
        if let (Some(index), Some(database)) = (self.replica, error.database_error())
            && super::is_transient(database)
        {
            let replica = &self.router.0.replicas[index];
            self.router.read_failed(replica, self.purpose, database);
            return Ok(None);
        }
        Err(error)
    }
}

impl Replica {
    /// Records what a check found; a change of standing is logged, and the gauges follow.
    fn update(
        &self,
        standing: Standing,
        replayed: Option<WalPosition>,
        age: Option<Duration>,
        max: Duration,
    ) {
        let server = self.server.to_string();
        metrics::gauge!("flow_replica_fresh", "server" => server.clone())
            .set(f64::from(u8::from(standing == Standing::Fresh)));
        if let Some(age) = age {
            metrics::gauge!("flow_replica_data_age_seconds", "server" => server)
                .set(age.as_secs_f64());
        }
        let mut state = self.state.lock().expect("replica state");
        let changed = std::mem::discriminant(&state.standing) != std::mem::discriminant(&standing);
        if replayed.is_some() {
            state.replayed = replayed;
        }
        state.standing = standing.clone();
        drop(state);
        if !changed {
            return;
        }
        let age_ms = age.map(|age| age.as_millis() as u64);
        match standing {
            Standing::Fresh => tracing::info!(
                server = %self.server, ?age_ms, "replica fresh: report reads may go to it"
            ),
            Standing::Stale => tracing::warn!(
                server = %self.server, ?age_ms, max_staleness_ms = max.as_millis() as u64,
                "replica further behind the primary than the bound: report reads skip it"
            ),
            Standing::Unreachable(error) => tracing::warn!(
                server = %self.server, %error, "replica unreachable: report reads skip it"
            ),
            Standing::Promoted => tracing::warn!(
                server = %self.server,
                "replica no longer in recovery (promoted?): report reads skip it"
            ),
            Standing::Unknown => {}
        }
    }
}

/// Whether `pool`'s server is in recovery, and the WAL position it has replayed.
async fn replay_position(pool: &PgPool) -> Result<(bool, Option<WalPosition>), sqlx::Error> {
    sqlx::query_as("SELECT pg_is_in_recovery(), (pg_last_wal_replay_lsn() - '0/0'::pg_lsn)::bigint")
        .fetch_one(pool)
        .await
}

/// The newest of `samples` (oldest first) whose position is at or before `replayed`.
fn newest_replayed(samples: &VecDeque<Sample>, replayed: WalPosition) -> Option<Sample> {
    samples
        .iter()
        .rev()
        .find(|sample| sample.position <= replayed)
        .copied()
}

/// Ends a read snapshot; it only read, so a failure to end it loses nothing.
async fn close(snapshot: Snapshot) {
    if let Err(error) = snapshot.close().await {
        tracing::debug!(%error, "could not end a read snapshot");
    }
}

/// Counts and logs a read served by `source`.
fn served<T>(purpose: ReadPurpose, value: T, source: Source) -> Served<T> {
    let age = (Utc::now() - source.data_as_of)
        .to_std()
        .unwrap_or_default();
    tracing::info!(
        purpose = purpose.as_str(),
        server = %source.server,
        data_as_of = %flow_domain::format_timestamp(source.data_as_of),
        data_age_ms = age.as_millis() as u64,
        "report data read"
    );
    metrics::counter!(
        "flow_report_reads_total",
        "purpose" => purpose.as_str(),
        "server" => source.server.to_string()
    )
    .increment(1);
    metrics::histogram!("flow_report_data_age_seconds", "purpose" => purpose.as_str())
        .record(age.as_secs_f64());
    Served { value, source }
}

/// A query a standby cancelled because replaying the primary's changes needed what it held
/// (SQLSTATE 40001, "canceling statement due to conflict with recovery").
pub fn is_recovery_conflict(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Database(database) => {
            database.code().as_deref() == Some("40001")
                && database.message().contains("conflict with recovery")
        }
        _ => false,
    }
}

/// The server could not be reached, or dropped the connection (shutting down, restarting).
fn is_connection_failure(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Database(database) => database
            .code()
            .is_some_and(|code| code.starts_with("08") || code.starts_with("57P")),
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed
        | sqlx::Error::Protocol(_) => true,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(position: i64, seconds_ago: u64) -> Sample {
        let now = Instant::now();
        Sample {
            position: WalPosition(position),
            at: Utc::now() - chrono::Duration::seconds(seconds_ago as i64),
            taken: now
                .checked_sub(Duration::from_secs(seconds_ago))
                .unwrap_or(now),
        }
    }

    #[test]
    fn a_replica_is_as_old_as_the_newest_sample_it_has_replayed() {
        // The primary wrote until 3 s ago, then went idle: later samples repeat the position.
        let samples: VecDeque<Sample> = [
            sample(100, 6),
            sample(200, 5),
            sample(300, 3),
            sample(300, 2),
            sample(300, 0),
        ]
        .into();
        let idle = newest_replayed(&samples, WalPosition(300)).unwrap();
        assert!(idle.taken.elapsed() < Duration::from_secs(1), "caught up");
        let behind = newest_replayed(&samples, WalPosition(250)).unwrap();
        assert_eq!(behind.position, WalPosition(200));
        assert!(behind.taken.elapsed() >= Duration::from_secs(5));
        assert!(newest_replayed(&samples, WalPosition(99)).is_none());
    }

    #[test]
    fn positions_read_like_postgres_lsns() {
        assert_eq!(
            WalPosition(0x16_B374_D848).to_string(),
            "16/B374D848".to_owned()
        );
        assert_eq!(WalPosition(0).to_string(), "0/0");
    }
}
