//! `flowctl admin`: dashboard accounts. `create` makes an account of an organization and prints a
//! one-time sign-in link (valid 24 hours) where the person sets a password; `link` prints a new
//! link for an existing account (a forgotten password).

use anyhow::{Context, bail};
use clap::{Subcommand, ValueEnum};
use flow_common::config::CoreConfig;
use flow_common::db::accounts::{self, Role};
use flow_common::db::audit::{self, Actor};
use flow_domain::Email;
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
    /// Print a new one-time sign-in link for an existing account (earlier links stop working).
    Link {
        /// The account's e-mail.
        #[arg(long)]
        email: String,
        /// Address the dashboard is reachable at, for the link.
        #[arg(long, env = "PUBLIC_BASE_URL", default_value = "http://localhost:8080")]
        base_url: String,
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
        "account.invited",
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
            let parsed =
                Email::parse("email", &email).map_err(|invalid| anyhow::anyhow!(invalid))?;
            let mut transaction = pool.begin().await?;
            let account = accounts::find_by_email(&mut *transaction, &parsed)
                .await?
                .with_context(|| format!("no dashboard account {email}"))?;
            let (token, _) = accounts::issue_link(&mut transaction, account.id).await?;
            audit::record(
                &mut *transaction,
                account.org_id,
                Actor::Flowctl,
                "account.link_issued",
                &account.id.to_string(),
                &account.email,
            )
            .await?;
            transaction.commit().await?;
            eprintln!(
                "new sign-in link for {} (valid 24 hours; earlier links stop working):",
                account.email
            );
            let invitation = Invitation {
                email: account.email,
                link: accounts::link_url(&base_url, &token),
            };
            let text = invitation.link.clone();
            Outcome::new(&invitation, text)
        }
    };
    pool.close().await;
    outcome
}
