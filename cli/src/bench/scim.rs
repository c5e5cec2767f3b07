//! `flowctl bench scim`: an identity provider provisioning users one SCIM request each, in an
//! organization whose enrollment rule assigns a flow to every one of them, measured to the last
//! `flow.assigned` delivered.
//!
//! Every component runs as its own process, as in production (`flowctl up --only …`: api,
//! assign-worker, outbox-relay, webhook-worker). Two phases, each its own organization with one
//! enrollment rule (created through `POST /v1/enrollment-rules`) and one webhook endpoint
//! subscribed to `flow.assigned`, served by a receiver in this process that checks every
//! signature:
//!
//! 1. Baseline: the same number of users through `POST /v1/users`, one request each, at the same
//!    concurrency. `/v1/users` carries no profile attributes, so this organization's rule is
//!    `startDatePresent: false` (the only term a `/v1` user matches): it too assigns every user.
//! 2. SCIM: `POST /scim/v2/Users` with the body Okta or Entra ID sends (userName = e-mail, name,
//!    emails, active, externalId, title, the enterprise extension's department and
//!    employeeNumber); the rule is `departmentEquals: "Sales"` and every user is in Sales.
//!
//! Each phase has distinct addresses and its own organization, so nothing is answered from a
//! path that finds the user already there. Reported per phase: requests/s and latency
//! p50/p99/max, the time from the first request to the last `flow.assigned` delivered (counted
//! by distinct `webhook-id`), the CPU of every process. At the end of each phase it checks that
//! every user exists once, has exactly one assignment made by the rule, that each assignment has
//! one `flow.assigned` in the outbox and that each of those reached the endpoint once; anything
//! lost or doubled fails the command.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;
use flow_common::amqp::QueueKind;
use flow_common::config::CoreConfig;
use flow_common::db::orgs;
use flow_domain::events::EventType;
use flow_domain::ids::{AssignmentId, EnrollmentRuleId};
use hdrhistogram::Histogram;
use serde_json::{Value, json};
use sqlx::PgPool;

use super::assign::{AssignBenchArgs, Tenant, tenant, wait_for_consumers, wait_ready};
use super::system::{Sample, Watched, spawn_components, stop_components};
use super::webhooks::{create_endpoints, receiver_options};
use crate::receiver::Receiver;

/// Options of the SCIM benchmark.
#[derive(Debug, Clone, Args)]
pub struct ScimBenchArgs {
    /// Users provisioned in each phase, one request each.
    #[arg(long, default_value_t = 10_000)]
    pub users: usize,
    /// Requests in flight at once, as an identity provider's provisioning workers.
    #[arg(long, default_value_t = 10)]
    pub concurrency: usize,
    /// Longest a phase may take, from its first request to its last delivery, in seconds; past
    /// it the phase stops sending and the checks report what is missing.
    #[arg(long, default_value_t = 900)]
    pub timeout: u64,
    /// Port of the API child process.
    #[arg(long, default_value_t = 18_280)]
    pub port: u16,
}

/// Runs the benchmark on queues of its own (deleted afterwards).
pub async fn run(core: &CoreConfig, args: ScimBenchArgs) -> anyhow::Result<()> {
    if args.users == 0 || args.concurrency == 0 || args.timeout == 0 {
        bail!("--users, --concurrency and --timeout must be positive");
    }
    super::system::on_own_queues(core, |own| async move { measure(&own, &args).await }).await
}

/// The surface a phase provisions its users through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Surface {
    /// `POST /v1/users`: the baseline.
    Users,
    /// `POST /scim/v2/Users`.
    Scim,
}

/// Given and family names the users are made of (the index keeps every address distinct).
const GIVEN_NAMES: [&str; 8] = [
    "Ann", "Bruno", "Chiara", "Dmitri", "Esther", "Farid", "Grace", "Hiroshi",
];
const FAMILY_NAMES: [&str; 8] = [
    "Lee", "Moreau", "Rossi", "Ivanov", "Cohen", "Haddad", "Okafor", "Tanaka",
];
const TITLES: [&str; 4] = [
    "Account Executive",
    "Sales Development Representative",
    "Sales Engineer",
    "Regional Sales Manager",
];

impl Surface {
    fn name(self) -> &'static str {
        match self {
            Surface::Users => "POST /v1/users",
            Surface::Scim => "POST /scim/v2/Users",
        }
    }

    fn path(self) -> &'static str {
        match self {
            Surface::Users => "/v1/users",
            Surface::Scim => "/scim/v2/Users",
        }
    }

    fn content_type(self) -> &'static str {
        match self {
            Surface::Users => "application/json",
            Surface::Scim => "application/scim+json",
        }
    }

    /// The organization's rule: one every user of the phase matches.
    fn condition(self) -> Value {
        match self {
            // A `/v1` user has no profile attributes: no start date is the term it matches.
            Surface::Users => json!({"startDatePresent": false}),
            Surface::Scim => json!({"departmentEquals": "Sales"}),
        }
    }

    /// The request body of user `index`, with an address no other phase uses.
    fn body(self, index: usize) -> String {
        let given = GIVEN_NAMES[index % GIVEN_NAMES.len()];
        let family = FAMILY_NAMES[(index / GIVEN_NAMES.len()) % FAMILY_NAMES.len()];
        let domain = match self {
            Surface::Users => "users.bench.example.com",
            Surface::Scim => "scim.bench.example.com",
        };
        let email = format!(
            "{}.{}.{index:06}@{domain}",
            given.to_lowercase(),
            family.to_lowercase()
        );
        let body = match self {
            Surface::Users => json!({"email": email, "name": format!("{given} {family}")}),
            // What Okta sends on a push (Entra ID's differs in the externalId's form only).
            Surface::Scim => json!({
                "schemas": [
                    "urn:ietf:params:scim:schemas:core:2.0:User",
                    "urn:ietf:params:scim:schemas:extension:enterprise:2.0:User"
                ],
                "userName": email,
                "externalId": format!("00u{index:017x}"),
                "name": {"givenName": given, "familyName": family},
                "displayName": format!("{given} {family}"),
                "emails": [{"value": email, "type": "work", "primary": true}],
                "active": true,
                "title": TITLES[index % TITLES.len()],
                "urn:ietf:params:scim:schemas:extension:enterprise:2.0:User": {
                    "department": "Sales",
                    "employeeNumber": format!("E{index:06}")
                }
            }),
        };
        body.to_string()
    }
}

/// One phase's organization, rule and endpoint.
struct Phase {
    surface: Surface,
    tenant: Tenant,
    /// Its own receiver, so its tally (duplicates included) is this phase's alone.
    receiver: Receiver,
}

/// The endpoint path of every phase's single endpoint.
const ENDPOINT: &str = "0";

impl Phase {
    async fn new(pool: &PgPool, surface: Surface, port: u16) -> anyhow::Result<Self> {
        // An organization with one flow, no users yet and a key (the assign benchmark's).
        let organization = AssignBenchArgs {
            concurrency: 1,
            duration: 0,
            warmup: 0,
            users: Some(0),
            flows: 1,
            bulk: 1,
            request_ids: false,
            two_part: false,
            no_baseline: true,
            endpoints: 1,
            base_url: None,
            port,
        };
        let name = match surface {
            Surface::Users => "SCIM benchmark baseline (/v1/users)",
            Surface::Scim => "SCIM benchmark",
        };
        let tenant = tenant(pool, name, &organization).await?;
        let receiver = Receiver::start_with(receiver_options(0)).await?;
        create_endpoints(
            pool,
            &[flow_domain::webhook::signing::generate_secret()],
            &super::system::secret_vault(),
            &receiver,
            tenant.org_id,
            |_| vec![EventType::Assigned.as_str().to_owned()],
        )
        .await?;
        Ok(Self {
            surface,
            tenant,
            receiver,
        })
    }

    async fn bulk_shard(&self, pool: &PgPool) -> anyhow::Result<u16> {
        let org = orgs::get(pool, self.tenant.org_id)
            .await?
            .context("benchmark organization gone")?;
        Ok(flow_common::amqp::bulk_shard(org.bulk_lane))
    }

    /// Creates the phase's rule through the API, as an administrator would.
    async fn create_rule(
        &self,
        client: &reqwest::Client,
        base_url: &str,
    ) -> anyhow::Result<EnrollmentRuleId> {
        let response = client
            .post(format!("{base_url}/v1/enrollment-rules"))
            .bearer_auth(&self.tenant.key)
            .json(&json!({
                "name": "Sales onboarding",
                "condition": self.surface.condition(),
                "flowId": self.tenant.flows[0].to_string(),
                "due": {"days": 14, "from": "start_date"},
                "priority": "high",
                "notes": "Welcome to Sales"
            }))
            .send()
            .await
            .context("creating the enrollment rule")?;
        let status = response.status();
        let body: Value = response.json().await.unwrap_or(Value::Null);
        if status != reqwest::StatusCode::CREATED {
            bail!("creating the enrollment rule answered {status}: {body}");
        }
        body["ruleId"]
            .as_str()
            .and_then(EnrollmentRuleId::parse)
            .with_context(|| format!("no rule id in {body}"))
    }
}

/// What the provider saw of its requests.
struct Pushed {
    /// Requests answered 201 (a user created).
    created: u64,
    /// Latency of the 201s, in µs.
    latencies: Histogram<u64>,
    /// Requests by status (or transport error), and those never sent (the phase timed out).
    statuses: BTreeMap<String, u64>,
    /// From the first request to the last answer.
    took: Duration,
}

/// Sends user `0..users` of `surface`, one request each, `concurrency` at a time, until
/// `deadline`.
async fn push(
    client: &reqwest::Client,
    base_url: &str,
    phase: &Phase,
    args: &ScimBenchArgs,
    deadline: Instant,
) -> anyhow::Result<Pushed> {
    let url = format!("{base_url}{}", phase.surface.path());
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut streams = Vec::new();
    for _ in 0..args.concurrency {
        let (client, next, url) = (client.clone(), next.clone(), url.clone());
        let (surface, key, users) = (phase.surface, phase.tenant.key.clone(), args.users);
        streams.push(tokio::spawn(async move {
            let mut latencies = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
            let mut statuses: BTreeMap<String, u64> = BTreeMap::new();
            let mut created = 0u64;
            loop {
                let index = next.fetch_add(1, Ordering::Relaxed);
                if index >= users {
                    break;
                }
                if Instant::now() > deadline {
                    *statuses.entry("not sent (timeout)".into()).or_default() += 1;
                    continue;
                }
                let sent = Instant::now();
                let outcome = client
                    .post(&url)
                    .bearer_auth(&key)
                    .header("content-type", surface.content_type())
                    .body(surface.body(index))
                    .send()
                    .await;
                let status = match outcome {
                    Ok(response) => {
                        let status = response.status().as_u16();
                        // Read to the end, as a provider does, before the latency is taken.
                        drop(response.bytes().await);
                        status.to_string()
                    }
                    Err(error) => format!("transport error ({})", error.without_url()),
                };
                if status == "201" {
                    created += 1;
                    let _ = latencies.record(sent.elapsed().as_micros().max(1) as u64);
                }
                *statuses.entry(status).or_default() += 1;
            }
            anyhow::Ok((created, latencies, statuses))
        }));
    }
    let mut pushed = Pushed {
        created: 0,
        latencies: Histogram::new_with_bounds(1, 60_000_000, 3)?,
        statuses: BTreeMap::new(),
        took: Duration::ZERO,
    };
    for stream in streams {
        let (created, latencies, statuses) = stream.await??;
        pushed.created += created;
        pushed.latencies.add(&latencies)?;
        for (status, count) in statuses {
            *pushed.statuses.entry(status).or_default() += count;
        }
    }
    pushed.took = started.elapsed();
    Ok(pushed)
}

impl Pushed {
    fn per_second(&self) -> f64 {
        self.created as f64 / self.took.as_secs_f64().max(1e-9)
    }

    fn print(&self) {
        let ms = |micros: u64| micros as f64 / 1000.0;
        println!(
            "  requests        {} users created in {:.2} s = {:.0} requests/s",
            self.created,
            self.took.as_secs_f64(),
            self.per_second()
        );
        println!(
            "  latency (201s)  p50 {:.2} ms  p90 {:.2} ms  p99 {:.2} ms  max {:.2} ms",
            ms(self.latencies.value_at_quantile(0.50)),
            ms(self.latencies.value_at_quantile(0.90)),
            ms(self.latencies.value_at_quantile(0.99)),
            ms(self.latencies.max())
        );
        println!("  responses       {:?}", self.statuses);
    }
}

/// A phase's figures and checks.
struct Outcome {
    pushed: Pushed,
    /// First request → last `flow.assigned` delivered, when every one arrived.
    delivered_after: Option<Duration>,
    lost: u64,
    doubled: u64,
}

/// Runs one phase: the users pushed, every `flow.assigned` awaited, the checks.
async fn run_phase(
    pool: &PgPool,
    client: &reqwest::Client,
    base_url: &str,
    phase: &Phase,
    rule: EnrollmentRuleId,
    args: &ScimBenchArgs,
    watched: &Watched,
) -> anyhow::Result<Outcome> {
    let started = Instant::now();
    let deadline = started + Duration::from_secs(args.timeout);
    let before = watched.sample();
    let pushed = push(client, base_url, phase, args, deadline).await?;
    pushed.print();
    // Every user created is one assignment, hence one `flow.assigned` (a request that failed in
    // transport may have created its user too).
    let users: i64 = sqlx::query_scalar("SELECT count(*) FROM users WHERE org_id = $1")
        .bind(phase.tenant.org_id)
        .fetch_one(pool)
        .await?;
    let expected = pushed.created.max(users.max(0) as u64);
    while phase.receiver.tally().first_arrivals(ENDPOINT) < expected && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let after = watched.sample();
    let (arrived, last_arrival) = {
        let tally = phase.receiver.tally();
        let last = tally
            .arrivals
            .iter()
            .filter(|arrival| arrival.path == ENDPOINT)
            .map(|arrival| arrival.arrived)
            .max();
        (tally.first_arrivals(ENDPOINT), last)
    };
    let delivered_after = last_arrival
        .filter(|_| arrived >= expected)
        .map(|last| last.duration_since(started));
    match delivered_after {
        Some(after) => println!(
            "  delivered       the last of {arrived} flow.assigned {:.2} s after the first request ({:.2} s after the last answer): {:.0} users/s provisioned and assigned end to end",
            after.as_secs_f64(),
            after.saturating_sub(pushed.took).as_secs_f64(),
            expected as f64 / after.as_secs_f64().max(1e-9)
        ),
        None => println!(
            "  delivered       {arrived} of {expected} flow.assigned within {} s: the phase timed out",
            args.timeout
        ),
    }
    print_cpu(watched, &before, &after, expected);
    let (lost, doubled) = check(pool, phase, rule, args).await?;
    Ok(Outcome {
        pushed,
        delivered_after,
        lost,
        doubled,
    })
}

fn print_cpu(watched: &Watched, before: &Sample, after: &Sample, users: u64) {
    println!("  CPU from the first request to the last delivery:");
    before.usage_until(after).print(&watched.peak_memory());
    println!("  CPU per user (provisioned, assigned, delivered):");
    let (cost, machine) = before.cost_per_item(after, users);
    super::system::print_cost(&cost, Some(machine), "user");
}

/// Counts what each stage holds against what the provider sent; prints it and answers (lost,
/// doubled).
async fn check(
    pool: &PgPool,
    phase: &Phase,
    rule: EnrollmentRuleId,
    args: &ScimBenchArgs,
) -> anyhow::Result<(u64, u64)> {
    let org_id = phase.tenant.org_id;
    let sent = args.users as i64;
    let (users, distinct_users): (i64, i64) = sqlx::query_as(
        "SELECT count(*), count(DISTINCT email_normalized) FROM users WHERE org_id = $1",
    )
    .bind(org_id)
    .fetch_one(pool)
    .await?;
    let (assignments, by_rule, users_assigned): (i64, i64, i64) = sqlx::query_as(
        "SELECT count(*), count(*) FILTER (WHERE enrollment_rule_id = $2),
                count(DISTINCT user_id) FILTER (WHERE enrollment_rule_id = $2)
         FROM assignments WHERE org_id = $1",
    )
    .bind(org_id)
    .bind(rule)
    .fetch_one(pool)
    .await?;
    let rule_assignments: Vec<AssignmentId> = sqlx::query_scalar(
        "SELECT id FROM assignments WHERE org_id = $1 AND enrollment_rule_id = $2",
    )
    .bind(org_id)
    .bind(rule)
    .fetch_all(pool)
    .await?;
    let events: Vec<(uuid::Uuid, Option<AssignmentId>)> = sqlx::query_as(
        "SELECT event_id, assignment_id FROM outbox WHERE org_id = $1 AND event_type = $2",
    )
    .bind(org_id)
    .bind(EventType::Assigned.as_str())
    .fetch_all(pool)
    .await?;
    let mut events_per_assignment: HashMap<AssignmentId, i64> = HashMap::new();
    for assignment in events.iter().filter_map(|(_, assignment)| *assignment) {
        *events_per_assignment.entry(assignment).or_default() += 1;
    }
    let without_event = rule_assignments
        .iter()
        .filter(|id| !events_per_assignment.contains_key(id))
        .count() as i64;
    let duplicate_events: i64 = events_per_assignment.values().map(|count| count - 1).sum();
    let tally = phase.receiver.tally();
    let delivered: HashSet<&str> = tally
        .arrivals
        .iter()
        .filter(|arrival| arrival.path == ENDPOINT)
        .map(|arrival| arrival.event_id.as_str())
        .collect();
    let event_ids: HashSet<String> = events
        .iter()
        .map(|(id, _)| format!("evt_{}", id.simple()))
        .collect();
    let undelivered = event_ids
        .iter()
        .filter(|id| !delivered.contains(id.as_str()))
        .count() as i64;
    let unknown_deliveries = delivered
        .iter()
        .filter(|id| !event_ids.contains(**id))
        .count() as i64;

    let lost = [
        sent - users,
        users - users_assigned,
        without_event,
        undelivered,
    ];
    let doubled = [
        users - distinct_users,
        users - sent,
        by_rule - users_assigned,
        assignments - by_rule,
        duplicate_events,
        tally.duplicates as i64,
        unknown_deliveries,
    ];
    println!(
        "  check           users {users} of {sent} sent; assignments by the rule {by_rule} for {users_assigned} users (other assignments {}); flow.assigned events {} (assignments without one {without_event}, duplicate events {duplicate_events}); delivered {} (undelivered {undelivered}, delivered twice {}, unknown {unknown_deliveries}, bad signatures {})",
        assignments - by_rule,
        events.len(),
        delivered.len(),
        tally.duplicates,
        tally.signature_failures
    );
    let sum = |counts: &[i64]| counts.iter().map(|count| (*count).max(0)).sum::<i64>() as u64;
    let (lost, doubled) = (sum(&lost), sum(&doubled) + tally.signature_failures);
    println!("  lost {lost}, duplicates {doubled}");
    Ok((lost, doubled))
}

async fn measure(core: &CoreConfig, args: &ScimBenchArgs) -> anyhow::Result<()> {
    crate::up::prepare_database(core).await?;
    let pool = crate::admin::pool(core).await?;
    let mut phases = [
        Phase::new(&pool, Surface::Users, args.port).await?,
        Phase::new(&pool, Surface::Scim, args.port).await?,
    ];
    println!(
        "bench scim: {} users per phase, one request each, {} at a time; an enrollment rule assigns each a flow; a webhook endpoint receives flow.assigned",
        args.users, args.concurrency
    );
    println!(
        "  components: api, assign-worker, outbox-relay, webhook-worker, each its own process; queues {}",
        core.queue_prefix
    );
    let mut watched = Watched::with_servers(core);
    // Slow statements of the loaded components are expected here: not logged over the figures.
    let log = std::env::var("RUST_LOG").unwrap_or_else(|_| "warn,sqlx::query=error".into());
    let children = spawn_components(
        &["api", "assign-worker", "outbox-relay", "webhook-worker"],
        args.port,
        core,
        &[
            ("WEBHOOK_ALLOW_PRIVATE", "true"),
            ("WEBHOOK_ALLOW_HTTP", "true"),
            ("RUST_LOG", log.as_str()),
        ],
        &mut watched,
    )?;
    let base_url = format!("http://127.0.0.1:{}", args.port);
    let outcome = async {
        wait_ready(&base_url).await?;
        let mut queues = vec![
            QueueKind::Assign,
            QueueKind::Webhooks,
            QueueKind::InteractiveWebhooks,
        ];
        for phase in &phases {
            let shard = phase.bulk_shard(&pool).await?;
            queues.extend([QueueKind::BulkAssign(shard), QueueKind::BulkWebhooks(shard)]);
        }
        wait_for_consumers(core, &queues).await?;
        let client = reqwest::Client::builder()
            .pool_max_idle_per_host(args.concurrency)
            .timeout(Duration::from_secs(30))
            .build()?;
        let mut outcomes = Vec::new();
        for (number, phase) in phases.iter().enumerate() {
            let rule = phase.create_rule(&client, &base_url).await?;
            println!();
            println!(
                "{}. {}{}, rule {}",
                number + 1,
                phase.surface.name(),
                if phase.surface == Surface::Users {
                    " (baseline: the plain API)"
                } else {
                    ""
                },
                phase.surface.condition()
            );
            outcomes.push(run_phase(&pool, &client, &base_url, phase, rule, args, &watched).await?);
        }
        anyhow::Ok(outcomes)
    }
    .await;
    stop_components(children).await;
    for phase in &mut phases {
        phase.receiver.stop().await;
    }
    pool.close().await;
    let outcomes = outcome?;
    let [baseline, scim] = outcomes.as_slice() else {
        bail!("a phase did not run");
    };
    println!();
    let seconds = |after: Option<Duration>| {
        after.map_or("timed out".to_owned(), |after| {
            format!("{:.2} s", after.as_secs_f64())
        })
    };
    println!(
        "SCIM / plain API: {:.2}× the request rate ({:.0}/s vs {:.0}/s); p99 {:.2} ms vs {:.2} ms; first request → last flow.assigned delivered {} vs {}",
        scim.pushed.per_second() / baseline.pushed.per_second().max(1e-9),
        scim.pushed.per_second(),
        baseline.pushed.per_second(),
        scim.pushed.latencies.value_at_quantile(0.99) as f64 / 1000.0,
        baseline.pushed.latencies.value_at_quantile(0.99) as f64 / 1000.0,
        seconds(scim.delivered_after),
        seconds(baseline.delivered_after)
    );
    let (lost, doubled) = outcomes.iter().fold((0, 0), |(lost, doubled), outcome| {
        (lost + outcome.lost, doubled + outcome.doubled)
    });
    println!("check: lost {lost}, duplicates {doubled}");
    if lost > 0 || doubled > 0 {
        bail!("the run lost or duplicated work (see above)");
    }
    Ok(())
}
