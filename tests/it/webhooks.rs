//! Webhook endpoints and delivery: the four event kinds reach a local receiver signed per
//! Standard Webhooks, retried on failure with the same id, disabled on 410, isolated from slow
//! endpoints, and endpoints on internal addresses are refused. Bad endpoints cost only
//! themselves: a response Postgres cannot store as it is, an endpoint deleted mid-flight, a
//! stale claim, or a queue draining slower than the lease; test pings and retries are limited. A
//! backlog of events waits in the broker, not in a webhook-worker's memory.

use std::sync::LazyLock;
use std::time::Duration;

use flow_common::db::orgs::Tier;
use flow_common::db::webhooks as webhook_rows;
use flow_common::db::webhooks::fan_out::ClaimedDelivery;
use flow_common::db::webhooks::outcomes::{AttemptOutcome, EndpointVerdict, NextStep};
use flow_domain::ids::{DeliveryId, EventId, OrgId, WebhookEndpointId};
use flow_tests::receiver::{Behaviour, Receiver};
use flow_tests::{TEST_RETRY_SCHEDULE, TestApp, TestOptions, TestOrg, WorkerHandle};
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
        flow_domain::webhook::signing::sign(
            secret,
            "msg_27UH4WbU6Z5A5EzD8u03UvzRbpk",
            1_649_367_553,
            body
        ),
        expected
    );
    assert!(flow_domain::webhook::signing::verify(
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
    let receiver = Receiver::start().await.expect("webhook receiver");
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
    let receiver = Receiver::start().await.expect("webhook receiver");
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
    let receiver = Receiver::start().await.expect("webhook receiver");
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
    let receiver = Receiver::start().await.expect("webhook receiver");
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
    let receiver = Receiver::start().await.expect("webhook receiver");
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
    let receiver = Receiver::start().await.expect("webhook receiver");
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
            "events must contain only: flow.assigned, flow.started, flow.completed, flow.overdue, \
             flow.updated, flow.cancelled, flow.reminder, flow.expiring, flow.expired",
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
        // 6to4, Teredo, local-use NAT64 and site-local: they reach other networks through a
        // relay or translator, whatever the IPv4 address inside.
        "https://[2002:5db8:d822::1]/hook",
        "https://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/hook",
        "https://[64:ff9b:1::a9fe:a9fe]/hook",
        "https://[fec0::1]/hook",
    ] {
        let response = app.post(&org, "/v1/webhooks", &json!({ "url": url })).await;
        assert_eq!(response.status, 400, "{url}: {:?}", response.body);
        assert_eq!(
            response.body["message"],
            json!(flow_common::webhook::address::REFUSED_ADDRESS),
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
    let message = plain.body["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("url must use https") && message.contains("WEBHOOK_ALLOW_HTTP=true"),
        "{message}"
    );
    let refused = flow_common::webhook::address::REFUSED_ADDRESS;
    assert!(refused.contains("WEBHOOK_ALLOW_PRIVATE=true"), "{refused}");
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
    let receiver = Receiver::start().await.expect("webhook receiver");
    let org = app.create_org(Tier::Standard).await;
    let (webhook, secret) = endpoint(&app, &org, &receiver.url("sealed"), None).await;
    let stored: String = sqlx::query_scalar("SELECT secret FROM webhook_endpoints")
        .fetch_one(&app.db)
        .await
        .expect("stored secret");
    assert!(stored.starts_with("enc:v2:"), "{stored}");
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
    assert!(current.starts_with("enc:v2:") && previous.is_some_and(|p| p.starts_with("enc:v2:")));
    app.post(&org, &format!("/v1/webhooks/{webhook}/test"), &json!({}))
        .await;
    let delivered = receiver
        .wait_for_deliveries("sealed", 2, Duration::from_secs(10))
        .await;
    assert!(delivered[1].verifies_with(&new_secret));
    assert!(delivered[1].verifies_with(&secret));
}

/// An app whose webhook-worker(s) the test starts itself (see [`webhook_worker`]), with the relay.
async fn app_with_relay() -> TestApp {
    let mut app = TestApp::spawn().await;
    app.relay = Some(app.start_relay());
    app
}

/// A webhook-worker delivering to local receivers with [`TEST_RETRY_SCHEDULE`], a 1 s attempt
/// timeout and the given lease and per-endpoint concurrency.
fn webhook_worker(app: &TestApp, lease: Duration, endpoint_concurrency: usize) -> WorkerHandle {
    let mut config: flow_workers::webhook::WebhookWorkerConfig = flow_common::config::from_env();
    config.core = app.core.clone();
    config.secrets =
        flow_common::webhook::vault::SecretVault::with_key(flow_tests::TEST_SECRET_KEY);
    config.policy = flow_common::webhook::address::AddressPolicy {
        allow_private: true,
        allow_http: true,
    };
    config.retry_schedule = TEST_RETRY_SCHEDULE.parse().expect("schedule");
    config.poll_interval = Duration::from_millis(100);
    config.timeout = Duration::from_secs(1);
    config.lease = lease;
    config.endpoint_concurrency = endpoint_concurrency;
    WorkerHandle::spawn(move |shutdown| flow_workers::runtime::run(config, shutdown))
}

/// Status and attempt count of every delivery to `endpoint`.
async fn deliveries_of(app: &TestApp, endpoint: &str) -> Vec<(String, i32)> {
    let id = WebhookEndpointId::parse(endpoint).expect("endpoint id");
    sqlx::query_as("SELECT status, attempts FROM webhook_deliveries WHERE endpoint_id = $1")
        .bind(id)
        .fetch_all(&app.db)
        .await
        .expect("deliveries")
}

/// Waits until every delivery to each of `endpoints` has succeeded after exactly one attempt.
async fn wait_until_succeeded_once(app: &TestApp, endpoints: &[String]) {
    for endpoint in endpoints {
        app.eventually(
            Duration::from_secs(10),
            &format!("the delivery to {endpoint} to be recorded"),
            || async {
                let rows = deliveries_of(app, endpoint).await;
                (rows == [("succeeded".to_owned(), 1)]).then_some(())
            },
        )
        .await;
    }
}

/// What an endpoint answers: text with NUL bytes, then more than 1 KiB of two-byte characters,
/// cut by the 1 KiB bound in the middle of one.
static NUL_BODY: LazyLock<Vec<u8>> =
    LazyLock::new(|| format!("accepted\0 with\0NUL bytes!! {}", "é".repeat(600)).into_bytes());

#[tokio::test]
async fn a_response_with_nul_bytes_is_recorded_stripped_with_the_other_outcomes_of_its_batch() {
    let mut app = app_with_relay().await;
    let lease = Duration::from_secs(3);
    app.webhook_worker = Some(webhook_worker(&app, lease, 4));
    app.wait_for_consumers(flow_common::amqp::QueueKind::Webhooks, 1)
        .await;
    let receiver = Receiver::start().await.expect("webhook receiver");
    let org = app.create_org(Tier::Standard).await;
    // Every endpoint holds its request until the gate opens, so the outcomes reach the recorder
    // together, in one batch.
    let paths = ["nul", "other-1", "other-2", "other-3", "other-4", "other-5"];
    let mut endpoints = Vec::new();
    for path in paths {
        let answer = if path == "nul" {
            NUL_BODY.as_slice()
        } else {
            b"ok".as_slice()
        };
        receiver.set(path, Behaviour::Gated(answer));
        endpoints.push(endpoint(&app, &org, &receiver.url(path), None).await.0);
    }
    app.create_users(&org, &["hana@example.com"]).await;
    let flow = app.create_flow(&org, "Flow", &[5]).await;
    app.assign_persisted(&org, &flow, "hana@example.com", json!({}))
        .await;
    for path in paths {
        receiver
            .wait_for_requests(path, 1, Duration::from_secs(10))
            .await;
    }
    receiver.open_gate();

    wait_until_succeeded_once(&app, &endpoints).await;
    let deliveries = app
        .get(&org, &format!("/v1/webhooks/{}/deliveries", endpoints[0]))
        .await;
    let excerpt = deliveries.body["data"][0]["attemptLog"][0]["responseExcerpt"]
        .as_str()
        .expect("excerpt")
        .to_owned();
    let stripped = String::from_utf8(NUL_BODY.clone())
        .expect("UTF-8")
        .replace('\0', "");
    assert!(!excerpt.contains('\0'));
    assert!(
        excerpt.starts_with("accepted withNUL bytes!! éé"),
        "{excerpt}"
    );
    assert!(stripped.starts_with(&excerpt));
    assert!(
        excerpt.len() <= 1_024 && excerpt.len() > 1_000,
        "{} bytes",
        excerpt.len()
    );
    // Nothing is sent again once the lease has passed: every outcome was recorded.
    tokio::time::sleep(lease + Duration::from_secs(1)).await;
    for path in paths {
        assert_eq!(receiver.received(path).len(), 1, "{path}");
    }
    wait_until_succeeded_once(&app, &endpoints).await;
}

#[tokio::test]
async fn an_endpoint_deleted_while_its_attempt_is_in_flight_costs_only_its_own_outcome() {
    let mut app = app_with_relay().await;
    let lease = Duration::from_secs(3);
    app.webhook_worker = Some(webhook_worker(&app, lease, 4));
    app.wait_for_consumers(flow_common::amqp::QueueKind::Webhooks, 1)
        .await;
    let receiver = Receiver::start().await.expect("webhook receiver");
    let org = app.create_org(Tier::Standard).await;
    let paths = ["deleted", "kept-1", "kept-2", "kept-3"];
    let mut endpoints = Vec::new();
    for path in paths {
        receiver.set(path, Behaviour::Gated(b"ok"));
        endpoints.push(endpoint(&app, &org, &receiver.url(path), None).await.0);
    }
    app.create_users(&org, &["ivan@example.com"]).await;
    let flow = app.create_flow(&org, "Flow", &[5]).await;
    app.assign_persisted(&org, &flow, "ivan@example.com", json!({}))
        .await;
    for path in paths {
        receiver
            .wait_for_requests(path, 1, Duration::from_secs(10))
            .await;
    }
    let deleted = app
        .request(
            reqwest::Method::DELETE,
            &format!("/v1/webhooks/{}", endpoints[0]),
            Some(&org.key),
            None,
            &[],
        )
        .await;
    assert_eq!(deleted.status, 204);
    receiver.open_gate();

    wait_until_succeeded_once(&app, &endpoints[1..]).await;
    assert!(deliveries_of(&app, &endpoints[0]).await.is_empty());
    tokio::time::sleep(lease + Duration::from_secs(1)).await;
    for path in paths {
        assert_eq!(receiver.received(path).len(), 1, "{path}");
    }
    wait_until_succeeded_once(&app, &endpoints[1..]).await;
}

#[tokio::test]
async fn an_endpoint_deleted_while_an_event_fans_out_gets_no_delivery_and_the_others_do() {
    let app = TestApp::spawn_with(TestOptions {
        assign_worker: false,
        ..TestOptions::default()
    })
    .await;
    let org = app.create_org(Tier::Standard).await;
    let (deleted, _) = endpoint(&app, &org, "http://127.0.0.1:9/hooks/deleted", None).await;
    let (kept, _) = endpoint(&app, &org, "http://127.0.0.1:9/hooks/kept", None).await;
    let deleted = WebhookEndpointId::parse(&deleted).expect("id");
    let kept = WebhookEndpointId::parse(&kept).expect("id");

    // The deletion holds its lock until it commits, while the fan-out reads the endpoint.
    let mut deletion = app.db.begin().await.expect("transaction");
    assert!(
        webhook_rows::endpoints::delete(&mut deletion, org.id, deleted)
            .await
            .expect("delete")
    );
    let event = assigned_event(org.id);
    let pool = app.db.clone();
    let fan_out = tokio::spawn(async move {
        fan_out_committed(
            &pool,
            &[event],
            Duration::from_secs(60),
            uuid::Uuid::new_v4(),
        )
        .await
    });
    waiting_for_a_lock(&app, "the fan-out to wait for the deletion's lock").await;
    deletion.commit().await.expect("commit");
    let claimed = fan_out.await.expect("task").expect("the fan-out succeeds");
    assert_eq!(
        claimed
            .iter()
            .map(|delivery| delivery.endpoint_id)
            .collect::<Vec<_>>(),
        [kept]
    );
}

/// Deleting an endpoint deletes its deliveries and their attempts (no foreign key cascades it,
/// migration 0111), also when a recorder holds one of its deliveries at that moment: the deletion
/// waits for the recorder and then deletes the attempt it wrote, leaving no attempt without its
/// delivery; another endpoint's rows are untouched.
#[tokio::test]
async fn deleting_an_endpoint_while_an_outcome_is_recorded_leaves_no_attempt_behind() {
    let app = TestApp::spawn_with(TestOptions {
        assign_worker: false,
        ..TestOptions::default()
    })
    .await;
    let org = app.create_org(Tier::Standard).await;
    let (deleted, _) = endpoint(&app, &org, "http://127.0.0.1:9/hooks/deleted", None).await;
    let (kept, _) = endpoint(&app, &org, "http://127.0.0.1:9/hooks/kept", None).await;
    for webhook in [&deleted, &kept] {
        let ping = app
            .post(&org, &format!("/v1/webhooks/{webhook}/test"), &json!({}))
            .await;
        assert_eq!(ping.status, 202, "{:?}", ping.body);
    }
    let claims = claim(&app, Duration::from_secs(60)).await;
    assert_eq!(claims.len(), 2);
    let outcomes: Vec<AttemptOutcome> = claims
        .iter()
        .map(|claim| outcome(claim, NextStep::Succeeded, 200))
        .collect();
    let deleted_id = WebhookEndpointId::parse(&deleted).expect("id");
    let (held, other): (Vec<AttemptOutcome>, Vec<AttemptOutcome>) = outcomes
        .into_iter()
        .partition(|outcome| outcome.endpoint_id == deleted_id);
    assert!(record(&app, &other).await.is_empty());

    // The recorder holds the delivery (its attempt written, not committed) while the deletion runs.
    let mut recorder = app.db.begin().await.expect("transaction");
    let recorded = webhook_rows::outcomes::record_outcomes(
        &mut recorder,
        &held,
        Duration::from_secs(5 * 86_400),
    )
    .await
    .expect("record");
    assert!(recorded.stale.is_empty());
    let (pool, org_id) = (app.db.clone(), org.id);
    let deletion = tokio::spawn(async move {
        let mut transaction = pool.begin().await?;
        let found = webhook_rows::endpoints::delete(&mut transaction, org_id, deleted_id).await?;
        transaction.commit().await?;
        Ok::<_, sqlx::Error>(found)
    });
    waiting_for_a_lock(&app, "the deletion to wait for the recorder's lock").await;
    recorder.commit().await.expect("commit");
    assert!(
        deletion
            .await
            .expect("task")
            .expect("the deletion succeeds")
    );

    assert!(deliveries_of(&app, &deleted).await.is_empty());
    assert_eq!(
        deliveries_of(&app, &kept).await,
        [("succeeded".to_owned(), 1)]
    );
    let (orphans, attempts): (i64, i64) = sqlx::query_as(
        "SELECT count(*) FILTER (WHERE d.id IS NULL), count(*)
         FROM webhook_attempts a LEFT JOIN webhook_deliveries d ON d.id = a.delivery_id",
    )
    .fetch_one(&app.db)
    .await
    .expect("attempts");
    assert_eq!(
        (orphans, attempts),
        (0, 1),
        "only the kept endpoint's attempt remains"
    );
}

/// An event of type `flow.assigned` of `org_id`, as the relay publishes it.
fn assigned_event(org_id: OrgId) -> webhook_rows::fan_out::IncomingEvent {
    webhook_rows::fan_out::IncomingEvent {
        event_id: EventId::new(),
        org_id,
        event_type: "flow.assigned".into(),
        payload: serde_json::value::to_raw_value(&json!({ "type": "flow.assigned" }))
            .expect("json"),
        event_at: chrono::Utc::now(),
        traceparent: None,
    }
}

/// Fans `events` out in a transaction of their own, by the webhook-worker's route with no inline
/// attempt (every delivery written claimed), and commits.
async fn fan_out_committed(
    pool: &sqlx::PgPool,
    events: &[webhook_rows::fan_out::IncomingEvent],
    lease: Duration,
    claim_token: uuid::Uuid,
) -> Result<Vec<ClaimedDelivery>, sqlx::Error> {
    let events = webhook_rows::fan_out::distinct_events(events);
    let mut transaction = pool.begin().await?;
    let targets =
        webhook_rows::fan_out::targets(&mut *transaction, &events, Some(claim_token)).await?;
    let claimed: Vec<ClaimedDelivery> = targets
        .into_iter()
        .map(|target| {
            let event = events[usize::try_from(target.event_index).expect("index")];
            target.claimed(event, DeliveryId::new(), claim_token)
        })
        .collect();
    let rows: Vec<webhook_rows::fan_out::NewDelivery<'_>> = claimed
        .iter()
        .map(|delivery| webhook_rows::fan_out::NewDelivery {
            id: delivery.id,
            endpoint_id: delivery.endpoint_id,
            event: events
                .iter()
                .find(|event| event.event_id == delivery.event_id)
                .expect("its event"),
            start: webhook_rows::fan_out::Start::Claimed(claim_token),
        })
        .collect();
    let created = webhook_rows::fan_out::create_deliveries(
        &mut transaction,
        &rows,
        lease,
        Duration::from_secs(5 * 86_400),
    )
    .await?;
    transaction.commit().await?;
    // Rows found claimed under the same token keep their first ids.
    Ok(claimed
        .into_iter()
        .filter_map(|delivery| {
            let row = created.deliveries.iter().find(|row| {
                row.endpoint_id == delivery.endpoint_id && row.event_id == delivery.event_id
            })?;
            Some(ClaimedDelivery {
                id: row.id,
                ..delivery
            })
        })
        .collect())
}

/// Waits until a session of the test's database waits for a lock (`what` says which).
async fn waiting_for_a_lock(app: &TestApp, what: &str) {
    app.eventually(Duration::from_secs(10), what, || async {
        let waiting: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity
             WHERE datname = current_database() AND wait_event_type = 'Lock'",
        )
        .fetch_one(&app.db)
        .await
        .expect("activity");
        (waiting > 0).then_some(())
    })
    .await;
}

/// An outcome of `claim`'s attempt.
fn outcome(claim: &ClaimedDelivery, next: NextStep, status_code: i32) -> AttemptOutcome {
    AttemptOutcome {
        delivery_id: claim.id,
        endpoint_id: claim.endpoint_id,
        claim_token: claim.claim_token,
        attempt: claim.attempts + 1,
        attempted_at: chrono::Utc::now(),
        status_code: Some(status_code),
        latency_ms: 5,
        error: (status_code >= 300).then(|| format!("endpoint answered {status_code}")),
        response_excerpt: None,
        next,
        verdict: if status_code < 300 {
            EndpointVerdict::Healthy
        } else {
            EndpointVerdict::Failing
        },
    }
}

async fn record(app: &TestApp, outcomes: &[AttemptOutcome]) -> Vec<DeliveryId> {
    let mut transaction = app.db.begin().await.expect("transaction");
    let recorded = webhook_rows::outcomes::record_outcomes(
        &mut transaction,
        outcomes,
        Duration::from_secs(5 * 86_400),
    )
    .await
    .expect("record");
    transaction.commit().await.expect("commit");
    recorded.stale
}

/// Claims due deliveries with a lease of `lease`.
async fn claim(app: &TestApp, lease: Duration) -> Vec<ClaimedDelivery> {
    webhook_rows::fan_out::claim_due(&app.db, 10, lease, &[])
        .await
        .expect("claim")
}

/// (status, attempts, attempt rows as (number, status code)) of a delivery.
async fn delivery_state(app: &TestApp, id: DeliveryId) -> (String, i32, Vec<(i32, Option<i32>)>) {
    let (status, attempts): (String, i32) =
        sqlx::query_as("SELECT status, attempts FROM webhook_deliveries WHERE id = $1")
            .bind(id)
            .fetch_one(&app.db)
            .await
            .expect("delivery");
    let log = sqlx::query_as(
        "SELECT attempt, status_code FROM webhook_attempts WHERE delivery_id = $1 ORDER BY attempt",
    )
    .bind(id)
    .fetch_all(&app.db)
    .await
    .expect("attempts");
    (status, attempts, log)
}

#[tokio::test]
async fn a_stale_claim_cannot_overwrite_the_outcome_of_the_claim_that_took_it_over() {
    let app = TestApp::spawn_with(TestOptions {
        assign_worker: false,
        ..TestOptions::default()
    })
    .await;
    let org = app.create_org(Tier::Standard).await;
    let (webhook, _) = endpoint(&app, &org, "http://127.0.0.1:9/hooks/fenced", None).await;
    let ping = app
        .post(&org, &format!("/v1/webhooks/{webhook}/test"), &json!({}))
        .await;
    assert_eq!(ping.status, 202, "{:?}", ping.body);
    let id = DeliveryId::parse(ping.body["deliveryId"].as_str().expect("id")).expect("id");

    // Worker A claims it with a lease that ends at once; worker B takes it over.
    let first = claim(&app, Duration::from_millis(1)).await;
    assert_eq!(first.len(), 1);
    tokio::time::sleep(Duration::from_millis(20)).await;
    let second = claim(&app, Duration::from_secs(600)).await;
    assert_eq!(second.len(), 1);
    let (stale, current) = (&first[0], &second[0]);
    assert_eq!((stale.id, current.id), (id, id));
    assert_ne!(stale.claim_token, current.claim_token);
    assert!(
        claim(&app, Duration::from_secs(600)).await.is_empty(),
        "B's lease holds"
    );

    // A can no longer renew its lease; B can.
    let renewed = |claim: &ClaimedDelivery| (claim.id, claim.claim_token);
    assert!(
        webhook_rows::fan_out::renew_leases(&app.db, &[renewed(stale)], Duration::from_secs(600))
            .await
            .expect("renew")
            .is_empty()
    );
    assert_eq!(
        webhook_rows::fan_out::renew_leases(&app.db, &[renewed(current)], Duration::from_secs(600))
            .await
            .expect("renew"),
        [renewed(current)]
    );

    // B succeeds; A's late failure (or deferral) changes nothing, before or after B's success.
    assert_eq!(
        record(&app, &[outcome(stale, NextStep::Failed, 500)]).await,
        [id]
    );
    assert!(
        record(&app, &[outcome(current, NextStep::Succeeded, 200)])
            .await
            .is_empty()
    );
    let deferral = AttemptOutcome {
        next: NextStep::Deferred(chrono::Utc::now()),
        verdict: EndpointVerdict::Unchanged,
        ..outcome(stale, NextStep::Failed, 500)
    };
    let retry_later = outcome(
        stale,
        NextStep::RetryAt(chrono::Utc::now() + chrono::Duration::seconds(5)),
        503,
    );
    assert_eq!(record(&app, &[retry_later, deferral]).await, [id, id]);
    // B's outcome arriving twice is recorded once.
    assert_eq!(
        record(&app, &[outcome(current, NextStep::Succeeded, 200)]).await,
        [id]
    );
    assert_eq!(
        delivery_state(&app, id).await,
        ("succeeded".to_owned(), 1, vec![(1, Some(200))])
    );
    let endpoint_view = app.get(&org, &format!("/v1/webhooks/{webhook}")).await;
    assert_eq!(
        endpoint_view.body["failingSince"],
        Value::Null,
        "a stale failure does not count against the endpoint"
    );
    // A delivered event is not moved back, not even by a manual retry.
    let retried = app
        .post(
            &org,
            &format!("/v1/webhooks/deliveries/{id}/retry"),
            &json!({}),
        )
        .await;
    assert_eq!(retried.status, 409, "{:?}", retried.body);
    assert_eq!(retried.body["error"], json!("conflict"));
    assert!(claim(&app, Duration::from_millis(1)).await.is_empty());
    assert_eq!(delivery_state(&app, id).await.0, "succeeded");

    // The other order: a stale success arriving first does not count either.
    let ping = app
        .post(&org, &format!("/v1/webhooks/{webhook}/test"), &json!({}))
        .await;
    let id = DeliveryId::parse(ping.body["deliveryId"].as_str().expect("id")).expect("id");
    let first = claim(&app, Duration::from_millis(1)).await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    let second = claim(&app, Duration::from_secs(600)).await;
    assert_eq!(
        record(&app, &[outcome(&first[0], NextStep::Succeeded, 200)]).await,
        [id]
    );
    assert_eq!(delivery_state(&app, id).await.0, "delivering");
    assert!(
        record(&app, &[outcome(&second[0], NextStep::Failed, 500)])
            .await
            .is_empty()
    );
    assert_eq!(
        delivery_state(&app, id).await,
        ("failed".to_owned(), 1, vec![(1, Some(500))])
    );
}

/// Asserts that `received` holds `count` requests with as many distinct `webhook-id`s.
fn assert_each_event_once(received: &[flow_tests::receiver::Received], count: usize) {
    let mut ids: Vec<&str> = received
        .iter()
        .map(|request| request.header("webhook-id"))
        .collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(
        (received.len(), ids.len()),
        (count, count),
        "every event exactly once"
    );
}

/// Assigns a flow to `count` new users in one bulk request, each assignment sending a
/// `flow.assigned` event to an endpoint at `path` of the receiver (answering as `behaviour`), and
/// checks that every event arrived exactly once, still so `settle` after the last one, and that
/// every delivery succeeded at its first attempt.
async fn bulk_events_arrive_once(
    app: &TestApp,
    receiver: &Receiver,
    path: &str,
    behaviour: Behaviour,
    count: usize,
    settle: Duration,
) {
    let emails: Vec<String> = (0..count)
        .map(|i| format!("{path}{i}@example.com"))
        .collect();
    let refs: Vec<&str> = emails.iter().map(String::as_str).collect();
    let OneEndpoint {
        org, webhook, flow, ..
    } = one_endpoint(app, receiver, path, behaviour, &refs).await;
    let items = flow_tests::assign_items(&flow, &emails);
    let bulk = app.assign_bulk(&org, &items, &[]).await;
    assert_eq!(bulk.status, 200, "{:?}", bulk.body);
    assert_eq!(bulk.body["succeeded"], json!(count));

    receiver
        .wait_for_deliveries(path, count, Duration::from_secs(20))
        .await;
    tokio::time::sleep(settle).await;
    let received = receiver.received(path);
    assert_each_event_once(&received, count);
    let rows = deliveries_of(app, &webhook).await;
    assert_eq!(rows.len(), count);
    assert!(
        rows.iter().all(|row| *row == ("succeeded".to_owned(), 1)),
        "{rows:?}"
    );
}

#[tokio::test]
async fn a_queue_draining_slower_than_the_lease_is_not_sent_twice() {
    let mut app = app_with_relay().await;
    // Two workers, each sending one request at a time to an endpoint that takes 250 ms: 24
    // deliveries take about 3 s to drain, longer than the 2 s lease.
    let lease = Duration::from_secs(2);
    app.webhook_worker = Some(webhook_worker(&app, lease, 1));
    let _second_worker = webhook_worker(&app, lease, 1);
    app.wait_for_consumers(flow_common::amqp::QueueKind::Webhooks, 2)
        .await;
    let receiver = Receiver::start().await.expect("webhook receiver");
    // Past another lease: a delivery taken over by the other worker would have arrived again.
    let settle = lease + Duration::from_secs(1);
    bulk_events_arrive_once(&app, &receiver, "slow", Behaviour::Delay(250), 24, settle).await;
}

#[tokio::test]
async fn a_relay_message_of_more_events_than_a_transaction_takes_is_delivered_in_parts_once() {
    let mut app = app_with_relay().await;
    // The bulk request's 30 events leave the relay as one message (at most 32 events); the worker
    // writes at most 6 per transaction, so the message is fanned out in 5 parts before it is acked.
    app.webhook_worker = Some(app.start_webhook_worker_with(|config| config.batch_size = 6));
    app.wait_for_consumers(flow_common::amqp::QueueKind::Webhooks, 1)
        .await;
    let receiver = Receiver::start().await.expect("webhook receiver");
    let settle = Duration::from_secs(1);
    bulk_events_arrive_once(&app, &receiver, "parts", Behaviour::Succeed, 30, settle).await;
}

#[tokio::test]
async fn test_pings_and_manual_retries_beyond_the_limit_get_429() {
    let app = TestApp::spawn_with(TestOptions {
        assign_worker: false,
        ..TestOptions::default()
    })
    .await;
    let org = app.create_org(Tier::Standard).await;
    let (webhook, _) = endpoint(&app, &org, "http://127.0.0.1:9/hooks/limited", None).await;
    let ping_path = format!("/v1/webhooks/{webhook}/test");

    // 60 a minute, refilled smoothly: a burst gets about 60 through, then 429.
    let first = app.post(&org, &ping_path, &json!({})).await;
    assert_eq!(first.status, 202, "{:?}", first.body);
    assert_eq!(first.header("ratelimit-limit"), Some("60"));
    let delivery = first.body["deliveryId"].as_str().expect("id").to_owned();
    let retry_path = format!("/v1/webhooks/deliveries/{delivery}/retry");
    let mut accepted = 1;
    let limited = loop {
        // Alternate pings and retries: they share one allowance.
        let path = if accepted % 2 == 0 {
            &ping_path
        } else {
            &retry_path
        };
        let response = app.post(&org, path, &json!({})).await;
        if response.status != 202 {
            break response;
        }
        accepted += 1;
        assert!(accepted <= 120, "no limit after {accepted} requests");
    };
    assert!(accepted >= 60, "limited after {accepted}");
    assert_eq!(limited.status, 429, "{:?}", limited.body);
    assert_eq!(limited.body["error"], json!("rate_limit_exceeded"));
    assert!(
        limited.body["message"]
            .as_str()
            .expect("message")
            .contains("webhook_send")
    );
    assert!(limited.body["retry_after"].as_u64().expect("retry_after") >= 1);
    assert!(
        limited
            .header("retry-after")
            .and_then(|value| value.parse::<u64>().ok())
            .is_some_and(|seconds| seconds >= 1)
    );
    assert_eq!(limited.header("ratelimit-remaining"), Some("0"));
    for path in [&ping_path, &retry_path] {
        let response = app.post(&org, path, &json!({})).await;
        assert_eq!(response.status, 429, "{path}");
    }
    // The allowance is the organization's: another organization is not limited.
    let other = app.create_org(Tier::Standard).await;
    let (other_webhook, _) = endpoint(&app, &other, "http://127.0.0.1:9/hooks/other", None).await;
    let response = app
        .post(
            &other,
            &format!("/v1/webhooks/{other_webhook}/test"),
            &json!({}),
        )
        .await;
    assert_eq!(response.status, 202);
}

#[tokio::test]
async fn an_outcome_postgres_refuses_costs_only_itself_and_the_rest_of_its_batch_is_recorded() {
    let app = TestApp::spawn_with(TestOptions {
        assign_worker: false,
        ..TestOptions::default()
    })
    .await;
    let org = app.create_org(Tier::Standard).await;
    let (webhook, _) = endpoint(&app, &org, "http://127.0.0.1:9/hooks/batch", None).await;
    for _ in 0..3 {
        let ping = app
            .post(&org, &format!("/v1/webhooks/{webhook}/test"), &json!({}))
            .await;
        assert_eq!(ping.status, 202, "{:?}", ping.body);
    }
    let claimed = claim(&app, Duration::from_secs(600)).await;
    assert_eq!(claimed.len(), 3);
    // A time Postgres cannot store: nothing the sender produces today, standing for whatever
    // next makes one outcome unwritable.
    let poison = AttemptOutcome {
        attempted_at: chrono::DateTime::from_timestamp(-6_000_000_000_000, 0).expect("time"),
        ..outcome(&claimed[1], NextStep::Succeeded, 200)
    };
    let (outcomes, recorded) = tokio::sync::mpsc::unbounded_channel();
    for outcome in [
        outcome(&claimed[0], NextStep::Succeeded, 200),
        poison,
        outcome(&claimed[2], NextStep::Succeeded, 200),
    ] {
        outcomes.send(outcome).expect("recorder listening");
    }
    drop(outcomes);
    tokio::time::timeout(
        Duration::from_secs(30),
        flow_workers::webhook::dispatch::record_outcomes(
            app.db.clone(),
            recorded,
            Default::default(),
            Duration::from_secs(5 * 86_400),
        ),
    )
    .await
    .expect("the recorder finishes");
    for (index, expected) in [
        ("succeeded", 1, vec![(1, Some(200))]),
        ("delivering", 0, vec![]),
        ("succeeded", 1, vec![(1, Some(200))]),
    ]
    .into_iter()
    .enumerate()
    {
        let (status, attempts, log) = expected;
        assert_eq!(
            delivery_state(&app, claimed[index].id).await,
            (status.to_owned(), attempts, log),
            "delivery {index}"
        );
    }
}

#[tokio::test]
async fn a_fan_out_retried_after_a_lost_commit_answer_gets_its_own_deliveries_back() {
    let app = TestApp::spawn_with(TestOptions {
        assign_worker: false,
        ..TestOptions::default()
    })
    .await;
    let org = app.create_org(Tier::Standard).await;
    endpoint(&app, &org, "http://127.0.0.1:9/hooks/a", None).await;
    endpoint(&app, &org, "http://127.0.0.1:9/hooks/b", None).await;
    let event = assigned_event(org.id);
    let fan_out = |token: uuid::Uuid| {
        let pool = app.db.clone();
        let event = event.clone();
        async move {
            fan_out_committed(
                &pool,
                &[event.clone(), event],
                Duration::from_secs(600),
                token,
            )
            .await
            .expect("fan-out")
        }
    };
    // The first try committed, but its answer never reached the worker.
    let token = uuid::Uuid::new_v4();
    let first = fan_out(token).await;
    assert_eq!(
        first.len(),
        2,
        "one delivery per endpoint, the repeated event once"
    );
    // Its retry, under the same token, gets the same deliveries back to send.
    let mut retried: Vec<_> = fan_out(token).await.iter().map(|d| d.id).collect();
    let mut original: Vec<_> = first.iter().map(|d| d.id).collect();
    retried.sort();
    original.sort();
    assert_eq!(retried, original);
    // A redelivery of the event to another worker creates and claims nothing.
    assert!(fan_out(uuid::Uuid::new_v4()).await.is_empty());
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM webhook_deliveries")
        .fetch_one(&app.db)
        .await
        .unwrap();
    assert_eq!(rows, 2);
}

/// When the delivery to `endpoint` of each event was written, and when its first attempt was
/// sent, by the first attempt.
async fn written_and_sent(
    app: &TestApp,
    endpoint: &str,
) -> Vec<(chrono::DateTime<chrono::Utc>, chrono::DateTime<chrono::Utc>)> {
    let id = WebhookEndpointId::parse(endpoint).expect("endpoint id");
    sqlx::query_as(
        "SELECT d.created_at, a.attempted_at FROM webhook_deliveries d
         JOIN webhook_attempts a ON a.delivery_id = d.id AND a.attempt = 1
         WHERE d.endpoint_id = $1 ORDER BY a.attempted_at",
    )
    .bind(id)
    .fetch_all(&app.db)
    .await
    .expect("deliveries")
}

/// Assigns `flow` to `email` in a bulk request of one item, so its event travels in the bulk
/// lane (whose webhook batches make first attempts inline; the interactive lane's write their
/// deliveries first), and waits until the assignment is persisted.
async fn bulk_assign_persisted(app: &TestApp, org: &TestOrg, flow: &str, email: &str) {
    let response = app
        .assign_bulk(
            org,
            &flow_tests::assign_items(flow, &[email.to_owned()]),
            &[],
        )
        .await;
    assert_eq!(response.body["succeeded"], json!(1), "{:?}", response.body);
    let id = response.body["results"][0]["result"]["assignmentId"]
        .as_str()
        .expect("assignmentId")
        .to_owned();
    app.eventually(
        Duration::from_secs(10),
        "the assignment to be persisted",
        || async {
            (app.get(org, &format!("/v1/assignments/{id}")).await.status == 200).then_some(())
        },
    )
    .await;
}

/// A webhook-worker whose batches wait `inline_wait` for first attempts made before their
/// deliveries are written.
fn inline_worker(app: &TestApp, inline_wait: Duration) -> WorkerHandle {
    app.start_webhook_worker_with(|config| config.inline_wait = inline_wait)
}

#[tokio::test]
async fn a_first_attempt_is_sent_before_its_delivery_is_written_then_written_once_with_its_outcome()
{
    let mut app = app_with_relay().await;
    app.webhook_worker = Some(inline_worker(&app, Duration::from_secs(4)));
    app.wait_for_consumers(flow_common::amqp::QueueKind::Webhooks, 1)
        .await;
    let receiver = Receiver::start().await.expect("webhook receiver");
    let prompt = one_endpoint(
        &app,
        &receiver,
        "prompt",
        Behaviour::Gated(b"ok"),
        &["ada@example.com"],
    )
    .await;
    bulk_assign_persisted(&app, &prompt.org, &prompt.flow, "ada@example.com").await;
    let requests = receiver
        .wait_for_requests("prompt", 1, Duration::from_secs(10))
        .await;
    // The request is out and its answer held back: nothing is written yet.
    assert!(deliveries_of(&app, &prompt.webhook).await.is_empty());
    receiver.open_gate();

    wait_until_succeeded_once(&app, std::slice::from_ref(&prompt.webhook)).await;
    let [(written, sent)] = written_and_sent(&app, &prompt.webhook).await[..] else {
        panic!("one delivery with its first attempt");
    };
    assert!(sent < written, "sent at {sent}, written at {written}");
    let id: DeliveryId =
        sqlx::query_scalar("SELECT id FROM webhook_deliveries WHERE endpoint_id = $1")
            .bind(WebhookEndpointId::parse(&prompt.webhook).expect("id"))
            .fetch_one(&app.db)
            .await
            .expect("delivery");
    assert_eq!(
        delivery_state(&app, id).await,
        ("succeeded".to_owned(), 1, vec![(1, Some(200))])
    );
    assert!(requests[0].verifies_with(&prompt.secret));
    assert_eq!(receiver.received("prompt").len(), 1);
}

#[tokio::test]
async fn an_attempt_outlasting_the_inline_wait_is_written_claimed_and_its_endpoint_gets_deliveries_written_first()
 {
    let mut app = app_with_relay().await;
    app.webhook_worker = Some(inline_worker(&app, Duration::from_millis(300)));
    app.wait_for_consumers(flow_common::amqp::QueueKind::Webhooks, 1)
        .await;
    let receiver = Receiver::start().await.expect("webhook receiver");
    let slow = one_endpoint(
        &app,
        &receiver,
        "slow",
        Behaviour::Gated(b"ok"),
        &["bo@example.com", "cy@example.com"],
    )
    .await;
    bulk_assign_persisted(&app, &slow.org, &slow.flow, "bo@example.com").await;
    receiver
        .wait_for_requests("slow", 1, Duration::from_secs(10))
        .await;
    // The wait is over while the answer is still held: the delivery is written claimed.
    app.eventually(
        Duration::from_secs(10),
        "the delivery to be written claimed",
        || async {
            (deliveries_of(&app, &slow.webhook).await == [("delivering".to_owned(), 0)])
                .then_some(())
        },
    )
    .await;
    receiver.open_gate();
    wait_until_succeeded_once(&app, std::slice::from_ref(&slow.webhook)).await;

    // The endpoint answered too late for the inline path: its next delivery is written first.
    bulk_assign_persisted(&app, &slow.org, &slow.flow, "cy@example.com").await;
    app.eventually(
        Duration::from_secs(10),
        "both deliveries to succeed",
        || async {
            (deliveries_of(&app, &slow.webhook)
                .await
                .iter()
                .filter(|delivery| **delivery == ("succeeded".to_owned(), 1))
                .count()
                == 2)
                .then_some(())
        },
    )
    .await;
    let [(first_written, first_sent), (then_written, then_sent)] =
        written_and_sent(&app, &slow.webhook).await[..]
    else {
        panic!("two deliveries with their first attempts");
    };
    assert!(first_sent < first_written);
    assert!(then_written < then_sent);
    assert_eq!(receiver.received("slow").len(), 2);
}

#[tokio::test]
async fn a_webhook_worker_killed_after_an_inline_attempt_loses_nothing_and_the_event_goes_out_again_with_its_id()
 {
    let mut app = app_with_relay().await;
    let first = inline_worker(&app, Duration::from_secs(4));
    app.wait_for_consumers(flow_common::amqp::QueueKind::Webhooks, 1)
        .await;
    let receiver = Receiver::start().await.expect("webhook receiver");
    let crash = one_endpoint(
        &app,
        &receiver,
        "crash",
        Behaviour::Gated(b"ok"),
        &["dee@example.com"],
    )
    .await;
    bulk_assign_persisted(&app, &crash.org, &crash.flow, "dee@example.com").await;
    receiver
        .wait_for_requests("crash", 1, Duration::from_secs(10))
        .await;
    // Killed after sending, before writing anything or acking the event.
    first.kill();
    assert!(deliveries_of(&app, &crash.webhook).await.is_empty());
    receiver.open_gate();
    app.webhook_worker = Some(inline_worker(&app, Duration::from_secs(4)));

    wait_until_succeeded_once(&app, std::slice::from_ref(&crash.webhook)).await;
    let requests = receiver.received("crash");
    assert_eq!(
        requests.len(),
        2,
        "the event goes out again after the crash"
    );
    assert_eq!(
        requests[0].header("webhook-id"),
        requests[1].header("webhook-id")
    );
    assert!(
        requests
            .iter()
            .all(|request| request.verifies_with(&crash.secret))
    );
}

#[tokio::test]
async fn an_interactive_events_delivery_is_written_before_its_first_attempt_and_waits_for_no_endpoint()
 {
    let mut app = app_with_relay().await;
    // However long the bulk lane would wait for inline attempts, the interactive lane does not.
    app.webhook_worker = Some(inline_worker(&app, Duration::from_secs(4)));
    app.wait_for_consumers(flow_common::amqp::QueueKind::InteractiveWebhooks, 1)
        .await;
    let receiver = Receiver::start().await.expect("webhook receiver");
    let held = one_endpoint(
        &app,
        &receiver,
        "held",
        Behaviour::Gated(b"ok"),
        &["eve@example.com"],
    )
    .await;
    let other = one_endpoint(
        &app,
        &receiver,
        "other",
        Behaviour::Succeed,
        &["fay@example.com"],
    )
    .await;
    app.assign_persisted(&held.org, &held.flow, "eve@example.com", json!({}))
        .await;
    receiver
        .wait_for_requests("held", 1, Duration::from_secs(10))
        .await;
    // The request is out and its answer held back: the delivery is already written, claimed.
    assert_eq!(
        deliveries_of(&app, &held.webhook).await,
        [("delivering".to_owned(), 0)]
    );
    // Another organization's single assign is delivered and recorded meanwhile.
    app.assign_persisted(&other.org, &other.flow, "fay@example.com", json!({}))
        .await;
    wait_until_succeeded_once(&app, std::slice::from_ref(&other.webhook)).await;
    assert_eq!(
        deliveries_of(&app, &held.webhook).await,
        [("delivering".to_owned(), 0)],
        "the held endpoint still has not answered"
    );
    receiver.open_gate();
    wait_until_succeeded_once(&app, std::slice::from_ref(&held.webhook)).await;
    assert_eq!(receiver.received("held").len(), 1);
}

/// An endpoint's deliveries arrive in time order; the index that lists them newest first (keyed
/// on those growing values) fills its pages as they come, and the listing reads it backwards
/// without sorting. Declared descending, the index split every full page in half and stayed at
/// about 75 entries a page here (migration 0114).
#[tokio::test]
async fn the_listing_index_of_an_endpoints_deliveries_stays_dense_as_deliveries_arrive() {
    let app = TestApp::spawn_with(TestOptions {
        assign_worker: false,
        ..TestOptions::default()
    })
    .await;
    let org = app.create_org(Tier::Standard).await;
    let (endpoint_id, _) = endpoint(&app, &org, "http://127.0.0.1:9/hooks/dense", None).await;
    let endpoint_id = WebhookEndpointId::parse(&endpoint_id).expect("id");
    let (batches, per_batch) = (40, 250);
    let mut newest = None;
    for _ in 0..batches {
        let events: Vec<_> = (0..per_batch).map(|_| assigned_event(org.id)).collect();
        let claimed = fan_out_committed(
            &app.db,
            &events,
            Duration::from_secs(60),
            uuid::Uuid::new_v4(),
        )
        .await
        .expect("fan-out");
        assert_eq!(claimed.len(), per_batch);
        newest = claimed.iter().map(|delivery| delivery.id).max();
    }

    let pages: i64 = sqlx::query_scalar(
        "SELECT pg_relation_size('webhook_deliveries_endpoint_idx') / current_setting('block_size')::bigint",
    )
    .fetch_one(&app.db)
    .await
    .expect("index size");
    let per_page = (batches * per_batch) as i64 / pages;
    assert!(
        per_page >= 110,
        "{per_page} entries per index page ({pages} pages): the index splits its pages half empty"
    );

    let page = webhook_rows::log::search_deliveries(
        &app.db,
        org.id,
        endpoint_id,
        &Default::default(),
        None,
        50,
    )
    .await
    .expect("listing");
    assert_eq!(page.first().map(|delivery| delivery.id), newest);
    assert!(
        page.windows(2)
            .all(|pair| (pair[0].created_at, pair[0].id) > (pair[1].created_at, pair[1].id)),
        "newest first"
    );
    sqlx::query("ANALYZE webhook_deliveries")
        .execute(&app.db)
        .await
        .expect("analyze");
    let plan: Vec<String> = sqlx::query_scalar(
        "EXPLAIN SELECT d.id FROM webhook_deliveries d
         WHERE d.endpoint_id = $1 AND d.org_id = $2
         ORDER BY d.created_at DESC, d.id DESC LIMIT 50",
    )
    .bind(endpoint_id)
    .bind(org.id)
    .fetch_all(&app.db)
    .await
    .expect("plan");
    let plan = plan.join("\n");
    assert!(
        plan.contains("Index Scan Backward using webhook_deliveries_endpoint_idx")
            && !plan.contains("Sort"),
        "{plan}"
    );
}

#[tokio::test]
async fn a_backlog_of_event_messages_waits_in_the_broker_not_in_the_webhook_worker() {
    use flow_common::amqp::QueueKind;
    let app = TestApp::spawn().await;
    let receiver = Receiver::start().await.expect("webhook receiver");
    let lane_prefetch =
        flow_common::config::from_env::<flow_workers::webhook::WebhookWorkerConfig>().prefetch;
    // The prefetch counts messages; with the relay's largest messages it bounds the events a
    // worker holds in a lane (the bulk lane's window is shared among its shards' queues), and a
    // bulk backlog waits in the broker beyond that.
    let most_held = usize::from(lane_prefetch) * flow_domain::events::MAX_EVENTS_PER_MESSAGE;
    let prefetch = usize::from(flow_workers::webhook::bulk_prefetch(lane_prefetch));
    assert!(
        most_held <= 8_192,
        "a webhook-worker may hold {most_held} events (WEBHOOK_PREFETCH {prefetch} messages)"
    );
    // One message per event, twenty more than the worker's prefetch of a bulk queue (the default).
    let count = prefetch + 20;
    let (org, flow, emails) = app.org_with_users(count).await;
    let shard: i64 = sqlx::query_scalar("SELECT bulk_lane FROM organizations WHERE id = $1")
        .bind(org.id)
        .fetch_one(&app.db)
        .await
        .expect("bulk lane");
    let queue = QueueKind::webhooks_for(shard);
    receiver.set("held", Behaviour::Gated(b"ok"));
    let (webhook, _) = endpoint(&app, &org, &receiver.url("held"), None).await;
    let bulk = app
        .assign_bulk(&org, &flow_tests::assign_items(&flow, &emails), &[])
        .await;
    assert_eq!(bulk.status, 200, "{:?}", bulk.body);
    app.eventually(
        Duration::from_secs(20),
        "every assignment persisted",
        || async { (app.assignment_count().await == count as i64).then_some(()) },
    )
    .await;
    // A relay publishing one event a message: the webhook-worker's queue gets a message per event.
    let _relay = {
        let mut config: flow_workers::relay::RelayConfig = flow_common::config::from_env();
        config.core = app.core.clone();
        config.batch_size = 1;
        WorkerHandle::spawn(move |shutdown| flow_workers::runtime::run(config, shutdown))
    };
    let queued = |ready: usize| {
        let app = &app;
        async move {
            app.queue_state(queue)
                .await
                .is_some_and(|(found, _)| found as usize == ready)
                .then_some(())
        }
    };
    app.eventually(
        Duration::from_secs(20),
        "one message per event queued",
        || queued(count),
    )
    .await;

    // The endpoint answers nothing until the gate opens, so the worker acks nothing meanwhile: it
    // holds its prefetch and the rest of the backlog stays ready in the broker.
    let waiting = count.saturating_sub(prefetch);
    let _worker = app.start_webhook_worker_with(|config| {
        config.timeout = Duration::from_secs(20);
        config.inline_wait = Duration::from_secs(20);
    });
    app.eventually(
        Duration::from_secs(20),
        "the worker holding its prefetch",
        || queued(waiting),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let state = app.queue_state(queue).await;
    assert!(
        waiting > 0 && state.is_some_and(|(ready, _)| ready as usize == waiting),
        "{waiting} of {count} event messages wait in the broker while the worker holds \
         {prefetch} (WEBHOOK_PREFETCH shared by the bulk queues); the queue: {state:?} (ready, consumers)"
    );

    receiver.open_gate();
    receiver
        .wait_for_deliveries("held", count, Duration::from_secs(30))
        .await;
    app.eventually(Duration::from_secs(20), "the queue drained", || queued(0))
        .await;
    app.eventually(
        Duration::from_secs(20),
        "every delivery recorded",
        || async {
            let rows = deliveries_of(&app, &webhook).await;
            (rows.len() == count && rows.iter().all(|row| *row == ("succeeded".to_owned(), 1)))
                .then_some(())
        },
    )
    .await;
    let received = receiver.received("held");
    assert_each_event_once(&received, count);
}
