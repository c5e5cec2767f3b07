//! Configuration shared by every binary, read from environment variables (or flags) with defaults
//! that work against a local Postgres and RabbitMQ.

use std::time::Duration;

use clap::{Args, Parser};
use flow_domain::duration::parse_duration;

pub use crate::redact::redact_url;

/// Connection settings every Flow process needs. The flags are global, so `flowctl` takes them
/// before or after its subcommand.
#[derive(Debug, Clone, Args)]
pub struct CoreConfig {
    /// Postgres connection string.
    #[arg(
        long,
        global = true,
        env = "DATABASE_URL",
        default_value = "postgres://postgres@127.0.0.1:5432/flow"
    )]
    pub database_url: String,

    /// Maximum Postgres connections this process opens.
    #[arg(
        long,
        global = true,
        env = "DATABASE_MAX_CONNECTIONS",
        default_value_t = 16
    )]
    pub database_max_connections: u32,

    /// RabbitMQ: one `amqp://` address, or the nodes of a cluster separated by commas. Every
    /// connection goes to one node and moves on to the next when that node is lost
    /// (`flow_common::amqp::nodes`).
    #[arg(
        long,
        global = true,
        env = "AMQP_URL",
        default_value = "amqp://guest:guest@127.0.0.1:5672/%2f",
        value_parser = AmqpNodesParser
    )]
    pub amqp_url: String,

    /// Prefix of every exchange and queue name (`flow` gives `flow.assign`, `flow.events`, ...).
    /// Lets several environments, or parallel tests, share one broker.
    #[arg(long, global = true, env = "QUEUE_PREFIX", default_value = "flow")]
    pub queue_prefix: String,

    /// How many times a worker may start a redelivered message and die (or panic) before the
    /// message is dead-lettered. Redeliveries after a dropped connection do not count. RabbitMQ's
    /// own limit is set 50 times higher, as a backstop.
    #[arg(long, global = true, env = "DELIVERY_LIMIT", default_value_t = 10)]
    pub delivery_limit: u32,

    /// Read replicas of the database, for reports and exports.
    #[command(flatten)]
    pub replicas: ReplicaConfig,
}

/// Postgres streaming replicas that report reads may use (`flow_common::db::replicas`).
#[derive(Debug, Clone, Args)]
pub struct ReplicaConfig {
    /// Connection strings of streaming replicas of `DATABASE_URL`, comma-separated (none: every
    /// read on the primary). Report reads, export generation and the dashboard's report views run
    /// on one whose data is fresh enough; everything that decides stays on the primary.
    #[arg(
        long = "database-replica-urls",
        global = true,
        env = "DATABASE_REPLICA_URLS",
        value_delimiter = ','
    )]
    pub urls: Vec<String>,

    /// Oldest data a replica may serve: one whose replay is further behind the primary than
    /// this (measured, see `docs/scaling.md`) is skipped until it catches up.
    #[arg(
        long = "report-max-staleness",
        global = true,
        env = "REPORT_MAX_STALENESS",
        default_value = "5s",
        value_parser = parse_duration
    )]
    pub max_staleness: Duration,
}

impl Default for ReplicaConfig {
    /// No replicas.
    fn default() -> Self {
        Self {
            urls: Vec::new(),
            max_staleness: Duration::from_secs(5),
        }
    }
}

/// Checks `AMQP_URL` as a node list. Its error is only what is wrong, with the password hidden:
/// clap's own message for a refused value would quote the whole value, credentials included.
#[derive(Debug, Clone, Copy)]
struct AmqpNodesParser;

impl clap::builder::TypedValueParser for AmqpNodesParser {
    type Value = String;

    fn parse_ref(
        &self,
        _command: &clap::Command,
        _argument: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<String, clap::Error> {
        let refused = |message: String| {
            clap::Error::raw(
                clap::error::ErrorKind::ValueValidation,
                format!("{message}\n"),
            )
        };
        let text = value
            .to_str()
            .ok_or_else(|| refused("AMQP_URL is not valid UTF-8".to_owned()))?;
        crate::amqp::nodes::validate(text).map_err(|error| refused(error.to_string()))
    }
}

impl CoreConfig {
    /// Reads the configuration from the environment alone (no command-line flags).
    pub fn from_env() -> Self {
        EnvOnly::<Self>::parse_from(["flow"]).inner
    }
}

/// Parses any `Args` struct from environment variables and defaults only.
#[derive(Parser)]
struct EnvOnly<T: Args> {
    #[command(flatten)]
    inner: T,
}

/// Reads an `Args` struct from environment variables and defaults only; for binaries and tests
/// that take no flags.
pub fn from_env<T: Args>() -> T {
    EnvOnly::<T>::parse_from(["flow"]).inner
}
