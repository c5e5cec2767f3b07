//! Demo data: an organization with 1,000 users and three flows, a key to try the API with, and a
//! dashboard admin with a one-time sign-in link.

use clap::Args;
use flow_common::config::CoreConfig;
use flow_common::db::{self, flows::NewModule, orgs, users::NewUser};
use flow_domain::Email;
use flow_domain::ids::{FlowId, OrgId};

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

/// What the demo created.
#[derive(Debug, Clone)]
pub struct Demo {
    /// The organization.
    pub org_id: OrgId,
    /// Its API key (secret).
    pub key: String,
    /// The flows created.
    pub flows: Vec<(FlowId, String)>,
    /// A demo user's e-mail.
    pub sample_email: String,
}

/// The e-mail of demo user `index` (1-based).
pub fn demo_email(index: usize) -> String {
    format!("user{index:04}@demo.example.com")
}

/// Creates the demo organization, users, flows and key.
pub async fn create(
    pool: &sqlx::PgPool,
    users: usize,
    name: &str,
    assign_limit: Option<u32>,
) -> anyhow::Result<Demo> {
    let org = orgs::create(
        pool,
        &orgs::NewOrganization {
            name: name.to_owned(),
            tier: orgs::Tier::Enterprise,
            timezone: chrono_tz::Tz::UTC,
            assign_limit_per_minute: assign_limit,
            report_limit_per_minute: None,
        },
    )
    .await?;
    let people: Vec<NewUser> = (1..=users)
        .map(|index| {
            Ok(NewUser {
                email: Email::parse("email", &demo_email(index))
                    .map_err(|error| anyhow::anyhow!(error))?,
                name: Some(format!("Demo User {index}")),
            })
        })
        .collect::<anyhow::Result<_>>()?;
    for chunk in people.chunks(1_000) {
        db::users::upsert(pool, org.id, chunk).await?;
    }
    let definitions: [(&str, &[(&str, i32)]); 3] = [
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
    let mut flows = Vec::new();
    for (flow_name, modules) in definitions {
        let modules: Vec<NewModule> = modules
            .iter()
            .map(|(module, minutes)| NewModule {
                name: (*module).to_owned(),
                estimated_minutes: *minutes,
            })
            .collect();
        let (flow, _) = db::flows::create(pool, org.id, flow_name, None, &modules).await?;
        flows.push((flow.id, flow.name));
    }
    let (_, key) = db::keys::create(pool, org.id, "demo").await?;
    Ok(Demo {
        org_id: org.id,
        key,
        flows,
        sample_email: demo_email(1),
    })
}

/// E-mail of the demo's dashboard admin.
pub const DEMO_ADMIN_EMAIL: &str = "admin@demo.example.com";

/// Creates the demo's dashboard admin and its one-time sign-in link. The e-mail is
/// [`DEMO_ADMIN_EMAIL`], or a variant of it when an earlier demo took it (an e-mail names one
/// account across organizations).
pub async fn create_admin(
    core: &CoreConfig,
    demo: &Demo,
    base_url: &str,
) -> anyhow::Result<crate::accounts::Invitation> {
    let tool = crate::context::Tool::open(core, base_url).await?;
    let created = invite_admin(&tool, demo).await;
    tool.close().await;
    created
}

/// Invites the demo's admin (see [`create_admin`]).
async fn invite_admin(
    context: &flow_app::Context,
    demo: &Demo,
) -> anyhow::Result<crate::accounts::Invitation> {
    let taken = flow_common::db::accounts::find_by_email(
        &context.db,
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

/// Prints where the dashboard is and the admin's sign-in link.
pub fn print_dashboard(admin: &crate::accounts::Invitation, base_url: &str) {
    println!();
    println!("Dashboard: {}/dashboard", base_url.trim_end_matches('/'));
    println!(
        "Sign in as {} with this one-time link (valid 24 hours), where you set a password:",
        admin.email
    );
    println!("  {}", admin.link);
}

/// Prints the demo and a working curl command.
pub fn print(demo: &Demo, base_url: &str) {
    println!("Demo organization: {}", demo.org_id);
    println!("API key (shown once): {}", demo.key);
    for (id, name) in &demo.flows {
        println!("Flow: {id}  {name}");
    }
    println!("Users: {} … (1,000 demo users)", demo.sample_email);
    if let Some((flow_id, _)) = demo.flows.first() {
        println!();
        println!("Try it:");
        println!(
            "curl -s -X POST {base_url}/v1/flows/assign \\\n  -H 'Authorization: Bearer {}' \\\n  -H 'Content-Type: application/json' \\\n  -d '{{\"flowId\": \"{flow_id}\", \"userEmail\": \"{}\", \"priority\": \"high\"}}'",
            demo.key, demo.sample_email
        );
    }
}

/// `flowctl demo`.
pub async fn run(core: &CoreConfig, args: DemoArgs) -> anyhow::Result<()> {
    let pool = crate::admin::pool(core).await?;
    db::migrate(&pool).await?;
    let demo = create(&pool, args.users, "Demo Org", None).await?;
    let admin = create_admin(core, &demo, &args.base_url).await?;
    print(&demo, &args.base_url);
    print_dashboard(&admin, &args.base_url);
    Ok(())
}
