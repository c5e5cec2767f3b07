//! Groups of users an identity provider pushes (SCIM), and their members; names are unique per
//! organization case-insensitively. Every write moves `updated_at` forward: the version (ETag).

use chrono::{DateTime, Utc};
use flow_domain::ids::{GroupId, OrgId, UserId};
use sqlx::{FromRow, PgConnection, PgPool};

use super::scim_filter::{Listing, SqlFilter, search_page};

/// A group row.
#[derive(Debug, Clone, FromRow)]
pub struct GroupRow {
    pub id: GroupId,
    pub display_name: String,
    pub external_id: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// A member of a group, with the name to show for them.
#[derive(Debug, Clone, FromRow)]
pub struct MemberRow {
    pub group_id: GroupId,
    pub user_id: UserId,
    /// The user's name, else their e-mail.
    pub display: String,
}

const COLUMNS: &str = "g.id, g.display_name, g.external_id, g.created_at, g.updated_at";

/// The form group names are unique in.
fn normalized(name: &str) -> String {
    name.trim().to_lowercase()
}

/// Inserts a group. A taken name is a unique violation.
pub async fn insert(
    connection: &mut PgConnection,
    org_id: OrgId,
    display_name: &str,
    external_id: Option<&str>,
) -> Result<GroupRow, sqlx::Error> {
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "INSERT INTO user_groups AS g (id, org_id, display_name, display_name_normalized,
                                       external_id)
         VALUES ($1, $2, $3, $4, $5) RETURNING {COLUMNS}"
    )))
    .bind(GroupId::new())
    .bind(org_id)
    .bind(display_name)
    .bind(normalized(display_name))
    .bind(external_id)
    .fetch_one(connection)
    .await
}

/// A group of the organization, locked for an update when `lock`.
pub async fn get(
    connection: &mut PgConnection,
    org_id: OrgId,
    id: GroupId,
    lock: bool,
) -> Result<Option<GroupRow>, sqlx::Error> {
    let lock = if lock { "FOR UPDATE" } else { "" };
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {COLUMNS} FROM user_groups g WHERE g.org_id = $1 AND g.id = $2 {lock}"
    )))
    .bind(org_id)
    .bind(id)
    .fetch_optional(connection)
    .await
}

/// Renames a group and sets its external id; moves its version on.
pub async fn update(
    connection: &mut PgConnection,
    org_id: OrgId,
    id: GroupId,
    display_name: &str,
    external_id: Option<&str>,
) -> Result<GroupRow, sqlx::Error> {
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "UPDATE user_groups g SET display_name = $3, display_name_normalized = $4,
                external_id = $5,
                updated_at = GREATEST(clock_timestamp(), g.updated_at + interval '1 microsecond')
         WHERE g.org_id = $1 AND g.id = $2 RETURNING {COLUMNS}"
    )))
    .bind(org_id)
    .bind(id)
    .bind(display_name)
    .bind(normalized(display_name))
    .bind(external_id)
    .fetch_one(connection)
    .await
}

/// A group a user belongs to.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct GroupRef {
    /// The group.
    pub id: GroupId,
    /// Its name.
    pub display_name: String,
}

/// The groups `user_id` belongs to, by name.
pub async fn of_user<'e>(
    executor: impl sqlx::PgExecutor<'e>,
    org_id: OrgId,
    user_id: UserId,
) -> Result<Vec<GroupRef>, sqlx::Error> {
    sqlx::query_as(
        "SELECT g.id, g.display_name FROM user_group_members m
         JOIN user_groups g ON g.id = m.group_id
         WHERE m.org_id = $1 AND m.user_id = $2
         ORDER BY g.display_name_normalized, g.id",
    )
    .bind(org_id)
    .bind(user_id)
    .fetch_all(executor)
    .await
}

/// The members of the groups, by group then user id.
pub async fn members<'e>(
    executor: impl sqlx::PgExecutor<'e>,
    org_id: OrgId,
    groups: &[GroupId],
) -> Result<Vec<MemberRow>, sqlx::Error> {
    sqlx::query_as(
        "SELECT m.group_id, m.user_id, COALESCE(u.name, u.email) AS display
         FROM user_group_members m JOIN users u ON u.id = m.user_id
         WHERE m.org_id = $1 AND m.group_id = ANY($2)
         ORDER BY m.group_id, m.user_id",
    )
    .bind(org_id)
    .bind(groups)
    .fetch_all(executor)
    .await
}

/// How many members the groups have together, counting no further than `up_to` (so that the
/// count of a huge group costs no more than a bounded read).
pub async fn member_count<'e>(
    executor: impl sqlx::PgExecutor<'e>,
    org_id: OrgId,
    groups: &[GroupId],
    up_to: i64,
) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT count(*) FROM (
             SELECT 1 FROM user_group_members
             WHERE org_id = $1 AND group_id = ANY($2) LIMIT $3) counted",
    )
    .bind(org_id)
    .bind(groups)
    .bind(up_to)
    .fetch_one(executor)
    .await
}

/// Adds users to a group; returns those who were not members yet.
pub async fn add_members(
    connection: &mut PgConnection,
    org_id: OrgId,
    group: GroupId,
    users: &[UserId],
) -> Result<Vec<UserId>, sqlx::Error> {
    sqlx::query_scalar(
        "INSERT INTO user_group_members (group_id, user_id, org_id)
         SELECT $2, user_id, $1 FROM UNNEST($3::uuid[]) AS t(user_id)
         ON CONFLICT DO NOTHING RETURNING user_id",
    )
    .bind(org_id)
    .bind(group)
    .bind(users)
    .fetch_all(connection)
    .await
}

/// Removes users from a group; returns those who were members.
pub async fn remove_members(
    connection: &mut PgConnection,
    org_id: OrgId,
    group: GroupId,
    users: &[UserId],
) -> Result<Vec<UserId>, sqlx::Error> {
    sqlx::query_scalar(
        "DELETE FROM user_group_members
         WHERE org_id = $1 AND group_id = $2 AND user_id = ANY($3) RETURNING user_id",
    )
    .bind(org_id)
    .bind(group)
    .bind(users)
    .fetch_all(connection)
    .await
}

/// Deletes a group; returns its former members.
pub async fn delete(
    connection: &mut PgConnection,
    org_id: OrgId,
    id: GroupId,
) -> Result<Vec<UserId>, sqlx::Error> {
    let members = sqlx::query_scalar(
        "DELETE FROM user_group_members WHERE org_id = $1 AND group_id = $2 RETURNING user_id",
    )
    .bind(org_id)
    .bind(id)
    .fetch_all(&mut *connection)
    .await?;
    sqlx::query("DELETE FROM user_groups WHERE org_id = $1 AND id = $2")
        .bind(org_id)
        .bind(id)
        .execute(&mut *connection)
        .await?;
    Ok(members)
}

/// A page of the organization's groups matching `filter`, in id order from `offset`, and how
/// many match in all.
pub async fn search(
    pool: &PgPool,
    org_id: OrgId,
    filter: Option<&SqlFilter>,
    offset: u64,
    limit: usize,
) -> Result<(u64, Vec<GroupRow>), sqlx::Error> {
    let listing = Listing {
        table: "user_groups g",
        alias: "g",
        columns: COLUMNS,
        condition: None,
    };
    search_page(pool, &listing, org_id, filter, offset, limit).await
}

/// Removes a user from every group of the organization (a SCIM deletion).
pub async fn leave_all(
    connection: &mut PgConnection,
    org_id: OrgId,
    user: UserId,
) -> Result<(), sqlx::Error> {
    sqlx::query("DELETE FROM user_group_members WHERE org_id = $1 AND user_id = $2")
        .bind(org_id)
        .bind(user)
        .execute(connection)
        .await
        .map(|_| ())
}
