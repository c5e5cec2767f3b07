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
//! behind a bulk flood's, which go to `{prefix}.events`.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::Context;
use chrono::Utc;
use flow_common::amqp::{Lane, Outgoing, Publisher};
use flow_common::config::CoreConfig;
use flow_common::db::{self, outbox};
use flow_common::runtime::Backoff;
use flow_common::telemetry::TRACEPARENT;
use flow_domain::events::{
    BatchedEvent, EVENT_BATCH_KIND, EVENT_BATCH_VERSION, EVENT_KIND, EventBatch,
    MAX_EVENTS_PER_MESSAGE, ORG_HEADER,
};
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

role! { RelayConfig, ROLE, "Flow outbox relay", "0.0.0.0:9103", work }

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
    let mut transaction = pool.begin().await?;
    let events = outbox::next_batch(&mut transaction, lane, limit)
        .await?
        .unwrap_or_default();
    let Some(last) = events.last() else {
        transaction.commit().await?;
        return Ok(0);
    };
    let started = Instant::now();
    let exchange = publisher.topology().events_exchange_for(lane);
    // One message per event type and chunk: routing keys stay the event types.
    let mut by_type: BTreeMap<&str, Vec<&outbox::PendingEvent>> = BTreeMap::new();
    for event in &events {
        by_type.entry(&event.event_type).or_default().push(event);
    }
    let messages: Vec<(&str, Message)> = by_type
        .into_iter()
        .flat_map(|(event_type, events)| {
            events
                .chunks(MAX_EVENTS_PER_MESSAGE)
                .map(|chunk| (event_type, Message::of(chunk)))
                .collect::<Vec<_>>()
        })
        .map(|(event_type, message)| message.map(|message| (event_type, message)))
        .collect::<Result<_, _>>()?;
    let publishes = messages.iter().map(|(event_type, message)| {
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
        let exchange = exchange.as_str();
        async move {
            publisher
                .publish(Outgoing {
                    exchange,
                    routing_key: event_type,
                    payload: &message.body,
                    message_id: &message.id,
                    kind: message.kind,
                    request_id: None,
                    headers: &headers,
                })
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
    outbox::advance(&mut transaction, lane, last.seq).await?;
    transaction.commit().await?;
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

/// One message of the events exchange: a lone event as itself, or a batch.
struct Message {
    id: String,
    kind: &'static str,
    body: Vec<u8>,
    /// The organization header of a lone event.
    org: Option<String>,
    /// The `traceparent` header of a lone event: the trace of the work that caused it.
    traceparent: Option<String>,
}

impl Message {
    fn of(events: &[&outbox::PendingEvent]) -> serde_json::Result<Self> {
        if let [event] = events {
            return Ok(Self {
                id: event.event_id.to_string(),
                kind: EVENT_KIND,
                body: event.payload.get().as_bytes().to_vec(),
                org: Some(event.org_id.to_string()),
                traceparent: event.traceparent.clone(),
            });
        }
        let batch = EventBatch {
            version: EVENT_BATCH_VERSION,
            events: events
                .iter()
                .map(|event| BatchedEvent {
                    org_id: event.org_id,
                    event: &*event.payload,
                    traceparent: event.traceparent.clone(),
                })
                .collect(),
        };
        Ok(Self {
            // Stable across a retry of the same claim: a redelivered batch is the same message.
            id: format!("events-{}-{}", events[0].event_id, events.len()),
            kind: EVENT_BATCH_KIND,
            body: serde_json::to_vec(&batch)?,
            org: None,
            traceparent: None,
        })
    }
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

#[cfg(test)]
mod tests {
    use chrono::Utc;
    use flow_common::db::outbox::PendingEvent;
    use flow_domain::events::event_body;
    use flow_domain::ids::{EventId, OrgId};

    use super::*;
    use crate::webhook::decode_event_message;

    fn pending(seq: i64, traceparent: Option<&str>) -> PendingEvent {
        let event_id = EventId::new();
        PendingEvent {
            seq,
            event_id,
            org_id: OrgId::new(),
            event_type: "flow.assigned".into(),
            payload: serde_json::value::to_raw_value(&event_body(
                event_id,
                "flow.assigned",
                Utc::now(),
                serde_json::json!({}),
            ))
            .expect("json"),
            created_at: Utc::now(),
            traceparent: traceparent.map(str::to_owned),
        }
    }

    /// What the webhook-worker reads back from a message the relay publishes, with `header` as the
    /// message's `traceparent` header when the relay names none (the publisher's span then).
    fn round_trip(events: &[&PendingEvent], header: &str) -> Vec<Option<String>> {
        let message = Message::of(events).expect("encodes");
        let decoded = decode_event_message(
            Some(message.kind),
            message.org.as_deref(),
            Some(message.traceparent.as_deref().unwrap_or(header)),
            &message.body,
        )
        .expect("decodes");
        let ids: Vec<EventId> = decoded.iter().map(|event| event.event_id).collect();
        let sent: Vec<EventId> = events.iter().map(|event| event.event_id).collect();
        assert_eq!(ids, sent, "every event, in order");
        decoded.into_iter().map(|event| event.traceparent).collect()
    }

    #[test]
    fn every_event_keeps_its_own_trace_through_the_relay_encoding() {
        let first = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let second = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        let relay = "00-11111111111111111111111111111111-2222222222222222-01";
        let traced = pending(1, Some(first));
        let other = pending(2, Some(second));
        let untraced = pending(3, None);

        assert_eq!(
            round_trip(&[&traced, &other, &untraced], relay),
            [
                Some(first.to_owned()),
                Some(second.to_owned()),
                Some(relay.to_owned())
            ],
            "a batch carries each event's trace; one without continues the relay's"
        );
        assert_eq!(
            round_trip(&[&traced], relay),
            [Some(first.to_owned())],
            "a lone event's header names its own trace"
        );
        assert_eq!(round_trip(&[&untraced], relay), [Some(relay.to_owned())]);
    }

    #[test]
    fn batches_published_before_events_carried_their_trace_still_decode() {
        let event = pending(1, None);
        let body = serde_json::json!({
            "version": EVENT_BATCH_VERSION,
            "events": [{ "orgId": event.org_id, "event": event.payload }],
        });
        let relay = "00-11111111111111111111111111111111-2222222222222222-01";
        let decoded = decode_event_message(
            Some(EVENT_BATCH_KIND),
            None,
            Some(relay),
            &serde_json::to_vec(&body).expect("json"),
        )
        .expect("an old batch decodes");
        assert_eq!(decoded.len(), 1);
        assert_eq!(decoded[0].event_id, event.event_id);
        assert_eq!(decoded[0].traceparent.as_deref(), Some(relay));
    }
}
