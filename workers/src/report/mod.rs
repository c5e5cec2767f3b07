//! The report-worker: generates report exports (CSV, Excel, PDF) into the export store.
//!
//! The `exports` row is the job queue. A worker with a free slot claims the oldest waiting export
//! in Postgres (`FOR UPDATE SKIP LOCKED`, with a lease it renews while it works), so any number of
//! workers share the load and a long export is never handed to a second worker while the first is
//! alive. RabbitMQ only wakes workers up: each `flow.export` message is acked at once (a message
//! held unacked through a half-hour export would trip the broker's consumer timeout and be
//! redelivered). Workers also poll, so an export whose message was lost, or whose worker died
//! (its lease lapses), is picked up again. A sweeper fails exports that keep killing their
//! workers and purges expired files.

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
use flow_common::amqp::QueueKind;
use flow_common::config::CoreConfig;
use flow_common::db::{self, exports};
use flow_common::export_store::{ExportStore, ExportStoreConfig};
use flow_common::ids::ExportId;
use flow_common::messages::ExportCommand;
use lapin::message::Delivery;
use lapin::options::BasicAckOptions;
use tokio::sync::{Notify, Semaphore};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::consumer::{self, BatchContext, BatchHandler, ConsumerSettings};

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

    /// How often to look for waiting exports when no message arrives.
    #[arg(long, env = "EXPORT_POLL_INTERVAL_MS", default_value_t = 2_000)]
    pub poll_interval_ms: u64,

    /// How often to purge expired files and fail exports that used up their attempts.
    #[arg(long, env = "EXPORT_SWEEP_INTERVAL_SECONDS", default_value_t = 60)]
    pub sweep_interval_seconds: u64,

    /// Claims of one export before it is failed for good.
    #[arg(long, env = "EXPORT_MAX_ATTEMPTS", default_value_t = 3)]
    pub max_attempts: i32,

    /// Directory for the Excel writer's temporary files (default: the system's).
    #[arg(long, env = "EXPORT_TEMP_DIR")]
    pub temp_dir: Option<PathBuf>,

    /// What this role's readiness depends on (filled in by `run`, served by the ops endpoints).
    #[arg(skip)]
    pub health: flow_common::ops::Health,
}

/// Runs the worker until `shutdown`: exports in progress are handed back for another worker.
pub async fn run(config: ReportWorkerConfig, shutdown: CancellationToken) -> anyhow::Result<()> {
    let pool = db::connect_with_retry(
        &config.core.database_url,
        config.core.database_max_connections,
        &shutdown,
    )
    .await
    .context("connecting to Postgres")?;
    config.health.add_postgres(ROLE, pool.clone());
    let store = ExportStore::open(&config.export_store).context("opening the export store")?;
    let context = Arc::new(job::Context {
        pool,
        store,
        worker_id: format!(
            "{ROLE}-{}-{}",
            std::process::id(),
            uuid::Uuid::now_v7().simple()
        ),
        lease: Duration::from_secs(config.lease_seconds.max(1)),
        max_attempts: config.max_attempts.max(1),
        temp_dir: config.temp_dir.clone(),
    });
    let wake = Arc::new(Notify::new());

    let consumer = {
        let core = config.core.clone();
        let liveness = config.health.add_loop(format!("{ROLE}.consumer"), None);
        let handler = Arc::new(WakeHandler { wake: wake.clone() });
        let shutdown = shutdown.clone();
        let pool = context.pool.clone();
        tokio::spawn(async move {
            let settings = ConsumerSettings {
                role: ROLE,
                queue: QueueKind::Export,
                prefetch: 50,
                batch_size: 50,
                batch_bytes: usize::MAX,
                concurrency: 1,
                liveness,
            };
            consumer::run(&core, settings, handler, pool, shutdown).await
        })
    };
    let sweeper = tokio::spawn(sweep_loop(
        context.clone(),
        Duration::from_secs(config.sweep_interval_seconds.max(1)),
        shutdown.clone(),
    ));
    tracing::info!(worker_id = %context.worker_id, concurrency = config.concurrency, "report-worker started");
    job_loop(
        context,
        wake,
        config.concurrency.max(1),
        Duration::from_millis(config.poll_interval_ms.max(10)),
        shutdown,
    )
    .await;
    drop(sweeper.await);
    consumer.await.context("the export consumer panicked")?
}

/// Claims exports while there is a free slot; sleeps until a message or the poll interval.
async fn job_loop(
    context: Arc<job::Context>,
    wake: Arc<Notify>,
    concurrency: usize,
    poll: Duration,
    shutdown: CancellationToken,
) {
    let slots = Arc::new(Semaphore::new(concurrency));
    let jobs_stop = CancellationToken::new();
    let mut jobs = JoinSet::new();
    let mut failures = 0u32;
    loop {
        while let Some(done) = jobs.try_join_next() {
            if let Err(error) = done {
                tracing::error!(%error, "an export job panicked");
            }
        }
        let slot = tokio::select! {
            () = shutdown.cancelled() => break,
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
                failures = 0;
                jobs.spawn(job::run(
                    context.clone(),
                    export,
                    jobs_stop.child_token(),
                    slot,
                ));
                continue;
            }
            Ok(None) => {
                failures = 0;
                poll
            }
            Err(error) => {
                failures = failures.saturating_add(1);
                tracing::warn!(%error, "could not claim an export; retrying");
                Duration::from_millis(200u64.saturating_mul(1 << failures.min(6)))
            }
        };
        drop(slot);
        tokio::select! {
            () = shutdown.cancelled() => break,
            () = wake.notified() => {}
            () = tokio::time::sleep(pause) => {}
        }
    }
    jobs_stop.cancel();
    while let Some(done) = jobs.join_next().await {
        if let Err(error) = done {
            tracing::error!(%error, "an export job panicked");
        }
    }
}

/// Acks export messages at once and wakes the job loop: the job itself lives in Postgres.
struct WakeHandler {
    wake: Arc<Notify>,
}

impl BatchHandler for WakeHandler {
    async fn handle(&self, deliveries: Vec<Delivery>, context: BatchContext) -> anyhow::Result<()> {
        for delivery in deliveries {
            match ExportCommand::decode(&delivery.data) {
                Ok(command) => {
                    tracing::debug!(export_id = %command.export_id, "export requested");
                    delivery.ack(BasicAckOptions::default()).await?;
                }
                Err(error) => {
                    context
                        .dead_letters
                        .send(&delivery, &error.to_string())
                        .await?
                }
            }
        }
        self.wake.notify_one();
        Ok(())
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
        pool,
        store,
        worker_id: format!("{ROLE}-sweep"),
        lease: Duration::from_secs(config.lease_seconds.max(1)),
        max_attempts: config.max_attempts.max(1),
        temp_dir: None,
    };
    let result = sweep(&context).await;
    context.pool.close().await;
    result
}

async fn sweep(context: &job::Context) -> anyhow::Result<()> {
    let failed = exports::fail_exhausted(&context.pool, context.max_attempts).await?;
    if failed > 0 {
        tracing::warn!(failed, "exports failed after using up their attempts");
    }
    const BATCH: i64 = 100;
    loop {
        let mut transaction = context.pool.begin().await?;
        let expired = exports::lock_expired(&mut *transaction, BATCH).await?;
        let mut purged: Vec<ExportId> = Vec::with_capacity(expired.len());
        for id in &expired {
            match context.store.delete_export(*id).await {
                Ok(_) => purged.push(*id),
                Err(error) => {
                    tracing::warn!(export_id = %id, %error, "could not purge an expired export")
                }
            }
        }
        exports::mark_expired(&mut *transaction, &purged).await?;
        transaction.commit().await?;
        if !purged.is_empty() {
            tracing::info!(count = purged.len(), "expired exports purged");
        }
        if (expired.len() as i64) < BATCH || purged.is_empty() {
            break;
        }
    }
    exports::delete_forgotten(&context.pool, EXPIRED_RETENTION).await?;
    Ok(())
}

/// Formats an export, one batch of rows at a time (runs on a blocking thread).
trait FormatWriter: Send {
    /// Writes rows, in order.
    fn write_rows(&mut self, rows: &[flow_common::db::reports::ExportRow]) -> anyhow::Result<()>;
    /// Completes the file and tells the upload it is whole.
    fn finish(self: Box<Self>) -> anyhow::Result<()>;
}
