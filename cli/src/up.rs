//! `flowctl up`: migrations, then the API and every worker in this one process, for local use.

use anyhow::Context;
use std::sync::LazyLock;
use std::time::Duration;

use clap::Args;
use clap::builder::PossibleValue;
use flow_common::config::{CoreConfig, from_env};
use flow_workers::roles::{Shared, WorkerRole};
use sqlx::migrate::MigrateDatabase;
use tokio::task::JoinSet;

/// Options of `flowctl up`.
#[derive(Debug, Clone, Args)]
pub struct UpArgs {
    /// Also seed the demo organization (or reuse it, found by its name) with people,
    /// assignments in every state, a schedule, a rule and a webhook endpoint at a local receiver
    /// (plain http to loopback allowed, with a warning), and print its API key, a curl command,
    /// the dashboard's address and its admin's sign-in link.
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
    // The demo's webhook endpoint is a receiver in this process, on 127.0.0.1 over plain http,
    // which the address policy refuses elsewhere (the webhook-worker of this process gets the
    // same allowance: `flow_workers::webhook`).
    if args.demo {
        api.webhook_policy = demo_webhook_policy();
    }

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
    let workers: Vec<(&WorkerRole, flow_workers::roles::Prepared)> = flow_workers::roles::ALL
        .iter()
        .map(|role| (role, role.prepare(&shared, shutdown.clone())))
        .collect();
    flow_common::ops::spawn_if(api.metrics_bind, health.clone(), shutdown.clone()).await?;

    let mut tasks = JoinSet::new();
    let base_url = api.public_base_url.clone();
    if args.runs(Component::Api) {
        let listener = tokio::net::TcpListener::bind(api.bind)
            .await
            .with_context(|| format!("binding {}", api.bind))?;
        let state = flow_api::build_state(api, shutdown.clone()).await?;
        tasks.spawn(flow_api::serve(listener, state, shutdown.clone()));
    }
    // Under the demo, the scheduler starts once the demo is seeded: its overdue scan would
    // otherwise mark past-due assignments overdue between their persistence and the progress
    // that completed them before their due date.
    let mut deferred = Vec::new();
    for (role, work) in workers {
        if args.runs(Component::Worker(role)) {
            if args.demo && role.name == STARTED_AFTER_SEEDING {
                deferred.push(work);
            } else {
                tasks.spawn(work.start());
            }
        }
    }
    // Startup logs first; what a person needs from this run comes last, apart from them.
    wait_until_ready(&health, &shutdown).await;

    // The demo's receiver lives as long as this process serves.
    let mut receiver = None;
    if args.demo {
        let started = crate::receiver::Receiver::start_with(crate::receiver::Options {
            port: 0,
            keep_requests: false,
            default_behaviour: crate::receiver::Behaviour::Succeed,
        })
        .await?;
        let url = started.url(crate::demo::RECEIVER_PATH);
        tracing::warn!(
            "demo: webhook endpoints may use plain http and loopback or private addresses \
             (WEBHOOK_ALLOW_HTTP and WEBHOOK_ALLOW_PRIVATE are on); never serve real traffic \
             like this"
        );
        tracing::info!("demo: seeding the demo organization (the workers persist it)");
        let tool = crate::context::Tool::open_with(
            &core,
            &base_url,
            &crate::demo::TOOL_SIZE,
            |settings| {
                settings.webhook_policy = demo_webhook_policy();
                settings.webhook_secrets.plaintext_allowed = true;
            },
        )
        .await?;
        let seeding_started = std::time::Instant::now();
        let seeding = async {
            let demo = match crate::demo::find(&tool, crate::demo::DEMO_ORG_NAME).await? {
                Some(demo) => demo,
                None => crate::demo::create(&tool, 1_000, crate::demo::DEMO_ORG_NAME, None).await?,
            };
            let admin = crate::demo::admin_access(&tool, &demo).await?;
            let life = crate::demo::bring_to_life(&tool, &demo, Some(&url)).await?;
            anyhow::Ok((demo, admin, life, seeding_started.elapsed()))
        };
        // Ctrl-C while seeding stops at once (what was seeded stays; the next run goes on).
        let made = tokio::select! {
            made = seeding => Some(made),
            () = shutdown.cancelled() => None,
        };
        tool.close().await;
        receiver = Some(started);
        for work in deferred.drain(..) {
            tasks.spawn(work.start());
        }
        match made {
            Some(Ok((demo, admin, life, took))) => {
                wait_until_ready(&health, &shutdown).await;
                print_block(|| {
                    crate::demo::print(&demo, &base_url);
                    println!();
                    crate::demo::print_life(&demo, &life, took);
                    println!(
                        "Demo mode: webhook endpoints may use plain http and loopback addresses \
                         (WEBHOOK_ALLOW_HTTP, WEBHOOK_ALLOW_PRIVATE); never serve real traffic \
                         like this."
                    );
                    println!();
                    crate::demo::print_dashboard(&admin, &base_url);
                    crate::demo::print_api_reference(&base_url);
                    println!();
                    print_running(&base_url);
                });
            }
            Some(Err(error)) => {
                // Stop what runs, as a failing component would.
                shutdown.cancel();
                while tasks.join_next().await.is_some() {}
                return Err(error.context("seeding the demo organization"));
            }
            None => {}
        }
    } else if args.only.is_empty() {
        print_block(|| {
            println!("Dashboard: {}/dashboard", base_url.trim_end_matches('/'));
            crate::demo::print_api_reference(&base_url);
            print_running(&base_url);
        });
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
    if let Some(mut receiver) = receiver {
        receiver.stop().await;
    }
    failure.map_or(Ok(()), Err)
}

/// The worker role `up --demo` starts once the demo is seeded.
const STARTED_AFTER_SEEDING: &str = "scheduler";

/// What the address policy allows in demo mode: plain http to loopback and private addresses
/// (the local receiver).
pub fn demo_webhook_policy() -> flow_common::webhook::address::AddressPolicy {
    flow_common::webhook::address::AddressPolicy {
        allow_private: true,
        allow_http: true,
    }
}

/// How long `up` waits for every component to be ready before it prints where things are.
const READY_WAIT: Duration = Duration::from_secs(30);

/// Waits until every running component's readiness checks pass, for [`READY_WAIT`] at most
/// (then goes on: what is not ready says so in its own logs), or until `shutdown`.
async fn wait_until_ready(
    health: &flow_common::ops::Health,
    shutdown: &tokio_util::sync::CancellationToken,
) {
    let deadline = tokio::time::Instant::now() + READY_WAIT;
    while tokio::time::Instant::now() < deadline && !shutdown.is_cancelled() {
        if health.report().await.ready {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    if !shutdown.is_cancelled() {
        tracing::warn!("not every component was ready within {READY_WAIT:?}");
    }
}

/// Prints `body` apart from the log lines around it: after a blank line, between two rules.
fn print_block(body: impl FnOnce()) {
    let rule = "=".repeat(78);
    println!();
    println!("{rule}");
    body();
    println!("{rule}");
    println!();
}

fn print_running(base_url: &str) {
    println!("Flow is running at {base_url} (API and every worker). Ctrl-C stops it.");
}
