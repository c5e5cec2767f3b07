//! Schedules (recurring or one-off assignments), for every surface: create one (the flow and the
//! assignee must exist in the organization), read one, cancel one (no further occurrences;
//! assignments already made stay). The scheduler claims the occurrences that are due
//! ([`claim_due`]) and assigns each through the normal assign path when it comes.

use chrono::{DateTime, Utc};
use flow_common::db::dashboard as queries;
use flow_common::db::schedules::{self, DueSchedule, NewSchedule, ScheduleRecord};
use flow_common::db::users;
use flow_domain::ids::{FlowId, ScheduleId};
use flow_domain::recurrence::Recurrence;
use flow_domain::{DayBound, Email, Invalid, Priority, parse_date_input};

use crate::Context;
use crate::{Acting, ServiceError};

/// Largest `dueInDays`.
pub const MAX_DUE_IN_DAYS: i32 = 3_650;

/// How far in the past `scheduledAt` may be. A past time is assigned at once; further back than
/// this it is almost certainly a mistake (a wrong year), and would only skip a long run of
/// occurrences. The latest accepted is the end of the year 9999, like every date input.
pub const MAX_SCHEDULED_AT_PAST: chrono::Duration = chrono::Duration::days(366);

/// A schedule as a surface received it; the fields it shares with an assign (flow, assignee,
/// priority, notes) are already checked by the assign rules.
#[derive(Debug, Clone)]
pub struct ScheduleFields {
    /// The flow; `None` when the text was not a flow id (it then does not exist).
    pub flow_id: Option<FlowId>,
    /// Assignee; must exist in the organization.
    pub email: Email,
    /// Priority of each assignment.
    pub priority: Priority,
    /// Notes of each assignment.
    pub notes: Option<String>,
    /// First occurrence: RFC 3339, or a plain date (start of that day in the organization's
    /// time zone). Required.
    pub scheduled_at: Option<String>,
    /// Repetition (default none).
    pub recurrence: Option<String>,
    /// Each assignment is due this many days after its occurrence (1 to [`MAX_DUE_IN_DAYS`]).
    pub due_in_days: Option<i32>,
}

/// Creates a schedule.
pub async fn create(
    ctx: &Context,
    acting: Acting<'_>,
    fields: ScheduleFields,
) -> Result<ScheduleRecord, ServiceError> {
    let zone = acting.caller.zone;
    let scheduled_at = parse_date_input(
        "scheduledAt",
        fields
            .scheduled_at
            .as_deref()
            .ok_or_else(|| Invalid::new("scheduledAt is required"))?,
        zone,
        DayBound::Start,
    )?;
    if scheduled_at < Utc::now() - MAX_SCHEDULED_AT_PAST {
        return Err(Invalid::new("scheduledAt must not be more than one year in the past").into());
    }
    let recurrence = match fields.recurrence.as_deref() {
        None => Recurrence::None,
        Some(text) => Recurrence::parse_field("recurrence", text)?,
    };
    if let Some(days) = fields.due_in_days
        && !(1..=MAX_DUE_IN_DAYS).contains(&days)
    {
        return Err(Invalid(format!("dueInDays must be between 1 and {MAX_DUE_IN_DAYS}")).into());
    }
    let org_id = acting.org_id();
    let flow = match fields.flow_id {
        Some(flow_id) => ctx.caches.flow(&ctx.db, org_id, flow_id).await?,
        None => None,
    }
    .ok_or(ServiceError::NotFound("flow"))?;
    // An archived flow takes no new assignments: a schedule of it would assign nothing.
    if flow.archived {
        return Err(ServiceError::Conflict(format!(
            "flow \"{}\" is archived and takes no new assignments, so it cannot be scheduled; \
             unarchive it (PATCH /v1/flows/{{id}} {{\"archived\": false}}) first",
            flow.name
        )));
    }
    let email = fields.email;
    let user = users::find_by_email(&ctx.db, org_id, &email)
        .await?
        .ok_or_else(|| {
            ServiceError::NotFoundSaying(format!("user {email} not found in this organization"))
        })?;
    if !user.active {
        return Err(ServiceError::Conflict(format!(
            "user {email} is deactivated; reactivate them (SCIM active: true) to schedule"
        )));
    }
    let mut connection = ctx.db.acquire().await?;
    let record = schedules::create(
        &mut connection,
        &NewSchedule {
            org_id,
            flow_id: flow.id,
            user_id: user.id,
            scheduled_at,
            recurrence,
            due_in_days: fields.due_in_days,
            priority: fields.priority,
            notes: fields.notes,
        },
    )
    .await?;
    tracing::info!(schedule_id = %record.id, "schedule created");
    Ok(record)
}

/// One schedule of the organization, with the status of its current occurrence now.
pub async fn get(
    ctx: &Context,
    acting: Acting<'_>,
    id: ScheduleId,
) -> Result<ScheduleRecord, ServiceError> {
    schedules::get(&ctx.db, acting.org_id(), id, Utc::now())
        .await?
        .ok_or(ServiceError::NotFound("schedule"))
}

/// Cancels a schedule: no further occurrences; assignments already made stay.
pub async fn cancel(ctx: &Context, acting: Acting<'_>, id: ScheduleId) -> Result<(), ServiceError> {
    if schedules::delete(&ctx.db, acting.org_id(), id).await? {
        tracing::info!(schedule_id = %id, "schedule cancelled");
        Ok(())
    } else {
        Err(ServiceError::NotFound("schedule"))
    }
}

/// Up to `limit` of the organization's live schedules before `before`, newest first, with the
/// statuses of their assignments judged at `now` (the dashboard's schedules page).
pub async fn list(
    ctx: &Context,
    acting: Acting<'_>,
    before: Option<ScheduleId>,
    limit: i64,
    now: DateTime<Utc>,
) -> Result<Vec<ScheduleRecord>, ServiceError> {
    Ok(queries::list_schedules(&ctx.db, acting.org_id(), before, limit, now).await?)
}

/// The claim of due schedules ([`claim_due`]), locked for the scheduler that holds it: it assigns
/// each occurrence, [`advance`](Claim::advance)s the schedules whose command the broker
/// confirmed, and [`commit`](Claim::commit)s; the others stay due.
pub struct Claim(sqlx::Transaction<'static, sqlx::Postgres>);

/// Locks up to `limit` schedules due at `now`, earliest first, in a transaction of their own
/// (the [`Claim`]), skipping those another scheduler holds and those of deactivated users.
pub async fn claim_due(
    pool: &sqlx::PgPool,
    now: DateTime<Utc>,
    limit: i64,
) -> Result<(Claim, Vec<DueSchedule>), sqlx::Error> {
    let mut transaction = pool.begin().await?;
    let due = schedules::claim_due(&mut transaction, now, limit).await?;
    Ok((Claim(transaction), due))
}

impl Claim {
    /// Moves the schedule `id` to its occurrence `occurrence` at `next` (`None`: the series is
    /// over).
    pub async fn advance(
        &mut self,
        id: ScheduleId,
        occurrence: i32,
        next: Option<DateTime<Utc>>,
    ) -> Result<(), sqlx::Error> {
        schedules::advance(&mut self.0, id, occurrence, next).await
    }

    /// Commits the advances, releasing the schedules not advanced (still due).
    pub async fn commit(self) -> Result<(), sqlx::Error> {
        self.0.commit().await
    }
}
