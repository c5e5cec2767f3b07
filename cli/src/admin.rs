//! Control-plane commands: migrations, organizations, keys, users, flows.

use std::path::PathBuf;

use anyhow::{Context, bail};
use clap::{Subcommand, ValueEnum};
use flow_app::flows::{FlowFields, ModuleFields};
use flow_app::keys::{self, WithSecret};
use flow_common::config::CoreConfig;
use flow_common::db::{self, orgs};
use flow_domain::ids::{KeyId, OrgId};
use flow_domain::{Email, parse_timezone};
use serde::{Deserialize, Serialize};

use crate::context::{self, DEFAULT_BASE_URL, Tool};
use crate::output::{Outcome, progress};

pub use crate::context::{pool, redact};

/// `flowctl migrate`.
pub async fn migrate(core: &CoreConfig) -> anyhow::Result<Outcome> {
    let pool = pool(core).await?;
    db::migrate(&pool).await.context("applying migrations")?;
    Outcome::new(
        &serde_json::json!({ "migrated": true }),
        "migrations applied",
    )
}

/// An organization's tier (its default rate limits).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TierArg {
    /// assign 100/min, report 50/min.
    Standard,
    /// assign 1,000/min, report 500/min.
    Enterprise,
}

impl From<TierArg> for orgs::Tier {
    fn from(tier: TierArg) -> Self {
        match tier {
            TierArg::Standard => Self::Standard,
            TierArg::Enterprise => Self::Enterprise,
        }
    }
}

/// An organization as `flowctl org` prints it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OrgSummary {
    /// Organization id.
    pub id: String,
    /// Display name.
    pub name: String,
    /// standard or enterprise.
    pub tier: String,
    /// Assign requests per minute in force.
    pub assign_limit_per_minute: u32,
    /// Report requests per minute in force.
    pub report_limit_per_minute: u32,
    /// The queue of the bulk assign lane its bulk work goes to (0 to 7).
    pub bulk_shard: u16,
}

impl From<&orgs::Organization> for OrgSummary {
    fn from(org: &orgs::Organization) -> Self {
        Self {
            id: org.id.to_string(),
            name: org.name.clone(),
            tier: org.tier.to_string(),
            assign_limit_per_minute: org.assign_limit(),
            report_limit_per_minute: org.report_limit(),
            bulk_shard: flow_common::amqp::bulk_shard(org.bulk_lane),
        }
    }
}

/// Organization commands.
#[derive(Subcommand)]
pub enum OrgCommand {
    /// Create an organization.
    #[command(after_help = "\
Examples:
  flowctl org create --name Acme --tier enterprise --timezone Europe/Paris
  org=$(flowctl org create --name Acme --json | jq -r .id)")]
    Create {
        /// Display name.
        #[arg(long)]
        name: String,
        /// Default rate limits.
        #[arg(long, value_enum, default_value_t = TierArg::Standard)]
        tier: TierArg,
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
        /// Default rate limits.
        #[arg(long, value_enum)]
        tier: Option<TierArg>,
        /// Assign requests per minute.
        #[arg(long)]
        assign_limit: Option<u32>,
        /// Report requests per minute.
        #[arg(long)]
        report_limit: Option<u32>,
    },
    /// Show or move an organization's queue in the bulk assign lane. Organizations get one in
    /// creation order (the first eight have one each); two heavy bulk loaders on one queue share
    /// it in FIFO order, and moving one of them to a quiet queue gives each its own share.
    #[command(after_help = "\
Examples:
  flowctl org lane org_0193...            # its queue, and how many organizations each holds
  flowctl org lane org_0193... --shard 5  # later bulk work goes to queue 5")]
    Lane {
        /// Organization id.
        org: String,
        /// Move it to this queue (0 to 7). Commands already queued are applied where they are.
        #[arg(long, value_parser = clap::value_parser!(u16).range(0..i64::from(flow_common::amqp::BULK_SHARDS)))]
        shard: Option<u16>,
    },
}

fn parse_org(text: &str) -> anyhow::Result<OrgId> {
    OrgId::parse(text).with_context(|| format!("{text} is not an organization id (org_…)"))
}

/// `flowctl org ...`: the operations of `app::orgs`.
pub async fn org(core: &CoreConfig, command: OrgCommand) -> anyhow::Result<Outcome> {
    let tool = Tool::open(core, DEFAULT_BASE_URL).await?;
    let outcome = org_command(&tool, command).await;
    tool.close().await;
    outcome
}

async fn org_command(tool: &Tool, command: OrgCommand) -> anyhow::Result<Outcome> {
    match command {
        OrgCommand::Create {
            name,
            tier,
            timezone,
            assign_limit,
            report_limit,
        } => {
            let org = flow_app::orgs::create(
                tool,
                &orgs::NewOrganization {
                    name,
                    tier: tier.into(),
                    timezone: parse_timezone("timezone", &timezone)?,
                    assign_limit_per_minute: assign_limit,
                    report_limit_per_minute: report_limit,
                },
            )
            .await?;
            let text = org.id.to_string();
            Outcome::new(&OrgSummary::from(&org), text)
        }
        OrgCommand::Limits {
            org,
            tier,
            assign_limit,
            report_limit,
        } => {
            let tier = tier.map(orgs::Tier::from);
            let updated = flow_app::orgs::update_limits(
                tool,
                parse_org(&org)?,
                tier,
                assign_limit,
                report_limit,
            )
            .await?
            .with_context(|| format!("no organization {org}"))?;
            let text = format!(
                "{}: tier {}, assign {}/min, report {}/min",
                updated.id,
                updated.tier,
                updated.assign_limit(),
                updated.report_limit()
            );
            Outcome::new(&OrgSummary::from(&updated), text)
        }
        OrgCommand::Lane { org, shard } => {
            let id = parse_org(&org)?;
            let found = match shard {
                Some(shard) => flow_app::orgs::move_bulk_lane(tool, id, i64::from(shard)).await?,
                None => flow_app::orgs::get(tool, id).await?,
            }
            .with_context(|| format!("no organization {org}"))?;
            let counts = flow_app::orgs::bulk_shard_counts(tool).await?;
            let summary = OrgSummary::from(&found);
            let text = format!(
                "{}: bulk queue {}{}; organizations per queue: {}",
                found.id,
                summary.bulk_shard,
                if shard.is_some() { " (moved)" } else { "" },
                counts
                    .iter()
                    .enumerate()
                    .map(|(shard, count)| format!("{shard}={count}"))
                    .collect::<Vec<_>>()
                    .join(" ")
            );
            Outcome::new(&summary, text)
        }
    }
}

/// API key commands.
#[derive(Subcommand)]
pub enum KeyCommand {
    /// Create a key; the secret is printed once and never stored.
    #[command(after_help = "\
Examples:
  flowctl key create org_… --name ci                   # the secret on stdout, a note on stderr
  secret=$(flowctl key create org_… --name ci --json | jq -r .secret)")]
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

/// A created key: its id and the secret, shown once.
#[derive(Debug, Clone, Serialize)]
pub struct CreatedKey {
    /// Key id.
    pub id: String,
    /// The bearer token.
    pub secret: String,
}

/// A key as `flowctl key list` prints it (never its secret).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct KeySummary {
    /// Key id.
    pub id: String,
    /// The secret's first characters.
    pub prefix: String,
    /// Label.
    pub name: String,
    /// active, revoked, expired or expiring.
    pub state: &'static str,
    /// When it expires, if it does.
    pub expires_at: Option<String>,
}

/// `flowctl key ...`: the operations of `app::keys` (those the dashboard's API keys page calls).
pub async fn key(core: &CoreConfig, command: KeyCommand) -> anyhow::Result<Outcome> {
    let tool = Tool::open(core, DEFAULT_BASE_URL).await?;
    let outcome = key_command(&tool, command).await;
    tool.close().await;
    outcome
}

async fn key_command(tool: &Tool, command: KeyCommand) -> anyhow::Result<Outcome> {
    match command {
        KeyCommand::Create { org, name } => {
            // The name's rule, the key and its audit row in one transaction.
            let caller = context::organization(tool, parse_org(&org)?).await?;
            let WithSecret { key, secret } =
                keys::generate(tool, context::acting(&caller), &name, false).await?;
            eprintln!("key {} created; the secret below is shown once:", key.id);
            let text = secret.clone();
            Outcome::new(
                &CreatedKey {
                    id: key.id.to_string(),
                    secret,
                },
                text,
            )
        }
        KeyCommand::Revoke { key } => {
            let id =
                KeyId::parse(&key).with_context(|| format!("{key} is not a key id (key_…)"))?;
            match keys::revoke_as_operator(tool, id).await {
                Ok(()) => {}
                Err(flow_app::ServiceError::NotFound(_)) => bail!("no active key {key}"),
                Err(other) => return Err(other.into()),
            }
            Outcome::new(
                &serde_json::json!({ "revoked": key }),
                format!("revoked {key}"),
            )
        }
        KeyCommand::List { org } => {
            let mut keys = Vec::new();
            let mut text = String::new();
            let caller = context::organization(tool, parse_org(&org)?).await?;
            for key in keys::list(tool, context::acting(&caller)).await? {
                let expires_at = key.expires_at.map(flow_domain::format_timestamp);
                let (state, shown) = match key.expires_at {
                    _ if key.revoked_at.is_some() => ("revoked", "revoked".to_owned()),
                    Some(at) if at <= chrono::Utc::now() => ("expired", "expired".to_owned()),
                    Some(_) => (
                        "expiring",
                        format!("expires {}", expires_at.as_deref().unwrap_or_default()),
                    ),
                    None => ("active", "active".to_owned()),
                };
                text.push_str(&format!(
                    "{}\t{}…\t{shown}\t{}\n",
                    key.id, key.prefix, key.name
                ));
                keys.push(KeySummary {
                    id: key.id.to_string(),
                    prefix: key.prefix,
                    name: key.name,
                    state,
                    expires_at,
                });
            }
            Outcome::new(&keys, text)
        }
    }
}

/// User commands.
#[derive(Subcommand)]
pub enum UsersCommand {
    /// Upsert users from a CSV file with an `email` column and an optional `name` column.
    #[command(after_help = "\
Examples:
  flowctl users import org_… users.csv                 # a progress bar on a terminal
  flowctl users import org_… users.csv --json          # {\"imported\": 1200, \"created\": 1150}")]
    Import {
        /// Organization id.
        org: String,
        /// CSV file.
        file: PathBuf,
    },
    /// Erase a person on request: their e-mail and names become a pseudonym everywhere the
    /// service keeps them (docs/privacy.md); their assignments and the counts stay. The user is
    /// deactivated. Cannot be undone.
    #[command(after_help = "\
Examples:
  flowctl users erase --org org_… alice@example.com
  flowctl users erase --org org_… alice@example.com --json   # {\"userId\": …, \"pseudonym\": …}")]
    Erase {
        /// Organization id.
        #[arg(long)]
        org: String,
        /// The person's e-mail.
        email: String,
    },
}

/// What `flowctl users erase` did.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ErasureSummary {
    /// The user (usr_…).
    pub user_id: String,
    /// The pseudonym that replaced the e-mail.
    pub pseudonym: String,
    /// Rows rewritten outside the user's own.
    pub rows_rewritten: u64,
}

/// `flowctl users erase`: the operation `POST /v1/users/{id}/erase` calls, audited as flowctl.
async fn erase(core: &CoreConfig, org: &str, email: &str) -> anyhow::Result<Outcome> {
    let org = parse_org(org)?;
    let email = Email::parse("email", email).map_err(|invalid| anyhow::anyhow!("{invalid}"))?;
    let tool = Tool::open(core, DEFAULT_BASE_URL).await?;
    let erased = async {
        let caller = context::organization(&tool, org).await?;
        let user = flow_app::users::by_email(&tool, context::acting(&caller), &email)
            .await?
            .ok_or_else(|| anyhow::anyhow!("no user {email} in {org}"))?;
        let erased = flow_app::erasure::erase(&tool, context::acting(&caller), user.id)
            .await
            .map_err(|error| match error {
                flow_app::ServiceError::NotFound(_) => anyhow::anyhow!("no user {email} in {org}"),
                other => other.into(),
            })?;
        anyhow::Ok((user, erased))
    }
    .await;
    tool.close().await;
    let (user, erased) = erased?;
    let summary = ErasureSummary {
        user_id: user.id.to_string(),
        pseudonym: erased.pseudonym.clone(),
        rows_rewritten: erased.rows,
    };
    Outcome::new(
        &summary,
        format!(
            "{} erased: now {} ({} other rows rewritten)",
            user.id, erased.pseudonym, erased.rows
        ),
    )
}

#[derive(Deserialize)]
struct UserRow {
    email: String,
    #[serde(default)]
    name: Option<String>,
}

/// What `flowctl users import` did.
#[derive(Debug, Clone, Serialize)]
pub struct ImportSummary {
    /// Rows read (each user created or updated).
    pub imported: usize,
    /// Users that did not exist before.
    pub created: usize,
}

/// Users imported per call of the import operation (a step of the progress bar).
const IMPORT_CHUNK: usize = 1_000;

/// `flowctl users ...`: every row is checked by the rule of every surface (`app::users::check`)
/// before any is written, so an invalid file imports nothing; then the rows are imported through
/// `app::users::import`, which runs the organization's enrollment rules for them as the API's and
/// the dashboard's imports do, in chunks of [`IMPORT_CHUNK`] with a progress bar.
pub async fn users(core: &CoreConfig, command: UsersCommand) -> anyhow::Result<Outcome> {
    let (org, file) = match command {
        UsersCommand::Import { org, file } => (org, file),
        UsersCommand::Erase { org, email } => return erase(core, &org, &email).await,
    };
    let org = parse_org(&org)?;
    let mut reader =
        csv::Reader::from_path(&file).with_context(|| format!("opening {}", file.display()))?;
    let mut users = Vec::new();
    for (line, row) in reader.deserialize::<UserRow>().enumerate() {
        let row = row.with_context(|| format!("{} row {}", file.display(), line + 2))?;
        let name = row.name.filter(|name| !name.is_empty());
        let mut user = flow_app::users::check(Some(&row.email), name.as_deref(), "")
            .map_err(|invalid| anyhow::anyhow!("{} row {}: {invalid}", file.display(), line + 2))?;
        user.name = user.name.filter(|name| !name.is_empty());
        users.push(user);
    }
    let tool = Tool::open(core, DEFAULT_BASE_URL).await?;
    let imported = async {
        let caller = context::organization(&tool, org).await?;
        let bar = progress(users.len() as u64, "importing users");
        let mut created = 0;
        for chunk in users.chunks(IMPORT_CHUNK) {
            let imported =
                flow_app::users::import(&tool, context::acting(&caller), chunk.to_vec()).await?;
            created += imported.created;
            bar.inc(chunk.len() as u64);
        }
        bar.finish_and_clear();
        anyhow::Ok(created)
    }
    .await;
    tool.close().await;
    let created = imported?;
    let summary = ImportSummary {
        imported: users.len(),
        created,
    };
    let text = format!("{} users imported ({created} new)", users.len());
    Outcome::new(&summary, text)
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
    pub name: String,
    /// Description.
    #[serde(default)]
    pub description: Option<String>,
    /// Modules in order.
    pub modules: Vec<ModuleFile>,
    /// Reminder policy, as the API takes it.
    #[serde(default)]
    pub reminders: Option<flow_domain::reminders::ReminderPolicy>,
    /// Validity of a completion (`{"months": n}` or `{"days": n}`).
    #[serde(default)]
    pub valid_for: Option<flow_domain::expiry::Validity>,
    /// Days before expiry the renewal is assigned.
    #[serde(default)]
    pub renew_before_days: Option<i32>,
    /// Required (the compliance report's default set): of every person, or of a rule's audience.
    #[serde(default)]
    pub required: Option<bool>,
    /// With `required`: required of the audience of this enrollment rule (`enr_…`) only.
    #[serde(default)]
    pub required_for_rule_id: Option<String>,
    /// The flow's xAPI activity IRI (a `satisfied` statement on it completes the assignment).
    #[serde(default)]
    pub activity_id: Option<String>,
}

/// A module in a flow file.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ModuleFile {
    pub name: String,
    /// Estimate in minutes (0 when absent).
    #[serde(default)]
    pub estimated_minutes: Option<i32>,
    /// The module's xAPI activity IRI.
    #[serde(default)]
    pub activity_id: Option<String>,
}

impl FlowFile {
    /// The flow as `app::flows::check` reads it.
    pub fn fields(self) -> FlowFields {
        FlowFields {
            name: Some(self.name),
            description: self.description,
            modules: self
                .modules
                .into_iter()
                .map(|module| ModuleFields {
                    name: Some(module.name),
                    estimated_minutes: module.estimated_minutes,
                    activity_id: module.activity_id,
                })
                .collect(),
            reminders: self.reminders,
            valid_for: self.valid_for,
            renew_before_days: self.renew_before_days,
            activity_id: self.activity_id,
            required: self.required,
            required_for_rule_id: self.required_for_rule_id,
        }
    }
}

/// A flow as `flowctl flows create` prints it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FlowSummary {
    /// Flow id.
    pub id: String,
    pub name: String,
    /// Number of modules.
    pub module_count: usize,
}

/// `flowctl flows ...`.
pub async fn flows(core: &CoreConfig, command: FlowsCommand) -> anyhow::Result<Outcome> {
    let FlowsCommand::Create { org, file } = command;
    let text =
        std::fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
    let flow: FlowFile =
        serde_json::from_str(&text).with_context(|| format!("parsing {}", file.display()))?;
    // The rules of POST /v1/flows (`app::flows::check`), so nothing the API would refuse gets in
    // this way.
    let new = flow_app::flows::check(flow.fields())
        .map_err(|invalid| anyhow::anyhow!("{}: {invalid}", file.display()))?;
    let org = parse_org(&org)?;
    let tool = Tool::open(core, DEFAULT_BASE_URL).await?;
    let created = async {
        let caller = context::organization(&tool, org).await?;
        anyhow::Ok(flow_app::flows::create(&tool, context::acting(&caller), &new).await?)
    }
    .await;
    tool.close().await;
    let (created, modules) = created?;
    let text = format!(
        "{}\t{} ({} modules)",
        created.id,
        created.name,
        modules.len()
    );
    Outcome::new(
        &FlowSummary {
            id: created.id.to_string(),
            name: created.name,
            module_count: modules.len(),
        },
        text,
    )
}
