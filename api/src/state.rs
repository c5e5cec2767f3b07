//! What every handler shares ([`AppState`]): the application's [`Context`] (the operations'
//! pools, publishers, caches, limiter and lookups) and what only HTTP needs (the settings, the
//! metrics exposition, the background tasks the server stops), and how it is built from the
//! settings.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use flow_app::queue_depths;
use flow_app::{Context, Settings, StartConfig};
use flow_common::amqp::BatchLimits;
use flow_common::runtime::Supervisor;
use metrics_exporter_prometheus::PrometheusHandle;
use tokio_util::sync::CancellationToken;

use crate::config::ApiConfig;

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
    /// What the operations stand on; the state reads as it (`state.db`, `&state` where an
    /// operation takes a `&Context`).
    pub app: Context,
    /// Settings.
    pub config: Arc<ApiConfig>,
    /// Prometheus exposition.
    pub metrics: PrometheusHandle,
    /// The tasks behind the caches, the lookups and the queue gauges; the server stops them
    /// once it has answered its last request.
    pub background: Supervisor,
}

impl std::ops::Deref for Shared {
    type Target = Context;

    fn deref(&self) -> &Context {
        &self.app
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
    let background = Supervisor::new(&shutdown);
    let app = Context::start(
        db,
        StartConfig {
            core: config.core.clone(),
            settings: Settings {
                public_base_url: config.public_base_url.clone(),
                webhook_policy: config.webhook_policy,
                webhook_secrets: config.webhook_secrets.clone(),
            },
            connection_name: "flow-api",
            publish_channels: config.publish_channels,
            publish_confirm_timeout: Duration::from_millis(config.publish_confirm_timeout_ms),
            batch_limits: BatchLimits {
                max_batch: config.publish_batch_max,
                in_flight: config.publish_batches_in_flight,
                fill_wait: config.publish_batch_fill_wait,
            },
            lookup_concurrency: config.lookup_concurrency,
            export_store: config.export_store.clone(),
        },
        &background,
        &shutdown,
    )
    .await?;
    config.health.add_postgres("flow-api", app.db.clone());
    config.health.add_broker("flow-api", app.publisher.clone());
    if let Err(error) = app.publisher.connect_now().await {
        tracing::warn!(%error, "RabbitMQ unavailable at start-up; assigns answer 503 until it is back");
    }
    let amqp_url = config.core.amqp_url.clone();
    let queues = app.topology().clone();
    let latest = app.queue_depths.clone();
    background.spawn("queue depth poller", |stop| {
        queue_depths::poll(amqp_url, queues, latest, stop)
    });
    Ok(AppState(Arc::new(Shared {
        app,
        config: Arc::new(config),
        metrics: flow_common::telemetry::metrics_handle(),
        background,
    })))
}
