//! The assign pipeline end to end: API → RabbitMQ → assign-worker → Postgres.

use std::time::Duration;

use flow_common::db::orgs::Tier;
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
    assert_eq!(stored["moduleProgress"], json!([]));

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
