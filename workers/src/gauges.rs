//! Gauges an alert can use, polled from Postgres by the role that owns the table: the outbox
//! backlog (outbox-relay), webhook deliveries due (webhook-worker), schedules due (scheduler),
//! dead letters waiting (assign-worker, which records them), exports waiting (report-worker).
//! The counts are `flow_app::backlogs`'; each gauge is one round of `Runtime::gauge`, which polls
//! it.

use flow_app::backlogs;
use sqlx::PgPool;

/// `flow_outbox_backlog` (events not yet published, counted up to
/// `outbox::BACKLOG_COUNT_LIMIT`) and `flow_outbox_oldest_unpublished_seconds` (age of the
/// oldest of them, 0 when there is none).
pub async fn outbox(pool: PgPool) -> Result<(), sqlx::Error> {
    let (backlog, oldest_seconds) = backlogs::outbox(&pool).await?;
    metrics::gauge!("flow_outbox_backlog").set(backlog as f64);
    metrics::gauge!("flow_outbox_oldest_unpublished_seconds")
        .set(oldest_seconds.unwrap_or(0.0).max(0.0));
    Ok(())
}

/// `flow_webhook_deliveries_due`: pending deliveries whose attempt time has come (a backlog
/// here means the webhook-workers do not keep up).
pub async fn webhook_deliveries(pool: PgPool) -> Result<(), sqlx::Error> {
    let due = backlogs::webhook_deliveries_due(&pool).await?;
    metrics::gauge!("flow_webhook_deliveries_due").set(due as f64);
    Ok(())
}

/// `flow_schedules_due`: recurring schedules whose occurrence is due and not yet assigned.
pub async fn schedules(pool: PgPool) -> Result<(), sqlx::Error> {
    let due = backlogs::schedules_due(&pool).await?;
    metrics::gauge!("flow_schedules_due").set(due as f64);
    Ok(())
}

/// `flow_enrollment_pending`: users whose enrollment evaluation is still pending (their write's
/// own evaluation has not finished, or did not: the scheduler drains them after a grace period),
/// and `flow_enrollment_backfills_waiting`: backfills queued or running.
pub async fn enrollment(pool: PgPool) -> Result<(), sqlx::Error> {
    let pending = backlogs::enrollment_pending(&pool).await?;
    metrics::gauge!("flow_enrollment_pending").set(pending as f64);
    let waiting = backlogs::backfills_waiting(&pool).await?;
    metrics::gauge!("flow_enrollment_backfills_waiting").set(waiting as f64);
    Ok(())
}

/// `flow_dead_letters_pending`: dead letters recorded and not yet replayed or discarded.
pub async fn dead_letters(pool: PgPool) -> Result<(), sqlx::Error> {
    let pending = backlogs::dead_letters(&pool).await?;
    metrics::gauge!("flow_dead_letters_pending").set(pending as f64);
    Ok(())
}

/// `flow_exports_waiting`: exports that a report-worker could claim now and has not (waiting for
/// a free slot, or left by a worker that died): a backlog here means the report-workers do not
/// keep up, or none runs.
pub async fn exports_waiting(pool: PgPool) -> Result<(), sqlx::Error> {
    let waiting = backlogs::exports_waiting(&pool).await?;
    metrics::gauge!("flow_exports_waiting").set(waiting as f64);
    Ok(())
}
