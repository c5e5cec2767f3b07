//! The consume loop every queue worker shares: connect (retrying with backoff), declare the
//! topology, consume with a prefetch window, hand deliveries to a handler in batches with a bounded
//! number of batches in flight, and on shutdown stop consuming, finish in-flight batches, close.
//! Handlers ack only after their work is committed, so a crash loses nothing: unacked deliveries
//! go back to the queue.
//!
//! Poison messages: a message whose handling keeps killing the worker is dead-lettered after
//! `DELIVERY_LIMIT` starts that never finished, counted in Postgres (`message_attempts`) for
//! redelivered messages only. RabbitMQ's own delivery count is only a distant backstop, because it
//! also rises when a connection drops with messages merely prefetched, which says nothing about the
//! messages. Dead letters carry their origin queue and the reason in headers.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use flow_common::amqp::{self, QueueKind, Topology};
use flow_common::db::message_attempts;
use flow_common::ops::Liveness;
use flow_common::runtime::Backoff;
use futures::{FutureExt, StreamExt};
use lapin::message::Delivery;
use lapin::options::{
    BasicAckOptions, BasicCancelOptions, BasicConsumeOptions, BasicNackOptions,
    BasicPublishOptions, ConfirmSelectOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel};
use sqlx::PgPool;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::runtime::Runtime;

/// How a worker consumes its queue.
#[derive(Debug, Clone)]
pub struct ConsumerSettings {
    /// Role name, for logs and the broker's connection list.
    pub role: &'static str,
    /// Queue consumed.
    pub queue: QueueKind,
    /// Unacknowledged deliveries the broker may hand over at once.
    pub prefetch: u16,
    /// Largest batch handed to the handler, in messages.
    pub batch_size: usize,
    /// Largest batch handed to the handler, in bytes of message bodies (a batch holds at least one
    /// message): bounds batches of messages that carry many items each.
    pub batch_bytes: usize,
    /// Batches processed at the same time.
    pub concurrency: usize,
    /// Reports the consumer alive while it consumes (readiness of the process).
    pub liveness: Liveness,
}

/// Processes a batch of deliveries; must ack, dead-letter or nack each one.
pub trait BatchHandler: Send + Sync + 'static {
    /// Handles `deliveries`. An error means the connection is unusable: the loop reconnects
    /// (unacked deliveries return to the queue).
    fn handle(
        &self,
        deliveries: Vec<Delivery>,
        context: BatchContext,
    ) -> impl Future<Output = anyhow::Result<()>> + Send;
}

/// What a handler gets beside its deliveries.
#[derive(Clone)]
pub struct BatchContext {
    /// Cancelled when the worker is asked to stop.
    pub shutdown: CancellationToken,
    /// Sends messages that can never be handled to the dead-letter queue.
    pub dead_letters: DeadLetters,
}

/// Sends messages to the dead-letter exchange with their origin queue and the reason, over a
/// confirm-mode channel of the consumer's connection. Cheap to clone.
#[derive(Clone)]
pub struct DeadLetters {
    channel: Channel,
    exchange: String,
    origin_queue: String,
    routing_key: &'static str,
    role: &'static str,
}

impl DeadLetters {
    async fn open(
        connection: &lapin::Connection,
        topology: &Topology,
        settings: &ConsumerSettings,
    ) -> lapin::Result<Self> {
        let channel = connection.create_channel().await?;
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await?;
        Ok(Self {
            channel,
            exchange: topology.dead_letter_exchange(),
            origin_queue: topology.queue(settings.queue),
            routing_key: settings.queue.suffix(),
            role: settings.role,
        })
    }

    /// Dead-letters `delivery` (a copy with the reason goes to the dead-letter exchange, then the
    /// original is acked), logging why.
    pub async fn send(&self, delivery: &Delivery, reason: &str) -> anyhow::Result<()> {
        tracing::error!(
            role = self.role,
            message_id = ?delivery.properties.message_id(),
            delivery_count = delivery_count(delivery),
            reason,
            "message sent to the dead-letter queue"
        );
        self.publish(&delivery.data, delivery.properties.clone(), reason)
            .await?;
        delivery.ack(BasicAckOptions::default()).await?;
        Ok(())
    }

    /// Dead-letters one part of a message (a command or an event of a batch) as a message of its
    /// own, with `headers`.
    pub async fn send_part(
        &self,
        payload: &[u8],
        message_id: &str,
        kind: &str,
        headers: &[(&str, &str)],
        reason: &str,
    ) -> anyhow::Result<()> {
        tracing::error!(
            role = self.role,
            message_id,
            reason,
            "part of a message sent to the dead-letter queue"
        );
        let mut table = FieldTable::default();
        for (name, value) in headers {
            table.insert((*name).into(), AMQPValue::LongString((*value).into()));
        }
        let properties = BasicProperties::default()
            .with_delivery_mode(2)
            .with_content_type("application/json".into())
            .with_message_id(message_id.into())
            .with_type(kind.into())
            .with_headers(table);
        self.publish(payload, properties, reason).await
    }

    async fn publish(
        &self,
        payload: &[u8],
        properties: BasicProperties,
        reason: &str,
    ) -> anyhow::Result<()> {
        metrics::counter!("flow_worker_messages_total", "worker" => self.role, "outcome" => "dead_lettered")
            .increment(1);
        let mut headers = properties.headers().clone().unwrap_or_default();
        headers.insert(
            amqp::ORIGIN_QUEUE_HEADER.into(),
            AMQPValue::LongString(self.origin_queue.clone().into()),
        );
        headers.insert(
            amqp::DEAD_LETTER_REASON_HEADER.into(),
            AMQPValue::LongString(reason.into()),
        );
        let confirm = self
            .channel
            .basic_publish(
                self.exchange.clone().into(),
                self.routing_key.into(),
                BasicPublishOptions {
                    mandatory: true,
                    ..Default::default()
                },
                payload,
                properties.with_delivery_mode(2).with_headers(headers),
            )
            .await?
            .await?;
        if !confirm.is_ack() || confirm.take_message().is_some() {
            anyhow::bail!("the broker did not take the dead letter");
        }
        Ok(())
    }
}

/// Counts starts of redelivered messages (see the module documentation).
#[derive(Clone)]
struct Ledger {
    pool: PgPool,
    queue: String,
    limit: u32,
}

impl Ledger {
    /// The key a message is counted under: its `message-id`, else a hash of its body.
    fn key(delivery: &Delivery) -> String {
        match delivery.properties.message_id() {
            Some(id) => id.to_string(),
            None => {
                use sha2::{Digest, Sha256};
                hex::encode(Sha256::digest(&delivery.data))
            }
        }
    }

    /// Counts a start of every redelivered delivery and dead-letters those started more than
    /// `limit` times before without finishing; returns the deliveries to handle and the keys
    /// counted. If Postgres cannot count, the batch is handled uncounted.
    async fn start(
        &self,
        batch: Vec<Delivery>,
        dead_letters: &DeadLetters,
    ) -> anyhow::Result<(Vec<Delivery>, Vec<String>)> {
        let keys: Vec<String> = batch
            .iter()
            .filter(|delivery| delivery.redelivered)
            .map(Self::key)
            .collect();
        if keys.is_empty() {
            return Ok((batch, keys));
        }
        let counts = match message_attempts::start(&self.pool, &self.queue, &keys).await {
            Ok(counts) => counts,
            Err(error) => {
                tracing::warn!(%error, queue = %self.queue, "cannot count message starts; handling uncounted");
                return Ok((batch, Vec::new()));
            }
        };
        let mut kept = Vec::with_capacity(batch.len());
        let mut poisoned = Vec::new();
        for delivery in batch {
            let starts = delivery
                .redelivered
                .then(|| counts.get(&Self::key(&delivery)).copied())
                .flatten()
                .unwrap_or(0);
            if u32::try_from(starts).unwrap_or(0) > self.limit {
                let reason = format!(
                    "handled {} times without finishing: the worker died or panicked each time",
                    starts - 1
                );
                dead_letters.send(&delivery, &reason).await?;
                poisoned.push(Self::key(&delivery));
            } else {
                kept.push(delivery);
            }
        }
        if !poisoned.is_empty() {
            self.finish(&poisoned).await;
        }
        Ok((kept, keys))
    }

    /// Forgets the counts of `keys`: their handling came to an end.
    async fn finish(&self, keys: &[String]) {
        if keys.is_empty() {
            return;
        }
        if let Err(error) = message_attempts::finish(&self.pool, &self.queue, keys).await {
            tracing::warn!(%error, queue = %self.queue, "cannot clear message start counts");
        }
    }
}

/// Consumes until the role stops, reconnecting with backoff when the broker connection fails.
/// The role's pool counts the starts of redelivered messages.
pub async fn run<H: BatchHandler>(
    runtime: &Runtime,
    settings: ConsumerSettings,
    handler: Arc<H>,
) -> anyhow::Result<()> {
    let ledger = Ledger {
        pool: runtime.pool.clone(),
        queue: runtime.topology.queue(settings.queue),
        limit: runtime.core.delivery_limit,
    };
    let shutdown = &runtime.shutdown;
    let mut backoff = Backoff::reconnect();
    while !shutdown.is_cancelled() {
        let mut consumed = false;
        match consume(runtime, &settings, handler.clone(), &ledger, &mut consumed).await {
            Ok(()) => break,
            Err(error) => {
                if consumed {
                    // The connection worked: the next outage starts from the shortest delay.
                    backoff.reset();
                }
                let delay = backoff.delay();
                tracing::warn!(
                    role = settings.role,
                    error = format!("{error:#}"),
                    ?delay,
                    "consumer stopped; reconnecting"
                );
                shutdown
                    .run_until_cancelled(tokio::time::sleep(delay))
                    .await;
            }
        }
    }
    tracing::info!(role = settings.role, "consumer stopped");
    Ok(())
}

async fn consume<H: BatchHandler>(
    runtime: &Runtime,
    settings: &ConsumerSettings,
    handler: Arc<H>,
    ledger: &Ledger,
    consumed: &mut bool,
) -> anyhow::Result<()> {
    let (topology, shutdown) = (&runtime.topology, &runtime.shutdown);
    let (connection, node) =
        amqp::nodes::connect_naming_node(&runtime.core.amqp_url, settings.role)
            .await
            .context("connecting to RabbitMQ")?;
    let queue = topology.queue(settings.queue);
    // Bounded: a call on a connection whose node dies at that moment can wait forever.
    let (dead_letters, channel, mut consumer) = amqp::nodes::bounded(async {
        let setup = connection.create_channel().await?;
        topology.declare(&setup).await?;
        drop(setup.close(200, "topology declared".into()).await);
        let dead_letters = DeadLetters::open(&connection, topology, settings).await?;
        let channel = amqp::consumer_channel(&connection, settings.prefetch).await?;
        let consumer = channel
            .basic_consume(
                queue.clone().into(),
                format!("{}-{}", settings.role, uuid::Uuid::now_v7().simple()).into(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await?;
        Ok((dead_letters, channel, consumer))
    })
    .await
    .with_context(|| format!("declaring the topology and consuming {queue} on {node}"))?;
    tracing::info!(role = settings.role, %queue, %node, prefetch = settings.prefetch, "consuming");
    *consumed = true;
    settings.liveness.set_alive(true);
    // Opening a channel on a connection that drops at that moment can wait forever: bounded, so
    // the consumer always gets on to notice the drop and reconnect (the depth is then unreported).
    let depths = match tokio::time::timeout(DEPTH_INTERVAL, connection.create_channel()).await {
        Ok(Ok(depth_channel)) => Some(tokio::spawn(report_queue_depth(
            depth_channel,
            queue.clone(),
            shutdown.clone(),
        ))),
        _ => {
            tracing::debug!(%queue, "no channel to read the queue depth");
            None
        }
    };
    let permits = Arc::new(Semaphore::new(settings.concurrency.max(1)));
    let mut in_flight = JoinSet::new();
    let outcome: anyhow::Result<()> = 'consume: loop {
        // Take a batch slot first, so deliveries accumulate while every slot is busy.
        // While it waits, the loop also watches the connection itself: a batch blocked on a
        // dropped connection keeps its slot, and the consumer stream may never report the drop.
        let permit = tokio::select! {
            () = shutdown.cancelled() => break Ok(()),
            () = connection_lost(&connection) => break Err(anyhow::anyhow!("connection to {node} lost")),
            permit = permits.clone().acquire_owned() => permit?,
        };
        let first = tokio::select! {
            () = shutdown.cancelled() => break Ok(()),
            () = connection_lost(&connection) => break Err(anyhow::anyhow!("connection to {node} lost")),
            next = consumer.next() => next,
        };
        let first = match first {
            Some(Ok(delivery)) => delivery,
            Some(Err(error)) => break Err(anyhow::Error::new(error).context("consumer failed")),
            None => break Err(anyhow::anyhow!("consumer cancelled by the broker")),
        };
        let mut bytes = first.data.len();
        let mut batch = vec![first];
        while batch.len() < settings.batch_size && bytes < settings.batch_bytes {
            match consumer.next().now_or_never() {
                Some(Some(Ok(delivery))) => {
                    bytes += delivery.data.len();
                    batch.push(delivery);
                }
                _ => break,
            }
        }
        record_lag(&queue, &batch);
        // The batch is handled in a span continuing the trace of its first traced message.
        let span = tracing::info_span!(
            "batch",
            role = settings.role,
            queue = %queue,
            messages = batch.len(),
        );
        flow_common::telemetry::continue_trace(&span, batch.iter().find_map(traceparent));
        let handler = handler.clone();
        let ledger = ledger.clone();
        let context = BatchContext {
            shutdown: shutdown.clone(),
            dead_letters: dead_letters.clone(),
        };
        in_flight.spawn(async move {
            let _permit = permit;
            let (batch, started) = ledger.start(batch, &context.dead_letters).await?;
            if batch.is_empty() {
                return Ok(());
            }
            let handled = handler.handle(batch, context).instrument(span).await;
            // Reached whether or not the acks went through: the work itself ended (a dropped
            // connection is not the message's fault). A panic or a killed worker never gets
            // here, and that is what the count is for.
            ledger.finish(&started).await;
            handled
        });
        while let Some(done) = in_flight.try_join_next() {
            if let Err(error) = flatten(done) {
                break 'consume Err(error);
            }
        }
    };
    settings.liveness.set_alive(false);
    if let Some(depths) = depths {
        depths.abort();
    }
    // Stop receiving; what was prefetched but not handed out returns to the queue on close.
    // Every step on the broker is bounded: on a connection that just dropped, a call can wait
    // for an answer that never comes, and the consumer would never reconnect.
    bounded(
        settings.role,
        "cancelling the consumer",
        channel.basic_cancel(consumer.tag(), BasicCancelOptions::default()),
    )
    .await;
    let mut failure = outcome.err();
    // On shutdown every batch is waited for; after a failure (the connection is gone) only for a
    // while: a batch whose acks wait on the dead connection would hold the reconnect forever.
    let grace = if failure.is_some() {
        IN_FLIGHT_GRACE
    } else {
        Duration::MAX
    };
    let joined = tokio::time::timeout(grace, async {
        while let Some(done) = in_flight.join_next().await {
            if let Err(error) = flatten(done) {
                failure.get_or_insert(error);
            }
        }
    })
    .await;
    if joined.is_err() {
        // Their deliveries were never acked: the broker hands them out again.
        tracing::warn!(
            role = settings.role,
            batches = in_flight.len(),
            "batches still in flight after the consumer stopped; abandoning them"
        );
        in_flight.abort_all();
    }
    bounded(
        settings.role,
        "closing the channel",
        channel.close(200, "worker stopping".into()),
    )
    .await;
    bounded(
        settings.role,
        "closing the connection",
        connection.close(200, "worker stopping".into()),
    )
    .await;
    match failure {
        Some(error) => Err(error),
        None => Ok(()),
    }
}

/// Returns once `connection` is no longer connected (checked every quarter second).
async fn connection_lost(connection: &lapin::Connection) {
    while connection.status().connected() {
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// How long a consumer whose connection failed waits for the batches it handed out (a large
/// transaction takes a second or two; a batch blocked on the dead connection would take forever).
const IN_FLIGHT_GRACE: Duration = Duration::from_secs(10);

/// How long a stopping consumer waits for one answer from the broker.
const BROKER_STEP_TIMEOUT: Duration = Duration::from_secs(5);

/// Runs one broker step of a stopping consumer within [`BROKER_STEP_TIMEOUT`]; its outcome does
/// not matter (the connection may be gone), only that it does not wait forever.
async fn bounded<T>(role: &str, step: &str, call: impl std::future::Future<Output = T>) {
    if tokio::time::timeout(BROKER_STEP_TIMEOUT, call)
        .await
        .is_err()
    {
        tracing::warn!(role, step, "timed out; going on");
    }
}

/// The W3C `traceparent` header of a delivery.
pub fn traceparent(delivery: &Delivery) -> Option<&str> {
    match delivery
        .properties
        .headers()
        .as_ref()?
        .inner()
        .get(flow_common::telemetry::TRACEPARENT)?
    {
        AMQPValue::LongString(text) => std::str::from_utf8(text.as_bytes()).ok(),
        _ => None,
    }
}

/// How often a consumer reads its queue's depth.
const DEPTH_INTERVAL: Duration = Duration::from_secs(5);

/// Sets `flow_queue_messages` (ready messages) and `flow_queue_consumers` of `queue` every
/// [`DEPTH_INTERVAL`], by passive declares on a channel of the consumer's connection (the queue
/// exists while it is consumed, so the declares do not close the channel).
async fn report_queue_depth(channel: Channel, queue: String, shutdown: CancellationToken) {
    loop {
        match tokio::time::timeout(DEPTH_INTERVAL, queue_depth(&channel, &queue)).await {
            Ok(Ok((messages, consumers))) => {
                metrics::gauge!("flow_queue_messages", "queue" => queue.clone())
                    .set(f64::from(messages));
                metrics::gauge!("flow_queue_consumers", "queue" => queue.clone())
                    .set(f64::from(consumers));
            }
            Ok(Err(error)) => tracing::debug!(%error, %queue, "could not read the queue depth"),
            Err(_) => tracing::debug!(%queue, "timed out reading the queue depth"),
        }
        tokio::select! {
            () = shutdown.cancelled() => break,
            () = tokio::time::sleep(DEPTH_INTERVAL) => {}
        }
    }
}

/// Messages of `queue` ready for a consumer and its consumers, by a passive declare (which closes
/// `channel` if the queue does not exist).
pub async fn queue_depth(channel: &Channel, queue: &str) -> lapin::Result<(u32, u32)> {
    let declared = channel
        .queue_declare(
            queue.into(),
            lapin::options::QueueDeclareOptions {
                passive: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await?;
    Ok((declared.message_count(), declared.consumer_count()))
}

/// Sets `flow_consumer_lag_seconds` of `queue`: how long the oldest message of the batch about
/// to be handled waited since it was published (its AMQP `timestamp`, whole seconds).
fn record_lag(queue: &str, batch: &[Delivery]) {
    let oldest = batch
        .iter()
        .filter_map(|delivery| *delivery.properties.timestamp())
        .min();
    if let Some(published) = oldest {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.as_secs());
        metrics::gauge!("flow_consumer_lag_seconds", "queue" => queue.to_owned())
            .set(now.saturating_sub(published) as f64);
    }
}

fn flatten(done: Result<anyhow::Result<()>, tokio::task::JoinError>) -> anyhow::Result<()> {
    match done {
        Ok(result) => result,
        Err(error) => Err(anyhow::Error::new(error).context("batch task panicked")),
    }
}

/// How many times RabbitMQ has delivered this message before (quorum queues count it).
pub fn delivery_count(delivery: &Delivery) -> i64 {
    delivery
        .properties
        .headers()
        .as_ref()
        .and_then(|headers| headers.inner().get("x-delivery-count").cloned())
        .and_then(|value| match value {
            AMQPValue::LongLongInt(count) => Some(count),
            AMQPValue::LongInt(count) => Some(i64::from(count)),
            AMQPValue::ShortInt(count) => Some(i64::from(count)),
            _ => None,
        })
        .unwrap_or(0)
}

/// Acks every delivery; the acks are pipelined rather than awaited one by one.
pub async fn ack_all(deliveries: &[Delivery]) -> anyhow::Result<()> {
    futures::future::try_join_all(
        deliveries
            .iter()
            .map(|delivery| delivery.ack(BasicAckOptions::default())),
    )
    .await?;
    Ok(())
}

/// Returns every delivery to the queue.
pub async fn nack_all(deliveries: &[Delivery]) -> anyhow::Result<()> {
    futures::future::try_join_all(deliveries.iter().map(|delivery| {
        delivery.nack(BasicNackOptions {
            requeue: true,
            multiple: false,
        })
    }))
    .await?;
    Ok(())
}
