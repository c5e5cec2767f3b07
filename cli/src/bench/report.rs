//! `flowctl bench report`: seeds a flow with a million assignments (with `COPY`; or several sizes
//! in turn, topping the flow up between them) in a database of its own, beside 99 small flows,
//! runs the API and a report-worker in this process, and measures the report (metrics + first
//! page), the weekly aggregate, the first page of the assignment list, the counts of 100 flows at
//! once, and each export format end to end (request → file ready), with the process's peak memory
//! during each export. Postgres's own `COPY` of the export's query, and a plain `COPY` of the same
//! columns, are timed for comparison with the CSV export. With several sizes it prints how each
//! figure grew.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use anyhow::Context;
use chrono::{DateTime, TimeZone, Utc};
use clap::Args;
use flow_common::config::{CoreConfig, from_env};
use flow_common::db::{self, orgs};
use flow_domain::ids::{AssignmentId, FlowId, ModuleId, OrgId, UserId};
use serde_json::{Value, json};
use sqlx::PgPool;
use sqlx::migrate::MigrateDatabase;
use sqlx::postgres::PgPoolCopyExt;
use tokio_util::sync::CancellationToken;

use super::seed::{copy_in, optional_time, vacuum_analyze};

/// Options of the report benchmark.
#[derive(Debug, Clone, Args)]
pub struct ReportBenchArgs {
    /// Assignments in the benchmark flow: one size, or several (`1000000,10000000`) measured in
    /// turn, the flow topped up between them, with how each figure grew printed at the end.
    #[arg(long, value_delimiter = ',', default_value = "1000000")]
    pub assignments: Vec<u64>,
    /// Time the exports only while the flow holds at most this many assignments (an Excel sheet
    /// holds at most 1,048,575 rows).
    #[arg(long, default_value_t = 1_000_000)]
    pub export_max: u64,
    /// Timed runs of the report and of the aggregate.
    #[arg(long, default_value_t = 20)]
    pub iterations: usize,
    /// Export formats to time (csv, excel, pdf).
    #[arg(long, value_delimiter = ',', default_value = "csv,excel,pdf")]
    pub formats: Vec<String>,
    /// Database created for the benchmark on the server of DATABASE_URL (dropped at the end).
    #[arg(long, default_value = "flow_bench_report")]
    pub database: String,
    /// Keep the benchmark database (and reuse it next time if it has the same size).
    #[arg(long)]
    pub keep: bool,
}

/// Runs the benchmark and prints what it measured.
pub async fn run(core: &CoreConfig, args: ReportBenchArgs) -> anyhow::Result<()> {
    let url = database_url(&core.database_url, &args.database);
    let mut core = core.clone();
    core.database_url = url.clone();
    core.queue_prefix = format!("bench.{}", uuid::Uuid::now_v7().simple());
    let pool = prepare(&url, &args).await?;
    let mut sizes = args.assignments.clone();
    sizes.sort_unstable();
    sizes.dedup();
    let mut grown = Vec::new();
    let mut result = Ok(());
    for size in sizes {
        let measured = match seed(&pool, size).await {
            Ok(seeded) => measure(&core, &pool, &seeded, &args).await,
            Err(error) => Err(error),
        };
        match measured {
            Ok(figures) => grown.push((size, figures)),
            Err(error) => {
                result = Err(error);
                break;
            }
        }
    }
    print_growth(&grown);
    pool.close().await;
    if !args.keep {
        sqlx::Postgres::drop_database(&url)
            .await
            .context("dropping the benchmark database")?;
    }
    result
}

pub(super) fn database_url(base: &str, database: &str) -> String {
    let (address, query) = match base.split_once('?') {
        Some((address, query)) => (address, format!("?{query}")),
        None => (base, String::new()),
    };
    let server = address
        .rsplit_once('/')
        .map_or(address, |(server, _)| server);
    format!("{server}/{database}{query}")
}

async fn prepare(url: &str, args: &ReportBenchArgs) -> anyhow::Result<PgPool> {
    if !args.keep && sqlx::Postgres::database_exists(url).await.unwrap_or(false) {
        sqlx::Postgres::drop_database(url).await?;
    }
    if !sqlx::Postgres::database_exists(url).await.unwrap_or(false) {
        sqlx::Postgres::create_database(url).await?;
    }
    let pool = db::connect(url, 8)
        .await
        .context("connecting to the benchmark database")?;
    db::migrate(&pool).await?;
    Ok(pool)
}

/// What the seed created.
struct Seeded {
    org_id: OrgId,
    flow_id: FlowId,
    key: String,
    rows: u64,
}

/// A small deterministic generator (xorshift), so every run seeds the same data.
pub(super) struct Random(pub(super) u64);

impl Random {
    pub(super) fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    pub(super) fn below(&mut self, bound: u64) -> u64 {
        self.next() % bound.max(1)
    }
}

pub(super) fn copy_time(out: &mut String, at: DateTime<Utc>) {
    let _ = write!(out, "{}", at.format("%Y-%m-%d %H:%M:%S%.6f+00"));
}

/// Brings the benchmark flow to `count` assignments: creates it (with 99 small flows beside it,
/// for the many-flows figure) on first use, then appends what is missing, so a run over several
/// sizes measures one growing flow.
async fn seed(pool: &PgPool, count: u64) -> anyhow::Result<Seeded> {
    let existing: Option<(OrgId, FlowId, i64)> = sqlx::query_as(
        "SELECT f.org_id, f.id, (SELECT count(*) FROM assignments a WHERE a.flow_id = f.id)
         FROM flows f WHERE f.name = 'Bench flow' LIMIT 1",
    )
    .fetch_optional(pool)
    .await?;
    let (org_id, flow_id, have) = match existing {
        Some((org_id, flow_id, rows)) => (org_id, flow_id, u64::try_from(rows).unwrap_or(0)),
        None => {
            let (org_id, flow_id) = create_flows(pool).await?;
            (org_id, flow_id, 0)
        }
    };
    anyhow::ensure!(
        have <= count,
        "the benchmark database already holds {have} assignments in its flow, more than {count}: \
         drop it or name another with --database"
    );
    let (_, key) = db::keys::create(pool, org_id, "bench").await?;
    if have == count {
        println!("reusing the seeded flow ({have} assignments)");
    } else {
        append(pool, org_id, flow_id, have, count - have).await?;
    }
    Ok(Seeded {
        org_id,
        flow_id,
        key,
        rows: count,
    })
}

/// Small flows beside the benchmark flow (each with 1,000 assignments), for the figure a page of
/// the dashboard's flow list needs.
const SMALL_FLOWS: usize = 99;

/// The benchmark organization, its flow, and [`SMALL_FLOWS`] small flows.
async fn create_flows(pool: &PgPool) -> anyhow::Result<(OrgId, FlowId)> {
    let org = orgs::create(
        pool,
        &orgs::NewOrganization {
            name: "Bench org".into(),
            tier: orgs::Tier::Enterprise,
            timezone: chrono_tz::Tz::UTC,
            assign_limit_per_minute: None,
            report_limit_per_minute: Some(1_000_000),
        },
    )
    .await?;
    let modules = super::seed::modules();
    let (flow, _) = db::flows::create(pool, org.id, "Bench flow", None, &modules).await?;
    for index in 0..SMALL_FLOWS {
        let (small, _) = db::flows::create(
            pool,
            org.id,
            &format!("Small bench flow {index}"),
            None,
            &modules,
        )
        .await?;
        append(pool, org.id, small.id, 0, 1_000).await?;
    }
    Ok((org.id, flow.id))
}

/// Appends `count` assignments (and their users and module progress) to `flow_id` with COPY;
/// `have` is how many it holds (it seeds the generator, so every run writes the same data).
pub(super) async fn append(
    pool: &PgPool,
    org_id: OrgId,
    flow_id: FlowId,
    have: u64,
    count: u64,
) -> anyhow::Result<()> {
    let started = Instant::now();
    let module_ids: Vec<ModuleId> =
        sqlx::query_scalar("SELECT id FROM modules WHERE flow_id = $1 ORDER BY position")
            .bind(flow_id)
            .fetch_all(pool)
            .await?;
    let origin = Utc
        .with_ymd_and_hms(2025, 11, 1, 0, 0, 0)
        .single()
        .context("origin")?;
    // Seeded by where the flow stands, so a top-up continues the same data.
    let mut random =
        Random(0x9e37_79b9_7f4a_7c15 ^ have.wrapping_mul(0x2545_f491_4f6c_dd1d).max(1));
    let mut users = copy_in(
        pool,
        "COPY users (id, org_id, email, email_normalized) FROM STDIN",
    )
    .await?;
    let mut assignments = copy_in(
        pool,
        "COPY assignments (id, org_id, flow_id, user_id, status, priority, due_at, assigned_at, \
         started_at, completed_at) FROM STDIN",
    )
    .await?;
    let mut progress = copy_in(
        pool,
        "COPY module_progress (assignment_id, module_id, status, started_at, completed_at) \
         FROM STDIN",
    )
    .await?;
    let mut progress_count = 0u64;
    let bar = crate::output::progress(count, "seeding assignments");
    let quiet = count < 10_000;
    for index in 0..count {
        if index % 10_000 == 0 {
            bar.set_position(index);
        }
        let user_id = UserId::new();
        let email = format!("bench-{flow_id}-{}@bench.example", have + index);
        let _ = writeln!(users.rows, "{}\t{}\t{email}\t{email}", user_id.0, org_id.0);
        let assignment_id = AssignmentId::new();
        let assigned_at = origin + chrono::Duration::seconds(random.below(365 * 86_400) as i64);
        let roll = random.below(100);
        let status = match roll {
            0..55 => "completed",
            55..75 => "in_progress",
            75..95 => "pending",
            _ => "overdue",
        };
        let due_at = (random.below(2) == 0 || status == "overdue")
            .then(|| assigned_at + chrono::Duration::days(30));
        let started_at = matches!(status, "completed" | "in_progress")
            .then(|| assigned_at + chrono::Duration::seconds(random.below(3 * 86_400) as i64));
        let completed_at = (status == "completed").then(|| {
            started_at.unwrap_or(assigned_at)
                + chrono::Duration::seconds(3_600 + random.below(10 * 86_400) as i64)
        });
        let rows = &mut assignments.rows;
        let _ = write!(
            rows,
            "{}\t{}\t{}\t{}\t{status}\tmedium\t",
            assignment_id.0, org_id.0, flow_id.0, user_id.0
        );
        optional_time(rows, due_at);
        rows.push('\t');
        copy_time(rows, assigned_at);
        rows.push('\t');
        optional_time(rows, started_at);
        rows.push('\t');
        optional_time(rows, completed_at);
        rows.push('\n');
        // Module progress: every in-progress assignment has one or two modules going; one in
        // five completed assignments has all five recorded.
        let recorded = match status {
            "in_progress" => 1 + random.below(2) as usize,
            "completed" if random.below(5) == 0 => module_ids.len(),
            _ => 0,
        };
        for (position, module_id) in module_ids.iter().take(recorded).enumerate() {
            let started =
                started_at.unwrap_or(assigned_at) + chrono::Duration::hours(position as i64);
            let done = status == "completed" || position + 1 < recorded;
            let rows = &mut progress.rows;
            let _ = write!(
                rows,
                "{}\t{}\t{}\t",
                assignment_id.0,
                module_id.0,
                if done { "completed" } else { "in_progress" }
            );
            copy_time(rows, started);
            rows.push('\t');
            if done {
                copy_time(rows, started + chrono::Duration::minutes(30));
            } else {
                rows.push_str("\\N");
            }
            rows.push('\n');
            progress_count += 1;
        }
        users.flush_when_full().await?;
        assignments.flush_when_full().await?;
        progress.flush_when_full().await?;
    }
    users.finish().await?;
    assignments.finish().await?;
    progress.finish().await?;
    bar.finish_and_clear();
    // What a running system looks like: the scheduler has marked what is past due, and merged
    // the report rollups' deltas.
    sqlx::query(
        "UPDATE assignments SET status = 'overdue', overdue_at = due_at
         WHERE flow_id = $1 AND status IN ('pending', 'in_progress') AND due_at <= now()",
    )
    .bind(flow_id)
    .execute(pool)
    .await?;
    flow_workers::scheduler::merge_rollups(pool).await?;
    // The merge deleted every delta row: without vacuuming them (or autovacuum) each read of the
    // deltas steps over hundreds of thousands of dead versions (10 ms of the metrics SQL at 1M).
    vacuum_analyze(
        pool,
        &[
            "users",
            "assignments",
            "module_progress",
            "assignment_rollups",
            "assignment_rollup_deltas",
        ],
    )
    .await?;
    if quiet {
        return Ok(());
    }
    println!(
        "seeded {count} assignments and {progress_count} module progress rows with COPY in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Peak and current resident memory of this process, in MiB, from `/proc/self/status`.
fn memory() -> (f64, f64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|line| line.starts_with(name))
            .and_then(|line| line.split_whitespace().nth(1))
            .and_then(|kib| kib.parse::<f64>().ok())
            .map_or(0.0, |kib| kib / 1024.0)
    };
    (field("VmHWM:"), field("VmRSS:"))
}

/// Resets the peak-memory mark (Linux: writing 5 to `clear_refs`), so each export's peak is its own.
fn reset_peak_memory() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

pub(super) fn summary(label: &str, samples: &mut [Duration]) -> Duration {
    samples.sort();
    let ms = |duration: Duration| duration.as_secs_f64() * 1000.0;
    let percentile = |p: f64| {
        let index = ((samples.len() as f64 - 1.0) * p).round() as usize;
        ms(samples[index.min(samples.len() - 1)])
    };
    println!(
        "{label:<34} min {:>7.1} ms   p50 {:>7.1} ms   p95 {:>7.1} ms   max {:>7.1} ms   ({} runs)",
        ms(samples[0]),
        percentile(0.5),
        percentile(0.95),
        ms(samples[samples.len() - 1]),
        samples.len()
    );
    samples[(samples.len() - 1) / 2]
}

/// Runs `copy` (a `COPY … TO STDOUT`) and reads all it writes: how long that took and how many
/// bytes it wrote. The baseline an export is compared with.
pub(super) async fn copy_out(pool: &PgPool, copy: &str) -> anyhow::Result<(Duration, usize)> {
    let started = Instant::now();
    let mut stream = pool.copy_out_raw(copy).await?;
    let mut bytes = 0usize;
    while let Some(chunk) = futures::StreamExt::next(&mut stream).await {
        bytes += chunk?.len();
    }
    drop(stream);
    Ok((started.elapsed(), bytes))
}

/// Polls an export's download address (`GET /v1/exports/{id}`, 202 while it is generated) every
/// 50 ms until the file is ready, and returns that answer, its body not read yet.
pub(super) async fn when_ready(
    client: &reqwest::Client,
    url: &str,
    key: &str,
) -> anyhow::Result<reqwest::Response> {
    loop {
        let response = client.get(url).bearer_auth(key).send().await?;
        match response.status().as_u16() {
            202 => tokio::time::sleep(Duration::from_millis(50)).await,
            200 => return Ok(response),
            status => anyhow::bail!("export answered {status}: {}", response.text().await?),
        }
    }
}

async fn measure(
    core: &CoreConfig,
    pool: &PgPool,
    seeded: &Seeded,
    args: &ReportBenchArgs,
) -> anyhow::Result<Measured> {
    let shutdown = CancellationToken::new();
    let export_dir =
        std::env::temp_dir().join(format!("flow-bench-exports-{}", std::process::id()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    let base_url = format!("http://{address}");
    let mut api: flow_api::ApiConfig = from_env();
    api.core = core.clone();
    api.bind = address;
    api.public_base_url = base_url.clone();
    api.webhook_secrets = super::system::secret_vault();
    api.export_store.export_store_url = export_dir.to_string_lossy().into_owned();
    let state = flow_api::build_state(api, shutdown.clone()).await?;
    let server = tokio::spawn(flow_api::serve(listener, state, shutdown.clone()));
    let mut worker: flow_workers::report::ReportWorkerConfig = from_env();
    worker.core = core.clone();
    worker.core.database_max_connections = 4;
    worker.export_store.export_store_url = export_dir.to_string_lossy().into_owned();
    worker.poll_interval_ms = 50;
    worker.concurrency = 1;
    let worker_task = tokio::spawn(flow_workers::runtime::run(worker, shutdown.clone()));

    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(600))
        .build()?;
    let report = |body: Value| {
        let client = client.clone();
        let url = format!("{base_url}/v1/flows/report");
        let key = seeded.key.clone();
        async move {
            let started = Instant::now();
            let response = client.post(url).bearer_auth(key).json(&body).send().await?;
            let status = response.status();
            let body: Value = response.json().await?;
            anyhow::ensure!(status.is_success(), "report answered {status}: {body}");
            anyhow::Ok((started.elapsed(), body))
        }
    };
    let flow_id = seeded.flow_id.to_string();
    println!();
    println!(
        "flow {flow_id}: {} assignments (organization {})",
        seeded.rows, seeded.org_id
    );

    let inline = json!({ "flowId": flow_id });
    let (_, first) = report(inline.clone()).await?;
    println!(
        "metrics: {}",
        serde_json::to_string(&first["metrics"]).unwrap_or_default()
    );
    let mut samples = Vec::new();
    for _ in 0..args.iterations.max(1) {
        samples.push(report(inline.clone()).await?.0);
    }
    let report_p50 = summary("report: metrics + first 1,000", &mut samples);

    let weekly = json!({ "flowId": flow_id, "aggregate": { "by": "week" }, "limit": 1 });
    let (_, body) = report(weekly.clone()).await?;
    let weeks = body["aggregates"].as_array().map_or(0, Vec::len);
    let mut samples = Vec::new();
    for _ in 0..args.iterations.max(1) {
        samples.push(report(weekly.clone()).await?.0);
    }
    let aggregate_p50 = summary(&format!("aggregate by week ({weeks} weeks)"), &mut samples);
    let mut connection = pool.acquire().await?;
    let scope = flow_common::db::reports::Scope {
        flow_id: seeded.flow_id,
        lower: flow_domain::report::ReportParameters::open_bounds().0,
        upper: flow_domain::report::ReportParameters::open_bounds().1,
        now: Utc::now(),
        status: None,
        include_cancelled: false,
    };
    let spec = flow_domain::report::AggregateSpec::parse("week", None)?;
    let mut samples = Vec::new();
    for _ in 0..args.iterations.max(1) {
        let started = Instant::now();
        let periods =
            flow_app::engine::report::periods(&mut connection, &scope, &spec, "UTC").await?;
        flow_common::db::reports::period_figures(&mut connection, &scope, &periods).await?;
        samples.push(started.elapsed());
    }
    summary("  aggregate SQL, one connection", &mut samples);
    let mut samples = Vec::new();
    for _ in 0..args.iterations.max(1) {
        let started = Instant::now();
        flow_common::db::reports::metrics(&mut *connection, &scope).await?;
        samples.push(started.elapsed());
    }
    summary("  and the metrics SQL", &mut samples);
    drop(connection);

    // The first page of the flow's assignments, as `GET /v1/assignments` serves it (keyset).
    let page_url = format!("{base_url}/v1/assignments?flowId={flow_id}&limit=100");
    let mut samples = Vec::new();
    for _ in 0..args.iterations.max(1) {
        let started = Instant::now();
        let response = client
            .get(&page_url)
            .bearer_auth(&seeded.key)
            .send()
            .await?;
        anyhow::ensure!(
            response.status().is_success(),
            "list answered {}",
            response.status()
        );
        response.bytes().await?;
        samples.push(started.elapsed());
    }
    let page_p50 = summary("first page of assignments (100)", &mut samples);

    // Counts of 100 flows at once (a page of the dashboard's flow list): the bench flow and
    // the small ones beside it.
    let flows: Vec<FlowId> =
        sqlx::query_scalar("SELECT id FROM flows WHERE org_id = $1 ORDER BY id LIMIT 100")
            .bind(seeded.org_id)
            .fetch_all(pool)
            .await?;
    let mut samples = Vec::new();
    let mut connection = pool.acquire().await?;
    for _ in 0..args.iterations.max(1) {
        let started = Instant::now();
        db::dashboard::flow_counts(&mut connection, seeded.org_id, &flows, Utc::now()).await?;
        samples.push(started.elapsed());
    }
    let flows_p50 = summary(
        &format!("counts of {} flows at once", flows.len()),
        &mut samples,
    );
    let mut measured = Measured {
        report_p50,
        aggregate_p50,
        page_p50,
        flows_p50,
        csv: None,
    };
    if seeded.rows > args.export_max {
        println!("exports not timed above --export-max {}", args.export_max);
        shutdown.cancel();
        drop(server.await);
        drop(worker_task.await);
        return Ok(measured);
    }

    // The cheapest way Postgres produces the export's columns: the module counts by one grouped
    // join instead of a count per row.
    let plain = format!(
        "COPY (SELECT a.id, u.email, a.assigned_at,
                      flow_effective_status(a.status, a.due_at, now()), a.priority, a.due_at,
                      a.started_at, a.completed_at, COALESCE(p.completed, 0)
               FROM assignments a JOIN users u ON u.id = a.user_id
               LEFT JOIN (SELECT assignment_id, count(*) AS completed FROM module_progress
                          WHERE status = 'completed' GROUP BY assignment_id) p
                      ON p.assignment_id = a.id
               WHERE a.flow_id = '{}'
               ORDER BY a.assigned_at, a.id) TO STDOUT WITH (FORMAT csv, HEADER)",
        seeded.flow_id.0
    );
    let (plain_time, plain_bytes) = copy_out(pool, &plain).await?;
    println!(
        "{:<34} {:>8.2} s   {:>7.1} MiB",
        "plain COPY of the same columns",
        plain_time.as_secs_f64(),
        plain_bytes as f64 / 1_048_576.0
    );

    // Postgres's own CSV of the same rows, for comparison with the CSV export.
    let sql = flow_common::db::reports::rows_sql(flow_common::db::reports::RowsShape::Whole)
        .replace("$8", "NULL")
        .replace("$7", "'00000000-0000-0000-0000-000000000000'::uuid")
        .replace("$6", "'-infinity'::timestamptz")
        .replace("$5", "NULL::text")
        .replace("$4", "now()")
        .replace("$3", "'10000-01-01 00:00:00+00'::timestamptz")
        .replace("$2", "'-infinity'::timestamptz")
        .replace("$1", &format!("'{}'::uuid", seeded.flow_id.0));
    let copy = format!("COPY ({sql}) TO STDOUT WITH (FORMAT csv, HEADER)");
    let (copy_time, copied) = copy_out(pool, &copy).await?;
    println!(
        "{:<34} {:>8.2} s   {:>7.1} MiB",
        "Postgres COPY ... TO STDOUT CSV",
        copy_time.as_secs_f64(),
        copied as f64 / 1_048_576.0
    );

    for format in &args.formats {
        reset_peak_memory();
        let (_, baseline) = memory();
        let sampling = CancellationToken::new();
        let sampler = {
            let sampling = sampling.clone();
            tokio::spawn(async move {
                let mut highest = 0f64;
                while !sampling.is_cancelled() {
                    highest = highest.max(memory().1);
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                highest
            })
        };
        let started = Instant::now();
        let (_, body) = report(json!({ "flowId": flow_id, "format": format, "limit": 1 })).await?;
        let url = body["downloadUrl"]
            .as_str()
            .context("downloadUrl")?
            .to_owned();
        let size = when_ready(&client, &url, &seeded.key)
            .await?
            .content_length()
            .unwrap_or_default();
        let elapsed = started.elapsed();
        sampling.cancel();
        let sampled = sampler.await.unwrap_or(0.0);
        let (peak, _) = memory();
        let export_id = body["exportId"].as_str().unwrap_or_default();
        let generation: Option<f64> = sqlx::query_scalar(
            "SELECT extract(epoch FROM finished_at - started_at)::float8 FROM exports WHERE id = $1",
        )
        .bind(flow_domain::ids::ExportId::parse(export_id))
        .fetch_optional(pool)
        .await?
        .flatten();
        let ratio = if format == "csv" {
            measured.csv = Some((elapsed, plain_time));
            format!(
                "   {:.2}× COPY, {:.2}× plain COPY",
                elapsed.as_secs_f64() / copy_time.as_secs_f64(),
                elapsed.as_secs_f64() / plain_time.as_secs_f64()
            )
        } else {
            String::new()
        };
        println!(
            "{:<34} {:>8.2} s   {:>7.1} MiB   worker {:.2} s   peak RSS {:.0} MiB (sampled {:.0}, before {:.0}){ratio}",
            format!("export {format} (request → ready)"),
            elapsed.as_secs_f64(),
            size as f64 / 1_048_576.0,
            generation.unwrap_or(f64::NAN),
            peak,
            sampled,
            baseline,
        );
    }
    shutdown.cancel();
    drop(server.await);
    drop(worker_task.await);
    drop(std::fs::remove_dir_all(&export_dir));
    Ok(measured)
}

/// The figures compared across sizes (medians).
struct Measured {
    report_p50: Duration,
    aggregate_p50: Duration,
    page_p50: Duration,
    flows_p50: Duration,
    /// The CSV export (request → ready) and the plain COPY of its columns, when timed.
    csv: Option<(Duration, Duration)>,
}

/// How each figure grew from the smallest size measured.
fn print_growth(grown: &[(u64, Measured)]) {
    if grown.len() < 2 {
        return;
    }
    let ms = |duration: Duration| duration.as_secs_f64() * 1000.0;
    println!();
    println!("growth (p50):");
    println!(
        "{:>12} {:>12} {:>14} {:>12} {:>14} {:>22}",
        "assignments", "report", "weekly agg.", "first page", "100 flows", "CSV export / plain"
    );
    let first = &grown[0].1;
    for (size, figures) in grown {
        let csv = figures.csv.map_or("—".to_owned(), |(export, plain)| {
            format!(
                "{:.2} s / {:.2} s",
                export.as_secs_f64(),
                plain.as_secs_f64()
            )
        });
        println!(
            "{size:>12} {:>9.1} ms {:>11.1} ms {:>9.1} ms {:>11.1} ms {csv:>22}",
            ms(figures.report_p50),
            ms(figures.aggregate_p50),
            ms(figures.page_p50),
            ms(figures.flows_p50),
        );
    }
    let (size, last) = &grown[grown.len() - 1];
    let ratio = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64().max(1e-9);
    println!(
        "{}× the assignments ({} → {size}): report {:.2}×, weekly aggregate {:.2}×, first page {:.2}×, 100 flows {:.2}×",
        size / grown[0].0.max(1),
        grown[0].0,
        ratio(last.report_p50, first.report_p50),
        ratio(last.aggregate_p50, first.aggregate_p50),
        ratio(last.page_p50, first.page_p50),
        ratio(last.flows_p50, first.flows_p50),
    );
}
