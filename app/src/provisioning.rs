//! What the provisioning operations ([`crate::users`], [`crate::groups`]) share: the result of a
//! write with the users it changed, which then go through the enrollment rules, and the edit of a
//! row read and locked in the transaction that writes the change.

use std::borrow::Cow;

use flow_domain::ids::UserId;

use crate::Context;
use crate::{Acting, ServiceError};

/// What a write did, and the users whose attributes or group memberships it changed: those
/// enrollment rules look at again.
#[derive(Debug, Clone)]
pub struct Changed<T> {
    /// The result of the write.
    pub value: T,
    /// The users it changed, each once.
    pub users: Vec<UserId>,
}

impl<T> Changed<T> {
    /// `value`, with `user` changed or not.
    pub(super) fn of(value: T, user: Option<UserId>) -> Self {
        Self {
            value,
            users: user.into_iter().collect(),
        }
    }

    /// Runs the organization's enrollment rules for the users this write changed, and the
    /// `also` ones (a write that changed nothing because its first try already did, whose rules
    /// may not have run then). After the commit: a failure fails the request (503 for a broker
    /// or database fault), and the caller's retry evaluates again; a (rule, user) pair assigns
    /// once however often it is evaluated.
    pub(super) async fn with_rules<E: From<ServiceError>>(
        self,
        ctx: &Context,
        acting: Acting<'_>,
        also: Option<UserId>,
    ) -> Result<Self, E> {
        let users: Cow<'_, [UserId]> = match also.filter(|id| !self.users.contains(id)) {
            None => Cow::Borrowed(&self.users),
            Some(id) => Cow::Owned(self.users.iter().copied().chain([id]).collect()),
        };
        crate::enrollment::users_changed(ctx, acting, &users).await?;
        Ok(self)
    }
}

/// Whether `error` is a unique violation (a taken e-mail or group name).
pub(crate) fn is_unique_violation(error: &sqlx::Error) -> bool {
    matches!(error, sqlx::Error::Database(database) if database.is_unique_violation())
}

/// What a change is about, read and locked in the transaction that is to write the change.
pub(super) struct Locked<T> {
    /// The change's transaction.
    pub transaction: sqlx::Transaction<'static, sqlx::Postgres>,
    /// The value as stored.
    pub current: T,
}

/// What an edit of a [`Locked`] value asks for.
pub(super) enum Edit<T, I> {
    /// Nothing new: the value as stored (its transaction ended, its lock released).
    Unchanged(T),
    /// The fields `after` in place of `before`, to write in the locked value's transaction.
    To {
        /// The value, still locked.
        locked: Locked<T>,
        /// Its fields as stored.
        before: I,
        /// Its fields as the edit wants them.
        after: I,
    },
}

impl<T> Locked<T> {
    /// Applies `edit` (which may check a precondition, such as an ETag, and fail with its own
    /// error) to the stored value, whose writable fields `fields` reads, and says whether
    /// anything is to be written.
    pub(super) fn edit<I: PartialEq, E: From<ServiceError>>(
        self,
        fields: impl FnOnce(&T) -> Result<I, ServiceError>,
        edit: impl FnOnce(&T) -> Result<I, E>,
    ) -> Result<Edit<T, I>, E> {
        let before = fields(&self.current)?;
        let after = edit(&self.current)?;
        if after == before {
            return Ok(Edit::Unchanged(self.current));
        }
        Ok(Edit::To {
            locked: self,
            before,
            after,
        })
    }
}
