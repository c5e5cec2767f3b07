//! `flowctl`: the operator tool (see the library for each command).

use clap::{Parser, Subcommand};
use flow_common::config::CoreConfig;
use flowctl::{accounts, admin, bench, demo, dlq, up};

#[derive(Parser)]
#[command(name = "flowctl", about = "Operate a Flow deployment", version)]
struct Cli {
    #[command(flatten)]
    core: CoreConfig,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Apply database migrations.
    Migrate,
    /// Organizations.
    #[command(subcommand)]
    Org(admin::OrgCommand),
    /// API keys.
    #[command(subcommand)]
    Key(admin::KeyCommand),
    /// Dashboard accounts: create one (prints its sign-in link), or a new link.
    #[command(subcommand)]
    Admin(accounts::AdminCommand),
    /// Users.
    #[command(subcommand)]
    Users(admin::UsersCommand),
    /// Flows.
    #[command(subcommand)]
    Flows(admin::FlowsCommand),
    /// Create a demo organization (1,000 users, three flows) and print an API key and a curl.
    Demo(demo::DemoArgs),
    /// Run migrations, then the API and every worker in this one process (local use).
    Up(up::UpArgs),
    /// Messages in the dead-letter queue.
    #[command(subcommand)]
    Dlq(dlq::DlqCommand),
    /// Benchmarks.
    #[command(subcommand)]
    Bench(bench::BenchCommand),
}

/// mimalloc: the request path allocates many short-lived buffers, which glibc's allocator
/// handles markedly slower under contention.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    flow_common::telemetry::init();
    let cli = Cli::parse();
    match cli.command {
        Command::Migrate => admin::migrate(&cli.core).await,
        Command::Org(command) => admin::org(&cli.core, command).await,
        Command::Key(command) => admin::key(&cli.core, command).await,
        Command::Admin(command) => accounts::run(&cli.core, command).await,
        Command::Users(command) => admin::users(&cli.core, command).await,
        Command::Flows(command) => admin::flows(&cli.core, command).await,
        Command::Demo(args) => demo::run(&cli.core, args).await,
        Command::Up(args) => up::run(cli.core, args).await,
        Command::Dlq(command) => dlq::run(&cli.core, command).await,
        Command::Bench(command) => bench::run(&cli.core, command).await,
    }
}
