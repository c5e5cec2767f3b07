//! What every handler shares ([`AppState`]), and how it is built from the settings: the
//! Postgres pool, the broker publishers, the caches, the rate limiter, the lookup batcher and the
//! background tasks that keep them going.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use flow_common::amqp::{BatchLimits, BatchPublisher, BatchTarget, Publisher, Topology};
use flow_common::db::replicas::ReadRouter;
use flow_common::export_store::ExportStore;
use flow_common::runtime::Supervisor;
use flow_domain::ids::AssignmentIdSigner;
use metrics_exporter_prometheus::PrometheusHandle;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use crate::caches::Caches;
use crate::config::ApiConfig;
use crate::lookup::Lookup;
use crate::queue_depths;
use crate::ratelimit::RateLimiter;

/// Everything handlers share, behind one `Arc`: axum clones the state for every extractor and
/// middleware layer of every request, and a clone of the fields themselves (pool, publishers,
/// caches, limiter: a dozen reference counts) was 6% of the API's CPU under load.
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

impl std::ops::Deref for AppState {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}

/// The fields of [`AppState`].
pub struct Shared {
    /// Postgres pool (the primary): everything that decides, and every write.
    pub db: PgPool,
    /// Where report reads run: a fresh replica, else the primary.
    pub reads: ReadRouter,
    /// Publisher of commands.
    pub publisher: Publisher,
    /// Publisher of assign commands, batching concurrent requests into one message.
    pub assign_publisher: BatchPublisher,
    /// Keys and flows.
    pub caches: Caches,
    /// Rate limits.
    pub limiter: RateLimiter,
    /// Batched assign lookups.
    pub lookup: Lookup,
    /// Settings.
    pub config: Arc<ApiConfig>,
    /// Prometheus exposition.
    pub metrics: PrometheusHandle,
    /// Export files.
    pub export_store: ExportStore,
    /// Mints the ids of assignments requested without an `X-Request-ID`, and recognises them.
    pub assignment_ids: AssignmentIdSigner,
    /// The queue-depth poller's latest reading (the dashboard's operations page shows it).
    pub queue_depths: queue_depths::QueueDepths,
    /// The tasks behind the caches, the lookups and the queue gauges; the server stops them
    /// once it has answered its last request.
    pub background: Supervisor,
}

impl AppState {
    /// The topology names.
    pub fn topology(&self) -> &Topology {
        self.publisher.topology()
    }
}

/// Connects to Postgres (waiting for it) and prepares the broker connection and background tasks.
/// A broker that is down does not stop the API: assigns answer 503 until it is back.
pub async fn build_state(
    config: ApiConfig,
    shutdown: CancellationToken,
) -> anyhow::Result<AppState> {
    config
        .webhook_secrets
        .check()
        .context("checking WEBHOOK_SECRET_KEY")?;
    let db = flow_common::db::connect_with_retry(
        &config.core.database_url,
        config.core.database_max_connections,
        &shutdown,
    )
    .await
    .context("connecting to Postgres")?;
    let assignment_ids = AssignmentIdSigner::new(
        flow_common::db::secrets::get_or_create(&db, flow_common::db::secrets::ASSIGNMENT_IDS)
            .await
            .context("reading the assignment id key")?,
    );
    let topology = Topology::new(&config.core.queue_prefix, config.core.delivery_limit);
    let publisher = Publisher::new(
        &config.core.amqp_url,
        "flow-api",
        topology,
        config.publish_channels,
        Duration::from_millis(config.publish_confirm_timeout_ms),
    );
    config.health.add_postgres("flow-api", db.clone());
    config.health.add_broker("flow-api", publisher.clone());
    if let Err(error) = publisher.connect_now().await {
        tracing::warn!(%error, "RabbitMQ unavailable at start-up; assigns answer 503 until it is back");
    }
    let export_store =
        ExportStore::open(&config.export_store).context("opening the export store")?;
    let background = Supervisor::new(&shutdown);
    let reads = ReadRouter::new(
        db.clone(),
        &config.core.replicas,
        config.core.database_max_connections,
    )
    .context("reading DATABASE_REPLICA_URLS")?;
    reads.start(&background);
    let caches = Caches::start(&db, &background);
    let lookup = Lookup::start(db.clone(), config.lookup_concurrency, &background);
    let amqp_url = config.core.amqp_url.clone();
    let queues = publisher.topology().clone();
    let queue_depths = queue_depths::QueueDepths::default();
    let latest = queue_depths.clone();
    background.spawn("queue depth poller", |stop| {
        queue_depths::poll(amqp_url, queues, latest, stop)
    });
    let assign_publisher = BatchPublisher::start(
        publisher.clone(),
        BatchTarget::assign_commands(publisher.topology()),
        BatchLimits {
            max_batch: config.publish_batch_max,
            in_flight: config.publish_batches_in_flight,
            fill_wait: config.publish_batch_fill_wait,
        },
        shutdown.clone(),
    );
    Ok(AppState(Arc::new(Shared {
        assign_publisher,
        limiter: RateLimiter::new(db.clone()),
        db,
        reads,
        publisher,
        caches,
        lookup,
        config: Arc::new(config),
        metrics: flow_common::telemetry::metrics_handle(),
        export_store,
        assignment_ids,
        queue_depths,
        background,
    })))
}
