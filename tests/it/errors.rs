//! Every row of the seed's error table for assign, and the HTTP conventions in the README's API section: the
//! error body on every failure, nothing half-written.

use flow_common::db::orgs::Tier;
use flow_tests::{TestApp, TestOrg, TestResponse};
use reqwest::Method;
use serde_json::{Value, json};

async fn setup(app: &TestApp) -> (TestOrg, String) {
    let org = app.create_org(Tier::Standard).await;
    app.create_users(&org, &["alice@example.com"]).await;
    let flow = app.create_flow(&org, "Security Basics", &[45]).await;
    (org, flow)
}

fn assert_error(response: &TestResponse, status: u16, code: &str) {
    assert_eq!(response.status, status, "{:?}", response.body);
    assert_eq!(response.body["error"], json!(code), "{:?}", response.body);
    assert!(
        response.body["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()),
        "{:?}",
        response.body
    );
    assert!(
        response.header("x-request-id").is_some(),
        "every response carries a request id"
    );
}

async fn assign_with_auth(
    app: &TestApp,
    authorization: Option<&str>,
    body: &Value,
) -> TestResponse {
    let mut headers = vec![];
    if let Some(value) = authorization {
        headers.push(("Authorization", value));
    }
    app.request(Method::POST, "/v1/flows/assign", None, Some(body), &headers)
        .await
}

#[tokio::test]
async fn assign_without_key_or_with_malformed_unknown_or_revoked_key_is_401_unauthorized() {
    let app = TestApp::spawn().await;
    let (org, flow) = setup(&app).await;
    let body = json!({ "flowId": flow, "userEmail": "alice@example.com" });

    let missing = assign_with_auth(&app, None, &body).await;
    assert_error(&missing, 401, "unauthorized");
    assert_eq!(missing.header("www-authenticate"), Some("Bearer"));
    for malformed in [
        "Basic dXNlcjpwYXNz",
        "Bearer",
        "Bearer ",
        &org.key,
        "Token abc",
    ] {
        assert_error(
            &assign_with_auth(&app, Some(malformed), &body).await,
            401,
            "unauthorized",
        );
    }
    let unknown = format!("Bearer fsk_{}", "0".repeat(48));
    assert_error(
        &assign_with_auth(&app, Some(&unknown), &body).await,
        401,
        "unauthorized",
    );

    let valid = format!("Bearer {}", org.key);
    assert_eq!(
        assign_with_auth(&app, Some(&valid), &body).await.status,
        200
    );
    let key_id: flow_domain::ids::KeyId =
        sqlx::query_scalar("SELECT id FROM api_keys WHERE org_id = $1")
            .bind(org.id)
            .fetch_one(&app.db)
            .await
            .unwrap();
    flow_app::keys::revoke_as_operator(&app.api, key_id)
        .await
        .expect("revoked");
    // Revocation reaches the API's cache through Postgres notifications.
    app.eventually(
        std::time::Duration::from_secs(5),
        "the revoked key to be refused",
        || async {
            let response = assign_with_auth(&app, Some(&valid), &body).await;
            (response.status == 401).then_some(response)
        },
    )
    .await;
    assert_error(
        &assign_with_auth(&app, Some(&valid), &body).await,
        401,
        "unauthorized",
    );
}

#[tokio::test]
async fn assign_unknown_flow_is_404_not_found() {
    let app = TestApp::spawn().await;
    let (org, _) = setup(&app).await;
    let other = app.create_org(Tier::Standard).await;
    let foreign_flow = app.create_flow(&other, "Theirs", &[10]).await;
    for flow in [
        "flow_0193a1b2c3d47e8f9a0b1c2d3e4f5a6b",
        "not-an-id",
        "asg_0193a1b2c3d47e8f9a0b1c2d3e4f5a6b",
        &foreign_flow,
    ] {
        let response = app
            .post(
                &org,
                "/v1/flows/assign",
                &json!({ "flowId": flow, "userEmail": "alice@example.com" }),
            )
            .await;
        assert_error(&response, 404, "not_found");
        assert_eq!(response.body["message"], json!("flow not found"));
    }
    assert_eq!(app.assignment_count().await, 0);
}

#[tokio::test]
async fn assign_unknown_email_is_404_not_found_even_when_another_org_has_it() {
    let app = TestApp::spawn().await;
    let (org, flow) = setup(&app).await;
    let other = app.create_org(Tier::Standard).await;
    app.create_users(&other, &["mallory@example.com"]).await;
    for email in ["nobody@example.com", "mallory@example.com"] {
        let response = app
            .post(
                &org,
                "/v1/flows/assign",
                &json!({ "flowId": flow, "userEmail": email }),
            )
            .await;
        assert_error(&response, 404, "not_found");
        assert_eq!(
            response.body["message"],
            json!(format!("user {email} not found in this organization"))
        );
    }
    assert_eq!(app.assignment_count().await, 0);
}

#[tokio::test]
async fn invalid_assign_bodies_are_400_naming_the_field_and_write_nothing() {
    let app = TestApp::spawn().await;
    let (org, flow) = setup(&app).await;
    let cases: Vec<(Value, &str)> = vec![
        (
            json!({ "userEmail": "alice@example.com" }),
            "flowId is required",
        ),
        (
            json!({ "flowId": "", "userEmail": "alice@example.com" }),
            "flowId is required",
        ),
        (json!({ "flowId": flow }), "userEmail is required"),
        (
            json!({ "flowId": flow, "userEmail": "alice" }),
            "userEmail must be a valid e-mail address",
        ),
        (
            json!({ "flowId": flow, "userEmail": "alice@example.com", "priority": "urgent" }),
            "priority must be one of: low, medium, high",
        ),
        (
            json!({ "flowId": flow, "userEmail": "alice@example.com", "dueDate": "2001-01-01" }),
            "dueDate must be in the future",
        ),
        (
            json!({ "flowId": flow, "userEmail": "alice@example.com", "dueDate": "next week" }),
            "dueDate must be an ISO 8601 date (YYYY-MM-DD) or RFC 3339 timestamp",
        ),
        (
            json!({ "flowId": flow, "userEmail": "alice@example.com", "notes": "x".repeat(2001) }),
            "notes must be at most 2000 characters",
        ),
        (
            json!({ "flowId": flow, "userEmail": "alice@example.com", "colour": "blue" }),
            "unknown field: colour",
        ),
        (
            json!({ "flowId": flow, "userEmail": "alice@example.com", "priority": 3 }),
            "priority must be a string",
        ),
        (
            json!({ "flowId": 42, "userEmail": "alice@example.com" }),
            "flowId must be a string",
        ),
        (
            json!(["not", "an", "object"]),
            "request body must be a JSON object",
        ),
    ];
    for (body, message) in cases {
        let response = app.post(&org, "/v1/flows/assign", &body).await;
        assert_error(&response, 400, "invalid_request");
        assert_eq!(response.body["message"], json!(message), "for {body}");
    }
    let malformed = app
        .client
        .post(format!("{}/v1/flows/assign", app.base_url))
        .bearer_auth(&org.key)
        .header("Content-Type", "application/json")
        .body("{\"flowId\": ")
        .send()
        .await
        .unwrap();
    assert_eq!(malformed.status(), 400);
    let body: Value = malformed.json().await.unwrap();
    assert_eq!(body["error"], json!("invalid_request"));
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .starts_with("request body is not valid JSON")
    );
    assert_eq!(app.assignment_count().await, 0);
}

#[tokio::test]
async fn wrong_content_type_is_415_and_oversized_body_is_413() {
    let app = TestApp::spawn().await;
    let (org, flow) = setup(&app).await;
    let body = json!({ "flowId": flow, "userEmail": "alice@example.com" }).to_string();
    for content_type in [
        None,
        Some("text/plain"),
        Some("application/x-www-form-urlencoded"),
    ] {
        let mut request = app
            .client
            .post(format!("{}/v1/flows/assign", app.base_url))
            .bearer_auth(&org.key)
            .body(body.clone());
        if let Some(content_type) = content_type {
            request = request.header("Content-Type", content_type);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 415);
        let error: Value = response.json().await.unwrap();
        assert_eq!(error["error"], json!("unsupported_media_type"));
    }
    let huge =
        json!({ "flowId": flow, "userEmail": "alice@example.com", "notes": "x".repeat(1_100_000) });
    let response = app.post(&org, "/v1/flows/assign", &huge).await;
    assert_error(&response, 413, "payload_too_large");
    let charset = app
        .client
        .post(format!("{}/v1/flows/assign", app.base_url))
        .bearer_auth(&org.key)
        .header("Content-Type", "application/json; charset=utf-8")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(charset.status(), 200, "a charset parameter is fine");
}

#[tokio::test]
async fn request_ids_are_echoed_generated_and_validated() {
    let app = TestApp::spawn().await;
    let (org, _) = setup(&app).await;
    let echoed = app
        .request(
            Method::GET,
            "/v1/flows",
            Some(&org.key),
            None,
            &[("X-Request-ID", "trace-7")],
        )
        .await;
    assert_eq!(echoed.status, 200);
    assert_eq!(echoed.header("x-request-id"), Some("trace-7"));
    let generated = app.get(&org, "/v1/flows").await;
    assert_eq!(generated.header("x-request-id").map(str::len), Some(32));
    let long = "r".repeat(201);
    let rejected = app
        .request(
            Method::GET,
            "/v1/flows",
            Some(&org.key),
            None,
            &[("X-Request-ID", &long)],
        )
        .await;
    assert_error(&rejected, 400, "invalid_request");
}

#[tokio::test]
async fn unknown_routes_are_404_and_wrong_methods_405_with_the_error_body() {
    let app = TestApp::spawn().await;
    let (org, _) = setup(&app).await;
    assert_error(&app.get(&org, "/v1/nothing-here").await, 404, "not_found");
    assert_error(
        &app.get(&org, "/v1/flows/assign").await,
        405,
        "method_not_allowed",
    );
}

#[tokio::test]
async fn assign_beyond_the_tier_limit_is_429_with_retry_after() {
    let app = TestApp::spawn().await;
    let (org, flow) = setup(&app).await;
    let started = std::time::Instant::now();
    let mut accepted = 0;
    let limited = loop {
        let response = app
            .post(
                &org,
                "/v1/flows/assign",
                &json!({ "flowId": flow, "userEmail": "alice@example.com" }),
            )
            .await;
        if response.status == 429 {
            break response;
        }
        assert_eq!(response.status, 200, "{:?}", response.body);
        assert_eq!(response.header("ratelimit-limit"), Some("100"));
        accepted += 1;
        assert!(accepted <= 110, "no 429 after {accepted} requests");
    };
    // The bucket refills smoothly (100 per minute), so a slow run may squeeze in a few more.
    let refill = (started.elapsed().as_secs_f64() * 100.0 / 60.0).ceil() as i32;
    assert!(
        (100..=100 + refill).contains(&accepted),
        "accepted {accepted} (refill allowance {refill})"
    );
    assert_error(&limited, 429, "rate_limit_exceeded");
    let retry_after = limited.body["retry_after"]
        .as_u64()
        .expect("retry_after is an integer");
    assert!((1..=60).contains(&retry_after));
    assert_eq!(
        limited.header("retry-after"),
        Some(retry_after.to_string().as_str())
    );
    assert_eq!(limited.header("ratelimit-limit"), Some("100"));
    assert_eq!(limited.header("ratelimit-remaining"), Some("0"));
    assert!(limited.header("ratelimit-reset").is_some());
}

#[tokio::test]
async fn api_replicas_share_one_rate_limit() {
    let app = TestApp::spawn().await;
    let org = app.create_org_with(Tier::Standard, Some(10)).await;
    app.create_users(&org, &["alice@example.com"]).await;
    let flow = app.create_flow(&org, "F", &[5]).await;
    let replica = app.start_api_replica().await;
    let body = json!({ "flowId": flow, "userEmail": "alice@example.com" });
    let mut accepted = 0;
    for round in 0..20 {
        let base = if round % 2 == 0 {
            app.base_url.clone()
        } else {
            replica.clone()
        };
        let response = app
            .request_at(
                &base,
                Method::POST,
                "/v1/flows/assign",
                Some(&org.key),
                Some(&body),
                &[],
            )
            .await;
        if response.status == 200 {
            accepted += 1;
        } else {
            assert_eq!(response.status, 429);
        }
    }
    assert!(
        (10..=11).contains(&accepted),
        "two replicas together accepted {accepted} of a 10/min limit"
    );
}
