//! The API's settings: every environment variable (or flag of `flow-api`) it reads.

use std::net::SocketAddr;
use std::time::Duration;

use flow_common::config::CoreConfig;
use flow_common::export_store::ExportStoreConfig;
use flow_common::ops::{Health, OpsAddress};
use flow_common::webhook::address::AddressPolicy;
use flow_common::webhook::vault::SecretVault;
use flow_domain::duration::parse_duration;

/// API settings (environment variables, or flags of `flow-api`).
#[derive(Debug, Clone, clap::Args)]
pub struct ApiConfig {
    /// Database, broker and queue settings.
    #[command(flatten)]
    pub core: CoreConfig,

    /// Address to listen on.
    #[arg(long, env = "API_BIND", default_value = "0.0.0.0:8080")]
    pub bind: SocketAddr,

    /// Base address callers reach this service at (used in `downloadUrl`).
    #[arg(long, env = "PUBLIC_BASE_URL", default_value = "http://localhost:8080")]
    pub public_base_url: String,

    /// Confirm-mode channels used to publish commands.
    #[arg(long, env = "PUBLISH_CHANNELS", default_value_t = 4)]
    pub publish_channels: usize,

    /// How long to wait for the broker's confirm before answering 503.
    #[arg(long, env = "PUBLISH_CONFIRM_TIMEOUT_MS", default_value_t = 5_000)]
    pub publish_confirm_timeout_ms: u64,

    /// Most assign commands gathered into one broker message.
    #[arg(long, env = "PUBLISH_BATCH_MAX", default_value_t = 128)]
    pub publish_batch_max: usize,

    /// Batches of assign commands awaiting their confirm at once. Fewer make larger batches
    /// (requests gather while a batch waits for its confirm), and the broker's work goes with
    /// the number of messages: at 2, single assigns under load cost RabbitMQ about a third less
    /// CPU per assignment than at 8, at the same p99.
    #[arg(long, env = "PUBLISH_BATCHES_IN_FLIGHT", default_value_t = 2)]
    pub publish_batches_in_flight: usize,

    /// Longest a batch of assign commands waits to fill (to a quarter of `PUBLISH_BATCH_MAX`)
    /// while another batch awaits its confirm; a batch alone in flight goes at once.
    #[arg(long, env = "PUBLISH_BATCH_FILL_WAIT", default_value = "1ms", value_parser = parse_duration)]
    pub publish_batch_fill_wait: Duration,

    /// Longest a request may take to produce its response; past it the API answers 503
    /// `service_unavailable` (the work may or may not have been applied: retry, with the same
    /// `X-Request-ID` for an assign). Bounds what a stuck dependency holds open, and what a
    /// SIGTERM waits for.
    #[arg(long, env = "REQUEST_TIMEOUT", default_value = "30s", value_parser = parse_duration)]
    pub request_timeout: Duration,

    /// Concurrent batched lookup queries.
    #[arg(long, env = "LOOKUP_CONCURRENCY", default_value_t = 1)]
    pub lookup_concurrency: usize,

    /// Where report exports are read from (the report-workers' export store).
    #[command(flatten)]
    pub export_store: ExportStoreConfig,

    /// Which webhook endpoint addresses are accepted.
    #[command(flatten)]
    pub webhook_policy: AddressPolicy,

    /// Encryption of webhook secrets at rest.
    #[command(flatten)]
    pub webhook_secrets: SecretVault,

    /// Dashboard sessions.
    #[command(flatten)]
    pub dashboard: DashboardConfig,

    /// Ops address serving `/metrics`, `/healthz` and `/readyz` (`off`: none). `/metrics` is
    /// never served on the public port; the workers' ops ports follow this one (9101..9105).
    #[arg(long, env = "METRICS_BIND", default_value = "127.0.0.1:9100")]
    pub metrics_bind: OpsAddress,

    /// What the API's readiness depends on (filled in by `build_state`).
    #[arg(skip)]
    pub health: Health,
}

/// Dashboard settings (environment variables, or flags of `flow-api`).
#[derive(Debug, Clone, clap::Args)]
pub struct DashboardConfig {
    /// A dashboard session ends after this long without a request.
    #[arg(long = "dashboard-session-idle", env = "DASHBOARD_SESSION_IDLE", default_value = "30m", value_parser = parse_duration)]
    pub session_idle: Duration,

    /// A dashboard session ends this long after sign-in, however active.
    #[arg(long = "dashboard-session-max", env = "DASHBOARD_SESSION_MAX", default_value = "12h", value_parser = parse_duration)]
    pub session_max: Duration,
}
