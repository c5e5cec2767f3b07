//! The assign pipeline end to end: API → RabbitMQ → assign-worker → Postgres.

use std::time::Duration;

use flow_common::db::assignments::{self, LookupKey, RequestKey};
use flow_common::db::orgs::Tier;
use flow_domain::ids::{AssignmentId, FlowId};
use flow_tests::TestApp;
use serde_json::json;

#[tokio::test]
async fn assign_returns_every_seed_field_and_the_assignment_becomes_readable() {
    let app = TestApp::spawn().await;
    let org = app.create_org(Tier::Standard).await;
    app.create_users(&org, &["alice@example.com"]).await;
    let flow = app.create_flow(&org, "Security Basics", &[90, 60]).await;

    let response = app
        .post(
            &org,
            "/v1/flows/assign",
            &json!({
                "flowId": flow, "userEmail": "Alice@Example.com", "dueDate": "2099-01-31",
                "priority": "high", "notes": "Welcome!"
            }),
        )
        .await;
    assert_eq!(response.status, 200, "{:?}", response.body);
    let body = &response.body;
    assert_eq!(body["success"], json!(true));
    let id = body["assignmentId"]
        .as_str()
        .expect("assignmentId is a string");
    assert!(id.starts_with("asg_"));
    assert_eq!(
        body["message"],
        json!("Flow \"Security Basics\" assigned to alice@example.com")
    );
    let details = &body["details"];
    let assigned_at = details["assignedAt"]
        .as_str()
        .expect("assignedAt is a string");
    assert!(
        chrono::DateTime::parse_from_rfc3339(assigned_at).is_ok() && assigned_at.ends_with('Z')
    );
    assert_eq!(details["assigneeEmail"], json!("alice@example.com"));
    assert_eq!(details["flowName"], json!("Security Basics"));
    assert_eq!(details["moduleCount"], json!(2));
    assert_eq!(details["estimatedDuration"], json!("2 hours 30 minutes"));
    assert!(response.header("x-request-id").is_some());
    assert_eq!(response.header("ratelimit-limit"), Some("100"));

    let path = format!("/v1/assignments/{id}");
    let stored = app
        .eventually(
            Duration::from_secs(10),
            "the assignment to be persisted",
            || async {
                let response = app.get(&org, &path).await;
                (response.status == 200).then_some(response.body)
            },
        )
        .await;
    assert_eq!(stored["assignmentId"], json!(id));
    assert_eq!(stored["status"], json!("pending"));
    assert_eq!(stored["priority"], json!("high"));
    assert_eq!(stored["notes"], json!("Welcome!"));
    assert_eq!(stored["dueDate"], json!("2099-01-31T23:59:59.000Z"));
    assert_eq!(stored["assignedAt"], json!(assigned_at));
    assert_eq!(stored["totalModules"], json!(2));
    assert_eq!(stored["completedModules"], json!(0));
    // Every module of the flow is listed, in order, with the ids progress calls need.
    let modules = app.module_ids(&org, &flow).await;
    assert_eq!(
        stored["moduleProgress"],
        json!([
            {"moduleId": modules[0], "moduleName": "Module 1", "status": "not_started"},
            {"moduleId": modules[1], "moduleName": "Module 2", "status": "not_started"},
        ])
    );

    let events: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM outbox WHERE event_type = 'flow.assigned' AND payload->'data'->>'assignmentId' = $1",
    )
    .bind(id)
    .fetch_one(&app.db)
    .await
    .unwrap();
    assert_eq!(
        events, 1,
        "one flow.assigned event is written with the assignment"
    );
}

/// An organization with one flow and some users, ready to assign.
async fn setup(app: &TestApp, emails: &[&str]) -> (flow_tests::TestOrg, String) {
    let org = app.create_org(Tier::Enterprise).await;
    app.create_users(&org, emails).await;
    let flow = app.create_flow(&org, "Onboarding", &[30, 30]).await;
    (org, flow)
}

async fn assign(
    app: &TestApp,
    org: &flow_tests::TestOrg,
    flow: &str,
    email: &str,
) -> flow_tests::TestResponse {
    app.post(
        org,
        "/v1/flows/assign",
        &json!({ "flowId": flow, "userEmail": email }),
    )
    .await
}

async fn wait_persisted(app: &TestApp, org: &flow_tests::TestOrg, id: &str) -> serde_json::Value {
    let path = format!("/v1/assignments/{id}");
    app.eventually(
        Duration::from_secs(15),
        "the assignment to resolve",
        || async {
            let response = app.get(org, &path).await;
            (response.status == 200).then_some(response.body)
        },
    )
    .await
}

#[tokio::test]
async fn same_request_id_twice_returns_the_same_assignment_and_creates_one() {
    let app = TestApp::spawn().await;
    let (org, flow) = setup(&app, &["bob@example.com"]).await;
    let body = json!({ "flowId": flow, "userEmail": "bob@example.com" });
    let headers = [("X-Request-ID", "hr-sync-42")];
    let first = app
        .post_with(&org, "/v1/flows/assign", &body, &headers)
        .await;
    let second = app
        .post_with(&org, "/v1/flows/assign", &body, &headers)
        .await;
    assert_eq!(first.status, 200, "{:?}", first.body);
    assert_eq!(second.status, 200, "{:?}", second.body);
    assert_eq!(first.header("x-request-id"), Some("hr-sync-42"));
    let id = first.body["assignmentId"].as_str().unwrap();
    assert_eq!(second.body["assignmentId"], json!(id));
    let stored = wait_persisted(&app, &org, id).await;
    // Both answers came before the worker persisted anything; whichever command it applied first
    // set the stored time. A retry after persistence answers with the stored details.
    assert!(
        [
            &first.body["details"]["assignedAt"],
            &second.body["details"]["assignedAt"]
        ]
        .contains(&&stored["assignedAt"])
    );
    let third = app
        .post_with(&org, "/v1/flows/assign", &body, &headers)
        .await;
    assert_eq!(third.body["assignmentId"], json!(id));
    assert_eq!(third.body["details"]["assignedAt"], stored["assignedAt"]);
    assert_eq!(app.assignment_count().await, 1);
}

#[tokio::test]
async fn request_id_reused_for_a_different_assignment_is_409_conflict() {
    let app = TestApp::spawn().await;
    let (org, flow) = setup(&app, &["a@example.com", "b@example.com"]).await;
    let headers = [("X-Request-ID", "reused")];
    let first = app
        .post_with(
            &org,
            "/v1/flows/assign",
            &json!({ "flowId": flow, "userEmail": "a@example.com" }),
            &headers,
        )
        .await;
    assert_eq!(first.status, 200);
    wait_persisted(&app, &org, first.body["assignmentId"].as_str().unwrap()).await;
    let other = app
        .post_with(
            &org,
            "/v1/flows/assign",
            &json!({ "flowId": flow, "userEmail": "b@example.com" }),
            &headers,
        )
        .await;
    assert_eq!(other.status, 409, "{:?}", other.body);
    assert_eq!(other.body["error"], json!("conflict"));
    assert_eq!(app.assignment_count().await, 1);
}

#[tokio::test]
async fn assigning_an_active_flow_again_returns_the_existing_assignment() {
    let app = TestApp::spawn().await;
    let (org, flow) = setup(&app, &["carol@example.com"]).await;
    let first = assign(&app, &org, &flow, "carol@example.com").await;
    let id = first.body["assignmentId"].as_str().unwrap().to_owned();
    wait_persisted(&app, &org, &id).await;
    let again = assign(&app, &org, &flow, "CAROL@example.com").await;
    assert_eq!(again.status, 200, "{:?}", again.body);
    assert_eq!(again.body["assignmentId"], json!(id));
    assert_eq!(
        again.body["message"],
        json!("Flow \"Onboarding\" is already assigned to carol@example.com")
    );
    assert_eq!(
        again.body["details"]["assignedAt"],
        first.body["details"]["assignedAt"]
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(app.assignment_count().await, 1);
}

#[tokio::test]
async fn twenty_concurrent_assigns_of_one_flow_to_one_user_end_as_one_assignment() {
    let app = TestApp::spawn().await;
    let (org, flow) = setup(&app, &["dave@example.com"]).await;
    let responses =
        futures::future::join_all((0..20).map(|_| assign(&app, &org, &flow, "dave@example.com")))
            .await;
    let mut ids = Vec::new();
    for response in &responses {
        assert_eq!(response.status, 200, "{:?}", response.body);
        ids.push(response.body["assignmentId"].as_str().unwrap().to_owned());
    }
    let mut resolved = std::collections::HashSet::new();
    for id in &ids {
        let stored = wait_persisted(&app, &org, id).await;
        resolved.insert(stored["assignmentId"].as_str().unwrap().to_owned());
    }
    assert_eq!(
        resolved.len(),
        1,
        "every id resolves to the same assignment: {resolved:?}"
    );
    assert_eq!(app.assignment_count().await, 1);
    let events: i64 =
        sqlx::query_scalar("SELECT count(*) FROM outbox WHERE event_type = 'flow.assigned'")
            .fetch_one(&app.db)
            .await
            .unwrap();
    assert_eq!(events, 1, "one assignment, one flow.assigned event");
}

#[tokio::test]
async fn bulk_assign_answers_each_item_and_allows_partial_success() {
    let app = TestApp::spawn().await;
    let (org, flow) = setup(&app, &["e1@example.com", "e2@example.com"]).await;
    let response = app
        .post(&org, "/v1/flows/assign/bulk", &json!({ "assignments": [
            { "flowId": flow, "userEmail": "e1@example.com", "priority": "low" },
            { "flowId": flow, "userEmail": "nobody@example.com" },
            { "flowId": flow, "userEmail": "e2@example.com", "priority": "urgent" },
            { "flowId": "flow_00000000000000000000000000000000", "userEmail": "e2@example.com" },
            { "flowId": flow, "userEmail": "e2@example.com", "dueDate": "2099-06-01T12:00:00Z" },
        ]}))
        .await;
    assert_eq!(response.status, 200, "{:?}", response.body);
    let results = response.body["results"].as_array().unwrap();
    let statuses: Vec<u64> = results
        .iter()
        .map(|item| item["status"].as_u64().unwrap())
        .collect();
    assert_eq!(statuses, vec![200, 404, 400, 404, 200]);
    assert_eq!(response.body["succeeded"], json!(2));
    assert_eq!(response.body["failed"], json!(3));
    assert_eq!(
        results[2]["error"]["message"],
        json!("priority must be one of: low, medium, high")
    );
    for index in [0, 4] {
        let id = results[index]["result"]["assignmentId"].as_str().unwrap();
        wait_persisted(&app, &org, id).await;
    }
    assert_eq!(app.assignment_count().await, 2);
}

#[tokio::test]
async fn bulk_items_beyond_the_rate_limit_are_429_individually() {
    let app = TestApp::spawn().await;
    let org = app.create_org_with(Tier::Standard, Some(3)).await;
    let emails: Vec<String> = (0..5).map(|i| format!("p{i}@example.com")).collect();
    let refs: Vec<&str> = emails.iter().map(String::as_str).collect();
    app.create_users(&org, &refs).await;
    let flow = app.create_flow(&org, "F", &[10]).await;
    let items = flow_tests::assign_items(&flow, &emails);
    let response = app.assign_bulk(&org, &items, &[]).await;
    assert_eq!(response.status, 200, "{:?}", response.body);
    let statuses: Vec<u64> = response.body["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|item| item["status"].as_u64().unwrap())
        .collect();
    assert_eq!(statuses, vec![200, 200, 200, 429, 429]);
    assert!(
        response.body["results"][3]["error"]["retry_after"]
            .as_u64()
            .unwrap()
            >= 1
    );
    let again = app
        .post(
            &org,
            "/v1/flows/assign/bulk",
            &json!({ "assignments": [items[3].clone()] }),
        )
        .await;
    assert_eq!(again.status, 429, "no allowance left at all is a plain 429");
}

#[tokio::test]
async fn assignments_are_invisible_to_other_organizations() {
    let app = TestApp::spawn().await;
    let (org, flow) = setup(&app, &["f@example.com"]).await;
    let other = app.create_org(Tier::Standard).await;
    app.create_users(&other, &["f@example.com"]).await;
    let response = assign(&app, &org, &flow, "f@example.com").await;
    let id = response.body["assignmentId"].as_str().unwrap().to_owned();
    wait_persisted(&app, &org, &id).await;
    let foreign = app.get(&other, &format!("/v1/assignments/{id}")).await;
    assert_eq!(foreign.status, 404);
    assert_eq!(foreign.body["error"], json!("not_found"));
    let missing = app
        .get(
            &other,
            "/v1/assignments/asg_00000000000000000000000000000000",
        )
        .await;
    assert_eq!(
        missing.body, foreign.body,
        "another org's id answers exactly like a missing one"
    );
    let foreign_flow = assign(&app, &other, &flow, "f@example.com").await;
    assert_eq!(foreign_flow.status, 404);
    assert_eq!(foreign_flow.body["message"], json!("flow not found"));
}

#[tokio::test]
async fn the_lookup_probes_users_by_index_however_many_the_server_holds() {
    // A lookup of 1,000 keys (a bulk request) once planned a hash join over every user of the
    // server, read in full on each call: its cost grew with all organizations' users, not with
    // the keys. Each key must be an index probe.
    let app = TestApp::spawn().await;
    let (org, flow, emails) = app.org_with_users(20_000).await;
    let flow = FlowId::parse(&flow).unwrap();
    sqlx::query("ANALYZE users").execute(&app.db).await.unwrap();
    let keys: Vec<LookupKey> = emails
        .iter()
        .step_by(20)
        .map(|email| LookupKey {
            org_id: org.id,
            flow_id: flow,
            email_normalized: email.clone(),
            request: None,
        })
        .collect();
    let mut transaction = app.db.begin().await.unwrap();
    let scans = "SELECT seq_scan FROM pg_stat_xact_user_tables WHERE relname = 'users'";
    let before: i64 = sqlx::query_scalar(scans)
        .fetch_one(&mut *transaction)
        .await
        .unwrap();
    let results = assignments::lookup(&mut *transaction, &keys).await.unwrap();
    let after: i64 = sqlx::query_scalar(scans)
        .fetch_one(&mut *transaction)
        .await
        .unwrap();
    assert_eq!(results.len(), 1_000);
    assert!(
        results
            .iter()
            .zip(&keys)
            .all(|(result, key)| result.user.as_ref().map(|(_, email)| email)
                == Some(&key.email_normalized)),
        "every key resolves to its own user"
    );
    assert_eq!(after - before, 0, "no sequential scan of users");
}

#[tokio::test]
async fn two_lookups_claiming_the_same_request_ids_in_opposite_orders_do_not_deadlock() {
    // Two API replicas receive the same retried requests in different orders, and each claims
    // their X-Request-IDs in one lookup statement. Claimed in the order the requests arrived,
    // the two statements locked the same claim rows in opposite orders and Postgres aborted one
    // of them as a deadlock (its requests answered 503).
    let app = TestApp::spawn().await;
    let (org, flow, emails) = app.org_with_users(400).await;
    let flow = FlowId::parse(&flow).unwrap();
    for round in 0..10 {
        let keys: Vec<LookupKey> = emails
            .iter()
            .enumerate()
            .map(|(index, email)| LookupKey {
                org_id: org.id,
                flow_id: flow,
                email_normalized: email.clone(),
                request: Some(RequestKey {
                    assignment_id: AssignmentId::for_request(
                        org.id,
                        &format!("retry-{round}-{index}"),
                    ),
                    fingerprint: [7; 32],
                    assigned_at: chrono::Utc::now(),
                }),
            })
            .collect();
        let reversed: Vec<LookupKey> = keys.iter().rev().cloned().collect();
        let (forward, backward) = tokio::join!(
            assignments::lookup(&app.db, &keys),
            assignments::lookup(&app.db, &reversed)
        );
        let (forward, backward) = (
            forward.unwrap_or_else(|error| panic!("round {round}: {error}")),
            backward.unwrap_or_else(|error| panic!("round {round}: {error}")),
        );
        assert!(
            forward
                .iter()
                .zip(backward.iter().rev())
                .all(|(a, b)| a.claim == b.claim && a.claim.is_some()),
            "both statements read the same claim of each key"
        );
    }
}
