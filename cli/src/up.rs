//! `flowctl up`: migrations, then the API and every worker in this one process, for local use.

use anyhow::Context;
use std::sync::LazyLock;

use clap::Args;
use clap::builder::PossibleValue;
use flow_common::config::{CoreConfig, from_env};
use flow_workers::roles::{Shared, WorkerRole};
use sqlx::migrate::MigrateDatabase;
use tokio::task::JoinSet;

/// Options of `flowctl up`.
#[derive(Debug, Clone, Args)]
pub struct UpArgs {
    /// Also create a demo organization and print its API key, a curl command, the dashboard's
    /// address and its admin's sign-in link.
    #[arg(long)]
    pub demo: bool,
    /// Listen here instead of `API_BIND`.
    #[arg(long)]
    pub bind: Option<std::net::SocketAddr>,
    /// Run only these components (default: all). Lets benchmarks run each in its own process.
    #[arg(long, value_enum, value_delimiter = ',')]
    pub only: Vec<Component>,
}

/// A part of the stack: the API, or a worker role of the registry (`flow_workers::roles::ALL`),
/// named as on the command line (`api`, `assign-worker`, ...).
#[derive(Clone, Copy)]
pub enum Component {
    /// The HTTP API.
    Api,
    /// A worker role.
    Worker(&'static WorkerRole),
}

impl Component {
    /// The name `--only` takes.
    pub fn name(self) -> &'static str {
        match self {
            Self::Api => "api",
            Self::Worker(role) => role.name,
        }
    }
}

impl PartialEq for Component {
    fn eq(&self, other: &Self) -> bool {
        self.name() == other.name()
    }
}

impl Eq for Component {}

impl std::fmt::Debug for Component {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(self.name())
    }
}

/// The API, then every worker role in the registry's order.
static COMPONENTS: LazyLock<Vec<Component>> = LazyLock::new(|| {
    std::iter::once(Component::Api)
        .chain(flow_workers::roles::ALL.iter().map(Component::Worker))
        .collect()
});

impl clap::ValueEnum for Component {
    fn value_variants<'a>() -> &'a [Self] {
        &COMPONENTS
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        Some(match self {
            Self::Api => PossibleValue::new("api").help("The HTTP API"),
            Self::Worker(role) => PossibleValue::new(role.name).help(role.description),
        })
    }
}

impl UpArgs {
    fn runs(&self, component: Component) -> bool {
        self.only.is_empty() || self.only.contains(&component)
    }
}

/// Creates the database if it does not exist, then applies migrations.
pub async fn prepare_database(core: &CoreConfig) -> anyhow::Result<()> {
    if !sqlx::Postgres::database_exists(&core.database_url)
        .await
        .unwrap_or(false)
    {
        sqlx::Postgres::create_database(&core.database_url)
            .await
            .with_context(|| {
                format!(
                    "creating database {}",
                    crate::admin::redact(&core.database_url)
                )
            })?;
        tracing::info!("database created");
    }
    let pool = crate::admin::pool(core).await?;
    flow_common::db::migrate(&pool)
        .await
        .context("applying migrations")?;
    pool.close().await;
    Ok(())
}

/// Runs everything until Ctrl-C or SIGTERM.
pub async fn run(core: CoreConfig, args: UpArgs) -> anyhow::Result<()> {
    run_until(core, args, flow_common::shutdown::on_signal()).await
}

/// Runs everything until `shutdown`.
pub async fn run_until(
    core: CoreConfig,
    args: UpArgs,
    shutdown: tokio_util::sync::CancellationToken,
) -> anyhow::Result<()> {
    prepare_database(&core).await?;
    let mut api: flow_api::ApiConfig = from_env();
    api.core = core.clone();
    if let Some(bind) = args.bind {
        api.bind = bind;
        if std::env::var_os("PUBLIC_BASE_URL").is_none() {
            api.public_base_url = format!("http://{bind}");
        }
    }
    // Only the demo may store endpoint secrets in plain text, when no key is set.
    api.webhook_secrets.plaintext_allowed = args.demo;

    // One ops address for the whole process, over every role's readiness checks; only when
    // METRICS_BIND is set, since the benchmarks run several `flowctl up --only …` on one host.
    if std::env::var_os("METRICS_BIND").is_none() {
        api.metrics_bind = flow_common::ops::OpsAddress(None);
    }
    let health = flow_common::ops::Health::default();
    api.health = health.clone();
    let shared = Shared {
        core: core.clone(),
        health: health.clone(),
        demo: args.demo,
    };
    // Every role's settings are read now, whether it runs or not, so that a setting that does
    // not parse stops `flowctl up` before anything starts.
    let workers: Vec<(&WorkerRole, flow_workers::roles::Work)> = flow_workers::roles::ALL
        .iter()
        .map(|role| (role, role.prepare(&shared, shutdown.clone())))
        .collect();
    flow_common::ops::spawn_if(api.metrics_bind, health, shutdown.clone()).await?;

    let mut tasks = JoinSet::new();
    let base_url = api.public_base_url.clone();
    if args.runs(Component::Api) {
        let listener = tokio::net::TcpListener::bind(api.bind)
            .await
            .with_context(|| format!("binding {}", api.bind))?;
        let state = flow_api::build_state(api, shutdown.clone()).await?;
        tasks.spawn(flow_api::serve(listener, state, shutdown.clone()));
    }
    for (role, work) in workers {
        if args.runs(Component::Worker(role)) {
            tasks.spawn(work);
        }
    }

    if args.demo {
        let tool = crate::context::Tool::open(&core, &base_url).await?;
        let created = async {
            let demo = crate::demo::create(&tool, 1_000, "Demo Org", None).await?;
            let admin = crate::demo::create_admin(&tool, &demo).await?;
            anyhow::Ok((demo, admin))
        }
        .await;
        tool.close().await;
        let (demo, admin) = created?;
        println!();
        crate::demo::print(&demo, &base_url);
        crate::demo::print_dashboard(&admin, &base_url);
        println!();
    }
    if args.only.is_empty() {
        println!("Flow is running at {base_url} (API and every worker). Ctrl-C stops it.");
    } else {
        tracing::info!(components = ?args.only, "running");
    }

    let mut failure = None;
    while let Some(done) = tasks.join_next().await {
        let result = done.context("task panicked").and_then(|result| result);
        if let Err(error) = result {
            tracing::error!(
                error = format!("{error:#}"),
                "component failed; shutting down"
            );
            failure.get_or_insert(error);
            shutdown.cancel();
        }
    }
    failure.map_or(Ok(()), Err)
}
