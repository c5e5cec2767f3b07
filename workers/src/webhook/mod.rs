//! The webhook-worker: delivers lifecycle events to customers' endpoints, signed (Standard
//! Webhooks v1), retried on a durable schedule, never lost.
//!
//! 1. It consumes `{prefix}.webhooks.bulk.0..7` (the bulk lane's events, one queue per shard of
//!    organizations, taken in turn by deficit round robin like the assign-worker's bulk queues,
//!    plus `{prefix}.webhooks`, the single queue of earlier versions, drained) and
//!    `{prefix}.webhooks.interactive` (the interactive lane's, in a consume loop of its own so a
//!    bulk flood never delays them), and fans each event out to the enabled endpoints of its
//!    organization that subscribe to its type that have no delivery of it yet (a redelivered or
//!    republished event is not sent again). The interactive lane writes every delivery first
//!    (claimed by this worker) and the dispatcher attempts it (step 2's last sentence); a batch
//!    of the bulk lane waits at most `WEBHOOK_INLINE_WAIT` (100 ms) for an endpoint, once: a slow
//!    one then costs only its own request slots.
//! 2. With `WEBHOOK_INLINE_WAIT` above zero (the default), on the bulk lane, to an endpoint that answers
//!    promptly the first attempt is made at once, before anything is
//!    written (the event is still unacked in the broker, so a crash loses nothing: the event comes
//!    back and is sent again, with the same `webhook-id`). The batch then writes each delivery
//!    once, in one transaction: with its outcome when the attempt answered within
//!    `WEBHOOK_INLINE_WAIT`, else claimed by this worker (a lease) while the attempt goes on; and
//!    acks after commit. A delivered event thus costs one delivery row and one attempt row.
//!    Deliveries to endpoints that are failing, slow or busy are written claimed first and handed
//!    to the dispatcher, which attempts them a bounded number per endpoint and renews the leases
//!    of those it holds until they are attempted.
//! 3. A recorder writes each attempt and the delivery's next step: done, retry at a time from the
//!    schedule, or failed; a 410, or days of failures, disable the endpoint. Every write is fenced
//!    by the claim's token, so a worker that lost its claim changes nothing.
//! 4. A poller claims retries whose time has come, deliveries whose worker died (expired lease),
//!    test pings and manual retries (woken by `NOTIFY`).

pub mod dispatch;
pub mod sender;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use flow_app::webhooks::dispatch as deliveries;
use flow_common::amqp::{BULK_SHARDS, Lane, QueueKind};
use flow_common::config::CoreConfig;
use flow_common::db::webhooks::fan_out::{ClaimedDelivery, IncomingEvent, NewDelivery, Start};
use flow_common::db::{self as database};
use flow_common::runtime::{Wakeup, retry_transient};
use flow_common::telemetry;
use flow_common::webhook::address::AddressPolicy;
use flow_common::webhook::vault::SecretVault;
use flow_domain::duration::parse_duration;
use flow_domain::events::codec::decode_event_message;
use flow_domain::events::{EVENT_KIND, ORG_HEADER};
use flow_domain::ids::{DeliveryId, EventId, WebhookEndpointId};
use flow_domain::webhook::retry::RetrySchedule;
use lapin::message::Delivery;
use lapin::types::AMQPValue;
use sqlx::PgPool;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::consumer::{self, BatchContext, BatchHandler, ConsumerSettings, ack_all, nack_all};
use crate::runtime::{Runtime, role};
use dispatch::{Dispatcher, Inline, Limits, Settled};
use sender::Sender;

const ROLE: &str = "webhook-worker";

/// Settings of the webhook-worker.
#[derive(Debug, Clone, clap::Args)]
pub struct WebhookWorkerConfig {
    /// Database, broker and queue settings.
    #[command(flatten)]
    pub core: CoreConfig,

    /// Which endpoint addresses may be connected to.
    #[command(flatten)]
    pub policy: AddressPolicy,

    /// Encryption of endpoint secrets at rest.
    #[command(flatten)]
    pub secrets: SecretVault,

    /// Delays before each attempt, comma-separated (units ms, s, m, h, d).
    #[arg(
        long,
        env = "WEBHOOK_RETRY_SCHEDULE",
        default_value = "0s,5s,5m,30m,2h,5h,10h,10h"
    )]
    pub retry_schedule: RetrySchedule,

    /// Longest wait a `Retry-After` header can impose on the next attempt.
    #[arg(long, env = "WEBHOOK_RETRY_AFTER_MAX", default_value = "10h", value_parser = parse_duration)]
    pub retry_after_max: Duration,

    /// An endpoint failing for this long without a success is disabled.
    #[arg(long, env = "WEBHOOK_DISABLE_AFTER", default_value = "5d", value_parser = parse_duration)]
    pub disable_after: Duration,

    /// Connect timeout of an attempt.
    #[arg(long, env = "WEBHOOK_CONNECT_TIMEOUT", default_value = "5s", value_parser = parse_duration)]
    pub connect_timeout: Duration,

    /// Total timeout of an attempt.
    #[arg(long, env = "WEBHOOK_TIMEOUT", default_value = "15s", value_parser = parse_duration)]
    pub timeout: Duration,

    /// Requests in flight in all.
    #[arg(long, env = "WEBHOOK_CONCURRENCY", default_value_t = 512)]
    pub concurrency: usize,

    /// Requests in flight to one endpoint.
    #[arg(long, env = "WEBHOOK_ENDPOINT_CONCURRENCY", default_value_t = 16)]
    pub endpoint_concurrency: usize,

    /// Deliveries of one answering endpoint held in memory; more wait in Postgres.
    #[arg(long, env = "WEBHOOK_ENDPOINT_QUEUE", default_value_t = 2_048)]
    pub endpoint_queue: usize,

    /// Deliveries held in memory for an endpoint whose last attempt failed (it may hang for the
    /// whole timeout); more wait in Postgres.
    #[arg(long, env = "WEBHOOK_FAILING_ENDPOINT_QUEUE", default_value_t = 64)]
    pub failing_endpoint_queue: usize,

    /// How long a claimed delivery stays with this worker before another may take it; renewed
    /// while the delivery waits in memory. At least twice the attempt timeout. It is also how
    /// long the deliveries of a worker that crashed wait before another worker sends them.
    #[arg(long, env = "WEBHOOK_LEASE", default_value = "1m", value_parser = parse_duration)]
    pub lease: Duration,

    /// How long a batch of bulk-lane events waits for first attempts made before their
    /// deliveries are written (the delivery is then written once, with its outcome, instead of
    /// written claimed and updated by the recorder); an attempt that takes longer goes on, and
    /// its endpoint's next first attempts are made after the delivery is written. The default
    /// `100ms` bounds what a newly slow endpoint adds to the other events of the first batches
    /// that reach it (the budget is 0.2 s), while an endpoint answering within it costs
    /// a third of the database time per delivery (docs/benchmarks.md). `0s` writes every
    /// delivery before its first attempt, as the interactive lane always does.
    #[arg(long, env = "WEBHOOK_INLINE_WAIT", default_value = "100ms", value_parser = parse_duration)]
    pub inline_wait: Duration,

    /// Longest wait between two looks for due retries.
    #[arg(long, env = "WEBHOOK_POLL_INTERVAL", default_value = "1s", value_parser = parse_duration)]
    pub poll_interval: Duration,

    /// Unacknowledged event messages the broker may hand over at once, per lane: the interactive
    /// queue's window, and the bulk lane's shared among its shards (see [`bulk_prefetch`]). A
    /// message carries up to `MAX_EVENTS_PER_MESSAGE` (32) events, so this bounds what a worker
    /// holds at about 8,192 events a lane by default: a backlog waits in the broker, not in the
    /// worker. With `WEBHOOK_INLINE_WAIT` above zero it must also cover the messages that arrive
    /// while a batch waits for its inline first attempts.
    #[arg(long, env = "WEBHOOK_PREFETCH", default_value_t = 256)]
    pub prefetch: u16,

    /// Largest number of events fanned out in one transaction.
    #[arg(long, env = "WEBHOOK_BATCH_SIZE", default_value_t = 250)]
    pub batch_size: usize,

    /// What this role's readiness depends on (filled in by `run`, served by the ops endpoints).
    #[arg(skip)]
    pub health: flow_common::ops::Health,
}

role! {
    settings: WebhookWorkerConfig,
    name: ROLE,
    about: "Flow webhook-worker",
    description: "The webhook-worker (signed deliveries with retries)",
    ops_address: "127.0.0.1:9105",
    work: work,
    share: demo_allowances,
}

/// Only the demo (`flowctl up --demo`) may store endpoint secrets in plain text, when no key is
/// set, and deliver to its local receiver (plain http to a loopback address, which the address
/// policy refuses otherwise); the API of the same process gets the same allowances.
fn demo_allowances(config: &mut WebhookWorkerConfig, shared: &crate::runtime::Shared) {
    config.secrets.plaintext_allowed = shared.demo;
    if shared.demo {
        config.policy.allow_private = true;
        config.policy.allow_http = true;
    }
}

/// The prefetch window of each queue of the bulk lane: `WEBHOOK_PREFETCH` shared among the
/// shards, so the lane holds about as many events as the interactive lane when every shard is
/// busy (a batch never waits for an endpoint, so a small window does not slow the intake).
pub fn bulk_prefetch(prefetch: u16) -> u16 {
    (prefetch / BULK_SHARDS).max(1)
}

/// Delivers until shutdown, then finishes the attempts under way and records them.
async fn work(config: WebhookWorkerConfig, runtime: Runtime) -> anyhow::Result<()> {
    // A lease renewed every quarter of its length leaves three quarters of it for an attempt.
    anyhow::ensure!(
        config.lease >= config.timeout.saturating_mul(2),
        "WEBHOOK_LEASE ({:?}) must be at least twice WEBHOOK_TIMEOUT ({:?})",
        config.lease,
        config.timeout
    );
    config
        .secrets
        .check()
        .context("checking WEBHOOK_SECRET_KEY")?;
    let sender = Sender::new(
        config.policy,
        config.secrets.clone(),
        config.retry_schedule.clone(),
        config.connect_timeout,
        config.timeout,
        config.retry_after_max,
    )?;
    let (outcomes, recorded) = tokio::sync::mpsc::unbounded_channel();
    let unrecorded = Arc::new(dispatch::Unrecorded::default());
    let dispatcher = Dispatcher::new(
        sender,
        Limits {
            concurrency: config.concurrency,
            endpoint_concurrency: config.endpoint_concurrency,
            endpoint_queue: config.endpoint_queue,
            failing_endpoint_queue: config.failing_endpoint_queue,
            lease: config.lease,
            attempt_timeout: config.timeout,
            inline_wait: config.inline_wait.min(config.timeout),
        },
        outcomes,
        unrecorded.clone(),
    );
    let pool = &runtime.pool;
    // The renewer and the recorder outlive the shutdown: they serve the attempts still under
    // way, and stop after the dispatcher has finished them.
    let renewing = CancellationToken::new();
    let renewer = runtime.spawn("webhook lease renewer", |_| {
        dispatcher
            .clone()
            .renew_leases(pool.clone(), renewing.clone())
    });
    let recorder = runtime.spawn("webhook outcome recorder", |_| {
        dispatch::record_outcomes(pool.clone(), recorded, unrecorded, config.disable_after)
    });
    runtime.gauge("webhook deliveries due", crate::gauges::webhook_deliveries);
    let poller_liveness = runtime.liveness(
        "poller",
        Some(config.poll_interval.saturating_mul(2) + Duration::from_secs(120)),
    );
    let poller = runtime.spawn("webhook poller", |stop| {
        poll(
            poller_liveness,
            runtime.wakeup(database::WEBHOOK_CHANNEL),
            pool.clone(),
            dispatcher.clone(),
            config.clone(),
            stop,
        )
    });
    // The bulk lane's events come in one queue per shard of organizations, taken in turn (as
    // the assign-worker takes its bulk queues), so one organization's flood waits behind nobody
    // else's events and nobody else's wait behind it; plus the queue of earlier versions, drained.
    let mut bulk_queues = QueueKind::bulk_webhooks();
    bulk_queues.push(QueueKind::Webhooks);
    let settings = ConsumerSettings {
        role: ROLE,
        queues: bulk_queues,
        prefetch: bulk_prefetch(config.prefetch),
        batch_size: config.batch_size.max(1),
        batch_bytes: usize::MAX,
        // A batch may wait for the recorder (or, with `WEBHOOK_INLINE_WAIT`, for first
        // attempts): more batches in flight keep the queues moving.
        concurrency: 4,
        liveness: runtime.liveness("consumer", None),
    };
    // The interactive lane's events have a consume loop and batch slots of their own: a flood
    // of bulk events never stands between them and their endpoints.
    let interactive_settings = ConsumerSettings {
        role: "webhook-worker-interactive",
        queues: vec![QueueKind::InteractiveWebhooks],
        prefetch: config.prefetch,
        liveness: runtime.liveness("interactive-consumer", None),
        ..settings.clone()
    };
    let handler = Arc::new(EventsHandler {
        pool: pool.clone(),
        dispatcher: dispatcher.clone(),
        lease: config.lease,
        inline_wait: config.inline_wait.min(config.timeout),
        disable_after: config.disable_after,
        batch_events: config.batch_size.max(1),
    });
    let (consumed, interactive) = tokio::join!(
        consumer::run(&runtime, settings, handler.clone()),
        consumer::run(&runtime, interactive_settings, handler),
    );
    let consumed = consumed.and(interactive);
    drop(poller.await);
    dispatcher.finish().await;
    renewing.cancel();
    drop(renewer.await);
    drop(dispatcher);
    drop(recorder.await);
    consumed
}

/// Fans events out: first attempts inline where the endpoint allows, every delivery written once.
struct EventsHandler {
    pool: PgPool,
    dispatcher: Arc<Dispatcher>,
    lease: Duration,
    /// How long a batch waits for its inline first attempts (zero: none are made).
    inline_wait: Duration,
    disable_after: Duration,
    /// Most events fanned out in one transaction (a batch of the relay's messages is written in
    /// parts of this many events).
    batch_events: usize,
}

impl BatchHandler for EventsHandler {
    async fn handle(&self, deliveries: Vec<Delivery>, context: BatchContext) -> anyhow::Result<()> {
        // The events of every decodable message, each remembering the message it came in.
        let mut events = Vec::with_capacity(deliveries.len());
        let mut owners = Vec::with_capacity(deliveries.len());
        let mut messages = Vec::with_capacity(deliveries.len());
        for delivery in deliveries {
            match decode_events(&delivery) {
                Ok(decoded) => {
                    owners.extend(std::iter::repeat_n(messages.len(), decoded.len()));
                    events.extend(decoded);
                    messages.push(delivery);
                }
                Err(reason) => context.dead_letters.send(&delivery, &reason).await?,
            }
        }
        if events.is_empty() {
            return ack_all(&messages).await;
        }
        // The interactive lane's events never wait for anyone's first attempt: their deliveries
        // are written first and attempted by the dispatcher, bounded per endpoint, so a slow
        // endpoint costs only its own slots. The bulk lane does the same unless
        // `WEBHOOK_INLINE_WAIT` lets it make first attempts inline (a write per delivery saved).
        let lane = context.queue.lane().unwrap_or(Lane::Bulk);
        match self
            .deliver_in_parts(&events, lane, &context.shutdown)
            .await
        {
            Ok(()) => {
                metrics::counter!("flow_worker_messages_total", "worker" => ROLE, "outcome" => "fanned_out")
                    .increment(events.len() as u64);
                ack_all(&messages).await
            }
            Err(Unfinished::Stopping) => nack_all(&messages).await,
            Err(Unfinished::Failed(error)) if database::is_transient(&error) => {
                tracing::warn!(%error, count = messages.len(), "returning events to the queue");
                nack_all(&messages).await
            }
            Err(Unfinished::Failed(error)) if events.len() > 1 => {
                // One event that cannot be fanned out must not take the others with it.
                tracing::warn!(%error, count = events.len(), "could not fan out a batch; fanning out one by one");
                self.fan_out_one_by_one(&events, &owners, &messages, &context)
                    .await
            }
            Err(Unfinished::Failed(error)) => {
                for delivery in &messages {
                    context
                        .dead_letters
                        .send(delivery, &format!("cannot fan out: {error}"))
                        .await?;
                }
                Ok(())
            }
        }
    }
}

/// Why a batch of events was not fanned out to the end.
enum Unfinished {
    /// Shutdown came while it waited for the recorder.
    Stopping,
    Failed(sqlx::Error),
}

impl EventsHandler {
    /// Delivers the events in parts of at most `batch_events`, each in its own transaction, and
    /// before each part waits while the recorder is behind (see `dispatch::Unrecorded`): a batch
    /// of relay messages can hold 125,000 events, and as one transaction its statements took
    /// seconds while the attempts it started piled up for the recorder. A part committed before
    /// a later one failed is not written twice when the messages come back: their events find
    /// their deliveries and are skipped.
    ///
    /// Events of the interactive lane neither wait for the recorder (their number is bounded by
    /// the assign rate limits, and a bulk flood's outcomes must not hold them) nor make first
    /// attempts inline.
    async fn deliver_in_parts(
        &self,
        events: &[IncomingEvent],
        lane: Lane,
        shutdown: &CancellationToken,
    ) -> Result<(), Unfinished> {
        let inline_wait = match lane {
            Lane::Interactive => Duration::ZERO,
            Lane::Bulk => self.inline_wait,
        };
        for part in events.chunks(self.batch_events) {
            if lane == Lane::Interactive {
                self.deliver(part, inline_wait, shutdown)
                    .await
                    .map_err(Unfinished::Failed)?;
                continue;
            }
            let recorder_caught_up = self
                .dispatcher
                .unrecorded()
                .below(dispatch::UNRECORDED_LIMIT);
            if shutdown
                .run_until_cancelled(recorder_caught_up)
                .await
                .is_none()
            {
                return Err(Unfinished::Stopping);
            }
            self.deliver(part, inline_wait, shutdown)
                .await
                .map_err(Unfinished::Failed)?;
        }
        Ok(())
    }

    /// Delivers a batch of events, the one fan-out route: the endpoints each event goes to, first
    /// attempts inline (waiting at most `inline_wait`; none when it is zero) to the endpoints that
    /// take them, then every delivery written in one transaction, then the claimed ones
    /// dispatched and the outcomes of attempts still under way handed to the recorder. The
    /// deliveries are committed when this returns: the caller acks.
    async fn deliver(
        &self,
        events: &[IncomingEvent],
        inline_wait: Duration,
        shutdown: &CancellationToken,
    ) -> Result<(), sqlx::Error> {
        let events = deliveries::distinct(events);
        let targets = retry_transient("fan-out", shutdown, database::is_transient, || {
            deliveries::targets(&self.pool, &events)
        })
        .await?;
        // One token for every claim of the batch, and for every try of its transaction: a retry
        // after a lost COMMIT answer gets its own claimed rows back.
        let claim_token = uuid::Uuid::new_v4();
        let deadline = Instant::now() + inline_wait;
        let mut inline = Vec::new();
        let mut unsent = Vec::new();
        for target in targets {
            let event = events[usize::try_from(target.event_index).unwrap_or(usize::MAX)];
            let delivery = target.claimed(event, DeliveryId::new(), claim_token);
            // An inline wait of zero declines every inline attempt: the one route then writes
            // every delivery claimed and dispatches it.
            if inline_wait.is_zero() {
                unsent.push(delivery);
                continue;
            }
            match self.dispatcher.attempt_inline(delivery, deadline) {
                Inline::Started(attempt) => inline.push(attempt),
                Inline::Declined(delivery) => unsent.push(delivery),
            }
        }
        let mut attempted = Vec::new();
        let mut under_way = Vec::new();
        for attempt in inline {
            match attempt.settle(deadline).await {
                Settled::Attempted(delivery, outcome) => attempted.push((delivery, outcome)),
                Settled::UnderWay(delivery, outcome) => {
                    self.dispatcher.mark_slow(delivery.endpoint_id);
                    under_way.push((delivery, outcome));
                }
                Settled::Unsent(delivery) => {
                    self.dispatcher.mark_slow(delivery.endpoint_id);
                    unsent.push(delivery);
                }
            }
        }
        let by_event: HashMap<EventId, &IncomingEvent> = events
            .iter()
            .map(|event| (event.event_id, *event))
            .collect();
        let new_delivery = |delivery: &ClaimedDelivery, start| NewDelivery {
            id: delivery.id,
            endpoint_id: delivery.endpoint_id,
            event: by_event[&delivery.event_id],
            start,
        };
        let rows: Vec<NewDelivery<'_>> = attempted
            .iter()
            .map(|(delivery, outcome)| new_delivery(delivery, Start::Attempted(outcome)))
            .chain(
                under_way
                    .iter()
                    .map(|(delivery, _)| delivery)
                    .chain(&unsent)
                    .map(|delivery| new_delivery(delivery, Start::Claimed(claim_token))),
            )
            .collect();
        let claimed_at = Instant::now();
        let created = retry_transient("fan-out", shutdown, database::is_transient, || {
            deliveries::create(&self.pool, &rows, self.lease, self.disable_after)
        })
        .await?;
        for endpoint in &created.disabled {
            tracing::warn!(
                endpoint_id = %endpoint.id,
                reason = endpoint.disabled_reason.as_deref().unwrap_or(""),
                "webhook endpoint disabled"
            );
        }
        let written: HashMap<(WebhookEndpointId, EventId), DeliveryId> = created
            .deliveries
            .iter()
            .map(|row| ((row.endpoint_id, row.event_id), row.id))
            .collect();
        let claimed_row = |delivery: &ClaimedDelivery| {
            written
                .get(&(delivery.endpoint_id, delivery.event_id))
                .copied()
        };
        for (delivery, outcome) in under_way {
            if claimed_row(&delivery) == Some(delivery.id) {
                self.dispatcher.record_later(outcome);
            }
        }
        // A row found claimed under this batch's token (a retried commit) keeps its first id.
        let unsent: Vec<ClaimedDelivery> = unsent
            .into_iter()
            .filter_map(|delivery| {
                let id = claimed_row(&delivery)?;
                Some(ClaimedDelivery { id, ..delivery })
            })
            .collect();
        self.dispatcher.dispatch(unsent, claimed_at);
        Ok(())
    }

    /// Fans each event out in its own transaction. A message whose events all went out (or were
    /// dead-lettered on their own) is acked; one with a transient failure goes back to the queue
    /// (its other events fan out to nothing new next time).
    async fn fan_out_one_by_one(
        &self,
        events: &[IncomingEvent],
        owners: &[usize],
        messages: &[Delivery],
        context: &BatchContext,
    ) -> anyhow::Result<()> {
        let mut returned = vec![false; messages.len()];
        for (event, owner) in events.iter().zip(owners) {
            match self
                .deliver(
                    std::slice::from_ref(event),
                    Duration::ZERO,
                    &context.shutdown,
                )
                .await
            {
                Ok(()) => {
                    metrics::counter!("flow_worker_messages_total", "worker" => ROLE, "outcome" => "fanned_out")
                        .increment(1);
                }
                Err(error) if database::is_transient(&error) => returned[*owner] = true,
                Err(error) => {
                    tracing::error!(%error, event_id = %event.event_id, "cannot fan out an event");
                    let org = event.org_id.to_string();
                    // Headers of a lone event, so a replay reads as one and keeps its trace.
                    let headers: Vec<(&str, &str)> = std::iter::once((ORG_HEADER, org.as_str()))
                        .chain(
                            event
                                .traceparent
                                .as_deref()
                                .map(|traceparent| (telemetry::TRACEPARENT, traceparent)),
                        )
                        .collect();
                    context
                        .dead_letters
                        .send_part(
                            event.payload.get().as_bytes(),
                            &event.event_id.to_string(),
                            EVENT_KIND,
                            &headers,
                            &format!("cannot fan out: {error}"),
                        )
                        .await?;
                }
            }
        }
        for (delivery, returned) in messages.iter().zip(returned) {
            if returned {
                nack_all(std::slice::from_ref(delivery)).await?;
            } else {
                ack_all(std::slice::from_ref(delivery)).await?;
            }
        }
        Ok(())
    }
}

/// Reads an event message: a lone event (the body is what customers receive; the organization
/// and the trace travel in headers) or an [`EventBatch`].
fn decode_events(delivery: &Delivery) -> Result<Vec<IncomingEvent>, String> {
    let kind = delivery
        .properties
        .kind()
        .as_ref()
        .map(|kind| kind.as_str());
    let org = delivery.properties.headers().as_ref().and_then(|headers| {
        match headers.inner().get(ORG_HEADER)? {
            AMQPValue::LongString(text) => Some(text.to_string()),
            _ => None,
        }
    });
    decode_event_message(
        kind,
        org.as_deref(),
        consumer::traceparent(delivery),
        &delivery.data,
    )
}

/// Claims due deliveries (retries, expired leases, test pings, manual retries) until `shutdown`.
async fn poll(
    liveness: flow_common::ops::Liveness,
    mut wakeup: Wakeup,
    pool: PgPool,
    dispatcher: Arc<Dispatcher>,
    config: WebhookWorkerConfig,
    shutdown: CancellationToken,
) {
    const CLAIM_BATCH: i64 = 500;
    let memory_cap = config.concurrency.saturating_mul(8).max(1_000);
    while !shutdown.is_cancelled() {
        liveness.beat();
        wakeup.listen().await;
        let mut claimed_full = false;
        if dispatcher.in_flight() < memory_cap {
            let skip = dispatcher.saturated();
            let claimed_at = Instant::now();
            match deliveries::claim_due(&pool, CLAIM_BATCH, config.lease, &skip).await {
                Ok(claimed) => {
                    claimed_full = claimed.len() as i64 == CLAIM_BATCH;
                    if !claimed.is_empty() {
                        tracing::debug!(count = claimed.len(), "claimed due deliveries");
                    }
                    dispatcher.dispatch(claimed, claimed_at);
                }
                Err(error) => tracing::warn!(%error, "could not claim due deliveries"),
            }
        }
        if claimed_full {
            continue;
        }
        shutdown
            .run_until_cancelled(wakeup.wait(config.poll_interval))
            .await;
    }
}
