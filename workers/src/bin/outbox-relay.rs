//! `outbox-relay`: publishes lifecycle events from the outbox to RabbitMQ.

use clap::Parser;

#[derive(Parser)]
#[command(name = "outbox-relay", about = "Flow outbox relay", version)]
struct Cli {
    #[command(flatten)]
    config: flow_workers::relay::RelayConfig,

    /// Address of the ops endpoints (`/metrics`, `/healthz`, `/readyz`), or `off`.
    #[arg(long, env = "METRICS_BIND", default_value = "0.0.0.0:9103")]
    metrics_bind: flow_common::ops::OpsAddress,
}

/// mimalloc, as in every Flow binary: many short-lived buffers.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    flow_common::telemetry::init();
    let cli = Cli::parse();
    let shutdown = flow_common::shutdown::on_signal();
    let health = cli.config.health.clone();
    flow_common::ops::spawn_if(cli.metrics_bind, health, shutdown.clone()).await?;
    let outcome = flow_workers::relay::run(cli.config, shutdown).await;
    flow_common::telemetry::flush_traces();
    outcome
}
