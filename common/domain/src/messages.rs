//! Messages carried over RabbitMQ. Each is a versioned serde struct; consumers reject versions they
//! do not know (the message goes to the dead-letter queue, where an operator can replay it after an
//! upgrade) rather than guess.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::ids::{AssignmentId, FlowId, ModuleId, OrgId, ScheduleId, UserId};
use crate::{ModuleStatus, Priority};

/// Current version of [`AssignCommand`].
pub const ASSIGN_COMMAND_VERSION: u16 = 1;

/// Persist an assignment (queue `{prefix}.assign`). Published by the API once validated, and by
/// the scheduler for recurring schedules. Idempotent: the id is chosen by the publisher.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct AssignCommand {
    /// Message schema version.
    pub version: u16,
    /// The id handed to the caller.
    pub assignment_id: AssignmentId,
    /// When set, the caller was answered with this existing active assignment instead; the command
    /// only records `assignment_id` as an alias of it (so a retry of the same `X-Request-ID`
    /// answers the same) and creates nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub existing_assignment_id: Option<AssignmentId>,
    /// Owning organization.
    pub org_id: OrgId,
    /// Flow assigned.
    pub flow_id: FlowId,
    /// Flow name at assignment time (for the event payload).
    pub flow_name: String,
    /// Assignee.
    pub user_id: UserId,
    /// Assignee e-mail as stored (for the event payload).
    pub assignee_email: String,
    pub priority: Priority,
    /// Notes for the assignee.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notes: Option<String>,
    /// Due date.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub due_at: Option<DateTime<Utc>>,
    /// When the assignment was accepted.
    pub assigned_at: DateTime<Utc>,
    /// The caller's `X-Request-ID`, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    /// The schedule that produced this assignment, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule_id: Option<ScheduleId>,
    /// W3C trace context of the request that sent the command. It travels in the command, not
    /// only in the message header, because a message of several commands has one header while each
    /// command's `flow.assigned` event continues its own request's trace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
}

/// Why a message could not be decoded.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// Not JSON of the expected shape.
    #[error("malformed message: {0}")]
    Malformed(#[from] serde_json::Error),
    /// A version this build does not understand.
    #[error("unsupported message version {found} (this build handles {supported})")]
    UnsupportedVersion {
        /// Version in the message.
        found: u16,
        /// Version this build handles.
        supported: u16,
    },
}

/// Encodes and decodes the messages of the assign queues (`{prefix}.assign`, its bulk shards):
/// one [`AssignCommand`] alone (AMQP type [`ASSIGN_KIND`]), or an [`AssignBatch`] of several
/// ([`ASSIGN_BATCH_KIND`]). Every publisher (the API, the scheduler, the assign-worker splitting a
/// poisoned batch) encodes here and every consumer (the assign-worker, the dead-letter recorder)
/// decodes here.
impl AssignCommand {
    /// The payload of a message of AMQP type [`ASSIGN_KIND`], and an item of an [`AssignBatch`].
    pub fn encode(&self) -> Result<Vec<u8>, serde_json::Error> {
        serde_json::to_vec(self)
    }

    /// Decodes and checks the version.
    pub fn decode(payload: &[u8]) -> Result<Self, DecodeError> {
        let command: Self = serde_json::from_slice(payload)?;
        check_version(command.version, ASSIGN_COMMAND_VERSION)?;
        Ok(command)
    }
}

/// Refuses a version this build does not handle.
fn check_version(found: u16, supported: u16) -> Result<(), DecodeError> {
    if found == supported {
        Ok(())
    } else {
        Err(DecodeError::UnsupportedVersion { found, supported })
    }
}

/// AMQP `type` of a message holding one [`AssignCommand`].
pub const ASSIGN_KIND: &str = "assign";

/// AMQP `type` of a message holding an [`AssignBatch`].
pub const ASSIGN_BATCH_KIND: &str = "assign.batch";

/// Current version of [`AssignBatch`].
pub const ASSIGN_BATCH_VERSION: u16 = 1;

/// Several assign commands in one message: the API batches concurrent requests so the broker
/// stores and confirms one message for many of them. Each request is answered only once the
/// batch is confirmed.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct AssignBatch {
    /// Message schema version.
    pub version: u16,
    /// The commands, each applied as if it had come alone.
    pub commands: Vec<AssignCommand>,
}

impl AssignBatch {
    /// The payload of a message of AMQP type [`ASSIGN_BATCH_KIND`].
    pub fn encode(&self) -> Result<Vec<u8>, serde_json::Error> {
        serde_json::to_vec(self)
    }

    /// The payload of a batch (of the current version) of commands already encoded with
    /// [`AssignCommand::encode`]: the bytes [`AssignBatch::encode`] gives for those commands,
    /// without encoding each again (the API encodes a command in its request's task; the batcher
    /// gathers concurrent ones later). The batch publisher calls it for every message of two
    /// commands or more.
    pub fn envelope(commands: &[&[u8]]) -> Vec<u8> {
        let mut payload = Vec::with_capacity(
            commands
                .iter()
                .map(|command| command.len() + 1)
                .sum::<usize>()
                + 32,
        );
        payload.extend_from_slice(
            format!("{{\"version\":{ASSIGN_BATCH_VERSION},\"commands\":[").as_bytes(),
        );
        for (index, command) in commands.iter().enumerate() {
            if index > 0 {
                payload.push(b',');
            }
            payload.extend_from_slice(command);
        }
        payload.extend_from_slice(b"]}");
        payload
    }

    /// Decodes a batch and checks its version and every command's.
    pub fn decode(payload: &[u8]) -> Result<Self, DecodeError> {
        let batch: Self = serde_json::from_slice(payload)?;
        check_version(batch.version, ASSIGN_BATCH_VERSION)?;
        for command in &batch.commands {
            check_version(command.version, ASSIGN_COMMAND_VERSION)?;
        }
        Ok(batch)
    }
}

/// Decodes a message of the assign queue: a batch when its AMQP type says so, else one command.
pub fn decode_assign_message(
    kind: Option<&str>,
    payload: &[u8],
) -> Result<Vec<AssignCommand>, DecodeError> {
    if kind == Some(ASSIGN_BATCH_KIND) {
        AssignBatch::decode(payload).map(|batch| batch.commands)
    } else {
        AssignCommand::decode(payload).map(|command| vec![command])
    }
}

/// Current version of [`ProgressCommand`].
pub const PROGRESS_COMMAND_VERSION: u16 = 1;

/// AMQP `type` of a message holding one [`ProgressCommand`].
pub const PROGRESS_KIND: &str = "progress";

/// Record module activity of an assignment (queue `{prefix}.progress`). Idempotent: applying it
/// again changes nothing, and the transitions it causes are guarded by the assignment's status.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ProgressCommand {
    /// Message schema version.
    pub version: u16,
    /// Owning organization.
    pub org_id: OrgId,
    /// The assignment (aliases already resolved by the API).
    pub assignment_id: AssignmentId,
    /// The module.
    pub module_id: ModuleId,
    /// `in_progress` or `completed`.
    pub status: ModuleStatus,
    /// When the activity happened.
    pub at: DateTime<Utc>,
    /// The caller's `X-Request-ID`, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    /// What the learner achieved in the module, if reported (absent in messages of earlier
    /// versions: they read as no result).
    #[serde(default, skip_serializing_if = "ModuleResult::is_empty")]
    pub result: ModuleResult,
    /// Whether it came in a bulk request (`POST /v1/progress/bulk`, xAPI batches): its events
    /// travel in the bulk lane.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub bulk: bool,
}

/// AMQP `type` of a message of the progress queue holding a [`ProgressBatch`].
pub const PROGRESS_BATCH_KIND: &str = "progress.batch";

/// The progress of one bulk request (up to 1,000 items) in one message: one publish and one
/// confirm for the whole request, applied in one transaction by the assign-worker.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ProgressBatch {
    /// Message schema version ([`PROGRESS_COMMAND_VERSION`]).
    pub version: u16,
    /// The commands, applied in order per assignment.
    pub commands: Vec<ProgressCommand>,
}

impl ProgressBatch {
    /// The payload of a message of AMQP type [`PROGRESS_BATCH_KIND`].
    pub fn encode(&self) -> Result<Vec<u8>, serde_json::Error> {
        serde_json::to_vec(self)
    }

    /// Decodes and checks the version (of the batch and of each command).
    pub fn decode(payload: &[u8]) -> Result<Self, DecodeError> {
        let batch: Self = serde_json::from_slice(payload)?;
        check_version(batch.version, PROGRESS_COMMAND_VERSION)?;
        for command in &batch.commands {
            check_version(command.version, PROGRESS_COMMAND_VERSION)?;
        }
        Ok(batch)
    }
}

/// A module's result as learning content reports it (xAPI `result`, or the REST fields `score`,
/// `success`, `durationSeconds`); every field optional. Each field given replaces the stored one.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ModuleResult {
    /// Scaled score, -1..1 (xAPI `result.score.scaled`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub score: Option<f64>,
    /// Passed (true) or failed (false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub success: Option<bool>,
    /// Time spent, in whole seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_seconds: Option<i64>,
}

impl ModuleResult {
    /// Whether it carries nothing.
    pub fn is_empty(&self) -> bool {
        self.score.is_none() && self.success.is_none() && self.duration_seconds.is_none()
    }
}

impl ProgressCommand {
    /// The payload of a message of AMQP type [`PROGRESS_KIND`].
    pub fn encode(&self) -> Result<Vec<u8>, serde_json::Error> {
        serde_json::to_vec(self)
    }

    /// Decodes and checks the version.
    pub fn decode(payload: &[u8]) -> Result<Self, DecodeError> {
        let command: Self = serde_json::from_slice(payload)?;
        check_version(command.version, PROGRESS_COMMAND_VERSION)?;
        Ok(command)
    }
}

/// Current version of [`ChangeBatch`] and of its [`ChangeCommand`]s.
pub const CHANGE_COMMAND_VERSION: u16 = 1;

/// AMQP `type` of a message of the progress queue holding a [`ChangeBatch`].
pub const CHANGE_BATCH_KIND: &str = "assignment.changes";

/// The new value of an optional field that a change sets: a value, or none.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub enum SetTo<T> {
    /// This value.
    Value(T),
    /// No value (the field is cleared).
    Nothing,
}

impl<T> SetTo<T> {
    /// The value, or `None` when cleared.
    pub fn into_option(self) -> Option<T> {
        match self {
            Self::Value(value) => Some(value),
            Self::Nothing => None,
        }
    }

    /// `Value` for `Some`, `Nothing` for `None`.
    pub fn from_option(value: Option<T>) -> Self {
        match value {
            Some(value) => Self::Value(value),
            None => Self::Nothing,
        }
    }
}

/// What a change does to an assignment.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum Change {
    /// `PATCH /v1/assignments/{id}`: each field present is set (to a value, or cleared); a
    /// field absent stays.
    #[serde(rename_all = "camelCase")]
    Update {
        /// The new due date, or none.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        due_at: Option<SetTo<DateTime<Utc>>>,
        /// The new priority.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        priority: Option<Priority>,
        /// The new notes, or none.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        notes: Option<SetTo<String>>,
    },
    /// `POST /v1/assignments/{id}/cancel`.
    #[serde(rename_all = "camelCase")]
    Cancel {
        /// Why, as the canceller said.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
}

/// Change or cancel an assignment (queue `{prefix}.progress`, beside module progress, so the
/// changes and the activity of one assignment are applied by one kind of worker under the
/// assignment's lock). Exactly once: `change_id` is recorded with the change in the transaction
/// that applies it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ChangeCommand {
    /// The id the API gave the change when it accepted it.
    pub change_id: uuid::Uuid,
    /// Owning organization.
    pub org_id: OrgId,
    /// The assignment (aliases already resolved by the API).
    pub assignment_id: AssignmentId,
    /// What to do.
    pub change: Change,
    /// When the API accepted it.
    pub requested_at: DateTime<Utc>,
    /// Whether the change came in a bulk request: its events travel in the bulk lane.
    #[serde(default)]
    pub bulk: bool,
    /// W3C trace context of the request that sent it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
}

/// The changes of one request (one, or up to a bulk request's 1,000) in one message.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ChangeBatch {
    /// Message schema version.
    pub version: u16,
    /// The changes, applied in order.
    pub changes: Vec<ChangeCommand>,
}

impl ChangeBatch {
    /// The payload of a message of AMQP type [`CHANGE_BATCH_KIND`].
    pub fn encode(&self) -> Result<Vec<u8>, serde_json::Error> {
        serde_json::to_vec(self)
    }

    /// Decodes and checks the version.
    pub fn decode(payload: &[u8]) -> Result<Self, DecodeError> {
        let batch: Self = serde_json::from_slice(payload)?;
        check_version(batch.version, CHANGE_COMMAND_VERSION)?;
        Ok(batch)
    }
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;

    /// A command with every optional field set, or none.
    fn command(full: bool) -> AssignCommand {
        let at = Utc.with_ymd_and_hms(2026, 11, 25, 10, 0, 0).unwrap();
        AssignCommand {
            version: ASSIGN_COMMAND_VERSION,
            assignment_id: AssignmentId::new(),
            existing_assignment_id: full.then(AssignmentId::new),
            org_id: OrgId::new(),
            flow_id: FlowId::new(),
            flow_name: "Security \"Basics\" ✓".to_owned(),
            user_id: UserId::new(),
            assignee_email: "alice@example.com".to_owned(),
            priority: Priority::High,
            notes: full.then(|| "line one\nline two".to_owned()),
            due_at: full.then(|| at + chrono::Duration::days(7)),
            assigned_at: at + chrono::Duration::microseconds(123_456),
            request_id: full.then(|| "req-1".to_owned()),
            schedule_id: full.then(ScheduleId::new),
            traceparent: full
                .then(|| "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".to_owned()),
        }
    }

    /// The envelope as the batch publisher wrote it by hand before the codec moved here (the
    /// messages of that build may still be queued at an upgrade).
    fn envelope_before_the_codec(version: u16, items: &[Vec<u8>]) -> Vec<u8> {
        let mut payload = Vec::new();
        payload.extend_from_slice(format!("{{\"version\":{version},\"commands\":[").as_bytes());
        for (index, item) in items.iter().enumerate() {
            if index > 0 {
                payload.push(b',');
            }
            payload.extend_from_slice(item);
        }
        payload.extend_from_slice(b"]}");
        payload
    }

    #[test]
    fn an_assign_command_round_trips_alone() {
        for full in [false, true] {
            let command = command(full);
            let payload = command.encode().unwrap();
            assert_eq!(AssignCommand::decode(&payload).unwrap(), command);
            assert_eq!(
                decode_assign_message(Some(ASSIGN_KIND), &payload).unwrap(),
                std::slice::from_ref(&command)
            );
            // A message without a type is one command, as before batches existed.
            assert_eq!(decode_assign_message(None, &payload).unwrap(), [command]);
        }
    }

    #[test]
    fn an_assign_batch_round_trips_and_its_envelope_is_its_encoding() {
        let batch = AssignBatch {
            version: ASSIGN_BATCH_VERSION,
            commands: vec![command(true), command(false), command(true)],
        };
        let encoded = batch.encode().unwrap();
        assert_eq!(AssignBatch::decode(&encoded).unwrap(), batch);
        assert_eq!(
            decode_assign_message(Some(ASSIGN_BATCH_KIND), &encoded).unwrap(),
            batch.commands
        );
        let items: Vec<Vec<u8>> = batch
            .commands
            .iter()
            .map(|command| command.encode().unwrap())
            .collect();
        let slices: Vec<&[u8]> = items.iter().map(Vec::as_slice).collect();
        assert_eq!(AssignBatch::envelope(&slices), encoded);
    }

    #[test]
    fn assign_messages_are_the_bytes_the_earlier_build_queued() {
        // A command exactly as the earlier build serialized it, field order included.
        let queued = concat!(
            r#"{"version":1,"assignmentId":"asg_0193a1b2c3d47e8f9a0b1c2d3e4f5a6b","#,
            r#""existingAssignmentId":"asg_0193a1b2c3d47e8f9a0b1c2d3e4f5a6c","#,
            r#""orgId":"org_0193a1b2c3d47e8f9a0b1c2d3e4f5a6d","#,
            r#""flowId":"flow_0193a1b2c3d47e8f9a0b1c2d3e4f5a6e","flowName":"Security Basics","#,
            r#""userId":"usr_0193a1b2c3d47e8f9a0b1c2d3e4f5a6f","#,
            r#""assigneeEmail":"alice@example.com","priority":"high","notes":"Hi","#,
            r#""dueAt":"2026-12-31T23:59:59Z","assignedAt":"2026-11-25T10:00:00.123456Z","#,
            r#""requestId":"req-1","scheduleId":"sch_0193a1b2c3d47e8f9a0b1c2d3e4f5a70","#,
            r#""traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}"#
        );
        let lean = concat!(
            r#"{"version":1,"assignmentId":"asg_0193a1b2c3d47e8f9a0b1c2d3e4f5a71","#,
            r#""orgId":"org_0193a1b2c3d47e8f9a0b1c2d3e4f5a6d","#,
            r#""flowId":"flow_0193a1b2c3d47e8f9a0b1c2d3e4f5a6e","flowName":"Security Basics","#,
            r#""userId":"usr_0193a1b2c3d47e8f9a0b1c2d3e4f5a6f","#,
            r#""assigneeEmail":"alice@example.com","priority":"medium","#,
            r#""assignedAt":"2026-11-25T10:00:00Z"}"#
        );
        for text in [queued, lean] {
            let command = AssignCommand::decode(text.as_bytes()).unwrap();
            assert_eq!(command.encode().unwrap(), text.as_bytes());
        }
        let first = AssignCommand::decode(queued.as_bytes()).unwrap();
        assert_eq!(first.priority, Priority::High);
        assert_eq!(first.request_id.as_deref(), Some("req-1"));

        let items = vec![queued.as_bytes().to_vec(), lean.as_bytes().to_vec()];
        let before = envelope_before_the_codec(ASSIGN_BATCH_VERSION, &items);
        let slices: Vec<&[u8]> = items.iter().map(Vec::as_slice).collect();
        assert_eq!(AssignBatch::envelope(&slices), before);
        let batch = AssignBatch::decode(&before).unwrap();
        assert_eq!(batch.commands.len(), 2);
        assert_eq!(batch.encode().unwrap(), before);
    }

    #[test]
    fn unknown_versions_are_refused_whole() {
        let mut newer = command(false);
        newer.version = ASSIGN_COMMAND_VERSION + 1;
        let payload = newer.encode().unwrap();
        assert!(matches!(
            AssignCommand::decode(&payload),
            Err(DecodeError::UnsupportedVersion { found, .. }) if found == ASSIGN_COMMAND_VERSION + 1
        ));
        let batch = AssignBatch {
            version: ASSIGN_BATCH_VERSION,
            commands: vec![command(false), newer],
        };
        assert!(matches!(
            decode_assign_message(Some(ASSIGN_BATCH_KIND), &batch.encode().unwrap()),
            Err(DecodeError::UnsupportedVersion { .. })
        ));
        let later = AssignBatch {
            version: ASSIGN_BATCH_VERSION + 1,
            commands: vec![command(false)],
        };
        assert!(matches!(
            AssignBatch::decode(&later.encode().unwrap()),
            Err(DecodeError::UnsupportedVersion { found, .. }) if found == ASSIGN_BATCH_VERSION + 1
        ));
        assert!(matches!(
            decode_assign_message(Some(ASSIGN_BATCH_KIND), b"{\"version\":1}"),
            Err(DecodeError::Malformed(_))
        ));
    }

    #[test]
    fn a_progress_command_round_trips() {
        let command = ProgressCommand {
            version: PROGRESS_COMMAND_VERSION,
            org_id: OrgId::new(),
            assignment_id: AssignmentId::new(),
            module_id: ModuleId::new(),
            status: ModuleStatus::Completed,
            at: Utc.with_ymd_and_hms(2026, 11, 25, 10, 0, 0).unwrap(),
            request_id: Some("req-2".to_owned()),
            result: ModuleResult {
                score: Some(0.85),
                success: Some(true),
                duration_seconds: Some(600),
            },
            bulk: true,
        };
        let payload = command.encode().unwrap();
        assert_eq!(ProgressCommand::decode(&payload).unwrap(), command);
        let batch = ProgressBatch {
            version: PROGRESS_COMMAND_VERSION,
            commands: vec![command.clone(), command],
        };
        assert_eq!(
            ProgressBatch::decode(&batch.encode().unwrap()).unwrap(),
            batch
        );
    }
}
