//! Lifecycle events (README §Lifecycle and events): their types and the body every consumer receives, built from one
//! snapshot of the assignment taken in the transaction that changed it.

use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use sqlx::FromRow;

use crate::domain::format_timestamp;
use crate::ids::{AssignmentId, EventId, FlowId, OrgId};

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

/// Type of the ping sent by `POST /v1/webhooks/{id}/test`; never published on the exchange.
pub const TEST_EVENT_TYPE: &str = "webhook.test";

/// AMQP `type` of an event message.
pub const EVENT_KIND: &str = "event";

/// AMQP header carrying the organization of an event (the body is what customers receive, so the
/// tenant travels beside it).
pub const ORG_HEADER: &str = "flow-org-id";

/// The assignment as an event describes it.
#[derive(Debug, Clone, FromRow)]
pub struct AssignmentSnapshot {
    /// Assignment.
    pub id: AssignmentId,
    /// Owning organization.
    pub org_id: OrgId,
    /// Flow.
    pub flow_id: FlowId,
    /// Flow name.
    pub flow_name: String,
    /// Assignee e-mail.
    pub assignee_email: String,
    /// Status after the change.
    pub status: String,
    /// Priority.
    pub priority: String,
    /// Due date.
    pub due_at: Option<DateTime<Utc>>,
    /// Assignment time.
    pub assigned_at: DateTime<Utc>,
    /// First module activity.
    pub started_at: Option<DateTime<Utc>>,
    /// Completion.
    pub completed_at: Option<DateTime<Utc>>,
}

/// Columns of [`AssignmentSnapshot`] over `assignments a JOIN flows f JOIN users u`.
pub const SNAPSHOT_COLUMNS: &str = "a.id, a.org_id, a.flow_id, f.name AS flow_name, \
    u.email AS assignee_email, a.status, a.priority, a.due_at, a.assigned_at, a.started_at, \
    a.completed_at";

/// The `data` object of an event about `snapshot`.
pub fn event_data(snapshot: &AssignmentSnapshot) -> Value {
    json!({
        "assignmentId": snapshot.id.to_string(),
        "flowId": snapshot.flow_id.to_string(),
        "flowName": snapshot.flow_name,
        "assigneeEmail": snapshot.assignee_email,
        "status": snapshot.status,
        "assignedAt": format_timestamp(snapshot.assigned_at),
        "dueDate": snapshot.due_at.map(format_timestamp),
        "startedAt": snapshot.started_at.map(format_timestamp),
        "completedAt": snapshot.completed_at.map(format_timestamp),
        "priority": snapshot.priority,
    })
}

/// A whole event body: `{id, type, timestamp, data}`.
pub fn event_body(id: EventId, kind: &str, at: DateTime<Utc>, data: Value) -> Value {
    json!({
        "id": id.to_string(),
        "type": kind,
        "timestamp": format_timestamp(at),
        "data": data,
    })
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
}

impl NewEvent {
    /// The event of type `event_type` about `snapshot`, happening at `at`. Its id is derived from
    /// the assignment and the type (see [`EventId::for_transition`]).
    pub fn about(snapshot: &AssignmentSnapshot, event_type: EventType, at: DateTime<Utc>) -> Self {
        let id = EventId::for_transition(snapshot.id, event_type.as_str());
        Self {
            id,
            org_id: snapshot.org_id,
            event_type,
            assignment_id: snapshot.id,
            body: event_body(id, event_type.as_str(), at, event_data(snapshot)),
        }
    }
}

/// AMQP `type` of a message holding an [`EventBatch`].
pub const EVENT_BATCH_KIND: &str = "event.batch";

/// Current version of [`EventBatch`].
pub const EVENT_BATCH_VERSION: u16 = 1;

/// Most events in one [`EventBatch`] message.
pub const MAX_EVENTS_PER_MESSAGE: usize = 500;

/// Several events of one type in one message of the events exchange (routing key: their type).
/// The relay publishes what it claims in one transaction this way, so the broker stores, confirms,
/// delivers and has acked one message for many events; a lone event still goes out as itself
/// (type [`EVENT_KIND`], the organization in [`ORG_HEADER`]).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct EventBatch {
    /// Message schema version.
    pub version: u16,
    /// The events, each with its organization.
    pub events: Vec<BatchedEvent>,
}

/// One event of an [`EventBatch`].
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct BatchedEvent {
    /// The organization the event belongs to.
    pub org_id: OrgId,
    /// The event body, exactly as customers receive it.
    pub event: Value,
}
