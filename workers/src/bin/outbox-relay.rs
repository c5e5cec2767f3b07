//! `outbox-relay`: publishes lifecycle events from the outbox to RabbitMQ.

use clap::Parser;

#[derive(Parser)]
#[command(name = "outbox-relay", about = "Flow outbox relay", version)]
struct Cli {
    #[command(flatten)]
    config: flow_workers::relay::RelayConfig,
}

/// mimalloc, as in every Flow binary: many short-lived buffers.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    flow_common::telemetry::init();
    let cli = Cli::parse();
    flow_workers::relay::run(cli.config, flow_common::shutdown::on_signal()).await
}
