//! The seed of `flowctl bench schedulers` (the classes in the module's doc above), the work it
//! leaves due, counted while it is written and checked against the rows in SQL, and the bench's
//! own record of the schedulers' claims.

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::time::Instant;

use anyhow::Context as _;
use chrono::{DateTime, DurationRound, Months, Utc};
use flow_domain::expiry::Validity;
use flow_domain::ids::{AssignmentId, OrgId, UserId};
use flow_domain::reminders::ReminderPolicy;
use sqlx::PgPool;

use super::SchedulersBenchArgs;
use crate::bench::report::Random;
use crate::bench::seed::{
    Assignment, COPY_ASSIGNMENTS, COPY_RENEWALS, copy_in, link_renewals, org_with_policy_flows,
    set_expiry_and_renewal, vacuum_analyze, write_renewal,
};

/// Days before the due date a reminder goes.
const BEFORE_DUE_DAYS: [i32; 2] = [7, 1];
/// Days after the due date a reminder goes.
const AFTER_DUE_DAYS: [i32; 2] = [1, 3];
/// Days after the due date the manager is told.
const ESCALATE_AFTER_DAYS: i32 = 14;
/// Validity of a completion, in months.
const VALID_FOR_MONTHS: u32 = 12;
/// Days before expiry the renewal is assigned.
const RENEW_BEFORE_DAYS: i64 = 30;

/// The policy's reminders as `(kind, days, sign)`: the time of each is the due date plus
/// `sign × days` days (UTC: a local day is 24 hours).
const OFFSETS: [(&str, i32, i64); 5] = [
    ("due_soon", BEFORE_DUE_DAYS[0], -1),
    ("due_soon", BEFORE_DUE_DAYS[1], -1),
    ("overdue", AFTER_DUE_DAYS[0], 1),
    ("overdue", AFTER_DUE_DAYS[1], 1),
    ("escalation", ESCALATE_AFTER_DAYS, 1),
];

/// What an assignment of the seed is there for (see the module's doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    Overdue,
    /// The index of its one reminder due in [`OFFSETS`].
    Reminder(usize),
    Renewal,
    Expiry,
    Lapsed,
    QuietOpen,
    QuietCompleted,
}

impl Class {
    /// The class of the `index`th assignment: of every 20, 4 overdue, 4 reminders, 3 renewals,
    /// 3 expiries, 1 lapsed, 3 quiet open and 2 quiet completed.
    fn of(index: u64) -> Self {
        match index % 20 {
            0..4 => Self::Overdue,
            4..8 => Self::Reminder(((index / 20 * 4 + index % 20 - 4) % 5) as usize),
            8..11 => Self::Renewal,
            11..14 => Self::Expiry,
            14 => Self::Lapsed,
            15..18 => Self::QuietOpen,
            _ => Self::QuietCompleted,
        }
    }
}

/// The work the seed leaves due, each piece by its key, as the check reads them back.
#[derive(Default)]
pub(super) struct Expected {
    /// Assignment ids: a `flow.overdue` and an `overdue_at` write each.
    pub(super) overdue: HashSet<String>,
    /// `assignment kind offset`: an `assignment_reminders` row and a `flow.reminder` each.
    pub(super) reminders: HashSet<String>,
    /// Completion ids: a `flow.expiring` and a `renewal_id` write each.
    pub(super) renewed: HashSet<String>,
    /// `user flow` of the completions renewed: one new assignment each.
    pub(super) renewal_pairs: HashSet<String>,
    /// Renewal assignment ids: a `flow.assigned` each.
    pub(super) renewal_ids: HashSet<String>,
    /// Completion ids: a `flow.expired` and an `expiry_settled_at` write each.
    pub(super) expired: HashSet<String>,
}

/// What the seed created.
pub(super) struct Seeded {
    pub(super) start: DateTime<Utc>,
    pub(super) expected: Expected,
    /// Assignments per class, for the printout.
    pub(super) classes: HashMap<&'static str, u64>,
}

/// Seeds the organization, its users and flows, and the assignments (see the module's doc), and
/// counts the work they leave due.
pub(super) async fn seed(pool: &PgPool, args: &SchedulersBenchArgs) -> anyhow::Result<Seeded> {
    let started = Instant::now();
    let start = Utc::now().duration_trunc(chrono::Duration::seconds(1))?;
    let policy = ReminderPolicy {
        before_due_days: BEFORE_DUE_DAYS.to_vec(),
        after_due_days: AFTER_DUE_DAYS.to_vec(),
        escalate_after_days: Some(ESCALATE_AFTER_DAYS),
    };
    let validity = Validity {
        months: Some(VALID_FOR_MONTHS as i32),
        days: None,
    };
    let (org_id, flows) = org_with_policy_flows(
        pool,
        "Schedulers",
        chrono_tz::UTC,
        args.flows,
        &policy,
        validity,
        RENEW_BEFORE_DAYS as i32,
    )
    .await?;

    let users = args.assignments.div_ceil(args.flows);
    let mut copy = copy_in(
        pool,
        "COPY users (id, org_id, email, email_normalized) FROM STDIN",
    )
    .await?;
    let mut user_ids = Vec::with_capacity(users as usize);
    for index in 0..users {
        let user_id = UserId::new();
        let email = format!("schedulers-{index}@bench.example");
        let _ = writeln!(copy.rows, "{}\t{}\t{email}\t{email}", user_id.0, org_id.0);
        user_ids.push(user_id);
        copy.flush_when_full().await?;
    }
    copy.finish().await?;

    let mut random = Random(0x2545_f491_4f6c_dd1d);
    let days = chrono::Duration::days;
    // A time of work due: 1 minute to 20 hours before the start.
    let due_time = |random: &mut Random| {
        start - chrono::Duration::seconds(60 + random.below(20 * 3_600 - 60) as i64)
    };
    let a_year_before = |at: DateTime<Utc>| {
        at.checked_sub_months(Months::new(VALID_FOR_MONTHS))
            .context("a completion a year before an expiry")
    };
    let mut expected = Expected::default();
    let mut classes: HashMap<&'static str, u64> = HashMap::new();
    let mut assignments = copy_in(pool, COPY_ASSIGNMENTS).await?;
    let mut renewals = copy_in(pool, COPY_RENEWALS).await?;
    let mut renewed_before: Vec<(AssignmentId, AssignmentId)> = Vec::new();
    for index in 0..args.assignments {
        let user_id = user_ids[(index / args.flows) as usize];
        let flow_id = flows[(index % args.flows) as usize];
        let id = AssignmentId::new();
        let key = id.0.to_string();
        let pair = format!("{} {}", user_id.0, flow_id.0);
        let class = Class::of(index);
        let (status, due_at, assigned_at, completed_at, overdue_at);
        match class {
            Class::Overdue => {
                let due = due_time(&mut random);
                status = if index % 2 == 0 {
                    "pending"
                } else {
                    "in_progress"
                };
                (due_at, assigned_at, completed_at, overdue_at) =
                    (Some(due), due - days(30), None, None);
                expected.overdue.insert(key.clone());
            }
            Class::Reminder(offset) => {
                let (kind, offset_days, sign) = OFFSETS[offset];
                let remind_at = due_time(&mut random);
                let due = remind_at - days(sign * i64::from(offset_days));
                // Past its due date (the after-due reminders): overdue already, as a running
                // scheduler left it.
                let past = due < start;
                status = if past { "overdue" } else { "pending" };
                (due_at, assigned_at, completed_at, overdue_at) =
                    (Some(due), due - days(30), None, past.then_some(due));
                expected
                    .reminders
                    .insert(format!("{key} {kind} {offset_days}"));
            }
            Class::Renewal | Class::Expiry | Class::Lapsed | Class::QuietCompleted => {
                let expires = match class {
                    // The window (30 days before the expiry) opened before the start.
                    Class::Renewal => due_time(&mut random) + days(RENEW_BEFORE_DAYS),
                    Class::QuietCompleted => start + days(60 + random.below(200) as i64),
                    _ => due_time(&mut random),
                };
                let completed = a_year_before(expires)?;
                status = "completed";
                (due_at, assigned_at, completed_at, overdue_at) = (
                    Some(completed + days(20)),
                    completed - days(10),
                    Some(completed),
                    None,
                );
                if class == Class::Expiry {
                    // Renewed when its window opened: the renewal assignment, pending, due at
                    // the expiry (past: it becomes overdue).
                    let renewal = AssignmentId::for_renewal(id);
                    write_renewal(
                        &mut renewals.rows,
                        renewal,
                        (org_id, flow_id, user_id),
                        expires,
                        expires - days(RENEW_BEFORE_DAYS),
                    );
                    renewed_before.push((id, renewal));
                    expected.overdue.insert(renewal.0.to_string());
                }
                if matches!(class, Class::Renewal | Class::Lapsed) {
                    let renewal = AssignmentId::for_renewal(id);
                    expected.renewed.insert(key.clone());
                    expected.renewal_pairs.insert(pair);
                    expected.renewal_ids.insert(renewal.0.to_string());
                }
                if matches!(class, Class::Expiry | Class::Lapsed) {
                    expected.expired.insert(key.clone());
                }
                if class == Class::Lapsed {
                    expected
                        .overdue
                        .insert(AssignmentId::for_renewal(id).0.to_string());
                }
            }
            Class::QuietOpen => {
                let due =
                    start + days(2) + chrono::Duration::seconds(random.below(3 * 86_400) as i64);
                status = "pending";
                (due_at, assigned_at, completed_at, overdue_at) =
                    (Some(due), due - days(30), None, None);
            }
        }
        *classes.entry(class.name()).or_default() += 1;
        Assignment {
            id,
            org_id,
            flow_id,
            user_id,
            status,
            due_at,
            assigned_at,
            // Started an hour after it was assigned, if it was.
            started_at: (status != "pending").then(|| assigned_at + chrono::Duration::hours(1)),
            completed_at,
            overdue_at,
        }
        .write(&mut assignments.rows);
        assignments.flush_when_full().await?;
        renewals.flush_when_full().await?;
    }
    assignments.finish().await?;
    renewals.finish().await?;
    set_expiry_and_renewal(pool, org_id).await?;
    let (ids, renewal_ids): (Vec<AssignmentId>, Vec<AssignmentId>) =
        renewed_before.into_iter().unzip();
    link_renewals(pool, &ids, &renewal_ids).await?;
    // A running system's rollups are merged and its tables analysed.
    flow_workers::scheduler::merge_rollups(pool).await?;
    vacuum_analyze(pool, &["users", "assignments", "assignment_rollups"]).await?;
    check_seed(pool, org_id, start, &classes, &expected).await?;
    println!(
        "seeded in {:.1} s at {}: {} users, {} flows, {} assignments ({}) and {} renewal \
         assignments of the expiry class",
        started.elapsed().as_secs_f64(),
        start.format("%Y-%m-%d %H:%M:%S UTC"),
        users,
        args.flows,
        args.assignments,
        [
            "overdue",
            "reminder",
            "renewal",
            "expiry",
            "lapsed",
            "quiet open",
            "quiet completed"
        ]
        .iter()
        .map(|name| format!("{} {name}", classes.get(name).copied().unwrap_or(0)))
        .collect::<Vec<_>>()
        .join(", "),
        ids.len(),
    );
    Ok(Seeded {
        start,
        expected,
        classes,
    })
}

impl Class {
    fn name(self) -> &'static str {
        match self {
            Self::Overdue => "overdue",
            Self::Reminder(_) => "reminder",
            Self::Renewal => "renewal",
            Self::Expiry => "expiry",
            Self::Lapsed => "lapsed",
            Self::QuietOpen => "quiet open",
            Self::QuietCompleted => "quiet completed",
        }
    }
}

/// Checks the seeded rows against the work counted while writing them, in SQL over what was
/// written: open assignments past due, windows open and expiries past at the start (the
/// expiries by the completion's own formula), and the reminders of the policy whose time falls in
/// the day before the start (computed here from the policy's definition, not by the scan under
/// test). An error when they differ: the bench's expectations would be wrong, not the scheduler.
async fn check_seed(
    pool: &PgPool,
    org_id: OrgId,
    start: DateTime<Utc>,
    classes: &HashMap<&'static str, u64>,
    expected: &Expected,
) -> anyhow::Result<()> {
    let offsets: Vec<String> = OFFSETS
        .iter()
        .map(|(kind, days, sign)| format!("('{kind}', {days}, {sign})"))
        .collect();
    let (past_due, windows_open, expired, reminders): (i64, i64, i64, i64) =
        sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT count(*) FILTER (WHERE status IN ('pending', 'in_progress') AND due_at <= $2),
                    count(*) FILTER (WHERE status = 'completed' AND renewal_id IS NULL
                                       AND renew_at <= $2),
                    count(*) FILTER (WHERE status = 'completed' AND expires_at <= $2),
                    (SELECT count(*) FROM assignments a
                     CROSS JOIN (VALUES {offsets}) AS p(kind, days, sign)
                     CROSS JOIN LATERAL (
                         SELECT ((a.due_at AT TIME ZONE 'UTC')
                                 + make_interval(days => p.sign * p.days)) AT TIME ZONE 'UTC'
                             AS at) r
                     WHERE a.org_id = $1 AND a.status IN ('pending', 'in_progress', 'overdue')
                       AND r.at <= $2 AND r.at > $2 - interval '1 day' AND r.at >= a.assigned_at)
             FROM assignments WHERE org_id = $1",
            offsets = offsets.join(", ")
        )))
        .bind(org_id)
        .bind(start)
        .fetch_one(pool)
        .await?;
    let class = |name: &str| classes.get(name).copied().unwrap_or(0) as i64;
    // Past due: the overdue class and the expiry class's renewal assignments (the lapsed class's
    // do not exist yet).
    let counted = (
        class("overdue") + class("expiry"),
        expected.renewed.len() as i64,
        expected.expired.len() as i64,
        expected.reminders.len() as i64,
    );
    anyhow::ensure!(
        (past_due, windows_open, expired, reminders) == counted,
        "the seed is not what the bench counted: {past_due} open past due, {windows_open} \
         windows open, {expired} expiries past, {reminders} reminders due, against {counted:?}"
    );
    Ok(())
}

/// Installs the bench's own record of the schedulers' claims: a row in `bench_claims` for every
/// committed write of `overdue_at`, `renewal_id` or `expiry_settled_at` (an `UPDATE OF` trigger
/// fires whenever the column is set, changed or not; its row rolls back with the transaction).
pub(super) async fn record_claims(pool: &PgPool) -> anyhow::Result<()> {
    for statement in [
        "CREATE TABLE bench_claims (kind TEXT NOT NULL, key TEXT NOT NULL,
                                    at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp())",
        "CREATE FUNCTION bench_record_claim() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
             INSERT INTO bench_claims (kind, key) VALUES (TG_ARGV[0], NEW.id::text);
             RETURN NULL;
         END $$",
        "CREATE TRIGGER bench_overdue AFTER UPDATE OF overdue_at ON assignments
         FOR EACH ROW EXECUTE FUNCTION bench_record_claim('overdue')",
        "CREATE TRIGGER bench_renewal AFTER UPDATE OF renewal_id ON assignments
         FOR EACH ROW EXECUTE FUNCTION bench_record_claim('renewal')",
        "CREATE TRIGGER bench_expiry AFTER UPDATE OF expiry_settled_at ON assignments
         FOR EACH ROW EXECUTE FUNCTION bench_record_claim('expiry')",
    ] {
        sqlx::query(statement).execute(pool).await?;
    }
    Ok(())
}
