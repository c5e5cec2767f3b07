//! Read-through caches of what the hot path needs from Postgres: API keys (with their
//! organization) and flow summaries. Every replica listens on a Postgres channel and drops its
//! copies the moment a key is revoked or an organization or flow changes; a short time-to-live
//! bounds staleness should a notification be missed.

use std::sync::Arc;
use std::time::Duration;

use flow_common::db::{self, flows::FlowSummary, keys};
use flow_common::ids::{FlowId, KeyId, OrgId};
use moka::sync::Cache;
use sqlx::PgPool;
use sqlx::postgres::PgListener;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::error::ApiError;
use crate::extract::Caller;

/// The API's caches.
#[derive(Clone)]
pub struct Caches {
    keys: Cache<[u8; 32], Option<Arc<Caller>>>,
    flows: Cache<FlowId, Arc<FlowSummary>>,
    touched: Cache<KeyId, ()>,
    touch_queue: mpsc::Sender<KeyId>,
}

impl Caches {
    /// Empty caches; `touch_queue` receives key ids to mark as used.
    pub fn new(touch_queue: mpsc::Sender<KeyId>) -> Self {
        Self {
            keys: Cache::builder()
                .max_capacity(100_000)
                .time_to_live(Duration::from_secs(60))
                .build(),
            flows: Cache::builder()
                .max_capacity(100_000)
                .time_to_live(Duration::from_secs(600))
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
    ) -> Result<Option<Arc<Caller>>, ApiError> {
        if !secret.starts_with(keys::KEY_PREFIX) || secret.len() > 200 {
            return Ok(None);
        }
        let hash = keys::hash_secret(secret);
        let caller = match self.keys.get(&hash) {
            Some(cached) => cached,
            None => {
                let found = keys::authenticate(pool, &hash).await?.map(|(key_id, org)| {
                    let zone = org.zone();
                    Arc::new(Caller { key_id, org, zone })
                });
                self.keys.insert(hash, found.clone());
                found
            }
        };
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
    ) -> Result<Option<Arc<FlowSummary>>, ApiError> {
        let flow = match self.flows.get(&flow_id) {
            Some(flow) => flow,
            None => match db::flows::summary(pool, flow_id).await? {
                Some(flow) => {
                    let flow = Arc::new(flow);
                    self.flows.insert(flow_id, flow.clone());
                    flow
                }
                None => return Ok(None),
            },
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

    /// Listens for invalidations until `shutdown`; reconnects (dropping everything, since
    /// notifications may have been missed) when the connection fails.
    pub async fn listen(self, pool: PgPool, shutdown: CancellationToken) {
        loop {
            let listener = async {
                let mut listener = PgListener::connect_with(&pool).await?;
                listener.listen(db::INVALIDATE_CHANNEL).await?;
                self.invalidate_everything();
                loop {
                    let notification = listener.recv().await?;
                    self.invalidate(notification.payload());
                }
                #[allow(unreachable_code)]
                Ok::<(), sqlx::Error>(())
            };
            tokio::select! {
                () = shutdown.cancelled() => return,
                result = listener => {
                    if let Err(error) = result {
                        tracing::warn!(%error, "cache invalidation listener lost its connection; retrying");
                    }
                }
            }
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(Duration::from_secs(1)) => {}
            }
        }
    }
}

/// Writes `last_used_at` for keys in batches, off the request path.
pub async fn record_key_use(
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
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
}
