//! Sending reminders (design §16): the scheduler's scan for reminders whose time has come, by
//! each flow's policy (or, for a flow without one, its organization's default policy: a flow's
//! own policy wins, even one with empty lists, which says "no reminders"), computed in the
//! organization's time zone (a day before a due date is the same local time the local day
//! before, across clock changes). Each reminder is claimed by
//! inserting its row in `assignment_reminders` in the transaction that writes its event, so it is
//! sent once per (assignment, due date, kind, offset) whatever the number of schedulers.

use chrono::{DateTime, Utc};
use flow_domain::events::{EventType, ManagerRef, NewEvent, ReminderData, Transition};
use flow_domain::lane::Lane;
use flow_domain::reminders::ReminderKind;
use sqlx::PgConnection;

use super::lifecycle::{AssignmentSnapshot, SNAPSHOT_COLUMNS};

/// How late a reminder may still be sent: a scheduler that was down for less than this catches
/// up; older reminders (a policy set on long-running assignments, an outage) are not sent.
pub const CATCH_UP: &str = "1 day";

/// The advisory lock (transaction-level, by this key's hash) of the reminder scan.
const SCAN_LOCK: &str = "flow reminders scan";

#[derive(sqlx::FromRow)]
struct Claimed {
    #[sqlx(flatten)]
    snapshot: AssignmentSnapshot,
    kind: ReminderKind,
    offset_days: i32,
    reminder_due_at: DateTime<Utc>,
    manager_id: Option<String>,
    manager_name: Option<String>,
}

/// Sends up to `limit` reminders whose time is at or before `now` (and not older than
/// [`CATCH_UP`], nor before the assignment was made), each with one `flow.reminder` event, in
/// the caller's transaction; returns how many. Only open assignments (pending, in progress,
/// overdue) of active users get reminders: none for cancelled or completed ones or deactivated
/// people.
pub async fn send_due(
    connection: &mut PgConnection,
    now: DateTime<Utc>,
    limit: i64,
) -> Result<usize, sqlx::Error> {
    // The planner cannot see how few offsets a policy has (a JSON array: it guesses 100 per
    // list), so it prices this scan in millions and compiles it with JIT — about a second a
    // round, ten times what the scan itself takes (EXPLAIN on a million assignments). Off for
    // this transaction.
    sqlx::query("SET LOCAL jit = off")
        .execute(&mut *connection)
        .await?;
    // One scan at a time across the schedulers: two would compute the same first batch, and the
    // second would wait on the first's uncommitted claims only to insert nothing (and end its
    // round's reminders there). A scheduler that finds the step taken answers 0 at once and goes
    // on with its other steps; the holder sends every due reminder.
    let ours: bool =
        sqlx::query_scalar("SELECT pg_try_advisory_xact_lock(hashtextextended($1, 0))")
            .bind(SCAN_LOCK)
            .fetch_one(&mut *connection)
            .await?;
    if !ours {
        tracing::debug!("another scheduler is sending reminders; this round leaves them to it");
        return Ok(0);
    }
    let claimed: Vec<Claimed> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "WITH policies AS (
            -- The flows with a policy of their own (flows_with_reminders_idx), and the flows
            -- without one of the organizations with a default (organizations_with_reminders_idx,
            -- then flows_org_id_idx): COALESCE(flow policy, organization default), read per
            -- flow, so the scan only reads the open assignments of flows with a policy.
            SELECT f.id AS flow_id, f.reminders, o.timezone AS zone
            FROM flows f JOIN organizations o ON o.id = f.org_id
            WHERE f.reminders IS NOT NULL
            UNION ALL
            SELECT f.id, o.reminders, o.timezone
            FROM organizations o JOIN flows f ON f.org_id = o.id AND f.reminders IS NULL
            WHERE o.reminders IS NOT NULL
         ), offsets AS (
            -- Every (flow, kind, offset) of every policy: a few rows per flow. `sign` says on
            -- which side of the due date the reminder falls.
            SELECT p.flow_id, p.zone, 'due_soon' AS kind, d.days, -1 AS sign
            FROM policies p
            CROSS JOIN LATERAL (SELECT value::int AS days
                                FROM jsonb_array_elements_text(p.reminders -> 'beforeDueDays')) d
            UNION ALL
            SELECT p.flow_id, p.zone, 'overdue', d.days, 1
            FROM policies p
            CROSS JOIN LATERAL (SELECT value::int AS days
                                FROM jsonb_array_elements_text(p.reminders -> 'afterDueDays')) d
            UNION ALL
            SELECT p.flow_id, p.zone, 'escalation', (p.reminders ->> 'escalateAfterDays')::int, 1
            FROM policies p
            WHERE jsonb_typeof(p.reminders -> 'escalateAfterDays') = 'number'
         ), candidates AS (
            -- For each offset, only the open assignments whose due date puts its reminder in
            -- (now - CATCH_UP, now]: a range of assignments_open_due_by_flow_idx. The range is in
            -- whole days of 24 hours with a day's margin on each side (a clock change moves a
            -- local day by an hour or two); the exact local instant is checked below.
            SELECT a.id, a.assigned_at, a.due_at, o.kind, o.days,
                   ((a.due_at AT TIME ZONE o.zone) + make_interval(days => o.sign * o.days))
                       AT TIME ZONE o.zone AS remind_at
            FROM offsets o
            CROSS JOIN LATERAL (
                SELECT a.id, a.user_id, a.assigned_at, a.due_at
                FROM assignments a
                WHERE a.flow_id = o.flow_id
                  AND a.status IN ('pending', 'in_progress', 'overdue') AND a.due_at IS NOT NULL
                  AND a.due_at > $1 - interval '{CATCH_UP}'
                                    - make_interval(hours => 24 * (o.sign * o.days + 1))
                  AND a.due_at <= $1 - make_interval(hours => 24 * (o.sign * o.days - 1))
            ) a
            JOIN users u ON u.id = a.user_id AND u.active
         ), due AS (
            -- Whether it was sent: one probe of the primary key per candidate (a LATERAL with
            -- LIMIT, which the planner keeps as a nested loop; as NOT EXISTS it may hash every
            -- reminder ever sent, a table that only grows, on every round).
            SELECT c.* FROM candidates c
            LEFT JOIN LATERAL (SELECT true AS sent FROM assignment_reminders r
                               WHERE r.assignment_id = c.id AND r.due_at = c.due_at
                                 AND r.kind = c.kind AND r.offset_days = c.days
                               LIMIT 1) s ON true
            WHERE c.remind_at <= $1 AND c.remind_at > $1 - interval '{CATCH_UP}'
              AND c.remind_at >= c.assigned_at
              AND s.sent IS NULL
            ORDER BY c.remind_at
            LIMIT $2
         ), claimed AS (
            INSERT INTO assignment_reminders (assignment_id, due_at, kind, offset_days, remind_at)
            SELECT id, due_at, kind, days, remind_at FROM due
            ON CONFLICT DO NOTHING
            RETURNING assignment_id, due_at, kind, offset_days
         )
         SELECT {SNAPSHOT_COLUMNS}, c.kind, c.offset_days, c.due_at AS reminder_due_at,
                u.manager_id, u.manager_name
         FROM claimed c JOIN assignments a ON a.id = c.assignment_id
         JOIN flows f ON f.id = a.flow_id JOIN users u ON u.id = a.user_id"
    )))
    .bind(now)
    .bind(limit)
    .fetch_all(&mut *connection)
    .await?;
    if claimed.is_empty() {
        return Ok(0);
    }
    let span = tracing::info_span!("reminders", reminders = claimed.len());
    let traceparent = crate::telemetry::traceparent(&span);
    let events: Vec<NewEvent> = claimed
        .iter()
        .map(|claimed| {
            let transition = Transition::Reminder {
                kind: claimed.kind,
                offset_days: claimed.offset_days,
                due_micros: claimed.reminder_due_at.timestamp_micros(),
            };
            claimed.snapshot.transition_event(
                transition,
                EventType::Reminder,
                now,
                traceparent.as_deref(),
                |data| {
                    data.reminder = Some(ReminderData {
                        kind: claimed.kind.as_str().to_owned(),
                        offset_days: claimed.offset_days,
                        manager: claimed.manager_id.clone().map(|id| ManagerRef {
                            id,
                            name: claimed.manager_name.clone(),
                        }),
                    });
                },
            )
        })
        .collect();
    // A scan of many assignments: the bulk lane.
    super::outbox::insert(connection, Lane::Bulk, &events).await?;
    Ok(claimed.len())
}
