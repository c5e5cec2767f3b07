//! `flowctl`: the operator tool (see the library for each command).

use clap::Parser as _;

/// mimalloc: the request path allocates many short-lived buffers, which glibc's allocator
/// handles markedly slower under contention.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    flow_common::telemetry::init();
    let cli = flowctl::Cli::parse();
    let json = cli.json;
    match flowctl::run(cli).await {
        Ok(outcome) => {
            outcome.print(json);
            std::process::ExitCode::SUCCESS
        }
        Err(error) => {
            // One line, causes included: what a healthcheck log or a script shows.
            eprintln!("flowctl: {error:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
