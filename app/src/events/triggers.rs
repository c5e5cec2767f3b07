//! Event triggers, for every surface (docs/events.md): which inbound events assign a flow to the
//! person they name, or cancel that person's open assignment of a flow. A trigger matches an
//! event's `type` (exactly or by prefix) and, when set, its `source`; it finds the person's
//! e-mail at a JSON Pointer in the event. [`evaluate`] is the matching itself, shared by the
//! ingestion and the preview.

use chrono::{DateTime, Utc};
use flow_common::db::audit;
use flow_common::db::event_triggers::{self as db, TriggerFields, TriggerRecord};
use flow_domain::audit::AuditAction;
use flow_domain::ids::{EventTriggerId, FlowId};
use flow_domain::{DayBound, Email, Invalid, Notes, Priority, TextRule, parse_date_input};
use serde_json::Value;

use super::cloudevent::{CloudEvent, MAX_ATTRIBUTE_CHARS};
use crate::{Acting, Context, ServiceError};

pub use flow_domain::enrollment::MAX_DUE_DAYS;

/// Most triggers an organization may have.
pub const MAX_TRIGGERS: i64 = 100;

/// Longest JSON Pointer (`userEmailPointer`, `due.fromPointer`), in characters.
pub const MAX_POINTER_CHARS: usize = 256;

/// What a trigger does to the person an event names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Assign the flow (once per event and trigger).
    Assign,
    /// Cancel the person's open assignment of the flow.
    Cancel,
}

impl Action {
    /// The name in the API and the database.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Assign => "assign",
            Self::Cancel => "cancel",
        }
    }

    fn parse(text: &str) -> Option<Self> {
        match text {
            "assign" => Some(Self::Assign),
            "cancel" => Some(Self::Cancel),
            _ => None,
        }
    }
}

/// How a trigger matches an event's `type`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TypeMatch {
    /// The type is exactly this.
    Exact(String),
    /// The type starts with this.
    Prefix(String),
}

/// When an assignment a trigger makes is due.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Due {
    /// This many days after the event is received.
    Days(i32),
    /// At the date (`YYYY-MM-DD`, the end of that day in the organization's time zone) or
    /// RFC 3339 timestamp found at this pointer in the event.
    FromPointer(String),
}

/// A valid trigger.
#[derive(Debug, Clone)]
pub struct Trigger {
    /// Identifier.
    pub id: EventTriggerId,
    /// Name.
    pub name: String,
    /// The type it matches.
    pub type_match: TypeMatch,
    /// The source it matches, when set.
    pub source: Option<String>,
    /// Where the person's e-mail is in the event.
    pub email_pointer: String,
    /// What it does.
    pub action: Action,
    /// The flow.
    pub flow_id: FlowId,
    /// The flow's name (filled in from the flow).
    pub flow_name: String,
    /// The due date of its assignments.
    pub due: Option<Due>,
    /// The priority of its assignments.
    pub priority: Priority,
    /// The notes of its assignments.
    pub notes: Option<String>,
}

/// A trigger as a surface received it, before validation.
#[derive(Debug, Clone, Default)]
pub struct TriggerInput {
    /// Name: one line, at most 200 characters. Required.
    pub name: Option<String>,
    /// The exact type to match (or `match_type_prefix`, one of the two).
    pub match_type: Option<String>,
    /// The prefix of the type to match.
    pub match_type_prefix: Option<String>,
    /// The source to match.
    pub match_source: Option<String>,
    /// JSON Pointer to the e-mail. Required.
    pub user_email_pointer: Option<String>,
    /// `assign` or `cancel`. Required.
    pub action: Option<String>,
    /// The flow. Required.
    pub flow_id: Option<String>,
    /// Days to the due date (assign only).
    pub due_days: Option<i32>,
    /// Pointer to the due date (assign only).
    pub due_from_pointer: Option<String>,
    /// low, medium (default) or high (assign only).
    pub priority: Option<String>,
    /// Notes of each assignment (assign only).
    pub notes: Option<String>,
}

/// Checks a JSON Pointer (RFC 6901): empty (the whole event) or `/`-separated tokens, `~` only
/// as `~0` or `~1`, at most [`MAX_POINTER_CHARS`].
pub(crate) fn parse_pointer(field: &str, text: &str) -> Result<String, Invalid> {
    if text.chars().count() > MAX_POINTER_CHARS {
        return Err(Invalid(format!(
            "{field} must be at most {MAX_POINTER_CHARS} characters"
        )));
    }
    let escapes_ok = text
        .split('~')
        .skip(1)
        .all(|rest| rest.starts_with('0') || rest.starts_with('1'));
    if !text.starts_with('/') || !escapes_ok || text.chars().any(char::is_control) {
        return Err(Invalid(format!(
            "{field} must be a JSON Pointer (RFC 6901) such as \"/data/email\""
        )));
    }
    Ok(text.to_owned())
}

/// Checks a match attribute: non-empty when given, one line, at most [`MAX_ATTRIBUTE_CHARS`].
fn parse_attribute(field: &str, text: Option<String>) -> Result<Option<String>, Invalid> {
    let Some(text) = text else { return Ok(None) };
    let rule = TextRule {
        max_chars: MAX_ATTRIBUTE_CHARS,
        multiline: false,
    };
    let text = rule.parse(field, &text)?;
    if text.is_empty() {
        return Err(Invalid(format!("{field} must not be empty")));
    }
    Ok(Some(text))
}

/// Validates a surface's input; the flow is checked against the organization separately.
pub fn parse(id: EventTriggerId, input: TriggerInput) -> Result<Trigger, ServiceError> {
    let name = TextRule::NAME.parse("name", input.name.as_deref().unwrap_or(""))?;
    if name.is_empty() {
        return Err(Invalid::new("name is required").into());
    }
    let type_match = match (
        parse_attribute("match.type", input.match_type)?,
        parse_attribute("match.typePrefix", input.match_type_prefix)?,
    ) {
        (Some(exact), None) => TypeMatch::Exact(exact),
        (None, Some(prefix)) => TypeMatch::Prefix(prefix),
        _ => {
            return Err(Invalid::new("match needs exactly one of type and typePrefix").into());
        }
    };
    let source = parse_attribute("match.source", input.match_source)?;
    let email_pointer = parse_pointer(
        "userEmailPointer",
        input
            .user_email_pointer
            .as_deref()
            .ok_or_else(|| Invalid::new("userEmailPointer is required"))?,
    )?;
    let action = match input.action.as_deref() {
        None => return Err(Invalid::new("action is required (assign or cancel)").into()),
        Some(text) => Action::parse(text)
            .ok_or_else(|| Invalid::new("action must be one of: assign, cancel"))?,
    };
    let flow_text = input.flow_id.unwrap_or_default();
    if flow_text.trim().is_empty() {
        return Err(Invalid::new("flowId is required").into());
    }
    // An id that does not parse names no flow: 404, as for an assign.
    let flow_id = FlowId::parse(flow_text.trim()).ok_or(ServiceError::NotFound("flow"))?;
    let due = match (input.due_days, input.due_from_pointer) {
        (None, None) => None,
        (Some(_), Some(_)) => {
            return Err(Invalid::new("due takes one of days and fromPointer").into());
        }
        (Some(days), None) if !(1..=MAX_DUE_DAYS).contains(&days) => {
            return Err(Invalid(format!("due.days must be between 1 and {MAX_DUE_DAYS}")).into());
        }
        (Some(days), None) => Some(Due::Days(days)),
        (None, Some(pointer)) => Some(Due::FromPointer(parse_pointer(
            "due.fromPointer",
            &pointer,
        )?)),
    };
    let priority = match input.priority.as_deref() {
        None => Priority::default(),
        Some(text) => Priority::parse_field("priority", text)?,
    };
    let notes = input
        .notes
        .map(|notes| Notes::parse("notes", notes).map(Notes::into_inner))
        .transpose()?
        .filter(|notes| !notes.is_empty());
    if action == Action::Cancel && (due.is_some() || notes.is_some() || input.priority.is_some()) {
        return Err(Invalid::new("due, priority and notes apply to the assign action only").into());
    }
    Ok(Trigger {
        id,
        name,
        type_match,
        source,
        email_pointer,
        action,
        flow_id,
        flow_name: String::new(),
        due,
        priority,
        notes,
    })
}

/// Reads a stored trigger (an unreadable one is an internal error: written by hand, or by a
/// newer build).
pub fn from_record(record: &TriggerRecord) -> Result<Trigger, ServiceError> {
    let corrupt = |field: &str| {
        ServiceError::Internal(anyhow::anyhow!(
            "event trigger {} has an unreadable {field}",
            record.id
        ))
    };
    Ok(Trigger {
        id: record.id,
        name: record.name.clone(),
        type_match: match (&record.match_type, &record.match_type_prefix) {
            (Some(exact), _) => TypeMatch::Exact(exact.clone()),
            (None, Some(prefix)) => TypeMatch::Prefix(prefix.clone()),
            (None, None) => return Err(corrupt("match")),
        },
        source: record.match_source.clone(),
        email_pointer: record.email_pointer.clone(),
        action: Action::parse(&record.action).ok_or_else(|| corrupt("action"))?,
        flow_id: record.flow_id,
        flow_name: record.flow_name.clone(),
        due: match (record.due_days, &record.due_pointer) {
            (Some(days), _) => Some(Due::Days(days)),
            (None, Some(pointer)) => Some(Due::FromPointer(pointer.clone())),
            (None, None) => None,
        },
        priority: Priority::parse_field("priority", &record.priority)
            .map_err(|_| corrupt("priority"))?,
        notes: record.notes.clone(),
    })
}

/// The trigger's columns.
fn fields(trigger: &Trigger) -> TriggerFields {
    let (match_type, match_type_prefix) = match &trigger.type_match {
        TypeMatch::Exact(exact) => (Some(exact.clone()), None),
        TypeMatch::Prefix(prefix) => (None, Some(prefix.clone())),
    };
    let (due_days, due_pointer) = match &trigger.due {
        None => (None, None),
        Some(Due::Days(days)) => (Some(*days), None),
        Some(Due::FromPointer(pointer)) => (None, Some(pointer.clone())),
    };
    TriggerFields {
        name: trigger.name.clone(),
        match_type,
        match_type_prefix,
        match_source: trigger.source.clone(),
        email_pointer: trigger.email_pointer.clone(),
        action: trigger.action.as_str(),
        flow_id: trigger.flow_id,
        due_days,
        due_pointer,
        priority: trigger.priority.as_str().to_owned(),
        notes: trigger.notes.clone(),
    }
}

impl Trigger {
    /// Whether the trigger matches the event's type and source.
    pub fn matches(&self, event: &CloudEvent) -> bool {
        let type_matches = match &self.type_match {
            TypeMatch::Exact(exact) => event.event_type == *exact,
            TypeMatch::Prefix(prefix) => event.event_type.starts_with(prefix.as_str()),
        };
        type_matches
            && self
                .source
                .as_ref()
                .is_none_or(|source| event.source == *source)
    }

    /// The person's e-mail in the event, or why there is none.
    fn email(&self, event: &CloudEvent) -> Result<Email, String> {
        let pointer = &self.email_pointer;
        match event.at(pointer) {
            None | Some(Value::Null) => Err(format!(
                "trigger \"{}\": no e-mail at {pointer} in the event",
                self.name
            )),
            Some(Value::String(text)) => Email::parse(pointer, text)
                .map_err(|problem| format!("trigger \"{}\": {problem}", self.name)),
            Some(_) => Err(format!(
                "trigger \"{}\": the value at {pointer} is not a string",
                self.name
            )),
        }
    }

    /// The due date of the assignment for the event received at `now`, or why it cannot be
    /// read; it must be in the future.
    fn due_at(
        &self,
        event: &CloudEvent,
        zone: chrono_tz::Tz,
        now: DateTime<Utc>,
    ) -> Result<Option<DateTime<Utc>>, String> {
        let due = match &self.due {
            None => return Ok(None),
            Some(Due::Days(days)) => now + chrono::Duration::days(i64::from(*days)),
            Some(Due::FromPointer(pointer)) => {
                let Some(Value::String(text)) = event.at(pointer) else {
                    return Err(format!(
                        "trigger \"{}\": no date at {pointer} in the event",
                        self.name
                    ));
                };
                parse_date_input(pointer, text, zone, DayBound::End)
                    .map_err(|problem| format!("trigger \"{}\": {problem}", self.name))?
            }
        };
        if due <= now {
            return Err(format!(
                "trigger \"{}\": the due date {} is not in the future",
                self.name,
                flow_domain::format_timestamp(due)
            ));
        }
        Ok(Some(due))
    }
}

/// What a matching trigger would do for an event.
#[derive(Debug, Clone)]
pub struct Planned<'t> {
    /// The trigger.
    pub trigger: &'t Trigger,
    /// The person's e-mail, from the event.
    pub email: Email,
    /// The assignment's due date.
    pub due_at: Option<DateTime<Utc>>,
}

/// What the triggers make of an event.
#[derive(Debug, Clone)]
pub enum Evaluation<'t> {
    /// No trigger matches it.
    Ignored,
    /// A matching trigger cannot act on it (no e-mail, a bad due date): nothing acts.
    Invalid(String),
    /// What each matching trigger does, in trigger order.
    Matched(Vec<Planned<'t>>),
}

/// Runs an event received at `now` through `triggers` (dates read in `zone`).
pub fn evaluate<'t>(
    triggers: &'t [Trigger],
    event: &CloudEvent,
    zone: chrono_tz::Tz,
    now: DateTime<Utc>,
) -> Evaluation<'t> {
    let mut planned = Vec::new();
    for trigger in triggers.iter().filter(|trigger| trigger.matches(event)) {
        let email = match trigger.email(event) {
            Ok(email) => email,
            Err(reason) => return Evaluation::Invalid(reason),
        };
        let due_at = match trigger.due_at(event, zone, now) {
            Ok(due_at) => due_at,
            Err(reason) => return Evaluation::Invalid(reason),
        };
        planned.push(Planned {
            trigger,
            email,
            due_at,
        });
    }
    if planned.is_empty() {
        Evaluation::Ignored
    } else {
        Evaluation::Matched(planned)
    }
}

/// The organization's triggers, in creation order.
pub async fn all(ctx: &Context, acting: Acting<'_>) -> Result<Vec<Trigger>, ServiceError> {
    db::list(&ctx.db, acting.org_id(), None, MAX_TRIGGERS)
        .await?
        .iter()
        .map(from_record)
        .collect()
}

/// Checks that the trigger's flow is the organization's and, for one that assigns, takes new
/// assignments (409 for an archived flow).
async fn check_flow(
    ctx: &Context,
    acting: Acting<'_>,
    trigger: &Trigger,
) -> Result<(), ServiceError> {
    let flow = ctx
        .caches
        .flow(&ctx.db, acting.org_id(), trigger.flow_id)
        .await?
        .ok_or(ServiceError::NotFound("flow"))?;
    if flow.archived && trigger.action == Action::Assign {
        return Err(ServiceError::Conflict(format!(
            "flow \"{}\" is archived and takes no new assignments, so a trigger cannot assign \
             it; unarchive it (PATCH /v1/flows/{{id}} {{\"archived\": false}}) first",
            flow.name
        )));
    }
    Ok(())
}

/// A page of the organization's triggers, after `after` when given.
pub async fn list(
    ctx: &Context,
    acting: Acting<'_>,
    after: Option<EventTriggerId>,
    limit: i64,
) -> Result<Vec<TriggerRecord>, ServiceError> {
    Ok(db::list(&ctx.db, acting.org_id(), after, limit).await?)
}

/// One trigger.
pub async fn get(
    ctx: &Context,
    acting: Acting<'_>,
    id: EventTriggerId,
) -> Result<TriggerRecord, ServiceError> {
    db::get(&ctx.db, acting.org_id(), id)
        .await?
        .ok_or(ServiceError::NotFound("event trigger"))
}

/// Creates a trigger; it acts on events received from now on. An organization has at most
/// [`MAX_TRIGGERS`] (409 past it).
pub async fn create(
    ctx: &Context,
    acting: Acting<'_>,
    input: TriggerInput,
) -> Result<TriggerRecord, ServiceError> {
    let trigger = parse(EventTriggerId::new(), input)?;
    check_flow(ctx, acting, &trigger).await?;
    let org_id = acting.org_id();
    let mut transaction = ctx.db.begin().await?;
    // One creation at a time per organization, so the cap holds under concurrent requests.
    sqlx::query("SELECT id FROM organizations WHERE id = $1 FOR UPDATE")
        .bind(org_id)
        .execute(&mut *transaction)
        .await?;
    if db::count(&mut *transaction, org_id).await? >= MAX_TRIGGERS {
        return Err(ServiceError::Conflict(format!(
            "an organization has at most {MAX_TRIGGERS} event triggers; delete one first"
        )));
    }
    let record = db::create(&mut transaction, org_id, &fields(&trigger)).await?;
    audit::record(
        &mut *transaction,
        org_id,
        acting.actor,
        AuditAction::EventTriggerCreated,
        &record.id.to_string(),
        &record.name,
    )
    .await?;
    transaction.commit().await?;
    tracing::info!(trigger_id = %record.id, "event trigger created");
    Ok(record)
}

/// Replaces a trigger's fields; events already received are not evaluated again.
pub async fn update(
    ctx: &Context,
    acting: Acting<'_>,
    id: EventTriggerId,
    input: TriggerInput,
) -> Result<TriggerRecord, ServiceError> {
    let trigger = parse(id, input)?;
    check_flow(ctx, acting, &trigger).await?;
    let org_id = acting.org_id();
    let mut transaction = ctx.db.begin().await?;
    if !db::update(&mut transaction, org_id, id, &fields(&trigger)).await? {
        return Err(ServiceError::NotFound("event trigger"));
    }
    audit::record(
        &mut *transaction,
        org_id,
        acting.actor,
        AuditAction::EventTriggerUpdated,
        &id.to_string(),
        &trigger.name,
    )
    .await?;
    let record = db::get(&mut *transaction, org_id, id)
        .await?
        .ok_or(ServiceError::NotFound("event trigger"))?;
    transaction.commit().await?;
    Ok(record)
}

/// Deletes a trigger; what it made stays.
pub async fn delete(
    ctx: &Context,
    acting: Acting<'_>,
    id: EventTriggerId,
) -> Result<(), ServiceError> {
    let org_id = acting.org_id();
    let mut transaction = ctx.db.begin().await?;
    if !db::delete(&mut *transaction, org_id, id).await? {
        return Err(ServiceError::NotFound("event trigger"));
    }
    audit::record(
        &mut *transaction,
        org_id,
        acting.actor,
        AuditAction::EventTriggerDeleted,
        &id.to_string(),
        "",
    )
    .await?;
    transaction.commit().await?;
    Ok(())
}
