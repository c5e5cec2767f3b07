//! The dedicated Postgres primary with a streaming replica that the replica tests run on, started
//! by `.ci/pg-replica`: `TEST_PG_PRIMARY_URL` and `TEST_PG_REPLICA_URL` (what `.ci/run` exports),
//! or, when they are not set, the pair the script starts on its default ports (left running for
//! the next run; `.ci/pg-replica stop` stops it). A test that cannot get a pair fails, saying
//! why: it never passes without one.
//!
//! Pausing replay or stopping the replica affects every database on the pair, so the tests that
//! use it take turns: [`pair`] hands out the pair with a turn.

use std::process::Command;
use std::time::Duration;

use sqlx::PgPool;
use tokio::sync::{Mutex, MutexGuard, OnceCell};

/// A primary and its streaming replica.
#[derive(Debug, Clone)]
pub struct ReplicaPair {
    /// A URL of the primary (any database on it).
    pub primary_url: String,
    /// A URL of the replica (any database on it).
    pub replica_url: String,
}

/// The turn of the test that holds the pair.
pub type Turn = MutexGuard<'static, ()>;

static PAIR: OnceCell<ReplicaPair> = OnceCell::const_new();
static TURN: Mutex<()> = Mutex::const_new(());

/// The pair and this test's turn on it (see the module docs).
pub async fn pair() -> (ReplicaPair, Turn) {
    let turn = TURN.lock().await;
    let pair = PAIR.get_or_init(find_or_start).await.clone();
    // A test that failed may have left the replica stopped or paused.
    run_script(&pair, "start-standby");
    let replica = pair.replica().await;
    resume(&replica).await;
    replica.close().await;
    (pair, turn)
}

async fn find_or_start() -> ReplicaPair {
    let pair = match (
        std::env::var("TEST_PG_PRIMARY_URL"),
        std::env::var("TEST_PG_REPLICA_URL"),
    ) {
        (Ok(primary_url), Ok(replica_url)) => ReplicaPair {
            primary_url,
            replica_url,
        },
        _ => {
            let pair = ReplicaPair {
                primary_url: "postgres://postgres@127.0.0.1:5441/postgres".to_owned(),
                replica_url: "postgres://postgres@127.0.0.1:5442/postgres".to_owned(),
            };
            eprintln!(
                "TEST_PG_PRIMARY_URL and TEST_PG_REPLICA_URL are not set: starting the pair with \
                 .ci/pg-replica start (stop it with .ci/pg-replica stop)"
            );
            run_script(&pair, "start");
            pair
        }
    };
    let replica = pair.replica().await;
    let in_recovery: bool = sqlx::query_scalar("SELECT pg_is_in_recovery()")
        .fetch_one(&replica)
        .await
        .expect("asking the replica whether it is in recovery");
    assert!(
        in_recovery,
        "{} is not a streaming replica (not in recovery)",
        flowctl::admin::redact(&pair.replica_url)
    );
    replica.close().await;
    pair
}

/// The `.ci/pg-replica` script of this checkout.
fn script() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../.ci/pg-replica")
}

/// Runs `.ci/pg-replica <command>` on this pair's ports (its data directory comes from
/// `PG_REPLICA_DIR`, or the script's default); panics with its output when it fails.
fn run_script(pair: &ReplicaPair, command: &str) {
    let port = |url: &str| {
        url::Url::parse(url)
            .ok()
            .and_then(|url| url.port())
            .unwrap_or(5432)
            .to_string()
    };
    let output = Command::new(script())
        .arg(command)
        .env("PG_PRIMARY_PORT", port(&pair.primary_url))
        .env("PG_STANDBY_PORT", port(&pair.replica_url))
        .output()
        .unwrap_or_else(|error| panic!("cannot run {}: {error}", script().display()));
    assert!(
        output.status.success(),
        "the replica tests need a Postgres primary with a streaming replica, and `.ci/pg-replica \
         {command}` failed ({}): {}{}\nStart one with `.ci/pg-replica start` and export what \
         `.ci/pg-replica env` prints, or install the Postgres server binaries.",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

impl ReplicaPair {
    /// A pool on the replica's `postgres` database (to pause its replay).
    pub async fn replica(&self) -> PgPool {
        PgPool::connect(&self.replica_url)
            .await
            .expect("connecting to the replica")
    }

    /// The replica's `host:port`, as the router names it in logs and metrics.
    pub fn replica_server(&self) -> String {
        let url = url::Url::parse(&self.replica_url).expect("replica URL");
        format!(
            "{}:{}",
            url.host_str().unwrap_or("localhost"),
            url.port().unwrap_or(5432)
        )
    }

    /// Pauses the replica's replay until the returned guard is dropped.
    pub async fn pause_replay(&self) -> ReplayPaused {
        let replica = self.replica().await;
        sqlx::query("SELECT pg_wal_replay_pause()")
            .execute(&replica)
            .await
            .expect("pausing replay");
        replica.close().await;
        ReplayPaused {
            replica_url: Some(self.replica_url.clone()),
        }
    }

    /// Stops the replica (`.ci/pg-replica stop-standby`) until the returned guard is dropped.
    pub fn stop_replica(&self) -> ReplicaStopped {
        run_script(self, "stop-standby");
        ReplicaStopped {
            pair: Some(self.clone()),
        }
    }
}

async fn resume(replica: &PgPool) {
    sqlx::query("SELECT pg_wal_replay_resume()")
        .execute(replica)
        .await
        .expect("resuming replay");
}

/// The replica's replay is paused while this lives.
pub struct ReplayPaused {
    replica_url: Option<String>,
}

impl ReplayPaused {
    /// Resumes replay now.
    pub async fn resume(mut self) {
        if let Some(url) = self.replica_url.take() {
            let replica = PgPool::connect(&url)
                .await
                .expect("connecting to the replica");
            resume(&replica).await;
            replica.close().await;
        }
    }
}

impl Drop for ReplayPaused {
    fn drop(&mut self) {
        let Some(url) = self.replica_url.take() else {
            return;
        };
        // Drop cannot await: resume from a runtime of its own.
        drop(
            std::thread::spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("runtime");
                runtime.block_on(async {
                    if let Ok(replica) = PgPool::connect(&url).await {
                        drop(
                            sqlx::query("SELECT pg_wal_replay_resume()")
                                .execute(&replica)
                                .await,
                        );
                        replica.close().await;
                    }
                });
            })
            .join(),
        );
    }
}

/// The replica is stopped while this lives.
pub struct ReplicaStopped {
    pair: Option<ReplicaPair>,
}

impl ReplicaStopped {
    /// Starts the replica again and waits until it streams.
    pub fn start(mut self) {
        if let Some(pair) = self.pair.take() {
            run_script(&pair, "start-standby");
        }
    }
}

impl Drop for ReplicaStopped {
    fn drop(&mut self) {
        if let Some(pair) = self.pair.take() {
            run_script(&pair, "start-standby");
        }
    }
}

/// The sum of the samples of metric `name` (a counter or gauge of this process's recorder) whose
/// labels include every one of `labels`.
pub fn metric(name: &str, labels: &[(&str, &str)]) -> f64 {
    let text = flow_common::telemetry::metrics_handle().render();
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            let (metric, rest) = series.split_once('{').unwrap_or((series, ""));
            (metric == name).then_some((rest, value))
        })
        .filter(|(rest, _)| {
            labels
                .iter()
                .all(|(key, value)| rest.contains(&format!("{key}=\"{value}\"")))
        })
        .filter_map(|(_, value)| value.parse::<f64>().ok())
        .sum()
}

/// How many report reads of `purpose` `server` has served in this process.
pub fn reads(purpose: &str, server: &str) -> f64 {
    metric(
        "flow_report_reads_total",
        &[("purpose", purpose), ("server", server)],
    )
}

/// Polls `check` every 100 ms until it holds, or panics after `within` saying `what`.
pub async fn until(within: Duration, what: &str, mut check: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + within;
    while !check() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {within:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
