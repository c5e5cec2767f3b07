//! Every Flow binary, started as its own process, serves `/metrics`, `/healthz` and `/readyz` on
//! its ops address (`METRICS_BIND`); readiness follows its own dependencies.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::OnceLock;
use std::time::Duration;

use flow_tests::{TestApp, TestOptions};
use tokio::process::{Child, Command};

/// The directory holding this build's binaries (`target/debug`), with the worker and API binaries
/// built into it once per test process: a test crate cannot depend on another crate's binaries.
/// Every binary of the workspace is built, so that the features of the dependencies are the ones
/// `cargo test --workspace` unified (no member has dev-dependencies) and none is compiled again;
/// building only these two packages unified fewer and recompiled some 90 crates on a cold machine.
fn binaries() -> &'static PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        let test_binary = std::env::current_exe().expect("test binary path");
        // target/<profile>/deps/ops-<hash>
        let profile_dir = test_binary
            .parent()
            .and_then(|deps| deps.parent())
            .expect("target/<profile>")
            .to_path_buf();
        let target_dir = profile_dir.parent().expect("target dir").to_path_buf();
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| env!("CARGO").to_owned());
        let mut build = std::process::Command::new(cargo);
        build
            .args(["build", "--workspace", "--bins"])
            .env("CARGO_TARGET_DIR", &target_dir)
            .current_dir(env!("CARGO_MANIFEST_DIR"));
        if profile_dir
            .file_name()
            .is_some_and(|name| name == "release")
        {
            build.arg("--release");
        }
        let status = build.status().expect("running cargo build");
        assert!(status.success(), "cargo build of the binaries failed");
        profile_dir
    })
}

/// A free local port (bound, then released for the child to take).
fn free_address() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("address").to_string()
}

/// `binary` started against the test's database and queue prefix, its ops endpoints on a free
/// port; killed when dropped.
struct Process {
    child: Child,
    ops: String,
}

impl Process {
    fn start(app: &TestApp, binary: &str, extra_env: &[(&str, String)]) -> Self {
        let path = binaries().join(binary);
        let ops = free_address();
        let mut command = Command::new(&path);
        command
            .env("DATABASE_URL", &app.core.database_url)
            .env("DATABASE_MAX_CONNECTIONS", "4")
            .env("AMQP_URL", &app.core.amqp_url)
            .env("QUEUE_PREFIX", &app.core.queue_prefix)
            .env("DELIVERY_LIMIT", app.core.delivery_limit.to_string())
            .env("METRICS_BIND", &ops)
            .env("WEBHOOK_SECRET_KEY", flow_tests::TEST_SECRET_KEY)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .kill_on_drop(true);
        for (name, value) in extra_env {
            command.env(name, value);
        }
        let child = command
            .spawn()
            .unwrap_or_else(|error| panic!("starting {}: {error}", path.display()));
        Self {
            child,
            ops: format!("http://{ops}"),
        }
    }

    async fn get(&self, path: &str) -> Option<(u16, String)> {
        let response = reqwest::Client::new()
            .get(format!("{}{path}", self.ops))
            .timeout(Duration::from_secs(5))
            .send()
            .await
            .ok()?;
        let status = response.status().as_u16();
        Some((status, response.text().await.ok()?))
    }

    /// Waits until `/readyz` answers `status`; panics with the last answer otherwise.
    async fn wait_for_readyz(&mut self, status: u16, within: Duration) -> String {
        let deadline = tokio::time::Instant::now() + within;
        let mut last = None;
        loop {
            if let Ok(Some(exit)) = self.child.try_wait() {
                panic!("the process exited with {exit} before /readyz answered {status}");
            }
            if let Some((code, body)) = self.get("/readyz").await {
                if code == status {
                    return body;
                }
                last = Some((code, body));
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "/readyz did not answer {status} within {within:?}; last answer {last:?}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Scrapes `/metrics` until it holds every one of `expected`; returns the last scrape.
    async fn metrics_containing(&self, expected: &[String]) -> String {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let (status, body) = self.get("/metrics").await.expect("/metrics answers");
            assert_eq!(status, 200);
            if expected.iter().all(|metric| body.contains(metric.as_str())) {
                return body;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "/metrics lacks some of {expected:?}:\n{body}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

fn options() -> TestOptions {
    TestOptions {
        assign_worker: false,
        ..Default::default()
    }
}

/// Starts `binary`, waits for `/readyz` 200, checks `/healthz`, and scrapes `/metrics` for the
/// build info, process metrics and `role_metrics`.
async fn serves_ops_endpoints(binary: &str, extra_env: &[(&str, String)], role_metrics: &[String]) {
    let app = TestApp::spawn_with(options()).await;
    let mut process = Process::start(&app, binary, extra_env);
    let readiness = process.wait_for_readyz(200, Duration::from_secs(60)).await;
    let readiness: serde_json::Value = serde_json::from_str(&readiness).expect("readyz JSON");
    assert_eq!(readiness["status"], "ready", "{readiness}");
    assert!(
        readiness["checks"]
            .as_object()
            .is_some_and(|checks| checks.keys().any(|name| name.ends_with(".postgres"))),
        "readiness checks Postgres: {readiness}"
    );
    let (status, _) = process.get("/healthz").await.expect("/healthz answers");
    assert_eq!(status, 200);
    let mut expected = vec![
        format!("flow_build_info{{version=\"{}\"", env!("CARGO_PKG_VERSION")),
        "process_resident_memory_bytes".to_owned(),
    ];
    expected.extend_from_slice(role_metrics);
    process.metrics_containing(&expected).await;
    drop(process);
}

fn queue_gauge(app_prefix: &str, queue: &str, lane: &str) -> String {
    format!("flow_queue_messages{{queue=\"{app_prefix}.{queue}\",lane=\"{lane}\"}}")
}

#[tokio::test]
async fn assign_worker_binary_serves_its_ops_endpoints() {
    serves_ops_endpoints(
        "assign-worker",
        &[],
        &[
            "flow_dead_letters_pending ".to_owned(),
            "flow_queue_messages{queue=\"test.".to_owned(),
        ],
    )
    .await;
}

#[tokio::test]
async fn report_worker_binary_serves_its_ops_endpoints() {
    let store = std::env::temp_dir().join(format!("flow-ops-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&store).expect("export dir");
    serves_ops_endpoints(
        "report-worker",
        &[("EXPORT_STORE_URL", store.display().to_string())],
        &["flow_exports_waiting ".to_owned()],
    )
    .await;
}

#[tokio::test]
async fn outbox_relay_binary_serves_its_ops_endpoints() {
    serves_ops_endpoints(
        "outbox-relay",
        &[],
        &[
            "flow_outbox_backlog ".to_owned(),
            "flow_outbox_oldest_unpublished_seconds ".to_owned(),
        ],
    )
    .await;
}

#[tokio::test]
async fn scheduler_binary_serves_its_ops_endpoints() {
    serves_ops_endpoints("scheduler", &[], &["flow_schedules_due ".to_owned()]).await;
}

#[tokio::test]
async fn webhook_worker_binary_serves_its_ops_endpoints() {
    serves_ops_endpoints(
        "webhook-worker",
        &[],
        &[
            "flow_webhook_deliveries_due ".to_owned(),
            "flow_queue_messages{queue=\"test.".to_owned(),
        ],
    )
    .await;
}

#[tokio::test]
async fn a_worker_queue_gauge_names_its_own_queue() {
    let app = TestApp::spawn_with(options()).await;
    let mut process = Process::start(&app, "assign-worker", &[]);
    process.wait_for_readyz(200, Duration::from_secs(60)).await;
    let prefix = &app.core.queue_prefix;
    process
        .metrics_containing(&[
            queue_gauge(prefix, "assign", "interactive"),
            queue_gauge(prefix, "assign.bulk.0", "bulk"),
            queue_gauge(prefix, "assign.bulk.7", "bulk"),
            queue_gauge(prefix, "progress", "interactive"),
            queue_gauge(prefix, "dead-letters", "none"),
        ])
        .await;
}

#[tokio::test]
async fn readyz_is_503_while_postgres_is_unreachable_and_200_once_it_is_back() {
    let app = TestApp::spawn_with(TestOptions {
        postgres_proxy: true,
        ..options()
    })
    .await;
    let proxy = app.postgres_proxy.as_ref().expect("postgres proxy");
    let mut process = Process::start(&app, "outbox-relay", &[]);
    process.wait_for_readyz(200, Duration::from_secs(60)).await;
    proxy.disable().await;
    let down = process.wait_for_readyz(503, Duration::from_secs(30)).await;
    let down: serde_json::Value = serde_json::from_str(&down).expect("readyz JSON");
    assert_eq!(down["checks"]["outbox-relay.postgres"], "down", "{down}");
    assert_eq!(down["checks"]["outbox-relay.rabbitmq"], "up", "{down}");
    let (status, _) = process.get("/healthz").await.expect("/healthz answers");
    assert_eq!(status, 200, "liveness does not depend on Postgres");
    proxy.enable();
    process.wait_for_readyz(200, Duration::from_secs(60)).await;
}

#[tokio::test]
async fn api_binary_serves_metrics_on_its_ops_address_only() {
    // Unless METRICS_BIND says otherwise, the ops address is port 9100, beside the workers'.
    let defaults: flow_api::ApiConfig = flow_common::config::from_env();
    if std::env::var_os("METRICS_BIND").is_none() {
        assert_eq!(
            defaults.metrics_bind.0,
            Some("127.0.0.1:9100".parse().unwrap())
        );
    }
    let app = TestApp::spawn_with(options()).await;
    let public = free_address();
    let mut process = Process::start(
        &app,
        "flow-api",
        &[
            ("API_BIND", public.clone()),
            ("PUBLIC_BASE_URL", format!("http://{public}")),
        ],
    );
    process.wait_for_readyz(200, Duration::from_secs(60)).await;
    process
        .metrics_containing(&["flow_build_info{".to_owned()])
        .await;
    let public_metrics = reqwest::get(format!("http://{public}/metrics"))
        .await
        .expect("public port answers");
    assert_eq!(
        public_metrics.status().as_u16(),
        404,
        "/metrics is off the public port"
    );
    let public_health = reqwest::get(format!("http://{public}/healthz"))
        .await
        .expect("public port answers");
    assert_eq!(
        public_health.status().as_u16(),
        200,
        "load balancers keep /healthz"
    );
}

/// Every `flow_*` name in `text` (histogram series suffixes stripped).
fn flow_metric_names(text: &str) -> std::collections::BTreeSet<String> {
    let mut names = std::collections::BTreeSet::new();
    let bytes = text.as_bytes();
    let mut start = 0;
    while let Some(offset) = text[start..].find("flow_") {
        let begin = start + offset;
        let preceded_by_word =
            begin > 0 && (bytes[begin - 1].is_ascii_alphanumeric() || bytes[begin - 1] == b'_');
        let end = text[begin..]
            .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'))
            .map_or(text.len(), |length| begin + length);
        if !preceded_by_word {
            let name = &text[begin..end];
            let name = ["_bucket", "_count", "_sum"]
                .iter()
                .find_map(|suffix| name.strip_suffix(suffix))
                .unwrap_or(name);
            names.insert(name.to_owned());
        }
        start = end;
    }
    names
}

/// Every `"flow_…"` string literal in the Rust sources of the crates that record metrics.
fn exported_metric_names(workspace: &std::path::Path) -> std::collections::BTreeSet<String> {
    fn visit(directory: &std::path::Path, names: &mut std::collections::BTreeSet<String>) {
        for entry in std::fs::read_dir(directory).expect("source dir").flatten() {
            let path = entry.path();
            if path.is_dir() {
                visit(&path, names);
            } else if path.extension().is_some_and(|extension| extension == "rs") {
                let source = std::fs::read_to_string(&path).expect("source file");
                for literal in source.split('"').skip(1).step_by(2) {
                    if literal.starts_with("flow_")
                        && literal
                            .chars()
                            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
                    {
                        names.insert(literal.to_owned());
                    }
                }
            }
        }
    }
    let mut names = std::collections::BTreeSet::new();
    for krate in ["common", "api", "workers"] {
        visit(&workspace.join(krate).join("src"), &mut names);
    }
    names
}

#[test]
fn alert_rules_and_dashboard_name_only_metrics_the_code_exports() {
    let workspace = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root");
    let exported = exported_metric_names(workspace);
    for gauge in [
        "flow_queue_messages",
        "flow_consumer_lag_seconds",
        "flow_outbox_backlog",
        "flow_outbox_oldest_unpublished_seconds",
        "flow_webhook_deliveries_due",
        "flow_dead_letters_pending",
        "flow_schedules_due",
        "flow_exports_waiting",
    ] {
        assert!(exported.contains(gauge), "the code exports {gauge}");
    }
    let rules = std::fs::read_to_string(workspace.join("deploy/prometheus/alerts.yml"))
        .expect("deploy/prometheus/alerts.yml");
    let dashboard = std::fs::read_to_string(workspace.join("deploy/grafana/flow.json"))
        .expect("deploy/grafana/flow.json");
    let dashboard_json: serde_json::Value =
        serde_json::from_str(&dashboard).expect("the dashboard is JSON");
    assert!(
        dashboard_json["panels"]
            .as_array()
            .is_some_and(|panels| panels.len() > 10),
        "the dashboard has panels"
    );
    let rule_count = rules.matches("- alert: ").count();
    assert!(rule_count >= 10, "alert rules found: {rule_count}");
    assert_eq!(
        rules.matches("\n        expr: ").count(),
        rule_count,
        "every rule has an expression"
    );
    for (file, text) in [("alerts.yml", &rules), ("flow.json", &dashboard)] {
        let named = flow_metric_names(text);
        assert!(!named.is_empty(), "{file} names metrics");
        let unknown: Vec<&String> = named.difference(&exported).collect();
        assert!(
            unknown.is_empty(),
            "{file} names metrics the code does not export: {unknown:?}"
        );
    }
}

#[tokio::test]
async fn an_assign_request_trace_continues_in_the_command_message() {
    use lapin::options::BasicGetOptions;
    use lapin::types::AMQPValue;

    let app = TestApp::spawn_with(options()).await;
    let org = app.create_org(flow_common::db::orgs::Tier::Standard).await;
    app.create_users(&org, &["ann@example.com"]).await;
    let flow = app.create_flow(&org, "Tracing", &[30]).await;
    let trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
    let caller_span = "00f067aa0ba902b7";
    let response = app
        .post_with(
            &org,
            "/v1/flows/assign",
            &serde_json::json!({ "flowId": flow, "userEmail": "ann@example.com" }),
            &[("traceparent", &format!("00-{trace_id}-{caller_span}-01"))],
        )
        .await;
    assert_eq!(response.status, 200, "{:?}", response.body);

    // No assign-worker runs: the command waits in its queue, read here as a worker would.
    let connection = flow_common::amqp::connect(&flow_tests::amqp_url(), "test-trace")
        .await
        .expect("connect");
    let channel = connection.create_channel().await.expect("channel");
    let queue = app.topology().queue(flow_common::amqp::QueueKind::Assign);
    let message = channel
        .basic_get(queue.as_str().into(), BasicGetOptions { no_ack: true })
        .await
        .expect("basic.get")
        .expect("the assign command is in its queue");
    let traceparent = match message
        .delivery
        .properties
        .headers()
        .as_ref()
        .and_then(|headers| headers.inner().get("traceparent").cloned())
    {
        Some(AMQPValue::LongString(text)) => text.to_string(),
        other => panic!("the command carries no traceparent: {other:?}"),
    };
    assert!(
        traceparent.starts_with(&format!("00-{trace_id}-")),
        "same trace as the request: {traceparent}"
    );
    assert!(
        !traceparent.contains(caller_span),
        "the parent is the API's request span, not the caller's: {traceparent}"
    );
    assert_eq!(
        flow_workers::consumer::traceparent(&message.delivery),
        Some(traceparent.as_str()),
        "the consumer reads the header a worker continues its batch span from"
    );
    drop(connection.close(200, "done".into()).await);
}

/// The API's queue-depth poller may be the first component to reach the broker: under a prefix no
/// component has declared yet, it declares the topology itself and reads every queue. Before, its
/// passive declares were refused (`NOT_FOUND`, an error in the log) and it read no queue until a
/// worker came up and declared them.
#[tokio::test]
async fn the_queue_depth_poller_reads_every_queue_even_before_any_component_declared_them() {
    use flow_app::queue_depths::{self, QueueDepths};
    use flow_common::amqp::{QueueKind, Topology};

    flow_common::telemetry::init();
    let topology = Topology::new(flow_tests::unique_prefix(), 5);
    let latest = QueueDepths::default();
    let shutdown = tokio_util::sync::CancellationToken::new();
    let poller = tokio::spawn(queue_depths::poll(
        flow_tests::amqp_url(),
        topology.clone(),
        latest.clone(),
        shutdown.clone(),
    ));
    let mut reading = None;
    for _ in 0..150 {
        reading = latest.latest();
        if reading.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    shutdown.cancel();
    poller.await.expect("poller");
    flow_common::amqp::delete_topology(&flow_tests::amqp_url(), "test", &topology).await;
    let reading = reading.expect("the poller stored a reading within three intervals");
    let read: Vec<QueueKind> = reading.queues.iter().map(|queue| queue.kind).collect();
    assert_eq!(read, QueueKind::all(), "every queue is read");
}
