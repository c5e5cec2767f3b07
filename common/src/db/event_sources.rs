//! Signed event sources (migration 0262, docs/events.md): senders without an API key that post
//! to `/v1/events/inbound/{id}`, authenticated by the source's secret (sealed at rest).

use std::time::Duration;

use chrono::{DateTime, Utc};
use flow_domain::ids::{EventSourceId, OrgId};
use sqlx::{FromRow, PgExecutor};

/// A stored source; its secrets as stored (sealed).
#[derive(Clone, FromRow)]
pub struct SourceRecord {
    /// Identifier.
    pub id: EventSourceId,
    /// Owning organization.
    pub org_id: OrgId,
    /// What the organization calls it.
    pub name: String,
    /// `standard_webhooks` or `okta`.
    pub kind: String,
    /// JSON Pointer to the event type in a delivery's body (standard_webhooks).
    pub type_pointer: Option<String>,
    /// The fixed event type (standard_webhooks, instead of the pointer).
    pub fixed_type: Option<String>,
    /// The CloudEvents `source` its events carry.
    pub event_source: String,
    /// The header an okta source's deliveries carry the secret in, lower-case; none:
    /// `authorization`.
    pub auth_header: Option<String>,
    /// The secret, sealed.
    pub secret: String,
    /// The secret before the last rotation, sealed, while it is still accepted.
    pub previous_secret: Option<String>,
    /// Until when the previous secret is accepted.
    pub previous_secret_expires_at: Option<DateTime<Utc>>,
    /// Creation time.
    pub created_at: DateTime<Utc>,
    /// Last rotation of the secret.
    pub secret_rotated_at: Option<DateTime<Utc>>,
}

impl std::fmt::Debug for SourceRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SourceRecord")
            .field("id", &self.id)
            .field("org_id", &self.org_id)
            .field("name", &self.name)
            .field("kind", &self.kind)
            .field("event_source", &self.event_source)
            .finish_non_exhaustive()
    }
}

/// A source to create, validated and its secret sealed.
#[derive(Clone)]
pub struct NewSource<'a> {
    /// Identifier (the secret is sealed for it).
    pub id: EventSourceId,
    /// Name.
    pub name: &'a str,
    /// `standard_webhooks` or `okta`.
    pub kind: &'static str,
    /// Pointer to the type.
    pub type_pointer: Option<&'a str>,
    /// Fixed type.
    pub fixed_type: Option<&'a str>,
    /// CloudEvents source.
    pub event_source: &'a str,
    /// The header an okta source's deliveries carry the secret in (lower-case), if not
    /// `authorization`.
    pub auth_header: Option<&'a str>,
    /// Sealed secret.
    pub secret: &'a str,
}

const COLUMNS: &str = "id, org_id, name, kind, type_pointer, fixed_type, event_source, auth_header,
    secret, previous_secret, previous_secret_expires_at, created_at, secret_rotated_at";

/// Creates a source; `None` when the organization has a source with its CloudEvents `source`.
pub async fn create<'e>(
    executor: impl PgExecutor<'e>,
    org_id: OrgId,
    source: &NewSource<'_>,
) -> Result<Option<SourceRecord>, sqlx::Error> {
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "INSERT INTO event_sources (id, org_id, name, kind, type_pointer, fixed_type,
                                    event_source, secret, auth_header)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
         ON CONFLICT (org_id, event_source) DO NOTHING
         RETURNING {COLUMNS}"
    )))
    .bind(source.id)
    .bind(org_id)
    .bind(source.name)
    .bind(source.kind)
    .bind(source.type_pointer)
    .bind(source.fixed_type)
    .bind(source.event_source)
    .bind(source.secret)
    .bind(source.auth_header)
    .fetch_optional(executor)
    .await
}

/// One source of the organization.
pub async fn get<'e>(
    executor: impl PgExecutor<'e>,
    org_id: OrgId,
    id: EventSourceId,
) -> Result<Option<SourceRecord>, sqlx::Error> {
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {COLUMNS} FROM event_sources WHERE org_id = $1 AND id = $2"
    )))
    .bind(org_id)
    .bind(id)
    .fetch_optional(executor)
    .await
}

/// A source by its id alone: what an inbound delivery names, before it is authenticated.
pub async fn find<'e>(
    executor: impl PgExecutor<'e>,
    id: EventSourceId,
) -> Result<Option<SourceRecord>, sqlx::Error> {
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {COLUMNS} FROM event_sources WHERE id = $1"
    )))
    .bind(id)
    .fetch_optional(executor)
    .await
}

/// A page of the organization's sources in id order, after `after` when given.
pub async fn list<'e>(
    executor: impl PgExecutor<'e>,
    org_id: OrgId,
    after: Option<EventSourceId>,
    limit: i64,
) -> Result<Vec<SourceRecord>, sqlx::Error> {
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {COLUMNS} FROM event_sources
         WHERE org_id = $1 AND ($2::uuid IS NULL OR id > $2)
         ORDER BY id LIMIT $3"
    )))
    .bind(org_id)
    .bind(after)
    .bind(limit)
    .fetch_all(executor)
    .await
}

/// How many sources the organization has.
pub async fn count<'e>(executor: impl PgExecutor<'e>, org_id: OrgId) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar("SELECT count(*) FROM event_sources WHERE org_id = $1")
        .bind(org_id)
        .fetch_one(executor)
        .await
}

/// Gives the source a new (sealed) secret; the current one stays accepted for `overlap`.
/// `None` when the organization has no such source.
pub async fn rotate_secret<'e>(
    executor: impl PgExecutor<'e>,
    org_id: OrgId,
    id: EventSourceId,
    secret: &str,
    overlap: Duration,
) -> Result<Option<SourceRecord>, sqlx::Error> {
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "UPDATE event_sources SET previous_secret = secret, secret = $3,
            previous_secret_expires_at = now() + $4 * interval '1 millisecond',
            secret_rotated_at = now()
         WHERE org_id = $1 AND id = $2
         RETURNING {COLUMNS}"
    )))
    .bind(org_id)
    .bind(id)
    .bind(secret)
    .bind(i64::try_from(overlap.as_millis()).unwrap_or(i64::MAX))
    .fetch_optional(executor)
    .await
}

/// Deletes a source (the events it delivered stay); false when the organization has no such
/// source.
pub async fn delete<'e>(
    executor: impl PgExecutor<'e>,
    org_id: OrgId,
    id: EventSourceId,
) -> Result<bool, sqlx::Error> {
    let deleted = sqlx::query("DELETE FROM event_sources WHERE org_id = $1 AND id = $2")
        .bind(org_id)
        .bind(id)
        .execute(executor)
        .await?;
    Ok(deleted.rows_affected() == 1)
}
