//! The dead-letter recorder: moves every message of `{prefix}.dead-letters` into Postgres with the
//! queue it died in and why, so operators list and replay them (`flowctl dlq`), a gauge counts
//! those waiting, and an assignment id whose command died resolves to that failure. Runs in the
//! assign-worker process; any number may run (the same message recorded twice is one row).

use std::time::Instant;

use flow_common::amqp::{self, DEAD_LETTER_REASON_HEADER, QueueKind, Topology};
use flow_common::db::{self, dead_letters::NewDeadLetter};
use flow_common::runtime::retry_transient;
use flow_domain::messages::{AssignCommand, decode_assign_message};
use lapin::message::Delivery;
use lapin::types::AMQPValue;
use sqlx::PgPool;

use crate::consumer::{BatchContext, BatchHandler, ConsumerSettings, ack_all, nack_all};

const ROLE: &str = "dead-letter-recorder";

/// How the recorder consumes the dead-letter queue; `liveness` reports it consuming.
pub fn settings(liveness: flow_common::ops::Liveness) -> ConsumerSettings {
    ConsumerSettings {
        role: ROLE,
        queues: vec![QueueKind::DeadLetters],
        prefetch: 200,
        batch_size: 100,
        batch_bytes: usize::MAX,
        concurrency: 1,
        liveness,
    }
}

/// Records dead letters in Postgres.
pub struct Recorder {
    pool: PgPool,
    topology: Topology,
}

impl Recorder {
    /// A recorder writing to `pool`.
    pub fn new(pool: PgPool, topology: &Topology) -> Self {
        Self {
            pool,
            topology: topology.clone(),
        }
    }
}

/// A dead letter read off the queue.
struct Letter {
    origin_queue: Option<String>,
    message_id: Option<String>,
    kind: Option<String>,
    reason: String,
    commands: Vec<AssignCommand>,
}

impl Recorder {
    fn read(&self, delivery: &Delivery) -> Letter {
        let origin_queue = amqp::dead_letter_origin(&delivery.properties).map(storable);
        let kind = delivery
            .properties
            .kind()
            .as_ref()
            .map(|kind| storable(kind.to_string()));
        let from_assign_queue = origin_queue
            .as_deref()
            .and_then(|queue| self.topology.kind_of(queue))
            .is_some_and(QueueKind::is_assign);
        let commands = if from_assign_queue {
            // An undecodable command has no id to fail: it is recorded as a message only.
            decode_assign_message(kind.as_deref(), &delivery.data).unwrap_or_default()
        } else {
            Vec::new()
        };
        Letter {
            origin_queue,
            message_id: delivery
                .properties
                .message_id()
                .as_ref()
                .map(|id| storable(id.to_string())),
            kind,
            reason: reason(delivery),
            commands,
        }
    }

    async fn record(&self, deliveries: &[Delivery]) -> Result<(), sqlx::Error> {
        let letters: Vec<Letter> = deliveries.iter().map(|d| self.read(d)).collect();
        let recorded: Vec<(NewDeadLetter<'_>, &[AssignCommand])> = deliveries
            .iter()
            .zip(&letters)
            .map(|(delivery, letter)| {
                (
                    NewDeadLetter {
                        origin_queue: letter.origin_queue.as_deref(),
                        message_id: letter.message_id.as_deref(),
                        kind: letter.kind.as_deref(),
                        reason: &letter.reason,
                        payload: &delivery.data,
                    },
                    letter.commands.as_slice(),
                )
            })
            .collect();
        let pending = flow_app::dead_letters::record(&self.pool, &recorded).await?;
        for letter in &letters {
            metrics::counter!(
                "flow_dead_letters_total",
                "queue" => letter.origin_queue.clone().unwrap_or_default()
            )
            .increment(1);
            tracing::warn!(
                role = ROLE,
                origin = letter.origin_queue.as_deref().unwrap_or("?"),
                message_id = letter.message_id.as_deref().unwrap_or(""),
                reason = %letter.reason,
                assignments = letter.commands.len(),
                "dead letter recorded"
            );
        }
        metrics::gauge!("flow_dead_letters_pending").set(pending as f64);
        Ok(())
    }
}

/// Why a message was dead-lettered: the reason a worker wrote, else what RabbitMQ says
/// (`delivery_limit`, `rejected`, ...).
fn reason(delivery: &Delivery) -> String {
    let headers = delivery.properties.headers().as_ref();
    let text = |name: &str| {
        headers
            .and_then(|headers| headers.inner().get(name).cloned())
            .and_then(|value| match value {
                AMQPValue::LongString(text) => Some(text.to_string()),
                AMQPValue::ShortString(text) => Some(text.to_string()),
                _ => None,
            })
    };
    let reason = text(DEAD_LETTER_REASON_HEADER)
        .or_else(|| {
            text("x-first-death-reason")
                .map(|reason| format!("dead-lettered by the broker: {reason}"))
        })
        .unwrap_or_else(|| "unknown".into());
    storable(reason)
}

/// `text` without the NUL characters Postgres text cannot hold.
fn storable(text: String) -> String {
    if text.contains('\0') {
        text.replace('\0', "")
    } else {
        text
    }
}

impl BatchHandler for Recorder {
    async fn handle(&self, deliveries: Vec<Delivery>, context: BatchContext) -> anyhow::Result<()> {
        let started = Instant::now();
        let recorded = retry_transient(
            "dead-letter record",
            &context.shutdown,
            db::is_transient,
            || self.record(&deliveries),
        )
        .await;
        match recorded {
            Ok(()) => {
                metrics::histogram!("flow_worker_batch_seconds", "worker" => ROLE)
                    .record(started.elapsed().as_secs_f64());
                ack_all(&deliveries).await
            }
            Err(error) => {
                // Only on shutdown, or if Postgres refuses the rows: they stay in the queue.
                tracing::error!(role = ROLE, %error, count = deliveries.len(), "dead letters not recorded; left in the queue");
                tokio::select! {
                    () = context.shutdown.cancelled() => {}
                    () = tokio::time::sleep(std::time::Duration::from_secs(1)) => {}
                }
                nack_all(&deliveries).await
            }
        }
    }
}
