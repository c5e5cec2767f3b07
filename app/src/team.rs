//! Dashboard accounts of an organization, for every surface that manages people (the Team page
//! today, SCIM next): invite (a one-time sign-in link), issue a new link (which resets the
//! password), remove, disable, enable, change the role. Each change commits with its audit row;
//! the last admin cannot be removed, disabled or demoted.

use chrono::{DateTime, Utc};
use flow_common::db::accounts::{self, Account, AccountChange, ChangeError, Changed};
use flow_common::db::audit;
use flow_domain::audit::AuditAction;
use flow_domain::ids::AccountId;
use flow_domain::{Email, Role};

use crate::Context;
use crate::{Acting, FieldProblem, ServiceError};

/// A one-time sign-in link, shown once.
#[derive(Debug, Clone)]
pub struct IssuedLink {
    /// Whose.
    pub account: Account,
    /// The address to open.
    pub url: String,
    /// Until when it works.
    pub expires_at: DateTime<Utc>,
}

/// Why an invitation of an address that is not on this team is refused. An e-mail address names
/// one account across every organization, so the invitation is refused, but the words say
/// nothing of where the address is used.
pub fn cannot_invite(email: &Email) -> String {
    format!("{email} cannot be invited. Ask the person for another e-mail address.")
}

/// Invites `email` as `role`: an account without a password, and its first sign-in link.
pub async fn invite(
    ctx: &Context,
    acting: Acting<'_>,
    email: &str,
    role: Role,
) -> Result<IssuedLink, ServiceError> {
    let email = Email::parse("email", email.trim())
        .map_err(|problem| ServiceError::Fields(vec![FieldProblem::invalid("email", problem)]))?;
    let org_id = acting.org_id();
    let mut transaction = ctx.db.begin().await?;
    let Some((invited, token, expires_at)) =
        accounts::invite(&mut transaction, org_id, &email, role).await?
    else {
        drop(transaction);
        // Name the account only when it is this organization's: whether an address has an
        // account elsewhere is another organization's business.
        let ours = accounts::find_by_email(&ctx.db, &email)
            .await?
            .is_some_and(|existing| existing.org_id == org_id);
        return Err(ServiceError::Conflict(if ours {
            format!("{email} is already on this team; use New sign-in link in the list below.")
        } else {
            cannot_invite(&email)
        }));
    };
    audit::record(
        &mut *transaction,
        org_id,
        acting.actor,
        AuditAction::AccountInvited,
        &invited.id.to_string(),
        &format!("{} ({})", invited.email, invited.role),
    )
    .await?;
    transaction.commit().await?;
    tracing::info!(account_id = %invited.id, "dashboard account invited");
    Ok(IssuedLink {
        url: accounts::link_url(&ctx.settings.public_base_url, &token),
        account: invited,
        expires_at,
    })
}

/// A change refused: the account is not in the organization, or the change would leave it
/// without an admin, or a link was asked for a disabled account.
fn refused(error: ChangeError) -> ServiceError {
    match error {
        ChangeError::NotFound => ServiceError::NotFound("account"),
        ChangeError::Database(error) => ServiceError::Database(error),
        ChangeError::LastAdmin(email) => ServiceError::Conflict(format!(
            "{email} is the last admin of this organization, so it cannot be removed, disabled \
             or made a viewer. Make another account an admin first."
        )),
        ChangeError::Disabled(email) => ServiceError::Conflict(format!(
            "{email} is disabled. Enable it before creating a sign-in link."
        )),
    }
}

/// Issues a new sign-in link for the account `id`: its password stops working and its sessions
/// end at once; with its audit row, in one transaction.
pub async fn new_link(
    ctx: &Context,
    acting: Acting<'_>,
    id: AccountId,
) -> Result<IssuedLink, ServiceError> {
    let org_id = acting.org_id();
    let mut transaction = ctx.db.begin().await?;
    let reset = accounts::reset_with_link(&mut transaction, org_id, id)
        .await
        .map_err(refused)?;
    let detail = if reset.had_password {
        format!("{} (password reset)", reset.account.email)
    } else {
        reset.account.email.clone()
    };
    audit::record(
        &mut *transaction,
        org_id,
        acting.actor,
        AuditAction::AccountLinkIssued,
        &reset.account.id.to_string(),
        &detail,
    )
    .await?;
    transaction.commit().await?;
    Ok(IssuedLink {
        url: accounts::link_url(&ctx.settings.public_base_url, &reset.token),
        account: reset.account,
        expires_at: reset.expires_at,
    })
}

/// Removes, disables, enables or changes the role of the account `id`; removing, disabling and
/// demoting end its sessions on every replica. A change that changes something commits with its
/// audit row.
pub async fn change(
    ctx: &Context,
    acting: Acting<'_>,
    id: AccountId,
    change: AccountChange,
) -> Result<Changed, ServiceError> {
    let org_id = acting.org_id();
    let mut transaction = ctx.db.begin().await?;
    let changed = accounts::change(&mut transaction, org_id, id, change)
        .await
        .map_err(refused)?;
    if !changed.changed {
        return Ok(changed);
    }
    let was = &changed.was;
    let (action, detail) = match change {
        AccountChange::Remove => (
            AuditAction::AccountRemoved,
            format!("{} ({})", was.email, was.role),
        ),
        AccountChange::Disable => (AuditAction::AccountDisabled, was.email.clone()),
        AccountChange::Enable => (AuditAction::AccountEnabled, was.email.clone()),
        AccountChange::SetRole(role) => (
            AuditAction::AccountRoleChanged,
            format!("{}: {} → {}", was.email, was.role, role.as_str()),
        ),
    };
    audit::record(
        &mut *transaction,
        org_id,
        acting.actor,
        action,
        &was.id.to_string(),
        &detail,
    )
    .await?;
    transaction.commit().await?;
    Ok(changed)
}

/// The organization's dashboard accounts, oldest first.
pub async fn list(ctx: &Context, acting: Acting<'_>) -> Result<Vec<Account>, ServiceError> {
    Ok(accounts::list(&ctx.db, acting.org_id()).await?)
}

/// The dashboard account with the e-mail `email`, whatever its organization (an e-mail names one
/// account across organizations): an operator's lookup (`flowctl admin`), not a team's.
pub async fn by_email(ctx: &Context, email: &Email) -> Result<Option<Account>, ServiceError> {
    Ok(accounts::find_by_email(&ctx.db, email).await?)
}
