//! What needs attention in an organization (design §16, the dashboard's home page): its open
//! assignments overdue (with the days they are overdue) and due within [`DUE_SOON_DAYS`] days
//! across every flow, counted exactly; its completions expiring within as many days; its failing
//! webhook endpoints; its rules whose latest
//! backfill failed; and its assignments that could not be persisted (a bulk or CSV assign whose
//! command was dead-lettered). The due figures and lists are read in one snapshot on a fresh
//! replica, else the primary, as the dashboard's other figures are.

use chrono::{DateTime, Duration, Utc};
use flow_common::db::attention::{
    self as queries, DueAssignment, DueCounts, ExpiringCompletion, FailedAssign, FailedBackfill,
    FailingEndpoint,
};
use flow_common::db::replicas::ReadPurpose;
use flow_domain::AssignmentStatus;
use flow_domain::ids::UserId;

use crate::{Acting, Context, ServiceError};

/// The window of "due soon": open assignments due within this many days of now.
pub const DUE_SOON_DAYS: i64 = 7;

/// How many of each kind the home page lists (the counts are of all of them).
pub const LISTED: i64 = 10;

/// An open assignment that is overdue or due soon.
#[derive(Debug, Clone)]
pub struct DueItem {
    /// The assignment, its assignee and flow.
    pub assignment: DueAssignment,
    /// Calendar days in the organization's time zone between the due date and today: how many
    /// days it is overdue, or in how many days it is due (0: today).
    pub days: i64,
    /// Its status at the reading time (overdue once due, even before the scheduler marks it).
    pub status: AssignmentStatus,
}

/// What needs attention, as of [`Attention::read_at`].
#[derive(Debug, Clone)]
pub struct Attention {
    /// The instant the due figures were read at.
    pub read_at: DateTime<Utc>,
    /// Open assignments due at or before `read_at` (overdue), and due after it within
    /// [`DUE_SOON_DAYS`] days (due soon).
    pub counts: DueCounts,
    /// The longest overdue, at most [`LISTED`].
    pub overdue: Vec<DueItem>,
    /// The soonest due, at most [`LISTED`].
    pub due_soon: Vec<DueItem>,
    /// Completions (of active users, their renewal not completed) whose validity ends within
    /// [`DUE_SOON_DAYS`] days: how many, and the soonest [`LISTED`] with the calendar days left.
    pub expiring: (i64, Vec<(ExpiringCompletion, i64)>),
    /// Endpoints in a run of failures, or disabled by the service.
    pub failing_endpoints: Vec<FailingEndpoint>,
    /// Rules whose latest backfill failed.
    pub failed_backfills: Vec<FailedBackfill>,
    /// Assignments that could not be persisted: how many, and the latest [`LISTED`].
    pub failed_assigns: (i64, Vec<FailedAssign>),
}

/// Whole calendar days from `from` to `to` in `zone` (negative when `to` is the earlier day).
pub fn calendar_days(zone: chrono_tz::Tz, from: DateTime<Utc>, to: DateTime<Utc>) -> i64 {
    (to.with_timezone(&zone).date_naive() - from.with_timezone(&zone).date_naive()).num_days()
}

/// What needs attention in the organization now.
pub async fn read(ctx: &Context, acting: Acting<'_>) -> Result<Attention, ServiceError> {
    let org_id = acting.org_id();
    let zone = acting.caller.zone;
    let mut read = ctx.reads.read(ReadPurpose::Dashboard, None);
    let served = loop {
        let (mut snapshot, source) = read.begin().await?;
        let now = snapshot.now();
        let until = now + Duration::days(DUE_SOON_DAYS);
        let connection = snapshot.connection();
        let outcome = async {
            let counts = queries::due_counts(&mut *connection, org_id, now, until).await?;
            let overdue = queries::due_between(&mut *connection, org_id, None, now, LISTED).await?;
            let due_soon =
                queries::due_between(&mut *connection, org_id, Some(now), until, LISTED).await?;
            let expiring_count =
                queries::expiring_count(&mut *connection, org_id, now, until).await?;
            let expiring = queries::expiring(&mut *connection, org_id, now, until, LISTED).await?;
            let failing_endpoints = queries::failing_endpoints(&mut *connection, org_id).await?;
            let failed_backfills = queries::failed_backfills(&mut *connection, org_id).await?;
            let failed_assigns = queries::failed_assigns(connection, org_id, LISTED).await?;
            Ok::<_, sqlx::Error>((
                counts,
                overdue,
                due_soon,
                (expiring_count, expiring),
                failing_endpoints,
                failed_backfills,
                failed_assigns,
            ))
        }
        .await
        .map(|found| (now, found));
        if let Some(served) = read.end(snapshot, source, outcome).await? {
            break served.value;
        }
    };
    let (
        read_at,
        (
            counts,
            overdue,
            due_soon,
            (expiring_count, expiring),
            failing_endpoints,
            failed_backfills,
            failed_assigns,
        ),
    ) = served;
    let item = |overdue: bool| {
        move |assignment: DueAssignment| {
            let days = if overdue {
                calendar_days(zone, assignment.due_at, read_at)
            } else {
                calendar_days(zone, read_at, assignment.due_at)
            };
            DueItem {
                status: assignment
                    .status
                    .effective(Some(assignment.due_at), read_at),
                days,
                assignment,
            }
        }
    };
    Ok(Attention {
        read_at,
        counts,
        overdue: overdue.into_iter().map(item(true)).collect(),
        due_soon: due_soon.into_iter().map(item(false)).collect(),
        expiring: (
            expiring_count,
            expiring
                .into_iter()
                .map(|completion| {
                    let days = calendar_days(zone, read_at, completion.expires_at);
                    (completion, days)
                })
                .collect(),
        ),
        failing_endpoints,
        failed_backfills,
        failed_assigns,
    })
}

/// The user of the organization a person's manager id (from the identity provider) names, when
/// one is: the user with that id (`usr_…`) or that `externalId`.
pub async fn manager(
    ctx: &Context,
    acting: Acting<'_>,
    manager_id: &str,
) -> Result<Option<queries::ManagerUser>, ServiceError> {
    let manager_id = manager_id.trim();
    if manager_id.is_empty() {
        return Ok(None);
    }
    Ok(queries::manager(
        &ctx.db,
        acting.org_id(),
        manager_id,
        UserId::parse(manager_id),
    )
    .await?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn days_are_calendar_days_in_the_organization_zone() {
        let zone: chrono_tz::Tz = "Europe/Berlin".parse().unwrap();
        // 23:30 UTC on the 1st is already the 2nd in Berlin.
        let due = Utc.with_ymd_and_hms(2026, 3, 1, 23, 30, 0).unwrap();
        let now = Utc.with_ymd_and_hms(2026, 3, 4, 8, 0, 0).unwrap();
        assert_eq!(calendar_days(zone, due, now), 2);
        assert_eq!(calendar_days(chrono_tz::UTC, due, now), 3);
        assert_eq!(calendar_days(zone, now, now), 0);
        assert_eq!(calendar_days(zone, now, due), -2);
    }
}
