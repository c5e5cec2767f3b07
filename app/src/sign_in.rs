//! Signing in to the dashboard and setting a password with a one-time link, for every surface
//! that signs people in: the throttle of attempts, the password check, the password rules and
//! the hashing.
//!
//! Passwords are argon2id hashes, at most [`hashing_permits`] at once in a process (each takes
//! 19 MiB and a core for tens of milliseconds), off the async threads. Sign-in attempts are
//! throttled in Postgres by a growing delay per account e-mail and per client address group
//! (`accounts::ACCOUNT_THROTTLE`, `accounts::ADDRESS_THROTTLE`), counted before the password is
//! hashed, so guessing is throttled across replicas and in parallel. An unknown account costs the
//! same hashing work, so timing does not reveal which exist.

use std::sync::LazyLock;
use std::time::Duration;

use argon2::Argon2;
use argon2::password_hash::phc::PasswordHash;
use argon2::password_hash::{PasswordHasher, PasswordVerifier};
use flow_common::db::accounts::{self, Account, Admission, SessionAccount};
use flow_common::db::audit;
use flow_domain::Email;
use flow_domain::audit::AuditAction;
use flow_domain::ids::AccountId;
use tokio::sync::Semaphore;

use crate::{Context, ServiceError};

/// Shortest password accepted.
pub const MIN_PASSWORD_CHARS: usize = 10;
/// Longest password accepted (argon2 takes any length; this bounds the work per request).
pub const MAX_PASSWORD_CHARS: usize = 200;

/// Whose failed attempts hold a sign-in back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Throttled {
    /// The account's e-mail address.
    Account,
    /// The client's address group.
    Address,
}

/// What a sign-in attempt came to.
#[derive(Debug)]
pub enum SignIn {
    /// The e-mail and the password are right and the account is enabled.
    SignedIn(Account),
    /// Too many failed attempts: to try again after the wait.
    Wait(Duration, Throttled),
    /// The e-mail or the password is not right (which, it does not say).
    Refused,
    /// The password is right and the account is disabled.
    Disabled,
}

/// Signs in as `email` with `password` from the client address group `address`.
pub async fn sign_in(
    ctx: &Context,
    email: &Email,
    password: String,
    address: &str,
) -> Result<SignIn, ServiceError> {
    let normalized = email.normalized();
    // Counted before the password is hashed: concurrent guesses count one by one.
    match accounts::admit_sign_in(&ctx.db, &normalized, address).await? {
        Admission::Check => {}
        Admission::AccountWait(wait) => return Ok(SignIn::Wait(wait, Throttled::Account)),
        Admission::AddressWait(wait) => return Ok(SignIn::Wait(wait, Throttled::Address)),
    }
    let credentials = accounts::credentials(&ctx.db, email).await?;
    let stored = credentials
        .as_ref()
        .and_then(|found| found.password_hash.clone());
    // Unknown accounts cost the same hashing work, so timing does not reveal which exist.
    let verified = hashing(move || verify_password(&password, stored.as_deref())).await?;
    let account = match (verified, credentials) {
        (true, Some(found)) => found.account,
        _ => return Ok(SignIn::Refused),
    };
    accounts::sign_in_succeeded(&ctx.db, &normalized, address).await?;
    if account.disabled {
        return Ok(SignIn::Disabled);
    }
    tracing::info!(account_id = %account.id, "dashboard sign-in");
    Ok(SignIn::SignedIn(account))
}

/// The account a one-time sign-in link `token` is for, while it works.
pub async fn link(ctx: &Context, token: &str) -> Result<Option<Account>, ServiceError> {
    Ok(accounts::link_account(&ctx.db, token).await?)
}

/// What setting a password with a link came to.
#[derive(Debug)]
pub enum PasswordSet {
    /// Set: the account, signed in from now on (every other session of it has ended).
    Set(Account),
    /// The new password breaks a rule (see [`password_problem`]): nothing changed.
    Problem(Account, String),
    /// The link does not work (used, expired, replaced, or never issued).
    LinkInvalid,
}

/// Sets the password `password` (typed twice: `confirm`) of the account of the link `token`.
pub async fn set_password(
    ctx: &Context,
    token: &str,
    password: String,
    confirm: &str,
) -> Result<PasswordSet, ServiceError> {
    let Some(account) = accounts::link_account(&ctx.db, token).await? else {
        return Ok(PasswordSet::LinkInvalid);
    };
    if let Some(problem) = password_problem(&password, confirm) {
        return Ok(PasswordSet::Problem(account, problem));
    }
    let hash = hashing(move || hash_password(&password))
        .await?
        .map_err(|error| ServiceError::Internal(anyhow::anyhow!(error)))?;
    // Every other session of the account ends with the password it knew.
    let mut transaction = ctx.db.begin().await?;
    let Some(account) = accounts::set_password_with_link(&mut transaction, token, &hash).await?
    else {
        // Used or expired meanwhile.
        return Ok(PasswordSet::LinkInvalid);
    };
    accounts::forget_failures(&mut *transaction, &account.email.to_lowercase()).await?;
    audit::record(
        &mut *transaction,
        account.org_id,
        audit::Actor::Account(&account.email),
        AuditAction::AccountPasswordSet,
        &account.id.to_string(),
        &account.email,
    )
    .await?;
    transaction.commit().await?;
    tracing::info!(account_id = %account.id, "dashboard password set");
    Ok(PasswordSet::Set(account))
}

/// What is wrong with a new password, if anything.
pub fn password_problem(password: &str, confirm: &str) -> Option<String> {
    let length = password.chars().count();
    if length < MIN_PASSWORD_CHARS {
        Some(format!(
            "Use at least {MIN_PASSWORD_CHARS} characters (a few words make a good password)."
        ))
    } else if length > MAX_PASSWORD_CHARS {
        Some(format!("Use at most {MAX_PASSWORD_CHARS} characters."))
    } else if password != confirm {
        Some("The two passwords are not the same.".to_owned())
    } else {
        None
    }
}

/// Password hashes (and checks) run at once in this process: one per core. Each takes 19 MiB
/// and a core for tens of milliseconds; more requests wait for a permit (within the request
/// timeout) rather than exhaust memory.
pub fn hashing_permits() -> usize {
    std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
}

static HASHING: LazyLock<Semaphore> = LazyLock::new(|| Semaphore::new(hashing_permits()));

/// Runs a password hash or check off the async threads, holding one of the process's
/// [`hashing_permits`].
async fn hashing<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, ServiceError> {
    let _permit = HASHING
        .acquire()
        .await
        .map_err(|error| ServiceError::Internal(anyhow::anyhow!(error)))?;
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|error| ServiceError::Internal(anyhow::anyhow!(error)))
}

/// A PHC string of a throwaway password, to verify against when the account has none.
static DECOY_HASH: LazyLock<String> =
    LazyLock::new(|| hash_password("decoy password never used").unwrap_or_default());

/// An argon2id hash (PHC string) of `password` with a random salt.
pub fn hash_password(password: &str) -> Result<String, String> {
    Argon2::default()
        .hash_password(password.as_bytes())
        .map(|hash| hash.to_string())
        .map_err(|error| error.to_string())
}

/// Whether `password` matches `stored`; without a stored hash, the same work is done and the
/// answer is no.
pub fn verify_password(password: &str, stored: Option<&str>) -> bool {
    let candidate = stored.unwrap_or(DECOY_HASH.as_str());
    let Ok(parsed) = PasswordHash::new(candidate) else {
        return false;
    };
    let matches = Argon2::default()
        .verify_password(password.as_bytes(), &parsed)
        .is_ok();
    matches && stored.is_some()
}

/// What a dashboard session of an account stands for now.
pub enum Session {
    /// The account, enabled, with the same session generation: the session goes on.
    Valid(SessionAccount),
    /// The account is gone.
    Gone,
    /// The account was disabled, demoted, or its password set or reset since the session began
    /// (its generation moved on): the session has ended.
    Ended,
}

/// Whether a session of the account `id` begun under session generation `generation` is still
/// valid.
pub async fn session(
    ctx: &Context,
    id: AccountId,
    generation: i64,
) -> Result<Session, ServiceError> {
    Ok(match accounts::session_account(&ctx.db, id).await? {
        None => Session::Gone,
        Some(found) if found.account.disabled || found.account.session_generation != generation => {
            Session::Ended
        }
        Some(found) => Session::Valid(found),
    })
}
