//! Setting an organization up over HTTP (users, flows), and the operational endpoints.

use flow_common::db::orgs::Tier;
use flow_tests::TestApp;
use reqwest::Method;
use serde_json::json;

#[tokio::test]
async fn users_are_upserted_by_email_case_insensitively_and_listed_in_pages() {
    let app = TestApp::spawn().await;
    let org = app.create_org(Tier::Standard).await;
    let created = app
        .post(
            &org,
            "/v1/users",
            &json!({ "email": "Ann@Example.com", "name": "Ann" }),
        )
        .await;
    assert_eq!(created.status, 201, "{:?}", created.body);
    assert!(created.body["userId"].as_str().unwrap().starts_with("usr_"));
    let updated = app
        .post(
            &org,
            "/v1/users",
            &json!({ "email": "ann@example.COM", "name": "Ann B." }),
        )
        .await;
    assert_eq!(updated.status, 200);
    assert_eq!(updated.body["userId"], created.body["userId"]);
    assert_eq!(updated.body["name"], json!("Ann B."));
    assert_eq!(
        updated.body["email"],
        json!("Ann@Example.com"),
        "the first spelling is kept"
    );

    let users: Vec<_> = (0..5)
        .map(|i| json!({ "email": format!("p{i}@example.com") }))
        .collect();
    let bulk = app
        .post(&org, "/v1/users/bulk", &json!({ "users": users }))
        .await;
    assert_eq!(bulk.status, 200);
    assert_eq!(bulk.body["created"], json!(5));
    let invalid = app
        .post(
            &org,
            "/v1/users/bulk",
            &json!({ "users": [{ "email": "ok@example.com" }, { "email": "broken" }] }),
        )
        .await;
    assert_eq!(invalid.status, 400);
    assert_eq!(
        invalid.body["message"],
        json!("users[1].email must be a valid e-mail address")
    );
    let missing: i64 =
        sqlx::query_scalar("SELECT count(*) FROM users WHERE email = 'ok@example.com'")
            .fetch_one(&app.db)
            .await
            .unwrap();
    assert_eq!(missing, 0, "an invalid bulk request writes nothing");

    let mut seen = Vec::new();
    let mut path = "/v1/users?limit=4".to_owned();
    loop {
        let page = app.get(&org, &path).await;
        assert_eq!(page.status, 200);
        for user in page.body["data"].as_array().unwrap() {
            seen.push(user["email"].as_str().unwrap().to_owned());
        }
        match page.body["nextCursor"].as_str() {
            Some(cursor) => path = format!("/v1/users?limit=4&cursor={cursor}"),
            None => break,
        }
    }
    assert_eq!(seen.len(), 6);
    let one = app.get(&org, "/v1/users?email=P3@example.com").await;
    assert_eq!(one.body["data"][0]["email"], json!("p3@example.com"));
    assert_eq!(app.get(&org, "/v1/users?limit=0").await.status, 400);

    let other = app.create_org(Tier::Standard).await;
    let theirs = app.get(&other, "/v1/users").await;
    assert_eq!(theirs.body["data"], json!([]));
}

#[tokio::test]
async fn flows_are_created_with_ordered_modules_and_readable_only_by_their_organization() {
    let app = TestApp::spawn().await;
    let org = app.create_org(Tier::Standard).await;
    let created = app
        .post(&org, "/v1/flows", &json!({
            "name": "Security Basics",
            "description": "Yearly",
            "modules": [{ "name": "Phishing", "estimatedMinutes": 45 }, { "name": "Passwords", "estimatedMinutes": 3 * 24 * 60 + 4 * 60 }]
        }))
        .await;
    assert_eq!(created.status, 201, "{:?}", created.body);
    assert_eq!(created.body["moduleCount"], json!(2));
    assert_eq!(created.body["estimatedDuration"], json!("3 days 4 hours"));
    assert_eq!(created.body["modules"][1]["name"], json!("Passwords"));
    assert_eq!(created.body["modules"][1]["position"], json!(1));
    let id = created.body["flowId"].as_str().unwrap();
    let fetched = app.get(&org, &format!("/v1/flows/{id}")).await;
    assert_eq!(fetched.status, 200);
    assert_eq!(fetched.body["modules"], created.body["modules"]);
    let listed = app.get(&org, "/v1/flows").await;
    assert_eq!(listed.body["data"][0]["flowId"], json!(id));

    let other = app.create_org(Tier::Standard).await;
    assert_eq!(
        app.get(&other, &format!("/v1/flows/{id}")).await.status,
        404
    );
    for (body, message) in [
        (json!({ "modules": [{ "name": "M" }] }), "name is required"),
        (
            json!({ "name": "F", "modules": [] }),
            "modules must contain between 1 and 500 items",
        ),
        (
            json!({ "name": "F", "modules": [{ "estimatedMinutes": 5 }] }),
            "modules[0].name is required",
        ),
        (
            json!({ "name": "F", "modules": [{ "name": "M", "estimatedMinutes": -1 }] }),
            "modules[0].estimatedMinutes must be between 0 and 100000",
        ),
    ] {
        let response = app.post(&org, "/v1/flows", &body).await;
        assert_eq!(response.status, 400);
        assert_eq!(response.body["message"], json!(message));
    }
}

#[tokio::test]
async fn health_readiness_metrics_and_openapi_are_served() {
    let app = TestApp::spawn().await;
    let health = app.request(Method::GET, "/healthz", None, None, &[]).await;
    assert_eq!(health.status, 200);
    let ready = app.request(Method::GET, "/readyz", None, None, &[]).await;
    assert_eq!(ready.status, 200, "{:?}", ready.body);
    assert_eq!(ready.body["postgres"], json!("up"));
    assert_eq!(ready.body["rabbitmq"], json!("up"));

    let org = app.create_org(Tier::Standard).await;
    app.create_users(&org, &["m@example.com"]).await;
    let flow = app.create_flow(&org, "F", &[1]).await;
    assert_eq!(
        app.post(
            &org,
            "/v1/flows/assign",
            &json!({ "flowId": flow, "userEmail": "m@example.com" })
        )
        .await
        .status,
        200
    );
    let public_metrics = app.request(Method::GET, "/metrics", None, None, &[]).await;
    assert_eq!(
        public_metrics.status, 404,
        "/metrics is not served to callers"
    );
    let metrics = app
        .client
        .get(format!("{}/metrics", app.ops_url))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(metrics.contains("flow_http_requests_total"), "{metrics}");
    assert!(metrics.contains("route=\"/v1/flows/assign\""), "{metrics}");
    assert!(
        metrics.contains("flow_publish_confirm_seconds"),
        "{metrics}"
    );

    let openapi = app
        .request(Method::GET, "/v1/openapi.json", None, None, &[])
        .await;
    assert_eq!(openapi.status, 200);
    let paths = openapi.body["paths"].as_object().unwrap();
    for path in [
        "/v1/flows/assign",
        "/v1/flows/assign/bulk",
        "/v1/assignments/{id}",
        "/v1/users",
        "/v1/flows",
    ] {
        assert!(
            paths.contains_key(path),
            "{path} missing from the OpenAPI document"
        );
    }
    let schema = &openapi.body["components"]["schemas"]["AssignRequest"];
    assert_eq!(schema["required"], json!(["flowId", "userEmail"]));
}

#[tokio::test]
async fn readiness_reports_a_broker_outage() {
    let proxy = flow_tests::proxy::Proxy::start("127.0.0.1:5672".parse().unwrap()).await;
    let app = TestApp::spawn_with(flow_tests::TestOptions {
        api_amqp_url: Some(format!("amqp://guest:guest@{}/%2f", proxy.address)),
        ..Default::default()
    })
    .await;
    proxy.disable().await;
    let ready = app
        .eventually(
            std::time::Duration::from_secs(5),
            "readiness to fail",
            || async {
                let ready = app.request(Method::GET, "/readyz", None, None, &[]).await;
                (ready.status == 503).then_some(ready)
            },
        )
        .await;
    assert_eq!(ready.body["rabbitmq"], json!("down"));
    assert_eq!(ready.body["postgres"], json!("up"));
}
