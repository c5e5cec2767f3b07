//! SCIM's caps on multi-valued attributes and on what one request carries or returns (issue
//! 35): e-mails must be addresses, ten at most; a group POST or PUT carries at most 1,000
//! members; a PATCH at most 10,000 values; the largest PATCH is answered within the request
//! timeout while another organization's reads go on undelayed; group lists leave members out
//! unless asked, a response carries at most 10,000 members, and reads are charged by size.

use std::time::{Duration, Instant};

use flow_common::db::orgs::Tier;
use flow_domain::ids::UserId;
use flow_tests::{TestApp, TestOrg, TestResponse};
use serde_json::{Value, json};

const PATCH_OP: &str = "urn:ietf:params:scim:api:messages:2.0:PatchOp";

/// The API without workers: none of these tests assigns anything.
async fn api_only() -> TestApp {
    TestApp::spawn_with(flow_tests::TestOptions {
        assign_worker: false,
        ..Default::default()
    })
    .await
}

async fn scim(
    app: &TestApp,
    org: &TestOrg,
    method: reqwest::Method,
    path: &str,
    body: Option<&Value>,
) -> TestResponse {
    app.scim_request(&org.key, method, path, body, &[]).await
}

async fn get(app: &TestApp, org: &TestOrg, path: &str) -> TestResponse {
    scim(app, org, reqwest::Method::GET, path, None).await
}

async fn post(app: &TestApp, org: &TestOrg, path: &str, body: Value) -> TestResponse {
    scim(app, org, reqwest::Method::POST, path, Some(&body)).await
}

async fn patch(app: &TestApp, org: &TestOrg, path: &str, operations: Vec<Value>) -> TestResponse {
    let body = json!({"schemas": [PATCH_OP], "Operations": operations});
    scim(app, org, reqwest::Method::PATCH, path, Some(&body)).await
}

/// Asserts a SCIM 400 of `scim_type` whose detail contains `cap`.
fn assert_scim_400(response: &TestResponse, scim_type: &str, cap: &str) {
    assert_eq!(response.status, 400, "{}", response.body);
    assert_eq!(
        response.body["scimType"],
        json!(scim_type),
        "{}",
        response.body
    );
    let detail = response.body["detail"].as_str().unwrap_or_default();
    assert!(detail.contains(cap), "{detail}");
}

/// The SCIM ids of the organization's users, in e-mail order.
async fn user_ids(app: &TestApp, org: &TestOrg) -> Vec<String> {
    let ids: Vec<uuid::Uuid> =
        sqlx::query_scalar("SELECT id FROM users WHERE org_id = $1 ORDER BY email")
            .bind(org.id)
            .fetch_all(&app.db)
            .await
            .expect("user ids");
    ids.into_iter().map(|id| UserId(id).to_string()).collect()
}

fn members(ids: &[String]) -> Vec<Value> {
    ids.iter().map(|id| json!({"value": id})).collect()
}

#[tokio::test]
async fn scim_emails_must_be_addresses_and_at_most_ten() {
    let app = api_only().await;
    let org = app.create_org(Tier::Standard).await;
    // Not an address: refused whatever the userName.
    let response = post(
        &app,
        &org,
        "/Users",
        json!({"userName": "ann@example.com", "emails": [{"value": "ann@example.com"}, {"value": "account"}]}),
    )
    .await;
    assert_scim_400(
        &response,
        "invalidValue",
        "emails[1].value must be a valid e-mail address",
    );
    // Eleven: refused, naming the cap.
    let eleven: Vec<Value> = (0..11)
        .map(|index| json!({"value": format!("ann{index}@example.com")}))
        .collect();
    let response = post(
        &app,
        &org,
        "/Users",
        json!({"userName": "ann@example.com", "emails": eleven}),
    )
    .await;
    assert_scim_400(&response, "invalidValue", "emails holds at most 10 values");
    // Ten are fine; an eleventh by PATCH is not, nor is a value that is no address.
    let response = post(
        &app,
        &org,
        "/Users",
        json!({"userName": "ann@example.com", "emails": eleven[..10]}),
    )
    .await;
    assert_eq!(response.status, 201, "{}", response.body);
    let path = format!("/Users/{}", response.body["id"].as_str().unwrap());
    let response = patch(
        &app,
        &org,
        &path,
        vec![json!({"op": "add", "path": "emails", "value": [{"value": "one.more@example.com"}]})],
    )
    .await;
    assert_scim_400(&response, "invalidValue", "at most 10");
    let response = patch(
        &app,
        &org,
        &path,
        vec![json!({"op": "replace", "path": "emails[value eq \"ann3@example.com\"].value", "value": "account"})],
    )
    .await;
    assert_scim_400(&response, "invalidValue", "must be a valid e-mail address");
    let stored = get(&app, &org, &path).await;
    assert_eq!(stored.body["emails"].as_array().unwrap().len(), 10);
}

#[tokio::test]
async fn scim_group_write_over_1000_members_and_patch_over_10000_values_are_400() {
    let app = api_only().await;
    let org = app.create_org(Tier::Standard).await;
    let ids: Vec<String> = (0..=1000).map(|_| UserId::new().to_string()).collect();
    let response = post(
        &app,
        &org,
        "/Groups",
        json!({"displayName": "Everyone", "members": members(&ids)}),
    )
    .await;
    assert_scim_400(&response, "invalidValue", "at most 1000 members");
    let response = post(&app, &org, "/Groups", json!({"displayName": "Everyone"})).await;
    assert_eq!(response.status, 201, "{}", response.body);
    let path = format!("/Groups/{}", response.body["id"].as_str().unwrap());
    let put = scim(
        &app,
        &org,
        reqwest::Method::PUT,
        &path,
        Some(&json!({"displayName": "Everyone", "members": members(&ids)})),
    )
    .await;
    assert_scim_400(&put, "invalidValue", "at most 1000 members");
    // 1,000 operations of 10 values, and one more value in the last.
    let ids: Vec<String> = (0..10_001).map(|_| UserId::new().to_string()).collect();
    let operations: Vec<Value> = ids[..10_000]
        .chunks(10)
        .map(|chunk| json!({"op": "add", "path": "members", "value": members(chunk)}))
        .collect();
    let mut over = operations.clone();
    over[999] = json!({"op": "add", "path": "members", "value": members(&ids[9990..])});
    let response = patch(&app, &org, &path, over).await;
    assert_scim_400(&response, "tooMany", "at most 10000");
    // Without it, the largest PATCH: it gets as far as checking the members.
    let response = patch(&app, &org, &path, operations).await;
    assert_scim_400(&response, "invalidValue", "no user");
}

/// Sends GET /v1/users for `org` until `done`, and answers the slowest answer's time.
async fn slowest_read(
    app: &TestApp,
    org: &TestOrg,
    done: tokio::sync::watch::Receiver<bool>,
) -> (Duration, usize) {
    let mut slowest = Duration::ZERO;
    let mut reads = 0;
    while !*done.borrow() {
        let started = Instant::now();
        let response = app.get(org, "/v1/users?limit=10").await;
        assert_eq!(response.status, 200, "{}", response.body);
        slowest = slowest.max(started.elapsed());
        reads += 1;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    (slowest, reads)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scim_largest_patches_are_answered_while_another_orgs_reads_go_on() {
    let app = api_only().await;
    // Organization A: 2,000 users, a group of 1,000 of them, and a user with ten e-mails.
    let (provider, _, _) = app.org_with_users(2000).await;
    let ids = user_ids(&app, &provider).await;
    let group = post(
        &app,
        &provider,
        "/Groups",
        json!({"displayName": "Half", "members": members(&ids[..1000])}),
    )
    .await;
    assert_eq!(group.status, 201, "{}", group.body);
    let group_path = format!("/Groups/{}", group.body["id"].as_str().unwrap());
    let user = post(
        &app,
        &provider,
        "/Users",
        json!({"userName": "big@example.com"}),
    )
    .await;
    assert_eq!(user.status, 201, "{}", user.body);
    let user_path = format!("/Users/{}", user.body["id"].as_str().unwrap());
    // Organization B reads its users meanwhile.
    let reader = app.create_org(Tier::Enterprise).await;
    app.create_users(&reader, &["b1@example.com", "b2@example.com"])
        .await;

    // The largest group PATCH: 1,000 operations of 10 members each; adds the other 1,000,
    // removes 100 by filter and 100 by value list, and re-adds the rest.
    let mut group_operations = Vec::new();
    for chunk in ids[1000..].chunks(10) {
        group_operations.push(json!({"op": "add", "path": "members", "value": members(chunk)}));
    }
    for chunk in ids[..100].chunks(10) {
        let filter = chunk
            .iter()
            .map(|id| format!("value eq \"{id}\""))
            .collect::<Vec<_>>()
            .join(" or ");
        group_operations.push(
            json!({"op": "remove", "path": format!("members[{filter}]"), "value": members(chunk)}),
        );
    }
    for chunk in ids[100..200].chunks(10) {
        group_operations.push(json!({"op": "remove", "path": "members", "value": members(chunk)}));
    }
    let mut again = ids[200..].chunks(10).cycle();
    while group_operations.len() < 1000 {
        let chunk = again.next().unwrap();
        group_operations.push(json!({"op": "add", "path": "members", "value": members(chunk)}));
    }
    // The largest user PATCH: 1,000 operations carrying 10,000 addresses, nine added and
    // removed in turn (with two that are not there), next to the address the user has.
    let mut user_operations = Vec::new();
    for round in 0..500 {
        let batch: Vec<Value> = (0..11)
            .map(|index| json!({"value": format!("r{round}.{index}@example.com")}))
            .collect();
        user_operations.push(json!({"op": "add", "path": "emails", "value": batch[..9]}));
        user_operations.push(json!({"op": "remove", "path": "emails", "value": batch}));
    }

    let (done, watch) = tokio::sync::watch::channel(false);
    let reads = slowest_read(&app, &reader, watch);
    let writes = async {
        let started = Instant::now();
        let (group, user) = tokio::join!(
            patch(&app, &provider, &group_path, group_operations),
            patch(&app, &provider, &user_path, user_operations),
        );
        let took = started.elapsed();
        done.send(true).unwrap();
        (group, user, took)
    };
    let ((slowest, count), (group, user, took)) = tokio::join!(reads, writes);
    assert_eq!(group.status, 200, "{}", group.body);
    assert_eq!(user.status, 200, "{}", user.body);
    assert!(took < Duration::from_secs(30), "the PATCHes took {took:?}");
    assert!(count > 0);
    assert!(
        slowest < Duration::from_secs(2),
        "another organization's read took {slowest:?} during the PATCHes"
    );
    // What they did.
    assert_eq!(group.body["members"].as_array().unwrap().len(), 1800);
    assert_eq!(user.body["emails"].as_array().unwrap().len(), 1);
    let member_count: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM user_group_members m JOIN user_groups g ON g.id = m.group_id
         WHERE g.org_id = $1",
    )
    .bind(provider.id)
    .fetch_one(&app.db)
    .await
    .unwrap();
    assert_eq!(member_count, 1800);
}

#[tokio::test]
async fn scim_group_lists_leave_members_out_unless_asked_and_reads_cost_by_size() {
    let app = api_only().await;
    // Standard: 1,000 reads a minute, so what a read costs shows in RateLimit-Remaining.
    let org = app.create_org(Tier::Standard).await;
    let emails: Vec<String> = (0..1000).map(|i| format!("user{i}@example.com")).collect();
    let emails: Vec<&str> = emails.iter().map(String::as_str).collect();
    app.create_users(&org, &emails).await;
    let ids = user_ids(&app, &org).await;
    let created = post(
        &app,
        &org,
        "/Groups",
        json!({"displayName": "Sales", "members": members(&ids)}),
    )
    .await;
    assert_eq!(created.status, 201, "{}", created.body);
    let path = format!("/Groups/{}", created.body["id"].as_str().unwrap());
    let listed = get(&app, &org, "/Groups").await;
    assert_eq!(listed.status, 200, "{}", listed.body);
    let group = &listed.body["Resources"][0];
    assert_eq!(group["displayName"], json!("Sales"));
    assert!(group.get("members").is_none(), "{group}");
    let listed = get(&app, &org, "/Groups?attributes=displayName,members").await;
    assert_eq!(
        listed.body["Resources"][0]["members"]
            .as_array()
            .unwrap()
            .len(),
        1000
    );
    let one = get(&app, &org, &path).await;
    assert_eq!(one.body["members"].as_array().unwrap().len(), 1000);

    // 1,000 members cost ten reads; the group without them one (what refills between two
    // requests aside).
    let remaining = |response: &TestResponse| -> i64 {
        response
            .header("RateLimit-Remaining")
            .and_then(|text| text.parse().ok())
            .expect("RateLimit-Remaining")
    };
    let before = remaining(&get(&app, &org, &format!("{path}?excludedAttributes=members")).await);
    let after = remaining(&get(&app, &org, &path).await);
    assert!(before - after >= 6, "{before} then {after}");
    let cheap = remaining(&get(&app, &org, &format!("{path}?excludedAttributes=members")).await);
    assert!(after - cheap <= 1, "{after} then {cheap}");
}

#[tokio::test]
async fn scim_a_response_carries_at_most_10000_members() {
    let app = api_only().await;
    let (org, _, _) = app.org_with_users(10_002).await;
    let created = post(&app, &org, "/Groups", json!({"displayName": "Everyone"})).await;
    assert_eq!(created.status, 201, "{}", created.body);
    let id = created.body["id"].as_str().unwrap().to_owned();
    let path = format!("/Groups/{id}");
    // A group grown past the cap (by PATCHes; here directly).
    sqlx::query(
        "INSERT INTO user_group_members (group_id, user_id, org_id)
         SELECT g.id, u.id, u.org_id FROM users u JOIN user_groups g ON g.org_id = u.org_id
         WHERE u.org_id = $1",
    )
    .bind(org.id)
    .execute(&app.db)
    .await
    .unwrap();
    assert_scim_400(
        &get(&app, &org, &path).await,
        "tooMany",
        "more than 10000 members",
    );
    assert_scim_400(
        &get(&app, &org, "/Groups?attributes=members").await,
        "tooMany",
        "more than 10000 members",
    );
    let without = get(&app, &org, &format!("{path}?excludedAttributes=members")).await;
    assert_eq!(without.status, 200, "{}", without.body);
    assert!(without.body.get("members").is_none());
    let listed = get(&app, &org, "/Groups").await;
    assert_eq!(listed.status, 200, "{}", listed.body);
    // A member PATCH still works; its answer is 204 without the members.
    let user = get(&app, &org, "/Users?count=1").await;
    let user_id = user.body["Resources"][0]["id"].as_str().unwrap().to_owned();
    let removed = patch(
        &app,
        &org,
        &path,
        vec![json!({"op": "remove", "path": format!("members[value eq \"{user_id}\"]")})],
    )
    .await;
    assert_eq!(removed.status, 204, "{}", removed.body);
    assert!(removed.header("ETag").is_some());
}

#[tokio::test]
async fn scim_a_user_name_that_is_no_address_is_kept_with_the_address_from_emails() {
    let app = api_only().await;
    let org = app.create_org(Tier::Standard).await;
    // What /Schemas tells a client that sends only required attributes.
    let schema = get(
        &app,
        &org,
        "/Schemas/urn:ietf:params:scim:schemas:core:2.0:User",
    )
    .await;
    let attributes = schema.body["attributes"].as_array().unwrap();
    let emails = attributes
        .iter()
        .find(|a| a["name"] == json!("emails"))
        .unwrap();
    assert_eq!(emails["required"], json!(true));
    // A login as userName, the address in emails: both kept.
    let created = post(
        &app,
        &org,
        "/Users",
        json!({"userName": "jdoe", "emails": [{"value": "jane.doe@example.com", "primary": true}]}),
    )
    .await;
    assert_eq!(created.status, 201, "{}", created.body);
    assert_eq!(created.body["userName"], json!("jdoe"));
    let id = created.body["id"].as_str().unwrap().to_owned();
    let found = get(&app, &org, "/Users?filter=userName%20eq%20%22JDOE%22").await;
    assert_eq!(found.body["totalResults"], json!(1), "{}", found.body);
    assert_eq!(found.body["Resources"][0]["id"], json!(id));
    // The same user for /v1, by the address.
    let listed = app.get(&org, "/v1/users?email=jane.doe@example.com").await;
    assert!(
        listed.body.to_string().contains("jane.doe@example.com"),
        "{}",
        listed.body
    );
    // The name is unique; a name without any address is refused.
    let again = post(
        &app,
        &org,
        "/Users",
        json!({"userName": "JDoe", "emails": [{"value": "other@example.com"}]}),
    )
    .await;
    assert_eq!(again.status, 409, "{}", again.body);
    assert_scim_400(
        &post(&app, &org, "/Users", json!({"userName": "nobody"})).await,
        "invalidValue",
        "userName must be a valid e-mail address",
    );
    // Renamed to an address: the name goes, the address is the userName.
    let renamed = patch(
        &app,
        &org,
        &format!("/Users/{id}"),
        vec![json!({"op": "replace", "path": "userName", "value": "jane@example.com"})],
    )
    .await;
    assert_eq!(renamed.status, 200, "{}", renamed.body);
    assert_eq!(renamed.body["userName"], json!("jane@example.com"));
    // Searching several resource types at once is not supported.
    let search = post(&app, &org, "/.search", json!({"filter": "userName pr"})).await;
    assert_eq!(search.status, 501, "{}", search.body);
}
