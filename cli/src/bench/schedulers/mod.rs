//! `flowctl bench schedulers`: two scheduler processes, one of them killed with SIGKILL every
//! `--kill-every` seconds and started again, and every piece of the scheduler's lifecycle work
//! (design §16) done exactly once.
//!
//! **Data** (a database of its own on the server of `DATABASE_URL`, dropped at the start and,
//! unless `--keep`, at the end; seeded with `COPY`): one organization in UTC (so a day is 24
//! hours and every instant below is exact), `--flows` flows of five modules with the reminder
//! policy `beforeDueDays [7, 1]`, `afterDueDays [1, 3]`, `escalateAfterDays 14`, a validity of 12
//! months and `renewBeforeDays 30`; `--assignments` assignments, one per (user, flow), in classes
//! by index. "The start" is the instant of the seed; every time of work due falls 1 minute to 20
//! hours before it (within the reminders' one-day catch-up however long the run), every time not
//! due at least two days after it:
//!
//! - 20% **overdue**: pending or in progress, past their due date → one `flow.overdue` each;
//! - 20% **reminder**: open, exactly one reminder of the policy come (the five offsets in turn;
//!   the after-due ones on assignments already overdue) → one `assignment_reminders` row and one
//!   `flow.reminder` each;
//! - 15% **renewal**: completed, the renewal window open (expiry 30 days away) → one
//!   `flow.expiring`, one renewal assignment (and its `flow.assigned`) each;
//! - 15% **expiry**: completed, renewed when the window opened (the renewal assignment exists,
//!   pending), past the expiry → one `flow.expired` each, and one `flow.overdue` for the renewal
//!   assignment (due at the expiry);
//! - 5% **lapsed**: completed, past the expiry, never renewed (the schedulers were down) → all of
//!   it: `flow.expiring`, the renewal assignment and its `flow.assigned`, `flow.expired`, and the
//!   renewal's `flow.overdue` (it is due at the expiry, already past);
//! - 25% **quiet**: open and due in 2 to 5 days, or completed with the window a month or more
//!   away → nothing.
//!
//! The work expected is counted from those classes as the seed writes them, then the seeded rows
//! are checked against it in SQL (due dates past, windows open, expiries past, reminders due by
//! the policy's definition) before anything runs.
//!
//! **Run**: two schedulers, an assign-worker (the renewal assignments) and an outbox-relay, each
//! its own process (`flowctl up --only …`, as `bench fairness` starts them), on queues of their
//! own. Every `--kill-every` seconds one scheduler is killed with SIGKILL and started again, the
//! two in turn, until every piece of work is done (or `--timeout`), then `--settle` seconds more
//! (a duplicate would show up then), then everything stops. Each kill prints whether the victim
//! had a transaction open, and in which statement ([`kills`]).
//!
//! **Check**: for each kind, expected, done, lost, twice, unexpected; any non-zero loss,
//! duplicate or unexpected fails the command. Events carry ids derived from their transition and
//! the outbox skips an id it has, so a second emission of the same event could never add a row:
//! the bench also counts the committed writes of each claim column (`overdue_at`, `renewal_id`,
//! `expiry_settled_at`) with triggers of its own (`AFTER UPDATE OF …`, which fire whether or not
//! the value changed, and roll back with the transaction), so a claim taken twice shows as twice
//! even where the event would have been deduplicated.

mod check;
mod kills;
mod seed;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use clap::Args;
use flow_common::config::CoreConfig;
use flow_domain::events::EventType;
use sqlx::PgPool;
use tokio::process::Child;

use super::seed::on_own_database;
use super::system::{kill_in_turn, spawn_component, stop_components};
use kills::{OpenTransactions, Schedulers};
use seed::{Expected, Seeded};

/// Options of the schedulers benchmark.
#[derive(Debug, Clone, Args)]
pub struct SchedulersBenchArgs {
    /// Assignments seeded, one per (user, flow); about 80% of them carry work due.
    #[arg(long, default_value_t = 20_000)]
    pub assignments: u64,
    /// Flows, each with the reminder policy and the validity.
    #[arg(long, default_value_t = 4)]
    pub flows: u64,
    /// Kill one scheduler with SIGKILL every this many seconds, the two in turn, and start it
    /// again at once (0: never).
    #[arg(long, default_value_t = 3)]
    pub kill_every: u64,
    /// Most rows per transaction of each scheduler step (`OVERDUE_BATCH_SIZE`): small batches
    /// make many transactions for a kill to land in.
    #[arg(long, default_value_t = 200)]
    pub batch_size: i64,
    /// Longest wait, in seconds, for all the work to be done.
    #[arg(long, default_value_t = 300)]
    pub timeout: u64,
    /// Seconds the schedulers keep running (and being killed) once all the work is done, so a
    /// late duplicate shows.
    #[arg(long, default_value_t = 5)]
    pub settle: u64,
    /// Database created for the benchmark on the server of DATABASE_URL (dropped at the start
    /// and, unless `--keep`, at the end).
    #[arg(long, default_value = "flow_bench_schedulers")]
    pub database: String,
    /// Keep the benchmark database at the end (for inspection).
    #[arg(long)]
    pub keep: bool,
    /// Port given to the child processes' API setting (none of them serves it).
    #[arg(long, default_value_t = 18_190)]
    pub port: u16,
}

/// Runs the benchmark; fails when any work was lost, done twice or done unexpectedly.
pub async fn run(core: &CoreConfig, args: SchedulersBenchArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.assignments >= 20 && args.flows >= 1,
        "--assignments must be at least 20 (one of each class) and --flows at least 1"
    );
    anyhow::ensure!(args.batch_size >= 1, "--batch-size must be at least 1");
    let args = &args;
    on_own_database(
        core,
        &args.database,
        4,
        args.keep,
        |core, pool| async move {
            let seeded = seed::seed(&pool, args).await?;
            seed::record_claims(&pool).await?;
            measure(&core, &pool, &seeded, args).await
        },
    )
    .await
}

/// Work done so far, as counts (the progress lines and the end of the wait).
#[derive(Debug, Default, PartialEq, Eq)]
struct Progress {
    overdue: i64,
    reminders: i64,
    reminder_events: i64,
    expiring: i64,
    renewals: i64,
    assigned: i64,
    expired: i64,
}

impl Progress {
    async fn read(pool: &PgPool, start: DateTime<Utc>) -> anyhow::Result<Self> {
        let events: Vec<(String, i64)> =
            sqlx::query_as("SELECT event_type, count(*) FROM outbox GROUP BY event_type")
                .fetch_all(pool)
                .await?;
        let events: HashMap<String, i64> = events.into_iter().collect();
        let event = |event_type: EventType| events.get(event_type.as_str()).copied().unwrap_or(0);
        let (reminders, renewals): (i64, i64) = sqlx::query_as(
            "SELECT (SELECT count(*) FROM assignment_reminders),
                    (SELECT count(*) FROM assignments WHERE assigned_at >= $1)",
        )
        .bind(start)
        .fetch_one(pool)
        .await?;
        Ok(Self {
            overdue: event(EventType::Overdue),
            reminders,
            reminder_events: event(EventType::Reminder),
            expiring: event(EventType::Expiring),
            renewals,
            assigned: event(EventType::Assigned),
            expired: event(EventType::Expired),
        })
    }

    fn expected(expected: &Expected) -> Self {
        let count = |set: &HashSet<String>| set.len() as i64;
        Self {
            overdue: count(&expected.overdue),
            reminders: count(&expected.reminders),
            reminder_events: count(&expected.reminders),
            expiring: count(&expected.renewed),
            renewals: count(&expected.renewal_pairs),
            assigned: count(&expected.renewal_ids),
            expired: count(&expected.expired),
        }
    }

    /// Whether every count reached `target`'s.
    fn reached(&self, target: &Self) -> bool {
        self.overdue >= target.overdue
            && self.reminders >= target.reminders
            && self.reminder_events >= target.reminder_events
            && self.expiring >= target.expiring
            && self.renewals >= target.renewals
            && self.assigned >= target.assigned
            && self.expired >= target.expired
    }

    fn line(&self, target: &Self) -> String {
        format!(
            "overdue {}/{}, reminders {}/{}, expiring {}/{}, renewals {}/{}, expired {}/{}",
            self.overdue,
            target.overdue,
            self.reminders,
            target.reminders,
            self.expiring,
            target.expiring,
            self.renewals,
            target.renewals,
            self.expired,
            target.expired
        )
    }
}

/// Starts the components, kills the schedulers in turn until the work is done, stops everything
/// and checks.
async fn measure(
    core: &CoreConfig,
    pool: &PgPool,
    seeded: &Seeded,
    args: &SchedulersBenchArgs,
) -> anyhow::Result<()> {
    let target = Progress::expected(&seeded.expected);
    let past_due = seeded.classes.get("overdue").copied().unwrap_or(0) as i64;
    println!(
        "work due: {} flow.overdue ({past_due} past due, {} renewal assignments of the expiry and \
         lapsed classes), {} reminders, {} renewals (flow.expiring + a renewal assignment), {} \
         expiries (flow.expired)",
        target.overdue,
        target.overdue - past_due,
        target.reminders,
        target.expiring,
        target.expired,
    );
    let batch = args.batch_size.to_string();
    let log = std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into());
    let environment = [
        ("OVERDUE_BATCH_SIZE", batch.as_str()),
        ("RUST_LOG", log.as_str()),
    ];
    let started = Instant::now();
    let mut others: Vec<Child> = Vec::new();
    for component in ["assign-worker", "outbox-relay"] {
        others.push(spawn_component(component, args.port, core, &environment)?);
    }
    let schedulers = Arc::new(tokio::sync::Mutex::new(kills::start(
        core,
        args.port,
        &environment,
    )?));
    println!(
        "components: two schedulers, an assign-worker and an outbox-relay, each its own process; \
         batches of {}; {}",
        args.batch_size,
        if args.kill_every > 0 {
            format!(
                "a scheduler killed with SIGKILL every {} s, the two in turn, and started again",
                args.kill_every
            )
        } else {
            "no kills".to_owned()
        }
    );
    let stop_killing = tokio_util::sync::CancellationToken::new();
    let killer = (args.kill_every > 0).then(|| {
        kill_in_turn(
            schedulers.clone(),
            Duration::from_secs(args.kill_every),
            core,
            args.port,
            &environment,
            stop_killing.clone(),
            OpenTransactions {
                pool: pool.clone(),
                started,
            },
        )
    });
    let outcome = wait_for_work(pool, seeded, &target, started, args, &schedulers).await;
    if matches!(outcome, Ok(Some(_))) && args.settle > 0 {
        tokio::time::sleep(Duration::from_secs(args.settle)).await;
    }
    stop_killing.cancel();
    let killed = match killer {
        Some(killer) => killer.await?,
        None => Ok(()),
    };
    let wall = started.elapsed();
    let mut schedulers = schedulers.lock().await;
    stop_components(
        others
            .into_iter()
            .chain(schedulers.running.drain(..).map(|(_, child)| child)),
    )
    .await;
    killed?;
    let done = outcome?;
    println!();
    let wrong = check::check(pool, seeded).await?;
    let during = done.map_or(schedulers.kills.len(), |(_, kills)| kills);
    println!(
        "schedulers killed with SIGKILL: {} ({during} before all the work was done; {} of them \
         with a transaction open, read from pg_stat_activity just before the kill), replica 1 \
         {} times, replica 2 {}; wall time {:.1} s (all work done in {}, then {} s of settling)",
        schedulers.kills.len(),
        schedulers.kills[..during.min(schedulers.kills.len())]
            .iter()
            .filter(|kill| !kill.open.is_empty())
            .count(),
        schedulers
            .kills
            .iter()
            .filter(|kill| kill.replica == 0)
            .count(),
        schedulers
            .kills
            .iter()
            .filter(|kill| kill.replica == 1)
            .count(),
        wall.as_secs_f64(),
        done.map_or("— (timed out)".to_owned(), |(took, _)| format!(
            "{:.1} s",
            took.as_secs_f64()
        )),
        args.settle,
    );
    anyhow::ensure!(
        done.is_some(),
        "not all the work was done within {} s",
        args.timeout
    );
    anyhow::ensure!(
        wrong == 0,
        "{wrong} pieces of scheduler work lost, done twice or unexpected"
    );
    Ok(())
}

/// Polls the work done every 250 ms (a line every 5 s) until all of it is, or `--timeout`;
/// answers when it was done and how many kills came before, `None` on a timeout.
async fn wait_for_work(
    pool: &PgPool,
    seeded: &Seeded,
    target: &Progress,
    started: Instant,
    args: &SchedulersBenchArgs,
    schedulers: &tokio::sync::Mutex<Schedulers>,
) -> anyhow::Result<Option<(Duration, usize)>> {
    let mut last_line = Instant::now();
    loop {
        let progress = Progress::read(pool, seeded.start).await?;
        if progress.reached(target) {
            let took = started.elapsed();
            let kills = schedulers.lock().await.kills.len();
            println!(
                "all work done {:.1} s after the components started, {kills} kills meanwhile \
                 ({})",
                took.as_secs_f64(),
                progress.line(target)
            );
            return Ok(Some((took, kills)));
        }
        if started.elapsed() > Duration::from_secs(args.timeout) {
            println!(
                "timed out after {} s: {}",
                args.timeout,
                progress.line(target)
            );
            return Ok(None);
        }
        if last_line.elapsed() >= Duration::from_secs(5) {
            last_line = Instant::now();
            println!(
                "  {:>5.1} s: {}",
                started.elapsed().as_secs_f64(),
                progress.line(target)
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
