//! What the provisioning operations ([`crate::users`], [`crate::groups`]) share: the result of a
//! write with the users it changed, which then go through the enrollment rules, the edit of a
//! row read and locked in the transaction that writes the change, and that transaction's commit
//! with its audit row.

use std::borrow::Cow;

use flow_common::db::audit;
use flow_domain::audit::AuditAction;
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

impl<T> Locked<T> {
    /// Reads the value with `read` (which locks it) in a new transaction, kept for the change.
    pub(super) async fn read(
        ctx: &Context,
        read: impl AsyncFnOnce(&mut sqlx::PgConnection) -> Result<T, ServiceError>,
    ) -> Result<Self, ServiceError> {
        let mut transaction = ctx.db.begin().await?;
        let current = read(&mut *transaction).await?;
        Ok(Self {
            transaction,
            current,
        })
    }

    /// Applies `edit` (which may check a precondition, such as an ETag, and fail with its own
    /// error) to the stored value, whose writable fields `fields` reads. When the fields stay as
    /// they are, nothing is written: `unchanged` answers with the value as stored (the
    /// transaction ended, the lock released). Else `write` writes the fields `after` in place of
    /// `before` in the locked value's transaction.
    pub(super) async fn change<I: PartialEq, R, E: From<ServiceError>>(
        self,
        fields: impl FnOnce(&T) -> Result<I, ServiceError>,
        edit: impl FnOnce(&T) -> Result<I, E>,
        unchanged: impl AsyncFnOnce(T) -> Result<R, ServiceError>,
        write: impl AsyncFnOnce(Self, I, I) -> Result<R, ServiceError>,
    ) -> Result<R, E> {
        let before = fields(&self.current)?;
        let after = edit(&self.current)?;
        if after == before {
            // End the transaction (releasing the lock and its connection) before `unchanged`,
            // which may run the rules on connections of its own.
            let Self {
                transaction,
                current,
            } = self;
            drop(transaction);
            return Ok(unchanged(current).await?);
        }
        Ok(write(self, before, after).await?)
    }
}

/// Writes the audit row of a change (`action` on `target`, in the words of `detail`) in the
/// change's transaction, and commits it.
pub(super) async fn commit_audited(
    mut transaction: sqlx::Transaction<'static, sqlx::Postgres>,
    acting: Acting<'_>,
    action: AuditAction,
    target: &str,
    detail: &str,
) -> Result<(), sqlx::Error> {
    audit::record(
        &mut *transaction,
        acting.org_id(),
        acting.actor,
        action,
        target,
        detail,
    )
    .await?;
    transaction.commit().await
}
