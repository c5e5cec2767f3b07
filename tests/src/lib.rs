//! Test harness: starts the real API and workers in-process against the local Postgres and
//! RabbitMQ, with a fresh database (cloned from a migrated template) and a unique queue prefix per
//! test, so tests run in parallel. Workers run on their own runtime so a test can kill one the way
//! `kill -9` would: its sockets close mid-flight, nothing is acked or committed.

pub mod audit;
pub mod browser;
pub mod cluster;
pub mod dashboard;
pub mod enrollment;
pub mod people;
pub mod proxy;
pub mod replicas;
pub mod reports;

/// The webhook receiver the tests and the benchmarks share.
pub use flowctl::receiver;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::Context;
use flow_common::config::CoreConfig;
use flow_common::db::orgs::{NewOrganization, Tier};
use flow_domain::ids::{FlowId, OrgId};
use reqwest::header::HeaderMap;
use serde_json::{Value, json};
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

/// Postgres server used by tests (`TEST_DATABASE_URL`, any database on it; default local).
pub fn server_url() -> String {
    std::env::var("TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned())
}

/// RabbitMQ used by tests (`TEST_AMQP_URL`; default local).
pub fn amqp_url() -> String {
    std::env::var("TEST_AMQP_URL")
        .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".to_owned())
}

/// The URL of database `name` on the server of `base` (a URL of any database on it).
pub fn database_on(base: &str, name: &str) -> String {
    let (address, query) = match base.split_once('?') {
        Some((address, query)) => (address.to_owned(), format!("?{query}")),
        None => (base.to_owned(), String::new()),
    };
    let server = address
        .rsplit_once('/')
        .map_or(address.as_str(), |(server, _)| server);
    format!("{server}/{name}{query}")
}

/// The `host:port` of a service URL (`scheme://user@host:port/...`), for a proxy to forward to.
fn service_address(url: &str, default_port: u16) -> SocketAddr {
    let parsed = url::Url::parse(url).expect("service URL");
    let host = parsed.host_str().unwrap_or("127.0.0.1");
    let host = if host == "localhost" {
        "127.0.0.1"
    } else {
        host
    };
    format!("{host}:{}", parsed.port().unwrap_or(default_port))
        .parse()
        .expect("a numeric service address")
}

/// A fresh, migrated database for one test.
pub async fn fresh_database() -> anyhow::Result<(String, String)> {
    fresh_database_on(&server_url()).await
}

/// A fresh, migrated database for one test on the server of `server` (a URL of any database on
/// it): its URL and name.
pub async fn fresh_database_on(server: &str) -> anyhow::Result<(String, String)> {
    let admin = PgPool::connect(server)
        .await
        .context("connecting to the test Postgres")?;
    let template = format!("flow_test_template_{}", migrations_fingerprint());
    let mut connection = admin.acquire().await?;
    // One test process at a time builds the template; the others wait for it.
    sqlx::query("SELECT pg_advisory_lock(727274)")
        .execute(&mut *connection)
        .await?;
    let exists: bool =
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)")
            .bind(&template)
            .fetch_one(&mut *connection)
            .await?;
    let result = async {
        if !exists {
            drop_stale_databases(&mut connection).await?;
            sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {template}")))
                .execute(&mut *connection)
                .await?;
            let pool = PgPool::connect(&database_on(server, &template)).await?;
            let migrated = flow_common::db::migrate(&pool).await;
            pool.close().await;
            if let Err(error) = migrated {
                // A half-migrated template must not serve the next test.
                drop(
                    sqlx::query(sqlx::AssertSqlSafe(format!(
                        "DROP DATABASE IF EXISTS {template} WITH (FORCE)"
                    )))
                    .execute(&mut *connection)
                    .await,
                );
                return Err(error.into());
            }
        }
        let name = format!(
            "flow_test_{}_{}",
            chrono::Utc::now().timestamp(),
            uuid::Uuid::new_v4().simple()
        );
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "CREATE DATABASE {name} TEMPLATE {template}"
        )))
        .execute(&mut *connection)
        .await?;
        anyhow::Ok(name)
    }
    .await;
    sqlx::query("SELECT pg_advisory_unlock(727274)")
        .execute(&mut *connection)
        .await?;
    drop(connection);
    admin.close().await;
    let name = result?;
    Ok((database_on(server, &name), name))
}

/// Test databases left behind by runs that crashed more than two hours ago.
async fn drop_stale_databases(connection: &mut sqlx::PgConnection) -> anyhow::Result<()> {
    let names: Vec<String> = sqlx::query_scalar(
        "SELECT datname FROM pg_database WHERE datname LIKE 'flow_test_%' AND datname NOT LIKE 'flow_test_template_%'",
    )
    .fetch_all(&mut *connection)
    .await?;
    let cutoff = chrono::Utc::now().timestamp() - 2 * 3600;
    for name in names {
        let created = name
            .split('_')
            .nth(2)
            .and_then(|stamp| stamp.parse::<i64>().ok());
        if created.is_some_and(|created| created < cutoff) {
            drop(
                sqlx::query(sqlx::AssertSqlSafe(format!(
                    "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
                )))
                .execute(&mut *connection)
                .await,
            );
        }
    }
    Ok(())
}

fn migrations_fingerprint() -> String {
    use sha2::{Digest, Sha256};
    let mut hasher = Sha256::new();
    for migration in flow_common::db::MIGRATOR.iter() {
        hasher.update(migration.version.to_le_bytes());
        hasher.update(&*migration.checksum);
    }
    hex::encode(&hasher.finalize()[..8])
}

/// A unique queue prefix.
pub fn unique_prefix() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    format!(
        "test.{}.{}",
        uuid::Uuid::new_v4().simple(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// A worker running on its own runtime and thread.
pub struct WorkerHandle {
    shutdown: CancellationToken,
    runtime: Option<tokio::runtime::Runtime>,
    finished: Option<std::sync::mpsc::Receiver<anyhow::Result<()>>>,
}

impl WorkerHandle {
    /// Runs `work` on a new runtime.
    pub fn spawn<F, Fut>(work: F) -> Self
    where
        F: FnOnce(CancellationToken) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = anyhow::Result<()>> + Send + 'static,
    {
        let shutdown = CancellationToken::new();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("worker runtime");
        let (done, finished) = std::sync::mpsc::channel();
        let token = shutdown.clone();
        runtime.spawn(async move {
            let result = work(token).await;
            drop(done.send(result));
        });
        Self {
            shutdown,
            runtime: Some(runtime),
            finished: Some(finished),
        }
    }

    /// Kills the worker abruptly, like `kill -9`: every task is dropped, sockets close, nothing in
    /// flight is acked or committed.
    pub fn kill(mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }

    /// Asks the worker to stop gracefully and waits for it.
    pub fn stop(mut self) -> anyhow::Result<()> {
        self.shutdown.cancel();
        let finished = self.finished.take();
        let runtime = self.runtime.take();
        // Runtimes cannot be dropped from async code: wait on a plain thread.
        std::thread::spawn(move || {
            let result = finished
                .map(|finished| finished.recv_timeout(Duration::from_secs(30)))
                .unwrap_or(Ok(Ok(())));
            if let Some(runtime) = runtime {
                runtime.shutdown_timeout(Duration::from_secs(5));
            }
            result.context("worker did not stop within 30 s")?
        })
        .join()
        .map_err(|_| anyhow::anyhow!("worker shutdown thread panicked"))?
    }
}

impl Drop for WorkerHandle {
    fn drop(&mut self) {
        self.shutdown.cancel();
        if let Some(runtime) = self.runtime.take() {
            drop(
                std::thread::spawn(move || runtime.shutdown_timeout(Duration::from_secs(5))).join(),
            );
        }
    }
}

/// What to start.
#[derive(Debug, Clone)]
pub struct TestOptions {
    /// Start an assign-worker.
    pub assign_worker: bool,
    /// Broker address the API uses (a proxy, to cut it).
    pub api_amqp_url: Option<String>,
    /// Broker every component uses (`AMQP_URL`: a node list in the cluster tests); default
    /// [`amqp_url`].
    pub amqp_url: Option<String>,
    /// Start the outbox relay and a webhook-worker (with a shrunk retry schedule).
    pub webhooks: bool,
    /// Start a scheduler.
    pub scheduler: bool,
    /// Refuse webhook endpoints on loopback and private addresses, and plain http (production
    /// policy); tests that deliver to a local receiver need it off.
    pub strict_webhook_policy: bool,
    /// Master key encrypting webhook secrets at rest (API and webhook-worker): [`TEST_SECRET_KEY`]
    /// by default; `None` starts them as production would without one (they refuse to).
    pub webhook_secret_key: Option<String>,
    /// Route every component's RabbitMQ connections through a proxy the test can cut
    /// ([`TestApp::rabbit_proxy`]).
    pub rabbit_proxy: bool,
    /// Route every component's Postgres connections through a proxy the test can cut
    /// ([`TestApp::postgres_proxy`]); the test's own pool [`TestApp::db`] connects directly.
    pub postgres_proxy: bool,
    /// Dashboard session lifetimes (default: the service's defaults).
    pub dashboard: Option<flow_api::config::DashboardConfig>,
    /// Put the test's database on this primary and give every component its streaming replica
    /// (`DATABASE_REPLICA_URLS`), with this staleness bound.
    pub replica: Option<(replicas::ReplicaPair, Duration)>,
}

impl Default for TestOptions {
    fn default() -> Self {
        Self {
            assign_worker: true,
            api_amqp_url: None,
            amqp_url: None,
            webhooks: false,
            scheduler: false,
            strict_webhook_policy: false,
            webhook_secret_key: Some(TEST_SECRET_KEY.to_owned()),
            rabbit_proxy: false,
            postgres_proxy: false,
            dashboard: None,
            replica: None,
        }
    }
}

/// The webhook secret key of test services (base64 of 32 bytes).
pub const TEST_SECRET_KEY: &str = "dGVzdCBrZXkgb2YgZmxvdyB3ZWJob29rIHNlY3JldHM=";

/// The retry schedule of test webhook-workers: four quick retries.
pub const TEST_RETRY_SCHEDULE: &str = "0s,300ms,300ms,300ms,300ms";

/// An API replica the tests started.
struct StartedApi {
    address: SocketAddr,
    base_url: String,
    ops_url: String,
    state: flow_api::AppState,
}

/// Starts an API replica on an ephemeral port, its ops endpoints on another, as `flow-api` does.
async fn start_api(
    core: &CoreConfig,
    amqp_url: Option<&str>,
    options: &TestOptions,
    shutdown: &CancellationToken,
) -> StartedApi {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let address = listener.local_addr().expect("address");
    let base_url = format!("http://{address}");
    let mut api_config: flow_api::ApiConfig = flow_common::config::from_env();
    api_config.core = core.clone();
    if let Some(url) = amqp_url {
        api_config.core.amqp_url = url.to_owned();
    }
    api_config.bind = address;
    api_config.public_base_url = base_url.clone();
    api_config.publish_channels = 2;
    api_config.lookup_concurrency = 2;
    api_config.webhook_policy = flow_common::webhook::address::AddressPolicy {
        allow_private: !options.strict_webhook_policy,
        allow_http: !options.strict_webhook_policy,
    };
    api_config.webhook_secrets = flow_common::webhook::vault::SecretVault {
        master_key: options.webhook_secret_key.clone(),
        plaintext_allowed: false,
    };
    if let Some(dashboard) = &options.dashboard {
        api_config.dashboard = dashboard.clone();
    }
    let state = flow_api::build_state(api_config, shutdown.clone())
        .await
        .expect("api state");
    let ops = flow_common::ops::spawn(
        "127.0.0.1:0".parse().expect("address"),
        state.config.health.clone(),
        shutdown.clone(),
    )
    .await
    .expect("ops endpoints");
    tokio::spawn(flow_api::serve(listener, state.clone(), shutdown.clone()));
    StartedApi {
        address,
        base_url,
        ops_url: format!("http://{ops}"),
        state,
    }
}

/// The service under test.
pub struct TestApp {
    /// `http://127.0.0.1:port`.
    pub base_url: String,
    /// Address of the API.
    pub address: SocketAddr,
    /// The API's state (its pools, its router of report reads).
    pub api: flow_api::AppState,
    /// `http://127.0.0.1:port` of the API's ops endpoints (`/metrics`, `/healthz`, `/readyz`).
    pub ops_url: String,
    /// HTTP client.
    pub client: reqwest::Client,
    /// Pool on the test database.
    pub db: PgPool,
    /// Configuration the workers use.
    pub core: CoreConfig,
    /// A URL of the Postgres server holding the test's database.
    server: String,
    db_name: String,
    shutdown: CancellationToken,
    /// The assign-worker, when started.
    pub assign_worker: Option<WorkerHandle>,
    /// The outbox relay, when started.
    pub relay: Option<WorkerHandle>,
    /// The webhook-worker, when started.
    pub webhook_worker: Option<WorkerHandle>,
    /// The scheduler, when started.
    pub scheduler: Option<WorkerHandle>,
    /// The proxy in front of RabbitMQ, with [`TestOptions::rabbit_proxy`].
    pub rabbit_proxy: Option<proxy::Proxy>,
    /// The proxy in front of Postgres, with [`TestOptions::postgres_proxy`].
    pub postgres_proxy: Option<proxy::Proxy>,
    options: TestOptions,
}

/// An organization and one of its API keys.
#[derive(Debug, Clone)]
pub struct TestOrg {
    pub id: OrgId,
    /// Secret key.
    pub key: String,
}

/// A response, decoded.
#[derive(Debug)]
pub struct TestResponse {
    /// Status code.
    pub status: u16,
    pub headers: HeaderMap,
    /// Body as JSON (`Null` when not JSON).
    pub body: Value,
}

impl TestResponse {
    /// A header as text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|value| value.to_str().ok())
    }
}

impl TestApp {
    /// API and assign-worker.
    pub async fn spawn() -> Self {
        Self::spawn_with(TestOptions::default()).await
    }

    /// What `options` says.
    pub async fn spawn_with(options: TestOptions) -> Self {
        flow_common::telemetry::init();
        let server = match &options.replica {
            Some((pair, _)) => pair.primary_url.clone(),
            None => server_url(),
        };
        let (database_url, db_name) = fresh_database_on(&server)
            .await
            .expect("fresh test database");
        let db = PgPool::connect(&database_url).await.expect("test pool");
        let rabbit_proxy = match options.rabbit_proxy {
            true => Some(proxy::Proxy::start(service_address(&amqp_url(), 5672)).await),
            false => None,
        };
        let postgres_proxy = match options.postgres_proxy {
            true => Some(proxy::Proxy::start(service_address(&database_url, 5432)).await),
            false => None,
        };
        let core = CoreConfig {
            database_url: match &postgres_proxy {
                Some(proxy) => format!("postgres://postgres@{}/{db_name}", proxy.address),
                None => database_url,
            },
            database_max_connections: 6,
            amqp_url: match &rabbit_proxy {
                Some(proxy) => format!("amqp://guest:guest@{}/%2f", proxy.address),
                None => options.amqp_url.clone().unwrap_or_else(amqp_url),
            },
            queue_prefix: unique_prefix(),
            delivery_limit: 5,
            replicas: match &options.replica {
                Some((pair, max_staleness)) => flow_common::config::ReplicaConfig {
                    urls: vec![database_on(&pair.replica_url, &db_name)],
                    max_staleness: *max_staleness,
                },
                None => Default::default(),
            },
        };
        let shutdown = CancellationToken::new();
        let api = start_api(&core, options.api_amqp_url.as_deref(), &options, &shutdown).await;
        let mut app = Self {
            base_url: api.base_url,
            address: api.address,
            ops_url: api.ops_url,
            api: api.state,
            client: reqwest::Client::builder()
                .timeout(Duration::from_secs(30))
                .build()
                .expect("http client"),
            db,
            core,
            server,
            db_name,
            shutdown,
            assign_worker: None,
            relay: None,
            webhook_worker: None,
            scheduler: None,
            rabbit_proxy,
            postgres_proxy,
            options: options.clone(),
        };
        if options.assign_worker {
            app.assign_worker = Some(app.start_assign_worker());
            app.wait_for_consumer().await;
            app.wait_for_consumers(flow_common::amqp::QueueKind::Progress, 1)
                .await;
        }
        if options.webhooks {
            app.relay = Some(app.start_relay());
            app.webhook_worker = Some(app.start_webhook_worker());
            app.wait_for_consumers(flow_common::amqp::QueueKind::Webhooks, 1)
                .await;
        }
        if options.scheduler {
            app.scheduler = Some(app.start_scheduler());
        }
        app
    }

    /// Starts an outbox relay.
    pub fn start_relay(&self) -> WorkerHandle {
        self.start_relay_with(|_| {})
    }

    /// Starts an outbox relay with the test settings changed by `tune`.
    pub fn start_relay_with(
        &self,
        tune: impl FnOnce(&mut flow_workers::relay::RelayConfig),
    ) -> WorkerHandle {
        let mut config: flow_workers::relay::RelayConfig = flow_common::config::from_env();
        config.core = self.core.clone();
        config.poll_interval_ms = 200;
        tune(&mut config);
        WorkerHandle::spawn(move |shutdown| flow_workers::runtime::run(config, shutdown))
    }

    /// Starts a webhook-worker that may deliver to local receivers, with
    /// [`TEST_RETRY_SCHEDULE`] and short timeouts.
    pub fn start_webhook_worker(&self) -> WorkerHandle {
        self.start_webhook_worker_with(|_| {})
    }

    /// Starts a webhook-worker like [`TestApp::start_webhook_worker`], with the settings changed
    /// by `tune`.
    pub fn start_webhook_worker_with(
        &self,
        tune: impl FnOnce(&mut flow_workers::webhook::WebhookWorkerConfig),
    ) -> WorkerHandle {
        let mut config: flow_workers::webhook::WebhookWorkerConfig =
            flow_common::config::from_env();
        config.core = self.core.clone();
        config.policy = flow_common::webhook::address::AddressPolicy {
            allow_private: true,
            allow_http: true,
        };
        config.secrets = flow_common::webhook::vault::SecretVault {
            master_key: self.options.webhook_secret_key.clone(),
            plaintext_allowed: false,
        };
        config.retry_schedule = TEST_RETRY_SCHEDULE.parse().expect("schedule");
        config.poll_interval = Duration::from_millis(100);
        config.timeout = Duration::from_secs(5);
        config.endpoint_concurrency = 4;
        tune(&mut config);
        WorkerHandle::spawn(move |shutdown| flow_workers::runtime::run(config, shutdown))
    }

    /// Starts a scheduler scanning every 100 ms.
    pub fn start_scheduler(&self) -> WorkerHandle {
        self.start_scheduler_with(|_| {})
    }

    /// Starts a scheduler scanning every 100 ms, with the settings changed by `tune`.
    pub fn start_scheduler_with(
        &self,
        tune: impl FnOnce(&mut flow_workers::scheduler::SchedulerConfig),
    ) -> WorkerHandle {
        let mut config: flow_workers::scheduler::SchedulerConfig = flow_common::config::from_env();
        config.core = self.core.clone();
        config.interval_ms = 100;
        tune(&mut config);
        WorkerHandle::spawn(move |shutdown| flow_workers::runtime::run(config, shutdown))
    }

    /// Starts another API replica on the same database and broker; returns its base URL.
    pub async fn start_api_replica(&self) -> String {
        start_api(&self.core, None, &self.options, &self.shutdown)
            .await
            .base_url
    }

    /// Starts another API replica on the same database, connecting to the broker through
    /// `amqp_url` (the same nodes in another order, say); returns its base URL and its state.
    pub async fn start_api_replica_on(&self, amqp_url: &str) -> (String, flow_api::AppState) {
        let api = start_api(&self.core, Some(amqp_url), &self.options, &self.shutdown).await;
        (api.base_url, api.state)
    }

    /// Starts another assign-worker.
    pub fn start_assign_worker(&self) -> WorkerHandle {
        self.start_assign_worker_with(|_| {})
    }

    /// Starts another assign-worker with the test settings changed by `tune`.
    pub fn start_assign_worker_with(
        &self,
        tune: impl FnOnce(&mut flow_workers::assign::AssignWorkerConfig),
    ) -> WorkerHandle {
        let mut config: flow_workers::assign::AssignWorkerConfig = flow_common::config::from_env();
        config.core = self.core.clone();
        config.prefetch = 500;
        config.batch_size = 200;
        config.concurrency = 2;
        tune(&mut config);
        WorkerHandle::spawn(move |shutdown| flow_workers::runtime::run(config, shutdown))
    }

    /// Waits until the assign queue has a consumer (the worker is up).
    pub async fn wait_for_consumer(&self) {
        self.wait_for_consumers(flow_common::amqp::QueueKind::Assign, 1)
            .await;
    }

    /// Waits until `queue` has at least `count` consumers.
    pub async fn wait_for_consumers(&self, queue: flow_common::amqp::QueueKind, count: u32) {
        let connection = flow_common::amqp::connect(&self.core.amqp_url, "test")
            .await
            .expect("amqp");
        let name = self.topology().queue(queue);
        let mut found = false;
        // Up to 30 s: under the whole suite's load a worker that just reconnected may first have
        // to finish the batch it held.
        for _ in 0..600 {
            if declared(&connection, &name)
                .await
                .is_some_and(|(_, consumers)| consumers >= count)
            {
                found = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        drop(connection.close(200, "ok".into()).await);
        assert!(found, "{name} did not get {count} consumer(s)");
    }

    /// Messages of `queue` ready for a consumer (not handed to one yet) and its consumers; `None`
    /// while the queue does not exist.
    pub async fn queue_state(&self, queue: flow_common::amqp::QueueKind) -> Option<(u32, u32)> {
        let connection = flow_common::amqp::connect(&self.core.amqp_url, "test")
            .await
            .expect("amqp");
        let state = declared(&connection, &self.topology().queue(queue)).await;
        drop(connection.close(200, "ok".into()).await);
        state
    }

    /// The topology of this test.
    pub fn topology(&self) -> flow_common::amqp::Topology {
        flow_common::amqp::Topology::new(&self.core.queue_prefix, self.core.delivery_limit)
    }

    /// Creates an organization with a key.
    /// Runs a `flowctl` command line as the binary would against this app's Postgres and
    /// broker, connection flags given after the subcommand (they are global).
    pub async fn flowctl(&self, args: &[&str]) -> anyhow::Result<flowctl::output::Outcome> {
        let mut line = vec!["flowctl"];
        line.extend_from_slice(args);
        line.extend_from_slice(&[
            "--database-url",
            &self.core.database_url,
            "--amqp-url",
            &self.core.amqp_url,
            "--queue-prefix",
            &self.core.queue_prefix,
        ]);
        let cli = <flowctl::Cli as clap::Parser>::try_parse_from(line)?;
        flowctl::run(cli).await
    }

    pub async fn create_org(&self, tier: Tier) -> TestOrg {
        self.create_org_with(tier, None).await
    }

    /// An enterprise organization without a practical assign limit, with `count` users
    /// `user{i}@example.com` (created a thousand a request) and one flow "Onboarding" of two
    /// modules: its id, and the users' e-mails.
    pub async fn org_with_users(&self, count: usize) -> (TestOrg, String, Vec<String>) {
        let org = self
            .create_org_with(Tier::Enterprise, Some(1_000_000))
            .await;
        let emails: Vec<String> = (0..count).map(|i| format!("user{i}@example.com")).collect();
        for chunk in emails.chunks(1_000) {
            let refs: Vec<&str> = chunk.iter().map(String::as_str).collect();
            self.create_users(&org, &refs).await;
        }
        let flow = self.create_flow(&org, "Onboarding", &[30, 30]).await;
        (org, flow, emails)
    }

    /// Creates an organization with a key and an optional assign-limit override.
    pub async fn create_org_with(&self, tier: Tier, assign_limit: Option<u32>) -> TestOrg {
        let org = flow_common::db::orgs::create(
            &self.db,
            &NewOrganization {
                name: "Test org".into(),
                tier,
                timezone: chrono_tz::Tz::UTC,
                assign_limit_per_minute: assign_limit,
                report_limit_per_minute: None,
            },
        )
        .await
        .expect("create org");
        let (_, key) = flow_common::db::keys::create(&self.db, org.id, "test")
            .await
            .expect("create key");
        TestOrg { id: org.id, key }
    }

    /// Sends a request to this app's API.
    pub async fn request(
        &self,
        method: reqwest::Method,
        path: &str,
        key: Option<&str>,
        body: Option<&Value>,
        headers: &[(&str, &str)],
    ) -> TestResponse {
        self.request_at(&self.base_url, method, path, key, body, headers)
            .await
    }

    /// Sends a SCIM request under `/scim/v2` as identity providers do: the body (if any) as
    /// `application/scim+json`, bearer `key`, and extra `headers`.
    pub async fn scim_request(
        &self,
        key: &str,
        method: reqwest::Method,
        path: &str,
        body: Option<&Value>,
        headers: &[(&str, &str)],
    ) -> TestResponse {
        let mut request = self
            .client
            .request(method, format!("{}/scim/v2{path}", self.base_url))
            .bearer_auth(key);
        if let Some(body) = body {
            request = request
                .header("content-type", "application/scim+json")
                .body(body.to_string());
        }
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let response = request.send().await.expect("request sent");
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let text = response.text().await.unwrap_or_default();
        TestResponse {
            status,
            headers,
            body: serde_json::from_str(&text).unwrap_or(Value::Null),
        }
    }

    /// Sends a request to the API at `base_url` (a replica).
    pub async fn request_at(
        &self,
        base_url: &str,
        method: reqwest::Method,
        path: &str,
        key: Option<&str>,
        body: Option<&Value>,
        headers: &[(&str, &str)],
    ) -> TestResponse {
        let mut request = self.client.request(method, format!("{base_url}{path}"));
        if let Some(key) = key {
            request = request.bearer_auth(key);
        }
        if let Some(body) = body {
            request = request.json(body);
        }
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let response = request.send().await.expect("request sent");
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let text = response.text().await.unwrap_or_default();
        let body = serde_json::from_str(&text).unwrap_or(Value::Null);
        TestResponse {
            status,
            headers,
            body,
        }
    }

    /// POST JSON with the org's key.
    pub async fn post(&self, org: &TestOrg, path: &str, body: &Value) -> TestResponse {
        self.request(reqwest::Method::POST, path, Some(&org.key), Some(body), &[])
            .await
    }

    /// POST JSON with the org's key and extra headers.
    pub async fn post_with(
        &self,
        org: &TestOrg,
        path: &str,
        body: &Value,
        headers: &[(&str, &str)],
    ) -> TestResponse {
        self.request(
            reqwest::Method::POST,
            path,
            Some(&org.key),
            Some(body),
            headers,
        )
        .await
    }

    /// Publishes a raw message to the commands exchange with a confirm (tests of what workers
    /// do with messages the API would never send).
    pub async fn publish_raw(&self, routing_key: &str, kind: &str, payload: &[u8]) {
        let connection = flow_common::amqp::connect(&self.core.amqp_url, "test")
            .await
            .expect("amqp");
        let channel = connection.create_channel().await.expect("channel");
        channel
            .confirm_select(lapin::options::ConfirmSelectOptions::default())
            .await
            .expect("confirm mode");
        let confirm = channel
            .basic_publish(
                self.topology().commands_exchange().into(),
                routing_key.into(),
                lapin::options::BasicPublishOptions::default(),
                payload,
                lapin::BasicProperties::default().with_type(kind.into()),
            )
            .await
            .expect("publish")
            .await
            .expect("confirm");
        assert!(confirm.is_ack());
        drop(connection.close(200, "ok".into()).await);
    }

    /// Waits until `count` dead letters are recorded in Postgres (by the dead-letter recorder of
    /// the assign-worker) and returns them, oldest first.
    pub async fn dead_letters(
        &self,
        count: usize,
    ) -> Vec<flow_common::db::dead_letters::DeadLetter> {
        self.eventually(
            Duration::from_secs(15),
            &format!("{count} recorded dead letter(s)"),
            || async {
                let letters = flow_common::db::dead_letters::pending(&self.db, 0, 1_000)
                    .await
                    .expect("dead letters");
                (letters.len() >= count).then_some(letters)
            },
        )
        .await
    }

    /// Publishes many raw messages to the commands exchange on one channel, confirms awaited
    /// together; each payload goes with its `message-id`.
    pub async fn publish_raw_many(
        &self,
        routing_key: &str,
        kind: &str,
        messages: &[(String, Vec<u8>)],
    ) {
        let connection = flow_common::amqp::connect(&self.core.amqp_url, "test")
            .await
            .expect("amqp");
        let channel = connection.create_channel().await.expect("channel");
        channel
            .confirm_select(lapin::options::ConfirmSelectOptions::default())
            .await
            .expect("confirm mode");
        let exchange = self.topology().commands_exchange();
        let mut confirms = Vec::with_capacity(messages.len());
        for (message_id, payload) in messages {
            confirms.push(
                channel
                    .basic_publish(
                        exchange.as_str().into(),
                        routing_key.into(),
                        lapin::options::BasicPublishOptions::default(),
                        payload,
                        lapin::BasicProperties::default()
                            .with_delivery_mode(2)
                            .with_message_id(message_id.as_str().into())
                            .with_type(kind.into()),
                    )
                    .await
                    .expect("publish"),
            );
        }
        for confirm in futures::future::join_all(confirms).await {
            assert!(confirm.expect("confirm").is_ack());
        }
        drop(connection.close(200, "ok".into()).await);
    }

    /// GET with the org's key.
    pub async fn get(&self, org: &TestOrg, path: &str) -> TestResponse {
        self.request(reqwest::Method::GET, path, Some(&org.key), None, &[])
            .await
    }

    /// Creates users over HTTP; returns their e-mails.
    pub async fn create_users(&self, org: &TestOrg, emails: &[&str]) {
        let users: Vec<Value> = emails
            .iter()
            .map(|email| json!({ "email": email }))
            .collect();
        let response = self
            .post(org, "/v1/users/bulk", &json!({ "users": users }))
            .await;
        assert_eq!(response.status, 200, "{:?}", response.body);
    }

    /// POSTs a bulk assign of `items` (see [`assign_items`]) with the org's key and extra headers.
    pub async fn assign_bulk(
        &self,
        org: &TestOrg,
        items: &[Value],
        headers: &[(&str, &str)],
    ) -> TestResponse {
        self.post_with(
            org,
            "/v1/flows/assign/bulk",
            &serde_json::json!({ "assignments": items }),
            headers,
        )
        .await
    }

    /// Creates a flow over HTTP with modules of the given minutes; returns its id.
    pub async fn create_flow(&self, org: &TestOrg, name: &str, minutes: &[i32]) -> String {
        let modules: Vec<Value> = minutes
            .iter()
            .enumerate()
            .map(|(index, minutes)| json!({ "name": format!("Module {}", index + 1), "estimatedMinutes": minutes }))
            .collect();
        let response = self
            .post(
                org,
                "/v1/flows",
                &json!({ "name": name, "modules": modules }),
            )
            .await;
        assert_eq!(response.status, 201, "{:?}", response.body);
        let id = response.body["flowId"].as_str().expect("flowId").to_owned();
        assert!(FlowId::parse(&id).is_some());
        id
    }

    /// Creates a webhook endpoint over HTTP from `body` (insisting on a 201); returns the
    /// endpoint as answered, its one-time `secret` included.
    pub async fn create_webhook(&self, org: &TestOrg, body: &Value) -> Value {
        let response = self.post(org, "/v1/webhooks", body).await;
        assert_eq!(response.status, 201, "{:?}", response.body);
        response.body
    }

    /// Polls `check` every 50 ms until it returns `Some`, or panics after `timeout`.
    pub async fn eventually<T, F, Fut>(&self, timeout: Duration, what: &str, mut check: F) -> T
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Option<T>>,
    {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Some(value) = check().await {
                return value;
            }
            if tokio::time::Instant::now() > deadline {
                panic!("timed out after {timeout:?} waiting for {what}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Assigns `flow` to `email` with the extra body fields of `extra` (an object), waits until
    /// the assignment is persisted, and returns its id.
    pub async fn assign_persisted(
        &self,
        org: &TestOrg,
        flow: &str,
        email: &str,
        extra: Value,
    ) -> String {
        let mut body = json!({ "flowId": flow, "userEmail": email });
        if let (Some(body), Some(extra)) = (body.as_object_mut(), extra.as_object()) {
            body.extend(extra.clone());
        }
        let response = self.post(org, "/v1/flows/assign", &body).await;
        assert_eq!(response.status, 200, "{:?}", response.body);
        let id = response.body["assignmentId"]
            .as_str()
            .expect("assignmentId")
            .to_owned();
        let path = format!("/v1/assignments/{id}");
        self.eventually(
            Duration::from_secs(10),
            "the assignment to be persisted",
            || async { (self.get(org, &path).await.status == 200).then_some(()) },
        )
        .await;
        id
    }

    /// The module ids of a flow, in order.
    pub async fn module_ids(&self, org: &TestOrg, flow: &str) -> Vec<String> {
        let response = self.get(org, &format!("/v1/flows/{flow}")).await;
        assert_eq!(response.status, 200, "{:?}", response.body);
        response.body["modules"]
            .as_array()
            .expect("modules")
            .iter()
            .map(|module| module["moduleId"].as_str().expect("moduleId").to_owned())
            .collect()
    }

    /// Event types written to the outbox for an assignment, oldest first.
    pub async fn events_of(&self, assignment_id: &str) -> Vec<String> {
        let id = flow_domain::ids::AssignmentId::parse(assignment_id).expect("assignment id");
        sqlx::query_scalar("SELECT event_type FROM outbox WHERE assignment_id = $1 ORDER BY seq")
            .bind(id)
            .fetch_all(&self.db)
            .await
            .expect("outbox")
    }

    /// Waits until the assignment reports `status`; returns its body.
    pub async fn wait_for_status(&self, org: &TestOrg, assignment_id: &str, status: &str) -> Value {
        let path = format!("/v1/assignments/{assignment_id}");
        self.eventually(
            Duration::from_secs(10),
            &format!("{assignment_id} to be {status}"),
            || async {
                let response = self.get(org, &path).await;
                (response.body["status"] == json!(status)).then_some(response.body)
            },
        )
        .await
    }

    /// Number of assignments in the test database.
    pub async fn assignment_count(&self) -> i64 {
        sqlx::query_scalar("SELECT count(*) FROM assignments")
            .fetch_one(&self.db)
            .await
            .expect("count")
    }

    /// Asserts that the report rollups equal a recount over the rows, as they stand (deltas not
    /// merged yet included) and again after merging every delta.
    pub async fn assert_rollups_exact(&self) {
        assert_rollups_exact(&self.db).await;
    }
}

/// Ready messages and consumers of the queue `name`, by a passive declare on a channel of its own
/// (a passive declare of a missing queue closes its channel); `None` if the queue does not exist.
async fn declared(connection: &lapin::Connection, name: &str) -> Option<(u32, u32)> {
    let channel = connection.create_channel().await.expect("channel");
    let state = flow_workers::consumer::queue_depth(&channel, name)
        .await
        .ok()?;
    drop(channel.close(200, "ok".into()).await);
    Some(state)
}

/// Asserts that the report rollups of `db` equal a recount over the rows, before and after
/// merging every delta (`flowctl reports verify` in one snapshot, then the scheduler's merge).
pub async fn assert_rollups_exact(db: &PgPool) {
    async fn check(db: &PgPool, when: &str) {
        let mut transaction = db.begin().await.expect("transaction");
        sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            .execute(&mut *transaction)
            .await
            .expect("snapshot");
        let mismatches = flow_common::db::rollups::verify(&mut *transaction)
            .await
            .expect("verify rollups");
        assert!(
            mismatches.is_empty(),
            "report rollups differ from a recount {when}: {mismatches:#?}"
        );
    }
    check(db, "before merging").await;
    while flow_common::db::rollups::merge(db, 1_000)
        .await
        .expect("merge rollups")
        > 0
    {}
    check(db, "after merging").await;
}

impl Drop for TestApp {
    fn drop(&mut self) {
        self.shutdown.cancel();
        drop(self.assign_worker.take());
        drop(self.relay.take());
        drop(self.webhook_worker.take());
        drop(self.scheduler.take());
        clean_up(
            self.server.clone(),
            self.db_name.clone(),
            Some((
                self.options.amqp_url.clone().unwrap_or_else(amqp_url),
                self.topology(),
            )),
        );
    }
}

/// The items of a bulk assign of `flow` to each of `emails`.
pub fn assign_items(flow: &str, emails: &[String]) -> Vec<Value> {
    emails
        .iter()
        .map(|email| serde_json::json!({ "flowId": flow, "userEmail": email }))
        .collect()
}

/// A fresh, migrated database (see [`fresh_database`]) for a test that needs no services,
/// dropped with this value.
pub struct ScratchDatabase {
    url: String,
    name: String,
}

impl ScratchDatabase {
    /// Creates the database.
    pub async fn create() -> anyhow::Result<Self> {
        let (url, name) = fresh_database().await?;
        Ok(Self { url, name })
    }

    /// Its connection string.
    pub fn url(&self) -> &str {
        &self.url
    }
}

impl Drop for ScratchDatabase {
    fn drop(&mut self) {
        clean_up(server_url(), self.name.clone(), None);
    }
}

/// Drops a test's database on `server` (and deletes its broker topology on the broker `amqp`)
/// before returning. On a thread of its own: Drop cannot await, and the test's runtime is ending.
fn clean_up(
    server: String,
    db_name: String,
    topology: Option<(String, flow_common::amqp::Topology)>,
) {
    let cleanup = std::thread::spawn(move || {
        let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        else {
            return;
        };
        runtime.block_on(async move {
            if let Some((amqp, topology)) = topology {
                flow_common::amqp::delete_topology(&amqp, "test-cleanup", &topology).await;
            }
            if let Ok(admin) = PgPool::connect(&server).await {
                drop(
                    sqlx::query(sqlx::AssertSqlSafe(format!(
                        "DROP DATABASE IF EXISTS {db_name} WITH (FORCE)"
                    )))
                    .execute(&admin)
                    .await,
                );
                admin.close().await;
            }
        });
    });
    drop(cleanup.join());
}
