//! The audit trail of an organization's control plane: who generated, revoked or rolled a key,
//! who created, changed, rotated or deleted a webhook endpoint, who invited, removed, disabled,
//! enabled, reset or changed the role of a dashboard account (and when a person set their
//! password). Each change
//! records itself with one call to [`record`] (or [`record_for_key`]), in the change's own
//! transaction where it has one.

use chrono::{DateTime, Utc};
use flow_domain::audit::AuditAction;
use flow_domain::ids::{EventSourceId, KeyId, OrgId};
use sqlx::{FromRow, PgExecutor};

/// Who made a change.
#[derive(Debug, Clone, Copy)]
pub enum Actor<'a> {
    /// A dashboard account, by e-mail.
    Account(&'a str),
    /// An API caller, by the key it used (recorded as the key's visible prefix).
    ApiKey(KeyId),
    /// An operator running `flowctl`.
    Flowctl,
    /// The scheduler, on its own (evaluating enrollment rules a write left pending).
    Scheduler,
    /// A signed event source's delivery (no API key), recorded as `event source evs_…`.
    EventSource(EventSourceId),
}

impl<'a> Actor<'a> {
    /// The actor's kind as stored (`account`, `api_key`, `flowctl`, `scheduler` or
    /// `event_source`).
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Account(_) => "account",
            Self::ApiKey(_) => "api_key",
            Self::Flowctl => "flowctl",
            Self::Scheduler => "scheduler",
            Self::EventSource(_) => "event_source",
        }
    }

    /// The account's e-mail, for an account.
    pub fn account(&self) -> Option<&'a str> {
        match self {
            Self::Account(email) => Some(email),
            _ => None,
        }
    }

    /// Reads an actor stored as its [`Actor::kind`], [`Actor::account`] and [`Actor::key`];
    /// `None` for a kind it does not know or a part missing.
    pub fn from_parts(kind: &str, account: Option<&'a str>, key: Option<KeyId>) -> Option<Self> {
        match kind {
            "account" => account.map(Self::Account),
            "api_key" => key.map(Self::ApiKey),
            "flowctl" => Some(Self::Flowctl),
            "scheduler" => Some(Self::Scheduler),
            _ => None,
        }
    }

    /// What the actor column holds for the kinds named by text: an account's e-mail, an event
    /// source's id.
    fn named(&self) -> Option<String> {
        match self {
            Self::Account(email) => Some((*email).to_owned()),
            Self::EventSource(id) => Some(format!("event source {id}")),
            _ => None,
        }
    }

    /// The API key, for a key.
    pub fn key(&self) -> Option<KeyId> {
        match self {
            Self::ApiKey(key) => Some(*key),
            _ => None,
        }
    }
}

/// What the actor column holds, computed in SQL so an API key is named by its prefix without a
/// lookup by the caller. Parameters: `$2` kind, `$3` account e-mail (or event source), `$4` key id.
const ACTOR_SQL: &str = "CASE $2
        WHEN 'account' THEN $3
        WHEN 'api_key' THEN COALESCE((SELECT k.prefix || '…' FROM api_keys k WHERE k.id = $4),
                                     'an API key')
        WHEN 'scheduler' THEN 'scheduler'
        WHEN 'event_source' THEN $3
        ELSE 'flowctl' END";

/// Records a change of `org_id`'s control plane: `action` (e.g. [`AuditAction::KeyRevoked`]) on
/// `target` (an id), with a human `detail` (a name, a URL).
pub async fn record<'e>(
    executor: impl PgExecutor<'e>,
    org_id: OrgId,
    actor: Actor<'_>,
    action: AuditAction,
    target: &str,
    detail: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "INSERT INTO audit_events (org_id, actor_kind, actor, action, target, detail)
         VALUES ($1, $2, {ACTOR_SQL}, $5, $6, $7)"
    )))
    .bind(org_id)
    .bind(actor.kind())
    .bind(actor.named())
    .bind(actor.key())
    .bind(action)
    .bind(target)
    .bind(detail)
    .execute(executor)
    .await
    .map(|_| ())
}

/// Records many changes of one kind at once (`action` on each of `targets`, with its detail),
/// as [`record`] does one: the work of one operation over many things (a rule's assignments).
pub async fn record_many<'e>(
    executor: impl PgExecutor<'e>,
    org_id: OrgId,
    actor: Actor<'_>,
    action: AuditAction,
    targets: &[String],
    details: &[String],
) -> Result<(), sqlx::Error> {
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "INSERT INTO audit_events (org_id, actor_kind, actor, action, target, detail)
         SELECT $1, $2, {ACTOR_SQL}, $5, t.target, t.detail
         FROM UNNEST($6::text[], $7::text[]) AS t(target, detail)"
    )))
    .bind(org_id)
    .bind(actor.kind())
    .bind(actor.named())
    .bind(actor.key())
    .bind(action)
    .bind(targets)
    .bind(details)
    .execute(executor)
    .await
    .map(|_| ())
}

/// Records the queued changes `change_ids` (`action` on each of `targets`, with its detail), one
/// row per change id however often it is recorded: a retried request that queues the same changes
/// again (their ids derived from the request or the assignment) adds no second row.
pub async fn record_changes<'e>(
    executor: impl PgExecutor<'e>,
    org_id: OrgId,
    actor: Actor<'_>,
    action: AuditAction,
    change_ids: &[uuid::Uuid],
    targets: &[String],
    details: &[String],
) -> Result<(), sqlx::Error> {
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "INSERT INTO audit_events (org_id, actor_kind, actor, action, change_id, target, detail)
         SELECT $1, $2, {ACTOR_SQL}, $5, t.change_id, t.target, t.detail
         FROM UNNEST($6::uuid[], $7::text[], $8::text[]) AS t(change_id, target, detail)
         ON CONFLICT (change_id) WHERE change_id IS NOT NULL DO NOTHING"
    )))
    .bind(org_id)
    .bind(actor.kind())
    .bind(actor.named())
    .bind(actor.key())
    .bind(action)
    .bind(change_ids)
    .bind(targets)
    .bind(details)
    .execute(executor)
    .await
    .map(|_| ())
}

/// Records a change of the API key `key_id` in its own organization (for callers that know the
/// key but not its organization, such as `flowctl key revoke`). The detail is the key's name.
pub async fn record_for_key<'e>(
    executor: impl PgExecutor<'e>,
    key_id: KeyId,
    actor: Actor<'_>,
    action: AuditAction,
) -> Result<(), sqlx::Error> {
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "INSERT INTO audit_events (org_id, actor_kind, actor, action, target, detail)
         SELECT k.org_id, $2, {ACTOR_SQL}, $5, $6, k.name
         FROM api_keys k WHERE k.id = $1"
    )))
    .bind(key_id)
    .bind(actor.kind())
    .bind(actor.named())
    .bind(actor.key())
    .bind(action)
    .bind(key_id.to_string())
    .execute(executor)
    .await
    .map(|_| ())
}

/// One recorded change.
#[derive(Debug, Clone, FromRow)]
pub struct AuditEvent {
    /// Position in the trail (keyset cursor).
    pub id: i64,
    /// When it happened.
    pub occurred_at: DateTime<Utc>,
    /// `account`, `api_key`, `flowctl`, `scheduler` or `event_source`.
    pub actor_kind: String,
    /// The account's e-mail, the key's prefix, or `flowctl`.
    pub actor: String,
    /// What was done, e.g. [`AuditAction::WebhookSecretRotated`]; a stored name this build does
    /// not know fails the read.
    pub action: AuditAction,
    /// The id of what changed.
    pub target: String,
    /// A human description of it.
    pub detail: String,
}

/// Which audit rows a read lets through (each `None` lets every row through).
#[derive(Debug, Clone, Copy, Default)]
pub struct AuditFilter<'a> {
    /// Only rows of this actor (an account's e-mail, a key's prefix, `flowctl`, `scheduler`).
    pub actor: Option<&'a str>,
    /// Only rows of this action.
    pub action: Option<AuditAction>,
    /// Only rows about this target (an id such as `asg_…`, `key_…`).
    pub target: Option<&'a str>,
    /// Only rows at or after this instant.
    pub since: Option<DateTime<Utc>>,
    /// Only rows before this instant.
    pub before_time: Option<DateTime<Utc>>,
}

/// An organization's trail that `filter` lets through, newest first, before the row `before`
/// (its id) when given. Keyset pages on the row id (a row committed later has a larger id, and
/// rows are never changed), so a page never repeats or skips a row that was there when the
/// previous one was read.
pub async fn list<'e>(
    executor: impl PgExecutor<'e>,
    org_id: OrgId,
    filter: AuditFilter<'_>,
    before: Option<i64>,
    limit: i64,
) -> Result<Vec<AuditEvent>, sqlx::Error> {
    sqlx::query_as(
        "SELECT id, occurred_at, actor_kind, actor, action, target, detail FROM audit_events
         WHERE org_id = $1 AND ($2::bigint IS NULL OR id < $2)
           AND ($4::text IS NULL OR actor = $4)
           AND ($5::text IS NULL OR action = $5)
           AND ($6::text IS NULL OR target = $6)
           AND ($7::timestamptz IS NULL OR occurred_at >= $7)
           AND ($8::timestamptz IS NULL OR occurred_at < $8)
         ORDER BY id DESC LIMIT $3",
    )
    .bind(org_id)
    .bind(before)
    .bind(limit)
    .bind(filter.actor)
    .bind(filter.action)
    .bind(filter.target)
    .bind(filter.since)
    .bind(filter.before_time)
    .fetch_all(executor)
    .await
}
