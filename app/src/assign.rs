//! Assigning flows: the one path every surface takes (`POST /v1/flows/assign` and its bulk
//! form, the dashboard's form and uploads, and later SCIM's enrollment rules). A request is
//! validated into an [`AssignInput`], resolved (flow, assignee, an earlier answer under its
//! `X-Request-ID` or an active assignment) in one lookup for many, and its command published to
//! its lane; the answer is an [`Assigned`] that each surface words its own way.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use flow_common::amqp::{Lane, QueueKind, Submission};
use flow_common::db::assignments::{
    self, ApplyError, BatchOutcome, LookupKey, LookupResult, RequestKey,
};
use flow_common::db::flows::FlowSummary;
use flow_domain::duration::humanize_minutes;
use flow_domain::ids::{AssignmentId, FlowId};
use flow_domain::messages::{ASSIGN_COMMAND_VERSION, AssignCommand};
use flow_domain::{DayBound, Email, Invalid, Notes, Priority, parse_date_input};

use crate::Context;
use crate::caller::Caller;
use crate::lookup::LookupError;
use crate::{FieldProblem, ServiceError};

/// Most items in one bulk request.
pub const MAX_BULK_ITEMS: usize = 1_000;

/// An assign request's fields as a surface received them, before validation: the API's JSON
/// body, a dashboard form, a row of an uploaded file.
#[derive(Debug, Clone, Default)]
pub struct AssignFields {
    /// The flow's id.
    pub flow_id: Option<String>,
    /// The assignee's e-mail.
    pub user_email: Option<String>,
    /// RFC 3339 timestamp or `YYYY-MM-DD` (end of that day in the organization's zone).
    pub due_date: Option<String>,
    /// low, medium or high.
    pub priority: Option<String>,
    /// Free text for the assignee.
    pub notes: Option<String>,
}

/// What an assign came to: the assignment (made now, or an earlier one that answers).
#[derive(Debug, Clone)]
pub struct Assigned {
    /// The assignment.
    pub assignment_id: AssignmentId,
    /// When it was made.
    pub assigned_at: DateTime<Utc>,
    /// The assignee's e-mail as stored.
    pub assignee_email: String,
    /// The flow's name.
    pub flow_name: String,
    /// The flow's modules.
    pub module_count: i64,
    /// The flow's estimated duration, in minutes.
    pub estimated_minutes: i64,
    /// An earlier assignment answers (the flow was already assigned, or the request repeated).
    pub existing: bool,
}

impl Assigned {
    fn new(
        assignment_id: AssignmentId,
        assigned_at: DateTime<Utc>,
        email: &str,
        flow: &FlowSummary,
        existing: bool,
    ) -> Self {
        Self {
            assignment_id,
            assigned_at,
            assignee_email: email.to_owned(),
            flow_name: flow.name.clone(),
            module_count: flow.module_count,
            estimated_minutes: flow.estimated_minutes,
            existing,
        }
    }

    /// The confirmation every surface shows: `Flow "X" assigned to alice@example.com`.
    pub fn message(&self) -> String {
        if self.existing {
            format!(
                "Flow \"{}\" is already assigned to {}",
                self.flow_name, self.assignee_email
            )
        } else {
            format!(
                "Flow \"{}\" assigned to {}",
                self.flow_name, self.assignee_email
            )
        }
    }

    /// The flow's estimated duration in words, e.g. "2 hours 30 minutes".
    pub fn estimated_duration(&self) -> String {
        humanize_minutes(u64::try_from(self.estimated_minutes).unwrap_or(0))
    }
}

/// A validated assign request.
#[derive(Debug, Clone)]
pub struct AssignInput {
    /// The flow; `None` when the text was not a flow id (it then does not exist: 404).
    pub flow_id: Option<FlowId>,
    /// Assignee e-mail.
    pub email: Email,
    /// Due date.
    pub due_at: Option<DateTime<Utc>>,
    /// Priority.
    pub priority: Priority,
    /// Notes.
    pub notes: Option<String>,
}

impl AssignInput {
    /// SHA-256 of what this request asks for once validated (flow, assignee, due date, priority,
    /// notes): two requests under one `X-Request-ID` are the same request when these are equal.
    pub fn fingerprint(&self, flow_id: FlowId, email_normalized: &str) -> [u8; 32] {
        use sha2::{Digest, Sha256};
        let mut hasher = Sha256::new();
        hasher.update(b"flow.assign.fingerprint.v1\0");
        hasher.update(flow_id.0.as_bytes());
        for field in [
            Some(email_normalized.to_owned()),
            self.due_at.map(|due| due.timestamp_micros().to_string()),
            Some(self.priority.as_str().to_owned()),
            self.notes.clone(),
        ] {
            // Length-prefixed, so no two different field lists hash the same bytes.
            match field {
                Some(text) => {
                    hasher.update([1]);
                    hasher.update((text.len() as u64).to_le_bytes());
                    hasher.update(text.as_bytes());
                }
                None => hasher.update([0]),
            }
        }
        hasher.finalize().into()
    }

    /// Validates a request; plain dates are read in `zone`. A refusal is
    /// [`ServiceError::Fields`] naming the first field that breaks its rule (`flowId`,
    /// `userEmail`, `dueDate`, `priority` or `notes`), so a form places it by the field.
    pub fn parse(
        request: AssignFields,
        zone: chrono_tz::Tz,
        now: DateTime<Utc>,
    ) -> Result<Self, ServiceError> {
        let field = |name: &'static str| {
            move |problem: Invalid| ServiceError::Fields(vec![FieldProblem::invalid(name, problem)])
        };
        let flow_text = request.flow_id.unwrap_or_default();
        if flow_text.trim().is_empty() {
            return Err(ServiceError::Fields(vec![FieldProblem::missing("flowId")]));
        }
        let email = Email::parse("userEmail", request.user_email.as_deref().unwrap_or(""))
            .map_err(field("userEmail"))?;
        let due_at = match request.due_date.as_deref() {
            None => None,
            Some(text) => {
                let due = parse_date_input("dueDate", text, zone, DayBound::End)
                    .map_err(field("dueDate"))?;
                if due <= now {
                    return Err(field("dueDate")(Invalid(
                        "dueDate must be in the future".into(),
                    )));
                }
                Some(due)
            }
        };
        let priority = match request.priority.as_deref() {
            None => Priority::default(),
            Some(text) => Priority::parse_field("priority", text).map_err(field("priority"))?,
        };
        let notes = request
            .notes
            .map(|notes| Notes::parse("notes", notes).map(Notes::into_inner))
            .transpose()
            .map_err(field("notes"))?;
        Ok(Self {
            flow_id: FlowId::parse(flow_text.trim()),
            email,
            due_at,
            priority,
            notes,
        })
    }
}

/// Assigns one validated request: resolves the flow (cached) and the user, answers with an
/// earlier result when there is one, else publishes the command and waits for the confirm.
///
/// With an `X-Request-ID`, the request first claims its key in Postgres (batched into the same
/// lookup round trip) with a fingerprint of the whole request: every request with that key, on
/// any replica, persisted yet or not, gets the first one's answer, or 409 when it asks for
/// something else. Until the command is persisted, a retry publishes it again (the worker applies
/// it once), so a 503 on the first attempt costs nothing. It is [`assign_many`] of one item, in
/// the interactive lane: someone is waiting on this one.
pub async fn assign_one(
    ctx: &Context,
    caller: &Caller,
    input: AssignInput,
    request_id: Option<&str>,
    now: DateTime<Utc>,
) -> Result<Assigned, ServiceError> {
    assign_many(
        ctx,
        caller,
        Lane::Interactive,
        vec![(Ok(input), request_id.map(str::to_owned))],
        now,
    )
    .await
    .pop()
    .unwrap_or_else(|| {
        Err(ServiceError::Internal(anyhow::anyhow!(
            "no outcome for the request"
        )))
    })
}

/// Assigns the requests of one caller (one request, a bulk request, an uploaded file) together,
/// each as [`assign_one`] describes: one lookup for all of them, then their commands — a lone
/// one batched with concurrent requests' commands, many in full broker messages published at
/// once. Each item is a validated request (or why it is not one) with its `X-Request-ID`; the
/// outcomes are in order. The commands go to `lane`: a single assign to the interactive lane's
/// queue, bulk work to the caller's organization's bulk queue (see `flow_common::amqp::Lane`).
pub async fn assign_many(
    ctx: &Context,
    caller: &Caller,
    lane: Lane,
    items: Vec<(Result<AssignInput, ServiceError>, Option<String>)>,
    now: DateTime<Utc>,
) -> Vec<Result<Assigned, ServiceError>> {
    let mut outcomes = Vec::with_capacity(items.len());
    let mut pending = Vec::with_capacity(items.len());
    for (index, (input, request_id)) in items.into_iter().enumerate() {
        let prepared = match input {
            Ok(input) => prepare(ctx, caller, input, request_id, now).await,
            Err(error) => Err(error),
        };
        match prepared {
            Ok(prepared) => {
                pending.push((index, prepared));
                outcomes.push(None);
            }
            Err(error) => outcomes.push(Some(Err(error))),
        }
    }
    let (indexes, prepared): (Vec<usize>, Vec<Prepared>) = pending.into_iter().unzip();
    let found = match look_up(ctx, &prepared).await {
        Ok(found) => found,
        Err(error) => {
            // One cause for all: the first item gets it, the others the same failure again.
            let failure = ServiceError::from(error);
            for &index in indexes.iter().skip(1) {
                outcomes[index] = Some(Err(failure.again()));
            }
            if let Some(&first) = indexes.first() {
                outcomes[first] = Some(Err(failure));
            }
            return outcomes.into_iter().flatten().collect();
        }
    };
    // The answers waiting for their command's confirm, and those commands.
    let mut publishing = Vec::new();
    let mut submissions = Vec::new();
    for ((index, prepared), found) in indexes.into_iter().zip(prepared).zip(found) {
        let planned = prepared.plan(ctx, found);
        match planned {
            Ok(Planned {
                response,
                command: Some(command),
            }) => match submission(&command) {
                Ok(submission) => {
                    publishing.push((index, response));
                    submissions.push(submission);
                }
                Err(error) => outcomes[index] = Some(Err(error)),
            },
            Ok(Planned {
                response,
                command: None,
            }) => outcomes[index] = Some(Ok(response)),
            Err(error) => outcomes[index] = Some(Err(error)),
        }
    }
    metrics::counter!("flow_assign_commands_total", "lane" => lane.as_str())
        .increment(submissions.len() as u64);
    // A lone interactive command shares a message with concurrent requests' commands; bulk
    // commands fill their own messages in their organization's bulk queue.
    let published = match (lane, submissions.len()) {
        (_, 0) => Vec::new(),
        (Lane::Interactive, 1) => {
            let submission = submissions.pop().expect("one submission");
            vec![ctx.assign_publisher.publish(submission).await]
        }
        (Lane::Interactive, _) => ctx.assign_publisher.publish_all(None, &submissions).await,
        (Lane::Bulk, _) => {
            let queue = QueueKind::assign_for(Lane::Bulk, caller.org.bulk_lane).suffix();
            ctx.assign_publisher
                .publish_all(Some(queue.as_str()), &submissions)
                .await
        }
    };
    for ((index, response), outcome) in publishing.into_iter().zip(published) {
        outcomes[index] = Some(outcome.map(|()| response).map_err(ServiceError::from));
    }
    outcomes.into_iter().flatten().collect()
}

/// An assign request ready for the lookup: its flow found, its lookup key built.
struct Prepared {
    input: AssignInput,
    flow: Arc<FlowSummary>,
    key: LookupKey,
    request_id: Option<String>,
    now: DateTime<Utc>,
}

/// What a request comes to once looked up: its answer, and the command to publish before giving
/// it (none when an earlier assignment answers).
struct Planned {
    response: Assigned,
    command: Option<AssignCommand>,
}

/// Finds the request's flow (cached; 404 when it is not the caller's) and builds its lookup key,
/// with the claim of its `X-Request-ID` when it has one.
async fn prepare(
    ctx: &Context,
    caller: &Caller,
    input: AssignInput,
    request_id: Option<String>,
    now: DateTime<Utc>,
) -> Result<Prepared, ServiceError> {
    let org_id = caller.org_id();
    let flow = match input.flow_id {
        Some(flow_id) => ctx.caches.flow(&ctx.db, org_id, flow_id).await?,
        None => None,
    }
    .ok_or(ServiceError::NotFound("flow"))?;
    // An archived flow keeps its assignments and reports and takes no new ones.
    if flow.archived {
        return Err(ServiceError::Conflict(format!(
            "flow \"{}\" is archived and takes no new assignments; unarchive it \
             (PATCH /v1/flows/{{id}} {{\"archived\": false}}) to assign it",
            flow.name
        )));
    }
    let email_normalized = input.email.normalized();
    let request = request_id.as_deref().map(|id| RequestKey {
        assignment_id: AssignmentId::for_request(org_id, id),
        fingerprint: input.fingerprint(flow.id, &email_normalized),
        assigned_at: now,
    });
    let key = LookupKey {
        org_id,
        flow_id: flow.id,
        email_normalized,
        request,
    };
    Ok(Prepared {
        input,
        flow,
        key,
        request_id,
        now,
    })
}

/// Looks up prepared requests in one go. A key repeated within one lookup batch by a request
/// whose assignee does not exist leaves the others without a claim: those are looked up again
/// (at most three times), and the next batch settles them.
async fn look_up(ctx: &Context, prepared: &[Prepared]) -> Result<Vec<LookupResult>, LookupError> {
    let unsettled = |prepared: &Prepared, found: &LookupResult| {
        prepared.key.request.is_some()
            && found.user.is_some()
            && !found.user_inactive
            && found.claim.is_none()
    };
    let keys = prepared.iter().map(|item| item.key.clone()).collect();
    let mut found = ctx.lookup.resolve_all(keys).await?;
    for _ in 0..3 {
        let again: Vec<usize> = (0..prepared.len())
            .filter(|&index| unsettled(&prepared[index], &found[index]))
            .collect();
        if again.is_empty() {
            break;
        }
        let keys = again
            .iter()
            .map(|&index| prepared[index].key.clone())
            .collect();
        for (index, result) in again.into_iter().zip(ctx.lookup.resolve_all(keys).await?) {
            found[index] = result;
        }
    }
    Ok(found)
}

impl Prepared {
    /// The answer to this request given what the lookup `found`, and the command to publish
    /// first, if any.
    fn plan(self, ctx: &Context, found: LookupResult) -> Result<Planned, ServiceError> {
        let Prepared {
            input,
            flow,
            key,
            request_id,
            now,
        } = self;
        let (user_id, email) = found.user.ok_or_else(|| {
            ServiceError::NotFoundSaying(format!(
                "user {} not found in this organization",
                input.email
            ))
        })?;
        // Offboarding keeps the record but stops new training: 409, the state refuses it.
        if found.user_inactive {
            return Err(ServiceError::Conflict(format!(
                "user {email} is deactivated; reactivate them (SCIM active: true) to assign"
            )));
        }
        let command = AssignCommand {
            version: ASSIGN_COMMAND_VERSION,
            assignment_id: AssignmentId::default(),
            existing_assignment_id: None,
            org_id: key.org_id,
            flow_id: flow.id,
            flow_name: flow.name.clone(),
            user_id,
            assignee_email: email.clone(),
            priority: input.priority,
            notes: input.notes,
            due_at: input.due_at,
            assigned_at: now,
            request_id,
            schedule_id: None,
            // The request's span: the command's event and its webhook deliveries continue it.
            traceparent: flow_common::telemetry::current_traceparent(),
        };
        if let Some(request) = key.request {
            let claim = found.claim.ok_or_else(|| {
                ServiceError::Unavailable(
                    "a concurrent request holds this X-Request-ID; retry".into(),
                )
            })?;
            if claim.fingerprint != request.fingerprint {
                return Err(request_id_conflict());
            }
            let created = claim.answer_id == request.assignment_id;
            if let Some(earlier) = found.by_request {
                // Persisted. Keys claimed before fingerprints existed are checked on flow and user.
                if earlier.flow_id != flow.id || earlier.user_id != user_id {
                    return Err(request_id_conflict());
                }
                return Ok(Planned {
                    response: Assigned::new(
                        earlier.answer_id,
                        earlier.assigned_at,
                        &email,
                        &flow,
                        !created,
                    ),
                    command: None,
                });
            }
            return Ok(Planned {
                response: Assigned::new(
                    claim.answer_id,
                    claim.assigned_at,
                    &email,
                    &flow,
                    !created,
                ),
                command: Some(AssignCommand {
                    assignment_id: request.assignment_id,
                    existing_assignment_id: (!created).then_some(claim.answer_id),
                    assigned_at: claim.assigned_at,
                    ..command
                }),
            });
        }
        if let Some(active) = found.active {
            return Ok(Planned {
                response: Assigned::new(active.answer_id, active.assigned_at, &email, &flow, true),
                command: None,
            });
        }
        let command = AssignCommand {
            assignment_id: ctx.assignment_ids.mint(key.org_id, now),
            ..command
        };
        Ok(Planned {
            response: Assigned::new(command.assignment_id, now, &email, &flow, false),
            command: Some(command),
        })
    }
}

fn request_id_conflict() -> ServiceError {
    ServiceError::Conflict("X-Request-ID was already used for a different request".into())
}

/// An assign command as the batch publisher takes it.
fn submission(command: &AssignCommand) -> Result<Submission, ServiceError> {
    let json = command.encode().map_err(|error| {
        ServiceError::Internal(anyhow::Error::new(error).context("encoding a command"))
    })?;
    Ok(Submission {
        json,
        message_id: command.assignment_id.to_string(),
        request_id: command.request_id.clone(),
        traceparent: command.traceparent.clone(),
    })
}

/// Applies assign commands of `lane` in one transaction: the assignments inserted (a command
/// applied before is skipped: its id makes the insert idempotent) with their `flow.assigned`
/// outbox rows, on that lane. The assign-worker's end of the path above.
pub async fn apply(
    pool: &sqlx::PgPool,
    lane: Lane,
    commands: &[flow_domain::messages::AssignCommand],
) -> Result<BatchOutcome, ApplyError> {
    let mut transaction = pool.begin().await?;
    let outcome = assignments::apply_batch(&mut transaction, lane, commands).await?;
    transaction.commit().await?;
    Ok(outcome)
}
