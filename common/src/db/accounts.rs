//! Dashboard accounts: people of one organization who sign in to the dashboard as `admin` or
//! `viewer`, their one-time sign-in links (invitation or password reset, valid 24 hours; only a
//! SHA-256 of the token is kept), and the failed sign-in attempts that throttle guessing.

use std::time::Duration;

use chrono::{DateTime, Utc};
use flow_domain::Email;
use flow_domain::ids::{AccountId, OrgId};
use sha2::{Digest, Sha256};
use sqlx::{FromRow, PgConnection, PgExecutor};

use super::orgs::Organization;

/// How long a sign-in link works.
pub const LINK_VALIDITY: Duration = Duration::from_secs(24 * 3600);

/// What an account may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Everything in its organization: keys, webhooks, assigns, users, schedules, team.
    Admin,
    /// Read only.
    Viewer,
}

impl Role {
    /// Parses `admin` or `viewer`.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "admin" => Some(Self::Admin),
            "viewer" => Some(Self::Viewer),
            _ => None,
        }
    }

    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Admin => "admin",
            Self::Viewer => "viewer",
        }
    }
}

/// An account (never its password hash).
#[derive(Debug, Clone, FromRow)]
pub struct Account {
    pub id: AccountId,
    /// Organization.
    pub org_id: OrgId,
    /// E-mail as given.
    pub email: String,
    /// `admin` or `viewer`.
    pub role: String,
    /// Whether a password has been set (through a sign-in link).
    pub has_password: bool,
    /// Creation time.
    pub created_at: DateTime<Utc>,
}

impl Account {
    /// The role (unknown values read as viewer: the column is constrained anyway).
    pub fn role(&self) -> Role {
        Role::parse(&self.role).unwrap_or(Role::Viewer)
    }
}

const ACCOUNT_COLUMNS: &str =
    "a.id, a.org_id, a.email, a.role, (a.password_hash IS NOT NULL) AS has_password, a.created_at";

/// Creates an account; `None` when the e-mail already has an account (in any organization).
pub async fn create<'e>(
    executor: impl PgExecutor<'e>,
    org_id: OrgId,
    email: &Email,
    role: Role,
) -> Result<Option<Account>, sqlx::Error> {
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "INSERT INTO dashboard_accounts AS a (id, org_id, email, email_normalized, role)
         VALUES ($1, $2, $3, $4, $5)
         ON CONFLICT (email_normalized) DO NOTHING
         RETURNING {ACCOUNT_COLUMNS}"
    )))
    .bind(AccountId::new())
    .bind(org_id)
    .bind(email.as_str())
    .bind(email.normalized())
    .bind(role.as_str())
    .fetch_optional(executor)
    .await
}

/// An account by e-mail (case-insensitive), in any organization.
pub async fn find_by_email<'e>(
    executor: impl PgExecutor<'e>,
    email: &Email,
) -> Result<Option<Account>, sqlx::Error> {
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {ACCOUNT_COLUMNS} FROM dashboard_accounts a WHERE a.email_normalized = $1"
    )))
    .bind(email.normalized())
    .fetch_optional(executor)
    .await
}

/// An account of `org_id` by id.
pub async fn get<'e>(
    executor: impl PgExecutor<'e>,
    org_id: OrgId,
    id: AccountId,
) -> Result<Option<Account>, sqlx::Error> {
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {ACCOUNT_COLUMNS} FROM dashboard_accounts a WHERE a.id = $1 AND a.org_id = $2"
    )))
    .bind(id)
    .bind(org_id)
    .fetch_optional(executor)
    .await
}

/// The accounts of an organization, oldest first.
pub async fn list<'e>(
    executor: impl PgExecutor<'e>,
    org_id: OrgId,
) -> Result<Vec<Account>, sqlx::Error> {
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {ACCOUNT_COLUMNS} FROM dashboard_accounts a WHERE a.org_id = $1
         ORDER BY a.created_at, a.id"
    )))
    .bind(org_id)
    .fetch_all(executor)
    .await
}

/// A signed-in account with its organization, as each dashboard request reads it.
#[derive(Debug, Clone)]
pub struct SessionAccount {
    /// The account.
    pub account: Account,
    /// Its organization.
    pub org: Organization,
}

/// The account behind a session, with its organization; `None` once the account is gone.
pub async fn session_account<'e>(
    executor: impl PgExecutor<'e>,
    id: AccountId,
) -> Result<Option<SessionAccount>, sqlx::Error> {
    #[derive(FromRow)]
    struct Row {
        #[sqlx(flatten)]
        account: Account,
        org_name: String,
        org_tier: String,
        org_timezone: String,
        org_assign_limit: Option<i32>,
        org_report_limit: Option<i32>,
        org_created_at: DateTime<Utc>,
    }
    let row: Option<Row> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {ACCOUNT_COLUMNS}, o.name AS org_name, o.tier AS org_tier,
                o.timezone AS org_timezone, o.assign_limit_per_minute AS org_assign_limit,
                o.report_limit_per_minute AS org_report_limit, o.created_at AS org_created_at
         FROM dashboard_accounts a JOIN organizations o ON o.id = a.org_id
         WHERE a.id = $1"
    )))
    .bind(id)
    .fetch_optional(executor)
    .await?;
    Ok(row.map(|row| SessionAccount {
        org: Organization {
            id: row.account.org_id,
            name: row.org_name,
            tier: row.org_tier,
            timezone: row.org_timezone,
            assign_limit_per_minute: row.org_assign_limit,
            report_limit_per_minute: row.org_report_limit,
            created_at: row.org_created_at,
        },
        account: row.account,
    }))
}

/// What signing in compares: the account and its password hash (if one was set).
#[derive(Debug, Clone, FromRow)]
pub struct Credentials {
    /// The account.
    #[sqlx(flatten)]
    pub account: Account,
    /// argon2id PHC string.
    pub password_hash: Option<String>,
}

/// The credentials of the account with this e-mail.
pub async fn credentials<'e>(
    executor: impl PgExecutor<'e>,
    email: &Email,
) -> Result<Option<Credentials>, sqlx::Error> {
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {ACCOUNT_COLUMNS}, a.password_hash FROM dashboard_accounts a
         WHERE a.email_normalized = $1"
    )))
    .bind(email.normalized())
    .fetch_optional(executor)
    .await
}

/// SHA-256 of a link token: what is stored and looked up.
fn token_hash(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// Issues a one-time sign-in link token for an account, valid for [`LINK_VALIDITY`]. Earlier
/// unused links of the account stop working, so only the newest one is live.
pub async fn issue_link(
    connection: &mut PgConnection,
    account_id: AccountId,
) -> Result<(String, DateTime<Utc>), sqlx::Error> {
    let mut bytes = [0u8; 32];
    rand::fill(&mut bytes);
    let token = hex::encode(bytes);
    sqlx::query(
        "UPDATE dashboard_sign_in_links SET expires_at = now()
         WHERE account_id = $1 AND used_at IS NULL AND expires_at > now()",
    )
    .bind(account_id)
    .execute(&mut *connection)
    .await?;
    let expires_at: DateTime<Utc> = sqlx::query_scalar(
        "INSERT INTO dashboard_sign_in_links (token_hash, account_id, expires_at)
         VALUES ($1, $2, now() + $3 * interval '1 millisecond') RETURNING expires_at",
    )
    .bind(token_hash(&token).as_slice())
    .bind(account_id)
    .bind(i64::try_from(LINK_VALIDITY.as_millis()).unwrap_or(i64::MAX))
    .fetch_one(&mut *connection)
    .await?;
    Ok((token, expires_at))
}

/// The account a live (unused, unexpired) link token opens.
pub async fn link_account<'e>(
    executor: impl PgExecutor<'e>,
    token: &str,
) -> Result<Option<Account>, sqlx::Error> {
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {ACCOUNT_COLUMNS} FROM dashboard_sign_in_links l
         JOIN dashboard_accounts a ON a.id = l.account_id
         WHERE l.token_hash = $1 AND l.used_at IS NULL AND l.expires_at > now()"
    )))
    .bind(token_hash(token).as_slice())
    .fetch_optional(executor)
    .await
}

/// Uses a live link: sets the account's password hash and spends the link, at most once even
/// under concurrent use. `None` when the link is unknown, used or expired.
pub async fn set_password_with_link(
    connection: &mut PgConnection,
    token: &str,
    password_hash: &str,
) -> Result<Option<Account>, sqlx::Error> {
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "WITH spent AS (
            UPDATE dashboard_sign_in_links SET used_at = now()
            WHERE token_hash = $1 AND used_at IS NULL AND expires_at > now()
            RETURNING account_id
         )
         UPDATE dashboard_accounts a SET password_hash = $2, updated_at = now()
         FROM spent WHERE a.id = spent.account_id
         RETURNING {ACCOUNT_COLUMNS}"
    )))
    .bind(token_hash(token).as_slice())
    .bind(password_hash)
    .fetch_optional(&mut *connection)
    .await
}

/// What a failed sign-in is counted against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureScope {
    /// The e-mail that was tried.
    Account,
    /// The client address it came from.
    Address,
}

impl FailureScope {
    fn as_str(self) -> &'static str {
        match self {
            Self::Account => "account",
            Self::Address => "address",
        }
    }
}

/// Failed sign-ins of `subject` within the last `window`, and when the oldest of them leaves the
/// window (so the caller can say how long to wait).
pub async fn recent_failures<'e>(
    executor: impl PgExecutor<'e>,
    scope: FailureScope,
    subject: &str,
    window: Duration,
) -> Result<(i64, Option<DateTime<Utc>>), sqlx::Error> {
    sqlx::query_as(
        "SELECT count(*), min(failed_at) + $3 * interval '1 millisecond'
         FROM dashboard_sign_in_failures
         WHERE scope = $1 AND subject = $2 AND failed_at > now() - $3 * interval '1 millisecond'",
    )
    .bind(scope.as_str())
    .bind(subject)
    .bind(i64::try_from(window.as_millis()).unwrap_or(i64::MAX))
    .fetch_one(executor)
    .await
}

/// Records a failed sign-in against the account e-mail and the address, and forgets failures
/// older than a day.
pub async fn record_failure<'e>(
    executor: impl PgExecutor<'e>,
    email_normalized: &str,
    address: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "WITH pruned AS (
            DELETE FROM dashboard_sign_in_failures WHERE failed_at < now() - interval '1 day'
         )
         INSERT INTO dashboard_sign_in_failures (scope, subject)
         VALUES ('account', $1), ('address', $2)",
    )
    .bind(email_normalized)
    .bind(address)
    .execute(executor)
    .await
    .map(|_| ())
}

/// Forgets the failed sign-ins of an account after it signed in.
pub async fn clear_failures<'e>(
    executor: impl PgExecutor<'e>,
    email_normalized: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query("DELETE FROM dashboard_sign_in_failures WHERE scope = 'account' AND subject = $1")
        .bind(email_normalized)
        .execute(executor)
        .await
        .map(|_| ())
}

/// Creates an account and its first sign-in link in the caller's transaction; `None` when the
/// e-mail already has an account.
pub async fn invite(
    connection: &mut PgConnection,
    org_id: OrgId,
    email: &Email,
    role: Role,
) -> Result<Option<(Account, String, DateTime<Utc>)>, sqlx::Error> {
    let Some(account) = create(&mut *connection, org_id, email, role).await? else {
        return Ok(None);
    };
    let (token, expires_at) = issue_link(connection, account.id).await?;
    Ok(Some((account, token, expires_at)))
}

/// The address of a sign-in link on a service reachable at `base_url`.
pub fn link_url(base_url: &str, token: &str) -> String {
    format!(
        "{}/dashboard/welcome/{token}",
        base_url.trim_end_matches('/')
    )
}
