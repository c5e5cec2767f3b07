//! The assign-worker: persists assign commands in batches, one transaction per batch (UNNEST
//! inserts, the `flow.assigned` outbox rows in the same transaction), and acks only after commit.
//! Redeliveries are harmless (the command's id makes the insert idempotent). A batch that fails on
//! its data is retried message by message so one poison message cannot take its neighbours down;
//! that message goes to the dead-letter queue. The same process applies progress commands
//! (module activity) from `{prefix}.progress`: see [`progress`].
//!
//! Lanes: interactive commands (`{prefix}.assign`) have a consume loop and transaction slots of
//! their own, so they are never behind bulk work; bulk commands come from
//! `{prefix}.assign.bulk.0..7`, one queue per shard of organizations, taken in turn (deficit round
//! robin over bytes, see `consumer::Turns`) so organizations with backlogs share the persist rate.

pub mod progress;

use std::sync::Arc;
use std::time::{Duration, Instant};

use flow_common::amqp::{Lane, QueueKind};
use flow_common::config::CoreConfig;
use flow_common::db::assignments::{self, ApplyError};
use flow_common::runtime::retry_transient;
use flow_domain::messages::{ASSIGN_KIND, AssignCommand, decode_assign_message};
use lapin::message::Delivery;
use lapin::options::{BasicAckOptions, BasicNackOptions};
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use crate::consumer::{self, BatchContext, BatchHandler, ConsumerSettings, ack_all, nack_all};
use crate::runtime::{Runtime, role};

const ROLE: &str = "assign-worker";

/// Settings of the assign-worker.
#[derive(Debug, Clone, clap::Args)]
pub struct AssignWorkerConfig {
    /// Database, broker and queue settings.
    #[command(flatten)]
    pub core: CoreConfig,

    /// Unacknowledged messages of the interactive lane the broker may hand over at once (a
    /// message carries up to `PUBLISH_BATCH_MAX` commands).
    #[arg(long, env = "ASSIGN_PREFETCH", default_value_t = 256)]
    pub prefetch: u16,

    /// Unacknowledged messages of each bulk queue the broker may hand over at once (a bulk
    /// message carries up to `PUBLISH_BATCH_MAX` commands; with eight queues, 32 each holds no
    /// more in memory than the interactive lane's 256).
    #[arg(long, env = "ASSIGN_BULK_PREFETCH", default_value_t = 32)]
    pub bulk_prefetch: u16,

    /// Largest number of commands written in one transaction.
    #[arg(long, env = "ASSIGN_BATCH_SIZE", default_value_t = 500)]
    pub batch_size: usize,

    /// Transactions in flight at once in each lane (the interactive lane's slots are its own, so
    /// it never waits for a bulk transaction).
    #[arg(long, env = "ASSIGN_CONCURRENCY", default_value_t = 1)]
    pub concurrency: usize,

    /// Unacknowledged progress commands the broker may hand over at once.
    #[arg(long, env = "PROGRESS_PREFETCH", default_value_t = 500)]
    pub progress_prefetch: u16,

    /// Largest number of progress commands applied in one transaction.
    #[arg(long, env = "PROGRESS_BATCH_SIZE", default_value_t = 100)]
    pub progress_batch_size: usize,

    /// What this role's readiness depends on (filled in by `run`, served by the ops endpoints).
    #[arg(skip)]
    pub health: flow_common::ops::Health,
}

role! {
    settings: AssignWorkerConfig,
    name: ROLE,
    about: "Flow assign-worker",
    description: "The assign-worker",
    ops_address: "127.0.0.1:9101",
    work: work,
}

/// Consumes assign commands, progress commands and dead letters until shutdown.
async fn work(config: AssignWorkerConfig, runtime: Runtime) -> anyhow::Result<()> {
    let batch_size = config.batch_size.max(1);
    let settings = ConsumerSettings {
        role: ROLE,
        queues: vec![QueueKind::Assign],
        prefetch: config.prefetch,
        batch_size,
        // About one transaction's worth of commands (an encoded command is a few hundred bytes).
        batch_bytes: batch_size.saturating_mul(COMMAND_BYTES),
        concurrency: config.concurrency,
        liveness: runtime.liveness("assign-consumer", None),
    };
    let bulk_settings = ConsumerSettings {
        role: "assign-worker-bulk",
        queues: QueueKind::bulk_assign(),
        prefetch: config.bulk_prefetch,
        liveness: runtime.liveness("bulk-assign-consumer", None),
        ..settings.clone()
    };
    let progress_settings = ConsumerSettings {
        role: "progress-worker",
        queues: vec![QueueKind::Progress],
        prefetch: config.progress_prefetch,
        batch_size: config.progress_batch_size.max(1),
        batch_bytes: usize::MAX,
        concurrency: 1,
        liveness: runtime.liveness("progress-consumer", None),
    };
    let pool = &runtime.pool;
    let progress = progress::ProgressHandler::new(pool.clone());
    let handler = Arc::new(AssignHandler::new(pool.clone(), batch_size));
    runtime.gauge("dead letters pending", crate::gauges::dead_letters);
    let recorder = crate::dead_letters::Recorder::new(pool.clone(), &runtime.topology);
    let (assigned, bulk_assigned, progressed, recorded) = tokio::join!(
        consumer::run(&runtime, settings, handler.clone()),
        consumer::run(&runtime, bulk_settings, handler),
        consumer::run(&runtime, progress_settings, Arc::new(progress)),
        consumer::run(
            &runtime,
            crate::dead_letters::settings(runtime.liveness("dead-letter-consumer", None)),
            Arc::new(recorder),
        ),
    );
    assigned.and(bulk_assigned).and(progressed).and(recorded)
}

/// Typical size of an encoded assign command, to bound a batch of messages in bytes.
const COMMAND_BYTES: usize = 450;

/// Applies batches of assign commands.
pub struct AssignHandler {
    pool: PgPool,
    /// Most commands written in one transaction.
    batch_size: usize,
}

impl AssignHandler {
    /// A handler writing to `pool`, at most `batch_size` commands per transaction.
    pub fn new(pool: PgPool, batch_size: usize) -> Self {
        Self {
            pool,
            batch_size: batch_size.max(1),
        }
    }
}

impl BatchHandler for AssignHandler {
    async fn handle(&self, deliveries: Vec<Delivery>, context: BatchContext) -> anyhow::Result<()> {
        let shutdown = &context.shutdown;
        let lane = context.queue.lane().unwrap_or(Lane::Bulk);
        // Commands of every decodable delivery, each remembering the delivery it came in.
        let mut commands = Vec::with_capacity(deliveries.len());
        let mut owners = Vec::with_capacity(deliveries.len());
        let mut decoded = Vec::with_capacity(deliveries.len());
        for delivery in deliveries {
            let kind = delivery
                .properties
                .kind()
                .as_ref()
                .map(|kind| kind.as_str());
            match decode_assign_message(kind, &delivery.data) {
                Ok(batch) => {
                    owners.extend(std::iter::repeat_n(decoded.len(), batch.len()));
                    commands.extend(batch);
                    decoded.push(delivery);
                }
                Err(error) => {
                    context
                        .dead_letters
                        .send(&delivery, &error.to_string())
                        .await?
                }
            }
        }
        if commands.is_empty() {
            return ack_all(&decoded).await;
        }
        // At most `batch_size` commands per transaction: a few messages of a bulk request can
        // carry thousands. Applying is idempotent, so if a later chunk fails, the fallback below
        // re-applies the earlier ones as no-ops.
        let mut applied = Ok(());
        for chunk in commands.chunks(self.batch_size) {
            let started = Instant::now();
            match self.apply_with_retry(lane, chunk, shutdown).await {
                Ok(outcome) => record(outcome, started.elapsed(), chunk.len()),
                Err(error) => {
                    applied = Err(error);
                    break;
                }
            }
        }
        match applied {
            Ok(()) => ack_all(&decoded).await,
            Err(error) if error.is_transient() => {
                // Only reached on shutdown: give the messages back for another worker.
                tracing::warn!(%error, count = decoded.len(), "returning commands to the queue");
                nack_all(&decoded).await
            }
            Err(error) => {
                tracing::warn!(%error, count = commands.len(), "batch failed; applying commands one by one");
                self.apply_one_by_one(lane, &decoded, &commands, &owners, &context)
                    .await
            }
        }
    }
}

/// What became of one command applied on its own.
enum Single {
    Applied,
    Retry,
    Poison(String),
}

impl AssignHandler {
    /// Applies each command in its own transaction so one that can never be persisted does not
    /// hold back the others. Deliveries whose commands all applied are acked; a delivery with a
    /// transient failure goes back to the queue; commands that can never apply go to the
    /// dead-letter queue (the whole delivery when it held only that command).
    async fn apply_one_by_one(
        &self,
        lane: Lane,
        deliveries: &[Delivery],
        commands: &[AssignCommand],
        owners: &[usize],
        context: &BatchContext,
    ) -> anyhow::Result<()> {
        let shutdown = &context.shutdown;
        let started = Instant::now();
        let mut results = Vec::with_capacity(commands.len());
        for command in commands {
            results.push(
                match self
                    .apply_with_retry(lane, std::slice::from_ref(command), shutdown)
                    .await
                {
                    Ok(outcome) => {
                        record(outcome, started.elapsed(), 1);
                        Single::Applied
                    }
                    Err(error) if error.is_transient() => Single::Retry,
                    Err(error) => Single::Poison(format!(
                        "assignment {} cannot be persisted: {error}",
                        command.assignment_id
                    )),
                },
            );
        }
        for (index, delivery) in deliveries.iter().enumerate() {
            let mine: Vec<(&AssignCommand, &Single)> = commands
                .iter()
                .zip(&results)
                .zip(owners)
                .filter(|(_, owner)| **owner == index)
                .map(|(pair, _)| pair)
                .collect();
            if mine
                .iter()
                .any(|(_, result)| matches!(result, Single::Retry))
            {
                delivery
                    .nack(BasicNackOptions {
                        requeue: true,
                        multiple: false,
                    })
                    .await?;
                continue;
            }
            let poisoned: Vec<(&AssignCommand, &String)> = mine
                .iter()
                .filter_map(|(command, result)| match result {
                    Single::Poison(reason) => Some((*command, reason)),
                    _ => None,
                })
                .collect();
            match poisoned.as_slice() {
                [] => {
                    delivery.ack(BasicAckOptions::default()).await?;
                }
                [(_, reason)] if mine.len() == 1 => {
                    context.dead_letters.send(delivery, reason).await?;
                }
                _ => {
                    for (command, reason) in &poisoned {
                        let payload = command.encode()?;
                        context
                            .dead_letters
                            .send_part(
                                &payload,
                                &command.assignment_id.to_string(),
                                ASSIGN_KIND,
                                &[],
                                reason,
                            )
                            .await?;
                    }
                    delivery.ack(BasicAckOptions::default()).await?;
                }
            }
        }
        Ok(())
    }
}

impl AssignHandler {
    /// Applies commands in one transaction, retrying transient failures (Postgres restarting,
    /// deadlocks) with backoff until it works or the worker shuts down.
    async fn apply_with_retry(
        &self,
        lane: Lane,
        commands: &[AssignCommand],
        shutdown: &CancellationToken,
    ) -> Result<assignments::BatchOutcome, ApplyError> {
        retry_transient("assign batch", shutdown, ApplyError::is_transient, || {
            self.apply(lane, commands)
        })
        .await
    }

    /// Applies commands of `lane` in one transaction (their events go to the same lane).
    async fn apply(
        &self,
        lane: Lane,
        commands: &[AssignCommand],
    ) -> Result<assignments::BatchOutcome, ApplyError> {
        flow_app::assign::apply(&self.pool, lane, commands).await
    }
}

fn record(outcome: assignments::BatchOutcome, elapsed: Duration, size: usize) {
    let counter = |outcome: &'static str, count: u64| {
        metrics::counter!("flow_worker_messages_total", "worker" => ROLE, "outcome" => outcome)
            .increment(count);
    };
    counter("inserted", outcome.inserted);
    counter("aliased", outcome.aliased);
    counter("already_applied", outcome.already_applied);
    metrics::histogram!("flow_worker_batch_items", "worker" => ROLE).record(size as f64);
    metrics::histogram!("flow_worker_batch_seconds", "worker" => ROLE)
        .record(elapsed.as_secs_f64());
    tracing::debug!(
        ?outcome,
        size,
        elapsed_ms = elapsed.as_millis() as u64,
        "batch committed"
    );
}
