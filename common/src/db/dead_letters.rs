//! Dead-lettered messages, recorded in Postgres by the dead-letter recorder: operators list and
//! replay them (`flowctl dlq`), and an assignment id whose command died resolves to that failure
//! instead of staying "accepted" forever.

use chrono::{DateTime, Utc};
use flow_domain::ids::{AssignmentId, OrgId};
use flow_domain::messages::AssignCommand;
use sqlx::{FromRow, PgConnection, PgExecutor};

/// A message as it arrived in the dead-letter queue.
#[derive(Debug, Clone)]
pub struct NewDeadLetter<'a> {
    /// The queue it died in.
    pub origin_queue: Option<&'a str>,
    /// Its AMQP `message-id`.
    pub message_id: Option<&'a str>,
    /// Its AMQP `type`.
    pub kind: Option<&'a str>,
    /// Why it was dead-lettered.
    pub reason: &'a str,
    /// The body.
    pub payload: &'a [u8],
}

impl NewDeadLetter<'_> {
    /// What identifies the message: the same message recorded twice (the recorder died before
    /// its ack) is one row.
    fn key(&self) -> Vec<u8> {
        use sha2::{Digest, Sha256};
        let mut hasher = Sha256::new();
        for part in [self.origin_queue, self.message_id] {
            let part = part.unwrap_or("");
            hasher.update((part.len() as u64).to_le_bytes());
            hasher.update(part.as_bytes());
        }
        hasher.update(self.payload);
        hasher.finalize().to_vec()
    }
}

/// Records a dead letter and the assignment commands it carried (their ids now resolve to this
/// failure); returns its id. A message recorded again (dead-lettered anew after a replay) is
/// pending again with the new reason.
pub async fn record(
    connection: &mut PgConnection,
    letter: &NewDeadLetter<'_>,
    commands: &[AssignCommand],
) -> Result<i64, sqlx::Error> {
    let id: i64 = sqlx::query_scalar(
        "INSERT INTO dead_letters (message_key, origin_queue, message_id, kind, reason, payload)
         VALUES ($1, $2, $3, $4, $5, $6)
         ON CONFLICT (message_key) DO UPDATE
         SET reason = EXCLUDED.reason, dead_lettered_at = now(), replayed_at = NULL
         RETURNING id",
    )
    .bind(letter.key())
    .bind(letter.origin_queue)
    .bind(letter.message_id)
    .bind(letter.kind)
    .bind(letter.reason)
    .bind(letter.payload)
    .fetch_one(&mut *connection)
    .await?;
    if !commands.is_empty() {
        let ids: Vec<AssignmentId> = commands.iter().map(|c| c.assignment_id).collect();
        let orgs: Vec<OrgId> = commands.iter().map(|c| c.org_id).collect();
        let bodies: Vec<serde_json::Value> = commands
            .iter()
            .map(|command| serde_json::to_value(command).unwrap_or_default())
            .collect();
        sqlx::query(
            "INSERT INTO assignment_failures (assignment_id, org_id, dead_letter_id, reason, command)
             SELECT t.id, t.org_id, $3, $4, t.command
             FROM UNNEST($1::uuid[], $2::uuid[], $5::jsonb[]) AS t(id, org_id, command)
             ON CONFLICT (assignment_id) DO UPDATE
             SET dead_letter_id = EXCLUDED.dead_letter_id, reason = EXCLUDED.reason,
                 command = EXCLUDED.command, failed_at = now()",
        )
        .bind(&ids)
        .bind(&orgs)
        .bind(id)
        .bind(letter.reason)
        .bind(&bodies)
        .execute(&mut *connection)
        .await?;
    }
    Ok(id)
}

/// A recorded dead letter.
#[derive(Debug, Clone, FromRow)]
pub struct DeadLetter {
    /// Id (replay order).
    pub id: i64,
    /// The queue it died in.
    pub origin_queue: Option<String>,
    /// Its AMQP `message-id`.
    pub message_id: Option<String>,
    /// Its AMQP `type`.
    pub kind: Option<String>,
    /// Why it was dead-lettered.
    pub reason: String,
    /// The body.
    pub payload: Vec<u8>,
    /// When it was recorded.
    pub dead_lettered_at: DateTime<Utc>,
}

/// Up to `limit` dead letters not replayed yet, oldest first, after `after`.
pub async fn pending<'e>(
    executor: impl PgExecutor<'e>,
    after: i64,
    limit: i64,
) -> Result<Vec<DeadLetter>, sqlx::Error> {
    sqlx::query_as(
        "SELECT id, origin_queue, message_id, kind, reason, payload, dead_lettered_at
         FROM dead_letters WHERE replayed_at IS NULL AND id > $1 ORDER BY id LIMIT $2",
    )
    .bind(after)
    .bind(limit)
    .fetch_all(executor)
    .await
}

/// How many dead letters wait for an operator.
pub async fn pending_count<'e>(executor: impl PgExecutor<'e>) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar("SELECT count(*) FROM dead_letters WHERE replayed_at IS NULL")
        .fetch_one(executor)
        .await
}

/// Marks a dead letter replayed (its message is back in its queue): the assignment ids it carried
/// are accepted again rather than failed.
pub async fn mark_replayed(connection: &mut PgConnection, id: i64) -> Result<(), sqlx::Error> {
    sqlx::query("DELETE FROM assignment_failures WHERE dead_letter_id = $1")
        .bind(id)
        .execute(&mut *connection)
        .await?;
    sqlx::query("UPDATE dead_letters SET replayed_at = now() WHERE id = $1")
        .bind(id)
        .execute(&mut *connection)
        .await
        .map(|_| ())
}

/// Why the command of an assignment id of an organization was dead-lettered.
#[derive(Debug, Clone, FromRow)]
pub struct AssignmentFailure {
    /// The reason recorded with the dead letter.
    pub reason: String,
    /// When it was recorded.
    pub failed_at: DateTime<Utc>,
    /// The command, as published.
    pub command: serde_json::Value,
}

/// The failure of assignment id `id` of `org`, if its command was dead-lettered and not replayed.
pub async fn assignment_failure<'e>(
    executor: impl PgExecutor<'e>,
    org: OrgId,
    id: AssignmentId,
) -> Result<Option<AssignmentFailure>, sqlx::Error> {
    sqlx::query_as(
        "SELECT reason, failed_at, command FROM assignment_failures
         WHERE assignment_id = $1 AND org_id = $2",
    )
    .bind(id)
    .bind(org)
    .fetch_optional(executor)
    .await
}
