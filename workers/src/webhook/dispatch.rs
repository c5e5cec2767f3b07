//! Runs attempts concurrently without letting one endpoint hold up the others: each endpoint has
//! its own small pool of in-flight requests and a bounded queue in memory (large while it answers,
//! small once an attempt failed); deliveries beyond that queue go back to Postgres (deferred) and
//! are claimed again later, so a slow or dead endpoint costs its own slots and nothing else.
//! Outcomes are written by one recorder in batches.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};
use chrono::Utc;
use flow_common::db::webhooks::{self, AttemptOutcome, ClaimedDelivery, EndpointVerdict, NextStep};
use flow_common::ids::WebhookEndpointId;
use sqlx::PgPool;
use tokio::sync::{Semaphore, mpsc};
use tokio_util::task::TaskTracker;

use super::sender::Sender;

/// Limits of a dispatcher.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Requests in flight in all.
    pub concurrency: usize,
    /// Requests in flight to one endpoint.
    pub endpoint_concurrency: usize,
    /// Deliveries of one healthy endpoint held in memory (in flight or waiting for a slot).
    pub endpoint_queue: usize,
    /// Deliveries of an endpoint whose last attempt failed held in memory: a dead or hanging
    /// endpoint keeps little in memory, and its backlog waits in Postgres.
    pub failing_endpoint_queue: usize,
}

struct Slot {
    permits: Semaphore,
    queued: AtomicUsize,
    failing: AtomicBool,
}

impl Slot {
    fn capacity(&self, limits: &Limits) -> usize {
        if self.failing.load(Ordering::Acquire) {
            limits.failing_endpoint_queue.min(limits.endpoint_queue)
        } else {
            limits.endpoint_queue
        }
    }
}

/// Hands claimed deliveries to attempt tasks.
pub struct Dispatcher {
    sender: Sender,
    limits: Limits,
    global: Semaphore,
    slots: Mutex<HashMap<WebhookEndpointId, Arc<Slot>>>,
    outcomes: mpsc::UnboundedSender<AttemptOutcome>,
    tasks: TaskTracker,
}

impl Dispatcher {
    /// A dispatcher sending with `sender` and reporting to `outcomes`.
    pub fn new(
        sender: Sender,
        limits: Limits,
        outcomes: mpsc::UnboundedSender<AttemptOutcome>,
    ) -> Arc<Self> {
        Arc::new(Self {
            sender,
            limits,
            global: Semaphore::new(limits.concurrency.max(1)),
            slots: Mutex::new(HashMap::new()),
            outcomes,
            tasks: TaskTracker::new(),
        })
    }

    fn slot(&self, endpoint: WebhookEndpointId) -> Arc<Slot> {
        let mut slots = self
            .slots
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        slots
            .entry(endpoint)
            .or_insert_with(|| {
                Arc::new(Slot {
                    permits: Semaphore::new(self.limits.endpoint_concurrency.max(1)),
                    queued: AtomicUsize::new(0),
                    failing: AtomicBool::new(false),
                })
            })
            .clone()
    }

    /// Starts an attempt for each delivery, or defers it when its endpoint's queue is full.
    pub fn dispatch(self: &Arc<Self>, deliveries: Vec<ClaimedDelivery>) {
        for delivery in deliveries {
            let slot = self.slot(delivery.endpoint_id);
            if slot.queued.fetch_add(1, Ordering::AcqRel) >= slot.capacity(&self.limits) {
                slot.queued.fetch_sub(1, Ordering::AcqRel);
                self.defer(&delivery);
                continue;
            }
            let dispatcher = self.clone();
            self.tasks.spawn(async move {
                let outcome = {
                    let _endpoint = slot.permits.acquire().await;
                    let _global = dispatcher.global.acquire().await;
                    dispatcher.sender.attempt(&delivery).await
                };
                slot.failing.store(
                    outcome.verdict != EndpointVerdict::Healthy,
                    Ordering::Release,
                );
                slot.queued.fetch_sub(1, Ordering::AcqRel);
                record_metrics(&outcome, &delivery);
                drop(dispatcher.outcomes.send(outcome));
            });
        }
    }

    fn defer(&self, delivery: &ClaimedDelivery) {
        metrics::counter!("flow_webhook_attempts_total", "result" => "deferred").increment(1);
        drop(self.outcomes.send(AttemptOutcome {
            delivery_id: delivery.id,
            endpoint_id: delivery.endpoint_id,
            attempt: delivery.attempts,
            attempted_at: Utc::now(),
            status_code: None,
            latency_ms: 0,
            error: None,
            response_excerpt: None,
            next: NextStep::Deferred(Utc::now() + chrono::Duration::seconds(1)),
            verdict: EndpointVerdict::Unchanged,
        }));
    }

    /// Endpoints whose queue is full (the poller does not claim for them), forgetting idle ones.
    pub fn saturated(&self) -> Vec<WebhookEndpointId> {
        let mut slots = self
            .slots
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        slots.retain(|_, slot| {
            Arc::strong_count(slot) > 1 || slot.queued.load(Ordering::Acquire) > 0
        });
        slots
            .iter()
            .filter(|(_, slot)| slot.queued.load(Ordering::Acquire) >= slot.capacity(&self.limits))
            .map(|(id, _)| *id)
            .collect()
    }

    /// Deliveries held in memory.
    pub fn in_flight(&self) -> usize {
        self.tasks.len()
    }

    /// Waits for every attempt under way (graceful shutdown).
    pub async fn finish(&self) {
        self.tasks.close();
        self.tasks.wait().await;
    }
}

fn record_metrics(outcome: &AttemptOutcome, delivery: &ClaimedDelivery) {
    let result = match (outcome.next, outcome.verdict) {
        (NextStep::Succeeded, _) => "success",
        (_, EndpointVerdict::Gone) => "gone",
        _ => "failure",
    };
    metrics::counter!("flow_webhook_attempts_total", "result" => result).increment(1);
    metrics::histogram!("flow_webhook_attempt_seconds")
        .record(f64::from(outcome.latency_ms) / 1_000.0);
    if outcome.next == NextStep::Succeeded {
        let lag = (outcome.attempted_at - delivery.event_at)
            .num_milliseconds()
            .max(0);
        metrics::histogram!("flow_webhook_delivery_lag_seconds").record(lag as f64 / 1_000.0);
    }
}

/// Writes outcomes in batches until every sender is gone. A batch that cannot be written is
/// retried; the deliveries' leases keep them safe meanwhile (an unrecorded attempt is attempted
/// again after its lease, which at-least-once delivery allows).
pub async fn record_outcomes(
    pool: PgPool,
    mut outcomes: mpsc::UnboundedReceiver<AttemptOutcome>,
    disable_after: Duration,
) {
    let mut batch = Vec::with_capacity(1_000);
    while outcomes.recv_many(&mut batch, 1_000).await > 0 {
        let mut delays = ExponentialBuilder::default()
            .with_min_delay(Duration::from_millis(50))
            .with_max_delay(Duration::from_secs(5))
            .with_jitter()
            .with_max_times(20)
            .build();
        loop {
            match write(&pool, &batch, disable_after).await {
                Ok(disabled) => {
                    for endpoint in disabled {
                        tracing::warn!(
                            endpoint_id = %endpoint.id,
                            reason = endpoint.disabled_reason.as_deref().unwrap_or(""),
                            "webhook endpoint disabled"
                        );
                    }
                    break;
                }
                Err(error) => match delays.next() {
                    Some(delay) if flow_common::db::is_transient(&error) => {
                        tracing::warn!(%error, ?delay, count = batch.len(), "could not record attempts; retrying");
                        tokio::time::sleep(delay).await;
                    }
                    _ => {
                        tracing::error!(%error, count = batch.len(), "dropping attempt records; the deliveries will be attempted again when their lease ends");
                        break;
                    }
                },
            }
        }
        batch.clear();
    }
}

async fn write(
    pool: &PgPool,
    batch: &[AttemptOutcome],
    disable_after: Duration,
) -> Result<Vec<webhooks::DisabledEndpoint>, sqlx::Error> {
    let mut transaction = pool.begin().await?;
    let disabled = webhooks::record_outcomes(&mut transaction, batch, disable_after).await?;
    transaction.commit().await?;
    Ok(disabled)
}
