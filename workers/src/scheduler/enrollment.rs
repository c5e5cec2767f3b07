//! The scheduler's share of enrollment rules (docs/enrollment-rules.md): every interval, the
//! users whose evaluation a write left pending past the grace period are evaluated
//! ([`flow_common::enrollment::drain`]), then the backfills waiting are run one after the other
//! ([`flow_common::enrollment::run_backfill`]). A task of its own, so a long backfill does not
//! hold the overdue scan or the schedules.

use std::time::Duration;

use flow_common::amqp::{BatchLimits, BatchPublisher, BatchTarget, Publisher};
use flow_common::enrollment::{self, BackfillRun, DrainSettings};

use super::{ROLE, SchedulerConfig};
use crate::runtime::Runtime;

/// Assign commands per broker message.
const PUBLISH_BATCH: usize = 500;

/// Starts the task.
pub fn start(config: &SchedulerConfig, runtime: &Runtime, publisher: &Publisher) {
    let interval = Duration::from_millis(config.interval_ms.max(10));
    let lease = Duration::from_millis(config.enrollment_lease_ms.max(1_000));
    let settings = DrainSettings {
        grace: Duration::from_millis(config.enrollment_grace_ms),
        lease,
        batch: config.enrollment_drain_batch.max(1),
    };
    // A round may run a backfill of many users: as long as the lease per page, and then some.
    let liveness = runtime.liveness(
        "enrollment",
        Some(interval.saturating_mul(2) + lease + Duration::from_secs(300)),
    );
    let pool = runtime.pool.clone();
    let publisher = publisher.clone();
    runtime.spawn("enrollment rules", move |stop| async move {
        let commands = BatchPublisher::start(
            publisher.clone(),
            BatchTarget::assign_commands(publisher.topology()),
            BatchLimits {
                max_batch: PUBLISH_BATCH,
                in_flight: 2,
                fill_wait: Duration::from_millis(5),
            },
            stop.clone(),
        );
        while !stop.is_cancelled() {
            liveness.beat();
            round(&pool, &commands, settings, &stop).await;
            stop.run_until_cancelled(tokio::time::sleep(interval)).await;
        }
    });
}

/// One round: the pending evaluations, then the backfills waiting (until shutdown).
pub async fn round(
    pool: &sqlx::PgPool,
    publisher: &BatchPublisher,
    settings: DrainSettings,
    stop: &tokio_util::sync::CancellationToken,
) {
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
    while !stop.is_cancelled() {
        match enrollment::run_backfill(pool, publisher, settings.lease).await {
            Ok(None) => return,
            Ok(Some(BackfillRun::Finished(_) | BackfillRun::Lost(_))) => {}
            // Its failure may pass: the next round (or another scheduler) resumes it.
            Ok(Some(BackfillRun::Released(_))) => return,
            Err(error) => {
                tracing::warn!(role = ROLE, %error, "backfill failed; retrying next round");
                return;
            }
        }
    }
}
