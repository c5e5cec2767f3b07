//! Dashboard accounts: people of one organization who sign in to the dashboard as `admin` or
//! `viewer`, their one-time sign-in links (invitation or password reset, valid 24 hours; only a
//! SHA-256 of the token is kept), the changes an admin or `flowctl` makes to them (remove,
//! disable, enable, role, new link; each ends the sessions it must, in the caller's transaction,
//! which writes the audit row: `flow_app::team`), and the sign-in throttle (a growing delay per account e-mail and per
//! client address).

use std::time::Duration;

use chrono::{DateTime, Utc};
use flow_domain::Email;
use flow_domain::ids::{AccountId, OrgId};
use sha2::{Digest, Sha256};
use sqlx::{FromRow, PgConnection, PgExecutor, PgPool};

use super::orgs::Organization;
use super::sessions;

/// How long a sign-in link works.
pub const LINK_VALIDITY: Duration = Duration::from_secs(24 * 3600);

pub use flow_domain::Role;

/// An account (never its password hash).
#[derive(Debug, Clone, FromRow)]
pub struct Account {
    pub id: AccountId,
    /// Organization.
    pub org_id: OrgId,
    /// E-mail as given.
    pub email: String,
    /// What it may do (a stored name this build does not know fails the read).
    pub role: Role,
    /// Whether a password has been set (through a sign-in link).
    pub has_password: bool,
    /// Whether the account is disabled: it cannot sign in, and its sessions have ended.
    pub disabled: bool,
    /// The account's session generation: a session started under another one has ended.
    pub session_generation: i64,
    /// Creation time.
    pub created_at: DateTime<Utc>,
}

impl Account {
    /// The role.
    pub fn role(&self) -> Role {
        self.role
    }
}

const ACCOUNT_COLUMNS: &str = "a.id, a.org_id, a.email, a.role, \
    (a.password_hash IS NOT NULL) AS has_password, (a.disabled_at IS NOT NULL) AS disabled, \
    a.session_generation, a.created_at";

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
    .bind(role)
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

/// The account behind a session, with its organization; `None` once the account is gone. The
/// caller compares the account's [`Account::session_generation`] and [`Account::disabled`] with
/// the session.
pub async fn session_account<'e>(
    executor: impl PgExecutor<'e>,
    id: AccountId,
) -> Result<Option<SessionAccount>, sqlx::Error> {
    #[derive(FromRow)]
    struct Row {
        #[sqlx(flatten)]
        account: Account,
        org_name: String,
        org_tier: super::orgs::Tier,
        org_timezone: String,
        org_assign_limit: Option<i32>,
        org_report_limit: Option<i32>,
        org_created_at: DateTime<Utc>,
        org_bulk_lane: i64,
    }
    let row: Option<Row> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {ACCOUNT_COLUMNS}, o.name AS org_name, o.tier AS org_tier,
                o.timezone AS org_timezone, o.assign_limit_per_minute AS org_assign_limit,
                o.report_limit_per_minute AS org_report_limit, o.created_at AS org_created_at,
                o.bulk_lane AS org_bulk_lane
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
            bulk_lane: row.org_bulk_lane,
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

/// The account a live (unused, unexpired) link token opens; links of a disabled account open
/// nothing.
pub async fn link_account<'e>(
    executor: impl PgExecutor<'e>,
    token: &str,
) -> Result<Option<Account>, sqlx::Error> {
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {ACCOUNT_COLUMNS} FROM dashboard_sign_in_links l
         JOIN dashboard_accounts a ON a.id = l.account_id
         WHERE l.token_hash = $1 AND l.used_at IS NULL AND l.expires_at > now()
           AND a.disabled_at IS NULL"
    )))
    .bind(token_hash(token).as_slice())
    .fetch_optional(executor)
    .await
}

/// Uses a live link: sets the account's password hash, spends the link (at most once even under
/// concurrent use) and ends every other session of the account (see [`end_sessions`]), in the
/// caller's transaction; the caller then starts the new session under the returned account's
/// generation. `None` when the link is unknown, used or expired, or its account disabled.
pub async fn set_password_with_link(
    connection: &mut PgConnection,
    token: &str,
    password_hash: &str,
) -> Result<Option<Account>, sqlx::Error> {
    let account: Option<Account> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "WITH spent AS (
            UPDATE dashboard_sign_in_links SET used_at = now()
            WHERE token_hash = $1 AND used_at IS NULL AND expires_at > now()
              AND account_id IN (SELECT id FROM dashboard_accounts WHERE disabled_at IS NULL)
            RETURNING account_id
         )
         UPDATE dashboard_accounts a SET password_hash = $2, updated_at = now(),
                session_generation = a.session_generation + 1
         FROM spent WHERE a.id = spent.account_id
         RETURNING {ACCOUNT_COLUMNS}"
    )))
    .bind(token_hash(token).as_slice())
    .bind(password_hash)
    .fetch_optional(&mut *connection)
    .await?;
    if let Some(account) = &account {
        sessions::delete_for_account(&mut *connection, &account.id.to_string()).await?;
    }
    Ok(account)
}

/// Ends every session of an account at once, on every replica: its session generation moves on,
/// so a session that is in flight or being started now is refused at its next request, and its
/// session rows are deleted. In the caller's transaction.
pub async fn end_sessions(
    connection: &mut PgConnection,
    account_id: AccountId,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "UPDATE dashboard_accounts SET session_generation = session_generation + 1,
                updated_at = now()
         WHERE id = $1",
    )
    .bind(account_id)
    .execute(&mut *connection)
    .await?;
    sessions::delete_for_account(&mut *connection, &account_id.to_string()).await?;
    Ok(())
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

/// A change an admin (on the Team page) or an operator (`flowctl admin`) makes to an account.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AccountChange {
    /// Deletes the account (and its links) and ends its sessions.
    Remove,
    /// The account can no longer sign in; its sessions and live links end.
    Disable,
    /// The account signs in again (with its password, or a new link if it had none).
    Enable,
    /// Makes the account an admin or a viewer; a demotion ends its sessions.
    SetRole(Role),
}

/// Why a change to an account was refused.
#[derive(Debug, thiserror::Error)]
pub enum ChangeError {
    /// No such account in the organization.
    #[error("no such dashboard account in this organization")]
    NotFound,
    /// The change would leave the organization without an enabled admin.
    #[error(
        "{0} is the last admin of its organization and cannot be removed, disabled or made a \
         viewer: make another account an admin first"
    )]
    LastAdmin(String),
    /// A sign-in link was asked for a disabled account.
    #[error("{0} is disabled: enable it before issuing a sign-in link")]
    Disabled(String),
    /// Postgres failed.
    #[error(transparent)]
    Database(#[from] sqlx::Error),
}

/// What a change did.
#[derive(Debug, Clone)]
pub struct Changed {
    /// The account as it is now (as it was, once removed).
    pub account: Account,
    /// The account as it was before the change.
    pub was: Account,
    /// False when the account was already so: nothing was written.
    pub changed: bool,
}

/// Locks, in the caller's transaction, the organization's enabled admins (in id order, so
/// concurrent changes queue instead of deadlocking) and then the account `id`; returns the
/// admins' ids and the account. The admin count then holds until commit: two admins demoting
/// each other at once cannot leave none.
async fn lock_for_change(
    connection: &mut PgConnection,
    org_id: OrgId,
    id: AccountId,
) -> Result<(Vec<AccountId>, Account), ChangeError> {
    let admins: Vec<AccountId> = sqlx::query_scalar(
        "SELECT id FROM dashboard_accounts
         WHERE org_id = $1 AND role = 'admin' AND disabled_at IS NULL
         ORDER BY id FOR UPDATE",
    )
    .bind(org_id)
    .fetch_all(&mut *connection)
    .await?;
    let account: Account = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {ACCOUNT_COLUMNS} FROM dashboard_accounts a
         WHERE a.id = $1 AND a.org_id = $2 FOR UPDATE"
    )))
    .bind(id)
    .bind(org_id)
    .fetch_optional(&mut *connection)
    .await?
    .ok_or(ChangeError::NotFound)?;
    Ok((admins, account))
}

/// Removes, disables, enables or changes the role of the account `id` of `org_id`, in the
/// caller's transaction (which records the audit row). Removing, disabling and demoting end
/// every session of the account at once (see [`end_sessions`]). The last enabled admin of an organization cannot be
/// removed, disabled or demoted, by anyone.
pub async fn change(
    transaction: &mut PgConnection,
    org_id: OrgId,
    id: AccountId,
    change: AccountChange,
) -> Result<Changed, ChangeError> {
    let (admins, account) = lock_for_change(&mut *transaction, org_id, id).await?;
    let loses_admin = match change {
        AccountChange::Remove | AccountChange::Disable => true,
        AccountChange::SetRole(role) => role != Role::Admin,
        AccountChange::Enable => false,
    };
    if loses_admin && admins == [account.id] {
        return Err(ChangeError::LastAdmin(account.email));
    }
    let unchanged = match change {
        AccountChange::Remove => false,
        AccountChange::Disable => account.disabled,
        AccountChange::Enable => !account.disabled,
        AccountChange::SetRole(role) => account.role() == role,
    };
    if unchanged {
        return Ok(Changed {
            was: account.clone(),
            account,
            changed: false,
        });
    }
    let target = account.id.to_string();
    match change {
        AccountChange::Remove => {
            sessions::delete_for_account(&mut *transaction, &target).await?;
            sqlx::query("DELETE FROM dashboard_accounts WHERE id = $1")
                .bind(account.id)
                .execute(&mut *transaction)
                .await?;
        }
        AccountChange::Disable => {
            sqlx::query(
                "UPDATE dashboard_accounts SET disabled_at = now(), updated_at = now()
                 WHERE id = $1",
            )
            .bind(account.id)
            .execute(&mut *transaction)
            .await?;
            expire_links(&mut *transaction, account.id).await?;
            end_sessions(&mut *transaction, account.id).await?;
        }
        AccountChange::Enable => {
            sqlx::query(
                "UPDATE dashboard_accounts SET disabled_at = NULL, updated_at = now()
                 WHERE id = $1",
            )
            .bind(account.id)
            .execute(&mut *transaction)
            .await?;
        }
        AccountChange::SetRole(role) => {
            sqlx::query(
                "UPDATE dashboard_accounts SET role = $2, updated_at = now() WHERE id = $1",
            )
            .bind(account.id)
            .bind(role)
            .execute(&mut *transaction)
            .await?;
            if role != Role::Admin {
                end_sessions(&mut *transaction, account.id).await?;
            }
        }
    }
    let now = match change {
        AccountChange::Remove => account.clone(),
        _ => get(&mut *transaction, org_id, id)
            .await?
            .ok_or(ChangeError::NotFound)?,
    };
    Ok(Changed {
        account: now,
        was: account,
        changed: true,
    })
}

/// Makes the account's unused links stop working.
async fn expire_links(
    connection: &mut PgConnection,
    account_id: AccountId,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "UPDATE dashboard_sign_in_links SET expires_at = now()
         WHERE account_id = $1 AND used_at IS NULL AND expires_at > now()",
    )
    .bind(account_id)
    .execute(&mut *connection)
    .await
    .map(|_| ())
}

/// A link issued by [`reset_with_link`].
#[derive(Debug, Clone)]
pub struct Reset {
    /// The account as it is now (no password).
    pub account: Account,
    /// Whether it had a password that stopped working.
    pub had_password: bool,
    /// The link's token.
    pub token: String,
    /// When the link stops working.
    pub expires_at: DateTime<Utc>,
}

/// Issues a new one-time sign-in link for the account `id` of `org_id` that resets it, in the
/// caller's transaction: its password stops working, every session of it ends and earlier links
/// stop working, at once. The person sets a new password with the link. Refused for a disabled
/// account.
pub async fn reset_with_link(
    transaction: &mut PgConnection,
    org_id: OrgId,
    id: AccountId,
) -> Result<Reset, ChangeError> {
    let account: Account = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {ACCOUNT_COLUMNS} FROM dashboard_accounts a
         WHERE a.id = $1 AND a.org_id = $2 FOR UPDATE"
    )))
    .bind(id)
    .bind(org_id)
    .fetch_optional(&mut *transaction)
    .await?
    .ok_or(ChangeError::NotFound)?;
    if account.disabled {
        return Err(ChangeError::Disabled(account.email));
    }
    sqlx::query(
        "UPDATE dashboard_accounts SET password_hash = NULL, updated_at = now() WHERE id = $1",
    )
    .bind(account.id)
    .execute(&mut *transaction)
    .await?;
    end_sessions(&mut *transaction, account.id).await?;
    let (token, expires_at) = issue_link(&mut *transaction, account.id).await?;
    let had_password = account.has_password;
    let account = get(&mut *transaction, org_id, id)
        .await?
        .ok_or(ChangeError::NotFound)?;
    Ok(Reset {
        account,
        had_password,
        token,
        expires_at,
    })
}

/// A growing delay between the sign-in attempts of one subject (an account e-mail, or a client
/// address group). The first [`ThrottleRule::free`] attempts of a streak are checked at once;
/// from then on each checked attempt doubles the wait before the next one is even checked, from
/// [`ThrottleRule::first_delay`] up to [`ThrottleRule::max_delay`]. A streak is forgotten
/// [`ThrottleRule::forget_after`] its last checked attempt (and an account's when it signs in).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThrottleRule {
    /// Failed attempts of a streak checked without waiting.
    pub free: u32,
    /// The wait after the first failure past the free ones.
    pub first_delay: Duration,
    /// The longest wait.
    pub max_delay: Duration,
    /// Quiet time after which a streak starts over.
    pub forget_after: Duration,
}

impl ThrottleRule {
    /// The wait before the next attempt is checked, after `failures` failed attempts of a streak.
    pub fn delay(&self, failures: u32) -> Duration {
        match failures.checked_sub(self.free) {
            None => Duration::ZERO,
            Some(past) => self
                .first_delay
                .saturating_mul(2_u32.saturating_pow(past))
                .min(self.max_delay),
        }
    }
}

/// Per account e-mail (known or not, so the answers do not tell which exist): 3 failures at once,
/// then 2 s, 4 s, 8 s, … capped at one minute, forgotten after 15 quiet minutes. The cap is low so
/// that a stranger who knows an address can make its owner wait a minute at most per attempt of
/// theirs, and their own address's delay ([`ADDRESS_THROTTLE`]) limits how often they can.
pub const ACCOUNT_THROTTLE: ThrottleRule = ThrottleRule {
    free: 3,
    first_delay: Duration::from_secs(2),
    max_delay: Duration::from_secs(60),
    forget_after: Duration::from_secs(15 * 60),
};

/// Per client address (an IPv4 address, an IPv6 /64): 20 failures at once (people behind one
/// proxy share it), then 2 s, 4 s, … capped at 15 minutes (reached after 29 failures), forgotten
/// after a quiet hour.
pub const ADDRESS_THROTTLE: ThrottleRule = ThrottleRule {
    free: 20,
    first_delay: Duration::from_secs(2),
    max_delay: Duration::from_secs(15 * 60),
    forget_after: Duration::from_secs(3600),
};

/// What a sign-in attempt may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Check the password: the attempt is counted as a failure until
    /// [`sign_in_succeeded`] takes it back.
    Check,
    /// The client address failed too often: wait this long.
    AddressWait(Duration),
    /// The account e-mail failed too often: wait this long.
    AccountWait(Duration),
}

/// The wait still due for a subject with `failures` failures, the last checked `age` ago, and the
/// failures that count (none once the streak is forgotten).
fn throttle_state(rule: &ThrottleRule, failures: i32, age: Duration) -> (Duration, u32) {
    let failures = if age >= rule.forget_after {
        0
    } else {
        u32::try_from(failures).unwrap_or(0)
    };
    (rule.delay(failures).saturating_sub(age), failures)
}

/// Admits a sign-in attempt of the account e-mail `account` (normalized) from the client
/// address group `address`, or says how long to wait. An admitted attempt is counted as a failure
/// of both before its password is checked, under the rows' locks, so concurrent guesses are
/// counted one by one and only the ones their delays allow are checked. A refused attempt counts
/// for nothing: it neither waits longer nor makes anyone else wait.
pub async fn admit_sign_in(
    pool: &PgPool,
    account: &str,
    address: &str,
) -> Result<Admission, sqlx::Error> {
    let mut transaction = pool.begin().await?;
    let mut states = Vec::with_capacity(2);
    // The account's row first, then the address's, in every transaction: no deadlock.
    for (scope, subject, rule) in [
        ("account", account, &ACCOUNT_THROTTLE),
        ("address", address, &ADDRESS_THROTTLE),
    ] {
        let (failures, age_ms): (i32, i64) = sqlx::query_as(
            "INSERT INTO dashboard_sign_in_throttle AS t (scope, subject) VALUES ($1, $2)
             ON CONFLICT (scope, subject) DO UPDATE SET failures = t.failures
             RETURNING failures,
                       (extract(epoch FROM now() - last_attempt_at) * 1000)::bigint",
        )
        .bind(scope)
        .bind(subject)
        .fetch_one(&mut *transaction)
        .await?;
        let age = Duration::from_millis(u64::try_from(age_ms).unwrap_or(0));
        states.push(throttle_state(rule, failures, age));
    }
    let [
        (account_wait, account_failures),
        (address_wait, address_failures),
    ] = states[..]
    else {
        unreachable!("two subjects");
    };
    if !address_wait.is_zero() {
        return Ok(Admission::AddressWait(address_wait));
    }
    if !account_wait.is_zero() {
        return Ok(Admission::AccountWait(account_wait));
    }
    sqlx::query(
        "UPDATE dashboard_sign_in_throttle t SET failures = v.failures, last_attempt_at = now()
         FROM (VALUES ('account', $1, $3::int), ('address', $2, $4::int)) v (scope, subject, failures)
         WHERE t.scope = v.scope AND t.subject = v.subject",
    )
    .bind(account)
    .bind(address)
    .bind(i32::try_from(account_failures.saturating_add(1)).unwrap_or(i32::MAX))
    .bind(i32::try_from(address_failures.saturating_add(1)).unwrap_or(i32::MAX))
    .execute(&mut *transaction)
    .await?;
    transaction.commit().await?;
    // Forgotten streaks, a few at a time.
    sqlx::query(
        "DELETE FROM dashboard_sign_in_throttle WHERE (scope, subject) IN (
            SELECT scope, subject FROM dashboard_sign_in_throttle
            WHERE last_attempt_at < now() - $1 * interval '1 millisecond'
            LIMIT 100 FOR UPDATE SKIP LOCKED)",
    )
    .bind(
        i64::try_from(
            ADDRESS_THROTTLE
                .forget_after
                .max(ACCOUNT_THROTTLE.forget_after)
                .as_millis(),
        )
        .unwrap_or(i64::MAX),
    )
    .execute(pool)
    .await?;
    Ok(Admission::Check)
}

/// Takes back an admitted attempt whose password was right: the account's streak is forgotten,
/// and the address's loses this attempt (it was not a failure).
pub async fn sign_in_succeeded<'e>(
    executor: impl PgExecutor<'e>,
    account: &str,
    address: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "WITH forgotten AS (
            DELETE FROM dashboard_sign_in_throttle WHERE scope = 'account' AND subject = $1
         )
         UPDATE dashboard_sign_in_throttle SET failures = GREATEST(failures - 1, 0)
         WHERE scope = 'address' AND subject = $2",
    )
    .bind(account)
    .bind(address)
    .execute(executor)
    .await
    .map(|_| ())
}

/// Forgets the sign-in failures of an account e-mail (its password was just set).
pub async fn forget_failures<'e>(
    executor: impl PgExecutor<'e>,
    account: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query("DELETE FROM dashboard_sign_in_throttle WHERE scope = 'account' AND subject = $1")
        .bind(account)
        .execute(executor)
        .await
        .map(|_| ())
}

/// The address of a sign-in link on a service reachable at `base_url`.
pub fn link_url(base_url: &str, token: &str) -> String {
    format!(
        "{}/dashboard/welcome/{token}",
        base_url.trim_end_matches('/')
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_delay_doubles_past_the_free_failures_up_to_its_cap() {
        let account: Vec<u64> = (0..12)
            .map(|failures| ACCOUNT_THROTTLE.delay(failures).as_secs())
            .collect();
        assert_eq!(account, [0, 0, 0, 2, 4, 8, 16, 32, 60, 60, 60, 60]);
        assert_eq!(ADDRESS_THROTTLE.delay(19), Duration::ZERO);
        assert_eq!(ADDRESS_THROTTLE.delay(20), Duration::from_secs(2));
        assert_eq!(ADDRESS_THROTTLE.delay(28), Duration::from_secs(512));
        assert_eq!(ADDRESS_THROTTLE.delay(29), Duration::from_secs(900));
        assert_eq!(ADDRESS_THROTTLE.delay(u32::MAX), Duration::from_secs(900));
    }

    #[test]
    fn a_streak_is_forgotten_after_its_quiet_time() {
        let (wait, failures) = throttle_state(&ACCOUNT_THROTTLE, 5, Duration::from_secs(3));
        assert_eq!((wait, failures), (Duration::from_secs(5), 5));
        let (wait, failures) = throttle_state(&ACCOUNT_THROTTLE, 50, Duration::from_secs(15 * 60));
        assert_eq!((wait, failures), (Duration::ZERO, 0));
    }
}
