//! The Flow HTTP ingress. Thin by design: it authenticates, validates, rate-limits and reads from
//! Postgres, and hands every write of assignment state to RabbitMQ (publisher confirms, quorum
//! queues) for the workers.
//!
//! Where things are: settings in [`config`], the state handlers share and how it is built in
//! [`state`], the error type and its mapping to answers in [`error`], the OpenAPI document in
//! [`docs`]. The surfaces ([`routes`], [`dashboard`], [`scim`]) translate HTTP into calls of the
//! application layer (`flow_app`), whose operations, caches, lookups and rate limits know nothing
//! of HTTP and run their background tasks under the state's `flow_common::runtime::Supervisor`.
//! This file wires the routes and middleware together and serves them.

pub mod config;
pub mod dashboard;
pub mod docs;
pub mod download;
pub mod error;
pub mod extract;
pub mod middleware;
pub mod routes;
pub mod scim;
pub mod state;
pub mod xapi;

use std::net::SocketAddr;

use anyhow::Context;
use axum::Router;
use axum::extract::DefaultBodyLimit;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use utoipa_axum::router::OpenApiRouter;

pub use crate::config::ApiConfig;
use crate::error::ApiError;
pub use crate::state::{AppState, build_state};

/// The application: every route, its OpenAPI document, and the middleware.
pub fn router(state: AppState) -> Router {
    let (api_routes, operations) = OpenApiRouter::with_openapi(docs::root())
        .merge(routes::router())
        .split_for_parts();
    let dashboard = dashboard::router(&state);
    let request_timeout = state.config.request_timeout;
    api_routes
        // `up` prints the bare address: it leads to the dashboard rather than to a 404 (the API
        // reference is at /docs, its document at /v1/openapi.json).
        .route(
            "/",
            axum::routing::get(|| async { axum::response::Redirect::to("/dashboard") }),
        )
        .nest("/dashboard", dashboard)
        .nest("/scim/v2", scim::router())
        .nest("/xapi", xapi::router())
        .merge(docs::router(operations))
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

/// Serves on `listener` until `shutdown`, then finishes in-flight requests, stops the background
/// tasks and closes the broker connection.
pub async fn serve(
    listener: TcpListener,
    state: AppState,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let publisher = state.publisher.clone();
    let background = state.background.clone();
    let app = router(state);
    tracing::info!(address = %listener.local_addr()?, "flow-api listening");
    // The peer address is what the dashboard throttles sign-in attempts by.
    let served = axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(shutdown.cancelled_owned())
    .await
    .context("serving HTTP");
    background.stop().await;
    publisher.close().await;
    served
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
