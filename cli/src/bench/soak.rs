//! `flowctl bench soak`: the whole system under sustained distinct single assigns for N minutes,
//! every component its own process (as `flowctl bench assign` starts them), nothing scraping any
//! `/metrics`. It samples each process's resident memory and prints its slope over the last two
//! thirds of the run (the first third is warm-up: pools, caches and buffers filling), then checks
//! that nothing accepted was lost and nothing was written or delivered twice.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::bail;
use clap::Args;
use flow_common::amqp::{QueueKind, Topology};
use flow_common::config::CoreConfig;
use tokio::process::Child;

use super::assign::{AssignBenchArgs, drive, settle, tenant, wait_for_consumers, wait_ready};
use super::system::{Watched, memory_mib, spawn_component};
use super::webhooks::{create_endpoints, receiver_options};
use crate::receiver::Receiver;

/// The components of the whole system, each started as its own process.
const COMPONENTS: [&str; 5] = [
    "api",
    "assign-worker",
    "outbox-relay",
    "webhook-worker",
    "scheduler",
];

/// Options of the soak benchmark.
#[derive(Debug, Clone, Args)]
pub struct SoakBenchArgs {
    /// Minutes of load.
    #[arg(long, default_value_t = 8.0)]
    pub minutes: f64,
    /// Concurrent HTTP connections sending single assigns.
    #[arg(long, default_value_t = 64)]
    pub concurrency: usize,
    /// Users of the benchmark organization (× 20 flows distinct assignments are available).
    #[arg(long, default_value_t = 100_000)]
    pub users: usize,
    /// Seconds between two memory samples.
    #[arg(long, default_value_t = 5)]
    pub sample_every: u64,
    /// Port of the API child process.
    #[arg(long, default_value_t = 18_100)]
    pub port: u16,
}

/// Runs the soak on queues of its own, deleted afterwards.
pub async fn run(core: &CoreConfig, args: SoakBenchArgs) -> anyhow::Result<()> {
    let mut own = core.clone();
    own.queue_prefix = format!(
        "{}.soak-{}",
        core.queue_prefix,
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );
    let result = measure(&own, &args).await;
    let topology = Topology::new(&own.queue_prefix, own.delivery_limit);
    flow_common::amqp::delete_topology(&own.amqp_url, "flowctl-bench", &topology).await;
    result
}

async fn measure(core: &CoreConfig, args: &SoakBenchArgs) -> anyhow::Result<()> {
    crate::up::prepare_database(core).await?;
    let pool = crate::admin::pool(core).await?;
    let load_args = AssignBenchArgs {
        concurrency: args.concurrency,
        duration: (args.minutes * 60.0).round().max(1.0) as u64,
        warmup: 0,
        users: Some(args.users),
        flows: 20,
        bulk: 1,
        request_ids: false,
        two_part: false,
        no_baseline: true,
        endpoints: 1,
        base_url: None,
        port: args.port,
    };
    let pipeline = Arc::new(tenant(&pool, "Soak", &load_args).await?);
    let secrets = vec![flow_domain::webhook::signing::generate_secret()];
    let mut receiver = Receiver::start_with(receiver_options(0)).await?;
    create_endpoints(
        &pool,
        &secrets,
        &super::system::secret_vault(),
        &receiver,
        pipeline.org_id,
        |_| vec!["flow.assigned".to_owned()],
    )
    .await?;
    println!(
        "bench soak: single assigns, {} connections, {:.1} minutes, every component its own process, nothing scraping /metrics; memory sampled every {} s",
        args.concurrency, args.minutes, args.sample_every
    );
    let mut watched = Watched::with_servers(core);
    let mut children: Vec<(&str, Child)> = Vec::new();
    let environment = [
        ("WEBHOOK_ALLOW_PRIVATE", "true"),
        ("WEBHOOK_ALLOW_HTTP", "true"),
    ];
    for component in COMPONENTS {
        let child = spawn_component(component, args.port, core, &environment)?;
        if let Some(pid) = child.id() {
            watched.add(component, vec![pid]);
        }
        children.push((component, child));
    }
    let pids: Vec<(&str, u32)> = children
        .iter()
        .filter_map(|(name, child)| Some((*name, child.id()?)))
        .collect();
    let base_url = format!("http://127.0.0.1:{}", args.port);
    let outcome = async {
        wait_ready(&base_url).await?;
        wait_for_consumers(core, &[QueueKind::Assign, QueueKind::Webhooks]).await?;
        let samples: Samples = Arc::new(Mutex::new(BTreeMap::new()));
        let stop = tokio_util::sync::CancellationToken::new();
        let sampler = tokio::spawn(sample(
            pids.clone(),
            Duration::from_secs(args.sample_every.max(1)),
            samples.clone(),
            stop.clone(),
        ));
        let load = drive(
            &format!("{base_url}/v1/flows/assign"),
            &pipeline,
            &load_args,
            &watched,
        )
        .await;
        stop.cancel();
        drop(sampler.await);
        let load = load?;
        load.print(&load_args, "assignments");
        print_slopes(&samples.lock().unwrap_or_else(PoisonError::into_inner));
        let settled = settle(&pool, &pipeline, &load, true, &receiver, &watched).await?;
        settled.print(&load);
        anyhow::Ok((load, settled))
    }
    .await;
    for (_, mut child) in children {
        drop(child.start_kill());
        drop(child.wait().await);
    }
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

/// Resident memory (MiB) of each process by minutes since the load started.
type Samples = Arc<Mutex<BTreeMap<&'static str, Vec<(f64, f64)>>>>;

/// Samples the resident memory of `pids` every `every` until `stop`.
async fn sample(
    pids: Vec<(&'static str, u32)>,
    every: Duration,
    samples: Samples,
    stop: tokio_util::sync::CancellationToken,
) {
    let started = Instant::now();
    let mut ticks = tokio::time::interval(every);
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = ticks.tick() => {}
        }
        let minutes = started.elapsed().as_secs_f64() / 60.0;
        let mut samples = samples.lock().unwrap_or_else(PoisonError::into_inner);
        for (name, pid) in &pids {
            if let Some((rss, _)) = memory_mib(*pid) {
                samples.entry(*name).or_default().push((minutes, rss));
            }
        }
    }
}

/// Each process's memory at the start, end and peak of the load, and its least-squares slope
/// over the last two thirds of it.
fn print_slopes(samples: &BTreeMap<&str, Vec<(f64, f64)>>) {
    println!("  resident memory (MiB), slope over the last two thirds of the load:");
    for (name, points) in samples {
        let Some(&(end, last)) = points.last() else {
            continue;
        };
        let first = points.first().map_or(0.0, |point| point.1);
        let peak = points.iter().map(|point| point.1).fold(0.0, f64::max);
        let tail: Vec<(f64, f64)> = points
            .iter()
            .copied()
            .filter(|(minutes, _)| *minutes >= end / 3.0)
            .collect();
        let count = tail.len() as f64;
        let mean_x = tail.iter().map(|point| point.0).sum::<f64>() / count.max(1.0);
        let mean_y = tail.iter().map(|point| point.1).sum::<f64>() / count.max(1.0);
        let spread: f64 = tail.iter().map(|point| (point.0 - mean_x).powi(2)).sum();
        let slope = if spread > 0.0 {
            tail.iter()
                .map(|point| (point.0 - mean_x) * (point.1 - mean_y))
                .sum::<f64>()
                / spread
        } else {
            0.0
        };
        println!(
            "    {name:<16} start {first:>6.1}  end {last:>6.1}  peak {peak:>6.1}  slope {slope:>+6.2} MiB/min ({} samples)",
            tail.len()
        );
    }
}
