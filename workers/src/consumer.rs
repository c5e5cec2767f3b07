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
    /// Queues consumed: one, or several taken in turn (see [`Turns`]); each batch comes from one
    /// queue. The prefetch window is per queue.
    pub queues: Vec<QueueKind>,
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
    /// The queue the batch came from.
    pub queue: QueueKind,
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
    routing_key: String,
    role: &'static str,
}

impl DeadLetters {
    async fn open(
        connection: &lapin::Connection,
        topology: &Topology,
        role: &'static str,
    ) -> lapin::Result<Self> {
        let channel = connection.create_channel().await?;
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await?;
        Ok(Self {
            channel,
            exchange: topology.dead_letter_exchange(),
            origin_queue: String::new(),
            routing_key: String::new(),
            role,
        })
    }

    /// The same channel, dead-lettering messages that came from `queue`.
    fn for_queue(&self, topology: &Topology, queue: QueueKind) -> Self {
        Self {
            origin_queue: topology.queue(queue),
            routing_key: queue.suffix(),
            ..self.clone()
        }
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
                self.routing_key.clone().into(),
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
    anyhow::ensure!(!settings.queues.is_empty(), "a consumer needs a queue");
    let ledgers: Vec<Ledger> = settings
        .queues
        .iter()
        .map(|queue| Ledger {
            pool: runtime.pool.clone(),
            queue: runtime.topology.queue(*queue),
            limit: runtime.core.delivery_limit,
        })
        .collect();
    let shutdown = &runtime.shutdown;
    let mut backoff = Backoff::reconnect();
    while !shutdown.is_cancelled() {
        let mut consumed = false;
        match consume(runtime, &settings, handler.clone(), &ledgers, &mut consumed).await {
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
    ledgers: &[Ledger],
    consumed: &mut bool,
) -> anyhow::Result<()> {
    let (topology, shutdown) = (&runtime.topology, &runtime.shutdown);
    let (connection, node) =
        amqp::nodes::connect_naming_node(&runtime.core.amqp_url, settings.role)
            .await
            .context("connecting to RabbitMQ")?;
    let names: Vec<String> = settings
        .queues
        .iter()
        .map(|queue| topology.queue(*queue))
        .collect();
    // Bounded: a call on a connection whose node dies at that moment can wait forever.
    let (dead_letters, channel, consumers) = amqp::nodes::bounded(async {
        let setup = connection.create_channel().await?;
        topology.declare(&setup).await?;
        drop(setup.close(200, "topology declared".into()).await);
        let dead_letters = DeadLetters::open(&connection, topology, settings.role).await?;
        let channel = amqp::consumer_channel(&connection, settings.prefetch).await?;
        let mut consumers = Vec::with_capacity(names.len());
        for queue in &names {
            let consumer = channel
                .basic_consume(
                    queue.clone().into(),
                    format!("{}-{}", settings.role, uuid::Uuid::now_v7().simple()).into(),
                    BasicConsumeOptions::default(),
                    FieldTable::default(),
                )
                .await?;
            consumers.push(consumer);
        }
        Ok((dead_letters, channel, consumers))
    })
    .await
    .with_context(|| format!("declaring the topology and consuming {names:?} on {node}"))?;
    let tags: Vec<_> = consumers.iter().map(|consumer| consumer.tag()).collect();
    let mut turns = Turns::new(consumers, settings.batch_bytes);
    tracing::info!(role = settings.role, queues = ?names, %node, prefetch = settings.prefetch, "consuming");
    *consumed = true;
    settings.liveness.set_alive(true);
    // Opening a channel on a connection that drops at that moment can wait forever: bounded, so
    // the consumer always gets on to notice the drop and reconnect (the depth is then unreported).
    let depths = match tokio::time::timeout(DEPTH_INTERVAL, connection.create_channel()).await {
        Ok(Ok(depth_channel)) => Some(tokio::spawn(report_queue_depth(
            depth_channel,
            settings
                .queues
                .iter()
                .zip(&names)
                .map(|(kind, name)| (*kind, name.clone()))
                .collect(),
            shutdown.clone(),
        ))),
        _ => {
            tracing::debug!(queues = ?names, "no channel to read the queue depths");
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
        let next = tokio::select! {
            () = shutdown.cancelled() => break Ok(()),
            () = connection_lost(&connection) => break Err(anyhow::anyhow!("connection to {node} lost")),
            next = turns.next_batch(settings.batch_size, settings.batch_bytes) => next,
        };
        let (source, batch) = match next {
            Ok(Some(next)) => next,
            Err(error) => break Err(anyhow::Error::new(error).context("consumer failed")),
            Ok(None) => break Err(anyhow::anyhow!("consumer cancelled by the broker")),
        };
        let queue = &names[source];
        let kind = settings.queues[source];
        record_lag(queue, &batch);
        // The batch is handled in a span continuing the trace of its first traced message.
        let span = tracing::info_span!(
            "batch",
            role = settings.role,
            queue = %queue,
            messages = batch.len(),
        );
        flow_common::telemetry::continue_trace(&span, batch.iter().find_map(traceparent));
        let handler = handler.clone();
        let ledger = ledgers[source].clone();
        let context = BatchContext {
            queue: kind,
            shutdown: shutdown.clone(),
            dead_letters: dead_letters.for_queue(topology, kind),
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
    for tag in tags {
        bounded(
            settings.role,
            "cancelling the consumer",
            channel.basic_cancel(tag, BasicCancelOptions::default()),
        )
        .await;
    }
    drop(turns);
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

/// Sets `flow_queue_messages` (ready messages) and `flow_queue_consumers` of each of `queues`
/// every [`DEPTH_INTERVAL`], by passive declares on a channel of the consumer's connection (the
/// queues exist while they are consumed, so the declares do not close the channel).
async fn report_queue_depth(
    channel: Channel,
    queues: Vec<(QueueKind, String)>,
    shutdown: CancellationToken,
) {
    loop {
        for (kind, queue) in &queues {
            match tokio::time::timeout(DEPTH_INTERVAL, queue_depth(&channel, queue)).await {
                Ok(Ok((messages, consumers))) => {
                    flow_common::amqp::record_queue_depth(*kind, queue, messages, consumers);
                }
                Ok(Err(error)) => {
                    tracing::debug!(%error, %queue, "could not read the queue depth");
                }
                Err(_) => tracing::debug!(%queue, "timed out reading the queue depth"),
            }
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

/// The deliveries of a consumer's queues, handed out as batches of one queue each, the queues
/// taken in turn by deficit round robin over message bytes: each turn of a queue with messages
/// waiting adds a quantum (one batch's bytes) to its credit, and a batch takes messages from it
/// while the credit lasts (at least one). So queues with messages waiting get equal shares of
/// bytes (about equal shares of commands) whatever the size of their messages, and a queue that
/// has nothing waiting banks no credit. What the broker has sent is read into per-queue buffers
/// first, bounded by the prefetch window of each queue.
pub struct Turns {
    stream: futures::stream::SelectAll<futures::stream::Map<lapin::Consumer, Tagger>>,
    buffers: Vec<std::collections::VecDeque<Delivery>>,
    credits: Vec<i64>,
    next: usize,
    quantum: i64,
}

/// Tags each delivery of a consumer with the index of its queue.
type Tagger = Box<dyn FnMut(Tagged) -> (usize, Tagged) + Send>;

/// What a consumer yields.
type Tagged = lapin::Result<Delivery>;

impl Turns {
    /// Turns over `consumers`, a quantum of `batch_bytes` each.
    fn new(consumers: Vec<lapin::Consumer>, batch_bytes: usize) -> Self {
        let count = consumers.len();
        let stream = futures::stream::select_all(consumers.into_iter().enumerate().map(
            |(index, consumer)| {
                let tag: Tagger = Box::new(move |delivery| (index, delivery));
                consumer.map(tag)
            },
        ));
        Self {
            stream,
            buffers: (0..count).map(|_| Default::default()).collect(),
            credits: vec![0; count],
            next: 0,
            quantum: i64::try_from(batch_bytes)
                .unwrap_or(i64::MAX / 4)
                .clamp(1, i64::MAX / 4),
        }
    }

    /// The next batch: the index of its queue and at most `batch_size` deliveries of it (at most
    /// `batch_bytes` of bodies, and at least one). Waits for a delivery when none is buffered;
    /// `None` when the broker cancelled the consumers. Cancel-safe: what was read stays buffered.
    async fn next_batch(
        &mut self,
        batch_size: usize,
        batch_bytes: usize,
    ) -> lapin::Result<Option<(usize, Vec<Delivery>)>> {
        loop {
            match self.stream.next().now_or_never() {
                Some(Some((index, delivery))) => self.buffers[index].push_back(delivery?),
                Some(None) => return Ok(None),
                None => break,
            }
        }
        if self
            .buffers
            .iter()
            .all(std::collections::VecDeque::is_empty)
        {
            match self.stream.next().await {
                Some((index, delivery)) => self.buffers[index].push_back(delivery?),
                None => return Ok(None),
            }
        }
        let source = self.choose();
        let several = self.buffers.len() > 1;
        let buffer = &mut self.buffers[source];
        let mut batch = Vec::new();
        let mut bytes = 0;
        while let Some(delivery) = buffer.front() {
            let fits = batch.len() < batch_size
                && bytes < batch_bytes
                && (!several || self.credits[source] > 0);
            if !fits && !batch.is_empty() {
                break;
            }
            let size = delivery.data.len();
            bytes += size;
            self.credits[source] -= i64::try_from(size).unwrap_or(i64::MAX / 4);
            batch.extend(buffer.pop_front());
        }
        if buffer.is_empty() {
            // A queue that has nothing waiting banks neither credit nor debt.
            self.credits[source] = 0;
        }
        Ok(Some((source, batch)))
    }

    /// The queue whose turn it is: the next one, from where the last turn ended, with deliveries
    /// buffered and credit left after its quantum is added.
    fn choose(&mut self) -> usize {
        let count = self.buffers.len();
        loop {
            for step in 0..count {
                let index = (self.next + step) % count;
                if self.buffers[index].is_empty() {
                    self.credits[index] = 0;
                    continue;
                }
                self.credits[index] = (self.credits[index] + self.quantum).min(self.quantum);
                if self.credits[index] > 0 {
                    self.next = (index + 1) % count;
                    return index;
                }
            }
        }
    }
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
