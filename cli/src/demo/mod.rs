//! Demo data: an organization that looks lived in. 1,000 people with departments, titles,
//! managers and groups (as an identity provider would provision them), three flows, assignments
//! in every state spread over the past six weeks (completed, in progress, pending, overdue, and
//! one completion whose validity ends within days), a schedule, an enrollment rule, a webhook
//! endpoint pointed at a local receiver, a key to try the API with, and a dashboard admin with a
//! one-time sign-in link.
//!
//! Everything is written through the application layer (`flow_app`), as `flowctl`, with the
//! operations every surface calls: people are provisioned as SCIM provisions them, assignments go
//! through the bulk assign path and module progress through the progress path, both applied by
//! the assign-worker. The past is reached the way those operations allow it: an assign takes the
//! time it is made (`now`) and progress takes the time it happened (`at`), so no row is written
//! by hand. The demo finds its organization again by its name: running it twice reuses it.

mod life;
mod people;

pub use life::{DemoEndpoint, Life, RECEIVER_PATH, Tally, bring_to_life};

use clap::Args;
use flow_app::Caller;
use flow_app::flows::NewFlow;
use flow_common::config::CoreConfig;
use flow_common::db::flows::{FlowSettings, NewModule};
use flow_common::db::orgs;
use flow_domain::Email;
use flow_domain::expiry::Validity;
use flow_domain::ids::{FlowId, OrgId};

/// The demo organization's name; the demo finds its organization again by it.
pub const DEMO_ORG_NAME: &str = "Demo Org";

/// The connections the demo's context opens: enough for its people and their progress to be
/// written several at a time.
pub const TOOL_SIZE: crate::context::Size = crate::context::Size {
    connections: 8,
    publish_channels: 4,
};

/// Options of `flowctl demo`.
#[derive(Debug, Clone, Args)]
pub struct DemoArgs {
    /// Address the API is reachable at, for the printed curl command.
    #[arg(long, env = "PUBLIC_BASE_URL", default_value = "http://localhost:8080")]
    pub base_url: String,
    /// Number of demo users.
    #[arg(long, default_value_t = 1_000)]
    pub users: usize,
}

/// What the demo created, or found.
#[derive(Debug, Clone)]
pub struct Demo {
    /// The organization.
    pub org_id: OrgId,
    /// An API key made for this run (secret): keys are stored hashed, so an earlier run's key
    /// cannot be shown again.
    pub key: String,
    /// The flows, in the order they were created.
    pub flows: Vec<(FlowId, String)>,
    /// A demo user's e-mail.
    pub sample_email: String,
    /// The organization was made by an earlier run and reused.
    pub reused: bool,
}

/// The e-mail of demo user `index` (1-based).
pub fn demo_email(index: usize) -> String {
    format!("user{index:04}@demo.example.com")
}

/// The flows of the demo: name and modules (name, estimated minutes).
const FLOWS: [(&str, &[(&str, i32)]); 3] = [
    (
        "Security Basics",
        &[
            ("Passwords and MFA", 30),
            ("Phishing", 45),
            ("Device safety", 75),
        ],
    ),
    (
        "New Hire Onboarding",
        &[
            ("Welcome", 20),
            ("Tools and accounts", 60),
            ("Policies", 90),
            ("Meet your team", 30),
            ("First project", 240),
        ],
    ),
    (
        "Data Privacy",
        &[("GDPR essentials", 60), ("Handling personal data", 40)],
    ),
];

/// Positions in [`FLOWS`].
const SECURITY: usize = 0;
const ONBOARDING: usize = 1;
const PRIVACY: usize = 2;

/// How long a Data Privacy completion is valid: a yearly refresher.
const PRIVACY_VALID_MONTHS: i32 = 12;

/// Creates the demo organization, its people (provisioned with their profiles, then their
/// groups), flows (Data Privacy valid for a year) and key, through the operations every surface
/// calls, as `flowctl`. It holds no assignment yet: [`bring_to_life`] adds them.
pub async fn create(
    context: &flow_app::Context,
    users: usize,
    name: &str,
    assign_limit: Option<u32>,
) -> anyhow::Result<Demo> {
    let org = flow_app::orgs::create(
        context,
        &orgs::NewOrganization {
            name: name.to_owned(),
            tier: orgs::Tier::Enterprise,
            timezone: chrono_tz::Tz::UTC,
            assign_limit_per_minute: assign_limit,
            report_limit_per_minute: None,
        },
    )
    .await?;
    let caller = Caller::without_key(org);
    let acting = crate::context::acting(&caller);
    people::provision(context, acting, users).await?;
    let mut flows = Vec::new();
    for (position, (flow_name, modules)) in FLOWS.into_iter().enumerate() {
        let flow = NewFlow {
            name: flow_name.to_owned(),
            description: None,
            modules: modules
                .iter()
                .map(|(module, minutes)| NewModule {
                    name: (*module).to_owned(),
                    estimated_minutes: *minutes,
                    activity_id: None,
                })
                .collect(),
            // Data Privacy is a yearly refresher: each completion is valid for a year, then
            // renewed.
            settings: FlowSettings {
                valid_for: (position == PRIVACY).then_some(Validity {
                    months: Some(PRIVACY_VALID_MONTHS),
                    days: None,
                }),
                ..FlowSettings::default()
            },
        };
        let (flow, _) = flow_app::flows::create(context, acting, &flow).await?;
        flows.push((flow.id, flow.name));
    }
    let key = flow_app::keys::generate(context, acting, "demo", false).await?;
    Ok(Demo {
        org_id: caller.org_id(),
        key: key.secret,
        flows,
        sample_email: demo_email(1),
        reused: false,
    })
}

/// The demo organization an earlier run made (the oldest named `name`), with a new API key
/// (the earlier ones are stored hashed and cannot be shown again); `None` when there is none.
pub async fn find(context: &flow_app::Context, name: &str) -> anyhow::Result<Option<Demo>> {
    let Some(org) = flow_app::orgs::oldest_named(context, name).await? else {
        return Ok(None);
    };
    let caller = Caller::without_key(org);
    let acting = crate::context::acting(&caller);
    // The demo's flows in the order of [`FLOWS`], then any other.
    let mut flows: Vec<(FlowId, String)> = flow_app::flows::list(context, acting, None, 100)
        .await?
        .into_iter()
        .map(|flow| (flow.id, flow.name))
        .collect();
    flows.sort_by_key(|(_, name)| {
        FLOWS
            .iter()
            .position(|(demo_name, _)| demo_name == name)
            .unwrap_or(FLOWS.len())
    });
    let key = flow_app::keys::generate(context, acting, "demo", false).await?;
    Ok(Some(Demo {
        org_id: caller.org_id(),
        key: key.secret,
        flows,
        sample_email: demo_email(1),
        reused: true,
    }))
}

/// E-mail of the demo's dashboard admin.
pub const DEMO_ADMIN_EMAIL: &str = "admin@demo.example.com";

/// How to reach the dashboard as the demo's admin.
#[derive(Debug, Clone)]
pub enum AdminAccess {
    /// A one-time sign-in link (a new account, or one that never set its password).
    Link(crate::accounts::Invitation),
    /// The admin set a password on an earlier run: it still works.
    Password {
        /// The admin's e-mail.
        email: String,
    },
}

/// Creates the demo's dashboard admin and its one-time sign-in link (to the context's public base
/// URL). The e-mail is [`DEMO_ADMIN_EMAIL`], or a variant of it when an earlier demo took it (an
/// e-mail names one account across organizations).
pub async fn create_admin(
    context: &flow_app::Context,
    demo: &Demo,
) -> anyhow::Result<crate::accounts::Invitation> {
    let taken = flow_app::team::by_email(
        context,
        &Email::parse("email", DEMO_ADMIN_EMAIL).map_err(|error| anyhow::anyhow!(error))?,
    )
    .await?
    .is_some();
    let email = if taken {
        let id = demo.org_id.0.simple().to_string();
        format!("admin+{}@demo.example.com", &id[id.len() - 8..])
    } else {
        DEMO_ADMIN_EMAIL.to_owned()
    };
    crate::accounts::create(
        context,
        demo.org_id,
        &email,
        flow_common::db::accounts::Role::Admin,
    )
    .await
}

/// The demo admin's way in: for a reused organization, its admin's password when they set one
/// (a new link would reset it), else a new one-time link (the earlier one cannot be shown
/// again); for a new one, a new admin ([`create_admin`]).
pub async fn admin_access(context: &flow_app::Context, demo: &Demo) -> anyhow::Result<AdminAccess> {
    if demo.reused {
        let org = flow_app::orgs::get(context, demo.org_id)
            .await?
            .ok_or_else(|| anyhow::anyhow!("no organization {}", demo.org_id))?;
        let caller = Caller::without_key(org);
        let acting = crate::context::acting(&caller);
        let admin = flow_app::team::list(context, acting)
            .await?
            .into_iter()
            .find(|account| {
                account.role == flow_common::db::accounts::Role::Admin && !account.disabled
            });
        if let Some(admin) = admin {
            if admin.has_password {
                return Ok(AdminAccess::Password { email: admin.email });
            }
            let issued = flow_app::team::new_link(context, acting, admin.id).await?;
            return Ok(AdminAccess::Link(crate::accounts::Invitation {
                email: issued.account.email,
                link: issued.url,
            }));
        }
    }
    Ok(AdminAccess::Link(create_admin(context, demo).await?))
}

/// Prints where the dashboard is and how the admin gets in.
pub fn print_dashboard(admin: &AdminAccess, base_url: &str) {
    let base_url = base_url.trim_end_matches('/');
    println!("Dashboard: {base_url}/dashboard");
    match admin {
        AdminAccess::Link(invitation) => {
            println!(
                "Sign in as {} with this one-time link (valid 24 hours), where you set a password:",
                invitation.email
            );
            println!("  {}", invitation.link);
        }
        AdminAccess::Password { email } => {
            println!("Sign in as {email} with the password you set on an earlier run");
            println!("  (`flowctl admin link --email {email}` prints a new link and resets it).");
        }
    }
}

/// Prints the demo and a working curl command.
pub fn print(demo: &Demo, base_url: &str) {
    let base_url = base_url.trim_end_matches('/');
    if demo.reused {
        println!(
            "Demo organization: {} (\"{DEMO_ORG_NAME}\", made by an earlier run and reused)",
            demo.org_id
        );
        println!(
            "API key (new, shown once; keys are stored hashed, so an earlier run's cannot be shown again): {}",
            demo.key
        );
    } else {
        println!("Demo organization: {}", demo.org_id);
        println!("API key (shown once): {}", demo.key);
    }
    for (id, name) in &demo.flows {
        println!("Flow: {id}  {name}");
    }
    if let Some((flow_id, _)) = demo.flows.first() {
        println!();
        println!("Try it:");
        println!(
            "curl -s -X POST {base_url}/v1/flows/assign \\\n  -H 'Authorization: Bearer {}' \\\n  -H 'Content-Type: application/json' \\\n  -d '{{\"flowId\": \"{flow_id}\", \"userEmail\": \"{}\", \"priority\": \"high\"}}'",
            demo.key, demo.sample_email
        );
    }
}

/// Prints what the organization holds, and how long making (or finding) it and giving it its
/// life took.
pub fn print_life(demo: &Demo, life: &Life, took: std::time::Duration) {
    let tally = life.assignments;
    // `Users: <an e-mail> …` is what scripts read a demo user from (.ci/fuzz).
    println!(
        "Users: {} … ({} people with departments, titles, managers and groups)",
        demo.sample_email, life.users
    );
    println!(
        "Assignments: {} ({} completed, {} in progress, {} pending, {} overdue; {} completion expiring within a week)",
        tally.total,
        tally.completed,
        tally.in_progress,
        tally.pending,
        tally.overdue,
        tally.expiring_soon
    );
    println!(
        "Also: a quarterly schedule (Security Basics for {}), an enrollment rule (Sales onboarding)",
        demo.sample_email
    );
    if let Some(endpoint) = &life.endpoint {
        match &endpoint.secret {
            Some(secret) => println!(
                "Webhook endpoint: {} (the local receiver; signing secret, shown once: {secret})",
                endpoint.url
            ),
            None => println!(
                "Webhook endpoint: {} (the local receiver; its secret was shown when it was made: rotate it on the dashboard's Webhooks page for a new one)",
                endpoint.url
            ),
        }
    }
    let made = if life.made.is_empty() {
        String::new()
    } else {
        format!("; made now: {}", life.made.join(", "))
    };
    println!("Seeding took {:.1} s{made}", took.as_secs_f64());
}

/// Prints the address of the API's reference and of its document.
pub fn print_api_reference(base_url: &str) {
    let base_url = base_url.trim_end_matches('/');
    println!(
        "API reference: {base_url}/docs (Swagger UI); OpenAPI document: {base_url}/v1/openapi.json"
    );
}

/// `flowctl demo`: applies the migrations, then finds or creates the demo organization in the
/// tool's context and gives it its life (the workers must be running, as with Docker Compose;
/// without a local receiver, it has no webhook endpoint).
pub async fn run(core: &CoreConfig, args: DemoArgs) -> anyhow::Result<()> {
    let pool = crate::admin::pool(core).await?;
    flow_common::db::migrate(&pool).await?;
    pool.close().await;
    let tool = crate::context::Tool::open_with(core, &args.base_url, &TOOL_SIZE, |_| {}).await?;
    let started = std::time::Instant::now();
    let created = async {
        let demo = match find(&tool, DEMO_ORG_NAME).await? {
            Some(demo) => demo,
            None => create(&tool, args.users, DEMO_ORG_NAME, None).await?,
        };
        let admin = admin_access(&tool, &demo).await?;
        let life = bring_to_life(&tool, &demo, None).await?;
        anyhow::Ok((demo, admin, life))
    }
    .await;
    tool.close().await;
    let (demo, admin, life) = created?;
    print(&demo, &args.base_url);
    println!();
    print_life(&demo, &life, started.elapsed());
    print_api_reference(&args.base_url);
    print_dashboard(&admin, &args.base_url);
    Ok(())
}
