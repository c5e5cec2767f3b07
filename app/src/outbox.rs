//! The outbox, as the relay works it off: claim the next batch of a lane's events (holding the
//! lane's cursor, so relays take turns), read the bulk-lane place of their organizations, move
//! the cursor past them once the broker confirmed them, and prune published events. Errors are
//! Postgres's own.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use flow_common::amqp::Lane;
use flow_common::db::orgs;
use flow_common::db::outbox::{self, PendingEvent};
use flow_domain::ids::OrgId;
use sqlx::PgPool;

/// A lane's cursor, held by the relay that claimed it ([`next_batch`]) until it commits.
pub struct Turn {
    transaction: sqlx::Transaction<'static, sqlx::Postgres>,
    lane: Lane,
}

/// Takes the cursor of `lane` and the next (up to) `limit` events past it, in outbox order; no
/// events when another relay holds the cursor or none are ready.
pub async fn next_batch(
    pool: &PgPool,
    lane: Lane,
    limit: i64,
) -> Result<(Turn, Vec<PendingEvent>), sqlx::Error> {
    let mut transaction = pool.begin().await?;
    let events = outbox::next_batch(&mut transaction, lane, limit)
        .await?
        .unwrap_or_default();
    Ok((Turn { transaction, lane }, events))
}

impl Turn {
    /// The bulk-lane numbers of the organizations `ids` (an organization that is gone is absent).
    pub async fn bulk_lanes(&mut self, ids: &[OrgId]) -> Result<HashMap<OrgId, i64>, sqlx::Error> {
        orgs::bulk_lanes(&mut *self.transaction, ids).await
    }

    /// Moves the cursor past the event `seq` and commits: those events are relayed.
    pub async fn advance(mut self, seq: i64) -> Result<(), sqlx::Error> {
        outbox::advance(&mut self.transaction, self.lane, seq).await?;
        self.transaction.commit().await
    }

    /// Gives the cursor back, unmoved.
    pub async fn release(self) -> Result<(), sqlx::Error> {
        self.transaction.commit().await
    }
}

/// Deletes up to `limit` published events written before `before`; returns how many.
pub async fn prune(pool: &PgPool, before: DateTime<Utc>, limit: i64) -> Result<u64, sqlx::Error> {
    outbox::prune(pool, before, limit).await
}
