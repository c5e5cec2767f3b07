//! Progress commands (module activity), consumed by the assign-worker from `{prefix}.progress`:
//! a batch is applied in one transaction, each command locking its assignment so concurrent
//! updates of one assignment apply one at a time and each transition emits its event once.

use std::time::{Duration, Instant};

use flow_common::db::lifecycle::ProgressOutcome;
use flow_common::runtime::retry_transient;
use flow_domain::events::EventType;
use flow_domain::messages::ProgressCommand;
use lapin::message::Delivery;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use crate::consumer::{self, BatchContext, BatchHandler, ack_all, nack_all};

const ROLE: &str = "progress-worker";

/// A progress command with the trace context of the request that sent it (its message's
/// `traceparent` header): the events it causes continue that trace.
type Traced<'a> = (&'a ProgressCommand, Option<&'a str>);

/// Applies batches of progress commands.
pub struct ProgressHandler {
    pool: PgPool,
}

impl ProgressHandler {
    /// A handler writing to `pool`.
    pub fn new(pool: PgPool) -> Self {
        Self { pool }
    }

    async fn apply(
        &self,
        commands: &[Traced<'_>],
    ) -> Result<Vec<(ProgressOutcome, Vec<EventType>)>, sqlx::Error> {
        // A command whose message names no trace joins the trace of the batch applying it.
        let batch_trace = flow_common::telemetry::current_traceparent();
        let traced: Vec<Traced<'_>> = commands
            .iter()
            .map(|(command, traceparent)| (*command, traceparent.or(batch_trace.as_deref())))
            .collect();
        flow_app::progress::apply(&self.pool, &traced).await
    }

    /// Applies `commands` in one transaction, retrying transient failures (deadlocks between
    /// workers, Postgres restarting) with backoff until it works or the worker shuts down.
    async fn apply_with_retry(
        &self,
        commands: &[Traced<'_>],
        shutdown: &CancellationToken,
    ) -> Result<Vec<(ProgressOutcome, Vec<EventType>)>, sqlx::Error> {
        retry_transient(
            "progress batch",
            shutdown,
            flow_common::db::is_transient,
            || self.apply(commands),
        )
        .await
    }
}

impl BatchHandler for ProgressHandler {
    async fn handle(&self, deliveries: Vec<Delivery>, context: BatchContext) -> anyhow::Result<()> {
        let shutdown = &context.shutdown;
        let mut decoded = Vec::with_capacity(deliveries.len());
        for delivery in deliveries {
            match ProgressCommand::decode(&delivery.data) {
                Ok(command) => decoded.push((delivery, command)),
                Err(error) => {
                    context
                        .dead_letters
                        .send(&delivery, &error.to_string())
                        .await?
                }
            }
        }
        if decoded.is_empty() {
            return Ok(());
        }
        // Lock assignments in one order across workers (fewer deadlocks); a stable sort keeps
        // the commands of one assignment in the order they were sent.
        decoded.sort_by_key(|(_, command)| command.assignment_id);
        let commands: Vec<Traced<'_>> = decoded
            .iter()
            .map(|(delivery, command)| (command, consumer::traceparent(delivery)))
            .collect();
        let started = Instant::now();
        match self.apply_with_retry(&commands, shutdown).await {
            Ok(outcomes) => {
                record(&commands, &outcomes, started.elapsed());
                let deliveries: Vec<Delivery> =
                    decoded.into_iter().map(|(delivery, _)| delivery).collect();
                ack_all(&deliveries).await
            }
            Err(error) if flow_common::db::is_transient(&error) => {
                tracing::warn!(%error, count = decoded.len(), "returning progress commands to the queue");
                let deliveries: Vec<Delivery> =
                    decoded.into_iter().map(|(delivery, _)| delivery).collect();
                nack_all(&deliveries).await
            }
            Err(error) => {
                // Something in the batch can never apply: apply each alone, dead-letter the
                // ones that fail.
                tracing::warn!(%error, count = decoded.len(), "progress batch failed; applying commands one by one");
                for (delivery, command) in &decoded {
                    let traced = [(command, consumer::traceparent(delivery))];
                    match self.apply_with_retry(&traced, shutdown).await {
                        Ok(outcomes) => {
                            record(&traced, &outcomes, started.elapsed());
                            ack_all(std::slice::from_ref(delivery)).await?;
                        }
                        Err(error) if flow_common::db::is_transient(&error) => {
                            nack_all(std::slice::from_ref(delivery)).await?;
                        }
                        Err(error) => {
                            context
                                .dead_letters
                                .send(
                                    delivery,
                                    &format!(
                                        "progress of {} cannot be applied: {error}",
                                        command.assignment_id
                                    ),
                                )
                                .await?;
                        }
                    }
                }
                Ok(())
            }
        }
    }
}

fn record(
    commands: &[Traced<'_>],
    outcomes: &[(ProgressOutcome, Vec<EventType>)],
    elapsed: Duration,
) {
    for ((command, _), (outcome, events)) in commands.iter().zip(outcomes) {
        let label = match outcome {
            ProgressOutcome::Applied => "applied",
            ProgressOutcome::AlreadyCompleted => "already_completed",
            ProgressOutcome::Missing => "missing",
        };
        metrics::counter!("flow_worker_messages_total", "worker" => ROLE, "outcome" => label)
            .increment(1);
        if *outcome != ProgressOutcome::Applied {
            tracing::info!(
                assignment_id = %command.assignment_id,
                module_id = %command.module_id,
                outcome = label,
                "progress not applied"
            );
        }
        for event in events {
            tracing::debug!(assignment_id = %command.assignment_id, event = event.as_str(), "transition");
        }
    }
    metrics::histogram!("flow_worker_batch_seconds", "worker" => ROLE)
        .record(elapsed.as_secs_f64());
}
