//! Users (assignees): upserted by e-mail, unique per organization case-insensitively.

use chrono::{DateTime, Utc};
use flow_domain::Email;
use flow_domain::ids::{OrgId, UserId};
use sqlx::{FromRow, PgExecutor};

/// A user row.
#[derive(Debug, Clone, FromRow)]
pub struct User {
    pub id: UserId,
    /// Owning organization.
    pub org_id: OrgId,
    /// E-mail as first given.
    pub email: String,
    /// Display name.
    pub name: Option<String>,
    /// Creation time.
    pub created_at: DateTime<Utc>,
    /// True when this call created the row (rather than updating it).
    #[sqlx(default)]
    pub created: bool,
}

/// One user to upsert.
#[derive(Debug, Clone)]
pub struct NewUser {
    /// E-mail.
    pub email: Email,
    /// Display name; `None` keeps the current one.
    pub name: Option<String>,
}

/// Inserts or updates users by e-mail in one statement; returns them in input order.
/// Duplicate e-mails within `users` are merged (the last name wins).
pub async fn upsert<'e>(
    executor: impl PgExecutor<'e>,
    org_id: OrgId,
    users: &[NewUser],
) -> Result<Vec<User>, sqlx::Error> {
    let ids: Vec<UserId> = users.iter().map(|_| UserId::new()).collect();
    let emails: Vec<&str> = users.iter().map(|user| user.email.as_str()).collect();
    let normalized: Vec<String> = users.iter().map(|user| user.email.normalized()).collect();
    let names: Vec<Option<&str>> = users.iter().map(|user| user.name.as_deref()).collect();
    let mut rows: Vec<(i64, User)> = sqlx::query_as::<_, OrderedUser>(
        "WITH input AS (
            SELECT DISTINCT ON (normalized) id, email, normalized, name, ord
            FROM UNNEST($2::uuid[], $3::text[], $4::text[], $5::text[])
                 WITH ORDINALITY AS t(id, email, normalized, name, ord)
            ORDER BY normalized, ord DESC
         ), upserted AS (
            INSERT INTO users (id, org_id, email, email_normalized, name)
            SELECT id, $1, email, normalized, name FROM input ORDER BY normalized
            ON CONFLICT (org_id, email_normalized) DO UPDATE
                SET name = COALESCE(EXCLUDED.name, users.name), updated_at = now()
            RETURNING id, org_id, email, email_normalized, name, created_at, (xmax = 0) AS created
         )
         SELECT t.ord, u.id, u.org_id, u.email, u.name, u.created_at, u.created
         FROM UNNEST($4::text[]) WITH ORDINALITY AS t(normalized, ord)
         JOIN upserted u ON u.email_normalized = t.normalized
         ORDER BY t.ord",
    )
    .bind(org_id)
    .bind(&ids)
    .bind(&emails)
    .bind(&normalized)
    .bind(&names)
    .fetch_all(executor)
    .await?
    .into_iter()
    .map(|row| (row.ord, row.user))
    .collect();
    rows.sort_by_key(|(ord, _)| *ord);
    Ok(rows.into_iter().map(|(_, user)| user).collect())
}

#[derive(FromRow)]
struct OrderedUser {
    ord: i64,
    #[sqlx(flatten)]
    user: User,
}

/// Finds a user by e-mail (case-insensitive).
pub async fn find_by_email<'e>(
    executor: impl PgExecutor<'e>,
    org_id: OrgId,
    email: &Email,
) -> Result<Option<User>, sqlx::Error> {
    sqlx::query_as(
        "SELECT id, org_id, email, name, created_at FROM users
         WHERE org_id = $1 AND email_normalized = $2",
    )
    .bind(org_id)
    .bind(email.normalized())
    .fetch_optional(executor)
    .await
}

/// A page of an organization's users in id order, after `after` when given.
pub async fn list<'e>(
    executor: impl PgExecutor<'e>,
    org_id: OrgId,
    after: Option<UserId>,
    limit: i64,
) -> Result<Vec<User>, sqlx::Error> {
    sqlx::query_as(
        "SELECT id, org_id, email, name, created_at FROM users
         WHERE org_id = $1 AND ($2::uuid IS NULL OR id > $2)
         ORDER BY id LIMIT $3",
    )
    .bind(org_id)
    .bind(after)
    .bind(limit)
    .fetch_all(executor)
    .await
}
