//! Read-through caches of what the hot path needs from Postgres: API keys (with their
//! organization), flow summaries and organizations' enrollment rules. Every replica listens on
//! a Postgres channel and drops its copies the moment a key is revoked or an organization, flow
//! or rule changes; a short time-to-live bounds staleness should a notification be missed.
//!
//! Keys that do not authenticate are remembered too, and one client address may only have so
//! many keys looked up in vain a minute: a flood of made-up keys is answered from memory, not by
//! Postgres.

use std::hash::Hash;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use flow_common::db::{self, flows::FlowSummary, keys};
use flow_common::runtime::{Supervisor, Wakeup};
use flow_domain::enrollment::Rule;
use flow_domain::ids::{FlowId, KeyId, OrgId};
use moka::sync::Cache;
use sqlx::PgPool;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::caller::Caller;
use crate::engine::enrollment::{self as enrollment, EnrollmentError};

/// Uncached keys one client address may have looked up in Postgres per
/// [`UNKNOWN_KEY_WINDOW`] without any of them authenticating, on one API replica.
pub const UNKNOWN_KEYS_PER_ADDRESS: u32 = 20;

/// The window of [`UNKNOWN_KEYS_PER_ADDRESS`]; it starts at the address's first lookup of an
/// uncached key.
pub const UNKNOWN_KEY_WINDOW: Duration = Duration::from_secs(60);

/// Signed deliveries to `/v1/events/inbound/…` one client address may have had refused (not
/// authenticated) per [`REFUSED_DELIVERY_WINDOW`], on one API replica: past it, its deliveries
/// are answered 429 without a source being looked up or a signature computed.
pub const REFUSED_DELIVERIES_PER_ADDRESS: u32 = 20;

/// The window of [`REFUSED_DELIVERIES_PER_ADDRESS`]; it starts at the address's first delivery.
pub const REFUSED_DELIVERY_WINDOW: Duration = Duration::from_secs(60);

/// How long an organization's enrollment rules are cached: a change made on another replica
/// whose notification was missed applies here after at most this long.
pub const RULES_TIME_TO_LIVE: Duration = Duration::from_secs(5);

/// The payload of the invalidation notice of enrollment rules, followed by `:` and the
/// organization's id (`rules:org_…`): only that organization's rules are dropped. The bare
/// payload (from an older build) drops every organization's.
pub const RULES_CHANGED: &str = "rules";

/// The invalidation notice of one organization's enrollment rules.
pub fn rules_changed_payload(org_id: OrgId) -> String {
    format!("{RULES_CHANGED}:{org_id}")
}

/// How long a key that does not authenticate is remembered. Not authenticating is final (keys
/// are only ever revoked or made to expire sooner, and a secret is unknown before its key
/// exists), so invalidations leave these entries alone.
const UNKNOWN_KEY_MEMORY: Duration = Duration::from_secs(600);

/// Why a cache could not answer.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    /// The value was not cached, and Postgres could not be read.
    #[error("loading a cache entry: {0}")]
    Database(#[from] sqlx::Error),
    /// The client's address had [`UNKNOWN_KEYS_PER_ADDRESS`] keys looked up in vain in this
    /// window: the key is not looked up.
    #[error(
        "too many unknown API keys from this address ({UNKNOWN_KEYS_PER_ADDRESS} a minute); \
         retry after {retry_after} s with a valid key"
    )]
    TooManyUnknownKeys {
        /// Seconds until the address's window ends.
        retry_after: u64,
    },
    /// The client's address had [`REFUSED_DELIVERIES_PER_ADDRESS`] signed deliveries refused in
    /// this window: the delivery is not looked at.
    #[error(
        "too many unauthenticated deliveries from this address ({REFUSED_DELIVERIES_PER_ADDRESS} \
         a minute); retry after {retry_after} s with a valid signature"
    )]
    TooManyRefusedDeliveries {
        /// Seconds until the address's window ends.
        retry_after: u64,
    },
}

/// The failed attempts of one client address (keys looked up in vain, or signed deliveries
/// refused) in its current window.
#[derive(Debug)]
pub struct AddressWindow {
    started: Instant,
    /// Attempts that failed.
    misses: AtomicU32,
    /// Whether the refusals of this window were logged.
    logged: AtomicBool,
}

impl AddressWindow {
    /// Counts one failed attempt of the address.
    pub fn failed(&self) {
        self.misses.fetch_add(1, Ordering::SeqCst);
    }
}

/// The current window of `address`'s group among `windows`, or — when it has had `limit` failed
/// attempts — the seconds until it ends (logged once per window as `what`).
fn window_of(
    windows: &Cache<IpAddr, Arc<AddressWindow>>,
    address: IpAddr,
    limit: u32,
    length: Duration,
    what: &'static str,
) -> Result<Arc<AddressWindow>, u64> {
    let group = address_group(address);
    let window = windows.get_with(group, || {
        Arc::new(AddressWindow {
            started: Instant::now(),
            misses: AtomicU32::new(0),
            logged: AtomicBool::new(false),
        })
    });
    if window.misses.load(Ordering::SeqCst) < limit {
        return Ok(window);
    }
    if !window.logged.swap(true, Ordering::SeqCst) {
        tracing::warn!(
            address = %group,
            limit,
            "a client address had too many {what}; refusing it until its window ends"
        );
    }
    let left = length.saturating_sub(window.started.elapsed());
    Err(left.as_secs_f64().ceil().max(1.0) as u64)
}

/// The group a client address is counted in: an IPv4 address, or the /64 of an IPv6 address
/// (one host or site gets a whole /64, so counting single IPv6 addresses would count nothing).
/// IPv4-mapped IPv6 addresses count as their IPv4 address.
pub fn address_group(address: IpAddr) -> IpAddr {
    match address {
        IpAddr::V4(_) => address,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(Ipv6Addr::from_bits(v6.to_bits() & !u128::from(u64::MAX))),
        },
    }
}

/// A cache whose invalidations also reach loads that are under way: a value read from Postgres
/// before an invalidation is not cached after it. Without this, a key looked up just before its
/// revocation committed would be cached after the revocation notice dropped the cache, and stay
/// valid on that replica for the whole time-to-live.
#[derive(Clone)]
pub struct EpochCache<K, V> {
    cache: Cache<K, V>,
    /// Incremented by every invalidation.
    epoch: Arc<AtomicU64>,
}

impl<K, V> EpochCache<K, V>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
{
    /// An empty cache of at most `capacity` entries, each kept at most `time_to_live`.
    pub fn new(capacity: u64, time_to_live: Duration) -> Self {
        Self {
            cache: Cache::builder()
                .max_capacity(capacity)
                .time_to_live(time_to_live)
                .build(),
            epoch: Arc::new(AtomicU64::new(0)),
        }
    }

    /// The cached value.
    pub fn get(&self, key: &K) -> Option<V> {
        self.cache.get(key)
    }

    /// The current epoch: take it before starting to load a value, and hand it to
    /// [`EpochCache::insert_loaded`].
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::SeqCst)
    }

    /// Caches a value loaded since `epoch`, unless an invalidation came in the meantime (the
    /// value may predate it).
    pub fn insert_loaded(&self, epoch: u64, key: K, value: V) {
        if self.epoch() != epoch {
            return;
        }
        self.cache.insert(key.clone(), value);
        // An invalidation between the check and the insert has already cleared the cache, so it
        // would miss this entry: check again and take it back out.
        if self.epoch() != epoch {
            self.cache.invalidate(&key);
        }
    }

    /// Drops one entry, and every load under way (a load of another key that was under way is
    /// not cached either: a cache miss later, never a stale value).
    pub fn invalidate(&self, key: &K) {
        self.epoch.fetch_add(1, Ordering::SeqCst);
        self.cache.invalidate(key);
    }

    /// Drops every entry, and every load under way.
    pub fn invalidate_all(&self) {
        self.epoch.fetch_add(1, Ordering::SeqCst);
        self.cache.invalidate_all();
    }
}

/// The API's caches. Cheap to clone.
#[derive(Clone)]
pub struct Caches {
    keys: EpochCache<[u8; 32], Arc<Caller>>,
    /// Hashes of keys that did not authenticate.
    unknown_keys: Cache<[u8; 32], ()>,
    /// Lookups of uncached keys per client address group, for [`UNKNOWN_KEYS_PER_ADDRESS`].
    unknown_key_windows: Cache<IpAddr, Arc<AddressWindow>>,
    /// Refused signed deliveries per client address group, for
    /// [`REFUSED_DELIVERIES_PER_ADDRESS`].
    refused_delivery_windows: Cache<IpAddr, Arc<AddressWindow>>,
    /// When rolled keys stop working: a cached key is refused from then on.
    key_expiries: Cache<KeyId, DateTime<Utc>>,
    flows: EpochCache<FlowId, Arc<FlowSummary>>,
    /// Each organization's enrollment rules, read on every user write.
    rules: EpochCache<OrgId, Arc<[Rule]>>,
    touched: Cache<KeyId, ()>,
    touch_queue: mpsc::Sender<KeyId>,
}

impl Caches {
    /// Empty caches over `pool`, kept current by a listener for invalidations, with a writer
    /// of the keys' `last_used_at`; both run in `background`.
    pub fn start(pool: &PgPool, background: &Supervisor) -> Self {
        let (touch_queue, touches) = mpsc::channel(10_000);
        let caches = Self::new(touch_queue);
        background.spawn("cache invalidation listener", |stop| {
            caches.clone().listen(pool.clone(), stop)
        });
        background.spawn("API key use recorder", |stop| {
            record_key_use(pool.clone(), touches, stop)
        });
        caches
    }

    /// Empty caches; `touch_queue` receives key ids to mark as used.
    fn new(touch_queue: mpsc::Sender<KeyId>) -> Self {
        Self {
            keys: EpochCache::new(100_000, Duration::from_secs(60)),
            unknown_keys: Cache::builder()
                .max_capacity(100_000)
                .time_to_live(UNKNOWN_KEY_MEMORY)
                .build(),
            unknown_key_windows: Cache::builder()
                .max_capacity(100_000)
                .time_to_live(UNKNOWN_KEY_WINDOW)
                .build(),
            refused_delivery_windows: Cache::builder()
                .max_capacity(100_000)
                .time_to_live(REFUSED_DELIVERY_WINDOW)
                .build(),
            flows: EpochCache::new(100_000, Duration::from_secs(600)),
            rules: EpochCache::new(10_000, RULES_TIME_TO_LIVE),
            // Outlives the key entry it guards.
            key_expiries: Cache::builder()
                .max_capacity(100_000)
                .time_to_live(Duration::from_secs(120))
                .build(),
            touched: Cache::builder()
                .max_capacity(100_000)
                .time_to_live(Duration::from_secs(60))
                .build(),
            touch_queue,
        }
    }

    /// The caller a secret key authenticates, if any. `client` is the caller's address: a key
    /// neither cached nor remembered as unknown is only looked up in Postgres while that
    /// address has had fewer than [`UNKNOWN_KEYS_PER_ADDRESS`] keys looked up in vain in its
    /// window. Misses are counted once known, so that a burst of requests with one valid key
    /// (a replica that just started, a cache just invalidated) is never refused; lookups already
    /// under way when the limit is reached still finish.
    pub async fn authenticate(
        &self,
        pool: &PgPool,
        secret: &str,
        client: Option<IpAddr>,
    ) -> Result<Option<Arc<Caller>>, CacheError> {
        if !secret.starts_with(keys::KEY_PREFIX) || secret.len() > 200 {
            return Ok(None);
        }
        let hash = keys::hash_secret(secret);
        let caller = match self.keys.get(&hash) {
            Some(cached) => Some(cached),
            None if self.unknown_keys.contains_key(&hash) => None,
            None => {
                let window = client
                    .map(|address| self.address_window(address))
                    .transpose()?;
                let epoch = self.keys.epoch();
                let found = keys::authenticate(pool, &hash).await?.map(
                    |(key_id, org, expiry, scim_only)| {
                        if let Some(expiry) = expiry {
                            self.key_expiries.insert(key_id, expiry);
                        }
                        let zone = org.zone();
                        Arc::new(Caller {
                            key_id,
                            org,
                            zone,
                            scim_only,
                        })
                    },
                );
                match &found {
                    Some(caller) => self.keys.insert_loaded(epoch, hash, caller.clone()),
                    None => {
                        self.unknown_keys.insert(hash, ());
                        if let Some(window) = window {
                            window.failed();
                        }
                    }
                }
                found
            }
        };
        if let Some(caller) = &caller
            && self
                .key_expiries
                .get(&caller.key_id)
                .is_some_and(|expiry| expiry <= Utc::now())
        {
            return Ok(None);
        }
        if let Some(caller) = &caller
            && self.touched.get(&caller.key_id).is_none()
        {
            self.touched.insert(caller.key_id, ());
            // Best effort: a full queue only delays `last_used_at`.
            let _ = self.touch_queue.try_send(caller.key_id);
        }
        Ok(caller)
    }

    /// The current window of `address`'s group, or a refusal when it has had
    /// [`UNKNOWN_KEYS_PER_ADDRESS`] misses.
    fn address_window(&self, address: IpAddr) -> Result<Arc<AddressWindow>, CacheError> {
        window_of(
            &self.unknown_key_windows,
            address,
            UNKNOWN_KEYS_PER_ADDRESS,
            UNKNOWN_KEY_WINDOW,
            "unknown API keys looked up",
        )
        .map_err(|retry_after| {
            metrics::counter!("flow_api_unknown_key_refusals_total").increment(1);
            CacheError::TooManyUnknownKeys { retry_after }
        })
    }

    /// Admits a signed delivery from `client` (to `/v1/events/inbound/…`): its address's
    /// window, to count the delivery in if it is refused ([`AddressWindow::failed`]), or a
    /// refusal when the address had [`REFUSED_DELIVERIES_PER_ADDRESS`] deliveries refused in
    /// its window. A delivery without a known address is admitted uncounted.
    pub fn admit_delivery(
        &self,
        client: Option<IpAddr>,
    ) -> Result<Option<Arc<AddressWindow>>, CacheError> {
        client
            .map(|address| {
                window_of(
                    &self.refused_delivery_windows,
                    address,
                    REFUSED_DELIVERIES_PER_ADDRESS,
                    REFUSED_DELIVERY_WINDOW,
                    "signed deliveries refused",
                )
                .map_err(|retry_after| {
                    metrics::counter!("flow_api_refused_delivery_throttles_total").increment(1);
                    CacheError::TooManyRefusedDeliveries { retry_after }
                })
            })
            .transpose()
    }

    /// The summary of a flow of `org_id`; `None` when it does not exist or is another
    /// organization's.
    pub async fn flow(
        &self,
        pool: &PgPool,
        org_id: OrgId,
        flow_id: FlowId,
    ) -> Result<Option<Arc<FlowSummary>>, CacheError> {
        let flow = match self.flows.get(&flow_id) {
            Some(flow) => flow,
            None => {
                let epoch = self.flows.epoch();
                match db::flows::summary(pool, flow_id).await? {
                    Some(flow) => {
                        let flow = Arc::new(flow);
                        self.flows.insert_loaded(epoch, flow_id, flow.clone());
                        flow
                    }
                    None => return Ok(None),
                }
            }
        };
        Ok((flow.org_id == org_id).then_some(flow))
    }

    /// The organization's enrollment rules, cached for [`RULES_TIME_TO_LIVE`] (dropped at once
    /// when a rule of the organization changes, on every replica that hears the notice).
    pub async fn enrollment_rules(
        &self,
        pool: &PgPool,
        org_id: OrgId,
    ) -> Result<Arc<[Rule]>, EnrollmentError> {
        if let Some(rules) = self.rules.get(&org_id) {
            return Ok(rules);
        }
        let epoch = self.rules.epoch();
        let rules: Arc<[Rule]> = enrollment::rules(pool, org_id).await?.into();
        self.rules.insert_loaded(epoch, org_id, rules.clone());
        Ok(rules)
    }

    /// Drops the cached summary of a flow (it changed on this replica; the others hear the
    /// notice), and the rules, which carry flows' names.
    pub fn flow_changed(&self, flow_id: FlowId) {
        self.flows.invalidate(&flow_id);
        self.rules.invalidate_all();
    }

    /// Drops the organization's cached rules (a rule of it changed on this replica; the others
    /// hear the notice).
    pub fn rules_changed(&self, org_id: OrgId) {
        self.rules.invalidate(&org_id);
    }

    /// Whether the organization's rules are cached now (for the operators' and the tests' eyes:
    /// a change of another organization's rules leaves them).
    pub fn rules_cached(&self, org_id: OrgId) -> bool {
        self.rules.get(&org_id).is_some()
    }

    /// Drops what a notification payload says changed.
    fn invalidate(&self, payload: &str) {
        match payload {
            "keys" | "orgs" => self.keys.invalidate_all(),
            // A rule carries its flow's name.
            "flows" => {
                self.flows.invalidate_all();
                self.rules.invalidate_all();
            }
            RULES_CHANGED => self.rules.invalidate_all(),
            payload => match payload
                .strip_prefix(RULES_CHANGED)
                .and_then(|rest| rest.strip_prefix(':'))
                .and_then(OrgId::parse)
            {
                Some(org_id) => self.rules.invalidate(&org_id),
                None => self.invalidate_everything(),
            },
        }
    }

    fn invalidate_everything(&self) {
        self.keys.invalidate_all();
        self.flows.invalidate_all();
        self.rules.invalidate_all();
    }

    /// Listens for invalidations until `shutdown`; drops everything whenever it starts listening
    /// again, since notifications may have been missed meanwhile.
    async fn listen(self, pool: PgPool, shutdown: CancellationToken) {
        let mut wakeup = Wakeup::new(pool, db::INVALIDATE_CHANNEL);
        loop {
            if wakeup.listen().await {
                self.invalidate_everything();
            }
            match shutdown
                .run_until_cancelled(wakeup.wait(Duration::from_secs(1)))
                .await
            {
                None => return,
                Some(Some(payload)) => self.invalidate(&payload),
                Some(None) => {}
            }
        }
    }
}

/// Writes `last_used_at` for keys in batches, off the request path.
async fn record_key_use(
    pool: PgPool,
    mut queue: mpsc::Receiver<KeyId>,
    shutdown: CancellationToken,
) {
    let mut batch = Vec::new();
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            received = queue.recv_many(&mut batch, 1_000) => {
                if received == 0 {
                    return;
                }
            }
        }
        if let Err(error) = keys::touch(&pool, &batch).await {
            tracing::warn!(%error, "could not record API key use");
        }
        batch.clear();
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(Duration::from_secs(5)) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv6_addresses_are_counted_by_their_64_and_mapped_ipv4_as_ipv4() {
        let group = |text: &str| address_group(text.parse().unwrap()).to_string();
        assert_eq!(group("203.0.113.7"), "203.0.113.7");
        assert_eq!(group("2001:db8:1:2:aaaa:bbbb:cccc:dddd"), "2001:db8:1:2::");
        assert_eq!(group("2001:db8:1:2::1"), group("2001:db8:1:2:ffff::9"));
        assert_ne!(group("2001:db8:1:2::1"), group("2001:db8:1:3::1"));
        assert_eq!(group("::ffff:203.0.113.7"), "203.0.113.7");
    }

    #[test]
    fn a_rule_change_notice_drops_only_its_organizations_rules() {
        let caches = Caches::new(mpsc::channel(1).0);
        let (first, second) = (OrgId::new(), OrgId::new());
        for org_id in [first, second] {
            let epoch = caches.rules.epoch();
            caches
                .rules
                .insert_loaded(epoch, org_id, Arc::from(Vec::new()));
        }
        caches.invalidate(&rules_changed_payload(first));
        assert!(!caches.rules_cached(first));
        assert!(caches.rules_cached(second));
        // A notice this build does not read drops everything, to be safe.
        caches.invalidate("rules:org_garbled");
        assert!(!caches.rules_cached(second));
    }

    #[test]
    fn a_load_that_started_before_an_invalidation_is_not_cached() {
        let cache: EpochCache<&str, bool> = EpochCache::new(10, Duration::from_secs(60));
        // A request misses the cache and starts reading the key from Postgres...
        let epoch = cache.epoch();
        // ...the key is revoked and the notification drops the cache...
        cache.invalidate_all();
        // ...and the read, which saw the key still valid, finishes.
        cache.insert_loaded(epoch, "key", true);
        assert_eq!(cache.get(&"key"), None);
        // The next load starts after the revocation and is cached.
        let epoch = cache.epoch();
        cache.insert_loaded(epoch, "key", false);
        assert_eq!(cache.get(&"key"), Some(false));
        // An invalidation drops what was cached.
        cache.invalidate_all();
        assert_eq!(cache.get(&"key"), None);
    }
}
