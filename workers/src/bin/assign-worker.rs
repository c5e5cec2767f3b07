//! `assign-worker`: persists assign commands from RabbitMQ into Postgres.

use clap::Parser;

#[derive(Parser)]
#[command(name = "assign-worker", about = "Flow assign-worker", version)]
struct Cli {
    #[command(flatten)]
    config: flow_workers::assign::AssignWorkerConfig,

    /// Address of the ops endpoints (`/metrics`, `/healthz`, `/readyz`), or `off`.
    #[arg(long, env = "METRICS_BIND", default_value = "0.0.0.0:9101")]
    metrics_bind: flow_common::ops::OpsAddress,
}

/// mimalloc: the request path allocates many short-lived buffers, which glibc's allocator
/// handles markedly slower under contention.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    flow_common::telemetry::init();
    let cli = Cli::parse();
    let shutdown = flow_common::shutdown::on_signal();
    let health = cli.config.health.clone();
    flow_common::ops::spawn_if(cli.metrics_bind, health, shutdown.clone()).await?;
    let outcome = flow_workers::assign::run(cli.config, shutdown).await;
    flow_common::telemetry::flush_traces();
    outcome
}
