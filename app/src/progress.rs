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
    ChangeCommand, ModuleResult, PROGRESS_BATCH_KIND, PROGRESS_COMMAND_VERSION, PROGRESS_KIND,
    ProgressBatch, ProgressCommand,
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
    /// Scaled score, -1..1 (as xAPI's `result.score.scaled`).
    pub score: Option<f64>,
    /// Passed or failed.
    pub success: Option<bool>,
    /// Time spent in the module, in seconds (at most [`MAX_DURATION_SECONDS`]).
    pub duration_seconds: Option<i64>,
}

/// Longest time spent in one module a caller may report: a year (anything longer is a unit
/// mistake: milliseconds sent as seconds).
pub const MAX_DURATION_SECONDS: i64 = 366 * 24 * 3600;

/// Checks the result fields: a finite score in -1..1 (one scale with xAPI's scaled score, so a
/// percentage is refused rather than silently stored as 85 times too much), a duration in
/// 0..=[`MAX_DURATION_SECONDS`].
pub fn parse_result(
    score: Option<f64>,
    success: Option<bool>,
    duration_seconds: Option<i64>,
) -> Result<ModuleResult, Invalid> {
    if let Some(score) = score
        && !(score.is_finite() && (-1.0..=1.0).contains(&score))
    {
        return Err(Invalid(
            "score must be a scaled score between -1 and 1 (0.85 for 85 %)".into(),
        ));
    }
    if let Some(seconds) = duration_seconds
        && !(0..=MAX_DURATION_SECONDS).contains(&seconds)
    {
        return Err(Invalid(format!(
            "durationSeconds must be between 0 and {MAX_DURATION_SECONDS}"
        )));
    }
    Ok(ModuleResult {
        score,
        success,
        duration_seconds,
    })
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
    /// The result reported with it (possibly nothing).
    result: ModuleResult,
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
        let result = parse_result(fields.score, fields.success, fields.duration_seconds)?;
        Ok(Self {
            module: module.trim().to_owned(),
            status,
            at,
            result,
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

/// The module of `input` once it may be recorded on `record`: the module is in its flow, the
/// assignment is neither completed nor cancelled, and the progress is not before it was assigned.
async fn check(
    ctx: &Context,
    record: &AssignmentRecord,
    input: &ProgressInput,
) -> Result<ModuleId, ServiceError> {
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
    Ok(module_id)
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
    let module_id = check(ctx, &record, &input).await?;
    let command = ProgressCommand {
        version: PROGRESS_COMMAND_VERSION,
        org_id: acting.org_id(),
        assignment_id: record.id,
        module_id,
        status: input.status,
        at: input.at,
        request_id: Some(request_id.to_owned()),
        result: input.result,
        bulk: false,
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

/// Most items in one bulk progress request (`POST /v1/progress/bulk`).
pub const MAX_BULK_PROGRESS: usize = 1_000;

/// What became of one item of [`record_many`] that is not an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disposition {
    /// Queued durably; applied moments later.
    Accepted,
    /// The module already has this status and the item carries no result: nothing to do.
    Unchanged,
    /// An earlier item of the same request says the same: queued once.
    Duplicate,
}

impl Disposition {
    /// The name the surfaces answer.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Accepted => "accepted",
            Self::Unchanged => "unchanged",
            Self::Duplicate => "duplicate",
        }
    }
}

/// Whether a module at `current` needs the progress `status` with `result`: a result always
/// counts; a status only when it moves the module forward.
fn changes_anything(
    current: Option<ModuleStatus>,
    status: ModuleStatus,
    result: &ModuleResult,
) -> bool {
    !result.is_empty()
        || match current {
            None => true,
            Some(ModuleStatus::Completed) => false,
            Some(ModuleStatus::InProgress) => status == ModuleStatus::Completed,
        }
}

/// The command of one bulk item for `target` (a checked, persisted assignment), or its
/// disposition when it needs none.
async fn bulk_command(
    ctx: &Context,
    acting: Acting<'_>,
    target: &crate::changes::Target,
    input: &ProgressInput,
    queued: &[ProgressCommand],
) -> Result<(Recorded, Option<ProgressCommand>, Disposition), ServiceError> {
    let record = crate::changes::find(ctx, acting, target).await?;
    let module_id = check(ctx, &record, input).await?;
    let recorded = Recorded {
        assignment_id: record.id,
        module_id,
        status: input.status,
        at: input.at,
    };
    let same = |command: &&ProgressCommand| {
        command.assignment_id == record.id
            && command.module_id == module_id
            && command.status == input.status
            && command.result == input.result
    };
    if queued.iter().any(|command| same(&command)) {
        return Ok((recorded, None, Disposition::Duplicate));
    }
    let current = lifecycle::module_status(&ctx.db, record.id, module_id).await?;
    if !changes_anything(current, input.status, &input.result) {
        return Ok((recorded, None, Disposition::Unchanged));
    }
    let command = ProgressCommand {
        version: PROGRESS_COMMAND_VERSION,
        org_id: acting.org_id(),
        assignment_id: record.id,
        module_id,
        status: input.status,
        at: input.at,
        request_id: None,
        result: input.result,
        bulk: true,
    };
    Ok((recorded, Some(command), Disposition::Accepted))
}

/// Records the progress of many items (each a target and its checked input, or why the item is
/// neither), each checked as [`record`] checks one, all queued in one message whose events
/// travel in the bulk lane; the outcomes are in order. Nothing is queued for an item that changes
/// nothing or repeats an earlier one. When the broker does not confirm, every item that was to be
/// queued fails with that error (nothing of it applies).
pub async fn record_many(
    ctx: &Context,
    acting: Acting<'_>,
    items: Vec<Result<(crate::changes::Target, ProgressInput), ServiceError>>,
    request_id: Option<&str>,
) -> Vec<Result<(Recorded, Disposition), ServiceError>> {
    let mut outcomes = Vec::with_capacity(items.len());
    let mut commands: Vec<ProgressCommand> = Vec::new();
    for item in items {
        let outcome = match item {
            Err(error) => Err(error),
            Ok((target, input)) => bulk_command(ctx, acting, &target, &input, &commands).await,
        };
        outcomes.push(outcome.map(|(recorded, command, disposition)| {
            if let Some(mut command) = command {
                command.request_id = request_id.map(str::to_owned);
                commands.push(command);
            }
            (recorded, disposition)
        }));
    }
    let published = if commands.is_empty() {
        Ok(())
    } else {
        publish_commands(ctx, commands, request_id).await
    };
    outcomes
        .into_iter()
        .map(|outcome| match (outcome, &published) {
            (Ok((_, Disposition::Accepted)), Err(error)) => Err(error.again()),
            (outcome, _) => outcome,
        })
        .collect()
}

/// Publishes `commands` as one message on the progress queue and waits for the broker's confirm.
pub(crate) async fn publish_commands(
    ctx: &Context,
    commands: Vec<ProgressCommand>,
    request_id: Option<&str>,
) -> Result<(), ServiceError> {
    let payload = ProgressBatch {
        version: PROGRESS_COMMAND_VERSION,
        commands,
    }
    .encode()
    .map_err(|error| ServiceError::Internal(anyhow::Error::new(error)))?;
    publish(ctx, &payload, PROGRESS_BATCH_KIND, "progress", request_id).await
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
