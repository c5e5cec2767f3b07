//! Signed event sources (issue 38, docs/events.md "Signed sources"): the sources' API (the
//! secret shown once, rotation with its overlap, limits, tenant isolation) and the deliveries to
//! `/v1/events/inbound/{sourceId}` without an API key: a Standard Webhooks delivery assigns
//! through a trigger once, every failure to authenticate is the same 401 and records nothing,
//! and Okta's verification challenge and event hooks work as Okta sends them.

use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use flow_common::db::orgs::Tier;
use flow_tests::{TestApp, TestOptions, TestOrg, TestResponse};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// HMAC-SHA256 (RFC 2104) written out here, so the service's signature check is tested against
/// a signer that shares no code with it.
fn hmac_sha256(key: &[u8], message: &[u8]) -> Vec<u8> {
    let mut block = [0u8; 64];
    if key.len() > 64 {
        block[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        block[..key.len()].copy_from_slice(key);
    }
    let pad = |byte: u8| block.iter().map(|k| k ^ byte).collect::<Vec<u8>>();
    let inner = Sha256::new()
        .chain_update(pad(0x36))
        .chain_update(message)
        .finalize();
    Sha256::new()
        .chain_update(pad(0x5c))
        .chain_update(inner)
        .finalize()
        .to_vec()
}

/// The `webhook-signature` a Standard Webhooks sender computes: `v1,` and the base64 HMAC of
/// `{id}.{timestamp}.{body}` under the base64-decoded part of the secret after `whsec_`.
fn signature(secret: &str, id: &str, timestamp: i64, body: &[u8]) -> String {
    let key = BASE64
        .decode(secret.strip_prefix("whsec_").expect("whsec_ secret"))
        .expect("base64 secret");
    let mut message = format!("{id}.{timestamp}.").into_bytes();
    message.extend_from_slice(body);
    format!("v1,{}", BASE64.encode(hmac_sha256(&key, &message)))
}

#[test]
fn the_test_signer_matches_the_standard_webhooks_test_vector() {
    // The vector tests/it/webhooks.rs checks the service's own signer against.
    assert_eq!(
        signature(
            "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD",
            "msg_27UH4WbU6Z5A5EzD8u03UvzRbpk",
            1_649_367_553,
            br#"{"email":"test@example.com","username":"test_user"}"#,
        ),
        "v1,tZ1I4/hDygAJgO5TYxiSd6Sd0kDW6hPenDe+bTa3Kkw="
    );
}

async fn api_only() -> TestApp {
    TestApp::spawn_with(TestOptions {
        assign_worker: false,
        ..TestOptions::default()
    })
    .await
}

/// A created source: its id, CloudEvents source and secret.
struct Source {
    id: String,
    source: String,
    secret: String,
}

/// Creates a source (insisting on a 201).
async fn create_source(app: &TestApp, org: &TestOrg, body: Value) -> Source {
    let response = app.post(org, "/v1/event-sources", &body).await;
    assert_eq!(response.status, 201, "{:?}", response.body);
    Source {
        id: response.body["sourceId"].as_str().expect("id").to_owned(),
        source: response.body["source"].as_str().expect("source").to_owned(),
        secret: response.body["secret"].as_str().expect("secret").to_owned(),
    }
}

/// A Standard Webhooks source reading the type at `/event`.
fn hr_source() -> Value {
    json!({"name": "HR system", "kind": "standard_webhooks", "typePointer": "/event"})
}

/// Posts `body` to the source's inbound address with `headers` and no API key.
async fn deliver(
    app: &TestApp,
    source_id: &str,
    body: &[u8],
    headers: &[(&str, String)],
) -> TestResponse {
    let mut request = app
        .client
        .post(format!("{}/v1/events/inbound/{source_id}", app.base_url))
        .header("content-type", "application/json")
        .body(body.to_vec());
    for (name, value) in headers {
        request = request.header(*name, value);
    }
    let response = request.send().await.expect("request sent");
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let text = response.text().await.unwrap_or_default();
    TestResponse {
        status,
        headers,
        body: serde_json::from_str(&text).unwrap_or(Value::Null),
    }
}

/// Headers of a delivery: (name, value).
type Headers = Vec<(&'static str, String)>;

/// The Standard Webhooks headers of a delivery signed with `secret` at `timestamp`.
fn signed(secret: &str, id: &str, timestamp: i64, body: &[u8]) -> Headers {
    vec![
        ("webhook-id", id.to_owned()),
        ("webhook-timestamp", timestamp.to_string()),
        ("webhook-signature", signature(secret, id, timestamp, body)),
    ]
}

fn now() -> i64 {
    chrono::Utc::now().timestamp()
}

/// Posts `body` to the source's inbound address, signed with `secret` as the message `id` now.
async fn deliver_signed(
    app: &TestApp,
    source_id: &str,
    secret: &str,
    id: &str,
    body: &[u8],
) -> TestResponse {
    let headers = signed(secret, id, now(), body);
    deliver(app, source_id, body, &headers).await
}

/// Posts `body` to the source's inbound address with `secret` as its `Authorization`, as Okta
/// sends it.
async fn deliver_authorized(
    app: &TestApp,
    source_id: &str,
    secret: &str,
    body: &[u8],
) -> TestResponse {
    deliver(
        app,
        source_id,
        body,
        &[("authorization", secret.to_owned())],
    )
    .await
}

/// A hire as an HR system might send it.
fn hire(email: &str) -> Vec<u8> {
    json!({"event": "employee.hired", "employee": {"email": email}})
        .to_string()
        .into_bytes()
}

/// A trigger assigning `flow` on `employee.hired` from `source`.
fn on_hire(flow: &str, source: &str) -> Value {
    json!({
        "name": "Hires from HR",
        "match": {"type": "employee.hired", "source": source},
        "userEmailPointer": "/data/employee/email",
        "action": "assign",
        "flowId": flow,
    })
}

/// An organization with ada@example.com, the flow "Onboarding" and an HR source whose hires a
/// trigger assigns the flow on (insisting on a 201): the organization and the source.
async fn hiring_from_hr(app: &TestApp) -> (TestOrg, Source) {
    let org = app.create_org(Tier::Standard).await;
    app.create_users(&org, &["ada@example.com"]).await;
    let flow = app.create_flow(&org, "Onboarding", &[30]).await;
    let source = create_source(app, &org, hr_source()).await;
    let response = app
        .post(&org, "/v1/event-triggers", &on_hire(&flow, &source.source))
        .await;
    assert_eq!(response.status, 201, "{:?}", response.body);
    (org, source)
}

async fn count(app: &TestApp, sql: &str) -> i64 {
    sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_owned()))
        .fetch_one(&app.db)
        .await
        .expect("count")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signed_delivery_assigns_through_a_trigger_once() {
    let app = TestApp::spawn().await;
    let (org, source) = hiring_from_hr(&app).await;
    assert_eq!(source.source, format!("flow:event-sources/{}", source.id));

    let body = hire("ada@example.com");
    let response = deliver_signed(&app, &source.id, &source.secret, "msg_hire_1", &body).await;
    assert_eq!(response.status, 202, "{:?}", response.body);
    let result = &response.body["results"][0];
    assert_eq!(result["status"], "accepted", "{result}");
    assert_eq!(result["id"], "msg_hire_1");
    assert_eq!(result["source"], json!(source.source));
    let id = result["assignmentIds"][0].as_str().expect("assignment id");
    let path = format!("/v1/assignments/{id}");
    let assignment = app
        .eventually(Duration::from_secs(15), "the assignment", || async {
            let response = app.get(&org, &path).await;
            (response.status == 200).then_some(response.body)
        })
        .await;
    assert_eq!(assignment["assigneeEmail"], "ada@example.com");
    assert_eq!(assignment["source"]["event"]["id"], "msg_hire_1");
    assert_eq!(assignment["source"]["event"]["type"], "employee.hired");

    // The same delivery again (a sender's retry): a duplicate, nothing acts twice.
    let again = deliver_signed(&app, &source.id, &source.secret, "msg_hire_1", &body).await;
    assert_eq!(again.status, 202, "{:?}", again.body);
    assert_eq!(again.body["results"][0]["status"], "duplicate");
    assert_eq!(again.body["results"][0]["assignmentIds"], json!([id]));
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(app.assignment_count().await, 1);
    // The audit trail names the source as the actor of what its event did.
    let actor: (String, String) = sqlx::query_as(
        "SELECT actor_kind, actor FROM audit_events WHERE action = 'event_trigger.assigned'",
    )
    .fetch_one(&app.db)
    .await
    .expect("audit row");
    assert_eq!(
        actor,
        ("event_source".into(), format!("event source {}", source.id))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsigned_wrong_tampered_stale_and_unknown_deliveries_are_the_same_401_and_record_nothing()
{
    let app = api_only().await;
    let (org, source) = hiring_from_hr(&app).await;
    let other = create_source(
        &app,
        &org,
        json!({"name": "Other", "kind": "standard_webhooks", "type": "x"}),
    )
    .await;
    let body = hire("ada@example.com");
    let tampered = hire("eve@example.com");
    let good = signed(&source.secret, "msg_1", now(), &body);
    let cases: Vec<(&str, String, Vec<u8>, Headers)> = vec![
        ("unsigned", source.id.clone(), body.clone(), vec![]),
        (
            "no signature",
            source.id.clone(),
            body.clone(),
            good[..2].to_vec(),
        ),
        (
            "another source's secret",
            source.id.clone(),
            body.clone(),
            signed(&other.secret, "msg_1", now(), &body),
        ),
        (
            "a tampered body",
            source.id.clone(),
            tampered.clone(),
            good.clone(),
        ),
        (
            "a timestamp 6 minutes old",
            source.id.clone(),
            body.clone(),
            signed(&source.secret, "msg_1", now() - 360, &body),
        ),
        (
            "a timestamp 6 minutes ahead",
            source.id.clone(),
            body.clone(),
            signed(&source.secret, "msg_1", now() + 360, &body),
        ),
        (
            "another signature version",
            source.id.clone(),
            body.clone(),
            vec![
                good[0].clone(),
                good[1].clone(),
                ("webhook-signature", good[2].1.replacen("v1,", "v2,", 1)),
            ],
        ),
        (
            "an unknown source",
            "evs_0193a1b2c3d47e8f9a0b1c2d3e4f5a81".into(),
            body.clone(),
            good.clone(),
        ),
        ("not a source id", "nope".into(), body.clone(), good.clone()),
        (
            "the Okta way on a Standard Webhooks source",
            source.id.clone(),
            body.clone(),
            vec![("authorization", source.secret.clone())],
        ),
    ];
    let mut message = None;
    for (case, id, body, headers) in cases {
        let response = deliver(&app, &id, &body, &headers).await;
        assert_eq!(response.status, 401, "{case}: {:?}", response.body);
        assert_eq!(response.body["error"], "unauthorized", "{case}");
        // One answer for all: nobody learns which sources exist.
        let text = response.body["message"].clone();
        assert_eq!(message.get_or_insert(text.clone()), &text, "{case}");
    }
    assert_eq!(count(&app, "SELECT count(*) FROM inbound_events").await, 0);
    assert_eq!(
        count(&app, "SELECT count(*) FROM inbound_event_actions").await,
        0
    );
    // The body limit holds before anything is read.
    let big = vec![b' '; 1024 * 1024 + 1];
    let response = deliver(&app, &source.id, &big, &good).await;
    assert_eq!(response.status, 413, "{:?}", response.body);
    // Signed but not JSON: 400, nothing recorded.
    let text = b"not json".to_vec();
    let response = deliver_signed(&app, &source.id, &source.secret, "msg_2", &text).await;
    assert_eq!(response.status, 400, "{:?}", response.body);
    // Signed, the type missing at the pointer: answered invalid, nothing recorded.
    let untyped = br#"{"employee": {"email": "ada@example.com"}}"#.to_vec();
    let response = deliver_signed(&app, &source.id, &source.secret, "msg_3", &untyped).await;
    assert_eq!(response.status, 202, "{:?}", response.body);
    assert_eq!(response.body["results"][0]["status"], "invalid");
    assert!(
        response.body["results"][0]["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("no event type at /event"),
        "{:?}",
        response.body
    );
    assert_eq!(count(&app, "SELECT count(*) FROM inbound_events").await, 0);
}

/// The status of a signed delivery to `source_id` under `secret`.
async fn accepted(app: &TestApp, source_id: &str, secret: &str, id: &str) -> u16 {
    let body = br#"{"employee": "ada@example.com"}"#;
    deliver_signed(app, source_id, secret, id, body)
        .await
        .status
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_secret_is_shown_once_and_a_rotation_keeps_the_previous_one_for_a_day() {
    let app = api_only().await;
    let org = app.create_org(Tier::Standard).await;
    let first = create_source(
        &app,
        &org,
        json!({"name": "HR", "kind": "standard_webhooks", "type": "employee.hired",
               "source": "https://hr.example.com"}),
    )
    .await;
    assert!(first.secret.starts_with("whsec_"), "{}", first.secret);
    assert_eq!(first.source, "https://hr.example.com");
    let read = app
        .get(&org, &format!("/v1/event-sources/{}", first.id))
        .await;
    assert_eq!(read.status, 200);
    assert_eq!(read.body["type"], "employee.hired");
    assert_eq!(
        read.body["inboundPath"],
        json!(format!("/v1/events/inbound/{}", first.id))
    );
    let list = app.get(&org, "/v1/event-sources").await;
    assert_eq!(list.body["data"].as_array().map(Vec::len), Some(1));
    for shown in [&read.body, &list.body] {
        let text = shown.to_string();
        assert!(!text.contains("secret\""), "{text}");
        assert!(!text.contains(&first.secret[6..]), "{text}");
    }
    // At rest it is sealed, not the secret.
    let stored: String = sqlx::query_scalar("SELECT secret FROM event_sources")
        .fetch_one(&app.db)
        .await
        .expect("stored");
    assert!(stored.starts_with("enc:v2:"), "{stored}");

    let rotated = app
        .post(
            &org,
            &format!("/v1/event-sources/{}/rotate-secret", first.id),
            &json!({}),
        )
        .await;
    assert_eq!(rotated.status, 200, "{:?}", rotated.body);
    let second = rotated.body["secret"].as_str().expect("secret").to_owned();
    assert_ne!(second, first.secret);
    let until = rotated.body["previousSecretExpiresAt"]
        .as_str()
        .expect("overlap");
    let until = chrono::DateTime::parse_from_rfc3339(until).expect("timestamp");
    let hours = (until.with_timezone(&chrono::Utc) - chrono::Utc::now()).num_minutes();
    assert!((23 * 60..=24 * 60).contains(&hours), "{hours} minutes");
    assert_eq!(accepted(&app, &first.id, &second, "m1").await, 202);
    assert_eq!(accepted(&app, &first.id, &first.secret, "m2").await, 202);
    // A second rotation: the newest two are accepted, the first no longer.
    let again = app
        .post(
            &org,
            &format!("/v1/event-sources/{}/rotate-secret", first.id),
            &json!({}),
        )
        .await;
    let third = again.body["secret"].as_str().expect("secret").to_owned();
    assert_eq!(accepted(&app, &first.id, &third, "m3").await, 202);
    assert_eq!(accepted(&app, &first.id, &second, "m4").await, 202);
    assert_eq!(accepted(&app, &first.id, &first.secret, "m5").await, 401);
    // Past the overlap, the previous secret is refused too.
    let fourth = app
        .post(
            &org,
            &format!("/v1/event-sources/{}/rotate-secret", first.id),
            &json!({}),
        )
        .await;
    let fourth = fourth.body["secret"].as_str().expect("secret").to_owned();
    sqlx::query(
        "UPDATE event_sources SET previous_secret_expires_at = now() - interval '1 second'",
    )
    .execute(&app.db)
    .await
    .expect("expire the overlap");
    assert_eq!(accepted(&app, &first.id, &third, "m6").await, 401);
    assert_eq!(accepted(&app, &first.id, &fourth, "m7").await, 202);

    let audited = count(
        &app,
        "SELECT count(*) FROM audit_events WHERE action IN ('event_source.created', \
         'event_source.secret_rotated')",
    )
    .await;
    assert_eq!(audited, 4);
    // Deleted: its deliveries are refused.
    let deleted = app
        .request(
            reqwest::Method::DELETE,
            &format!("/v1/event-sources/{}", first.id),
            Some(&org.key),
            None,
            &[],
        )
        .await;
    assert_eq!(deleted.status, 204);
    assert_eq!(
        app.get(&org, &format!("/v1/event-sources/{}", first.id))
            .await
            .status,
        404
    );
    assert_eq!(
        count(
            &app,
            "SELECT count(*) FROM audit_events WHERE action = 'event_source.deleted'"
        )
        .await,
        1
    );
}

/// Okta's verification `GET` of the source's address: its status and body.
async fn verify(
    app: &TestApp,
    source: &str,
    authorization: Option<&str>,
    challenge: Option<&str>,
) -> (u16, Value) {
    let mut request = app
        .client
        .get(format!("{}/v1/events/inbound/{source}", app.base_url));
    if let Some(authorization) = authorization {
        request = request.header("authorization", authorization);
    }
    if let Some(challenge) = challenge {
        request = request.header("x-okta-verification-challenge", challenge);
    }
    let response = request.send().await.expect("sent");
    let status = response.status().as_u16();
    (
        status,
        response.json::<Value>().await.unwrap_or(Value::Null),
    )
}

/// An Okta event hook delivery of `events`.
fn okta_delivery(events: Value) -> Vec<u8> {
    json!({
        "eventType": "com.okta.event_hook",
        "eventTypeVersion": "1.0",
        "cloudEventsVersion": "0.1",
        "source": "https://example.okta.com/api/v1/eventHooks/who8tmxhwtEvq5uNk4x7",
        "eventId": "b5a188b9-5ece-4636-b041-482ffda96311",
        "eventTime": "2026-11-05T10:00:00.000Z",
        "contentType": "application/json",
        "data": {"events": events},
    })
    .to_string()
    .into_bytes()
}

fn okta_event(uuid: &str, event_type: &str, email: &str) -> Value {
    json!({
        "uuid": uuid,
        "published": "2026-11-05T09:59:58.000Z",
        "eventType": event_type,
        "displayMessage": "Create Okta user",
        "target": [{"id": "00u1abcd2EFGH3ijk4l5", "type": "User", "alternateId": email}],
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn okta_verifies_the_hook_and_a_delivery_of_two_events_is_answered_per_event() {
    let app = api_only().await;
    let org = app.create_org(Tier::Standard).await;
    app.create_users(&org, &["ada@example.com", "bob@example.com"])
        .await;
    let flow = app.create_flow(&org, "Onboarding", &[30]).await;
    let okta = create_source(
        &app,
        &org,
        json!({"name": "Okta", "kind": "okta", "source": "https://example.okta.com"}),
    )
    .await;
    let standard = create_source(&app, &org, hr_source()).await;
    let trigger = json!({
        "name": "Okta users",
        "match": {"type": "user.lifecycle.create", "source": "https://example.okta.com"},
        "userEmailPointer": "/data/target/0/alternateId",
        "action": "assign",
        "flowId": flow,
    });
    assert_eq!(
        app.post(&org, "/v1/event-triggers", &trigger).await.status,
        201
    );

    let challenge = "2eFmSSd5u8rnGdZGjBNSE0Oo3wVJ3nQTfU1zaw0t";
    assert_eq!(
        verify(&app, &okta.id, Some(&okta.secret), Some(challenge)).await,
        (200, json!({"verification": challenge}))
    );
    assert_eq!(
        verify(&app, &okta.id, Some(&standard.secret), Some(challenge))
            .await
            .0,
        401
    );
    assert_eq!(verify(&app, &okta.id, None, Some(challenge)).await.0, 401);
    assert_eq!(
        verify(&app, &standard.id, Some(&standard.secret), Some(challenge))
            .await
            .0,
        401,
        "a Standard Webhooks source does not answer Okta's challenge"
    );
    assert_eq!(
        verify(&app, &okta.id, Some(&okta.secret), None).await.0,
        400
    );
    let long = "x".repeat(1_001);
    assert_eq!(
        verify(&app, &okta.id, Some(&okta.secret), Some(&long))
            .await
            .0,
        400
    );

    let body = okta_delivery(json!([
        okta_event("uuid-1", "user.lifecycle.create", "ada@example.com"),
        okta_event("uuid-2", "user.lifecycle.deactivate", "bob@example.com"),
    ]));
    let wrong = deliver_authorized(&app, &okta.id, &standard.secret, &body).await;
    assert_eq!(wrong.status, 401, "{:?}", wrong.body);
    assert_eq!(count(&app, "SELECT count(*) FROM inbound_events").await, 0);
    let response = deliver_authorized(&app, &okta.id, &okta.secret, &body).await;
    assert_eq!(response.status, 200, "{:?}", response.body);
    let results = response.body["results"].as_array().expect("results");
    assert_eq!(results.len(), 2, "{results:?}");
    assert_eq!(results[0]["id"], "uuid-1");
    assert_eq!(results[0]["source"], "https://example.okta.com");
    assert_eq!(results[0]["status"], "accepted", "{results:?}");
    assert_eq!(
        results[0]["assignmentIds"].as_array().map(Vec::len),
        Some(1)
    );
    assert_eq!(results[1]["id"], "uuid-2");
    assert_eq!(results[1]["status"], "ignored", "{results:?}");
    // Okta re-delivers on a timeout: the same uuids are duplicates.
    let again = deliver_authorized(&app, &okta.id, &okta.secret, &body).await;
    let statuses: Vec<&Value> = again.body["results"]
        .as_array()
        .expect("results")
        .iter()
        .map(|result| &result["status"])
        .collect();
    assert_eq!(statuses, [&json!("duplicate"), &json!("duplicate")]);
    // A body that is not an Okta delivery: 400, nothing recorded.
    let odd = br#"{"data": {}}"#;
    let response = deliver_authorized(&app, &okta.id, &okta.secret, odd).await;
    assert_eq!(response.status, 400, "{:?}", response.body);
    assert_eq!(count(&app, "SELECT count(*) FROM inbound_events").await, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_organizations_source_is_not_found_and_its_secret_opens_nothing_here() {
    let app = api_only().await;
    let a = app.create_org(Tier::Standard).await;
    let b = app.create_org(Tier::Standard).await;
    let source_a = create_source(&app, &a, hr_source()).await;
    let source_b = create_source(&app, &b, hr_source()).await;
    let path = format!("/v1/event-sources/{}", source_a.id);
    assert_eq!(app.get(&b, &path).await.status, 404);
    let rotate = app
        .post(&b, &format!("{path}/rotate-secret"), &json!({}))
        .await;
    assert_eq!(rotate.status, 404);
    let delete = app
        .request(reqwest::Method::DELETE, &path, Some(&b.key), None, &[])
        .await;
    assert_eq!(delete.status, 404);
    let listed = app.get(&b, "/v1/event-sources").await;
    let ids: Vec<&Value> = listed.body["data"]
        .as_array()
        .expect("data")
        .iter()
        .map(|source| &source["sourceId"])
        .collect();
    assert_eq!(ids, [&json!(source_b.id)]);
    // B's secret on A's source, and A's on B's: refused, nothing recorded in either.
    let body = hire("ada@example.com");
    for (id, secret) in [
        (&source_a.id, &source_b.secret),
        (&source_b.id, &source_a.secret),
    ] {
        let refused = deliver_signed(&app, id, secret, "msg_x", &body).await;
        assert_eq!(refused.status, 401);
    }
    assert_eq!(count(&app, "SELECT count(*) FROM inbound_events").await, 0);
    assert_eq!(app.get(&a, &path).await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_sources_name_the_field_and_the_limits_are_409() {
    let app = api_only().await;
    let org = app.create_org(Tier::Standard).await;
    let bad = [
        (json!({"kind": "okta"}), "name is required"),
        (json!({"name": "x"}), "kind is required"),
        (
            json!({"name": "x", "kind": "github"}),
            "kind must be one of: standard_webhooks, okta",
        ),
        (
            json!({"name": "x", "kind": "standard_webhooks"}),
            "exactly one of typePointer",
        ),
        (
            json!({"name": "x", "kind": "standard_webhooks", "typePointer": "/t", "type": "t"}),
            "exactly one of typePointer",
        ),
        (
            json!({"name": "x", "kind": "standard_webhooks", "typePointer": "type"}),
            "JSON Pointer",
        ),
        (
            json!({"name": "x", "kind": "standard_webhooks", "typePointer": format!("/{}", "a".repeat(256))}),
            "at most 256",
        ),
        (
            json!({"name": "x", "kind": "okta", "type": "t"}),
            "leave typePointer and type out",
        ),
        (json!({"name": "x".repeat(201), "kind": "okta"}), "name"),
        (
            json!({"name": "x", "kind": "okta", "source": "s".repeat(501)}),
            "source",
        ),
        (
            json!({"name": "x", "kind": "okta", "secret": "mine"}),
            "unknown field",
        ),
    ];
    for (body, message) in bad {
        let response = app.post(&org, "/v1/event-sources", &body).await;
        assert_eq!(response.status, 400, "{body}: {:?}", response.body);
        assert!(
            response.body["message"]
                .as_str()
                .unwrap_or_default()
                .contains(message),
            "{body}: {:?}",
            response.body
        );
    }
    create_source(
        &app,
        &org,
        json!({"name": "Okta", "kind": "okta", "source": "https://example.okta.com"}),
    )
    .await;
    let same = app
        .post(
            &org,
            "/v1/event-sources",
            &json!({"name": "Okta 2", "kind": "okta", "source": "https://example.okta.com"}),
        )
        .await;
    assert_eq!(same.status, 409, "{:?}", same.body);
    for n in 1..50 {
        create_source(
            &app,
            &org,
            json!({"name": format!("Source {n}"), "kind": "okta"}),
        )
        .await;
    }
    let over = app
        .post(
            &org,
            "/v1/event-sources",
            &json!({"name": "One too many", "kind": "okta"}),
        )
        .await;
    assert_eq!(over.status, 409, "{:?}", over.body);
    assert!(
        over.body["message"]
            .as_str()
            .unwrap_or_default()
            .contains("at most 50"),
        "{:?}",
        over.body
    );
    // Keyset pages.
    let first = app.get(&org, "/v1/event-sources?limit=30").await;
    assert_eq!(first.body["data"].as_array().map(Vec::len), Some(30));
    let cursor = first.body["nextCursor"].as_str().expect("cursor");
    let second = app
        .get(&org, &format!("/v1/event-sources?limit=30&cursor={cursor}"))
        .await;
    assert_eq!(second.body["data"].as_array().map(Vec::len), Some(20));
    assert_eq!(second.body["nextCursor"], Value::Null);
}

/// The text of an HTML value as askama escaped it.
fn unescape(html: &str) -> String {
    html.replace("&#x2f;", "/")
        .replace("&#43;", "+")
        .replace("&#61;", "=")
        .replace("&amp;", "&")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_events_page_creates_a_source_showing_its_secret_once_and_manages_triggers() {
    use flow_tests::dashboard::{between, org_with_admin};

    let app = api_only().await;
    let (org, client) = org_with_admin(&app).await;
    app.create_users(&org, &["ada@example.com"]).await;
    let flow = app.create_flow(&org, "Onboarding", &[30]).await;
    let rules = client.page("/dashboard/rules").await;
    assert!(rules.contains("href=\"/dashboard/events\""), "{rules}");
    let empty = client.page("/dashboard/events").await;
    assert!(empty.contains("No signed sources"), "{empty}");
    assert!(empty.contains("No triggers yet"), "{empty}");

    let refused = client
        .post_form(
            "/dashboard/events/sources",
            &[
                ("name", "HR"),
                ("kind", "standard_webhooks"),
                ("type_pointer", "type"),
            ],
        )
        .await;
    assert_eq!(refused.status, 400);
    assert!(
        refused.body.contains("id=\"source-error\""),
        "{}",
        refused.body
    );
    let created = client
        .post_form(
            "/dashboard/events/sources",
            &[
                ("name", "HR"),
                ("kind", "standard_webhooks"),
                ("type_pointer", "/event"),
                ("source", ""),
            ],
        )
        .await;
    assert_eq!(created.status, 200, "{}", created.body);
    let secret = unescape(
        between(&created.body, "<code id=\"source-secret\">", "</code>").expect("the secret"),
    );
    assert!(secret.starts_with("whsec_"), "{secret}");
    let address = unescape(
        between(&created.body, "<code id=\"inbound-url\">", "</code>").expect("the address"),
    );
    let source_id = address
        .rsplit('/')
        .next()
        .expect("the source id")
        .to_owned();
    assert!(source_id.starts_with("evs_"), "{address}");
    // Beside it: how a sender signs, with the stock libraries.
    let snippet = between(&created.body, "id=\"sign-snippet\">", "</section>").expect("snippet");
    assert!(snippet.contains("webhook.sign("), "{snippet}");
    // Shown once: the list does not show it.
    let listed = client.page("/dashboard/events").await;
    assert!(listed.contains(&source_id), "{listed}");
    assert!(!unescape(&listed).contains(&secret));

    // A trigger from the form, for the source's events.
    let source = format!("flow:event-sources/{source_id}");
    let bad = client
        .post_form(
            "/dashboard/events/triggers",
            &[
                ("name", ""),
                ("type_match", "exact"),
                ("event_type", "employee.hired"),
                ("email_pointer", "/data/employee/email"),
                ("action", "assign"),
                ("flow_id", &flow),
            ],
        )
        .await;
    assert_eq!(bad.status, 400);
    assert!(bad.body.contains("id=\"trigger-error\""), "{}", bad.body);
    let saved = client
        .post_form(
            "/dashboard/events/triggers",
            &[
                ("name", "Hires"),
                ("type_match", "exact"),
                ("event_type", "employee.hired"),
                ("source", &source),
                ("email_pointer", "/data/employee/email"),
                ("action", "assign"),
                ("flow_id", &flow),
                ("due_days", "14"),
            ],
        )
        .await;
    assert_eq!(saved.status, 303, "{}", saved.body);
    let listed = client.page("/dashboard/events").await;
    assert!(listed.contains("type employee.hired"), "{listed}");
    let preview = client
        .post_form(
            "/dashboard/events/preview",
            &[(
                "event",
                &json!({"specversion": "1.0", "id": "p1", "source": source,
                        "type": "employee.hired",
                        "data": {"employee": {"email": "ada@example.com"}}})
                .to_string(),
            )],
        )
        .await;
    assert_eq!(preview.status, 200);
    let shown = between(&preview.body, "id=\"preview-result\">", "</div>").expect("result");
    assert!(shown.contains("<strong>accepted</strong>"), "{shown}");
    assert!(shown.contains("Hires: assign"), "{shown}");

    // The secret from the page signs a delivery the trigger acts on.
    let body = hire("ada@example.com");
    let response = deliver_signed(&app, &source_id, &secret, "msg_page", &body).await;
    assert_eq!(response.status, 202, "{:?}", response.body);
    assert_eq!(response.body["results"][0]["status"], "accepted");

    let rotated = client
        .post_form(
            &format!("/dashboard/events/sources/{source_id}/rotate"),
            &[],
        )
        .await;
    assert_eq!(rotated.status, 200);
    let new_secret =
        unescape(between(&rotated.body, "<code id=\"source-secret\">", "</code>").expect("new"));
    assert_ne!(new_secret, secret);
    assert!(rotated.body.contains("still accepted for 24 hours"));
    let trigger_id: uuid::Uuid = sqlx::query_scalar("SELECT id FROM event_triggers")
        .fetch_one(&app.db)
        .await
        .expect("trigger");
    let trigger = format!("etr_{}", trigger_id.simple());
    let deleted = client
        .post_form(&format!("/dashboard/events/triggers/{trigger}/delete"), &[])
        .await;
    assert_eq!(deleted.status, 303);
    let deleted = client
        .post_form(
            &format!("/dashboard/events/sources/{source_id}/delete"),
            &[],
        )
        .await;
    assert_eq!(deleted.status, 303);
    let listed = client.page("/dashboard/events").await;
    assert!(listed.contains("No signed sources"), "{listed}");
    assert!(listed.contains("No triggers yet"), "{listed}");

    // Another organization's source is not found here; a viewer sees the page but changes nothing.
    let other = app.create_org(Tier::Standard).await;
    let theirs = create_source(&app, &other, hr_source()).await;
    for action in ["rotate", "delete"] {
        let page = client
            .post_form(
                &format!("/dashboard/events/sources/{}/{action}", theirs.id),
                &[],
            )
            .await;
        assert_eq!(page.status, 404, "{action}");
    }
    assert_eq!(
        app.get(&other, &format!("/v1/event-sources/{}", theirs.id))
            .await
            .body["secretRotatedAt"],
        Value::Null
    );
    let viewer = flow_tests::dashboard::DashboardClient::signed_in(
        &app,
        org.id,
        "viewer@example.com",
        flow_tests::dashboard::role("viewer"),
    )
    .await;
    assert!(viewer.page("/dashboard/events").await.contains("Events in"));
    let refused = viewer
        .post_form(
            "/dashboard/events/sources",
            &[("name", "HR"), ("kind", "okta")],
        )
        .await;
    assert_eq!(refused.status, 403);
    assert_eq!(count(&app, "SELECT count(*) FROM event_sources").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trigger_edited_on_its_dashboard_page_reads_back_through_the_api() {
    use flow_tests::dashboard::{DashboardClient, between, org_with_admin, role};

    let app = api_only().await;
    let (org, client) = org_with_admin(&app).await;
    let onboarding = app.create_flow(&org, "Onboarding", &[30]).await;
    let security = app.create_flow(&org, "Security", &[10]).await;
    let created = app
        .post(
            &org,
            "/v1/event-triggers",
            &json!({
                "name": "Hires",
                "match": {"typePrefix": "employee.", "source": "https://hr.example.com"},
                "userEmailPointer": "/data/email",
                "action": "assign",
                "flowId": onboarding,
                "due": {"fromPointer": "/data/startDate"},
                "priority": "high",
                "notes": "Welcome aboard",
            }),
        )
        .await;
    assert_eq!(created.status, 201, "{:?}", created.body);
    let id = created.body["triggerId"].as_str().expect("id").to_owned();
    let path = format!("/dashboard/events/triggers/{id}");

    // The list links to the trigger's page, whose form holds every value.
    let listed = client.page("/dashboard/events").await;
    assert!(listed.contains(&format!("href=\"{path}\"")), "{listed}");
    let form = client.page(&path).await;
    for shown in [
        "id=\"trigger-name\" name=\"name\" value=\"Hires\"".to_owned(),
        "<option value=\"prefix\" selected>".to_owned(),
        "name=\"event_type\" value=\"employee.\"".to_owned(),
        "name=\"source\" value=\"https://hr.example.com\"".to_owned(),
        "name=\"email_pointer\" value=\"/data/email\"".to_owned(),
        "<option value=\"assign\" selected>".to_owned(),
        format!("<option value=\"{onboarding}\" selected>"),
        "name=\"due_days\" min=\"1\" max=\"3650\" value=\"\"".to_owned(),
        "name=\"due_from_pointer\" value=\"/data/startDate\"".to_owned(),
        "<option value=\"high\" selected>".to_owned(),
        ">Welcome aboard</textarea>".to_owned(),
    ] {
        assert!(form.contains(&shown), "{shown} not in {form}");
    }

    // Saved from the dashboard, read back through the API; audited as the API audits it.
    let saved = client
        .post_form(
            &path,
            &[
                ("name", "Hires and transfers"),
                ("type_match", "exact"),
                ("event_type", "employee.hired"),
                ("source", ""),
                ("email_pointer", "/data/employee/email"),
                ("action", "assign"),
                ("flow_id", &security),
                ("due_days", "14"),
                ("due_from_pointer", ""),
                ("priority", "low"),
                ("notes", ""),
            ],
        )
        .await;
    assert_eq!(saved.status, 303, "{}", saved.body);
    assert_eq!(saved.location(), Some("/dashboard/events"));
    let read = app.get(&org, &format!("/v1/event-triggers/{id}")).await;
    assert_eq!(read.status, 200);
    let trigger = read.body;
    assert_eq!(trigger["name"], "Hires and transfers");
    assert_eq!(trigger["match"], json!({"type": "employee.hired"}));
    assert_eq!(trigger["userEmailPointer"], "/data/employee/email");
    assert_eq!(trigger["action"], "assign");
    assert_eq!(trigger["flowId"], json!(security));
    assert_eq!(trigger["due"], json!({"days": 14}));
    assert_eq!(trigger["priority"], "low");
    assert_eq!(trigger["notes"], Value::Null);
    let audited: Vec<(String, String, String)> = sqlx::query_as(
        "SELECT actor_kind, actor, target FROM audit_events
         WHERE org_id = $1 AND action = 'event_trigger.updated'",
    )
    .bind(org.id)
    .fetch_all(&app.db)
    .await
    .expect("audit");
    assert_eq!(
        audited,
        [(
            "account".to_owned(),
            format!("admin-{}@example.com", org.id),
            id.clone()
        )]
    );

    // A bad pointer is refused in the form, naming the field; nothing changes.
    let refused = client
        .post_form(
            &path,
            &[
                ("name", "Renamed"),
                ("type_match", "exact"),
                ("event_type", "employee.hired"),
                ("email_pointer", "data/email"),
                ("action", "assign"),
                ("flow_id", &security),
                ("priority", "low"),
            ],
        )
        .await;
    assert_eq!(refused.status, 400, "{}", refused.body);
    let error = between(&refused.body, "id=\"trigger-error\">", "</div>").expect("error");
    assert!(
        error.contains("userEmailPointer must be a JSON Pointer"),
        "{error}"
    );
    // The form keeps what was typed.
    assert!(
        refused
            .body
            .contains("name=\"email_pointer\" value=\"data/email\"")
    );
    let unchanged = app.get(&org, &format!("/v1/event-triggers/{id}")).await;
    assert_eq!(unchanged.body, trigger);

    // Another organization's trigger is not found here, and stays as it was.
    let other = app.create_org(Tier::Standard).await;
    let their_flow = app.create_flow(&other, "Theirs", &[10]).await;
    let theirs = app
        .post(
            &other,
            "/v1/event-triggers",
            &json!({"name": "Theirs", "match": {"type": "t"}, "userEmailPointer": "/e",
                    "action": "assign", "flowId": their_flow}),
        )
        .await;
    assert_eq!(theirs.status, 201, "{:?}", theirs.body);
    let their_id = theirs.body["triggerId"].as_str().expect("id").to_owned();
    let their_path = format!("/dashboard/events/triggers/{their_id}");
    assert_eq!(client.get(&their_path).await.status, 404);
    let foreign = client
        .post_form(
            &their_path,
            &[
                ("name", "Mine now"),
                ("type_match", "exact"),
                ("event_type", "t"),
                ("email_pointer", "/e"),
                ("action", "assign"),
                ("flow_id", &security),
            ],
        )
        .await;
    assert_eq!(foreign.status, 404, "{}", foreign.body);
    let their_trigger = app
        .get(&other, &format!("/v1/event-triggers/{their_id}"))
        .await;
    assert_eq!(their_trigger.body["name"], "Theirs");

    // A viewer sees the values but cannot save them.
    let viewer =
        DashboardClient::signed_in(&app, org.id, "viewer@example.com", role("viewer")).await;
    let shown = viewer.page(&path).await;
    assert!(shown.contains("value=\"Hires and transfers\""), "{shown}");
    let forbidden = viewer
        .post_form(&path, &[("name", "Viewer's"), ("action", "assign")])
        .await;
    assert_eq!(forbidden.status, 403);
    let still = app.get(&org, &format!("/v1/event-triggers/{id}")).await;
    assert_eq!(still.body, trigger);
}

/// A writer that keeps everything a subscriber writes.
#[derive(Clone, Default)]
struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn the_secret_and_the_signatures_reach_no_log() {
    use tracing_subscriber::fmt::format::FmtSpan;
    use tracing_subscriber::prelude::*;

    let app = api_only().await;
    let org = app.create_org(Tier::Standard).await;
    // Everything the API logs on this thread (the test runtime runs it), at every level, with
    // every span field, as tests/it/log_secrets.rs captures it.
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::registry()
        .with(flow_common::telemetry::hide_raw_paths())
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(move || writer.clone())
                .with_ansi(false)
                .with_span_events(FmtSpan::FULL)
                .with_filter(tracing_subscriber::filter::LevelFilter::TRACE),
        );
    let guard = tracing::subscriber::set_default(subscriber);
    let source = create_source(&app, &org, hr_source()).await;
    let okta = create_source(&app, &org, json!({"name": "Okta", "kind": "okta"})).await;
    let body = hire("ada@example.com");
    let good = signed(&source.secret, "msg_log", now(), &body);
    assert_eq!(deliver(&app, &source.id, &body, &good).await.status, 202);
    let stale = signed(&source.secret, "msg_old", now() - 360, &body);
    assert_eq!(deliver(&app, &source.id, &body, &stale).await.status, 401);
    let wrong = signed(&okta.secret, "msg_wrong", now(), &body);
    assert_eq!(deliver(&app, &source.id, &body, &wrong).await.status, 401);
    let okta_body = okta_delivery(json!([okta_event("u1", "user.lifecycle.create", "a@b.c")]));
    let authorized = [("authorization", okta.secret.clone())];
    assert_eq!(
        deliver(&app, &okta.id, &okta_body, &authorized)
            .await
            .status,
        200
    );
    let guessed = [("authorization", format!("{}x", okta.secret))];
    assert_eq!(
        deliver(&app, &okta.id, &okta_body, &guessed).await.status,
        401
    );
    drop(guard);
    let logs = String::from_utf8_lossy(&captured.0.lock().unwrap()).into_owned();
    assert!(
        logs.contains("inbound delivery refused"),
        "refusals are logged with their reason: {logs}"
    );
    let mut secrets = vec![source.secret[6..].to_owned(), okta.secret[6..].to_owned()];
    for headers in [&good, &stale, &wrong] {
        secrets.push(headers[2].1[3..].to_owned());
    }
    for secret in secrets {
        let leaked: Vec<&str> = logs.lines().filter(|line| line.contains(&secret)).collect();
        assert!(leaked.is_empty(), "{secret} leaked: {leaked:#?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_address_with_20_refused_deliveries_in_a_minute_is_answered_429_and_others_are_not() {
    let app = api_only().await;
    let (_org, source) = hiring_from_hr(&app).await;
    let body = hire("ada@example.com");
    // A valid delivery first: deliveries that authenticate are not counted.
    let valid = deliver_signed(&app, &source.id, &source.secret, "msg_ok", &body).await;
    assert_eq!(valid.status, 202);
    let wrong = signed(
        "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
        "msg_x",
        now(),
        &body,
    );
    for attempt in 1..=20 {
        let response = deliver(&app, &source.id, &body, &wrong).await;
        assert_eq!(
            response.status, 401,
            "attempt {attempt}: {:?}",
            response.body
        );
    }
    // The 21st refusal of the minute, and anything else from that address, is throttled before
    // it is looked at — a valid delivery and an Okta verification too.
    let throttled = deliver(&app, &source.id, &body, &wrong).await;
    assert_eq!(throttled.status, 429, "{:?}", throttled.body);
    assert_eq!(
        throttled.body["error"], "rate_limit_exceeded",
        "{:?}",
        throttled.body
    );
    let retry_after: u64 = throttled
        .headers
        .get("retry-after")
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse().ok())
        .expect("Retry-After");
    assert!((1..=60).contains(&retry_after), "{retry_after}");
    let again = signed(&source.secret, "msg_ok_2", now(), &body);
    assert_eq!(deliver(&app, &source.id, &body, &again).await.status, 429);
    let verification = app
        .client
        .get(format!("{}/v1/events/inbound/{}", app.base_url, source.id))
        .header("x-okta-verification-challenge", "c")
        .send()
        .await
        .expect("sent");
    assert_eq!(verification.status(), 429);
    // Another address is not affected.
    let elsewhere = reqwest::Client::builder()
        .local_address("127.0.0.2".parse::<std::net::IpAddr>().expect("address"))
        .build()
        .expect("client");
    let response = elsewhere
        .post(format!("{}/v1/events/inbound/{}", app.base_url, source.id))
        .header("content-type", "application/json")
        .headers(
            again
                .iter()
                .map(|(name, value)| {
                    (
                        reqwest::header::HeaderName::from_static(name),
                        value.parse().expect("header value"),
                    )
                })
                .collect(),
        )
        .body(body.clone())
        .send()
        .await
        .expect("sent");
    assert_eq!(response.status(), 202);
    assert_eq!(count(&app, "SELECT count(*) FROM inbound_events").await, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_okta_source_may_take_its_secret_in_a_header_of_its_own() {
    let app = api_only().await;
    let org = app.create_org(Tier::Standard).await;
    let okta = create_source(
        &app,
        &org,
        json!({"name": "Okta", "kind": "okta", "authHeader": "X-Flow-Secret"}),
    )
    .await;
    let read = app
        .get(&org, &format!("/v1/event-sources/{}", okta.id))
        .await;
    assert_eq!(read.body["authHeader"], "x-flow-secret", "{:?}", read.body);
    let plain = create_source(&app, &org, json!({"name": "Okta 2", "kind": "okta"})).await;
    let read = app
        .get(&org, &format!("/v1/event-sources/{}", plain.id))
        .await;
    assert_eq!(read.body["authHeader"], "authorization", "{:?}", read.body);
    let challenge = "c-123";
    let path = format!("{}/v1/events/inbound/{}", app.base_url, okta.id);
    let with = |header: &'static str| {
        app.client
            .get(&path)
            .header(header, &okta.secret)
            .header("x-okta-verification-challenge", challenge)
            .send()
    };
    let answered = with("x-flow-secret").await.expect("sent");
    assert_eq!(answered.status(), 200);
    assert_eq!(
        answered.json::<Value>().await.expect("json"),
        json!({"verification": challenge})
    );
    // The secret in Authorization is not where this source looks.
    assert_eq!(with("authorization").await.expect("sent").status(), 401);
    // Bad names, and a header on a standard_webhooks source, are refused naming the field.
    for (body, needle) in [
        (
            json!({"name": "A", "kind": "okta", "authHeader": "X Flow"}),
            "authHeader",
        ),
        (
            json!({"name": "B", "kind": "okta", "authHeader": "Content-Type"}),
            "authHeader",
        ),
        (
            json!({"name": "C", "kind": "okta", "authHeader": "x".repeat(65)}),
            "authHeader",
        ),
        (
            json!({"name": "D", "kind": "standard_webhooks", "type": "t", "authHeader": "X-S"}),
            "okta sources only",
        ),
    ] {
        let response = app.post(&org, "/v1/event-sources", &body).await;
        assert_eq!(response.status, 400, "{body}: {:?}", response.body);
        assert!(
            response.body["message"]
                .as_str()
                .unwrap_or_default()
                .contains(needle),
            "{body}: {:?}",
            response.body
        );
    }
    assert_eq!(
        count(&app, "SELECT count(*) FROM event_sources").await,
        2,
        "nothing else was created"
    );
}
