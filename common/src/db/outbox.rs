//! The transactional outbox: events are written with the state change that causes them, and the
//! relay publishes them to the events exchange afterwards.

use chrono::{DateTime, Utc};
use flow_domain::events::{EventType, NewEvent};
use flow_domain::ids::{AssignmentId, EventId, OrgId};
use flow_domain::lane::Lane;
use sqlx::{FromRow, PgConnection, PgExecutor};

use super::Conflicts;

/// The outbox cursor of `lane` (migration 0151).
fn cursor_id(lane: Lane) -> i32 {
    match lane {
        Lane::Bulk => 1,
        Lane::Interactive => 2,
    }
}

/// The statement reading a lane's next events past its cursor (`$1` the limit, `$2` the horizon).
macro_rules! next_batch_statement {
    ($lane:literal, $cursor:literal) => {
        concat!(
            "SELECT o.seq, o.event_id, o.org_id, o.event_type, o.payload, o.created_at, o.traceparent
             FROM outbox_cursor c
             JOIN LATERAL (SELECT * FROM outbox o
                           WHERE (o.tx, o.seq) > (c.tx, c.seq) AND o.tx < $2::text::xid8 AND ",
            $lane,
            "
                           ORDER BY o.tx, o.seq
                           LIMIT $1) o ON true
             WHERE c.id = ",
            $cursor,
            "
             ORDER BY o.tx, o.seq"
        )
    };
}

/// The statement of [`write`], with what follows the insert (`ON CONFLICT …`, or nothing).
macro_rules! insert_statement {
    ($conflict:literal) => {
        concat!(
            "INSERT INTO outbox (event_id, org_id, event_type, assignment_id, payload, traceparent,
                                 interactive)
             SELECT *, $7 FROM UNNEST($1::uuid[], $2::uuid[], $3::text[], $4::uuid[], $5::jsonb[],
                                      $6::text[])
             ",
            $conflict
        )
    };
}

/// Writes `events` of `lane` (in the caller's transaction) and wakes the relays when it commits.
/// An event whose id is already in the outbox is not written again: ids are derived from what the
/// event is about, so a second write of the same transition is a no-op whatever path produced it.
pub async fn insert(
    connection: &mut PgConnection,
    lane: Lane,
    events: &[NewEvent],
) -> Result<(), sqlx::Error> {
    write(connection, lane, events, Conflicts::Handle).await
}

/// The one statement that writes outbox rows: `events` of `lane`, each typed by its
/// [`EventType`](flow_domain::events::EventType), then a notification that wakes the relays when
/// the transaction commits. With [`Conflicts::Handle`] an event whose id is taken is skipped; with
/// [`Conflicts::Fail`] (a caller's optimistic plain insert, see `insert_optimistically`) it fails
/// the statement.
pub(crate) async fn write(
    connection: &mut PgConnection,
    lane: Lane,
    events: &[NewEvent],
    conflicts: Conflicts,
) -> Result<(), sqlx::Error> {
    if events.is_empty() {
        return Ok(());
    }
    let ids: Vec<EventId> = events.iter().map(|event| event.id).collect();
    let orgs: Vec<OrgId> = events.iter().map(|event| event.org_id).collect();
    let types: Vec<EventType> = events.iter().map(|event| event.event_type).collect();
    let assignments: Vec<AssignmentId> = events.iter().map(|event| event.assignment_id).collect();
    let bodies: Vec<&serde_json::Value> = events.iter().map(|event| &event.body).collect();
    let traceparents: Vec<Option<&str>> = events
        .iter()
        .map(|event| event.traceparent.as_deref())
        .collect();
    sqlx::query(match conflicts {
        Conflicts::Fail => insert_statement!(""),
        Conflicts::Handle => insert_statement!("ON CONFLICT (event_id) DO NOTHING"),
    })
    .bind(&ids)
    .bind(&orgs)
    .bind(&types)
    .bind(&assignments)
    .bind(&bodies)
    .bind(&traceparents)
    .bind(lane == Lane::Interactive)
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
    /// Type (the routing key). Read loudly: a stored type this build does not know (written by a
    /// newer build) fails [`next_batch`] naming it, and the relay retries the batch instead of
    /// publishing under a routing key no consumer of this build binds; the events wait in the
    /// outbox until a build that knows the type relays them.
    pub event_type: EventType,
    /// Body, as the JSON text Postgres returns (the relay passes it on without parsing it).
    pub payload: Box<serde_json::value::RawValue>,
    /// When the state change was written.
    pub created_at: DateTime<Utc>,
    /// W3C trace context of the work that caused the event, published with it.
    pub traceparent: Option<String>,
}

/// Reads up to `limit` events of `lane` past the lane's cursor, in the order they are published,
/// and locks the cursor until the caller's transaction ends; call inside a transaction (as its
/// first statement) and move the cursor with [`advance`] once the broker confirmed them. `None`
/// when another relay holds the cursor. Each lane has its own cursor, so the lanes are relayed
/// side by side.
///
/// Only events written by transactions older than every transaction of this database still
/// running are read (see migration 0100): none can later appear before them. The horizon is taken
/// from this database's sessions, so a long transaction in another database of the same server
/// does not hold the events back (a transaction's snapshot would count every database's).
pub async fn next_batch(
    connection: &mut PgConnection,
    lane: Lane,
    limit: i64,
) -> Result<Option<Vec<PendingEvent>>, sqlx::Error> {
    // The horizon is read before the events' snapshot is taken (the next statement): a
    // transaction not running then, and older than the next transaction id, had ended then.
    let (locked, next_xid, running): (Option<i64>, String, Vec<String>) = sqlx::query_as(
        "WITH cursor AS (SELECT seq FROM outbox_cursor WHERE id = $1 FOR UPDATE SKIP LOCKED)
         SELECT (SELECT seq FROM cursor),
                pg_snapshot_xmax(pg_current_snapshot())::text,
                ARRAY(SELECT backend_xid::text FROM pg_stat_activity
                      WHERE datname = current_database() AND pid <> pg_backend_pid()
                        AND backend_xid IS NOT NULL)",
    )
    .bind(cursor_id(lane))
    .fetch_one(&mut *connection)
    .await?;
    if locked.is_none() {
        return Ok(None);
    }
    let horizon = horizon(&next_xid, &running)?;
    // The lane is written into the statement (not bound) so that the interactive lane's reads
    // use its partial index.
    let statement = match lane {
        Lane::Bulk => next_batch_statement!("NOT o.interactive", 1),
        Lane::Interactive => next_batch_statement!("o.interactive", 2),
    };
    sqlx::query_as(statement)
        .bind(limit)
        .bind(horizon.to_string())
        .fetch_all(&mut *connection)
        .await
        .map(Some)
}

/// The oldest transaction id (64-bit) that may still write: the oldest of `running` (32-bit ids
/// of this database's transactions), or `next` (the next id to be assigned) when none runs.
fn horizon(next: &str, running: &[String]) -> Result<u64, sqlx::Error> {
    let next: u64 = next
        .parse()
        .map_err(|_| sqlx::Error::Protocol(format!("unexpected transaction id {next}")))?;
    running.iter().try_fold(next, |oldest, xid| {
        let xid: u32 = xid
            .parse()
            .map_err(|_| sqlx::Error::Protocol(format!("unexpected transaction id {xid}")))?;
        Ok(oldest.min(widen(xid, next)))
    })
}

/// A 32-bit transaction id of a running transaction as its 64-bit id, given the next 64-bit id:
/// running transactions are less than 2^31 ids away from it, in either epoch.
fn widen(xid: u32, next: u64) -> u64 {
    let candidate = (next & !u64::from(u32::MAX)) | u64::from(xid);
    if candidate > next.saturating_add(1 << 31) {
        candidate.saturating_sub(1 << 32)
    } else {
        candidate
    }
}

/// Most events [`backlog`] counts: a larger backlog reads as this many (the alert fires at 50,000).
pub const BACKLOG_COUNT_LIMIT: i64 = 100_000;

/// Events written and not yet published (at most [`BACKLOG_COUNT_LIMIT`]) and the age in seconds
/// of the oldest of them, read past the cursor in the relay's order index (migration 0113).
pub async fn backlog<'e>(executor: impl PgExecutor<'e>) -> Result<(i64, Option<f64>), sqlx::Error> {
    sqlx::query_as(
        "SELECT backlog, extract(epoch FROM now() - oldest)::float8 FROM flow_outbox_backlog($1)",
    )
    .bind(BACKLOG_COUNT_LIMIT)
    .fetch_one(executor)
    .await
}

/// Most unpublished events of every organization [`backlog_of`] reads a lane to count one
/// organization's: it costs a page view at most this many index entries a lane.
pub const ORG_BACKLOG_SCAN_LIMIT: i64 = 10_000;

/// One organization's backlog: its events written and not yet published, counted among the first
/// [`ORG_BACKLOG_SCAN_LIMIT`] of each lane.
#[derive(Debug, Clone, Copy, PartialEq, Eq, FromRow)]
pub struct OrgBacklog {
    /// The organization's unpublished events found.
    pub backlog: i64,
    /// False when a lane held more unpublished events than were read: `backlog` is then a lower
    /// bound.
    pub complete: bool,
}

/// The unpublished events of `org_id` alone (an organization's view never counts another's).
pub async fn backlog_of<'e>(
    executor: impl PgExecutor<'e>,
    org_id: OrgId,
) -> Result<OrgBacklog, sqlx::Error> {
    sqlx::query_as("SELECT backlog, complete FROM flow_outbox_backlog_of($1, $2)")
        .bind(org_id)
        .bind(ORG_BACKLOG_SCAN_LIMIT)
        .fetch_one(executor)
        .await
}

/// Moves the cursor of `lane` to the event `seq` (the last of a batch [`next_batch`] read): it
/// and every event of the lane before it are published.
pub async fn advance(
    connection: &mut PgConnection,
    lane: Lane,
    seq: i64,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "UPDATE outbox_cursor SET (tx, seq) = (SELECT o.tx, o.seq FROM outbox o WHERE o.seq = $1)
         WHERE id = $2",
    )
    .bind(seq)
    .bind(cursor_id(lane))
    .execute(&mut *connection)
    .await
    .map(|_| ())
}

/// Deletes published events written before `before` among the first `limit` of the outbox's
/// order (the oldest); returns how many. It reads at most `limit` rows: looking further for old
/// events read every published row kept for the retention when none was old enough yet (3.9 s
/// with two million kept). An old event behind a younger one in that order (a transaction that
/// started long before it wrote) goes once the younger ones before it have. The order read is the
/// bulk lane's; an interactive event among those rows goes once its own lane's cursor is past it.
pub async fn prune<'e>(
    executor: impl PgExecutor<'e>,
    before: DateTime<Utc>,
    limit: i64,
) -> Result<u64, sqlx::Error> {
    sqlx::query(
        "DELETE FROM outbox WHERE seq IN (
            SELECT oldest.seq FROM (
                SELECT o.seq, o.tx, o.created_at, o.interactive FROM outbox o, outbox_cursor c
                WHERE c.id = 1 AND (o.tx, o.seq) <= (c.tx, c.seq)
                ORDER BY o.tx, o.seq
                LIMIT $2) oldest, outbox_cursor i
            WHERE i.id = 2 AND oldest.created_at < $1
              AND (NOT oldest.interactive OR (oldest.tx, oldest.seq) <= (i.tx, i.seq)))",
    )
    .bind(before)
    .bind(limit)
    .execute(executor)
    .await
    .map(|result| result.rows_affected())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn running_transaction_ids_widen_into_the_epoch_they_belong_to() {
        let epoch = 7u64 << 32;
        // Same epoch as the next id, before it or assigned just after it was read.
        assert_eq!(widen(1_000, epoch + 5_000), epoch + 1_000);
        assert_eq!(widen(5_010, epoch + 5_000), epoch + 5_010);
        // The next id has just crossed into a new epoch; the running one is from the last.
        assert_eq!(widen(u32::MAX - 10, epoch + 20), epoch - 11);
        assert_eq!(
            horizon("30064776192", &["4294967290".into(), "3".into()]).unwrap(),
            (7u64 << 32) - 6
        );
        assert_eq!(horizon("42", &[]).unwrap(), 42);
    }
}
