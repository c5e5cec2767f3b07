//! Module results (score, success, time spent) and `POST /v1/progress/bulk` (issue 38): results
//! recorded with progress show in `GET /v1/assignments/{id}` and in the detailed report's
//! `moduleProgress`; a bulk request answers each item in order (accepted, unchanged, duplicate,
//! invalid, not_found, conflict) and takes at most 1,000 items.

use std::time::Duration;

use flow_common::db::orgs::Tier;
use flow_tests::{TestApp, TestOrg};
use serde_json::{Value, json};

/// An org with `emails` as users and a flow of `modules` modules; returns the org, the flow and
/// its module ids.
async fn setup(
    app: &TestApp,
    tier: Tier,
    emails: &[&str],
    modules: usize,
) -> (TestOrg, String, Vec<String>) {
    let org = app.create_org(tier).await;
    app.create_users(&org, emails).await;
    let minutes = vec![10; modules];
    let flow = app.create_flow(&org, "Security Basics", &minutes).await;
    let module_ids = app.module_ids(&org, &flow).await;
    (org, flow, module_ids)
}

/// The moduleProgress entry of `module` in the assignment, once it has `field`.
async fn module_entry(app: &TestApp, org: &TestOrg, id: &str, module: &str, field: &str) -> Value {
    let path = format!("/v1/assignments/{id}");
    app.eventually(Duration::from_secs(10), "the module's result", || async {
        let body = app.get(org, &path).await.body;
        body["moduleProgress"].as_array().and_then(|entries| {
            entries
                .iter()
                .find(|entry| entry["moduleId"] == json!(module) && !entry[field].is_null())
                .cloned()
        })
    })
    .await
}

async fn bulk(app: &TestApp, org: &TestOrg, items: Vec<Value>) -> (u16, Value) {
    let response = app
        .post(org, "/v1/progress/bulk", &json!({ "items": items }))
        .await;
    (response.status, response.body)
}

#[tokio::test]
async fn a_result_recorded_with_progress_shows_in_the_assignment_and_the_detailed_report() {
    let app = TestApp::spawn().await;
    let (org, flow, modules) = setup(&app, Tier::Standard, &["ann@example.com"], 2).await;
    let id = app
        .assign_persisted(&org, &flow, "ann@example.com", json!({}))
        .await;
    let path = format!("/v1/assignments/{id}/progress");

    let refused = app
        .post(
            &org,
            &path,
            &json!({ "moduleId": modules[0], "status": "completed", "score": 85 }),
        )
        .await;
    assert_eq!(refused.status, 400, "{:?}", refused.body);
    assert!(
        refused.body["message"].as_str().unwrap().contains("score"),
        "{:?}",
        refused.body
    );
    let refused = app
        .post(
            &org,
            &path,
            &json!({ "moduleId": modules[0], "status": "completed", "durationSeconds": -1 }),
        )
        .await;
    assert_eq!(refused.status, 400, "{:?}", refused.body);

    let accepted = app
        .post(
            &org,
            &path,
            &json!({ "moduleId": modules[0], "status": "completed", "score": 0.85,
                     "success": true, "durationSeconds": 600 }),
        )
        .await;
    assert_eq!(accepted.status, 202, "{:?}", accepted.body);
    let entry = module_entry(&app, &org, &id, &modules[0], "score").await;
    assert_eq!(entry["status"], json!("completed"));
    assert_eq!(entry["score"], json!(0.85));
    assert_eq!(entry["success"], json!(true));
    assert_eq!(entry["durationSeconds"], json!(600));

    // A failed attempt of the second module keeps it in progress with its result.
    let failed = app
        .post(
            &org,
            &path,
            &json!({ "moduleId": modules[1], "status": "in_progress", "score": 0.4,
                     "success": false }),
        )
        .await;
    assert_eq!(failed.status, 202, "{:?}", failed.body);
    let entry = module_entry(&app, &org, &id, &modules[1], "success").await;
    assert_eq!(entry["status"], json!("in_progress"));
    assert_eq!(entry["success"], json!(false));
    assert!(entry.get("durationSeconds").is_none(), "{entry:?}");

    let report = app
        .post(
            &org,
            "/v1/flows/report",
            &json!({ "flowId": flow, "detailed": true }),
        )
        .await;
    assert_eq!(report.status, 200, "{:?}", report.body);
    let progress = &report.body["assignments"][0]["moduleProgress"];
    assert_eq!(progress[0]["score"], json!(0.85));
    assert_eq!(progress[0]["success"], json!(true));
    assert_eq!(progress[0]["durationSeconds"], json!(600));
    assert_eq!(progress[1]["score"], json!(0.4));
    assert_eq!(progress[1]["success"], json!(false));
    assert_eq!(
        app.get(&org, &format!("/v1/assignments/{id}")).await.body["status"],
        json!("in_progress")
    );
}

#[tokio::test]
async fn bulk_progress_answers_each_item_in_order() {
    let app = TestApp::spawn().await;
    let (org, flow, modules) = setup(
        &app,
        Tier::Standard,
        &["ann@example.com", "bob@example.com"],
        2,
    )
    .await;
    let ann = app
        .assign_persisted(&org, &flow, "ann@example.com", json!({}))
        .await;
    let bob = app
        .assign_persisted(&org, &flow, "bob@example.com", json!({}))
        .await;
    let other_flow = app.create_flow(&org, "Other", &[5]).await;
    let foreign_module = app.module_ids(&org, &other_flow).await.remove(0);
    let done = json!({ "assignmentId": ann, "moduleId": modules[0], "status": "completed",
                       "score": 0.9, "success": true, "durationSeconds": 120,
                       "at": "2020-01-01" });
    let (status, body) = bulk(
        &app,
        &org,
        vec![
            done.clone(),
            json!({ "flowId": flow, "userEmail": "BOB@example.com", "moduleId": modules[0],
                    "status": "in_progress" }),
            done.clone(),
            json!({ "assignmentId": ann, "moduleId": modules[1], "status": "finished" }),
            json!({ "assignmentId": "asg_0193a1b2c3d47e8f9a0b1c2d3e4f5a6b", "moduleId": modules[0],
                    "status": "completed" }),
            json!({ "assignmentId": ann, "moduleId": foreign_module, "status": "completed" }),
            json!({ "moduleId": modules[0], "status": "completed" }),
            json!({ "flowId": flow, "userEmail": "nobody@example.com", "moduleId": modules[0],
                    "status": "completed" }),
            json!({ "assignmentId": ann, "moduleId": modules[1], "status": "completed",
                    "score": 2 }),
        ],
    )
    .await;
    assert_eq!(status, 200, "{body:?}");
    let outcomes: Vec<&str> = body["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|item| item["outcome"].as_str().unwrap())
        .collect();
    // "at" 2020-01-01 is before the assignment: the first item is invalid, as is its repeat.
    assert_eq!(
        outcomes,
        vec![
            "invalid",
            "accepted",
            "invalid",
            "invalid",
            "not_found",
            "not_found",
            "invalid",
            "not_found",
            "invalid"
        ],
        "{body:?}"
    );
    assert!(
        body["results"][0]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("assignedAt"),
        "{body:?}"
    );
    assert_eq!(body["results"][1]["status"], json!(202));
    assert_eq!(body["results"][1]["result"]["assignmentId"], json!(bob));
    assert_eq!(body["succeeded"], json!(1));
    assert_eq!(body["failed"], json!(8));
    app.wait_for_status(&org, &bob, "in_progress").await;

    // Without the bad date: accepted once, the repeat a duplicate; both modules of Ann completes
    // her assignment.
    let mut done = done;
    done.as_object_mut().unwrap().remove("at");
    let (status, body) = bulk(
        &app,
        &org,
        vec![
            done.clone(),
            done.clone(),
            json!({ "assignmentId": ann, "moduleId": modules[1], "status": "completed",
                    "success": false }),
            json!({ "flowId": flow, "userEmail": "bob@example.com", "moduleId": modules[0],
                    "status": "in_progress" }),
        ],
    )
    .await;
    assert_eq!(status, 200, "{body:?}");
    let outcomes: Vec<&str> = body["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|item| item["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(
        outcomes,
        vec!["accepted", "duplicate", "accepted", "unchanged"],
        "{body:?}"
    );
    let finished = app.wait_for_status(&org, &ann, "completed").await;
    let progress = finished["moduleProgress"].as_array().unwrap();
    assert_eq!(progress[0]["score"], json!(0.9));
    assert_eq!(progress[0]["durationSeconds"], json!(120));
    assert_eq!(progress[1]["success"], json!(false));
    assert_eq!(
        app.events_of(&ann).await,
        vec!["flow.assigned", "flow.started", "flow.completed"]
    );
    // The events of bulk progress travel in the bulk lane.
    let lanes: Vec<bool> = sqlx::query_scalar(
        "SELECT interactive FROM outbox WHERE assignment_id = $1 AND event_type <> 'flow.assigned'",
    )
    .bind(flow_domain::ids::AssignmentId::parse(&ann).unwrap())
    .fetch_all(&app.db)
    .await
    .unwrap();
    assert_eq!(lanes, vec![false, false], "not the interactive lane");

    // A completed assignment takes no more progress: conflict.
    let (_, body) = bulk(&app, &org, vec![done]).await;
    assert_eq!(body["results"][0]["outcome"], json!("conflict"), "{body:?}");
    assert_eq!(body["results"][0]["status"], json!(409));
}

#[tokio::test]
async fn bulk_progress_takes_between_1_and_1000_items() {
    let app = TestApp::spawn().await;
    let (org, flow, modules) = setup(&app, Tier::Enterprise, &["ann@example.com"], 1).await;
    let id = app
        .assign_persisted(&org, &flow, "ann@example.com", json!({}))
        .await;
    let item = json!({ "assignmentId": id, "moduleId": modules[0], "status": "completed" });
    let (status, body) = bulk(&app, &org, vec![item.clone(); 1_001]).await;
    assert_eq!(status, 400, "{body:?}");
    assert!(
        body["message"].as_str().unwrap().contains("1000"),
        "{body:?}"
    );
    let (status, _) = bulk(&app, &org, Vec::new()).await;
    assert_eq!(status, 400);
    let (status, body) = bulk(&app, &org, vec![json!({ "bogus": 1 })]).await;
    assert_eq!(status, 400, "{body:?}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        app.get(&org, &format!("/v1/assignments/{id}")).await.body["status"],
        json!("pending"),
        "nothing of a refused request applies"
    );
    let (status, body) = bulk(&app, &org, vec![item; 1_000]).await;
    assert_eq!(status, 200, "{body:?}");
    assert_eq!(body["results"].as_array().unwrap().len(), 1_000);
    assert_eq!(body["results"][0]["outcome"], json!("accepted"));
    assert_eq!(body["results"][999]["outcome"], json!("duplicate"));
    app.wait_for_status(&org, &id, "completed").await;
}
