//! Reads, writes and bad keys have limits too: every `GET` under `/v1/` counts against the
//! organization's read limit (a list page by its `limit`), progress and the other writes against
//! its write limit, both with the `RateLimit-*` headers; and one client address can only have so
//! many unknown keys looked up a minute before it is answered 429 without Postgres.

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use flow_common::db::orgs::Tier;
use flow_tests::reports::{create_flow, create_org_in_zone};
use flow_tests::{TestApp, TestOptions, TestResponse};
use reqwest::Method;
use serde_json::json;

/// The `RateLimit-*` headers of an answer, as numbers.
fn rate_headers(response: &TestResponse) -> (u64, u64) {
    let number = |name: &str| -> u64 {
        response
            .header(name)
            .unwrap_or_else(|| panic!("{name} on a {} answer", response.status))
            .parse()
            .expect("a number")
    };
    assert!(response.header("ratelimit-reset").is_some());
    (number("ratelimit-limit"), number("ratelimit-remaining"))
}

/// Asserts the answer's limit is `limit` and `remaining` is left, give or take the one token that
/// may have come back since (the limits refill smoothly: 20 a minute is one every 3 s).
fn assert_rate(response: &TestResponse, limit: u64, remaining: u64) {
    let (actual_limit, actual_remaining) = rate_headers(response);
    assert_eq!(actual_limit, limit);
    assert!(
        (remaining..=remaining + 1).contains(&actual_remaining),
        "{actual_remaining} left, expected {remaining}"
    );
}

/// A 429 `rate_limit_exceeded` with `retry_after` and the same `Retry-After`.
fn assert_limited(response: &TestResponse, operation: &str) {
    assert_eq!(response.status, 429, "{}", response.body);
    assert_eq!(response.body["error"], json!("rate_limit_exceeded"));
    let retry_after = response.body["retry_after"].as_u64().expect("retry_after");
    assert!(retry_after >= 1);
    assert_eq!(
        response.header("retry-after"),
        Some(retry_after.to_string().as_str())
    );
    let message = response.body["message"].as_str().unwrap();
    assert!(message.contains(operation), "{message}");
}

#[tokio::test]
async fn list_pages_count_by_their_size_against_the_read_limit_then_429_with_headers() {
    let app = TestApp::spawn().await;
    // A report limit of 1 a minute gives a read limit of 20.
    let org = create_org_in_zone(&app, Tier::Standard, "UTC", Some(1)).await;
    let flow = create_flow(&app, &org, "Security", &["One"]).await.id;
    let get = |path: String| {
        let app = &app;
        let key = org.key.clone();
        async move { app.request(Method::GET, &path, Some(&key), None, &[]).await }
    };
    // A page of 1,000 costs ten reads.
    let first = get("/v1/assignments?limit=1000".into()).await;
    assert_eq!(first.status, 200, "{}", first.body);
    assert_eq!(rate_headers(&first), (20, 10));
    // A single read costs one, and every GET shares the budget.
    let flow_read = get(format!("/v1/flows/{flow}")).await;
    assert_eq!(flow_read.status, 200, "{}", flow_read.body);
    assert_rate(&flow_read, 20, 9);
    // About nine left: a second page of 1,000 does not fit, a page of 900 does.
    let refused = get("/v1/assignments?limit=1000".into()).await;
    assert_limited(&refused, "read");
    assert_eq!(rate_headers(&refused).0, 20);
    let fits = get("/v1/users?limit=900".into()).await;
    assert_eq!(fits.status, 200, "{}", fits.body);
    assert_rate(&fits, 20, 0);
    // Every list is a read: none of them fits now (a page of 1,000 needs 30 s of refill).
    for path in [
        "/v1/assignments?limit=1000",
        "/v1/flows?limit=1000",
        "/v1/users?limit=1000",
        "/v1/webhooks?limit=1000",
    ] {
        let refused = get(path.to_owned()).await;
        assert_limited(&refused, "read");
        assert_rate(&refused, 20, 0);
    }
    // Reads have their own budget: a report still goes through.
    let report = app
        .post(
            &org,
            "/v1/flows/report",
            &json!({ "flowId": flow.to_string() }),
        )
        .await;
    assert_eq!(report.status, 200, "{}", report.body);
}

#[tokio::test]
async fn progress_past_the_write_limit_is_429_with_headers_and_reads_still_work() {
    let app = TestApp::spawn().await;
    // An assign limit of 1 a minute gives a write limit of 10.
    let org = app.create_org_with(Tier::Standard, Some(1)).await;
    let flow = create_flow(&app, &org, "Security", &["One", "Two"]).await;
    flow_tests::reports::user(&app, &org, "ada@example.com").await;
    let assignment = app
        .assign_persisted(&org, &flow.id.to_string(), "ada@example.com", json!({}))
        .await;
    let path = format!("/v1/assignments/{assignment}/progress");
    let progress = json!({ "moduleId": flow.modules[0].to_string(), "status": "in_progress" });
    let first = app.post(&org, &path, &progress).await;
    assert_eq!(first.status, 202, "{}", first.body);
    assert_eq!(rate_headers(&first), (10, 9));
    // The limit refills one write every 6 s: at most one more may get through meanwhile.
    let mut accepted = 1;
    let refused = loop {
        let answer = app.post(&org, &path, &progress).await;
        if answer.status != 202 {
            break answer;
        }
        accepted += 1;
        assert!(accepted <= 11, "more writes accepted than the limit");
    };
    assert!(accepted >= 10, "only {accepted} writes accepted");
    assert_limited(&refused, "write");
    assert_rate(&refused, 10, 0);
    // Other writes share the budget.
    let user = app
        .post(
            &org,
            "/v1/users",
            &json!({ "email": "grace@example.com", "name": "Grace" }),
        )
        .await;
    assert_limited(&user, "write");
    // Reads do not: the assignment still reads.
    let read = app
        .request(
            Method::GET,
            &format!("/v1/assignments/{assignment}"),
            Some(&org.key),
            None,
            &[],
        )
        .await;
    assert_eq!(read.status, 200, "{}", read.body);
}

/// A client whose connections come from `address` (any of 127.0.0.0/8 reaches the API).
fn client_from(address: Ipv4Addr) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(IpAddr::V4(address))
        .timeout(Duration::from_secs(30))
        .build()
        .expect("http client")
}

/// `GET /v1/flows` with `key` through `client`.
async fn list_flows(app: &TestApp, client: &reqwest::Client, key: &str) -> (u16, Option<u64>) {
    let response = client
        .get(format!("{}/v1/flows", app.base_url))
        .bearer_auth(key)
        .send()
        .await
        .expect("request sent");
    let status = response.status().as_u16();
    let retry_after = response
        .headers()
        .get("retry-after")
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse().ok());
    (status, retry_after)
}

/// A well-formed key that no organization has.
fn bogus_key() -> String {
    format!(
        "fsk_{}{}",
        uuid::Uuid::new_v4().simple(),
        &uuid::Uuid::new_v4().simple().to_string()[..16]
    )
}

#[tokio::test]
async fn a_flood_of_unknown_keys_from_one_address_stops_reaching_postgres() {
    let app = TestApp::spawn_with(TestOptions {
        postgres_proxy: true,
        ..TestOptions::default()
    })
    .await;
    let org = app.create_org(Tier::Standard).await;
    let attacker = client_from(Ipv4Addr::new(127, 0, 0, 1));
    let neighbour = client_from(Ipv4Addr::new(127, 0, 0, 2));
    // The organization's own client, from the attacker's address, used its key before.
    assert_eq!(list_flows(&app, &attacker, &org.key).await.0, 200);

    // Twenty unknown keys are looked up and refused as unknown...
    let first_bogus = bogus_key();
    assert_eq!(list_flows(&app, &attacker, &first_bogus).await.0, 401);
    for _ in 1..flow_app::caches::UNKNOWN_KEYS_PER_ADDRESS {
        assert_eq!(list_flows(&app, &attacker, &bogus_key()).await.0, 401);
    }
    // ...the next ones from that address are not looked up: 429 with Retry-After.
    for _ in 0..50 {
        let (status, retry_after) = list_flows(&app, &attacker, &bogus_key()).await;
        assert_eq!(status, 429);
        assert!(retry_after.is_some_and(|seconds| (1..=60).contains(&seconds)));
    }
    // A key already found unknown is answered from memory, and a key already known still works.
    assert_eq!(list_flows(&app, &attacker, &first_bogus).await.0, 401);
    assert_eq!(list_flows(&app, &attacker, &org.key).await.0, 200);
    // Another address is not held back: its valid key, new to it, works.
    let other = app.create_org(Tier::Standard).await;
    assert_eq!(list_flows(&app, &neighbour, &other.key).await.0, 200);

    // With Postgres out of reach, the flooding address is still answered 429 (its keys are not
    // looked up), while an unknown key from a third address, which must be looked up, cannot be.
    app.postgres_proxy
        .as_ref()
        .expect("postgres proxy")
        .disable()
        .await;
    assert_eq!(list_flows(&app, &attacker, &bogus_key()).await.0, 429);
    let third = client_from(Ipv4Addr::new(127, 0, 0, 3));
    assert_eq!(list_flows(&app, &third, &bogus_key()).await.0, 503);
}

#[tokio::test]
async fn a_burst_of_requests_with_a_valid_key_new_to_the_replica_is_never_refused() {
    let app = TestApp::spawn().await;
    let org = app.create_org(Tier::Enterprise).await;
    let client = client_from(Ipv4Addr::new(127, 0, 0, 1));
    // Far more requests at once than unknown keys an address may try: the key is looked up by
    // many of them before any is cached, and none of those lookups is held against the address.
    let answers =
        futures::future::join_all((0..200).map(|_| list_flows(&app, &client, &org.key))).await;
    assert!(
        answers.iter().all(|(status, _)| *status == 200),
        "{:?}",
        answers
            .iter()
            .filter(|(status, _)| *status != 200)
            .collect::<Vec<_>>()
    );
}
