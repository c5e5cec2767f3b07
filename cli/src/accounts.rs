//! `flowctl admin`: dashboard accounts. `create` makes an account of an organization and prints a
//! one-time sign-in link (valid 24 hours) where the person sets a password; `link` prints a new
//! link for an existing account, which resets it (a forgotten password, or a password someone
//! else may know: the old one and every session end at once); `list` shows an organization's
//! accounts; `remove`, `disable`, `enable` and `role` change one, the same operations as the
//! dashboard's Team page, whose operations (`flow_app::team`) they call (sessions ended at once,
//! the last admin kept, an audit row each, `flowctl` named as the actor).

use anyhow::{Context as _, bail};
use clap::{Subcommand, ValueEnum};
use flow_app::{Caller, Context, ServiceError, team};
use flow_common::config::CoreConfig;
use flow_common::db::accounts::{Account, AccountChange, Role};
use flow_domain::Email;
use flow_domain::ids::OrgId;
use serde::Serialize;

use crate::context::{DEFAULT_BASE_URL, Tool, acting};
use crate::output::Outcome;

/// Dashboard account commands.
#[derive(Subcommand)]
pub enum AdminCommand {
    /// Create a dashboard account and print its one-time sign-in link.
    Create {
        /// Organization id (org_…).
        #[arg(long)]
        org: String,
        /// The person's e-mail (one account per e-mail, across organizations).
        #[arg(long)]
        email: String,
        /// What the account may do.
        #[arg(long, value_enum, default_value_t = RoleArg::Admin)]
        role: RoleArg,
        /// Address the dashboard is reachable at, for the link.
        #[arg(long, env = "PUBLIC_BASE_URL", default_value = "http://localhost:8080")]
        base_url: String,
    },
    /// Print a new one-time sign-in link for an existing account. It resets the account: the old
    /// password and every session end at once, and earlier links stop working.
    Link {
        /// The account's e-mail.
        #[arg(long)]
        email: String,
        /// Address the dashboard is reachable at, for the link.
        #[arg(long, env = "PUBLIC_BASE_URL", default_value = "http://localhost:8080")]
        base_url: String,
    },
    /// List an organization's dashboard accounts.
    List {
        /// Organization id (org_…).
        #[arg(long)]
        org: String,
    },
    /// Delete a dashboard account; its sessions end at once (not the last admin).
    #[command(after_help = "\
Examples:
  flowctl admin remove --email pat@example.com
  flowctl admin role --email pat@example.com --role viewer   # sessions end at once
  flowctl admin disable --email pat@example.com --json       # {\"email\": …, \"state\": \"disabled\", …}")]
    Remove {
        /// The account's e-mail.
        #[arg(long)]
        email: String,
    },
    /// Stop an account from signing in; its sessions and links end at once (not the last admin).
    Disable {
        /// The account's e-mail.
        #[arg(long)]
        email: String,
    },
    /// Let a disabled account sign in again.
    Enable {
        /// The account's e-mail.
        #[arg(long)]
        email: String,
    },
    /// Make an account an admin or a viewer; making an admin a viewer ends its sessions at once
    /// (not the last admin).
    Role {
        /// The account's e-mail.
        #[arg(long)]
        email: String,
        /// The new role.
        #[arg(long, value_enum)]
        role: RoleArg,
    },
}

/// A dashboard account's role.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RoleArg {
    /// Changes anything in the organization.
    Admin,
    /// Reads only.
    Viewer,
}

impl From<RoleArg> for Role {
    fn from(role: RoleArg) -> Self {
        match role {
            RoleArg::Admin => Self::Admin,
            RoleArg::Viewer => Self::Viewer,
        }
    }
}

/// A created account and its link.
#[derive(Debug, Clone, Serialize)]
pub struct Invitation {
    /// The account's e-mail.
    pub email: String,
    /// The one-time sign-in link.
    pub link: String,
}

/// An account as `flowctl admin` prints it.
#[derive(Debug, Clone, Serialize)]
pub struct AccountSummary {
    /// Account id (acc_…).
    pub id: String,
    /// E-mail.
    pub email: String,
    /// `admin` or `viewer`.
    pub role: String,
    /// `active`, `invited` (no password yet), `disabled`, or `removed`.
    pub state: &'static str,
    /// Whether the command changed it (false when it was already so).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub changed: Option<bool>,
}

impl AccountSummary {
    fn of(account: &Account, changed: Option<bool>) -> Self {
        let state = if account.disabled {
            "disabled"
        } else if account.has_password {
            "active"
        } else {
            "invited"
        };
        Self {
            id: account.id.to_string(),
            email: account.email.clone(),
            role: account.role.to_string(),
            state,
            changed,
        }
    }
}

/// The account with this e-mail, in whichever organization, and that organization as the team
/// operations act for it.
async fn by_email(context: &Context, email: &str) -> anyhow::Result<(Account, Caller)> {
    let parsed = Email::parse("email", email).map_err(|invalid| anyhow::anyhow!(invalid))?;
    let account = team::by_email(context, &parsed)
        .await?
        .with_context(|| format!("no dashboard account {email}"))?;
    let caller = crate::context::organization(context, account.org_id).await?;
    Ok((account, caller))
}

/// Applies `change` to the account with `email` (`flowctl admin remove|disable|enable|role`):
/// the Team page's operation.
pub async fn change(
    context: &Context,
    email: &str,
    change: AccountChange,
) -> anyhow::Result<AccountSummary> {
    let (account, caller) = by_email(context, email).await?;
    let changed = team::change(context, acting(&caller), account.id, change).await?;
    let mut summary = AccountSummary::of(&changed.account, Some(changed.changed));
    if change == AccountChange::Remove {
        summary.state = "removed";
    }
    Ok(summary)
}

/// Creates a dashboard account of `org_id` and its sign-in link on the service at the context's
/// public address (what `flowctl admin create` and `flowctl up --demo` do): the Team page's
/// invitation.
pub async fn create(
    context: &Context,
    org_id: OrgId,
    email: &str,
    role: Role,
) -> anyhow::Result<Invitation> {
    let caller = crate::context::organization(context, org_id).await?;
    let issued = match team::invite(context, acting(&caller), email, role).await {
        Ok(issued) => issued,
        Err(ServiceError::Conflict(_)) => {
            let email = email.trim();
            bail!(
                "{email} already has a dashboard account; `flowctl admin link --email {email}` prints a new sign-in link"
            )
        }
        Err(other) => return Err(other.into()),
    };
    Ok(Invitation {
        email: issued.account.email,
        link: issued.url,
    })
}

/// `flowctl admin ...`.
pub async fn run(core: &CoreConfig, command: AdminCommand) -> anyhow::Result<Outcome> {
    let base_url = match &command {
        AdminCommand::Create { base_url, .. } | AdminCommand::Link { base_url, .. } => base_url,
        _ => DEFAULT_BASE_URL,
    };
    let tool = Tool::open(core, base_url).await?;
    let outcome = command_on(&tool, command).await;
    tool.close().await;
    outcome
}

/// Runs `command` on `context`.
async fn command_on(context: &Context, command: AdminCommand) -> anyhow::Result<Outcome> {
    match command {
        AdminCommand::Create {
            org, email, role, ..
        } => {
            let org = OrgId::parse(&org)
                .with_context(|| format!("{org} is not an organization id (org_…)"))?;
            let invitation = create(context, org, &email, role.into()).await?;
            eprintln!(
                "dashboard account {} created; it signs in once with this link (valid 24 hours) to set a password:",
                invitation.email
            );
            let text = invitation.link.clone();
            Outcome::new(&invitation, text)
        }
        AdminCommand::Link { email, .. } => {
            let (account, caller) = by_email(context, &email).await?;
            let issued = team::new_link(context, acting(&caller), account.id).await?;
            eprintln!(
                "new sign-in link for {} (valid 24 hours); the old password, its sessions and \
                 earlier links have stopped working:",
                issued.account.email
            );
            let invitation = Invitation {
                email: issued.account.email,
                link: issued.url,
            };
            let text = invitation.link.clone();
            Outcome::new(&invitation, text)
        }
        AdminCommand::List { org } => {
            let org = OrgId::parse(&org)
                .with_context(|| format!("{org} is not an organization id (org_…)"))?;
            let caller = crate::context::organization(context, org).await?;
            let listed: Vec<AccountSummary> = team::list(context, acting(&caller))
                .await?
                .iter()
                .map(|account| AccountSummary::of(account, None))
                .collect();
            let text = listed
                .iter()
                .map(|account| {
                    format!(
                        "{}\t{}\t{}\t{}\n",
                        account.id, account.email, account.role, account.state
                    )
                })
                .collect::<String>();
            Outcome::new(&listed, text)
        }
        AdminCommand::Remove { email } => {
            changed(change(context, &email, AccountChange::Remove).await?)
        }
        AdminCommand::Disable { email } => {
            changed(change(context, &email, AccountChange::Disable).await?)
        }
        AdminCommand::Enable { email } => {
            changed(change(context, &email, AccountChange::Enable).await?)
        }
        AdminCommand::Role { email, role } => {
            changed(change(context, &email, AccountChange::SetRole(role.into())).await?)
        }
    }
}

/// What a change command prints.
fn changed(summary: AccountSummary) -> anyhow::Result<Outcome> {
    let text = match summary.changed {
        Some(false) => format!(
            "{}: nothing to change ({} {})",
            summary.email, summary.role, summary.state
        ),
        _ => format!("{}: {} {}", summary.email, summary.role, summary.state),
    };
    Outcome::new(&summary, text)
}
