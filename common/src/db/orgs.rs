//! Organizations: tier, time zone and rate-limit overrides.

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use flow_domain::ids::OrgId;
use flow_domain::lane::BULK_SHARDS;
use flow_domain::reminders::ReminderPolicy;
use sqlx::{FromRow, PgExecutor};

pub use flow_domain::Tier;

/// An organization row.
#[derive(Debug, Clone, FromRow)]
pub struct Organization {
    pub id: OrgId,
    /// Display name.
    pub name: String,
    /// Service tier (a stored name this build does not know fails the read).
    pub tier: Tier,
    /// IANA time zone used for plain dates and report periods.
    pub timezone: String,
    /// Override of the tier's assign limit.
    pub assign_limit_per_minute: Option<i32>,
    /// Override of the tier's report limit.
    pub report_limit_per_minute: Option<i32>,
    /// Creation time.
    pub created_at: DateTime<Utc>,
    /// Its place in the bulk lane: its bulk work goes to shard
    /// [`flow_domain::lane::bulk_shard`]`(bulk_lane)` (migration 0150).
    pub bulk_lane: i64,
}

impl Organization {
    /// The tier.
    pub fn tier(&self) -> Tier {
        self.tier
    }

    /// The time zone (UTC if the stored name is unknown to this build).
    pub fn zone(&self) -> Tz {
        self.timezone.parse().unwrap_or(Tz::UTC)
    }

    /// Effective assign requests per minute.
    pub fn assign_limit(&self) -> u32 {
        positive(self.assign_limit_per_minute).unwrap_or_else(|| self.tier().assign_limit())
    }

    /// Effective report requests per minute.
    pub fn report_limit(&self) -> u32 {
        positive(self.report_limit_per_minute).unwrap_or_else(|| self.tier().report_limit())
    }
}

fn positive(value: Option<i32>) -> Option<u32> {
    value
        .and_then(|value| u32::try_from(value).ok())
        .filter(|value| *value > 0)
}

/// What creating an organization takes.
#[derive(Debug, Clone)]
pub struct NewOrganization {
    /// Display name.
    pub name: String,
    pub tier: Tier,
    /// IANA time zone.
    pub timezone: Tz,
    /// Override of the assign limit.
    pub assign_limit_per_minute: Option<u32>,
    /// Override of the report limit.
    pub report_limit_per_minute: Option<u32>,
}

const COLUMNS: &str = "id, name, tier, timezone, assign_limit_per_minute, report_limit_per_minute, \
     created_at, bulk_lane";

/// Inserts an organization.
pub async fn create<'e>(
    executor: impl PgExecutor<'e>,
    new: &NewOrganization,
) -> Result<Organization, sqlx::Error> {
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "INSERT INTO organizations (id, name, tier, timezone, assign_limit_per_minute, report_limit_per_minute)
         VALUES ($1, $2, $3, $4, $5, $6) RETURNING {COLUMNS}"
    )))
    .bind(OrgId::new())
    .bind(&new.name)
    .bind(new.tier)
    .bind(new.timezone.name())
    .bind(new.assign_limit_per_minute.map(|limit| i32::try_from(limit).unwrap_or(i32::MAX)))
    .bind(new.report_limit_per_minute.map(|limit| i32::try_from(limit).unwrap_or(i32::MAX)))
    .fetch_one(executor)
    .await
}

/// Reads one organization.
pub async fn get<'e>(
    executor: impl PgExecutor<'e>,
    id: OrgId,
) -> Result<Option<Organization>, sqlx::Error> {
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {COLUMNS} FROM organizations WHERE id = $1"
    )))
    .bind(id)
    .fetch_optional(executor)
    .await
}

/// The oldest organization named exactly `name`, if there is one (names are not unique: the
/// demo finds its organization again by its name).
pub async fn oldest_named<'e>(
    executor: impl PgExecutor<'e>,
    name: &str,
) -> Result<Option<Organization>, sqlx::Error> {
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {COLUMNS} FROM organizations WHERE name = $1 ORDER BY created_at, id LIMIT 1"
    )))
    .bind(name)
    .fetch_optional(executor)
    .await
}

/// Changes an organization's tier and limit overrides (`None` keeps the current value; a limit
/// of `Some(0)` clears the override) and tells API replicas to drop cached copies.
pub async fn update_limits(
    pool: &sqlx::PgPool,
    id: OrgId,
    tier: Option<Tier>,
    assign_limit_per_minute: Option<u32>,
    report_limit_per_minute: Option<u32>,
) -> Result<Option<Organization>, sqlx::Error> {
    let mut transaction = pool.begin().await?;
    let clamp = |limit: u32| i32::try_from(limit).unwrap_or(i32::MAX);
    let updated: Option<Organization> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "UPDATE organizations SET
            tier = COALESCE($2, tier),
            assign_limit_per_minute = CASE WHEN $3::int IS NULL THEN assign_limit_per_minute
                                           ELSE NULLIF($3::int, 0) END,
            report_limit_per_minute = CASE WHEN $4::int IS NULL THEN report_limit_per_minute
                                           ELSE NULLIF($4::int, 0) END
         WHERE id = $1 RETURNING {COLUMNS}"
    )))
    .bind(id)
    .bind(tier)
    .bind(assign_limit_per_minute.map(clamp))
    .bind(report_limit_per_minute.map(clamp))
    .fetch_optional(&mut *transaction)
    .await?;
    super::notify(&mut *transaction, super::INVALIDATE_CHANNEL, "orgs").await?;
    transaction.commit().await?;
    Ok(updated)
}

/// Moves an organization to bulk lane `bulk_lane` (its shard is that number modulo
/// [`BULK_SHARDS`]) and tells API replicas to drop cached copies. Commands already
/// queued in the old shard are applied from there; new ones go to the new shard.
pub async fn move_bulk_lane(
    pool: &sqlx::PgPool,
    id: OrgId,
    bulk_lane: i64,
) -> Result<Option<Organization>, sqlx::Error> {
    let mut transaction = pool.begin().await?;
    let updated: Option<Organization> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "UPDATE organizations SET bulk_lane = $2 WHERE id = $1 RETURNING {COLUMNS}"
    )))
    .bind(id)
    .bind(bulk_lane)
    .fetch_optional(&mut *transaction)
    .await?;
    super::notify(&mut *transaction, super::INVALIDATE_CHANNEL, "orgs").await?;
    transaction.commit().await?;
    Ok(updated)
}

/// How many organizations each bulk shard holds, by shard (an operator's view before moving one).
pub async fn bulk_shard_counts<'e>(executor: impl PgExecutor<'e>) -> Result<Vec<i64>, sqlx::Error> {
    let shards = i64::from(BULK_SHARDS);
    let rows: Vec<(i64, i64)> =
        sqlx::query_as("SELECT bulk_lane % $1, count(*) FROM organizations GROUP BY 1 ORDER BY 1")
            .bind(shards)
            .fetch_all(executor)
            .await?;
    let mut counts = vec![0; usize::from(BULK_SHARDS)];
    for (shard, count) in rows {
        if let Some(slot) = usize::try_from(shard)
            .ok()
            .and_then(|shard| counts.get_mut(shard))
        {
            *slot = count;
        }
    }
    Ok(counts)
}

/// The lane numbers of the organizations `ids` (the relay routes each bulk event to its
/// organization's webhook queue by it); an unknown id is absent.
pub async fn bulk_lanes<'e>(
    executor: impl PgExecutor<'e>,
    ids: &[OrgId],
) -> Result<std::collections::HashMap<OrgId, i64>, sqlx::Error> {
    let rows: Vec<(OrgId, i64)> =
        sqlx::query_as("SELECT id, bulk_lane FROM organizations WHERE id = ANY($1)")
            .bind(ids)
            .fetch_all(executor)
            .await?;
    Ok(rows.into_iter().collect())
}

/// An organization's lifecycle settings (migration 0244), as its admins edit them.
#[derive(Debug, Clone, FromRow)]
pub struct OrgSettings {
    /// Whether deactivating a user cancels their open assignments.
    pub cancel_on_deactivate: bool,
    /// The default reminder policy of flows without one of their own; none when `None`.
    pub reminders: Option<sqlx::types::Json<ReminderPolicy>>,
}

/// The settings of the organization `id`.
pub async fn settings<'e>(
    executor: impl PgExecutor<'e>,
    id: OrgId,
) -> Result<Option<OrgSettings>, sqlx::Error> {
    sqlx::query_as("SELECT cancel_on_deactivate, reminders FROM organizations WHERE id = $1")
        .bind(id)
        .fetch_optional(executor)
        .await
}

/// Changes the organization's settings: each `None` keeps its value; `reminders` of
/// `Some(None)` clears the default policy. Answers the settings as they are then.
pub async fn update_settings<'e>(
    executor: impl PgExecutor<'e>,
    id: OrgId,
    cancel_on_deactivate: Option<bool>,
    reminders: Option<Option<&ReminderPolicy>>,
) -> Result<Option<OrgSettings>, sqlx::Error> {
    sqlx::query_as(
        "UPDATE organizations SET
            cancel_on_deactivate = COALESCE($2, cancel_on_deactivate),
            reminders = CASE WHEN $3 THEN $4 ELSE reminders END
         WHERE id = $1 RETURNING cancel_on_deactivate, reminders",
    )
    .bind(id)
    .bind(cancel_on_deactivate)
    .bind(reminders.is_some())
    .bind(reminders.flatten().map(sqlx::types::Json))
    .fetch_optional(executor)
    .await
}
