//! The demo's life: assignments in every state over the past six weeks, made through the bulk
//! assign path at their past times and progressed through the progress path at theirs, then a
//! schedule, an enrollment rule and a webhook endpoint at the local receiver.

use std::time::{Duration, Instant};

use chrono::{DateTime, Datelike as _, Months, TimeZone as _, Utc};
use flow_app::{Acting, Caller};
use flow_common::amqp::Lane;
use flow_common::db::assignments::{AssignmentRecord, ListFilter};
use flow_common::db::flows::{Flow, Module};
use flow_domain::ids::{AssignmentId, FlowId};
use flow_domain::{Email, ModuleStatus, Priority, format_timestamp};
use futures::StreamExt as _;

use super::people::{days_employed, handles_personal_data, mix, pick, seats};
use super::{Demo, FLOWS, ONBOARDING, PRIVACY, PRIVACY_VALID_MONTHS, SECURITY, demo_email};

/// One assignment the demo makes: to person `user` of flow `flow` (an index into [`FLOWS`]),
/// made at `assigned_at`, due at `due_at`, and the module activity that follows (module
/// position, status, when).
#[derive(Debug, Clone)]
struct Planned {
    flow: usize,
    user: usize,
    assigned_at: DateTime<Utc>,
    due_at: DateTime<Utc>,
    priority: Priority,
    progress: Vec<(usize, ModuleStatus, DateTime<Utc>)>,
}

impl Planned {
    fn completes(&self) -> bool {
        let modules = FLOWS[self.flow].1.len();
        self.progress
            .iter()
            .filter(|(_, status, _)| *status == ModuleStatus::Completed)
            .count()
            == modules
    }
}

/// 09:00 UTC `days` days before `now`'s day.
fn morning(now: DateTime<Utc>, days: u64) -> DateTime<Utc> {
    let day = now
        .date_naive()
        .checked_sub_days(chrono::Days::new(days))
        .unwrap_or(now.date_naive());
    Utc.from_utc_datetime(&day.and_hms_opt(9, 0, 0).unwrap_or_default())
}

/// The activity of an assignment of `flow` made at `assigned_at`: every module completed by
/// `completed_at` (`Some`), or the first `done` modules completed and the next one started,
/// evenly spread until `until`.
fn activity(
    flow: usize,
    assigned_at: DateTime<Utc>,
    completed_at: Option<DateTime<Utc>>,
    done: usize,
    until: DateTime<Utc>,
) -> Vec<(usize, ModuleStatus, DateTime<Utc>)> {
    let modules = FLOWS[flow].1.len();
    let (count, end) = match completed_at {
        Some(at) => (modules, at),
        None => (done.min(modules - 1), until),
    };
    let span = end - assigned_at;
    let step = |position: usize| {
        assigned_at
            + span * i32::try_from(position + 1).unwrap_or(1)
                / i32::try_from(count + 1).unwrap_or(1)
    };
    let mut activity: Vec<_> = (0..count)
        .map(|position| (position, ModuleStatus::Completed, step(position)))
        .collect();
    match completed_at {
        // The last module's completion completes the assignment, at its time.
        Some(at) => {
            if let Some(last) = activity.last_mut() {
                last.2 = at;
            }
        }
        None => activity.push((count, ModuleStatus::InProgress, step(count))),
    }
    activity
}

/// Every assignment the demo makes for people `1..=users` at `now`: each state in believable
/// shares, from six weeks back to today.
fn plan(users: usize, now: DateTime<Utc>) -> Vec<Planned> {
    let seats = seats(users);
    let mut planned = Vec::new();
    // One completion of Data Privacy whose year of validity ends in five days: the expiring one.
    let expiring_user = 2.min(users);
    let expires = now + chrono::Duration::days(5);
    let completed = expires
        .checked_sub_months(Months::new(PRIVACY_VALID_MONTHS.unsigned_abs()))
        .unwrap_or(expires);
    let assigned = completed - chrono::Duration::days(9);
    planned.push(Planned {
        flow: PRIVACY,
        user: expiring_user,
        assigned_at: assigned,
        due_at: assigned + chrono::Duration::days(21),
        priority: Priority::Medium,
        progress: activity(PRIVACY, assigned, Some(completed), 0, now),
    });
    for (user, seat) in seats.iter().enumerate().skip(1) {
        // Security Basics: about half of everyone, over the last six weeks, due in two weeks.
        if pick(user, 1, 100) < 45 {
            planned.push(outcome(SECURITY, user, 2 + mix(user, 2) % 40, 14, now));
        }
        // Data Privacy: the departments that handle personal data, due in three weeks.
        if handles_personal_data(seat) && user != expiring_user && pick(user, 4, 100) < 60 {
            planned.push(outcome(PRIVACY, user, 1 + mix(user, 5) % 35, 21, now));
        }
        // Onboarding: every new hire, from their first day, due after thirty days.
        let employed = days_employed(user);
        if employed <= 42 {
            planned.push(Planned {
                priority: Priority::High,
                ..outcome(ONBOARDING, user, employed, 30, now)
            });
        }
    }
    planned
}

/// An assignment of `flow` to `user` made `days_ago` days ago (in the morning), due `due_days`
/// later, and how far it got: before its due date, most finished; after it, most of the rest
/// did not (overdue).
fn outcome(flow: usize, user: usize, days_ago: u64, due_days: i64, now: DateTime<Utc>) -> Planned {
    // One time of day per flow and day: a day's assignments of a flow are one bulk request.
    let minutes = mix(usize::try_from(days_ago).unwrap_or(0), 6 + flow as u64) % 480;
    let assigned_at = morning(now, days_ago) + chrono::Duration::minutes(minutes as i64);
    let due_at = assigned_at + chrono::Duration::days(due_days);
    let roll = pick(user, 3 + flow as u64 * 10, 100);
    let modules = FLOWS[flow].1.len();
    let elapsed_days = i64::try_from(days_ago).unwrap_or(0);
    let yesterday = now - chrono::Duration::hours(20);
    let progress = if due_at < now {
        // The due date has passed.
        if roll < 70 {
            let days = 1 + i64::try_from(mix(user, 7) % (due_days as u64 - 1)).unwrap_or(0);
            activity(
                flow,
                assigned_at,
                Some(assigned_at + chrono::Duration::days(days)),
                0,
                now,
            )
        } else if roll < 82 {
            activity(
                flow,
                assigned_at,
                None,
                1 + pick(user, 8, modules - 1),
                yesterday,
            )
        } else {
            Vec::new()
        }
    } else if elapsed_days >= 3 && roll < 35 {
        let days = 1 + i64::try_from(mix(user, 7) % (days_ago - 2)).unwrap_or(0);
        activity(
            flow,
            assigned_at,
            Some(assigned_at + chrono::Duration::days(days)),
            0,
            now,
        )
    } else if elapsed_days >= 2 && roll < 65 {
        activity(
            flow,
            assigned_at,
            None,
            pick(user, 8, modules - 1),
            yesterday,
        )
    } else {
        Vec::new()
    };
    Planned {
        flow,
        user,
        assigned_at,
        due_at,
        priority: [
            Priority::Low,
            Priority::Medium,
            Priority::Medium,
            Priority::High,
        ][pick(user, 9, 4)],
        progress,
    }
}

/// How many assignments of the demo are in each state, as reported now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    /// Every assignment.
    pub total: usize,
    /// Completed.
    pub completed: usize,
    /// Started, not completed, not past due.
    pub in_progress: usize,
    /// Not started, not past due.
    pub pending: usize,
    /// Past due and not completed.
    pub overdue: usize,
    /// Completed, with a validity ending within a week.
    pub expiring_soon: usize,
}

impl Tally {
    fn of(records: &[AssignmentRecord], now: DateTime<Utc>) -> Self {
        let mut tally = Self::default();
        for record in records {
            tally.total += 1;
            if record.completed_at.is_some() {
                tally.completed += 1;
            } else if record.due_at.is_some_and(|due| due < now) {
                tally.overdue += 1;
            } else if record.started_at.is_some() {
                tally.in_progress += 1;
            } else {
                tally.pending += 1;
            }
        }
        tally
    }
}

/// The webhook endpoint of the demo.
#[derive(Debug, Clone)]
pub struct DemoEndpoint {
    /// Its URL (the local receiver).
    pub url: String,
    /// Its signing secret, when it was created by this run (shown once).
    pub secret: Option<String>,
}

/// What [`bring_to_life`] found or made.
#[derive(Debug, Clone, Default)]
pub struct Life {
    /// People.
    pub users: usize,
    /// The assignments by state, once persisted.
    pub assignments: Tally,
    /// The schedule, enrollment rule and webhook endpoint: whether each was made by this run.
    pub made: Vec<&'static str>,
    /// The webhook endpoint, when a receiver was given.
    pub endpoint: Option<DemoEndpoint>,
}

/// How long the demo waits for the assign-worker to persist what it queued.
const PERSIST_WAIT: Duration = Duration::from_secs(90);

/// Gives the demo organization its life, through the application layer: the assignments of
/// [`plan`] (bulk assigns made at their past times, then their module progress at its times,
/// each waited for until the assign-worker persisted it), a schedule, an enrollment rule, and
/// a webhook endpoint at `receiver` (a URL; the local receiver of `flowctl up --demo`) with a
/// test event sent to it. What exists already (a reused organization) is kept: assignments are
/// made only in an organization that has none, the endpoint at the demo's path is pointed at
/// `receiver`. The workers must be running.
pub async fn bring_to_life(
    context: &flow_app::Context,
    demo: &Demo,
    receiver: Option<&str>,
) -> anyhow::Result<Life> {
    let org = flow_app::orgs::get(context, demo.org_id)
        .await?
        .ok_or_else(|| anyhow::anyhow!("no organization {}", demo.org_id))?;
    let caller = Caller::without_key(org);
    let acting = crate::context::acting(&caller);
    let mut life = Life::default();
    let mut flows = Vec::new();
    for (id, _) in &demo.flows {
        flows.push(flow_app::flows::get(context, acting, *id).await?);
    }
    if flows.len() < FLOWS.len() {
        anyhow::bail!(
            "the demo organization {} has {} flows, not the demo's {}",
            demo.org_id,
            flows.len(),
            FLOWS.len()
        );
    }
    let people = count_users(context, acting).await?;
    life.users = people;
    let existing = all_assignments(context, acting).await?;
    if existing.is_empty() {
        let now = Utc::now();
        let planned = plan(people, now);
        assign(context, &caller, &demo.flows, &planned).await?;
        let made = wait_for(context, acting, "assignments persisted", |records| {
            records.len() >= planned.len()
        })
        .await?;
        record_progress(context, acting, &flows, &planned, &made).await?;
        let completions = planned.iter().filter(|item| item.completes()).count();
        let starts = planned
            .iter()
            .filter(|item| !item.progress.is_empty())
            .count();
        wait_for(context, acting, "module progress applied", |records| {
            records.iter().filter(|r| r.completed_at.is_some()).count() >= completions
                && records.iter().filter(|r| r.started_at.is_some()).count() >= starts
        })
        .await?;
    }
    let now = Utc::now();
    let records = all_assignments(context, acting).await?;
    life.assignments = Tally::of(&records, now);
    life.assignments.expiring_soon = records
        .iter()
        .filter(|record| {
            record
                .expires_at
                .is_some_and(|expires| expires > now && expires <= now + chrono::Duration::days(7))
        })
        .count();

    if flow_app::schedules::list(context, acting, None, 1, now)
        .await?
        .is_empty()
    {
        // The chief executive takes Security Basics every quarter, from the first of next month.
        let first = now
            .date_naive()
            .checked_add_months(Months::new(1))
            .and_then(|day| day.with_day0(0))
            .unwrap_or(now.date_naive());
        flow_app::schedules::create(
            context,
            acting,
            flow_app::schedules::ScheduleFields {
                flow_id: Some(demo.flows[SECURITY].0),
                email: Email::parse("email", &demo_email(1)).map_err(|e| anyhow::anyhow!(e))?,
                priority: Priority::Medium,
                notes: Some("Quarterly security refresher".to_owned()),
                scheduled_at: Some(first.to_string()),
                recurrence: Some("quarterly".to_owned()),
                due_in_days: Some(14),
            },
        )
        .await?;
        life.made.push("schedule");
    }
    if flow_app::enrollment::list(context, acting, None, 1)
        .await?
        .is_empty()
    {
        flow_app::enrollment::create(
            context,
            acting,
            flow_app::enrollment::RuleInput {
                name: Some("Sales onboarding".to_owned()),
                condition: Some(serde_json::json!({"all": [
                    {"departmentEquals": "Sales"},
                    {"memberOf": "New hires"}
                ]})),
                flow_id: Some(demo.flows[ONBOARDING].0.to_string()),
                due_days: Some(14),
                due_from: Some("start_date".to_owned()),
                priority: Some("high".to_owned()),
                notes: Some("Welcome to Sales".to_owned()),
                ..flow_app::enrollment::RuleInput::default()
            },
        )
        .await?;
        life.made.push("enrollment rule");
    }
    if let Some(url) = receiver {
        life.endpoint = Some(endpoint(context, acting, url).await?);
    }
    Ok(life)
}

/// The path of the demo's endpoint at the local receiver.
pub const RECEIVER_PATH: &str = "demo";

/// Points the demo's webhook endpoint at `url` (made when there is none) and sends it a test
/// event.
async fn endpoint(
    context: &flow_app::Context,
    acting: Acting<'_>,
    url: &str,
) -> anyhow::Result<DemoEndpoint> {
    let suffix = format!("/hooks/{RECEIVER_PATH}");
    let existing = flow_app::webhooks::list(context, acting, None, 100)
        .await?
        .into_iter()
        .find(|endpoint| endpoint.url.ends_with(&suffix));
    let (id, secret) = match existing {
        Some(endpoint) => {
            if endpoint.url != url || !endpoint.enabled {
                flow_app::webhooks::update(
                    context,
                    acting,
                    endpoint.id,
                    &flow_app::webhooks::EndpointFields {
                        url: Some(url.to_owned()),
                        enabled: Some(true),
                        ..flow_app::webhooks::EndpointFields::default()
                    },
                )
                .await?;
            }
            (endpoint.id, None)
        }
        None => {
            let made = flow_app::webhooks::create(
                context,
                acting,
                &flow_app::webhooks::EndpointFields {
                    url: Some(url.to_owned()),
                    events: None,
                    description: Some(
                        "The local receiver of flowctl up --demo (every event)".to_owned(),
                    ),
                    enabled: None,
                },
            )
            .await?;
            (made.endpoint.id, Some(made.secret))
        }
    };
    flow_app::webhooks::send_test(context, acting, id).await?;
    Ok(DemoEndpoint {
        url: url.to_owned(),
        secret,
    })
}

/// How many people the organization has.
async fn count_users(context: &flow_app::Context, acting: Acting<'_>) -> anyhow::Result<usize> {
    let mut count = 0;
    let mut after = None;
    loop {
        let page = flow_app::users::list(context, acting, after, 1_000).await?;
        count += page.len();
        match page.last() {
            Some(last) if page.len() == 1_000 => after = Some(last.id),
            _ => return Ok(count),
        }
    }
}

/// Every assignment of the organization.
async fn all_assignments(
    context: &flow_app::Context,
    acting: Acting<'_>,
) -> anyhow::Result<Vec<AssignmentRecord>> {
    let filter = ListFilter::default();
    let now = Utc::now();
    let mut records = Vec::new();
    let mut after = None;
    loop {
        let page = flow_app::assignments::list(context, acting, &filter, after, 1_000, now).await?;
        let full = page.len() == 1_000;
        after = page.last().map(|record| (record.assigned_at, record.id));
        records.extend(page);
        if !full {
            return Ok(records);
        }
    }
}

/// Reads the organization's assignments until `done` holds for them, for at most
/// [`PERSIST_WAIT`] (then fails naming `what`); returns them.
async fn wait_for(
    context: &flow_app::Context,
    acting: Acting<'_>,
    what: &str,
    done: impl Fn(&[AssignmentRecord]) -> bool,
) -> anyhow::Result<Vec<AssignmentRecord>> {
    let deadline = Instant::now() + PERSIST_WAIT;
    loop {
        let records = all_assignments(context, acting).await?;
        if done(&records) {
            return Ok(records);
        }
        if Instant::now() > deadline {
            anyhow::bail!(
                "the demo's {what} did not appear within {} s: is the assign-worker running?",
                PERSIST_WAIT.as_secs()
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Queues the planned assignments through the bulk assign path, those made at one time
/// together, each made at its time.
async fn assign(
    context: &flow_app::Context,
    caller: &Caller,
    flows: &[(FlowId, String)],
    planned: &[Planned],
) -> anyhow::Result<()> {
    let mut by_time: std::collections::BTreeMap<DateTime<Utc>, Vec<&Planned>> =
        std::collections::BTreeMap::new();
    for item in planned {
        by_time.entry(item.assigned_at).or_default().push(item);
    }
    // The futures are made first and then run several at a time: a closure making them inside
    // the stream would make this future not `Send` for every lifetime (rust-lang/rust#102211).
    let batches: Vec<_> = by_time
        .into_iter()
        .map(|(at, items)| assign_batch(context, caller, flows, at, items))
        .collect();
    let outcomes: Vec<anyhow::Result<()>> = futures::stream::iter(batches)
        .buffer_unordered(8)
        .collect()
        .await;
    outcomes.into_iter().collect()
}

/// Assigns `items` in one bulk request made at `at`.
async fn assign_batch(
    context: &flow_app::Context,
    caller: &Caller,
    flows: &[(FlowId, String)],
    at: DateTime<Utc>,
    items: Vec<&Planned>,
) -> anyhow::Result<()> {
    let inputs = items
        .iter()
        .map(|item| {
            let input = Email::parse("userEmail", &demo_email(item.user))
                .map(|email| flow_app::assign::AssignInput {
                    flow_id: Some(flows[item.flow].0),
                    email,
                    due_at: Some(item.due_at),
                    priority: item.priority,
                    notes: None,
                })
                .map_err(flow_app::ServiceError::from);
            (input, None)
        })
        .collect();
    for outcome in flow_app::assign::assign_many(context, caller, Lane::Bulk, inputs, at).await {
        outcome?;
    }
    Ok(())
}

/// Records the planned module activity of the persisted assignments `made` through the progress
/// path: each assignment's in order, several assignments at a time.
async fn record_progress(
    context: &flow_app::Context,
    acting: Acting<'_>,
    flows: &[(Flow, Vec<Module>)],
    planned: &[Planned],
    made: &[AssignmentRecord],
) -> anyhow::Result<()> {
    let by_key: std::collections::HashMap<(FlowId, String), _> = made
        .iter()
        .map(|record| {
            (
                (record.flow_id, record.assignee_email.to_lowercase()),
                record.id,
            )
        })
        .collect();
    // Made first, run several at a time (see `assign`).
    let work: Vec<_> = planned
        .iter()
        .filter(|item| !item.progress.is_empty())
        .filter_map(|item| {
            let (flow, modules) = &flows[item.flow];
            let id = by_key.get(&(flow.id, demo_email(item.user)))?;
            Some(progress_of(context, acting, *id, modules, &item.progress))
        })
        .collect();
    let outcomes: Vec<anyhow::Result<()>> = futures::stream::iter(work)
        .buffer_unordered(16)
        .collect()
        .await;
    outcomes.into_iter().collect()
}

/// Records the module activity `progress` of the assignment `id`, in order.
async fn progress_of(
    context: &flow_app::Context,
    acting: Acting<'_>,
    id: AssignmentId,
    modules: &[Module],
    progress: &[(usize, ModuleStatus, DateTime<Utc>)],
) -> anyhow::Result<()> {
    let now = Utc::now();
    for (position, status, at) in progress {
        let module = modules
            .iter()
            .find(|module| usize::try_from(module.position).ok() == Some(*position))
            .ok_or_else(|| anyhow::anyhow!("no module {position}"))?;
        let input = flow_app::progress::ProgressInput::parse(
            flow_app::progress::ProgressFields {
                module_id: Some(module.id.to_string()),
                status: Some(status.as_str().to_owned()),
                at: Some(format_timestamp(*at)),
                ..Default::default()
            },
            acting.caller.zone,
            now,
        )?;
        let request_id = format!("demo-{}", uuid::Uuid::now_v7().simple());
        flow_app::progress::record(context, acting, &id.to_string(), input, &request_id).await?;
    }
    Ok(())
}
