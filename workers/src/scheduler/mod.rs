//! The scheduler: time-driven work over Postgres, safe with any number of replicas (every claim
//! is `FOR UPDATE SKIP LOCKED`, every transition guarded by the row's state).
//!
//! - Overdue scan: pending or in-progress assignments past their due date become `overdue`, each
//!   with one `flow.overdue` event, in batches.
//! - Recurring schedules: when an occurrence is due, its assignment goes through the normal
//!   assign path (an assign command on the assign queue, confirmed by the broker) with an id
//!   derived from the schedule and the occurrence, so a retry after a crash cannot assign twice;
//!   then the schedule advances to its next occurrence on the organization's calendar.
//! - Renewals and expiries (design §16): a completion whose renewal window opened gets its
//!   renewal assignment through the assign path (bulk lane, an id derived from the completion)
//!   and a `flow.expiring` event; at its expiry, `flow.expired` unless renewed in time.
//! - Report rollups: the deltas every change to `assignments` leaves are merged into the rollups
//!   (see `flow_common::db::rollups`), so readers sum few rows.
//! - Enrollment rules ([`enrollment`], a task of its own): the users a write left pending (its
//!   own evaluation did not finish) are evaluated after a grace period, and backfills run.

use std::time::Duration;

use anyhow::Context;
use chrono::{DateTime, Utc};
use flow_app::schedules::claim_due;
use flow_app::upkeep;
use flow_common::amqp::{Lane, Outgoing, Publisher, QueueKind};
use flow_common::config::CoreConfig;
use flow_common::db::schedules::DueSchedule;
use flow_domain::ids::AssignmentId;
use flow_domain::messages::{ASSIGN_COMMAND_VERSION, ASSIGN_KIND, AssignCommand};
use sqlx::PgPool;
use tracing::Instrument;

use crate::runtime::{Runtime, role};

pub mod enrollment;
pub mod events;

const ROLE: &str = "scheduler";

/// Settings of the scheduler.
#[derive(Debug, Clone, clap::Args)]
pub struct SchedulerConfig {
    /// Database, broker and queue settings.
    #[command(flatten)]
    pub core: CoreConfig,

    /// Time between two scans.
    #[arg(long, env = "SCHEDULER_INTERVAL_MS", default_value_t = 1_000)]
    pub interval_ms: u64,

    /// Most assignments marked overdue per transaction.
    #[arg(long, env = "OVERDUE_BATCH_SIZE", default_value_t = 1_000)]
    pub overdue_batch_size: i64,

    /// Most schedule occurrences assigned per transaction.
    #[arg(long, env = "SCHEDULE_BATCH_SIZE", default_value_t = 200)]
    pub schedule_batch_size: i64,

    /// How long after a user write its enrollment evaluation is left to the API that made the
    /// write, before a scheduler evaluates it (the API died after the commit, or the broker
    /// refused its commands).
    #[arg(long, env = "ENROLLMENT_PENDING_GRACE_MS", default_value_t = 10_000)]
    pub enrollment_grace_ms: u64,

    /// Most pending enrollment evaluations claimed at once.
    #[arg(long, env = "ENROLLMENT_DRAIN_BATCH", default_value_t = 500)]
    pub enrollment_drain_batch: i64,

    /// How long a scheduler holds a claimed evaluation or backfill without progress before
    /// another may take it over.
    #[arg(long, env = "ENROLLMENT_LEASE_MS", default_value_t = 60_000)]
    pub enrollment_lease_ms: u64,

    /// What this role's readiness depends on (filled in by `run`, served by the ops endpoints).
    #[arg(skip)]
    pub health: flow_common::ops::Health,
}

role! {
    settings: SchedulerConfig,
    name: ROLE,
    about: "Flow scheduler",
    description: "The scheduler (overdue scan, recurring schedules)",
    ops_address: "127.0.0.1:9104",
    work: work,
}

/// Scans every interval until shutdown.
async fn work(config: SchedulerConfig, runtime: Runtime) -> anyhow::Result<()> {
    let publisher = runtime.publisher(2);
    tracing::info!(role = ROLE, interval_ms = config.interval_ms, "scheduling");
    let interval = Duration::from_millis(config.interval_ms.max(10));
    // A round is a scan and the due schedules: generous, so a large backlog is not "stuck".
    let liveness = runtime.liveness(
        "loop",
        Some(interval.saturating_mul(2) + Duration::from_secs(300)),
    );
    runtime.gauge("schedules due", crate::gauges::schedules);
    runtime.gauge("enrollment pending", crate::gauges::enrollment);
    enrollment::start(&config, &runtime, &publisher);
    events::start(&config, &runtime, &publisher);
    let (pool, shutdown) = (&runtime.pool, &runtime.shutdown);
    let mut last_prune = std::time::Instant::now();
    while !shutdown.is_cancelled() {
        liveness.beat();
        if last_prune.elapsed() > Duration::from_secs(600) {
            last_prune = std::time::Instant::now();
            // Start counts of messages that were dead-lettered or purged since.
            let before = Utc::now() - chrono::Duration::days(1);
            if let Err(error) = upkeep::prune_message_attempts(pool, before).await {
                tracing::warn!(role = ROLE, %error, "could not prune message start counts");
            }
        }
        if let Err(error) = scan_overdue(pool, config.overdue_batch_size).await {
            tracing::warn!(
                role = ROLE,
                error = format!("{error:#}"),
                "overdue scan failed; retrying next round"
            );
        }
        if let Err(error) = scan_reminders(pool, Utc::now(), config.overdue_batch_size).await {
            tracing::warn!(
                role = ROLE,
                error = format!("{error:#}"),
                "reminder scan failed; retrying next round"
            );
        }
        if let Err(error) =
            scan_renewals(pool, &publisher, Utc::now(), config.overdue_batch_size).await
        {
            tracing::warn!(
                role = ROLE,
                error = format!("{error:#}"),
                "renewal scan failed; retrying next round"
            );
        }
        if let Err(error) = merge_rollups(pool).await {
            tracing::warn!(
                role = ROLE,
                error = format!("{error:#}"),
                "rollup merge failed; retrying next round"
            );
        }
        if let Err(error) = run_schedules(pool, &publisher, config.schedule_batch_size).await {
            tracing::warn!(
                role = ROLE,
                error = format!("{error:#}"),
                "schedules failed; retrying next round"
            );
        }
        shutdown
            .run_until_cancelled(tokio::time::sleep(interval))
            .await;
    }
    publisher.close().await;
    Ok(())
}

/// Runs `batch` (one transaction, at most `batch_size` rows) until a batch does less than a full
/// one; counts what was done under `outcome` and logs it as `done`. Returns the total.
async fn in_batches<F, Fut, E>(
    batch_size: i64,
    outcome: &'static str,
    done: &'static str,
    mut batch: F,
) -> anyhow::Result<usize>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<usize, E>>,
    E: Into<anyhow::Error>,
{
    let mut total = 0;
    loop {
        let count = batch().await.map_err(Into::into)?;
        total += count;
        if count > 0 {
            metrics::counter!("flow_worker_messages_total", "worker" => ROLE, "outcome" => outcome)
                .increment(count as u64);
            tracing::info!(role = ROLE, count, "{done}");
        }
        if (count as i64) < batch_size {
            return Ok(total);
        }
    }
}

/// Marks every assignment now past its due date overdue, a batch per transaction; returns how
/// many.
pub async fn scan_overdue(pool: &PgPool, batch_size: i64) -> anyhow::Result<usize> {
    in_batches(batch_size, "overdue", "assignments became overdue", || {
        upkeep::mark_overdue(pool, Utc::now(), batch_size)
    })
    .await
}

/// Sends every reminder whose time has come at `now`, a batch per transaction; returns how many.
pub async fn scan_reminders(
    pool: &PgPool,
    now: DateTime<Utc>,
    batch_size: i64,
) -> anyhow::Result<usize> {
    in_batches(batch_size, "reminder", "reminders sent", || {
        upkeep::send_reminders(pool, now, batch_size)
    })
    .await
}

/// Renews and expires completions at `now`: first every completion whose renewal window is open
/// gets its renewal assignment (published to the bulk lane, confirmed by the broker, before the
/// claim and its `flow.expiring` events commit), then every completion past its expiry is settled
/// (`flow.expired` unless renewed in time), a batch per transaction. Returns how many
/// completions each step handled.
pub async fn scan_renewals(
    pool: &PgPool,
    publisher: &Publisher,
    now: DateTime<Utc>,
    batch_size: i64,
) -> anyhow::Result<(usize, usize)> {
    let renewed = in_batches(
        batch_size,
        "renewal",
        "completions renewed",
        || async move {
            let claim = upkeep::claim_renewals(pool, now, batch_size).await?;
            publish_renewals(publisher, &claim.renewals).await?;
            let claimed = claim.claimed;
            claim.commit().await?;
            anyhow::Ok(claimed)
        },
    )
    .await?;
    let expired = in_batches(
        batch_size,
        "expiry",
        "completions settled at expiry",
        || upkeep::expire_completions(pool, now, batch_size),
    )
    .await?;
    Ok((renewed, expired))
}

/// Publishes renewal assignments to their organizations' bulk lanes, all confirmed or an error
/// (the caller's claim then rolls back; the next scan publishes the same ids, which the
/// assign-worker applies once).
pub async fn publish_renewals(
    publisher: &Publisher,
    renewals: &[upkeep::RenewalCommand],
) -> anyhow::Result<()> {
    if renewals.is_empty() {
        return Ok(());
    }
    let published = futures::future::join_all(renewals.iter().map(|renewal| {
        publish(
            publisher,
            QueueKind::assign_for(Lane::Bulk, renewal.bulk_lane),
            &renewal.command,
        )
    }))
    .await;
    let failed = published.iter().filter(|result| result.is_err()).count();
    match published.into_iter().find_map(Result::err) {
        Some(error) => Err(error.context(format!(
            "{failed} of {} renewal assignments not published; the renewals stay due",
            renewals.len()
        ))),
        None => Ok(()),
    }
}

/// Delta rows moved per merge transaction.
const MERGE_BATCH: i64 = 10_000;

/// Merges every report-rollup delta into the rollups, a batch per transaction; returns how many.
pub async fn merge_rollups(pool: &PgPool) -> anyhow::Result<u64> {
    let mut total = 0;
    loop {
        let moved = upkeep::merge_rollups(pool, MERGE_BATCH).await?;
        total += moved;
        if moved < MERGE_BATCH as u64 {
            if total > 0 {
                metrics::counter!("flow_worker_messages_total", "worker" => ROLE, "outcome" => "rollup_deltas_merged")
                    .increment(total);
            }
            return Ok(total);
        }
    }
}

/// Assigns every due schedule occurrence, a batch per transaction; returns how many.
///
/// The commands of a batch are published together (their confirms awaited at once) and only the
/// schedules whose command the broker confirmed advance; one that was not stays due and is tried
/// again next round with the same id. A crash between the confirm and the commit publishes the
/// occurrence again, which the assign-worker applies once (the id, and so the `flow.assigned` event
/// id, is derived from the schedule and the occurrence).
pub async fn run_schedules(
    pool: &PgPool,
    publisher: &Publisher,
    batch_size: i64,
) -> anyhow::Result<usize> {
    let mut total = 0;
    loop {
        let now = Utc::now();
        let (mut claimed, mut due) = claim_due(pool, now, batch_size).await?;
        let claimed_count = due.len();
        // An archived flow takes no new assignments: its occurrences are skipped (the series
        // moves on to its next occurrence; a one-off schedule ends), each logged.
        let (archived, live): (Vec<DueSchedule>, Vec<DueSchedule>) =
            due.drain(..).partition(|schedule| schedule.flow_archived);
        let due = live;
        for schedule in &archived {
            let (next_index, next_at) = next_occurrence(schedule, now);
            claimed.advance(schedule.id, next_index, next_at).await?;
            tracing::warn!(
                role = ROLE,
                schedule_id = %schedule.id,
                org_id = %schedule.org_id,
                flow_id = %schedule.flow_id,
                occurrence = schedule.occurrence,
                next = ?next_at,
                "schedule occurrence skipped: the flow is archived and takes no new assignments"
            );
        }
        if !archived.is_empty() {
            metrics::counter!("flow_worker_messages_total", "worker" => ROLE, "outcome" => "schedule_skipped_archived")
                .increment(archived.len() as u64);
        }
        // The occurrences of one round share a trace of their own, continued by their commands,
        // their `flow.assigned` events and those events' webhook deliveries (a span only when
        // something is due, so idle rounds leave no traces).
        let span = (!due.is_empty())
            .then(|| tracing::info_span!("schedule occurrences", occurrences = due.len()));
        let traceparent = span.as_ref().and_then(flow_common::telemetry::traceparent);
        let commands: Vec<AssignCommand> = due
            .iter()
            .map(|schedule| occurrence_command(schedule, now, traceparent.clone()))
            .collect();
        let published =
            futures::future::join_all(due.iter().zip(&commands).map(|(schedule, command)| {
                publish(
                    publisher,
                    QueueKind::assign_for(Lane::Bulk, schedule.bulk_lane),
                    command,
                )
            }))
            .instrument(span.unwrap_or_else(tracing::Span::none))
            .await;
        let mut advanced = 0;
        let mut failure = None;
        for ((schedule, command), result) in due.iter().zip(&commands).zip(published) {
            if let Err(error) = result {
                failure.get_or_insert(error);
                continue;
            }
            let (next_index, next_at) = next_occurrence(schedule, now);
            claimed.advance(schedule.id, next_index, next_at).await?;
            advanced += 1;
            tracing::info!(
                role = ROLE,
                schedule_id = %schedule.id,
                occurrence = schedule.occurrence,
                assignment_id = %command.assignment_id,
                next = ?next_at,
                "schedule occurrence assigned"
            );
        }
        claimed.commit().await?;
        total += advanced;
        metrics::counter!("flow_worker_messages_total", "worker" => ROLE, "outcome" => "scheduled")
            .increment(advanced as u64);
        if let Some(error) = failure {
            return Err(error.context(format!(
                "{} of {} due occurrences not published; they stay due",
                due.len() - advanced,
                due.len()
            )));
        }
        if (claimed_count as i64) < batch_size {
            return Ok(total);
        }
    }
}

fn occurrence_command(
    schedule: &DueSchedule,
    now: DateTime<Utc>,
    traceparent: Option<String>,
) -> AssignCommand {
    AssignCommand {
        version: ASSIGN_COMMAND_VERSION,
        assignment_id: AssignmentId::for_schedule(schedule.id, schedule.occurrence),
        existing_assignment_id: None,
        org_id: schedule.org_id,
        flow_id: schedule.flow_id,
        flow_name: schedule.flow_name.clone(),
        user_id: schedule.user_id,
        assignee_email: schedule.assignee_email.clone(),
        priority: schedule.priority,
        notes: schedule.notes.clone(),
        due_at: schedule
            .due_in_days
            .map(|days| schedule.scheduled_at + chrono::Duration::days(i64::from(days))),
        assigned_at: now,
        request_id: None,
        schedule_id: Some(schedule.id),
        traceparent,
    }
}

/// The index and time of the next occurrence after `now`; occurrences missed while no scheduler
/// ran are skipped (one assignment for the latest, not one per missed period). `None`: the series
/// is over. Computed without stepping through the missed occurrences, so a series anchored long
/// ago does not hold the claim transaction.
fn next_occurrence(schedule: &DueSchedule, now: DateTime<Utc>) -> (i32, Option<DateTime<Utc>>) {
    let recurrence = schedule.recurrence;
    let zone = schedule.timezone.parse().unwrap_or(chrono_tz::Tz::UTC);
    let from = u32::try_from(schedule.occurrence.saturating_add(1)).unwrap_or(0);
    let (index, at) = recurrence.first_after(schedule.anchor_at, from, now, zone);
    if index > from {
        tracing::warn!(
            role = ROLE,
            schedule_id = %schedule.id,
            skipped = index - from,
            "skipping missed occurrences"
        );
    }
    match i32::try_from(index) {
        Ok(index) => (index, at),
        Err(_) => (i32::MAX, None),
    }
}

/// Publishes an occurrence's command to `queue`: the bulk lane of its organization (occurrences
/// come many at once, and nobody waits on one).
async fn publish(
    publisher: &Publisher,
    queue: QueueKind,
    command: &AssignCommand,
) -> anyhow::Result<()> {
    let payload = command.encode()?;
    let exchange = publisher.topology().commands_exchange();
    let message_id = command.assignment_id.to_string();
    publisher
        .publish(Outgoing {
            exchange: &exchange,
            routing_key: &queue.suffix(),
            payload: &payload,
            message_id: &message_id,
            kind: ASSIGN_KIND,
            request_id: None,
            headers: &[],
        })
        .await
        .context("publishing a scheduled assign command")
}
