//! The assign-worker: persists assign commands in batches, one transaction per batch (UNNEST
//! inserts, the `flow.assigned` outbox rows in the same transaction), and acks only after commit.
//! Redeliveries are harmless (the command's id makes the insert idempotent). A batch that fails on
//! its data is retried message by message so one poison message cannot take its neighbours down;
//! that message goes to the dead-letter queue.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use backon::{BackoffBuilder, ExponentialBuilder};
use flow_common::amqp::QueueKind;
use flow_common::config::CoreConfig;
use flow_common::db::{self, assignments};
use flow_common::messages::AssignCommand;
use lapin::message::Delivery;
use lapin::options::{BasicAckOptions, BasicNackOptions};
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use crate::consumer::{self, BatchHandler, ConsumerSettings};

const ROLE: &str = "assign-worker";

/// Settings of the assign-worker.
#[derive(Debug, Clone, clap::Args)]
pub struct AssignWorkerConfig {
    /// Database, broker and queue settings.
    #[command(flatten)]
    pub core: CoreConfig,

    /// Unacknowledged commands the broker may hand over at once.
    #[arg(long, env = "ASSIGN_PREFETCH", default_value_t = 2_000)]
    pub prefetch: u16,

    /// Largest number of commands written in one transaction.
    #[arg(long, env = "ASSIGN_BATCH_SIZE", default_value_t = 500)]
    pub batch_size: usize,

    /// Transactions in flight at once.
    #[arg(long, env = "ASSIGN_CONCURRENCY", default_value_t = 3)]
    pub concurrency: usize,
}

/// Runs the worker until `shutdown`.
pub async fn run(config: AssignWorkerConfig, shutdown: CancellationToken) -> anyhow::Result<()> {
    let pool = db::connect_with_retry(
        &config.core.database_url,
        config.core.database_max_connections,
        &shutdown,
    )
    .await
    .context("connecting to Postgres")?;
    let settings = ConsumerSettings {
        role: ROLE,
        queue: QueueKind::Assign,
        prefetch: config.prefetch,
        batch_size: config.batch_size.max(1),
        concurrency: config.concurrency,
    };
    consumer::run(
        &config.core,
        settings,
        Arc::new(AssignHandler { pool }),
        shutdown,
    )
    .await
}

/// Applies batches of assign commands.
pub struct AssignHandler {
    pool: PgPool,
}

impl AssignHandler {
    /// A handler writing to `pool`.
    pub fn new(pool: PgPool) -> Self {
        Self { pool }
    }
}

impl BatchHandler for AssignHandler {
    async fn handle(
        &self,
        deliveries: Vec<Delivery>,
        shutdown: CancellationToken,
    ) -> anyhow::Result<()> {
        let mut commands = Vec::with_capacity(deliveries.len());
        let mut decoded = Vec::with_capacity(deliveries.len());
        for delivery in deliveries {
            match AssignCommand::decode(&delivery.data) {
                Ok(command) => {
                    commands.push(command);
                    decoded.push(delivery);
                }
                Err(error) => consumer::dead_letter(ROLE, &delivery, &error.to_string()).await?,
            }
        }
        if commands.is_empty() {
            return Ok(());
        }
        let started = Instant::now();
        match self.apply_with_retry(&commands, &shutdown).await {
            Ok(outcome) => {
                record(outcome, started.elapsed(), commands.len());
                ack_all(&decoded).await
            }
            Err(error) if db::is_transient(&error) => {
                // Only reached on shutdown: give the messages back for another worker.
                tracing::warn!(%error, count = decoded.len(), "returning commands to the queue");
                nack_all(&decoded).await
            }
            Err(error) => {
                tracing::warn!(%error, count = decoded.len(), "batch failed; applying commands one by one");
                for (delivery, command) in decoded.iter().zip(&commands) {
                    match self
                        .apply_with_retry(std::slice::from_ref(command), &shutdown)
                        .await
                    {
                        Ok(outcome) => {
                            record(outcome, started.elapsed(), 1);
                            delivery.ack(BasicAckOptions::default()).await?;
                        }
                        Err(error) if db::is_transient(&error) => {
                            delivery
                                .nack(BasicNackOptions {
                                    requeue: true,
                                    multiple: false,
                                })
                                .await?;
                        }
                        Err(error) => {
                            let reason = format!(
                                "assignment {} cannot be persisted: {error}",
                                command.assignment_id
                            );
                            consumer::dead_letter(ROLE, delivery, &reason).await?;
                        }
                    }
                }
                Ok(())
            }
        }
    }
}

impl AssignHandler {
    /// Applies commands in one transaction, retrying transient failures (Postgres restarting,
    /// deadlocks) with backoff until it works or the worker shuts down.
    async fn apply_with_retry(
        &self,
        commands: &[AssignCommand],
        shutdown: &CancellationToken,
    ) -> Result<assignments::BatchOutcome, sqlx::Error> {
        let mut delays = ExponentialBuilder::default()
            .with_min_delay(Duration::from_millis(50))
            .with_max_delay(Duration::from_secs(5))
            .with_jitter()
            .without_max_times()
            .build();
        loop {
            let error = match self.apply(commands).await {
                Ok(outcome) => return Ok(outcome),
                Err(error) => error,
            };
            if !db::is_transient(&error) || shutdown.is_cancelled() {
                return Err(error);
            }
            let delay = delays.next().unwrap_or(Duration::from_secs(5));
            tracing::warn!(%error, ?delay, count = commands.len(), "transient database error; retrying batch");
            tokio::select! {
                () = shutdown.cancelled() => return Err(error),
                () = tokio::time::sleep(delay) => {}
            }
        }
    }

    async fn apply(
        &self,
        commands: &[AssignCommand],
    ) -> Result<assignments::BatchOutcome, sqlx::Error> {
        let mut transaction = self.pool.begin().await?;
        let outcome = assignments::apply_batch(&mut transaction, commands).await?;
        transaction.commit().await?;
        Ok(outcome)
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
    metrics::histogram!("flow_worker_batch_size", "worker" => ROLE).record(size as f64);
    metrics::histogram!("flow_worker_batch_seconds", "worker" => ROLE)
        .record(elapsed.as_secs_f64());
    tracing::debug!(
        ?outcome,
        size,
        elapsed_ms = elapsed.as_millis() as u64,
        "batch committed"
    );
}

/// Acks every delivery; the acks are pipelined rather than awaited one by one.
async fn ack_all(deliveries: &[Delivery]) -> anyhow::Result<()> {
    futures::future::try_join_all(
        deliveries
            .iter()
            .map(|delivery| delivery.ack(BasicAckOptions::default())),
    )
    .await?;
    Ok(())
}

/// Returns every delivery to the queue.
async fn nack_all(deliveries: &[Delivery]) -> anyhow::Result<()> {
    futures::future::try_join_all(deliveries.iter().map(|delivery| {
        delivery.nack(BasicNackOptions {
            requeue: true,
            multiple: false,
        })
    }))
    .await?;
    Ok(())
}
