//! The scheduler's share of inbound events (docs/events.md), in a task of its own: every
//! interval it publishes the events' actions left unpublished past a grace period (the request's
//! publish failed, or its API stopped between the commit and the publish:
//! [`flow_app::events::republish_stale`]), and every ten minutes it deletes the events past the
//! retention ([`flow_app::events::prune`]).

use std::time::{Duration, Instant};

use chrono::Utc;
use flow_common::amqp::Publisher;

use super::{ROLE, SchedulerConfig};
use crate::runtime::Runtime;

/// How long an action is left to the request that recorded it.
const GRACE: Duration = Duration::from_secs(30);

/// Most actions published per round, and events deleted per pruning statement.
const BATCH: i64 = 1_000;

/// How often the events past the retention are deleted.
const PRUNE_EVERY: Duration = Duration::from_secs(600);

/// Starts the task.
pub fn start(config: &SchedulerConfig, runtime: &Runtime, publisher: &Publisher) {
    let interval = Duration::from_millis(config.interval_ms.max(10));
    let liveness = runtime.liveness(
        "inbound events",
        Some(interval.saturating_mul(2) + Duration::from_secs(300)),
    );
    let (pool, publisher) = (runtime.pool.clone(), publisher.clone());
    runtime.spawn("inbound events", move |stop| async move {
        let commands = super::enrollment::batch_publisher(&publisher, &stop);
        let mut last_prune: Option<Instant> = None;
        while !stop.is_cancelled() {
            liveness.beat();
            match flow_app::events::republish_stale(&pool, &commands, GRACE, BATCH).await {
                Ok(0) => {}
                Ok(count) => {
                    tracing::info!(role = ROLE, count, "inbound event actions republished")
                }
                Err(error) => tracing::warn!(
                    role = ROLE,
                    %error,
                    "republishing inbound event actions failed; retrying next round"
                ),
            }
            if last_prune.is_none_or(|at| at.elapsed() > PRUNE_EVERY) {
                last_prune = Some(Instant::now());
                prune(&pool).await;
            }
            stop.run_until_cancelled(tokio::time::sleep(interval)).await;
        }
    });
}

/// Deletes the events past the retention, a batch at a time.
async fn prune(pool: &sqlx::PgPool) {
    loop {
        match flow_app::events::prune(pool, Utc::now(), BATCH).await {
            Ok(deleted) if deleted < BATCH as u64 => return,
            Ok(_) => {}
            Err(error) => {
                tracing::warn!(role = ROLE, %error, "could not prune inbound events");
                return;
            }
        }
    }
}
