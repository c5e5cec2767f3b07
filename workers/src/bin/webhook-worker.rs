//! `webhook-worker`: delivers lifecycle events to customers' webhook endpoints, signed and retried.

use clap::Parser;

#[derive(Parser)]
#[command(name = "webhook-worker", about = "Flow webhook-worker", version)]
struct Cli {
    #[command(flatten)]
    config: flow_workers::webhook::WebhookWorkerConfig,
}

/// mimalloc, as in every Flow binary: many short-lived buffers.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    flow_common::telemetry::init();
    let cli = Cli::parse();
    flow_workers::webhook::run(cli.config, flow_common::shutdown::on_signal()).await
}
