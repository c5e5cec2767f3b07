//! Lifecycle settings (issue 37, design §16): the organization's `cancelOnDeactivate` cancels a
//! deactivated user's open assignments once each (a retried SCIM request cancels nothing twice;
//! off, nothing; completed ones never), an enrollment rule's `cancelOnUnmatch` cancels only the
//! open assignments that rule made when the user stops matching, the organization's default
//! reminder policy covers the flows without one (a flow's own policy wins, empty lists say "no
//! reminders"), and an archived flow takes no assignments from rules or schedules (409 when one
//! is created or replaced to point at it).

use std::time::Duration;

use chrono::{DateTime, Utc};
use flow_common::db::orgs::Tier;
use flow_tests::enrollment::{assigned_by, create_rule};
use flow_tests::{TestApp, TestOptions, TestOrg, TestResponse};
use serde_json::{Value, json};

const USER_SCHEMA: &str = "urn:ietf:params:scim:schemas:core:2.0:User";
const ENTERPRISE: &str = "urn:ietf:params:scim:schemas:extension:enterprise:2.0:User";
const PATCH_OP: &str = "urn:ietf:params:scim:api:messages:2.0:PatchOp";

async fn settings(app: &TestApp, org: &TestOrg, body: Value) -> TestResponse {
    app.request(
        reqwest::Method::PATCH,
        "/v1/settings",
        Some(&org.key),
        Some(&body),
        &[],
    )
    .await
}

/// Provisions a user through SCIM with `department`; returns their SCIM id.
async fn scim_user(app: &TestApp, org: &TestOrg, email: &str, department: &str) -> String {
    let created = app
        .scim_request(
            &org.key,
            reqwest::Method::POST,
            "/Users",
            Some(&json!({
                "schemas": [USER_SCHEMA, ENTERPRISE],
                "userName": email,
                "active": true,
                "emails": [{ "primary": true, "value": email }],
                ENTERPRISE: { "department": department }
            })),
            &[],
        )
        .await;
    assert_eq!(created.status, 201, "{:?}", created.body);
    created.body["id"].as_str().expect("id").to_owned()
}

async fn scim_patch(app: &TestApp, org: &TestOrg, id: &str, operations: Value) -> TestResponse {
    app.scim_request(
        &org.key,
        reqwest::Method::PATCH,
        &format!("/Users/{id}"),
        Some(&json!({ "schemas": [PATCH_OP], "Operations": operations })),
        &[],
    )
    .await
}

async fn set_active(app: &TestApp, org: &TestOrg, id: &str, active: bool) {
    let response = scim_patch(
        app,
        org,
        id,
        json!([{ "op": "replace", "path": "active", "value": active }]),
    )
    .await;
    assert_eq!(response.status, 200, "{:?}", response.body);
}

async fn status_of(app: &TestApp, org: &TestOrg, id: &str) -> Value {
    app.get(org, &format!("/v1/assignments/{id}")).await.body["status"].clone()
}

/// The `data.reason` of every `flow.cancelled` of the assignment.
async fn cancel_reasons(app: &TestApp, id: &str) -> Vec<Option<String>> {
    let id = flow_domain::ids::AssignmentId::parse(id).expect("id");
    sqlx::query_scalar(
        "SELECT payload -> 'data' ->> 'reason' FROM outbox
         WHERE assignment_id = $1 AND event_type = 'flow.cancelled' ORDER BY seq",
    )
    .bind(id)
    .fetch_all(&app.db)
    .await
    .expect("events")
}

/// How many changes of the assignment were recorded (each applied once).
async fn change_rows(app: &TestApp, id: &str) -> i64 {
    let id = flow_domain::ids::AssignmentId::parse(id).expect("id");
    sqlx::query_scalar("SELECT count(*) FROM assignment_changes WHERE assignment_id = $1")
        .bind(id)
        .fetch_one(&app.db)
        .await
        .expect("changes")
}

/// The assignments audited as cancelled, sorted (an assignment audited twice shows twice).
async fn audited_cancels(app: &TestApp, org: &TestOrg) -> Vec<String> {
    let mut targets: Vec<String> = sqlx::query_scalar(
        "SELECT target FROM audit_events WHERE org_id = $1 AND action = 'assignment.cancelled'",
    )
    .bind(org.id)
    .fetch_all(&app.db)
    .await
    .expect("audit");
    targets.sort();
    targets
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deactivation_cancels_open_assignments_once_when_the_setting_is_on_and_nothing_when_off() {
    let mut app = TestApp::spawn().await;
    let org = app.create_org(Tier::Standard).await;

    // The settings: off by default; bad input is refused by name.
    let read = app.get(&org, "/v1/settings").await;
    assert_eq!(read.status, 200, "{:?}", read.body);
    assert_eq!(read.body, json!({ "cancelOnDeactivate": false }));
    for bad in [
        json!({}),
        json!({ "cancelOnDeactivate": "yes" }),
        json!({ "timezone": "UTC" }),
        json!({ "reminders": { "afterDueDays": [0] } }),
    ] {
        let refused = settings(&app, &org, bad.clone()).await;
        assert_eq!(refused.status, 400, "{bad}: {:?}", refused.body);
    }

    let kim = scim_user(&app, &org, "kim@example.com", "Ops").await;
    let lee = scim_user(&app, &org, "lee@example.com", "Ops").await;
    let safety = app.create_flow(&org, "Safety", &[10]).await;
    let privacy = app.create_flow(&org, "Privacy", &[10]).await;
    let done_flow = app.create_flow(&org, "Done", &[10]).await;
    let open: Vec<String> = vec![
        app.assign_persisted(&org, &safety, "kim@example.com", json!({}))
            .await,
        app.assign_persisted(&org, &privacy, "kim@example.com", json!({}))
            .await,
    ];
    let completed = app
        .assign_persisted(&org, &done_flow, "kim@example.com", json!({}))
        .await;
    let module = app.module_ids(&org, &done_flow).await.remove(0);
    let progress = app
        .post(
            &org,
            &format!("/v1/assignments/{completed}/progress"),
            &json!({ "moduleId": module, "status": "completed" }),
        )
        .await;
    assert_eq!(progress.status, 202, "{:?}", progress.body);
    app.wait_for_status(&org, &completed, "completed").await;
    let lees = app
        .assign_persisted(&org, &safety, "lee@example.com", json!({}))
        .await;

    // Off: deactivating Lee cancels nothing.
    set_active(&app, &org, &lee, false).await;
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(status_of(&app, &org, &lees).await, json!("pending"));
    assert_eq!(app.events_of(&lees).await, ["flow.assigned"]);

    // On: deactivating Kim, sent twice as a retrying provider does, cancels each open
    // assignment once; the completed one stays completed.
    let on = settings(&app, &org, json!({ "cancelOnDeactivate": true })).await;
    assert_eq!(on.status, 200, "{:?}", on.body);
    assert_eq!(on.body, json!({ "cancelOnDeactivate": true }));
    // The retry arrives while the first request's cancellations are still queued (the worker
    // that applies them is stopped): it queues them again, and the audit still says once.
    app.assign_worker
        .take()
        .expect("an assign-worker")
        .stop()
        .expect("the assign-worker stops");
    set_active(&app, &org, &kim, false).await;
    set_active(&app, &org, &kim, false).await;
    app.assign_worker = Some(app.start_assign_worker());
    for id in &open {
        let cancelled = app.wait_for_status(&org, id, "cancelled").await;
        assert_eq!(cancelled["cancellationReason"], json!("user deactivated"));
    }
    tokio::time::sleep(Duration::from_millis(700)).await;
    for id in &open {
        assert_eq!(app.events_of(id).await, ["flow.assigned", "flow.cancelled"]);
        assert_eq!(
            cancel_reasons(&app, id).await,
            [Some("user deactivated".to_owned())]
        );
        assert_eq!(change_rows(&app, id).await, 1);
    }
    assert_eq!(status_of(&app, &org, &completed).await, json!("completed"));
    assert!(
        !app.events_of(&completed)
            .await
            .contains(&"flow.cancelled".to_owned())
    );
    let mut expected = open.clone();
    expected.sort();
    assert_eq!(audited_cancels(&app, &org).await, expected);

    // A third send (a later retry) still cancels nothing again; reactivating restores nothing.
    set_active(&app, &org, &kim, false).await;
    set_active(&app, &org, &kim, true).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    for id in &open {
        assert_eq!(status_of(&app, &org, id).await, json!("cancelled"));
        assert_eq!(app.events_of(id).await, ["flow.assigned", "flow.cancelled"]);
        assert_eq!(change_rows(&app, id).await, 1);
    }
    assert_eq!(audited_cancels(&app, &org).await, expected);
    // Lee, deactivated while the setting was off, keeps theirs.
    assert_eq!(status_of(&app, &org, &lees).await, json!("pending"));

    let read = app.get(&org, "/v1/settings").await;
    assert_eq!(read.body, json!({ "cancelOnDeactivate": true }));
    let audited: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM audit_events WHERE org_id = $1 AND action = 'settings.updated'",
    )
    .bind(org.id)
    .fetch_one(&app.db)
    .await
    .expect("audit");
    assert_eq!(audited, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_on_unmatch_cancels_only_the_rules_own_assignments_when_the_department_changes() {
    let app = TestApp::spawn().await;
    let org = app.create_org(Tier::Standard).await;
    let onboarding = app.create_flow(&org, "Sales onboarding", &[10]).await;
    let handbook = app.create_flow(&org, "Sales handbook", &[10]).await;
    let manual = app.create_flow(&org, "Ethics", &[10]).await;
    // Erin was given the onboarding by hand before the rule existed.
    let erin_id = scim_user(&app, &org, "erin@example.com", "Support").await;
    let erins_own = app
        .assign_persisted(&org, &onboarding, "erin@example.com", json!({}))
        .await;
    let cancels = create_rule(
        &app,
        &org,
        json!({"name": "Sales onboarding", "condition": {"departmentEquals": "Sales"},
               "flowId": onboarding, "cancelOnUnmatch": true}),
    )
    .await;
    let keeps = create_rule(
        &app,
        &org,
        json!({"name": "Sales handbook", "condition": {"departmentEquals": "Sales"},
               "flowId": handbook}),
    )
    .await;
    let rule = app
        .get(&org, &format!("/v1/enrollment-rules/{cancels}"))
        .await;
    assert_eq!(rule.body["cancelOnUnmatch"], json!(true));
    let rule = app
        .get(&org, &format!("/v1/enrollment-rules/{keeps}"))
        .await;
    assert_eq!(rule.body["cancelOnUnmatch"], json!(false));

    let dana = scim_user(&app, &org, "dana@example.com", "Sales").await;
    // Erin moves to Sales: the rule's assignment resolves to her hand-made one.
    let moved = scim_patch(
        &app,
        &org,
        &erin_id,
        json!([{ "op": "replace", "path": format!("{ENTERPRISE}:department"), "value": "Sales" }]),
    )
    .await;
    assert_eq!(moved.status, 200, "{:?}", moved.body);
    let expected = ["dana@example.com"];
    app.eventually(
        Duration::from_secs(30),
        "the rules' assignments",
        || async {
            (assigned_by(&app, &cancels).await == expected
                && assigned_by(&app, &keeps).await.len() == 2)
                .then_some(())
        },
    )
    .await;
    let id_of = |flow: &str, email: &str| {
        let (flow, email) = (flow.to_owned(), email.to_owned());
        let app = &app;
        let org = &org;
        async move {
            let listed = app
                .get(org, &format!("/v1/assignments?flowId={flow}&limit=100"))
                .await;
            listed.body["data"]
                .as_array()
                .expect("data")
                .iter()
                .find(|row| row["assigneeEmail"] == json!(email))
                .and_then(|row| row["assignmentId"].as_str())
                .expect("assignment")
                .to_owned()
        }
    };
    let danas_onboarding = id_of(&onboarding, "dana@example.com").await;
    let danas_handbook = id_of(&handbook, "dana@example.com").await;
    let danas_manual = app
        .assign_persisted(&org, &manual, "dana@example.com", json!({}))
        .await;

    // Both leave Sales, Dana twice (a retrying provider).
    for (id, times) in [(&dana, 2), (&erin_id, 1)] {
        for _ in 0..times {
            let moved = scim_patch(
                &app,
                &org,
                id,
                json!([{ "op": "replace", "path": format!("{ENTERPRISE}:department"),
                         "value": "Support" }]),
            )
            .await;
            assert_eq!(moved.status, 200, "{:?}", moved.body);
        }
    }
    let cancelled = app
        .wait_for_status(&org, &danas_onboarding, "cancelled")
        .await;
    assert_eq!(
        cancelled["cancellationReason"],
        json!("no longer matches enrollment rule \"Sales onboarding\"")
    );
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(
        app.events_of(&danas_onboarding).await,
        ["flow.assigned", "flow.cancelled"]
    );
    assert_eq!(change_rows(&app, &danas_onboarding).await, 1);
    // The rule without the flag, the hand-made assignment, and Erin's hand-made onboarding
    // (the rule matched her, but did not make it) are untouched.
    for id in [&danas_handbook, &danas_manual, &erins_own] {
        assert_eq!(status_of(&app, &org, id).await, json!("pending"), "{id}");
        assert_eq!(change_rows(&app, id).await, 0, "{id}");
    }
    assert_eq!(audited_cancels(&app, &org).await, [danas_onboarding]);
}

fn at(text: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(text).expect("time").to_utc()
}

async fn scan(app: &TestApp, now: &str) -> usize {
    flow_workers::scheduler::scan_reminders(&app.db, at(now), 100)
        .await
        .expect("scan")
}

async fn reminders_of(app: &TestApp, id: &str) -> Vec<Value> {
    let id = flow_domain::ids::AssignmentId::parse(id).expect("id");
    sqlx::query_scalar(
        "SELECT payload -> 'data' -> 'reminder' FROM outbox
         WHERE assignment_id = $1 AND event_type = 'flow.reminder' ORDER BY seq",
    )
    .bind(id)
    .fetch_all(&app.db)
    .await
    .expect("reminders")
}

#[tokio::test]
async fn the_organization_default_reminder_policy_covers_flows_without_one_and_a_flows_own_wins() {
    let app = TestApp::spawn().await;
    let org = app.create_org(Tier::Standard).await;
    app.create_users(&org, &["ann@example.com"]).await;
    let plain = app.create_flow(&org, "Plain", &[10]).await;
    let own = app.create_flow(&org, "Own", &[10]).await;
    let silent = app.create_flow(&org, "Silent", &[10]).await;
    for (flow, policy) in [
        (&own, json!({ "beforeDueDays": [2] })),
        (&silent, json!({ "beforeDueDays": [], "afterDueDays": [] })),
    ] {
        let set = app
            .request(
                reqwest::Method::PATCH,
                &format!("/v1/flows/{flow}"),
                Some(&org.key),
                Some(&json!({ "reminders": policy })),
                &[],
            )
            .await;
        assert_eq!(set.status, 200, "{:?}", set.body);
    }
    let set = settings(
        &app,
        &org,
        json!({ "reminders": { "afterDueDays": [1, 1], "beforeDueDays": [2] } }),
    )
    .await;
    assert_eq!(set.status, 200, "{:?}", set.body);
    assert_eq!(
        set.body["reminders"],
        json!({ "beforeDueDays": [2], "afterDueDays": [1] })
    );
    let ids: Vec<String> = {
        let mut ids = Vec::new();
        for flow in [&plain, &own, &silent] {
            ids.push(
                app.assign_persisted(
                    &org,
                    flow,
                    "ann@example.com",
                    json!({ "dueDate": "2027-01-10" }),
                )
                .await,
            );
        }
        ids
    };
    // Two days before: the default (plain) and the flow's own (own) remind; silent does not.
    assert_eq!(scan(&app, "2027-01-08T23:59:59Z").await, 2);
    // A day after: only the default has an overdue reminder.
    assert_eq!(scan(&app, "2027-01-11T23:59:59Z").await, 1);
    let kinds = |sent: Vec<Value>| -> Vec<(String, i64)> {
        sent.iter()
            .map(|reminder| {
                (
                    reminder["kind"].as_str().expect("kind").to_owned(),
                    reminder["offsetDays"].as_i64().expect("offset"),
                )
            })
            .collect()
    };
    assert_eq!(
        kinds(reminders_of(&app, &ids[0]).await),
        [("due_soon".to_owned(), 2), ("overdue".to_owned(), 1)]
    );
    assert_eq!(
        kinds(reminders_of(&app, &ids[1]).await),
        [("due_soon".to_owned(), 2)]
    );
    assert!(reminders_of(&app, &ids[2]).await.is_empty());

    // Removing the default stops it; the flow's own stays.
    let removed = settings(&app, &org, json!({ "reminders": null })).await;
    assert_eq!(removed.status, 200, "{:?}", removed.body);
    assert!(removed.body.get("reminders").is_none());
    let moved = app
        .request(
            reqwest::Method::PATCH,
            &format!("/v1/assignments/{}", ids[0]),
            Some(&org.key),
            Some(&json!({ "dueDate": "2027-02-10" })),
            &[],
        )
        .await;
    assert_eq!(moved.status, 200, "{:?}", moved.body);
    app.eventually(Duration::from_secs(10), "the new due date", || async {
        let body = app
            .get(&org, &format!("/v1/assignments/{}", ids[0]))
            .await
            .body;
        body["dueDate"]
            .as_str()
            .is_some_and(|due| due.starts_with("2027-02-10"))
            .then_some(())
    })
    .await;
    assert_eq!(scan(&app, "2027-02-08T23:59:59Z").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rules_and_schedules_of_an_archived_flow_do_not_assign_and_cannot_be_created() {
    let app = TestApp::spawn_with(TestOptions {
        scheduler: true,
        ..TestOptions::default()
    })
    .await;
    let org = app.create_org(Tier::Standard).await;
    app.create_users(&org, &["bob@example.com"]).await;
    let archived = app.create_flow(&org, "Old induction", &[10]).await;
    let live = app.create_flow(&org, "Induction", &[10]).await;
    let archive = |flow: String, archived: bool| {
        let app = &app;
        let org = &org;
        async move {
            let response = app
                .request(
                    reqwest::Method::PATCH,
                    &format!("/v1/flows/{flow}"),
                    Some(&org.key),
                    Some(&json!({ "archived": archived })),
                    &[],
                )
                .await;
            assert_eq!(response.status, 200, "{:?}", response.body);
        }
    };

    // A rule and a schedule made while the flow was live.
    let rule = create_rule(
        &app,
        &org,
        json!({"name": "Everyone", "condition": {"startDatePresent": false},
               "flowId": archived}),
    )
    .await;
    let at = Utc::now() + chrono::Duration::milliseconds(3000);
    let scheduled = app
        .post(
            &org,
            "/v1/flows/schedule",
            &json!({ "flowId": archived, "userEmail": "bob@example.com",
                     "scheduledAt": at.to_rfc3339() }),
        )
        .await;
    assert_eq!(scheduled.status, 201, "{:?}", scheduled.body);
    let schedule = scheduled.body["scheduleId"]
        .as_str()
        .expect("id")
        .to_owned();
    archive(archived.clone(), true).await;

    // Creating (or pointing) a rule or a schedule at it: 409 naming the flow.
    let refused = app
        .post(
            &org,
            "/v1/enrollment-rules",
            &json!({"name": "Again", "condition": {"startDatePresent": false},
                    "flowId": archived}),
        )
        .await;
    assert_eq!(refused.status, 409, "{:?}", refused.body);
    assert!(
        refused.body["message"].as_str().is_some_and(
            |message| message.contains("Old induction") && message.contains("archived")
        ),
        "{:?}",
        refused.body
    );
    let other = create_rule(
        &app,
        &org,
        json!({"name": "Live", "condition": {"startDatePresent": true}, "flowId": live}),
    )
    .await;
    let replaced = app
        .request(
            reqwest::Method::PUT,
            &format!("/v1/enrollment-rules/{other}"),
            Some(&org.key),
            Some(
                &json!({"name": "Live", "condition": {"startDatePresent": true},
                         "flowId": archived}),
            ),
            &[],
        )
        .await;
    assert_eq!(replaced.status, 409, "{:?}", replaced.body);
    let refused = app
        .post(
            &org,
            "/v1/flows/schedule",
            &json!({ "flowId": archived, "userEmail": "bob@example.com",
                     "scheduledAt": (Utc::now() + chrono::Duration::days(1)).to_rfc3339() }),
        )
        .await;
    assert_eq!(refused.status, 409, "{:?}", refused.body);
    assert!(
        refused.body["message"]
            .as_str()
            .is_some_and(|message| message.contains("archived")),
        "{:?}",
        refused.body
    );

    // The earlier schedule's occurrence is skipped: the one-off schedule ends, unassigned.
    let done = app
        .eventually(
            Duration::from_secs(15),
            "the skipped occurrence",
            || async {
                let response = app.get(&org, &format!("/v1/schedules/{schedule}")).await;
                (response.body["active"] == json!(false)).then_some(response.body)
            },
        )
        .await;
    assert_eq!(done["currentAssignmentId"], Value::Null);
    // The rule matches Bob on his next write, and assigns nothing.
    let touched = app
        .post(
            &org,
            "/v1/users/bulk",
            &json!({ "users": [{ "email": "bob@example.com", "name": "Bob" }] }),
        )
        .await;
    assert_eq!(touched.status, 200, "{:?}", touched.body);
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert!(assigned_by(&app, &rule).await.is_empty());
    assert_eq!(app.assignment_count().await, 0);

    // Brought back, the rule assigns on the next write.
    archive(archived.clone(), false).await;
    let touched = app
        .post(
            &org,
            "/v1/users/bulk",
            &json!({ "users": [{ "email": "bob@example.com", "name": "Bobby" }] }),
        )
        .await;
    assert_eq!(touched.status, 200, "{:?}", touched.body);
    let expected = ["bob@example.com"];
    app.eventually(Duration::from_secs(30), "the rule's assignment", || async {
        (assigned_by(&app, &rule).await == expected).then_some(())
    })
    .await;
}
