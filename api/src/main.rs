//! `flow-api`: the HTTP ingress.

use clap::Parser;

#[derive(Parser)]
#[command(name = "flow-api", about = "Flow HTTP API", version)]
struct Cli {
    #[command(flatten)]
    config: flow_api::ApiConfig,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    flow_common::telemetry::init();
    let cli = Cli::parse();
    flow_api::run(cli.config, flow_common::shutdown::on_signal()).await
}
