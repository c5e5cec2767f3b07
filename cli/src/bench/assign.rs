//! `flowctl bench assign`: load the assign pipeline with N concurrent connections for D seconds.
//!
//! By default it runs the API and the assign-worker as two child processes (`flowctl up --only
//! …`), so their memory is measured on its own, against the configured Postgres and RabbitMQ. It
//! creates a benchmark organization whose rate limit is raised, with enough users and flows that
//! every request creates a new assignment, then reports accepted/s, latency percentiles, errors by
//! status, the API's peak memory, and how long after the load the persisted count caught up.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;
use flow_common::config::CoreConfig;
use flow_common::db::{self, flows::NewModule, orgs, users::NewUser};
use flow_common::domain::Email;
use flow_common::ids::{FlowId, OrgId};
use hdrhistogram::Histogram;
use tokio::process::{Child, Command};

/// Options of the assign benchmark.
#[derive(Debug, Clone, Args)]
pub struct AssignBenchArgs {
    /// Concurrent HTTP connections.
    #[arg(long, default_value_t = 64)]
    pub concurrency: usize,
    /// Seconds of measured load.
    #[arg(long, default_value_t = 20)]
    pub duration: u64,
    /// Seconds of unmeasured warm-up before it.
    #[arg(long, default_value_t = 3)]
    pub warmup: u64,
    /// Users in the benchmark organization.
    #[arg(long, default_value_t = 25_000)]
    pub users: usize,
    /// Flows in the benchmark organization (users × flows distinct assignments are available).
    #[arg(long, default_value_t = 20)]
    pub flows: usize,
    /// Send a unique X-Request-ID with every request (the idempotent path).
    #[arg(long)]
    pub request_ids: bool,
    /// Benchmark an API that is already running at this address (same database) instead of
    /// starting the API and worker as child processes.
    #[arg(long)]
    pub base_url: Option<String>,
    /// Port for the API child process.
    #[arg(long, default_value_t = 18_080)]
    pub port: u16,
}

struct Setup {
    org_id: OrgId,
    key: String,
    flows: Vec<FlowId>,
    emails: Vec<String>,
}

async fn prepare(core: &CoreConfig, args: &AssignBenchArgs) -> anyhow::Result<Setup> {
    crate::up::prepare_database(core).await?;
    let pool = crate::admin::pool(core).await?;
    let org = orgs::create(
        &pool,
        &orgs::NewOrganization {
            name: "Benchmark".into(),
            tier: orgs::Tier::Enterprise,
            timezone: chrono_tz::Tz::UTC,
            assign_limit_per_minute: Some(1_000_000_000),
            report_limit_per_minute: None,
        },
    )
    .await?;
    let emails: Vec<String> = (0..args.users)
        .map(|index| format!("bench{index:06}@bench.example.com"))
        .collect();
    for chunk in emails.chunks(5_000) {
        let users = chunk
            .iter()
            .map(|email| {
                Ok(NewUser {
                    email: Email::parse("email", email).map_err(|error| anyhow::anyhow!(error))?,
                    name: None,
                })
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        db::users::upsert(&pool, org.id, &users).await?;
    }
    let mut flows = Vec::new();
    for index in 0..args.flows {
        let modules = [
            NewModule {
                name: "Introduction".into(),
                estimated_minutes: 30,
            },
            NewModule {
                name: "Practice".into(),
                estimated_minutes: 90,
            },
        ];
        let (flow, _) = db::flows::create(
            &pool,
            org.id,
            &format!("Bench flow {index}"),
            None,
            &modules,
        )
        .await?;
        flows.push(flow.id);
    }
    let (_, key) = db::keys::create(&pool, org.id, "bench").await?;
    pool.close().await;
    Ok(Setup {
        org_id: org.id,
        key,
        flows,
        emails,
    })
}

fn spawn_component(component: &str, port: u16, core: &CoreConfig) -> anyhow::Result<Child> {
    let exe = std::env::current_exe().context("locating flowctl")?;
    Command::new(exe)
        .args(["up", "--only", component])
        .env("DATABASE_URL", &core.database_url)
        .env("AMQP_URL", &core.amqp_url)
        .env("QUEUE_PREFIX", &core.queue_prefix)
        .env("API_BIND", format!("127.0.0.1:{port}"))
        .env("PUBLIC_BASE_URL", format!("http://127.0.0.1:{port}"))
        .env(
            "RUST_LOG",
            std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting {component}"))
}

/// Resident and peak memory of a process, in MiB, from /proc.
pub fn memory_mib(pid: u32) -> Option<(f64, f64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find(|line| line.starts_with(name))
            .and_then(|line| line.split_whitespace().nth(1))
            .and_then(|kb| kb.parse::<f64>().ok())
            .map(|kb| kb / 1024.0)
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

#[derive(Default)]
struct Tally {
    latencies: Option<Histogram<u64>>,
    accepted: u64,
    warmup_accepted: u64,
    statuses: BTreeMap<String, u64>,
}

/// Runs the benchmark on queues of its own (deleted afterwards), so nothing left in the
/// configured queues, and nothing this run leaves, mixes with another run.
pub async fn run(core: &CoreConfig, args: AssignBenchArgs) -> anyhow::Result<()> {
    let mut own = core.clone();
    own.queue_prefix = format!(
        "{}.bench-{}",
        core.queue_prefix,
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );
    let result = measure(&own, args).await;
    let topology = flow_common::amqp::Topology::new(&own.queue_prefix, own.delivery_limit);
    if let Ok(connection) = flow_common::amqp::connect(&own.amqp_url, "flowctl-bench").await {
        if let Ok(channel) = connection.create_channel().await {
            drop(topology.delete(&channel).await);
        }
        drop(connection.close(200, "done".into()).await);
    }
    result
}

async fn measure(core: &CoreConfig, args: AssignBenchArgs) -> anyhow::Result<()> {
    let setup = prepare(core, &args).await?;
    let capacity = setup.emails.len() * setup.flows.len();
    println!(
        "bench assign: {} connections, {} s (+{} s warm-up), {} users × {} flows = {capacity} distinct assignments",
        args.concurrency,
        args.duration,
        args.warmup,
        setup.emails.len(),
        setup.flows.len()
    );
    let mut children = Vec::new();
    let base_url = match &args.base_url {
        Some(url) => url.trim_end_matches('/').to_owned(),
        None => {
            children.push(spawn_component("api", args.port, core)?);
            children.push(spawn_component("assign-worker", args.port, core)?);
            format!("http://127.0.0.1:{}", args.port)
        }
    };
    let api_pid = if args.base_url.is_none() {
        children[0].id()
    } else {
        None
    };
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(args.concurrency)
        .timeout(Duration::from_secs(30))
        .build()?;
    wait_ready(&client, &base_url).await?;

    let next = Arc::new(AtomicUsize::new(0));
    let setup = Arc::new(setup);
    let started = Instant::now();
    let measure_from = started + Duration::from_secs(args.warmup);
    let stop_at = measure_from + Duration::from_secs(args.duration);
    let mut workers = Vec::new();
    for _ in 0..args.concurrency {
        let client = client.clone();
        let setup = setup.clone();
        let next = next.clone();
        let url = format!("{base_url}/v1/flows/assign");
        let request_ids = args.request_ids;
        workers.push(tokio::spawn(async move {
            let mut tally = Tally {
                latencies: Histogram::new_with_bounds(1, 60_000_000, 3).ok(),
                ..Tally::default()
            };
            loop {
                let now = Instant::now();
                if now >= stop_at {
                    break;
                }
                let index = next.fetch_add(1, Ordering::Relaxed);
                if index >= capacity {
                    break;
                }
                let email = &setup.emails[index % setup.emails.len()];
                let flow = setup.flows[index / setup.emails.len()];
                let body = format!(r#"{{"flowId":"{flow}","userEmail":"{email}"}}"#);
                let mut request = client
                    .post(&url)
                    .bearer_auth(&setup.key)
                    .header("content-type", "application/json")
                    .body(body);
                if request_ids {
                    request = request.header("x-request-id", format!("bench-{index}"));
                }
                let sent = Instant::now();
                let outcome = request.send().await;
                let elapsed = sent.elapsed();
                if sent < measure_from {
                    if let Ok(response) = outcome {
                        tally.warmup_accepted += u64::from(response.status() == 200);
                        drop(response.bytes().await);
                    }
                    continue;
                }
                let status = match outcome {
                    Ok(response) => {
                        let status = response.status().as_u16();
                        drop(response.bytes().await);
                        status.to_string()
                    }
                    Err(error) => format!("transport error ({})", error.without_url()),
                };
                if status == "200" {
                    tally.accepted += 1;
                    if let Some(histogram) = tally.latencies.as_mut() {
                        let _ = histogram.record(elapsed.as_micros().max(1) as u64);
                    }
                }
                *tally.statuses.entry(status).or_default() += 1;
            }
            tally
        }));
    }
    // Sample the API's memory while the load runs.
    let mut peak_rss = 0.0f64;
    while Instant::now() < stop_at {
        if let Some((rss, _)) = api_pid.and_then(memory_mib) {
            peak_rss = peak_rss.max(rss);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut latencies = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
    let mut accepted = 0;
    let mut warmup_accepted = 0;
    let mut statuses: BTreeMap<String, u64> = BTreeMap::new();
    for worker in workers {
        let tally = worker.await?;
        accepted += tally.accepted;
        warmup_accepted += tally.warmup_accepted;
        if let Some(histogram) = &tally.latencies {
            latencies.add(histogram)?;
        }
        for (status, count) in tally.statuses {
            *statuses.entry(status).or_default() += count;
        }
    }
    let load_ended = Instant::now();
    let expected = (accepted + warmup_accepted) as i64;

    // Everything answered 200 (warm-up included) must end up persisted.
    let pool = crate::admin::pool(core).await?;
    let catch_up = loop {
        let persisted: i64 =
            sqlx::query_scalar("SELECT count(*) FROM assignments WHERE org_id = $1")
                .bind(setup.org_id)
                .fetch_one(&pool)
                .await?;
        let aliases: i64 =
            sqlx::query_scalar("SELECT count(*) FROM assignment_aliases WHERE org_id = $1")
                .bind(setup.org_id)
                .fetch_one(&pool)
                .await?;
        if persisted + aliases >= expected {
            break Some((load_ended.elapsed(), persisted));
        }
        if load_ended.elapsed() > Duration::from_secs(120) {
            break None;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let api_memory = api_pid.and_then(memory_mib);

    let ms = |micros: u64| micros as f64 / 1000.0;
    println!();
    println!(
        "accepted:        {accepted} in {} s = {:.0} assigns/s",
        args.duration,
        accepted as f64 / args.duration as f64
    );
    println!(
        "latency (200s):  p50 {:.2} ms  p90 {:.2} ms  p99 {:.2} ms  max {:.2} ms",
        ms(latencies.value_at_quantile(0.50)),
        ms(latencies.value_at_quantile(0.90)),
        ms(latencies.value_at_quantile(0.99)),
        ms(latencies.max())
    );
    println!("responses:       {statuses:?}");
    match catch_up {
        Some((elapsed, persisted)) => println!(
            "persisted:       {persisted} assignments; caught up {:.0} ms after the load stopped",
            elapsed.as_secs_f64() * 1000.0
        ),
        None => println!("persisted:       did NOT catch up within 120 s"),
    }
    if let Some((rss, peak)) = api_memory {
        println!(
            "API memory:      {rss:.0} MiB resident now, peak {peak:.0} MiB (sampled max {peak_rss:.0} MiB)"
        );
    }
    for mut child in children {
        drop(child.start_kill());
        drop(child.wait().await);
    }
    if accepted == 0 {
        bail!("no request was accepted");
    }
    Ok(())
}

async fn wait_ready(client: &reqwest::Client, base_url: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(response) = client.get(format!("{base_url}/readyz")).send().await
            && response.status().is_success()
        {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("the API at {base_url} did not become ready within 60 s");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
