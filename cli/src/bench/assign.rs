//! `flowctl bench assign`.

use clap::Args;
use flow_common::config::CoreConfig;

/// Options of the assign benchmark.
#[derive(Debug, Clone, Args)]
pub struct AssignBenchArgs {
    /// Concurrent HTTP connections.
    #[arg(long, default_value_t = 64)]
    pub concurrency: usize,
    /// Seconds of load.
    #[arg(long, default_value_t = 20)]
    pub duration: u64,
}

/// Runs the benchmark.
pub async fn run(_core: &CoreConfig, _args: AssignBenchArgs) -> anyhow::Result<()> {
    anyhow::bail!("the assign benchmark is being written")
}
