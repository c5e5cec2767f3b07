//! `scheduler`: marks overdue assignments and assigns recurring schedules.

use clap::Parser;

#[derive(Parser)]
#[command(name = "scheduler", about = "Flow scheduler", version)]
struct Cli {
    #[command(flatten)]
    config: flow_workers::scheduler::SchedulerConfig,
}

/// mimalloc, as in every Flow binary: many short-lived buffers.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    flow_common::telemetry::init();
    let cli = Cli::parse();
    flow_workers::scheduler::run(cli.config, flow_common::shutdown::on_signal()).await
}
