//! W3C trace context across the whole chain: an API request's trace continues through its command,
//! the outbox, the relay and the webhook-worker into the webhook request a customer receives, one
//! trace per request even when commands and events travel many to a message.

use std::collections::HashMap;
use std::time::Duration;

use chrono::Utc;
use flow_common::db::orgs::Tier;
use flow_domain::Priority;
use flow_domain::ids::{AssignmentId, FlowId, UserId};
use flow_domain::messages::{
    ASSIGN_BATCH_KIND, ASSIGN_BATCH_VERSION, ASSIGN_COMMAND_VERSION, AssignBatch, AssignCommand,
};
use flow_tests::receiver::{Received, Receiver};
use flow_tests::{TestApp, TestOptions, TestOrg};
use serde_json::json;

/// A caller's `traceparent` for trace `index` (32 hex digits of trace id, 16 of span id).
fn caller_traceparent(index: usize) -> (String, String) {
    let trace_id = format!(
        "{:032x}",
        0x4bf9_2f35_77b3_4da6_u128 * 1_000 + index as u128
    );
    let span_id = format!("{:016x}", 0x00f0_67aa_0ba9_02b7_u64 + index as u64);
    (format!("00-{trace_id}-{span_id}-01"), trace_id)
}

/// The trace id of a `traceparent`.
fn trace_of(traceparent: &str) -> &str {
    traceparent.split('-').nth(1).unwrap_or("")
}

/// An endpoint of `org` at `path` of the receiver, subscribed to `events`.
async fn endpoint(app: &TestApp, org: &TestOrg, receiver: &Receiver, path: &str, events: &[&str]) {
    app.create_webhook(org, &json!({ "url": receiver.url(path), "events": events }))
        .await;
}

/// Posts an assign request carrying `traceparent`; returns the assignment id.
async fn assign_traced(
    app: &TestApp,
    org: &TestOrg,
    flow: &str,
    email: &str,
    traceparent: &str,
) -> String {
    let response = app
        .post_with(
            org,
            "/v1/flows/assign",
            &json!({ "flowId": flow, "userEmail": email }),
            &[("traceparent", traceparent)],
        )
        .await;
    assert_eq!(response.status, 200, "{:?}", response.body);
    response.body["assignmentId"]
        .as_str()
        .expect("assignmentId")
        .to_owned()
}

/// Asserts that `request` continues trace `trace_id` from a span of Flow's own (the attempt),
/// not from the caller's span `caller_span`.
fn assert_continues(request: &Received, trace_id: &str, caller_span: &str) {
    let traceparent = request.header("traceparent");
    assert_eq!(
        trace_of(traceparent),
        trace_id,
        "the webhook request continues the request's trace: {traceparent:?}"
    );
    assert!(
        !traceparent.contains(caller_span),
        "its parent is the attempt's span, not the caller's: {traceparent}"
    );
}

#[tokio::test]
async fn a_webhook_request_continues_the_trace_of_the_assign_request_that_caused_it() {
    let app = TestApp::spawn_with(TestOptions {
        webhooks: true,
        ..TestOptions::default()
    })
    .await;
    let receiver = Receiver::start().await.expect("webhook receiver");
    let org = app.create_org(Tier::Standard).await;
    endpoint(&app, &org, &receiver, "traced", &["flow.assigned"]).await;
    app.create_users(&org, &["ann@example.com"]).await;
    let flow = app.create_flow(&org, "Tracing", &[30]).await;

    let (traceparent, trace_id) = caller_traceparent(0);
    let caller_span = traceparent.split('-').nth(2).expect("span id").to_owned();
    let id = assign_traced(&app, &org, &flow, "ann@example.com", &traceparent).await;

    let received = receiver
        .wait_for_deliveries("traced", 1, Duration::from_secs(20))
        .await;
    assert_eq!(received[0].event()["data"]["assignmentId"], json!(id));
    assert_continues(&received[0], &trace_id, &caller_span);

    // The chain's two stores hold the same trace: the outbox row and the delivery row (written
    // once its first attempt answered).
    let assignment = AssignmentId::parse(&id).expect("id");
    let (outbox, delivery): (Option<String>, Option<String>) = app
        .eventually(
            Duration::from_secs(10),
            "the event and its delivery",
            || async {
                sqlx::query_as(
                    "SELECT o.traceparent, d.traceparent FROM outbox o
                     JOIN webhook_deliveries d ON d.event_id = o.event_id
                     WHERE o.assignment_id = $1",
                )
                .bind(assignment)
                .fetch_optional(&app.db)
                .await
                .expect("the event and its delivery")
            },
        )
        .await;
    assert_eq!(trace_of(outbox.as_deref().unwrap_or("")), trace_id);
    assert_eq!(outbox, delivery, "the delivery keeps the event's trace");
}

#[tokio::test]
async fn progress_events_continue_the_trace_of_the_progress_request() {
    let app = TestApp::spawn_with(TestOptions {
        webhooks: true,
        ..TestOptions::default()
    })
    .await;
    let receiver = Receiver::start().await.expect("webhook receiver");
    let org = app.create_org(Tier::Standard).await;
    endpoint(
        &app,
        &org,
        &receiver,
        "progress",
        &["flow.started", "flow.completed"],
    )
    .await;
    app.create_users(&org, &["bea@example.com"]).await;
    let flow = app.create_flow(&org, "Tracing", &[30]).await;
    let module = app.module_ids(&org, &flow).await.remove(0);
    let id = app
        .assign_persisted(&org, &flow, "bea@example.com", json!({}))
        .await;

    // One request starts and completes the only module: both events continue its trace.
    let (traceparent, trace_id) = caller_traceparent(1);
    let caller_span = traceparent.split('-').nth(2).expect("span id").to_owned();
    let response = app
        .post_with(
            &org,
            &format!("/v1/assignments/{id}/progress"),
            &json!({ "moduleId": module, "status": "completed" }),
            &[("traceparent", &traceparent)],
        )
        .await;
    assert_eq!(response.status, 202, "{:?}", response.body);
    let received = receiver
        .wait_for_deliveries("progress", 2, Duration::from_secs(20))
        .await;
    let mut types: Vec<String> = received
        .iter()
        .map(|request| request.event()["type"].as_str().unwrap_or("").to_owned())
        .collect();
    types.sort();
    assert_eq!(types, ["flow.completed", "flow.started"]);
    for request in &received {
        assert_continues(request, &trace_id, &caller_span);
    }
}

#[tokio::test]
async fn events_relayed_together_each_continue_their_own_request_trace() {
    // No relay yet: the events wait in the outbox, so the relay claims them all at once and
    // publishes them as one batch message.
    let mut app = TestApp::spawn().await;
    let receiver = Receiver::start().await.expect("webhook receiver");
    let org = app.create_org(Tier::Standard).await;
    endpoint(&app, &org, &receiver, "batched", &["flow.assigned"]).await;
    let emails: Vec<String> = (0..12)
        .map(|index| format!("u{index}@example.com"))
        .collect();
    let email_refs: Vec<&str> = emails.iter().map(String::as_str).collect();
    app.create_users(&org, &email_refs).await;
    let flow = app.create_flow(&org, "Tracing", &[30]).await;

    // Concurrent requests, each its own trace: the API may gather their commands in one message.
    let requests = emails.iter().enumerate().map(|(index, email)| {
        let (app, org, flow) = (&app, &org, &flow);
        async move {
            let (traceparent, trace_id) = caller_traceparent(100 + index);
            let id = assign_traced(app, org, flow, email, &traceparent).await;
            (id, trace_id)
        }
    });
    let expected: HashMap<String, String> = futures::future::join_all(requests)
        .await
        .into_iter()
        .collect();
    app.eventually(
        Duration::from_secs(20),
        "every event in the outbox",
        || async {
            let count: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox")
                .fetch_one(&app.db)
                .await
                .expect("count");
            (count == expected.len() as i64).then_some(())
        },
    )
    .await;

    app.relay = Some(app.start_relay());
    app.webhook_worker = Some(app.start_webhook_worker());
    let received = receiver
        .wait_for_deliveries("batched", expected.len(), Duration::from_secs(30))
        .await;
    for request in &received {
        let id = request.event()["data"]["assignmentId"]
            .as_str()
            .expect("assignmentId")
            .to_owned();
        let traceparent = request.header("traceparent");
        assert_eq!(
            Some(trace_of(traceparent)),
            expected.get(&id).map(String::as_str),
            "{id}'s webhook continues its own request's trace"
        );
    }
}

#[tokio::test]
async fn each_command_of_a_batch_message_gives_its_event_its_own_trace() {
    let app = TestApp::spawn().await;
    let org = app.create_org(Tier::Standard).await;
    app.create_users(&org, &["a@example.com", "b@example.com", "c@example.com"])
        .await;
    let flow = app.create_flow(&org, "Tracing", &[30]).await;
    let users: Vec<(UserId, String)> =
        sqlx::query_as("SELECT id, email FROM users WHERE org_id = $1 ORDER BY email")
            .bind(org.id)
            .fetch_all(&app.db)
            .await
            .expect("users");
    let command =
        |(user_id, email): &(UserId, String), traceparent: Option<String>| AssignCommand {
            version: ASSIGN_COMMAND_VERSION,
            assignment_id: AssignmentId::new(),
            existing_assignment_id: None,
            org_id: org.id,
            flow_id: FlowId::parse(&flow).expect("flow id"),
            flow_name: "Tracing".into(),
            user_id: *user_id,
            assignee_email: email.clone(),
            priority: Priority::Medium,
            notes: None,
            due_at: None,
            assigned_at: Utc::now(),
            request_id: None,
            schedule_id: None,
            traceparent,
        };
    let (first, _) = caller_traceparent(200);
    let (second, _) = caller_traceparent(201);
    let commands = vec![
        command(&users[0], Some(first.clone())),
        command(&users[1], Some(second.clone())),
        command(&users[2], None),
    ];
    let batch = AssignBatch {
        version: ASSIGN_BATCH_VERSION,
        commands: commands.clone(),
    };
    // Published without any header: only the commands name their traces.
    app.publish_raw(
        "assign",
        ASSIGN_BATCH_KIND,
        &serde_json::to_vec(&batch).expect("json"),
    )
    .await;

    let stored: Vec<(AssignmentId, Option<String>)> = app
        .eventually(Duration::from_secs(15), "three events", || async {
            let rows: Vec<(AssignmentId, Option<String>)> =
                sqlx::query_as("SELECT assignment_id, traceparent FROM outbox")
                    .fetch_all(&app.db)
                    .await
                    .expect("outbox");
            (rows.len() == 3).then_some(rows)
        })
        .await;
    let stored: HashMap<AssignmentId, Option<String>> = stored.into_iter().collect();
    assert_eq!(stored[&commands[0].assignment_id], Some(first));
    assert_eq!(stored[&commands[1].assignment_id], Some(second));
    // The untraced command joins the trace of the worker's batch: a trace of its own.
    let untraced = stored[&commands[2].assignment_id]
        .clone()
        .expect("the batch's trace");
    let untraced_trace = trace_of(&untraced);
    assert_eq!(untraced_trace.len(), 32, "{untraced}");
    for traced in [200, 201] {
        assert_ne!(untraced_trace, caller_traceparent(traced).1);
    }
}
