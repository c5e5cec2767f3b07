//! Liveness and readiness on the public port, for load balancers. Prometheus metrics are served
//! only on the ops address (`METRICS_BIND`, see `flow_common::ops`), never to callers.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde_json::json;
use utoipa_axum::router::OpenApiRouter;

use crate::state::AppState;

/// `/healthz`, `/readyz`.
pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .route("/healthz", axum::routing::get(healthz))
        .route("/readyz", axum::routing::get(readyz))
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
