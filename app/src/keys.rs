//! API keys, for every surface: generate one (its secret shown once), revoke one (every replica
//! drops it at once), roll one (its replacement now, the old key working for a chosen time).
//! Each change commits with its audit row.

use std::time::Duration;

use flow_common::db::audit;
use flow_common::db::keys::{self, ApiKey, Rolled};
use flow_domain::TextRule;
use flow_domain::audit::AuditAction;
use flow_domain::ids::{KeyId, OrgId};

use crate::Context;
use crate::{Acting, FieldProblem, ProblemKind, ServiceError};

/// Longest key name.
pub const MAX_NAME_CHARS: usize = 100;

/// The rule of a key's name: one line, at most [`MAX_NAME_CHARS`].
const NAME: TextRule = TextRule {
    max_chars: MAX_NAME_CHARS,
    multiline: false,
};

/// A key with its secret, which is shown this once.
#[derive(Debug, Clone)]
pub struct WithSecret {
    /// The key.
    pub key: ApiKey,
    /// The secret.
    pub secret: String,
}

/// Checks a key's name: required, one line, at most [`MAX_NAME_CHARS`].
fn check_name(text: &str) -> Result<String, ServiceError> {
    if text.trim().is_empty() {
        return Err(ServiceError::Fields(vec![FieldProblem::missing("name")]));
    }
    if text.trim().chars().count() > MAX_NAME_CHARS {
        return Err(ServiceError::Fields(vec![FieldProblem {
            field: "name",
            kind: ProblemKind::TooLong(MAX_NAME_CHARS),
            problem: flow_domain::Invalid(format!(
                "name must be at most {MAX_NAME_CHARS} characters"
            )),
        }]));
    }
    NAME.parse("name", text)
        .map_err(|problem| ServiceError::Fields(vec![FieldProblem::invalid("name", problem)]))
}

/// Generates a key named `name` (who uses it), restricted to SCIM provisioning when
/// `scim_only` (the key an identity provider holds: refused on `/v1`).
pub async fn generate(
    ctx: &Context,
    acting: Acting<'_>,
    name: &str,
    scim_only: bool,
) -> Result<WithSecret, ServiceError> {
    let name = check_name(name)?;
    let mut transaction = ctx.db.begin().await?;
    let (key, secret) =
        keys::create_scoped(&mut *transaction, acting.org_id(), &name, scim_only).await?;
    let detail = if scim_only {
        format!("{name} (SCIM only)")
    } else {
        name.clone()
    };
    audit::record(
        &mut *transaction,
        acting.org_id(),
        acting.actor,
        AuditAction::KeyCreated,
        &key.id.to_string(),
        &detail,
    )
    .await?;
    transaction.commit().await?;
    tracing::info!(key_id = %key.id, "API key generated");
    Ok(WithSecret { key, secret })
}

/// Revokes a working key of the organization: every request with it is refused from now on.
/// Another organization's key and one already revoked are [`ServiceError::NotFound`].
pub async fn revoke(ctx: &Context, acting: Acting<'_>, id: KeyId) -> Result<(), ServiceError> {
    revoke_scoped(ctx, Some(acting.org_id()), id, acting.actor).await
}

/// Revokes a working key by its id alone, whatever its organization: an operator's act
/// (`flowctl key revoke`).
pub async fn revoke_as_operator(ctx: &Context, id: KeyId) -> Result<(), ServiceError> {
    revoke_scoped(ctx, None, id, audit::Actor::Flowctl).await
}

/// Revokes key `id` (of `org_id` when given) with its audit row, in one transaction.
async fn revoke_scoped(
    ctx: &Context,
    org_id: Option<OrgId>,
    id: KeyId,
    actor: audit::Actor<'_>,
) -> Result<(), ServiceError> {
    let mut transaction = ctx.db.begin().await?;
    if keys::revoke(&mut transaction, org_id, id).await?.is_none() {
        return Err(ServiceError::NotFound("key"));
    }
    audit::record_for_key(&mut *transaction, id, actor, AuditAction::KeyRevoked).await?;
    transaction.commit().await?;
    tracing::info!(key_id = %id, "API key revoked");
    Ok(())
}

/// Rolls a working key: its replacement (same name) now, the old key working `overlap` more.
pub async fn roll(
    ctx: &Context,
    acting: Acting<'_>,
    id: KeyId,
    overlap: Duration,
) -> Result<WithSecret, ServiceError> {
    let org_id = acting.org_id();
    let mut transaction = ctx.db.begin().await?;
    let Rolled { old, key, secret } = keys::roll(&mut transaction, org_id, id, overlap)
        .await?
        .ok_or(ServiceError::NotFound("key"))?;
    let detail = format!("{} (replaced by {}…)", old.name, key.prefix);
    audit::record(
        &mut *transaction,
        org_id,
        acting.actor,
        AuditAction::KeyRolled,
        &old.id.to_string(),
        &detail,
    )
    .await?;
    transaction.commit().await?;
    tracing::info!(old_key_id = %id, key_id = %key.id, "API key rolled");
    Ok(WithSecret { key, secret })
}

/// The organization's API keys, revoked ones too, oldest first.
pub async fn list(ctx: &Context, acting: Acting<'_>) -> Result<Vec<ApiKey>, ServiceError> {
    Ok(keys::list(&ctx.db, acting.org_id()).await?)
}
