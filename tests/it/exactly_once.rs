//! Exactly once at the edges (README §Guarantees 2-4): concurrent retries across two API
//! replicas, the same X-Request-ID for a different request, ids answered before they are
//! persisted, commands that keep killing the worker, and broker reconnects that must not count
//! against a command.

use std::collections::HashMap;
use std::time::Duration;

use chrono::Utc;
use flow_common::amqp::QueueKind;
use flow_common::db::orgs::Tier;
use flow_domain::Priority;
use flow_domain::ids::{AssignmentId, FlowId, UserId};
use flow_domain::messages::{
    ASSIGN_BATCH_KIND, ASSIGN_BATCH_VERSION, ASSIGN_COMMAND_VERSION, ASSIGN_KIND, AssignBatch,
    AssignCommand,
};
use flow_tests::{TestApp, TestOptions, TestOrg};
use lapin::options::BasicGetOptions;
use serde_json::{Value, json};

async fn user_id(app: &TestApp, email: &str) -> UserId {
    sqlx::query_scalar("SELECT id FROM users WHERE email_normalized = $1")
        .bind(email)
        .fetch_one(&app.db)
        .await
        .unwrap()
}

fn command(org: &TestOrg, flow: &str, user: UserId, email: &str) -> AssignCommand {
    AssignCommand {
        version: ASSIGN_COMMAND_VERSION,
        assignment_id: AssignmentId::new(),
        existing_assignment_id: None,
        org_id: org.id,
        flow_id: FlowId::parse(flow).unwrap(),
        flow_name: "Onboarding".into(),
        user_id: user,
        assignee_email: email.into(),
        priority: Priority::Medium,
        notes: None,
        due_at: None,
        assigned_at: Utc::now(),
        request_id: None,
        schedule_id: None,
        traceparent: None,
    }
}

#[tokio::test]
async fn concurrent_duplicates_across_two_replicas_make_one_assignment_and_one_event_per_id() {
    let app = TestApp::spawn().await;
    let replica = app.start_api_replica().await;
    let (org, flow, emails) = app.org_with_users(300).await;
    let mut sends = Vec::new();
    for (index, email) in emails.iter().enumerate() {
        let body = json!({ "flowId": flow, "userEmail": email });
        for base in [&app.base_url, &app.base_url, &replica, &replica] {
            sends.push((index, base.clone(), body.clone(), format!("dup-{index}")));
        }
    }
    let requests = sends.iter().map(|(index, base, body, key)| {
        let (app, org) = (&app, &org);
        async move {
            let response = app
                .request_at(
                    base,
                    reqwest::Method::POST,
                    "/v1/flows/assign",
                    Some(&org.key),
                    Some(body),
                    &[("X-Request-ID", key)],
                )
                .await;
            (*index, response)
        }
    });
    let responses = futures::future::join_all(requests).await;
    let mut answers: HashMap<usize, Vec<(Value, Value)>> = HashMap::new();
    for (index, response) in &responses {
        assert_eq!(response.status, 200, "{:?}", response.body);
        answers.entry(*index).or_default().push((
            response.body["assignmentId"].clone(),
            response.body["details"]["assignedAt"].clone(),
        ));
    }
    let mut ids = Vec::new();
    for (index, answers) in &answers {
        assert_eq!(answers.len(), 4);
        assert!(
            answers.iter().all(|answer| answer == &answers[0]),
            "request {index}: every answer names the same assignment at the same time: {answers:?}"
        );
        ids.push(answers[0].0.as_str().unwrap().to_owned());
    }
    let resolved = app.resolve_all(&org, &ids, Duration::from_secs(30)).await;
    assert!(
        resolved.iter().all(|(id, target)| id == target),
        "each request id's assignment is itself"
    );
    let audit = app.audit().await;
    assert_eq!(audit.assignments, 300);
    assert_eq!(audit.duplicate_events, 0, "{audit:?}");
    assert_eq!(audit.assignments_without_one_assigned_event, 0, "{audit:?}");
    let events: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox")
        .fetch_one(&app.db)
        .await
        .unwrap();
    assert_eq!(events, 300, "one flow.assigned event per assignment");
}

#[tokio::test]
async fn the_same_request_id_for_a_different_request_is_409_before_and_after_persistence() {
    let mut app = TestApp::spawn_with(TestOptions {
        assign_worker: false,
        ..TestOptions::default()
    })
    .await;
    let replica = app.start_api_replica().await;
    let (org, flow, emails) = app.org_with_users(2).await;
    let other_flow = app.create_flow(&org, "Other", &[10]).await;
    let headers = [("X-Request-ID", "same-1")];
    let original = json!({ "flowId": flow, "userEmail": emails[0], "priority": "low" });
    let first = app
        .post_with(&org, "/v1/flows/assign", &original, &headers)
        .await;
    assert_eq!(first.status, 200, "{:?}", first.body);
    let different = [
        json!({ "flowId": other_flow, "userEmail": emails[0], "priority": "low" }),
        json!({ "flowId": flow, "userEmail": emails[1], "priority": "low" }),
        json!({ "flowId": flow, "userEmail": emails[0], "priority": "high" }),
        json!({ "flowId": flow, "userEmail": emails[0], "priority": "low", "dueDate": "2099-01-01" }),
        json!({ "flowId": flow, "userEmail": emails[0], "priority": "low", "notes": "read me" }),
    ];
    check_conflicts(
        &app, &org, &replica, &different, &original, &emails[0], &first, false,
    )
    .await;
    app.assign_worker = Some(app.start_assign_worker());
    let id = first.body["assignmentId"].as_str().unwrap().to_owned();
    app.resolve_all(&org, std::slice::from_ref(&id), Duration::from_secs(15))
        .await;
    check_conflicts(
        &app, &org, &replica, &different, &original, &emails[0], &first, true,
    )
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        app.assignment_count().await,
        1,
        "the other flow was never assigned"
    );
    let stored = app.get(&org, &format!("/v1/assignments/{id}")).await;
    assert_eq!(stored.body["priority"], json!("low"));
    assert_eq!(app.audit().await.duplicate_events, 0);
}

/// Every request of `different` under the key of `first` is 409 on both replicas, and
/// `original` (with the e-mail in capitals) gets `first`'s answer on both.
#[allow(clippy::too_many_arguments)]
async fn check_conflicts(
    app: &TestApp,
    org: &TestOrg,
    replica: &str,
    different: &[Value],
    original: &Value,
    email: &str,
    first: &flow_tests::TestResponse,
    persisted: bool,
) {
    let headers = [("X-Request-ID", "same-1")];
    for body in different {
        for base in [app.base_url.as_str(), replica] {
            let response = app
                .request_at(
                    base,
                    reqwest::Method::POST,
                    "/v1/flows/assign",
                    Some(&org.key),
                    Some(body),
                    &headers,
                )
                .await;
            assert_eq!(
                response.status, 409,
                "persisted: {persisted}, {body}: {:?}",
                response.body
            );
            assert_eq!(response.body["error"], json!("conflict"));
        }
    }
    let mut same = original.clone();
    same["userEmail"] = json!(email.to_uppercase());
    for base in [app.base_url.as_str(), replica] {
        let response = app
            .request_at(
                base,
                reqwest::Method::POST,
                "/v1/flows/assign",
                Some(&org.key),
                Some(&same),
                &headers,
            )
            .await;
        assert_eq!(response.status, 200, "{:?}", response.body);
        assert_eq!(response.body["assignmentId"], first.body["assignmentId"]);
        assert_eq!(
            response.body["details"]["assignedAt"],
            first.body["details"]["assignedAt"]
        );
        assert_eq!(response.body["message"], first.body["message"]);
    }
}

#[tokio::test]
async fn an_accepted_id_reads_202_until_it_is_persisted_and_never_404() {
    let mut app = TestApp::spawn_with(TestOptions {
        assign_worker: false,
        ..TestOptions::default()
    })
    .await;
    let (org, flow, emails) = app.org_with_users(2).await;
    let other_org = app.create_org(Tier::Enterprise).await;
    let minted = app
        .post(
            &org,
            "/v1/flows/assign",
            &json!({ "flowId": flow, "userEmail": emails[0] }),
        )
        .await;
    assert_eq!(minted.status, 200);
    let keyed = app
        .post_with(
            &org,
            "/v1/flows/assign",
            &json!({ "flowId": flow, "userEmail": emails[1] }),
            &[("X-Request-ID", "keyed-1")],
        )
        .await;
    assert_eq!(keyed.status, 200);
    let ids: Vec<String> = [&minted, &keyed]
        .iter()
        .map(|response| response.body["assignmentId"].as_str().unwrap().to_owned())
        .collect();
    let modules = app.module_ids(&org, &flow).await;
    for id in &ids {
        let read = app.get(&org, &format!("/v1/assignments/{id}")).await;
        assert_eq!(read.status, 202, "{:?}", read.body);
        assert_eq!(read.header("retry-after"), Some("1"));
        assert_eq!(read.body["status"], json!("accepted"));
        assert_eq!(read.body["assignmentId"], json!(id));
        let progress = app
            .post(
                &org,
                &format!("/v1/assignments/{id}/progress"),
                &json!({ "moduleId": modules[0], "status": "in_progress" }),
            )
            .await;
        assert_eq!(progress.status, 409, "{:?}", progress.body);
        assert_eq!(progress.header("retry-after"), Some("1"));
        // Another organization does not see it.
        let foreign = app.get(&other_org, &format!("/v1/assignments/{id}")).await;
        assert_eq!(foreign.status, 404);
    }
    // An id nobody handed out is still unknown.
    let unknown = app
        .get(&org, &format!("/v1/assignments/{}", AssignmentId::new()))
        .await;
    assert_eq!(unknown.status, 404);
    app.assign_worker = Some(app.start_assign_worker());
    for id in &ids {
        let read = app
            .eventually(Duration::from_secs(15), "the id to persist", || async {
                let read = app.get(&org, &format!("/v1/assignments/{id}")).await;
                (read.status != 202).then_some(read)
            })
            .await;
        assert_eq!(read.status, 200, "{:?}", read.body);
        assert_eq!(read.body["status"], json!("pending"));
    }
}

#[tokio::test]
async fn a_command_that_keeps_killing_the_worker_is_dead_lettered_then_replayed() {
    let mut app = TestApp::spawn_with(TestOptions {
        assign_worker: false,
        ..TestOptions::default()
    })
    .await;
    let (org, flow, emails) = app.org_with_users(1).await;
    let response = app
        .post(
            &org,
            "/v1/flows/assign",
            &json!({ "flowId": flow, "userEmail": emails[0] }),
        )
        .await;
    assert_eq!(response.status, 200);
    let id = response.body["assignmentId"].as_str().unwrap().to_owned();
    // A worker took the message and died with it: the message comes back redelivered.
    let queue = app.topology().queue(QueueKind::Assign);
    let connection = flow_common::amqp::connect(&app.core.amqp_url, "test")
        .await
        .unwrap();
    let channel = connection.create_channel().await.unwrap();
    let taken = channel
        .basic_get(queue.clone().into(), BasicGetOptions::default())
        .await
        .unwrap()
        .expect("the command in the queue");
    let message_id = taken.delivery.properties.message_id().clone().unwrap();
    assert_eq!(message_id.as_str(), id);
    drop(connection.close(200, "died".into()).await);
    // ... and so did the ones before it: as many unfinished starts as the limit allows.
    sqlx::query("INSERT INTO message_attempts (queue, message_key, attempts) VALUES ($1, $2, $3)")
        .bind(&queue)
        .bind(message_id.as_str())
        .bind(app.core.delivery_limit as i32)
        .execute(&app.db)
        .await
        .unwrap();
    app.assign_worker = Some(app.start_assign_worker());
    let dead = app.dead_letters(1).await;
    assert!(
        dead[0].reason.contains("times without finishing"),
        "{}",
        dead[0].reason
    );
    let failed = app.get(&org, &format!("/v1/assignments/{id}")).await;
    assert_eq!(failed.status, 200, "{:?}", failed.body);
    assert_eq!(failed.body["status"], json!("failed"));
    assert_eq!(failed.body["assigneeEmail"], json!(emails[0]));
    assert!(failed.body["failedAt"].is_string());
    assert_eq!(app.assignment_count().await, 0);

    flowctl::dlq::run(&app.core, flowctl::dlq::DlqCommand::Replay { limit: 10 })
        .await
        .unwrap();
    let replayed = app
        .eventually(
            Duration::from_secs(15),
            "the replayed command to persist",
            || async {
                let read = app.get(&org, &format!("/v1/assignments/{id}")).await;
                (read.body["status"] == json!("pending")).then_some(read)
            },
        )
        .await;
    assert_eq!(replayed.status, 200);
    assert!(
        flow_common::db::dead_letters::pending(&app.db, 0, 10)
            .await
            .unwrap()
            .is_empty()
    );
    let audit = app.audit().await;
    assert_eq!((audit.assignments, audit.duplicate_events), (1, 0));
}

#[tokio::test]
async fn broker_connection_drops_do_not_count_against_commands() {
    let mut app = TestApp::spawn_with(TestOptions {
        assign_worker: false,
        rabbit_proxy: true,
        ..TestOptions::default()
    })
    .await;
    let (org, flow, emails) = app.org_with_users(2_000).await;
    let users: Vec<(UserId, String)> = sqlx::query_as("SELECT id, email FROM users ORDER BY email")
        .fetch_all(&app.db)
        .await
        .unwrap();
    assert_eq!(users.len(), emails.len());
    let commands: Vec<AssignCommand> = users
        .iter()
        .map(|(user, email)| command(&org, &flow, *user, email))
        .collect();
    let messages: Vec<(String, Vec<u8>)> = commands
        .iter()
        .map(|command| {
            (
                command.assignment_id.to_string(),
                serde_json::to_vec(command).unwrap(),
            )
        })
        .collect();
    app.publish_raw_many("assign", ASSIGN_KIND, &messages).await;
    // A slow worker (one command per transaction) with a large prefetch window: at every drop,
    // hundreds of commands it only held go back to the queue, and RabbitMQ counts a delivery.
    app.assign_worker = Some(app.start_assign_worker_with(|config| {
        config.prefetch = 500;
        config.batch_size = 1;
        config.concurrency = 1;
    }));
    let proxy = app.rabbit_proxy.as_ref().unwrap();
    let drops = app.core.delivery_limit * 2;
    for _ in 0..drops {
        // Each drop comes once the worker is back and holds a prefetch window again.
        app.wait_for_consumer().await;
        tokio::time::sleep(Duration::from_millis(150)).await;
        proxy.disable().await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        proxy.enable();
    }
    let at_last_drop = app.assignment_count().await;
    assert!(
        at_last_drop < 1_500,
        "the drops came while most commands were still queued ({at_last_drop} persisted)"
    );
    let ids: Vec<String> = messages.iter().map(|(id, _)| id.clone()).collect();
    app.resolve_all(&org, &ids, Duration::from_secs(120)).await;
    let dead: i64 = sqlx::query_scalar("SELECT count(*) FROM dead_letters")
        .fetch_one(&app.db)
        .await
        .unwrap();
    assert_eq!(dead, 0, "no command was dead-lettered for the drops");
    let audit = app.audit().await;
    assert_eq!(audit.assignments, 2_000);
    assert_eq!(audit.duplicate_events, 0);
    assert_eq!(audit.assignments_without_one_assigned_event, 0);
}

#[tokio::test]
async fn a_command_repeated_in_a_batch_and_redelivered_writes_one_assignment_and_one_event() {
    let app = TestApp::spawn().await;
    let (org, flow, emails) = app.org_with_users(1).await;
    let user = user_id(&app, &emails[0]).await;
    let command = command(&org, &flow, user, &emails[0]);
    let batch = AssignBatch {
        version: ASSIGN_BATCH_VERSION,
        commands: vec![command.clone(), command.clone(), command.clone()],
    };
    app.publish_raw(
        "assign",
        ASSIGN_BATCH_KIND,
        &serde_json::to_vec(&batch).unwrap(),
    )
    .await;
    app.publish_raw(
        "assign",
        ASSIGN_KIND,
        &serde_json::to_vec(&command).unwrap(),
    )
    .await;
    let id = command.assignment_id.to_string();
    app.resolve_all(&org, std::slice::from_ref(&id), Duration::from_secs(15))
        .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let audit = app.audit().await;
    assert_eq!(audit.assignments, 1);
    assert_eq!(audit.duplicate_events, 0);
    assert_eq!(app.events_of(&id).await, vec!["flow.assigned".to_owned()]);
}

#[tokio::test]
async fn a_batch_mixing_new_applied_and_conflicting_commands_applies_each_once() {
    // The worker inserts a batch as a plain insert first and, when a key is taken, again with
    // ON CONFLICT: one batch holding a redelivered command, a new pair and a second id for an
    // active pair must still come out as one assignment per pair, one alias, one event each.
    let app = TestApp::spawn().await;
    let (org, flow, emails) = app.org_with_users(2).await;
    let first_user = user_id(&app, &emails[0]).await;
    let second_user = user_id(&app, &emails[1]).await;
    let applied = command(&org, &flow, first_user, &emails[0]);
    app.publish_raw(
        "assign",
        ASSIGN_KIND,
        &serde_json::to_vec(&applied).unwrap(),
    )
    .await;
    let applied_id = applied.assignment_id.to_string();
    app.resolve_all(
        &org,
        std::slice::from_ref(&applied_id),
        Duration::from_secs(15),
    )
    .await;

    let new_pair = command(&org, &flow, second_user, &emails[1]);
    let same_pair = command(&org, &flow, first_user, &emails[0]);
    let batch = AssignBatch {
        version: ASSIGN_BATCH_VERSION,
        commands: vec![new_pair.clone(), applied.clone(), same_pair.clone()],
    };
    app.publish_raw(
        "assign",
        ASSIGN_BATCH_KIND,
        &serde_json::to_vec(&batch).unwrap(),
    )
    .await;
    let new_id = new_pair.assignment_id.to_string();
    let same_pair_id = same_pair.assignment_id.to_string();
    let resolved = app
        .resolve_all(
            &org,
            &[applied_id.clone(), new_id.clone(), same_pair_id.clone()],
            Duration::from_secs(15),
        )
        .await;
    assert_eq!(resolved[&applied_id], applied_id);
    assert_eq!(resolved[&new_id], new_id, "the new pair is inserted");
    assert_eq!(
        resolved[&same_pair_id], applied_id,
        "a second id for an active pair resolves to its assignment"
    );
    let audit = app.audit().await;
    assert_eq!(audit.assignments, 2);
    assert_eq!(audit.duplicate_events, 0);
    assert_eq!(audit.assignments_without_one_assigned_event, 0);
    assert_eq!(
        app.events_of(&new_id).await,
        vec!["flow.assigned".to_owned()]
    );
    assert_eq!(
        app.events_of(&applied_id).await,
        vec!["flow.assigned".to_owned()]
    );
}
