//! Fan-out and leases (the webhook-worker): the endpoints each event goes to, the delivery rows
//! written once per event and endpoint (claimed, or with the outcome of a first attempt made
//! before the row), claims of due deliveries and the renewal of leases.

use std::time::Duration;

use chrono::{DateTime, Utc};
use flow_domain::ids::{DeliveryId, EventId, OrgId, WebhookEndpointId};
use serde_json::value::RawValue;
use sqlx::{FromRow, PgConnection, PgExecutor};
use uuid::Uuid;

use super::outcomes::{
    AttemptOutcome, DisabledEndpoint, NextStep, lock_endpoints_for_health, update_endpoint_health,
};
use crate::db::Conflicts;

/// An event to fan out, as decoded from the events queue (the codec lives beside the relay's
/// encoder in the domain crate).
pub use flow_domain::events::codec::IncomingEvent;

/// A delivery claimed for an attempt, with what sending it needs.
#[derive(Debug, Clone, FromRow)]
pub struct ClaimedDelivery {
    /// Delivery.
    pub id: DeliveryId,
    /// Organization.
    pub org_id: OrgId,
    /// Endpoint.
    pub endpoint_id: WebhookEndpointId,
    /// Event id (the `webhook-id` header).
    pub event_id: EventId,
    /// Event type.
    pub event_type: String,
    /// Body, the JSON text customers receive.
    pub payload: Box<RawValue>,
    /// Attempts made so far.
    pub attempts: i32,
    /// When the state change happened.
    pub event_at: DateTime<Utc>,
    /// Endpoint URL.
    pub url: String,
    /// Current secret.
    pub secret: String,
    /// Previous secret while it still signs.
    pub previous_secret: Option<String>,
    /// This claim's fencing token: writes about the delivery apply only while the row still
    /// carries it (another worker that took the delivery over after the lease holds a new one).
    pub claim_token: Uuid,
    /// W3C trace context of the work that caused the event: every attempt is a span of that
    /// trace, and the request names the attempt's span in its `traceparent` header.
    pub traceparent: Option<String>,
}

const CLAIMED_COLUMNS: &str = "d.id, d.org_id, d.endpoint_id, d.event_id, d.event_type, \
    d.payload, d.attempts, d.event_at, d.claim_token, d.traceparent, e.url, e.secret, \
    CASE WHEN e.previous_secret_expires_at > now() THEN e.previous_secret END AS previous_secret";

/// An endpoint an event is to be delivered to, with what sending to it needs.
#[derive(Debug, Clone, FromRow)]
pub struct Target {
    /// Position of the event in the list asked about.
    pub event_index: i32,
    /// Endpoint.
    pub endpoint_id: WebhookEndpointId,
    /// Endpoint URL.
    pub url: String,
    /// Current secret.
    pub secret: String,
    /// Previous secret while it still signs.
    pub previous_secret: Option<String>,
}

/// The events of `events` with repeats left out (an event published twice can sit twice in one
/// batch; one statement may not write its delivery twice).
pub fn distinct_events(events: &[IncomingEvent]) -> Vec<&IncomingEvent> {
    let mut seen = std::collections::HashSet::with_capacity(events.len());
    events
        .iter()
        .filter(|event| seen.insert(event.event_id))
        .collect()
}

/// The enabled endpoints each event goes to (those of its organization that subscribe to its
/// type) that have no delivery of it yet, so a redelivered or republished event is not sent again.
/// With `own_claim`, deliveries claimed under that token still count as to do: a fan-out retried
/// after a commit whose answer was lost gets its own deliveries back. `events` must be distinct.
pub async fn targets<'e>(
    executor: impl PgExecutor<'e>,
    events: &[&IncomingEvent],
    own_claim: Option<Uuid>,
) -> Result<Vec<Target>, sqlx::Error> {
    if events.is_empty() {
        return Ok(Vec::new());
    }
    sqlx::query_as(
        "WITH input AS (
            SELECT * FROM UNNEST($1::uuid[], $2::uuid[], $3::text[]) WITH ORDINALITY
                AS t(event_id, org_id, event_type, ord)
         )
         SELECT (i.ord - 1)::int4 AS event_index, e.id AS endpoint_id, e.url, e.secret,
                CASE WHEN e.previous_secret_expires_at > now() THEN e.previous_secret END
                    AS previous_secret
         FROM input i
         JOIN webhook_endpoints e ON e.org_id = i.org_id AND e.enabled
              AND (cardinality(e.events) = 0 OR i.event_type = ANY (e.events))
         -- LATERAL … LIMIT 1 keeps the check an index probe per pair: as an anti-join, a
         -- planner that misjudges the table (fresh statistics of a growing table) hashes every
         -- delivery for each batch.
         LEFT JOIN LATERAL (SELECT 1 AS found FROM webhook_deliveries d
                            WHERE d.endpoint_id = e.id AND d.event_id = i.event_id
                              AND (d.claim_token IS DISTINCT FROM $4
                                   OR d.status <> 'delivering')
                            LIMIT 1) existing ON true
         WHERE existing.found IS NULL
         ORDER BY i.ord, e.id",
    )
    .bind(
        events
            .iter()
            .map(|event| event.event_id)
            .collect::<Vec<_>>(),
    )
    .bind(events.iter().map(|event| event.org_id).collect::<Vec<_>>())
    .bind(
        events
            .iter()
            .map(|event| event.event_type.as_str())
            .collect::<Vec<_>>(),
    )
    .bind(own_claim)
    .fetch_all(executor)
    .await
}

/// What a new delivery row starts as.
#[derive(Debug, Clone, Copy)]
pub enum Start<'a> {
    /// Claimed by the caller under this token (`delivering`, leased): its first attempt is to
    /// come, or under way.
    Claimed(Uuid),
    /// Attempted once already, before the row was written: the outcome of that attempt.
    Attempted(&'a AttemptOutcome),
}

/// A delivery to create: one event to one endpoint.
#[derive(Debug, Clone)]
pub struct NewDelivery<'a> {
    /// Id of the new row.
    pub id: DeliveryId,
    /// Endpoint.
    pub endpoint_id: WebhookEndpointId,
    /// The event.
    pub event: &'a IncomingEvent,
    /// What the row starts as.
    pub start: Start<'a>,
}

/// A delivery row written by [`create_deliveries`] (or found claimed under the same token).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, FromRow)]
pub struct CreatedDelivery {
    /// Its id (that of the row found, for one claimed earlier under the same token).
    pub id: DeliveryId,
    /// Endpoint.
    pub endpoint_id: WebhookEndpointId,
    /// Event.
    pub event_id: EventId,
}

/// What [`create_deliveries`] wrote.
#[derive(Debug, Clone, Default)]
pub struct Created {
    /// The rows written, and those found claimed under the same token.
    pub deliveries: Vec<CreatedDelivery>,
    /// Endpoints the attempts' outcomes disabled.
    pub disabled: Vec<DisabledEndpoint>,
}

/// Writes new deliveries in the caller's transaction: claimed ones, and ones attempted already
/// with their attempt row and the attempt's effect on the endpoint's health (as
/// [`super::outcomes::record_outcomes`] writes it for later attempts), so a first attempt that
/// succeeded costs one delivery row and one attempt row. A delivery whose event already has one at its endpoint is
/// not written (unless it is claimed under the same token: a retry after a commit whose answer
/// was lost gets its rows back), nor one to an endpoint deleted meanwhile (the endpoints are
/// locked against deletion before deliveries refer to them, so the foreign key cannot fail).
pub async fn create_deliveries(
    connection: &mut PgConnection,
    deliveries: &[NewDelivery<'_>],
    lease: Duration,
    disable_after: Duration,
) -> Result<Created, sqlx::Error> {
    // Events no endpoint takes (most organizations have none) write nothing: no savepoint either.
    if deliveries.is_empty() {
        return Ok(Created::default());
    }
    let attempted: Vec<&AttemptOutcome> = deliveries
        .iter()
        .filter_map(|delivery| match delivery.start {
            Start::Attempted(outcome) => Some(outcome),
            Start::Claimed(_) => None,
        })
        .collect();
    lock_endpoints_for_health(connection, &attempted).await?;
    let (written, recorded) = crate::db::insert_optimistically!(connection, |conflicts| {
        insert_with_attempts(connection, deliveries, &attempted, lease, conflicts).await
    })?;
    let disabled = update_endpoint_health(connection, &recorded, disable_after).await?;
    Ok(Created {
        deliveries: written,
        disabled,
    })
}

/// Inserts delivery rows and the attempts of those written: returns the rows written (or found
/// claimed under the same token) and the attempts recorded.
async fn insert_with_attempts<'a>(
    connection: &mut PgConnection,
    deliveries: &[NewDelivery<'_>],
    attempted: &[&'a AttemptOutcome],
    lease: Duration,
    conflicts: Conflicts,
) -> Result<(Vec<CreatedDelivery>, Vec<&'a AttemptOutcome>), sqlx::Error> {
    let written = insert_deliveries(connection, deliveries, lease, conflicts).await?;
    let written_ids: std::collections::HashSet<DeliveryId> =
        written.iter().map(|delivery| delivery.id).collect();
    let recorded: Vec<&AttemptOutcome> = attempted
        .iter()
        .copied()
        .filter(|outcome| written_ids.contains(&outcome.delivery_id))
        .collect();
    insert_attempts(connection, &recorded, conflicts).await?;
    Ok((written, recorded))
}

impl Target {
    /// The delivery of `event` to this target as claimed under `claim_token`, before any attempt.
    pub fn claimed(
        self,
        event: &IncomingEvent,
        id: DeliveryId,
        claim_token: Uuid,
    ) -> ClaimedDelivery {
        ClaimedDelivery {
            id,
            org_id: event.org_id,
            endpoint_id: self.endpoint_id,
            event_id: event.event_id,
            event_type: event.event_type.clone(),
            payload: event.payload.clone(),
            attempts: 0,
            event_at: event.event_at,
            url: self.url,
            secret: self.secret,
            previous_secret: self.previous_secret,
            claim_token,
            traceparent: event.traceparent.clone(),
        }
    }
}

/// The statement of [`insert_deliveries`], with what follows its insert (`ON CONFLICT …`, or
/// nothing for a plain insert).
macro_rules! insert_deliveries_statement {
    ($conflict:literal) => {
        concat!(
            "WITH input AS (
            SELECT * FROM UNNEST($1::uuid[], $2::uuid[], $3::uuid[], $4::uuid[], $5::text[],
                                 $6::text[], $7::timestamptz[], $8::text[], $9::text[], $10::int[],
                                 $11::timestamptz[], $12::uuid[], $13::int[], $14::text[],
                                 $15::timestamptz[])
                AS t(id, endpoint_id, event_id, org_id, event_type, payload, event_at, traceparent,
                     status, attempts, next_attempt_at, claim_token, last_status_code, last_error,
                     delivered_at)
         ), endpoints AS (
            SELECT e.id FROM webhook_endpoints e
            WHERE e.id IN (SELECT endpoint_id FROM input)
            ORDER BY e.id
            FOR KEY SHARE
         )
         INSERT INTO webhook_deliveries (id, org_id, endpoint_id, event_id, event_type, payload,
                                         status, attempts, next_attempt_at, lease_until,
                                         claim_token, last_status_code, last_error, event_at,
                                         delivered_at, traceparent)
         SELECT i.id, i.org_id, i.endpoint_id, i.event_id, i.event_type, i.payload::jsonb, i.status,
                i.attempts, COALESCE(i.next_attempt_at, now()),
                CASE WHEN i.status = 'delivering'
                     THEN now() + $16 * interval '1 millisecond' END,
                i.claim_token, i.last_status_code, i.last_error, i.event_at, i.delivered_at,
                i.traceparent
         FROM input i JOIN endpoints e ON e.id = i.endpoint_id
",
            $conflict,
            "         RETURNING id, endpoint_id, event_id"
        )
    };
}

/// Inserts delivery rows (see [`create_deliveries`]); returns those written or found claimed
/// under the same token.
async fn insert_deliveries(
    connection: &mut PgConnection,
    deliveries: &[NewDelivery<'_>],
    lease: Duration,
    conflicts: Conflicts,
) -> Result<Vec<CreatedDelivery>, sqlx::Error> {
    if deliveries.is_empty() {
        return Ok(Vec::new());
    }
    let mut columns = DeliveryColumns::with_capacity(deliveries.len());
    for delivery in deliveries {
        columns.push(delivery);
    }
    sqlx::query_as(match conflicts {
        Conflicts::Fail => insert_deliveries_statement!(""),
        Conflicts::Handle => insert_deliveries_statement!(
            "ON CONFLICT (endpoint_id, event_id) DO UPDATE SET lease_until = EXCLUDED.lease_until
         WHERE webhook_deliveries.claim_token = EXCLUDED.claim_token
           AND webhook_deliveries.status = 'delivering'
         "
        ),
    })
    .bind(&columns.ids)
    .bind(&columns.endpoints)
    .bind(&columns.events)
    .bind(&columns.orgs)
    .bind(&columns.types)
    .bind(&columns.payloads)
    .bind(&columns.event_times)
    .bind(&columns.traceparents)
    .bind(&columns.statuses)
    .bind(&columns.attempts)
    .bind(&columns.next_times)
    .bind(&columns.claim_tokens)
    .bind(&columns.status_codes)
    .bind(&columns.errors)
    .bind(&columns.delivered)
    .bind(i64::try_from(lease.as_millis()).unwrap_or(i64::MAX))
    .fetch_all(&mut *connection)
    .await
}

/// The columns of new delivery rows, as arrays for one UNNEST.
struct DeliveryColumns<'a> {
    ids: Vec<DeliveryId>,
    endpoints: Vec<WebhookEndpointId>,
    events: Vec<EventId>,
    orgs: Vec<OrgId>,
    types: Vec<&'a str>,
    /// The bodies' JSON text (cast to jsonb by the statement).
    payloads: Vec<&'a str>,
    event_times: Vec<DateTime<Utc>>,
    traceparents: Vec<Option<&'a str>>,
    statuses: Vec<&'static str>,
    attempts: Vec<i32>,
    next_times: Vec<Option<DateTime<Utc>>>,
    claim_tokens: Vec<Option<Uuid>>,
    status_codes: Vec<Option<i32>>,
    errors: Vec<Option<String>>,
    delivered: Vec<Option<DateTime<Utc>>>,
}

impl<'a> DeliveryColumns<'a> {
    fn with_capacity(capacity: usize) -> Self {
        Self {
            ids: Vec::with_capacity(capacity),
            endpoints: Vec::with_capacity(capacity),
            events: Vec::with_capacity(capacity),
            orgs: Vec::with_capacity(capacity),
            types: Vec::with_capacity(capacity),
            payloads: Vec::with_capacity(capacity),
            event_times: Vec::with_capacity(capacity),
            traceparents: Vec::with_capacity(capacity),
            statuses: Vec::with_capacity(capacity),
            attempts: Vec::with_capacity(capacity),
            next_times: Vec::with_capacity(capacity),
            claim_tokens: Vec::with_capacity(capacity),
            status_codes: Vec::with_capacity(capacity),
            errors: Vec::with_capacity(capacity),
            delivered: Vec::with_capacity(capacity),
        }
    }

    fn push(&mut self, delivery: &NewDelivery<'a>) {
        let event = delivery.event;
        self.ids.push(delivery.id);
        self.endpoints.push(delivery.endpoint_id);
        self.events.push(event.event_id);
        self.orgs.push(event.org_id);
        self.types.push(&event.event_type);
        self.payloads.push(event.payload.get());
        self.event_times.push(event.event_at);
        self.traceparents.push(event.traceparent.as_deref());
        match delivery.start {
            Start::Claimed(token) => {
                self.statuses.push("delivering");
                self.attempts.push(0);
                self.next_times.push(None);
                self.claim_tokens.push(Some(token));
                self.status_codes.push(None);
                self.errors.push(None);
                self.delivered.push(None);
            }
            Start::Attempted(outcome) => {
                let (status, next_at) = outcome.next.stored();
                self.statuses.push(status);
                self.attempts.push(outcome.attempt);
                self.next_times.push(next_at);
                self.claim_tokens.push(None);
                self.status_codes.push(outcome.status_code);
                self.errors.push(outcome.stored_error());
                self.delivered
                    .push((outcome.next == NextStep::Succeeded).then_some(outcome.attempted_at));
            }
        }
    }
}

/// Attempt rows of `outcomes` (whose deliveries exist); an attempt already recorded is left as it
/// is.
async fn insert_attempts(
    connection: &mut PgConnection,
    outcomes: &[&AttemptOutcome],
    conflicts: Conflicts,
) -> Result<(), sqlx::Error> {
    if outcomes.is_empty() {
        return Ok(());
    }
    macro_rules! insert_attempts_statement {
        ($conflict:literal) => {
            concat!(
                "INSERT INTO webhook_attempts (delivery_id, attempt, attempted_at, status_code,
                                       latency_ms, error, response_excerpt)
         SELECT * FROM UNNEST($1::uuid[], $2::int[], $3::timestamptz[], $4::int[], $5::int[],
                              $6::text[], $7::text[])",
                $conflict
            )
        };
    }
    sqlx::query(match conflicts {
        Conflicts::Fail => insert_attempts_statement!(""),
        Conflicts::Handle => {
            insert_attempts_statement!(" ON CONFLICT (delivery_id, attempt) DO NOTHING")
        }
    })
    .bind(outcomes.iter().map(|o| o.delivery_id).collect::<Vec<_>>())
    .bind(outcomes.iter().map(|o| o.attempt).collect::<Vec<_>>())
    .bind(outcomes.iter().map(|o| o.attempted_at).collect::<Vec<_>>())
    .bind(outcomes.iter().map(|o| o.status_code).collect::<Vec<_>>())
    .bind(outcomes.iter().map(|o| o.latency_ms).collect::<Vec<_>>())
    .bind(
        outcomes
            .iter()
            .map(|o| o.stored_error())
            .collect::<Vec<_>>(),
    )
    .bind(
        outcomes
            .iter()
            .map(|o| o.stored_excerpt())
            .collect::<Vec<_>>(),
    )
    .execute(&mut *connection)
    .await?;
    Ok(())
}

/// Claims up to `limit` deliveries that are due (a retry whose time has come, or a claim whose
/// worker stopped renewing it) on enabled endpoints not in `skip`, each with a new claim token
/// (which fences off the previous holder of an expired lease); test pings go out to disabled
/// endpoints too, so an endpoint can be checked before it is enabled again.
pub async fn claim_due<'e>(
    executor: impl PgExecutor<'e>,
    limit: i64,
    lease: Duration,
    skip: &[WebhookEndpointId],
) -> Result<Vec<ClaimedDelivery>, sqlx::Error> {
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "WITH due AS (
            SELECT d.id FROM webhook_deliveries d
            JOIN webhook_endpoints e ON e.id = d.endpoint_id
                 AND (e.enabled OR d.event_type = 'webhook.test')
            WHERE ((d.status = 'pending' AND d.next_attempt_at <= now())
                   OR (d.status = 'delivering' AND d.lease_until < now()))
              AND NOT (d.endpoint_id = ANY ($3))
            ORDER BY d.next_attempt_at
            LIMIT $1
            FOR UPDATE OF d SKIP LOCKED
         ), claimed AS (
            UPDATE webhook_deliveries d SET status = 'delivering',
                   lease_until = now() + $2 * interval '1 millisecond',
                   claim_token = gen_random_uuid()
            FROM due WHERE d.id = due.id
            RETURNING d.*
         )
         SELECT {CLAIMED_COLUMNS} FROM claimed d JOIN webhook_endpoints e ON e.id = d.endpoint_id"
    )))
    .bind(limit)
    .bind(i64::try_from(lease.as_millis()).unwrap_or(i64::MAX))
    .bind(skip)
    .fetch_all(executor)
    .await
}

/// Extends the leases of deliveries the caller still holds (`held`: delivery and claim token) to
/// `lease` from now; returns those renewed. A delivery missing from the answer is no longer the
/// caller's: another worker took it over, or it was deleted; the caller must not attempt it.
pub async fn renew_leases<'e>(
    executor: impl PgExecutor<'e>,
    held: &[(DeliveryId, Uuid)],
    lease: Duration,
) -> Result<Vec<(DeliveryId, Uuid)>, sqlx::Error> {
    if held.is_empty() {
        return Ok(Vec::new());
    }
    sqlx::query_as(
        "WITH t AS (
            SELECT * FROM UNNEST($1::uuid[], $2::uuid[]) AS t(id, token)
         ), held AS (
            SELECT d.id, t.token FROM webhook_deliveries d
            JOIN t ON t.id = d.id AND t.token = d.claim_token
            WHERE d.status = 'delivering'
            ORDER BY d.id
            FOR NO KEY UPDATE OF d
         )
         UPDATE webhook_deliveries d SET lease_until = now() + $3 * interval '1 millisecond'
         FROM held
         WHERE d.id = held.id AND d.claim_token = held.token AND d.status = 'delivering'
         RETURNING d.id, d.claim_token",
    )
    .bind(held.iter().map(|(id, _)| *id).collect::<Vec<_>>())
    .bind(held.iter().map(|(_, token)| *token).collect::<Vec<_>>())
    .bind(i64::try_from(lease.as_millis()).unwrap_or(i64::MAX))
    .fetch_all(executor)
    .await
}

/// Pending deliveries whose attempt time has come (for the gauge: a backlog here means the
/// webhook-workers do not keep up).
pub async fn due_count<'e>(executor: impl PgExecutor<'e>) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT count(*) FROM webhook_deliveries
         WHERE status = 'pending' AND next_attempt_at <= now()",
    )
    .fetch_one(executor)
    .await
}
