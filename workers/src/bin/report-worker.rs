//! `report-worker`: generates report exports (CSV, Excel, PDF) into the export store.

use clap::Parser;

#[derive(Parser)]
#[command(name = "report-worker", about = "Flow report-worker", version)]
struct Cli {
    #[command(flatten)]
    config: flow_workers::report::ReportWorkerConfig,
}

/// mimalloc: exports allocate many short-lived buffers.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    flow_common::telemetry::init();
    let cli = Cli::parse();
    flow_workers::report::run(cli.config, flow_common::shutdown::on_signal()).await
}
