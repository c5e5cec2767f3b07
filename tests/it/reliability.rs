//! Design §2 guarantees 1 and 2: a 200 means the command is durably queued, and every id handed
//! out is persisted exactly once, whatever happens to the broker or the worker. Poison messages
//! end in the dead-letter queue.

use std::collections::HashSet;
use std::time::Duration;

use flow_common::amqp::QueueKind;
use flow_common::db::orgs::Tier;
use flow_tests::proxy::Proxy;
use flow_tests::{TestApp, TestOptions};
use serde_json::json;

#[tokio::test]
async fn assign_answers_503_and_never_200_while_the_broker_is_unreachable() {
    let proxy = Proxy::start("127.0.0.1:5672".parse().unwrap()).await;
    let app = TestApp::spawn_with(TestOptions {
        api_amqp_url: Some(format!("amqp://guest:guest@{}/%2f", proxy.address)),
        ..TestOptions::default()
    })
    .await;
    let org = app.create_org(Tier::Enterprise).await;
    let emails: Vec<String> = (0..30).map(|i| format!("u{i}@example.com")).collect();
    let refs: Vec<&str> = emails.iter().map(String::as_str).collect();
    app.create_users(&org, &refs).await;
    let flow = app.create_flow(&org, "F", &[5]).await;
    let assign = |email: String| {
        let app = &app;
        let org = &org;
        let flow = flow.clone();
        async move {
            app.post(
                org,
                "/v1/flows/assign",
                &json!({ "flowId": flow, "userEmail": email }),
            )
            .await
        }
    };

    assert_eq!(assign(emails[0].clone()).await.status, 200);
    proxy.disable().await;
    let mut accepted = vec![emails[0].clone()];
    for email in &emails[1..20] {
        let response = assign(email.clone()).await;
        assert_eq!(response.status, 503, "{:?}", response.body);
        assert_eq!(response.body["error"], json!("service_unavailable"));
        assert!(response.header("retry-after").is_some());
    }
    proxy.enable();
    // The publisher reconnects on its own; accepted requests resume.
    let response = app
        .eventually(Duration::from_secs(10), "assign to succeed again", || {
            let attempt = assign(emails[20].clone());
            async move {
                let response = attempt.await;
                (response.status == 200).then_some(response)
            }
        })
        .await;
    accepted.push(emails[20].clone());
    assert_eq!(response.status, 200);
    let persisted = app
        .eventually(
            Duration::from_secs(10),
            "accepted assignments to persist",
            || async {
                let count = app.assignment_count().await;
                (count == 2).then_some(count)
            },
        )
        .await;
    assert_eq!(
        persisted, 2,
        "only the two accepted requests became assignments"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    let emails_stored: Vec<String> = sqlx::query_scalar(
        "SELECT u.email FROM assignments a JOIN users u ON u.id = a.user_id ORDER BY u.email",
    )
    .fetch_all(&app.db)
    .await
    .unwrap();
    accepted.sort();
    assert_eq!(emails_stored, accepted);
}

#[tokio::test]
async fn a_bulk_request_while_the_broker_is_unreachable_is_503_per_item_and_its_retry_assigns_each_once()
 {
    let proxy = Proxy::start("127.0.0.1:5672".parse().unwrap()).await;
    let app = TestApp::spawn_with(TestOptions {
        api_amqp_url: Some(format!("amqp://guest:guest@{}/%2f", proxy.address)),
        ..TestOptions::default()
    })
    .await;
    // A limit the request and its retries cannot use up.
    let org = app.create_org_with(Tier::Enterprise, Some(100_000)).await;
    // 150 items: two broker messages (128 and 22).
    let emails: Vec<String> = (0..150).map(|i| format!("b{i}@example.com")).collect();
    let refs: Vec<&str> = emails.iter().map(String::as_str).collect();
    app.create_users(&org, &refs).await;
    let flow = app.create_flow(&org, "F", &[5]).await;
    let items = flow_tests::assign_items(&flow, &emails);
    let bulk = || app.assign_bulk(&org, &items, &[("X-Request-ID", "bulk-outage")]);

    proxy.disable().await;
    let refused = bulk().await;
    assert_eq!(refused.status, 200, "{:?}", refused.body);
    assert_eq!(refused.body["succeeded"], json!(0));
    let results = refused.body["results"].as_array().expect("results");
    assert_eq!(results.len(), 150);
    for item in results {
        assert_eq!(item["status"], json!(503), "{item}");
        assert_eq!(item["error"]["error"], json!("service_unavailable"));
    }

    proxy.enable();
    // The same request again, as a caller retries it: once the publisher has reconnected every
    // item is accepted, each under the id its X-Request-ID derives.
    let accepted = app
        .eventually(
            Duration::from_secs(10),
            "the retried bulk request to succeed",
            || async {
                let response = bulk().await;
                (response.body["succeeded"] == json!(150)).then_some(response)
            },
        )
        .await;
    let ids: HashSet<String> = accepted.body["results"]
        .as_array()
        .expect("results")
        .iter()
        .map(|item| {
            item["result"]["assignmentId"]
                .as_str()
                .expect("id")
                .to_owned()
        })
        .collect();
    assert_eq!(ids.len(), 150, "one id per item");
    app.eventually(
        Duration::from_secs(15),
        "the 150 assignments to persist",
        || async { (app.assignment_count().await == 150).then_some(()) },
    )
    .await;
    let stored: HashSet<String> = sqlx::query_scalar("SELECT id::text FROM assignments")
        .fetch_all(&app.db)
        .await
        .expect("ids")
        .into_iter()
        .collect();
    let answered: HashSet<String> = ids
        .iter()
        .map(|id| {
            flow_domain::ids::AssignmentId::parse(id)
                .expect("assignment id")
                .0
                .to_string()
        })
        .collect();
    assert_eq!(
        stored, answered,
        "the assignments are the ones answered, each once"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        app.assignment_count().await,
        150,
        "and nothing more arrives later"
    );
}

#[tokio::test]
async fn every_accepted_id_is_persisted_exactly_once_when_the_worker_is_killed_mid_stream() {
    let mut app = TestApp::spawn().await;
    let org = app.create_org(Tier::Enterprise).await;
    let emails: Vec<String> = (0..400).map(|i| format!("worker{i}@example.com")).collect();
    let users: Vec<_> = emails
        .iter()
        .map(|email| json!({ "email": email }))
        .collect();
    assert_eq!(
        app.post(&org, "/v1/users/bulk", &json!({ "users": users }))
            .await
            .status,
        200
    );
    let flow = app.create_flow(&org, "F", &[5]).await;

    let worker = app.assign_worker.take().expect("worker running");
    let stream = {
        let app = &app;
        let org = &org;
        let flow = flow.clone();
        futures::future::join_all(emails.iter().enumerate().map(move |(index, email)| {
            let flow = flow.clone();
            async move {
                // Spread the stream over time so the kill lands in the middle of it.
                tokio::time::sleep(Duration::from_millis(index as u64 * 3)).await;
                app.post(
                    org,
                    "/v1/flows/assign",
                    &json!({ "flowId": flow, "userEmail": email }),
                )
                .await
            }
        }))
    };
    let killer = async {
        // Kill once the worker is demonstrably busy, well before the stream ends.
        app.eventually(
            Duration::from_secs(10),
            "the worker to persist something",
            || async { (app.assignment_count().await > 20).then_some(()) },
        )
        .await;
        worker.kill();
        let at_kill = app.assignment_count().await;
        assert!(
            at_kill < 300,
            "the kill landed mid-stream ({at_kill} persisted)"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
        app.start_assign_worker()
    };
    let (responses, replacement) = tokio::join!(stream, killer);
    app.assign_worker = Some(replacement);

    let ids: Vec<String> = responses
        .iter()
        .map(|response| {
            assert_eq!(response.status, 200, "{:?}", response.body);
            response.body["assignmentId"].as_str().unwrap().to_owned()
        })
        .collect();
    assert_eq!(ids.iter().collect::<HashSet<_>>().len(), ids.len());
    let uuids: Vec<uuid::Uuid> = ids
        .iter()
        .map(|id| flow_domain::ids::AssignmentId::parse(id).unwrap().0)
        .collect();
    let stored = app
        .eventually(
            Duration::from_secs(30),
            "every accepted assignment to persist",
            || async {
                let stored: i64 =
                    sqlx::query_scalar("SELECT count(*) FROM assignments WHERE id = ANY($1)")
                        .bind(&uuids)
                        .fetch_one(&app.db)
                        .await
                        .unwrap();
                (stored == uuids.len() as i64).then_some(stored)
            },
        )
        .await;
    assert_eq!(stored, 400);
    assert_eq!(app.assignment_count().await, 400, "nothing persisted twice");
    let events: i64 =
        sqlx::query_scalar("SELECT count(*) FROM outbox WHERE event_type = 'flow.assigned'")
            .fetch_one(&app.db)
            .await
            .unwrap();
    assert_eq!(
        events, 400,
        "one flow.assigned event per assignment, even across the kill"
    );
}

#[tokio::test]
async fn undecodable_commands_are_dead_lettered_and_recorded_with_their_reason() {
    let app = TestApp::spawn().await;
    app.publish_raw("assign", "assign", b"{\"version\": 99}")
        .await;
    let dead = app.dead_letters(1).await;
    assert_eq!(dead[0].payload, b"{\"version\": 99}");
    assert_eq!(
        dead[0].origin_queue.as_deref(),
        Some(app.topology().queue(QueueKind::Assign).as_str())
    );
    assert!(
        dead[0].reason.starts_with("malformed message"),
        "the reason says what is wrong: {}",
        dead[0].reason
    );
    assert_eq!(app.assignment_count().await, 0);
}

#[tokio::test]
async fn a_poison_command_inside_a_batch_is_dead_lettered_alone() {
    let app = TestApp::spawn().await;
    let org = app.create_org(Tier::Enterprise).await;
    app.create_users(&org, &["good@example.com"]).await;
    let flow = app.create_flow(&org, "F", &[5]).await;
    let user: flow_domain::ids::UserId = sqlx::query_scalar("SELECT id FROM users")
        .fetch_one(&app.db)
        .await
        .unwrap();
    let command = |user_id| flow_domain::messages::AssignCommand {
        version: flow_domain::messages::ASSIGN_COMMAND_VERSION,
        assignment_id: flow_domain::ids::AssignmentId::new(),
        existing_assignment_id: None,
        org_id: org.id,
        flow_id: flow_domain::ids::FlowId::parse(&flow).unwrap(),
        flow_name: "F".into(),
        user_id,
        assignee_email: "good@example.com".into(),
        priority: flow_domain::Priority::Medium,
        notes: None,
        due_at: None,
        assigned_at: chrono::Utc::now(),
        request_id: None,
        schedule_id: None,
        traceparent: None,
    };
    let good = command(user);
    // A user that does not exist: the foreign key can never be satisfied.
    let poison = command(flow_domain::ids::UserId::new());
    let batch = flow_domain::messages::AssignBatch {
        version: flow_domain::messages::ASSIGN_BATCH_VERSION,
        commands: vec![good.clone(), poison.clone()],
    };
    app.publish_raw(
        "assign",
        flow_domain::messages::ASSIGN_BATCH_KIND,
        &serde_json::to_vec(&batch).unwrap(),
    )
    .await;
    let topology = app.topology();
    let dead = app.dead_letters(1).await;
    assert_eq!(dead.len(), 1, "only the poison command is dead-lettered");
    let dead_command = flow_domain::messages::AssignCommand::decode(&dead[0].payload).unwrap();
    assert_eq!(dead_command, poison);
    assert_eq!(
        dead[0].origin_queue.as_deref(),
        Some(topology.queue(QueueKind::Assign).as_str()),
        "marked with its origin so it can be replayed"
    );
    assert!(
        dead[0].reason.contains("does not exist"),
        "{}",
        dead[0].reason
    );
    // The id handed out for the poison command now reads as failed, with the reason.
    let failed = app
        .get(&org, &format!("/v1/assignments/{}", poison.assignment_id))
        .await;
    assert_eq!(failed.status, 200, "{:?}", failed.body);
    assert_eq!(failed.body["status"], json!("failed"));
    assert!(
        failed.body["failureReason"]
            .as_str()
            .unwrap()
            .contains("does not exist"),
        "{:?}",
        failed.body
    );
    let stored: Vec<uuid::Uuid> = sqlx::query_scalar("SELECT id FROM assignments")
        .fetch_all(&app.db)
        .await
        .unwrap();
    assert_eq!(
        stored,
        vec![good.assignment_id.0],
        "the good command of the batch is persisted"
    );
    let connection = flow_common::amqp::connect(&app.core.amqp_url, "test")
        .await
        .unwrap();
    let channel = connection.create_channel().await.unwrap();
    let queue = channel
        .queue_declare(
            topology.queue(QueueKind::Assign).into(),
            lapin::options::QueueDeclareOptions {
                passive: true,
                ..Default::default()
            },
            Default::default(),
        )
        .await
        .unwrap();
    assert_eq!(queue.message_count(), 0, "the batch message was acked");
}
