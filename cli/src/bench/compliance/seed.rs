//! The compliance benchmark's data: people, groups, required flows and two years of assignment
//! histories, written with `COPY` from a deterministic generator (see the module above).

use std::fmt::Write as _;
use std::time::Instant;

use anyhow::{Context as _, ensure};
use chrono::{DateTime, DurationRound, Months, TimeDelta, Utc};
use flow_common::db::{self, flows::NewModule, orgs};
use flow_domain::ids::{AssignmentId, FlowId, GroupId, OrgId, UserId};
use serde_json::json;
use sqlx::PgPool;
use sqlx::migrate::MigrateDatabase;

use super::super::report::{Random, copy_time};
use super::super::seed::{copy_in, optional_time, vacuum_analyze};
use super::ComplianceBenchArgs;

/// The span the histories cover, back from now.
const SPAN_DAYS: i64 = 730;
/// Days from an assignment to its due date.
const DUE_AFTER_DAYS: i64 = 30;
/// Days before expiry a renewal is assigned (the flows' `renew_before_days`).
const RENEW_BEFORE_DAYS: i64 = 30;
/// Validity of a completion of every other flow.
const VALIDITY: Months = Months::new(12);
/// One person in this many is a manager.
pub(super) const PEOPLE_PER_MANAGER: u64 = 100;
/// Managers who report to nobody (the first ones).
const TOP_MANAGERS: u64 = 20;

/// Departments and their weights (shares of the managers, so of the people).
const DEPARTMENTS: [(&str, u64); 20] = [
    ("Engineering", 18),
    ("Sales", 14),
    ("Customer Support", 12),
    ("Operations", 9),
    ("Marketing", 6),
    ("Finance", 5),
    ("Human Resources", 4),
    ("Legal", 2),
    ("Product", 5),
    ("Design", 3),
    ("IT", 4),
    ("Security", 2),
    ("Procurement", 2),
    ("Logistics", 4),
    ("Manufacturing", 3),
    ("Quality", 2),
    ("Research", 2),
    ("Facilities", 1),
    ("Communications", 1),
    ("Data", 1),
];
/// Location groups (most people are in one).
const LOCATIONS: [&str; 8] = [
    "Berlin", "London", "Lisbon", "Madrid", "Paris", "Warsaw", "Austin", "Toronto",
];
/// Programme groups (a quarter of the people are in one).
const PROGRAMMES: [&str; 10] = [
    "Graduates",
    "Leadership",
    "Mentors",
    "First aiders",
    "Fire wardens",
    "Works council",
    "Remote",
    "Part time",
    "Contractors",
    "Apprentices",
];
/// The required flows' names (then `Required training N`).
const FLOW_NAMES: [&str; 20] = [
    "Code of conduct",
    "Information security",
    "Data protection",
    "Anti-bribery",
    "Health and safety",
    "Fire safety",
    "Harassment prevention",
    "Phishing awareness",
    "Export control",
    "Anti-money laundering",
    "Accessibility basics",
    "Diversity and inclusion",
    "Insider trading",
    "Records management",
    "Incident reporting",
    "Secure coding",
    "Acceptable use",
    "Travel safety",
    "Conflicts of interest",
    "Whistleblowing",
];
const FIRST_NAMES: [&str; 24] = [
    "Ada", "Ben", "Chloe", "Dan", "Eva", "Farid", "Grace", "Hugo", "Ines", "Jonas", "Kira", "Liam",
    "Mia", "Noah", "Olga", "Pavel", "Quinn", "Rosa", "Sami", "Tara", "Umar", "Vera", "Wim", "Yara",
];
const LAST_NAMES: [&str; 24] = [
    "Adler", "Brandt", "Costa", "Dubois", "Eriksen", "Fischer", "Garcia", "Horvat", "Ivanova",
    "Jensen", "Kowalski", "Lopez", "Moreau", "Novak", "Oliveira", "Petrov", "Quist", "Rossi",
    "Schmidt", "Tanaka", "Ueda", "Varga", "Weber", "Zimmer",
];

/// A mix of 64 bits (splitmix64's finalizer): a deterministic draw from an index.
fn mix(mut value: u64) -> u64 {
    value = value.wrapping_add(0x9e37_79b9_7f4a_7c15);
    value = (value ^ (value >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    value = (value ^ (value >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    value ^ (value >> 31)
}

/// The given and family name of person `index`.
fn name_of(index: u64) -> (&'static str, &'static str) {
    let drawn = mix(index);
    (
        FIRST_NAMES[(drawn % FIRST_NAMES.len() as u64) as usize],
        LAST_NAMES[((drawn >> 32) % LAST_NAMES.len() as u64) as usize],
    )
}

/// The department of manager `manager` (by [`DEPARTMENTS`]' weights).
fn department_of_manager(manager: u64) -> &'static str {
    let total: u64 = DEPARTMENTS.iter().map(|(_, weight)| weight).sum();
    let mut drawn = mix(manager ^ 0x5eed_d00d) % total;
    for (name, weight) in DEPARTMENTS {
        if drawn < weight {
            return name;
        }
        drawn -= weight;
    }
    DEPARTMENTS[0].0
}

/// The employee number of person `index` (also a manager's `manager_id`).
fn employee_number(index: u64) -> String {
    format!("E{index:07}")
}

/// How many assignments a (person, flow) gets, given what is left to write over the cells left:
/// none for one cell in ten, else one and a share of extras that keeps the mean on the budget.
fn cell_count(random: &mut Random, remaining: u64, cells_left: u64) -> usize {
    if remaining == 0 || random.below(10) == 0 {
        return 0;
    }
    let mean = remaining as f64 / cells_left.max(1) as f64;
    let extra = (mean / 0.9 - 1.0).max(0.0);
    let whole = extra.floor();
    let fraction = ((extra - whole) * 1000.0) as u64;
    let count = 1 + whole as usize + usize::from(random.below(1000) < fraction);
    count.min(usize::try_from(remaining).unwrap_or(usize::MAX))
}

/// One assignment of a (person, flow)'s history.
#[derive(Debug, Clone, PartialEq)]
struct Planned {
    assigned_at: DateTime<Utc>,
    due_at: Option<DateTime<Utc>>,
    started_at: Option<DateTime<Utc>>,
    completed_at: Option<DateTime<Utc>>,
    /// Set with `completed_at` on a flow with a validity.
    expires_at: Option<DateTime<Utc>>,
    cancelled_at: Option<DateTime<Utc>>,
    /// The due date first given and when it was moved to `due_at` (an applied change).
    due_change: Option<(DateTime<Utc>, DateTime<Utc>)>,
}

impl Planned {
    /// The stored status at `now`, as the service and its scheduler leave it.
    fn status(&self, now: DateTime<Utc>) -> &'static str {
        if self.cancelled_at.is_some() {
            "cancelled"
        } else if self.completed_at.is_some() {
            "completed"
        } else if self.due_at.is_some_and(|due| due <= now) {
            "overdue"
        } else if self.started_at.is_some() {
            "in_progress"
        } else {
            "pending"
        }
    }

    /// When it stopped being open (completed or cancelled).
    fn closed_at(&self) -> Option<DateTime<Utc>> {
        self.completed_at.or(self.cancelled_at)
    }
}

/// A random span of up to `max` seconds.
fn seconds(random: &mut Random, max: i64) -> TimeDelta {
    TimeDelta::seconds(random.below(max.max(1) as u64) as i64)
}

/// The history of a (person, flow): up to `count` assignments from `start` to `now`, one after the other (each assigned after the previous closed; a
/// renewal when the previous completion's window opened), at most the last one open. `validity`:
/// the flow's, when it has one. Fewer than `count` when the span runs out.
fn history(
    random: &mut Random,
    count: usize,
    start: DateTime<Utc>,
    now: DateTime<Utc>,
    validity: Option<Months>,
) -> Vec<Planned> {
    const DAY: i64 = 86_400;
    let mut planned = Vec::with_capacity(count);
    // The first one early enough for the others to follow: a flow with a validity is assigned
    // again about every 13 months (renewals), so its history starts about that long per
    // assignment (and up to half a year more) before now; another was rolled out over the first
    // 60 % of the span, its assignments one after the other.
    let (first_from, share) = match validity {
        Some(_) => (
            start.max(now - TimeDelta::days(395 * count as i64 + 180)),
            1.0,
        ),
        None => (start, 0.6),
    };
    let room = ((now - first_from).num_seconds() as f64 * share) as i64 / count.max(1) as i64;
    let mut at = first_from + seconds(random, room);
    for index in 0..count {
        if at >= now - TimeDelta::days(1) {
            break;
        }
        let last = index + 1 == count;
        let mut due_at = (random.below(10) != 0).then(|| at + TimeDelta::days(DUE_AFTER_DAYS));
        let started_at = (random.below(4) != 0)
            .then(|| at + seconds(random, 7 * DAY))
            .filter(|started_at| *started_at < now);
        let age_days = (now - at).num_days();
        // What became of it: intermediate ones were closed (a flow without a validity is not
        // assigned again after a completion, so only a cancellation precedes another).
        let roll = random.below(100);
        let outcome = match (last, validity.is_some()) {
            (false, true) if roll < 75 => "completed",
            (false, _) => "cancelled",
            (true, _) if age_days > 60 => match roll {
                0..78 => "completed",
                78..86 => "cancelled",
                _ => "open",
            },
            (true, _) => match roll {
                0..35 => "completed",
                35..40 => "cancelled",
                _ => "open",
            },
        };
        let mut assignment = Planned {
            assigned_at: at,
            due_at,
            started_at,
            completed_at: None,
            expires_at: None,
            cancelled_at: None,
            due_change: None,
        };
        match outcome {
            "completed" => {
                // Mostly within the month, one in eight late.
                let took = if random.below(8) == 0 {
                    TimeDelta::days(30) + seconds(random, 40 * DAY)
                } else {
                    TimeDelta::hours(1) + seconds(random, 25 * DAY)
                };
                let completed_at = started_at.unwrap_or(at) + took;
                if completed_at < now {
                    assignment.completed_at = Some(completed_at);
                    assignment.started_at = Some(started_at.unwrap_or(completed_at));
                    assignment.expires_at =
                        validity.and_then(|months| completed_at.checked_add_months(months));
                } else if !last {
                    break;
                }
            }
            "cancelled" => {
                let cancelled_at = at + TimeDelta::days(1) + seconds(random, 60 * DAY);
                if cancelled_at < now {
                    assignment.cancelled_at = Some(cancelled_at);
                    assignment.started_at =
                        started_at.filter(|started_at| *started_at < cancelled_at);
                } else if !last {
                    break;
                }
            }
            _ => {}
        }
        // One assignment in 25 with a due date had it moved two weeks later, while open.
        if let Some(due) = due_at
            && random.below(25) == 0
        {
            let open_until = assignment.closed_at().unwrap_or(now);
            let open_for = (open_until - at).num_seconds();
            if open_for > 3_600 {
                let applied_at = at + seconds(random, open_for);
                due_at = Some(due + TimeDelta::days(14));
                assignment.due_at = due_at;
                assignment.due_change = Some((due, applied_at));
            }
        }
        // The next one: the renewal when the window of this completion opens, or an assignment
        // again some time after a cancellation.
        at = match (assignment.expires_at, assignment.cancelled_at) {
            (Some(expires_at), _) => {
                expires_at - TimeDelta::days(RENEW_BEFORE_DAYS) + seconds(random, 2 * DAY)
            }
            (None, Some(cancelled_at)) => {
                cancelled_at + TimeDelta::days(1) + seconds(random, 90 * DAY)
            }
            (None, None) => {
                planned.push(assignment);
                break;
            }
        };
        planned.push(assignment);
    }
    planned
}

/// What the seed created (or what a kept database holds).
pub(super) struct Seeded {
    pub(super) org_id: OrgId,
    /// The required flows, in report order (by name, as the report lists them).
    pub(super) flows: Vec<FlowId>,
    pub(super) people: i64,
    pub(super) assignments: i64,
    /// The flow whose funnel is timed, its organization and its assignments.
    pub(super) funnel: Option<(OrgId, FlowId, i64)>,
}

fn org_name(args: &ComplianceBenchArgs) -> String {
    format!(
        "Compliance bench: {} people, {} flows, {} assignments",
        args.people, args.flows, args.assignments
    )
}

fn funnel_org_name(args: &ComplianceBenchArgs) -> String {
    format!(
        "Compliance bench funnel: {} assignments",
        args.funnel_assignments
    )
}

/// The benchmark database, with the seed of a kept one of the same sizes, else emptied.
pub(super) async fn open_database(
    url: &str,
    args: &ComplianceBenchArgs,
) -> anyhow::Result<(PgPool, Option<Seeded>)> {
    if sqlx::Postgres::database_exists(url).await.unwrap_or(false) {
        if args.keep {
            let pool = db::connect(url, 8).await?;
            db::migrate(&pool).await?;
            if let Some(seeded) = find_seeded(&pool, args).await? {
                println!(
                    "reusing the kept seed: {} people, {} assignments",
                    seeded.people, seeded.assignments
                );
                return Ok((pool, Some(seeded)));
            }
            pool.close().await;
        }
        sqlx::Postgres::drop_database(url).await?;
    }
    sqlx::Postgres::create_database(url).await?;
    let pool = db::connect(url, 8)
        .await
        .context("connecting to the benchmark database")?;
    db::migrate(&pool).await?;
    Ok((pool, None))
}

/// The seed of a kept database, when it was made with the same sizes.
async fn find_seeded(pool: &PgPool, args: &ComplianceBenchArgs) -> anyhow::Result<Option<Seeded>> {
    let org: Option<OrgId> = sqlx::query_scalar("SELECT id FROM organizations WHERE name = $1")
        .bind(org_name(args))
        .fetch_optional(pool)
        .await?;
    let Some(org_id) = org else {
        return Ok(None);
    };
    let flows = required_flows(pool, org_id).await?;
    let (people, assignments): (i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM users WHERE org_id = $1),
                (SELECT count(*) FROM assignments WHERE org_id = $1)",
    )
    .bind(org_id)
    .fetch_one(pool)
    .await?;
    let funnel = if args.funnel_assignments == 0 {
        None
    } else {
        let found: Option<(OrgId, FlowId, i64)> = sqlx::query_as(
            "SELECT o.id, f.id, (SELECT count(*) FROM assignments a WHERE a.flow_id = f.id)
             FROM organizations o JOIN flows f ON f.org_id = o.id WHERE o.name = $1",
        )
        .bind(funnel_org_name(args))
        .fetch_optional(pool)
        .await?;
        match found {
            Some(found) => Some(found),
            None => return Ok(None),
        }
    };
    Ok(Some(Seeded {
        org_id,
        flows,
        people,
        assignments,
        funnel,
    }))
}

/// The organization's required flows in the order the report lists them (by name, then id).
async fn required_flows(pool: &PgPool, org_id: OrgId) -> anyhow::Result<Vec<FlowId>> {
    Ok(sqlx::query_scalar(
        "SELECT id FROM flows WHERE org_id = $1 AND required AND archived_at IS NULL
         ORDER BY lower(name), id",
    )
    .bind(org_id)
    .fetch_all(pool)
    .await?)
}

/// Creates the organization, its flows and groups, then writes its people, their group
/// memberships, the assignments and the due-date changes with COPY; then the funnel's flow.
pub(super) async fn seed(pool: &PgPool, args: &ComplianceBenchArgs) -> anyhow::Result<Seeded> {
    let started = Instant::now();
    let now = Utc::now().duration_trunc(TimeDelta::hours(1))?;
    let origin = now - TimeDelta::days(SPAN_DAYS);
    let org = orgs::create(
        pool,
        &orgs::NewOrganization {
            name: org_name(args),
            tier: orgs::Tier::Enterprise,
            timezone: chrono_tz::Tz::UTC,
            assign_limit_per_minute: None,
            report_limit_per_minute: Some(1_000_000),
        },
    )
    .await?;
    let modules: Vec<NewModule> = ["Read", "Watch", "Quiz"]
        .iter()
        .map(|name| NewModule {
            name: (*name).to_owned(),
            estimated_minutes: 20,
            activity_id: None,
        })
        .collect();
    // (flow, validity) in creation order; every other flow expires after 12 months.
    let mut flows = Vec::new();
    for index in 0..args.flows as usize {
        let name = FLOW_NAMES.get(index).map_or_else(
            || format!("Required training {}", index + 1),
            |name| (*name).to_owned(),
        );
        let (flow, _) = db::flows::create(pool, org.id, &name, None, &modules).await?;
        flows.push((flow.id, (index % 2 == 0).then_some(VALIDITY)));
    }
    sqlx::query("UPDATE flows SET required = true WHERE org_id = $1")
        .bind(org.id)
        .execute(pool)
        .await?;
    let expiring: Vec<uuid::Uuid> = flows
        .iter()
        .filter(|(_, validity)| validity.is_some())
        .map(|(flow, _)| flow.0)
        .collect();
    sqlx::query(
        "UPDATE flows SET valid_for_months = 12, renew_before_days = $2 WHERE id = ANY($1)",
    )
    .bind(&expiring)
    .bind(RENEW_BEFORE_DAYS as i32)
    .execute(pool)
    .await?;
    let group_names: Vec<String> = LOCATIONS
        .iter()
        .map(|name| format!("Location: {name}"))
        .chain(PROGRAMMES.iter().map(|name| format!("Programme: {name}")))
        .collect();
    let group_ids: Vec<GroupId> = group_names.iter().map(|_| GroupId::new()).collect();
    sqlx::query(
        "INSERT INTO user_groups (id, org_id, display_name, display_name_normalized)
         SELECT id, $1, name, lower(name) FROM unnest($2::uuid[], $3::text[]) AS g(id, name)",
    )
    .bind(org.id)
    .bind(group_ids.iter().map(|id| id.0).collect::<Vec<_>>())
    .bind(&group_names)
    .execute(pool)
    .await?;

    let mut users = copy_in(
        pool,
        "COPY users (id, org_id, email, email_normalized, name, given_name, family_name, \
         department, manager_id, manager_name, employee_number, external_id, active, \
         deactivated_at, created_at, updated_at) FROM STDIN",
    )
    .await?;
    let mut members = copy_in(
        pool,
        "COPY user_group_members (group_id, user_id, org_id, added_at) FROM STDIN",
    )
    .await?;
    let mut assignments = copy_in(
        pool,
        "COPY assignments (id, org_id, flow_id, user_id, status, priority, due_at, assigned_at, \
         started_at, completed_at, overdue_at, expires_at, renew_at, renewal_id, \
         expiry_settled_at, expired_at, cancelled_at, cancel_reason, due_changes, updated_at) \
         FROM STDIN",
    )
    .await?;
    let mut changes = copy_in(
        pool,
        "COPY assignment_changes (id, org_id, assignment_id, kind, changed, outcome, \
         requested_at, applied_at) FROM STDIN",
    )
    .await?;
    let mut random = Random(0x2545_f491_4f6c_dd1d);
    let managers = (args.people / PEOPLE_PER_MANAGER).max(1);
    let cells = args.people * args.flows;
    let mut remaining = args.assignments;
    let mut written = 0u64;
    let bar = crate::output::progress(args.people, "seeding people and assignments");
    for person in 0..args.people {
        if person % 1_000 == 0 {
            bar.set_position(person);
        }
        let user_id = UserId::new();
        let (given, family) = name_of(person);
        let email = format!(
            "{}.{}.{person}@bench.example.com",
            given.to_lowercase(),
            family.to_lowercase()
        );
        // Managers report to the top managers; one other person in a hundred has no manager
        // (and one in three of those no department).
        let manager = if person < managers {
            (person >= TOP_MANAGERS).then_some(person % TOP_MANAGERS)
        } else if random.below(100) == 0 {
            None
        } else {
            Some(random.below(managers))
        };
        let department = match manager {
            _ if person < managers => Some(department_of_manager(person)),
            Some(manager) => Some(department_of_manager(manager)),
            None if random.below(3) == 0 => None,
            None => Some(department_of_manager(random.below(managers))),
        };
        // Most people were there before the two years, some were hired during them.
        let created_at = if random.below(100) < 85 {
            origin - seconds(&mut random, 3 * 365 * 86_400)
        } else {
            origin + seconds(&mut random, (SPAN_DAYS - 2) * 86_400)
        };
        let deactivated_at = (random.below(25) == 0)
            .then(|| created_at.max(now - seconds(&mut random, 300 * 86_400)));
        let rows = &mut users.rows;
        let _ = write!(
            rows,
            "{}\t{}\t{email}\t{email}\t{given} {family}\t{given}\t{family}\t",
            user_id.0, org.id.0
        );
        rows.push_str(department.unwrap_or("\\N"));
        rows.push('\t');
        match manager {
            Some(manager) => {
                let (given, family) = name_of(manager);
                let _ = write!(rows, "{}\t{given} {family}\t", employee_number(manager));
            }
            None => rows.push_str("\\N\t\\N\t"),
        }
        let number = employee_number(person);
        let _ = write!(
            rows,
            "{number}\t{number}\t{}\t",
            if deactivated_at.is_some() { "f" } else { "t" }
        );
        optional_time(rows, deactivated_at);
        rows.push('\t');
        copy_time(rows, created_at);
        rows.push('\t');
        copy_time(rows, deactivated_at.unwrap_or(created_at));
        rows.push('\n');
        let location = (random.below(20) != 0).then(|| random.below(LOCATIONS.len() as u64));
        let programme = (random.below(4) == 0)
            .then(|| LOCATIONS.len() as u64 + random.below(PROGRAMMES.len() as u64));
        for group in location.into_iter().chain(programme) {
            let _ = write!(
                members.rows,
                "{}\t{}\t{}\t",
                group_ids[group as usize].0, user_id.0, org.id.0
            );
            copy_time(&mut members.rows, created_at);
            members.rows.push('\n');
        }

        let start = origin.max(created_at) + TimeDelta::days(1);
        for (index, (flow_id, validity)) in flows.iter().enumerate() {
            let cells_left = cells - (person * args.flows + index as u64);
            let count = cell_count(&mut random, remaining, cells_left);
            let planned = history(&mut random, count, start, now, *validity);
            remaining = remaining.saturating_sub(planned.len() as u64);
            written += planned.len() as u64;
            let ids: Vec<AssignmentId> = planned.iter().map(|_| AssignmentId::new()).collect();
            for (position, assignment) in planned.iter().enumerate() {
                let next = planned.get(position + 1);
                write_assignment(
                    &mut assignments.rows,
                    (org.id, *flow_id, user_id, ids[position]),
                    assignment,
                    next.map(|next| (ids[position + 1], next)),
                    now,
                );
                if let Some((from, applied_at)) = assignment.due_change {
                    let change = json!({ "dueDate": {
                        "from": flow_domain::format_timestamp(from),
                        "to": assignment.due_at.map(flow_domain::format_timestamp),
                    }});
                    let _ = write!(
                        changes.rows,
                        "{}\t{}\t{}\tupdate\t{change}\tapplied\t",
                        uuid::Uuid::now_v7(),
                        org.id.0,
                        ids[position].0
                    );
                    copy_time(&mut changes.rows, applied_at);
                    changes.rows.push('\t');
                    copy_time(&mut changes.rows, applied_at);
                    changes.rows.push('\n');
                }
            }
        }
        users.flush_when_full().await?;
        members.flush_when_full().await?;
        assignments.flush_when_full().await?;
        changes.flush_when_full().await?;
    }
    let people = users.finish().await?;
    members.finish().await?;
    let copied = assignments.finish().await?;
    let changed = changes.finish().await?;
    bar.finish_and_clear();
    ensure!(
        copied == written,
        "COPY wrote {copied} assignments of {written}"
    );
    flow_workers::scheduler::merge_rollups(pool).await?;
    vacuum_analyze(
        pool,
        &[
            "users",
            "user_groups",
            "user_group_members",
            "assignments",
            "assignment_changes",
            "assignment_rollups",
            "assignment_rollup_deltas",
        ],
    )
    .await?;
    println!(
        "seeded {people} people, {} required flows, {written} assignments and {changed} due-date \
         changes with COPY in {:.1} s",
        flows.len(),
        started.elapsed().as_secs_f64()
    );

    let funnel = if args.funnel_assignments == 0 {
        None
    } else {
        let funnel_org = orgs::create(
            pool,
            &orgs::NewOrganization {
                name: funnel_org_name(args),
                tier: orgs::Tier::Enterprise,
                timezone: chrono_tz::Tz::UTC,
                assign_limit_per_minute: None,
                report_limit_per_minute: Some(1_000_000),
            },
        )
        .await?;
        let modules = super::super::seed::modules();
        let (flow, _) =
            db::flows::create(pool, funnel_org.id, "Funnel flow", None, &modules).await?;
        super::super::report::append(pool, funnel_org.id, flow.id, 0, args.funnel_assignments)
            .await?;
        Some((
            funnel_org.id,
            flow.id,
            i64::try_from(args.funnel_assignments).unwrap_or(i64::MAX),
        ))
    };
    Ok(Seeded {
        org_id: org.id,
        flows: required_flows(pool, org.id).await?,
        people: i64::try_from(people).unwrap_or(i64::MAX),
        assignments: i64::try_from(written).unwrap_or(i64::MAX),
        funnel,
    })
}

/// Writes one assignment's COPY row; `next` is the one after it in its history, if any.
fn write_assignment(
    out: &mut String,
    (org_id, flow_id, user_id, id): (OrgId, FlowId, UserId, AssignmentId),
    assignment: &Planned,
    next: Option<(AssignmentId, &Planned)>,
    now: DateTime<Utc>,
) {
    let status = assignment.status(now);
    let _ = write!(
        out,
        "{}\t{}\t{}\t{}\t{status}\tmedium\t",
        id.0, org_id.0, flow_id.0, user_id.0
    );
    optional_time(out, assignment.due_at);
    out.push('\t');
    copy_time(out, assignment.assigned_at);
    out.push('\t');
    optional_time(out, assignment.started_at);
    out.push('\t');
    optional_time(out, assignment.completed_at);
    out.push('\t');
    optional_time(out, assignment.due_at.filter(|_| status == "overdue"));
    out.push('\t');
    optional_time(out, assignment.expires_at);
    out.push('\t');
    optional_time(
        out,
        assignment
            .expires_at
            .map(|expires_at| expires_at - TimeDelta::days(RENEW_BEFORE_DAYS)),
    );
    out.push('\t');
    // The renewal the scheduler assigned when the window opened.
    match next.filter(|_| assignment.expires_at.is_some()) {
        Some((renewal, _)) => {
            let _ = write!(out, "{}", renewal.0);
        }
        None => out.push_str("\\N"),
    }
    out.push('\t');
    // Settled at expiry; `expired_at` too unless the renewal was completed in time.
    let settled = assignment
        .expires_at
        .filter(|expires_at| *expires_at <= now);
    optional_time(out, settled);
    out.push('\t');
    let renewed_in_time = next.is_some_and(|(_, next)| {
        next.completed_at
            .zip(settled)
            .is_some_and(|(completed_at, expires_at)| completed_at <= expires_at)
    });
    optional_time(out, settled.filter(|_| !renewed_in_time));
    out.push('\t');
    optional_time(out, assignment.cancelled_at);
    out.push('\t');
    out.push_str(if assignment.cancelled_at.is_some() {
        "no longer required"
    } else {
        "\\N"
    });
    let updated_at = [
        Some(assignment.assigned_at),
        assignment.started_at,
        assignment.closed_at(),
        assignment.due_change.map(|(_, applied_at)| applied_at),
        settled,
    ]
    .into_iter()
    .flatten()
    .max()
    .unwrap_or(assignment.assigned_at);
    let _ = write!(out, "\t{}\t", u8::from(assignment.due_change.is_some()));
    copy_time(out, updated_at);
    out.push('\n');
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, HashSet};

    use super::*;

    fn instant(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text)
            .expect("instant")
            .with_timezone(&Utc)
    }

    #[test]
    fn histories_are_sequential_with_at_most_the_last_open() {
        let now = instant("2026-11-28T09:00:00Z");
        let start = now - TimeDelta::days(SPAN_DAYS);
        let mut random = Random(7);
        let mut seen = HashSet::new();
        for draw in 0..20_000 {
            let validity = (draw % 2 == 0).then_some(VALIDITY);
            let count = 1 + draw % 4;
            let planned = history(&mut random, count, start, now, validity);
            assert!(planned.len() <= count);
            for (index, assignment) in planned.iter().enumerate() {
                assert!(assignment.assigned_at >= start && assignment.assigned_at < now);
                assert!(assignment.completed_at.is_none() || assignment.cancelled_at.is_none());
                for at in [assignment.started_at, assignment.closed_at()]
                    .into_iter()
                    .flatten()
                {
                    assert!(at >= assignment.assigned_at && at < now, "{assignment:?}");
                }
                if let (Some(started_at), Some(closed_at)) =
                    (assignment.started_at, assignment.closed_at())
                {
                    assert!(started_at <= closed_at, "{assignment:?}");
                }
                assert_eq!(
                    assignment.expires_at.is_some(),
                    validity.is_some() && assignment.completed_at.is_some()
                );
                if let Some(next) = planned.get(index + 1) {
                    let closed = assignment.closed_at().expect("only the last is open");
                    assert!(next.assigned_at > closed, "{assignment:?} then {next:?}");
                }
                if let Some((from, applied_at)) = assignment.due_change {
                    assert_eq!(assignment.due_at, Some(from + TimeDelta::days(14)));
                    assert!(applied_at >= assignment.assigned_at && applied_at <= now);
                }
                seen.insert(assignment.status(now));
                if assignment
                    .expires_at
                    .is_some_and(|expires_at| expires_at <= now)
                    && index + 1 == planned.len()
                {
                    seen.insert("expired");
                }
                if assignment.due_change.is_some() {
                    seen.insert("due date moved");
                }
            }
        }
        for kind in [
            "completed",
            "cancelled",
            "overdue",
            "in_progress",
            "pending",
            "expired",
            "due date moved",
        ] {
            assert!(seen.contains(kind), "no {kind} in 20,000 histories");
        }
    }

    #[test]
    fn cell_counts_keep_to_the_budget() {
        let mut random = Random(11);
        let cells = 100_000u64;
        let (mut remaining, mut empty) = (cells, 0u64);
        for cell in 0..cells {
            let count = cell_count(&mut random, remaining, cells - cell);
            empty += u64::from(count == 0);
            remaining -= count as u64;
        }
        // About one cell in ten never assigned, and the budget met within 0.1 %.
        assert!((9_000..11_000).contains(&empty), "{empty} empty cells");
        assert!(remaining < cells / 1_000, "{remaining} left of the budget");
        assert_eq!(cell_count(&mut random, 0, 10), 0);
        assert!(cell_count(&mut random, 1, 1) <= 1);
    }

    #[test]
    fn managers_and_departments_are_deterministic_and_spread() {
        assert_eq!(name_of(42), name_of(42));
        assert_eq!(department_of_manager(7), department_of_manager(7));
        let mut sizes: BTreeMap<&str, u64> = BTreeMap::new();
        for manager in 0..1_000 {
            *sizes.entry(department_of_manager(manager)).or_default() += 1;
        }
        assert_eq!(sizes.len(), DEPARTMENTS.len());
        // Engineering's weight is 18 of 100: 180 of 1,000 managers, give or take.
        let engineering = sizes["Engineering"];
        assert!((130..230).contains(&engineering), "{engineering}");
    }
}
