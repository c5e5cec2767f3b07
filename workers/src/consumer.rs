//! The consume loop every queue worker shares: connect (retrying with backoff), declare the
//! topology, consume with a prefetch window, hand deliveries to a handler in batches with a bounded
//! number of batches in flight, and on shutdown stop consuming, finish in-flight batches, close.
//! Handlers ack only after their work is committed, so a crash loses nothing: unacked deliveries
//! go back to the queue.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use backon::{BackoffBuilder, ExponentialBuilder};
use flow_common::amqp::{self, QueueKind, Topology};
use flow_common::config::CoreConfig;
use futures::{FutureExt, StreamExt};
use lapin::message::Delivery;
use lapin::options::{
    BasicAckOptions, BasicCancelOptions, BasicConsumeOptions, BasicNackOptions, BasicRejectOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// How a worker consumes its queue.
#[derive(Debug, Clone)]
pub struct ConsumerSettings {
    /// Role name, for logs and the broker's connection list.
    pub role: &'static str,
    /// Queue consumed.
    pub queue: QueueKind,
    /// Unacknowledged deliveries the broker may hand over at once.
    pub prefetch: u16,
    /// Largest batch handed to the handler.
    pub batch_size: usize,
    /// Batches processed at the same time.
    pub concurrency: usize,
}

/// Processes a batch of deliveries; must ack, reject or nack each one.
pub trait BatchHandler: Send + Sync + 'static {
    /// Handles `deliveries`. An error means the connection is unusable: the loop reconnects
    /// (unacked deliveries return to the queue).
    fn handle(
        &self,
        deliveries: Vec<Delivery>,
        shutdown: CancellationToken,
    ) -> impl Future<Output = anyhow::Result<()>> + Send;
}

/// Consumes until `shutdown`, reconnecting with backoff when the broker connection fails.
pub async fn run<H: BatchHandler>(
    core: &CoreConfig,
    settings: ConsumerSettings,
    handler: Arc<H>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let topology = Topology::new(&core.queue_prefix, core.delivery_limit);
    let mut backoff = reconnect_backoff();
    while !shutdown.is_cancelled() {
        match consume(core, &topology, &settings, handler.clone(), &shutdown).await {
            Ok(()) => break,
            Err(error) => {
                let delay = backoff.next().unwrap_or(Duration::from_secs(10));
                tracing::warn!(
                    role = settings.role,
                    error = format!("{error:#}"),
                    ?delay,
                    "consumer stopped; reconnecting"
                );
                tokio::select! {
                    () = shutdown.cancelled() => break,
                    () = tokio::time::sleep(delay) => {}
                }
            }
        }
    }
    tracing::info!(role = settings.role, "consumer stopped");
    Ok(())
}

fn reconnect_backoff() -> impl Iterator<Item = Duration> {
    ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(200))
        .with_max_delay(Duration::from_secs(10))
        .with_jitter()
        .without_max_times()
        .build()
}

async fn consume<H: BatchHandler>(
    core: &CoreConfig,
    topology: &Topology,
    settings: &ConsumerSettings,
    handler: Arc<H>,
    shutdown: &CancellationToken,
) -> anyhow::Result<()> {
    let connection = amqp::connect(&core.amqp_url, settings.role)
        .await
        .context("connecting to RabbitMQ")?;
    let setup = connection.create_channel().await?;
    topology
        .declare(&setup)
        .await
        .context("declaring the topology")?;
    drop(setup.close(200, "topology declared".into()).await);
    let channel = amqp::consumer_channel(&connection, settings.prefetch).await?;
    let queue = topology.queue(settings.queue);
    let mut consumer = channel
        .basic_consume(
            queue.clone().into(),
            format!("{}-{}", settings.role, uuid::Uuid::now_v7().simple()).into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .with_context(|| format!("consuming {queue}"))?;
    tracing::info!(role = settings.role, %queue, prefetch = settings.prefetch, "consuming");
    let permits = Arc::new(Semaphore::new(settings.concurrency.max(1)));
    let mut in_flight = JoinSet::new();
    let outcome: anyhow::Result<()> = 'consume: loop {
        // Take a batch slot first, so deliveries accumulate while every slot is busy.
        let permit = tokio::select! {
            () = shutdown.cancelled() => break Ok(()),
            permit = permits.clone().acquire_owned() => permit?,
        };
        let first = tokio::select! {
            () = shutdown.cancelled() => break Ok(()),
            next = consumer.next() => next,
        };
        let first = match first {
            Some(Ok(delivery)) => delivery,
            Some(Err(error)) => break Err(anyhow::Error::new(error).context("consumer failed")),
            None => break Err(anyhow::anyhow!("consumer cancelled by the broker")),
        };
        let mut batch = vec![first];
        while batch.len() < settings.batch_size {
            match consumer.next().now_or_never() {
                Some(Some(Ok(delivery))) => batch.push(delivery),
                _ => break,
            }
        }
        let handler = handler.clone();
        let shutdown = shutdown.clone();
        in_flight.spawn(async move {
            let _permit = permit;
            handler.handle(batch, shutdown).await
        });
        while let Some(done) = in_flight.try_join_next() {
            if let Err(error) = flatten(done) {
                break 'consume Err(error);
            }
        }
    };
    // Stop receiving; what was prefetched but not handed out returns to the queue on close.
    drop(
        channel
            .basic_cancel(consumer.tag(), BasicCancelOptions::default())
            .await,
    );
    let mut failure = outcome.err();
    while let Some(done) = in_flight.join_next().await {
        if let Err(error) = flatten(done) {
            failure.get_or_insert(error);
        }
    }
    drop(channel.close(200, "worker stopping".into()).await);
    drop(connection.close(200, "worker stopping".into()).await);
    match failure {
        Some(error) => Err(error),
        None => Ok(()),
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

/// Sends a delivery straight to the dead-letter queue (it can never succeed), logging why.
pub async fn dead_letter(role: &str, delivery: &Delivery, reason: &str) -> lapin::Result<()> {
    tracing::error!(
        role,
        message_id = ?delivery.properties.message_id(),
        delivery_count = delivery_count(delivery),
        reason,
        "message sent to the dead-letter queue"
    );
    metrics::counter!("flow_worker_messages_total", "worker" => role.to_owned(), "outcome" => "dead_lettered")
        .increment(1);
    delivery
        .reject(BasicRejectOptions { requeue: false })
        .await
        .map(|_| ())
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

/// Runs `attempt` until it succeeds, fails in a way `is_transient` says no retry can fix, or
/// `shutdown` comes; waits with jittered exponential backoff in between (Postgres restarting,
/// deadlocks between workers). `what` names the work in the logs.
pub async fn retry_transient<T, E, Fut>(
    what: &str,
    shutdown: &CancellationToken,
    is_transient: impl Fn(&E) -> bool,
    mut attempt: impl FnMut() -> Fut,
) -> Result<T, E>
where
    E: std::fmt::Display,
    Fut: Future<Output = Result<T, E>>,
{
    let mut delays = ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(20))
        .with_max_delay(Duration::from_secs(5))
        .with_jitter()
        .without_max_times()
        .build();
    loop {
        let error = match attempt().await {
            Ok(value) => return Ok(value),
            Err(error) => error,
        };
        if !is_transient(&error) || shutdown.is_cancelled() {
            return Err(error);
        }
        let delay = delays.next().unwrap_or(Duration::from_secs(5));
        tracing::warn!(%error, ?delay, what, "transient database error; retrying");
        tokio::select! {
            () = shutdown.cancelled() => return Err(error),
            () = tokio::time::sleep(delay) => {}
        }
    }
}
