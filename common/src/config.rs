//! Configuration shared by every binary, read from environment variables (or flags) with defaults
//! that work against a local Postgres and RabbitMQ.

use clap::{Args, Parser};

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

    /// RabbitMQ connection string.
    #[arg(
        long,
        global = true,
        env = "AMQP_URL",
        default_value = "amqp://guest:guest@127.0.0.1:5672/%2f"
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
