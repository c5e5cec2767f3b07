//! The scheduler's share of enrollment rules (docs/enrollment-rules.md), in two tasks of their
//! own, so that neither holds the other (nor the overdue scan and the schedules): every interval,
//! one evaluates the users whose evaluation a write left pending past the grace period, or
//! deferred for the assign limit ([`flow_app::engine::enrollment::drain`]); the other runs the
//! backfills waiting, a turn at a time, in turns per organization
//! ([`flow_app::engine::enrollment::run_backfill`]).

use std::time::Duration;

use flow_app::engine::enrollment::{self as enrollment, BackfillRun, DrainSettings};
use flow_common::amqp::{BatchLimits, BatchPublisher, BatchTarget, Publisher};

use super::{ROLE, SchedulerConfig};
use crate::runtime::Runtime;

/// Assign commands per broker message.
const PUBLISH_BATCH: usize = 500;

/// Starts the tasks.
pub fn start(config: &SchedulerConfig, runtime: &Runtime, publisher: &Publisher) {
    let interval = Duration::from_millis(config.interval_ms.max(10));
    let lease = Duration::from_millis(config.enrollment_lease_ms.max(1_000));
    let settings = DrainSettings {
        grace: Duration::from_millis(config.enrollment_grace_ms),
        lease,
        batch: config.enrollment_drain_batch.max(1),
    };
    let drain_liveness = runtime.liveness(
        "enrollment pending",
        Some(interval.saturating_mul(2) + lease + Duration::from_secs(300)),
    );
    // A turn of a backfill is a few pages, each within the lease.
    let backfill_liveness = runtime.liveness(
        "enrollment backfills",
        Some(interval.saturating_mul(2) + lease + Duration::from_secs(300)),
    );
    let (pool, drain_publisher) = (runtime.pool.clone(), publisher.clone());
    runtime.spawn("enrollment pending evaluations", move |stop| async move {
        let commands = batch_publisher(&drain_publisher, &stop);
        while !stop.is_cancelled() {
            drain_liveness.beat();
            drain_round(&pool, &commands, settings).await;
            stop.run_until_cancelled(tokio::time::sleep(interval)).await;
        }
    });
    let (pool, backfill_publisher) = (runtime.pool.clone(), publisher.clone());
    runtime.spawn("enrollment backfills", move |stop| async move {
        let commands = batch_publisher(&backfill_publisher, &stop);
        while !stop.is_cancelled() {
            backfill_liveness.beat();
            backfill_round(&pool, &commands, lease, &stop).await;
            stop.run_until_cancelled(tokio::time::sleep(interval)).await;
        }
    });
}

/// A publisher of assign commands in batches, until `stop`.
pub fn batch_publisher(
    publisher: &Publisher,
    stop: &tokio_util::sync::CancellationToken,
) -> BatchPublisher {
    BatchPublisher::start(
        publisher.clone(),
        BatchTarget::assign_commands(publisher.topology()),
        BatchLimits {
            max_batch: PUBLISH_BATCH,
            in_flight: 2,
            fill_wait: Duration::from_millis(5),
        },
        stop.clone(),
    )
}

/// One round of the pending evaluations.
pub async fn drain_round(pool: &sqlx::PgPool, publisher: &BatchPublisher, settings: DrainSettings) {
    match enrollment::drain(pool, publisher, settings).await {
        Ok(0) => {}
        Ok(count) => {
            metrics::counter!("flow_worker_messages_total", "worker" => ROLE, "outcome" => "enrollment_pending_evaluated")
                .increment(count);
        }
        Err(error) => tracing::warn!(
            role = ROLE,
            %error,
            "pending enrollment evaluations failed; retrying next round"
        ),
    }
}

/// One round of backfills: turns of the backfills waiting, in turns per organization, until none
/// is left to take up now (or shutdown).
pub async fn backfill_round(
    pool: &sqlx::PgPool,
    publisher: &BatchPublisher,
    lease: Duration,
    stop: &tokio_util::sync::CancellationToken,
) {
    while !stop.is_cancelled() {
        match enrollment::run_backfill(pool, publisher, lease).await {
            Ok(None) => return,
            Ok(Some(BackfillRun::Finished(_) | BackfillRun::Lost(_) | BackfillRun::Paused(_))) => {}
            // Its failure may pass: the next round (or another scheduler) resumes it.
            Ok(Some(BackfillRun::Released(_))) => return,
            Err(error) => {
                tracing::warn!(role = ROLE, %error, "backfill failed; retrying next round");
                return;
            }
        }
    }
}
