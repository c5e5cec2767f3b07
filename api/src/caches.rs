//! Read-through caches of what the hot path needs from Postgres: API keys (with their
//! organization) and flow summaries. Every replica listens on a Postgres channel and drops its
//! copies the moment a key is revoked or an organization or flow changes; a short time-to-live
//! bounds staleness should a notification be missed.

use std::hash::Hash;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use chrono::{DateTime, Utc};
use flow_common::db::{self, flows::FlowSummary, keys};
use flow_common::runtime::{Supervisor, Wakeup};
use flow_domain::ids::{FlowId, KeyId, OrgId};
use moka::sync::Cache;
use sqlx::PgPool;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::caller::Caller;

/// Why a cache could not answer.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    /// The value was not cached, and Postgres could not be read.
    #[error("loading a cache entry: {0}")]
    Database(#[from] sqlx::Error),
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

    /// Drops every entry, and every load under way.
    pub fn invalidate_all(&self) {
        self.epoch.fetch_add(1, Ordering::SeqCst);
        self.cache.invalidate_all();
    }
}

/// The API's caches. Cheap to clone.
#[derive(Clone)]
pub struct Caches {
    keys: EpochCache<[u8; 32], Option<Arc<Caller>>>,
    /// When rolled keys stop working: a cached key is refused from then on.
    key_expiries: Cache<KeyId, DateTime<Utc>>,
    flows: EpochCache<FlowId, Arc<FlowSummary>>,
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
            flows: EpochCache::new(100_000, Duration::from_secs(600)),
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

    /// The caller a secret key authenticates, if any.
    pub async fn authenticate(
        &self,
        pool: &PgPool,
        secret: &str,
    ) -> Result<Option<Arc<Caller>>, CacheError> {
        if !secret.starts_with(keys::KEY_PREFIX) || secret.len() > 200 {
            return Ok(None);
        }
        let hash = keys::hash_secret(secret);
        let caller = match self.keys.get(&hash) {
            Some(cached) => cached,
            None => {
                let epoch = self.keys.epoch();
                let found = keys::authenticate(pool, &hash)
                    .await?
                    .map(|(key_id, org, expiry)| {
                        if let Some(expiry) = expiry {
                            self.key_expiries.insert(key_id, expiry);
                        }
                        let zone = org.zone();
                        Arc::new(Caller { key_id, org, zone })
                    });
                self.keys.insert_loaded(epoch, hash, found.clone());
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

    /// Drops what a notification payload says changed.
    fn invalidate(&self, payload: &str) {
        match payload {
            "keys" | "orgs" => self.keys.invalidate_all(),
            "flows" => self.flows.invalidate_all(),
            _ => self.invalidate_everything(),
        }
    }

    fn invalidate_everything(&self) {
        self.keys.invalidate_all();
        self.flows.invalidate_all();
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
