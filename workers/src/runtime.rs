//! The worker runtime: what every worker role runs on, so that a role's module holds only its
//! own work. A role's settings implement [`Role`] (declared with `role!`); [`run`] connects the role to Postgres (waiting
//! for it), hands its work a [`Runtime`] (the pool, the topology, publishers, readiness checks,
//! supervised tasks, gauges and Postgres wake-ups), and when the work returns stops and joins the
//! role's tasks. [`main`] is every worker binary's `main`; [`JobError`] says whether a failed
//! job may be retried. The supervisor, the wake-up and the backoff are `flow_common::runtime`'s,
//! which the API shares.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::time::Duration;

use anyhow::Context as _;
use clap::{CommandFactory, FromArgMatches};
use flow_common::amqp::{Publisher, Topology};
use flow_common::config::CoreConfig;
use flow_common::db;
use flow_common::db::replicas::ReadRouter;
use flow_common::ops::{Health, Liveness, OpsAddress};
use flow_common::runtime::{Supervisor, Wakeup};
use futures::FutureExt;
use sqlx::PgPool;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// What a process running several roles hands each of them.
#[derive(Debug, Clone)]
pub struct Shared {
    /// Database, broker and queue settings.
    pub core: CoreConfig,
    /// One set of readiness checks for the whole process.
    pub health: Health,
    /// The process runs the demo (`flowctl up --demo`).
    pub demo: bool,
}

/// A worker role, implemented by its settings.
pub trait Role: clap::Args + Send + 'static {
    /// The role's name: its binary, its logs, its readiness checks (`assign-worker`).
    const NAME: &'static str;
    /// The binary's one-line description in `--help`.
    const ABOUT: &'static str;
    /// What the role does, in a few words: its `flowctl up --only` value's help.
    const DESCRIPTION: &'static str;
    /// The binary's default ops address (`METRICS_BIND`): each role has its own port, so that
    /// roles run side by side on one host.
    const OPS_ADDRESS: &'static str;

    /// Database, broker and queue settings.
    fn core(&self) -> &CoreConfig;

    /// What the role's readiness depends on (served by the ops endpoints).
    fn health(&self) -> &Health;

    /// Takes what a process running several roles shares (`flowctl up`): its database and
    /// broker settings, its readiness checks, and whether it runs the demo.
    fn share(&mut self, shared: &Shared);

    /// The role's work: returns once `runtime.shutdown` is cancelled and the work in hand is
    /// finished or handed back.
    fn work(self, runtime: Runtime) -> impl Future<Output = anyhow::Result<()>> + Send;
}

/// Makes a role's settings (a struct with `core` and `health` fields) a [`Role`], the same way
/// for every role:
///
/// ```ignore
/// role! {
///     settings: Settings,
///     name: "assign-worker",
///     about: "Flow assign-worker",
///     description: "The assign-worker",
///     ops_address: "127.0.0.1:9101",
///     work: work,
/// }
/// ```
///
/// where `work` is the role's `async fn(Settings, Runtime) -> anyhow::Result<()>`, and an
/// optional `share: hook,` is a `fn(&mut Settings, &Shared)` for what else the role takes from a
/// process running several roles. The role runs everywhere once it is in [`crate::roles::ALL`].
macro_rules! role {
    (
        settings: $settings:ty,
        name: $name:expr,
        about: $about:expr,
        description: $description:expr,
        ops_address: $ops_address:expr,
        work: $work:path
        $(, share: $share:path)?
        $(,)?
    ) => {
        impl $crate::runtime::Role for $settings {
            const NAME: &'static str = $name;
            const ABOUT: &'static str = $about;
            const DESCRIPTION: &'static str = $description;
            const OPS_ADDRESS: &'static str = $ops_address;

            fn core(&self) -> &flow_common::config::CoreConfig {
                &self.core
            }

            fn health(&self) -> &flow_common::ops::Health {
                &self.health
            }

            fn share(&mut self, shared: &$crate::runtime::Shared) {
                self.core = shared.core.clone();
                self.health = shared.health.clone();
                $($share(self, shared);)?
            }

            fn work(
                self,
                runtime: $crate::runtime::Runtime,
            ) -> impl Future<Output = anyhow::Result<()>> + Send {
                $work(self, runtime)
            }
        }
    };
}
pub(crate) use role;

/// Runs `config`'s role until `shutdown`: connects to Postgres (retrying until it answers),
/// runs the role's work, then stops its tasks and waits for them.
///
/// The role counts as not ready from the call on (not from the first poll), so that a process
/// running several roles is not ready while one of them is still connecting. A stop asked for
/// before Postgres answered is a clean stop, not a failure.
pub fn run<R: Role>(
    config: R,
    shutdown: CancellationToken,
) -> impl Future<Output = anyhow::Result<()>> + Send {
    let connected = config
        .health()
        .add_loop(format!("{}.connected", R::NAME), None);
    run_connected(config, shutdown, connected)
}

async fn run_connected<R: Role>(
    config: R,
    shutdown: CancellationToken,
    connected: Liveness,
) -> anyhow::Result<()> {
    let pool = match db::connect_with_retry(
        &config.core().database_url,
        config.core().database_max_connections,
        &shutdown,
    )
    .await
    {
        Ok(pool) => pool,
        Err(_) if shutdown.is_cancelled() => {
            tracing::info!(role = R::NAME, "stopped before Postgres answered");
            return Ok(());
        }
        Err(error) => return Err(error).context("connecting to Postgres"),
    };
    config.health().add_postgres(R::NAME, pool.clone());
    connected.set_alive(true);
    let runtime = Runtime {
        role: R::NAME,
        core: config.core().clone(),
        topology: Topology::new(&config.core().queue_prefix, config.core().delivery_limit),
        health: config.health().clone(),
        tasks: Supervisor::new(&shutdown),
        pool,
        shutdown,
    };
    let outcome = config.work(runtime.clone()).await;
    runtime.tasks.stop().await;
    tracing::info!(role = R::NAME, "worker stopped");
    outcome
}

/// What a role's work runs on. Cheap to clone.
#[derive(Clone)]
pub struct Runtime {
    role: &'static str,
    /// Database, broker and queue settings.
    pub core: CoreConfig,
    /// The role's Postgres pool.
    pub pool: PgPool,
    /// Exchange and queue names.
    pub topology: Topology,
    /// Cancelled when the role is asked to stop.
    pub shutdown: CancellationToken,
    health: Health,
    tasks: Supervisor,
}

/// Time between two polls of a gauge.
const GAUGE_INTERVAL: Duration = Duration::from_secs(15);

/// How long a publisher waits for the broker to confirm a message.
const CONFIRM_TIMEOUT: Duration = Duration::from_secs(10);

impl Runtime {
    /// A publisher of this role over `channels` channels; readiness requires its broker.
    pub fn publisher(&self, channels: usize) -> Publisher {
        let publisher = Publisher::new(
            &self.core.amqp_url,
            self.role,
            self.topology.clone(),
            channels,
            CONFIRM_TIMEOUT,
        );
        self.health.add_broker(self.role, publisher.clone());
        publisher
    }

    /// The liveness of one of the role's consumers or loops, a readiness check named
    /// `{role}.{what}` (see [`Health::add_loop`]).
    pub fn liveness(&self, what: &str, stale_after: Option<Duration>) -> Liveness {
        self.health
            .add_loop(format!("{}.{what}", self.role), stale_after)
    }

    /// Runs `task(stop)` under the role's supervisor: a panic or an early end is logged, and
    /// the role waits for the task when it stops (`stop` is cancelled then, or at shutdown).
    pub fn spawn<F, Fut>(&self, name: &'static str, task: F) -> JoinHandle<()>
    where
        F: FnOnce(CancellationToken) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        self.tasks.spawn(name, task)
    }

    /// Polls a gauge (see `crate::gauges`) now and every 15 s until the role stops; a failed or
    /// panicking round is logged and the next one runs on schedule.
    pub fn gauge<F, Fut>(&self, what: &'static str, round: F)
    where
        F: Fn(PgPool) -> Fut + Send + 'static,
        Fut: Future<Output = Result<(), sqlx::Error>> + Send + 'static,
    {
        let pool = self.pool.clone();
        self.spawn(what, |stop| async move {
            loop {
                match AssertUnwindSafe(round(pool.clone())).catch_unwind().await {
                    Ok(Ok(())) => {}
                    Ok(Err(error)) => tracing::debug!(%error, what, "could not poll a gauge"),
                    Err(_) => tracing::error!(what, "polling a gauge panicked"),
                }
                if stop
                    .run_until_cancelled(tokio::time::sleep(GAUGE_INTERVAL))
                    .await
                    .is_none()
                {
                    return;
                }
            }
        });
    }

    /// The router of this role's report reads: the role's pool and the replicas of
    /// `DATABASE_REPLICA_URLS`, whose staleness it measures until the role stops.
    pub fn read_router(&self) -> anyhow::Result<ReadRouter> {
        let router = ReadRouter::new(
            self.pool.clone(),
            &self.core.replicas,
            self.core.database_max_connections,
        )
        .context("reading DATABASE_REPLICA_URLS")?;
        router.start(&self.tasks);
        Ok(router)
    }

    /// A wake-up on the Postgres notification `channel`.
    pub fn wakeup(&self, channel: &'static str) -> Wakeup {
        Wakeup::new(self.pool.clone(), channel)
    }
}

/// The command line of a worker binary: its role's settings and the ops address.
#[derive(clap::Parser)]
#[command(version)]
struct Cli<R: Role> {
    #[command(flatten)]
    config: R,

    /// Address of the ops endpoints (`/metrics`, `/healthz`, `/readyz`), or `off`.
    #[arg(long, env = "METRICS_BIND", default_value = R::OPS_ADDRESS)]
    metrics_bind: OpsAddress,
}

/// The `main` of a worker binary: tracing, settings from the command line and the environment,
/// the ops endpoints, then the role until SIGTERM or Ctrl-C.
pub async fn main<R: Role>() -> anyhow::Result<()> {
    flow_common::telemetry::init();
    let matches = Cli::<R>::command()
        .name(R::NAME)
        .about(R::ABOUT)
        .get_matches();
    let cli = Cli::<R>::from_arg_matches(&matches).unwrap_or_else(|error| error.exit());
    let shutdown = flow_common::shutdown::on_signal();
    let health = cli.config.health().clone();
    flow_common::ops::spawn_if(cli.metrics_bind, health, shutdown.clone()).await?;
    let outcome = run(cli.config, shutdown).await;
    flow_common::telemetry::flush_traces();
    outcome
}

/// Why a job failed, as far as retrying it goes. Errors are classified where they arise
/// (`?` on a database, store or I/O error), so the job's end only matches on the kind.
#[derive(Debug, thiserror::Error)]
pub enum JobError {
    /// Retrying later may succeed: Postgres or the store was unreachable, a deadlock, a restart.
    #[error("{0:#}")]
    Transient(anyhow::Error),
    /// No retry can fix it. `reason` says why in words for whoever asked for the job, when the
    /// job worded it; `error` is the whole story, for the log.
    #[error("{error:#}")]
    Permanent {
        /// Why, worded for the caller.
        reason: Option<String>,
        /// What failed.
        error: anyhow::Error,
    },
    /// Says only that another stage of the job stopped: a consequence, never the cause.
    #[error("{0:#}")]
    Interrupted(anyhow::Error),
}

impl JobError {
    /// A failure no retry can fix, worded for the caller.
    pub fn refused(reason: impl Into<String>) -> Self {
        let reason = reason.into();
        Self::Permanent {
            error: anyhow::anyhow!("{reason}"),
            reason: Some(reason),
        }
    }

    /// Another stage stopped, `what` says which.
    pub fn interrupted(what: &'static str) -> Self {
        Self::Interrupted(anyhow::anyhow!(what))
    }

    /// Classifies an error of code that reports `anyhow` errors (format writers, the upload):
    /// by the first database, store or I/O error among its causes; permanent without one.
    pub fn classify(error: anyhow::Error) -> Self {
        enum Kind {
            Transient,
            Permanent,
            Interrupted,
        }
        let kind = error.chain().find_map(|cause| {
            if let Some(database) = cause.downcast_ref::<sqlx::Error>() {
                return Some(if db::is_transient(database) {
                    Kind::Transient
                } else {
                    Kind::Permanent
                });
            }
            if let Some(io) = cause.downcast_ref::<std::io::Error>() {
                return Some(if io.kind() == std::io::ErrorKind::BrokenPipe {
                    Kind::Interrupted
                } else {
                    Kind::Transient
                });
            }
            cause.is::<object_store::Error>().then_some(Kind::Transient)
        });
        match kind {
            Some(Kind::Transient) => Self::Transient(error),
            Some(Kind::Interrupted) => Self::Interrupted(error),
            Some(Kind::Permanent) | None => Self::Permanent {
                reason: None,
                error,
            },
        }
    }

    /// True when retrying the job later may succeed.
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::Transient(_))
    }

    /// True when the failure only reports that another stage stopped.
    pub fn is_interruption(&self) -> bool {
        matches!(self, Self::Interrupted(_))
    }

    /// Why the job failed, worded for the caller, when the job worded it.
    pub fn reason(&self) -> Option<&str> {
        match self {
            Self::Permanent { reason, .. } => reason.as_deref(),
            _ => None,
        }
    }

    /// The same failure, saying what was being done.
    pub fn context(self, what: &'static str) -> Self {
        match self {
            Self::Transient(error) => Self::Transient(error.context(what)),
            Self::Permanent { reason, error } => Self::Permanent {
                reason,
                error: error.context(what),
            },
            Self::Interrupted(error) => Self::Interrupted(error.context(what)),
        }
    }
}

/// A job that fails on a replica for a database cause that passes is read again elsewhere.
impl flow_common::db::replicas::ReadError for JobError {
    fn database_error(&self) -> Option<&sqlx::Error> {
        let error = match self {
            Self::Transient(error) | Self::Interrupted(error) => error,
            Self::Permanent { error, .. } => error,
        };
        error
            .chain()
            .find_map(|cause| cause.downcast_ref::<sqlx::Error>())
    }
}

impl From<sqlx::Error> for JobError {
    fn from(error: sqlx::Error) -> Self {
        Self::classify(error.into())
    }
}

impl From<object_store::Error> for JobError {
    fn from(error: object_store::Error) -> Self {
        Self::Transient(error.into())
    }
}

impl From<std::io::Error> for JobError {
    fn from(error: std::io::Error) -> Self {
        Self::classify(error.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_errors_are_classified_by_their_cause() {
        let busy = sqlx::Error::PoolTimedOut;
        assert!(JobError::from(busy).is_transient(), "a busy pool: retry");
        let decode = sqlx::Error::ColumnNotFound("id".into());
        assert!(!JobError::from(decode).is_transient(), "a bug: no retry");
        let pipe = std::io::Error::new(std::io::ErrorKind::BrokenPipe, "the upload stopped");
        assert!(JobError::from(pipe).is_interruption());
        let disk = std::io::Error::other("no space left on device");
        assert!(JobError::from(disk).is_transient());
        let store = object_store::Error::Generic {
            store: "S3",
            source: "connection refused".into(),
        };
        assert!(JobError::from(store).is_transient());

        // A writer's error is classified by the cause under its context.
        let pipe = std::io::Error::new(std::io::ErrorKind::BrokenPipe, "the upload stopped");
        let writing = anyhow::Error::new(pipe).context("writing the CSV file");
        assert!(JobError::classify(writing).is_interruption());
        let invalid = anyhow::anyhow!("the workbook was already saved");
        let error = JobError::classify(invalid);
        assert!(!error.is_transient() && !error.is_interruption());
        assert_eq!(error.reason(), None, "not worded for the caller");

        let refused = JobError::refused("the flow no longer exists").context("reading the flow");
        assert_eq!(refused.reason(), Some("the flow no longer exists"));
        assert!(!refused.is_transient());
        assert_eq!(
            refused.to_string(),
            "reading the flow: the flow no longer exists"
        );
    }
}
