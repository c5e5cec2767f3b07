//! Deliveries, as the webhook-worker works them off: the endpoints each event goes to, the
//! delivery rows written once per event and endpoint (claimed, or with the outcome of a first
//! attempt made before the row), claims of due deliveries, lease renewals, and the outcomes of
//! attempts with their effect on the endpoints' health. Each write is one transaction; errors are
//! Postgres's own, so the worker can tell a transient one and retry.

use std::time::Duration;

use flow_common::db::webhooks::fan_out::{
    self, ClaimedDelivery, Created, IncomingEvent, NewDelivery, Target,
};
use flow_common::db::webhooks::outcomes::{self, AttemptOutcome, Recorded};
use flow_domain::ids::{DeliveryId, WebhookEndpointId};
use sqlx::PgPool;
use uuid::Uuid;

/// The events of `events` with repeats left out (an event published twice can sit twice in one
/// batch, and its delivery may be written once).
pub fn distinct(events: &[IncomingEvent]) -> Vec<&IncomingEvent> {
    fan_out::distinct_events(events)
}

/// The enabled endpoints each of `events` (distinct: see [`distinct`]) goes to that have no
/// delivery of it yet, so a redelivered or republished event is not sent again.
pub async fn targets(pool: &PgPool, events: &[&IncomingEvent]) -> Result<Vec<Target>, sqlx::Error> {
    fan_out::targets(pool, events, None).await
}

/// Writes the deliveries `rows` in one transaction (claimed for `lease`, or with the outcome of
/// their first attempt, whose failures count towards `disable_after`); returns the rows written
/// (or found claimed under the same token) and the endpoints the outcomes disabled.
pub async fn create(
    pool: &PgPool,
    rows: &[NewDelivery<'_>],
    lease: Duration,
    disable_after: Duration,
) -> Result<Created, sqlx::Error> {
    let mut transaction = pool.begin().await?;
    let created = fan_out::create_deliveries(&mut transaction, rows, lease, disable_after).await?;
    transaction.commit().await.map(|()| created)
}

/// Claims up to `limit` due deliveries (retries whose time has come, expired leases, test pings,
/// manual retries) for `lease`, leaving out the endpoints in `skip`.
pub async fn claim_due(
    pool: &PgPool,
    limit: i64,
    lease: Duration,
    skip: &[WebhookEndpointId],
) -> Result<Vec<ClaimedDelivery>, sqlx::Error> {
    fan_out::claim_due(pool, limit, lease, skip).await
}

/// Extends to `lease` from now the leases of the deliveries `held` (delivery and claim token)
/// still holds; returns those renewed (the others are no longer the caller's).
pub async fn renew_leases(
    pool: &PgPool,
    held: &[(DeliveryId, Uuid)],
    lease: Duration,
) -> Result<Vec<(DeliveryId, Uuid)>, sqlx::Error> {
    fan_out::renew_leases(pool, held, lease).await
}

/// Records a batch of attempts in one transaction: the attempt rows, each delivery's next step
/// and the endpoints' health (a 410, or failures for longer than `disable_after`, disable one).
pub async fn record_outcomes(
    pool: &PgPool,
    batch: &[AttemptOutcome],
    disable_after: Duration,
) -> Result<Recorded, sqlx::Error> {
    let mut transaction = pool.begin().await?;
    let recorded = outcomes::record_outcomes(&mut transaction, batch, disable_after).await?;
    transaction.commit().await.map(|()| recorded)
}
