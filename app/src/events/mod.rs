//! Events in (issue 38, docs/events.md): CloudEvents another system sends (`POST /v1/events`),
//! run through the organization's [`triggers`], each trigger that matches assigning a flow to
//! the person the event names, or cancelling their open assignment of a flow.
//!
//! Exactly once: an event is identified by its (`source`, `id`) within the organization. Its row
//! (`inbound_events`) and what it caused (`inbound_event_actions`: the assign command with its
//! derived assignment id, or the cancellation) are written in one transaction; a second request
//! with the same event (re-sent, or concurrent: it waits on the first's row) finds it recorded
//! and answers `duplicate`, acting nothing. The actions are published after the commit (assign
//! commands to the organization's bulk queue, cancellations to the change queue, as rules do),
//! then marked published. One that was not (the broker refused, the API stopped in between) is
//! published again by the next request carrying the event, or by the scheduler's sweep
//! ([`republish_stale`]); its ids are derived, so the assign-worker applies it once. Events are
//! kept [`RETENTION_DAYS`] days ([`prune`]).
//!
//! A cancel finds the person's open assignment of the flow; when there is none but an earlier
//! event (of the same request or an earlier one) is still making one — its command queued, not
//! persisted yet — the cancel takes that one and waits: the sweep publishes it once the
//! assignment is persisted (or drops it if its command failed), so "hired" then "left" sent in
//! quick succession ends cancelled, not assigned.

pub mod cloudevent;
pub mod sources;
pub mod triggers;

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Utc};
use flow_common::amqp::{BatchPublisher, Lane, QueueKind, Submission};
use flow_common::db::audit::{self, Actor};
use flow_common::db::inbound_events::{self as db, ActionRecord, CancelTarget, NewAction, Person};
use flow_common::db::orgs::{self, Organization};
use flow_domain::audit::AuditAction;
use flow_domain::ids::{AssignmentId, AutomaticCancel, EventActionKey, FlowId, UserId};
use flow_domain::messages::{ASSIGN_COMMAND_VERSION, AssignCommand};
use sqlx::PgPool;

use self::cloudevent::{CloudEvent, MAX_EVENTS, Received};
use self::triggers::{Action, Evaluation, Planned, Trigger};
use crate::changes::{AutoCancel, cancel_automatically};
use crate::ratelimit::{Operation, RateInfo};
use crate::{Acting, Context, ServiceError};

/// How long an event's (source, id) is remembered: a re-sent event within it is a duplicate.
pub const RETENTION_DAYS: i64 = 7;

/// What became of one event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventStatus {
    /// Recorded now; its triggers acted (or had nothing to act on).
    Accepted,
    /// Recorded before (re-sent within the retention, or repeated in the request): nothing
    /// acted again.
    Duplicate,
    /// Recorded now; no trigger matched it (or a cancel found no open assignment).
    Ignored,
    /// Not recorded: not a valid CloudEvent, or a matching trigger could not act on it.
    Invalid,
}

impl EventStatus {
    /// The name in the API.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Accepted => "accepted",
            Self::Duplicate => "duplicate",
            Self::Ignored => "ignored",
            Self::Invalid => "invalid",
        }
    }
}

/// The answer about one event, in request order.
#[derive(Debug, Clone)]
pub struct EventResult {
    /// The event's `id` (as far as it could be read).
    pub id: String,
    /// The event's `source` (as far as it could be read).
    pub source: String,
    /// What became of it.
    pub status: EventStatus,
    /// The assignments it made (or cancelled), for `accepted` and `duplicate`.
    pub assignment_ids: Vec<AssignmentId>,
    /// Why, for `invalid` and some `ignored`.
    pub reason: Option<String>,
}

impl EventResult {
    fn new(id: &str, source: &str, status: EventStatus, reason: Option<String>) -> Self {
        Self {
            id: id.to_owned(),
            source: source.to_owned(),
            status,
            assignment_ids: Vec::new(),
            reason,
        }
    }
}

/// What a request of events came to.
#[derive(Debug, Clone)]
pub struct Ingested {
    /// One result per event, in request order.
    pub results: Vec<EventResult>,
    /// The organization's write budget after the request.
    pub rate: RateInfo,
}

/// One action an event would cause, resolved against the organization.
struct Resolved<'t> {
    trigger: &'t Trigger,
    person: Person,
    due_at: Option<DateTime<Utc>>,
    /// For a cancel: the assignment it cancels.
    target: Option<AssignmentId>,
    /// For a cancel: whether its assignment is still being made (by an earlier event), so the
    /// cancel waits until it is persisted.
    waits: bool,
}

/// What an event comes to before it is recorded.
enum Plan<'t> {
    /// Its answer is known (invalid).
    Answered(EventResult),
    /// A repeat of an earlier event of the request (its index): answered as that one's
    /// duplicate.
    RepeatOf(usize),
    /// To record, as ignored (with why) or accepted with its actions.
    Record {
        event: CloudEvent,
        actions: Vec<Resolved<'t>>,
        ignored: Option<String>,
    },
}

/// Takes the events of one request (at most [`MAX_EVENTS`]) for the caller's organization at
/// `now`: each is checked, run through the triggers, recorded once with what it caused, and its
/// actions published. Costs one write request per event (429 for the whole request when the
/// write limit has not that much left) and one assign request per assignment (429 likewise,
/// nothing recorded). 503 when the broker did not confirm the actions: they are recorded, so
/// sending the same events again answers `duplicate` and publishes them.
pub async fn ingest(
    ctx: &Context,
    acting: Acting<'_>,
    received: Vec<Received>,
    now: DateTime<Utc>,
) -> Result<Ingested, ServiceError> {
    if received.len() > MAX_EVENTS {
        return Err(flow_domain::Invalid(format!(
            "at most {MAX_EVENTS} events per request; send more in several requests"
        ))
        .into());
    }
    let cost = u32::try_from(received.len().max(1)).unwrap_or(u32::MAX);
    let rate = ctx
        .limiter
        .check(acting.caller, Operation::Write, cost)
        .await?;
    let triggers = triggers::all(ctx, acting).await?;
    let plans = plan(ctx, acting, &triggers, received, now).await?;
    let recorded = record(ctx, acting, &plans, now).await?;
    let keys: Vec<(String, String)> = plans
        .iter()
        .filter_map(|plan| match plan {
            Plan::Record { event, .. } => Some((event.source.clone(), event.id.clone())),
            _ => None,
        })
        .collect();
    let actions = if keys.is_empty() {
        Vec::new()
    } else {
        db::actions_of(&ctx.db, acting.org_id(), &keys).await?
    };
    publish(
        &ctx.db,
        &ctx.assign_publisher,
        &acting.caller.org,
        acting.actor,
        &actions,
    )
    .await?;
    Ok(Ingested {
        results: answer(plans, &recorded, &actions),
        rate,
    })
}

/// Checks and evaluates every event, then resolves the people, flows and open assignments the
/// matching triggers need in one lookup each.
async fn plan<'t>(
    ctx: &Context,
    acting: Acting<'_>,
    triggers: &'t [Trigger],
    received: Vec<Received>,
    now: DateTime<Utc>,
) -> Result<Vec<Plan<'t>>, ServiceError> {
    let zone = acting.caller.zone;
    let mut seen: HashMap<(String, String), usize> = HashMap::new();
    let mut evaluated: Vec<Result<(CloudEvent, Evaluation<'t>), Plan<'t>>> = Vec::new();
    for (index, item) in received.into_iter().enumerate() {
        let event = match item {
            Ok(event) => event,
            Err(invalid) => {
                evaluated.push(Err(Plan::Answered(EventResult::new(
                    &invalid.id,
                    &invalid.source,
                    EventStatus::Invalid,
                    Some(invalid.reason),
                ))));
                continue;
            }
        };
        let key = (event.source.clone(), event.id.clone());
        if let Some(&first) = seen.get(&key) {
            evaluated.push(Err(Plan::RepeatOf(first)));
            continue;
        }
        let evaluation = triggers::evaluate(triggers, &event, zone, now);
        if !matches!(evaluation, Evaluation::Invalid(_)) {
            seen.insert(key, index);
        }
        evaluated.push(Ok((event, evaluation)));
    }
    let planned: Vec<&Planned<'t>> = evaluated
        .iter()
        .filter_map(|item| match item {
            Ok((_, Evaluation::Matched(planned))) => Some(planned.iter()),
            _ => None,
        })
        .flatten()
        .collect();
    let mut lookups = Lookups::load(ctx, acting, &planned).await?;
    let mut plans = Vec::with_capacity(evaluated.len());
    for item in evaluated {
        plans.push(match item {
            Err(plan) => plan,
            Ok((event, Evaluation::Invalid(reason))) => Plan::Answered(EventResult::new(
                &event.id,
                &event.source,
                EventStatus::Invalid,
                Some(reason),
            )),
            Ok((event, Evaluation::Ignored)) => Plan::Record {
                event,
                actions: Vec::new(),
                ignored: Some("no trigger matched the event".into()),
            },
            Ok((event, Evaluation::Matched(planned))) => lookups.resolve(event, planned),
        });
    }
    Ok(plans)
}

/// The people, archived flows and assignments to cancel the matching triggers of a request
/// need.
struct Lookups {
    org_id: flow_domain::ids::OrgId,
    people: HashMap<String, Person>,
    archived: HashSet<FlowId>,
    /// The open (persisted) assignment of each (flow, person) a cancel names.
    open: HashMap<(FlowId, UserId), AssignmentId>,
    /// The assignment of each (flow, person) a cancel names, without an open one, that an event
    /// is still making, earlier events of this request included; a cancel takes it (waiting for
    /// it), so it is cancelled once.
    being_made: HashMap<(FlowId, UserId), AssignmentId>,
}

impl Lookups {
    async fn load(
        ctx: &Context,
        acting: Acting<'_>,
        planned: &[&Planned<'_>],
    ) -> Result<Self, ServiceError> {
        let org_id = acting.org_id();
        let mut emails: Vec<String> = planned.iter().map(|p| p.email.normalized()).collect();
        emails.sort_unstable();
        emails.dedup();
        let people: HashMap<String, Person> = if emails.is_empty() {
            HashMap::new()
        } else {
            db::people(&ctx.db, org_id, &emails)
                .await?
                .into_iter()
                .map(|person| (person.email_normalized.clone(), person))
                .collect()
        };
        let mut archived = HashSet::new();
        let mut flows: Vec<FlowId> = planned.iter().map(|p| p.trigger.flow_id).collect();
        flows.sort_unstable();
        flows.dedup();
        for flow_id in flows {
            let flow = ctx.caches.flow(&ctx.db, org_id, flow_id).await?;
            if flow.is_none_or(|flow| flow.archived) {
                archived.insert(flow_id);
            }
        }
        let mut pairs: Vec<(FlowId, UserId)> = planned
            .iter()
            .filter(|p| p.trigger.action == Action::Cancel)
            .filter_map(|p| {
                let person = people.get(&p.email.normalized())?;
                Some((p.trigger.flow_id, person.id))
            })
            .collect();
        pairs.sort_unstable();
        pairs.dedup();
        let by_pair = |rows: Vec<(FlowId, UserId, AssignmentId)>| {
            rows.into_iter()
                .map(|(flow, user, assignment)| ((flow, user), assignment))
                .collect::<HashMap<_, _>>()
        };
        let open = if pairs.is_empty() {
            HashMap::new()
        } else {
            by_pair(db::open_assignments(&ctx.db, org_id, &pairs).await?)
        };
        // A pair with an open assignment cancels that one: only the others look further.
        pairs.retain(|pair| !open.contains_key(pair));
        let being_made = if pairs.is_empty() {
            HashMap::new()
        } else {
            by_pair(db::assignments_being_made(&ctx.db, org_id, &pairs).await?)
        };
        Ok(Self {
            org_id,
            people,
            archived,
            open,
            being_made,
        })
    }

    /// The plan of an event its triggers matched: invalid when one of them cannot act (unknown
    /// or deactivated person, archived flow), else its actions. A cancel takes the open
    /// assignment of its flow, else the one an event (this or an earlier one) is making; an
    /// event's assignments are remembered for the cancels of the events after it.
    fn resolve<'t>(&mut self, event: CloudEvent, planned: Vec<Planned<'t>>) -> Plan<'t> {
        let invalid = |reason: String| {
            Plan::Answered(EventResult::new(
                &event.id,
                &event.source,
                EventStatus::Invalid,
                Some(reason),
            ))
        };
        let mut actions = Vec::with_capacity(planned.len());
        let mut nothing_open = Vec::new();
        let mut taken = Vec::new();
        for planned in planned {
            let name = &planned.trigger.name;
            let Some(person) = self.people.get(&planned.email.normalized()) else {
                return invalid(format!(
                    "trigger \"{name}\": no user with e-mail {} in this organization",
                    planned.email
                ));
            };
            let assigning = planned.trigger.action == Action::Assign;
            if assigning && !person.active {
                return invalid(format!(
                    "trigger \"{name}\": user {} is deactivated",
                    person.email
                ));
            }
            if assigning && self.archived.contains(&planned.trigger.flow_id) {
                return invalid(format!(
                    "trigger \"{name}\": flow \"{}\" is archived and takes no new assignments",
                    planned.trigger.flow_name
                ));
            }
            let pair = (planned.trigger.flow_id, person.id);
            let open = self.open.get(&pair).copied();
            let (target, waits) = match (assigning, open) {
                (true, _) => (None, false),
                (false, Some(open)) => (Some(open), false),
                (false, None) => {
                    taken.push(pair);
                    (self.being_made.get(&pair).copied(), true)
                }
            };
            if !assigning && target.is_none() {
                nothing_open.push(format!(
                    "trigger \"{name}\": {} has no open assignment of flow \"{}\" to cancel",
                    person.email, planned.trigger.flow_name
                ));
                continue;
            }
            actions.push(Resolved {
                trigger: planned.trigger,
                person: person.clone(),
                due_at: planned.due_at,
                target,
                waits,
            });
        }
        // The event acts: the assignments its cancels took are taken, the ones it makes may be.
        for pair in taken {
            self.being_made.remove(&pair);
        }
        for action in &actions {
            if action.trigger.action == Action::Assign {
                let key =
                    EventActionKey::new(self.org_id, &event.source, &event.id, action.trigger.id);
                self.being_made.insert(
                    (action.trigger.flow_id, action.person.id),
                    AssignmentId::for_event(key),
                );
            }
        }
        let ignored = actions.is_empty().then(|| nothing_open.join("; "));
        Plan::Record {
            event,
            actions,
            ignored,
        }
    }
}

/// How often the recording transaction is tried when concurrent requests deadlock.
const RECORD_ATTEMPTS: usize = 3;

/// Records, in one transaction, the events of the plans not recorded before and the actions of
/// those recorded now, charging their assignments to the organization's assign budget before
/// the commit (429: nothing recorded). Answers the (source, id) recorded now.
async fn record(
    ctx: &Context,
    acting: Acting<'_>,
    plans: &[Plan<'_>],
    now: DateTime<Utc>,
) -> Result<HashSet<(String, String)>, ServiceError> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        match record_once(ctx, acting, plans, now).await {
            Err(ServiceError::Database(error))
                if attempt < RECORD_ATTEMPTS && flow_common::db::is_transient(&error) =>
            {
                tracing::debug!(%error, "recording inbound events retried");
            }
            other => return other,
        }
    }
}

async fn record_once(
    ctx: &Context,
    acting: Acting<'_>,
    plans: &[Plan<'_>],
    now: DateTime<Utc>,
) -> Result<HashSet<(String, String)>, ServiceError> {
    let org_id = acting.org_id();
    let events: Vec<db::NewEvent<'_>> = plans
        .iter()
        .filter_map(|plan| match plan {
            Plan::Record { event, ignored, .. } => Some(db::NewEvent {
                source: &event.source,
                id: &event.id,
                event_type: &event.event_type,
                status: if ignored.is_some() {
                    "ignored"
                } else {
                    "accepted"
                },
            }),
            _ => None,
        })
        .collect();
    if events.is_empty() {
        return Ok(HashSet::new());
    }
    let mut transaction = ctx.db.begin().await?;
    let recorded = db::record(&mut transaction, org_id, &events).await?;
    let mut actions = Vec::new();
    for plan in plans {
        let Plan::Record {
            event,
            actions: resolved,
            ..
        } = plan
        else {
            continue;
        };
        if !recorded.contains(&(event.source.clone(), event.id.clone())) {
            continue;
        }
        for action in resolved {
            actions.push(new_action(acting, event, action, now)?);
        }
    }
    let assigning: Vec<&NewAction> = actions
        .iter()
        .filter(|action| action.action == Action::Assign.as_str())
        .collect();
    if !assigning.is_empty() {
        // Charged before the commit: over the limit, nothing is recorded and the sender retries.
        let cost = u32::try_from(assigning.len()).unwrap_or(u32::MAX);
        ctx.limiter
            .check(acting.caller, Operation::Assign, cost)
            .await?;
        let (targets, details): (Vec<String>, Vec<String>) = assigning
            .iter()
            .map(|action| {
                (
                    action.assignment_id.to_string(),
                    format!(
                        "trigger {} assigned for event {} from {} (type {})",
                        action.trigger_id, action.event_id, action.source, action.event_type
                    ),
                )
            })
            .unzip();
        audit::record_many(
            &mut *transaction,
            org_id,
            acting.actor,
            AuditAction::EventTriggerAssigned,
            &targets,
            &details,
        )
        .await?;
    }
    db::record_actions(&mut transaction, org_id, &actions).await?;
    transaction.commit().await?;
    Ok(recorded)
}

/// The row of one action of an event recorded now: for an assign, its command (with the id
/// derived from the event and the trigger); for a cancel, its target and reason.
fn new_action(
    acting: Acting<'_>,
    event: &CloudEvent,
    action: &Resolved<'_>,
    now: DateTime<Utc>,
) -> Result<NewAction, ServiceError> {
    let trigger = action.trigger;
    let key = EventActionKey::new(acting.org_id(), &event.source, &event.id, trigger.id);
    let (assignment_id, command, reason) = match (trigger.action, action.target) {
        (Action::Assign, _) => {
            let command = AssignCommand {
                version: ASSIGN_COMMAND_VERSION,
                assignment_id: AssignmentId::for_event(key),
                existing_assignment_id: None,
                org_id: acting.org_id(),
                flow_id: trigger.flow_id,
                flow_name: trigger.flow_name.clone(),
                user_id: action.person.id,
                assignee_email: action.person.email.clone(),
                priority: trigger.priority,
                notes: trigger.notes.clone(),
                due_at: action.due_at,
                assigned_at: now,
                request_id: None,
                schedule_id: None,
                traceparent: flow_common::telemetry::current_traceparent(),
            };
            let json = serde_json::to_value(&command)
                .map_err(|error| ServiceError::Internal(anyhow::Error::new(error)))?;
            (command.assignment_id, Some(json), None)
        }
        (Action::Cancel, Some(target)) => (
            target,
            None,
            Some(format!(
                "cancelled by event trigger \"{}\" (event {} from {}, type {})",
                trigger.name, event.id, event.source, event.event_type
            )),
        ),
        (Action::Cancel, None) => {
            return Err(ServiceError::Internal(anyhow::anyhow!(
                "a cancel action without its target"
            )));
        }
    };
    Ok(NewAction {
        key: key.0,
        source: event.source.clone(),
        event_id: event.id.clone(),
        event_type: event.event_type.clone(),
        trigger_id: trigger.id,
        action: trigger.action.as_str(),
        assignment_id,
        command,
        reason,
        flow_id: trigger.flow_id,
        user_id: action.person.id,
        waits: action.waits,
    })
}

/// Why actions could not be published: they stay unpublished, for the next request carrying
/// their event or the scheduler's sweep.
#[derive(Debug, thiserror::Error)]
pub enum PublishFailure {
    /// Postgres failed.
    #[error(transparent)]
    Database(#[from] sqlx::Error),
    /// The broker did not confirm.
    #[error("the events' actions could not be queued durably ({0})")]
    Unavailable(String),
}

impl From<PublishFailure> for ServiceError {
    fn from(failure: PublishFailure) -> Self {
        match failure {
            PublishFailure::Database(error) => Self::Database(error),
            PublishFailure::Unavailable(error) => Self::Unavailable(format!(
                "the events were recorded but their actions could not be queued durably \
                 ({error}); send the same events again: they answer duplicate and their actions \
                 are queued then (or by the scheduler within a minute)"
            )),
        }
    }
}

/// Publishes the unpublished `actions` of the organization `org` (assign commands to its bulk
/// queue, cancellations through [`cancel_automatically`]) and marks them published; a cancel
/// whose assignment is still being made stays unpublished (the sweep publishes it once it is
/// persisted), one whose assignment failed is marked published with nothing to cancel.
pub async fn publish(
    pool: &PgPool,
    publisher: &BatchPublisher,
    org: &Organization,
    actor: Actor<'_>,
    actions: &[ActionRecord],
) -> Result<(), PublishFailure> {
    let unpublished: Vec<&ActionRecord> = actions
        .iter()
        .filter(|action| action.published_at.is_none())
        .collect();
    if unpublished.is_empty() {
        return Ok(());
    }
    let (cancelling, assigning): (Vec<&ActionRecord>, Vec<&ActionRecord>) = unpublished
        .into_iter()
        .partition(|action| action.action == Action::Cancel.as_str());
    let mut done: Vec<uuid::Uuid> = Vec::new();
    let targets: Vec<AssignmentId> = cancelling
        .iter()
        .map(|action| action.assignment_id)
        .collect();
    let settled = if targets.is_empty() {
        Vec::new()
    } else {
        db::cancel_targets(pool, &targets).await?
    };
    // The cancels to make now, and their actions' keys (published once they are made).
    let mut cancels = Vec::new();
    let mut cancelled: Vec<uuid::Uuid> = Vec::new();
    for (action, target) in cancelling.iter().zip(settled) {
        match target {
            CancelTarget::Persisted(assignment_id) => {
                cancels.push(AutoCancel {
                    assignment_id,
                    cause: AutomaticCancel::Event(EventActionKey(action.key)),
                    reason: action.reason.clone().unwrap_or_default(),
                });
                cancelled.push(action.key);
            }
            CancelTarget::Failed => {
                tracing::info!(
                    assignment_id = %action.assignment_id,
                    event_id = %action.event_id,
                    "the assignment an event's cancel waited for failed: nothing to cancel"
                );
                done.push(action.key);
            }
            // Published by the scheduler's sweep once the assignment is persisted.
            CancelTarget::Pending => {}
        }
    }
    let mut submissions = Vec::new();
    for action in assigning {
        if let (Some(command), "assign") = (&action.command, action.action.as_str()) {
            submissions.push(Submission {
                json: serde_json::to_vec(command)
                    .map_err(|error| PublishFailure::Unavailable(error.to_string()))?,
                message_id: action.assignment_id.to_string(),
                request_id: None,
                traceparent: flow_common::telemetry::current_traceparent(),
            });
        }
        done.push(action.key);
    }
    if !submissions.is_empty() {
        metrics::counter!("flow_assign_commands_total", "lane" => Lane::Bulk.as_str())
            .increment(submissions.len() as u64);
        let queue = QueueKind::assign_for(Lane::Bulk, org.bulk_lane).suffix();
        let published = publisher
            .publish_all(Some(queue.as_str()), &submissions)
            .await;
        if let Some(Err(error)) = published.into_iter().find(Result::is_err) {
            tracing::warn!(%error, "inbound event assignments not queued");
            return Err(PublishFailure::Unavailable(error.to_string()));
        }
    }
    if !cancels.is_empty() {
        cancel_automatically(pool, publisher.publisher(), org.id, actor, &cancels)
            .await
            .map_err(|error| PublishFailure::Unavailable(error.to_string()))?;
    }
    done.extend(cancelled);
    db::mark_published(pool, &done).await?;
    Ok(())
}

/// The results in request order: an event recorded now answers its plan, one recorded before
/// `duplicate`, a repeat within the request what its first occurrence answered as a duplicate;
/// accepted and duplicate events list their assignments.
fn answer(
    plans: Vec<Plan<'_>>,
    recorded: &HashSet<(String, String)>,
    actions: &[ActionRecord],
) -> Vec<EventResult> {
    let mut assignments: HashMap<(&str, &str), Vec<AssignmentId>> = HashMap::new();
    for action in actions {
        assignments
            .entry((action.source.as_str(), action.event_id.as_str()))
            .or_default()
            .push(action.assignment_id);
    }
    let mut results: Vec<EventResult> = Vec::with_capacity(plans.len());
    for plan in plans {
        let result = match plan {
            Plan::Answered(result) => result,
            Plan::RepeatOf(first) => match results.get(first) {
                Some(first) if first.status == EventStatus::Invalid => first.clone(),
                Some(first) => EventResult {
                    status: EventStatus::Duplicate,
                    reason: None,
                    ..first.clone()
                },
                None => continue,
            },
            Plan::Record { event, ignored, .. } => {
                let ids = assignments
                    .get(&(event.source.as_str(), event.id.as_str()))
                    .cloned()
                    .unwrap_or_default();
                let new = recorded.contains(&(event.source.clone(), event.id.clone()));
                let (status, reason) = match (new, ignored) {
                    (false, _) => (EventStatus::Duplicate, None),
                    (true, Some(reason)) => (EventStatus::Ignored, Some(reason)),
                    (true, None) => (EventStatus::Accepted, None),
                };
                EventResult {
                    assignment_ids: ids,
                    ..EventResult::new(&event.id, &event.source, status, reason)
                }
            }
        };
        results.push(result);
    }
    results
}

/// Publishes up to `limit` actions left unpublished longer than `grace` (the request's publish
/// failed, or its API stopped between the commit and the publish) and the waiting cancels whose
/// assignment is persisted now, a scheduler's sweep; answers how many were published. Safe with several schedulers: a command published twice applies
/// once.
pub async fn republish_stale(
    pool: &PgPool,
    publisher: &BatchPublisher,
    grace: std::time::Duration,
    limit: i64,
) -> Result<usize, PublishFailure> {
    let stale = db::unpublished(pool, grace, limit).await?;
    let mut by_org: HashMap<flow_domain::ids::OrgId, Vec<ActionRecord>> = HashMap::new();
    for action in stale {
        by_org.entry(action.org_id).or_default().push(action);
    }
    let mut published = 0;
    for (org_id, actions) in by_org {
        let Some(org) = orgs::get(pool, org_id).await? else {
            continue;
        };
        publish(pool, publisher, &org, Actor::Scheduler, &actions).await?;
        published += actions.len();
    }
    Ok(published)
}

/// Deletes up to `limit` events received more than [`RETENTION_DAYS`] before `now`, with their
/// actions; answers how many.
pub async fn prune(pool: &PgPool, now: DateTime<Utc>, limit: i64) -> Result<u64, sqlx::Error> {
    db::prune(pool, now - chrono::Duration::days(RETENTION_DAYS), limit).await
}

/// One trigger a preview found matching, and what it would do.
#[derive(Debug, Clone)]
pub struct PreviewMatch {
    /// The trigger.
    pub trigger_id: flow_domain::ids::EventTriggerId,
    /// Its name.
    pub trigger_name: String,
    /// `assign` or `cancel`.
    pub action: Action,
    /// The flow.
    pub flow_id: FlowId,
    /// Its name.
    pub flow_name: String,
    /// The e-mail found in the event.
    pub user_email: String,
    /// Whether the organization has an active user with that e-mail.
    pub user_found: bool,
    /// The due date an assignment would get.
    pub due_at: Option<DateTime<Utc>>,
}

/// What the organization's triggers would make of a sample event.
#[derive(Debug, Clone)]
pub struct Preview {
    /// accepted, ignored or invalid (as the event would be answered now, if not a duplicate).
    pub status: EventStatus,
    /// Why, for invalid or ignored.
    pub reason: Option<String>,
    /// The triggers that match, with what each would do.
    pub matches: Vec<PreviewMatch>,
}

/// Runs a sample event through the organization's triggers at `now` without recording or
/// acting on anything.
pub async fn preview(
    ctx: &Context,
    acting: Acting<'_>,
    event: Received,
    now: DateTime<Utc>,
) -> Result<Preview, ServiceError> {
    let event = match event {
        Ok(event) => event,
        Err(invalid) => {
            return Ok(Preview {
                status: EventStatus::Invalid,
                reason: Some(invalid.reason),
                matches: Vec::new(),
            });
        }
    };
    let triggers = triggers::all(ctx, acting).await?;
    let planned = match triggers::evaluate(&triggers, &event, acting.caller.zone, now) {
        Evaluation::Ignored => {
            return Ok(Preview {
                status: EventStatus::Ignored,
                reason: Some("no trigger matched the event".into()),
                matches: Vec::new(),
            });
        }
        Evaluation::Invalid(reason) => {
            return Ok(Preview {
                status: EventStatus::Invalid,
                reason: Some(reason),
                matches: Vec::new(),
            });
        }
        Evaluation::Matched(planned) => planned,
    };
    let references: Vec<&Planned<'_>> = planned.iter().collect();
    let mut lookups = Lookups::load(ctx, acting, &references).await?;
    let matches = planned
        .iter()
        .map(|planned| PreviewMatch {
            trigger_id: planned.trigger.id,
            trigger_name: planned.trigger.name.clone(),
            action: planned.trigger.action,
            flow_id: planned.trigger.flow_id,
            flow_name: planned.trigger.flow_name.clone(),
            user_email: planned.email.as_str().to_owned(),
            user_found: lookups
                .people
                .get(&planned.email.normalized())
                .is_some_and(|person| person.active),
            due_at: planned.due_at,
        })
        .collect();
    let (status, reason) = match lookups.resolve(event, planned) {
        Plan::Answered(result) => (result.status, result.reason),
        Plan::Record {
            ignored: Some(reason),
            ..
        } => (EventStatus::Ignored, Some(reason)),
        _ => (EventStatus::Accepted, None),
    };
    Ok(Preview {
        status,
        reason,
        matches,
    })
}
