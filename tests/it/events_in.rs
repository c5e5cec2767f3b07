//! Events in (issue 38, docs/events.md): event triggers (CRUD, bad input, the limit per
//! organization, preview, tenant isolation) and `POST /v1/events` in CloudEvents' three modes:
//! results per event in request order, exactly once (re-sent and concurrent duplicates make one
//! assignment), ignored and invalid events with their reasons, the cancel action, the due date
//! from the event, the event on the assignment and on its `flow.assigned` webhook, and the
//! limits (events per request, body size, content type).

use std::time::Duration;

use flow_common::db::orgs::Tier;
use flow_tests::proxy::Proxy;
use flow_tests::receiver::Receiver;
use flow_tests::{TestApp, TestOptions, TestOrg, TestResponse};
use serde_json::{Value, json};

const STRUCTURED: &str = "application/cloudevents+json";
const BATCH: &str = "application/cloudevents-batch+json";

/// POSTs `body` (raw) to `/v1/events` with `content_type` and extra headers.
async fn send_raw(
    app: &TestApp,
    org: &TestOrg,
    content_type: &str,
    body: Vec<u8>,
    headers: &[(&str, &str)],
) -> TestResponse {
    let mut request = app
        .client
        .post(format!("{}/v1/events", app.base_url))
        .bearer_auth(&org.key)
        .header("content-type", content_type)
        .body(body);
    for (name, value) in headers {
        request = request.header(*name, *value);
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

/// Sends one event in the structured mode; insists on a 202 and answers its result.
async fn send(app: &TestApp, org: &TestOrg, event: &Value) -> Value {
    let response = send_raw(app, org, STRUCTURED, event.to_string().into_bytes(), &[]).await;
    assert_eq!(response.status, 202, "{:?}", response.body);
    response.body["results"][0].clone()
}

/// Sends events in the batch mode; insists on a 202 and answers the results.
async fn send_batch(app: &TestApp, org: &TestOrg, events: &[Value]) -> Vec<Value> {
    let body = Value::Array(events.to_vec()).to_string().into_bytes();
    let response = send_raw(app, org, BATCH, body, &[]).await;
    assert_eq!(response.status, 202, "{:?}", response.body);
    response.body["results"]
        .as_array()
        .expect("results")
        .clone()
}

/// A hire event for `email` with id `id`.
fn hired(id: &str, email: &str) -> Value {
    json!({
        "specversion": "1.0",
        "id": id,
        "source": "https://hr.example.com",
        "type": "com.example.hr.employee.hired",
        "data": {"employee": {"email": email, "startDate": "2099-03-01"}}
    })
}

/// Creates a trigger (insisting on a 201); answers its id.
async fn create_trigger(app: &TestApp, org: &TestOrg, body: Value) -> String {
    let response = app.post(org, "/v1/event-triggers", &body).await;
    assert_eq!(response.status, 201, "{:?}", response.body);
    response.body["triggerId"]
        .as_str()
        .expect("triggerId")
        .to_owned()
}

/// A trigger assigning `flow` on hire events, the e-mail at `/data/employee/email`.
fn on_hire(flow: &str) -> Value {
    json!({
        "name": "New hires",
        "match": {"type": "com.example.hr.employee.hired"},
        "userEmailPointer": "/data/employee/email",
        "action": "assign",
        "flowId": flow,
    })
}

/// An organization that assigns on hire events, made by [`hiring`].
struct Hiring {
    /// The organization (standard tier).
    org: TestOrg,
    /// The flow "Onboarding" (30 days).
    flow: String,
    /// The trigger assigning it on hire events.
    trigger_id: String,
}

/// A standard organization with the people `emails`, the flow "Onboarding" and a trigger
/// assigning it on hire events: [`on_hire`] with the fields of `extra` set (its `due`, …).
async fn hiring(app: &TestApp, emails: &[&str], extra: Value) -> Hiring {
    let org = app.create_org(Tier::Standard).await;
    app.create_users(&org, emails).await;
    let flow = app.create_flow(&org, "Onboarding", &[30]).await;
    let mut trigger = on_hire(&flow);
    for (field, value) in extra.as_object().expect("fields") {
        trigger[field] = value.clone();
    }
    let trigger_id = create_trigger(app, &org, trigger).await;
    Hiring {
        org,
        flow,
        trigger_id,
    }
}

/// Waits until the assignment `id` is persisted; answers it.
async fn persisted(app: &TestApp, org: &TestOrg, id: &str) -> Value {
    let path = format!("/v1/assignments/{id}");
    app.eventually(Duration::from_secs(15), "the assignment", || async {
        let response = app.get(org, &path).await;
        (response.status == 200).then_some(response.body)
    })
    .await
}

async fn api_only() -> TestApp {
    TestApp::spawn_with(TestOptions {
        assign_worker: false,
        ..TestOptions::default()
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn triggers_are_created_read_listed_replaced_and_deleted_and_bad_input_names_the_field() {
    let app = api_only().await;
    let org = app.create_org(Tier::Standard).await;
    let flow = app.create_flow(&org, "Onboarding", &[30]).await;
    let body = json!({
        "name": "New hires",
        "match": {"typePrefix": "com.example.hr.", "source": "https://hr.example.com"},
        "userEmailPointer": "/data/employee/email",
        "action": "assign",
        "flowId": flow,
        "due": {"fromPointer": "/data/employee/startDate"},
        "priority": "high",
        "notes": "Welcome",
    });
    let id = create_trigger(&app, &org, body).await;
    assert!(id.starts_with("etr_"), "{id}");
    let read = app.get(&org, &format!("/v1/event-triggers/{id}")).await;
    assert_eq!(read.status, 200);
    assert_eq!(read.body["name"], "New hires");
    assert_eq!(
        read.body["match"],
        json!({"typePrefix": "com.example.hr.", "source": "https://hr.example.com"})
    );
    assert_eq!(
        read.body["due"],
        json!({"fromPointer": "/data/employee/startDate"})
    );
    assert_eq!(read.body["flowName"], "Onboarding");
    assert_eq!(read.body["priority"], "high");
    let list = app.get(&org, "/v1/event-triggers").await;
    assert_eq!(list.status, 200);
    assert_eq!(list.body["data"].as_array().map(Vec::len), Some(1));
    let replaced = app
        .request(
            reqwest::Method::PUT,
            &format!("/v1/event-triggers/{id}"),
            Some(&org.key),
            Some(&json!({
                "name": "Leavers",
                "match": {"type": "com.example.hr.employee.left"},
                "userEmailPointer": "/data/email",
                "action": "cancel",
                "flowId": flow,
            })),
            &[],
        )
        .await;
    assert_eq!(replaced.status, 200, "{:?}", replaced.body);
    assert_eq!(replaced.body["action"], "cancel");
    assert_eq!(
        replaced.body["match"],
        json!({"type": "com.example.hr.employee.left"})
    );
    assert_eq!(replaced.body["due"], Value::Null);

    let bad = [
        (
            json!({"match": {"type": "t"}, "userEmailPointer": "/e", "action": "assign", "flowId": flow}),
            "name is required",
        ),
        (
            json!({"name": "x", "match": {"type": "t", "typePrefix": "t"}, "userEmailPointer": "/e", "action": "assign", "flowId": flow}),
            "exactly one of type and typePrefix",
        ),
        (
            json!({"name": "x", "match": {}, "userEmailPointer": "/e", "action": "assign", "flowId": flow}),
            "exactly one of type and typePrefix",
        ),
        (
            json!({"name": "x", "match": {"type": "t"}, "userEmailPointer": "data/email", "action": "assign", "flowId": flow}),
            "JSON Pointer",
        ),
        (
            json!({"name": "x", "match": {"type": "t"}, "userEmailPointer": "/a~2", "action": "assign", "flowId": flow}),
            "JSON Pointer",
        ),
        (
            json!({"name": "x", "match": {"type": "t"}, "userEmailPointer": format!("/{}", "a".repeat(256)), "action": "assign", "flowId": flow}),
            "at most 256",
        ),
        (
            json!({"name": "x", "match": {"type": "t"}, "action": "assign", "flowId": flow}),
            "userEmailPointer is required",
        ),
        (
            json!({"name": "x", "match": {"type": "t"}, "userEmailPointer": "/e", "action": "enrol", "flowId": flow}),
            "assign, cancel",
        ),
        (
            json!({"name": "x", "match": {"type": "t"}, "userEmailPointer": "/e", "action": "assign", "flowId": flow, "due": {"days": 0}}),
            "between 1 and",
        ),
        (
            json!({"name": "x", "match": {"type": "t"}, "userEmailPointer": "/e", "action": "assign", "flowId": flow, "due": {"days": 3, "fromPointer": "/d"}}),
            "one of days and fromPointer",
        ),
        (
            json!({"name": "x", "match": {"type": "t"}, "userEmailPointer": "/e", "action": "cancel", "flowId": flow, "priority": "high"}),
            "assign action only",
        ),
        (
            json!({"name": "x", "match": {"type": "t"}, "userEmailPointer": "/e", "action": "assign", "flowId": flow, "notes": "n".repeat(2001)}),
            "at most 2000",
        ),
        (
            json!({"name": "x", "match": {"type": "t"}, "userEmailPointer": "/e", "action": "assign", "flowId": flow, "extra": 1}),
            "extra",
        ),
    ];
    for (body, message) in bad {
        let response = app.post(&org, "/v1/event-triggers", &body).await;
        assert_eq!(response.status, 400, "{body}: {:?}", response.body);
        let text = response.body["message"].as_str().unwrap_or_default();
        assert!(text.contains(message), "{body}: {text}");
    }
    let unknown_flow = app
        .post(
            &org,
            "/v1/event-triggers",
            &json!({"name": "x", "match": {"type": "t"}, "userEmailPointer": "/e", "action": "assign", "flowId": "flow_0193a1b2c3d47e8f9a0b1c2d3e4f5a6b"}),
        )
        .await;
    assert_eq!(unknown_flow.status, 404);
    let deleted = app
        .request(
            reqwest::Method::DELETE,
            &format!("/v1/event-triggers/{id}"),
            Some(&org.key),
            None,
            &[],
        )
        .await;
    assert_eq!(deleted.status, 204);
    assert_eq!(
        app.get(&org, &format!("/v1/event-triggers/{id}"))
            .await
            .status,
        404
    );
    let audited: Vec<String> = sqlx::query_scalar(
        "SELECT action FROM audit_events WHERE org_id = $1 AND action LIKE 'event_trigger.%'
         ORDER BY id",
    )
    .bind(org.id)
    .fetch_all(&app.db)
    .await
    .expect("audit");
    assert_eq!(
        audited,
        [
            "event_trigger.created",
            "event_trigger.updated",
            "event_trigger.deleted"
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_organization_has_at_most_100_triggers() {
    let app = api_only().await;
    let org = app.create_org(Tier::Standard).await;
    let flow = app.create_flow(&org, "Onboarding", &[30]).await;
    for _ in 0..100 {
        create_trigger(&app, &org, on_hire(&flow)).await;
    }
    let over = app.post(&org, "/v1/event-triggers", &on_hire(&flow)).await;
    assert_eq!(over.status, 409, "{:?}", over.body);
    assert!(
        over.body["message"]
            .as_str()
            .unwrap_or_default()
            .contains("at most 100"),
        "{:?}",
        over.body
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_assigns_once_with_its_due_date_and_the_assignment_names_the_event() {
    let app = TestApp::spawn().await;
    let extra = json!({"due": {"fromPointer": "/data/employee/startDate"}, "priority": "high",
                       "notes": "Welcome aboard"});
    let Hiring {
        org, trigger_id, ..
    } = hiring(&app, &["ada@example.com"], extra).await;

    let event = hired("hire-1", "Ada@Example.com");
    let result = send(&app, &org, &event).await;
    assert_eq!(result["status"], "accepted", "{result}");
    assert_eq!(result["id"], "hire-1");
    assert_eq!(result["source"], "https://hr.example.com");
    let ids = result["assignmentIds"].as_array().expect("ids").clone();
    assert_eq!(ids.len(), 1);
    let id = ids[0].as_str().expect("id");
    let assignment = persisted(&app, &org, id).await;
    assert_eq!(assignment["assigneeEmail"], "ada@example.com");
    assert_eq!(assignment["priority"], "high");
    assert_eq!(assignment["notes"], "Welcome aboard");
    // The end of the start date in the organization's zone (UTC).
    assert_eq!(assignment["dueDate"], "2099-03-01T23:59:59.000Z");
    assert_eq!(
        assignment["source"],
        json!({"event": {
            "source": "https://hr.example.com",
            "type": "com.example.hr.employee.hired",
            "id": "hire-1",
            "triggerId": trigger_id,
        }})
    );

    // Sent again: a duplicate naming the same assignment, and nothing acts twice.
    let again = send(&app, &org, &event).await;
    assert_eq!(again["status"], "duplicate", "{again}");
    assert_eq!(again["assignmentIds"], json!(ids));
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(app.assignment_count().await, 1);
    let audited: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM audit_events WHERE org_id = $1 AND action = 'event_trigger.assigned'",
    )
    .bind(org.id)
    .fetch_one(&app.db)
    .await
    .expect("audit");
    assert_eq!(audited, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_is_answered_per_event_in_request_order() {
    let app = TestApp::spawn().await;
    let Hiring { org, .. } = hiring(
        &app,
        &["ada@example.com", "bob@example.com"],
        json!({"due": {"fromPointer": "/data/employee/startDate"}}),
    )
    .await;

    let mut past_due = hired("e6", "bob@example.com");
    past_due["data"]["employee"]["startDate"] = json!("2001-01-01");
    let mut bad_date = hired("e7", "bob@example.com");
    bad_date["data"]["employee"]["startDate"] = json!("someday");
    let events = [
        hired("e1", "ada@example.com"),
        json!({"specversion": "1.0", "id": "e2", "source": "https://hr.example.com", "type": "com.example.hr.employee.promoted", "data": {}}),
        json!({"specversion": "1.0", "id": "e3", "source": "https://hr.example.com", "type": "com.example.hr.employee.hired", "data": {}}),
        hired("e4", "nobody@example.com"),
        json!({"specversion": "0.3", "id": "e5", "source": "s", "type": "t"}),
        past_due,
        bad_date,
        json!({"id": "e8", "source": "s", "type": "t", "specversion": "1.0", "data": 1}),
        hired("e1", "ada@example.com"),
        json!({"specversion": "1.0", "source": "s", "type": "t"}),
        hired("e9", "bob@example.com"),
    ];
    let results = send_batch(&app, &org, &events).await;
    let summary: Vec<(String, String)> = results
        .iter()
        .map(|result| {
            (
                result["id"].as_str().unwrap_or_default().to_owned(),
                result["status"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    let expected = [
        ("e1", "accepted"),
        ("e2", "ignored"),
        ("e3", "invalid"),
        ("e4", "invalid"),
        ("e5", "invalid"),
        ("e6", "invalid"),
        ("e7", "invalid"),
        ("e8", "ignored"),
        ("e1", "duplicate"),
        ("", "invalid"),
        ("e9", "accepted"),
    ];
    assert_eq!(
        summary,
        expected
            .iter()
            .map(|(id, status)| (id.to_string(), status.to_string()))
            .collect::<Vec<_>>()
    );
    let reason = |index: usize| {
        results[index]["reason"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    assert!(reason(1).contains("no trigger matched"), "{}", reason(1));
    assert!(
        reason(2).contains("no e-mail at /data/employee/email"),
        "{}",
        reason(2)
    );
    assert!(
        reason(3).contains("no user with e-mail nobody@example.com"),
        "{}",
        reason(3)
    );
    assert!(reason(4).contains("specversion"), "{}", reason(4));
    assert!(reason(5).contains("not in the future"), "{}", reason(5));
    assert!(reason(6).contains("YYYY-MM-DD"), "{}", reason(6));
    assert!(reason(9).contains("id is required"), "{}", reason(9));
    assert_eq!(results[8]["assignmentIds"], results[0]["assignmentIds"]);
    for index in [0, 10] {
        let id = results[index]["assignmentIds"][0].as_str().expect("id");
        persisted(&app, &org, id).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(app.assignment_count().await, 2);
    // Invalid events are not recorded: fixed and sent again, they act.
    let fixed = send(&app, &org, &hired("e4", "bob@example.com")).await;
    assert_eq!(fixed["status"], "accepted", "{fixed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_binary_mode_event_assigns_from_its_headers_and_body() {
    let app = TestApp::spawn().await;
    let org = app.create_org(Tier::Standard).await;
    app.create_users(&org, &["ada@example.com"]).await;
    let flow = app.create_flow(&org, "Security", &[10]).await;
    create_trigger(
        &app,
        &org,
        json!({
            "name": "Phishing failed",
            "match": {"typePrefix": "com.example.phish.", "source": "phish-tool"},
            "userEmailPointer": "/data/target",
            "action": "assign",
            "flowId": flow,
            "due": {"days": 7},
        }),
    )
    .await;
    let headers = [
        ("ce-specversion", "1.0"),
        ("ce-id", "p-1"),
        ("ce-source", "phish-tool"),
        ("ce-type", "com.example.phish.failed"),
    ];
    let body = json!({"target": "ada@example.com"})
        .to_string()
        .into_bytes();
    let response = send_raw(&app, &org, "application/json", body.clone(), &headers).await;
    assert_eq!(response.status, 202, "{:?}", response.body);
    let result = &response.body["results"][0];
    assert_eq!(result["status"], "accepted", "{result}");
    let id = result["assignmentIds"][0].as_str().expect("id");
    let assignment = persisted(&app, &org, id).await;
    assert!(assignment["dueDate"].is_string(), "{assignment}");
    // Another source does not match.
    let other = [
        ("ce-specversion", "1.0"),
        ("ce-id", "p-2"),
        ("ce-source", "other-tool"),
        ("ce-type", "com.example.phish.failed"),
    ];
    let response = send_raw(&app, &org, "application/json", body, &other).await;
    assert_eq!(response.body["results"][0]["status"], "ignored");
    // Binary mode without ce-id is an invalid event.
    let missing = [
        ("ce-specversion", "1.0"),
        ("ce-source", "phish-tool"),
        ("ce-type", "com.example.phish.failed"),
    ];
    let response = send_raw(&app, &org, "text/plain", b"hello".to_vec(), &missing).await;
    assert_eq!(response.status, 202);
    assert_eq!(response.body["results"][0]["status"], "invalid");
    assert_eq!(response.body["results"][0]["reason"], "id is required");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_concurrent_posts_of_one_event_make_one_assignment() {
    let app = TestApp::spawn().await;
    let emails: Vec<String> = (0..20).map(|n| format!("user{n}@example.com")).collect();
    let refs: Vec<&str> = emails.iter().map(String::as_str).collect();
    let Hiring { org, .. } = hiring(&app, &refs, json!({})).await;
    let events: Vec<Value> = emails
        .iter()
        .enumerate()
        .map(|(n, email)| hired(&format!("c-{n}"), email))
        .collect();
    // The same batch twice at once, and each event alone at once too.
    let (first, second) = tokio::join!(
        send_batch(&app, &org, &events),
        send_batch(&app, &org, &events)
    );
    for (a, b) in first.iter().zip(&second) {
        let mut statuses = [
            a["status"].as_str().unwrap_or_default(),
            b["status"].as_str().unwrap_or_default(),
        ];
        statuses.sort_unstable();
        assert_eq!(statuses, ["accepted", "duplicate"], "{a} {b}");
        assert_eq!(a["assignmentIds"], b["assignmentIds"]);
    }
    let single = hired("solo", "user0@example.com");
    let (x, y) = tokio::join!(send(&app, &org, &single), send(&app, &org, &single));
    let mut statuses = [
        x["status"].as_str().unwrap_or_default().to_owned(),
        y["status"].as_str().unwrap_or_default().to_owned(),
    ];
    statuses.sort_unstable();
    assert_eq!(statuses, ["accepted", "duplicate"]);
    app.eventually(Duration::from_secs(20), "20 assignments", || async {
        (app.assignment_count().await == 20).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    // "solo" names user0's open assignment of the flow: aliased, not a second one.
    assert_eq!(app.assignment_count().await, 20);
    let actions: i64 = sqlx::query_scalar("SELECT count(*) FROM inbound_event_actions")
        .fetch_one(&app.db)
        .await
        .expect("actions");
    assert_eq!(actions, 21);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_trigger_cancels_the_open_assignment_of_its_flow() {
    let app = TestApp::spawn().await;
    let org = app.create_org(Tier::Standard).await;
    app.create_users(&org, &["ada@example.com", "bob@example.com"])
        .await;
    let flow = app.create_flow(&org, "Onboarding", &[30]).await;
    let other = app.create_flow(&org, "Other", &[30]).await;
    let open = app
        .assign_persisted(&org, &flow, "ada@example.com", json!({}))
        .await;
    let kept = app
        .assign_persisted(&org, &other, "ada@example.com", json!({}))
        .await;
    create_trigger(&app, &org, on_leave(&flow)).await;
    let left = |id: &str, email: &str| json!({"specversion": "1.0", "id": id, "source": "hr", "type": "com.example.hr.employee.left", "data": {"email": email}});
    let result = send(&app, &org, &left("l-1", "ada@example.com")).await;
    assert_eq!(result["status"], "accepted", "{result}");
    assert_eq!(result["assignmentIds"], json!([open]));
    let cancelled = app.wait_for_status(&org, &open, "cancelled").await;
    assert!(
        cancelled["cancellationReason"]
            .as_str()
            .unwrap_or_default()
            .contains("Leavers"),
        "{cancelled}"
    );
    assert_eq!(
        app.get(&org, &format!("/v1/assignments/{kept}")).await.body["status"],
        "pending"
    );
    // Re-sent: nothing more; and bob has nothing open to cancel.
    let again = send(&app, &org, &left("l-1", "ada@example.com")).await;
    assert_eq!(again["status"], "duplicate");
    let nothing = send(&app, &org, &left("l-2", "bob@example.com")).await;
    assert_eq!(nothing["status"], "ignored", "{nothing}");
    assert!(
        nothing["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("no open assignment"),
        "{nothing}"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        app.events_of(&open).await,
        ["flow.assigned", "flow.cancelled"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_organizations_triggers_never_act_on_anothers_events_nor_show() {
    let app = TestApp::spawn().await;
    let a = app.create_org(Tier::Standard).await;
    let b = app.create_org(Tier::Standard).await;
    app.create_users(&a, &["ada@example.com"]).await;
    app.create_users(&b, &["ada@example.com"]).await;
    let flow_a = app.create_flow(&a, "A onboarding", &[30]).await;
    let flow_b = app.create_flow(&b, "B onboarding", &[30]).await;
    let trigger_a = create_trigger(&app, &a, on_hire(&flow_a)).await;
    // B cannot read, replace or delete A's trigger, nor use A's flow.
    assert_eq!(
        app.get(&b, &format!("/v1/event-triggers/{trigger_a}"))
            .await
            .status,
        404
    );
    let deleted = app
        .request(
            reqwest::Method::DELETE,
            &format!("/v1/event-triggers/{trigger_a}"),
            Some(&b.key),
            None,
            &[],
        )
        .await;
    assert_eq!(deleted.status, 404);
    assert_eq!(
        app.post(&b, "/v1/event-triggers", &on_hire(&flow_a))
            .await
            .status,
        404
    );
    assert_eq!(
        app.get(&b, "/v1/event-triggers").await.body["data"],
        json!([])
    );
    // B has no trigger: its copy of the event is ignored, and A's is not a duplicate of B's.
    let event = hired("shared-id", "ada@example.com");
    let in_b = send(&app, &b, &event).await;
    assert_eq!(in_b["status"], "ignored", "{in_b}");
    let in_a = send(&app, &a, &event).await;
    assert_eq!(in_a["status"], "accepted", "{in_a}");
    let id = in_a["assignmentIds"][0].as_str().expect("id");
    persisted(&app, &a, id).await;
    assert_eq!(
        app.get(&b, &format!("/v1/assignments/{id}")).await.status,
        404
    );
    create_trigger(&app, &b, on_hire(&flow_b)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(app.assignment_count().await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_limits_of_a_request_are_answered_before_anything_is_recorded() {
    let app = api_only().await;
    let org = app.create_org(Tier::Standard).await;
    let too_many: Vec<Value> = (0..1_001)
        .map(|n| hired(&format!("x{n}"), "a@example.com"))
        .collect();
    let body = Value::Array(too_many).to_string().into_bytes();
    let response = send_raw(&app, &org, BATCH, body, &[]).await;
    assert_eq!(response.status, 400, "{:?}", response.body);
    assert!(
        response.body["message"]
            .as_str()
            .unwrap_or_default()
            .contains("at most 1000"),
        "{:?}",
        response.body
    );
    let mut big = hired("big", "a@example.com");
    big["data"]["padding"] = json!("x".repeat(1024 * 1024));
    let response = send_raw(&app, &org, STRUCTURED, big.to_string().into_bytes(), &[]).await;
    assert_eq!(response.status, 413, "{:?}", response.body);
    let response = send_raw(
        &app,
        &org,
        "application/json",
        hired("plain", "a@example.com").to_string().into_bytes(),
        &[],
    )
    .await;
    assert_eq!(response.status, 415, "{:?}", response.body);
    assert!(
        response.body["message"]
            .as_str()
            .unwrap_or_default()
            .contains("application/cloudevents+json"),
        "{:?}",
        response.body
    );
    let response = send_raw(&app, &org, STRUCTURED, b"{not json".to_vec(), &[]).await;
    assert_eq!(response.status, 400);
    let response = send_raw(&app, &org, BATCH, b"{}".to_vec(), &[]).await;
    assert_eq!(response.status, 400);
    let unauthenticated = app
        .client
        .post(format!("{}/v1/events", app.base_url))
        .header("content-type", STRUCTURED)
        .body(hired("u", "a@example.com").to_string())
        .send()
        .await
        .expect("sent");
    assert_eq!(unauthenticated.status().as_u16(), 401);
    let recorded: i64 = sqlx::query_scalar("SELECT count(*) FROM inbound_events")
        .fetch_one(&app.db)
        .await
        .expect("events");
    assert_eq!(recorded, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_preview_says_what_the_triggers_would_do_without_acting() {
    let app = api_only().await;
    let Hiring {
        org, trigger_id, ..
    } = hiring(&app, &["ada@example.com"], json!({"due": {"days": 14}})).await;
    let preview = app
        .post(
            &org,
            "/v1/event-triggers/preview",
            &json!({"event": hired("p-1", "ada@example.com")}),
        )
        .await;
    assert_eq!(preview.status, 200, "{:?}", preview.body);
    assert_eq!(preview.body["status"], "accepted");
    let found = &preview.body["matches"][0];
    assert_eq!(found["triggerId"], json!(trigger_id));
    assert_eq!(found["action"], "assign");
    assert_eq!(found["userEmail"], "ada@example.com");
    assert_eq!(found["userFound"], true);
    assert_eq!(found["flowName"], "Onboarding");
    assert!(found["dueDate"].is_string(), "{found}");
    let unknown = app
        .post(
            &org,
            "/v1/event-triggers/preview",
            &json!({"event": hired("p-2", "zed@example.com")}),
        )
        .await;
    assert_eq!(unknown.body["status"], "invalid");
    assert_eq!(unknown.body["matches"][0]["userFound"], false);
    let ignored = app
        .post(
            &org,
            "/v1/event-triggers/preview",
            &json!({"event": {"specversion": "1.0", "id": "1", "source": "s", "type": "other"}}),
        )
        .await;
    assert_eq!(ignored.body["status"], "ignored");
    assert_eq!(ignored.body["matches"], json!([]));
    let recorded: i64 = sqlx::query_scalar("SELECT count(*) FROM inbound_events")
        .fetch_one(&app.db)
        .await
        .expect("events");
    assert_eq!(recorded, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_event_is_in_the_flow_assigned_webhook() {
    let app = TestApp::spawn_with(TestOptions {
        webhooks: true,
        ..TestOptions::default()
    })
    .await;
    let receiver = Receiver::start().await.expect("receiver");
    let org = app.create_org(Tier::Standard).await;
    app.create_webhook(
        &org,
        &json!({ "url": receiver.url("events"), "events": ["flow.assigned"] }),
    )
    .await;
    app.create_users(&org, &["ada@example.com"]).await;
    let flow = app.create_flow(&org, "Onboarding", &[30]).await;
    let trigger_id = create_trigger(&app, &org, on_hire(&flow)).await;
    let result = send(&app, &org, &hired("w-1", "ada@example.com")).await;
    assert_eq!(result["status"], "accepted", "{result}");
    let received = receiver
        .wait_for_deliveries("events", 1, Duration::from_secs(20))
        .await;
    let event = received[0].event();
    assert_eq!(event["type"], "flow.assigned");
    assert_eq!(event["data"]["assignmentId"], result["assignmentIds"][0]);
    assert_eq!(
        event["data"]["source"],
        json!({"event": {
            "source": "https://hr.example.com",
            "type": "com.example.hr.employee.hired",
            "id": "w-1",
            "triggerId": trigger_id,
        }})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_recorded_while_the_broker_is_down_acts_once_when_sent_again() {
    let proxy = Proxy::start("127.0.0.1:5672".parse().expect("address")).await;
    let app = TestApp::spawn_with(TestOptions {
        api_amqp_url: Some(format!("amqp://guest:guest@{}/%2f", proxy.address)),
        ..TestOptions::default()
    })
    .await;
    let Hiring { org, .. } = hiring(&app, &["ada@example.com"], json!({})).await;
    let event = hired("down-1", "ada@example.com");
    proxy.disable().await;
    let response = send_raw(&app, &org, STRUCTURED, event.to_string().into_bytes(), &[]).await;
    assert_eq!(response.status, 503, "{:?}", response.body);
    let unpublished: i64 =
        sqlx::query_scalar("SELECT count(*) FROM inbound_event_actions WHERE published_at IS NULL")
            .fetch_one(&app.db)
            .await
            .expect("actions");
    assert_eq!(unpublished, 1, "the event and its action are recorded");
    proxy.enable();
    // The sender retries: a duplicate, whose action is published now.
    let result = app
        .eventually(
            Duration::from_secs(15),
            "the retry to be answered",
            || async {
                let response =
                    send_raw(&app, &org, STRUCTURED, event.to_string().into_bytes(), &[]).await;
                (response.status == 202).then(|| response.body["results"][0].clone())
            },
        )
        .await;
    assert_eq!(result["status"], "duplicate", "{result}");
    let id = result["assignmentIds"][0].as_str().expect("id");
    persisted(&app, &org, id).await;
    let again = send(&app, &org, &event).await;
    assert_eq!(again["status"], "duplicate");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(app.assignment_count().await, 1);
    let (published, command): (Option<chrono::DateTime<chrono::Utc>>, Option<Value>) =
        sqlx::query_as("SELECT published_at, command FROM inbound_event_actions")
            .fetch_one(&app.db)
            .await
            .expect("action");
    assert!(published.is_some(), "marked published");
    assert!(command.is_none(), "a published command is not kept");
}

/// A trigger cancelling the open assignment of `flow` on leave events (e-mail at `/data/email`).
fn on_leave(flow: &str) -> Value {
    json!({
        "name": "Leavers",
        "match": {"type": "com.example.hr.employee.left"},
        "userEmailPointer": "/data/email",
        "action": "cancel",
        "flowId": flow,
    })
}

/// A leave event for `email` with id `id`.
fn left(id: &str, email: &str) -> Value {
    json!({
        "specversion": "1.0", "id": id, "source": "https://hr.example.com",
        "type": "com.example.hr.employee.left", "data": {"email": email}
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leave_sent_before_the_hire_is_persisted_cancels_the_assignment_once_it_is() {
    let mut app = TestApp::spawn_with(TestOptions {
        scheduler: true,
        ..TestOptions::default()
    })
    .await;
    let Hiring { org, flow, .. } =
        hiring(&app, &["ada@example.com", "bob@example.com"], json!({})).await;
    create_trigger(&app, &org, on_leave(&flow)).await;
    // No assign-worker: the hires' commands stay queued while the leaves arrive.
    app.assign_worker.take().expect("worker").kill();
    let hire = send(&app, &org, &hired("h-ada", "ada@example.com")).await;
    assert_eq!(hire["status"], "accepted", "{hire}");
    let ada = hire["assignmentIds"][0].as_str().expect("id").to_owned();
    let leave = send(&app, &org, &left("l-ada", "ada@example.com")).await;
    assert_eq!(leave["status"], "accepted", "{leave}");
    assert_eq!(leave["assignmentIds"], json!([ada]));
    // Hire and leave in one request: the leave takes the assignment the hire is making.
    let both = send_batch(
        &app,
        &org,
        &[
            hired("h-bob", "bob@example.com"),
            left("l-bob", "bob@example.com"),
        ],
    )
    .await;
    assert_eq!(both[0]["status"], "accepted", "{both:?}");
    assert_eq!(both[1]["status"], "accepted", "{both:?}");
    assert_eq!(both[1]["assignmentIds"], both[0]["assignmentIds"]);
    let bob = both[0]["assignmentIds"][0].as_str().expect("id").to_owned();
    // A second leave finds nothing left to cancel: the first took it.
    let again = send(&app, &org, &left("l-ada-2", "ada@example.com")).await;
    assert_eq!(again["status"], "ignored", "{again}");
    let waiting: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM inbound_event_actions
         WHERE action = 'cancel' AND waits AND published_at IS NULL",
    )
    .fetch_one(&app.db)
    .await
    .expect("waiting");
    assert_eq!(waiting, 2, "both cancels wait for their assignments");
    app.assign_worker = Some(app.start_assign_worker());
    for id in [&ada, &bob] {
        let cancelled = app.wait_for_status(&org, id, "cancelled").await;
        assert!(
            cancelled["cancellationReason"]
                .as_str()
                .unwrap_or_default()
                .contains("Leavers"),
            "{cancelled}"
        );
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    for id in [&ada, &bob] {
        assert_eq!(app.events_of(id).await, ["flow.assigned", "flow.cancelled"]);
    }
    assert_eq!(app.assignment_count().await, 2);
    let unpublished: i64 =
        sqlx::query_scalar("SELECT count(*) FROM inbound_event_actions WHERE published_at IS NULL")
            .fetch_one(&app.db)
            .await
            .expect("unpublished");
    assert_eq!(unpublished, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_sent_to_two_replicas_with_the_worker_killed_assign_each_person_once() {
    let mut app = TestApp::spawn().await;
    let replica = app.start_api_replica().await;
    let org = app.create_org_with(Tier::Enterprise, Some(1_000_000)).await;
    let flow = app.create_flow(&org, "Onboarding", &[10]).await;
    let emails: Vec<String> = (0..200).map(|i| format!("e{i:03}@example.com")).collect();
    let refs: Vec<&str> = emails.iter().map(String::as_str).collect();
    app.create_users(&org, &refs).await;
    create_trigger(&app, &org, on_hire(&flow)).await;
    let events: Vec<Value> = emails
        .iter()
        .map(|email| hired(&format!("hire-{email}"), email))
        .collect();
    let bases = [app.base_url.clone(), replica];
    // Every round sends every event to both replicas at once, in batches of 50; the worker dies
    // after the first round and comes back after the third.
    for round in 0..5 {
        let (client, key, events) = (&app.client, &org.key, &events);
        let sends = bases.iter().flat_map(|base| {
            events.chunks(50).map(move |chunk| {
                let body = Value::Array(chunk.to_vec()).to_string();
                client
                    .post(format!("{base}/v1/events"))
                    .bearer_auth(key)
                    .header("content-type", BATCH)
                    .body(body)
                    .send()
            })
        });
        let answers = futures::future::join_all(sends).await;
        for answer in answers {
            let answer = answer.expect("sent");
            assert_eq!(answer.status(), 202, "round {round}");
            let body: Value = answer.json().await.expect("json");
            for result in body["results"].as_array().expect("results") {
                assert!(
                    result["status"] == "accepted" || result["status"] == "duplicate",
                    "round {round}: {result}"
                );
            }
        }
        if round == 0 {
            app.assign_worker.take().expect("worker").kill();
        }
        if round == 2 {
            app.assign_worker = Some(app.start_assign_worker());
        }
    }
    app.eventually(Duration::from_secs(60), "every assignment", || async {
        (app.assignment_count().await == 200).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (assignments, people, events, accepted, actions): (i64, i64, i64, i64, i64) =
        sqlx::query_as(
            "SELECT (SELECT count(*) FROM assignments WHERE org_id = $1),
                    (SELECT count(DISTINCT user_id) FROM assignments WHERE org_id = $1),
                    (SELECT count(*) FROM outbox
                     WHERE org_id = $1 AND event_type = 'flow.assigned'),
                    (SELECT count(*) FROM inbound_events WHERE org_id = $1),
                    (SELECT count(*) FROM inbound_event_actions WHERE org_id = $1)",
        )
        .bind(org.id)
        .fetch_one(&app.db)
        .await
        .expect("counts");
    assert_eq!(
        (assignments, people, events, accepted, actions),
        (200, 200, 200, 200, 200)
    );
}
