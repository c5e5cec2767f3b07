//! The delivery log (the API's and the dashboard's reads and actions): deliveries and attempts of
//! an endpoint, manual retries, test pings, and an organization's open backlog.

use chrono::{DateTime, Utc};
use flow_domain::ids::{AssignmentId, DeliveryId, EventId, OrgId, WebhookEndpointId};
use flow_domain::webhook::DeliveryStatus;
use sqlx::{FromRow, PgConnection, PgExecutor};

use super::endpoints::Endpoint;

/// Creates a `webhook.test` delivery to one endpoint, due now, and wakes the webhook-workers;
/// `None` when the endpoint was deleted meanwhile (its row is locked against deletion while the
/// delivery is written).
pub async fn create_test_delivery(
    connection: &mut PgConnection,
    endpoint: &Endpoint,
    event_id: EventId,
    payload: &serde_json::Value,
    at: DateTime<Utc>,
) -> Result<Option<DeliveryId>, sqlx::Error> {
    let id = DeliveryId::new();
    let written = sqlx::query(
        "WITH endpoint AS (
            SELECT id FROM webhook_endpoints WHERE id = $3 AND org_id = $2 FOR KEY SHARE
         )
         INSERT INTO webhook_deliveries (id, org_id, endpoint_id, event_id, event_type, payload,
                                         event_at)
         SELECT $1, $2, endpoint.id, $4, $5, $6, $7 FROM endpoint",
    )
    .bind(id)
    .bind(endpoint.org_id)
    .bind(endpoint.id)
    .bind(event_id)
    .bind(flow_domain::events::TEST_EVENT_TYPE)
    .bind(payload)
    .bind(at)
    .execute(&mut *connection)
    .await?;
    if written.rows_affected() == 0 {
        return Ok(None);
    }
    crate::db::notify(&mut *connection, crate::db::WEBHOOK_CHANNEL, "").await?;
    Ok(Some(id))
}

/// A delivery as the API lists it.
#[derive(Debug, Clone, FromRow)]
pub struct DeliveryRecord {
    /// Delivery.
    pub id: DeliveryId,
    /// Endpoint.
    pub endpoint_id: WebhookEndpointId,
    /// Event id.
    pub event_id: EventId,
    /// Event type.
    pub event_type: String,
    /// Body sent.
    pub payload: serde_json::Value,
    /// Where it stands (a name this build does not know fails the read).
    pub status: DeliveryStatus,
    /// Attempts made.
    pub attempts: i32,
    /// Next attempt (pending only).
    pub next_attempt_at: DateTime<Utc>,
    /// Status code of the last attempt.
    pub last_status_code: Option<i32>,
    /// Error of the last attempt.
    pub last_error: Option<String>,
    /// Creation.
    pub created_at: DateTime<Utc>,
    /// Success time.
    pub delivered_at: Option<DateTime<Utc>>,
}

/// The columns of a [`DeliveryRecord`], of `webhook_deliveries d`: every read of deliveries (the
/// API's log and the dashboard's search) selects these.
pub(crate) const DELIVERY_COLUMNS: &str = "d.id, d.endpoint_id, d.event_id, d.event_type, d.payload, \
    d.status, d.attempts, d.next_attempt_at, d.last_status_code, d.last_error, d.created_at, \
    d.delivered_at";

/// Filters of the delivery log; empty lists and `None` do not filter.
#[derive(Debug, Clone, Default)]
pub struct DeliverySearch {
    /// Any of these statuses (pending, delivering, succeeded, failed).
    pub statuses: Vec<String>,
    /// Any of these event types.
    pub event_types: Vec<String>,
    /// Created at or after.
    pub from: Option<DateTime<Utc>>,
    /// Created before.
    pub to: Option<DateTime<Utc>>,
    /// The delivery of this event.
    pub event_id: Option<EventId>,
    /// This very delivery.
    pub delivery_id: Option<DeliveryId>,
    /// Deliveries of events about this assignment.
    pub assignment_id: Option<AssignmentId>,
}

/// A page of an endpoint's deliveries that pass `search`, newest first, before the
/// `(created_at, id)` cursor: the one read of the delivery log, for the API's list (at most one
/// status) and the dashboard's search.
pub async fn search_deliveries<'e>(
    executor: impl PgExecutor<'e>,
    org_id: OrgId,
    endpoint_id: WebhookEndpointId,
    search: &DeliverySearch,
    before: Option<(DateTime<Utc>, DeliveryId)>,
    limit: i64,
) -> Result<Vec<DeliveryRecord>, sqlx::Error> {
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {DELIVERY_COLUMNS} FROM webhook_deliveries d
         WHERE d.endpoint_id = $1 AND d.org_id = $2
           AND (cardinality($3::text[]) = 0 OR d.status = ANY ($3))
           AND (cardinality($4::text[]) = 0 OR d.event_type = ANY ($4))
           AND ($5::timestamptz IS NULL OR d.created_at >= $5)
           AND ($6::timestamptz IS NULL OR d.created_at < $6)
           AND ($7::uuid IS NULL OR d.event_id = $7)
           AND ($8::uuid IS NULL OR d.id = $8)
           AND ($9::text IS NULL OR d.payload -> 'data' ->> 'assignmentId' = $9)
           AND ($10::timestamptz IS NULL OR (d.created_at, d.id) < ($10, $11))
         ORDER BY d.created_at DESC, d.id DESC
         LIMIT $12"
    )))
    .bind(endpoint_id)
    .bind(org_id)
    .bind(&search.statuses)
    .bind(&search.event_types)
    .bind(search.from)
    .bind(search.to)
    .bind(search.event_id)
    .bind(search.delivery_id)
    .bind(search.assignment_id.map(|id| id.to_string()))
    .bind(before.map(|(at, _)| at))
    .bind(before.map(|(_, id)| id))
    .bind(limit)
    .fetch_all(executor)
    .await
}

/// One attempt of a delivery.
#[derive(Debug, Clone, FromRow)]
pub struct AttemptRecord {
    /// Delivery.
    pub delivery_id: DeliveryId,
    /// Number (1-based).
    pub attempt: i32,
    /// When it was sent.
    pub attempted_at: DateTime<Utc>,
    /// HTTP status, when a response came.
    pub status_code: Option<i32>,
    /// Time to the response or failure.
    pub latency_ms: i32,
    /// Transport error or refusal.
    pub error: Option<String>,
    /// Start of the response body.
    pub response_excerpt: Option<String>,
}

/// The attempts of several deliveries, in order.
pub async fn attempts<'e>(
    executor: impl PgExecutor<'e>,
    deliveries: &[DeliveryId],
) -> Result<Vec<AttemptRecord>, sqlx::Error> {
    sqlx::query_as(
        "SELECT delivery_id, attempt, attempted_at, status_code, latency_ms, error, response_excerpt
         FROM webhook_attempts WHERE delivery_id = ANY ($1)
         ORDER BY delivery_id, attempt",
    )
    .bind(deliveries)
    .fetch_all(executor)
    .await
}

/// Why a delivery cannot be retried now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryRefusal {
    /// No such delivery in the organization.
    NotFound,
    /// An attempt is under way.
    InFlight,
    /// It was delivered already; a delivery that succeeded is never moved back.
    Succeeded,
}

/// Queues a delivery for one more attempt now (a failed delivery gets exactly one; a pending one
/// is brought forward), and wakes the webhook-workers. A delivery under way or already delivered
/// is refused.
pub async fn retry(
    connection: &mut PgConnection,
    org_id: OrgId,
    id: DeliveryId,
) -> Result<Result<DeliveryRecord, RetryRefusal>, sqlx::Error> {
    let status: Option<String> = sqlx::query_scalar(
        "SELECT status FROM webhook_deliveries WHERE id = $1 AND org_id = $2 FOR UPDATE",
    )
    .bind(id)
    .bind(org_id)
    .fetch_optional(&mut *connection)
    .await?;
    match status.as_deref() {
        None => return Ok(Err(RetryRefusal::NotFound)),
        Some("delivering") => return Ok(Err(RetryRefusal::InFlight)),
        Some("succeeded") => return Ok(Err(RetryRefusal::Succeeded)),
        Some(_) => {}
    }
    let record = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "UPDATE webhook_deliveries d SET status = 'pending', next_attempt_at = now(),
                lease_until = NULL, claim_token = NULL
         WHERE d.id = $1 RETURNING {DELIVERY_COLUMNS}"
    )))
    .bind(id)
    .fetch_one(&mut *connection)
    .await?;
    crate::db::notify(&mut *connection, crate::db::WEBHOOK_CHANNEL, "").await?;
    Ok(Ok(record))
}

/// Most open deliveries [`backlog`] counts (the count reads every open delivery up to it).
pub const BACKLOG_COUNT_LIMIT: i64 = 10_000;

/// An organization's webhook deliveries not finished yet, each count up to
/// [`BACKLOG_COUNT_LIMIT`] in all.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, FromRow)]
pub struct Backlog {
    /// Not attempted yet (waiting for their first attempt, or being sent).
    pub waiting: i64,
    /// Attempted and failed at least once, waiting for a retry (or being retried).
    pub retrying: i64,
}

/// The open deliveries of `org_id` (pending or being sent), by whether an attempt failed. Reads
/// the partial indexes of open deliveries, so its cost follows the open deliveries, not history.
pub async fn backlog<'e>(
    executor: impl PgExecutor<'e>,
    org_id: OrgId,
) -> Result<Backlog, sqlx::Error> {
    sqlx::query_as(
        "SELECT count(*) FILTER (WHERE attempts = 0) AS waiting,
                count(*) FILTER (WHERE attempts > 0) AS retrying
         FROM (SELECT attempts FROM webhook_deliveries
               WHERE status IN ('pending', 'delivering') AND org_id = $1
               LIMIT $2) open",
    )
    .bind(org_id)
    .bind(BACKLOG_COUNT_LIMIT)
    .fetch_one(executor)
    .await
}
