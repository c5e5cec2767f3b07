//! Changing and cancelling assignments (design §16), for every surface: the rules of a change
//! ([`ChangeInput::parse`]), the checks against the assignment (persisted, not completed, not
//! cancelled), and the command on the progress queue, applied exactly once by the assign-worker
//! (`flow_common::db::changes`), which emits `flow.updated` or `flow.cancelled`. The answer is
//! the assignment as the change leaves it.

use chrono::{DateTime, Utc};
use flow_common::db::assignments::AssignmentRecord;
use flow_common::db::audit;
use flow_common::db::changes;
use flow_domain::audit::AuditAction;
use flow_domain::ids::{AssignmentId, AutomaticCancel, FlowId};
use flow_domain::messages::{
    CHANGE_BATCH_KIND, CHANGE_COMMAND_VERSION, Change, ChangeBatch, ChangeCommand, SetTo,
};
use flow_domain::{
    AssignmentStatus, DayBound, Email, Invalid, Notes, Priority, TextRule, parse_date_input,
};

use crate::progress::{Resolution, resolve};
use crate::{Acting, Context, FieldProblem, ServiceError};

/// Most items in one bulk cancel.
pub const MAX_BULK_CANCELS: usize = 1_000;

/// Longest cancellation reason, in characters.
pub const MAX_REASON_CHARS: usize = 500;

/// A change as a surface received it: each field absent (`None`), cleared (`Some(None)`) or set.
#[derive(Debug, Clone, Default)]
pub struct ChangeFields {
    /// RFC 3339 timestamp or `YYYY-MM-DD` (end of that day in the organization's zone).
    pub due_date: Option<Option<String>>,
    /// low, medium or high (cannot be cleared).
    pub priority: Option<Option<String>>,
    /// Free text for the assignee.
    pub notes: Option<Option<String>>,
}

/// A validated change: the same rules as an assign's fields.
#[derive(Debug, Clone, PartialEq)]
pub struct ChangeInput {
    due_at: Option<Option<DateTime<Utc>>>,
    priority: Option<Priority>,
    notes: Option<Option<String>>,
}

impl ChangeInput {
    /// Checks `fields` at `now`, plain dates read in `zone`. A refusal names its field.
    pub fn parse(
        fields: ChangeFields,
        zone: chrono_tz::Tz,
        now: DateTime<Utc>,
    ) -> Result<Self, ServiceError> {
        let field = |name: &'static str| {
            move |problem: Invalid| ServiceError::Fields(vec![FieldProblem::invalid(name, problem)])
        };
        let due_at = match fields.due_date {
            None => None,
            Some(None) => Some(None),
            Some(Some(text)) => {
                let due = parse_date_input("dueDate", &text, zone, DayBound::End)
                    .map_err(field("dueDate"))?;
                if due <= now {
                    return Err(field("dueDate")(Invalid(
                        "dueDate must be in the future".into(),
                    )));
                }
                Some(Some(due))
            }
        };
        let priority = match fields.priority {
            None => None,
            Some(None) => {
                return Err(field("priority")(Invalid(
                    "priority cannot be null: low, medium or high".into(),
                )));
            }
            Some(Some(text)) => {
                Some(Priority::parse_field("priority", &text).map_err(field("priority"))?)
            }
        };
        let notes = match fields.notes {
            None => None,
            Some(None) => Some(None),
            Some(Some(text)) => {
                let notes = Notes::parse("notes", text)
                    .map_err(field("notes"))?
                    .into_inner();
                Some((!notes.is_empty()).then_some(notes))
            }
        };
        if due_at.is_none() && priority.is_none() && notes.is_none() {
            return Err(Invalid(
                "nothing to change: give dueDate, priority or notes (null clears dueDate or notes)"
                    .into(),
            )
            .into());
        }
        Ok(Self {
            due_at,
            priority,
            notes,
        })
    }

    /// The names of the fields it sets, for the audit trail.
    fn field_names(&self) -> String {
        [
            self.due_at.is_some().then_some("dueDate"),
            self.priority.is_some().then_some("priority"),
            self.notes.is_some().then_some("notes"),
        ]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join(", ")
    }
}

/// Checks a cancellation's reason: trimmed, one rule with notes, at most [`MAX_REASON_CHARS`].
pub fn parse_reason(reason: Option<String>) -> Result<Option<String>, ServiceError> {
    let Some(reason) = reason else {
        return Ok(None);
    };
    let rule = TextRule {
        max_chars: MAX_REASON_CHARS,
        multiline: true,
    };
    let reason = rule
        .parse("reason", &reason)
        .map_err(|problem| ServiceError::Fields(vec![FieldProblem::invalid("reason", problem)]))?;
    Ok((!reason.is_empty()).then_some(reason))
}

/// Which assignment a bulk cancel item means.
#[derive(Debug, Clone)]
pub enum Target {
    /// By id (`asg_…`), as given.
    Id(String),
    /// The assignee's assignment of the flow: the active one (or the latest, to answer about).
    FlowAndUser {
        /// The flow's id, as given.
        flow_id: String,
        /// The assignee's e-mail.
        email: Email,
    },
}

/// The persisted assignment `id` (as given) of the organization, or why there is none to change.
async fn persisted(
    ctx: &Context,
    acting: Acting<'_>,
    id: &str,
) -> Result<AssignmentRecord, ServiceError> {
    let id = AssignmentId::parse(id.trim()).ok_or(ServiceError::NotFound("assignment"))?;
    match resolve(ctx, acting.org_id(), id).await? {
        Resolution::Persisted(record) => Ok(*record),
        Resolution::Failed(failure) => Err(ServiceError::Conflict(format!(
            "the assignment could not be persisted ({}); there is nothing to change",
            failure.reason
        ))),
        Resolution::Accepted => Err(ServiceError::NotYet),
        Resolution::Unknown => Err(ServiceError::NotFound("assignment")),
    }
}

/// The command of `change` to `record`.
fn command(
    acting: Acting<'_>,
    record: &AssignmentRecord,
    change: Change,
    bulk: bool,
) -> ChangeCommand {
    ChangeCommand {
        change_id: uuid::Uuid::now_v7(),
        org_id: acting.org_id(),
        assignment_id: record.id,
        change,
        requested_at: Utc::now(),
        bulk,
        traceparent: flow_common::telemetry::current_traceparent(),
    }
}

/// Publishes `changes` as one message on the progress queue and waits for the broker's confirm.
async fn publish(
    ctx: &Context,
    changes: Vec<ChangeCommand>,
    request_id: Option<&str>,
) -> Result<(), ServiceError> {
    let payload = ChangeBatch {
        version: CHANGE_COMMAND_VERSION,
        changes,
    }
    .encode()
    .map_err(|error| ServiceError::Internal(anyhow::Error::new(error)))?;
    crate::progress::publish(ctx, &payload, CHANGE_BATCH_KIND, "changes", request_id).await
}

/// Changes the assignment `id` (as given): queued durably, applied moments later with one
/// `flow.updated` naming what changed. Refused (409) for a completed or cancelled assignment.
/// Answers the assignment as the change leaves it.
pub async fn update(
    ctx: &Context,
    acting: Acting<'_>,
    id: &str,
    input: ChangeInput,
    request_id: Option<&str>,
) -> Result<AssignmentRecord, ServiceError> {
    let mut record = persisted(ctx, acting, id).await?;
    match record.status {
        AssignmentStatus::Completed => {
            return Err(ServiceError::Conflict(
                "the assignment is completed; completed is final and cannot be changed".into(),
            ));
        }
        AssignmentStatus::Cancelled => {
            return Err(ServiceError::Conflict(
                "the assignment is cancelled and cannot be changed".into(),
            ));
        }
        AssignmentStatus::Pending | AssignmentStatus::InProgress | AssignmentStatus::Overdue => {}
    }
    let change = Change::Update {
        due_at: input.due_at.map(SetTo::from_option),
        priority: input.priority,
        notes: input.notes.clone().map(SetTo::from_option),
    };
    let command = command(acting, &record, change, false);
    publish(ctx, vec![command], request_id).await?;
    audit::record(
        &ctx.db,
        acting.org_id(),
        acting.actor,
        AuditAction::AssignmentUpdated,
        &record.id.to_string(),
        &input.field_names(),
    )
    .await?;
    // The assignment as the worker will leave it.
    let now = Utc::now();
    if let Some(due_at) = input.due_at {
        if record.status == AssignmentStatus::Overdue && due_at.is_none_or(|due| due > now) {
            record.status = if record.started_at.is_some() {
                AssignmentStatus::InProgress
            } else {
                AssignmentStatus::Pending
            };
            record.overdue_at = None;
        }
        record.due_at = due_at;
    }
    if let Some(priority) = input.priority {
        record.priority = priority;
    }
    if let Some(notes) = input.notes {
        record.notes = notes;
    }
    Ok(record)
}

/// What a cancellation finds the assignment to be: to cancel, or already cancelled (answered as
/// is: cancelling is idempotent).
fn cancellable(record: &AssignmentRecord) -> Result<bool, ServiceError> {
    match record.status {
        AssignmentStatus::Completed => Err(ServiceError::Conflict(
            "the assignment is completed and cannot be cancelled: a completion is compliance \
             history"
                .into(),
        )),
        AssignmentStatus::Cancelled => Ok(false),
        AssignmentStatus::Pending | AssignmentStatus::InProgress | AssignmentStatus::Overdue => {
            Ok(true)
        }
    }
}

/// The assignment as a cancellation at `at` leaves it.
fn cancelled(
    mut record: AssignmentRecord,
    reason: Option<String>,
    at: DateTime<Utc>,
) -> AssignmentRecord {
    record.status = AssignmentStatus::Cancelled;
    record.cancelled_at = Some(at);
    record.cancel_reason = reason;
    record
}

/// Cancels the assignment `id` (as given): queued durably, applied moments later with one
/// `flow.cancelled`. Idempotent: an assignment already cancelled is answered as it is. Refused
/// (409) for a completed assignment.
pub async fn cancel(
    ctx: &Context,
    acting: Acting<'_>,
    id: &str,
    reason: Option<String>,
    request_id: Option<&str>,
) -> Result<AssignmentRecord, ServiceError> {
    let record = persisted(ctx, acting, id).await?;
    if !cancellable(&record)? {
        return Ok(record);
    }
    let command = command(
        acting,
        &record,
        Change::Cancel {
            reason: reason.clone(),
        },
        false,
    );
    let at = command.requested_at;
    publish(ctx, vec![command], request_id).await?;
    audit::record(
        &ctx.db,
        acting.org_id(),
        acting.actor,
        AuditAction::AssignmentCancelled,
        &record.id.to_string(),
        reason.as_deref().unwrap_or(""),
    )
    .await?;
    Ok(cancelled(record, reason, at))
}

/// The assignment `target` means, persisted.
pub(crate) async fn find(
    ctx: &Context,
    acting: Acting<'_>,
    target: &Target,
) -> Result<AssignmentRecord, ServiceError> {
    match target {
        Target::Id(id) => persisted(ctx, acting, id).await,
        Target::FlowAndUser { flow_id, email } => {
            let not_found = || {
                ServiceError::NotFoundSaying(format!(
                    "{} has no assignment of this flow",
                    email.as_str()
                ))
            };
            let flow_id = FlowId::parse(flow_id.trim()).ok_or(ServiceError::NotFound("flow"))?;
            let id =
                changes::by_flow_and_email(&ctx.db, acting.org_id(), flow_id, &email.normalized())
                    .await?
                    .ok_or_else(not_found)?;
            persisted(ctx, acting, &id.to_string()).await
        }
    }
}

/// Cancels each assignment of `targets` (each a target, or why the item is not one), all with
/// `reason`, in one message of changes whose events travel in the bulk lane; the outcomes are in
/// order, each as [`cancel`] answers it. Items that name the same assignment cancel it once.
pub async fn cancel_many(
    ctx: &Context,
    acting: Acting<'_>,
    targets: Vec<Result<Target, ServiceError>>,
    reason: Option<String>,
    request_id: Option<&str>,
) -> Vec<Result<AssignmentRecord, ServiceError>> {
    let mut outcomes = Vec::with_capacity(targets.len());
    let mut commands: Vec<ChangeCommand> = Vec::new();
    for target in targets {
        let outcome = match target {
            Err(error) => Err(error),
            Ok(target) => match find(ctx, acting, &target).await {
                Err(error) => Err(error),
                Ok(record) => match cancellable(&record) {
                    Err(error) => Err(error),
                    Ok(false) => Ok((record, false)),
                    Ok(true) => {
                        if !commands
                            .iter()
                            .any(|command| command.assignment_id == record.id)
                        {
                            let change = Change::Cancel {
                                reason: reason.clone(),
                            };
                            commands.push(command(acting, &record, change, true));
                        }
                        Ok((record, true))
                    }
                },
            },
        };
        outcomes.push(outcome);
    }
    let at = commands
        .first()
        .map_or_else(Utc::now, |command| command.requested_at);
    let (change_ids, cancelled_ids): (Vec<uuid::Uuid>, Vec<String>) = commands
        .iter()
        .map(|command| (command.change_id, command.assignment_id.to_string()))
        .unzip();
    let published = if commands.is_empty() {
        Ok(())
    } else {
        match publish(ctx, commands, request_id).await {
            Ok(()) => {
                let details = vec![reason.clone().unwrap_or_default(); cancelled_ids.len()];
                audit::record_changes(
                    &ctx.db,
                    acting.org_id(),
                    acting.actor,
                    AuditAction::AssignmentCancelled,
                    &change_ids,
                    &cancelled_ids,
                    &details,
                )
                .await
                .map_err(ServiceError::from)
            }
            Err(error) => Err(error),
        }
    };
    outcomes
        .into_iter()
        .map(|outcome| match outcome {
            Err(error) => Err(error),
            Ok((record, false)) => Ok(record),
            Ok((record, true)) => match &published {
                Ok(()) => Ok(cancelled(record, reason.clone(), at)),
                Err(error) => Err(error.again()),
            },
        })
        .collect()
}

/// The reason of the cancellations of a deactivation (`flow.cancelled` `data.reason`).
pub const DEACTIVATED_REASON: &str = "user deactivated";

/// The reason of the cancellations of an enrollment rule a user no longer matches.
pub fn unmatched_reason(rule_name: &str) -> String {
    let reason = format!("no longer matches enrollment rule \"{rule_name}\"");
    // A rule's name is one line of at most 200 characters: the reason stays far within
    // MAX_REASON_CHARS, but cut it there should that change.
    reason.chars().take(MAX_REASON_CHARS).collect()
}

/// Why an automatic cancellation did not finish.
#[derive(Debug, thiserror::Error)]
pub enum AutoCancelError {
    /// Postgres failed.
    #[error(transparent)]
    Database(#[from] sqlx::Error),
    /// The broker did not confirm the changes; queueing them again (a retry, the next
    /// evaluation) uses the same change ids.
    #[error("the cancellations could not be queued durably ({0}); retry shortly")]
    Unavailable(#[from] flow_common::amqp::PublishError),
    /// A change batch did not encode.
    #[error("encoding a change batch: {0}")]
    Encode(#[from] serde_json::Error),
}

impl From<AutoCancelError> for ServiceError {
    fn from(error: AutoCancelError) -> Self {
        match error {
            AutoCancelError::Database(error) => Self::Database(error),
            AutoCancelError::Unavailable(error) => error.into(),
            other => Self::Internal(anyhow::Error::new(other)),
        }
    }
}

/// One assignment the service cancels by itself, and why.
#[derive(Debug, Clone)]
pub struct AutoCancel {
    /// The assignment.
    pub assignment_id: AssignmentId,
    /// Why (derives the change's id).
    pub cause: AutomaticCancel,
    /// The cancellation's reason.
    pub reason: String,
}

/// Cancels `targets` of the organization through the queue, as a cancel does: each change has
/// the id derived from its cause and assignment, so queueing the same cancellation again (a
/// retried SCIM request, a second evaluation) applies it once, with one `flow.cancelled`.
/// Changes applied already are left out (and not audited again); the rest go in messages of at
/// most [`MAX_BULK_CANCELS`] changes (one for all but the largest) whose events travel in the
/// bulk lane, then an `assignment.cancelled` audit row each. Answers how many were queued.
pub async fn cancel_automatically(
    pool: &sqlx::PgPool,
    publisher: &flow_common::amqp::Publisher,
    org_id: flow_domain::ids::OrgId,
    actor: audit::Actor<'_>,
    targets: &[AutoCancel],
) -> Result<usize, AutoCancelError> {
    if targets.is_empty() {
        return Ok(0);
    }
    let ids: Vec<uuid::Uuid> = targets
        .iter()
        .map(|target| target.assignment_id.automatic_cancel_id(target.cause))
        .collect();
    let applied = changes::recorded(pool, &ids).await?;
    let now = Utc::now();
    let traceparent = flow_common::telemetry::current_traceparent();
    let mut commands: Vec<ChangeCommand> = Vec::new();
    for (target, id) in targets.iter().zip(ids) {
        if applied.contains(&id) || commands.iter().any(|command| command.change_id == id) {
            continue;
        }
        commands.push(ChangeCommand {
            change_id: id,
            org_id,
            assignment_id: target.assignment_id,
            change: Change::Cancel {
                reason: Some(target.reason.clone()),
            },
            requested_at: now,
            bulk: true,
            traceparent: traceparent.clone(),
        });
    }
    let queued = commands.len();
    for chunk in commands.chunks(MAX_BULK_CANCELS) {
        let payload = ChangeBatch {
            version: CHANGE_COMMAND_VERSION,
            changes: chunk.to_vec(),
        }
        .encode()?;
        crate::progress::publish_on(publisher, &payload, CHANGE_BATCH_KIND, "changes", None)
            .await?;
        let change_ids: Vec<uuid::Uuid> = chunk.iter().map(|command| command.change_id).collect();
        let (targets, details): (Vec<String>, Vec<String>) = chunk
            .iter()
            .map(|command| {
                let reason = match &command.change {
                    Change::Cancel { reason } => reason.clone().unwrap_or_default(),
                    Change::Update { .. } => String::new(),
                };
                (command.assignment_id.to_string(), reason)
            })
            .unzip();
        audit::record_changes(
            pool,
            org_id,
            actor,
            AuditAction::AssignmentCancelled,
            &change_ids,
            &targets,
            &details,
        )
        .await?;
    }
    if queued > 0 {
        tracing::info!(org_id = %org_id, cancellations = queued, "automatic cancellations queued");
    }
    Ok(queued)
}

/// Cancels the open assignments of the user `user_id`, just deactivated (or found deactivated by
/// a retry of the request that deactivated them), when the organization cancels on deactivation
/// (`cancelOnDeactivate`); answers how many were queued. Reactivating them restores nothing.
pub async fn cancel_for_deactivation(
    ctx: &Context,
    acting: Acting<'_>,
    user_id: flow_domain::ids::UserId,
) -> Result<usize, ServiceError> {
    let on = flow_common::db::orgs::settings(&ctx.db, acting.org_id())
        .await?
        .is_some_and(|settings| settings.cancel_on_deactivate);
    if !on {
        return Ok(0);
    }
    let targets: Vec<AutoCancel> = changes::open_of_user(&ctx.db, acting.org_id(), user_id)
        .await?
        .into_iter()
        .map(|assignment_id| AutoCancel {
            assignment_id,
            cause: AutomaticCancel::Deactivated,
            reason: DEACTIVATED_REASON.to_owned(),
        })
        .collect();
    Ok(cancel_automatically(
        &ctx.db,
        &ctx.publisher,
        acting.org_id(),
        acting.actor,
        &targets,
    )
    .await?)
}
