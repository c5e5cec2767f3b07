//! `flowctl bench detailed`: the API's memory for the worst detailed report it allows. Seeds a
//! flow of 500 modules whose every assignment has completed every module, as many assignments as
//! one detailed page may hold (100,000 module-progress entries), starts the API as its own process
//! (`flowctl up --only api`, as production runs it), sends that page again and again with several
//! in flight, and prints the API's resident memory before and its peak after, with the answer's
//! size and latency.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use flow_common::config::CoreConfig;
use flow_common::db::{self, flows::NewModule, orgs};
use flow_domain::ids::{AssignmentId, ModuleId, UserId};
use flow_domain::report::cost::MAX_DETAILED_ENTRIES;
use serde_json::json;

use super::system::{memory_mib, spawn_component};

/// Options of the detailed-report benchmark.
#[derive(Debug, Clone, Args)]
pub struct DetailedBenchArgs {
    /// Modules of the flow (at most 500, the API's limit).
    #[arg(long, default_value_t = 500)]
    pub modules: usize,
    /// Reports requested in all.
    #[arg(long, default_value_t = 40)]
    pub requests: usize,
    /// Reports in flight at once.
    #[arg(long, default_value_t = 4)]
    pub concurrency: usize,
    /// Port of the API started for the run.
    #[arg(long, default_value_t = 18_090)]
    pub port: u16,
}

/// Seeds, starts the API, measures.
pub async fn run(core: &CoreConfig, args: DetailedBenchArgs) -> anyhow::Result<()> {
    crate::up::prepare_database(core).await?;
    let pool = crate::admin::pool(core).await?;
    let modules = i64::try_from(args.modules.clamp(1, 500))?;
    let rows = MAX_DETAILED_ENTRIES / modules;
    let org = orgs::create(
        &pool,
        &orgs::NewOrganization {
            name: "Detailed bench org".into(),
            tier: orgs::Tier::Enterprise,
            timezone: chrono_tz::Tz::UTC,
            assign_limit_per_minute: None,
            report_limit_per_minute: Some(1_000_000),
        },
    )
    .await?;
    let new_modules: Vec<NewModule> = (0..modules)
        .map(|index| NewModule {
            name: format!("Module {index} of a long course"),
            estimated_minutes: 10,
            activity_id: None,
        })
        .collect();
    let (flow, _) = db::flows::create(&pool, org.id, "Long course", None, &new_modules).await?;
    let (_, key) = db::keys::create(&pool, org.id, "bench").await?;
    let module_ids: Vec<ModuleId> =
        sqlx::query_scalar("SELECT id FROM modules WHERE flow_id = $1 ORDER BY position")
            .bind(flow.id)
            .fetch_all(&pool)
            .await?;
    let users: Vec<UserId> = (0..rows).map(|_| UserId::new()).collect();
    let emails: Vec<String> = (0..rows)
        .map(|index| format!("learner{index}-{}@bench.example", flow.id))
        .collect();
    let assignments: Vec<AssignmentId> = (0..rows).map(|_| AssignmentId::new()).collect();
    sqlx::query(
        "INSERT INTO users (id, org_id, email, email_normalized)
         SELECT id, $1, email, email FROM UNNEST($2::uuid[], $3::text[]) AS t(id, email)",
    )
    .bind(org.id)
    .bind(&users)
    .bind(&emails)
    .execute(&pool)
    .await?;
    sqlx::query(
        "INSERT INTO assignments (id, org_id, flow_id, user_id, status, priority, assigned_at,
                                  started_at, completed_at)
         SELECT id, $1, $2, user_id, 'completed', 'medium', now() - interval '2 days',
                now() - interval '2 days', now() - interval '1 day'
         FROM UNNEST($3::uuid[], $4::uuid[]) AS t(id, user_id)",
    )
    .bind(org.id)
    .bind(flow.id)
    .bind(&assignments)
    .bind(&users)
    .execute(&pool)
    .await?;
    sqlx::query(
        "INSERT INTO module_progress (assignment_id, module_id, status, started_at, completed_at)
         SELECT a, m, 'completed', now() - interval '2 days', now() - interval '1 day'
         FROM UNNEST($1::uuid[]) AS a, UNNEST($2::uuid[]) AS m",
    )
    .bind(&assignments)
    .bind(&module_ids)
    .execute(&pool)
    .await?;
    sqlx::query("VACUUM (ANALYZE) module_progress")
        .execute(&pool)
        .await?;
    println!(
        "bench detailed: a flow of {modules} modules, {rows} assignments with every module completed ({} entries a page), {} requests, {} in flight",
        rows * modules,
        args.requests,
        args.concurrency
    );

    let mut api = spawn_component("api", args.port, core, &[("RUST_LOG", "warn")])?;
    let pid = api.id().context("the API's process id")?;
    let base = format!("http://127.0.0.1:{}", args.port);
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(120))
        .build()?;
    let deadline = Instant::now() + Duration::from_secs(60);
    while !client
        .get(format!("{base}/readyz"))
        .send()
        .await
        .is_ok_and(|response| response.status().is_success())
    {
        anyhow::ensure!(Instant::now() < deadline, "the API did not become ready");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (idle, _) = memory_mib(pid).context("the API's memory")?;
    let body = json!({ "flowId": flow.id, "detailed": true, "limit": rows });
    let queue = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..args.concurrency.max(1) {
        let (client, base, key, body, queue) = (
            client.clone(),
            base.clone(),
            key.clone(),
            body.clone(),
            queue.clone(),
        );
        let requests = args.requests;
        tasks.push(tokio::spawn(async move {
            let mut seen = Vec::new();
            while queue.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < requests {
                let started = Instant::now();
                let response = client
                    .post(format!("{base}/v1/flows/report"))
                    .bearer_auth(&key)
                    .json(&body)
                    .send()
                    .await?;
                let status = response.status();
                let bytes = response.bytes().await?.len();
                anyhow::ensure!(status.is_success(), "the report answered {status}");
                seen.push((started.elapsed(), bytes));
            }
            anyhow::Ok(seen)
        }));
    }
    let mut results = Vec::new();
    for task in tasks {
        results.extend(task.await??);
    }
    let (rss, peak) = memory_mib(pid).context("the API's memory")?;
    results.sort();
    let median = results[results.len() / 2];
    let slowest = results[results.len() - 1];
    println!(
        "  answer {:.1} MiB; latency median {:.0} ms, slowest {:.0} ms",
        median.1 as f64 / 1024.0 / 1024.0,
        median.0.as_secs_f64() * 1e3,
        slowest.0.as_secs_f64() * 1e3
    );
    println!("  API resident memory: {idle:.0} MiB ready, {rss:.0} MiB after, peak {peak:.0} MiB");
    api.kill().await?;
    pool.close().await;
    Ok(())
}
