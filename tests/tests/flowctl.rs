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
    let key_id: flow_common::ids::KeyId =
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

#[tokio::test]
async fn up_creates_the_database_and_runs_the_api_and_workers_until_shutdown() {
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
    };
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let bind: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
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
    let base = format!("http://{bind}");
    let mut ready = false;
    for _ in 0..200 {
        if client
            .get(format!("{base}/readyz"))
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

    // The demo organization exists: use one of its flows and users with a fresh key.
    let pool = sqlx::PgPool::connect(&database_url).await.unwrap();
    let mut demo = None;
    for _ in 0..200 {
        // The demo is created once the components are up.
        demo = sqlx::query_as::<_, (flow_common::ids::OrgId, flow_common::ids::FlowId)>(
            "SELECT o.id, f.id FROM organizations o JOIN flows f ON f.org_id = o.id
             JOIN api_keys k ON k.org_id = o.id WHERE f.name = 'Security Basics'",
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
    let users: i64 = sqlx::query_scalar("SELECT count(*) FROM users WHERE org_id = $1")
        .bind(org_id)
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(users, 1_000);
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
