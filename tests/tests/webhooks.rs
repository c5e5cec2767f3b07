//! Webhook endpoints and delivery: the four event kinds reach a local receiver signed per
//! Standard Webhooks, retried on failure with the same id, disabled on 410, isolated from slow
//! endpoints, and endpoints on internal addresses are refused.

use std::time::Duration;

use flow_common::db::orgs::Tier;
use flow_tests::receiver::{Behaviour, Receiver};
use flow_tests::{TestApp, TestOptions, TestOrg};
use serde_json::{Value, json};

async fn webhook_app() -> TestApp {
    TestApp::spawn_with(TestOptions {
        webhooks: true,
        scheduler: true,
        ..TestOptions::default()
    })
    .await
}

/// Creates an endpoint; returns its id and secret.
async fn endpoint(
    app: &TestApp,
    org: &TestOrg,
    url: &str,
    events: Option<&[&str]>,
) -> (String, String) {
    let mut body = json!({ "url": url, "description": "test receiver" });
    if let Some(events) = events {
        body["events"] = json!(events);
    }
    let response = app.post(org, "/v1/webhooks", &body).await;
    assert_eq!(response.status, 201, "{:?}", response.body);
    (
        response.body["webhookId"].as_str().expect("id").to_owned(),
        response.body["secret"].as_str().expect("secret").to_owned(),
    )
}

async fn progress(app: &TestApp, org: &TestOrg, assignment: &str, module: &str, status: &str) {
    let response = app
        .post(
            org,
            &format!("/v1/assignments/{assignment}/progress"),
            &json!({ "moduleId": module, "status": status }),
        )
        .await;
    assert_eq!(response.status, 202, "{:?}", response.body);
}

/// An organization with one endpoint at `path` of the receiver (answering as `behaviour`), the
/// users `emails` and a one-module flow.
struct OneEndpoint {
    org: TestOrg,
    webhook: String,
    secret: String,
    flow: String,
}

async fn one_endpoint(
    app: &TestApp,
    receiver: &Receiver,
    path: &str,
    behaviour: Behaviour,
    emails: &[&str],
) -> OneEndpoint {
    receiver.set(path, behaviour);
    let org = app.create_org(Tier::Standard).await;
    let (webhook, secret) = endpoint(app, &org, &receiver.url(path), None).await;
    app.create_users(&org, emails).await;
    let flow = app.create_flow(&org, "Flow", &[5]).await;
    OneEndpoint {
        org,
        webhook,
        secret,
        flow,
    }
}

#[test]
fn signatures_verify_against_the_standard_webhooks_test_vector() {
    let secret = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";
    let body = br#"{"email":"test@example.com","username":"test_user"}"#;
    let expected = "v1,tZ1I4/hDygAJgO5TYxiSd6Sd0kDW6hPenDe+bTa3Kkw=";
    assert_eq!(
        flow_common::webhook::sign(
            secret,
            "msg_27UH4WbU6Z5A5EzD8u03UvzRbpk",
            1_649_367_553,
            body
        ),
        expected
    );
    assert!(flow_common::webhook::verify(
        secret,
        expected,
        "msg_27UH4WbU6Z5A5EzD8u03UvzRbpk",
        1_649_367_553,
        body
    ));
}

#[tokio::test]
async fn the_four_event_kinds_arrive_signed_and_verifiable() {
    let app = webhook_app().await;
    let receiver = Receiver::start().await;
    let org = app.create_org(Tier::Standard).await;
    let (_, secret) = endpoint(&app, &org, &receiver.url("all"), None).await;
    let (_, only_secret) = endpoint(
        &app,
        &org,
        &receiver.url("completed-only"),
        Some(&["flow.completed"]),
    )
    .await;
    app.create_users(&org, &["alice@example.com", "bob@example.com"])
        .await;
    let flow = app.create_flow(&org, "Security Basics", &[30, 30]).await;
    let modules = app.module_ids(&org, &flow).await;

    let first = app
        .assign_persisted(
            &org,
            &flow,
            "alice@example.com",
            json!({ "priority": "high" }),
        )
        .await;
    progress(&app, &org, &first, &modules[0], "in_progress").await;
    app.wait_for_status(&org, &first, "in_progress").await;
    progress(&app, &org, &first, &modules[0], "completed").await;
    progress(&app, &org, &first, &modules[1], "completed").await;
    let due = (chrono::Utc::now() + chrono::Duration::seconds(1)).to_rfc3339();
    let second = app
        .assign_persisted(&org, &flow, "bob@example.com", json!({ "dueDate": due }))
        .await;

    let received = receiver
        .wait_for_deliveries("all", 5, Duration::from_secs(20))
        .await;
    let mut kinds: Vec<(String, String)> = received
        .iter()
        .map(|request| {
            let event = request.event();
            (
                event["data"]["assignmentId"]
                    .as_str()
                    .expect("id")
                    .to_owned(),
                event["type"].as_str().expect("type").to_owned(),
            )
        })
        .collect();
    kinds.sort();
    let mut expected = vec![
        (first.clone(), "flow.assigned".to_owned()),
        (first.clone(), "flow.started".to_owned()),
        (first.clone(), "flow.completed".to_owned()),
        (second.clone(), "flow.assigned".to_owned()),
        (second.clone(), "flow.overdue".to_owned()),
    ];
    expected.sort();
    assert_eq!(kinds, expected);
    for request in &received {
        assert!(
            request.verifies_with(&secret),
            "signature of {:?}",
            request.event()
        );
        assert!(!request.verifies_with(&only_secret));
        assert_eq!(request.header("content-type"), "application/json");
        let event = request.event();
        assert_eq!(
            request.header("webhook-id"),
            event["id"].as_str().expect("id")
        );
        assert!(event["id"].as_str().expect("id").starts_with("evt_"));
        let timestamp: i64 = request
            .header("webhook-timestamp")
            .parse()
            .expect("timestamp");
        assert!((chrono::Utc::now().timestamp() - timestamp).abs() < 60);
        let data = &event["data"];
        for field in [
            "assignmentId",
            "flowId",
            "flowName",
            "assigneeEmail",
            "status",
            "assignedAt",
            "dueDate",
            "startedAt",
            "completedAt",
            "priority",
        ] {
            assert!(data.get(field).is_some(), "{field} missing from {event}");
        }
        assert_eq!(data["flowName"], json!("Security Basics"));
    }
    let completed = received
        .iter()
        .map(|request| request.event())
        .find(|event| event["type"] == json!("flow.completed"))
        .expect("completed event");
    assert_eq!(completed["data"]["status"], json!("completed"));
    assert_eq!(completed["data"]["priority"], json!("high"));
    assert!(completed["data"]["completedAt"].is_string());

    // The filtered endpoint got only the completion.
    let filtered = receiver
        .wait_for_deliveries("completed-only", 1, Duration::from_secs(10))
        .await;
    assert_eq!(filtered.len(), 1);
    assert_eq!(filtered[0].event()["type"], json!("flow.completed"));
    assert!(filtered[0].verifies_with(&only_secret));
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(receiver.received("all").len(), 5, "no duplicates");
}

#[tokio::test]
async fn a_failing_receiver_gets_the_event_after_retries_with_the_same_webhook_id() {
    let app = webhook_app().await;
    let receiver = Receiver::start().await;
    let OneEndpoint {
        org,
        webhook,
        secret,
        flow,
    } = one_endpoint(
        &app,
        &receiver,
        "flaky",
        Behaviour::FailTimes(3),
        &["carol@example.com"],
    )
    .await;
    app.assign_persisted(&org, &flow, "carol@example.com", json!({}))
        .await;

    receiver
        .wait_for_deliveries("flaky", 1, Duration::from_secs(20))
        .await;
    let attempts = receiver.received("flaky");
    assert_eq!(
        attempts
            .iter()
            .map(|request| request.status)
            .collect::<Vec<_>>(),
        [500, 500, 500, 200]
    );
    let id = attempts[0].header("webhook-id").to_owned();
    assert!(
        attempts
            .iter()
            .all(|request| request.header("webhook-id") == id)
    );
    assert!(
        attempts
            .iter()
            .all(|request| request.verifies_with(&secret))
    );

    let deliveries = app
        .eventually(
            Duration::from_secs(10),
            "the delivery to be recorded",
            || async {
                let response = app
                    .get(&org, &format!("/v1/webhooks/{webhook}/deliveries"))
                    .await;
                (response.body["data"][0]["status"] == json!("succeeded")).then_some(response.body)
            },
        )
        .await;
    let delivery = &deliveries["data"][0];
    assert_eq!(delivery["attempts"], json!(4));
    assert_eq!(delivery["eventType"], json!("flow.assigned"));
    assert_eq!(delivery["eventId"], json!(id));
    let codes: Vec<Value> = delivery["attemptLog"]
        .as_array()
        .expect("attempts")
        .iter()
        .map(|attempt| attempt["statusCode"].clone())
        .collect();
    assert_eq!(codes, [json!(500), json!(500), json!(500), json!(200)]);
    assert!(delivery["attemptLog"][0]["latencyMs"].is_i64());
    let endpoint = app.get(&org, &format!("/v1/webhooks/{webhook}")).await;
    assert_eq!(endpoint.body["enabled"], json!(true));
    assert_eq!(endpoint.body["failingSince"], Value::Null);
}

#[tokio::test]
async fn a_delivery_that_exhausts_its_schedule_fails_and_can_be_retried() {
    let app = webhook_app().await;
    let receiver = Receiver::start().await;
    let OneEndpoint {
        org, webhook, flow, ..
    } = one_endpoint(
        &app,
        &receiver,
        "down",
        Behaviour::FailTimes(5),
        &["dan@example.com"],
    )
    .await;
    app.assign_persisted(&org, &flow, "dan@example.com", json!({}))
        .await;
    let failed = app
        .eventually(Duration::from_secs(20), "the delivery to fail", || async {
            let response = app
                .get(
                    &org,
                    &format!("/v1/webhooks/{webhook}/deliveries?status=failed"),
                )
                .await;
            response.body["data"].get(0).cloned()
        })
        .await;
    assert_eq!(failed["attempts"], json!(5));
    assert_eq!(failed["lastStatusCode"], json!(500));
    assert_eq!(receiver.received("down").len(), 5);
    let endpoint = app.get(&org, &format!("/v1/webhooks/{webhook}")).await;
    assert!(endpoint.body["failingSince"].is_string());

    let delivery_id = failed["deliveryId"].as_str().expect("id");
    let retried = app
        .post(
            &org,
            &format!("/v1/webhooks/deliveries/{delivery_id}/retry"),
            &json!({}),
        )
        .await;
    assert_eq!(retried.status, 202, "{:?}", retried.body);
    assert_eq!(retried.body["status"], json!("pending"));
    receiver
        .wait_for_deliveries("down", 1, Duration::from_secs(10))
        .await;
    let other = app.create_org(Tier::Standard).await;
    let response = app
        .post(
            &other,
            &format!("/v1/webhooks/deliveries/{delivery_id}/retry"),
            &json!({}),
        )
        .await;
    assert_eq!(response.status, 404);
}

#[tokio::test]
async fn a_receiver_answering_410_gets_its_endpoint_disabled() {
    let app = webhook_app().await;
    let receiver = Receiver::start().await;
    let OneEndpoint {
        org, webhook, flow, ..
    } = one_endpoint(
        &app,
        &receiver,
        "gone",
        Behaviour::Status(410),
        &["erin@example.com", "finn@example.com", "gina@example.com"],
    )
    .await;
    app.assign_persisted(&org, &flow, "erin@example.com", json!({}))
        .await;
    let disabled = app
        .eventually(
            Duration::from_secs(20),
            "the endpoint to be disabled",
            || async {
                let response = app.get(&org, &format!("/v1/webhooks/{webhook}")).await;
                (response.body["enabled"] == json!(false)).then_some(response.body)
            },
        )
        .await;
    assert_eq!(disabled["disabledReason"], json!("gone"));
    assert_eq!(receiver.received("gone").len(), 1, "a 410 is not retried");

    // A disabled endpoint gets no events; a test ping still goes out, so it can be checked.
    app.assign_persisted(&org, &flow, "finn@example.com", json!({}))
        .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(receiver.received("gone").len(), 1);
    receiver.set("gone", Behaviour::Succeed);
    let ping = app
        .post(&org, &format!("/v1/webhooks/{webhook}/test"), &json!({}))
        .await;
    assert_eq!(ping.status, 202);
    let pinged = receiver
        .wait_for_deliveries("gone", 1, Duration::from_secs(10))
        .await;
    assert_eq!(pinged[0].event()["type"], json!("webhook.test"));
    // Enabling it again resumes deliveries.
    let enabled = app
        .request(
            reqwest::Method::PATCH,
            &format!("/v1/webhooks/{webhook}"),
            Some(&org.key),
            Some(&json!({ "enabled": true })),
            &[],
        )
        .await;
    assert_eq!(enabled.status, 200, "{:?}", enabled.body);
    assert_eq!(enabled.body["disabledReason"], Value::Null);
    app.assign_persisted(&org, &flow, "gina@example.com", json!({}))
        .await;
    let delivered = receiver
        .wait_for_deliveries("gone", 2, Duration::from_secs(10))
        .await;
    assert_eq!(delivered[1].event()["type"], json!("flow.assigned"));
    assert_eq!(
        delivered[1].event()["data"]["assigneeEmail"],
        json!("gina@example.com")
    );
}

#[tokio::test]
async fn an_endpoint_that_never_answers_does_not_delay_another() {
    let app = webhook_app().await;
    let receiver = Receiver::start().await;
    receiver.set("stuck", Behaviour::Hang);
    let org = app.create_org(Tier::Enterprise).await;
    endpoint(&app, &org, &receiver.url("stuck"), None).await;
    endpoint(&app, &org, &receiver.url("healthy"), None).await;
    let emails: Vec<String> = (0..30).map(|i| format!("user{i}@example.com")).collect();
    let refs: Vec<&str> = emails.iter().map(String::as_str).collect();
    app.create_users(&org, &refs).await;
    let flow = app.create_flow(&org, "Flow", &[5]).await;
    let started = tokio::time::Instant::now();
    for email in &emails {
        app.assign_persisted(&org, &flow, email, json!({})).await;
    }
    let delivered = receiver
        .wait_for_deliveries("healthy", 30, Duration::from_secs(15))
        .await;
    let last = delivered
        .iter()
        .map(|request| request.at)
        .max()
        .expect("deliveries");
    // The stuck endpoint holds its own slots for the whole 5 s timeout of the test worker; the
    // healthy one got every event well before that.
    assert!(
        last - started < Duration::from_secs(4),
        "healthy endpoint waited {:?}",
        last - started
    );
    assert!(!receiver.received("stuck").is_empty());
}

#[tokio::test]
async fn rotating_the_secret_signs_with_both_secrets_for_a_while() {
    let app = webhook_app().await;
    let receiver = Receiver::start().await;
    let org = app.create_org(Tier::Standard).await;
    let (webhook, old_secret) = endpoint(&app, &org, &receiver.url("rotating"), None).await;
    let rotated = app
        .post(
            &org,
            &format!("/v1/webhooks/{webhook}/rotate-secret"),
            &json!({}),
        )
        .await;
    assert_eq!(rotated.status, 200, "{:?}", rotated.body);
    let new_secret = rotated.body["secret"].as_str().expect("secret").to_owned();
    assert!(new_secret.starts_with("whsec_"));
    assert_ne!(new_secret, old_secret);
    assert!(rotated.body["previousSecretExpiresAt"].is_string());
    let test = app
        .post(&org, &format!("/v1/webhooks/{webhook}/test"), &json!({}))
        .await;
    assert_eq!(test.status, 202);
    let delivered = receiver
        .wait_for_deliveries("rotating", 1, Duration::from_secs(10))
        .await;
    assert_eq!(
        delivered[0].header("webhook-signature").split(' ').count(),
        2
    );
    assert!(delivered[0].verifies_with(&new_secret));
    assert!(delivered[0].verifies_with(&old_secret));
    assert_eq!(
        delivered[0].header("webhook-id"),
        test.body["eventId"].as_str().expect("id")
    );
}

#[tokio::test]
async fn endpoints_are_managed_over_the_api_and_scoped_to_their_organization() {
    let app = TestApp::spawn().await;
    let org = app.create_org(Tier::Standard).await;
    let other = app.create_org(Tier::Standard).await;
    let (webhook, secret) = endpoint(
        &app,
        &org,
        "http://127.0.0.1:9/hooks/a",
        Some(&["flow.completed", "flow.assigned", "flow.completed"]),
    )
    .await;
    assert!(secret.starts_with("whsec_"));
    let fetched = app.get(&org, &format!("/v1/webhooks/{webhook}")).await;
    assert_eq!(fetched.status, 200);
    assert_eq!(
        fetched.body["events"],
        json!(["flow.assigned", "flow.completed"])
    );
    assert_eq!(fetched.body["enabled"], json!(true));
    assert!(
        fetched.body.get("secret").is_none(),
        "the secret is shown once"
    );
    let listed = app.get(&org, "/v1/webhooks").await;
    assert_eq!(listed.body["data"].as_array().expect("data").len(), 1);
    assert!(listed.body["data"][0].get("secret").is_none());

    let patched = app
        .request(
            reqwest::Method::PATCH,
            &format!("/v1/webhooks/{webhook}"),
            Some(&org.key),
            Some(&json!({ "url": "http://127.0.0.1:9/hooks/b", "events": [], "description": "", "enabled": false })),
            &[],
        )
        .await;
    assert_eq!(patched.status, 200, "{:?}", patched.body);
    assert_eq!(patched.body["url"], json!("http://127.0.0.1:9/hooks/b"));
    assert_eq!(patched.body["events"], json!([]));
    assert_eq!(patched.body["description"], Value::Null);
    assert_eq!(patched.body["enabled"], json!(false));

    // Another organization's endpoint answers exactly like one that does not exist.
    for (method, path) in [
        (reqwest::Method::GET, format!("/v1/webhooks/{webhook}")),
        (reqwest::Method::DELETE, format!("/v1/webhooks/{webhook}")),
        (
            reqwest::Method::GET,
            format!("/v1/webhooks/{webhook}/deliveries"),
        ),
        (
            reqwest::Method::POST,
            format!("/v1/webhooks/{webhook}/test"),
        ),
        (
            reqwest::Method::POST,
            format!("/v1/webhooks/{webhook}/rotate-secret"),
        ),
        (reqwest::Method::GET, "/v1/webhooks/whe_nope".to_owned()),
    ] {
        let response = app
            .request(method.clone(), &path, Some(&other.key), None, &[])
            .await;
        assert_eq!(response.status, 404, "{method} {path}");
        assert_eq!(response.body["error"], json!("not_found"));
    }
    assert!(
        app.get(&other, "/v1/webhooks").await.body["data"]
            .as_array()
            .expect("data")
            .is_empty()
    );

    for (body, message) in [
        (json!({}), "url is required"),
        (
            json!({ "url": "not a url" }),
            "url must be an absolute http(s) URL",
        ),
        (
            json!({ "url": "https://example.com/x", "events": ["flow.deleted"] }),
            "events must contain only: flow.assigned, flow.started, flow.completed, flow.overdue",
        ),
        (
            json!({ "url": "https://example.com/x", "secret": "mine" }),
            "unknown field: secret",
        ),
    ] {
        let response = app.post(&org, "/v1/webhooks", &body).await;
        assert_eq!(response.status, 400, "{body}");
        assert_eq!(response.body["message"], json!(message), "{body}");
    }

    let deleted = app
        .request(
            reqwest::Method::DELETE,
            &format!("/v1/webhooks/{webhook}"),
            Some(&org.key),
            None,
            &[],
        )
        .await;
    assert_eq!(deleted.status, 204);
    assert_eq!(
        app.get(&org, &format!("/v1/webhooks/{webhook}"))
            .await
            .status,
        404
    );
}

#[tokio::test]
async fn endpoints_on_internal_addresses_are_refused_under_the_production_policy() {
    let app = TestApp::spawn_with(TestOptions {
        assign_worker: false,
        strict_webhook_policy: true,
        ..TestOptions::default()
    })
    .await;
    let org = app.create_org(Tier::Standard).await;
    for url in [
        "https://127.0.0.1/hook",
        "https://localhost/hook",
        "https://10.0.0.8/hook",
        "https://172.16.5.4/hook",
        "https://192.168.1.10/hook",
        "https://169.254.169.254/latest/meta-data/",
        "https://[::1]/hook",
        "https://[fd00:ec2::254]/hook",
        "https://0.0.0.0/hook",
    ] {
        let response = app.post(&org, "/v1/webhooks", &json!({ "url": url })).await;
        assert_eq!(response.status, 400, "{url}: {:?}", response.body);
        assert_eq!(
            response.body["message"],
            json!("url must not point to a loopback, private, link-local or metadata address"),
            "{url}"
        );
    }
    let plain = app
        .post(
            &org,
            "/v1/webhooks",
            &json!({ "url": "http://93.184.216.34/hook" }),
        )
        .await;
    assert_eq!(plain.status, 400);
    assert_eq!(plain.body["message"], json!("url must use https"));
    let public = app
        .post(
            &org,
            "/v1/webhooks",
            &json!({ "url": "https://93.184.216.34/hook" }),
        )
        .await;
    assert_eq!(public.status, 201, "{:?}", public.body);
    let listed = app.get(&org, "/v1/webhooks").await;
    assert_eq!(listed.body["data"].as_array().expect("data").len(), 1);
}

#[tokio::test]
async fn secrets_are_encrypted_at_rest_when_a_master_key_is_configured() {
    use base64::Engine;
    let key = base64::engine::general_purpose::STANDARD.encode([42u8; 32]);
    let app = TestApp::spawn_with(TestOptions {
        webhooks: true,
        webhook_secret_key: Some(key),
        ..TestOptions::default()
    })
    .await;
    let receiver = Receiver::start().await;
    let org = app.create_org(Tier::Standard).await;
    let (webhook, secret) = endpoint(&app, &org, &receiver.url("sealed"), None).await;
    let stored: String = sqlx::query_scalar("SELECT secret FROM webhook_endpoints")
        .fetch_one(&app.db)
        .await
        .expect("stored secret");
    assert!(stored.starts_with("enc:v1:"), "{stored}");
    assert!(!stored.contains(secret.trim_start_matches("whsec_")));

    let test = app
        .post(&org, &format!("/v1/webhooks/{webhook}/test"), &json!({}))
        .await;
    assert_eq!(test.status, 202);
    let delivered = receiver
        .wait_for_deliveries("sealed", 1, Duration::from_secs(10))
        .await;
    assert!(delivered[0].verifies_with(&secret));

    let rotated = app
        .post(
            &org,
            &format!("/v1/webhooks/{webhook}/rotate-secret"),
            &json!({}),
        )
        .await;
    let new_secret = rotated.body["secret"].as_str().expect("secret").to_owned();
    let (current, previous): (String, Option<String>) =
        sqlx::query_as("SELECT secret, previous_secret FROM webhook_endpoints")
            .fetch_one(&app.db)
            .await
            .expect("stored secrets");
    assert!(current.starts_with("enc:v1:") && previous.is_some_and(|p| p.starts_with("enc:v1:")));
    app.post(&org, &format!("/v1/webhooks/{webhook}/test"), &json!({}))
        .await;
    let delivered = receiver
        .wait_for_deliveries("sealed", 2, Duration::from_secs(10))
        .await;
    assert!(delivered[1].verifies_with(&new_secret));
    assert!(delivered[1].verifies_with(&secret));
}
