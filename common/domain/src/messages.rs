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

impl AssignCommand {
    /// Decodes and checks the version.
    pub fn decode(payload: &[u8]) -> Result<Self, DecodeError> {
        let command: Self = serde_json::from_slice(payload)?;
        if command.version != ASSIGN_COMMAND_VERSION {
            return Err(DecodeError::UnsupportedVersion {
                found: command.version,
                supported: ASSIGN_COMMAND_VERSION,
            });
        }
        Ok(command)
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

/// Decodes a message of the assign queue: a batch when its AMQP type says so, else one command.
pub fn decode_assign_message(
    kind: Option<&str>,
    payload: &[u8],
) -> Result<Vec<AssignCommand>, DecodeError> {
    if kind != Some(ASSIGN_BATCH_KIND) {
        return AssignCommand::decode(payload).map(|command| vec![command]);
    }
    let batch: AssignBatch = serde_json::from_slice(payload)?;
    if batch.version != ASSIGN_BATCH_VERSION {
        return Err(DecodeError::UnsupportedVersion {
            found: batch.version,
            supported: ASSIGN_BATCH_VERSION,
        });
    }
    if let Some(command) = batch
        .commands
        .iter()
        .find(|command| command.version != ASSIGN_COMMAND_VERSION)
    {
        return Err(DecodeError::UnsupportedVersion {
            found: command.version,
            supported: ASSIGN_COMMAND_VERSION,
        });
    }
    Ok(batch.commands)
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
}

impl ProgressCommand {
    /// Decodes and checks the version.
    pub fn decode(payload: &[u8]) -> Result<Self, DecodeError> {
        let command: Self = serde_json::from_slice(payload)?;
        if command.version != PROGRESS_COMMAND_VERSION {
            return Err(DecodeError::UnsupportedVersion {
                found: command.version,
                supported: PROGRESS_COMMAND_VERSION,
            });
        }
        Ok(command)
    }
}
