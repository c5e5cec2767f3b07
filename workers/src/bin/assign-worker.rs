//! `assign-worker`: persists assign commands from RabbitMQ into Postgres.

use clap::Parser;

#[derive(Parser)]
#[command(name = "assign-worker", about = "Flow assign-worker", version)]
struct Cli {
    #[command(flatten)]
    config: flow_workers::assign::AssignWorkerConfig,
}

/// mimalloc: the request path allocates many short-lived buffers, which glibc's allocator
/// handles markedly slower under contention.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    flow_common::telemetry::init();
    let cli = Cli::parse();
    flow_workers::assign::run(cli.config, flow_common::shutdown::on_signal()).await
}
