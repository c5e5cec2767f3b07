//! `flowctl bench broker`: the ceiling the message broker sets on this machine. Publishes
//! persistent messages to a quorum queue with publisher confirms (as the API does), with N
//! publishes in flight, no HTTP and no database, and reports confirmed messages/s and confirm
//! latency.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::Args;
use flow_common::amqp::{Outgoing, Publisher, QueueKind, Topology};
use flow_common::config::CoreConfig;
use hdrhistogram::Histogram;

/// Options of the broker benchmark.
#[derive(Debug, Clone, Args)]
pub struct BrokerBenchArgs {
    /// Publishes in flight at once.
    #[arg(long, default_value_t = 64)]
    pub concurrency: usize,
    /// Seconds of load.
    #[arg(long, default_value_t = 10)]
    pub duration: u64,
    /// Confirm-mode channels.
    #[arg(long, default_value_t = 4)]
    pub channels: usize,
}

/// Runs the benchmark against a throw-away topology, deleted afterwards.
pub async fn run(core: &CoreConfig, args: BrokerBenchArgs) -> anyhow::Result<()> {
    let topology = Topology::new(
        format!("bench-broker-{}", uuid::Uuid::new_v4().simple()),
        core.delivery_limit,
    );
    let publisher = Publisher::new(
        &core.amqp_url,
        "flowctl-bench",
        topology.clone(),
        args.channels,
        Duration::from_secs(30),
    );
    publisher.connect_now().await?;
    let payload = serde_json::to_vec(&serde_json::json!({
        "version": 1, "assignmentId": "asg_0193a1b2c3d47e8f9a0b1c2d3e4f5a6b",
        "orgId": "org_0193a1b2c3d47e8f9a0b1c2d3e4f5a6b", "flowId": "flow_0193a1b2c3d47e8f9a0b1c2d3e4f5a6b",
        "flowName": "Security Basics", "userId": "usr_0193a1b2c3d47e8f9a0b1c2d3e4f5a6b",
        "assigneeEmail": "someone@example.com", "priority": "medium",
        "assignedAt": "2026-11-22T10:00:00.000Z"
    }))?;
    let stop = Arc::new(AtomicBool::new(false));
    let confirmed = Arc::new(AtomicU64::new(0));
    let exchange = topology.commands_exchange();
    let mut tasks = Vec::new();
    for _ in 0..args.concurrency {
        let publisher = publisher.clone();
        let stop = stop.clone();
        let confirmed = confirmed.clone();
        let payload = payload.clone();
        let exchange = exchange.clone();
        tasks.push(tokio::spawn(async move {
            let mut latencies = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).ok();
            while !stop.load(Ordering::Relaxed) {
                let started = Instant::now();
                let outcome = publisher
                    .publish(Outgoing {
                        exchange: &exchange,
                        routing_key: &QueueKind::Assign.suffix(),
                        payload: &payload,
                        message_id: "bench",
                        kind: "assign",
                        request_id: None,
                        headers: &[],
                    })
                    .await;
                if outcome.is_ok() {
                    confirmed.fetch_add(1, Ordering::Relaxed);
                    if let Some(histogram) = latencies.as_mut() {
                        let _ = histogram.record(started.elapsed().as_micros().max(1) as u64);
                    }
                }
            }
            latencies
        }));
    }
    tokio::time::sleep(Duration::from_secs(args.duration)).await;
    stop.store(true, Ordering::Relaxed);
    let mut latencies = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
    for task in tasks {
        if let Some(histogram) = task.await? {
            latencies.add(&histogram)?;
        }
    }
    let total = confirmed.load(Ordering::Relaxed);
    let ms = |micros: u64| micros as f64 / 1000.0;
    println!(
        "broker: {total} confirmed in {} s = {:.0} msg/s; confirm latency p50 {:.2} ms p99 {:.2} ms max {:.2} ms",
        args.duration,
        total as f64 / args.duration as f64,
        ms(latencies.value_at_quantile(0.5)),
        ms(latencies.value_at_quantile(0.99)),
        ms(latencies.max())
    );
    let connection = flow_common::amqp::connect(&core.amqp_url, "flowctl-bench").await?;
    let channel = connection.create_channel().await?;
    topology.delete(&channel).await?;
    drop(connection.close(200, "done".into()).await);
    publisher.close().await;
    Ok(())
}
