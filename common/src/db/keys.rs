//! API keys. The secret (`fsk_…`) is shown once; only its SHA-256 and a short prefix are kept.
//! A key stops authenticating when it is revoked or, after a roll, when its expiry passes.

use std::time::Duration;

use chrono::{DateTime, Utc};
use flow_domain::ids::{KeyId, OrgId};
use sha2::{Digest, Sha256};
use sqlx::{FromRow, PgConnection, PgExecutor};

use super::orgs::Organization;

/// Prefix of every secret key.
pub const KEY_PREFIX: &str = "fsk_";

/// A key record (never the secret).
#[derive(Debug, Clone, FromRow)]
pub struct ApiKey {
    pub id: KeyId,
    /// Owning organization.
    pub org_id: OrgId,
    /// Free-form label.
    pub name: String,
    /// The first characters of the secret, to recognise it.
    pub prefix: String,
    /// Creation time.
    pub created_at: DateTime<Utc>,
    /// When it was revoked.
    pub revoked_at: Option<DateTime<Utc>>,
    /// Last time it authenticated a request (updated at most once a minute).
    pub last_used_at: Option<DateTime<Utc>>,
    /// When it stops working (set when the key is rolled).
    pub expires_at: Option<DateTime<Utc>>,
    /// Restricted to SCIM provisioning (`/scim/v2`): refused on `/v1`.
    pub scim_only: bool,
}

const KEY_COLUMNS: &str =
    "id, org_id, name, prefix, created_at, revoked_at, last_used_at, expires_at, scim_only";

/// SHA-256 of a presented secret: what is stored and looked up.
pub fn hash_secret(secret: &str) -> [u8; 32] {
    Sha256::digest(secret.as_bytes()).into()
}

/// A new random secret: `fsk_` and 48 hex characters (192 bits).
pub fn generate_secret() -> String {
    let mut bytes = [0u8; 24];
    rand::fill(&mut bytes);
    format!("{KEY_PREFIX}{}", hex::encode(bytes))
}

/// Creates a key for `org_id`; returns the record and the secret, which is not stored.
pub async fn create<'e>(
    executor: impl PgExecutor<'e>,
    org_id: OrgId,
    name: &str,
) -> Result<(ApiKey, String), sqlx::Error> {
    create_scoped(executor, org_id, name, false).await
}

/// Creates a key for `org_id`, restricted to SCIM when `scim_only`; returns the record and the
/// secret, which is not stored.
pub async fn create_scoped<'e>(
    executor: impl PgExecutor<'e>,
    org_id: OrgId,
    name: &str,
    scim_only: bool,
) -> Result<(ApiKey, String), sqlx::Error> {
    let secret = generate_secret();
    let prefix: String = secret.chars().take(KEY_PREFIX.len() + 8).collect();
    let key: ApiKey = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "INSERT INTO api_keys (id, org_id, name, key_hash, prefix, scim_only)
         VALUES ($1, $2, $3, $4, $5, $6)
         RETURNING {KEY_COLUMNS}"
    )))
    .bind(KeyId::new())
    .bind(org_id)
    .bind(name)
    .bind(hash_secret(&secret).as_slice())
    .bind(&prefix)
    .bind(scim_only)
    .fetch_one(executor)
    .await?;
    Ok((key, secret))
}

/// Revokes a key by id (only within `org_id` when given) in the caller's transaction and makes
/// API replicas drop cached keys at once when it commits. Returns the organization of the key
/// revoked, `None` when there was no such working key.
pub async fn revoke(
    connection: &mut PgConnection,
    org_id: Option<OrgId>,
    id: KeyId,
) -> Result<Option<OrgId>, sqlx::Error> {
    let revoked: Option<OrgId> = sqlx::query_scalar(
        "UPDATE api_keys SET revoked_at = now()
         WHERE id = $1 AND revoked_at IS NULL AND ($2::uuid IS NULL OR org_id = $2)
         RETURNING org_id",
    )
    .bind(id)
    .bind(org_id)
    .fetch_optional(&mut *connection)
    .await?;
    super::notify(&mut *connection, super::INVALIDATE_CHANNEL, "keys").await?;
    Ok(revoked)
}

/// A key rolled by [`roll`].
#[derive(Debug, Clone)]
pub struct Rolled {
    /// The old key, working until its (new) expiry.
    pub old: ApiKey,
    /// Its replacement.
    pub key: ApiKey,
    /// The replacement's secret, shown once.
    pub secret: String,
}

/// Rolls a working key of `org_id` in the caller's transaction: creates its replacement (same
/// name) and lets the old key work for `overlap` more (never longer than it already would).
/// `None` when there is no such working key. Replicas drop cached keys once it commits.
pub async fn roll(
    connection: &mut PgConnection,
    org_id: OrgId,
    id: KeyId,
    overlap: Duration,
) -> Result<Option<Rolled>, sqlx::Error> {
    let old: Option<ApiKey> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "UPDATE api_keys SET expires_at = LEAST(COALESCE(expires_at, 'infinity'),
                                                now() + $3 * interval '1 millisecond')
         WHERE id = $1 AND org_id = $2 AND revoked_at IS NULL
           AND (expires_at IS NULL OR expires_at > now())
         RETURNING {KEY_COLUMNS}"
    )))
    .bind(id)
    .bind(org_id)
    .bind(i64::try_from(overlap.as_millis()).unwrap_or(i64::MAX))
    .fetch_optional(&mut *connection)
    .await?;
    let Some(old) = old else {
        return Ok(None);
    };
    let (key, secret) = create_scoped(&mut *connection, org_id, &old.name, old.scim_only).await?;
    super::notify(&mut *connection, super::INVALIDATE_CHANNEL, "keys").await?;
    Ok(Some(Rolled { old, key, secret }))
}

/// Lists an organization's keys.
pub async fn list<'e>(
    executor: impl PgExecutor<'e>,
    org_id: OrgId,
) -> Result<Vec<ApiKey>, sqlx::Error> {
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {KEY_COLUMNS} FROM api_keys WHERE org_id = $1 ORDER BY created_at"
    )))
    .bind(org_id)
    .fetch_all(executor)
    .await
}

/// A key that authenticates: its id, organization, expiry when it was rolled, and whether it is
/// restricted to SCIM.
pub type AuthenticatedKey = (KeyId, Organization, Option<DateTime<Utc>>, bool);

/// The organization a working key (not revoked, not expired) belongs to, and the key's expiry.
pub async fn authenticate<'e>(
    executor: impl PgExecutor<'e>,
    hash: &[u8; 32],
) -> Result<Option<AuthenticatedKey>, sqlx::Error> {
    #[derive(FromRow)]
    struct Row {
        key_id: KeyId,
        key_expires_at: Option<DateTime<Utc>>,
        key_scim_only: bool,
        #[sqlx(flatten)]
        org: Organization,
    }
    let row: Option<Row> = sqlx::query_as(
        "SELECT k.id AS key_id, k.expires_at AS key_expires_at, k.scim_only AS key_scim_only,
                o.id, o.name, o.tier, o.timezone,
                o.assign_limit_per_minute, o.report_limit_per_minute, o.created_at, o.bulk_lane
         FROM api_keys k JOIN organizations o ON o.id = k.org_id
         WHERE k.key_hash = $1 AND k.revoked_at IS NULL
           AND (k.expires_at IS NULL OR k.expires_at > now())",
    )
    .bind(hash.as_slice())
    .fetch_optional(executor)
    .await?;
    Ok(row.map(|row| (row.key_id, row.org, row.key_expires_at, row.key_scim_only)))
}

/// Records that keys were used (batched by the API, at most once a minute per key).
pub async fn touch<'e>(executor: impl PgExecutor<'e>, ids: &[KeyId]) -> Result<(), sqlx::Error> {
    sqlx::query("UPDATE api_keys SET last_used_at = now() WHERE id = ANY($1)")
        .bind(ids)
        .execute(executor)
        .await
        .map(|_| ())
}
