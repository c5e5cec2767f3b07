//! The lifecycle after assignment: module progress (pending → in_progress → completed), the
//! overdue scan, the assignment list, and exactly one event per transition.

use std::time::Duration;

use flow_common::db::orgs::Tier;
use flow_tests::{TestApp, TestOptions};
use serde_json::json;

async fn progress(
    app: &TestApp,
    org: &flow_tests::TestOrg,
    assignment: &str,
    module: &str,
    status: &str,
) -> flow_tests::TestResponse {
    app.post(
        org,
        &format!("/v1/assignments/{assignment}/progress"),
        &json!({ "moduleId": module, "status": status }),
    )
    .await
}

#[tokio::test]
async fn progress_moves_an_assignment_through_started_and_completed_with_one_event_each() {
    let app = TestApp::spawn().await;
    let org = app.create_org(Tier::Standard).await;
    app.create_users(&org, &["alice@example.com"]).await;
    let flow = app.create_flow(&org, "Onboarding", &[30, 30, 30]).await;
    let modules = app.module_ids(&org, &flow).await;
    let id = app
        .assign_persisted(&org, &flow, "alice@example.com", json!({}))
        .await;
    assert_eq!(app.events_of(&id).await, ["flow.assigned"]);

    let accepted = progress(&app, &org, &id, &modules[0], "in_progress").await;
    assert_eq!(accepted.status, 202, "{:?}", accepted.body);
    assert_eq!(accepted.body["accepted"], json!(true));
    assert_eq!(accepted.body["assignmentId"], json!(id));
    assert_eq!(accepted.body["status"], json!("in_progress"));
    let started = app.wait_for_status(&org, &id, "in_progress").await;
    assert!(started["startedAt"].is_string());
    assert_eq!(started["completedModules"], json!(0));
    assert_eq!(started["moduleProgress"][0]["status"], json!("in_progress"));
    assert!(started["moduleProgress"][0]["startedAt"].is_string());
    // The modules nothing was reported of are listed too, in flow order.
    let listed: Vec<(&str, &str)> = started["moduleProgress"]
        .as_array()
        .expect("progress")
        .iter()
        .map(|module| {
            (
                module["moduleId"].as_str().unwrap(),
                module["status"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        listed,
        [
            (modules[0].as_str(), "in_progress"),
            (modules[1].as_str(), "not_started"),
            (modules[2].as_str(), "not_started"),
        ]
    );
    assert!(started["moduleProgress"][1].get("startedAt").is_none());

    // More activity on an started assignment emits nothing new until the last module.
    for module in &modules {
        let response = progress(&app, &org, &id, module, "completed").await;
        assert_eq!(response.status, 202, "{:?}", response.body);
    }
    let completed = app.wait_for_status(&org, &id, "completed").await;
    assert_eq!(completed["completedModules"], json!(3));
    assert!(completed["completedAt"].is_string());
    let progress_list = completed["moduleProgress"].as_array().expect("progress");
    assert_eq!(progress_list.len(), 3);
    assert!(
        progress_list
            .iter()
            .all(|module| module["status"] == json!("completed")
                && module["completedAt"].is_string())
    );
    assert_eq!(
        app.events_of(&id).await,
        ["flow.assigned", "flow.started", "flow.completed"]
    );

    // Completed is final.
    let late = progress(&app, &org, &id, &modules[0], "in_progress").await;
    assert_eq!(late.status, 409, "{:?}", late.body);
    assert_eq!(late.body["error"], json!("conflict"));
}

#[tokio::test]
async fn completing_every_module_at_once_starts_and_completes_in_order() {
    let app = TestApp::spawn().await;
    let org = app.create_org(Tier::Standard).await;
    app.create_users(&org, &["bob@example.com"]).await;
    let flow = app.create_flow(&org, "One module", &[10]).await;
    let modules = app.module_ids(&org, &flow).await;
    let id = app
        .assign_persisted(&org, &flow, "bob@example.com", json!({}))
        .await;
    let assigned = app.get(&org, &format!("/v1/assignments/{id}")).await;
    let assigned_at = chrono::DateTime::parse_from_rfc3339(
        assigned.body["assignedAt"].as_str().expect("assignedAt"),
    )
    .expect("timestamp");
    tokio::time::sleep(Duration::from_millis(20)).await;
    let at = (assigned_at + chrono::Duration::milliseconds(10)).to_rfc3339();
    let response = app
        .post(
            &org,
            &format!("/v1/assignments/{id}/progress"),
            &json!({ "moduleId": modules[0], "status": "completed", "at": at }),
        )
        .await;
    assert_eq!(response.status, 202, "{:?}", response.body);
    let completed = app.wait_for_status(&org, &id, "completed").await;
    assert_eq!(completed["startedAt"], completed["completedAt"]);
    assert_eq!(
        app.events_of(&id).await,
        ["flow.assigned", "flow.started", "flow.completed"]
    );
    // The user can be assigned the flow again once it is completed: a new assignment.
    let again = app
        .assign_persisted(&org, &flow, "bob@example.com", json!({}))
        .await;
    assert_ne!(again, id);
}

#[tokio::test]
async fn progress_errors_are_404_400_and_409_with_the_error_body() {
    let app = TestApp::spawn().await;
    let org = app.create_org(Tier::Standard).await;
    let other = app.create_org(Tier::Standard).await;
    app.create_users(&org, &["carol@example.com"]).await;
    let flow = app.create_flow(&org, "Flow", &[10, 10]).await;
    let other_flow = app.create_flow(&org, "Other flow", &[10]).await;
    let modules = app.module_ids(&org, &flow).await;
    let foreign_module = app.module_ids(&org, &other_flow).await.remove(0);
    let id = app
        .assign_persisted(&org, &flow, "carol@example.com", json!({}))
        .await;

    let cases = [
        (
            json!({ "status": "completed" }),
            400,
            "moduleId is required",
        ),
        (json!({ "moduleId": modules[0] }), 400, "status is required"),
        (
            json!({ "moduleId": modules[0], "status": "done" }),
            400,
            "status must be one of: in_progress, completed",
        ),
        (
            json!({ "moduleId": modules[0], "status": "completed", "at": "2999-01-01T00:00:00Z" }),
            400,
            "at must not be in the future",
        ),
        (
            json!({ "moduleId": modules[0], "status": "completed", "at": "2001-01-01T00:00:00Z" }),
            400,
            "at must not be before the assignment's assignedAt",
        ),
        (
            json!({ "moduleId": modules[0], "status": "completed", "extra": 1 }),
            400,
            "unknown field: extra",
        ),
        (
            json!({ "moduleId": foreign_module, "status": "completed" }),
            404,
            "module not found in the assignment's flow",
        ),
        (
            json!({ "moduleId": "mod_nope", "status": "completed" }),
            404,
            "module not found in the assignment's flow",
        ),
    ];
    for (body, status, message) in cases {
        let response = app
            .post(&org, &format!("/v1/assignments/{id}/progress"), &body)
            .await;
        assert_eq!(response.status, status, "{body}: {:?}", response.body);
        assert_eq!(response.body["message"], json!(message), "{body}");
    }
    let body = json!({ "moduleId": modules[0], "status": "completed" });
    for path in [
        format!(
            "/v1/assignments/{}/progress",
            flow_domain::ids::AssignmentId::new()
        ),
        "/v1/assignments/nonsense/progress".to_owned(),
    ] {
        let response = app.post(&org, &path, &body).await;
        assert_eq!(response.status, 404, "{:?}", response.body);
        assert_eq!(response.body["error"], json!("not_found"));
    }
    // Another organization's assignment is one that does not exist.
    let response = app
        .post(&other, &format!("/v1/assignments/{id}/progress"), &body)
        .await;
    assert_eq!(response.status, 404);
    let response = app
        .request(
            reqwest::Method::POST,
            &format!("/v1/assignments/{id}/progress"),
            None,
            Some(&body),
            &[],
        )
        .await;
    assert_eq!(response.status, 401);
    // Nothing was applied by the refused requests.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(app.events_of(&id).await, ["flow.assigned"]);
}

#[tokio::test]
async fn each_transition_emits_one_event_across_duplicates_and_a_killed_worker() {
    let mut app = TestApp::spawn().await;
    let org = app.create_org(Tier::Enterprise).await;
    let emails: Vec<String> = (0..40).map(|i| format!("user{i}@example.com")).collect();
    let email_refs: Vec<&str> = emails.iter().map(String::as_str).collect();
    app.create_users(&org, &email_refs).await;
    let flow = app.create_flow(&org, "Two modules", &[5, 5]).await;
    let modules = app.module_ids(&org, &flow).await;
    let mut ids = Vec::new();
    for email in &emails {
        ids.push(app.assign_persisted(&org, &flow, email, json!({})).await);
    }
    // Stop the worker, queue every update twice (a client retrying), then start a worker, kill it
    // while it works through them, and start another: redelivered commands apply once.
    app.assign_worker
        .take()
        .expect("worker")
        .stop()
        .expect("stop");
    for id in &ids {
        for module in &modules {
            for _ in 0..2 {
                let response = progress(&app, &org, id, module, "completed").await;
                assert_eq!(response.status, 202, "{:?}", response.body);
            }
        }
    }
    let doomed = app.start_assign_worker();
    tokio::time::sleep(Duration::from_millis(150)).await;
    doomed.kill();
    app.assign_worker = Some(app.start_assign_worker());
    for id in &ids {
        app.wait_for_status(&org, id, "completed").await;
    }
    for id in &ids {
        assert_eq!(
            app.events_of(id).await,
            ["flow.assigned", "flow.started", "flow.completed"],
            "{id}"
        );
    }
    app.assert_rollups_exact().await;
}

#[tokio::test]
async fn two_schedulers_scanning_at_once_emit_one_overdue_event_per_assignment() {
    let app = TestApp::spawn().await;
    let org = app.create_org(Tier::Enterprise).await;
    let emails: Vec<String> = (0..60).map(|i| format!("late{i}@example.com")).collect();
    let email_refs: Vec<&str> = emails.iter().map(String::as_str).collect();
    app.create_users(&org, &email_refs).await;
    let flow = app.create_flow(&org, "Due soon", &[5, 5]).await;
    let modules = app.module_ids(&org, &flow).await;
    let due = (chrono::Utc::now() + chrono::Duration::seconds(4)).to_rfc3339();
    let bodies: Vec<serde_json::Value> = emails
        .iter()
        .map(|email| json!({ "flowId": flow, "userEmail": email, "dueDate": due }))
        .collect();
    let responses = futures::future::join_all(
        bodies
            .iter()
            .map(|body| app.post(&org, "/v1/flows/assign", body)),
    )
    .await;
    let ids: Vec<String> = responses
        .iter()
        .map(|response| {
            assert_eq!(response.status, 200, "{:?}", response.body);
            response.body["assignmentId"]
                .as_str()
                .expect("id")
                .to_owned()
        })
        .collect();
    app.eventually(Duration::from_secs(10), "60 assignments", || async {
        (app.assignment_count().await == 60).then_some(())
    })
    .await;
    // One of them is started before its due date: in-progress work becomes overdue too.
    assert_eq!(
        progress(&app, &org, &ids[0], &modules[0], "in_progress")
            .await
            .status,
        202
    );
    app.wait_for_status(&org, &ids[0], "in_progress").await;
    // Not yet due: a scan changes nothing.
    let scanned = flow_workers::scheduler::scan_overdue(&app.db, 7)
        .await
        .expect("scan");
    assert_eq!(scanned, 0);
    let wait = chrono::DateTime::parse_from_rfc3339(&due)
        .expect("due")
        .with_timezone(&chrono::Utc)
        - chrono::Utc::now();
    tokio::time::sleep(wait.to_std().unwrap_or_default() + Duration::from_millis(200)).await;

    // Reports see them overdue at once (derived at read time), before any scan.
    let listed = app
        .get(
            &org,
            &format!("/v1/assignments?flowId={flow}&status=overdue&limit=1000"),
        )
        .await;
    assert_eq!(listed.body["data"].as_array().expect("data").len(), 60);
    // So do the rollups (their past-due correction), before and after the scan.
    let flow_id: flow_domain::ids::FlowId = flow.parse().expect("flow id");
    let overdue_now = || async {
        flow_common::db::rollups::lifetime_figures(&app.db, &[flow_id], chrono::Utc::now())
            .await
            .expect("figures")[0]
    };
    let before = overdue_now().await;
    assert_eq!((before.total, before.overdue), (60, 60), "{before:?}");

    let (first, second) = tokio::join!(
        flow_workers::scheduler::scan_overdue(&app.db, 7),
        flow_workers::scheduler::scan_overdue(&app.db, 7),
    );
    assert_eq!(first.expect("scan") + second.expect("scan"), 60);
    let overdue_events: i64 =
        sqlx::query_scalar("SELECT count(*) FROM outbox WHERE event_type = 'flow.overdue'")
            .fetch_one(&app.db)
            .await
            .expect("count");
    assert_eq!(overdue_events, 60);
    for id in &ids {
        assert_eq!(
            app.events_of(id).await.last().map(String::as_str),
            Some("flow.overdue")
        );
    }
    let stored: Vec<String> = sqlx::query_scalar("SELECT DISTINCT status FROM assignments")
        .fetch_all(&app.db)
        .await
        .expect("statuses");
    assert_eq!(stored, ["overdue"]);
    assert_eq!(overdue_now().await, before);
    app.assert_rollups_exact().await;

    // An overdue assignment still completes (and emits flow.completed once).
    for module in &modules {
        assert_eq!(
            progress(&app, &org, &ids[1], module, "completed")
                .await
                .status,
            202
        );
    }
    app.wait_for_status(&org, &ids[1], "completed").await;
    assert_eq!(
        app.events_of(&ids[1]).await,
        [
            "flow.assigned",
            "flow.overdue",
            "flow.started",
            "flow.completed"
        ]
    );
}

#[tokio::test]
async fn the_scheduler_binary_marks_overdue_work_on_its_own() {
    let app = TestApp::spawn_with(TestOptions {
        scheduler: true,
        ..TestOptions::default()
    })
    .await;
    let org = app.create_org(Tier::Standard).await;
    app.create_users(&org, &["dora@example.com"]).await;
    let flow = app.create_flow(&org, "Flow", &[5]).await;
    let due = (chrono::Utc::now() + chrono::Duration::seconds(1)).to_rfc3339();
    let id = app
        .assign_persisted(&org, &flow, "dora@example.com", json!({ "dueDate": due }))
        .await;
    app.eventually(Duration::from_secs(10), "the overdue event", || async {
        (app.events_of(&id).await == ["flow.assigned", "flow.overdue"]).then_some(())
    })
    .await;
    let stored: String = sqlx::query_scalar("SELECT status FROM assignments")
        .fetch_one(&app.db)
        .await
        .expect("status");
    assert_eq!(stored, "overdue");
}

#[tokio::test]
async fn the_assignment_list_filters_by_flow_email_and_status_and_pages_through_everything() {
    let app = TestApp::spawn().await;
    let org = app.create_org(Tier::Enterprise).await;
    let other = app.create_org(Tier::Standard).await;
    app.create_users(&org, &["erin@example.com", "finn@example.com"])
        .await;
    let first = app.create_flow(&org, "First", &[5]).await;
    let second = app.create_flow(&org, "Second", &[5]).await;
    let modules = app.module_ids(&org, &first).await;
    let erin_first = app
        .assign_persisted(&org, &first, "erin@example.com", json!({}))
        .await;
    let erin_second = app
        .assign_persisted(&org, &second, "erin@example.com", json!({}))
        .await;
    let finn_first = app
        .assign_persisted(&org, &first, "finn@example.com", json!({}))
        .await;
    assert_eq!(
        progress(&app, &org, &finn_first, &modules[0], "completed")
            .await
            .status,
        202
    );
    app.wait_for_status(&org, &finn_first, "completed").await;

    let ids = |response: flow_tests::TestResponse| -> Vec<String> {
        assert_eq!(response.status, 200, "{:?}", response.body);
        response.body["data"]
            .as_array()
            .expect("data")
            .iter()
            .map(|row| row["assignmentId"].as_str().expect("id").to_owned())
            .collect()
    };
    assert_eq!(
        ids(app.get(&org, "/v1/assignments").await),
        [erin_first.as_str(), &erin_second, &finn_first]
    );
    assert_eq!(
        ids(app
            .get(&org, &format!("/v1/assignments?flowId={first}"))
            .await),
        [erin_first.as_str(), &finn_first]
    );
    assert_eq!(
        ids(app
            .get(&org, "/v1/assignments?userEmail=ERIN@example.com")
            .await),
        [erin_first.as_str(), &erin_second]
    );
    assert_eq!(
        ids(app.get(&org, "/v1/assignments?status=completed").await),
        [finn_first.as_str()]
    );
    assert_eq!(
        ids(app
            .get(
                &org,
                &format!(
                    "/v1/assignments?flowId={first}&status=pending&userEmail=erin@example.com"
                )
            )
            .await),
        [erin_first.as_str()]
    );
    assert!(ids(app.get(&org, "/v1/assignments?flowId=flow_nope").await).is_empty());
    assert!(ids(app.get(&other, "/v1/assignments").await).is_empty());

    // Pages of one cover everything exactly once.
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            Some(cursor) => format!("/v1/assignments?limit=1&cursor={cursor}"),
            None => "/v1/assignments?limit=1".to_owned(),
        };
        let response = app.get(&org, &path).await;
        cursor = response.body["nextCursor"].as_str().map(str::to_owned);
        seen.extend(ids(response));
        if cursor.is_none() {
            break;
        }
    }
    assert_eq!(seen, [erin_first.as_str(), &erin_second, &finn_first]);

    for (path, message) in [
        (
            "/v1/assignments?status=late",
            "status must be one of: pending, in_progress, completed, overdue, cancelled",
        ),
        (
            "/v1/assignments?userEmail=nope",
            "userEmail must be a valid e-mail address",
        ),
        ("/v1/assignments?cursor=zz", "cursor is not valid"),
        (
            "/v1/assignments?limit=0",
            "limit must be between 1 and 1000",
        ),
    ] {
        let response = app.get(&org, path).await;
        assert_eq!(response.status, 400, "{path}");
        assert_eq!(response.body["message"], json!(message), "{path}");
    }
}
