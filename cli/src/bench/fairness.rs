//! `flowctl bench fairness`: the lanes of design §15 under the scenario of issue 26, every
//! component its own process (`flowctl up --only …`: api, assign-worker, outbox-relay,
//! webhook-worker).
//!
//! 1. Baseline: one organization bulk-assigns alone at full speed (`--bulk-clients` connections
//!    sending bulk requests of `--bulk` distinct items) for `--duration` seconds, webhooks on (a
//!    healthy endpoint): accepted/s and the persist rate it gets.
//! 2. The same load by another organization (webhooks on, a healthy endpoint), while a bystander
//!    organization assigns singly every `--single-every-ms` with a healthy endpoint of its own:
//!    the bystander's accept→persisted (a 200, then reads of `GET /v1/assignments/{id}` every
//!    20 ms until one answers 200) and commit→delivery p50/p99/max, and the bulk persist rate.
//! 3. Two organizations bulk-assign at once: each one's persist rate and share.
//!
//! Every phase waits for its backlog to be persisted and its webhooks delivered before the next
//! starts, so no phase shares the machine with the one before. At the end it checks
//! that every accepted item was persisted once, that no event was written twice and no endpoint
//! got one twice, and that every bystander event was delivered.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::bail;
use chrono::{DateTime, Utc};
use clap::Args;
use flow_common::amqp::QueueKind;
use flow_common::config::CoreConfig;
use flow_common::db::{self, orgs};
use flow_domain::ids::OrgId;
use hdrhistogram::Histogram;
use sqlx::PgPool;
use tokio::process::Child;

use super::assign::{AssignBenchArgs, Tenant, drive, tenant, wait_for_consumers, wait_ready};
use super::system::{InTurn, Watched, Witness, kill_in_turn, spawn_component, stop_components};
use super::webhooks::{create_endpoints_at, receiver_options};
use crate::receiver::Receiver;

/// Options of the fairness benchmark.
#[derive(Debug, Clone, Args)]
pub struct FairnessBenchArgs {
    /// Seconds of load in each phase.
    #[arg(long, default_value_t = 10)]
    pub duration: u64,
    /// Concurrent connections of each bulk organization.
    #[arg(long, default_value_t = 4)]
    pub bulk_clients: usize,
    /// Items per bulk request.
    #[arg(long, default_value_t = 1_000)]
    pub bulk: usize,
    /// Milliseconds between two single assigns of the bystander.
    #[arg(long, default_value_t = 200)]
    pub single_every_ms: u64,
    /// The bystander also has an endpoint answering after this many milliseconds (0: none); its
    /// healthy endpoint's commit→delivery shows what the slow one costs others.
    #[arg(long, default_value_t = 8_000)]
    pub slow_endpoint_ms: u64,
    /// Users of each bulk organization (each has `--flows` flows: users × flows distinct items).
    #[arg(long, default_value_t = 10_000)]
    pub users: usize,
    /// Flows of each bulk organization.
    #[arg(long, default_value_t = 100)]
    pub flows: usize,
    /// Longest wait for a phase's backlog to be persisted.
    #[arg(long, default_value_t = 300)]
    pub drain: u64,
    /// Port of the API child process.
    #[arg(long, default_value_t = 18_180)]
    pub port: u16,
    /// Kill one worker process with SIGKILL every this many seconds, the assign-worker, the
    /// outbox-relay and the webhook-worker in turn, and start it again at once (0: never). The
    /// checks at the end then say whether the crashes lost or duplicated anything; the figures of
    /// such a run include the restarts.
    #[arg(long, default_value_t = 0)]
    pub kill_every: u64,
}

impl FairnessBenchArgs {
    /// The assign benchmark's settings for a bulk organization's load.
    fn bulk_load(&self, users: usize, flows: usize) -> AssignBenchArgs {
        AssignBenchArgs {
            concurrency: self.bulk_clients,
            duration: self.duration,
            warmup: 0,
            users: Some(users),
            flows,
            bulk: self.bulk,
            request_ids: false,
            two_part: false,
            no_baseline: true,
            endpoints: 1,
            base_url: None,
            port: self.port,
        }
    }
}

/// The worker processes of a run, and the component of each kill.
type Workers = InTurn<&'static str>;

/// Says each worker's kill, once it was started again.
struct SayKills;

impl Witness for SayKills {
    type Kill = &'static str;

    async fn before(&self, component: &'static str, _: usize, _: Option<u32>) -> &'static str {
        component
    }

    fn after(&self, component: &&'static str) {
        println!("  killed {component} with SIGKILL and started it again");
    }
}

/// Runs the benchmark on queues of its own (deleted afterwards).
pub async fn run(core: &CoreConfig, args: FairnessBenchArgs) -> anyhow::Result<()> {
    if args.bulk == 0 || args.bulk > 1_000 {
        bail!("--bulk must be between 1 and 1000");
    }
    super::system::on_own_queues(core, |own| async move { measure(&own, &args).await }).await
}

/// A benchmark organization with what the checks need.
struct Org {
    name: &'static str,
    tenant: Arc<Tenant>,
    /// Items answered 200.
    accepted: u64,
}

impl Org {
    async fn new(
        pool: &PgPool,
        name: &'static str,
        load: &AssignBenchArgs,
    ) -> anyhow::Result<Self> {
        let tenant = Arc::new(tenant(pool, name, load).await?);
        Ok(Self {
            name,
            tenant,
            accepted: 0,
        })
    }

    /// Assignments persisted so far (from the report rollups: cheap however many there are).
    async fn persisted(&self, pool: &PgPool) -> anyhow::Result<i64> {
        Ok(
            db::rollups::lifetime_figures(pool, &self.tenant.flows, Utc::now())
                .await?
                .iter()
                .map(|figures| figures.total)
                .sum(),
        )
    }

    async fn shard(&self, pool: &PgPool) -> anyhow::Result<u16> {
        let org = orgs::get(pool, self.tenant.org_id)
            .await?
            .ok_or_else(|| anyhow::anyhow!("organization gone"))?;
        Ok(flow_common::amqp::bulk_shard(org.bulk_lane))
    }
}

async fn measure(core: &CoreConfig, args: &FairnessBenchArgs) -> anyhow::Result<()> {
    crate::up::prepare_database(core).await?;
    let pool = crate::admin::pool(core).await?;
    let load = args.bulk_load(args.users, args.flows);
    let mut alone = Org::new(&pool, "Bulk alone", &load).await?;
    let mut flooding = Org::new(&pool, "Bulk with a bystander", &load).await?;
    let mut again = Org::new(&pool, "Bulk alone again", &load).await?;
    let mut bystander = Org::new(&pool, "Bystander", &args.bulk_load(200, 10)).await?;
    let mut first = Org::new(&pool, "Bulk tenant 1", &load).await?;
    let mut second = Org::new(&pool, "Bulk tenant 2", &load).await?;
    let mut receiver = Receiver::start_with(receiver_options(0)).await?;
    let vault = super::system::secret_vault();
    // Both organizations of the first two phases have webhooks on, so the phases differ by the
    // bystander alone; the third phase's tenants have none (their shares are the figure).
    for (org, path, count) in [
        (&alone, "alone-", 1),
        (&flooding, "bulk-", 1),
        (&again, "again-", 1),
        (
            &bystander,
            "single-",
            1 + usize::from(args.slow_endpoint_ms > 0),
        ),
    ] {
        let secrets: Vec<String> = (0..count)
            .map(|_| flow_domain::webhook::signing::generate_secret())
            .collect();
        create_endpoints_at(
            &pool,
            &secrets,
            &vault,
            &receiver,
            org.tenant.org_id,
            path,
            |_| vec!["flow.assigned".to_owned()],
        )
        .await?;
    }
    if args.slow_endpoint_ms > 0 {
        receiver.set(
            "single-1",
            crate::receiver::Behaviour::Delay(args.slow_endpoint_ms),
        );
    }
    println!(
        "bench fairness: bulk organizations send {} connections × bulk requests of {} items for {} s; a bystander assigns singly every {} ms{}",
        args.bulk_clients,
        args.bulk,
        args.duration,
        args.single_every_ms,
        if args.slow_endpoint_ms > 0 {
            format!(
                " (its events go to a healthy endpoint and to one answering in {} ms)",
                args.slow_endpoint_ms
            )
        } else {
            String::new()
        }
    );
    for org in [&alone, &flooding, &again, &bystander, &first, &second] {
        println!("  {:<22} bulk queue {}", org.name, org.shard(&pool).await?);
    }
    println!(
        "  components: api, assign-worker, outbox-relay, webhook-worker, each its own process"
    );

    let mut watched = Watched::with_servers(core);
    let mut children: Vec<Child> = Vec::new();
    let workers = Arc::new(tokio::sync::Mutex::new(Workers::default()));
    // Slow statements of the loaded components are expected here: not logged over the figures.
    let log = std::env::var("RUST_LOG").unwrap_or_else(|_| "warn,sqlx::query=error".into());
    let environment = [
        ("WEBHOOK_ALLOW_PRIVATE", "true"),
        ("WEBHOOK_ALLOW_HTTP", "true"),
        ("RUST_LOG", log.as_str()),
    ];
    for component in ["api", "assign-worker", "outbox-relay", "webhook-worker"] {
        let child = spawn_component(component, args.port, core, &environment)?;
        if let Some(pid) = child.id() {
            watched.add(component, vec![pid]);
        }
        if component == "api" {
            children.push(child);
        } else {
            workers.lock().await.running.push((component, child));
        }
    }
    let stop_killing = tokio_util::sync::CancellationToken::new();
    let killer = (args.kill_every > 0).then(|| {
        println!(
            "  a worker is killed with SIGKILL every {} s and started again (CPU figures cover each worker's first process only)",
            args.kill_every
        );
        kill_in_turn(
            workers.clone(),
            Duration::from_secs(args.kill_every),
            core,
            args.port,
            &environment,
            stop_killing.clone(),
            SayKills,
        )
    });
    let base_url = format!("http://127.0.0.1:{}", args.port);
    let outcome = async {
        wait_ready(&base_url).await?;
        wait_for_consumers(
            core,
            &[
                QueueKind::Assign,
                QueueKind::BulkAssign(0),
                QueueKind::Webhooks,
                QueueKind::InteractiveWebhooks,
            ],
        )
        .await?;
        let bulk_url = format!("{base_url}/v1/flows/assign/bulk");

        println!();
        println!("1. baseline: one organization bulk-assigns alone");
        let rate_alone = bulk_phase(&pool, &bulk_url, &load, &watched, &mut [&mut alone]).await?;
        let overall_alone = drain(&pool, &[&alone], &rate_alone, args.drain).await?;
        delivered(&receiver, &alone, "alone-0", args.drain).await;

        println!();
        println!("2. the same load by another organization (webhooks on) and a bystander assigning singly");
        let single = tokio::spawn(singles(
            base_url.clone(),
            bystander.tenant.clone(),
            Duration::from_millis(args.single_every_ms),
            Duration::from_secs(args.duration),
        ));
        let rate_flooding =
            bulk_phase(&pool, &bulk_url, &load, &watched, &mut [&mut flooding]).await?;
        let singles = single.await??;
        bystander.accepted = singles.accepted.len() as u64;
        singles.print();
        let overall_flooding = drain(&pool, &[&flooding], &rate_flooding, args.drain).await?;
        drain(&pool, &[&bystander], &[], args.drain).await?;
        let bystander_delivered = deliveries(&pool, &receiver, &bystander, "single-0").await?;
        delivered(&receiver, &flooding, "bulk-0", args.drain).await;

        // The baseline once more, on the database as the first two phases left it: a drift
        // between the two baselines (tables grown, the machine warmer) is not the bystander's.
        println!();
        println!("2b. the baseline again: a third organization bulk-assigns alone");
        let rate_again = bulk_phase(&pool, &bulk_url, &load, &watched, &mut [&mut again]).await?;
        let overall_again = drain(&pool, &[&again], &rate_again, args.drain).await?;
        delivered(&receiver, &again, "again-0", args.drain).await;
        let baseline = (rate_alone[0].rate + rate_again[0].rate) / 2.0;
        let overall_baseline = (overall_alone[0] + overall_again[0]) / 2.0;
        println!(
            "  bulk persist rate with the bystander: {:.0}/s during the load ({:+.1}% against the baselines' mean {:.0}/s: {:.0}/s before, {:.0}/s after), {:.0}/s over load and drain ({:+.1}% against {:.0}/s)",
            rate_flooding[0].rate,
            (rate_flooding[0].rate / baseline.max(1e-9) - 1.0) * 100.0,
            baseline,
            rate_alone[0].rate,
            rate_again[0].rate,
            overall_flooding[0],
            (overall_flooding[0] / overall_baseline.max(1e-9) - 1.0) * 100.0,
            overall_baseline,
        );

        println!();
        println!("3. two organizations bulk-assign at once");
        let rates = bulk_phase(
            &pool,
            &bulk_url,
            &load,
            &watched,
            &mut [&mut first, &mut second],
        )
        .await?;
        let baseline = rate_alone[0].rate;
        let rates: Vec<f64> = rates.iter().map(|phase| phase.rate).collect();
        let total: f64 = rates.iter().sum();
        for (org, rate) in [&first, &second].iter().zip(&rates) {
            println!(
                "  {:<22} persisted {:.0}/s: {:.1}% of the persist rate (even split 50%), {:.0}% of the baseline's rate alone",
                org.name,
                rate,
                rate / total.max(1e-9) * 100.0,
                rate / baseline.max(1e-9) * 100.0
            );
        }
        drain(&pool, &[&first, &second], &[], args.drain).await?;
        anyhow::Ok(bystander_delivered)
    }
    .await;
    stop_killing.cancel();
    let killed = match killer {
        Some(killer) => killer.await?,
        None => Ok(()),
    };
    let mut workers = std::mem::take(&mut *workers.lock().await);
    if !workers.kills.is_empty() {
        println!(
            "  {} workers were killed with SIGKILL during the run",
            workers.kills.len()
        );
    }
    stop_components(
        children
            .into_iter()
            .chain(workers.running.drain(..).map(|(_, child)| child)),
    )
    .await;
    killed?;
    let delivered = outcome?;
    println!();
    let orgs = [&alone, &flooding, &again, &bystander, &first, &second];
    let failed = check(&pool, &orgs, &receiver, delivered, args.kill_every > 0).await?;
    receiver.stop().await;
    pool.close().await;
    if failed {
        bail!("the run lost or duplicated work (see above)");
    }
    Ok(())
}

/// What one organization got from a phase's load.
struct Phase {
    /// Items persisted per second during the load.
    rate: f64,
    /// Items accepted by the load (all persisted once the phase's backlog drained).
    accepted: u64,
    /// Seconds the load lasted.
    seconds: f64,
}

/// Drives every organization of `orgs` with the bulk load at once; returns each one's persist
/// rate over the phase (its backlog builds from the first second: the rate is what the assign
/// workers gave it).
async fn bulk_phase(
    pool: &PgPool,
    url: &str,
    load: &AssignBenchArgs,
    watched: &Watched,
    orgs: &mut [&mut Org],
) -> anyhow::Result<Vec<Phase>> {
    let mut before = Vec::new();
    for org in orgs.iter() {
        before.push(org.persisted(pool).await?);
    }
    let started = Instant::now();
    let loads = futures::future::join_all(
        orgs.iter()
            .map(|org| drive(url, &org.tenant, load, watched)),
    )
    .await;
    let seconds = started.elapsed().as_secs_f64();
    let mut rates = Vec::new();
    for ((org, load), before) in orgs.iter_mut().zip(loads).zip(before) {
        let load = load?;
        let persisted = org.persisted(pool).await? - before;
        org.accepted += load.accepted;
        let rate = persisted as f64 / seconds;
        println!(
            "  {:<22} accepted {} items ({:.0}/s), persisted {} during the load ({:.0}/s)",
            org.name,
            load.accepted,
            load.accepted as f64 / seconds,
            persisted,
            rate
        );
        rates.push(Phase {
            rate,
            accepted: load.accepted,
            seconds,
        });
    }
    Ok(rates)
}

/// Waits until every accepted item of `orgs` is persisted (at most `limit` seconds). With the
/// `phase` its load measured (one per organization, in order), answers each organization's
/// persist rate over the load and the drain together: what the whole job got.
async fn drain(
    pool: &PgPool,
    orgs: &[&Org],
    phase: &[Phase],
    limit: u64,
) -> anyhow::Result<Vec<f64>> {
    let started = Instant::now();
    loop {
        let mut waiting = 0;
        for org in orgs {
            waiting += (org.accepted as i64 - org.persisted(pool).await?).max(0);
        }
        let overall = |drained: f64| -> Vec<f64> {
            phase
                .iter()
                .map(|phase| phase.accepted as f64 / (phase.seconds + drained))
                .collect()
        };
        if waiting == 0 {
            let drained = started.elapsed().as_secs_f64();
            println!("  backlog persisted {drained:.1} s after the load");
            return Ok(overall(drained));
        }
        if started.elapsed() > Duration::from_secs(limit) {
            println!("  {waiting} items still not persisted after {limit} s");
            return Ok(overall(started.elapsed().as_secs_f64()));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Waits (at most `limit` seconds) until the endpoint at `path` has every event of `org`, so the
/// next phase does not share the machine with this one's deliveries; prints how long it took.
async fn delivered(receiver: &Receiver, org: &Org, path: &str, limit: u64) {
    let started = Instant::now();
    loop {
        let arrived = receiver.tally().first_arrivals(path);
        if arrived >= org.accepted {
            println!(
                "  webhooks delivered {:.1} s later ({arrived} events to {path})",
                started.elapsed().as_secs_f64()
            );
            return;
        }
        if started.elapsed() > Duration::from_secs(limit) {
            println!(
                "  {arrived} of {} events delivered to {path} after {limit} s",
                org.accepted
            );
            return;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// What the bystander saw.
struct Singles {
    /// Assignment ids answered 200.
    accepted: Vec<String>,
    /// 200 → first `GET` answering 200, in µs.
    persisted: Histogram<u64>,
    /// Requests not answered 200.
    errors: u64,
}

impl Singles {
    fn print(&self) {
        println!(
            "  bystander              {} single assigns answered 200 ({} not)",
            self.accepted.len(),
            self.errors
        );
        print_latency("  bystander accept→persisted", &self.persisted);
    }
}

fn print_latency(what: &str, histogram: &Histogram<u64>) {
    let ms = |micros: u64| micros as f64 / 1000.0;
    println!(
        "{what:<36} p50 {:.0} ms  p99 {:.0} ms  max {:.0} ms ({} samples)",
        ms(histogram.value_at_quantile(0.50)),
        ms(histogram.value_at_quantile(0.99)),
        ms(histogram.max()),
        histogram.len()
    );
}

/// Assigns singly every `every` for `duration`, each assign then read back every 20 ms until it
/// is persisted.
async fn singles(
    base_url: String,
    tenant: Arc<Tenant>,
    every: Duration,
    duration: Duration,
) -> anyhow::Result<Singles> {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()?;
    let mut ticker = tokio::time::interval(every);
    let stop_at = Instant::now() + duration;
    let mut reads = Vec::new();
    let mut errors = 0;
    let mut index = 0;
    while Instant::now() < stop_at && index < tenant.capacity() {
        ticker.tick().await;
        let response = client
            .post(format!("{base_url}/v1/flows/assign"))
            .bearer_auth(&tenant.key)
            .header("content-type", "application/json")
            .body(tenant.item(index))
            .send()
            .await;
        index += 1;
        let accepted_at = Instant::now();
        let id = match response {
            Ok(response) if response.status().is_success() => response
                .json::<serde_json::Value>()
                .await?
                .get("assignmentId")
                .and_then(|id| id.as_str())
                .map(str::to_owned),
            _ => None,
        };
        let Some(id) = id else {
            errors += 1;
            continue;
        };
        let (client, base_url, key) = (client.clone(), base_url.clone(), tenant.key.clone());
        reads.push(tokio::spawn(async move {
            loop {
                let read = client
                    .get(format!("{base_url}/v1/assignments/{id}"))
                    .bearer_auth(&key)
                    .send()
                    .await;
                if read.is_ok_and(|read| read.status().as_u16() == 200) {
                    return (id, accepted_at.elapsed());
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }));
    }
    let mut persisted = Histogram::<u64>::new_with_bounds(1, 600_000_000, 3)?;
    let mut accepted = Vec::new();
    for read in reads {
        let (id, took) = read.await?;
        let _ = persisted.record(took.as_micros().max(1) as u64);
        accepted.push(id);
    }
    Ok(Singles {
        accepted,
        persisted,
        errors,
    })
}

/// Waits (at most 60 s) for every event of `org` to reach the endpoint at `path`, then prints the
/// commit→delivery latencies; returns how many arrived.
async fn deliveries(
    pool: &PgPool,
    receiver: &Receiver,
    org: &Org,
    path: &str,
) -> anyhow::Result<u64> {
    let committed: Vec<(uuid::Uuid, DateTime<Utc>)> =
        sqlx::query_as("SELECT event_id, created_at FROM outbox WHERE org_id = $1")
            .bind(org.tenant.org_id)
            .fetch_all(pool)
            .await?;
    let deadline = Instant::now() + Duration::from_secs(60);
    while (receiver.tally().first_arrivals(path) as usize) < committed.len()
        && Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let committed: HashMap<String, DateTime<Utc>> = committed
        .into_iter()
        .map(|(id, at)| (format!("evt_{}", id.simple()), at))
        .collect();
    let mut latency = Histogram::<u64>::new_with_bounds(1, 600_000_000, 3)?;
    let tally = receiver.tally();
    for arrival in tally.arrivals.iter().filter(|arrival| arrival.path == path) {
        if let Some(at) = committed.get(&arrival.event_id) {
            let micros = (arrival.arrived_at - *at).num_microseconds().unwrap_or(0);
            let _ = latency.record(micros.max(1) as u64);
        }
    }
    print_latency(&format!("  bystander commit→delivery ({path})"), &latency);
    Ok(tally.first_arrivals(path))
}

/// Prints the end-of-run checks; true when something was lost or doubled.
async fn check(
    pool: &PgPool,
    orgs: &[&Org],
    receiver: &Receiver,
    bystander_delivered: u64,
    deliveries_may_repeat: bool,
) -> anyhow::Result<bool> {
    let ids: Vec<OrgId> = orgs.iter().map(|org| org.tenant.org_id).collect();
    let rows: Vec<(OrgId, i64)> = sqlx::query_as(
        "SELECT org_id, count(*) FROM assignments WHERE org_id = ANY($1) GROUP BY org_id",
    )
    .bind(&ids)
    .fetch_all(pool)
    .await?;
    let persisted: HashMap<OrgId, i64> = rows.into_iter().collect();
    let duplicate_events: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM (SELECT 1 FROM outbox WHERE org_id = ANY($1)
                               GROUP BY assignment_id, event_type HAVING count(*) > 1) d",
    )
    .bind(&ids)
    .fetch_one(pool)
    .await?;
    let mut lost = 0;
    let mut doubled = 0;
    for org in orgs {
        let count = persisted.get(&org.tenant.org_id).copied().unwrap_or(0);
        lost += (org.accepted as i64 - count).max(0);
        doubled += (count - org.accepted as i64).max(0);
    }
    let bystander = orgs
        .iter()
        .find(|org| org.name == "Bystander")
        .map_or(0, |org| org.accepted);
    let tally = receiver.tally();
    // The bulk organizations of the first two phases have one healthy endpoint each: every event
    // must have reached it.
    let mut undelivered = 0;
    for (name, path) in [
        ("Bulk alone", "alone-0"),
        ("Bulk with a bystander", "bulk-0"),
        ("Bulk alone again", "again-0"),
    ] {
        if let Some(org) = orgs.iter().find(|org| org.name == name) {
            undelivered += org.accepted.saturating_sub(tally.first_arrivals(path));
        }
    }
    println!(
        "check: accepted {}, lost {lost}, persisted beyond the accepted {doubled}, duplicate events {duplicate_events}, bulk events not delivered {undelivered}, duplicate deliveries {}, bystander events delivered {bystander_delivered} of {bystander}",
        orgs.iter().map(|org| org.accepted).sum::<u64>(),
        tally.duplicates,
    );
    if deliveries_may_repeat && tally.duplicates > 0 {
        println!(
            "  (a webhook-worker killed between a send and its record sends that delivery again with the same webhook-id, which receivers dedupe on: docs/webhooks.md)"
        );
    }
    Ok(lost > 0
        || doubled > 0
        || duplicate_events > 0
        || undelivered > 0
        || (tally.duplicates > 0 && !deliveries_may_repeat)
        || bystander_delivered < bystander)
}
