//! docker-compose.yml without a Docker engine: the file is valid against the Compose
//! specification's JSON schema, and it follows the project's rules (every long-running service has
//! a healthcheck that its image can run, workers have a grace period, RabbitMQ is a supported
//! release, webhook secrets are never stored in plain text by default). The healthcheck commands
//! themselves run against a live API in tests/it/flowctl.rs. The worker services, the image's
//! binaries and the Prometheus targets are checked against the registry of worker roles, both
//! ways: none missing, none left over.
//!
//! tests/schemas/compose-spec.json is schema/compose-spec.json of the compose-spec/compose-spec
//! repository (commit 170098ba07d9f53c383a41bfd4c5166b0a4529a6), Apache-2.0, kept unchanged.

use clap::Parser as _;
use serde_json::Value;

/// Every worker role, from the registry (`flow_workers::roles::ALL`): a role added there fails
/// these tests until compose runs it, the image holds its binary and Prometheus scrapes it.
fn workers() -> impl Iterator<Item = &'static str> + Clone {
    flow_workers::roles::ALL.iter().map(|role| role.name)
}

fn repository_file(path: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(path);
    std::fs::read_to_string(&path).unwrap_or_else(|error| panic!("{}: {error}", path.display()))
}

/// docker-compose.yml as JSON, YAML anchors and merge keys resolved (as Compose resolves them).
fn compose_file() -> Value {
    serde_saphyr::from_str(&repository_file("docker-compose.yml")).expect("docker-compose.yml")
}

/// What the Compose specification says is wrong with `document` (empty when valid).
fn schema_errors(document: &Value) -> Vec<String> {
    let schema: Value =
        serde_json::from_str(&repository_file("tests/schemas/compose-spec.json")).unwrap();
    let validator = jsonschema::validator_for(&schema).expect("the schema compiles");
    validator
        .iter_errors(document)
        .map(|error| format!("{}: {error}", error.instance_path()))
        .collect()
}

fn services(document: &Value) -> &serde_json::Map<String, Value> {
    document["services"].as_object().expect("services")
}

fn strings(value: &Value) -> Vec<&str> {
    value
        .as_array()
        .map(|items| items.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

#[test]
fn compose_file_is_valid_against_the_compose_specification() {
    let document = compose_file();
    assert_eq!(schema_errors(&document), Vec::<String>::new());
    for name in ["postgres", "rabbitmq", "migrate", "api"]
        .into_iter()
        .chain(workers())
    {
        assert!(services(&document).contains_key(name), "service {name}");
    }
}

#[test]
fn the_schema_check_refuses_a_malformed_compose_file() {
    let mut document = compose_file();
    document["services"]["api"]["healthcheck"]["test"] = Value::from(5);
    document["services"]["api"]["stop_grace_priod"] = Value::from("30s");
    let errors = schema_errors(&document);
    assert!(
        errors
            .iter()
            .any(|error| error.contains("/services/api/healthcheck/test")),
        "{errors:?}"
    );
    assert!(
        errors
            .iter()
            .any(|error| error.contains("stop_grace_priod")),
        "{errors:?}"
    );
}

#[test]
fn every_flow_service_is_probed_by_flowctl_health_and_upstream_images_by_their_own_tools() {
    let document = compose_file();
    for (name, service) in services(&document) {
        if service["restart"] == "no" {
            continue; // one-shot (migrations)
        }
        let test = strings(&service["healthcheck"]["test"]);
        assert!(!test.is_empty(), "{name} has no healthcheck");
        // Exec form: no shell, whose abilities (such as /dev/tcp) differ between images.
        assert_eq!(test[0], "CMD", "{name}: {test:?}");
        let image = service["image"].as_str().unwrap_or_default();
        if image.starts_with("flow:") {
            assert_eq!(&test[1..3], ["flowctl", "health"], "{name}: {test:?}");
            // The exact command line parses as `flowctl health`.
            let cli = flowctl::Cli::try_parse_from(&test[1..])
                .unwrap_or_else(|error| panic!("{name}: {error}"));
            assert!(matches!(cli.command, flowctl::Command::Health(_)), "{name}");
        } else if image.starts_with("postgres:") {
            assert_eq!(test[1], "pg_isready", "{name}");
        } else if image.starts_with("rabbitmq:") {
            assert_eq!(test[1], "rabbitmq-diagnostics", "{name}");
        } else {
            panic!("{name}: no rule for image {image}");
        }
    }
}

#[test]
fn workers_serve_their_probe_on_metrics_bind_and_have_a_grace_period() {
    let document = compose_file();
    for name in workers() {
        let service = &services(&document)[name];
        let bind = service["environment"]["METRICS_BIND"]
            .as_str()
            .unwrap_or_else(|| panic!("{name}: METRICS_BIND"));
        let port = bind.rsplit_once(':').expect("host:port").1;
        let test = strings(&service["healthcheck"]["test"]);
        assert_eq!(
            test.last().copied(),
            Some(format!("http://127.0.0.1:{port}/readyz").as_str()),
            "{name} probes its own METRICS_BIND"
        );
        let grace = service["stop_grace_period"]
            .as_str()
            .unwrap_or_else(|| panic!("{name}: stop_grace_period"));
        let seconds: u64 = grace
            .strip_suffix('s')
            .and_then(|seconds| seconds.parse().ok())
            .unwrap_or_else(|| panic!("{name}: stop_grace_period {grace} in seconds"));
        assert!(
            seconds >= 30,
            "{name}: {seconds}s is too short to finish a batch"
        );
    }
    let api = &services(&document)["api"];
    assert_eq!(
        strings(&api["healthcheck"]["test"]).last().copied(),
        Some("http://127.0.0.1:8080/readyz")
    );
    assert_eq!(api["environment"]["API_BIND"], "0.0.0.0:8080");
}

#[test]
fn rabbitmq_is_a_supported_4x_release() {
    let document = compose_file();
    let image = services(&document)["rabbitmq"]["image"].as_str().unwrap();
    let tag = image.strip_prefix("rabbitmq:").expect("rabbitmq image");
    let major: u32 = tag
        .split(['.', '-'])
        .next()
        .and_then(|major| major.parse().ok())
        .unwrap_or_else(|| panic!("{image}: a pinned version"));
    assert!(major >= 4, "{image}: 3.x is past community support");
}

#[test]
fn webhook_secret_key_is_required_not_defaulted() {
    let document = compose_file();
    for name in ["api", "webhook-worker"] {
        let value = services(&document)[name]["environment"]["WEBHOOK_SECRET_KEY"]
            .as_str()
            .unwrap_or_else(|| panic!("{name}: WEBHOOK_SECRET_KEY"));
        // `${VAR:?message}`: Compose refuses to start when the variable is unset or empty.
        assert!(
            value.starts_with("${WEBHOOK_SECRET_KEY:?") && value.ends_with('}'),
            "{name}: {value}"
        );
    }
}

#[test]
fn the_image_contains_flowctl_and_uses_it_as_its_healthcheck() {
    let dockerfile = repository_file("Dockerfile");
    let copies = dockerfile
        .lines()
        .find(|line| line.contains("for bin in"))
        .expect("the binaries copied into the image");
    for binary in ["flowctl", "flow-api"].into_iter().chain(workers()) {
        assert!(
            copies
                .split(|c: char| c.is_whitespace() || c == ';')
                .any(|word| word == binary),
            "{binary} is not in the image"
        );
    }
    assert!(dockerfile.contains(r#"CMD ["flowctl", "health", "#));
    assert!(
        dockerfile.contains("cargo chef cook"),
        "dependencies cached"
    );
    // The cached dependencies (mimalloc among them) are built with the repository's C flags.
    let cargo_config = dockerfile
        .find("COPY .cargo .cargo")
        .expect("the cargo configuration copied into the build");
    assert!(cargo_config < dockerfile.find("cargo chef cook").unwrap());
    assert!(repository_file(".cargo/config.toml").contains("-DMI_DEFAULT_ARENA_EAGER_COMMIT=0"));
    let ignored = repository_file(".dockerignore");
    for entry in ["target/", ".git/", ".env"] {
        assert!(ignored.lines().any(|line| line == entry), "{entry}");
    }
}

/// `cluster.env` as (name, value) pairs.
fn cluster_env() -> Vec<(String, String)> {
    repository_file("cluster.env")
        .lines()
        .filter(|line| !line.trim().is_empty() && !line.starts_with('#'))
        .map(|line| {
            let (name, value) = line.split_once('=').expect("NAME=value");
            (name.to_owned(), value.to_owned())
        })
        .collect()
}

#[test]
fn the_cluster_profile_adds_a_streaming_replica_that_every_service_reads_through() {
    let document = compose_file();
    let services = services(&document);
    let replica = &services["postgres-replica"];
    assert_eq!(strings(&replica["profiles"]), ["cluster"]);
    let start = strings(&replica["command"]).join(" ");
    assert!(
        start.contains("pg_basebackup -h postgres") && start.contains(" -R "),
        "copied from the primary, as a standby: {start}"
    );
    assert_eq!(
        replica["depends_on"]["postgres"]["condition"],
        "service_healthy"
    );
    // The primary lets it stream.
    let hba = document["configs"]["postgres-hba"]["content"]
        .as_str()
        .expect("the primary's access rules");
    assert!(
        hba.lines()
            .any(|line| line.split_whitespace().collect::<Vec<_>>()
                == ["host", "replication", "all", "all", "scram-sha-256"]),
        "{hba}"
    );
    assert!(
        strings(&services["postgres"]["command"]).contains(&"hba_file=/etc/postgresql/pg_hba.conf")
    );
    // Without the profile nothing depends on it.
    for (name, service) in services {
        assert!(
            service["depends_on"].get("postgres-replica").is_none(),
            "{name} must start without the replica"
        );
    }

    // cluster.env selects the profile and points every Flow service at the replica.
    let env = cluster_env();
    let value = |name: &str| {
        env.iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
            .unwrap_or_else(|| panic!("cluster.env sets {name}"))
    };
    assert_eq!(value("COMPOSE_PROFILES"), "cluster");
    let urls = value("DATABASE_REPLICA_URLS");
    #[derive(clap::Parser)]
    struct Settings {
        #[command(flatten)]
        core: flow_common::config::CoreConfig,
    }
    let settings = Settings::try_parse_from(["flow", "--database-replica-urls", urls])
        .expect("DATABASE_REPLICA_URLS parses");
    let host = url::Url::parse(&settings.core.replicas.urls[0]).expect("a URL");
    assert_eq!(host.host_str(), Some("postgres-replica"));
    for name in ["api", "migrate"].into_iter().chain(workers()) {
        assert_eq!(
            services[name]["environment"]["DATABASE_REPLICA_URLS"], "${DATABASE_REPLICA_URLS:-}",
            "{name} reads DATABASE_REPLICA_URLS"
        );
    }
}

#[test]
fn prometheus_example_scrapes_every_flow_service_on_its_ops_address() {
    let document = compose_file();
    let prometheus: Value =
        serde_saphyr::from_str(&repository_file("deploy/prometheus/prometheus.yml"))
            .expect("deploy/prometheus/prometheus.yml");
    let mut targets = Vec::new();
    for job in prometheus["scrape_configs"]
        .as_array()
        .expect("scrape_configs")
    {
        let name = job["job_name"].as_str().unwrap_or_default();
        assert!(
            name.starts_with("flow"),
            "the alert rules match job=~\"flow.*\": {name}"
        );
        for config in job["static_configs"].as_array().into_iter().flatten() {
            targets.extend(strings(&config["targets"]).into_iter().map(str::to_owned));
        }
    }
    for name in workers().chain(["api"]) {
        let bind = services(&document)[name]["environment"]["METRICS_BIND"]
            .as_str()
            .unwrap_or_else(|| panic!("{name}: METRICS_BIND"));
        let port = bind.rsplit_once(':').expect("host:port").1;
        let target = format!("{name}:{port}");
        assert!(
            targets.contains(&target),
            "{target} is not scraped: {targets:?}"
        );
    }
}

#[test]
fn the_cluster_profile_adds_two_rabbitmq_nodes_that_join_the_first_and_every_service_knows_all_three()
 {
    let document = compose_file();
    let services = services(&document);
    let first = &services["rabbitmq"];
    assert_eq!(first["hostname"], "rabbitmq");
    let node_config = document["configs"]["rabbitmq-node"]["content"]
        .as_str()
        .expect("the nodes' configuration");
    assert!(
        node_config
            .lines()
            .any(|line| line == "queue_leader_locator = balanced"),
        "{node_config}"
    );
    let join = document["configs"]["rabbitmq-join"]["content"]
        .as_str()
        .expect("the joining nodes' configuration");
    assert!(join.contains("cluster_formation.peer_discovery_backend = classic_config"));
    assert!(join.contains("cluster_formation.classic_config.nodes.1 = rabbit@rabbitmq"));
    for name in ["rabbitmq-2", "rabbitmq-3"] {
        let node = &services[name];
        assert_eq!(strings(&node["profiles"]), ["cluster"], "{name}");
        assert_eq!(
            node["image"], first["image"],
            "{name}: one RabbitMQ version"
        );
        assert_eq!(node["hostname"], name);
        assert_eq!(
            node["depends_on"]["rabbitmq"]["condition"], "service_healthy",
            "{name} joins a running node 1"
        );
        let sources: Vec<&str> = node["configs"]
            .as_array()
            .expect("configs")
            .iter()
            .filter_map(|config| config["source"].as_str())
            .collect();
        assert_eq!(sources, ["rabbitmq-node", "rabbitmq-join"], "{name}");
        // One Erlang cookie for the cluster, written before the node starts.
        assert_eq!(node["environment"], first["environment"], "{name}");
        assert_eq!(node["entrypoint"], first["entrypoint"], "{name}");
        assert!(
            node["volumes"] != first["volumes"],
            "{name}: data of its own"
        );
    }
    assert_eq!(
        first["environment"]["RABBITMQ_CLUSTER_COOKIE"],
        "${RABBITMQ_CLUSTER_COOKIE:-}"
    );
    assert!(
        strings(&first["entrypoint"])
            .join(" ")
            .contains("/var/lib/rabbitmq/.erlang.cookie")
    );
    let policy = strings(&services["rabbitmq-policy"]["entrypoint"]).join(" ");
    assert!(
        policy.contains("\"dead-letter-strategy\":\"at-least-once\"")
            && policy.contains("\"overflow\":\"reject-publish\""),
        "{policy}"
    );

    // cluster.env points every Flow service at the three nodes; each is a node of the file.
    let env = cluster_env();
    let list = env
        .iter()
        .find(|(name, _)| name == "AMQP_URL")
        .map(|(_, value)| value.clone())
        .expect("cluster.env sets AMQP_URL");
    #[derive(clap::Parser)]
    struct Settings {
        #[command(flatten)]
        core: flow_common::config::CoreConfig,
    }
    let settings =
        Settings::try_parse_from(["flow", "--amqp-url", &list]).expect("AMQP_URL parses");
    let hosts: Vec<String> = flow_common::amqp::nodes::parse(&settings.core.amqp_url)
        .expect("a node list")
        .iter()
        .map(|uri| uri.authority.host.clone())
        .collect();
    assert_eq!(hosts, ["rabbitmq", "rabbitmq-2", "rabbitmq-3"]);
    for name in ["api", "migrate"].into_iter().chain(workers()) {
        let service = &services[name];
        assert_eq!(
            service["environment"]["AMQP_URL"], "${AMQP_URL:-amqp://flow:flow@rabbitmq:5672/%2f}",
            "{name} reads AMQP_URL"
        );
        if name == "migrate" {
            continue;
        }
        for node in ["rabbitmq-2", "rabbitmq-3"] {
            let dependency = &service["depends_on"][node];
            assert_eq!(
                dependency["condition"], "service_healthy",
                "{name} on {node}"
            );
            assert_eq!(
                dependency["required"], false,
                "{name} starts without the profile"
            );
        }
    }
}

#[test]
fn an_amqp_url_that_is_not_a_node_list_is_refused_saying_why() {
    #[derive(clap::Parser, Debug)]
    struct Settings {
        #[command(flatten)]
        core: flow_common::config::CoreConfig,
    }
    let error = Settings::try_parse_from([
        "flow",
        "--amqp-url",
        "amqp://u:secret@a:5672/%2f,rabbit-2:5672",
    ])
    .expect_err("refused");
    let message = error.to_string();
    assert!(message.contains("node 2 of 2"), "{message}");
    assert!(message.contains("amqp://"), "{message}");
    assert!(
        !message.contains("secret"),
        "the password stays hidden: {message}"
    );
    let one = Settings::try_parse_from(["flow", "--amqp-url", "amqp://u:p@a:5672/%2f"])
        .expect("one address still works");
    assert_eq!(one.core.amqp_url, "amqp://u:p@a:5672/%2f");
}

/// The port of `service`'s ops address (`METRICS_BIND`) in docker-compose.yml.
fn ops_port<'a>(document: &'a Value, service: &str) -> &'a str {
    services(document)[service]["environment"]["METRICS_BIND"]
        .as_str()
        .unwrap_or_else(|| panic!("{service}: METRICS_BIND"))
        .rsplit_once(':')
        .expect("host:port")
        .1
}

/// Sorted, for comparing lists as sets.
fn sorted<T: Ord>(items: impl IntoIterator<Item = T>) -> Vec<T> {
    let mut items: Vec<T> = items.into_iter().collect();
    items.sort();
    items
}

#[test]
fn every_worker_role_is_built_into_the_image_run_by_compose_and_scraped_by_prometheus() {
    let document = compose_file();
    let roles = sorted(workers());

    // Compose: a service named after each role runs its binary, and every long-running Flow
    // service runs the API or a role.
    for name in workers() {
        let service = services(&document)
            .get(name)
            .unwrap_or_else(|| panic!("docker-compose.yml has no service {name}"));
        assert_eq!(
            strings(&service["command"]),
            [name],
            "{name} runs its binary"
        );
        assert_eq!(service["image"], "flow:latest", "{name}");
    }
    let binaries_run = sorted(
        services(&document)
            .values()
            .filter(|service| service["image"] == "flow:latest" && service["restart"] != "no")
            .filter_map(|service| strings(&service["command"]).first().copied()),
    );
    assert_eq!(
        binaries_run,
        sorted(workers().chain(["flow-api"])),
        "docker-compose.yml runs the API and every worker role, nothing else"
    );

    // The image: the binaries copied are the API's, flowctl's and the roles'.
    let dockerfile = repository_file("Dockerfile");
    let copies = dockerfile
        .lines()
        .find(|line| line.contains("for bin in"))
        .expect("the binaries copied into the image");
    let listed = copies
        .split_once("for bin in")
        .and_then(|(_, rest)| rest.split_once(';'))
        .expect("for bin in …; do")
        .0;
    assert_eq!(
        sorted(listed.split_whitespace()),
        sorted(workers().chain(["flow-api", "flowctl"])),
        "the Dockerfile's binaries"
    );

    // Prometheus: one target per Flow service on its ops port, nothing else.
    let prometheus: Value =
        serde_saphyr::from_str(&repository_file("deploy/prometheus/prometheus.yml"))
            .expect("deploy/prometheus/prometheus.yml");
    let targets = sorted(
        prometheus["scrape_configs"]
            .as_array()
            .expect("scrape_configs")
            .iter()
            .flat_map(|job| job["static_configs"].as_array().into_iter().flatten())
            .flat_map(|config| strings(&config["targets"]))
            .map(str::to_owned),
    );
    let expected = sorted(
        workers()
            .chain(["api"])
            .map(|name| format!("{name}:{}", ops_port(&document, name))),
    );
    assert_eq!(
        targets, expected,
        "deploy/prometheus/prometheus.yml's targets"
    );
    // Its header names each binary's own default ops address.
    let header: String = repository_file("deploy/prometheus/prometheus.yml")
        .lines()
        .take_while(|line| line.starts_with('#'))
        .map(|line| line.trim_start_matches('#'))
        .collect::<Vec<_>>()
        .join(" ");
    let header = header.split_whitespace().collect::<Vec<_>>().join(" ");
    for role in &flow_workers::roles::ALL {
        let port = role.ops_address.rsplit_once(':').expect("host:port").1;
        assert!(
            header.contains(&format!("{} {port}", role.name)),
            "the header of prometheus.yml names {} {port}: {header}",
            role.name
        );
    }

    // The workers crate builds one binary per role.
    let manifest = repository_file("workers/Cargo.toml");
    let mut bins = Vec::new();
    let mut in_bin = false;
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            in_bin = line == "[[bin]]";
        } else if in_bin && let Some(name) = line.strip_prefix("name = ") {
            bins.push(name.trim_matches('"'));
        }
    }
    assert_eq!(sorted(bins), roles, "workers/Cargo.toml's [[bin]]s");
}
