//! Control-plane commands: migrations, organizations, keys, users, flows.

use std::path::PathBuf;

use anyhow::{Context, bail};
use clap::Subcommand;
use flow_common::config::CoreConfig;
use flow_common::db::audit::Actor;
use flow_common::db::{self, flows::NewModule, orgs, users::NewUser};
use flow_common::domain::{Email, TextRule, parse_timezone};
use flow_common::ids::{KeyId, OrgId};
use serde::Deserialize;
use sqlx::PgPool;

/// Opens a small pool for a one-shot command.
pub async fn pool(core: &CoreConfig) -> anyhow::Result<PgPool> {
    db::connect(&core.database_url, 4)
        .await
        .with_context(|| format!("connecting to {}", redact(&core.database_url)))
}

/// A connection string without its password, for messages.
pub fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let credentials = &url[scheme + 3..at];
            match credentials.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..scheme + 3], &url[at..]),
                None => url.to_owned(),
            }
        }
        _ => url.to_owned(),
    }
}

/// `flowctl migrate`.
pub async fn migrate(core: &CoreConfig) -> anyhow::Result<()> {
    let pool = pool(core).await?;
    db::migrate(&pool).await.context("applying migrations")?;
    println!("migrations applied");
    Ok(())
}

/// Organization commands.
#[derive(Subcommand)]
pub enum OrgCommand {
    /// Create an organization.
    Create {
        /// Display name.
        #[arg(long)]
        name: String,
        /// standard or enterprise.
        #[arg(long, default_value = "standard")]
        tier: String,
        /// IANA time zone for plain dates and report periods.
        #[arg(long, default_value = "UTC")]
        timezone: String,
        /// Override of the assign limit (requests per minute).
        #[arg(long)]
        assign_limit: Option<u32>,
        /// Override of the report limit (requests per minute).
        #[arg(long)]
        report_limit: Option<u32>,
    },
    /// Change an organization's tier or limit overrides (0 clears an override).
    Limits {
        /// Organization id.
        org: String,
        /// standard or enterprise.
        #[arg(long)]
        tier: Option<String>,
        /// Assign requests per minute.
        #[arg(long)]
        assign_limit: Option<u32>,
        /// Report requests per minute.
        #[arg(long)]
        report_limit: Option<u32>,
    },
}

fn parse_tier(text: &str) -> anyhow::Result<orgs::Tier> {
    orgs::Tier::parse(text)
        .with_context(|| format!("tier must be standard or enterprise, not {text}"))
}

fn parse_org(text: &str) -> anyhow::Result<OrgId> {
    OrgId::parse(text).with_context(|| format!("{text} is not an organization id (org_…)"))
}

/// `flowctl org ...`.
pub async fn org(core: &CoreConfig, command: OrgCommand) -> anyhow::Result<()> {
    let pool = pool(core).await?;
    match command {
        OrgCommand::Create {
            name,
            tier,
            timezone,
            assign_limit,
            report_limit,
        } => {
            let org = orgs::create(
                &pool,
                &orgs::NewOrganization {
                    name,
                    tier: parse_tier(&tier)?,
                    timezone: parse_timezone("timezone", &timezone)?,
                    assign_limit_per_minute: assign_limit,
                    report_limit_per_minute: report_limit,
                },
            )
            .await?;
            println!("{}", org.id);
        }
        OrgCommand::Limits {
            org,
            tier,
            assign_limit,
            report_limit,
        } => {
            let tier = tier.as_deref().map(parse_tier).transpose()?;
            let updated =
                orgs::update_limits(&pool, parse_org(&org)?, tier, assign_limit, report_limit)
                    .await?
                    .with_context(|| format!("no organization {org}"))?;
            println!(
                "{}: tier {}, assign {}/min, report {}/min",
                updated.id,
                updated.tier,
                updated.assign_limit(),
                updated.report_limit()
            );
        }
    }
    Ok(())
}

/// API key commands.
#[derive(Subcommand)]
pub enum KeyCommand {
    /// Create a key; the secret is printed once and never stored.
    Create {
        /// Organization id.
        org: String,
        /// Label.
        #[arg(long, default_value = "")]
        name: String,
    },
    /// Revoke a key (takes effect on every API replica at once).
    Revoke {
        /// Key id (key_…).
        key: String,
    },
    /// List an organization's keys (prefixes only).
    List {
        /// Organization id.
        org: String,
    },
}

/// `flowctl key ...`.
pub async fn key(core: &CoreConfig, command: KeyCommand) -> anyhow::Result<()> {
    let pool = pool(core).await?;
    match command {
        KeyCommand::Create { org, name } => {
            let org = parse_org(&org)?;
            let (key, secret) = db::keys::create(&pool, org, &name).await?;
            db::audit::record(
                &pool,
                org,
                Actor::Flowctl,
                "key.created",
                &key.id.to_string(),
                &name,
            )
            .await?;
            eprintln!("key {} created; the secret below is shown once:", key.id);
            println!("{secret}");
        }
        KeyCommand::Revoke { key } => {
            let id =
                KeyId::parse(&key).with_context(|| format!("{key} is not a key id (key_…)"))?;
            if !db::keys::revoke(&pool, None, id, Actor::Flowctl).await? {
                bail!("no active key {key}");
            }
            println!("revoked {key}");
        }
        KeyCommand::List { org } => {
            for key in db::keys::list(&pool, parse_org(&org)?).await? {
                let state = match key.expires_at {
                    _ if key.revoked_at.is_some() => "revoked".to_owned(),
                    Some(at) if at <= chrono::Utc::now() => "expired".to_owned(),
                    Some(at) => format!("expires {}", flow_common::domain::format_timestamp(at)),
                    None => "active".to_owned(),
                };
                println!("{}\t{}…\t{state}\t{}", key.id, key.prefix, key.name);
            }
        }
    }
    Ok(())
}

/// User commands.
#[derive(Subcommand)]
pub enum UsersCommand {
    /// Upsert users from a CSV file with an `email` column and an optional `name` column.
    Import {
        /// Organization id.
        org: String,
        /// CSV file.
        file: PathBuf,
    },
}

#[derive(Deserialize)]
struct UserRow {
    email: String,
    #[serde(default)]
    name: Option<String>,
}

/// `flowctl users ...`.
pub async fn users(core: &CoreConfig, command: UsersCommand) -> anyhow::Result<()> {
    let UsersCommand::Import { org, file } = command;
    let org = parse_org(&org)?;
    let mut reader =
        csv::Reader::from_path(&file).with_context(|| format!("opening {}", file.display()))?;
    let mut users = Vec::new();
    for (line, row) in reader.deserialize::<UserRow>().enumerate() {
        let row = row.with_context(|| format!("{} row {}", file.display(), line + 2))?;
        let invalid = |invalid| anyhow::anyhow!("{} row {}: {invalid}", file.display(), line + 2);
        let email = Email::parse("email", &row.email).map_err(invalid)?;
        let name = row
            .name
            .map(|name| TextRule::NAME.parse("name", &name))
            .transpose()
            .map_err(invalid)?
            .filter(|name| !name.is_empty());
        users.push(NewUser { email, name });
    }
    let pool = pool(core).await?;
    let mut created = 0;
    for chunk in users.chunks(1_000) {
        let rows = db::users::upsert(&pool, org, chunk).await?;
        created += rows.iter().filter(|user| user.created).count();
    }
    println!("{} users imported ({created} new)", users.len());
    Ok(())
}

/// Flow commands.
#[derive(Subcommand)]
pub enum FlowsCommand {
    /// Create a flow from a JSON file: `{"name": ..., "description": ..., "modules": [{"name": ...,
    /// "estimatedMinutes": ...}]}`.
    Create {
        /// Organization id.
        org: String,
        /// JSON file.
        file: PathBuf,
    },
}

/// A flow definition file.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FlowFile {
    /// Name.
    pub name: String,
    /// Description.
    #[serde(default)]
    pub description: Option<String>,
    /// Modules in order.
    pub modules: Vec<ModuleFile>,
}

/// A module in a flow file.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ModuleFile {
    /// Name.
    pub name: String,
    /// Estimate in minutes.
    #[serde(default)]
    pub estimated_minutes: i32,
}

impl FlowFile {
    /// The modules to insert.
    pub fn modules(&self) -> Vec<NewModule> {
        self.modules
            .iter()
            .map(|module| NewModule {
                name: module.name.clone(),
                estimated_minutes: module.estimated_minutes,
            })
            .collect()
    }
}

/// `flowctl flows ...`.
pub async fn flows(core: &CoreConfig, command: FlowsCommand) -> anyhow::Result<()> {
    let FlowsCommand::Create { org, file } = command;
    let text =
        std::fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
    let flow: FlowFile =
        serde_json::from_str(&text).with_context(|| format!("parsing {}", file.display()))?;
    if flow.modules.is_empty() {
        bail!("a flow needs at least one module");
    }
    // The same rules as POST /v1/flows, so nothing the API would refuse gets in this way.
    let invalid = |invalid| anyhow::anyhow!("{}: {invalid}", file.display());
    let name = TextRule::NAME.parse("name", &flow.name).map_err(invalid)?;
    if name.is_empty() {
        bail!("{}: name is required", file.display());
    }
    let description = flow
        .description
        .as_deref()
        .map(|text| TextRule::DESCRIPTION.parse("description", text))
        .transpose()
        .map_err(invalid)?
        .filter(|text| !text.is_empty());
    let mut modules = flow.modules();
    for (index, module) in modules.iter_mut().enumerate() {
        module.name = TextRule::NAME
            .parse(&format!("modules[{index}].name"), &module.name)
            .map_err(invalid)?;
    }
    let pool = pool(core).await?;
    let (created, modules) = db::flows::create(
        &pool,
        parse_org(&org)?,
        &name,
        description.as_deref(),
        &modules,
    )
    .await?;
    println!(
        "{}\t{} ({} modules)",
        created.id,
        created.name,
        modules.len()
    );
    Ok(())
}
