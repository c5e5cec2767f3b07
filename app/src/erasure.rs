//! Erasure of a person on request, for every surface (the API and `flowctl users erase`): their e-mail and names become a
//! pseudonym everywhere the service keeps them, the user is deactivated, and an audit row names
//! the user by id and pseudonym only. What is kept and why: docs/privacy.md.

use flow_common::db::audit;
use flow_common::db::erasure::{self, Erased};
use flow_domain::audit::AuditAction;
use flow_domain::ids::UserId;

use crate::Context;
use crate::{Acting, ServiceError};

/// Erases the user. Erasing an erased user again answers the same pseudonym and changes
/// nothing more.
pub async fn erase(
    ctx: &Context,
    acting: Acting<'_>,
    user_id: UserId,
) -> Result<Erased, ServiceError> {
    let org_id = acting.org_id();
    let mut transaction = ctx.db.begin().await?;
    let erased = erasure::erase_user(&mut transaction, org_id, user_id)
        .await?
        .ok_or(ServiceError::NotFound("user"))?;
    audit::record(
        &mut *transaction,
        org_id,
        acting.actor,
        AuditAction::UserErased,
        &user_id.to_string(),
        &erased.pseudonym,
    )
    .await?;
    transaction.commit().await?;
    tracing::info!(user_id = %user_id, "user erased");
    Ok(erased)
}
