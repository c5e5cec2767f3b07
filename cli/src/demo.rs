//! Demo data: an organization with 1,000 users and three flows, a key to try the API with, and a
//! dashboard admin with a one-time sign-in link.

use clap::Args;
use flow_app::flows::NewFlow;
use flow_common::config::CoreConfig;
use flow_common::db::{flows::NewModule, orgs, users::NewUser};
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

/// Creates the demo organization, users, flows and key, through the operations every surface
/// calls (the users imported, the flows by the API's rules, the key with its audit row), as
/// `flowctl`.
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
    let caller = flow_app::Caller::without_key(org);
    let acting = crate::context::acting(&caller);
    let people: Vec<NewUser> = (1..=users)
        .map(|index| {
            Ok(NewUser {
                email: Email::parse("email", &demo_email(index))
                    .map_err(|error| anyhow::anyhow!(error))?,
                name: Some(format!("Demo User {index}")),
            })
        })
        .collect::<anyhow::Result<_>>()?;
    flow_app::users::import(context, acting, people).await?;
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
        let flow = NewFlow {
            name: flow_name.to_owned(),
            description: None,
            modules: modules
                .iter()
                .map(|(module, minutes)| NewModule {
                    name: (*module).to_owned(),
                    estimated_minutes: *minutes,
                })
                .collect(),
            settings: Default::default(),
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
    })
}

/// E-mail of the demo's dashboard admin.
pub const DEMO_ADMIN_EMAIL: &str = "admin@demo.example.com";

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

/// `flowctl demo`: applies the migrations, then creates the demo in the tool's context.
pub async fn run(core: &CoreConfig, args: DemoArgs) -> anyhow::Result<()> {
    let pool = crate::admin::pool(core).await?;
    flow_common::db::migrate(&pool).await?;
    pool.close().await;
    let tool = crate::context::Tool::open(core, &args.base_url).await?;
    let created = async {
        let demo = create(&tool, args.users, "Demo Org", None).await?;
        let admin = create_admin(&tool, &demo).await?;
        anyhow::Ok((demo, admin))
    }
    .await;
    tool.close().await;
    let (demo, admin) = created?;
    print(&demo, &args.base_url);
    print_dashboard(&admin, &args.base_url);
    Ok(())
}
