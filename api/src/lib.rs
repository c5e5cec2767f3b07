//! The Flow HTTP ingress. Thin by design: it authenticates, validates, rate-limits and reads from
//! Postgres, and hands every write of assignment state to RabbitMQ (publisher confirms, quorum
//! queues) for the workers.

pub mod caches;
pub mod dashboard;
pub mod docs;
pub mod error;
pub mod extract;
pub mod lookup;
pub mod middleware;
pub mod ratelimit;
pub mod routes;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use axum::Router;
use axum::extract::DefaultBodyLimit;
use flow_common::amqp::{BatchPublisher, BatchTarget, Publisher, QueueKind, Topology};
use flow_common::config::CoreConfig;
use flow_common::export_store::{ExportStore, ExportStoreConfig};
use flow_common::ids::AssignmentIdSigner;
use metrics_exporter_prometheus::PrometheusHandle;
use sqlx::PgPool;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;

use crate::caches::Caches;
use crate::error::ApiError;
use crate::lookup::Lookup;
use crate::ratelimit::RateLimiter;

/// API settings (environment variables, or flags of `flow-api`).
#[derive(Debug, Clone, clap::Args)]
pub struct ApiConfig {
    /// Database, broker and queue settings.
    #[command(flatten)]
    pub core: CoreConfig,

    /// Address to listen on.
    #[arg(long, env = "API_BIND", default_value = "0.0.0.0:8080")]
    pub bind: SocketAddr,

    /// Base address callers reach this service at (used in `downloadUrl`).
    #[arg(long, env = "PUBLIC_BASE_URL", default_value = "http://localhost:8080")]
    pub public_base_url: String,

    /// Confirm-mode channels used to publish commands.
    #[arg(long, env = "PUBLISH_CHANNELS", default_value_t = 4)]
    pub publish_channels: usize,

    /// How long to wait for the broker's confirm before answering 503.
    #[arg(long, env = "PUBLISH_CONFIRM_TIMEOUT_MS", default_value_t = 5_000)]
    pub publish_confirm_timeout_ms: u64,

    /// Most assign commands gathered into one broker message.
    #[arg(long, env = "PUBLISH_BATCH_MAX", default_value_t = 128)]
    pub publish_batch_max: usize,

    /// Batches of assign commands awaiting their confirm at once.
    #[arg(long, env = "PUBLISH_BATCHES_IN_FLIGHT", default_value_t = 8)]
    pub publish_batches_in_flight: usize,

    /// Longest a request may take to produce its response; past it the API answers 503
    /// `service_unavailable` (the work may or may not have been applied: retry, with the same
    /// `X-Request-ID` for an assign). Bounds what a stuck dependency holds open, and what a
    /// SIGTERM waits for.
    #[arg(long, env = "REQUEST_TIMEOUT", default_value = "30s", value_parser = flow_common::webhook::parse_duration)]
    pub request_timeout: Duration,

    /// Concurrent batched lookup queries.
    #[arg(long, env = "LOOKUP_CONCURRENCY", default_value_t = 1)]
    pub lookup_concurrency: usize,

    /// Where report exports are read from (the report-workers' export store).
    #[command(flatten)]
    pub export_store: ExportStoreConfig,

    /// Which webhook endpoint addresses are accepted.
    #[command(flatten)]
    pub webhook_policy: flow_common::webhook::AddressPolicy,

    /// Encryption of webhook secrets at rest.
    #[command(flatten)]
    pub webhook_secrets: flow_common::webhook::SecretVault,

    /// Dashboard sessions.
    #[command(flatten)]
    pub dashboard: dashboard::DashboardConfig,

    /// Ops address serving `/metrics`, `/healthz` and `/readyz`; once set, `/metrics` is no
    /// longer served on the public port. `off` keeps it there.
    #[arg(long, env = "METRICS_BIND", default_value = "off")]
    pub metrics_bind: flow_common::ops::OpsAddress,

    /// What the API's readiness depends on (filled in by `build_state`).
    #[arg(skip)]
    pub health: flow_common::ops::Health,
}

/// Everything handlers share. Cheap to clone.
#[derive(Clone)]
pub struct AppState {
    /// Postgres pool.
    pub db: PgPool,
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
}

impl AppState {
    /// The topology names.
    pub fn topology(&self) -> &Topology {
        self.publisher.topology()
    }
}

/// The OpenAPI document's root; paths and schemas come from the handlers.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "Flow",
        version = "1",
        description = "Assign training and onboarding flows to users and report on them."
    ),
    modifiers(&BearerAuth)
)]
struct ApiDoc;

struct BearerAuth;

impl utoipa::Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
        openapi.security = Some(vec![utoipa::openapi::security::SecurityRequirement::new(
            "bearer",
            Vec::<String>::new(),
        )]);
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
        .map_err(anyhow::Error::msg)
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
    let (touch_queue, touches) = tokio::sync::mpsc::channel(10_000);
    let caches = Caches::new(touch_queue);
    tokio::spawn(caches.clone().listen(db.clone(), shutdown.clone()));
    tokio::spawn(caches::record_key_use(
        db.clone(),
        touches,
        shutdown.clone(),
    ));
    let lookup = Lookup::start(db.clone(), config.lookup_concurrency, shutdown.clone());
    tokio::spawn(middleware::report_queue_depths(
        config.core.amqp_url.clone(),
        publisher.topology().clone(),
        shutdown.clone(),
    ));
    let assign_publisher = BatchPublisher::start(
        publisher.clone(),
        BatchTarget {
            exchange: publisher.topology().commands_exchange(),
            routing_key: QueueKind::Assign.suffix().to_owned(),
            single_kind: flow_common::messages::ASSIGN_KIND,
            batch_kind: flow_common::messages::ASSIGN_BATCH_KIND,
            batch_version: flow_common::messages::ASSIGN_BATCH_VERSION,
        },
        config.publish_batch_max,
        config.publish_batches_in_flight,
        shutdown.clone(),
    );
    let export_store =
        ExportStore::open(&config.export_store).context("opening the export store")?;
    Ok(AppState {
        assign_publisher,
        limiter: RateLimiter::new(db.clone()),
        db,
        publisher,
        caches,
        lookup,
        config: Arc::new(config),
        metrics: flow_common::telemetry::metrics_handle(),
        export_store,
        assignment_ids,
    })
}

/// The application: every route, its OpenAPI document, and the middleware.
pub fn router(state: AppState) -> Router {
    let (api_routes, mut openapi) = OpenApiRouter::with_openapi(ApiDoc::openapi())
        .merge(routes::router())
        .split_for_parts();
    openapi
        .paths
        .paths
        .retain(|path, _| path.starts_with("/v1/"));
    // After the merge: the handlers' operations only exist from here on.
    utoipa::Modify::modify(&error::CommonResponses, &mut openapi);
    utoipa::Modify::modify(&docs::DocumentedHeaders, &mut openapi);
    utoipa::Modify::modify(&docs::Webhooks, &mut openapi);
    let openapi = Arc::new(openapi);
    let dashboard = dashboard::router(&state);
    let request_timeout = state.config.request_timeout;
    api_routes
        .nest("/dashboard", dashboard)
        .merge(docs::reference())
        .route(
            "/v1/openapi.json",
            axum::routing::get(move || {
                let openapi = openapi.clone();
                async move { axum::Json(openapi.as_ref().clone()) }
            }),
        )
        .route_layer(axum::middleware::from_fn(middleware::record_metrics))
        .fallback(|| async { ApiError::NotFound("no such endpoint".into()) })
        .method_not_allowed_fallback(|| async { ApiError::MethodNotAllowed })
        .layer(DefaultBodyLimit::max(extract::MAX_BODY_BYTES))
        // The time limit answers with the service's error body: the timeout's error becomes an
        // `ApiError` (the only error a `Timeout` adds is its own `Elapsed`).
        .layer(
            tower::ServiceBuilder::new()
                .layer(axum::error_handling::HandleErrorLayer::new(
                    move |_: tower::BoxError| async move {
                        ApiError::Unavailable(format!(
                            "the request took longer than {} s; it may or may not have been applied: retry (with the same X-Request-ID for an assign)",
                            request_timeout.as_secs_f64()
                        ))
                    },
                ))
                .layer(tower::timeout::TimeoutLayer::new(request_timeout)),
        )
        .layer(tower_http::catch_panic::CatchPanicLayer::custom(
            middleware::panic_response,
        ))
        .layer(axum::middleware::from_fn(middleware::request_context))
        .with_state(state)
}

/// Serves on `listener` until `shutdown`, then finishes in-flight requests.
pub async fn serve(
    listener: TcpListener,
    state: AppState,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let publisher = state.publisher.clone();
    let app = router(state);
    tracing::info!(address = %listener.local_addr()?, "flow-api listening");
    // The peer address is what the dashboard throttles sign-in attempts by.
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(shutdown.cancelled_owned())
    .await
    .context("serving HTTP")?;
    publisher.close().await;
    Ok(())
}

/// Binds the configured address and serves until `shutdown` (the `flow-api` binary).
pub async fn run(config: ApiConfig, shutdown: CancellationToken) -> anyhow::Result<()> {
    let listener = TcpListener::bind(config.bind)
        .await
        .with_context(|| format!("binding {}", config.bind))?;
    let state = build_state(config, shutdown.clone()).await?;
    flow_common::ops::spawn_if(
        state.config.metrics_bind,
        state.config.health.clone(),
        shutdown.clone(),
    )
    .await?;
    serve(listener, state, shutdown).await
}
