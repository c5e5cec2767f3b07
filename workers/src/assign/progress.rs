//! The progress queue (`{prefix}.progress`), consumed by the assign-worker: module activity
//! ([`ProgressCommand`]) and changes and cancellations of assignments ([`ChangeBatch`]). A batch of
//! messages is applied in one transaction, each command locking its assignment so concurrent
//! updates of one assignment apply one at a time and each transition emits its event once.

use std::time::{Duration, Instant};

use flow_app::progress::{Command, Done};
use flow_common::db::changes::ChangeOutcome;
use flow_common::db::lifecycle::ProgressOutcome;
use flow_common::runtime::retry_transient;
use flow_domain::events::EventType;
use flow_domain::messages::{
    CHANGE_BATCH_KIND, ChangeBatch, ChangeCommand, DecodeError, PROGRESS_BATCH_KIND, ProgressBatch,
    ProgressCommand,
};
use lapin::message::Delivery;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use crate::consumer::{self, BatchContext, BatchHandler, ack_all, nack_all};

const ROLE: &str = "progress-worker";

/// What one message of the progress queue holds.
enum Work {
    /// Module activity.
    Progress(ProgressCommand),
    /// The module activity of one bulk request.
    Progresses(Vec<ProgressCommand>),
    /// The changes of one request.
    Changes(Vec<ChangeCommand>),
}

impl Work {
    /// Decodes a message by its AMQP type (a change batch, else module progress).
    fn decode(delivery: &Delivery) -> Result<Self, DecodeError> {
        let kind = delivery
            .properties
            .kind()
            .as_ref()
            .map(|kind| kind.as_str());
        if kind == Some(CHANGE_BATCH_KIND) {
            ChangeBatch::decode(&delivery.data).map(|batch| Self::Changes(batch.changes))
        } else if kind == Some(PROGRESS_BATCH_KIND) {
            ProgressBatch::decode(&delivery.data).map(|batch| Self::Progresses(batch.commands))
        } else {
            ProgressCommand::decode(&delivery.data).map(Self::Progress)
        }
    }

    /// Its commands, each with the trace context of the request that sent it.
    fn commands<'a>(&'a self, traceparent: Option<&'a str>) -> Vec<Traced<'a>> {
        match self {
            Self::Progress(command) => vec![(Command::Progress(command), traceparent)],
            Self::Progresses(commands) => commands
                .iter()
                .map(|command| (Command::Progress(command), traceparent))
                .collect(),
            Self::Changes(changes) => changes
                .iter()
                .map(|change| (Command::Change(change), traceparent))
                .collect(),
        }
    }
}

/// A command with the trace context of the request that sent it (its message's `traceparent`
/// header): the events it causes continue that trace.
type Traced<'a> = (Command<'a>, Option<&'a str>);

/// Applies batches of progress commands and changes.
pub struct ProgressHandler {
    pool: PgPool,
}

impl ProgressHandler {
    /// A handler writing to `pool`.
    pub fn new(pool: PgPool) -> Self {
        Self { pool }
    }

    async fn apply(&self, commands: &[Traced<'_>]) -> Result<Vec<Done>, sqlx::Error> {
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
    ) -> Result<Vec<Done>, sqlx::Error> {
        retry_transient(
            "progress batch",
            shutdown,
            flow_common::db::is_transient,
            || self.apply(commands),
        )
        .await
    }
}

/// The commands of `messages` in the order they lock their assignments: by assignment, so
/// workers lock in one order (fewer deadlocks); the sort is stable, so the commands of one
/// assignment stay in the order they were sent.
fn in_lock_order<'a>(messages: &'a [(Delivery, Work)]) -> Vec<Traced<'a>> {
    let mut commands: Vec<Traced<'a>> = messages
        .iter()
        .flat_map(|(delivery, work)| work.commands(consumer::traceparent(delivery)))
        .collect();
    commands.sort_by_key(|(command, _)| command.assignment_id());
    commands
}

impl BatchHandler for ProgressHandler {
    async fn handle(&self, deliveries: Vec<Delivery>, context: BatchContext) -> anyhow::Result<()> {
        let shutdown = &context.shutdown;
        let mut decoded = Vec::with_capacity(deliveries.len());
        for delivery in deliveries {
            match Work::decode(&delivery) {
                Ok(work) => decoded.push((delivery, work)),
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
        let commands = in_lock_order(&decoded);
        let started = Instant::now();
        match self.apply_with_retry(&commands, shutdown).await {
            Ok(outcomes) => {
                record(&commands, &outcomes, started.elapsed());
                drop(commands);
                let deliveries: Vec<Delivery> =
                    decoded.into_iter().map(|(delivery, _)| delivery).collect();
                ack_all(&deliveries).await
            }
            Err(error) if flow_common::db::is_transient(&error) => {
                tracing::warn!(%error, count = decoded.len(), "returning progress commands to the queue");
                drop(commands);
                let deliveries: Vec<Delivery> =
                    decoded.into_iter().map(|(delivery, _)| delivery).collect();
                nack_all(&deliveries).await
            }
            Err(error) => {
                // Something in the batch can never apply: apply each message alone, dead-letter
                // the ones that fail.
                tracing::warn!(%error, count = decoded.len(), "progress batch failed; applying messages one by one");
                drop(commands);
                for message in &decoded {
                    let delivery = &message.0;
                    let traced = in_lock_order(std::slice::from_ref(message));
                    match self.apply_with_retry(&traced, shutdown).await {
                        Ok(outcomes) => {
                            record(&traced, &outcomes, started.elapsed());
                            ack_all(std::slice::from_ref(delivery)).await?;
                        }
                        Err(error) if flow_common::db::is_transient(&error) => {
                            nack_all(std::slice::from_ref(delivery)).await?;
                        }
                        Err(error) => {
                            let about = traced
                                .first()
                                .map(|(command, _)| command.assignment_id().to_string())
                                .unwrap_or_default();
                            context
                                .dead_letters
                                .send(
                                    delivery,
                                    &format!(
                                        "progress or change of {about} cannot be applied: {error}"
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

fn record(commands: &[Traced<'_>], outcomes: &[Done], elapsed: Duration) {
    for ((command, _), done) in commands.iter().zip(outcomes) {
        match (command, done) {
            (Command::Progress(command), Done::Progress(outcome, events)) => {
                let label = match outcome {
                    ProgressOutcome::Applied => "applied",
                    ProgressOutcome::AlreadyCompleted => "already_completed",
                    ProgressOutcome::Cancelled => "cancelled",
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
            (Command::Change(command), Done::Change(outcome, event)) => {
                let label = outcome.as_str();
                metrics::counter!("flow_worker_messages_total", "worker" => ROLE, "outcome" => label)
                    .increment(1);
                match outcome {
                    ChangeOutcome::Applied => tracing::debug!(
                        assignment_id = %command.assignment_id,
                        change_id = %command.change_id,
                        event = event.map(EventType::as_str),
                        "change applied"
                    ),
                    _ => tracing::info!(
                        assignment_id = %command.assignment_id,
                        change_id = %command.change_id,
                        outcome = label,
                        "change not applied"
                    ),
                }
            }
            _ => {}
        }
    }
    metrics::histogram!("flow_worker_batch_seconds", "worker" => ROLE)
        .record(elapsed.as_secs_f64());
}
