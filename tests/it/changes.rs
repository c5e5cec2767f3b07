//! Changing and cancelling assignments (design §16): `PATCH /v1/assignments/{id}`,
//! `POST /v1/assignments/{id}/cancel` and `POST /v1/assignments/cancel/bulk`, applied through the
//! progress queue exactly once, each with its one event; cancelled assignments leave reports and
//! lists unless asked for.

use std::time::Duration;

use flow_common::db::orgs::Tier;
use flow_tests::{TestApp, TestOrg, TestResponse};
use serde_json::{Value, json};

async fn patch(app: &TestApp, org: &TestOrg, id: &str, body: Value) -> TestResponse {
    app.request(
        reqwest::Method::PATCH,
        &format!("/v1/assignments/{id}"),
        Some(&org.key),
        Some(&body),
        &[],
    )
    .await
}

async fn cancel(app: &TestApp, org: &TestOrg, id: &str, body: Option<Value>) -> TestResponse {
    app.request(
        reqwest::Method::POST,
        &format!("/v1/assignments/{id}/cancel"),
        Some(&org.key),
        body.as_ref(),
        &[],
    )
    .await
}

/// Waits until the assignment's events are `expected`, and checks they stay so a moment longer
/// (nothing comes twice).
async fn assert_events(app: &TestApp, id: &str, expected: &[&str]) {
    app.eventually(Duration::from_secs(10), "the events", || async {
        (app.events_of(id).await == expected).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(app.events_of(id).await, expected);
}

/// The `data` of the assignment's one event of `kind`.
async fn event_data(app: &TestApp, id: &str, kind: &str) -> Vec<Value> {
    let id = flow_domain::ids::AssignmentId::parse(id).expect("id");
    sqlx::query_scalar(
        "SELECT payload -> 'data' FROM outbox WHERE assignment_id = $1 AND event_type = $2
         ORDER BY seq",
    )
    .bind(id)
    .bind(kind)
    .fetch_all(&app.db)
    .await
    .expect("events")
}

#[tokio::test]
async fn a_patch_changes_due_date_priority_and_notes_with_one_flow_updated_naming_them() {
    let app = TestApp::spawn().await;
    let org = app.create_org(Tier::Standard).await;
    app.create_users(&org, &["ann@example.com"]).await;
    let flow = app.create_flow(&org, "Security Basics", &[30]).await;
    let id = app
        .assign_persisted(
            &org,
            &flow,
            "ann@example.com",
            json!({ "dueDate": "2031-01-31", "notes": "read first" }),
        )
        .await;
    let before = app.get(&org, &format!("/v1/assignments/{id}")).await.body;

    let response = patch(
        &app,
        &org,
        &id,
        json!({ "dueDate": "2031-03-31", "priority": "high", "notes": null }),
    )
    .await;
    assert_eq!(response.status, 200, "{:?}", response.body);
    assert_eq!(response.body["assignmentId"], json!(id));
    assert_eq!(response.body["priority"], json!("high"));
    assert_eq!(response.body["notes"], Value::Null);
    assert_eq!(response.body["status"], json!("pending"));
    let due = response.body["dueDate"]
        .as_str()
        .expect("dueDate")
        .to_owned();
    assert!(due.starts_with("2031-03-31T23:59:59"), "{due}");

    let changed = app
        .eventually(Duration::from_secs(10), "the change", || async {
            let body = app.get(&org, &format!("/v1/assignments/{id}")).await.body;
            (body["priority"] == json!("high")).then_some(body)
        })
        .await;
    assert_eq!(changed["dueDate"], json!(due));
    assert_eq!(changed["notes"], Value::Null);
    assert_events(&app, &id, &["flow.assigned", "flow.updated"]).await;
    let data = event_data(&app, &id, "flow.updated").await;
    assert_eq!(
        data[0]["changed"],
        json!({
            "dueDate": { "from": before["dueDate"], "to": due },
            "priority": { "from": "medium", "to": "high" },
            "notes": { "from": "read first", "to": null },
        })
    );
    assert_eq!(data[0]["priority"], json!("high"));

    // The same change again changes nothing and emits nothing.
    let again = patch(&app, &org, &id, json!({ "priority": "high" })).await;
    assert_eq!(again.status, 200, "{:?}", again.body);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(app.events_of(&id).await, ["flow.assigned", "flow.updated"]);

    // A second, different change is a second event.
    let second = patch(&app, &org, &id, json!({ "priority": "low" })).await;
    assert_eq!(second.status, 200, "{:?}", second.body);
    assert_events(
        &app,
        &id,
        &["flow.assigned", "flow.updated", "flow.updated"],
    )
    .await;

    // Every change is in the audit trail.
    let audited: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM audit_events WHERE action = 'assignment.updated' AND target = $1",
    )
    .bind(&id)
    .fetch_one(&app.db)
    .await
    .expect("audit");
    assert_eq!(audited, 3);
}

#[tokio::test]
async fn a_patch_is_checked_like_an_assign_and_refused_for_what_cannot_change() {
    let app = TestApp::spawn().await;
    let org = app.create_org(Tier::Standard).await;
    let other = app.create_org(Tier::Standard).await;
    app.create_users(&org, &["bo@example.com"]).await;
    let flow = app.create_flow(&org, "One", &[10]).await;
    let modules = app.module_ids(&org, &flow).await;
    let id = app
        .assign_persisted(&org, &flow, "bo@example.com", json!({}))
        .await;
    for (body, field) in [
        (json!({}), None),
        (json!({ "dueDate": "2001-01-01" }), Some("dueDate")),
        (json!({ "dueDate": "tomorrow" }), Some("dueDate")),
        (json!({ "priority": "urgent" }), Some("priority")),
        (json!({ "priority": null }), Some("priority")),
        (json!({ "notes": "x".repeat(2_001) }), Some("notes")),
        (json!({ "status": "completed" }), Some("status")),
    ] {
        let response = patch(&app, &org, &id, body.clone()).await;
        assert_eq!(response.status, 400, "{body}: {:?}", response.body);
        assert_eq!(response.body["error"], json!("invalid_request"), "{body}");
        if let Some(field) = field {
            let message = response.body["message"].as_str().unwrap_or_default();
            assert!(message.contains(field), "{body}: {message}");
        }
    }
    // Unknown ids and other organizations' assignments are 404.
    let unknown = patch(
        &app,
        &org,
        "asg_0193a1b2c3d47e8f9a0b1c2d3e4f5a6b",
        json!({ "priority": "low" }),
    )
    .await;
    assert_eq!(unknown.status, 404, "{:?}", unknown.body);
    let foreign = patch(&app, &other, &id, json!({ "priority": "low" })).await;
    assert_eq!(foreign.status, 404, "{:?}", foreign.body);
    let foreign_cancel = cancel(&app, &other, &id, None).await;
    assert_eq!(foreign_cancel.status, 404, "{:?}", foreign_cancel.body);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(app.events_of(&id).await, ["flow.assigned"]);

    // A completed assignment is compliance history: neither changed nor cancelled.
    let done = app
        .post(
            &org,
            &format!("/v1/assignments/{id}/progress"),
            &json!({ "moduleId": modules[0], "status": "completed" }),
        )
        .await;
    assert_eq!(done.status, 202, "{:?}", done.body);
    app.wait_for_status(&org, &id, "completed").await;
    let late_patch = patch(&app, &org, &id, json!({ "priority": "low" })).await;
    assert_eq!(late_patch.status, 409, "{:?}", late_patch.body);
    assert_eq!(late_patch.body["error"], json!("conflict"));
    let late_cancel = cancel(&app, &org, &id, None).await;
    assert_eq!(late_cancel.status, 409, "{:?}", late_cancel.body);
    assert_events(
        &app,
        &id,
        &["flow.assigned", "flow.started", "flow.completed"],
    )
    .await;
}

#[tokio::test]
async fn an_overdue_assignment_moved_to_a_later_due_date_is_pending_again_and_overdue_once_more() {
    let app = TestApp::spawn().await;
    let org = app.create_org(Tier::Standard).await;
    app.create_users(&org, &["cy@example.com"]).await;
    let flow = app.create_flow(&org, "Due soon", &[10, 10]).await;
    let due = (chrono::Utc::now() + chrono::Duration::seconds(2)).to_rfc3339();
    let id = app
        .assign_persisted(&org, &flow, "cy@example.com", json!({ "dueDate": due }))
        .await;
    tokio::time::sleep(Duration::from_millis(2_300)).await;
    flow_workers::scheduler::scan_overdue(&app.db, 100)
        .await
        .expect("scan");
    app.wait_for_status(&org, &id, "overdue").await;
    assert_events(&app, &id, &["flow.assigned", "flow.overdue"]).await;

    // Moved to a few seconds from now: pending again at once.
    let later = (chrono::Utc::now() + chrono::Duration::seconds(3)).to_rfc3339();
    let response = patch(&app, &org, &id, json!({ "dueDate": later })).await;
    assert_eq!(response.status, 200, "{:?}", response.body);
    assert_eq!(response.body["status"], json!("pending"));
    app.wait_for_status(&org, &id, "pending").await;
    assert_events(
        &app,
        &id,
        &["flow.assigned", "flow.overdue", "flow.updated"],
    )
    .await;
    // A scan before the new due date does nothing; after it, one more flow.overdue, once,
    // whatever the number of scans.
    assert_eq!(
        flow_workers::scheduler::scan_overdue(&app.db, 100)
            .await
            .expect("scan"),
        0
    );
    tokio::time::sleep(Duration::from_millis(3_300)).await;
    for _ in 0..3 {
        flow_workers::scheduler::scan_overdue(&app.db, 100)
            .await
            .expect("scan");
    }
    app.wait_for_status(&org, &id, "overdue").await;
    assert_events(
        &app,
        &id,
        &[
            "flow.assigned",
            "flow.overdue",
            "flow.updated",
            "flow.overdue",
        ],
    )
    .await;
    let overdue = event_data(&app, &id, "flow.overdue").await;
    assert_ne!(overdue[0]["dueDate"], overdue[1]["dueDate"]);
    app.assert_rollups_exact().await;
}

#[tokio::test]
async fn cancelling_is_idempotent_emits_one_event_and_ends_progress_and_changes() {
    let app = TestApp::spawn().await;
    let org = app.create_org(Tier::Standard).await;
    app.create_users(&org, &["di@example.com"]).await;
    let flow = app.create_flow(&org, "Privacy", &[10, 10]).await;
    let modules = app.module_ids(&org, &flow).await;
    let id = app
        .assign_persisted(&org, &flow, "di@example.com", json!({}))
        .await;
    let started = app
        .post(
            &org,
            &format!("/v1/assignments/{id}/progress"),
            &json!({ "moduleId": modules[0], "status": "completed" }),
        )
        .await;
    assert_eq!(started.status, 202);
    app.wait_for_status(&org, &id, "in_progress").await;

    // No body at all is a cancel without a reason; a second cancel answers the same.
    let first = cancel(&app, &org, &id, Some(json!({ "reason": "Left the team" }))).await;
    assert_eq!(first.status, 200, "{:?}", first.body);
    assert_eq!(first.body["status"], json!("cancelled"));
    assert_eq!(first.body["cancellationReason"], json!("Left the team"));
    assert!(first.body["cancelledAt"].is_string());
    let cancelled = app.wait_for_status(&org, &id, "cancelled").await;
    assert_eq!(cancelled["cancellationReason"], json!("Left the team"));
    // Its progress stays.
    assert_eq!(cancelled["completedModules"], json!(1));
    let again = cancel(&app, &org, &id, None).await;
    assert_eq!(again.status, 200, "{:?}", again.body);
    assert_eq!(again.body["status"], json!("cancelled"));
    let concurrent = futures::future::join_all((0..5).map(|_| cancel(&app, &org, &id, None))).await;
    assert!(concurrent.iter().all(|response| response.status == 200));
    assert_events(
        &app,
        &id,
        &["flow.assigned", "flow.started", "flow.cancelled"],
    )
    .await;
    let data = event_data(&app, &id, "flow.cancelled").await;
    assert_eq!(data[0]["status"], json!("cancelled"));
    assert_eq!(data[0]["reason"], json!("Left the team"));

    // It takes no more progress and no changes.
    let progress = app
        .post(
            &org,
            &format!("/v1/assignments/{id}/progress"),
            &json!({ "moduleId": modules[1], "status": "completed" }),
        )
        .await;
    assert_eq!(progress.status, 409, "{:?}", progress.body);
    let change = patch(&app, &org, &id, json!({ "priority": "high" })).await;
    assert_eq!(change.status, 409, "{:?}", change.body);

    // It never goes overdue, and the flow can be assigned to the person again: a new one.
    let again = app
        .assign_persisted(&org, &flow, "di@example.com", json!({}))
        .await;
    assert_ne!(again, id);
}

#[tokio::test]
async fn a_cancel_command_delivered_twice_applies_once() {
    let app = TestApp::spawn().await;
    let org = app.create_org(Tier::Standard).await;
    app.create_users(&org, &["ed@example.com"]).await;
    let flow = app.create_flow(&org, "Twice", &[10]).await;
    let id = app
        .assign_persisted(&org, &flow, "ed@example.com", json!({}))
        .await;
    let assignment_id = flow_domain::ids::AssignmentId::parse(&id).expect("id");
    let change_id = uuid::Uuid::now_v7();
    let update = flow_domain::messages::ChangeBatch {
        version: flow_domain::messages::CHANGE_COMMAND_VERSION,
        changes: vec![flow_domain::messages::ChangeCommand {
            change_id,
            org_id: org.id,
            assignment_id,
            change: flow_domain::messages::Change::Update {
                due_at: None,
                priority: Some(flow_domain::Priority::High),
                notes: None,
            },
            requested_at: chrono::Utc::now(),
            bulk: false,
            traceparent: None,
        }],
    };
    let payload = update.encode().expect("encode");
    let routing_key = flow_common::amqp::QueueKind::Progress.suffix();
    for _ in 0..3 {
        app.publish_raw(
            &routing_key,
            flow_domain::messages::CHANGE_BATCH_KIND,
            &payload,
        )
        .await;
    }
    assert_events(&app, &id, &["flow.assigned", "flow.updated"]).await;
    // A later change back is applied; the first one redelivered after it changes nothing.
    let back = patch(&app, &org, &id, json!({ "priority": "medium" })).await;
    assert_eq!(back.status, 200);
    assert_events(
        &app,
        &id,
        &["flow.assigned", "flow.updated", "flow.updated"],
    )
    .await;
    app.publish_raw(
        &routing_key,
        flow_domain::messages::CHANGE_BATCH_KIND,
        &payload,
    )
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        app.get(&org, &format!("/v1/assignments/{id}")).await.body["priority"],
        json!("medium")
    );
    assert_eq!(app.events_of(&id).await.len(), 3);
    let outcomes: Vec<String> = sqlx::query_scalar(
        "SELECT outcome FROM assignment_changes WHERE assignment_id = $1 ORDER BY requested_at",
    )
    .bind(assignment_id)
    .fetch_all(&app.db)
    .await
    .expect("changes");
    assert_eq!(outcomes, ["applied", "applied"]);
}

#[tokio::test]
async fn cancelled_assignments_leave_reports_and_lists_unless_asked_for() {
    let app = TestApp::spawn().await;
    let org = app.create_org(Tier::Enterprise).await;
    let emails = ["f1@example.com", "f2@example.com", "f3@example.com"];
    app.create_users(&org, &emails).await;
    let flow = app.create_flow(&org, "Report", &[10]).await;
    let mut ids = Vec::new();
    for email in emails {
        ids.push(app.assign_persisted(&org, &flow, email, json!({})).await);
    }
    assert_eq!(cancel(&app, &org, &ids[0], None).await.status, 200);
    app.wait_for_status(&org, &ids[0], "cancelled").await;

    let (app, org) = (&app, &org);
    let report = |extra: Value| {
        let mut body = json!({ "flowId": flow });
        body.as_object_mut()
            .expect("object")
            .extend(extra.as_object().expect("object").clone());
        async move { app.post(org, "/v1/flows/report", &body).await }
    };
    let plain = report(json!({})).await;
    assert_eq!(plain.status, 200, "{:?}", plain.body);
    assert_eq!(
        plain.body["metrics"]["totalAssignments"],
        json!(2),
        "{:?}",
        plain.body
    );
    let listed: Vec<&Value> = plain.body["assignments"]
        .as_array()
        .expect("rows")
        .iter()
        .collect();
    assert_eq!(listed.len(), 2);
    assert!(
        listed
            .iter()
            .all(|row| row["assignmentId"] != json!(ids[0]))
    );

    let with = report(json!({ "includeCancelled": true })).await;
    assert_eq!(with.status, 200, "{:?}", with.body);
    assert_eq!(
        with.body["metrics"]["totalAssignments"],
        json!(3),
        "{:?}",
        with.body
    );
    assert_eq!(with.body["metrics"]["cancelledAssignments"], json!(1));
    assert!(plain.body["metrics"].get("cancelledAssignments").is_none());
    assert_eq!(with.body["assignments"].as_array().expect("rows").len(), 3);
    let only = report(json!({ "status": "cancelled" })).await;
    assert_eq!(only.status, 200, "{:?}", only.body);
    let rows = only.body["assignments"].as_array().expect("rows");
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["status"], json!("cancelled"));

    let list = app
        .get(org, &format!("/v1/assignments?flowId={flow}"))
        .await;
    assert_eq!(list.body["data"].as_array().expect("data").len(), 2);
    let cancelled = app
        .get(
            org,
            &format!("/v1/assignments?flowId={flow}&status=cancelled"),
        )
        .await;
    let data = cancelled.body["data"].as_array().expect("data");
    assert_eq!(data.len(), 1);
    assert_eq!(data[0]["assignmentId"], json!(ids[0]));
    let all = app
        .get(
            org,
            &format!("/v1/assignments?flowId={flow}&includeCancelled=true"),
        )
        .await;
    assert_eq!(all.body["data"].as_array().expect("data").len(), 3);
    app.assert_rollups_exact().await;
}

#[tokio::test]
async fn a_bulk_cancel_answers_each_item_by_id_or_by_flow_and_user() {
    let app = TestApp::spawn().await;
    let org = app.create_org(Tier::Enterprise).await;
    let emails = ["g1@example.com", "g2@example.com", "g3@example.com"];
    app.create_users(&org, &emails).await;
    let flow = app.create_flow(&org, "Offboarding", &[10]).await;
    let modules = app.module_ids(&org, &flow).await;
    let mut ids = Vec::new();
    for email in emails {
        ids.push(app.assign_persisted(&org, &flow, email, json!({})).await);
    }
    // The third one is completed: it stays.
    let done = app
        .post(
            &org,
            &format!("/v1/assignments/{}/progress", ids[2]),
            &json!({ "moduleId": modules[0], "status": "completed" }),
        )
        .await;
    assert_eq!(done.status, 202);
    app.wait_for_status(&org, &ids[2], "completed").await;

    let body = json!({
        "reason": "Offboarded",
        "items": [
            { "assignmentId": ids[0] },
            { "flowId": flow, "userEmail": "G2@example.com" },
            { "assignmentId": ids[2] },
            { "flowId": flow, "userEmail": "nobody@example.com" },
            { "assignmentId": ids[0], "flowId": flow },
            { "assignmentId": ids[0] },
        ],
    });
    let response = app.post(&org, "/v1/assignments/cancel/bulk", &body).await;
    assert_eq!(response.status, 200, "{:?}", response.body);
    let statuses: Vec<u64> = response.body["results"]
        .as_array()
        .expect("results")
        .iter()
        .map(|item| item["status"].as_u64().expect("status"))
        .collect();
    assert_eq!(statuses, [200, 200, 409, 404, 400, 200]);
    assert_eq!(response.body["succeeded"], json!(3));
    assert_eq!(response.body["failed"], json!(3));
    assert_eq!(
        response.body["results"][1]["result"]["assignmentId"],
        json!(ids[1])
    );
    for id in &ids[..2] {
        let cancelled = app.wait_for_status(&org, id, "cancelled").await;
        assert_eq!(cancelled["cancellationReason"], json!("Offboarded"));
        assert_events(&app, id, &["flow.assigned", "flow.cancelled"]).await;
    }
    // Bulk events travel in the bulk lane.
    let interactive: Vec<bool> =
        sqlx::query_scalar("SELECT interactive FROM outbox WHERE event_type = 'flow.cancelled'")
            .fetch_all(&app.db)
            .await
            .expect("lanes");
    assert_eq!(interactive, [false, false]);

    let empty = app
        .post(&org, "/v1/assignments/cancel/bulk", &json!({ "items": [] }))
        .await;
    assert_eq!(empty.status, 400);
    let too_many: Vec<Value> = (0..1_001)
        .map(|_| json!({ "assignmentId": ids[0] }))
        .collect();
    let over = app
        .post(
            &org,
            "/v1/assignments/cancel/bulk",
            &json!({ "items": too_many }),
        )
        .await;
    assert_eq!(over.status, 400, "{:?}", over.body);
}

#[tokio::test]
async fn a_cancel_racing_an_in_flight_assign_with_the_same_request_id_ends_cancelled_once() {
    let app = TestApp::spawn().await;
    let org = app.create_org(Tier::Standard).await;
    app.create_users(&org, &["hu@example.com"]).await;
    let flow = app.create_flow(&org, "Race", &[10]).await;
    let body = json!({ "flowId": flow, "userEmail": "hu@example.com" });
    let headers = [("X-Request-ID", "race-1")];
    let assigned = app
        .post_with(&org, "/v1/flows/assign", &body, &headers)
        .await;
    assert_eq!(assigned.status, 200, "{:?}", assigned.body);
    let id = assigned.body["assignmentId"]
        .as_str()
        .expect("id")
        .to_owned();
    // At once, before the worker may have persisted it: the cancel is 409 (retry shortly) until
    // it is, and then applies.
    let response = app
        .eventually(Duration::from_secs(10), "the cancel", || async {
            let response = cancel(&app, &org, &id, None).await;
            match response.status {
                200 => Some(response),
                409 => {
                    assert_eq!(
                        response.body["error"],
                        json!("conflict"),
                        "{:?}",
                        response.body
                    );
                    None
                }
                other => panic!("cancel answered {other}: {:?}", response.body),
            }
        })
        .await;
    assert_eq!(response.body["status"], json!("cancelled"));
    // The assign retried with its request id answers the same assignment, and does not make
    // another.
    let retried = app
        .post_with(&org, "/v1/flows/assign", &body, &headers)
        .await;
    assert_eq!(retried.status, 200, "{:?}", retried.body);
    assert_eq!(retried.body["assignmentId"], json!(id));
    app.wait_for_status(&org, &id, "cancelled").await;
    assert_events(&app, &id, &["flow.assigned", "flow.cancelled"]).await;
    assert_eq!(app.assignment_count().await, 1);
}
