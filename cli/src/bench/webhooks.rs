//! `flowctl bench webhooks`: lifecycle events delivered to local webhook endpoints.
//!
//! Writes outbox rows at a fixed rate, in transactions as the service's state changes write them,
//! and runs the outbox relay and the webhook-worker in this process against the configured
//! Postgres and RabbitMQ (on queues of its own), delivering to N endpoints served by an HTTP
//! receiver in this process too. The receiver checks every signature and records when each
//! delivery arrived; the report gives deliveries/s, latency from the state change to the arrival
//! (p50/p90/p99/max), duplicates, signature failures and where the time goes. The relay drains
//! the whole outbox of the database: run it against a database no other relay is serving.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use chrono::{DateTime, Utc};
use clap::Args;
use flow_common::amqp::{Lane, QueueKind, Topology};
use flow_common::config::CoreConfig;
use flow_common::db::{orgs, outbox, webhooks};

use flow_common::webhook::vault::SecretVault;
use flow_domain::events::{EventType, NewEvent, event_body};
use flow_domain::format_timestamp;
use flow_domain::ids::{AssignmentId, EventId, FlowId, OrgId, WebhookEndpointId};
use hdrhistogram::Histogram;
use serde_json::json;
use sqlx::PgPool;
use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;

use crate::receiver::{Behaviour, Options, Receiver, Tally};

/// Options of the webhook benchmark.
#[derive(Debug, Clone, Args)]
pub struct WebhookBenchArgs {
    /// Webhook endpoints of the benchmark organization; every event goes to each of them.
    #[arg(long, default_value_t = 10)]
    pub endpoints: usize,
    /// State changes (events) per second; deliveries/s offered is this times the endpoints.
    #[arg(long, default_value_t = 500)]
    pub rate: u64,
    /// Seconds of measured load.
    #[arg(long, default_value_t = 20)]
    pub duration: u64,
    /// Seconds of unmeasured warm-up before it.
    #[arg(long, default_value_t = 3)]
    pub warmup: u64,
    /// Port of the receiver on 127.0.0.1 (0 picks a free one).
    #[arg(long, default_value_t = 0)]
    pub port: u16,
}

/// Ticks of the load generator per second: one transaction every 10 ms.
const TICKS_PER_SECOND: u64 = 100;

/// How long to wait for the last deliveries once the load stopped.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(30);

/// Runs the benchmark on queues of its own (deleted afterwards), so nothing left in the
/// configured queues, and nothing this run leaves, mixes with another run.
pub async fn run(core: &CoreConfig, args: WebhookBenchArgs) -> anyhow::Result<()> {
    if args.endpoints == 0 || args.endpoints as i64 > webhooks::endpoints::MAX_ENDPOINTS_PER_ORG {
        bail!(
            "--endpoints must be between 1 and {}",
            webhooks::endpoints::MAX_ENDPOINTS_PER_ORG
        );
    }
    if args.rate == 0 || args.duration == 0 {
        bail!("--rate and --duration must be positive");
    }
    super::system::on_own_queues(core, |own| async move { measure(&own, &args).await }).await
}

/// What the load generator did.
struct Generated {
    /// Ids of the events created in the measured window.
    measured: HashSet<String>,
    /// Events created during the warm-up.
    warmup_events: u64,
    /// Length of the measured window (longer than asked when the generator fell behind).
    window: Duration,
    /// When the last transaction of the measured window committed.
    stopped: Instant,
    /// Insert and commit time of each transaction, in microseconds.
    commits: Histogram<u64>,
    /// Ticks that started more than one tick late, and the worst lateness.
    late_ticks: u64,
    worst_lateness: Duration,
}

/// Events to write before tick `tick`, so any rate spreads evenly over the ticks.
fn events_before(tick: u64, rate: u64) -> u64 {
    tick * rate / TICKS_PER_SECOND
}

/// The event `sequence` of the run, about a made-up assignment, as the service would write it.
fn new_event(org_id: OrgId, sequence: u64, flows: &[FlowId], at: DateTime<Utc>) -> NewEvent {
    let event_type = match sequence % 4 {
        0 => EventType::Assigned,
        1 => EventType::Started,
        2 => EventType::Completed,
        _ => EventType::Overdue,
    };
    let assignment_id = AssignmentId::new();
    let flow_index = (sequence as usize) % flows.len();
    let assigned_at = at - chrono::Duration::days(2);
    let started_at = at - chrono::Duration::days(1);
    let (status, due_at, started, completed) = match event_type {
        EventType::Assigned => ("pending", at + chrono::Duration::days(30), None, None),
        EventType::Started => (
            "in_progress",
            at + chrono::Duration::days(28),
            Some(at),
            None,
        ),
        EventType::Completed => (
            "completed",
            at + chrono::Duration::days(28),
            Some(started_at),
            Some(at),
        ),
        // The bench writes the four kinds above only.
        EventType::Overdue
        | EventType::Updated
        | EventType::Cancelled
        | EventType::Reminder
        | EventType::Expiring
        | EventType::Expired => ("overdue", at, Some(started_at), None),
    };
    let priority = ["low", "medium", "high"][(sequence % 3) as usize];
    let data = json!({
        "assignmentId": assignment_id.to_string(),
        "flowId": flows[flow_index].to_string(),
        "flowName": format!("Security Basics {flow_index}"),
        "assigneeEmail": format!("learner{:05}@bench.example.com", sequence % 25_000),
        "status": status,
        "assignedAt": format_timestamp(if event_type == EventType::Assigned { at } else { assigned_at }),
        "dueDate": format_timestamp(due_at),
        "startedAt": started.map(format_timestamp),
        "completedAt": completed.map(format_timestamp),
        "priority": priority,
    });
    let id = EventId::new();
    NewEvent {
        id,
        org_id,
        event_type,
        assignment_id,
        body: event_body(id, event_type.as_str(), at, data),
        traceparent: None,
    }
}

/// Writes `rate` events per second, one transaction per 10 ms tick, for the warm-up and the
/// measured window; the schedule is kept (late ticks run at once) so the offered rate is honest.
async fn generate(
    core: &CoreConfig,
    pool: &PgPool,
    org_id: OrgId,
    args: &WebhookBenchArgs,
) -> anyhow::Result<Generated> {
    let flows: Vec<FlowId> = (0..20).map(|_| FlowId::new()).collect();
    let warmup_ticks = args.warmup * TICKS_PER_SECOND;
    let total_ticks = (args.warmup + args.duration) * TICKS_PER_SECOND;
    let tick_length = Duration::from_secs(1) / TICKS_PER_SECOND as u32;
    let mut interval = tokio::time::interval(tick_length);
    interval.set_missed_tick_behavior(MissedTickBehavior::Burst);
    let mut generated = Generated {
        measured: HashSet::with_capacity((args.rate * args.duration) as usize),
        warmup_events: 0,
        window: Duration::ZERO,
        stopped: Instant::now(),
        commits: Histogram::new_with_bounds(1, 60_000_000, 3)?,
        late_ticks: 0,
        worst_lateness: Duration::ZERO,
    };
    let mut window_start = Instant::now();
    let mut sequence = 0u64;
    let mut analyzing = None;
    for tick in 0..total_ticks {
        let scheduled = interval.tick().await.into_std();
        let lateness = scheduled.elapsed();
        if tick == warmup_ticks {
            window_start = scheduled;
        }
        if tick == warmup_ticks / 2 && warmup_ticks > 0 {
            analyzing = Some(tokio::spawn(analyze(core.clone())));
        }
        let measured = tick >= warmup_ticks;
        if measured {
            if lateness > tick_length {
                generated.late_ticks += 1;
            }
            generated.worst_lateness = generated.worst_lateness.max(lateness);
        }
        let count = events_before(tick + 1, args.rate) - events_before(tick, args.rate);
        if count == 0 {
            continue;
        }
        let started = Instant::now();
        let at = Utc::now();
        let events: Vec<NewEvent> = (0..count)
            .map(|offset| new_event(org_id, sequence + offset, &flows, at))
            .collect();
        sequence += count;
        let mut transaction = pool.begin().await?;
        outbox::insert(&mut transaction, Lane::Bulk, &events).await?;
        transaction.commit().await?;
        if measured {
            let _ = generated
                .commits
                .record(started.elapsed().as_micros().max(1) as u64);
            generated
                .measured
                .extend(events.iter().map(|event| event.id.to_string()));
        } else {
            generated.warmup_events += count;
        }
    }
    generated.stopped = Instant::now();
    if let Some(analyzing) = analyzing {
        analyzing.await??;
    }
    // The window ends when its last tick does, or later when the generator fell behind.
    generated.window = (window_start + Duration::from_secs(args.duration))
        .max(generated.stopped)
        .duration_since(window_start);
    Ok(generated)
}

/// Creates the benchmark organization and its endpoints, pointing at the receiver; secrets are
/// stored as the API stores them (sealed when `WEBHOOK_SECRET_KEY` is set).
/// How the benchmarks run their receiver: endpoints answer 204 at once, a path that is none of
/// theirs 404; only the tally is kept, not the requests.
pub fn receiver_options(port: u16) -> Options {
    Options {
        port,
        keep_requests: false,
        default_behaviour: Behaviour::Status(404),
    }
}

/// Creates one endpoint per secret for `org_id`, endpoint `i` at path `i` of `receiver`
/// (which checks its signatures) and subscribed to `events(i)` (empty: every type).
pub async fn create_endpoints(
    pool: &PgPool,
    secrets: &[String],
    vault: &SecretVault,
    receiver: &Receiver,
    org_id: OrgId,
    events: impl Fn(usize) -> Vec<String>,
) -> anyhow::Result<Vec<WebhookEndpointId>> {
    create_endpoints_at(pool, secrets, vault, receiver, org_id, "", events).await
}

/// [`create_endpoints`] at paths `{prefix}{i}`, so several organizations share one receiver.
pub async fn create_endpoints_at(
    pool: &PgPool,
    secrets: &[String],
    vault: &SecretVault,
    receiver: &Receiver,
    org_id: OrgId,
    prefix: &str,
    events: impl Fn(usize) -> Vec<String>,
) -> anyhow::Result<Vec<WebhookEndpointId>> {
    let mut endpoints = Vec::with_capacity(secrets.len());
    for (index, secret) in secrets.iter().enumerate() {
        let path = format!("{prefix}{index}");
        receiver.set(&path, Behaviour::Status(204));
        receiver.sign(&path, secret);
        let mut transaction = pool.begin().await?;
        let id = WebhookEndpointId::new();
        let endpoint = webhooks::endpoints::create(
            &mut transaction,
            org_id,
            &webhooks::endpoints::NewEndpoint {
                id,
                url: receiver.url(&path),
                description: Some(format!("Benchmark receiver {index}")),
                events: flow_domain::webhook::endpoint::parse_events(&events(index))?,
                secret: vault.seal(id, secret)?,
            },
        )
        .await?
        .context("the organization has too many endpoints")?;
        transaction.commit().await?;
        endpoints.push(endpoint.id);
    }
    Ok(endpoints)
}

/// Waits until the webhook-worker consumes its queue, so the warm-up does not start against an
/// absent consumer.
async fn wait_for_consumer(core: &CoreConfig) -> anyhow::Result<()> {
    let topology = Topology::new(&core.queue_prefix, core.delivery_limit);
    let connection = flow_common::amqp::connect(&core.amqp_url, "flowctl-bench").await?;
    // Declared here too, so the passive declares below never look for queues not there yet.
    let setup = connection.create_channel().await?;
    topology.declare(&setup).await?;
    drop(setup.close(200, "topology declared".into()).await);
    let deadline = Instant::now() + Duration::from_secs(60);
    let ready = loop {
        let depths = flow_common::amqp::queue_depths(&connection, &topology).await?;
        if depths
            .iter()
            .any(|(kind, _, consumers)| *kind == QueueKind::Webhooks && *consumers > 0)
        {
            break true;
        }
        if Instant::now() > deadline {
            break false;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    drop(connection.close(200, "done".into()).await);
    if !ready {
        bail!("the webhook-worker did not start consuming within 60 s");
    }
    Ok(())
}

/// Vacuums the tables the benchmark writes, so dead rows of earlier runs (their deliveries are
/// deleted at the end) do not slow this one, and says so when autovacuum is off.
async fn vacuum(core: &CoreConfig) -> anyhow::Result<()> {
    let mut connection = quiet_connection(core).await?;
    let autovacuum: String = sqlx::query_scalar("SELECT current_setting('autovacuum')")
        .fetch_one(&mut connection)
        .await?;
    let started = Instant::now();
    sqlx::query("VACUUM (ANALYZE) outbox, webhook_deliveries, webhook_attempts")
        .execute(&mut connection)
        .await
        .context("vacuuming the outbox and webhook tables")?;
    tracing::info!(elapsed = ?started.elapsed(), "vacuumed the outbox and webhook tables");
    drop(sqlx::Connection::close(connection).await);
    if autovacuum != "on" {
        println!(
            "note:            autovacuum is {autovacuum} on this server: dead rows of this run stay until the next run's VACUUM"
        );
    }
    Ok(())
}

/// Refreshes the planner statistics of the webhook tables halfway through the warm-up, as
/// autoanalyze would once they have grown. Without it (autovacuum is off on some servers), plans
/// made while the tables were empty stay cached: the webhook_attempts foreign-key check then
/// scans webhook_deliveries sequentially for every attempt recorded.
async fn analyze(core: CoreConfig) -> anyhow::Result<()> {
    let mut connection = quiet_connection(&core).await?;
    sqlx::query("ANALYZE webhook_deliveries, webhook_attempts")
        .execute(&mut connection)
        .await
        .context("analyzing the webhook tables")?;
    drop(sqlx::Connection::close(connection).await);
    Ok(())
}

/// A connection without slow-statement warnings, for maintenance statements expected to take a
/// while.
async fn quiet_connection(core: &CoreConfig) -> anyhow::Result<sqlx::PgConnection> {
    use sqlx::{ConnectOptions, Connection};
    let options: sqlx::postgres::PgConnectOptions = core.database_url.parse()?;
    sqlx::PgConnection::connect_with(&options.disable_statement_logging())
        .await
        .context("connecting to Postgres")
}

/// Unpublished outbox rows (another run's or another stack's events the relay publishes first),
/// read as the relay's gauges read them (at most [`outbox::BACKLOG_COUNT_LIMIT`]).
async fn outbox_backlog(pool: &PgPool) -> anyhow::Result<i64> {
    Ok(outbox::backlog(pool).await?.0)
}

/// Where the time of the measured deliveries went: milliseconds after the state change at which
/// each stage began, from the timestamps Postgres recorded, and the HTTP attempt's duration.
struct Stages {
    sent: Histogram<u64>,
    written: Histogram<u64>,
    attempt: Histogram<u64>,
    deliveries: u64,
    succeeded: u64,
    retried: u64,
}

/// One delivery's timestamps, in milliseconds after its event's timestamp.
#[derive(sqlx::FromRow)]
struct DeliveryTimes {
    event_id: EventId,
    written: f64,
    sent: Option<f64>,
    attempt: Option<f64>,
    attempts: i32,
    succeeded: bool,
}

/// Reads the timestamps of the measured deliveries back from Postgres.
async fn stages(
    pool: &PgPool,
    endpoints: &[WebhookEndpointId],
    measured: &HashSet<String>,
) -> anyhow::Result<Stages> {
    // One endpoint at a time: each read stays short and uses the endpoint's index.
    let mut rows: Vec<DeliveryTimes> = Vec::new();
    for endpoint in endpoints {
        rows.extend(
            sqlx::query_as::<_, DeliveryTimes>(
                "SELECT d.event_id,
                        extract(epoch FROM d.created_at - d.event_at)::float8 * 1000 AS written,
                        extract(epoch FROM a.attempted_at - d.event_at)::float8 * 1000 AS sent,
                        a.latency_ms::float8 AS attempt,
                        d.attempts, d.status = 'succeeded' AS succeeded
                 FROM webhook_deliveries d
                 LEFT JOIN webhook_attempts a ON a.delivery_id = d.id AND a.attempt = 1
                 WHERE d.endpoint_id = $1",
            )
            .bind(endpoint)
            .fetch_all(pool)
            .await?,
        );
    }
    let histogram = || Histogram::<u64>::new_with_bounds(1, 60_000_000, 3);
    let mut stages = Stages {
        sent: histogram()?,
        written: histogram()?,
        attempt: histogram()?,
        deliveries: 0,
        succeeded: 0,
        retried: 0,
    };
    let micros = |ms: f64| (ms * 1000.0).max(1.0) as u64;
    for row in rows {
        if !measured.contains(&row.event_id.to_string()) {
            continue;
        }
        stages.deliveries += 1;
        stages.succeeded += u64::from(row.succeeded);
        stages.retried += u64::from(row.attempts > 1);
        let _ = stages.written.record(micros(row.written));
        if let Some(sent) = row.sent {
            let _ = stages.sent.record(micros(sent));
        }
        if let Some(attempt) = row.attempt {
            let _ = stages.attempt.record(micros(attempt));
        }
    }
    Ok(stages)
}

/// Sets up, runs the load, waits for the deliveries, reports and cleans up.
async fn measure(core: &CoreConfig, args: &WebhookBenchArgs) -> anyhow::Result<()> {
    // The workers' own metrics, read back at the end to show where the time went.
    let metrics = flow_common::telemetry::metrics_handle();
    crate::up::prepare_database(core).await?;
    let pool = crate::admin::pool(core).await?;

    let secrets: Vec<String> = (0..args.endpoints)
        .map(|_| flow_domain::webhook::signing::generate_secret())
        .collect();
    let mut receiver = Receiver::start_with(receiver_options(args.port)).await?;
    let address = receiver.address();

    let mut relay: flow_workers::relay::RelayConfig = flow_common::config::from_env();
    relay.core = core.clone();
    let mut webhook: flow_workers::webhook::WebhookWorkerConfig = flow_common::config::from_env();
    webhook.core = core.clone();
    webhook.secrets = super::system::secret_vault();
    webhook.policy.allow_private = true;
    webhook.policy.allow_http = true;
    println!(
        "bench webhooks: {} endpoints × {} events/s = {} deliveries/s offered, {} s (+{} s warm-up), receiver {address}, queues {}",
        args.endpoints,
        args.rate,
        args.rate * args.endpoints as u64,
        args.duration,
        args.warmup,
        core.queue_prefix
    );
    vacuum(core).await?;
    let org_id = orgs::create(
        &pool,
        &orgs::NewOrganization {
            name: "Webhook benchmark".into(),
            tier: orgs::Tier::Enterprise,
            timezone: chrono_tz::Tz::UTC,
            assign_limit_per_minute: None,
            report_limit_per_minute: None,
        },
    )
    .await?
    .id;
    let endpoints = create_endpoints(&pool, &secrets, &webhook.secrets, &receiver, org_id, |_| {
        Vec::new()
    })
    .await?;

    let workers_stop = CancellationToken::new();
    tracing::info!(
        relay_batch_size = relay.batch_size,
        webhook_concurrency = webhook.concurrency,
        webhook_endpoint_concurrency = webhook.endpoint_concurrency,
        webhook_prefetch = webhook.prefetch,
        webhook_batch_size = webhook.batch_size,
        "starting the relay and the webhook-worker"
    );
    let relay_task = tokio::spawn(flow_workers::runtime::run(relay, workers_stop.clone()));
    let webhook_task = tokio::spawn(flow_workers::runtime::run(webhook, workers_stop.clone()));

    let outcome = async {
        wait_for_consumer(core).await?;
        let backlog = outbox_backlog(&pool).await?;
        if backlog > 0 {
            println!("outbox:          {backlog} unpublished events of other runs; waiting for the relay to publish them first");
            let deadline = Instant::now() + Duration::from_secs(300);
            while outbox_backlog(&pool).await? > 0 {
                if Instant::now() > deadline {
                    bail!("the relay did not drain the outbox backlog within 300 s");
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        let generated = generate(core, &pool, org_id, args).await?;
        let expected_all =
            (generated.warmup_events + generated.measured.len() as u64) * args.endpoints as u64;
        let drain_deadline = generated.stopped + DRAIN_TIMEOUT;
        while (receiver.unique() as u64) < expected_all && Instant::now() < drain_deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        anyhow::Ok(generated)
    }
    .await;

    workers_stop.cancel();
    for (name, mut task) in [("relay", relay_task), ("webhook-worker", webhook_task)] {
        match tokio::time::timeout(Duration::from_secs(30), &mut task).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(error))) => tracing::warn!(error = format!("{error:#}"), "{name} failed"),
            Ok(Err(error)) => tracing::warn!(%error, "{name} panicked"),
            Err(_) => {
                // Stopped for good, so none of its writes races the clean-up below.
                tracing::warn!("{name} did not stop within 30 s; aborting it");
                task.abort();
                drop(task.await);
            }
        }
    }
    receiver.stop().await;

    let result = match outcome {
        Ok(generated) => {
            let result = report(&pool, &endpoints, args, &receiver, &generated).await;
            print_worker_metrics(&metrics.render());
            result
        }
        Err(error) => Err(error),
    };
    // Remove the endpoints (and their deliveries), so no webhook-worker sharing this database
    // ever retries toward the receiver that is gone.
    for endpoint in endpoints {
        let deleted = async {
            let mut transaction = pool.begin().await?;
            webhooks::endpoints::delete(&mut transaction, org_id, endpoint).await?;
            transaction.commit().await
        };
        if let Err(error) = deleted.await {
            tracing::warn!(%error, "could not delete a benchmark endpoint");
        }
    }
    pool.close().await;
    result
}

/// Sum of the samples of `name` whose labels contain `label` (Prometheus text format).
fn metric(text: &str, name: &str, label: &str) -> f64 {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            let (series_name, labels) = series.split_once('{').unwrap_or((series, ""));
            (series_name == name && labels.contains(label)).then(|| value.parse::<f64>().ok())?
        })
        .fold(0.0, |total, value| total + value)
}

/// Prints the relay's and the webhook-worker's counters for the whole run (warm-up included).
fn print_worker_metrics(text: &str) {
    let relay = r#"worker="outbox-relay""#;
    let relay_batches = metric(text, "flow_worker_batch_seconds_count", relay);
    let relay_seconds = metric(text, "flow_worker_batch_seconds_sum", relay);
    let published = metric(text, "flow_worker_messages_total", relay);
    let confirms = metric(text, "flow_publish_confirm_seconds_count", "");
    let confirm_seconds = metric(text, "flow_publish_confirm_seconds_sum", "");
    let fanned_out = metric(
        text,
        "flow_worker_messages_total",
        r#"outcome="fanned_out""#,
    );
    let attempts = |result: &str| {
        metric(
            text,
            "flow_webhook_attempts_total",
            &format!(r#"result="{result}""#),
        )
    };
    let attempt_count = metric(text, "flow_webhook_attempt_seconds_count", "");
    let attempt_seconds = metric(text, "flow_webhook_attempt_seconds_sum", "");
    let mean_ms = |sum: f64, count: f64| {
        if count > 0.0 {
            sum / count * 1000.0
        } else {
            f64::NAN
        }
    };
    println!(
        "worker metrics:  (whole run) relay: {published:.0} events in {relay_batches:.0} batches ({:.1} per batch, {:.1} ms per batch, publish confirm {:.2} ms mean); webhook-worker: {fanned_out:.0} events fanned out, attempts {:.0} succeeded, {:.0} failed, {:.0} deferred to Postgres (endpoint queue full), attempt {:.2} ms mean",
        if relay_batches > 0.0 {
            published / relay_batches
        } else {
            f64::NAN
        },
        mean_ms(relay_seconds, relay_batches),
        mean_ms(confirm_seconds, confirms),
        attempts("success"),
        attempts("failure") + attempts("gone"),
        attempts("deferred"),
        mean_ms(attempt_seconds, attempt_count),
    );
}

/// Prints what the receiver saw of the measured events; returns the deliveries received and
/// expected, and the signature failures.
fn print_deliveries(
    log: &Tally,
    args: &WebhookBenchArgs,
    generated: &Generated,
) -> anyhow::Result<(u64, u64, u64)> {
    let window = generated.window.as_secs_f64();
    let measured_events = generated.measured.len() as u64;
    let expected = measured_events * args.endpoints as u64;
    let mut latencies = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
    let mut received = 0u64;
    let mut first: Option<Instant> = None;
    let mut last: Option<Instant> = None;
    let mut last_any: Option<Instant> = None;
    for arrival in &log.arrivals {
        last_any = last_any.max(Some(arrival.arrived));
        if !generated.measured.contains(&arrival.event_id) {
            continue;
        }
        received += 1;
        first = Some(first.map_or(arrival.arrived, |at| at.min(arrival.arrived)));
        last = last.max(Some(arrival.arrived));
        let latency = (arrival.arrived_at - arrival.event_at)
            .num_microseconds()
            .unwrap_or(i64::MAX);
        let _ = latencies.record(latency.max(1) as u64);
    }
    let ms = |micros: u64| micros as f64 / 1000.0;
    println!();
    println!(
        "generated:       {measured_events} events in {window:.2} s = {:.0} events/s offered (asked {}), plus {} in the warm-up",
        measured_events as f64 / window,
        args.rate,
        generated.warmup_events
    );
    println!(
        "                 insert+commit per 10 ms transaction: p50 {:.2} ms  p99 {:.2} ms  max {:.2} ms; {} ticks started late (worst {:.1} ms)",
        ms(generated.commits.value_at_quantile(0.50)),
        ms(generated.commits.value_at_quantile(0.99)),
        ms(generated.commits.max()),
        generated.late_ticks,
        generated.worst_lateness.as_secs_f64() * 1000.0
    );
    println!(
        "deliveries:      expected {expected}, received {received}, missing {}, duplicates {} (whole run), signature failures {}, malformed {}, unknown endpoint {}",
        expected.saturating_sub(received),
        log.duplicates,
        log.signature_failures,
        log.malformed,
        log.unknown_endpoint
    );
    let spread = match (first, last) {
        (Some(first), Some(last)) => last.duration_since(first).as_secs_f64(),
        _ => 0.0,
    };
    println!(
        "delivered:       {:.0} deliveries/s over the {window:.2} s window; {:.0} deliveries/s first-to-last arrival ({spread:.2} s)",
        received as f64 / window,
        if spread > 0.0 {
            received as f64 / spread
        } else {
            0.0
        }
    );
    if !latencies.is_empty() {
        println!(
            "latency:         p50 {:.2} ms  p90 {:.2} ms  p99 {:.2} ms  max {:.2} ms (event timestamp → arrival at the endpoint)",
            ms(latencies.value_at_quantile(0.50)),
            ms(latencies.value_at_quantile(0.90)),
            ms(latencies.value_at_quantile(0.99)),
            ms(latencies.max())
        );
    }
    match last_any {
        Some(at) if at >= generated.stopped => println!(
            "drained:         last delivery arrived {:.0} ms after the load stopped",
            at.duration_since(generated.stopped).as_secs_f64() * 1000.0
        ),
        Some(_) => println!("drained:         last delivery arrived before the load stopped"),
        None => println!("drained:         nothing arrived"),
    }
    let per_endpoint = log.per_endpoint.values();
    println!(
        "per endpoint:    min {} max {} (whole run)",
        per_endpoint.clone().min().copied().unwrap_or(0),
        per_endpoint.max().copied().unwrap_or(0)
    );
    Ok((received, expected, log.signature_failures))
}

/// Prints the figures of the run; fails when a signature did not verify or nothing arrived.
async fn report(
    pool: &PgPool,
    endpoints: &[WebhookEndpointId],
    args: &WebhookBenchArgs,
    receiver: &Receiver,
    generated: &Generated,
) -> anyhow::Result<()> {
    let (received, expected, signature_failures) =
        print_deliveries(&receiver.tally(), args, generated)?;

    let stages = stages(pool, endpoints, &generated.measured).await?;
    let percentiles = |histogram: &Histogram<u64>| {
        format!(
            "p50 {:>7.1} ms  p99 {:>7.1} ms  max {:>7.1} ms",
            histogram.value_at_quantile(0.50) as f64 / 1000.0,
            histogram.value_at_quantile(0.99) as f64 / 1000.0,
            histogram.max() as f64 / 1000.0
        )
    };
    println!(
        "stages:          ms after the state change, from Postgres timestamps ({} deliveries, {} succeeded, {} retried)",
        stages.deliveries, stages.succeeded, stages.retried
    );
    println!(
        "  first attempt sent             {}",
        percentiles(&stages.sent)
    );
    println!(
        "  attempt duration (HTTP, in ms) {}",
        percentiles(&stages.attempt)
    );
    // A delivery is written after its first attempt when the attempt was made inline (an
    // endpoint that answers in time), before it otherwise.
    println!(
        "  delivery row written           {}",
        percentiles(&stages.written)
    );
    if let Some((rss, peak)) = super::system::memory_mib(std::process::id()) {
        println!(
            "memory:          {rss:.0} MiB resident now, peak {peak:.0} MiB (the whole bench process: load generator, relay, webhook-worker and receiver)"
        );
    }
    if received < expected {
        tracing::warn!(missing = expected - received, "not every delivery arrived");
    }
    if signature_failures > 0 {
        bail!("{signature_failures} deliveries had a bad signature");
    }
    if received == 0 {
        bail!("no delivery arrived");
    }
    Ok(())
}
