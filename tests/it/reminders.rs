//! Reminders (design §16): a flow's policy sends `flow.reminder` events before and after each
//! open assignment's due date and escalates to the manager, once per (assignment, due date, kind,
//! offset) with two schedulers scanning at once or one killed mid-run, computed in the organization's time zone across
//! clock changes, and never for cancelled, completed or deactivated people's assignments.

use chrono::{DateTime, Utc};
use flow_common::db::orgs::Tier;
use flow_tests::{TestApp, TestOrg, TestResponse};
use serde_json::{Value, json};

const USER_SCHEMA: &str = "urn:ietf:params:scim:schemas:core:2.0:User";
const ENTERPRISE: &str = "urn:ietf:params:scim:schemas:extension:enterprise:2.0:User";
const PATCH_OP: &str = "urn:ietf:params:scim:api:messages:2.0:PatchOp";

fn at(text: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(text).expect("time").to_utc()
}

async fn scan(app: &TestApp, now: &str) -> usize {
    flow_workers::scheduler::scan_reminders(&app.db, at(now), 100)
        .await
        .expect("scan")
}

async fn set_policy(app: &TestApp, org: &TestOrg, flow: &str, reminders: Value) -> TestResponse {
    app.request(
        reqwest::Method::PATCH,
        &format!("/v1/flows/{flow}"),
        Some(&org.key),
        Some(&json!({ "reminders": reminders })),
        &[],
    )
    .await
}

/// The `data.reminder` of every `flow.reminder` of the assignment, oldest first.
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

async fn scim_user(app: &TestApp, org: &TestOrg, email: &str, manager: Value) -> String {
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
                ENTERPRISE: { "manager": manager }
            })),
            &[],
        )
        .await;
    assert_eq!(created.status, 201, "{:?}", created.body);
    created.body["id"].as_str().expect("id").to_owned()
}

#[tokio::test]
async fn reminders_come_once_each_at_local_times_across_a_clock_change_and_escalate_to_the_manager()
{
    let app = TestApp::spawn().await;
    let org = app.create_org(Tier::Standard).await;
    sqlx::query("UPDATE organizations SET timezone = 'Europe/Paris' WHERE id = $1")
        .bind(org.id)
        .execute(&app.db)
        .await
        .expect("zone");
    scim_user(
        &app,
        &org,
        "kim@example.com",
        json!({ "value": "mgr-9", "displayName": "Max Boss" }),
    )
    .await;
    let flow = app.create_flow(&org, "Safety", &[10]).await;
    let policy = set_policy(
        &app,
        &org,
        &flow,
        json!({ "beforeDueDays": [7, 1, 7], "afterDueDays": [1], "escalateAfterDays": 2 }),
    )
    .await;
    assert_eq!(policy.status, 200, "{:?}", policy.body);
    assert_eq!(
        policy.body["reminders"],
        json!({ "beforeDueDays": [1, 7], "afterDueDays": [1], "escalateAfterDays": 2 })
    );
    // Due at the end of Monday 29 March 2027 in Paris (summer time began on the 28th):
    // 21:59:59Z. Seven local days before is 23:59:59 winter time on the 22nd: 22:59:59Z, an
    // hour later than seven times 24 hours before.
    let id = app
        .assign_persisted(
            &org,
            &flow,
            "kim@example.com",
            json!({ "dueDate": "2027-03-29" }),
        )
        .await;
    assert_eq!(scan(&app, "2027-03-22T21:59:59Z").await, 0);
    assert_eq!(scan(&app, "2027-03-22T22:59:58Z").await, 0);
    // Two schedulers at the moment it is due: one reminder.
    let (first, second) = tokio::join!(
        scan(&app, "2027-03-22T22:59:59Z"),
        scan(&app, "2027-03-22T22:59:59Z")
    );
    assert_eq!(first + second, 1);
    assert_eq!(scan(&app, "2027-03-23T10:00:00Z").await, 0);
    // A scheduler killed mid-run: it claimed the reminder and wrote its event, and its
    // transaction never committed. The next scan sends it, once.
    {
        let mut killed = app.db.begin().await.expect("transaction");
        let claimed =
            flow_common::db::reminders::send_due(&mut killed, at("2027-03-28T21:59:59Z"), 100)
                .await
                .expect("claim");
        assert_eq!(claimed, 1);
        // Another scheduler meanwhile finds the scan taken: it answers at once, having sent
        // nothing, instead of waiting on the claims above to insert nothing.
        let other = tokio::time::timeout(
            std::time::Duration::from_secs(5),
            scan(&app, "2027-03-28T21:59:59Z"),
        )
        .await
        .expect("a second scan waited on the first one's claims");
        assert_eq!(other, 0);
        // As the killed scheduler's connection closing does; a dropped transaction's rollback
        // runs only when its pooled connection is next used, and until then the scan stays
        // taken (seen once in CI: the next scan answered 0).
        killed.rollback().await.expect("rollback");
    }
    assert_eq!(scan(&app, "2027-03-28T21:59:59Z").await, 1);
    assert_eq!(scan(&app, "2027-03-30T21:59:59Z").await, 1);
    assert_eq!(scan(&app, "2027-03-31T21:59:59Z").await, 1);
    assert_eq!(scan(&app, "2027-04-01T12:00:00Z").await, 0);
    let sent = reminders_of(&app, &id).await;
    let kinds: Vec<(String, i64)> = sent
        .iter()
        .map(|reminder| {
            (
                reminder["kind"].as_str().expect("kind").to_owned(),
                reminder["offsetDays"].as_i64().expect("offset"),
            )
        })
        .collect();
    assert_eq!(
        kinds,
        [
            ("due_soon".to_owned(), 7),
            ("due_soon".to_owned(), 1),
            ("overdue".to_owned(), 1),
            ("escalation".to_owned(), 2)
        ]
    );
    assert_eq!(
        sent[3]["manager"],
        json!({ "id": "mgr-9", "name": "Max Boss" })
    );
    // Each has an event id of its own; the policy shows on the flow.
    let ids: std::collections::HashSet<String> =
        sqlx::query_scalar("SELECT event_id::text FROM outbox WHERE event_type = 'flow.reminder'")
            .fetch_all(&app.db)
            .await
            .expect("ids")
            .into_iter()
            .collect();
    assert_eq!(ids.len(), 4);
    let read = app.get(&org, &format!("/v1/flows/{flow}")).await;
    assert_eq!(read.body["reminders"]["escalateAfterDays"], json!(2));

    // Bad policies are refused; `null` removes it.
    for bad in [
        json!({ "beforeDueDays": [0] }),
        json!({ "afterDueDays": [400] }),
        json!({ "afterDueDays": (1..=11).collect::<Vec<i32>>() }),
        json!({ "escalateAfterDays": -1 }),
        json!({ "everyDays": [1] }),
    ] {
        let response = set_policy(&app, &org, &flow, bad.clone()).await;
        assert_eq!(response.status, 400, "{bad}: {:?}", response.body);
    }
    let removed = set_policy(&app, &org, &flow, Value::Null).await;
    assert_eq!(removed.status, 200, "{:?}", removed.body);
    assert!(removed.body.get("reminders").is_none());
}

#[tokio::test]
async fn no_reminders_for_cancelled_completed_or_deactivated_and_a_new_due_date_has_its_own() {
    let app = TestApp::spawn().await;
    let org = app.create_org(Tier::Standard).await;
    let mut users = Vec::new();
    for email in [
        "c1@example.com",
        "c2@example.com",
        "c3@example.com",
        "c4@example.com",
    ] {
        users.push(scim_user(&app, &org, email, json!({ "value": "m" })).await);
    }
    let flow = app.create_flow(&org, "Privacy", &[10]).await;
    let modules = app.module_ids(&org, &flow).await;
    let set = set_policy(&app, &org, &flow, json!({ "afterDueDays": [1] })).await;
    assert_eq!(set.status, 200, "{:?}", set.body);
    let mut ids = Vec::new();
    for email in [
        "c1@example.com",
        "c2@example.com",
        "c3@example.com",
        "c4@example.com",
    ] {
        ids.push(
            app.assign_persisted(&org, &flow, email, json!({ "dueDate": "2027-01-10" }))
                .await,
        );
    }
    let cancelled = app
        .post(
            &org,
            &format!("/v1/assignments/{}/cancel", ids[0]),
            &json!({}),
        )
        .await;
    assert_eq!(cancelled.status, 200);
    let done = app
        .post(
            &org,
            &format!("/v1/assignments/{}/progress", ids[1]),
            &json!({ "moduleId": modules[0], "status": "completed" }),
        )
        .await;
    assert_eq!(done.status, 202);
    let deactivated = app
        .scim_request(
            &org.key,
            reqwest::Method::PATCH,
            &format!("/Users/{}", users[2]),
            Some(&json!({ "schemas": [PATCH_OP],
                          "Operations": [{ "op": "replace", "path": "active", "value": false }] })),
            &[],
        )
        .await;
    assert_eq!(deactivated.status, 200, "{:?}", deactivated.body);
    app.wait_for_status(&org, &ids[0], "cancelled").await;
    app.wait_for_status(&org, &ids[1], "completed").await;

    assert_eq!(scan(&app, "2027-01-11T23:59:59Z").await, 1);
    for id in &ids[..3] {
        assert!(reminders_of(&app, id).await.is_empty());
    }
    assert_eq!(reminders_of(&app, &ids[3]).await.len(), 1);

    // Moved to a later due date: the reminders of the new one come too.
    let moved = app
        .request(
            reqwest::Method::PATCH,
            &format!("/v1/assignments/{}", ids[3]),
            Some(&org.key),
            Some(&json!({ "dueDate": "2027-02-10" })),
            &[],
        )
        .await;
    assert_eq!(moved.status, 200, "{:?}", moved.body);
    app.eventually(
        std::time::Duration::from_secs(10),
        "the new due date",
        || async {
            let body = app
                .get(&org, &format!("/v1/assignments/{}", ids[3]))
                .await
                .body;
            body["dueDate"]
                .as_str()
                .is_some_and(|due| due.starts_with("2027-02-10"))
                .then_some(())
        },
    )
    .await;
    assert_eq!(scan(&app, "2027-02-11T23:59:59Z").await, 1);
    assert_eq!(scan(&app, "2027-02-11T23:59:59Z").await, 0);
    assert_eq!(reminders_of(&app, &ids[3]).await.len(), 2);
}
