//! `flowctl bench compliance` (issue 39): the compliance report (`POST /v1/compliance/report`)
//! and a flow's funnel (`GET /v1/flows/{id}/analysis`) on an organization of `--people` people,
//! `--flows` required flows and `--assignments` assignments over two years, through the whole
//! system.
//!
//! **Data** (a database of its own on the server of `DATABASE_URL`, dropped at the start and,
//! unless `--keep`, at the end; with `--keep` a later run of the same sizes reuses it), written
//! with `COPY` from a deterministic generator (the same every run but for the ids and the
//! instant "now", truncated to the hour):
//!
//! - one organization; people with names, e-mails, employee numbers, a department (20, of
//!   uneven sizes), a manager (one person in a hundred is a manager, with `manager_id` their
//!   employee number and `manager_name` their name; the first 20 managers report to nobody),
//!   a location group (most people) and a programme group (a quarter); most existed before the
//!   two years, some were hired during them (the `asOf` reads leave them out before), a few are
//!   deactivated;
//! - `--flows` flows marked required, half of them valid for 12 months with a 30-day renewal
//!   window;
//! - per (person, flow) a history of 0 to a few assignments, drawn so that the total meets
//!   `--assignments`: about one cell in ten never assigned; an assignment may be cancelled (and
//!   the flow assigned again later), completed (on time or late), or still open (pending, in
//!   progress, overdue, due soon); a completion of a flow with a validity expires after 12
//!   months and is renewed (the next assignment, assigned when the window opens) or, for the
//!   last of a history, left expired; a few assignments had their due date moved later (an
//!   applied `assignment_changes` row, which `asOf` reads back). The columns the scheduler
//!   keeps (`overdue_at`, `renew_at`, `renewal_id`, `expiry_settled_at`, `expired_at`) are
//!   filled as it would have left them; the report rollups are merged and every table analysed.
//! - with `--funnel-assignments`, a flow of that many assignments with module progress in an
//!   organization of its own (seeded by `bench report`'s generator).
//!
//! **Timed** (`--repeat` calls each, after one untimed call; p50 and max), each component its own
//! process (`flowctl up --only api` and `--only report-worker`), with an API key: the whole
//! organization (first page of 100 people and the totals), one department, `asOf` a year ago, the
//! roll-up by manager (first 100 managers and the totals), the CSV export of every row (request →
//! ready → downloaded) against a plain `COPY (…) TO STDOUT` of the same columns in the same run,
//! and the funnel of the big flow. The goals are printed beside the figures, never
//! enforced. The API's `REQUEST_TIMEOUT` is `--request-timeout` (300 s), so that reads slower than
//! the default 30 s are timed rather than answered 503; a call that fails anyway is printed and
//! recorded, and the run goes on.
//!
//! **Checks** (a failure fails the command): the totals of the whole organization, of the
//! department and of the `asOf` read equal a direct SQL count of the same cells by a statement
//! written apart from the service's (`check::standing_sql`); the CSV holds one row per (person, flow)
//! and its statuses add up to the totals of its request.

mod check;
mod seed;

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};
use chrono::{DateTime, SecondsFormat, TimeDelta, Utc};
use clap::Args;
use flow_common::config::CoreConfig;
use flow_common::db;
use serde_json::{Value, json};
use sqlx::PgPool;
use sqlx::migrate::MigrateDatabase;

use self::check::{STATUSES, Tally, compare, count_directly, standing_sql};
use self::seed::{PEOPLE_PER_MANAGER, Seeded, open_database, seed};
use super::assign::wait_ready;
use super::report::{copy_out, database_url, summary, when_ready};
use super::system::{Watched, spawn_components, stop_components};

/// Options of the compliance benchmark.
#[derive(Debug, Clone, Args)]
pub struct ComplianceBenchArgs {
    /// People of the organization (at least 100: one in a hundred is a manager).
    #[arg(long, default_value_t = 100_000)]
    pub people: u64,
    /// Required flows (1 to 50, the most one report covers).
    #[arg(long, default_value_t = 20)]
    pub flows: u64,
    /// Assignments of the required flows over the two years (about; the histories are drawn to
    /// meet it, and the seed prints what it wrote).
    #[arg(long, default_value_t = 2_000_000)]
    pub assignments: u64,
    /// Assignments of the flow whose funnel is timed, in an organization of its own (0 skips).
    #[arg(long, default_value_t = 1_000_000)]
    pub funnel_assignments: u64,
    /// Timed calls per query (after one untimed call).
    #[arg(long, default_value_t = 11)]
    pub repeat: usize,
    /// Time the CSV export only when it holds at most this many rows (people × flows).
    #[arg(long, default_value_t = 5_000_000)]
    pub export_max: u64,
    /// Database created for the benchmark on the server of DATABASE_URL.
    #[arg(long, default_value = "flow_bench_compliance")]
    pub database: String,
    /// Keep the database at the end, and reuse it when it holds a seed of the same sizes.
    #[arg(long)]
    pub keep: bool,
    /// The API child's `REQUEST_TIMEOUT` in seconds (its default is 30): long enough by default
    /// to time what takes longer than the default.
    #[arg(long, default_value_t = 300)]
    pub request_timeout: u64,
    /// Port of the API child process.
    #[arg(long, default_value_t = 18_390)]
    pub port: u16,
}

/// The goal for a page with totals, p50.
const PAGE_GOAL_MS: f64 = 100.0;
/// The goal for the CSV export, as a multiple of a plain `COPY` of the same columns.
const EXPORT_GOAL_RATIO: f64 = 1.3;
/// The department the filtered report is timed on (about 5 % of the people).
const TIMED_DEPARTMENT: &str = "Finance";

/// Runs the benchmark on queues of its own (deleted afterwards).
pub async fn run(core: &CoreConfig, args: ComplianceBenchArgs) -> anyhow::Result<()> {
    ensure!(
        args.people >= PEOPLE_PER_MANAGER,
        "--people must be at least {PEOPLE_PER_MANAGER}"
    );
    ensure!(
        (1..=flow_app::compliance::MAX_FLOWS as u64).contains(&args.flows),
        "--flows must be 1 to {}",
        flow_app::compliance::MAX_FLOWS
    );
    ensure!(args.repeat > 0, "--repeat must be positive");
    let mut core = core.clone();
    core.database_url = database_url(&core.database_url, &args.database);
    super::system::on_own_queues(&core, |own| async move { measure(&own, &args).await }).await
}

/// A client of the API child process, with the organization's key.
struct Api {
    client: reqwest::Client,
    base_url: String,
    key: String,
}

impl Api {
    /// `POST /v1/compliance/report` with `body`: its time and its answer.
    async fn report(&self, body: &Value) -> anyhow::Result<(Duration, Value)> {
        let started = Instant::now();
        let response = self
            .client
            .post(format!("{}/v1/compliance/report", self.base_url))
            .bearer_auth(&self.key)
            .json(body)
            .send()
            .await?;
        let status = response.status();
        let answer: Value = response.json().await?;
        let elapsed = started.elapsed();
        ensure!(
            status.is_success(),
            "the report answered {status}: {answer}"
        );
        Ok((elapsed, answer))
    }

    /// `GET` of `path`: its time and its answer.
    async fn get(&self, path: &str) -> anyhow::Result<(Duration, Value)> {
        let started = Instant::now();
        let response = self
            .client
            .get(format!("{}{path}", self.base_url))
            .bearer_auth(&self.key)
            .send()
            .await?;
        let status = response.status();
        let answer: Value = response.json().await?;
        let elapsed = started.elapsed();
        ensure!(status.is_success(), "{path} answered {status}: {answer}");
        Ok((elapsed, answer))
    }
}

/// Whether a p50 met the page goal, as printed beside it.
fn page_goal(p50: Duration) -> String {
    let ms = p50.as_secs_f64() * 1000.0;
    let verdict = if ms <= PAGE_GOAL_MS { "met" } else { "missed" };
    format!("goal p50 ≤ {PAGE_GOAL_MS:.0} ms: {verdict}")
}

/// Times `repeat` reports of `body` after an untimed one; prints p50 and max beside the goal,
/// adds them to `figures` under `label`, and returns the first answer. A failed call (the API's
/// `REQUEST_TIMEOUT` run out, say) is printed and recorded instead, and the run goes on.
async fn time_query(
    api: &Api,
    label: &str,
    body: &Value,
    repeat: usize,
    figures: &mut Figures,
) -> Option<Value> {
    let timed = async {
        let (_, answer) = api.report(body).await?;
        let mut samples = Vec::with_capacity(repeat);
        for _ in 0..repeat {
            samples.push(api.report(body).await?.0);
        }
        anyhow::Ok((answer, samples))
    };
    match timed.await {
        Ok((answer, mut samples)) => {
            let p50 = summary(label, &mut samples);
            let max = samples[samples.len() - 1];
            println!("{:<34} {}", "", page_goal(p50));
            figures.add(format!(
                "{label}: p50 {:.1} ms, max {:.1} ms ({}); {} people",
                ms(p50),
                ms(max),
                page_goal(p50),
                answer["totals"]["people"]
            ));
            Some(answer)
        }
        Err(error) => {
            println!("{label}: failed: {error:#}");
            figures.add(format!("{label}: failed: {error:#}"));
            None
        }
    }
}

/// The figures of a run, for the summary at its end.
#[derive(Default)]
struct Figures {
    lines: Vec<String>,
}

impl Figures {
    fn add(&mut self, line: String) {
        self.lines.push(line);
    }
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

async fn measure(core: &CoreConfig, args: &ComplianceBenchArgs) -> anyhow::Result<()> {
    let (pool, kept) = open_database(&core.database_url, args).await?;
    let seeded = match kept {
        Some(seeded) => seeded,
        None => seed(&pool, args).await?,
    };
    let outcome = run_against(core, &pool, &seeded, args).await;
    pool.close().await;
    if !args.keep {
        sqlx::Postgres::drop_database(&core.database_url)
            .await
            .context("dropping the benchmark database")?;
    }
    outcome
}

/// Starts the API and a report-worker, times every read, then checks the answers.
async fn run_against(
    core: &CoreConfig,
    pool: &PgPool,
    seeded: &Seeded,
    args: &ComplianceBenchArgs,
) -> anyhow::Result<()> {
    let (_, key) = db::keys::create(pool, seeded.org_id, "bench").await?;
    let funnel_key = match seeded.funnel {
        Some((org_id, _, _)) => Some(db::keys::create(pool, org_id, "bench").await?.1),
        None => None,
    };
    let export_dir =
        std::env::temp_dir().join(format!("flow-bench-compliance-{}", std::process::id()));
    std::fs::create_dir_all(&export_dir)?;
    let export_store = export_dir.to_string_lossy().into_owned();
    let log = std::env::var("RUST_LOG").unwrap_or_else(|_| "warn,sqlx::query=error".into());
    let request_timeout = format!("{}s", args.request_timeout);
    let mut watched = Watched::with_servers(core);
    let children = spawn_components(
        &["api", "report-worker"],
        args.port,
        core,
        &[
            ("RUST_LOG", log.as_str()),
            ("EXPORT_STORE_URL", export_store.as_str()),
            ("REQUEST_TIMEOUT", request_timeout.as_str()),
        ],
        &mut watched,
    )?;
    println!(
        "bench compliance: {} people × {} required flows = {} cells, {} assignments; api and \
         report-worker each their own process",
        seeded.people,
        seeded.flows.len(),
        seeded.people * seeded.flows.len() as i64,
        seeded.assignments
    );
    let base_url = format!("http://127.0.0.1:{}", args.port);
    let outcome = async {
        wait_ready(&base_url).await?;
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(1_800))
            .build()?;
        let api = Api {
            client: client.clone(),
            base_url: base_url.clone(),
            key,
        };
        let funnel_api = funnel_key.map(|key| Api {
            client,
            base_url: base_url.clone(),
            key,
        });
        timed(pool, seeded, args, &api, funnel_api.as_ref(), &watched).await
    }
    .await;
    stop_components(children).await;
    drop(std::fs::remove_dir_all(&export_dir));
    let (figures, mismatches) = outcome?;
    println!();
    println!("summary:");
    for line in &figures.lines {
        println!("  {line}");
    }
    if !mismatches.is_empty() {
        bail!("the checks failed:\n{}", mismatches.join("\n"));
    }
    Ok(())
}

/// The timed reads and the checks: the figures, and the checks' mismatches.
async fn timed(
    pool: &PgPool,
    seeded: &Seeded,
    args: &ComplianceBenchArgs,
    api: &Api,
    funnel_api: Option<&Api>,
    watched: &Watched,
) -> anyhow::Result<(Figures, Vec<String>)> {
    let mut figures = Figures::default();
    let mut mismatches = Vec::new();
    let repeat = args.repeat;
    println!();

    let whole = time_query(
        api,
        "whole organization, first page + totals",
        &json!({}),
        repeat,
        &mut figures,
    )
    .await;
    let department = time_query(
        api,
        &format!("one department ({TIMED_DEPARTMENT}), first page + totals"),
        &json!({ "filter": { "department": TIMED_DEPARTMENT } }),
        repeat,
        &mut figures,
    )
    .await;
    let year_ago = (Utc::now() - TimeDelta::days(365)).date_naive().to_string();
    let as_of = time_query(
        api,
        &format!("asOf a year ago ({year_ago}), first page + totals"),
        &json!({ "asOf": year_ago }),
        repeat,
        &mut figures,
    )
    .await;
    time_query(
        api,
        "roll-up by manager, first 100 + totals",
        &json!({ "groupBy": "manager" }),
        repeat,
        &mut figures,
    )
    .await;

    // The checks of the totals against a direct count of the same cells at the same instants.
    let instant = |answer: &Value| {
        answer["asOf"]
            .as_str()
            .and_then(|text| DateTime::parse_from_rfc3339(text).ok())
            .map(|at| at.with_timezone(&Utc))
            .with_context(|| format!("asOf missing in {answer}"))
    };
    if let Some(answer) = &whole {
        let direct = count_directly(pool, seeded, instant(answer)?, false, None).await?;
        mismatches.extend(compare(
            "whole organization",
            &Tally::of_answer(answer)?,
            &direct,
        ));
    }
    if let Some(answer) = &department {
        let department = Some(TIMED_DEPARTMENT);
        let direct = count_directly(pool, seeded, instant(answer)?, false, department).await?;
        mismatches.extend(compare(
            &format!("department {TIMED_DEPARTMENT}"),
            &Tally::of_answer(answer)?,
            &direct,
        ));
    }
    if let Some(answer) = &as_of {
        // The exact instant of a plain date (the answer's `asOf` is to the millisecond).
        let at = flow_app::compliance::check_as_of(Some(&year_ago), chrono_tz::UTC, Utc::now())?
            .context("asOf")?;
        let direct = count_directly(pool, seeded, at, true, None).await?;
        mismatches.extend(compare(
            &format!("asOf {year_ago}"),
            &Tally::of_answer(answer)?,
            &direct,
        ));
    }

    let rows = u64::try_from(seeded.people).unwrap_or(0) * seeded.flows.len() as u64;
    if rows > args.export_max {
        println!(
            "export not timed: {rows} rows above --export-max {}",
            args.export_max
        );
    } else if let Err(error) =
        export(pool, seeded, api, watched, &mut figures, &mut mismatches).await
    {
        println!("CSV export failed: {error:#}");
        figures.add(format!("CSV export of every row: failed: {error:#}"));
    }

    if let (Some(api), Some((_, flow_id, assignments))) = (funnel_api, seeded.funnel) {
        // Every assignment of the flow: `bench report`'s generator spreads them over the year
        // from 2025-11-01.
        let to = Utc::now().to_rfc3339_opts(SecondsFormat::Secs, true);
        let path = format!("/v1/flows/{flow_id}/analysis?from=2025-11-01&to={to}");
        let timed = async {
            let (_, answer) = api.get(&path).await?;
            let mut samples = Vec::with_capacity(repeat);
            for _ in 0..repeat {
                samples.push(api.get(&path).await?.0);
            }
            anyhow::Ok((answer, samples))
        };
        match timed.await {
            Ok((answer, mut samples)) => {
                let counted = answer["assignments"].as_i64().unwrap_or_default();
                let p50 = summary(&format!("funnel of {counted} assignments"), &mut samples);
                figures.add(format!(
                    "funnel (GET /v1/flows/{{id}}/analysis) of a flow of {assignments} \
                     assignments ({counted} in the range, cancelled left out): p50 {:.1} ms, \
                     max {:.1} ms",
                    ms(p50),
                    ms(samples[samples.len() - 1])
                ));
            }
            Err(error) => {
                println!("funnel failed: {error:#}");
                figures.add(format!("funnel: failed: {error:#}"));
            }
        }
    }
    Ok((figures, mismatches))
}

/// The CSV export of the whole organization (request → ready → downloaded) against a plain
/// `COPY` of the same columns at the same instant, and the file's checks.
async fn export(
    pool: &PgPool,
    seeded: &Seeded,
    api: &Api,
    watched: &Watched,
    figures: &mut Figures,
    mismatches: &mut Vec<String>,
) -> anyhow::Result<()> {
    // The baseline first, at the instant of the moment (the export's own is a moment later;
    // nothing in the data changes in between).
    let copy = format!(
        "COPY ({}) TO STDOUT WITH (FORMAT csv, HEADER)",
        standing_sql(seeded.org_id, &seeded.flows, Utc::now(), true, None)
    );
    let (copy_time, copied) = copy_out(pool, &copy).await?;
    println!(
        "{:<34} {:>8.2} s   {:>7.1} MiB",
        "plain COPY of the same columns",
        copy_time.as_secs_f64(),
        copied as f64 / 1_048_576.0
    );
    let before = watched.sample();
    let started = Instant::now();
    let (_, answer) = api.report(&json!({ "format": "csv", "limit": 1 })).await?;
    let url = answer["downloadUrl"]
        .as_str()
        .context("downloadUrl")?
        .to_owned();
    let response = when_ready(&api.client, &url, &api.key).await?;
    let ready = started.elapsed();
    let file = response.bytes().await?;
    let elapsed = started.elapsed();
    let usage = before.usage_until(&watched.sample());
    let generation: Option<f64> = sqlx::query_scalar(
        "SELECT extract(epoch FROM finished_at - started_at)::float8 FROM exports WHERE id = $1",
    )
    .bind(flow_domain::ids::ExportId::parse(
        answer["exportId"].as_str().unwrap_or_default(),
    ))
    .fetch_optional(pool)
    .await?
    .flatten();
    let ratio = elapsed.as_secs_f64() / copy_time.as_secs_f64().max(1e-9);
    let verdict = if ratio <= EXPORT_GOAL_RATIO {
        "met"
    } else {
        "missed"
    };
    println!(
        "{:<34} {:>8.2} s   {:>7.1} MiB   ready after {:.2} s, worker {:.2} s   {ratio:.2}× the \
         plain COPY (goal ≤ {EXPORT_GOAL_RATIO}×: {verdict})",
        "export csv (request → downloaded)",
        elapsed.as_secs_f64(),
        file.len() as f64 / 1_048_576.0,
        ready.as_secs_f64(),
        generation.unwrap_or(f64::NAN),
    );
    println!("  CPU during the export:");
    usage.print(&watched.peak_memory());
    figures.add(format!(
        "CSV export of every row: {:.2} s (ready {:.2} s) against {:.2} s for the plain COPY: \
         {ratio:.2}× (goal ≤ {EXPORT_GOAL_RATIO}×: {verdict})",
        elapsed.as_secs_f64(),
        ready.as_secs_f64(),
        copy_time.as_secs_f64()
    ));

    // One row per (person, flow), and the statuses of the rows add up to the request's totals.
    let mut reader = csv::Reader::from_reader(file.as_ref());
    let headers = reader.headers()?.clone();
    let column = |name: &str| {
        headers
            .iter()
            .position(|header| header == name)
            .with_context(|| format!("no {name} column in the CSV"))
    };
    let (email, flow, status) = (column("email")?, column("flow")?, column("status")?);
    let mut pairs = HashSet::new();
    let mut rows = 0i64;
    let mut statuses: BTreeMap<String, i64> = STATUSES
        .iter()
        .map(|(status, _)| ((*status).to_owned(), 0))
        .collect();
    for record in reader.records() {
        let record = record?;
        rows += 1;
        pairs.insert((record[email].to_owned(), record[flow].to_owned()));
        *statuses.entry(record[status].to_owned()).or_default() += 1;
    }
    let totals = Tally::of_answer(&answer)?;
    let expected = totals.people * seeded.flows.len() as i64;
    let from_file = Tally {
        people: totals.people,
        statuses,
    };
    if rows == expected && pairs.len() as i64 == rows && from_file == totals {
        println!(
            "check csv: {rows} rows, one per (person, flow) ({} people × {} flows), statuses = \
             the request's totals",
            totals.people,
            seeded.flows.len()
        );
    } else {
        let mismatch = format!(
            "csv: {rows} rows, {} distinct (person, flow), expected {expected}; statuses {} \
             against the totals {}",
            pairs.len(),
            from_file.describe(),
            totals.describe()
        );
        println!("check FAILED {mismatch}");
        mismatches.push(mismatch);
    }
    Ok(())
}
