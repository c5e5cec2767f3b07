//! Webhook endpoints of an organization: create, read, list, change, delete, rotate the secret
//! (the API's and the dashboard's webhook surfaces).

use std::time::Duration;

use chrono::{DateTime, Utc};
use flow_domain::events::EventType;
use flow_domain::ids::{OrgId, WebhookEndpointId};
use sqlx::{FromRow, PgConnection, PgExecutor};

/// Most endpoints one organization may have.
pub const MAX_ENDPOINTS_PER_ORG: i64 = 50;

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
    /// Event types delivered; empty means all. Read loudly: a stored type this build does not
    /// know (a row written by a newer build, or by hand) fails the read naming it, so the endpoint
    /// can be neither shown nor changed until the build knows it; it is never kept as text nor
    /// dropped, which would silently widen or narrow what the endpoint receives. Fan-out compares
    /// the stored names in SQL and is not affected.
    pub events: Vec<EventType>,
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
    pub events: Vec<EventType>,
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
    pub events: Option<Vec<EventType>>,
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
