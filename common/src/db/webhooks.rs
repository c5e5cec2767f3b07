//! Webhook endpoints (per organization) and deliveries: one row per event and endpoint, which is
//! the delivery job itself (claimed with a lease, retried on a schedule), and one row per attempt.

use std::time::Duration;

use chrono::{DateTime, Utc};
use flow_domain::ids::{DeliveryId, EventId, OrgId, WebhookEndpointId};
use flow_domain::webhook::DeliveryStatus;
use serde_json::value::RawValue;
use sqlx::{FromRow, PgConnection, PgExecutor};

use super::Conflicts;
use uuid::Uuid;

/// Most endpoints one organization may have.
pub const MAX_ENDPOINTS_PER_ORG: i64 = 50;

/// Bytes of a response body kept with an attempt, and the most kept of an attempt's error text.
pub const STORED_TEXT_BYTES: usize = 1_024;

/// `text` as Postgres can store it in a `text` column: without NUL characters (which Postgres
/// refuses), cut to at most `max_bytes` bytes on a character boundary, so it stays valid UTF-8.
pub fn storable_text(text: &str, max_bytes: usize) -> String {
    let mut stored = String::with_capacity(text.len().min(max_bytes));
    for character in text.chars().filter(|character| *character != '\0') {
        if stored.len() + character.len_utf8() > max_bytes {
            break;
        }
        stored.push(character);
    }
    stored
}

/// A customer's endpoint.
#[derive(Debug, Clone, FromRow)]
pub struct Endpoint {
    pub id: WebhookEndpointId,
    /// Owning organization.
    pub org_id: OrgId,
    /// Where events are POSTed.
    pub url: String,
    /// Free text.
    pub description: Option<String>,
    /// Event types delivered; empty means all.
    pub events: Vec<String>,
    /// Whether deliveries go out.
    pub enabled: bool,
    /// Why the service disabled it (`gone`, `failing`).
    pub disabled_reason: Option<String>,
    /// Current signing secret.
    pub secret: String,
    /// Previous secret, still signing until `previous_secret_expires_at`.
    pub previous_secret: Option<String>,
    /// End of the rotation overlap.
    pub previous_secret_expires_at: Option<DateTime<Utc>>,
    /// Start of the current run of failures.
    pub failing_since: Option<DateTime<Utc>>,
    /// Creation time.
    pub created_at: DateTime<Utc>,
    /// Last change.
    pub updated_at: DateTime<Utc>,
}

const ENDPOINT_COLUMNS: &str = "id, org_id, url, description, events, enabled, disabled_reason, \
    secret, previous_secret, previous_secret_expires_at, failing_since, created_at, updated_at";

/// A new endpoint.
#[derive(Debug, Clone)]
pub struct NewEndpoint {
    /// Its id, chosen by the caller: the secret is sealed for it before the row exists.
    pub id: WebhookEndpointId,
    /// URL (already checked against the address policy).
    pub url: String,
    /// Free text.
    pub description: Option<String>,
    /// Event types; empty means all.
    pub events: Vec<String>,
    /// Signing secret.
    pub secret: String,
}

/// Creates an endpoint unless the organization already has [`MAX_ENDPOINTS_PER_ORG`]; `None`
/// then.
pub async fn create(
    connection: &mut PgConnection,
    org_id: OrgId,
    endpoint: &NewEndpoint,
) -> Result<Option<Endpoint>, sqlx::Error> {
    // Serialise creations per organization so the cap holds under concurrency.
    sqlx::query("SELECT 1 FROM organizations WHERE id = $1 FOR UPDATE")
        .bind(org_id)
        .execute(&mut *connection)
        .await?;
    let count: i64 = sqlx::query_scalar("SELECT count(*) FROM webhook_endpoints WHERE org_id = $1")
        .bind(org_id)
        .fetch_one(&mut *connection)
        .await?;
    if count >= MAX_ENDPOINTS_PER_ORG {
        return Ok(None);
    }
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "INSERT INTO webhook_endpoints (id, org_id, url, description, events, secret)
         VALUES ($1, $2, $3, $4, $5, $6) RETURNING {ENDPOINT_COLUMNS}"
    )))
    .bind(endpoint.id)
    .bind(org_id)
    .bind(&endpoint.url)
    .bind(&endpoint.description)
    .bind(&endpoint.events)
    .bind(&endpoint.secret)
    .fetch_one(&mut *connection)
    .await
    .map(Some)
}

/// One endpoint of an organization.
pub async fn get<'e>(
    executor: impl PgExecutor<'e>,
    org_id: OrgId,
    id: WebhookEndpointId,
) -> Result<Option<Endpoint>, sqlx::Error> {
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {ENDPOINT_COLUMNS} FROM webhook_endpoints WHERE id = $1 AND org_id = $2"
    )))
    .bind(id)
    .bind(org_id)
    .fetch_optional(executor)
    .await
}

/// An organization's endpoints after `after`, in id order.
pub async fn list<'e>(
    executor: impl PgExecutor<'e>,
    org_id: OrgId,
    after: Option<WebhookEndpointId>,
    limit: i64,
) -> Result<Vec<Endpoint>, sqlx::Error> {
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {ENDPOINT_COLUMNS} FROM webhook_endpoints
         WHERE org_id = $1 AND ($2::uuid IS NULL OR id > $2)
         ORDER BY id LIMIT $3"
    )))
    .bind(org_id)
    .bind(after)
    .bind(limit)
    .fetch_all(executor)
    .await
}

/// Changes to an endpoint; `None` leaves a field as it is.
#[derive(Debug, Clone, Default)]
pub struct EndpointChanges {
    /// New URL (already checked).
    pub url: Option<String>,
    /// New description (`Some(None)` clears it).
    pub description: Option<Option<String>>,
    /// New event filter.
    pub events: Option<Vec<String>>,
    /// Enable (which also forgets why it was disabled and its failure run) or disable.
    pub enabled: Option<bool>,
}

/// Applies `changes`; `None` when the endpoint does not exist in the organization.
pub async fn update<'e>(
    executor: impl PgExecutor<'e>,
    org_id: OrgId,
    id: WebhookEndpointId,
    changes: &EndpointChanges,
) -> Result<Option<Endpoint>, sqlx::Error> {
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "UPDATE webhook_endpoints SET
            url = COALESCE($3, url),
            description = CASE WHEN $4 THEN $5 ELSE description END,
            events = COALESCE($6, events),
            enabled = COALESCE($7, enabled),
            disabled_reason = CASE WHEN $7 IS NULL THEN disabled_reason
                                   WHEN $7 THEN NULL ELSE 'disabled by the organization' END,
            failing_since = CASE WHEN $7 THEN NULL ELSE failing_since END,
            updated_at = now()
         WHERE id = $1 AND org_id = $2
         RETURNING {ENDPOINT_COLUMNS}"
    )))
    .bind(id)
    .bind(org_id)
    .bind(&changes.url)
    .bind(changes.description.is_some())
    .bind(changes.description.clone().flatten())
    .bind(&changes.events)
    .bind(changes.enabled)
    .fetch_optional(executor)
    .await
}

/// Deletes an endpoint with its deliveries and their attempts, in the caller's transaction; false
/// when it does not exist in the organization.
///
/// No foreign key cascades this (migration 0111), so the order matters. The endpoint goes first:
/// its row lock makes a fan-out or a test ping that is about to write to it wait, and then write
/// nothing. Its deliveries are then locked, which waits for any recorder that holds one and lets
/// none start; only then, in a statement that sees what those recorders committed, are their
/// attempts deleted, and the deliveries last.
pub async fn delete(
    connection: &mut PgConnection,
    org_id: OrgId,
    id: WebhookEndpointId,
) -> Result<bool, sqlx::Error> {
    let deleted = sqlx::query("DELETE FROM webhook_endpoints WHERE id = $1 AND org_id = $2")
        .bind(id)
        .bind(org_id)
        .execute(&mut *connection)
        .await?;
    if deleted.rows_affected() == 0 {
        return Ok(false);
    }
    for statement in [
        "SELECT 1 FROM webhook_deliveries WHERE endpoint_id = $1 FOR UPDATE",
        "DELETE FROM webhook_attempts a USING webhook_deliveries d
         WHERE d.endpoint_id = $1 AND a.delivery_id = d.id",
        "DELETE FROM webhook_deliveries WHERE endpoint_id = $1",
    ] {
        sqlx::query(statement)
            .bind(id)
            .execute(&mut *connection)
            .await?;
    }
    Ok(true)
}

/// Replaces the secret; the previous one keeps signing for `overlap`.
pub async fn rotate_secret<'e>(
    executor: impl PgExecutor<'e>,
    org_id: OrgId,
    id: WebhookEndpointId,
    secret: &str,
    overlap: Duration,
) -> Result<Option<Endpoint>, sqlx::Error> {
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "UPDATE webhook_endpoints SET previous_secret = secret, secret = $3,
            previous_secret_expires_at = now() + $4 * interval '1 millisecond', updated_at = now()
         WHERE id = $1 AND org_id = $2
         RETURNING {ENDPOINT_COLUMNS}"
    )))
    .bind(id)
    .bind(org_id)
    .bind(secret)
    .bind(i64::try_from(overlap.as_millis()).unwrap_or(i64::MAX))
    .fetch_optional(executor)
    .await
}

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
/// [`record_outcomes`] writes it for later attempts), so a first attempt that succeeded costs one
/// delivery row and one attempt row. A delivery whose event already has one at its endpoint is
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
    let (written, recorded) = super::insert_optimistically!(connection, |conflicts| {
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

/// Creates one delivery per enabled endpoint of the event's organization that subscribes to its
/// type, already claimed by the caller for `lease` under `claim_token`. Events seen before
/// (redeliveries) create nothing: the caller gets only new deliveries — and the ones it claimed
/// itself under the same token, so a retry after a commit whose answer was lost (the connection
/// dropped during COMMIT) gets its deliveries back instead of leaving them claimed by nobody
/// until the lease expires. An endpoint deleted meanwhile gets none.
pub async fn fan_out(
    connection: &mut PgConnection,
    events: &[IncomingEvent],
    lease: Duration,
    claim_token: Uuid,
) -> Result<Vec<ClaimedDelivery>, sqlx::Error> {
    let events = distinct_events(events);
    let targets = targets(&mut *connection, &events, Some(claim_token)).await?;
    if targets.is_empty() {
        return Ok(Vec::new());
    }
    let deliveries: Vec<NewDelivery<'_>> = targets
        .iter()
        .map(|target| NewDelivery {
            id: DeliveryId::new(),
            endpoint_id: target.endpoint_id,
            event: events[target_event(target)],
            start: Start::Claimed(claim_token),
        })
        .collect();
    let written = super::insert_optimistically!(connection, |conflicts| {
        insert_deliveries(connection, &deliveries, lease, conflicts).await
    })?;
    let ids: std::collections::HashMap<(WebhookEndpointId, EventId), DeliveryId> = written
        .into_iter()
        .map(|delivery| ((delivery.endpoint_id, delivery.event_id), delivery.id))
        .collect();
    Ok(targets
        .into_iter()
        .filter_map(|target| {
            let event = events[target_event(&target)];
            let id = *ids.get(&(target.endpoint_id, event.event_id))?;
            Some(target.claimed(event, id, claim_token))
        })
        .collect())
}

fn target_event(target: &Target) -> usize {
    usize::try_from(target.event_index).unwrap_or(usize::MAX)
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

/// What happens to a delivery after an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NextStep {
    /// Delivered.
    Succeeded,
    /// Try again at this time.
    RetryAt(DateTime<Utc>),
    /// No attempts left (or the endpoint is gone): failed until someone retries it.
    Failed,
    /// Not attempted (the endpoint had too much in flight): back to the queue at this time.
    Deferred(DateTime<Utc>),
}

/// How an attempt reflects on the endpoint's health.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndpointVerdict {
    /// Not attempted.
    Unchanged,
    /// A 2xx: the endpoint is healthy.
    Healthy,
    /// A failure.
    Failing,
    /// A 410: the endpoint asked to be removed.
    Gone,
}

/// One attempt's outcome.
#[derive(Debug, Clone)]
pub struct AttemptOutcome {
    /// Delivery.
    pub delivery_id: DeliveryId,
    /// Its endpoint.
    pub endpoint_id: WebhookEndpointId,
    /// The claim under which it was attempted (or deferred); the outcome is recorded only while
    /// the delivery still carries it.
    pub claim_token: Uuid,
    /// Attempt number (1-based); ignored for deferrals.
    pub attempt: i32,
    /// When it was sent.
    pub attempted_at: DateTime<Utc>,
    /// HTTP status, when a response came.
    pub status_code: Option<i32>,
    /// Time to the response (or the failure).
    pub latency_ms: i32,
    /// Transport error or refusal.
    pub error: Option<String>,
    /// Start of the response body.
    pub response_excerpt: Option<String>,
    /// What follows.
    pub next: NextStep,
    /// Effect on the endpoint.
    pub verdict: EndpointVerdict,
}

/// An endpoint the service disabled while recording outcomes.
#[derive(Debug, Clone, FromRow)]
pub struct DisabledEndpoint {
    /// Endpoint.
    pub id: WebhookEndpointId,
    /// `gone` or `failing`.
    pub disabled_reason: Option<String>,
}

/// What recording a batch of outcomes did.
#[derive(Debug, Clone, Default)]
pub struct Recorded {
    /// Outcomes not written because their delivery no longer exists (its endpoint was deleted)
    /// or is no longer held under the outcome's claim (another worker took it over after the
    /// lease, or the outcome was recorded already).
    pub stale: Vec<DeliveryId>,
    /// Endpoints disabled now.
    pub disabled: Vec<DisabledEndpoint>,
}

/// Records outcomes in the caller's transaction: the attempts, the deliveries' next step, and the
/// endpoints' health (a 410, or failures for longer than `disable_after`, disable an endpoint).
///
/// Each outcome is fenced by its claim token: it applies only to a delivery that is still
/// `delivering` under that token, so a stale outcome (its lease was taken over, or it was
/// recorded already) and an outcome for a deleted delivery change nothing and are returned as
/// stale. Texts are stored without NUL characters and within their bounds.
pub async fn record_outcomes(
    connection: &mut PgConnection,
    outcomes: &[AttemptOutcome],
    disable_after: Duration,
) -> Result<Recorded, sqlx::Error> {
    if outcomes.is_empty() {
        return Ok(Recorded::default());
    }
    let all: Vec<&AttemptOutcome> = outcomes.iter().collect();
    lock_endpoints_for_health(connection, &all).await?;
    let (statuses, next_times): (Vec<&str>, Vec<Option<DateTime<Utc>>>) =
        outcomes.iter().map(|outcome| outcome.next.stored()).unzip();
    let attempts: Vec<Option<i32>> = outcomes
        .iter()
        .map(|outcome| (!matches!(outcome.next, NextStep::Deferred(_))).then_some(outcome.attempt))
        .collect();
    let errors: Vec<Option<String>> = outcomes.iter().map(AttemptOutcome::stored_error).collect();
    let excerpts: Vec<Option<String>> = outcomes
        .iter()
        .map(AttemptOutcome::stored_excerpt)
        .collect();
    // The deliveries still held under the outcomes' claims are locked in id order (recorders of
    // several workers cannot deadlock), moved to their next step with the claim cleared, and only
    // they get their attempt rows: a deleted delivery is simply not there. Each step reads the
    // rows the previous one produced, never the input again: a join back to the input is planned
    // as a nested loop over two CTE scans, quadratic in the batch (1 s for 1,000 outcomes).
    let written: Vec<(DeliveryId, Uuid)> = sqlx::query_as(
        "WITH t AS (
            SELECT * FROM UNNEST($1::uuid[], $2::uuid[], $3::text[], $4::int[],
                                 $5::timestamptz[], $6::int[], $7::text[], $8::timestamptz[],
                                 $9::int[], $10::text[])
                AS t(id, token, status, attempt, next_at, code, error, at, latency, excerpt)
         ), held AS (
            SELECT d.id, t.token, t.status, t.attempt, t.next_at, t.code, t.error, t.at,
                   t.latency, t.excerpt
            FROM webhook_deliveries d
            JOIN t ON t.id = d.id AND t.token = d.claim_token
            WHERE d.status = 'delivering'
            ORDER BY d.id
            FOR NO KEY UPDATE OF d
         ), updated AS (
            UPDATE webhook_deliveries d SET
                status = h.status,
                attempts = COALESCE(h.attempt, d.attempts),
                next_attempt_at = COALESCE(h.next_at, d.next_attempt_at),
                lease_until = NULL,
                claim_token = NULL,
                last_status_code = CASE WHEN h.attempt IS NULL THEN d.last_status_code
                                        ELSE h.code END,
                last_error = CASE WHEN h.attempt IS NULL THEN d.last_error ELSE h.error END,
                delivered_at = CASE WHEN h.status = 'succeeded' THEN h.at ELSE d.delivered_at END
            FROM held h
            WHERE d.id = h.id AND d.claim_token = h.token AND d.status = 'delivering'
            RETURNING d.id, h.token, h.attempt, h.at, h.code, h.latency, h.error, h.excerpt
         ), attempts AS (
            INSERT INTO webhook_attempts (delivery_id, attempt, attempted_at, status_code,
                                          latency_ms, error, response_excerpt)
            SELECT id, attempt, at, code, latency, error, excerpt
            FROM updated
            WHERE attempt IS NOT NULL
            ON CONFLICT (delivery_id, attempt) DO NOTHING
         )
         SELECT id, token FROM updated",
    )
    .bind(outcomes.iter().map(|o| o.delivery_id).collect::<Vec<_>>())
    .bind(outcomes.iter().map(|o| o.claim_token).collect::<Vec<_>>())
    .bind(&statuses)
    .bind(&attempts)
    .bind(&next_times)
    .bind(outcomes.iter().map(|o| o.status_code).collect::<Vec<_>>())
    .bind(&errors)
    .bind(outcomes.iter().map(|o| o.attempted_at).collect::<Vec<_>>())
    .bind(outcomes.iter().map(|o| o.latency_ms).collect::<Vec<_>>())
    .bind(&excerpts)
    .fetch_all(&mut *connection)
    .await?;
    let written: std::collections::HashSet<(DeliveryId, Uuid)> = written.into_iter().collect();
    let (current, stale): (Vec<&AttemptOutcome>, Vec<&AttemptOutcome>) = outcomes
        .iter()
        .partition(|outcome| written.contains(&(outcome.delivery_id, outcome.claim_token)));
    let disabled = update_endpoint_health(connection, &current, disable_after).await?;
    Ok(Recorded {
        stale: stale.iter().map(|outcome| outcome.delivery_id).collect(),
        disabled,
    })
}

/// Locks, in id order, the endpoints whose health `outcomes` will write: those with a failure
/// verdict, and those with a success verdict that are failing now (a success on a healthy endpoint
/// writes nothing, so it takes no lock and concurrent recorders do not queue on a busy endpoint's
/// row). An endpoint deletion locks the endpoint and then its deliveries; taking the endpoints
/// before the deliveries, in one order, cannot deadlock with it.
async fn lock_endpoints_for_health(
    connection: &mut PgConnection,
    outcomes: &[&AttemptOutcome],
) -> Result<(), sqlx::Error> {
    let mut healthy = Vec::new();
    let mut unhealthy = Vec::new();
    for outcome in outcomes {
        match outcome.verdict {
            EndpointVerdict::Unchanged => {}
            EndpointVerdict::Healthy => healthy.push(outcome.endpoint_id),
            EndpointVerdict::Failing | EndpointVerdict::Gone => unhealthy.push(outcome.endpoint_id),
        }
    }
    if healthy.is_empty() && unhealthy.is_empty() {
        return Ok(());
    }
    sqlx::query(
        "SELECT id FROM webhook_endpoints
         WHERE id = ANY ($2) OR (id = ANY ($1) AND failing_since IS NOT NULL)
         ORDER BY id FOR NO KEY UPDATE",
    )
    .bind(&healthy)
    .bind(&unhealthy)
    .execute(&mut *connection)
    .await?;
    Ok(())
}

impl NextStep {
    /// The delivery's status and next attempt time for this step, as stored.
    fn stored(self) -> (&'static str, Option<DateTime<Utc>>) {
        match self {
            Self::Succeeded => ("succeeded", None),
            Self::Failed => ("failed", None),
            Self::RetryAt(at) | Self::Deferred(at) => ("pending", Some(at)),
        }
    }
}

impl AttemptOutcome {
    /// The error as stored: without NUL characters, within the bound.
    fn stored_error(&self) -> Option<String> {
        self.error
            .as_deref()
            .map(|error| storable_text(error, STORED_TEXT_BYTES))
    }

    /// The response excerpt as stored.
    fn stored_excerpt(&self) -> Option<String> {
        self.response_excerpt
            .as_deref()
            .map(|excerpt| storable_text(excerpt, STORED_TEXT_BYTES))
    }
}

/// The latest verdict per endpoint decides its health; healthy endpoints are not written to.
async fn update_endpoint_health(
    connection: &mut PgConnection,
    outcomes: &[&AttemptOutcome],
    disable_after: Duration,
) -> Result<Vec<DisabledEndpoint>, sqlx::Error> {
    let mut latest: std::collections::HashMap<WebhookEndpointId, &AttemptOutcome> =
        std::collections::HashMap::new();
    for outcome in outcomes.iter().copied() {
        if outcome.verdict == EndpointVerdict::Unchanged {
            continue;
        }
        let slot = latest.entry(outcome.endpoint_id).or_insert(outcome);
        if outcome.attempted_at >= slot.attempted_at {
            *slot = outcome;
        }
    }
    if latest.is_empty() {
        return Ok(Vec::new());
    }
    // One lock order across recorders of several workers.
    let mut latest: Vec<(WebhookEndpointId, &AttemptOutcome)> = latest.into_iter().collect();
    latest.sort_by_key(|(id, _)| *id);
    let ids: Vec<WebhookEndpointId> = latest.iter().map(|(id, _)| *id).collect();
    let verdicts: Vec<&str> = latest
        .iter()
        .map(|(_, outcome)| outcome)
        .map(|outcome| match outcome.verdict {
            EndpointVerdict::Healthy => "healthy",
            EndpointVerdict::Gone => "gone",
            _ => "failing",
        })
        .collect();
    let times: Vec<DateTime<Utc>> = latest.iter().map(|(_, o)| o.attempted_at).collect();
    sqlx::query_as(
        "WITH t AS (
            SELECT * FROM UNNEST($1::uuid[], $2::text[], $3::timestamptz[]) AS t(id, verdict, at)
         ), changed AS (
            UPDATE webhook_endpoints e SET
                failing_since = CASE WHEN t.verdict = 'healthy' THEN NULL
                                     ELSE COALESCE(e.failing_since, t.at) END,
                enabled = CASE
                    WHEN t.verdict = 'gone' THEN false
                    WHEN t.verdict = 'failing'
                         AND COALESCE(e.failing_since, t.at) <= t.at - $4 * interval '1 millisecond'
                        THEN false
                    ELSE e.enabled END,
                disabled_reason = CASE
                    WHEN t.verdict = 'gone' AND e.enabled THEN 'gone'
                    WHEN t.verdict = 'failing' AND e.enabled
                         AND COALESCE(e.failing_since, t.at) <= t.at - $4 * interval '1 millisecond'
                        THEN 'failing'
                    ELSE e.disabled_reason END,
                updated_at = now()
            FROM t
            WHERE e.id = t.id
              AND (t.verdict <> 'healthy' OR e.failing_since IS NOT NULL)
            -- The subquery reads the statement's snapshot: the row as it was before this update.
            RETURNING e.id, e.enabled, e.disabled_reason,
                      (SELECT x.enabled FROM webhook_endpoints x WHERE x.id = e.id) AS was_enabled
         )
         SELECT id, disabled_reason FROM changed WHERE was_enabled AND NOT enabled",
    )
    .bind(&ids)
    .bind(&verdicts)
    .bind(&times)
    .bind(i64::try_from(disable_after.as_millis()).unwrap_or(i64::MAX))
    .fetch_all(&mut *connection)
    .await
}

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
    super::notify(&mut *connection, super::WEBHOOK_CHANNEL, "").await?;
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

const DELIVERY_COLUMNS: &str = "d.id, d.endpoint_id, d.event_id, d.event_type, d.payload, \
    d.status, d.attempts, d.next_attempt_at, d.last_status_code, d.last_error, d.created_at, \
    d.delivered_at";

/// An endpoint's deliveries, newest first, after the `(created_at, id)` cursor, optionally of one
/// status.
pub async fn list_deliveries<'e>(
    executor: impl PgExecutor<'e>,
    org_id: OrgId,
    endpoint_id: WebhookEndpointId,
    status: Option<DeliveryStatus>,
    before: Option<(DateTime<Utc>, DeliveryId)>,
    limit: i64,
) -> Result<Vec<DeliveryRecord>, sqlx::Error> {
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {DELIVERY_COLUMNS} FROM webhook_deliveries d
         WHERE d.endpoint_id = $1 AND d.org_id = $2
           AND ($3::text IS NULL OR d.status = $3)
           AND ($4::timestamptz IS NULL OR (d.created_at, d.id) < ($4, $5))
         ORDER BY d.created_at DESC, d.id DESC
         LIMIT $6"
    )))
    .bind(endpoint_id)
    .bind(org_id)
    .bind(status)
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
    super::notify(&mut *connection, super::WEBHOOK_CHANNEL, "").await?;
    Ok(Ok(record))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_text_has_no_nul_and_is_cut_on_a_character_boundary() {
        assert_eq!(storable_text("ok\0done\0", 1_024), "okdone");
        assert_eq!(storable_text("plain", 1_024), "plain");
        // Two-byte characters: 1,024 bytes hold 512 of them, never half of one.
        let accented = "é".repeat(600);
        let stored = storable_text(&format!("\0{accented}"), 1_023);
        assert_eq!(stored, "é".repeat(511));
        assert_eq!(storable_text(&accented, STORED_TEXT_BYTES).len(), 1_024);
        assert_eq!(storable_text("\0\0", 10), "");
    }
}
