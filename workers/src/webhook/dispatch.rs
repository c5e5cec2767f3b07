//! Runs attempts concurrently without letting one endpoint hold up the others: each endpoint has
//! its own small pool of in-flight requests and a bounded queue in memory (large while it answers,
//! small once an attempt failed); deliveries beyond that queue go back to Postgres (deferred) and
//! are claimed again later, so a slow or dead endpoint costs its own slots and nothing else.
//!
//! A first attempt can also be made before its delivery is written ([`Dispatcher::attempt_inline`]),
//! for endpoints that answer promptly: the handler then writes the delivery once, with its outcome.
//!
//! Every delivery held in memory keeps its lease: a renewer extends the leases of all of them
//! (waiting or in flight) well before they end, so however slowly an endpoint's queue drains,
//! no other worker takes its deliveries over and sends them a second time. A delivery whose
//! lease could not be renewed in time (the database was unreachable, or another worker holds it
//! now) is dropped from memory unsent. Outcomes are written by one recorder in batches; the
//! outcomes handed to it and not written yet are counted ([`Unrecorded`]), and the events
//! consumer takes no new events while there are too many (see [`Unrecorded`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::Utc;
use flow_app::webhooks::dispatch as deliveries;
use flow_common::db::webhooks::fan_out::ClaimedDelivery;
use flow_common::db::webhooks::outcomes::{AttemptOutcome, EndpointVerdict, NextStep};
use flow_common::runtime::Backoff;
use flow_domain::ids::{DeliveryId, WebhookEndpointId};
use sqlx::PgPool;
use tokio::sync::{Notify, Semaphore, mpsc, oneshot};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use uuid::Uuid;

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
    /// Length of a claim; the renewer extends held deliveries' claims every quarter of it.
    pub lease: Duration,
    /// Longest an attempt takes: one starts only while its claim has at least this long left.
    pub attempt_timeout: Duration,
    /// An endpoint whose attempts take longer than this is slow: its first attempts are not made
    /// inline but after the delivery is written.
    pub inline_wait: Duration,
}

/// Most leases renewed in one statement.
const RENEW_CHUNK: usize = 5_000;

/// A delivery held in memory under a claim.
struct Held {
    claim_token: Uuid,
    /// Until when the claim is known to be ours (measured from before the statement that set
    /// it, so never later than the lease in the database).
    lease_until: Instant,
}

struct Slot {
    permits: Semaphore,
    queued: AtomicUsize,
    failing: AtomicBool,
    /// Its last attempt (or a wait for a free request slot) took longer than the inline wait.
    slow: AtomicBool,
}

impl Slot {
    /// Notes how the endpoint answered an attempt.
    fn answered(&self, outcome: &AttemptOutcome, limits: &Limits) {
        self.failing.store(
            outcome.verdict != EndpointVerdict::Healthy,
            Ordering::Release,
        );
        let took = Duration::from_millis(u64::try_from(outcome.latency_ms).unwrap_or(u64::MAX));
        self.slow
            .store(took > limits.inline_wait, Ordering::Release);
    }

    fn capacity(&self, limits: &Limits) -> usize {
        if self.failing.load(Ordering::Acquire) {
            limits.failing_endpoint_queue.min(limits.endpoint_queue)
        } else {
            limits.endpoint_queue
        }
    }
}

/// Most outcomes handed to the recorder and not written yet before the events consumer waits
/// (two of the recorder's batches).
pub const UNRECORDED_LIMIT: usize = 2_000;

/// The outcomes handed to the recorder and not written yet. An attempted delivery's lease is
/// renewed while the delivery waits in memory, not once its attempt is over: if the recorder fell
/// behind by a lease (it writes one batch at a time, and a load beyond what the machine sustains
/// grows the backlog without bound), another worker would claim the delivery again and send it a
/// second time. So the events consumer waits while this backlog is over [`UNRECORDED_LIMIT`], and
/// new events wait in the broker instead.
#[derive(Debug, Default)]
pub struct Unrecorded {
    count: AtomicUsize,
    written: Notify,
}

impl Unrecorded {
    fn add(&self) {
        let count = self.count.fetch_add(1, Ordering::AcqRel) + 1;
        metrics::gauge!("flow_webhook_outcomes_unrecorded").set(count as f64);
    }

    fn written(&self, count: usize) {
        // Saturating: an outcome sent to the recorder's channel directly was never counted.
        let before = self
            .count
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |now| {
                Some(now.saturating_sub(count))
            })
            .unwrap_or_default();
        metrics::gauge!("flow_webhook_outcomes_unrecorded")
            .set(before.saturating_sub(count) as f64);
        self.written.notify_waiters();
    }

    /// Outcomes handed to the recorder and not written yet.
    pub fn count(&self) -> usize {
        self.count.load(Ordering::Acquire)
    }

    /// Returns once fewer than `limit` outcomes wait for the recorder.
    pub async fn below(&self, limit: usize) {
        loop {
            let written = self.written.notified();
            tokio::pin!(written);
            // Registered before the count is read, so a write in between still wakes us.
            written.as_mut().enable();
            if self.count() < limit {
                return;
            }
            written.await;
        }
    }
}

/// Hands claimed deliveries to attempt tasks.
pub struct Dispatcher {
    sender: Sender,
    limits: Limits,
    global: Semaphore,
    slots: Mutex<HashMap<WebhookEndpointId, Arc<Slot>>>,
    held: Mutex<HashMap<DeliveryId, Held>>,
    outcomes: mpsc::UnboundedSender<AttemptOutcome>,
    unrecorded: Arc<Unrecorded>,
    tasks: TaskTracker,
}

impl Dispatcher {
    /// A dispatcher sending with `sender` and reporting to `outcomes`, counting them in
    /// `unrecorded` until the recorder has written them.
    pub fn new(
        sender: Sender,
        limits: Limits,
        outcomes: mpsc::UnboundedSender<AttemptOutcome>,
        unrecorded: Arc<Unrecorded>,
    ) -> Arc<Self> {
        Arc::new(Self {
            sender,
            limits,
            global: Semaphore::new(limits.concurrency.max(1)),
            slots: Mutex::new(HashMap::new()),
            held: Mutex::new(HashMap::new()),
            outcomes,
            unrecorded,
            tasks: TaskTracker::new(),
        })
    }

    /// The outcomes handed to the recorder and not written yet.
    pub fn unrecorded(&self) -> &Unrecorded {
        &self.unrecorded
    }

    /// Hands an outcome to the recorder.
    fn report(&self, outcome: AttemptOutcome) {
        self.unrecorded.add();
        if self.outcomes.send(outcome).is_err() {
            // The recorder has stopped: nothing will write it.
            self.unrecorded.written(1);
        }
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
                    slow: AtomicBool::new(false),
                })
            })
            .clone()
    }

    fn held(&self) -> std::sync::MutexGuard<'_, HashMap<DeliveryId, Held>> {
        self.held
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Starts an attempt for each delivery, or defers it when its endpoint's queue is full.
    /// `claimed_at` is when the statement that claimed them started: their leases run from then.
    pub fn dispatch(self: &Arc<Self>, deliveries: Vec<ClaimedDelivery>, claimed_at: Instant) {
        for delivery in deliveries {
            let slot = self.slot(delivery.endpoint_id);
            if slot.queued.fetch_add(1, Ordering::AcqRel) >= slot.capacity(&self.limits) {
                slot.queued.fetch_sub(1, Ordering::AcqRel);
                self.defer(&delivery);
                continue;
            }
            self.held().insert(
                delivery.id,
                Held {
                    claim_token: delivery.claim_token,
                    lease_until: claimed_at + self.limits.lease,
                },
            );
            let dispatcher = self.clone();
            self.tasks.spawn(async move {
                let outcome = {
                    let _endpoint = slot.permits.acquire().await;
                    let _global = dispatcher.global.acquire().await;
                    if dispatcher.may_attempt(&delivery) {
                        Some(dispatcher.sender.attempt(&delivery).await)
                    } else {
                        None
                    }
                };
                dispatcher.release(&delivery);
                slot.queued.fetch_sub(1, Ordering::AcqRel);
                let Some(outcome) = outcome else {
                    metrics::counter!("flow_webhook_attempts_total", "result" => "lease_lost")
                        .increment(1);
                    tracing::warn!(
                        delivery_id = %delivery.id,
                        "webhook delivery dropped unsent: its lease could not be kept"
                    );
                    return;
                };
                slot.answered(&outcome, &dispatcher.limits);
                record_metrics(&outcome, &delivery);
                dispatcher.report(outcome);
            });
        }
    }

    /// Starts the first attempt of a delivery that is not written yet, if its endpoint takes one
    /// now: it answered its last attempt in time and with success, and has room in its queue.
    /// The attempt waits for a request slot until `deadline` at most, then gives up unsent.
    /// Otherwise the delivery is handed back, to be written and dispatched.
    pub fn attempt_inline(
        self: &Arc<Self>,
        delivery: ClaimedDelivery,
        deadline: Instant,
    ) -> Inline {
        let slot = self.slot(delivery.endpoint_id);
        if slot.failing.load(Ordering::Acquire)
            || slot.slow.load(Ordering::Acquire)
            || self.tasks.is_closed()
        {
            return Inline::Declined(delivery);
        }
        if slot.queued.fetch_add(1, Ordering::AcqRel) >= slot.capacity(&self.limits) {
            slot.queued.fetch_sub(1, Ordering::AcqRel);
            return Inline::Declined(delivery);
        }
        let (started, started_answer) = oneshot::channel();
        let (outcome, outcome_answer) = oneshot::channel();
        let dispatcher = self.clone();
        let attempted = delivery.clone();
        self.tasks.spawn(async move {
            let permits = tokio::time::timeout_at(deadline, async {
                let endpoint = slot.permits.acquire().await;
                let global = dispatcher.global.acquire().await;
                (endpoint, global)
            })
            .await;
            let Ok(_permits) = permits else {
                // No request slot in time: the caller writes the delivery unsent.
                slot.queued.fetch_sub(1, Ordering::AcqRel);
                return;
            };
            let _ = started.send(());
            let result = dispatcher.sender.attempt(&attempted).await;
            slot.queued.fetch_sub(1, Ordering::AcqRel);
            slot.answered(&result, &dispatcher.limits);
            record_metrics(&result, &attempted);
            drop(outcome.send(result));
        });
        Inline::Started(InlineAttempt {
            delivery,
            started: started_answer,
            outcome: outcome_answer,
        })
    }

    /// Takes an endpoint's next first attempts off the inline path, until one of its attempts
    /// answers in time again.
    pub fn mark_slow(&self, endpoint: WebhookEndpointId) {
        self.slot(endpoint).slow.store(true, Ordering::Release);
    }

    /// Sends the outcome of an attempt that began inline and outlasted the wait to the recorder,
    /// once its delivery has been written as claimed.
    pub fn record_later(self: &Arc<Self>, outcome: oneshot::Receiver<AttemptOutcome>) {
        let dispatcher = self.clone();
        self.tasks.spawn(async move {
            if let Ok(outcome) = outcome.await {
                dispatcher.report(outcome);
            }
        });
    }

    /// Whether the delivery is still held under its claim with time enough for a whole attempt
    /// before the lease ends (so no other worker can take it over mid-attempt).
    fn may_attempt(&self, delivery: &ClaimedDelivery) -> bool {
        self.held().get(&delivery.id).is_some_and(|held| {
            held.claim_token == delivery.claim_token
                && held.lease_until > Instant::now() + self.limits.attempt_timeout
        })
    }

    fn release(&self, delivery: &ClaimedDelivery) {
        let mut held = self.held();
        if held
            .get(&delivery.id)
            .is_some_and(|entry| entry.claim_token == delivery.claim_token)
        {
            held.remove(&delivery.id);
        }
    }

    /// Renews the leases of every delivery held in memory every quarter of the lease, until
    /// `stop`; deliveries another worker holds now (or that were deleted) are forgotten, so they
    /// are not attempted.
    pub async fn renew_leases(self: Arc<Self>, pool: PgPool, stop: CancellationToken) {
        let every = (self.limits.lease / 4).max(Duration::from_millis(50));
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(every) => {}
            }
            let held: Vec<(DeliveryId, Uuid)> = self
                .held()
                .iter()
                .map(|(id, held)| (*id, held.claim_token))
                .collect();
            for chunk in held.chunks(RENEW_CHUNK) {
                let started = Instant::now();
                match deliveries::renew_leases(&pool, chunk, self.limits.lease).await {
                    Ok(renewed) => self.renewed(chunk, &renewed, started + self.limits.lease),
                    Err(error) => {
                        tracing::warn!(%error, count = chunk.len(), "could not renew webhook leases");
                    }
                }
            }
        }
    }

    fn renewed(
        &self,
        asked: &[(DeliveryId, Uuid)],
        renewed: &[(DeliveryId, Uuid)],
        lease_until: Instant,
    ) {
        let renewed: std::collections::HashSet<&(DeliveryId, Uuid)> = renewed.iter().collect();
        let mut held = self.held();
        for claim in asked {
            let (id, token) = claim;
            let Some(entry) = held.get_mut(id).filter(|entry| entry.claim_token == *token) else {
                continue;
            };
            if renewed.contains(claim) {
                entry.lease_until = lease_until;
            } else {
                tracing::info!(delivery_id = %id, "webhook delivery no longer held by this worker");
                held.remove(id);
            }
        }
    }

    fn defer(&self, delivery: &ClaimedDelivery) {
        metrics::counter!("flow_webhook_attempts_total", "result" => "deferred").increment(1);
        self.report(AttemptOutcome {
            delivery_id: delivery.id,
            endpoint_id: delivery.endpoint_id,
            claim_token: delivery.claim_token,
            attempt: delivery.attempts,
            attempted_at: Utc::now(),
            status_code: None,
            latency_ms: 0,
            error: None,
            response_excerpt: None,
            next: NextStep::Deferred(Utc::now() + chrono::Duration::seconds(1)),
            verdict: EndpointVerdict::Unchanged,
        });
    }

    /// Endpoints whose queue is full (the poller does not claim for them), forgetting idle ones
    /// that answered their last attempt in time and with success (what is known of the others
    /// keeps their next first attempts off the inline path).
    pub fn saturated(&self) -> Vec<WebhookEndpointId> {
        let mut slots = self
            .slots
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        slots.retain(|_, slot| {
            Arc::strong_count(slot) > 1
                || slot.queued.load(Ordering::Acquire) > 0
                || slot.failing.load(Ordering::Acquire)
                || slot.slow.load(Ordering::Acquire)
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

/// What [`Dispatcher::attempt_inline`] did with a delivery.
pub enum Inline {
    /// Its first attempt is starting.
    Started(InlineAttempt),
    /// Its endpoint takes no inline attempt now: the delivery is to be written, then dispatched.
    Declined(ClaimedDelivery),
}

/// A first attempt started before its delivery was written.
pub struct InlineAttempt {
    delivery: ClaimedDelivery,
    started: oneshot::Receiver<()>,
    outcome: oneshot::Receiver<AttemptOutcome>,
}

/// Where an inline attempt stands when its wait ends.
pub enum Settled {
    /// Answered: the delivery is written with this outcome.
    Attempted(ClaimedDelivery, AttemptOutcome),
    /// Still under way: the delivery is written as claimed, and the outcome recorded when it comes
    /// ([`Dispatcher::record_later`]).
    UnderWay(ClaimedDelivery, oneshot::Receiver<AttemptOutcome>),
    /// Never sent (no request slot in time): the delivery is written as claimed and dispatched.
    Unsent(ClaimedDelivery),
}

impl InlineAttempt {
    /// Waits for the attempt until `deadline`, then says where it stands.
    pub async fn settle(mut self, deadline: Instant) -> Settled {
        match tokio::time::timeout_at(deadline, &mut self.outcome).await {
            Ok(Ok(outcome)) => Settled::Attempted(self.delivery, outcome),
            // The task ended without an outcome: it gave up before sending (or, had it started,
            // it failed mid-attempt and the delivery is sent again after its lease).
            Ok(Err(_)) => match self.started.try_recv() {
                Ok(()) => Settled::UnderWay(self.delivery, self.outcome),
                Err(_) => Settled::Unsent(self.delivery),
            },
            // A task still waiting for a request slot gives up at the same deadline, so this
            // answer comes at once.
            Err(_) => match self.started.await {
                Ok(()) => Settled::UnderWay(self.delivery, self.outcome),
                Err(_) => Settled::Unsent(self.delivery),
            },
        }
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

/// Writes outcomes in batches until every sender is gone.
///
/// A batch that fails on a transient error (connection, deadlock) is retried with backoff; the
/// deliveries' leases keep them safe meanwhile (an unrecorded attempt is attempted again after
/// its lease, which at-least-once delivery allows). A batch that fails otherwise is written again
/// one outcome at a time, so an outcome that cannot be stored costs only itself.
pub async fn record_outcomes(
    pool: PgPool,
    mut outcomes: mpsc::UnboundedReceiver<AttemptOutcome>,
    unrecorded: Arc<Unrecorded>,
    disable_after: Duration,
) {
    let mut batch = Vec::with_capacity(1_000);
    while outcomes.recv_many(&mut batch, 1_000).await > 0 {
        match write_retrying(&pool, &batch, disable_after).await {
            Ok(()) => {}
            Err(error) if flow_common::db::is_transient(&error) => {
                tracing::error!(%error, count = batch.len(), "dropping attempt records; the deliveries will be attempted again when their lease ends");
            }
            Err(error) if batch.len() > 1 => {
                tracing::warn!(%error, count = batch.len(), "could not record a batch of attempts; recording them one by one");
                for outcome in &batch {
                    if let Err(error) =
                        write_retrying(&pool, std::slice::from_ref(outcome), disable_after).await
                    {
                        drop_outcome(outcome, &error);
                    }
                }
            }
            Err(error) => {
                for outcome in &batch {
                    drop_outcome(outcome, &error);
                }
            }
        }
        unrecorded.written(batch.len());
        batch.clear();
    }
}

fn drop_outcome(outcome: &AttemptOutcome, error: &sqlx::Error) {
    metrics::counter!("flow_webhook_unrecorded_outcomes_total").increment(1);
    tracing::error!(
        %error,
        delivery_id = %outcome.delivery_id,
        endpoint_id = %outcome.endpoint_id,
        "could not record a webhook attempt; the delivery will be attempted again when its lease ends"
    );
}

/// Writes `batch` in one transaction, retrying transient errors with backoff.
async fn write_retrying(
    pool: &PgPool,
    batch: &[AttemptOutcome],
    disable_after: Duration,
) -> Result<(), sqlx::Error> {
    let mut delays = Backoff::transaction().take(20);
    loop {
        match deliveries::record_outcomes(pool, batch, disable_after).await {
            Ok(recorded) => {
                for endpoint in recorded.disabled {
                    tracing::warn!(
                        endpoint_id = %endpoint.id,
                        reason = endpoint.disabled_reason.as_deref().unwrap_or(""),
                        "webhook endpoint disabled"
                    );
                }
                if !recorded.stale.is_empty() {
                    metrics::counter!("flow_webhook_stale_outcomes_total")
                        .increment(recorded.stale.len() as u64);
                    tracing::info!(
                        count = recorded.stale.len(),
                        deliveries = ?recorded.stale,
                        "attempts not recorded: their deliveries were deleted or are held by a newer claim"
                    );
                }
                return Ok(());
            }
            Err(error) => match delays.next() {
                Some(delay) if flow_common::db::is_transient(&error) => {
                    tracing::warn!(%error, ?delay, count = batch.len(), "could not record attempts; retrying");
                    tokio::time::sleep(delay).await;
                }
                _ => return Err(error),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::Unrecorded;

    #[tokio::test]
    async fn the_consumer_waits_while_the_recorder_is_behind_and_goes_on_once_it_writes() {
        let unrecorded = Arc::new(Unrecorded::default());
        for _ in 0..3 {
            unrecorded.add();
        }
        tokio::time::timeout(Duration::from_millis(50), unrecorded.below(4))
            .await
            .expect("under the limit: no wait");
        let waiting = tokio::spawn({
            let unrecorded = unrecorded.clone();
            async move { unrecorded.below(3).await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiting.is_finished(), "at the limit: it waits");
        unrecorded.written(1);
        tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("a write wakes it")
            .expect("the task");
        // Outcomes sent to the recorder without being counted never take the count below zero.
        unrecorded.written(10);
        assert_eq!(unrecorded.count(), 0);
    }
}
