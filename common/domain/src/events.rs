//! Lifecycle events (README §Lifecycle and events): their types, the body every consumer
//! receives (its `data` built from one snapshot of the assignment, taken in the transaction that
//! changed it) and the messages that carry them.

use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::format_timestamp;
use crate::ids::{AssignmentId, EnrollmentRuleId, EventId, FlowId, OrgId, WebhookEndpointId};

string_enum!(
    /// The kind of a lifecycle event; also its routing key on the events exchange.
    EventType {
        /// A flow was assigned.
        Assigned => "flow.assigned",
        /// The assignee started the flow (first module activity).
        Started => "flow.started",
        /// Every module was completed.
        Completed => "flow.completed",
        /// The due date passed before completion.
        Overdue => "flow.overdue",
        /// The due date, priority or notes were changed (`data.changed` says which, from what to
        /// what).
        Updated => "flow.updated",
        /// The assignment was cancelled before completion (`data.reason` when one was given).
        Cancelled => "flow.cancelled",
        /// A reminder of the flow's policy: due soon, overdue, or an escalation to the manager
        /// (`data.reminder`).
        Reminder => "flow.reminder",
        /// A completion's renewal window opened: its renewal assignment is made (`data.expiry`).
        Expiring => "flow.expiring",
        /// A completion's validity lapsed without a renewal completed in time (`data.expiry`).
        Expired => "flow.expired",
    }
);

impl EventType {
    /// What happened, in a sentence's words (the OpenAPI summary of its webhook).
    pub fn summary(self) -> &'static str {
        match self {
            Self::Assigned => "A flow was assigned",
            Self::Started => "The assignee started the flow (first module activity)",
            Self::Completed => "Every module of the flow was completed",
            Self::Overdue => "The due date passed before completion",
            Self::Updated => "The assignment's due date, priority or notes were changed",
            Self::Cancelled => "The assignment was cancelled before completion",
            Self::Reminder => {
                "A reminder: the due date is near, passed, or passed long enough to escalate"
            }
            Self::Expiring => "A completion's renewal window opened and its renewal was assigned",
            Self::Expired => "A completion's validity lapsed without a renewal completed in time",
        }
    }
}

/// Type of the ping sent by `POST /v1/webhooks/{id}/test`; never published on the exchange.
pub const TEST_EVENT_TYPE: &str = "webhook.test";

/// AMQP `type` of an event message.
pub const EVENT_KIND: &str = "event";

/// AMQP header carrying the organization of an event (the body is what customers receive, so the
/// tenant travels beside it).
pub const ORG_HEADER: &str = "flow-org-id";

/// What a `flow.*` event says about its assignment: the `data` of the body, as of the change.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct EventData {
    /// The assignment.
    pub assignment_id: AssignmentId,
    /// Its flow.
    pub flow_id: FlowId,
    /// The flow's name.
    pub flow_name: String,
    /// The assignee's e-mail.
    pub assignee_email: String,
    /// Status after the change: pending, in_progress, completed, overdue or cancelled.
    #[schema(examples("completed"))]
    pub status: String,
    /// When it was assigned.
    #[schema(format = DateTime)]
    pub assigned_at: String,
    /// When it is due, if it has a due date.
    #[schema(format = DateTime)]
    pub due_date: Option<String>,
    /// First module activity.
    #[schema(format = DateTime)]
    pub started_at: Option<String>,
    /// Completion.
    #[schema(format = DateTime)]
    pub completed_at: Option<String>,
    /// low, medium or high.
    #[schema(examples("high"))]
    pub priority: String,
    /// What made the assignment, when not a direct assign: present only on the `flow.assigned`
    /// event of an assignment an enrollment rule or an inbound event's trigger made (additive:
    /// absent otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub source: Option<EventSource>,
    /// What a `flow.updated` changed: each changed field (`dueDate`, `priority`, `notes`) with
    /// its value before and after, `{"dueDate": {"from": …, "to": …}}` (present only on
    /// `flow.updated`).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false, value_type = Option<Object>)]
    pub changed: Option<serde_json::Map<String, Value>>,
    /// Why it was cancelled, as the canceller said (present only on a `flow.cancelled` with a
    /// reason).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub reason: Option<String>,
    /// What a `flow.reminder` is (present only on `flow.reminder`).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub reminder: Option<ReminderData>,
    /// The completion's expiry (present only on `flow.expiring` and `flow.expired`).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub expiry: Option<ExpiryData>,
}

/// The `data.expiry` of a `flow.expiring` or `flow.expired` event.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExpiryData {
    /// When the completion expires (completion + the flow's validity, in the organization's
    /// time zone).
    #[schema(format = DateTime)]
    pub expires_at: String,
    /// The renewal assignment (due at `expiresAt`), when one was made.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub renewal_assignment_id: Option<AssignmentId>,
}

/// The `data.reminder` of a `flow.reminder` event.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReminderData {
    /// due_soon, overdue or escalation.
    #[schema(examples("due_soon"))]
    pub kind: String,
    /// Days before (due_soon) or after (overdue, escalation) the due date.
    pub offset_days: i32,
    /// The assignee's manager as their identity provider names them (SCIM enterprise
    /// `manager`), when known; an escalation is meant for them.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub manager: Option<ManagerRef>,
}

/// A manager, as SCIM names them.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ManagerRef {
    /// Their id at the identity provider (`manager.value`).
    pub id: String,
    /// Their name (`manager.displayName`), when sent.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub name: Option<String>,
}

/// What made an assignment (`data.source` of its `flow.assigned` event): an enrollment rule or
/// an inbound event, one of the two.
#[derive(Debug, Clone, Default, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct EventSource {
    /// The enrollment rule that assigned it (`GET /v1/enrollment-rules/{id}`).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub enrollment_rule_id: Option<EnrollmentRuleId>,
    /// The inbound event whose trigger assigned it (`POST /v1/events`, docs/events.md).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub event: Option<InboundEventRef>,
}

impl EventSource {
    /// The source of an assignment made by `rule` or by an inbound event; none for a direct
    /// assign.
    pub fn of(rule: Option<EnrollmentRuleId>, event: Option<InboundEventRef>) -> Option<Self> {
        (rule.is_some() || event.is_some()).then_some(Self {
            enrollment_rule_id: rule,
            event,
        })
    }
}

/// The inbound event (CloudEvents `source`, `type` and `id`) and the event trigger that made an
/// assignment, as stored on it (`assignments.event_source`) and shown in `source.event`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct InboundEventRef {
    /// The event's `source`.
    #[schema(examples("https://hr.example.com"))]
    pub source: String,
    /// The event's `type`.
    #[serde(rename = "type")]
    #[schema(examples("com.example.hr.employee.hired"))]
    pub event_type: String,
    /// The event's `id`.
    pub id: String,
    /// The trigger that matched it (`GET /v1/event-triggers/{id}`).
    pub trigger_id: crate::ids::EventTriggerId,
}

/// The `data` of the `webhook.test` ping (`POST /v1/webhooks/{id}/test`).
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TestEventData {
    /// The endpoint pinged.
    pub webhook_id: WebhookEndpointId,
    /// A fixed sentence.
    #[schema(examples("This is a test event from Flow."))]
    pub message: String,
}

/// An event body, exactly as webhook endpoints receive it: `{id, type, timestamp, data}`.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
pub struct EventBody<D> {
    /// Event id, the same on every delivery of the event (also in the `webhook-id` header):
    /// dedupe on it.
    pub id: EventId,
    /// flow.assigned, flow.started, flow.completed, flow.overdue, flow.updated, flow.cancelled,
    /// flow.reminder, flow.expiring, flow.expired or webhook.test.
    #[serde(rename = "type")]
    #[schema(examples("flow.completed"))]
    pub event_type: String,
    /// When the change happened.
    #[schema(format = DateTime)]
    pub timestamp: String,
    /// What the event is about.
    pub data: D,
}

/// A whole event body: `{id, type, timestamp, data}`.
pub fn event_body<D: serde::Serialize>(
    id: EventId,
    kind: &str,
    at: DateTime<Utc>,
    data: D,
) -> Value {
    to_json(&EventBody {
        id,
        event_type: kind.to_owned(),
        timestamp: format_timestamp(at),
        data,
    })
}

/// Events hold strings, ids and JSON values only, which always serialize.
fn to_json(value: &impl serde::Serialize) -> Value {
    serde_json::to_value(value).unwrap_or(Value::Null)
}

/// Which occurrence of a transition an event is: what its id is derived from, so writing the same
/// transition twice writes one event while a transition that may recur (an assignment overdue
/// again after its due date moved; each change) gets an id of its own each time. Erasure derives
/// the ids of a person's events the same way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    /// A transition that happens once to an assignment (assigned, started, completed, cancelled,
    /// and the first overdue).
    Once(EventType),
    /// `flow.overdue` after the due date was changed `due_changes` (≥ 1) times.
    OverdueAgain {
        /// How many times the due date had been changed.
        due_changes: i32,
    },
    /// The `flow.updated` of the change with this id.
    Change(uuid::Uuid),
    /// The `flow.reminder` of this kind and offset for the due date `due_micros` (microseconds
    /// since the epoch).
    Reminder {
        /// Its kind.
        kind: crate::reminders::ReminderKind,
        /// Its offset in days.
        offset_days: i32,
        /// The due date it is about.
        due_micros: i64,
    },
}

impl Transition {
    /// The text the event id is derived from: the type alone for a transition that happens once
    /// (so ids of events written before recurring transitions existed are unchanged).
    pub fn key(self) -> String {
        match self {
            Self::Once(event_type) => event_type.as_str().to_owned(),
            Self::OverdueAgain { due_changes } => {
                format!("{}#{due_changes}", EventType::Overdue.as_str())
            }
            Self::Change(id) => format!("{}#{}", EventType::Updated.as_str(), id.simple()),
            Self::Reminder {
                kind,
                offset_days,
                due_micros,
            } => format!(
                "{}#{}#{offset_days}#{due_micros}",
                EventType::Reminder.as_str(),
                kind.as_str()
            ),
        }
    }

    /// The overdue transition of an assignment whose due date was changed `due_changes` times.
    pub fn overdue(due_changes: i32) -> Self {
        if due_changes <= 0 {
            Self::Once(EventType::Overdue)
        } else {
            Self::OverdueAgain { due_changes }
        }
    }
}

/// An event about to be written to the outbox.
#[derive(Debug, Clone)]
pub struct NewEvent {
    /// Event id (the `webhook-id` customers dedupe on).
    pub id: EventId,
    /// Organization.
    pub org_id: OrgId,
    /// Type.
    pub event_type: EventType,
    /// The assignment it is about.
    pub assignment_id: AssignmentId,
    /// The body.
    pub body: Value,
    /// W3C trace context of the work that caused the event (the request of its command, or a
    /// scheduler scan): its publication and webhook deliveries continue that trace.
    pub traceparent: Option<String>,
}

impl NewEvent {
    /// The event of type `event_type` about the assignment `data` describes (of organization
    /// `org_id`, assigned at `assigned_at`), happening at `at`, caused by the work whose trace
    /// context is `traceparent`. Its id is derived from the assignment and the type (see
    /// [`EventId::for_transition`]).
    pub fn about(
        org_id: OrgId,
        data: EventData,
        assigned_at: DateTime<Utc>,
        event_type: EventType,
        at: DateTime<Utc>,
        traceparent: Option<&str>,
    ) -> Self {
        let key = Transition::Once(event_type).key();
        Self::keyed(org_id, data, assigned_at, event_type, &key, at, traceparent)
    }

    /// [`NewEvent::about`] for a transition that may happen more than once to an assignment: its
    /// id is derived from `key` (see [`Transition::key`]) instead of the type alone.
    pub fn keyed(
        org_id: OrgId,
        data: EventData,
        assigned_at: DateTime<Utc>,
        event_type: EventType,
        key: &str,
        at: DateTime<Utc>,
        traceparent: Option<&str>,
    ) -> Self {
        let assignment_id = data.assignment_id;
        let id = EventId::for_transition(assignment_id, key, assigned_at);
        Self {
            id,
            org_id,
            event_type,
            assignment_id,
            body: event_body(id, event_type.as_str(), at, data),
            traceparent: traceparent.map(str::to_owned),
        }
    }
}

/// AMQP `type` of a message holding an [`EventBatch`].
pub const EVENT_BATCH_KIND: &str = "event.batch";

/// Current version of [`EventBatch`].
pub const EVENT_BATCH_VERSION: u16 = 1;

/// Most events in one [`EventBatch`] message. Small enough that a consumer's prefetch, which
/// counts messages, also bounds the events it holds (the webhook-worker's 256 messages: 8,192
/// events), and large enough that a bulk load still goes out in a few messages per transaction.
pub const MAX_EVENTS_PER_MESSAGE: usize = 32;

/// Several events of one type in one message of the events exchange (routing key: their type).
/// The relay publishes what it claims in one transaction this way, so the broker stores, confirms,
/// delivers and has acked one message for many events; a lone event still goes out as itself
/// (type [`EVENT_KIND`], the organization in [`ORG_HEADER`], its trace context in the
/// `traceparent` header). `B` is how an event body is held: a [`Value`] to look into, or the
/// relay's and webhook-worker's raw JSON text, which pass bodies through without building a tree.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct EventBatch<B = Value> {
    /// Message schema version.
    pub version: u16,
    /// The events, each with its organization.
    pub events: Vec<BatchedEvent<B>>,
}

/// One event of an [`EventBatch`].
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct BatchedEvent<B = Value> {
    /// The organization the event belongs to.
    pub org_id: OrgId,
    /// The event body, exactly as customers receive it.
    pub event: B,
    /// W3C trace context of the work that caused the event. Each event carries its own: the
    /// message's header names only one trace, and the events of a batch come from many requests.
    /// Absent in batches published before it existed, and for untraced events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
}

/// The codec of the events queues: [`encode_event_message`] is what the outbox relay publishes,
/// [`decode_event_message`] what the webhook-worker reads back, side by side so the two cannot
/// drift apart.
pub mod codec {
    use std::borrow::Cow;

    use chrono::{DateTime, Utc};
    use serde_json::value::RawValue;

    use super::{BatchedEvent, EVENT_BATCH_KIND, EVENT_BATCH_VERSION, EVENT_KIND, EventBatch};
    use crate::ids::{EventId, OrgId};

    /// An event to publish, as the outbox holds it.
    #[derive(Debug, Clone, Copy)]
    pub struct OutgoingEvent<'a> {
        /// Event id.
        pub event_id: EventId,
        /// Organization.
        pub org_id: OrgId,
        /// The body, the JSON text customers receive.
        pub payload: &'a RawValue,
        /// W3C trace context of the work that caused the event.
        pub traceparent: Option<&'a str>,
    }

    /// One message of an events exchange, ready to publish.
    #[derive(Debug, Clone)]
    pub struct EventMessage {
        /// AMQP `message-id`: the event id of a lone event; for a batch, stable across a retry of
        /// the same claim, so a republished batch is the same message.
        pub message_id: String,
        /// AMQP `type`: [`EVENT_KIND`] or [`EVENT_BATCH_KIND`].
        pub kind: &'static str,
        /// Body.
        pub body: Vec<u8>,
        /// The [`super::ORG_HEADER`] of a lone event.
        pub org: Option<String>,
        /// The `traceparent` header of a lone event (the trace of the work that caused it); a
        /// batch names the publisher's, and each of its events carries its own.
        pub traceparent: Option<String>,
    }

    /// Encodes `events` (at most [`super::MAX_EVENTS_PER_MESSAGE`], of one type) as one message:
    /// a lone event as itself (the body is what customers receive; organization and trace in
    /// headers), several as an [`EventBatch`]. `None` for no event.
    pub fn encode_event_message(
        events: &[OutgoingEvent<'_>],
    ) -> serde_json::Result<Option<EventMessage>> {
        match events {
            [] => Ok(None),
            [event] => Ok(Some(EventMessage {
                message_id: event.event_id.to_string(),
                kind: EVENT_KIND,
                body: event.payload.get().as_bytes().to_vec(),
                org: Some(event.org_id.to_string()),
                traceparent: event.traceparent.map(str::to_owned),
            })),
            [first, ..] => {
                let batch = EventBatch {
                    version: EVENT_BATCH_VERSION,
                    events: events
                        .iter()
                        .map(|event| BatchedEvent {
                            org_id: event.org_id,
                            event: event.payload,
                            traceparent: event.traceparent.map(str::to_owned),
                        })
                        .collect(),
                };
                Ok(Some(EventMessage {
                    message_id: format!("events-{}-{}", first.event_id, events.len()),
                    kind: EVENT_BATCH_KIND,
                    body: serde_json::to_vec(&batch)?,
                    org: None,
                    traceparent: None,
                }))
            }
        }
    }

    /// An event read from a message of an events queue.
    #[derive(Debug, Clone)]
    pub struct IncomingEvent {
        /// Event id.
        pub event_id: EventId,
        /// Organization.
        pub org_id: OrgId,
        /// Type.
        pub event_type: String,
        /// Body, the JSON text customers receive (passed through, never parsed into a tree).
        pub payload: Box<RawValue>,
        /// When the state change happened.
        pub event_at: DateTime<Utc>,
        /// W3C trace context of the work that caused the event, kept on its deliveries.
        pub traceparent: Option<String>,
    }

    /// Reads an event message from its AMQP `type`, its organization and `traceparent` headers
    /// and its body. Each event keeps the trace of the work that caused it: a lone event's is the
    /// header, a batched event carries its own (an event without one, such as those of batches
    /// published before events carried it, continues the header's: the relay's). The error says
    /// why the message can never be read (it is dead-lettered).
    pub fn decode_event_message(
        kind: Option<&str>,
        org_header: Option<&str>,
        traceparent: Option<&str>,
        body: &[u8],
    ) -> Result<Vec<IncomingEvent>, String> {
        if kind == Some(EVENT_BATCH_KIND) {
            let batch: EventBatch<Box<RawValue>> = serde_json::from_slice(body)
                .map_err(|error| format!("malformed event batch: {error}"))?;
            if batch.version != EVENT_BATCH_VERSION {
                return Err(format!(
                    "unsupported event batch version {} (this build handles {EVENT_BATCH_VERSION})",
                    batch.version
                ));
            }
            return batch
                .events
                .into_iter()
                .map(|batched| {
                    let traceparent = batched
                        .traceparent
                        .or_else(|| traceparent.map(str::to_owned));
                    incoming(batched.event, batched.org_id, traceparent)
                })
                .collect();
        }
        let payload: Box<RawValue> =
            serde_json::from_slice(body).map_err(|error| format!("malformed event: {error}"))?;
        let org_id = org_header
            .and_then(OrgId::parse)
            .ok_or("event without its organization header")?;
        Ok(vec![incoming(
            payload,
            org_id,
            traceparent.map(str::to_owned),
        )?])
    }

    /// The fields of an event body the webhook-worker reads (the rest passes through as text).
    #[derive(serde::Deserialize)]
    struct EventHead<'a> {
        #[serde(borrow)]
        id: Cow<'a, str>,
        #[serde(borrow, rename = "type")]
        event_type: Cow<'a, str>,
        #[serde(borrow)]
        timestamp: Cow<'a, str>,
    }

    /// An event body of organization `org_id`, checked.
    fn incoming(
        payload: Box<RawValue>,
        org_id: OrgId,
        traceparent: Option<String>,
    ) -> Result<IncomingEvent, String> {
        let head: EventHead<'_> = serde_json::from_str(payload.get())
            .map_err(|error| format!("malformed event: {error}"))?;
        let event_id = EventId::parse(&head.id).ok_or("malformed event: bad id")?;
        let event_type = head.event_type.into_owned();
        let event_at = DateTime::parse_from_rfc3339(&head.timestamp)
            .map_err(|_| "malformed event: bad timestamp")?
            .with_timezone(&Utc);
        Ok(IncomingEvent {
            event_id,
            org_id,
            event_type,
            payload,
            event_at,
            traceparent,
        })
    }

    #[cfg(test)]
    mod tests {
        use chrono::Utc;

        use super::*;
        use crate::events::event_body;

        fn body(event_id: EventId) -> Box<RawValue> {
            serde_json::value::to_raw_value(&event_body(
                event_id,
                "flow.assigned",
                Utc::now(),
                serde_json::json!({}),
            ))
            .expect("json")
        }

        /// What the webhook-worker reads back from a message the relay publishes, with `header`
        /// as the message's `traceparent` header when the relay names none (the publisher's span).
        fn round_trip(events: &[OutgoingEvent<'_>], header: &str) -> Vec<Option<String>> {
            let message = encode_event_message(events)
                .expect("encodes")
                .expect("a message");
            let decoded = decode_event_message(
                Some(message.kind),
                message.org.as_deref(),
                Some(message.traceparent.as_deref().unwrap_or(header)),
                &message.body,
            )
            .expect("decodes");
            let ids: Vec<EventId> = decoded.iter().map(|event| event.event_id).collect();
            let sent: Vec<EventId> = events.iter().map(|event| event.event_id).collect();
            assert_eq!(ids, sent, "every event, in order");
            for (got, sent) in decoded.iter().zip(events) {
                assert_eq!(got.org_id, sent.org_id);
                assert_eq!(got.payload.get(), sent.payload.get());
            }
            decoded.into_iter().map(|event| event.traceparent).collect()
        }

        #[test]
        fn every_event_keeps_its_own_trace_through_the_codec() {
            let first = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
            let second = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
            let relay = "00-11111111111111111111111111111111-2222222222222222-01";
            let ids = [EventId::new(), EventId::new(), EventId::new()];
            let bodies: Vec<Box<RawValue>> = ids.iter().map(|id| body(*id)).collect();
            let event = |index: usize, traceparent| OutgoingEvent {
                event_id: ids[index],
                org_id: OrgId::new(),
                payload: &bodies[index],
                traceparent,
            };
            let (traced, other, untraced) = (
                event(0, Some(first)),
                event(1, Some(second)),
                event(2, None),
            );
            assert_eq!(
                round_trip(&[traced, other, untraced], relay),
                [
                    Some(first.to_owned()),
                    Some(second.to_owned()),
                    Some(relay.to_owned())
                ],
                "a batch carries each event's trace; one without continues the relay's"
            );
            assert_eq!(
                round_trip(&[traced], relay),
                [Some(first.to_owned())],
                "a lone event's header names its own trace"
            );
            assert_eq!(round_trip(&[untraced], relay), [Some(relay.to_owned())]);
            assert!(encode_event_message(&[]).expect("encodes").is_none());
        }

        #[test]
        fn batches_published_before_events_carried_their_trace_still_decode() {
            let event_id = EventId::new();
            let org_id = OrgId::new();
            let old = serde_json::json!({
                "version": EVENT_BATCH_VERSION,
                "events": [{ "orgId": org_id, "event": body(event_id) }],
            });
            let relay = "00-11111111111111111111111111111111-2222222222222222-01";
            let decoded = decode_event_message(
                Some(EVENT_BATCH_KIND),
                None,
                Some(relay),
                &serde_json::to_vec(&old).expect("json"),
            )
            .expect("an old batch decodes");
            assert_eq!(decoded.len(), 1);
            assert_eq!(decoded[0].event_id, event_id);
            assert_eq!(decoded[0].traceparent.as_deref(), Some(relay));
        }

        #[test]
        fn a_message_that_can_never_be_read_says_why() {
            let event_id = EventId::new();
            let payload = body(event_id);
            let lone = payload.get().as_bytes();
            assert!(
                decode_event_message(Some(EVENT_KIND), None, None, lone)
                    .unwrap_err()
                    .contains("organization")
            );
            let future = serde_json::json!({ "version": EVENT_BATCH_VERSION + 1, "events": [] });
            assert!(
                decode_event_message(
                    Some(EVENT_BATCH_KIND),
                    None,
                    None,
                    &serde_json::to_vec(&future).expect("json")
                )
                .unwrap_err()
                .contains("unsupported event batch version")
            );
        }
    }
}
