//! Per-organization, per-operation rate limits shared by every API replica.
//!
//! The shared state is a GCRA bucket in Postgres (smooth refill: no double burst across a minute
//! boundary). Each replica leases tokens from it in small batches (about 1% of the limit, at least
//! one) and spends them locally, so at high rates most requests never touch the database, while at
//! a 100/min limit every request is counted exactly. Unused leased tokens lapse after a moment so
//! a replica cannot hoard them.

use std::sync::Arc;
use std::time::{Duration, Instant};

use flow_common::db::orgs::Tier;
use flow_common::db::rate_limits;
use flow_domain::ids::OrgId;
use moka::sync::Cache;
use sqlx::PgPool;
use tokio::sync::Mutex;

use crate::caller::Caller;

/// The length of a rate-limit window.
pub const WINDOW: Duration = crate::engine::enrollment::BUDGET_WINDOW;

/// How long leased tokens stay usable.
const LEASE_LIFETIME: Duration = Duration::from_secs(2);

/// A rate-limited operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operation {
    /// `POST /v1/flows/assign` (and each item of a bulk assign), and each assignment an
    /// enrollment rule makes (charged by `crate::engine::enrollment`, deferred when over).
    Assign,
    /// `POST /v1/flows/report`.
    Report,
    /// Requests the service sends to a customer's endpoint on demand: test pings
    /// (`POST /v1/webhooks/{id}/test`) and manual retries
    /// (`POST /v1/webhooks/deliveries/{id}/retry`), limited so the service cannot be used to aim
    /// traffic at third parties. A recovery of failed deliveries costs one per delivery.
    WebhookSend,
    /// The dashboard's "recover failed deliveries since T" action itself, whatever it queues
    /// (its deliveries count against [`Operation::WebhookSend`]).
    WebhookRecover,
    /// Reads: every authenticated `GET` under `/v1/`; a list page costs [`page_cost`].
    Read,
    /// Writes that the other limits do not count: module progress, users, flows, cancelling a
    /// schedule, creating and deleting webhook endpoints.
    Write,
}

/// Read requests allowed per report request of the organization's limit: standard 1,000 a
/// minute, enterprise 10,000 (a raised report limit raises it too).
pub const READS_PER_REPORT: u32 = 20;

/// Write requests allowed per assign request of the organization's limit: standard 1,000 a
/// minute, enterprise 10,000 (a raised assign limit raises it too), so that the progress of what
/// was assigned fits.
pub const WRITES_PER_ASSIGN: u32 = 10;

/// Items of a list page (or of a bulk write) that cost one read (or write) request.
pub const ITEMS_PER_REQUEST: i64 = 100;

/// Users of the organization a rule preview walks per read request it costs.
pub const USERS_PER_PREVIEW_READ: i64 = 1_000;

/// What a rule preview costs: one read request per started [`USERS_PER_PREVIEW_READ`] users of
/// the organization (it walks them all), at least one.
pub fn preview_cost(users: i64) -> u32 {
    let started = (users.max(1) - 1) / USERS_PER_PREVIEW_READ + 1;
    u32::try_from(started).unwrap_or(u32::MAX)
}

/// What a page of `limit` items (or a bulk write of `limit` items) costs: one request per started
/// [`ITEMS_PER_REQUEST`], so a page of 1,000 costs as much as ten of 100.
pub fn page_cost(limit: i64) -> u32 {
    let pages = (limit.max(1) - 1) / ITEMS_PER_REQUEST + 1;
    u32::try_from(pages).unwrap_or(u32::MAX)
}

impl Operation {
    /// Name used in storage and messages.
    pub fn as_str(self) -> &'static str {
        match self {
            // Rule assignments are charged to the same bucket by name (crate::engine::enrollment).
            Self::Assign => crate::engine::enrollment::ASSIGN_BUDGET,
            Self::Report => "report",
            Self::WebhookSend => "webhook_send",
            Self::WebhookRecover => "webhook_recover",
            Self::Read => "read",
            Self::Write => "write",
        }
    }

    /// The caller's per-minute limit for this operation.
    pub fn limit(self, caller: &Caller) -> u32 {
        match self {
            Self::Assign => caller.org.assign_limit(),
            Self::Report => caller.org.report_limit(),
            Self::WebhookSend => match caller.org.tier() {
                Tier::Standard => 60,
                Tier::Enterprise => 600,
            },
            Self::WebhookRecover => match caller.org.tier() {
                Tier::Standard => 5,
                Tier::Enterprise => 20,
            },
            Self::Read => caller.org.report_limit().saturating_mul(READS_PER_REPORT),
            Self::Write => caller.org.assign_limit().saturating_mul(WRITES_PER_ASSIGN),
        }
    }
}

/// Where the caller stands against a limit: what the `RateLimit-*` headers of the answer say.
#[derive(Debug, Clone, Copy)]
pub struct RateInfo {
    /// Requests per minute.
    pub limit: u32,
    /// Requests left now.
    pub remaining: u32,
    /// Seconds until the full limit is available again.
    pub reset_seconds: u64,
}

/// Why the limiter did not grant a request.
#[derive(Debug, thiserror::Error)]
pub enum RateLimitError {
    /// The caller has no allowance left for the operation.
    #[error("rate limit of {} {} requests per minute exceeded; retry after {retry_after} s", info.limit, operation.as_str())]
    Exceeded {
        /// The operation refused.
        operation: Operation,
        /// Seconds to wait before the allowance covers the request again.
        retry_after: u64,
        /// Where the caller stands.
        info: RateInfo,
    },
    /// The shared bucket in Postgres could not be read or updated.
    #[error("rate limit bucket: {0}")]
    Database(#[from] sqlx::Error),
}

#[derive(Debug)]
struct LocalBucket {
    tokens: u32,
    expires: Instant,
    shared_remaining: u32,
    reset_at: Instant,
}

/// The limiter. Cheap to clone.
#[derive(Clone)]
pub struct RateLimiter {
    pool: PgPool,
    buckets: Cache<(OrgId, Operation), Arc<Mutex<LocalBucket>>>,
}

impl RateLimiter {
    /// A limiter over the shared buckets in `pool`.
    pub fn new(pool: PgPool) -> Self {
        Self {
            pool,
            buckets: Cache::builder()
                .max_capacity(100_000)
                .time_to_idle(Duration::from_secs(300))
                .build(),
        }
    }

    /// Spends `cost` tokens of `operation` for the caller, or refuses with
    /// [`RateLimitError::Exceeded`] (answered 429).
    pub async fn check(
        &self,
        caller: &Caller,
        operation: Operation,
        cost: u32,
    ) -> Result<RateInfo, RateLimitError> {
        let limit = operation.limit(caller);
        let (granted, info, wait) = self
            .take(caller.org_id(), operation, limit, cost, cost)
            .await?;
        if granted < cost {
            return Err(RateLimitError::Exceeded {
                operation,
                retry_after: wait.as_secs_f64().ceil().max(1.0) as u64,
                info,
            });
        }
        Ok(info)
    }

    /// Spends between 1 and `wanted` tokens (bulk requests: items beyond the grant are answered
    /// 429 individually). Returns how many were granted, where the caller stands, and the seconds
    /// to wait for more.
    pub async fn check_up_to(
        &self,
        caller: &Caller,
        operation: Operation,
        wanted: u32,
    ) -> Result<(u32, RateInfo, u64), RateLimitError> {
        let limit = operation.limit(caller);
        let (granted, info, wait) = self
            .take(caller.org_id(), operation, limit, wanted, 1)
            .await?;
        Ok((granted, info, wait.as_secs_f64().ceil().max(1.0) as u64))
    }

    async fn take(
        &self,
        org_id: OrgId,
        operation: Operation,
        limit: u32,
        wanted: u32,
        needed: u32,
    ) -> Result<(u32, RateInfo, Duration), sqlx::Error> {
        let bucket = self.buckets.get_with((org_id, operation), || {
            Arc::new(Mutex::new(LocalBucket {
                tokens: 0,
                expires: Instant::now(),
                shared_remaining: limit,
                reset_at: Instant::now(),
            }))
        });
        let mut bucket = bucket.lock().await;
        let now = Instant::now();
        if bucket.expires <= now {
            bucket.tokens = 0;
        }
        let mut wait = Duration::ZERO;
        if bucket.tokens < wanted {
            let lease_size = (limit / 100).clamp(1, 10_000);
            let missing = wanted - bucket.tokens;
            let want = missing.saturating_add(lease_size - 1);
            let need = needed.saturating_sub(bucket.tokens);
            let lease = rate_limits::take(
                &self.pool,
                org_id,
                operation.as_str(),
                limit,
                WINDOW.as_millis() as u64,
                want,
                need.min(want),
            )
            .await?;
            let granted = u32::try_from(lease.granted.max(0)).unwrap_or(0);
            if granted > 0 {
                bucket.tokens = bucket.tokens.saturating_add(granted);
                bucket.expires = now + LEASE_LIFETIME;
            } else {
                wait = Duration::from_millis(u64::try_from(lease.wait_ms.max(0)).unwrap_or(0));
            }
            bucket.shared_remaining = u32::try_from(lease.remaining.max(0)).unwrap_or(0);
            bucket.reset_at =
                now + Duration::from_millis(u64::try_from(lease.reset_ms.max(0)).unwrap_or(0));
        }
        let spent = bucket.tokens.min(wanted);
        let spent = if spent < needed { 0 } else { spent };
        bucket.tokens -= spent;
        let info = RateInfo {
            limit,
            remaining: bucket
                .shared_remaining
                .saturating_add(bucket.tokens)
                .min(limit),
            reset_seconds: bucket
                .reset_at
                .saturating_duration_since(now)
                .as_secs_f64()
                .ceil() as u64,
        };
        Ok((spent, info, wait))
    }
}
