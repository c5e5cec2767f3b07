//! Assignments after they are made, for every surface: what an id resolves to ([`resolve`]) and
//! recording module progress ([`record`]): the rules of the input ([`ProgressInput::parse`]),
//! the checks against the assignment (persisted, the module in its flow, not completed, not
//! before it was assigned), and the command on the progress queue, applied by the assign-worker.

use chrono::{DateTime, Utc};
use flow_common::amqp::{Outgoing, PublishError, Publisher, QueueKind};
use flow_common::db::assignments::{self, AssignmentRecord};
use flow_common::db::changes::{self, ChangeOutcome};
use flow_common::db::dead_letters::{self, AssignmentFailure};
use flow_common::db::lifecycle;
use flow_domain::events::EventType;
use flow_domain::ids::{AssignmentId, ModuleId, OrgId};
use flow_domain::messages::{
    ChangeCommand, PROGRESS_COMMAND_VERSION, PROGRESS_KIND, ProgressCommand,
};
use flow_domain::{AssignmentStatus, DayBound, Invalid, ModuleStatus, parse_date_input};

use crate::{Acting, Context, ServiceError};

/// What an assignment id stands for in an organization.
pub enum Resolution {
    /// Persisted (or an alias of a persisted assignment).
    Persisted(Box<AssignmentRecord>),
    /// Its command was dead-lettered: it will not be persisted unless an operator replays it.
    Failed(AssignmentFailure),
    /// Handed out with a 200 and not persisted yet.
    Accepted,
    /// Not an id of this organization.
    Unknown,
}

/// Resolves `id` for `org`: persisted first, then a recorded failure, then an id this service
/// answered (minted ids carry a MAC; ids of `X-Request-ID` requests have a claimed key).
pub async fn resolve(
    ctx: &Context,
    org: OrgId,
    id: AssignmentId,
) -> Result<Resolution, ServiceError> {
    if let Some(record) = assignments::get(&ctx.db, org, id).await? {
        return Ok(Resolution::Persisted(Box::new(record)));
    }
    if let Some(failure) = dead_letters::assignment_failure(&ctx.db, org, id).await? {
        return Ok(Resolution::Failed(failure));
    }
    if ctx.assignment_ids.minted(org, id) || assignments::claimed(&ctx.db, org, id).await? {
        return Ok(Resolution::Accepted);
    }
    Ok(Resolution::Unknown)
}

/// How far in the future a progress time may be (clock skew between the caller and us).
const PROGRESS_CLOCK_SKEW: chrono::Duration = chrono::Duration::seconds(60);

/// Module progress as a surface received it.
#[derive(Debug, Clone, Default)]
pub struct ProgressFields {
    /// The module (required).
    pub module_id: Option<String>,
    /// `in_progress` or `completed` (required).
    pub status: Option<String>,
    /// When it happened (RFC 3339, or `YYYY-MM-DD` in the organization's time zone); default now.
    pub at: Option<String>,
}

/// Module progress that keeps the rules of its fields.
#[derive(Debug, Clone)]
pub struct ProgressInput {
    /// The module's id as given (checked against the flow by [`record`]).
    module: String,
    /// The module's new status.
    status: ModuleStatus,
    /// When it happened: not in the future.
    at: DateTime<Utc>,
}

impl ProgressInput {
    /// Checks `fields` at `now`, in the organization's time zone `zone`.
    pub fn parse(
        fields: ProgressFields,
        zone: chrono_tz::Tz,
        now: DateTime<Utc>,
    ) -> Result<Self, ServiceError> {
        let module = fields.module_id.unwrap_or_default();
        if module.trim().is_empty() {
            return Err(Invalid("moduleId is required".into()).into());
        }
        let status = ModuleStatus::parse_field(
            "status",
            fields
                .status
                .as_deref()
                .ok_or_else(|| Invalid("status is required".into()))?,
        )?;
        let at = match fields.at.as_deref() {
            None => now,
            Some(text) => {
                let at = parse_date_input("at", text, zone, DayBound::Start)?;
                if at > now + PROGRESS_CLOCK_SKEW {
                    return Err(Invalid("at must not be in the future".into()).into());
                }
                at
            }
        };
        Ok(Self {
            module: module.trim().to_owned(),
            status,
            at,
        })
    }
}

/// Progress queued for the assign-worker.
#[derive(Debug, Clone, Copy)]
pub struct Recorded {
    /// The assignment (an alias resolves to the assignment it joined).
    pub assignment_id: AssignmentId,
    /// The module.
    pub module_id: ModuleId,
    /// The module's new status.
    pub status: ModuleStatus,
    /// When it happened.
    pub at: DateTime<Utc>,
}

/// Records `input` on the assignment `id` (as given): queued durably on the progress queue (with
/// `request_id`, the caller's request) once the assignment is persisted, the module is in its
/// flow, the assignment is not completed and the progress is not before it was assigned.
pub async fn record(
    ctx: &Context,
    acting: Acting<'_>,
    id: &str,
    input: ProgressInput,
    request_id: &str,
) -> Result<Recorded, ServiceError> {
    let id = AssignmentId::parse(id).ok_or(ServiceError::NotFound("assignment"))?;
    let record = match resolve(ctx, acting.org_id(), id).await? {
        Resolution::Persisted(record) => *record,
        Resolution::Failed(failure) => {
            return Err(ServiceError::Conflict(format!(
                "the assignment could not be persisted ({}); there is nothing to record progress on",
                failure.reason
            )));
        }
        Resolution::Accepted => return Err(ServiceError::NotYet),
        Resolution::Unknown => return Err(ServiceError::NotFound("assignment")),
    };
    let not_in_flow =
        || ServiceError::NotFoundSaying("module not found in the assignment's flow".into());
    let module_id = ModuleId::parse(&input.module).ok_or_else(not_in_flow)?;
    if !lifecycle::module_in_flow(&ctx.db, record.id, module_id).await? {
        return Err(not_in_flow());
    }
    if record.status == AssignmentStatus::Completed {
        return Err(ServiceError::Conflict(
            "the assignment is already completed; completed is final".into(),
        ));
    }
    if record.status == AssignmentStatus::Cancelled {
        return Err(ServiceError::Conflict(
            "the assignment is cancelled; it takes no more progress".into(),
        ));
    }
    if input.at < record.assigned_at {
        return Err(Invalid("at must not be before the assignment's assignedAt".into()).into());
    }
    let command = ProgressCommand {
        version: PROGRESS_COMMAND_VERSION,
        org_id: acting.org_id(),
        assignment_id: record.id,
        module_id,
        status: input.status,
        at: input.at,
        request_id: Some(request_id.to_owned()),
    };
    let payload = command
        .encode()
        .map_err(|error| ServiceError::Internal(anyhow::Error::new(error)))?;
    publish(ctx, &payload, PROGRESS_KIND, "progress", Some(request_id)).await?;
    Ok(Recorded {
        assignment_id: record.id,
        module_id,
        status: input.status,
        at: input.at,
    })
}

/// Publishes a message of AMQP type `kind` on the progress queue (module progress, and changes
/// of assignments: `crate::changes`) and waits for the broker's confirm; its id is `name-…`.
pub(crate) async fn publish(
    ctx: &Context,
    payload: &[u8],
    kind: &str,
    name: &str,
    request_id: Option<&str>,
) -> Result<(), ServiceError> {
    Ok(publish_on(&ctx.publisher, payload, kind, name, request_id).await?)
}

/// [`publish`] with `publisher` (a caller without a [`Context`]: the scheduler).
pub(crate) async fn publish_on(
    publisher: &Publisher,
    payload: &[u8],
    kind: &str,
    name: &str,
    request_id: Option<&str>,
) -> Result<(), PublishError> {
    let exchange = publisher.topology().commands_exchange();
    let message_id = format!("{name}-{}", uuid::Uuid::now_v7().simple());
    publisher
        .publish(Outgoing {
            exchange: &exchange,
            routing_key: &QueueKind::Progress.suffix(),
            payload,
            message_id: &message_id,
            kind,
            request_id,
            headers: &[],
        })
        .await
}

/// One command of the progress queue: module activity, or a change of an assignment
/// (`crate::changes`).
#[derive(Debug, Clone, Copy)]
pub enum Command<'a> {
    /// Module activity.
    Progress(&'a ProgressCommand),
    /// A change or a cancellation.
    Change(&'a ChangeCommand),
}

impl Command<'_> {
    /// The assignment it is about.
    pub fn assignment_id(&self) -> AssignmentId {
        match self {
            Self::Progress(command) => command.assignment_id,
            Self::Change(command) => command.assignment_id,
        }
    }
}

/// What a command came to, with the events it emitted.
#[derive(Debug, Clone)]
pub enum Done {
    /// Module activity.
    Progress(lifecycle::ProgressOutcome, Vec<EventType>),
    /// A change or a cancellation.
    Change(ChangeOutcome, Option<EventType>),
}

/// Applies the commands of the progress queue in one transaction, each with the trace it
/// continues, each locking its assignment (concurrent updates of one assignment apply one at a
/// time, each transition emitting its event once; a change applies exactly once); returns what
/// each came to. The assign-worker's end of [`record`] and of `crate::changes`.
pub async fn apply(
    pool: &sqlx::PgPool,
    commands: &[(Command<'_>, Option<&str>)],
) -> Result<Vec<Done>, sqlx::Error> {
    let mut transaction = pool.begin().await?;
    let mut outcomes = Vec::with_capacity(commands.len());
    for (command, traceparent) in commands {
        outcomes.push(match command {
            Command::Progress(command) => {
                let (outcome, events) =
                    lifecycle::apply_progress(&mut transaction, command, *traceparent).await?;
                Done::Progress(outcome, events)
            }
            Command::Change(command) => {
                let (outcome, event) =
                    changes::apply_change(&mut transaction, command, *traceparent).await?;
                Done::Change(outcome, event)
            }
        });
    }
    transaction.commit().await?;
    Ok(outcomes)
}
