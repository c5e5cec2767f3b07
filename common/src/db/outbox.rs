//! The transactional outbox: events are written with the state change that causes them, and the
//! relay publishes them to the events exchange afterwards.

use chrono::{DateTime, Utc};
use sqlx::{FromRow, PgConnection, PgExecutor};

use crate::events::NewEvent;
use crate::ids::{AssignmentId, EventId, OrgId};

/// Writes `events` (in the caller's transaction) and wakes the relays when it commits. An event
/// whose id is already in the outbox is not written again: ids are derived from what the event is
/// about, so a second write of the same transition is a no-op whatever path produced it.
pub async fn insert(connection: &mut PgConnection, events: &[NewEvent]) -> Result<(), sqlx::Error> {
    if events.is_empty() {
        return Ok(());
    }
    let ids: Vec<EventId> = events.iter().map(|event| event.id).collect();
    let orgs: Vec<OrgId> = events.iter().map(|event| event.org_id).collect();
    let types: Vec<&str> = events
        .iter()
        .map(|event| event.event_type.as_str())
        .collect();
    let assignments: Vec<AssignmentId> = events.iter().map(|event| event.assignment_id).collect();
    let bodies: Vec<&serde_json::Value> = events.iter().map(|event| &event.body).collect();
    let traceparents: Vec<Option<&str>> = events
        .iter()
        .map(|event| event.traceparent.as_deref())
        .collect();
    sqlx::query(
        "INSERT INTO outbox (event_id, org_id, event_type, assignment_id, payload, traceparent)
         SELECT * FROM UNNEST($1::uuid[], $2::uuid[], $3::text[], $4::uuid[], $5::jsonb[],
                              $6::text[])
         ON CONFLICT (event_id) DO NOTHING",
    )
    .bind(&ids)
    .bind(&orgs)
    .bind(&types)
    .bind(&assignments)
    .bind(&bodies)
    .bind(&traceparents)
    .execute(&mut *connection)
    .await?;
    super::notify(&mut *connection, super::OUTBOX_CHANNEL, "").await
}

/// An event waiting to be published.
#[derive(Debug, Clone, FromRow)]
pub struct PendingEvent {
    /// Position in the outbox.
    pub seq: i64,
    /// Event id.
    pub event_id: EventId,
    /// Organization.
    pub org_id: OrgId,
    /// Type (the routing key).
    pub event_type: String,
    /// Body.
    pub payload: serde_json::Value,
    /// When the state change was written.
    pub created_at: DateTime<Utc>,
    /// W3C trace context of the work that caused the event, published with it.
    pub traceparent: Option<String>,
}

/// Locks up to `limit` unpublished events, oldest first, skipping rows another relay holds: call
/// inside a transaction and mark them with [`mark_published`] before committing.
pub async fn claim(
    connection: &mut PgConnection,
    limit: i64,
) -> Result<Vec<PendingEvent>, sqlx::Error> {
    sqlx::query_as(
        "SELECT seq, event_id, org_id, event_type, payload, created_at, traceparent FROM outbox
         WHERE published_at IS NULL
         ORDER BY seq
         LIMIT $1
         FOR UPDATE SKIP LOCKED",
    )
    .bind(limit)
    .fetch_all(&mut *connection)
    .await
}

/// Records that the broker confirmed these events.
pub async fn mark_published(
    connection: &mut PgConnection,
    seqs: &[i64],
) -> Result<(), sqlx::Error> {
    sqlx::query("UPDATE outbox SET published_at = now() WHERE seq = ANY($1)")
        .bind(seqs)
        .execute(&mut *connection)
        .await
        .map(|_| ())
}

/// Deletes events published before `before`, at most `limit` at a time; returns how many.
pub async fn prune<'e>(
    executor: impl PgExecutor<'e>,
    before: DateTime<Utc>,
    limit: i64,
) -> Result<u64, sqlx::Error> {
    sqlx::query(
        "DELETE FROM outbox WHERE seq IN (
            SELECT seq FROM outbox WHERE published_at < $1 ORDER BY published_at LIMIT $2)",
    )
    .bind(before)
    .bind(limit)
    .execute(executor)
    .await
    .map(|result| result.rows_affected())
}
