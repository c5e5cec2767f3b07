//! Organizations, as an operator makes and tunes them (`flowctl org`, the demo): create one, read
//! one, change its tier or limit overrides, move its queue in the bulk assign lane. The changes
//! of limits and lanes tell every API replica to drop its cached copy. No audit row: the audit
//! trail is an organization's record of changes made inside it, and these are the operator's.

use flow_common::db::orgs::{self, NewOrganization, Organization, Tier};
use flow_domain::ids::OrgId;

use crate::{Context, ServiceError};

/// Creates an organization.
pub async fn create(ctx: &Context, new: &NewOrganization) -> Result<Organization, ServiceError> {
    let org = orgs::create(&ctx.db, new).await?;
    tracing::info!(org_id = %org.id, tier = %org.tier, "organization created");
    Ok(org)
}

/// The organization `id`, if there is one.
pub async fn get(ctx: &Context, id: OrgId) -> Result<Option<Organization>, ServiceError> {
    Ok(orgs::get(&ctx.db, id).await?)
}

/// The oldest organization named exactly `name`, if there is one (`flowctl up --demo` finds
/// its organization again by its name).
pub async fn oldest_named(ctx: &Context, name: &str) -> Result<Option<Organization>, ServiceError> {
    Ok(orgs::oldest_named(&ctx.db, name).await?)
}

/// Changes the organization's tier and limit overrides (`None` keeps the current value; a limit of
/// `Some(0)` clears the override); `None` when there is no such organization.
pub async fn update_limits(
    ctx: &Context,
    id: OrgId,
    tier: Option<Tier>,
    assign_limit_per_minute: Option<u32>,
    report_limit_per_minute: Option<u32>,
) -> Result<Option<Organization>, ServiceError> {
    Ok(orgs::update_limits(
        &ctx.db,
        id,
        tier,
        assign_limit_per_minute,
        report_limit_per_minute,
    )
    .await?)
}

/// Moves the organization's later bulk work to `bulk_lane` (commands already queued are applied
/// where they are); `None` when there is no such organization.
pub async fn move_bulk_lane(
    ctx: &Context,
    id: OrgId,
    bulk_lane: i64,
) -> Result<Option<Organization>, ServiceError> {
    Ok(orgs::move_bulk_lane(&ctx.db, id, bulk_lane).await?)
}

/// How many organizations each queue of the bulk assign lane holds, by queue.
pub async fn bulk_shard_counts(ctx: &Context) -> Result<Vec<i64>, ServiceError> {
    Ok(orgs::bulk_shard_counts(&ctx.db).await?)
}
