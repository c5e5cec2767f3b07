//! `flowctl bench lifecycle` (issue 37): the scheduler's lifecycle work (design §16) over a year
//! of data, simulated day by day, with nothing lost or sent twice.
//!
//! **Data** (a database of its own on the server of `DATABASE_URL`, dropped at the end unless
//! `--keep`; seeded with `COPY`, the same every run but for the ids and the start instant): one
//! organization in `Europe/Berlin`, `--users` users, `--flows` flows of five modules, each with
//! the reminder policy `beforeDueDays [7, 1]`, `afterDueDays [1, 3, 7]`, `escalateAfterDays 14`
//! and a validity of 12 months with `renewBeforeDays 30` (set through `flow_common::db::flows`).
//! `--assignments` assignments, at most one per (user, flow) so that what the scheduler must do is
//! countable independently of it:
//!
//! - half open, due at an instant spread uniformly over the year around the start (±182.5 days),
//!   assigned 7 to 90 days before their due date (never after the start); those due before the
//!   start are `overdue` already (as a running scheduler leaves them), the others `pending` or
//!   `in_progress`;
//! - half `completed`, at an instant spread over the 360 days before the start, with `expires_at`
//!   and `renew_at` set by the very SQL the completion uses
//!   ([`flow_common::db::lifecycle::EXPIRY_AND_RENEWAL`]), so expiries fall 5 to 365 days after
//!   the start and renewal windows open from 25 days before it. A completion whose window opened
//!   before the start was renewed then: it carries its `renewal_id`, and its renewal assignment
//!   (pending, due at the expiry, assigned when the window opened) exists;
//! - the reminders whose time came before the start are recorded as sent
//!   (`assignment_reminders`), as a running scheduler leaves them.
//!
//! The start is the current hour (so the attention page, which reads at the real now, sees the
//! data as a running system would have it). "Before the start" is strictly before; the simulated
//! span is `[start, last round]`.
//!
//! **Attention page**: `flow_app::attention::read` (the application-layer call behind the
//! dashboard's home page) on the seeded data, `--iterations` times: p50/p95.
//!
//! **Simulation**: `--days` days of `--rounds-per-day` rounds (24: one an hour); a round at `now`
//! does what a round of the real scheduler (`flow_workers::scheduler`) does for the lifecycle,
//! with the same functions, `now` given instead of the clock: overdue (`upkeep::mark_overdue`
//! in batches), reminders (`scheduler::scan_reminders`), renewals (`upkeep::claim_renewals`, then
//! `scheduler::publish_renewals` through a real publisher to the bulk lane, then the claim's
//! commit), expiries (`upkeep::expire_completions` in batches), then the rollup merge
//! (`scheduler::merge_rollups`). Each step is timed: its wall time is the Postgres work (the
//! bench and Postgres are alone on the connection), but for the publish, timed apart. An
//! assign-worker runs in this process (its own topology, `bench.<uuid>`, deleted at the end) and
//! persists the renewals; after each simulated day the bench waits until it has persisted every
//! renewal published (so a renewal assignment's own reminders, 23 days later at the soonest,
//! find it), and that wait is not the scheduler's.
//!
//! **Baseline**, in the same run, in every round: the least a scan for the round's reminders can
//! cost, a plain count on the organization's open-due index of the open assignments whose due
//! date, shifted by each offset of the policy, falls in the round's window (previous round, now].
//!
//! **Per day** it prints the events emitted (overdue, reminders, expiring = renewals, expired),
//! their rate over the scheduler's time (database + publish), the database time per event, and the
//! baseline's time and rows; then min/median/max over the days.
//!
//! **Nothing lost or twice**: at the end it computes in SQL, from the seeded data and the policy
//! alone (due dates, `assigned_at`, `expires_at`, `renew_at` and the offsets, in the
//! organization's zone), what was due in the span — each reminder (assignment, kind, offset), each
//! overdue and expiry, each renewal window opening — and compares it with the `flow.overdue`,
//! `flow.reminder`, `flow.expiring` and `flow.expired` rows of the outbox and with the renewal
//! assignments persisted (another assignment of the same user and flow, assigned in the span):
//! lost, twice, unexpected. Any of them non-zero fails the command.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use chrono::{DateTime, DurationRound, Utc};
use clap::Args;
use flow_app::upkeep;
use flow_common::amqp::{Publisher, Topology};
use flow_common::config::{CoreConfig, from_env};
use flow_domain::expiry::Validity;
use flow_domain::ids::{AssignmentId, FlowId, OrgId, UserId};
use flow_domain::reminders::ReminderPolicy;
use flow_workers::scheduler;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use super::report::{Random, summary};
use super::seed::{
    Assignment, COPY_ASSIGNMENTS, COPY_RENEWALS, copy_in, link_renewals, on_own_database,
    org_with_policy_flows, set_expiry_and_renewal, vacuum_analyze, write_renewal,
};

/// Options of the lifecycle benchmark.
#[derive(Debug, Clone, Args)]
pub struct LifecycleBenchArgs {
    /// Assignments seeded (at most users × flows: one per user and flow).
    #[arg(long, default_value_t = 1_000_000)]
    pub assignments: u64,
    /// Users of the organization.
    #[arg(long, default_value_t = 50_000)]
    pub users: u64,
    /// Flows, each with the reminder policy and the validity.
    #[arg(long, default_value_t = 20)]
    pub flows: u64,
    /// Simulated days.
    #[arg(long, default_value_t = 30)]
    pub days: u32,
    /// Scheduler rounds per simulated day.
    #[arg(long, default_value_t = 24)]
    pub rounds_per_day: u32,
    /// Most rows per transaction of each step (the scheduler's `OVERDUE_BATCH_SIZE`).
    #[arg(long, default_value_t = 1_000)]
    pub batch_size: i64,
    /// Timed reads of the attention page.
    #[arg(long, default_value_t = 50)]
    pub iterations: usize,
    /// Database created for the benchmark on the server of DATABASE_URL (dropped at the start and,
    /// unless `--keep`, at the end).
    #[arg(long, default_value = "flow_bench_lifecycle")]
    pub database: String,
    /// Keep the benchmark database at the end (for inspection; the next run seeds afresh, the
    /// simulation having moved it on).
    #[arg(long)]
    pub keep: bool,
}

/// The organization's time zone.
const ZONE: chrono_tz::Tz = chrono_tz::Europe::Berlin;
/// Days before the due date a reminder goes.
const BEFORE_DUE_DAYS: [i32; 2] = [7, 1];
/// Days after the due date a reminder goes.
const AFTER_DUE_DAYS: [i32; 3] = [1, 3, 7];
/// Days after the due date the manager is told.
const ESCALATE_AFTER_DAYS: i32 = 14;
/// Validity of a completion, in months.
const VALID_FOR_MONTHS: i32 = 12;
/// Days before expiry the renewal is assigned.
const RENEW_BEFORE_DAYS: i32 = 30;

/// The policy's reminders as `(kind, days, sign)` rows: the time of each is the due date plus
/// `sign × days` local days.
fn offsets() -> Vec<(&'static str, i32, i32)> {
    BEFORE_DUE_DAYS
        .iter()
        .map(|days| ("due_soon", *days, -1))
        .chain(AFTER_DUE_DAYS.iter().map(|days| ("overdue", *days, 1)))
        .chain([("escalation", ESCALATE_AFTER_DAYS, 1)])
        .collect()
}

/// The policy's offsets as a `VALUES` list aliased `p(kind, days, sign)`.
fn offsets_sql() -> String {
    let rows: Vec<String> = offsets()
        .iter()
        .map(|(kind, days, sign)| format!("('{kind}', {days}, {sign})"))
        .collect();
    format!("(VALUES {}) AS p(kind, days, sign)", rows.join(", "))
}

/// When the reminder `p` of the assignment `a` goes: the due date plus the offset in local days of
/// the organization's zone (written here from the policy's definition, not taken from the code
/// under test).
fn remind_at_sql() -> String {
    let zone = ZONE.name();
    format!(
        "(((a.due_at AT TIME ZONE '{zone}') + make_interval(days => p.sign * p.days)) \
         AT TIME ZONE '{zone}')"
    )
}

/// Open statuses.
const OPEN: &str = "a.status IN ('pending', 'in_progress', 'overdue')";

/// Runs the benchmark and prints what it measured; fails when anything was lost or sent twice.
pub async fn run(core: &CoreConfig, args: LifecycleBenchArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.users >= 1 && args.flows >= 1 && args.days >= 1 && args.rounds_per_day >= 1,
        "--users, --flows, --days and --rounds-per-day must be at least 1"
    );
    anyhow::ensure!(
        args.assignments <= args.users * args.flows,
        "--assignments {} exceeds users × flows ({}): the bench seeds one assignment per user and \
         flow at most",
        args.assignments,
        args.users * args.flows
    );
    anyhow::ensure!(args.batch_size >= 1, "--batch-size must be at least 1");
    let args = &args;
    on_own_database(
        core,
        &args.database,
        8,
        args.keep,
        |core, pool| async move {
            let start = Utc::now().duration_trunc(chrono::Duration::hours(1))?;
            let seeded = seed(&pool, args, start).await?;
            attention(&core, &seeded, args.iterations).await?;
            simulate(&core, &pool, &seeded, args).await
        },
    )
    .await
}

/// What the seed created.
struct Seeded {
    org_id: OrgId,
    start: DateTime<Utc>,
}

/// A completion's renewal window, read back after its expiry was set.
#[derive(sqlx::FromRow)]
struct Window {
    id: AssignmentId,
    flow_id: FlowId,
    user_id: UserId,
    expires_at: DateTime<Utc>,
    renew_at: DateTime<Utc>,
}

/// Seeds the organization, its users and flows, and the assignments (see the module's doc).
async fn seed(
    pool: &PgPool,
    args: &LifecycleBenchArgs,
    start: DateTime<Utc>,
) -> anyhow::Result<Seeded> {
    let started = Instant::now();
    let policy = ReminderPolicy {
        before_due_days: BEFORE_DUE_DAYS.to_vec(),
        after_due_days: AFTER_DUE_DAYS.to_vec(),
        escalate_after_days: Some(ESCALATE_AFTER_DAYS),
    };
    let validity = Validity {
        months: Some(VALID_FOR_MONTHS),
        days: None,
    };
    let (org_id, flows) = org_with_policy_flows(
        pool,
        "Lifecycle",
        ZONE,
        args.flows,
        &policy,
        validity,
        RENEW_BEFORE_DAYS,
    )
    .await?;

    let bar = crate::output::progress(args.users + args.assignments, "seeding");
    let mut users = copy_in(
        pool,
        "COPY users (id, org_id, email, email_normalized) FROM STDIN",
    )
    .await?;
    let mut user_ids = Vec::with_capacity(args.users as usize);
    for index in 0..args.users {
        let user_id = UserId::new();
        let email = format!("lifecycle-{index}@bench.example");
        let _ = writeln!(users.rows, "{}\t{}\t{email}\t{email}", user_id.0, org_id.0);
        user_ids.push(user_id);
        if users.flush_when_full().await? {
            bar.set_position(index);
        }
    }
    users.finish().await?;

    let mut random = Random(0x9e37_79b9_7f4a_7c15);
    let mut assignments = copy_in(pool, COPY_ASSIGNMENTS).await?;
    let seconds = |count: u64| chrono::Duration::seconds(count as i64);
    const DAY: u64 = 86_400;
    let (mut open, mut completed) = (0u64, 0u64);
    for index in 0..args.assignments {
        // One assignment per (user, flow), every user and flow taking their share: index =
        // round × users + user ↦ (user, (round + user) mod flows), one to one below users × flows.
        let (round, user) = (index / args.users, index % args.users);
        let user_id = user_ids[user as usize];
        let flow_id = flows[((round + user) % args.flows) as usize];
        let (status, due_at, assigned_at, started_at, completed_at, overdue_at);
        if random.below(2) == 0 {
            open += 1;
            let due = start - seconds(182 * DAY + DAY / 2) + seconds(random.below(365 * DAY));
            let lead = seconds(7 * DAY + random.below(84 * DAY));
            let assigned = (due - lead).min(start - seconds(3_600));
            due_at = Some(due);
            assigned_at = assigned;
            let begun = random.below(2) == 0;
            started_at = begun.then(|| {
                assigned + seconds(random.below((start - assigned).num_seconds().max(1) as u64))
            });
            completed_at = None;
            if due < start {
                status = "overdue";
                overdue_at = Some(due);
            } else {
                status = if begun { "in_progress" } else { "pending" };
                overdue_at = None;
            }
        } else {
            completed += 1;
            let done = start - seconds(1 + random.below(360 * DAY));
            let assigned = done - seconds(3_600 + random.below(60 * DAY));
            status = "completed";
            due_at = Some(assigned + seconds(30 * DAY));
            assigned_at = assigned;
            started_at = Some(
                assigned + seconds(random.below((done - assigned).num_seconds().max(1) as u64)),
            );
            completed_at = Some(done);
            overdue_at = None;
        }
        Assignment {
            id: AssignmentId::new(),
            org_id,
            flow_id,
            user_id,
            status,
            due_at,
            assigned_at,
            started_at,
            completed_at,
            overdue_at,
        }
        .write(&mut assignments.rows);
        if assignments.flush_when_full().await? {
            bar.set_position(args.users + index);
        }
    }
    assignments.finish().await?;
    bar.finish_and_clear();

    set_expiry_and_renewal(pool, org_id).await?;

    // Completions whose window opened before the start: renewed then.
    let renewed: Vec<Window> = sqlx::query_as(
        "SELECT id, flow_id, user_id, expires_at, renew_at FROM assignments
         WHERE org_id = $1 AND status = 'completed' AND renew_at < $2",
    )
    .bind(org_id)
    .bind(start)
    .fetch_all(pool)
    .await?;
    let mut renewals = copy_in(pool, COPY_RENEWALS).await?;
    for window in &renewed {
        write_renewal(
            &mut renewals.rows,
            AssignmentId::for_renewal(window.id),
            (org_id, window.flow_id, window.user_id),
            window.expires_at,
            window.renew_at,
        );
    }
    renewals.finish().await?;
    let ids: Vec<AssignmentId> = renewed.iter().map(|window| window.id).collect();
    let renewal_ids: Vec<AssignmentId> = ids
        .iter()
        .map(|id| AssignmentId::for_renewal(*id))
        .collect();
    link_renewals(pool, &ids, &renewal_ids).await?;

    // The reminders whose time came before the start, as sent.
    let reminded = sqlx::query(sqlx::AssertSqlSafe(format!(
        "INSERT INTO assignment_reminders (assignment_id, due_at, kind, offset_days, remind_at, sent_at)
         SELECT a.id, a.due_at, p.kind, p.days, r.at, r.at
         FROM assignments a CROSS JOIN {offsets}
         CROSS JOIN LATERAL (SELECT {remind_at} AS at) r
         WHERE a.org_id = $1 AND {OPEN} AND a.due_at IS NOT NULL
           AND r.at < $2 AND r.at >= a.assigned_at",
        offsets = offsets_sql(),
        remind_at = remind_at_sql(),
    )))
    .bind(org_id)
    .bind(start)
    .execute(pool)
    .await?
    .rows_affected();

    // A running system's rollups are merged and its tables analysed.
    scheduler::merge_rollups(pool).await?;
    vacuum_analyze(
        pool,
        &[
            "users",
            "assignments",
            "assignment_reminders",
            "assignment_rollups",
            "assignment_rollup_deltas",
        ],
    )
    .await?;
    println!(
        "seeded in {:.1} s: {} users, {} flows, {} assignments ({open} open, {completed} completed \
         of which {} renewed before the start, and their {} renewal assignments), {reminded} \
         reminders sent before the start; start {}",
        started.elapsed().as_secs_f64(),
        args.users,
        args.flows,
        args.assignments + renewed.len() as u64,
        renewed.len(),
        renewed.len(),
        start.with_timezone(&ZONE).format("%Y-%m-%d %H:%M %Z"),
    );
    Ok(Seeded { org_id, start })
}

/// Times the application-layer read behind the dashboard's home page on the seeded data.
async fn attention(core: &CoreConfig, seeded: &Seeded, iterations: usize) -> anyhow::Result<()> {
    let tool = crate::context::Tool::open(core, crate::context::DEFAULT_BASE_URL).await?;
    let outcome = async {
        let caller = crate::context::organization(&tool, seeded.org_id).await?;
        let first = flow_app::attention::read(&tool, crate::context::acting(&caller)).await?;
        println!(
            "attention page: {} overdue, {} due within {} days, {} expiring within as many",
            first.counts.overdue,
            first.counts.due_soon,
            flow_app::attention::DUE_SOON_DAYS,
            first.expiring.0
        );
        let mut samples = Vec::with_capacity(iterations);
        for _ in 0..iterations.max(1) {
            let started = Instant::now();
            flow_app::attention::read(&tool, crate::context::acting(&caller)).await?;
            samples.push(started.elapsed());
        }
        summary("attention page (app::attention)", &mut samples);
        anyhow::Ok(())
    }
    .await;
    tool.close().await;
    outcome
}

/// What the rounds of a day (or one round) did, and how long each step took.
#[derive(Debug, Default, Clone, Copy)]
struct Work {
    overdue: usize,
    reminders: usize,
    /// Completions claimed by the renewal step (each one `flow.expiring`).
    expiring: usize,
    /// Renewal assignments published.
    published: usize,
    expired: usize,
    overdue_time: Duration,
    reminder_time: Duration,
    /// The renewal claims and their commits.
    renewal_time: Duration,
    publish_time: Duration,
    expiry_time: Duration,
    merge_time: Duration,
    baseline_time: Duration,
    baseline_rows: i64,
}

impl Work {
    fn add(&mut self, other: &Work) {
        self.overdue += other.overdue;
        self.reminders += other.reminders;
        self.expiring += other.expiring;
        self.published += other.published;
        self.expired += other.expired;
        self.overdue_time += other.overdue_time;
        self.reminder_time += other.reminder_time;
        self.renewal_time += other.renewal_time;
        self.publish_time += other.publish_time;
        self.expiry_time += other.expiry_time;
        self.merge_time += other.merge_time;
        self.baseline_time += other.baseline_time;
        self.baseline_rows += other.baseline_rows;
    }

    fn events(&self) -> usize {
        self.overdue + self.reminders + self.expiring + self.expired
    }

    /// Postgres time of the event-emitting steps.
    fn database(&self) -> Duration {
        self.overdue_time + self.reminder_time + self.renewal_time + self.expiry_time
    }

    fn events_per_second(&self) -> f64 {
        self.events() as f64
            / (self.database() + self.publish_time)
                .as_secs_f64()
                .max(1e-9)
    }

    fn ms_per_event(&self) -> f64 {
        self.database().as_secs_f64() * 1000.0 / self.events().max(1) as f64
    }
}

/// One scheduler round at `now` (the lifecycle steps of `flow_workers::scheduler`'s loop, in its
/// order), then the baseline over the round's window `(previous, now]`.
async fn round(
    pool: &PgPool,
    publisher: &Publisher,
    org_id: OrgId,
    previous: DateTime<Utc>,
    now: DateTime<Utc>,
    batch: i64,
) -> anyhow::Result<Work> {
    let mut work = Work::default();
    let started = Instant::now();
    loop {
        let changed = upkeep::mark_overdue(pool, now, batch).await?;
        work.overdue += changed;
        if (changed as i64) < batch {
            break;
        }
    }
    work.overdue_time = started.elapsed();

    let started = Instant::now();
    work.reminders = scheduler::scan_reminders(pool, now, batch).await?;
    work.reminder_time = started.elapsed();

    loop {
        let started = Instant::now();
        let claim = upkeep::claim_renewals(pool, now, batch).await?;
        work.renewal_time += started.elapsed();
        let started = Instant::now();
        scheduler::publish_renewals(publisher, &claim.renewals).await?;
        work.publish_time += started.elapsed();
        let (claimed, published) = (claim.claimed, claim.renewals.len());
        let started = Instant::now();
        claim.commit().await?;
        work.renewal_time += started.elapsed();
        work.expiring += claimed;
        work.published += published;
        if (claimed as i64) < batch {
            break;
        }
    }

    let started = Instant::now();
    loop {
        let settled = upkeep::expire_completions(pool, now, batch).await?;
        work.expired += settled;
        if (settled as i64) < batch {
            break;
        }
    }
    work.expiry_time = started.elapsed();

    let started = Instant::now();
    scheduler::merge_rollups(pool).await?;
    work.merge_time = started.elapsed();

    let started = Instant::now();
    work.baseline_rows = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT COALESCE(sum(c.rows), 0)::bigint FROM {offsets}
         CROSS JOIN LATERAL (
            SELECT count(*) AS rows FROM assignments a
            WHERE a.org_id = $1 AND {OPEN} AND a.due_at IS NOT NULL
              AND a.due_at > $2 - make_interval(days => p.sign * p.days)
              AND a.due_at <= $3 - make_interval(days => p.sign * p.days)) c",
        offsets = offsets_sql()
    )))
    .bind(org_id)
    .bind(previous)
    .bind(now)
    .fetch_one(pool)
    .await?;
    work.baseline_time = started.elapsed();
    Ok(work)
}

/// Completions renewed whose renewal assignment the assign-worker has not persisted yet.
async fn renewals_pending(pool: &PgPool, org_id: OrgId) -> anyhow::Result<i64> {
    Ok(sqlx::query_scalar(
        "SELECT count(*) FROM assignments a
         WHERE a.org_id = $1 AND a.renewal_id IS NOT NULL
           AND NOT EXISTS (SELECT 1 FROM assignments b WHERE b.id = a.renewal_id)",
    )
    .bind(org_id)
    .fetch_one(pool)
    .await?)
}

/// Waits until the assign-worker has persisted every renewal published, or until it made no
/// progress for a minute (what is missing then shows as lost in the check); returns the wait.
async fn drain(pool: &PgPool, org_id: OrgId) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let mut last = (i64::MAX, Instant::now());
    loop {
        let pending = renewals_pending(pool, org_id).await?;
        if pending == 0 {
            return Ok(started.elapsed());
        }
        if pending < last.0 {
            last = (pending, Instant::now());
        } else if last.1.elapsed() > Duration::from_secs(60) {
            println!(
                "  {pending} renewal assignments not persisted after a minute without progress"
            );
            return Ok(started.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Runs the simulated days with an in-process assign-worker, prints the figures, and checks.
async fn simulate(
    core: &CoreConfig,
    pool: &PgPool,
    seeded: &Seeded,
    args: &LifecycleBenchArgs,
) -> anyhow::Result<()> {
    let shutdown = CancellationToken::new();
    let topology = Topology::new(core.queue_prefix.clone(), core.delivery_limit);
    let publisher = Publisher::new(
        &core.amqp_url,
        "flowctl-bench",
        topology,
        2,
        Duration::from_secs(10),
    );
    // Declares the topology before anything is published to it.
    publisher.connect_now().await?;
    let mut worker: flow_workers::assign::AssignWorkerConfig = from_env();
    worker.core = core.clone();
    worker.core.database_max_connections = 4;
    let worker_task = tokio::spawn(flow_workers::runtime::run(worker, shutdown.clone()));
    let outcome = async {
        let step = chrono::Duration::seconds(86_400 / i64::from(args.rounds_per_day));
        println!();
        println!(
            "{} simulated days of {} rounds from {} (batches of {}); times in ms, the scheduler's \
             = Postgres (overdue + reminders + renewal claims + expiries) + publish",
            args.days,
            args.rounds_per_day,
            seeded.start.with_timezone(&ZONE).format("%Y-%m-%d %H:%M %Z"),
            args.batch_size
        );
        println!(
            "{:>4} {:>10} {:>8} {:>9} {:>8} {:>8} {:>8} {:>9} {:>9} {:>8} {:>8} {:>9} {:>8} {:>11} {:>9} {:>7}",
            "day", "date", "overdue", "reminders", "expiring", "expired", "events",
            "db ms", "events/s", "db ms/ev", "remind", "renew+pub", "expiry", "baseline", "b. rows",
            "drain s"
        );
        let mut days = Vec::new();
        let mut last = seeded.start;
        for day in 0..args.days {
            let mut work = Work::default();
            for index in 0..args.rounds_per_day {
                let now = seeded.start
                    + chrono::Duration::days(i64::from(day))
                    + step * i32::try_from(index).unwrap_or(i32::MAX);
                let done = round(pool, &publisher, seeded.org_id, now - step, now, args.batch_size)
                    .await?;
                work.add(&done);
                last = now;
            }
            let drained = drain(pool, seeded.org_id).await?;
            let ms = |duration: Duration| duration.as_secs_f64() * 1000.0;
            println!(
                "{:>4} {:>10} {:>8} {:>9} {:>8} {:>8} {:>8} {:>9.1} {:>9.0} {:>8.3} {:>8.1} {:>9} {:>8.1} {:>11.1} {:>9} {:>7.1}",
                day,
                (seeded.start + chrono::Duration::days(i64::from(day)))
                    .with_timezone(&ZONE)
                    .format("%Y-%m-%d"),
                work.overdue,
                work.reminders,
                work.expiring,
                work.expired,
                work.events(),
                ms(work.database()),
                work.events_per_second(),
                work.ms_per_event(),
                ms(work.reminder_time),
                format!("{:.0}+{:.0}", ms(work.renewal_time), ms(work.publish_time)),
                ms(work.expiry_time),
                ms(work.baseline_time),
                work.baseline_rows,
                drained.as_secs_f64(),
            );
            days.push(work);
        }
        print_summary(&days);
        check(pool, seeded, last).await
    }
    .await;
    shutdown.cancel();
    drop(worker_task.await);
    publisher.close().await;
    outcome
}

/// Min, median and max over the days.
fn print_summary(days: &[Work]) {
    let spread = |mut values: Vec<f64>| {
        values.sort_by(f64::total_cmp);
        (
            values[0],
            values[(values.len() - 1) / 2],
            values[values.len() - 1],
        )
    };
    let ms = |duration: Duration| duration.as_secs_f64() * 1000.0;
    let mut total = Work::default();
    for day in days {
        total.add(day);
    }
    println!();
    println!("per day (min / median / max):");
    let rows: [(&str, Vec<f64>); 10] = [
        ("events", days.iter().map(|d| d.events() as f64).collect()),
        (
            "reminders",
            days.iter().map(|d| d.reminders as f64).collect(),
        ),
        (
            "renewals (flow.expiring)",
            days.iter().map(|d| d.expiring as f64).collect(),
        ),
        (
            "expiries (flow.expired)",
            days.iter().map(|d| d.expired as f64).collect(),
        ),
        (
            "events/s (db + publish)",
            days.iter().map(Work::events_per_second).collect(),
        ),
        (
            "db ms per event",
            days.iter().map(Work::ms_per_event).collect(),
        ),
        (
            "scheduler db ms",
            days.iter().map(|d| ms(d.database())).collect(),
        ),
        (
            "  of it reminders ms",
            days.iter().map(|d| ms(d.reminder_time)).collect(),
        ),
        (
            "publish ms",
            days.iter().map(|d| ms(d.publish_time)).collect(),
        ),
        (
            "baseline scan ms",
            days.iter().map(|d| ms(d.baseline_time)).collect(),
        ),
    ];
    for (label, values) in rows {
        let (min, median, max) = spread(values);
        println!("  {label:<26} {min:>10.2} {median:>10.2} {max:>10.2}");
    }
    println!(
        "whole span: {} events ({} overdue, {} reminders, {} expiring with {} renewals published, \
         {} expired) in {:.2} s of Postgres + {:.2} s of publish: {:.0} events/s, {:.3} ms of \
         Postgres per event; reminder scans {:.2} s against the baseline's {:.2} s ({} rows); \
         rollup merges {:.2} s",
        total.events(),
        total.overdue,
        total.reminders,
        total.expiring,
        total.published,
        total.expired,
        total.database().as_secs_f64(),
        total.publish_time.as_secs_f64(),
        total.events_per_second(),
        total.ms_per_event(),
        total.reminder_time.as_secs_f64(),
        total.baseline_time.as_secs_f64(),
        total.baseline_rows,
        total.merge_time.as_secs_f64(),
    );
}

/// One line of the check: what was due, what was emitted, and the differences.
#[derive(sqlx::FromRow)]
struct Compared {
    expected: i64,
    emitted: i64,
    lost: i64,
    twice: i64,
    unexpected: i64,
}

/// Compares the keys `expected` (distinct) with the keys `emitted` (one row per emission); both
/// select a `key` column, with `$1` the organization, `$2` the start and `$3` the last round.
async fn compare(
    pool: &PgPool,
    seeded: &Seeded,
    last: DateTime<Utc>,
    expected: &str,
    emitted: &str,
) -> anyhow::Result<Compared> {
    Ok(sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "WITH expected AS ({expected}), emitted AS ({emitted})
         SELECT (SELECT count(*) FROM expected) AS expected,
                (SELECT count(*) FROM emitted) AS emitted,
                (SELECT count(*) FROM expected e
                 WHERE NOT EXISTS (SELECT 1 FROM emitted m WHERE m.key = e.key)) AS lost,
                (SELECT count(*) - count(DISTINCT key) FROM emitted) AS twice,
                (SELECT count(DISTINCT key) FROM emitted m
                 WHERE NOT EXISTS (SELECT 1 FROM expected e WHERE e.key = m.key)) AS unexpected"
    )))
    .bind(seeded.org_id)
    .bind(seeded.start)
    .bind(last)
    .fetch_one(pool)
    .await?)
}

/// What was due in `[start, last]`, computed from the seeded data and the policy, against what
/// was emitted; an error when anything was lost, twice or unexpected.
async fn check(pool: &PgPool, seeded: &Seeded, last: DateTime<Utc>) -> anyhow::Result<()> {
    let events = |event_type: &str| {
        format!(
            "SELECT assignment_id::text AS key FROM outbox
             WHERE org_id = $1 AND event_type = '{event_type}'"
        )
    };
    let overdue = compare(
        pool,
        seeded,
        last,
        "SELECT a.id::text AS key FROM assignments a
         WHERE a.org_id = $1 AND a.status <> 'completed' AND a.due_at >= $2 AND a.due_at <= $3",
        &events("flow.overdue"),
    )
    .await?;
    let reminders = compare(
        pool,
        seeded,
        last,
        &format!(
            "SELECT a.id::text || ' ' || p.kind || ' ' || p.days AS key
             FROM assignments a CROSS JOIN {offsets}
             CROSS JOIN LATERAL (SELECT {remind_at} AS at) r
             WHERE a.org_id = $1 AND a.status <> 'completed' AND a.due_at IS NOT NULL
               AND r.at >= $2 AND r.at <= $3 AND r.at >= a.assigned_at",
            offsets = offsets_sql(),
            remind_at = remind_at_sql(),
        ),
        "SELECT assignment_id::text || ' ' || (payload -> 'data' -> 'reminder' ->> 'kind')
                || ' ' || (payload -> 'data' -> 'reminder' ->> 'offsetDays') AS key
         FROM outbox WHERE org_id = $1 AND event_type = 'flow.reminder'",
    )
    .await?;
    let windows = "SELECT a.id::text AS key FROM assignments a
         WHERE a.org_id = $1 AND a.status = 'completed' AND a.renew_at >= $2 AND a.renew_at <= $3";
    let expiring = compare(pool, seeded, last, windows, &events("flow.expiring")).await?;
    // A renewal assignment: another assignment of the completion's user and flow, assigned in the
    // span (the seeded ones are one per user and flow, those renewed before the start assigned
    // before it).
    let renewals = compare(
        pool,
        seeded,
        last,
        windows,
        "SELECT a.id::text AS key FROM assignments a
         JOIN assignments b ON b.flow_id = a.flow_id AND b.user_id = a.user_id AND b.id <> a.id
         WHERE a.org_id = $1 AND a.status = 'completed' AND b.assigned_at >= $2",
    )
    .await?;
    let expired = compare(
        pool,
        seeded,
        last,
        "SELECT a.id::text AS key FROM assignments a
         WHERE a.org_id = $1 AND a.status = 'completed'
           AND a.expires_at >= $2 AND a.expires_at <= $3",
        &events("flow.expired"),
    )
    .await?;
    println!();
    println!(
        "nothing lost or twice, over [{}, {}]:",
        seeded.start.with_timezone(&ZONE).format("%Y-%m-%d %H:%M"),
        last.with_timezone(&ZONE).format("%Y-%m-%d %H:%M %Z")
    );
    println!(
        "  {:<26} {:>10} {:>10} {:>6} {:>6} {:>10}",
        "", "due", "emitted", "lost", "twice", "unexpected"
    );
    let mut wrong = 0;
    for (label, compared) in [
        ("flow.overdue", &overdue),
        ("flow.reminder", &reminders),
        ("flow.expiring", &expiring),
        ("renewal assignments", &renewals),
        ("flow.expired", &expired),
    ] {
        println!(
            "  {label:<26} {:>10} {:>10} {:>6} {:>6} {:>10}",
            compared.expected, compared.emitted, compared.lost, compared.twice, compared.unexpected
        );
        wrong += compared.lost + compared.twice + compared.unexpected;
    }
    anyhow::ensure!(
        wrong == 0,
        "{wrong} lost, duplicate or unexpected lifecycle events or renewals"
    );
    Ok(())
}
