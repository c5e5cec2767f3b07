//! xAPI statements an organization's learning content sent, and the look-ups that map a statement
//! onto progress: the learner's assignment of the module (or flow) an activity IRI names.

use chrono::{DateTime, Utc};
use flow_domain::AssignmentStatus;
use flow_domain::ModuleStatus;
use flow_domain::ids::{AssignmentId, ModuleId, OrgId};
use sqlx::{FromRow, PgConnection, PgExecutor};

/// How a statement of a batch compares with what is stored under its id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Existing {
    /// Nothing is stored under the id.
    New,
    /// The same statement is stored (JSON equality, whatever the key order).
    Same,
    /// Another statement is stored under the id.
    Different,
}

/// How each of `statements` (id, JSON) compares with what the organization stored, in order.
pub async fn compare<'e>(
    executor: impl PgExecutor<'e>,
    org_id: OrgId,
    ids: &[uuid::Uuid],
    statements: &[serde_json::Value],
) -> Result<Vec<Existing>, sqlx::Error> {
    let rows: Vec<(Option<bool>,)> = sqlx::query_as(
        "SELECT s.statement = t.statement
         FROM UNNEST($2::uuid[], $3::jsonb[]) WITH ORDINALITY AS t(id, statement, ord)
         LEFT JOIN xapi_statements s ON s.org_id = $1 AND s.id = t.id
         ORDER BY t.ord",
    )
    .bind(org_id)
    .bind(ids)
    .bind(statements)
    .fetch_all(executor)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(same,)| match same {
            None => Existing::New,
            Some(true) => Existing::Same,
            Some(false) => Existing::Different,
        })
        .collect())
}

/// A statement to store.
#[derive(Debug, Clone)]
pub struct NewStatement {
    /// Its id (given, or generated).
    pub id: uuid::Uuid,
    /// The statement as sent, with its id.
    pub statement: serde_json::Value,
    /// Whether it mapped onto progress.
    pub matched: bool,
    /// The assignment it mapped onto.
    pub assignment_id: Option<AssignmentId>,
}

/// Stores `statements` inside the caller's transaction; the ids already stored (by a concurrent
/// request) are returned, to be compared again.
pub async fn insert(
    connection: &mut PgConnection,
    org_id: OrgId,
    statements: &[NewStatement],
) -> Result<Vec<uuid::Uuid>, sqlx::Error> {
    let ids: Vec<uuid::Uuid> = statements.iter().map(|row| row.id).collect();
    let bodies: Vec<&serde_json::Value> = statements.iter().map(|row| &row.statement).collect();
    let matched: Vec<bool> = statements.iter().map(|row| row.matched).collect();
    let assignments: Vec<Option<AssignmentId>> =
        statements.iter().map(|row| row.assignment_id).collect();
    let inserted: Vec<uuid::Uuid> = sqlx::query_scalar(
        "INSERT INTO xapi_statements (org_id, id, statement, matched, assignment_id)
         SELECT $1, id, statement, matched, assignment_id
         FROM UNNEST($2::uuid[], $3::jsonb[], $4::bool[], $5::uuid[])
              AS t(id, statement, matched, assignment_id)
         ON CONFLICT (org_id, id) DO NOTHING
         RETURNING id",
    )
    .bind(org_id)
    .bind(&ids)
    .bind(&bodies)
    .bind(&matched)
    .bind(&assignments)
    .fetch_all(&mut *connection)
    .await?;
    Ok(ids
        .into_iter()
        .filter(|id| !inserted.contains(id))
        .collect())
}

/// A stored statement.
#[derive(Debug, Clone, FromRow)]
pub struct StoredStatement {
    /// The statement as sent.
    pub statement: serde_json::Value,
    /// When Flow stored it.
    pub stored_at: DateTime<Utc>,
}

/// The organization's statement `id`.
pub async fn get<'e>(
    executor: impl PgExecutor<'e>,
    org_id: OrgId,
    id: uuid::Uuid,
) -> Result<Option<StoredStatement>, sqlx::Error> {
    sqlx::query_as("SELECT statement, stored_at FROM xapi_statements WHERE org_id = $1 AND id = $2")
        .bind(org_id)
        .bind(id)
        .fetch_optional(executor)
        .await
}

/// The assignment an activity of a learner lands on.
#[derive(Debug, Clone, FromRow)]
pub struct Target {
    /// The assignment.
    pub assignment_id: AssignmentId,
    /// Its status as stored.
    pub status: AssignmentStatus,
    /// When it was assigned (progress is never earlier).
    pub assigned_at: DateTime<Utc>,
    /// The module (none for the flow's own activity).
    pub module_id: Option<ModuleId>,
}

/// The learner's (`email_normalized`) assignment whose module has the activity IRI `activity`:
/// the assignment `registration` when it is one of them (cmi5), else the open one (pending, in
/// progress or overdue), the latest first.
pub async fn module_target<'e>(
    executor: impl PgExecutor<'e>,
    org_id: OrgId,
    email_normalized: &str,
    activity: &str,
    registration: Option<uuid::Uuid>,
) -> Result<Option<Target>, sqlx::Error> {
    sqlx::query_as(
        "SELECT a.id AS assignment_id, a.status, a.assigned_at, m.id AS module_id
         FROM modules m
         JOIN assignments a ON a.flow_id = m.flow_id AND a.org_id = $1
         JOIN users u ON u.id = a.user_id AND u.org_id = $1
         WHERE m.activity_id = $3 AND u.email_normalized = $2
           AND (a.id = $4 OR a.status IN ('pending', 'in_progress', 'overdue'))
         ORDER BY a.id = $4 DESC NULLS LAST, a.assigned_at DESC, a.id DESC
         LIMIT 1",
    )
    .bind(org_id)
    .bind(email_normalized)
    .bind(activity)
    .bind(registration)
    .fetch_optional(executor)
    .await
}

/// [`module_target`] for the flow's own activity IRI (no module).
pub async fn flow_target<'e>(
    executor: impl PgExecutor<'e>,
    org_id: OrgId,
    email_normalized: &str,
    activity: &str,
    registration: Option<uuid::Uuid>,
) -> Result<Option<Target>, sqlx::Error> {
    sqlx::query_as(
        "SELECT a.id AS assignment_id, a.status, a.assigned_at, NULL::uuid AS module_id
         FROM flows f
         JOIN assignments a ON a.flow_id = f.id AND a.org_id = $1
         JOIN users u ON u.id = a.user_id AND u.org_id = $1
         WHERE f.org_id = $1 AND f.activity_id = $3 AND u.email_normalized = $2
           AND (a.id = $4 OR a.status IN ('pending', 'in_progress', 'overdue'))
         ORDER BY a.id = $4 DESC NULLS LAST, a.assigned_at DESC, a.id DESC
         LIMIT 1",
    )
    .bind(org_id)
    .bind(email_normalized)
    .bind(activity)
    .bind(registration)
    .fetch_optional(executor)
    .await
}

/// The modules of the assignment's flow not completed in it yet (what `satisfied` completes).
pub async fn open_modules<'e>(
    executor: impl PgExecutor<'e>,
    assignment_id: AssignmentId,
) -> Result<Vec<ModuleId>, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT m.id FROM assignments a JOIN modules m ON m.flow_id = a.flow_id
         LEFT JOIN module_progress p ON p.assignment_id = a.id AND p.module_id = m.id
         WHERE a.id = $1 AND p.status IS DISTINCT FROM $2
         ORDER BY m.position",
    )
    .bind(assignment_id)
    .bind(ModuleStatus::Completed)
    .fetch_all(executor)
    .await
}

/// How many of the organization's statements mapped onto nothing.
pub async fn unmatched_count<'e>(
    executor: impl PgExecutor<'e>,
    org_id: OrgId,
) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar("SELECT count(*) FROM xapi_statements WHERE org_id = $1 AND NOT matched")
        .bind(org_id)
        .fetch_one(executor)
        .await
}
