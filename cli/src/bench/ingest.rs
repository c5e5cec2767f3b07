//! `flowctl bench ingest`: events in and progress in (issue 38) against the plain REST calls
//! they replace, each through the whole system.
//!
//! Every component runs as its own process (`flowctl up --only …`: api, assign-worker,
//! outbox-relay). Four phases, each with distinct people and its own organization, so no
//! request is answered from a dedupe path:
//!
//! 1. Baseline assign: `POST /v1/flows/assign`, one person per request.
//! 2. CloudEvents: `POST /v1/events` in batch mode (`--batch` events a request), one
//!    `com.example.hr.employee.hired` event per person, an event trigger (created through
//!    `POST /v1/event-triggers`) assigning the flow to the person the event names.
//! 3. Baseline progress: `POST /v1/assignments/{id}/progress`, one module completed per request,
//!    on phase 1's assignments (two modules each: every assignment ends completed).
//! 4. xAPI: `POST /xapi/statements`, arrays of `--batch` `completed` statements about the
//!    modules' activity IRIs, on phase 2's assignments.
//!
//! Reported per phase: items (assignments or module completions) per second accepted, request
//! latency p50/p99/max, and the time from the first request until the last item was applied in
//! Postgres. At the end of each phase it checks what Postgres holds: every person assigned once
//! (one `flow.assigned` each), every event recorded once, every module completed once and every
//! assignment completed once (one `flow.completed` each); anything lost or twice fails the
//! command.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;
use flow_common::amqp::QueueKind;
use flow_common::config::CoreConfig;
use flow_common::db::orgs;
use flow_domain::ids::{AssignmentId, FlowId, ModuleId, OrgId};
use hdrhistogram::Histogram;
use serde_json::{Value, json};
use sqlx::PgPool;

use super::assign::{AssignBenchArgs, Tenant, tenant, wait_for_consumers, wait_ready};
use super::system::{Watched, spawn_components, stop_components};

/// Options of the ingest benchmark.
#[derive(Debug, Clone, Args)]
pub struct IngestBenchArgs {
    /// People in each phase (each assigned once, each assignment's two modules completed).
    #[arg(long, default_value_t = 10_000)]
    pub people: usize,
    /// Events or statements in each request of the CloudEvents and xAPI phases (1 to 1,000).
    #[arg(long, default_value_t = 100)]
    pub batch: usize,
    /// Requests in flight at once.
    #[arg(long, default_value_t = 16)]
    pub concurrency: usize,
    /// Longest a phase may take, from its first request to its last item applied, in seconds;
    /// past it the phase stops sending and the checks report what is missing.
    #[arg(long, default_value_t = 900)]
    pub timeout: u64,
    /// Port of the API child process.
    #[arg(long, default_value_t = 18_380)]
    pub port: u16,
}

/// Runs the benchmark on queues of its own (deleted afterwards).
pub async fn run(core: &CoreConfig, args: IngestBenchArgs) -> anyhow::Result<()> {
    if args.people == 0 || args.concurrency == 0 || args.timeout == 0 {
        bail!("--people, --concurrency and --timeout must be positive");
    }
    if !(1..=1_000).contains(&args.batch) {
        bail!("--batch must be 1 to 1,000 (the most one request takes)");
    }
    super::system::on_own_queues(core, |own| async move { measure(&own, &args).await }).await
}

/// The type of the events the CloudEvents phase sends.
const HIRED: &str = "com.example.hr.employee.hired";
/// Their source.
const SOURCE: &str = "https://hr.bench.example.com";
/// The xAPI verb of the statements.
const COMPLETED: &str = "http://adlnet.gov/expapi/verbs/completed";

/// What a phase sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Assign,
    Events,
    Progress,
    Statements,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Assign => "POST /v1/flows/assign, one person a request (baseline)",
            Kind::Events => "POST /v1/events, CloudEvents batches, a trigger assigning each person",
            Kind::Progress => {
                "POST /v1/assignments/{id}/progress, one module completed a request (baseline)"
            }
            Kind::Statements => "POST /xapi/statements, batches of completed statements",
        }
    }

    /// The unit of what a phase applies.
    fn item(self) -> &'static str {
        match self {
            Kind::Assign | Kind::Events => "assignments",
            Kind::Progress | Kind::Statements => "module completions",
        }
    }
}

/// One organization's people, flow and modules.
struct Org {
    tenant: Tenant,
    flow: FlowId,
    /// The flow's two modules and their activity IRIs.
    modules: Vec<(ModuleId, String)>,
    /// The people, in order.
    emails: Vec<String>,
}

impl Org {
    async fn new(pool: &PgPool, name: &str, people: usize, port: u16) -> anyhow::Result<Self> {
        let organization = AssignBenchArgs {
            concurrency: 1,
            duration: 0,
            warmup: 0,
            users: Some(people),
            flows: 1,
            bulk: 1,
            request_ids: false,
            two_part: false,
            no_baseline: true,
            endpoints: 0,
            base_url: None,
            port,
        };
        let tenant = tenant(pool, name, &organization).await?;
        let flow = tenant.flows[0];
        // The modules' activity IRIs, as learning content names them.
        let modules: Vec<(ModuleId, String)> = sqlx::query_as(
            "UPDATE modules SET activity_id = 'https://content.bench.example.com/'
                                || flow_id::text || '/module-' || position
             WHERE flow_id = $1 RETURNING id, activity_id",
        )
        .bind(flow)
        .fetch_all(pool)
        .await?;
        let emails: Vec<String> = sqlx::query_scalar(
            "SELECT email FROM users WHERE org_id = $1 ORDER BY email_normalized",
        )
        .bind(tenant.org_id)
        .fetch_all(pool)
        .await?;
        if emails.len() != people || modules.len() != 2 {
            bail!("the organization was not seeded as asked");
        }
        Ok(Self {
            tenant,
            flow,
            modules,
            emails,
        })
    }

    fn org_id(&self) -> OrgId {
        self.tenant.org_id
    }

    async fn bulk_shard(&self, pool: &PgPool) -> anyhow::Result<u16> {
        let org = orgs::get(pool, self.org_id())
            .await?
            .context("benchmark organization gone")?;
        Ok(flow_common::amqp::bulk_shard(org.bulk_lane))
    }

    /// The trigger assigning the flow to the person a hire event names, through the API.
    async fn create_trigger(&self, client: &reqwest::Client, base_url: &str) -> anyhow::Result<()> {
        let response = client
            .post(format!("{base_url}/v1/event-triggers"))
            .bearer_auth(&self.tenant.key)
            .json(&json!({
                "name": "New hires get onboarding",
                "match": {"type": HIRED, "source": SOURCE},
                "userEmailPointer": "/data/employee/email",
                "action": "assign",
                "flowId": self.flow.to_string(),
                "due": {"days": 30},
                "priority": "high"
            }))
            .send()
            .await
            .context("creating the event trigger")?;
        let status = response.status();
        if status != reqwest::StatusCode::CREATED {
            let body = response.text().await.unwrap_or_default();
            bail!("creating the event trigger answered {status}: {body}");
        }
        Ok(())
    }

    /// The organization's assignments with their assignee, in the order of `emails`.
    async fn assignments(&self, pool: &PgPool) -> anyhow::Result<Vec<AssignmentId>> {
        Ok(sqlx::query_scalar(
            "SELECT a.id FROM assignments a JOIN users u ON u.id = a.user_id
             WHERE a.org_id = $1 ORDER BY u.email_normalized",
        )
        .bind(self.org_id())
        .fetch_all(pool)
        .await?)
    }
}

/// One request of a phase: its path, content type, body and the items it carries.
struct Request {
    path: String,
    content_type: &'static str,
    body: String,
    items: u64,
}

/// The requests of a phase, in order.
fn requests(kind: Kind, org: &Org, assignments: &[AssignmentId], batch: usize) -> Vec<Request> {
    let json = "application/json";
    match kind {
        Kind::Assign => org
            .emails
            .iter()
            .map(|email| Request {
                path: "/v1/flows/assign".into(),
                content_type: json,
                body:
                    json!({"flowId": org.flow.to_string(), "userEmail": email, "priority": "high"})
                        .to_string(),
                items: 1,
            })
            .collect(),
        Kind::Events => org
            .emails
            .chunks(batch)
            .enumerate()
            .map(|(chunk, emails)| {
                let events: Vec<Value> = emails
                    .iter()
                    .enumerate()
                    .map(|(index, email)| {
                        json!({
                            "specversion": "1.0",
                            "id": format!("hire-{}", chunk * batch + index),
                            "source": SOURCE,
                            "type": HIRED,
                            "time": chrono::Utc::now().to_rfc3339(),
                            "datacontenttype": "application/json",
                            "data": {"employee": {"email": email, "department": "Sales"}}
                        })
                    })
                    .collect();
                Request {
                    path: "/v1/events".into(),
                    content_type: "application/cloudevents-batch+json",
                    body: Value::Array(events).to_string(),
                    items: emails.len() as u64,
                }
            })
            .collect(),
        Kind::Progress => assignments
            .iter()
            .flat_map(|assignment| {
                org.modules.iter().map(move |(module, _)| Request {
                    path: format!("/v1/assignments/{assignment}/progress"),
                    content_type: json,
                    body: json!({"moduleId": module.to_string(), "status": "completed"})
                        .to_string(),
                    items: 1,
                })
            })
            .collect(),
        Kind::Statements => {
            let statements: Vec<Value> = org
                .emails
                .iter()
                .flat_map(|email| {
                    org.modules.iter().map(move |(_, activity)| {
                        json!({
                            "id": uuid::Uuid::new_v4().to_string(),
                            "actor": {"objectType": "Agent", "mbox": format!("mailto:{email}")},
                            "verb": {"id": COMPLETED, "display": {"en-US": "completed"}},
                            "object": {"objectType": "Activity", "id": activity},
                            "result": {"completion": true, "success": true,
                                       "score": {"scaled": 0.9}, "duration": "PT12M"}
                        })
                    })
                })
                .collect();
            statements
                .chunks(batch)
                .map(|chunk| Request {
                    path: "/xapi/statements".into(),
                    content_type: json,
                    body: Value::Array(chunk.to_vec()).to_string(),
                    items: chunk.len() as u64,
                })
                .collect()
        }
    }
}

/// What the senders saw.
struct Sent {
    /// Items in requests answered with success, and items their answers say were not taken
    /// (an event not `accepted`, a statement unmatched).
    accepted: u64,
    refused_items: u64,
    latencies: Histogram<u64>,
    statuses: BTreeMap<String, u64>,
    took: Duration,
}

/// Sends `requests`, `concurrency` at a time, until `deadline`.
async fn send(
    client: &reqwest::Client,
    base_url: &str,
    key: &str,
    kind: Kind,
    requests: Vec<Request>,
    concurrency: usize,
    deadline: Instant,
) -> anyhow::Result<Sent> {
    let requests = Arc::new(requests);
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut streams = Vec::new();
    for _ in 0..concurrency {
        let (client, next, requests) = (client.clone(), next.clone(), requests.clone());
        let (base_url, key) = (base_url.to_owned(), key.to_owned());
        streams.push(tokio::spawn(async move {
            let mut latencies = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
            let mut statuses: BTreeMap<String, u64> = BTreeMap::new();
            let (mut accepted, mut refused_items) = (0u64, 0u64);
            loop {
                let index = next.fetch_add(1, Ordering::Relaxed);
                let Some(request) = requests.get(index) else {
                    break;
                };
                if Instant::now() > deadline {
                    *statuses.entry("not sent (timeout)".into()).or_default() += 1;
                    continue;
                }
                let mut builder = client
                    .post(format!("{base_url}{}", request.path))
                    .bearer_auth(&key)
                    .header("content-type", request.content_type)
                    .body(request.body.clone());
                if kind == Kind::Statements {
                    builder = builder.header("x-experience-api-version", "1.0.3");
                }
                let sent = Instant::now();
                let status = match builder.send().await {
                    Ok(response) => {
                        let status = response.status();
                        let unmatched: u64 = response
                            .headers()
                            .get("x-flow-unmatched-statements")
                            .and_then(|value| value.to_str().ok())
                            .and_then(|value| value.parse().ok())
                            .unwrap_or(0);
                        let body = response.bytes().await.unwrap_or_default();
                        if status.is_success() {
                            let _ = latencies.record(sent.elapsed().as_micros().max(1) as u64);
                            let refused = match kind {
                                Kind::Events => serde_json::from_slice::<Value>(&body)
                                    .ok()
                                    .and_then(|body| body["results"].as_array().cloned())
                                    .map_or(request.items, |results| {
                                        results
                                            .iter()
                                            .filter(|result| result["status"] != "accepted")
                                            .count() as u64
                                    }),
                                Kind::Statements => unmatched,
                                Kind::Assign | Kind::Progress => 0,
                            };
                            refused_items += refused;
                            accepted += request.items.saturating_sub(refused);
                        }
                        status.as_u16().to_string()
                    }
                    Err(error) => format!("transport error ({})", error.without_url()),
                };
                *statuses.entry(status).or_default() += 1;
            }
            anyhow::Ok((accepted, refused_items, latencies, statuses))
        }));
    }
    let mut sent = Sent {
        accepted: 0,
        refused_items: 0,
        latencies: Histogram::new_with_bounds(1, 60_000_000, 3)?,
        statuses: BTreeMap::new(),
        took: Duration::ZERO,
    };
    for stream in streams {
        let (accepted, refused_items, latencies, statuses) = stream.await??;
        sent.accepted += accepted;
        sent.refused_items += refused_items;
        sent.latencies.add(&latencies)?;
        for (status, count) in statuses {
            *sent.statuses.entry(status).or_default() += count;
        }
    }
    sent.took = started.elapsed();
    Ok(sent)
}

/// How many of the phase's items Postgres holds as applied.
async fn applied(pool: &PgPool, kind: Kind, org: OrgId) -> anyhow::Result<i64> {
    let query = match kind {
        Kind::Assign | Kind::Events => "SELECT count(*) FROM assignments WHERE org_id = $1",
        Kind::Progress | Kind::Statements => {
            "SELECT count(*) FROM module_progress p JOIN assignments a ON a.id = p.assignment_id
             WHERE a.org_id = $1 AND p.status = 'completed'"
        }
    };
    Ok(sqlx::query_scalar(query).bind(org).fetch_one(pool).await?)
}

/// A phase's figures and checks.
struct Outcome {
    kind: Kind,
    sent: Sent,
    /// First request → the last item applied, when every one was.
    applied_after: Option<Duration>,
    lost: u64,
    twice: u64,
}

impl Outcome {
    fn per_second(&self) -> f64 {
        self.sent.accepted as f64 / self.sent.took.as_secs_f64().max(1e-9)
    }

    fn applied_per_second(&self) -> Option<f64> {
        self.applied_after
            .map(|after| self.sent.accepted as f64 / after.as_secs_f64().max(1e-9))
    }
}

#[allow(clippy::too_many_arguments)]
async fn run_phase(
    pool: &PgPool,
    client: &reqwest::Client,
    base_url: &str,
    kind: Kind,
    org: &Org,
    args: &IngestBenchArgs,
    watched: &Watched,
) -> anyhow::Result<Outcome> {
    let assignments = match kind {
        Kind::Progress | Kind::Statements => org.assignments(pool).await?,
        Kind::Assign | Kind::Events => Vec::new(),
    };
    let requests = requests(kind, org, &assignments, args.batch);
    let expected = match kind {
        Kind::Assign | Kind::Events => org.emails.len(),
        Kind::Progress | Kind::Statements => org.emails.len() * org.modules.len(),
    } as i64;
    println!(
        "  sending         {} {} in {} requests, {} at a time",
        expected,
        kind.item(),
        requests.len(),
        args.concurrency
    );
    let started = Instant::now();
    let deadline = started + Duration::from_secs(args.timeout);
    let before = watched.sample();
    let sent = send(
        client,
        base_url,
        &org.tenant.key,
        kind,
        requests,
        args.concurrency,
        deadline,
    )
    .await?;
    let ms = |micros: u64| micros as f64 / 1000.0;
    println!(
        "  accepted        {} {} in {:.2} s = {:.0}/s ({} refused in answers)",
        sent.accepted,
        kind.item(),
        sent.took.as_secs_f64(),
        sent.accepted as f64 / sent.took.as_secs_f64().max(1e-9),
        sent.refused_items
    );
    println!(
        "  latency         p50 {:.2} ms  p99 {:.2} ms  max {:.2} ms a request",
        ms(sent.latencies.value_at_quantile(0.50)),
        ms(sent.latencies.value_at_quantile(0.99)),
        ms(sent.latencies.max())
    );
    println!("  responses       {:?}", sent.statuses);
    let mut count = applied(pool, kind, org.org_id()).await?;
    while count < expected && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
        count = applied(pool, kind, org.org_id()).await?;
    }
    let applied_after = (count >= expected).then(|| started.elapsed());
    let after = watched.sample();
    match applied_after {
        Some(after) => println!(
            "  applied         the last of {count} {} {:.2} s after the first request ({:.2} s after the last answer): {:.0}/s end to end",
            kind.item(),
            after.as_secs_f64(),
            after.saturating_sub(sent.took).as_secs_f64(),
            count as f64 / after.as_secs_f64().max(1e-9)
        ),
        None => println!(
            "  applied         {count} of {expected} {} within {} s: the phase timed out",
            kind.item(),
            args.timeout
        ),
    }
    println!("  CPU from the first request to the last applied:");
    before.usage_until(&after).print(&watched.peak_memory());
    let (lost, twice) = check(pool, kind, org, expected).await?;
    Ok(Outcome {
        kind,
        sent,
        applied_after,
        lost,
        twice,
    })
}

/// Counts what Postgres holds against what was sent; prints it and answers (lost, twice).
async fn check(pool: &PgPool, kind: Kind, org: &Org, expected: i64) -> anyhow::Result<(u64, u64)> {
    let org_id = org.org_id();
    let people = org.emails.len() as i64;
    let (assignments, assignees): (i64, i64) = sqlx::query_as(
        "SELECT count(*), count(DISTINCT user_id) FROM assignments WHERE org_id = $1",
    )
    .bind(org_id)
    .fetch_one(pool)
    .await?;
    let event_counts = |event_type: &'static str| async move {
        let counts: (i64, i64) = sqlx::query_as(
            "SELECT count(*), count(DISTINCT assignment_id) FROM outbox
             WHERE org_id = $1 AND event_type = $2",
        )
        .bind(org_id)
        .bind(event_type)
        .fetch_one(pool)
        .await?;
        anyhow::Ok(counts)
    };
    let (assigned_events, assigned_distinct) = event_counts("flow.assigned").await?;
    let mut lost = vec![people - assignees, assignments - assigned_distinct];
    let mut twice = vec![assignments - assignees, assigned_events - assigned_distinct];
    let mut line = format!(
        "  check           assignments {assignments} for {assignees} of {people} people; flow.assigned {assigned_events} for {assigned_distinct} assignments"
    );
    match kind {
        Kind::Events => {
            let (recorded, distinct): (i64, i64) = sqlx::query_as(
                "SELECT count(*), count(DISTINCT (source, event_id)) FROM inbound_events
                 WHERE org_id = $1",
            )
            .bind(org_id)
            .fetch_one(pool)
            .await?;
            lost.push(people - distinct);
            twice.push(recorded - distinct);
            line.push_str(&format!(
                "; events recorded {recorded} ({distinct} distinct)"
            ));
        }
        Kind::Progress | Kind::Statements => {
            let (completions, distinct): (i64, i64) = sqlx::query_as(
                "SELECT count(*), count(DISTINCT (p.assignment_id, p.module_id))
                 FROM module_progress p JOIN assignments a ON a.id = p.assignment_id
                 WHERE a.org_id = $1 AND p.status = 'completed'",
            )
            .bind(org_id)
            .fetch_one(pool)
            .await?;
            let completed: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM assignments WHERE org_id = $1 AND status = 'completed'",
            )
            .bind(org_id)
            .fetch_one(pool)
            .await?;
            let (completed_events, completed_distinct) = event_counts("flow.completed").await?;
            let (started_events, started_distinct) = event_counts("flow.started").await?;
            lost.extend([
                expected - distinct,
                people - completed,
                completed - completed_distinct,
            ]);
            twice.extend([
                completions - distinct,
                completed_events - completed_distinct,
                started_events - started_distinct,
            ]);
            line.push_str(&format!(
                "; modules completed {completions} ({distinct} distinct) of {expected}; assignments completed {completed}; flow.completed {completed_events} for {completed_distinct}; flow.started {started_events} for {started_distinct}"
            ));
            if kind == Kind::Statements {
                let stored: i64 =
                    sqlx::query_scalar("SELECT count(*) FROM xapi_statements WHERE org_id = $1")
                        .bind(org_id)
                        .fetch_one(pool)
                        .await?;
                lost.push(expected - stored);
                twice.push(stored - expected);
                line.push_str(&format!("; statements stored {stored}"));
            }
        }
        Kind::Assign => {}
    }
    println!("{line}");
    let sum = |counts: &[i64]| counts.iter().map(|count| (*count).max(0)).sum::<i64>() as u64;
    let (lost, twice) = (sum(&lost), sum(&twice));
    println!("  lost {lost}, applied twice {twice}");
    Ok((lost, twice))
}

async fn measure(core: &CoreConfig, args: &IngestBenchArgs) -> anyhow::Result<()> {
    crate::up::prepare_database(core).await?;
    let pool = crate::admin::pool(core).await?;
    let rest = Org::new(&pool, "Ingest benchmark: REST", args.people, args.port).await?;
    let ingest = Org::new(
        &pool,
        "Ingest benchmark: events and xAPI",
        args.people,
        args.port,
    )
    .await?;
    println!(
        "bench ingest: {} people a phase, batches of {}, {} requests at a time",
        args.people, args.batch, args.concurrency
    );
    println!(
        "  components: api, assign-worker, outbox-relay, each its own process; queues {}",
        core.queue_prefix
    );
    let mut watched = Watched::with_servers(core);
    let log = std::env::var("RUST_LOG").unwrap_or_else(|_| "warn,sqlx::query=error".into());
    let children = spawn_components(
        &["api", "assign-worker", "outbox-relay"],
        args.port,
        core,
        &[("RUST_LOG", log.as_str())],
        &mut watched,
    )?;
    let base_url = format!("http://127.0.0.1:{}", args.port);
    let outcome = async {
        wait_ready(&base_url).await?;
        let mut queues = vec![QueueKind::Assign, QueueKind::Progress];
        for org in [&rest, &ingest] {
            queues.push(QueueKind::BulkAssign(org.bulk_shard(&pool).await?));
        }
        wait_for_consumers(core, &queues).await?;
        let client = reqwest::Client::builder()
            .pool_max_idle_per_host(args.concurrency)
            .timeout(Duration::from_secs(60))
            .build()?;
        ingest.create_trigger(&client, &base_url).await?;
        let mut outcomes = Vec::new();
        for (number, (kind, org)) in [
            (Kind::Assign, &rest),
            (Kind::Events, &ingest),
            (Kind::Progress, &rest),
            (Kind::Statements, &ingest),
        ]
        .into_iter()
        .enumerate()
        {
            println!();
            println!("{}. {}", number + 1, kind.name());
            outcomes.push(run_phase(&pool, &client, &base_url, kind, org, args, &watched).await?);
        }
        anyhow::Ok(outcomes)
    }
    .await;
    stop_components(children).await;
    pool.close().await;
    let outcomes = outcome?;
    println!();
    let find = |kind: Kind| outcomes.iter().find(|outcome| outcome.kind == kind);
    let (Some(assign), Some(events), Some(progress), Some(statements)) = (
        find(Kind::Assign),
        find(Kind::Events),
        find(Kind::Progress),
        find(Kind::Statements),
    ) else {
        bail!("a phase did not run");
    };
    let end_to_end = |outcome: &Outcome| {
        outcome
            .applied_per_second()
            .map_or("timed out".to_owned(), |rate| format!("{rate:.0}/s"))
    };
    for (name, new, baseline) in [
        ("CloudEvents / REST assign", events, assign),
        ("xAPI / REST progress", statements, progress),
    ] {
        println!(
            "{name}: {:.2}× the accepted rate ({:.0}/s vs {:.0}/s); applied end to end {} vs {}",
            new.per_second() / baseline.per_second().max(1e-9),
            new.per_second(),
            baseline.per_second(),
            end_to_end(new),
            end_to_end(baseline)
        );
    }
    let (lost, twice) = outcomes.iter().fold((0, 0), |(lost, twice), outcome| {
        (lost + outcome.lost, twice + outcome.twice)
    });
    println!("check: lost {lost}, applied twice {twice}");
    if lost > 0 || twice > 0 {
        bail!("the run lost or applied work twice (see above)");
    }
    Ok(())
}
