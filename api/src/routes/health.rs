//! Liveness, readiness and Prometheus metrics.

use axum::Json;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use utoipa_axum::router::OpenApiRouter;

use crate::error::ApiError;
use crate::state::AppState;

/// `/healthz`, `/readyz`, `/metrics`.
pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .route("/healthz", axum::routing::get(healthz))
        .route("/readyz", axum::routing::get(readyz))
        .route("/metrics", axum::routing::get(metrics))
}

/// The process is up.
async fn healthz() -> Json<serde_json::Value> {
    Json(json!({ "status": "ok" }))
}

/// Postgres and RabbitMQ are reachable.
async fn readyz(State(state): State<AppState>) -> impl IntoResponse {
    let database = sqlx::query("SELECT 1").execute(&state.db).await.is_ok();
    let broker = state.publisher.connect_now().await.is_ok();
    let status = if database && broker {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (
        status,
        Json(json!({
            "status": if status == StatusCode::OK { "ready" } else { "not_ready" },
            "postgres": if database { "up" } else { "down" },
            "rabbitmq": if broker { "up" } else { "down" },
        })),
    )
}

/// Prometheus exposition, unless it moved to the ops address (`METRICS_BIND`).
async fn metrics(State(state): State<AppState>) -> Response {
    if state.config.metrics_bind.0.is_some() {
        return ApiError::NotFound("metrics are served on the ops address".into()).into_response();
    }
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        flow_common::telemetry::render_metrics(),
    )
        .into_response()
}
