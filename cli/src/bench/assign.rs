//! `flowctl bench assign`: the whole system under assign load, against a plain synchronous
//! handler measured in the same run.
//!
//! By default every component runs as its own process, as in production (`flowctl up --only …`):
//! the API, the assign-worker, the outbox relay, the webhook-worker (delivering to endpoints served
//! by this process, which verifies every signature) and the scheduler. N connections send assigns
//! for D seconds, every request a distinct (user, flow) pair so every 200 is a new assignment (or,
//! with `--bulk N`, bulk requests of N distinct items). It reports accepted/s and latency, the CPU
//! of every process and how much of the machine sat idle, peak memory, how long after the load the
//! persisted count, the published events and the webhook deliveries caught up, the latency from
//! the worker's commit to the delivery, and checks at the end that nothing accepted was lost and
//! nothing was written or delivered twice.
//!
//! The baseline, measured first in the same run with the same load: a plain axum + sqlx handler in
//! its own process that looks up the flow and the user and inserts the row before answering
//! (`--bulk`: a raw batched UNNEST insert of N rows per statement). `--two-part` runs only the API
//! and the assign-worker, as earlier versions of this benchmark did.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use chrono::{DateTime, Utc};
use clap::Args;
use flow_common::amqp::{QueueKind, Topology};
use flow_common::config::CoreConfig;
use flow_common::db::{self, flows::NewModule, orgs, users::NewUser};
use flow_domain::Email;
use flow_domain::ids::{AssignmentId, FlowId, OrgId, UserId};
use hdrhistogram::Histogram;
use sqlx::PgPool;

use super::system::{Watched, spawn_components, stop_components};
use super::webhooks::{create_endpoints, receiver_options};
use crate::receiver::Receiver;

/// Options of the assign benchmark.
#[derive(Debug, Clone, Args)]
pub struct AssignBenchArgs {
    /// Concurrent HTTP connections.
    #[arg(long, default_value_t = 64)]
    pub concurrency: usize,
    /// Seconds of measured load (for the baseline and for the pipeline each).
    #[arg(long, default_value_t = 20)]
    pub duration: u64,
    /// Seconds of unmeasured warm-up before it.
    #[arg(long, default_value_t = 3)]
    pub warmup: u64,
    /// Users in each benchmark organization [default: 25000, or 150000 with --bulk, so that
    /// neither phase runs out of distinct pairs].
    #[arg(long)]
    pub users: Option<usize>,
    /// Flows in each benchmark organization (users × flows distinct assignments are available).
    #[arg(long, default_value_t = 20)]
    pub flows: usize,
    /// Items per request: above 1, bulk requests (`POST /v1/flows/assign/bulk`) of this many
    /// distinct items, against a raw batched insert of as many rows per statement.
    #[arg(long, default_value_t = 1)]
    pub bulk: usize,
    /// Send a unique X-Request-ID with every request (the idempotent path).
    #[arg(long)]
    pub request_ids: bool,
    /// Run only the API and the assign-worker (no relay, webhook-worker or scheduler).
    #[arg(long)]
    pub two_part: bool,
    /// Skip the baseline.
    #[arg(long)]
    pub no_baseline: bool,
    /// Webhook endpoints of the benchmark organization: the first subscribes to
    /// `flow.assigned`, the others to `flow.completed` and `flow.overdue`.
    #[arg(long, default_value_t = 3)]
    pub endpoints: usize,
    /// Benchmark an API that is already running at this address (same database) instead of
    /// starting the components as child processes.
    #[arg(long)]
    pub base_url: Option<String>,
    /// Port of the API child process (the baseline server takes the next one).
    #[arg(long, default_value_t = 18_080)]
    pub port: u16,
}

impl AssignBenchArgs {
    /// Users per organization: bulk load runs through distinct pairs fifty times faster.
    pub fn user_count(&self) -> usize {
        self.users
            .unwrap_or(if self.bulk > 1 { 150_000 } else { 25_000 })
    }
}

/// An organization ready for the load: every (user, flow) pair is one distinct assignment.
pub(super) struct Tenant {
    pub(super) org_id: OrgId,
    pub(super) key: String,
    pub(super) flows: Vec<FlowId>,
    emails: Vec<String>,
}

impl Tenant {
    pub(super) fn capacity(&self) -> usize {
        self.emails.len() * self.flows.len()
    }

    /// The JSON item of distinct pair `index`.
    pub(super) fn item(&self, index: usize) -> String {
        let email = &self.emails[index % self.emails.len()];
        let flow = self.flows[index / self.emails.len()];
        format!(r#"{{"flowId":"{flow}","userEmail":"{email}"}}"#)
    }
}

pub(super) async fn tenant(
    pool: &PgPool,
    name: &str,
    args: &AssignBenchArgs,
) -> anyhow::Result<Tenant> {
    let org = orgs::create(
        pool,
        &orgs::NewOrganization {
            name: name.into(),
            tier: orgs::Tier::Enterprise,
            timezone: chrono_tz::Tz::UTC,
            assign_limit_per_minute: Some(1_000_000_000),
            report_limit_per_minute: None,
        },
    )
    .await?;
    let emails: Vec<String> = (0..args.user_count())
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
        db::users::upsert(pool, org.id, &users).await?;
    }
    let mut flows = Vec::new();
    for index in 0..args.flows {
        let modules = [
            NewModule {
                name: "Introduction".into(),
                estimated_minutes: 30,
                activity_id: None,
            },
            NewModule {
                name: "Practice".into(),
                estimated_minutes: 90,
                activity_id: None,
            },
        ];
        let (flow, _) =
            db::flows::create(pool, org.id, &format!("Bench flow {index}"), None, &modules).await?;
        flows.push(flow.id);
    }
    let (_, key) = db::keys::create(pool, org.id, "bench").await?;
    Ok(Tenant {
        org_id: org.id,
        key,
        flows,
        emails,
    })
}

/// Runs the benchmark on queues of its own (deleted afterwards), so nothing left in the
/// configured queues, and nothing this run leaves, mixes with another run.
pub async fn run(core: &CoreConfig, args: AssignBenchArgs) -> anyhow::Result<()> {
    if args.bulk == 0 || args.bulk > 1_000 {
        bail!("--bulk must be between 1 and 1000");
    }
    super::system::on_own_queues(core, |own| async move { measure(&own, &args).await }).await
}

/// What the load generator saw.
pub(super) struct Load {
    /// Items accepted (200) in the measured window.
    pub(super) accepted: u64,
    /// Items accepted during the warm-up.
    warmup_accepted: u64,
    /// Latency of requests answered 200, in µs.
    pub(super) latencies: Histogram<u64>,
    /// Requests by status (or transport error).
    statuses: BTreeMap<String, u64>,
    /// CPU of every watched process during the measured window.
    usage: super::system::Usage,
    /// Peak memory of every watched process, read when the load ended.
    memory: BTreeMap<String, f64>,
    /// When the load stopped.
    ended: Instant,
}

/// Sends `concurrency` streams of requests to `url` for the warm-up then `duration`, each request
/// carrying `bulk` distinct items of `tenant` (a bulk body when `bulk` > 1).
pub(super) async fn drive(
    url: &str,
    tenant: &Arc<Tenant>,
    args: &AssignBenchArgs,
    watched: &Watched,
) -> anyhow::Result<Load> {
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(args.concurrency)
        .timeout(Duration::from_secs(30))
        .build()?;
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let measure_from = started + Duration::from_secs(args.warmup);
    let stop_at = measure_from + Duration::from_secs(args.duration);
    let mut streams = Vec::new();
    for _ in 0..args.concurrency {
        let client = client.clone();
        let tenant = tenant.clone();
        let next = next.clone();
        let url = url.to_owned();
        let (bulk, request_ids) = (args.bulk, args.request_ids);
        streams.push(tokio::spawn(async move {
            let mut latencies = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).ok();
            let (mut accepted, mut warmup_accepted) = (0u64, 0u64);
            let mut statuses: BTreeMap<String, u64> = BTreeMap::new();
            while Instant::now() < stop_at {
                let first = next.fetch_add(bulk, Ordering::Relaxed);
                if first + bulk > tenant.capacity() {
                    break;
                }
                let body = if bulk == 1 {
                    tenant.item(first)
                } else {
                    let items: Vec<String> =
                        (first..first + bulk).map(|i| tenant.item(i)).collect();
                    format!(r#"{{"assignments":[{}]}}"#, items.join(","))
                };
                let mut request = client
                    .post(&url)
                    .bearer_auth(&tenant.key)
                    .header("content-type", "application/json")
                    .body(body);
                if request_ids {
                    request = request.header("x-request-id", format!("bench-{first}"));
                }
                let sent = Instant::now();
                let outcome = request.send().await;
                let (status, items) = match outcome {
                    Ok(response) => {
                        let status = response.status().as_u16();
                        let body = response.bytes().await.unwrap_or_default();
                        let items = match (status, bulk) {
                            (200, 1) => 1,
                            (200, _) => serde_json::from_slice::<serde_json::Value>(&body)
                                .ok()
                                .and_then(|value| value["succeeded"].as_u64())
                                .unwrap_or(0),
                            _ => 0,
                        };
                        (status.to_string(), items)
                    }
                    Err(error) => (format!("transport error ({})", error.without_url()), 0),
                };
                let elapsed = sent.elapsed();
                if sent < measure_from {
                    warmup_accepted += items;
                    continue;
                }
                accepted += items;
                if status == "200"
                    && let Some(histogram) = latencies.as_mut()
                {
                    let _ = histogram.record(elapsed.as_micros().max(1) as u64);
                }
                *statuses.entry(status).or_default() += 1;
            }
            (accepted, warmup_accepted, latencies, statuses)
        }));
    }
    // The CPU of the measured window only.
    let mut load = Load::over_window(watched, measure_from, stop_at).await?;
    for stream in streams {
        let (accepted, warmup_accepted, latencies, statuses) = stream.await?;
        load.accepted += accepted;
        load.warmup_accepted += warmup_accepted;
        if let Some(histogram) = &latencies {
            load.latencies.add(histogram)?;
        }
        for (status, count) in statuses {
            *load.statuses.entry(status).or_default() += count;
        }
    }
    load.ended = Instant::now();
    Ok(load)
}

impl Load {
    /// An empty load whose CPU usage and peak memory are those of the window from `measure_from`
    /// to `stop_at` (returns once the window has passed); the caller adds the streams' counts.
    async fn over_window(
        watched: &Watched,
        measure_from: Instant,
        stop_at: Instant,
    ) -> anyhow::Result<Load> {
        tokio::time::sleep_until(measure_from.into()).await;
        let before = watched.sample();
        tokio::time::sleep_until(stop_at.into()).await;
        let after = watched.sample();
        Ok(Load {
            accepted: 0,
            warmup_accepted: 0,
            latencies: Histogram::new_with_bounds(1, 60_000_000, 3)?,
            statuses: BTreeMap::new(),
            usage: before.usage_until(&after),
            memory: watched.peak_memory(),
            ended: Instant::now(),
        })
    }

    /// CPU each watched process spent per item in the measured window, in µs (for a baseline,
    /// which defers nothing past its answer).
    fn window_cost(&self, args: &AssignBenchArgs) -> BTreeMap<String, f64> {
        let seconds = args.duration as f64;
        self.usage
            .cores
            .iter()
            .map(|(label, cores)| {
                (
                    label.clone(),
                    cores * seconds * 1e6 / self.accepted.max(1) as f64,
                )
            })
            .collect()
    }

    fn per_second(&self, args: &AssignBenchArgs) -> f64 {
        self.accepted as f64 / args.duration as f64
    }

    pub(super) fn print(&self, args: &AssignBenchArgs, what: &str) {
        let ms = |micros: u64| micros as f64 / 1000.0;
        println!(
            "  accepted        {} {what} in {} s = {:.0}/s",
            self.accepted,
            args.duration,
            self.per_second(args)
        );
        println!(
            "  latency (200s)  p50 {:.2} ms  p90 {:.2} ms  p99 {:.2} ms  max {:.2} ms",
            ms(self.latencies.value_at_quantile(0.50)),
            ms(self.latencies.value_at_quantile(0.90)),
            ms(self.latencies.value_at_quantile(0.99)),
            ms(self.latencies.max())
        );
        println!("  responses       {:?}", self.statuses);
        println!("  CPU during the measured window:");
        self.usage.print(&self.memory);
    }
}

async fn measure(core: &CoreConfig, args: &AssignBenchArgs) -> anyhow::Result<()> {
    crate::up::prepare_database(core).await?;
    let pool = crate::admin::pool(core).await?;
    let pipeline = Arc::new(tenant(&pool, "Benchmark", args).await?);
    let mode = if args.bulk > 1 {
        format!("bulk requests of {} items", args.bulk)
    } else {
        "single assigns".to_owned()
    };
    println!(
        "bench assign: {mode}, {} connections, {} s (+{} s warm-up) each, {} users × {} flows = {} distinct assignments per organization{}",
        args.concurrency,
        args.duration,
        args.warmup,
        pipeline.emails.len(),
        pipeline.flows.len(),
        pipeline.capacity(),
        if args.request_ids {
            ", unique X-Request-ID on every request"
        } else {
            ""
        }
    );

    let baseline = if args.no_baseline || args.base_url.is_some() {
        None
    } else {
        Some(run_baseline(core, &pool, args).await?)
    };

    let secrets: Vec<String> = (0..args.endpoints)
        .map(|_| flow_domain::webhook::signing::generate_secret())
        .collect();
    let mut receiver = Receiver::start_with(receiver_options(0)).await?;
    let whole_system = !args.two_part && args.base_url.is_none();
    if whole_system {
        let vault = super::system::secret_vault();
        create_endpoints(
            &pool,
            &secrets,
            &vault,
            &receiver,
            pipeline.org_id,
            |index| match index {
                0 => vec!["flow.assigned".to_owned()],
                _ => vec!["flow.completed".to_owned(), "flow.overdue".to_owned()],
            },
        )
        .await?;
    }

    println!();
    println!(
        "pipeline ({}):",
        match (&args.base_url, whole_system) {
            (Some(url), _) => format!("the API at {url}"),
            (None, true) =>
                "whole system: api, assign-worker, outbox-relay, webhook-worker, scheduler, each its own process".to_owned(),
            (None, false) => "two parts: api and assign-worker, each its own process".to_owned(),
        }
    );
    let mut watched = Watched::with_servers(core);
    let mut children = Vec::new();
    let base_url = match &args.base_url {
        Some(url) => url.trim_end_matches('/').to_owned(),
        None => {
            let components: &[&str] = if whole_system {
                &[
                    "api",
                    "assign-worker",
                    "outbox-relay",
                    "webhook-worker",
                    "scheduler",
                ]
            } else {
                &["api", "assign-worker"]
            };
            let environment = [
                ("WEBHOOK_ALLOW_PRIVATE", "true"),
                ("WEBHOOK_ALLOW_HTTP", "true"),
            ];
            children = spawn_components(components, args.port, core, &environment, &mut watched)?;
            format!("http://127.0.0.1:{}", args.port)
        }
    };
    let outcome = async {
        wait_ready(&base_url).await?;
        let mut queues = vec![QueueKind::Assign];
        if whole_system {
            queues.push(QueueKind::Webhooks);
        }
        wait_for_consumers(core, &queues).await?;
        let path = if args.bulk > 1 {
            "/v1/flows/assign/bulk"
        } else {
            "/v1/flows/assign"
        };
        let run_start = watched.sample();
        let load = drive(&format!("{base_url}{path}"), &pipeline, args, &watched).await?;
        load.print(args, "assignments");
        let settled = settle(&pool, &pipeline, &load, whole_system, &receiver, &watched).await?;
        settled.print(&load);
        // What each process spent per assignment over the whole run, the work deferred past the
        // load (persisting, relaying, delivering) included: it bounds the rate the machine can
        // sustain, however the measured window happened to split it.
        let (cost, machine) = run_start.cost_per_item(&settled.run_end, settled.persisted as u64);
        println!(
            "  CPU per assignment over the whole run (warm-up, load and catch-up, {} assignments):",
            settled.persisted
        );
        super::system::print_cost(&cost, Some(machine), "assignment");
        if let Some(baseline) = &baseline {
            println!();
            println!(
                "pipeline / baseline: {:.2}× the accepted rate ({:.0}/s vs {:.0}/s); CPU per assignment {:.0} µs vs {:.0} µs",
                load.per_second(args) / baseline.per_second(args).max(1e-9),
                load.per_second(args),
                baseline.per_second(args),
                cost.values().sum::<f64>(),
                baseline.window_cost(args).values().sum::<f64>()
            );
        }
        anyhow::Ok((load, settled))
    }
    .await;
    stop_components(children).await;
    receiver.stop().await;
    pool.close().await;
    let (load, settled) = outcome?;
    if load.accepted == 0 {
        bail!("no request was accepted");
    }
    if settled.lost > 0 || settled.duplicate_events > 0 || settled.duplicate_deliveries > 0 {
        bail!("the run lost or duplicated work (see above)");
    }
    Ok(())
}

/// The same load against the plain handler (or, for bulk, a raw batched insert).
async fn run_baseline(
    core: &CoreConfig,
    pool: &PgPool,
    args: &AssignBenchArgs,
) -> anyhow::Result<Load> {
    let tenant = Arc::new(tenant(pool, "Benchmark baseline", args).await?);
    println!();
    if args.bulk > 1 {
        println!(
            "baseline: a raw batched UNNEST insert of {} rows per statement, {} concurrent statements",
            args.bulk, args.concurrency
        );
        let watched = Watched::with_servers(core);
        let load = raw_inserts(core, &tenant, args, &watched).await?;
        load.print(args, "rows");
        return Ok(load);
    }
    println!(
        "baseline: a plain synchronous axum + sqlx handler in its own process (flow and user looked up, the row inserted before the answer)"
    );
    let port = args.port + 1;
    let exe = std::env::current_exe().context("locating flowctl")?;
    let mut child = tokio::process::Command::new(exe)
        .args([
            "bench",
            "plain-server",
            "--bind",
            &format!("127.0.0.1:{port}"),
            "--org",
            &tenant.org_id.to_string(),
        ])
        .env("DATABASE_URL", &core.database_url)
        .kill_on_drop(true)
        .spawn()
        .context("starting the baseline server")?;
    let mut watched = Watched::with_servers(core);
    if let Some(pid) = child.id() {
        watched.add("plain handler", vec![pid]);
    }
    let base = format!("http://127.0.0.1:{port}");
    let outcome = async {
        wait_ready(&base).await?;
        drive(&format!("{base}/v1/flows/assign"), &tenant, args, &watched).await
    }
    .await;
    drop(child.start_kill());
    drop(child.wait().await);
    let load = outcome?;
    load.print(args, "assignments");
    println!("  CPU per assignment in the measured window:");
    super::system::print_cost(&load.window_cost(args), None, "assignment");
    Ok(load)
}

/// `concurrency` tasks inserting `bulk` distinct assignments per statement for the warm-up and
/// the duration.
async fn raw_inserts(
    core: &CoreConfig,
    tenant: &Arc<Tenant>,
    args: &AssignBenchArgs,
    watched: &Watched,
) -> anyhow::Result<Load> {
    let pool = db::connect(&core.database_url, args.concurrency.min(64) as u32).await?;
    let users: Vec<UserId> =
        sqlx::query_scalar("SELECT id FROM users WHERE org_id = $1 ORDER BY email_normalized")
            .bind(tenant.org_id)
            .fetch_all(&pool)
            .await?;
    let users = Arc::new(users);
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let measure_from = started + Duration::from_secs(args.warmup);
    let stop_at = measure_from + Duration::from_secs(args.duration);
    let mut tasks = Vec::new();
    for _ in 0..args.concurrency {
        let (pool, users, next, tenant) =
            (pool.clone(), users.clone(), next.clone(), tenant.clone());
        let bulk = args.bulk;
        tasks.push(tokio::spawn(async move {
            let mut latencies = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
            let (mut accepted, mut warmup_accepted) = (0u64, 0u64);
            while Instant::now() < stop_at {
                let first = next.fetch_add(bulk, Ordering::Relaxed);
                if first + bulk > users.len() * tenant.flows.len() {
                    break;
                }
                let now = Utc::now();
                let ids: Vec<AssignmentId> = (0..bulk).map(|_| AssignmentId::new()).collect();
                let user_ids: Vec<UserId> = (first..first + bulk)
                    .map(|i| users[i % users.len()])
                    .collect();
                let flow_ids: Vec<FlowId> = (first..first + bulk)
                    .map(|i| tenant.flows[i / users.len()])
                    .collect();
                let sent = Instant::now();
                sqlx::query(
                    "INSERT INTO assignments (id, org_id, flow_id, user_id, assigned_at)
                     SELECT t.id, $4, t.flow_id, t.user_id, $5
                     FROM UNNEST($1::uuid[], $2::uuid[], $3::uuid[]) AS t(id, flow_id, user_id)",
                )
                .bind(&ids)
                .bind(&flow_ids)
                .bind(&user_ids)
                .bind(tenant.org_id)
                .bind(now)
                .execute(&pool)
                .await?;
                if sent < measure_from {
                    warmup_accepted += bulk as u64;
                } else {
                    accepted += bulk as u64;
                    let _ = latencies.record(sent.elapsed().as_micros().max(1) as u64);
                }
            }
            anyhow::Ok((accepted, warmup_accepted, latencies))
        }));
    }
    let mut load = Load::over_window(watched, measure_from, stop_at).await?;
    for task in tasks {
        let (accepted, warmup_accepted, latencies) = task.await??;
        load.accepted += accepted;
        load.warmup_accepted += warmup_accepted;
        load.latencies.add(&latencies)?;
    }
    *load.statuses.entry("committed".into()).or_default() += load.accepted / args.bulk as u64;
    load.ended = Instant::now();
    pool.close().await;
    Ok(load)
}

/// How the system caught up after the load, and whether anything was lost or doubled.
pub(super) struct Settled {
    persisted: i64,
    /// CPU counters once everything had caught up (or the wait gave up).
    run_end: super::system::Sample,
    persisted_after: Option<Duration>,
    published_after: Option<Duration>,
    delivered_after: Option<Duration>,
    /// Commit of the assignment (its outbox row) to the webhook's arrival, in µs.
    commit_to_delivery: Option<Histogram<u64>>,
    pub(super) lost: i64,
    pub(super) duplicate_events: i64,
    pub(super) duplicate_deliveries: u64,
    undelivered: i64,
    whole_system: bool,
}

impl Settled {
    pub(super) fn print(&self, load: &Load) {
        let after = |at: Option<Duration>| match at {
            Some(at) => format!("{:.0} ms after the load", at.as_secs_f64() * 1000.0),
            None => "NOT within 120 s".to_owned(),
        };
        println!(
            "  persisted       {} assignments (accepted {}); caught up {}",
            self.persisted,
            load.accepted + load.warmup_accepted,
            after(self.persisted_after)
        );
        if self.whole_system {
            println!(
                "  events          flow.assigned published {}; delivered to the endpoint {}",
                after(self.published_after),
                after(self.delivered_after)
            );
            if let Some(latency) = &self.commit_to_delivery {
                let ms = |micros: u64| micros as f64 / 1000.0;
                println!(
                    "  commit→delivery p50 {:.1} ms  p90 {:.1} ms  p99 {:.1} ms  max {:.1} ms ({} events)",
                    ms(latency.value_at_quantile(0.50)),
                    ms(latency.value_at_quantile(0.90)),
                    ms(latency.value_at_quantile(0.99)),
                    ms(latency.max()),
                    latency.len()
                );
            }
        }
        println!(
            "  check           lost {}, duplicate events {}, duplicate deliveries {}, undelivered events {}",
            self.lost, self.duplicate_events, self.duplicate_deliveries, self.undelivered
        );
    }
}

pub(super) async fn settle(
    pool: &PgPool,
    tenant: &Tenant,
    load: &Load,
    whole_system: bool,
    receiver: &Receiver,
    watched: &Watched,
) -> anyhow::Result<Settled> {
    let expected = (load.accepted + load.warmup_accepted) as i64;
    let deadline = load.ended + Duration::from_secs(120);
    let (mut persisted_after, mut published_after, mut delivered_after) = (None, None, None);
    loop {
        let asked = Instant::now();
        // Counted without reading every row of the run, so watching the catch-up does not slow
        // it down: assignments from the report rollups (a few rows per flow), events not yet
        // published (of any organization: the benchmark's database) past the relay's cursor in
        // its order index, as its gauges read them. The `outbox_unpublished` view read the
        // whole outbox, over a second a poll once a million events were kept. The final checks
        // below count the rows themselves.
        let assignments: i64 = db::rollups::lifetime_figures(pool, &tenant.flows, Utc::now())
            .await?
            .iter()
            .map(|figures| figures.total)
            .sum();
        let aliases: i64 =
            sqlx::query_scalar("SELECT count(*) FROM assignment_aliases WHERE org_id = $1")
                .bind(tenant.org_id)
                .fetch_one(pool)
                .await?;
        let (unpublished, _) = db::outbox::backlog(pool).await?;
        let all_persisted = assignments + aliases >= expected;
        if persisted_after.is_none() && all_persisted {
            persisted_after = Some(load.ended.elapsed());
        }
        if whole_system {
            // Every new assignment wrote its `flow.assigned` event in its own transaction.
            if published_after.is_none() && all_persisted && unpublished == 0 {
                published_after = Some(load.ended.elapsed());
            }
            if delivered_after.is_none() && receiver.tally().first_arrivals("0") as i64 >= expected
            {
                delivered_after = Some(load.ended.elapsed());
            }
        }
        let done = persisted_after.is_some()
            && (!whole_system || (published_after.is_some() && delivered_after.is_some()));
        if done || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20).max(asked.elapsed() * 4)).await;
    }
    // Before the final checks, whose counts are the benchmark's own work.
    let run_end = watched.sample();
    // The check counts the rows themselves (the rollups are checked by their own tests).
    let persisted: i64 = sqlx::query_scalar("SELECT count(*) FROM assignments WHERE org_id = $1")
        .bind(tenant.org_id)
        .fetch_one(pool)
        .await?;
    let duplicate_events: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM (SELECT 1 FROM outbox WHERE org_id = $1
                               GROUP BY assignment_id, event_type HAVING count(*) > 1) d",
    )
    .bind(tenant.org_id)
    .fetch_one(pool)
    .await?;
    let mut commit_to_delivery = None;
    let mut undelivered = 0;
    let duplicate_deliveries = receiver.tally().duplicates;
    if whole_system {
        let committed: Vec<(uuid::Uuid, DateTime<Utc>)> =
            sqlx::query_as("SELECT event_id, created_at FROM outbox WHERE org_id = $1")
                .bind(tenant.org_id)
                .fetch_all(pool)
                .await?;
        let committed: HashMap<String, DateTime<Utc>> = committed
            .into_iter()
            .map(|(id, at)| (format!("evt_{}", id.simple()), at))
            .collect();
        let mut histogram = Histogram::<u64>::new_with_bounds(1, 600_000_000, 3)?;
        let log = receiver.tally();
        for arrival in &log.arrivals {
            if let Some(at) = committed.get(&arrival.event_id) {
                let micros = (arrival.arrived_at - *at).num_microseconds().unwrap_or(0);
                let _ = histogram.record(micros.max(1) as u64);
            }
        }
        undelivered = committed.len() as i64 - log.first_arrivals("0") as i64;
        commit_to_delivery = Some(histogram);
    }
    Ok(Settled {
        persisted,
        run_end,
        persisted_after,
        published_after,
        delivered_after,
        commit_to_delivery,
        lost: (expected - persisted).max(0),
        duplicate_events,
        duplicate_deliveries,
        undelivered,
        whole_system,
    })
}

pub(super) async fn wait_ready(base_url: &str) -> anyhow::Result<()> {
    let client = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(response) = client.get(format!("{base_url}/readyz")).send().await
            && response.status().is_success()
        {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("{base_url} did not become ready within 60 s");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until each of `queues` has a consumer, so the load does not start against an absent
/// worker.
pub async fn wait_for_consumers(core: &CoreConfig, queues: &[QueueKind]) -> anyhow::Result<()> {
    let topology = Topology::new(&core.queue_prefix, core.delivery_limit);
    let connection = flow_common::amqp::connect(&core.amqp_url, "flowctl-bench").await?;
    let deadline = Instant::now() + Duration::from_secs(60);
    'queues: for queue in queues {
        loop {
            let depths = flow_common::amqp::queue_depths(&connection, &topology).await?;
            if depths
                .iter()
                .any(|(kind, _, consumers)| kind == queue && *consumers > 0)
            {
                continue 'queues;
            }
            if Instant::now() > deadline {
                bail!("no consumer on {} within 60 s", topology.queue(*queue));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    drop(connection.close(200, "ready".into()).await);
    Ok(())
}
