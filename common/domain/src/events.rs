//! Lifecycle events (README §Lifecycle and events): their types, the body every consumer
//! receives (its `data` built from one snapshot of the assignment, taken in the transaction that
//! changed it) and the messages that carry them.

use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::format_timestamp;
use crate::ids::{AssignmentId, EventId, FlowId, OrgId, WebhookEndpointId};

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
    /// Status after the change: pending, in_progress, completed or overdue.
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
    /// flow.assigned, flow.started, flow.completed, flow.overdue or webhook.test.
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
        let assignment_id = data.assignment_id;
        let id = EventId::for_transition(assignment_id, event_type.as_str(), assigned_at);
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
