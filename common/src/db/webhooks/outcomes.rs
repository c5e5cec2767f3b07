//! Outcomes and endpoint health (the webhook-worker's recorder): each attempt's row and its
//! delivery's next step, fenced by the claim token, and what the outcomes do to their endpoint
//! (healthy again, failing since, disabled).

use std::time::Duration;

use chrono::{DateTime, Utc};
use flow_domain::ids::{DeliveryId, WebhookEndpointId};
use sqlx::{FromRow, PgConnection};
use uuid::Uuid;

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
pub(super) async fn lock_endpoints_for_health(
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
    pub(super) fn stored(self) -> (&'static str, Option<DateTime<Utc>>) {
        match self {
            Self::Succeeded => ("succeeded", None),
            Self::Failed => ("failed", None),
            Self::RetryAt(at) | Self::Deferred(at) => ("pending", Some(at)),
        }
    }
}

impl AttemptOutcome {
    /// The error as stored: without NUL characters, within the bound.
    pub(super) fn stored_error(&self) -> Option<String> {
        self.error
            .as_deref()
            .map(|error| storable_text(error, STORED_TEXT_BYTES))
    }

    /// The response excerpt as stored.
    pub(super) fn stored_excerpt(&self) -> Option<String> {
        self.response_excerpt
            .as_deref()
            .map(|excerpt| storable_text(excerpt, STORED_TEXT_BYTES))
    }
}

/// The latest verdict per endpoint decides its health; healthy endpoints are not written to.
pub(super) async fn update_endpoint_health(
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
