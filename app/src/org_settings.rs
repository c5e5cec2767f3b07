//! The organization's lifecycle settings (issue 37, design §16), for every surface: whether
//! deactivating a user cancels their open assignments (`cancelOnDeactivate`, default off), and
//! the default reminder policy of the flows without one of their own (`reminders`, checked by
//! the rules of a flow's). Read and changed by the organization's API keys and its dashboard
//! admins; a change is audited as `settings.updated`.

use flow_common::db::audit;
use flow_common::db::orgs::{self, OrgSettings};
use flow_domain::Invalid;
use flow_domain::audit::AuditAction;
use flow_domain::reminders::ReminderPolicy;

use crate::{Acting, Context, ServiceError};

/// A settings change as a surface received it: each field absent (`None`) or set
/// (`reminders: Some(None)` removes the default policy).
#[derive(Debug, Clone, Default)]
pub struct SettingsFields {
    /// Whether deactivating a user cancels their open assignments.
    pub cancel_on_deactivate: Option<bool>,
    /// The default reminder policy.
    pub reminders: Option<Option<ReminderPolicy>>,
}

/// A checked settings change.
#[derive(Debug, Clone, PartialEq)]
pub struct SettingsEdit {
    cancel_on_deactivate: Option<bool>,
    reminders: Option<Option<ReminderPolicy>>,
}

/// Checks a change: the policy by the rules of a flow's; at least one field.
pub fn check(fields: SettingsFields) -> Result<SettingsEdit, Invalid> {
    let reminders = fields
        .reminders
        .map(|policy| policy.map(ReminderPolicy::checked).transpose())
        .transpose()?;
    if fields.cancel_on_deactivate.is_none() && reminders.is_none() {
        return Err(Invalid::new(
            "nothing to change: give cancelOnDeactivate or reminders (null removes the default \
             reminder policy)",
        ));
    }
    Ok(SettingsEdit {
        cancel_on_deactivate: fields.cancel_on_deactivate,
        reminders,
    })
}

/// The organization's settings.
pub async fn get(ctx: &Context, acting: Acting<'_>) -> Result<OrgSettings, ServiceError> {
    orgs::settings(&ctx.db, acting.org_id())
        .await?
        .ok_or(ServiceError::NotFound("organization"))
}

/// Changes the organization's settings; audited as `settings.updated` naming what changed.
/// Answers the settings as they are then.
pub async fn update(
    ctx: &Context,
    acting: Acting<'_>,
    edit: &SettingsEdit,
) -> Result<OrgSettings, ServiceError> {
    let mut transaction = ctx.db.begin().await?;
    let settings = orgs::update_settings(
        &mut *transaction,
        acting.org_id(),
        edit.cancel_on_deactivate,
        edit.reminders.as_ref().map(Option::as_ref),
    )
    .await?
    .ok_or(ServiceError::NotFound("organization"))?;
    let changed: Vec<String> = [
        edit.cancel_on_deactivate
            .map(|on| format!("cancelOnDeactivate: {on}")),
        edit.reminders.as_ref().map(|policy| match policy {
            Some(_) => "reminders".to_owned(),
            None => "reminders removed".to_owned(),
        }),
    ]
    .into_iter()
    .flatten()
    .collect();
    audit::record(
        &mut *transaction,
        acting.org_id(),
        acting.actor,
        AuditAction::SettingsUpdated,
        &acting.org_id().to_string(),
        &changed.join(", "),
    )
    .await?;
    transaction.commit().await?;
    tracing::info!(org_id = %acting.org_id(), changed = %changed.join(", "), "organization settings changed");
    Ok(settings)
}
