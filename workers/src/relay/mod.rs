//! The outbox relay: publishes the events that state changes wrote to the outbox to the
//! `{prefix}.events` topic exchange (persistent, with publisher confirms; the events of one batch
//! go out as messages of one event type and at most `MAX_EVENTS_PER_MESSAGE` events, see
//! `EventBatch`), in the order of the outbox, and moves the outbox cursor past them in the
//! transaction that locked it (no row is written per event). Several relays take turns: one
//! holds the cursor while it publishes a batch, the others skip the round. A relay that dies
//! after the broker confirmed but before its commit leaves the cursor where it was: the events go
//! out again and consumers dedupe them by event id. Woken by `NOTIFY` when events are written,
//! and by a timer in case a notification was missed.
//!
//! Lanes: the outbox has a cursor per lane (migration 0151), and each process relays the two
//! side by side: events of interactive work go to `{prefix}.events.interactive` without waiting
//! behind a bulk flood's, which go to `{prefix}.events`. A bulk event also names its
//! organization's webhook queue (`{prefix}.webhooks.bulk.N`, the shard of its assign queue) as a
//! `BCC` routing key: one organization's flood of events queues in its shard, and the
//! webhook-worker takes the shards in turn. The routing key stays the event type, so a consumer
//! of its own still binds `{prefix}.events` by type. Messages are encoded by the events codec
//! (`flow_domain::events::codec`), which the webhook-worker decodes with.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use anyhow::Context;
use chrono::Utc;
use flow_app::outbox;
use flow_common::amqp::{Lane, Outgoing, Publisher, QueueKind};
use flow_common::config::CoreConfig;
use flow_common::db;
use flow_common::runtime::Backoff;
use flow_common::telemetry::TRACEPARENT;
use flow_domain::events::codec::{EventMessage, OutgoingEvent, encode_event_message};
use flow_domain::events::{MAX_EVENTS_PER_MESSAGE, ORG_HEADER};
use flow_domain::ids::OrgId;
use sqlx::PgPool;
use tracing::Instrument;

use crate::runtime::{Runtime, role};

const ROLE: &str = "outbox-relay";

/// Settings of the relay.
#[derive(Debug, Clone, clap::Args)]
pub struct RelayConfig {
    /// Database, broker and queue settings.
    #[command(flatten)]
    pub core: CoreConfig,

    /// Most events published per transaction.
    #[arg(long, env = "RELAY_BATCH_SIZE", default_value_t = 1_000)]
    pub batch_size: i64,

    /// Longest wait between two looks at the outbox when no notification arrives.
    #[arg(long, env = "RELAY_POLL_INTERVAL_MS", default_value_t = 1_000)]
    pub poll_interval_ms: u64,

    /// How long published events stay in the outbox before they are pruned.
    #[arg(long, env = "OUTBOX_RETENTION_HOURS", default_value_t = 72)]
    pub retention_hours: u64,

    /// What this role's readiness depends on (filled in by `run`, served by the ops endpoints).
    #[arg(skip)]
    pub health: flow_common::ops::Health,
}

role! {
    settings: RelayConfig,
    name: ROLE,
    about: "Flow outbox relay",
    description: "The outbox relay (lifecycle events to RabbitMQ)",
    ops_address: "127.0.0.1:9103",
    work: work,
}

/// Relays until shutdown.
async fn work(config: RelayConfig, runtime: Runtime) -> anyhow::Result<()> {
    let publisher = runtime.publisher(4);
    runtime.gauge("outbox backlog", crate::gauges::outbox);
    tracing::info!(role = ROLE, "relaying the outbox");
    tokio::join!(
        relay_lane(&config, &runtime, &publisher, Lane::Interactive),
        relay_lane(&config, &runtime, &publisher, Lane::Bulk),
    );
    publisher.close().await;
    Ok(())
}

/// Relays the events of `lane` until shutdown (the bulk lane's loop also prunes the outbox).
async fn relay_lane(config: &RelayConfig, runtime: &Runtime, publisher: &Publisher, lane: Lane) {
    let liveness = match lane {
        Lane::Bulk => runtime.liveness("loop", Some(LOOP_STALE_AFTER)),
        Lane::Interactive => runtime.liveness("interactive loop", Some(LOOP_STALE_AFTER)),
    };
    let (pool, shutdown) = (&runtime.pool, &runtime.shutdown);
    let mut wakeup = runtime.wakeup(db::OUTBOX_CHANNEL);
    let mut delays = Backoff::reconnect();
    let mut last_prune = Instant::now() - Duration::from_secs(3_600);
    while !shutdown.is_cancelled() {
        liveness.beat();
        wakeup.listen().await;
        match relay_batch(pool, publisher, lane, config.batch_size).await {
            Ok(count) => {
                delays.reset();
                if count as i64 >= config.batch_size {
                    continue;
                }
            }
            Err(error) => {
                let delay = delays.delay();
                tracing::warn!(
                    role = ROLE,
                    lane = lane.as_str(),
                    error = format!("{error:#}"),
                    ?delay,
                    "relay failed; retrying"
                );
                shutdown
                    .run_until_cancelled(tokio::time::sleep(delay))
                    .await;
                continue;
            }
        }
        if lane == Lane::Bulk && last_prune.elapsed() > Duration::from_secs(600) {
            last_prune = Instant::now();
            prune(pool, config.retention_hours).await;
        }
        let poll = Duration::from_millis(config.poll_interval_ms);
        shutdown.run_until_cancelled(wakeup.wait(poll)).await;
    }
}

/// A relay loop that has not come round for this long is stuck (a round waits at most the poll
/// interval, a publish at most its confirm timeout, a failure at most the backoff's ten seconds).
const LOOP_STALE_AFTER: Duration = Duration::from_secs(120);

/// Publishes one batch of events of `lane`; returns how many.
async fn relay_batch(
    pool: &PgPool,
    publisher: &Publisher,
    lane: Lane,
    limit: i64,
) -> anyhow::Result<usize> {
    let (mut turn, events) = outbox::next_batch(pool, lane, limit).await?;
    let Some(last) = events.last() else {
        turn.release().await?;
        return Ok(0);
    };
    let started = Instant::now();
    let exchange = publisher.topology().events_exchange_for(lane);
    // The bulk lane's events also go to their organization's webhook queue (a `BCC` routing key),
    // so one organization's flood queues in its own shard.
    let shards = match lane {
        Lane::Interactive => HashMap::new(),
        Lane::Bulk => {
            let mut orgs: Vec<OrgId> = events.iter().map(|event| event.org_id).collect();
            orgs.sort_unstable();
            orgs.dedup();
            turn.bulk_lanes(&orgs).await?
        }
    };
    let webhook_queue = |org: OrgId| match lane {
        Lane::Interactive => None,
        // An organization that is gone has no endpoint left: any shard does.
        Lane::Bulk => Some(QueueKind::webhooks_for(
            shards.get(&org).copied().unwrap_or(0),
        )),
    };
    // One message per webhook queue, event type and chunk: routing keys stay the event types.
    let mut grouped: BTreeMap<(Option<String>, &str), Vec<OutgoingEvent<'_>>> = BTreeMap::new();
    for event in &events {
        grouped
            .entry((
                webhook_queue(event.org_id).map(QueueKind::suffix),
                event.event_type.as_str(),
            ))
            .or_default()
            .push(OutgoingEvent {
                event_id: event.event_id,
                org_id: event.org_id,
                payload: &event.payload,
                traceparent: event.traceparent.as_deref(),
            });
    }
    let mut messages: Vec<(Option<String>, &str, EventMessage)> = Vec::new();
    for ((webhooks, event_type), events) in grouped {
        for chunk in events.chunks(MAX_EVENTS_PER_MESSAGE) {
            if let Some(message) = encode_event_message(chunk)? {
                messages.push((webhooks.clone(), event_type, message));
            }
        }
    }
    let publishes = messages.iter().map(|(webhooks, event_type, message)| {
        // A lone event names its own trace; a batch names the relay's (its events carry theirs).
        let headers: Vec<(&str, &str)> = message
            .org
            .as_deref()
            .map(|org| (ORG_HEADER, org))
            .into_iter()
            .chain(
                message
                    .traceparent
                    .as_deref()
                    .map(|traceparent| (TRACEPARENT, traceparent)),
            )
            .collect();
        let bcc: Vec<&str> = webhooks.as_deref().into_iter().collect();
        let exchange = exchange.as_str();
        async move {
            publisher
                .publish_bcc(
                    Outgoing {
                        exchange,
                        routing_key: event_type,
                        payload: &message.body,
                        message_id: &message.message_id,
                        kind: message.kind,
                        request_id: None,
                        headers: &headers,
                    },
                    &bcc,
                )
                .await
        }
    });
    // Every publish must be confirmed before the cursor moves; on any failure the transaction rolls
    // back and the whole batch goes out again (consumers dedupe by event id).
    // The publishing is a trace of its own; each event keeps the trace of the work that caused it
    // (its `traceparent`), which the webhook-worker continues.
    futures::future::try_join_all(publishes)
        .instrument(tracing::info_span!(
            "outbox relay batch",
            events = events.len(),
            lane = lane.as_str()
        ))
        .await
        .context("publishing events")?;
    turn.advance(last.seq).await?;
    let lag = events
        .iter()
        .map(|event| (Utc::now() - event.created_at).num_milliseconds())
        .max()
        .unwrap_or(0);
    metrics::counter!("flow_worker_messages_total", "worker" => ROLE, "outcome" => "published", "lane" => lane.as_str())
        .increment(events.len() as u64);
    metrics::histogram!("flow_worker_batch_seconds", "worker" => ROLE)
        .record(started.elapsed().as_secs_f64());
    tracing::debug!(count = events.len(), max_lag_ms = lag, "events published");
    Ok(events.len())
}

async fn prune(pool: &PgPool, retention_hours: u64) {
    let before = Utc::now() - chrono::Duration::hours(i64::try_from(retention_hours).unwrap_or(72));
    loop {
        match outbox::prune(pool, before, 10_000).await {
            Ok(0) => break,
            Ok(count) => tracing::info!(role = ROLE, count, "pruned published events"),
            Err(error) => {
                tracing::warn!(role = ROLE, %error, "could not prune the outbox");
                break;
            }
        }
    }
}
