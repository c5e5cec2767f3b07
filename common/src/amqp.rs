//! RabbitMQ: the topology (declared in one place, by every binary at start-up), connections, and a
//! publisher that only reports success once the broker has confirmed a persistent message.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use lapin::options::{
    BasicPublishOptions, BasicQosOptions, ConfirmSelectOptions, ExchangeDeclareOptions,
    QueueBindOptions, QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable, ShortString};
use lapin::{BasicProperties, Channel, Confirmation, Connection, ExchangeKind};
use tokio::sync::{Mutex, RwLock};

pub mod nodes;

pub use nodes::connect;

/// The lanes, their shards and an organization's shard live in the domain
/// ([`flow_domain::lane`]); the broker gives each its queues.
pub use flow_domain::lane::{BULK_SHARDS, Lane, bulk_shard};

/// The queues Flow consumes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QueueKind {
    /// Assign commands of the interactive lane, consumed by the assign-worker.
    Assign,
    /// Assign commands of the bulk lane, one queue per shard of organizations, consumed in turn
    /// by the assign-worker.
    BulkAssign(u16),
    /// Progress commands (module activity), consumed by the assign-worker.
    Progress,
    /// The single queue of the bulk lane's events before they were sharded: no longer bound
    /// (nothing new reaches it), still declared and consumed by the webhook-worker so that what an
    /// earlier version left in it is delivered (see docs/operations.md, upgrading).
    Webhooks,
    /// Lifecycle events of the bulk lane to deliver to webhook endpoints, one queue per shard of
    /// organizations (the shard of their assign queue), consumed in turn by the webhook-worker.
    BulkWebhooks(u16),
    /// Lifecycle events of the interactive lane, consumed by the webhook-worker beside the bulk
    /// ones.
    InteractiveWebhooks,
    /// Messages that exceeded the delivery limit or could not be decoded.
    DeadLetters,
}

impl QueueKind {
    /// Every queue.
    pub fn all() -> Vec<QueueKind> {
        let mut all = vec![QueueKind::Assign];
        all.extend((0..BULK_SHARDS).map(QueueKind::BulkAssign));
        all.extend([QueueKind::Progress, QueueKind::Webhooks]);
        all.extend(QueueKind::bulk_webhooks());
        all.extend([QueueKind::InteractiveWebhooks, QueueKind::DeadLetters]);
        all
    }

    /// The queues of the bulk lane's webhook events, one per shard.
    pub fn bulk_webhooks() -> Vec<QueueKind> {
        (0..BULK_SHARDS).map(QueueKind::BulkWebhooks).collect()
    }

    /// The bulk lane's webhook queue of an organization whose lane number is `bulk_lane`.
    pub fn webhooks_for(bulk_lane: i64) -> QueueKind {
        QueueKind::BulkWebhooks(bulk_shard(bulk_lane))
    }

    /// The queues of the bulk assign lane.
    pub fn bulk_assign() -> Vec<QueueKind> {
        (0..BULK_SHARDS).map(QueueKind::BulkAssign).collect()
    }

    /// The unprefixed name, also the routing key of command queues.
    pub fn suffix(self) -> String {
        match self {
            QueueKind::Assign => "assign".into(),
            QueueKind::BulkAssign(shard) => format!("assign.bulk.{shard}"),
            QueueKind::Progress => "progress".into(),
            QueueKind::Webhooks => "webhooks".into(),
            QueueKind::BulkWebhooks(shard) => format!("webhooks.bulk.{shard}"),
            QueueKind::InteractiveWebhooks => "webhooks.interactive".into(),
            QueueKind::DeadLetters => "dead-letters".into(),
        }
    }

    /// The lane the queue belongs to (none for the dead letters).
    pub fn lane(self) -> Option<Lane> {
        match self {
            QueueKind::Assign | QueueKind::Progress | QueueKind::InteractiveWebhooks => {
                Some(Lane::Interactive)
            }
            QueueKind::BulkAssign(_) | QueueKind::Webhooks | QueueKind::BulkWebhooks(_) => {
                Some(Lane::Bulk)
            }
            QueueKind::DeadLetters => None,
        }
    }

    /// Whether the queue carries assign commands.
    pub fn is_assign(self) -> bool {
        matches!(self, QueueKind::Assign | QueueKind::BulkAssign(_))
    }

    /// The assign queue of `lane` for an organization whose lane number is `bulk_lane`.
    pub fn assign_for(lane: Lane, bulk_lane: i64) -> QueueKind {
        match lane {
            Lane::Interactive => QueueKind::Assign,
            Lane::Bulk => QueueKind::BulkAssign(bulk_shard(bulk_lane)),
        }
    }
}

/// How many times `DELIVERY_LIMIT` RabbitMQ's own delivery limit is.
pub const BROKER_DELIVERY_LIMIT_FACTOR: u32 = 50;

/// Names of every exchange and queue under one prefix.
#[derive(Debug, Clone)]
pub struct Topology {
    prefix: String,
    delivery_limit: u32,
}

impl Topology {
    /// The topology under `prefix` (`flow` in production, unique per test).
    pub fn new(prefix: impl Into<String>, delivery_limit: u32) -> Self {
        Self {
            prefix: prefix.into(),
            delivery_limit,
        }
    }

    /// RabbitMQ's own delivery limit on every work queue: only a backstop. Workers dead-letter a
    /// message after `delivery_limit` starts that never finished (counted in Postgres); RabbitMQ
    /// also counts deliveries that were only prefetched when a connection dropped, so its limit is
    /// set far above, where only a message nothing could count (Postgres down for good) reaches it.
    pub fn broker_delivery_limit(&self) -> i32 {
        i32::try_from(
            self.delivery_limit
                .saturating_mul(BROKER_DELIVERY_LIMIT_FACTOR),
        )
        .unwrap_or(i32::MAX)
    }

    /// The name prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Direct exchange for commands; the routing key is the queue suffix.
    pub fn commands_exchange(&self) -> String {
        format!("{}.commands", self.prefix)
    }

    /// Topic exchange for lifecycle events of the bulk lane; the routing key is the event type
    /// (`flow.assigned`), so a consumer of its own binds it by type. The relay adds the webhook
    /// queue of the event's organization as a `BCC` routing key ([`QueueKind::BulkWebhooks`]'s
    /// suffix, `webhooks.bulk.N`, which no event type matches and which RabbitMQ strips before
    /// delivery): one publish reaches both.
    pub fn events_exchange(&self) -> String {
        format!("{}.events", self.prefix)
    }

    /// Topic exchange for lifecycle events of `lane` (the interactive lane's events have an
    /// exchange of their own, so their webhooks never queue behind a bulk flood).
    pub fn events_exchange_for(&self, lane: Lane) -> String {
        match lane {
            Lane::Bulk => self.events_exchange(),
            Lane::Interactive => format!("{}.events.interactive", self.prefix),
        }
    }

    /// Exchange receiving dead-lettered messages.
    pub fn dead_letter_exchange(&self) -> String {
        format!("{}.dlx", self.prefix)
    }

    /// Full name of a queue.
    pub fn queue(&self, kind: QueueKind) -> String {
        format!("{}.{}", self.prefix, kind.suffix())
    }

    /// Every queue this topology declares: the one list that code listing queues (depth gauges,
    /// clean-up, tests) reads.
    pub fn all_queues(&self) -> Vec<String> {
        QueueKind::all()
            .into_iter()
            .map(|kind| self.queue(kind))
            .collect()
    }

    /// The kind of the queue named `name`, if this topology declares it.
    pub fn kind_of(&self, name: &str) -> Option<QueueKind> {
        QueueKind::all()
            .into_iter()
            .find(|kind| self.queue(*kind) == name)
    }

    /// Declares every exchange, queue and binding. Idempotent; every binary calls it at start-up.
    pub async fn declare(&self, channel: &Channel) -> lapin::Result<()> {
        let durable_exchange = ExchangeDeclareOptions {
            durable: true,
            ..Default::default()
        };
        channel
            .exchange_declare(
                self.commands_exchange().into(),
                ExchangeKind::Direct,
                durable_exchange,
                FieldTable::default(),
            )
            .await?;
        channel
            .exchange_declare(
                self.events_exchange().into(),
                ExchangeKind::Topic,
                durable_exchange,
                FieldTable::default(),
            )
            .await?;
        channel
            .exchange_declare(
                self.events_exchange_for(Lane::Interactive).into(),
                ExchangeKind::Topic,
                durable_exchange,
                FieldTable::default(),
            )
            .await?;
        channel
            .exchange_declare(
                self.dead_letter_exchange().into(),
                ExchangeKind::Fanout,
                durable_exchange,
                FieldTable::default(),
            )
            .await?;
        for kind in QueueKind::all() {
            let name = self.queue(kind);
            let mut arguments = FieldTable::default();
            arguments.insert(
                "x-queue-type".into(),
                AMQPValue::LongString("quorum".into()),
            );
            if kind != QueueKind::DeadLetters {
                arguments.insert(
                    "x-dead-letter-exchange".into(),
                    AMQPValue::LongString(self.dead_letter_exchange().into()),
                );
                arguments.insert(
                    "x-delivery-limit".into(),
                    AMQPValue::LongInt(self.broker_delivery_limit()),
                );
            }
            channel
                .queue_declare(
                    name.clone().into(),
                    QueueDeclareOptions {
                        durable: true,
                        ..Default::default()
                    },
                    arguments,
                )
                .await?;
            if kind == QueueKind::Webhooks {
                // Bound to every event before the bulk lane's events were sharded; unbound now,
                // or it would get a second copy of every one (drained by the webhook-worker).
                channel
                    .queue_unbind(
                        name.into(),
                        self.events_exchange().into(),
                        "#".into(),
                        FieldTable::default(),
                    )
                    .await?;
                continue;
            }
            let (exchange, routing_key) = match kind {
                QueueKind::BulkWebhooks(_) => (self.events_exchange(), kind.suffix()),
                QueueKind::InteractiveWebhooks => {
                    (self.events_exchange_for(Lane::Interactive), "#".to_owned())
                }
                QueueKind::DeadLetters => (self.dead_letter_exchange(), String::new()),
                command => (self.commands_exchange(), command.suffix()),
            };
            channel
                .queue_bind(
                    name.into(),
                    exchange.into(),
                    routing_key.into(),
                    QueueBindOptions::default(),
                    FieldTable::default(),
                )
                .await?;
        }
        Ok(())
    }

    /// Deletes every queue and exchange of this topology (tests clean up with it).
    pub async fn delete(&self, channel: &Channel) -> lapin::Result<()> {
        for queue in self.all_queues() {
            channel
                .queue_delete(queue.into(), Default::default())
                .await?;
        }
        for exchange in [
            self.commands_exchange(),
            self.events_exchange(),
            self.events_exchange_for(Lane::Interactive),
            self.dead_letter_exchange(),
        ] {
            channel
                .exchange_delete(exchange.into(), Default::default())
                .await?;
        }
        Ok(())
    }
}

/// Deletes every queue and exchange of `topology` over a connection of its own (benchmarks and
/// tests clean up with it); failures are ignored. The channel is closed before the connection: a
/// channel merely dropped is closed by lapin in the background, and when that close comes after
/// the connection's, lapin logs a connection error ("invalid channel state: Closing").
pub async fn delete_topology(url: &str, role: &str, topology: &Topology) {
    let Ok(connection) = connect(url, role).await else {
        return;
    };
    if let Ok(channel) = connection.create_channel().await {
        drop(topology.delete(&channel).await);
        drop(channel.close(200, "topology deleted".into()).await);
    }
    drop(connection.close(200, "topology deleted".into()).await);
}

/// Opens a consumer channel with the given prefetch window.
pub async fn consumer_channel(connection: &Connection, prefetch: u16) -> lapin::Result<Channel> {
    let channel = connection.create_channel().await?;
    channel
        .basic_qos(prefetch, BasicQosOptions::default())
        .await?;
    Ok(channel)
}

/// A message to publish.
#[derive(Debug, Clone)]
pub struct Outgoing<'a> {
    /// Exchange name.
    pub exchange: &'a str,
    /// Routing key.
    pub routing_key: &'a str,
    /// JSON body.
    pub payload: &'a [u8],
    /// AMQP `message-id` (consumers dedupe on it).
    pub message_id: &'a str,
    /// AMQP `type`.
    pub kind: &'a str,
    /// The request that caused the message, carried for logs.
    pub request_id: Option<&'a str>,
    /// Further string headers.
    pub headers: &'a [(&'a str, &'a str)],
}

/// Why a publish did not succeed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum PublishError {
    /// The broker is unreachable or refused the message: the caller should retry later.
    #[error("message broker unavailable: {0}")]
    Unavailable(String),
    /// No confirm arrived in time: the message may or may not be stored.
    #[error("message broker did not confirm within {0:?}")]
    Timeout(Duration),
    /// The broker had no queue bound for the routing key.
    #[error("message was unroutable ({0})")]
    Unroutable(String),
}

/// Publishes persistent messages with publisher confirms over a few channels, reconnecting lazily
/// after a failure. Cheap to clone.
#[derive(Clone)]
pub struct Publisher {
    inner: Arc<PublisherInner>,
}

struct PublisherInner {
    url: String,
    role: String,
    topology: Topology,
    channel_count: usize,
    confirm_timeout: Duration,
    state: RwLock<Option<Arc<Live>>>,
    reconnect: Mutex<Option<Instant>>,
    next: AtomicUsize,
}

struct Live {
    // Kept so the connection lives as long as its channels.
    _connection: Connection,
    channels: Vec<Channel>,
    /// The broker node connected to (`host:port`).
    node: String,
}

/// The shortest pause between two reconnection attempts, so a broker outage costs one failed
/// connect per interval rather than one per request.
const RECONNECT_INTERVAL: Duration = Duration::from_millis(500);

impl Publisher {
    /// A publisher that connects on first use (or now, with [`Publisher::connect_now`]).
    pub fn new(
        url: impl Into<String>,
        role: impl Into<String>,
        topology: Topology,
        channel_count: usize,
        confirm_timeout: Duration,
    ) -> Self {
        Self {
            inner: Arc::new(PublisherInner {
                url: url.into(),
                role: role.into(),
                topology,
                channel_count: channel_count.max(1),
                confirm_timeout,
                state: RwLock::new(None),
                reconnect: Mutex::new(None),
                next: AtomicUsize::new(0),
            }),
        }
    }

    /// The topology this publisher declares.
    pub fn topology(&self) -> &Topology {
        &self.inner.topology
    }

    /// Connects (and declares the topology) now, so start-up fails loudly on bad settings.
    pub async fn connect_now(&self) -> Result<(), PublishError> {
        self.live().await.map(|_| ())
    }

    /// Publishes one persistent message and waits for the broker's confirm.
    pub async fn publish(&self, message: Outgoing<'_>) -> Result<(), PublishError> {
        self.publish_bcc(message, &[]).await
    }

    /// Publishes one persistent message routed by its routing key and also by each of `bcc`
    /// (RabbitMQ's sender-selected distribution: the `BCC` header, removed before delivery), and
    /// waits for the broker's confirm.
    pub async fn publish_bcc(
        &self,
        message: Outgoing<'_>,
        bcc: &[&str],
    ) -> Result<(), PublishError> {
        let live = self.live().await?;
        let index = self.inner.next.fetch_add(1, Ordering::Relaxed) % live.channels.len();
        let channel = &live.channels[index];
        let mut properties = BasicProperties::default()
            .with_delivery_mode(2)
            .with_content_type("application/json".into())
            .with_message_id(message.message_id.into())
            .with_type(message.kind.into())
            .with_app_id(self.inner.role.as_str().into())
            // Whole seconds since the epoch: consumers report their lag from it.
            .with_timestamp(unix_seconds());
        // The trace of the span publishing, unless the message names its own.
        let traceparent = if message
            .headers
            .iter()
            .any(|(name, _)| *name == crate::telemetry::TRACEPARENT)
        {
            None
        } else {
            crate::telemetry::current_traceparent()
        };
        if message.request_id.is_some()
            || !message.headers.is_empty()
            || traceparent.is_some()
            || !bcc.is_empty()
        {
            let mut headers = FieldTable::default();
            if !bcc.is_empty() {
                let keys: Vec<AMQPValue> = bcc
                    .iter()
                    .map(|key| AMQPValue::LongString((*key).into()))
                    .collect();
                headers.insert("BCC".into(), AMQPValue::FieldArray(keys.into()));
            }
            if let Some(traceparent) = traceparent {
                headers.insert(
                    crate::telemetry::TRACEPARENT.into(),
                    AMQPValue::LongString(traceparent.into()),
                );
            }
            if let Some(request_id) = message.request_id {
                headers.insert(
                    "x-request-id".into(),
                    AMQPValue::LongString(request_id.into()),
                );
            }
            for (name, value) in message.headers {
                headers.insert((*name).into(), AMQPValue::LongString((*value).into()));
            }
            properties = properties.with_headers(headers);
        }
        let started = Instant::now();
        let confirm = match channel
            .basic_publish(
                ShortString::from(message.exchange),
                ShortString::from(message.routing_key),
                BasicPublishOptions {
                    mandatory: true,
                    ..Default::default()
                },
                message.payload,
                properties,
            )
            .await
        {
            Ok(confirm) => confirm,
            Err(error) => {
                self.mark_broken(&live).await;
                return Err(PublishError::Unavailable(error.to_string()));
            }
        };
        let outcome = match tokio::time::timeout(self.inner.confirm_timeout, confirm).await {
            Err(_) => Err(PublishError::Timeout(self.inner.confirm_timeout)),
            Ok(Err(error)) => {
                self.mark_broken(&live).await;
                Err(PublishError::Unavailable(error.to_string()))
            }
            Ok(Ok(confirmation)) => match confirmation {
                Confirmation::Ack(None) => Ok(()),
                Confirmation::Ack(Some(returned)) => {
                    Err(PublishError::Unroutable(returned.reply_text.to_string()))
                }
                Confirmation::Nack(_) => Err(PublishError::Unavailable(
                    "broker nacked the message".into(),
                )),
                Confirmation::NotRequested => Err(PublishError::Unavailable(
                    "publisher confirms are off".into(),
                )),
            },
        };
        metrics_hook(started.elapsed(), outcome.is_ok());
        outcome
    }

    async fn current(&self) -> Option<Arc<Live>> {
        self.inner
            .state
            .read()
            .await
            .as_ref()
            .filter(|live| live._connection.status().connected())
            .cloned()
    }

    async fn live(&self) -> Result<Arc<Live>, PublishError> {
        if let Some(live) = self.current().await {
            return Ok(live);
        }
        let mut last_attempt = self.inner.reconnect.lock().await;
        // Another task may have reconnected while this one waited for the lock.
        if let Some(live) = self.current().await {
            return Ok(live);
        }
        if let Some(at) = *last_attempt
            && at.elapsed() < RECONNECT_INTERVAL
        {
            return Err(PublishError::Unavailable(
                "reconnecting to the broker".into(),
            ));
        }
        *last_attempt = Some(Instant::now());
        let live = Arc::new(self.open().await.map_err(|error| {
            tracing::warn!(%error, role = %self.inner.role, "cannot connect to RabbitMQ");
            PublishError::Unavailable(error.to_string())
        })?);
        tracing::debug!(role = %self.inner.role, channels = live.channels.len(), "publisher channels open");
        *self.inner.state.write().await = Some(live.clone());
        Ok(live)
    }

    async fn open(&self) -> lapin::Result<Live> {
        let (connection, node) =
            nodes::connect_naming_node(&self.inner.url, &self.inner.role).await?;
        // Bounded: a call on a connection whose node dies at that moment can wait forever, and
        // every publish waits for this reconnect.
        let channels = nodes::bounded(async {
            let setup = connection.create_channel().await?;
            self.inner.topology.declare(&setup).await?;
            drop(setup.close(200, "topology declared".into()).await);
            let mut channels = Vec::with_capacity(self.inner.channel_count);
            for _ in 0..self.inner.channel_count {
                let channel = connection.create_channel().await?;
                channel
                    .confirm_select(ConfirmSelectOptions::default())
                    .await?;
                channels.push(channel);
            }
            Ok(channels)
        })
        .await?;
        Ok(Live {
            _connection: connection,
            channels,
            node,
        })
    }

    /// The broker node (`host:port`) this publisher is connected to, if it is.
    pub async fn node(&self) -> Option<String> {
        self.current().await.map(|live| live.node.clone())
    }

    async fn mark_broken(&self, broken: &Arc<Live>) {
        let mut state = self.inner.state.write().await;
        if state.as_ref().is_some_and(|live| Arc::ptr_eq(live, broken)) {
            tracing::warn!(role = %self.inner.role, node = %broken.node, "RabbitMQ connection lost; will reconnect to the next node");
            *state = None;
        }
    }

    /// Closes the connection (graceful shutdown).
    pub async fn close(&self) {
        if let Some(live) = self.inner.state.write().await.take() {
            drop(live._connection.close(200, "shutting down".into()).await);
        }
    }
}

fn unix_seconds() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_secs())
}

fn metrics_hook(elapsed: Duration, ok: bool) {
    metrics::histogram!("flow_publish_confirm_seconds", "outcome" => if ok { "ok" } else { "error" })
        .record(elapsed.as_secs_f64());
}

/// Sets the depth gauges of one queue: `flow_queue_messages` (ready messages) and
/// `flow_queue_consumers`, labelled with the queue and its lane (`interactive`, `bulk`, or `none`
/// for the dead letters), so a dashboard shows how deep each lane is.
pub fn record_queue_depth(kind: QueueKind, queue: &str, messages: u32, consumers: u32) {
    let lane = kind.lane().map_or("none", Lane::as_str);
    metrics::gauge!("flow_queue_messages", "queue" => queue.to_owned(), "lane" => lane)
        .set(f64::from(messages));
    metrics::gauge!("flow_queue_consumers", "queue" => queue.to_owned(), "lane" => lane)
        .set(f64::from(consumers));
}

/// Depth and consumer count of every queue of `topology`, by passive declares on one channel.
pub async fn queue_depths(
    connection: &Connection,
    topology: &Topology,
) -> lapin::Result<Vec<(QueueKind, u32, u32)>> {
    let kinds = QueueKind::all();
    let mut depths = Vec::with_capacity(kinds.len());
    for kind in kinds {
        // A passive declare of a missing queue closes the channel: one channel per queue.
        let channel = connection.create_channel().await?;
        let declared = channel
            .queue_declare(
                topology.queue(kind).into(),
                QueueDeclareOptions {
                    passive: true,
                    ..Default::default()
                },
                FieldTable::default(),
            )
            .await;
        if let Ok(queue) = declared {
            depths.push((kind, queue.message_count(), queue.consumer_count()));
            drop(channel.close(200, "queue depth read".into()).await);
        }
    }
    Ok(depths)
}

/// Where a [`BatchPublisher`] sends its batches.
#[derive(Debug, Clone)]
pub struct BatchTarget {
    pub exchange: String,
    /// Routing key.
    pub routing_key: String,
    /// AMQP `type` of a message holding one item.
    pub single_kind: &'static str,
    /// AMQP `type` of a message holding a batch.
    pub batch_kind: &'static str,
    /// Builds the payload of a message of several items from their encodings: the queue's
    /// codec, in the domain crate (`AssignBatch::envelope` for the assign queues).
    pub envelope: fn(&[&[u8]]) -> Vec<u8>,
}

impl BatchTarget {
    /// The assign commands, on `topology`'s commands exchange (the default routing key is the
    /// interactive assign queue; a bulk caller names its organization's bulk queue).
    pub fn assign_commands(topology: &Topology) -> Self {
        Self {
            exchange: topology.commands_exchange(),
            routing_key: QueueKind::Assign.suffix(),
            single_kind: flow_domain::messages::ASSIGN_KIND,
            batch_kind: flow_domain::messages::ASSIGN_BATCH_KIND,
            envelope: flow_domain::messages::AssignBatch::envelope,
        }
    }
}

/// How a [`BatchPublisher`] forms its batches.
#[derive(Debug, Clone, Copy)]
pub struct BatchLimits {
    /// Most items in one message.
    pub max_batch: usize,
    /// Batches awaiting their confirm at once.
    pub in_flight: usize,
    /// Longest a batch waits to fill while another is in flight.
    pub fill_wait: Duration,
}

type BatchReply = tokio::sync::oneshot::Sender<Result<(), Arc<PublishError>>>;

/// One item for a [`BatchPublisher`]: its JSON and what its message says of it.
#[derive(Debug)]
pub struct Submission {
    /// The item, serialized.
    pub json: Vec<u8>,
    /// AMQP `message-id` when the item goes out alone.
    pub message_id: String,
    /// The request that submitted it, carried for logs when it goes out alone.
    pub request_id: Option<String>,
    /// The trace of the request that submitted it (the batch is published from another task).
    pub traceparent: Option<String>,
}

struct BatchItem {
    submission: Submission,
    reply: BatchReply,
}

/// Publishes many small messages as few broker messages: concurrent submissions are gathered into
/// one message, built by the target's envelope (a lone submission goes out as itself), and
/// every submitter is answered when that message is confirmed. At most `in_flight` batches await
/// confirms at once; while they do, new submissions queue up and form the next batch, so batches
/// grow with the load and add no delay when it is light. A batch that would go out while another
/// is still in flight first waits up to `fill_wait` for a quarter of `max_batch` items: the
/// broker's work goes with the number of messages, and without the wait the second slot sent
/// small batches as soon as the first one left. Alone in flight, a batch never waits. A caller
/// with many items at once (a bulk request) fills its own messages: [`BatchPublisher::publish_all`]
/// sends them straight away, beside the batches. Cheap to clone.
#[derive(Clone)]
pub struct BatchPublisher {
    queue: tokio::sync::mpsc::Sender<BatchItem>,
    publisher: Publisher,
    target: Arc<BatchTarget>,
    max_batch: usize,
}

impl BatchPublisher {
    /// Starts the batcher over `publisher`.
    pub fn start(
        publisher: Publisher,
        target: BatchTarget,
        limits: BatchLimits,
        shutdown: tokio_util::sync::CancellationToken,
    ) -> Self {
        let limits = BatchLimits {
            max_batch: limits.max_batch.max(1),
            in_flight: limits.in_flight.max(1),
            fill_wait: limits.fill_wait,
        };
        let target = Arc::new(target);
        let (queue, receiver) = tokio::sync::mpsc::channel(limits.max_batch * limits.in_flight * 4);
        tokio::spawn(run_batches(
            publisher.clone(),
            target.clone(),
            receiver,
            limits,
            shutdown,
        ));
        Self {
            queue,
            publisher,
            target,
            max_batch: limits.max_batch,
        }
    }

    /// The publisher it sends its messages with (for a message of another kind beside them).
    pub fn publisher(&self) -> &Publisher {
        &self.publisher
    }

    /// Publishes one item (its trace is the caller's span, which the item names itself when it
    /// goes out in a batch) and waits for its batch's confirm.
    pub async fn publish(&self, submission: Submission) -> Result<(), PublishError> {
        let (reply, answer) = tokio::sync::oneshot::channel();
        self.queue
            .send(BatchItem { submission, reply })
            .await
            .map_err(|_| PublishError::Unavailable("shutting down".into()))?;
        match answer.await {
            Ok(outcome) => outcome.map_err(Arc::unwrap_or_clone),
            Err(_) => Err(PublishError::Unavailable("shutting down".into())),
        }
    }

    /// Publishes many items of one caller as messages of at most `max_batch` items, all at once
    /// (not queued behind the batches of single items, whose in-flight limit is there to make
    /// messages larger: these are full already), and waits for every confirm. The outcome of
    /// each item, in order: the outcome of the message it went in. `routing_key` overrides the
    /// target's (a bulk request goes to its organization's bulk queue).
    pub async fn publish_all(
        &self,
        routing_key: Option<&str>,
        submissions: &[Submission],
    ) -> Vec<Result<(), PublishError>> {
        let target = match routing_key {
            Some(routing_key) => Arc::new(BatchTarget {
                routing_key: routing_key.to_owned(),
                ..(*self.target).clone()
            }),
            None => self.target.clone(),
        };
        let target = &target;
        let messages = submissions.chunks(self.max_batch).map(|chunk| async move {
            let outcome = send_batch(&self.publisher, target, chunk).await;
            std::iter::repeat_n(outcome, chunk.len())
        });
        futures::future::join_all(messages)
            .await
            .into_iter()
            .flatten()
            .collect()
    }
}

async fn run_batches(
    publisher: Publisher,
    target: Arc<BatchTarget>,
    mut receiver: tokio::sync::mpsc::Receiver<BatchItem>,
    limits: BatchLimits,
    shutdown: tokio_util::sync::CancellationToken,
) {
    let BatchLimits {
        max_batch,
        in_flight,
        fill_wait,
    } = limits;
    let permits = Arc::new(tokio::sync::Semaphore::new(in_flight));
    let mut items = Vec::with_capacity(max_batch);
    let fill = (max_batch / 4).max(1);
    loop {
        let Ok(permit) = permits.clone().acquire_owned().await else {
            return;
        };
        let received = tokio::select! {
            // Keep draining on shutdown: requests in flight still get their answer.
            received = receiver.recv_many(&mut items, max_batch) => received,
            () = shutdown.cancelled(), if receiver.is_empty() && items.is_empty() => 0,
        };
        if received == 0 {
            return;
        }
        // Another batch is awaiting its confirm: this one may fill a little before it goes.
        if items.len() < fill && permits.available_permits() + 1 < in_flight {
            let deadline = tokio::time::Instant::now() + fill_wait;
            while items.len() < fill {
                let room = max_batch - items.len();
                tokio::select! {
                    received = receiver.recv_many(&mut items, room) => {
                        if received == 0 {
                            break;
                        }
                    }
                    () = tokio::time::sleep_until(deadline) => break,
                }
            }
        }
        let (batch, replies): (Vec<Submission>, Vec<BatchReply>) = items
            .drain(..)
            .map(|item| (item.submission, item.reply))
            .unzip();
        let publisher = publisher.clone();
        let target = target.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let outcome = send_batch(&publisher, &target, &batch)
                .await
                .map_err(Arc::new);
            for reply in replies {
                let _ = reply.send(outcome.clone());
            }
        });
    }
}

/// Publishes `batch` as one message (an item alone as itself) and waits for its confirm.
async fn send_batch(
    publisher: &Publisher,
    target: &BatchTarget,
    batch: &[Submission],
) -> Result<(), PublishError> {
    metrics::histogram!("flow_publish_batch_items").record(batch.len() as f64);
    // A message carries one trace: a batch carries its first traced command's.
    let traceparent: Vec<(&str, &str)> = batch
        .iter()
        .find_map(|item| item.traceparent.as_deref())
        .map(|traceparent| (crate::telemetry::TRACEPARENT, traceparent))
        .into_iter()
        .collect();
    if let [item] = batch {
        return publisher
            .publish(Outgoing {
                exchange: &target.exchange,
                routing_key: &target.routing_key,
                payload: &item.json,
                message_id: &item.message_id,
                kind: target.single_kind,
                request_id: item.request_id.as_deref(),
                headers: &traceparent,
            })
            .await;
    }
    let items: Vec<&[u8]> = batch.iter().map(|item| item.json.as_slice()).collect();
    let payload = (target.envelope)(&items);
    let message_id = format!("batch-{}", uuid::Uuid::now_v7().simple());
    publisher
        .publish(Outgoing {
            exchange: &target.exchange,
            routing_key: &target.routing_key,
            payload: &payload,
            message_id: &message_id,
            kind: target.batch_kind,
            request_id: None,
            headers: &traceparent,
        })
        .await
}

/// Header naming the queue of a message a worker dead-lettered itself (RabbitMQ reserves the
/// `x-death` family for messages it dead-letters).
pub const ORIGIN_QUEUE_HEADER: &str = "flow-origin-queue";

/// Header with the reason a worker dead-lettered a message.
pub const DEAD_LETTER_REASON_HEADER: &str = "flow-dead-letter-reason";

/// The queue a dead-lettered message came from: RabbitMQ's `x-first-death-queue`, or the
/// [`ORIGIN_QUEUE_HEADER`] of a message a worker dead-lettered itself.
pub fn dead_letter_origin(properties: &BasicProperties) -> Option<String> {
    let headers = properties.headers().as_ref()?;
    ["x-first-death-queue", ORIGIN_QUEUE_HEADER]
        .iter()
        .find_map(|name| match headers.inner().get(*name)? {
            AMQPValue::LongString(text) => Some(text.to_string()),
            AMQPValue::ShortString(text) => Some(text.to_string()),
            _ => None,
        })
}
