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
    /// False once deactivated (SCIM `active: false` or DELETE): assigns to them are refused.
    pub active: bool,
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
/// Duplicate e-mails within `users` are merged (the last name wins). An erased user is never
/// touched: an input with the pseudonym of one is left out of the answer (the services refuse
/// such addresses before).
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
                WHERE users.erased_at IS NULL
            RETURNING id, org_id, email, email_normalized, name, active, created_at,
                      (xmax = 0) AS created
         )
         SELECT t.ord, u.id, u.org_id, u.email, u.name, u.active, u.created_at, u.created
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
        "SELECT id, org_id, email, name, active, created_at FROM users
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
        "SELECT id, org_id, email, name, active, created_at FROM users
         WHERE org_id = $1 AND ($2::uuid IS NULL OR id > $2)
         ORDER BY id LIMIT $3",
    )
    .bind(org_id)
    .bind(after)
    .bind(limit)
    .fetch_all(executor)
    .await
}

/// One of the e-mail addresses an identity provider keeps on a user.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ProfileEmail {
    /// The address.
    pub value: String,
    /// What it is for (`work`, `home`, `other`), as sent.
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Whether it is the primary address.
    #[serde(default)]
    pub primary: bool,
}

/// What an identity provider (SCIM) says of a user: the address the service identifies them
/// by, the name every surface shows, and the profile attributes of migration 0180.
#[derive(Debug, Clone, PartialEq)]
pub struct Profile {
    /// The address the service identifies the person by.
    pub email: Email,
    /// The name every surface shows.
    pub name: Option<String>,
    /// False: deactivated.
    pub active: bool,
    pub external_id: Option<String>,
    pub given_name: Option<String>,
    pub family_name: Option<String>,
    pub formatted_name: Option<String>,
    pub title: Option<String>,
    pub department: Option<String>,
    pub employee_number: Option<String>,
    /// The provider's id of the manager.
    pub manager_id: Option<String>,
    pub manager_name: Option<String>,
    pub start_date: Option<chrono::NaiveDate>,
    /// The addresses as the provider sent them.
    pub emails: Vec<ProfileEmail>,
    /// The SCIM `userName` when it is not `email` (a login such as `jdoe`); `None` when the
    /// userName is the address.
    pub scim_user_name: Option<String>,
}

/// A stored user with their profile.
#[derive(Debug, Clone, FromRow)]
pub struct ProfileRow {
    pub id: UserId,
    pub email: String,
    pub name: Option<String>,
    pub active: bool,
    pub external_id: Option<String>,
    pub given_name: Option<String>,
    pub family_name: Option<String>,
    pub formatted_name: Option<String>,
    pub title: Option<String>,
    pub department: Option<String>,
    pub employee_number: Option<String>,
    pub manager_id: Option<String>,
    pub manager_name: Option<String>,
    pub start_date: Option<chrono::NaiveDate>,
    pub emails: sqlx::types::Json<Vec<ProfileEmail>>,
    pub created_at: DateTime<Utc>,
    /// Every write moves it forward: the resource's version (ETag).
    pub updated_at: DateTime<Utc>,
    /// Set by a SCIM DELETE or an erasure: SCIM answers 404 for the user from then on.
    pub scim_deleted_at: Option<DateTime<Utc>>,
    /// Set by an erasure: the row is a pseudonym, no write may give it a profile again.
    pub erased_at: Option<DateTime<Utc>>,
    /// The SCIM `userName` when it is not `email`.
    pub scim_user_name: Option<String>,
}

const PROFILE_COLUMNS: &str = "u.id, u.email, u.name, u.active, u.external_id, u.given_name,
    u.family_name, u.formatted_name, u.title, u.department, u.employee_number, u.manager_id,
    u.manager_name, u.start_date, u.emails, u.created_at, u.updated_at, u.scim_deleted_at,
    u.erased_at, u.scim_user_name";

/// The next version of a row: now, and always after the last one, so that two writes in the
/// same microsecond still change the ETag.
const NEXT_VERSION: &str = "GREATEST(clock_timestamp(), u.updated_at + interval '1 microsecond')";

/// A user and their profile, locked for an update when `lock`.
pub async fn profile(
    connection: &mut sqlx::PgConnection,
    org_id: OrgId,
    id: UserId,
    lock: bool,
) -> Result<Option<ProfileRow>, sqlx::Error> {
    let lock = if lock { "FOR UPDATE" } else { "" };
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {PROFILE_COLUMNS} FROM users u WHERE u.org_id = $1 AND u.id = $2 {lock}"
    )))
    .bind(org_id)
    .bind(id)
    .fetch_optional(connection)
    .await
}

/// The user with this e-mail (case-insensitive) and their profile, locked for an update.
pub async fn profile_by_email_for_update(
    connection: &mut sqlx::PgConnection,
    org_id: OrgId,
    email: &Email,
) -> Result<Option<ProfileRow>, sqlx::Error> {
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {PROFILE_COLUMNS} FROM users u
         WHERE u.org_id = $1 AND u.email_normalized = $2 FOR UPDATE"
    )))
    .bind(org_id)
    .bind(email.normalized())
    .fetch_optional(connection)
    .await
}

/// A statement answering a [`ProfileRow`].
type ProfileQuery<'q> =
    sqlx::query::QueryAs<'q, sqlx::Postgres, ProfileRow, sqlx::postgres::PgArguments>;

/// Binds `profile` as the next sixteen parameters of `query` (`$3` to `$18` after its two
/// ids), in this order: email, email_normalized, name, active, external_id, given_name,
/// family_name, formatted_name, title, department, employee_number, manager_id, manager_name,
/// start_date, emails, scim_user_name. One binding for the insert and the update, so they cannot drift apart.
fn bind_profile<'q>(query: ProfileQuery<'q>, profile: &'q Profile) -> ProfileQuery<'q> {
    query
        .bind(profile.email.as_str())
        .bind(profile.email.normalized())
        .bind(profile.name.as_deref())
        .bind(profile.active)
        .bind(profile.external_id.as_deref())
        .bind(profile.given_name.as_deref())
        .bind(profile.family_name.as_deref())
        .bind(profile.formatted_name.as_deref())
        .bind(profile.title.as_deref())
        .bind(profile.department.as_deref())
        .bind(profile.employee_number.as_deref())
        .bind(profile.manager_id.as_deref())
        .bind(profile.manager_name.as_deref())
        .bind(profile.start_date)
        .bind(sqlx::types::Json(&profile.emails))
        .bind(profile.scim_user_name.as_deref())
}

/// Inserts a user with a profile. A user with the same e-mail is a unique violation
/// (`users_org_id_email_normalized_key`).
pub async fn insert_profile(
    connection: &mut sqlx::PgConnection,
    org_id: OrgId,
    profile: &Profile,
) -> Result<ProfileRow, sqlx::Error> {
    let query = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "INSERT INTO users AS u (id, org_id, email, email_normalized, name, active, deactivated_at,
                          external_id, given_name, family_name, formatted_name, title, department,
                          employee_number, manager_id, manager_name, start_date, emails,
                          scim_user_name)
         VALUES ($1, $2, $3, $4, $5, $6, CASE WHEN $6 THEN NULL ELSE now() END, $7, $8, $9, $10,
                 $11, $12, $13, $14, $15, $16, $17, $18)
         RETURNING {PROFILE_COLUMNS}"
    )))
    .bind(UserId::new())
    .bind(org_id);
    bind_profile(query, profile).fetch_one(connection).await
}

/// Replaces a user's profile (e-mail and name included). Deactivation stamps `deactivated_at`
/// once, reactivation clears it; `revive` clears a SCIM deletion. A taken e-mail is a unique
/// violation.
pub async fn update_profile(
    connection: &mut sqlx::PgConnection,
    org_id: OrgId,
    id: UserId,
    profile: &Profile,
    revive: bool,
) -> Result<ProfileRow, sqlx::Error> {
    let query = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "UPDATE users u SET email = $3, email_normalized = $4, name = $5, active = $6,
                deactivated_at = CASE WHEN $6 THEN NULL ELSE COALESCE(u.deactivated_at, now()) END,
                external_id = $7, given_name = $8, family_name = $9, formatted_name = $10,
                title = $11, department = $12, employee_number = $13, manager_id = $14,
                manager_name = $15, start_date = $16, emails = $17, scim_user_name = $18,
                scim_deleted_at = CASE WHEN $19 THEN NULL ELSE u.scim_deleted_at END,
                updated_at = {NEXT_VERSION}
         WHERE u.org_id = $1 AND u.id = $2
         RETURNING {PROFILE_COLUMNS}"
    )))
    .bind(org_id)
    .bind(id);
    bind_profile(query, profile)
        .bind(revive)
        .fetch_one(connection)
        .await
}

/// Deactivates a user and marks them deleted for SCIM (their record and history stay).
pub async fn mark_scim_deleted(
    connection: &mut sqlx::PgConnection,
    org_id: OrgId,
    id: UserId,
) -> Result<(), sqlx::Error> {
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "UPDATE users u SET active = false, deactivated_at = COALESCE(u.deactivated_at, now()),
                scim_deleted_at = now(), updated_at = {NEXT_VERSION}
         WHERE u.org_id = $1 AND u.id = $2"
    )))
    .bind(org_id)
    .bind(id)
    .execute(connection)
    .await
    .map(|_| ())
}

/// A page of the organization's users SCIM sees (not SCIM-deleted, which erased users are too) matching `filter`, in id
/// order from `offset`, and how many match in all.
pub async fn search_profiles(
    pool: &sqlx::PgPool,
    org_id: OrgId,
    filter: Option<&super::scim_filter::SqlFilter>,
    offset: u64,
    limit: usize,
) -> Result<(u64, Vec<ProfileRow>), sqlx::Error> {
    let listing = super::scim_filter::Listing {
        table: "users u",
        alias: "u",
        columns: PROFILE_COLUMNS,
        condition: Some("u.scim_deleted_at IS NULL"),
    };
    super::scim_filter::search_page(pool, &listing, org_id, filter, offset, limit).await
}

/// Which of `ids` are users of the organization that SCIM sees (group members must be).
pub async fn existing_ids(
    connection: &mut sqlx::PgConnection,
    org_id: OrgId,
    ids: &[UserId],
) -> Result<Vec<UserId>, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT id FROM users WHERE org_id = $1 AND id = ANY($2) AND scim_deleted_at IS NULL",
    )
    .bind(org_id)
    .bind(ids)
    .fetch_all(connection)
    .await
}
