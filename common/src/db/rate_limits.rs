//! Shared rate-limit buckets (GCRA in Postgres, see migration 0008).

use flow_domain::ids::OrgId;
use sqlx::{FromRow, PgExecutor};

/// The answer of one lease request.
#[derive(Debug, Clone, Copy, FromRow)]
pub struct Lease {
    /// Tokens granted (0 when fewer than the needed amount were available).
    pub granted: i32,
    /// When nothing was granted: milliseconds until the needed tokens are available.
    pub wait_ms: i64,
    /// Milliseconds until the bucket is full again.
    pub reset_ms: i64,
    /// Tokens left in the shared bucket after this grant.
    pub remaining: i32,
}

/// Takes between `need` and `want` tokens from the bucket of (`org_id`, `operation`), which holds
/// `limit` tokens per `window_ms` refilled smoothly; grants nothing if fewer than `need` are there.
pub async fn take<'e>(
    executor: impl PgExecutor<'e>,
    org_id: OrgId,
    operation: &str,
    limit: u32,
    window_ms: u64,
    want: u32,
    need: u32,
) -> Result<Lease, sqlx::Error> {
    let clamp = |value: u32| i32::try_from(value).unwrap_or(i32::MAX);
    sqlx::query_as(
        "SELECT granted, wait_ms, reset_ms, remaining FROM rate_limit_take($1, $2, $3, $4, $5, $6)",
    )
    .bind(org_id)
    .bind(operation)
    .bind(clamp(limit.max(1)))
    .bind(i64::try_from(window_ms).unwrap_or(i64::MAX))
    .bind(clamp(want))
    .bind(clamp(need))
    .fetch_one(executor)
    .await
}
