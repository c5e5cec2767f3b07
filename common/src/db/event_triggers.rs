//! Event triggers (migration 0250, docs/events.md): an organization's rules over inbound events,
//! each assigning a flow to (or cancelling an open assignment of a flow of) the person an event
//! names.

use chrono::{DateTime, Utc};
use flow_domain::ids::{EventTriggerId, FlowId, OrgId};
use sqlx::{FromRow, PgConnection, PgExecutor};

/// A stored trigger.
#[derive(Debug, Clone, FromRow)]
pub struct TriggerRecord {
    /// Identifier.
    pub id: EventTriggerId,
    /// Owning organization.
    pub org_id: OrgId,
    /// What the organization calls it.
    pub name: String,
    /// The event `type` matched exactly (or [`TriggerRecord::match_type_prefix`]).
    pub match_type: Option<String>,
    /// The prefix of the event `type` matched.
    pub match_type_prefix: Option<String>,
    /// The event `source` matched exactly, when set.
    pub match_source: Option<String>,
    /// JSON Pointer to the person's e-mail in the event.
    pub email_pointer: String,
    /// `assign` or `cancel`.
    pub action: String,
    /// The flow.
    pub flow_id: FlowId,
    /// The flow's name.
    pub flow_name: String,
    /// Days from the event to the due date.
    pub due_days: Option<i32>,
    /// JSON Pointer to the due date in the event.
    pub due_pointer: Option<String>,
    /// Priority of its assignments.
    pub priority: String,
    /// Notes of its assignments.
    pub notes: Option<String>,
    /// Creation time.
    pub created_at: DateTime<Utc>,
    /// Last change.
    pub updated_at: DateTime<Utc>,
}

/// A trigger's fields, to create or replace one (validated before).
#[derive(Debug, Clone)]
pub struct TriggerFields {
    /// Name.
    pub name: String,
    /// Exact type.
    pub match_type: Option<String>,
    /// Type prefix.
    pub match_type_prefix: Option<String>,
    /// Source.
    pub match_source: Option<String>,
    /// E-mail pointer.
    pub email_pointer: String,
    /// `assign` or `cancel`.
    pub action: &'static str,
    /// Flow.
    pub flow_id: FlowId,
    /// Days to the due date.
    pub due_days: Option<i32>,
    /// Pointer to the due date.
    pub due_pointer: Option<String>,
    /// Priority.
    pub priority: String,
    /// Notes.
    pub notes: Option<String>,
}

const TRIGGER_COLUMNS: &str = "t.id, t.org_id, t.name, t.match_type, t.match_type_prefix,
    t.match_source, t.email_pointer, t.action, t.flow_id, f.name AS flow_name, t.due_days,
    t.due_pointer, t.priority, t.notes, t.created_at, t.updated_at";

/// A statement of the triggers table, its ids bound as `$1` and `$2`.
type FieldsQuery<'q> = sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>;

/// Binds a trigger's fields as parameters $3 to $13, in the order of [`TriggerFields`]: one
/// binding for the insert and the update, so they cannot drift apart.
fn bind_fields<'q>(query: FieldsQuery<'q>, fields: &'q TriggerFields) -> FieldsQuery<'q> {
    query
        .bind(&fields.name)
        .bind(fields.match_type.as_deref())
        .bind(fields.match_type_prefix.as_deref())
        .bind(fields.match_source.as_deref())
        .bind(&fields.email_pointer)
        .bind(fields.action)
        .bind(fields.flow_id)
        .bind(fields.due_days)
        .bind(fields.due_pointer.as_deref())
        .bind(&fields.priority)
        .bind(fields.notes.as_deref())
}

/// Creates a trigger.
pub async fn create(
    connection: &mut PgConnection,
    org_id: OrgId,
    fields: &TriggerFields,
) -> Result<TriggerRecord, sqlx::Error> {
    let id = EventTriggerId::new();
    let insert = sqlx::query(
        "INSERT INTO event_triggers (id, org_id, name, match_type, match_type_prefix,
                                     match_source, email_pointer, action, flow_id, due_days,
                                     due_pointer, priority, notes)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)",
    )
    .bind(id)
    .bind(org_id);
    bind_fields(insert, fields)
        .execute(&mut *connection)
        .await?;
    get(&mut *connection, org_id, id)
        .await?
        .ok_or(sqlx::Error::RowNotFound)
}

/// Replaces a trigger's fields; false when the organization has no such trigger.
pub async fn update(
    connection: &mut PgConnection,
    org_id: OrgId,
    id: EventTriggerId,
    fields: &TriggerFields,
) -> Result<bool, sqlx::Error> {
    let update = sqlx::query(
        "UPDATE event_triggers SET name = $3, match_type = $4, match_type_prefix = $5,
                match_source = $6, email_pointer = $7, action = $8, flow_id = $9, due_days = $10,
                due_pointer = $11, priority = $12, notes = $13, updated_at = now()
         WHERE org_id = $1 AND id = $2",
    )
    .bind(org_id)
    .bind(id);
    let updated = bind_fields(update, fields)
        .execute(&mut *connection)
        .await?;
    Ok(updated.rows_affected() == 1)
}

/// One trigger of the organization.
pub async fn get<'e>(
    executor: impl PgExecutor<'e>,
    org_id: OrgId,
    id: EventTriggerId,
) -> Result<Option<TriggerRecord>, sqlx::Error> {
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {TRIGGER_COLUMNS} FROM event_triggers t JOIN flows f ON f.id = t.flow_id
         WHERE t.org_id = $1 AND t.id = $2"
    )))
    .bind(org_id)
    .bind(id)
    .fetch_optional(executor)
    .await
}

/// The organization's triggers in id order (creation order), after `after` when given.
pub async fn list<'e>(
    executor: impl PgExecutor<'e>,
    org_id: OrgId,
    after: Option<EventTriggerId>,
    limit: i64,
) -> Result<Vec<TriggerRecord>, sqlx::Error> {
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {TRIGGER_COLUMNS} FROM event_triggers t JOIN flows f ON f.id = t.flow_id
         WHERE t.org_id = $1 AND ($2::uuid IS NULL OR t.id > $2)
         ORDER BY t.id LIMIT $3"
    )))
    .bind(org_id)
    .bind(after)
    .bind(limit)
    .fetch_all(executor)
    .await
}

/// How many triggers the organization has.
pub async fn count<'e>(executor: impl PgExecutor<'e>, org_id: OrgId) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar("SELECT count(*) FROM event_triggers WHERE org_id = $1")
        .bind(org_id)
        .fetch_one(executor)
        .await
}

/// Deletes a trigger (what it made stays); false when the organization has no such trigger.
pub async fn delete<'e>(
    executor: impl PgExecutor<'e>,
    org_id: OrgId,
    id: EventTriggerId,
) -> Result<bool, sqlx::Error> {
    let deleted = sqlx::query("DELETE FROM event_triggers WHERE org_id = $1 AND id = $2")
        .bind(org_id)
        .bind(id)
        .execute(executor)
        .await?;
    Ok(deleted.rows_affected() == 1)
}
