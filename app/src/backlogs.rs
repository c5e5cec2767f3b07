//! What waits for a worker, all organizations together, as the gauges an alert uses read it
//! (each polled by the role that works it off): unpublished outbox events, webhook deliveries
//! due, schedules due, users whose enrollment evaluation is pending, backfills waiting, dead
//! letters waiting, exports waiting. Cheap indexed counts; errors are Postgres's own.

use flow_common::db::{
    dead_letters, enrollment_backfills, enrollment_rules, exports, outbox, schedules, webhooks,
};
use sqlx::PgPool;

/// Events written and not yet published (counted up to `outbox::BACKLOG_COUNT_LIMIT`) and the age
/// in seconds of the oldest of them.
pub async fn outbox(pool: &PgPool) -> Result<(i64, Option<f64>), sqlx::Error> {
    outbox::backlog(pool).await
}

/// Pending webhook deliveries whose attempt time has come.
pub async fn webhook_deliveries_due(pool: &PgPool) -> Result<i64, sqlx::Error> {
    webhooks::fan_out::due_count(pool).await
}

/// Recurring schedules whose occurrence is due and not yet assigned.
pub async fn schedules_due(pool: &PgPool) -> Result<i64, sqlx::Error> {
    schedules::due_count(pool).await
}

/// Users whose enrollment evaluation is still pending (their write's own evaluation has not
/// finished, or did not: the scheduler drains them after a grace period).
pub async fn enrollment_pending(pool: &PgPool) -> Result<i64, sqlx::Error> {
    enrollment_rules::pending_count(pool).await
}

/// Backfills of enrollment rules queued or running.
pub async fn backfills_waiting(pool: &PgPool) -> Result<i64, sqlx::Error> {
    enrollment_backfills::waiting_count(pool).await
}

/// Dead letters recorded and not yet replayed or discarded.
pub async fn dead_letters(pool: &PgPool) -> Result<i64, sqlx::Error> {
    dead_letters::pending_count(pool).await
}

/// Exports a report-worker could claim now and has not.
pub async fn exports_waiting(pool: &PgPool) -> Result<i64, sqlx::Error> {
    exports::waiting_count(pool).await
}
