//! `flow-api`: the HTTP ingress.

use clap::Parser;

#[derive(Parser)]
#[command(name = "flow-api", about = "Flow HTTP API", version)]
struct Cli {
    #[command(flatten)]
    config: flow_api::ApiConfig,
}

/// mimalloc: the request path allocates many short-lived buffers, which glibc's allocator
/// handles markedly slower under contention.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    flow_common::telemetry::init();
    let cli = Cli::parse();
    let outcome = flow_api::run(cli.config, flow_common::shutdown::on_signal()).await;
    flow_common::telemetry::flush_traces();
    outcome
}
