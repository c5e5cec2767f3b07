//! `flowctl admin`: dashboard accounts. `create` makes an account of an organization and prints a
//! one-time sign-in link (valid 24 hours) where the person sets a password; `link` prints a new
//! link for an existing account, which resets it (a forgotten password, or a password someone
//! else may know: the old one and every session end at once); `list` shows an organization's
//! accounts; `remove`, `disable`, `enable` and `role` change one, the same operations as the
//! dashboard's Team page (sessions ended at once, the last admin kept, an audit row each).

use anyhow::{Context, bail};
use clap::{Subcommand, ValueEnum};
use flow_common::config::CoreConfig;
use flow_common::db::accounts::{self, Account, AccountChange, Role};
use flow_common::db::audit::{self, Actor};
use flow_domain::Email;
use flow_domain::audit::AuditAction;
use flow_domain::ids::OrgId;
use serde::Serialize;
use sqlx::PgPool;

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

/// The account with this e-mail, in whichever organization.
async fn by_email(pool: &PgPool, email: &str) -> anyhow::Result<Account> {
    let parsed = Email::parse("email", email).map_err(|invalid| anyhow::anyhow!(invalid))?;
    accounts::find_by_email(pool, &parsed)
        .await?
        .with_context(|| format!("no dashboard account {email}"))
}

/// Applies `change` to the account with `email` (`flowctl admin remove|disable|enable|role`).
pub async fn change(
    pool: &PgPool,
    email: &str,
    change: AccountChange,
) -> anyhow::Result<AccountSummary> {
    let account = by_email(pool, email).await?;
    let changed = accounts::change(pool, account.org_id, account.id, change, Actor::Flowctl)
        .await
        .map_err(|error| anyhow::anyhow!(error))?;
    let mut summary = AccountSummary::of(&changed.account, Some(changed.changed));
    if change == AccountChange::Remove {
        summary.state = "removed";
    }
    Ok(summary)
}

/// Creates a dashboard account of `org_id` and its sign-in link on a service reachable at
/// `base_url` (what `flowctl admin create` and `flowctl up --demo` do).
pub async fn create(
    pool: &PgPool,
    org_id: OrgId,
    email: &str,
    role: Role,
    base_url: &str,
) -> anyhow::Result<Invitation> {
    let email = Email::parse("email", email).map_err(|invalid| anyhow::anyhow!(invalid))?;
    let mut transaction = pool.begin().await?;
    let exists: bool =
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM organizations WHERE id = $1)")
            .bind(org_id)
            .fetch_one(&mut *transaction)
            .await?;
    if !exists {
        bail!("no organization {org_id}");
    }
    let Some((account, token, _)) =
        accounts::invite(&mut transaction, org_id, &email, role).await?
    else {
        bail!(
            "{email} already has a dashboard account; `flowctl admin link --email {email}` prints a new sign-in link"
        );
    };
    audit::record(
        &mut *transaction,
        org_id,
        Actor::Flowctl,
        AuditAction::AccountInvited,
        &account.id.to_string(),
        &format!("{} ({})", account.email, account.role),
    )
    .await?;
    transaction.commit().await?;
    Ok(Invitation {
        email: account.email,
        link: accounts::link_url(base_url, &token),
    })
}

/// `flowctl admin ...`.
pub async fn run(core: &CoreConfig, command: AdminCommand) -> anyhow::Result<Outcome> {
    let pool = crate::admin::pool(core).await?;
    let outcome = match command {
        AdminCommand::Create {
            org,
            email,
            role,
            base_url,
        } => {
            let org = OrgId::parse(&org)
                .with_context(|| format!("{org} is not an organization id (org_…)"))?;
            let invitation = create(&pool, org, &email, role.into(), &base_url).await?;
            eprintln!(
                "dashboard account {} created; it signs in once with this link (valid 24 hours) to set a password:",
                invitation.email
            );
            let text = invitation.link.clone();
            Outcome::new(&invitation, text)
        }
        AdminCommand::Link { email, base_url } => {
            let account = by_email(&pool, &email).await?;
            let (account, token, _) =
                accounts::reset_with_link(&pool, account.org_id, account.id, Actor::Flowctl)
                    .await
                    .map_err(|error| anyhow::anyhow!(error))?;
            eprintln!(
                "new sign-in link for {} (valid 24 hours); the old password, its sessions and \
                 earlier links have stopped working:",
                account.email
            );
            let invitation = Invitation {
                email: account.email,
                link: accounts::link_url(&base_url, &token),
            };
            let text = invitation.link.clone();
            Outcome::new(&invitation, text)
        }
        AdminCommand::List { org } => {
            let org = OrgId::parse(&org)
                .with_context(|| format!("{org} is not an organization id (org_…)"))?;
            let listed: Vec<AccountSummary> = accounts::list(&pool, org)
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
            changed(change(&pool, &email, AccountChange::Remove).await?)
        }
        AdminCommand::Disable { email } => {
            changed(change(&pool, &email, AccountChange::Disable).await?)
        }
        AdminCommand::Enable { email } => {
            changed(change(&pool, &email, AccountChange::Enable).await?)
        }
        AdminCommand::Role { email, role } => {
            changed(change(&pool, &email, AccountChange::SetRole(role.into())).await?)
        }
    };
    pool.close().await;
    outcome
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
