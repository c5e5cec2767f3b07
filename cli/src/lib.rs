//! `flowctl`: the operator tool. Migrations, organizations, keys, users and flows, demo data, the
//! whole stack in one process for local use, dead letters, healthchecks and benchmarks. Each
//! command is a library function returning its [`output::Outcome`], so the tests run it and read
//! what a script would.

pub mod accounts;
pub mod admin;
pub mod bench;
pub mod context;
pub mod demo;
pub mod dlq;
pub mod health;
pub mod output;
pub mod receiver;
pub mod reports;
pub mod up;
pub mod webhooks;

use clap::{CommandFactory as _, Parser, Subcommand};
use flow_common::config::CoreConfig;

use crate::output::Outcome;

/// The command line of `flowctl`.
#[derive(Parser)]
#[command(
    name = "flowctl",
    about = "Operate a Flow deployment",
    version,
    after_help = "\
Examples:
  flowctl up --demo                                    # the whole service locally, with demo data
  flowctl org create --name Acme --tier enterprise     # prints the organization id
  flowctl key create org_… --name ci --json            # {\"id\": \"key_…\", \"secret\": \"…\"}
  flowctl users import org_… users.csv                 # columns email, optional name
  flowctl health http://127.0.0.1:8080/readyz          # exit status 0 when ready
  flowctl completions bash > /etc/bash_completion.d/flowctl

Connection flags (--database-url, --amqp-url, --queue-prefix, …) and --json go before or after
the subcommand; each flag also reads the environment variable shown in its help."
)]
pub struct Cli {
    /// Postgres and RabbitMQ settings.
    #[command(flatten)]
    pub core: CoreConfig,
    /// Print results as JSON (for scripts) instead of text.
    #[arg(long, global = true)]
    pub json: bool,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Subcommand)]
pub enum Command {
    /// Apply database migrations.
    Migrate,
    /// Organizations.
    #[command(subcommand)]
    Org(admin::OrgCommand),
    /// API keys.
    #[command(subcommand)]
    Key(admin::KeyCommand),
    /// Dashboard accounts: create one (prints its sign-in link), a new link (resets it), list,
    /// remove, disable, enable, change a role.
    #[command(subcommand)]
    Admin(accounts::AdminCommand),
    /// Users.
    #[command(subcommand)]
    Users(admin::UsersCommand),
    /// Flows.
    #[command(subcommand)]
    Flows(admin::FlowsCommand),
    /// Create (or reuse) the demo organization: 1,000 people, three flows, assignments in every
    /// state, a schedule and a rule (the workers must be running); print an API key and a curl.
    Demo(demo::DemoArgs),
    /// Run migrations, then the API and every worker in this one process (local use).
    Up(up::UpArgs),
    /// Messages in the dead-letter queue.
    #[command(subcommand)]
    Dlq(dlq::DlqCommand),
    /// Webhook endpoint secrets: a new master key, re-encrypting stored secrets.
    #[command(subcommand)]
    Webhooks(webhooks::WebhooksCommand),
    /// Report rollups.
    #[command(subcommand)]
    Reports(reports::ReportsCommand),
    /// Probe a health endpoint: exit status 0 on a 2xx answer, 1 with the reason otherwise (the
    /// containers' healthcheck).
    #[command(after_help = "\
Examples:
  flowctl health http://127.0.0.1:8080/readyz          # the API: Postgres and RabbitMQ reachable
  flowctl health http://127.0.0.1:9100/readyz          # a worker's METRICS_BIND server")]
    Health(health::HealthArgs),
    /// Print a shell completion script.
    #[command(after_help = "\
Examples:
  flowctl completions bash > /etc/bash_completion.d/flowctl
  flowctl completions zsh > \"${fpath[1]}/_flowctl\"
  flowctl completions fish > ~/.config/fish/completions/flowctl.fish")]
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Benchmarks.
    #[command(subcommand)]
    Bench(bench::BenchCommand),
}

/// Runs one command line and returns what it prints.
pub async fn run(cli: Cli) -> anyhow::Result<Outcome> {
    let core = cli.core;
    match cli.command {
        Command::Migrate => admin::migrate(&core).await,
        Command::Org(command) => admin::org(&core, command).await,
        Command::Key(command) => admin::key(&core, command).await,
        Command::Admin(command) => accounts::run(&core, command).await,
        Command::Users(command) => admin::users(&core, command).await,
        Command::Flows(command) => admin::flows(&core, command).await,
        Command::Demo(args) => demo::run(&core, args).await.map(|()| Outcome::default()),
        Command::Up(args) => up::run(core, args).await.map(|()| Outcome::default()),
        Command::Dlq(command) => dlq::run(&core, command).await,
        Command::Webhooks(command) => webhooks::run(&core, command).await,
        Command::Reports(command) => reports::run(&core, command).await,
        Command::Health(args) => health::check(&args).await,
        Command::Completions { shell } => Ok(Outcome::text(completions(shell))),
        Command::Bench(command) => bench::run(&core, command)
            .await
            .map(|()| Outcome::default()),
    }
}

/// The completion script of `flowctl` for `shell`.
pub fn completions(shell: clap_complete::Shell) -> String {
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "flowctl", &mut script);
    String::from_utf8_lossy(&script).into_owned()
}
