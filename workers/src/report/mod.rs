//! The report-worker: generates report exports (CSV, Excel, PDF) into the export store.
//!
//! The `exports` row is the job queue, and the API writing it is the request's one commit point.
//! A worker with a free slot claims a waiting export in Postgres (`FOR UPDATE SKIP LOCKED`, with a
//! lease it renews while it works), so any number of workers share the load and a long export is
//! never handed to a second worker while the first is alive. Organizations take turns: the claim
//! goes to the organization with the fewest exports running and waiting ahead, then to the one
//! whose last claim is the oldest (`flow_app::exports::job::claim_next`), so one organization's backlog does not
//! hold up another's export. The API's `NOTIFY`
//! (sent when the row commits) wakes the workers at once; they also poll, so an export requested
//! while no worker listened, or whose worker died (its lease lapses), is picked up all the same.
//! No broker is involved. A sweeper fails exports that keep killing their workers and purges
//! expired files.

mod compliance;
mod csv;
mod job;
mod model;
mod pdf;
mod sink;
mod xlsx;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use flow_app::exports::job as exports;
use flow_common::config::CoreConfig;
use flow_common::db;
use flow_common::db::replicas::ReadRouter;
use flow_common::export_store::{ExportStore, ExportStoreConfig};
use flow_common::ops::Liveness;
use flow_common::runtime::Backoff;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::runtime::{Runtime, role};

const ROLE: &str = "report-worker";

/// Expired exports answer 410 this long before they are forgotten (then 404).
const EXPIRED_RETENTION: Duration = Duration::from_secs(30 * 24 * 3600);

/// Settings of the report-worker.
#[derive(Debug, Clone, clap::Args)]
pub struct ReportWorkerConfig {
    /// Database, broker and queue settings.
    #[command(flatten)]
    pub core: CoreConfig,

    /// Where export files are written (must be the store the API reads).
    #[command(flatten)]
    pub export_store: ExportStoreConfig,

    /// Exports generated at the same time by this worker.
    #[arg(long, env = "EXPORT_CONCURRENCY", default_value_t = 2)]
    pub concurrency: usize,

    /// Seconds a claimed export stays this worker's without a heartbeat; a crashed worker's
    /// exports are taken over after this.
    #[arg(long, env = "EXPORT_LEASE_SECONDS", default_value_t = 60)]
    pub lease_seconds: u64,

    /// Longest wait between two looks for waiting exports when no notification arrives.
    #[arg(long, env = "EXPORT_POLL_INTERVAL_MS", default_value_t = 2_000)]
    pub poll_interval_ms: u64,

    /// How often to purge expired files and fail exports that used up their attempts.
    #[arg(long, env = "EXPORT_SWEEP_INTERVAL_SECONDS", default_value_t = 60)]
    pub sweep_interval_seconds: u64,

    /// Claims of one export before it is failed for good.
    #[arg(long, env = "EXPORT_MAX_ATTEMPTS", default_value_t = 3)]
    pub max_attempts: i32,

    /// Exports of at least this many rows (CSV and Excel without module details) are read as two
    /// halves of assigned time on two connections of one snapshot, the second half's joins and
    /// sort running while the first half is written.
    #[arg(long, env = "EXPORT_SPLIT_ROWS", default_value_t = 200_000)]
    pub split_rows: i64,

    /// Directory for the Excel writer's temporary files (default: the system's).
    #[arg(long, env = "EXPORT_TEMP_DIR")]
    pub temp_dir: Option<PathBuf>,

    /// What this role's readiness depends on (filled in by `run`, served by the ops endpoints).
    #[arg(skip)]
    pub health: flow_common::ops::Health,
}

role! {
    settings: ReportWorkerConfig,
    name: ROLE,
    about: "Flow report-worker",
    description: "The report-worker (exports)",
    ops_address: "127.0.0.1:9102",
    work: work,
}

/// Generates exports until shutdown, then hands those in progress back for another worker.
async fn work(config: ReportWorkerConfig, runtime: Runtime) -> anyhow::Result<()> {
    let store = ExportStore::open(&config.export_store).context("opening the export store")?;
    let context = Arc::new(job::Context {
        pool: runtime.pool.clone(),
        reads: runtime.read_router()?,
        store,
        worker_id: format!(
            "{ROLE}-{}-{}",
            std::process::id(),
            uuid::Uuid::now_v7().simple()
        ),
        lease: Duration::from_secs(config.lease_seconds.max(1)),
        max_attempts: config.max_attempts.max(1),
        temp_dir: config.temp_dir.clone(),
        split_rows: config.split_rows,
    });
    let poll = Duration::from_millis(config.poll_interval_ms.max(10));
    let liveness = runtime.liveness(
        "poller",
        Some(poll.saturating_mul(2) + Duration::from_secs(120)),
    );
    runtime.gauge("exports waiting", crate::gauges::exports_waiting);
    let sweep_interval = Duration::from_secs(config.sweep_interval_seconds.max(1));
    let sweeper = context.clone();
    runtime.spawn("export sweeper", move |stop| {
        sweep_loop(sweeper, sweep_interval, stop)
    });
    tracing::info!(worker_id = %context.worker_id, concurrency = config.concurrency, "report-worker started");
    job_loop(&runtime, context, config.concurrency.max(1), poll, liveness).await;
    Ok(())
}

/// Claims exports while there is a free slot; between claims, sleeps until a notification or the
/// poll interval.
async fn job_loop(
    runtime: &Runtime,
    context: Arc<job::Context>,
    concurrency: usize,
    poll: Duration,
    liveness: Liveness,
) {
    let shutdown = &runtime.shutdown;
    let slots = Arc::new(Semaphore::new(concurrency));
    let jobs_stop = CancellationToken::new();
    let mut jobs = JoinSet::new();
    let mut wakeup = runtime.wakeup(db::EXPORT_CHANNEL);
    let mut failures = Backoff::reconnect();
    loop {
        liveness.beat();
        while let Some(done) = jobs.try_join_next() {
            if let Err(error) = done {
                tracing::error!(%error, "an export job panicked");
            }
        }
        // Listening before claiming: an export committed in between still wakes this loop.
        wakeup.listen().await;
        // Every slot may be busy for a long export: the loop still comes round to show it lives.
        let slot = tokio::select! {
            () = shutdown.cancelled() => break,
            () = tokio::time::sleep(poll) => continue,
            slot = slots.clone().acquire_owned() => match slot {
                Ok(slot) => slot,
                Err(_) => break,
            },
        };
        let claimed = exports::claim_next(
            &context.pool,
            &context.worker_id,
            context.lease,
            context.max_attempts,
        )
        .await;
        let pause = match claimed {
            Ok(Some(export)) => {
                failures.reset();
                jobs.spawn(job::run(
                    context.clone(),
                    export,
                    jobs_stop.child_token(),
                    slot,
                ));
                continue;
            }
            Ok(None) => {
                failures.reset();
                poll
            }
            Err(error) => {
                tracing::warn!(%error, "could not claim an export; retrying");
                failures.delay()
            }
        };
        drop(slot);
        if shutdown
            .run_until_cancelled(wakeup.wait(pause))
            .await
            .is_none()
        {
            break;
        }
    }
    jobs_stop.cancel();
    while let Some(done) = jobs.join_next().await {
        if let Err(error) = done {
            tracing::error!(%error, "an export job panicked");
        }
    }
}

async fn sweep_loop(context: Arc<job::Context>, interval: Duration, shutdown: CancellationToken) {
    loop {
        if let Err(error) = sweep(&context).await {
            tracing::warn!(error = format!("{error:#}"), "export sweep failed");
        }
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(interval) => {}
        }
    }
}

/// One sweep: fail exports that used up their attempts, purge expired files, forget old rows.
pub async fn sweep_once(config: &ReportWorkerConfig) -> anyhow::Result<()> {
    let pool = db::connect(&config.core.database_url, 2).await?;
    let store = ExportStore::open(&config.export_store)?;
    let context = job::Context {
        reads: ReadRouter::primary_only(pool.clone()),
        pool,
        store,
        worker_id: format!("{ROLE}-sweep"),
        lease: Duration::from_secs(config.lease_seconds.max(1)),
        max_attempts: config.max_attempts.max(1),
        temp_dir: None,
        split_rows: config.split_rows,
    };
    let result = sweep(&context).await;
    context.pool.close().await;
    result
}

async fn sweep(context: &job::Context) -> anyhow::Result<()> {
    exports::sweep(
        &context.pool,
        &context.store,
        context.max_attempts,
        EXPIRED_RETENTION,
    )
    .await?;
    Ok(())
}

/// Formats an export, one batch of rows at a time (runs on a blocking thread): a flow report's
/// assignment rows by default, a compliance report's person × flow rows.
trait FormatWriter<Row = flow_common::db::reports::ExportRow>: Send {
    /// Writes rows, in order.
    fn write_rows(&mut self, rows: &[Row]) -> anyhow::Result<()>;
    /// Completes the file and tells the upload it is whole.
    fn finish(self: Box<Self>) -> anyhow::Result<()>;
}
