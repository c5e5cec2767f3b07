//! Users (assignees), for every surface: each one checked by one rule (an e-mail, and a name of
//! one line of at most 200 characters), then upserted by e-mail, one, many in one transaction
//! (all or nothing), or an imported file's worth in batches. Every write then runs the
//! organization's enrollment rules for the users it wrote ([`super::enrollment::users_changed`]).

use flow_common::db::users::{self, NewUser, User};
use flow_domain::{Email, Invalid, TextRule};

use super::{Acting, ServiceError};
use crate::state::AppState;

/// Users written per statement of an import.
const IMPORT_BATCH: usize = 1_000;

/// Checks a user; `prefix` names where it sits in the request (`users[3].` in a bulk), so the
/// error names the field as the caller wrote it.
pub fn check(email: Option<&str>, name: Option<&str>, prefix: &str) -> Result<NewUser, Invalid> {
    let email = Email::parse(&format!("{prefix}email"), email.unwrap_or(""))?;
    let name = name
        .map(|name| TextRule::NAME.parse(&format!("{prefix}name"), name))
        .transpose()?;
    Ok(NewUser { email, name })
}

/// Creates the users, or updates the names of those that exist, in one statement (all or
/// nothing); returns them in input order, each saying whether it was created.
pub async fn upsert(
    state: &AppState,
    acting: Acting<'_>,
    new: &[NewUser],
) -> Result<Vec<User>, ServiceError> {
    let rows = users::upsert(&state.db, acting.org_id(), new).await?;
    let ids: Vec<_> = rows.iter().map(|user| user.id).collect();
    // A failure here fails the request; its retry (an upsert is idempotent) evaluates again.
    super::enrollment::users_changed(state, acting, &ids).await?;
    Ok(rows)
}

/// What an import did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Imported {
    /// New users.
    pub created: usize,
    /// Users whose name was updated.
    pub updated: usize,
}

/// Upserts an imported file's users, [`IMPORT_BATCH`] per statement. A file naming one person
/// twice counts them once; the last row's name wins, as in a bulk upsert.
pub async fn import(
    state: &AppState,
    acting: Acting<'_>,
    new: Vec<NewUser>,
) -> Result<Imported, ServiceError> {
    let mut seen = std::collections::HashMap::new();
    let mut unique: Vec<NewUser> = Vec::with_capacity(new.len());
    for user in new {
        match seen.get(&user.email.normalized()) {
            Some(&index) => unique[index] = user,
            None => {
                seen.insert(user.email.normalized(), unique.len());
                unique.push(user);
            }
        }
    }
    let mut imported = Imported::default();
    for batch in unique.chunks(IMPORT_BATCH) {
        let rows = users::upsert(&state.db, acting.org_id(), batch).await?;
        let ids: Vec<_> = rows.iter().map(|user| user.id).collect();
        super::enrollment::users_changed(state, acting, &ids).await?;
        let created = rows.iter().filter(|user| user.created).count();
        imported.created += created;
        imported.updated += rows.len() - created;
    }
    tracing::info!(
        created = imported.created,
        updated = imported.updated,
        "users imported"
    );
    Ok(imported)
}
