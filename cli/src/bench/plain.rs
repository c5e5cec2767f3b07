//! The baseline of `flowctl bench assign`: a plain synchronous assign handler (axum + sqlx) that
//! does in the request what the pipeline defers — look up the flow and the user, insert the
//! assignment — and answers once Postgres has committed. No queue, no outbox, no events: the
//! simplest correct service a caller could be offered instead. It runs as its own process
//! (`flowctl bench plain-server`), with the same pool size as the API.

use std::net::SocketAddr;

use anyhow::Context;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use chrono::Utc;
use clap::Args;
use flow_common::config::CoreConfig;
use flow_domain::ids::{AssignmentId, FlowId, OrgId, UserId};
use serde::Deserialize;
use serde_json::{Value, json};
use sqlx::PgPool;

/// Options of the baseline server.
#[derive(Debug, Clone, Args)]
pub struct PlainServerArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:18090")]
    pub bind: SocketAddr,
    /// The organization every request assigns in.
    #[arg(long)]
    pub org: OrgId,
}

#[derive(Clone)]
struct Plain {
    pool: PgPool,
    org: OrgId,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Request {
    flow_id: String,
    user_email: String,
}

/// Serves until Ctrl-C or SIGTERM.
pub async fn run(core: &CoreConfig, args: PlainServerArgs) -> anyhow::Result<()> {
    let pool = flow_common::db::connect(&core.database_url, core.database_max_connections)
        .await
        .context("connecting to Postgres")?;
    let app = Router::new()
        .route("/v1/flows/assign", post(assign))
        .route("/readyz", get(|| async { "ready" }))
        .with_state(Plain {
            pool,
            org: args.org,
        });
    let listener = tokio::net::TcpListener::bind(args.bind).await?;
    let shutdown = flow_common::shutdown::on_signal();
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown.cancelled_owned())
        .await?;
    Ok(())
}

async fn assign(
    State(plain): State<Plain>,
    Json(request): Json<Request>,
) -> Result<Json<Value>, (StatusCode, String)> {
    let flow_id = FlowId::parse(&request.flow_id)
        .ok_or((StatusCode::NOT_FOUND, "flow not found".to_owned()))?;
    let failed = |error: sqlx::Error| (StatusCode::INTERNAL_SERVER_ERROR, error.to_string());
    let flow: Option<(String, i64)> = sqlx::query_as(
        "SELECT f.name, (SELECT count(*) FROM modules m WHERE m.flow_id = f.id)
         FROM flows f WHERE f.id = $1 AND f.org_id = $2",
    )
    .bind(flow_id)
    .bind(plain.org)
    .fetch_optional(&plain.pool)
    .await
    .map_err(failed)?;
    let (flow_name, modules) = flow.ok_or((StatusCode::NOT_FOUND, "flow not found".to_owned()))?;
    let user: Option<(UserId, String)> =
        sqlx::query_as("SELECT id, email FROM users WHERE org_id = $1 AND email_normalized = $2")
            .bind(plain.org)
            .bind(request.user_email.trim().to_lowercase())
            .fetch_optional(&plain.pool)
            .await
            .map_err(failed)?;
    let (user_id, email) = user.ok_or((StatusCode::NOT_FOUND, "user not found".to_owned()))?;
    let id = AssignmentId::new();
    let now = Utc::now();
    sqlx::query(
        "INSERT INTO assignments (id, org_id, flow_id, user_id, assigned_at)
         VALUES ($1, $2, $3, $4, $5)",
    )
    .bind(id)
    .bind(plain.org)
    .bind(flow_id)
    .bind(user_id)
    .bind(now)
    .execute(&plain.pool)
    .await
    .map_err(failed)?;
    Ok(Json(json!({
        "success": true,
        "assignmentId": id.to_string(),
        "message": format!("Flow \"{flow_name}\" assigned to {email}"),
        "details": {
            "assignedAt": flow_domain::format_timestamp(now),
            "assigneeEmail": email,
            "flowName": flow_name,
            "moduleCount": modules,
        }
    })))
}
