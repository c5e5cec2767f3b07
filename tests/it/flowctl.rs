//! The operator tool: imports, flow files, keys, and `up` running the whole stack.

use std::time::Duration;

use flow_common::config::CoreConfig;
use flow_common::db::orgs::Tier;
use flow_tests::TestApp;
use serde_json::json;

fn temp_file(name: &str, contents: &str) -> std::path::PathBuf {
    let path = std::env::temp_dir().join(format!("{}-{name}", uuid::Uuid::new_v4().simple()));
    std::fs::write(&path, contents).unwrap();
    path
}

#[tokio::test]
async fn users_import_reads_csv_and_writes_nothing_when_a_row_is_invalid() {
    let app = TestApp::spawn_with(flow_tests::TestOptions {
        assign_worker: false,
        ..Default::default()
    })
    .await;
    let org = app.create_org(Tier::Standard).await;
    let good = temp_file(
        "users.csv",
        "email,name\nann@example.com,Ann\nBOB@example.com,\n",
    );
    flowctl::admin::users(
        &app.core,
        flowctl::admin::UsersCommand::Import {
            org: org.id.to_string(),
            file: good,
        },
    )
    .await
    .unwrap();
    let users: Vec<(String, Option<String>)> =
        sqlx::query_as("SELECT email, name FROM users ORDER BY email_normalized")
            .fetch_all(&app.db)
            .await
            .unwrap();
    assert_eq!(
        users,
        vec![
            ("ann@example.com".into(), Some("Ann".into())),
            ("BOB@example.com".into(), None)
        ]
    );

    let bad = temp_file("bad.csv", "email\ncarl@example.com\nnot-an-email\n");
    let error = flowctl::admin::users(
        &app.core,
        flowctl::admin::UsersCommand::Import {
            org: org.id.to_string(),
            file: bad,
        },
    )
    .await
    .unwrap_err();
    assert!(error.to_string().contains("row 3"), "{error}");
    let count: i64 = sqlx::query_scalar("SELECT count(*) FROM users")
        .fetch_one(&app.db)
        .await
        .unwrap();
    assert_eq!(count, 2, "an invalid file imports nothing");
}

#[tokio::test]
async fn flows_create_reads_a_flow_file_and_keys_can_be_created_and_revoked() {
    let app = TestApp::spawn_with(flow_tests::TestOptions {
        assign_worker: false,
        ..Default::default()
    })
    .await;
    let org = app.create_org(Tier::Standard).await;
    let file = temp_file(
        "flow.json",
        r#"{"name": "Data Privacy", "modules": [{"name": "GDPR", "estimatedMinutes": 60}, {"name": "Handling data"}]}"#,
    );
    flowctl::admin::flows(
        &app.core,
        flowctl::admin::FlowsCommand::Create {
            org: org.id.to_string(),
            file,
        },
    )
    .await
    .unwrap();
    let listed = app.get(&org, "/v1/flows").await;
    assert_eq!(listed.body["data"][0]["name"], json!("Data Privacy"));
    assert_eq!(listed.body["data"][0]["moduleCount"], json!(2));
    assert_eq!(listed.body["data"][0]["estimatedDuration"], json!("1 hour"));

    flowctl::admin::key(
        &app.core,
        flowctl::admin::KeyCommand::Create {
            org: org.id.to_string(),
            name: "ci".into(),
        },
    )
    .await
    .unwrap();
    let key_id: flow_domain::ids::KeyId =
        sqlx::query_scalar("SELECT id FROM api_keys WHERE name = 'ci'")
            .fetch_one(&app.db)
            .await
            .unwrap();
    flowctl::admin::key(
        &app.core,
        flowctl::admin::KeyCommand::Revoke {
            key: key_id.to_string(),
        },
    )
    .await
    .unwrap();
    let revoked: bool =
        sqlx::query_scalar("SELECT revoked_at IS NOT NULL FROM api_keys WHERE id = $1")
            .bind(key_id)
            .fetch_one(&app.db)
            .await
            .unwrap();
    assert!(revoked);
    assert!(
        flowctl::admin::key(
            &app.core,
            flowctl::admin::KeyCommand::Revoke {
                key: key_id.to_string()
            }
        )
        .await
        .is_err(),
        "revoking twice says so"
    );
}

/// `flowctl users import` goes through the application layer's import: the organization's
/// enrollment rules assign the imported users at once (before, its rows were written around it
/// and left to a scheduler, which this test does not run). `flowctl flows create` checks a flow
/// file by the rules of `POST /v1/flows`: a module without a name, or an estimate out of range,
/// is refused, as the API refuses it.
#[tokio::test]
async fn users_import_runs_the_enrollment_rules_and_flows_create_keeps_the_apis_rules() {
    let app = TestApp::spawn().await;
    let org = app.create_org(Tier::Standard).await;
    let flow = app.create_flow(&org, "Welcome", &[10]).await;
    let rule = flow_tests::enrollment::create_rule(
        &app,
        &org,
        json!({"name": "Everyone", "condition": {"startDatePresent": false}, "flowId": flow}),
    )
    .await;
    let file = temp_file(
        "users.csv",
        "email,name\nann@example.com,Ann\nbob@example.com,\n",
    );
    flowctl::admin::users(
        &app.core,
        flowctl::admin::UsersCommand::Import {
            org: org.id.to_string(),
            file,
        },
    )
    .await
    .unwrap();
    let assigned = app
        .eventually(
            Duration::from_secs(30),
            "the rule's assignments",
            || async {
                let emails = flow_tests::enrollment::assigned_by(&app, &rule).await;
                (emails.len() >= 2).then_some(emails)
            },
        )
        .await;
    assert_eq!(assigned, ["ann@example.com", "bob@example.com"]);
    let pending: i64 = sqlx::query_scalar("SELECT count(*) FROM enrollment_pending")
        .fetch_one(&app.db)
        .await
        .unwrap();
    assert_eq!(pending, 0, "nothing is left to the scheduler");

    for (contents, refused) in [
        (
            r#"{"name": "Security", "modules": [{"name": "Phishing"}, {"name": " "}]}"#,
            "modules[1].name is required",
        ),
        (
            r#"{"name": "Security", "modules": [{"name": "Phishing", "estimatedMinutes": -5}]}"#,
            "modules[0].estimatedMinutes must be between 0 and 100000",
        ),
        (
            r#"{"name": "Security", "modules": []}"#,
            "modules must contain between 1 and 500 items",
        ),
    ] {
        let api = app
            .post(&org, "/v1/flows", &serde_json::from_str(contents).unwrap())
            .await;
        assert_eq!(api.status, 400, "{contents}: {:?}", api.body);
        assert!(
            api.body["message"].as_str().unwrap_or("").contains(refused),
            "{:?}",
            api.body
        );
        let error = flowctl::admin::flows(
            &app.core,
            flowctl::admin::FlowsCommand::Create {
                org: org.id.to_string(),
                file: temp_file("flow.json", contents),
            },
        )
        .await
        .unwrap_err();
        assert!(error.to_string().contains(refused), "{contents}: {error}");
    }
    let flows: i64 = sqlx::query_scalar("SELECT count(*) FROM flows")
        .fetch_one(&app.db)
        .await
        .unwrap();
    assert_eq!(flows, 1, "only the rule's flow");
    // A file takes what the API takes: required of a rule's audience, xAPI activity ids.
    let contents = format!(
        r#"{{"name": "Security", "required": true, "requiredForRuleId": "{rule}",
             "activityId": "https://lms.example.com/security",
             "modules": [{{"name": "Phishing", "activityId": "https://lms.example.com/phishing"}}]}}"#
    );
    flowctl::admin::flows(
        &app.core,
        flowctl::admin::FlowsCommand::Create {
            org: org.id.to_string(),
            file: temp_file("flow.json", &contents),
        },
    )
    .await
    .unwrap();
    let listed = app.get(&org, "/v1/flows?limit=10").await;
    let created = listed.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|flow| flow["name"] == "Security")
        .cloned()
        .expect("created");
    assert_eq!(created["requiredForRuleId"], json!(rule), "{created}");
    let flow = app
        .get(
            &org,
            &format!("/v1/flows/{}", created["flowId"].as_str().unwrap()),
        )
        .await;
    assert_eq!(
        flow.body["activityId"], "https://lms.example.com/security",
        "{:?}",
        flow.body
    );
    assert_eq!(
        flow.body["modules"][0]["activityId"], "https://lms.example.com/phishing",
        "{:?}",
        flow.body
    );
}

/// Polls `sql` (a count with the organization as `$1`) until `done` holds for it, for 120 s at
/// most; returns the last count.
async fn count_until(
    pool: &sqlx::PgPool,
    org_id: flow_domain::ids::OrgId,
    sql: &str,
    done: impl Fn(i64) -> bool,
) -> i64 {
    let mut count = 0;
    for _ in 0..1_200 {
        count = sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_owned()))
            .bind(org_id)
            .fetch_one(pool)
            .await
            .unwrap();
        if done(count) {
            return count;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    count
}

/// `flowctl up --demo` on `bind`, until the returned token is cancelled; waits until the API
/// answers ready.
async fn up_demo(
    core: &CoreConfig,
    bind: std::net::SocketAddr,
) -> (
    tokio::task::JoinHandle<anyhow::Result<()>>,
    tokio_util::sync::CancellationToken,
) {
    let shutdown = tokio_util::sync::CancellationToken::new();
    let stack = tokio::spawn(flowctl::up::run_until(
        core.clone(),
        flowctl::up::UpArgs {
            demo: true,
            bind: Some(bind),
            only: vec![],
        },
        shutdown.clone(),
    ));
    let client = reqwest::Client::new();
    let mut ready = false;
    for _ in 0..300 {
        if client
            .get(format!("http://{bind}/readyz"))
            .send()
            .await
            .is_ok_and(|r| r.status() == 200)
        {
            ready = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(ready, "the stack did not become ready");
    (stack, shutdown)
}

/// The demo has seeded everything once its webhook endpoint (made last) exists.
const DEMO_ENDPOINTS: &str = "SELECT count(*) FROM webhook_endpoints
     WHERE org_id = $1 AND url LIKE 'http://127.0.0.1:%/hooks/demo'";

#[tokio::test]
async fn up_creates_the_database_runs_everything_and_seeds_a_living_demo_that_a_second_run_reuses()
{
    let name = format!(
        "flow_test_{}_{}",
        chrono::Utc::now().timestamp(),
        uuid::Uuid::new_v4().simple()
    );
    let server = flow_tests::server_url();
    let database_url = format!("{}/{name}", server.rsplit_once('/').unwrap().0);
    let core = CoreConfig {
        database_url: database_url.clone(),
        database_max_connections: 4,
        amqp_url: flow_tests::amqp_url(),
        queue_prefix: flow_tests::unique_prefix(),
        delivery_limit: 5,
        replicas: Default::default(),
    };
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let bind: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let (stack, shutdown) = up_demo(&core, bind).await;
    let client = reqwest::Client::new();
    let base = format!("http://{bind}");

    // The demo organization exists: use one of its flows and users with a fresh key.
    let pool = sqlx::PgPool::connect(&database_url).await.unwrap();
    let mut demo = None;
    for _ in 0..600 {
        // The demo is created once the components are up, its admin's sign-in link next.
        demo = sqlx::query_as::<_, (flow_domain::ids::OrgId, flow_domain::ids::FlowId)>(
            "SELECT o.id, f.id FROM organizations o JOIN flows f ON f.org_id = o.id
             JOIN api_keys k ON k.org_id = o.id WHERE f.name = 'Security Basics'
               AND EXISTS (SELECT 1 FROM dashboard_accounts a
                           JOIN dashboard_sign_in_links l ON l.account_id = a.id
                           WHERE a.org_id = o.id)",
        )
        .fetch_optional(&pool)
        .await
        .unwrap();
        if demo.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (org_id, flow_id) = demo.expect("the demo organization was created");
    // Then it comes to life: the webhook endpoint is made last, once the assignments and their
    // progress are persisted.
    let endpoints = count_until(&pool, org_id, DEMO_ENDPOINTS, |count| count == 1).await;
    assert_eq!(endpoints, 1, "the demo's endpoint at the local receiver");

    // People with profiles, as an identity provider provisions them.
    let people: (i64, i64, i64, i64, i64) = sqlx::query_as(
        "SELECT count(*), count(department), count(title), count(manager_id),
                count(DISTINCT department)
         FROM users WHERE org_id = $1",
    )
    .bind(org_id)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(people.0, 1_000);
    assert_eq!(people.1, 1_000, "everyone has a department");
    assert_eq!(people.2, 1_000, "and a title");
    assert_eq!(
        people.3, 999,
        "everyone but the chief executive has a manager"
    );
    assert!(people.4 >= 8, "{} departments", people.4);
    // Every manager named is a user of the organization.
    let dangling: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM users u WHERE u.org_id = $1 AND u.manager_id IS NOT NULL
           AND NOT EXISTS (SELECT 1 FROM users m WHERE m.org_id = u.org_id
                           AND m.external_id = u.manager_id)",
    )
    .bind(org_id)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(dangling, 0);
    let groups: Vec<(String, i64)> = sqlx::query_as(
        "SELECT g.display_name, count(m.user_id) FROM user_groups g
         LEFT JOIN user_group_members m ON m.group_id = g.id
         WHERE g.org_id = $1 GROUP BY g.display_name ORDER BY g.display_name",
    )
    .bind(org_id)
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(groups.len(), 5, "{groups:?}");
    assert!(groups.iter().all(|(_, members)| *members > 0), "{groups:?}");

    // Assignments in every state, over past weeks, as reported now.
    let states: Vec<(String, i64)> = sqlx::query_as(
        "SELECT CASE WHEN completed_at IS NOT NULL THEN 'completed'
                     WHEN due_at < now() THEN 'overdue'
                     WHEN started_at IS NOT NULL THEN 'in_progress'
                     ELSE 'pending' END AS state, count(*)
         FROM assignments WHERE org_id = $1 GROUP BY 1 ORDER BY 1",
    )
    .bind(org_id)
    .fetch_all(&pool)
    .await
    .unwrap();
    let state = |name: &str| {
        states
            .iter()
            .find(|(state, _)| state == name)
            .map_or(0, |(_, count)| *count)
    };
    for name in ["completed", "in_progress", "pending", "overdue"] {
        assert!(state(name) >= 10, "{name}: {states:?}");
    }
    let (earliest_days, completion_weeks): (f64, i64) = sqlx::query_as(
        "SELECT (extract(epoch FROM now() - min(assigned_at)) / 86400)::float8,
                count(DISTINCT date_trunc('week', completed_at))
         FROM assignments WHERE org_id = $1 AND assigned_at > now() - interval '60 days'",
    )
    .bind(org_id)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert!(
        earliest_days > 28.0,
        "assigned over past weeks: {earliest_days}"
    );
    assert!(
        completion_weeks >= 4,
        "completed over past weeks: {completion_weeks}"
    );
    // The scheduler starts after the seeding: what was completed on time was never overdue.
    let completed_overdue: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM assignments WHERE org_id = $1 AND completed_at <= due_at
           AND overdue_at IS NOT NULL",
    )
    .bind(org_id)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(completed_overdue, 0);
    let expiring: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM assignments WHERE org_id = $1 AND status = 'completed'
           AND expires_at > now() AND expires_at <= now() + interval '7 days'",
    )
    .bind(org_id)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(expiring, 1, "one completion expiring soon");
    for (table, what) in [
        ("schedules", "a schedule"),
        ("enrollment_rules", "an enrollment rule"),
    ] {
        let count: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT count(*) FROM {table} WHERE org_id = $1"
        )))
        .bind(org_id)
        .fetch_one(&pool)
        .await
        .unwrap();
        assert_eq!(count, 1, "{what}");
    }
    // The receiver works locally: the test event sent to it is delivered.
    let tests_delivered = "SELECT count(*) FROM webhook_deliveries
         WHERE org_id = $1 AND event_type = 'webhook.test' AND status = 'succeeded'";
    assert_eq!(
        count_until(&pool, org_id, tests_delivered, |count| count == 1).await,
        1,
        "the test event reached the local receiver"
    );

    // Beside the API key, `up --demo` prints a dashboard admin's one-time sign-in link.
    let live_links: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM dashboard_accounts a JOIN dashboard_sign_in_links l ON l.account_id = a.id
         WHERE a.org_id = $1 AND a.role = 'admin' AND a.email = 'admin@demo.example.com'
           AND l.used_at IS NULL AND l.expires_at > now() + interval '23 hours'",
    )
    .bind(org_id)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(live_links, 1);
    let (_, key) = flow_common::db::keys::create(&pool, org_id, "test")
        .await
        .unwrap();
    let response = client
        .post(format!("{base}/v1/flows/assign"))
        .bearer_auth(&key)
        .json(&json!({ "flowId": flow_id.to_string(), "userEmail": flowctl::demo::demo_email(7) }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let body: serde_json::Value = response.json().await.unwrap();
    let id = body["assignmentId"].as_str().unwrap().to_owned();
    let mut persisted = false;
    for _ in 0..100 {
        let status = client
            .get(format!("{base}/v1/assignments/{id}"))
            .bearer_auth(&key)
            .send()
            .await
            .unwrap()
            .status();
        if status == 200 {
            persisted = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        persisted,
        "the assign-worker of `up` persisted the assignment"
    );
    // The bare address leads to the dashboard.
    let root = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
        .get(format!("{base}/"))
        .send()
        .await
        .unwrap();
    assert_eq!(root.headers()["location"], "/dashboard");

    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(30), stack)
        .await
        .expect("up stops")
        .unwrap()
        .unwrap();
    let assignments = "SELECT count(*) FROM assignments WHERE org_id = $1";
    let before: i64 = count_until(&pool, org_id, assignments, |_| true).await;

    // A second run finds the demo organization by its name and reuses it: a new key (the first
    // cannot be shown again), its endpoint pointed at the new receiver and sent a test event,
    // its admin a new link (no password was set); nothing is made twice.
    let (stack, shutdown) = up_demo(&core, bind).await;
    let tests_sent = "SELECT count(*) FROM webhook_deliveries
         WHERE org_id = $1 AND event_type = 'webhook.test'";
    assert_eq!(
        count_until(&pool, org_id, tests_sent, |count| count == 2).await,
        2
    );
    let orgs: i64 = sqlx::query_scalar("SELECT count(*) FROM organizations WHERE name = $1")
        .bind(flowctl::demo::DEMO_ORG_NAME)
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(orgs, 1, "the second run reuses the demo organization");
    let demo_keys = "SELECT count(*) FROM api_keys WHERE org_id = $1 AND name = 'demo'";
    assert_eq!(count_until(&pool, org_id, demo_keys, |_| true).await, 2);
    assert_eq!(
        count_until(&pool, org_id, assignments, |_| true).await,
        before
    );
    assert_eq!(
        count_until(&pool, org_id, DEMO_ENDPOINTS, |_| true).await,
        1
    );
    for table in [
        "schedules",
        "enrollment_rules",
        "user_groups",
        "dashboard_accounts",
    ] {
        let sql = format!("SELECT count(*) FROM {table} WHERE org_id = $1");
        let expected = if table == "user_groups" { 5 } else { 1 };
        assert_eq!(
            count_until(&pool, org_id, &sql, |_| true).await,
            expected,
            "{table}"
        );
    }
    let live_links: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM dashboard_accounts a JOIN dashboard_sign_in_links l ON l.account_id = a.id
         WHERE a.org_id = $1 AND l.used_at IS NULL AND l.expires_at > now() + interval '23 hours'",
    )
    .bind(org_id)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert!(live_links >= 1, "a new sign-in link for the same admin");
    assert_eq!(
        count_until(&pool, org_id, tests_delivered, |count| count == 2).await,
        2,
        "the endpoint follows the new receiver"
    );

    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(30), stack)
        .await
        .expect("up stops")
        .unwrap()
        .unwrap();
    pool.close().await;
    let admin = sqlx::PgPool::connect(&server).await.unwrap();
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
    )))
    .execute(&admin)
    .await
    .unwrap();
    let connection = flow_common::amqp::connect(&core.amqp_url, "test-cleanup")
        .await
        .unwrap();
    let channel = connection.create_channel().await.unwrap();
    drop(
        flow_common::amqp::Topology::new(&core.queue_prefix, 5)
            .delete(&channel)
            .await,
    );
}

#[tokio::test]
async fn flowctl_demo_seeds_the_demo_organization_with_the_running_workers_and_reuses_it() {
    // What `docker compose exec api flowctl demo` does beside the compose file's workers.
    let app = TestApp::spawn().await;
    for run in 1..=2 {
        let limit = app.core.delivery_limit.to_string();
        flowctl(
            &app,
            &["demo", "--users", "200", "--delivery-limit", &limit],
        )
        .await
        .unwrap();
        let orgs: Vec<flow_domain::ids::OrgId> =
            sqlx::query_scalar("SELECT id FROM organizations WHERE name = $1")
                .bind(flowctl::demo::DEMO_ORG_NAME)
                .fetch_all(&app.db)
                .await
                .unwrap();
        assert_eq!(orgs.len(), 1, "run {run} reuses the demo organization");
        let states: (i64, i64, i64, i64, i64) = sqlx::query_as(
            "SELECT count(*) FILTER (WHERE completed_at IS NOT NULL),
                    count(*) FILTER (WHERE completed_at IS NULL AND due_at < now()),
                    count(*) FILTER (WHERE completed_at IS NULL AND due_at >= now()
                                       AND started_at IS NOT NULL),
                    count(*) FILTER (WHERE completed_at IS NULL AND due_at >= now()
                                       AND started_at IS NULL),
                    count(*)
             FROM assignments WHERE org_id = $1",
        )
        .bind(orgs[0])
        .fetch_one(&app.db)
        .await
        .unwrap();
        let (completed, overdue, in_progress, pending, total) = states;
        assert!(
            completed > 0 && overdue > 0 && in_progress > 0 && pending > 0,
            "run {run}: {states:?}"
        );
        assert_eq!(total, completed + overdue + in_progress + pending);
        let (users, keys, schedules, rules, endpoints): (i64, i64, i64, i64, i64) = sqlx::query_as(
            "SELECT (SELECT count(*) FROM users WHERE org_id = $1),
                        (SELECT count(*) FROM api_keys WHERE org_id = $1),
                        (SELECT count(*) FROM schedules WHERE org_id = $1),
                        (SELECT count(*) FROM enrollment_rules WHERE org_id = $1),
                        (SELECT count(*) FROM webhook_endpoints WHERE org_id = $1)",
        )
        .bind(orgs[0])
        .fetch_one(&app.db)
        .await
        .unwrap();
        assert_eq!(users, 200);
        assert_eq!(keys, run, "a new key each run");
        assert_eq!((schedules, rules), (1, 1));
        assert_eq!(endpoints, 0, "no local receiver without `up`");
    }
}

/// Runs a `flowctl` command line against `app` ([`TestApp::flowctl`]).
async fn flowctl(app: &TestApp, args: &[&str]) -> anyhow::Result<flowctl::output::Outcome> {
    app.flowctl(args).await
}

/// The API's healthcheck command line, exactly as docker-compose.yml has it.
fn compose_api_healthcheck() -> Vec<String> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docker-compose.yml");
    let compose: serde_json::Value =
        serde_saphyr::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    serde_json::from_value(compose["services"]["api"]["healthcheck"]["test"].clone()).unwrap()
}

#[tokio::test]
async fn compose_healthcheck_passes_against_a_ready_api_and_fails_with_one_line_otherwise() {
    let app = TestApp::spawn_with(flow_tests::TestOptions {
        assign_worker: false,
        ..Default::default()
    })
    .await;
    let command = compose_api_healthcheck();
    assert_eq!(command[..3], ["CMD", "flowctl", "health"]);
    let probe = |url: String| {
        let mut line: Vec<String> = command[1..command.len() - 1].to_vec();
        line.push(url);
        async move {
            let cli = <flowctl::Cli as clap::Parser>::try_parse_from(line).unwrap();
            flowctl::run(cli).await
        }
    };
    // The compose URL, pointed at this test's API instead of the container's port 8080.
    let url = command
        .last()
        .unwrap()
        .replace("127.0.0.1:8080", &app.address.to_string());
    let healthy = probe(url.clone()).await.expect("a ready API passes");
    assert_eq!(healthy.json["status"], json!(200));
    assert_eq!(healthy.json["url"], json!(url));

    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let closed_port = closed.local_addr().unwrap().port();
    drop(closed);
    let error = probe(format!("http://127.0.0.1:{closed_port}/readyz"))
        .await
        .expect_err("nothing listens");
    let line = format!("{error:#}");
    assert!(line.contains("refused"), "{line}");
    assert!(!line.contains('\n'), "one line: {line}");

    let error = probe(format!("{}/no-such-probe", app.base_url))
        .await
        .expect_err("a 404 is not healthy");
    assert!(format!("{error:#}").contains("404"), "{error:#}");
}

#[tokio::test]
async fn json_output_of_org_key_users_admin_and_dlq_commands_is_what_scripts_read() {
    let app = TestApp::spawn_with(flow_tests::TestOptions {
        assign_worker: false,
        ..Default::default()
    })
    .await;
    let org = flowctl(
        &app,
        &["org", "create", "--name", "Acme", "--tier", "enterprise"],
    )
    .await
    .unwrap();
    let org_id = org.json["id"].as_str().unwrap().to_owned();
    assert!(org_id.starts_with("org_"), "{}", org.json);
    assert_eq!(org.json["tier"], json!("enterprise"));
    assert_eq!(org.json["assignLimitPerMinute"], json!(1000));
    assert_eq!(org.text, org_id, "text output is the bare id");

    let key = flowctl(&app, &["key", "create", &org_id, "--name", "ci", "--json"])
        .await
        .unwrap();
    let rendered: serde_json::Value = serde_json::from_str(&key.render(true)).unwrap();
    assert_eq!(rendered, key.json, "--json prints the JSON document");
    let secret = key.json["secret"].as_str().unwrap();
    let key_id = key.json["id"].as_str().unwrap();
    let listed = flowctl(&app, &["key", "list", &org_id]).await.unwrap();
    assert_eq!(listed.json[0]["id"], json!(key_id));
    assert_eq!(listed.json[0]["state"], json!("active"));
    assert!(
        secret.starts_with(listed.json[0]["prefix"].as_str().unwrap()),
        "the prefix is the secret's start"
    );
    assert!(
        !listed.render(true).contains(secret),
        "a listing never shows a secret"
    );

    let file = temp_file("users.csv", "email\nann@example.com\nbob@example.com\n");
    let imported = flowctl(&app, &["users", "import", &org_id, file.to_str().unwrap()])
        .await
        .unwrap();
    assert_eq!(imported.json, json!({ "imported": 2, "created": 2 }));
    let again = flowctl(&app, &["users", "import", &org_id, file.to_str().unwrap()])
        .await
        .unwrap();
    assert_eq!(again.json, json!({ "imported": 2, "created": 0 }));

    let admin = flowctl(
        &app,
        &[
            "admin",
            "create",
            "--org",
            &org_id,
            "--email",
            "pat@example.com",
            "--role",
            "viewer",
            "--base-url",
            "https://flow.example.com",
        ],
    )
    .await
    .unwrap();
    assert_eq!(admin.json["email"], json!("pat@example.com"));
    assert!(
        admin.json["link"]
            .as_str()
            .unwrap()
            .starts_with("https://flow.example.com/dashboard/"),
        "{}",
        admin.json
    );

    let letters = flowctl(&app, &["dlq", "list"]).await.unwrap();
    assert_eq!(letters.json, json!({ "letters": [], "waiting": 0 }));
}

#[test]
fn tier_and_role_are_value_enums_and_connection_flags_are_global() {
    use clap::Parser as _;
    let error =
        flowctl::Cli::try_parse_from(["flowctl", "org", "create", "--name", "A", "--tier", "gold"])
            .err()
            .expect("gold is not a tier");
    assert_eq!(error.kind(), clap::error::ErrorKind::InvalidValue);
    assert!(
        error.to_string().contains("standard, enterprise"),
        "{error}"
    );
    let error = flowctl::Cli::try_parse_from([
        "flowctl", "admin", "create", "--org", "org_x", "--email", "a@b.c", "--role", "owner",
    ])
    .err()
    .expect("owner is not a role");
    assert_eq!(error.kind(), clap::error::ErrorKind::InvalidValue);
    for line in [
        ["flowctl", "--queue-prefix", "before", "dlq", "list"],
        ["flowctl", "dlq", "list", "--queue-prefix", "before"],
    ] {
        let cli = flowctl::Cli::try_parse_from(line).unwrap();
        assert_eq!(cli.core.queue_prefix, "before");
    }
}

#[tokio::test]
async fn completions_are_printed_for_bash_zsh_and_fish() {
    for (shell, marker) in [
        ("bash", "complete -F _flowctl"),
        ("zsh", "#compdef flowctl"),
        ("fish", "complete -c flowctl"),
    ] {
        let cli = <flowctl::Cli as clap::Parser>::try_parse_from(["flowctl", "completions", shell])
            .unwrap();
        let script = flowctl::run(cli).await.unwrap();
        let text = script.render(true);
        assert!(text.contains(marker), "{shell}: {marker}");
        for subcommand in ["health", "users", "completions", "dlq"] {
            assert!(text.contains(subcommand), "{shell} completes {subcommand}");
        }
    }
}
