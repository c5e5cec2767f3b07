//! Lanes (design §15): interactive work never waits behind bulk work, organizations share the
//! bulk lane fairly, and the events of interactive work are relayed in a lane of their own.
//! Every assertion is about order or shares, never about time.

use std::collections::HashMap;
use std::time::Duration;

use flow_common::amqp::{BULK_SHARDS, Lane, QueueKind, bulk_shard};
use flow_common::db::orgs::{self, Tier};
use flow_domain::ids::OrgId;
use flow_tests::receiver::{Behaviour, Receiver};
use flow_tests::{TestApp, TestOptions, TestOrg, assign_items};
use serde_json::json;

fn without_worker() -> TestOptions {
    TestOptions {
        assign_worker: false,
        ..TestOptions::default()
    }
}

/// Assignments persisted per organization.
async fn persisted_by_org(app: &TestApp) -> HashMap<OrgId, i64> {
    let rows: Vec<(OrgId, i64)> =
        sqlx::query_as("SELECT org_id, count(*) FROM assignments GROUP BY org_id")
            .fetch_all(&app.db)
            .await
            .expect("counts");
    rows.into_iter().collect()
}

/// Bulk-assigns `flow` to every one of `emails`, 1,000 items a call, four calls at a time; every
/// item must answer 200 (durably queued).
async fn bulk_assign_all(app: &TestApp, org: &TestOrg, flow: &str, emails: &[String]) -> usize {
    let mut accepted = 0;
    for calls in emails.chunks(4_000) {
        let bodies: Vec<_> = calls
            .chunks(1_000)
            .map(|chunk| assign_items(flow, chunk))
            .collect();
        let responses =
            futures::future::join_all(bodies.iter().map(|items| app.assign_bulk(org, items, &[])))
                .await;
        for response in responses {
            assert_eq!(response.status, 200, "{:?}", response.body);
            assert_eq!(
                response.body["failed"], 0,
                "{:?}",
                response.body["results"][0]
            );
            accepted += response.body["succeeded"].as_u64().expect("succeeded") as usize;
        }
    }
    accepted
}

/// Ready messages of the bulk queue `org` publishes to.
async fn bulk_depth(app: &TestApp, org: &TestOrg) -> u32 {
    let bulk_lane = org_bulk_lane(app, org).await;
    app.queue_state(QueueKind::BulkAssign(bulk_shard(bulk_lane)))
        .await
        .expect("the bulk queue exists")
        .0
}

/// The bulk lane's webhook queue of `org`'s events.
async fn webhook_queue(app: &TestApp, org: &TestOrg) -> QueueKind {
    QueueKind::webhooks_for(org_bulk_lane(app, org).await)
}

async fn org_bulk_lane(app: &TestApp, org: &TestOrg) -> i64 {
    sqlx::query_scalar("SELECT bulk_lane FROM organizations WHERE id = $1")
        .bind(org.id)
        .fetch_one(&app.db)
        .await
        .expect("bulk lane")
}

/// A slow assign-worker: transactions of 20 commands, `bulk_prefetch` messages in hand per bulk
/// queue, so a backlog of 20,000 commands takes it a while to drain.
fn slow_worker(app: &TestApp, bulk_prefetch: u16) -> flow_tests::WorkerHandle {
    app.start_assign_worker_with(|config| {
        config.batch_size = 20;
        config.bulk_prefetch = bulk_prefetch;
        config.concurrency = 1;
    })
}

#[tokio::test]
async fn single_assigns_are_persisted_while_a_bulk_backlog_waits_another_organizations_or_their_own()
 {
    let mut app = TestApp::spawn_with(without_worker()).await;
    let (bulk, bulk_flow, bulk_emails) = app.org_with_users(20_000).await;
    let (bystander, flow, emails) = app.org_with_users(5).await;
    // The backlog exists before any worker runs: 20,000 commands in the bulk lane.
    assert_eq!(
        bulk_assign_all(&app, &bulk, &bulk_flow, &bulk_emails).await,
        20_000
    );
    assert!(bulk_depth(&app, &bulk).await > 0);
    app.assign_worker = Some(slow_worker(&app, 1));
    app.wait_for_consumer().await;

    for email in &emails {
        app.assign_persisted(&bystander, &flow, email, json!({}))
            .await;
        // Persisted while the bulk job is still far from done: it did not wait behind it.
        let persisted = persisted_by_org(&app).await;
        let bulk_done = persisted.get(&bulk.id).copied().unwrap_or(0);
        assert!(
            bulk_done < 20_000,
            "the single assign of {email} waited for the whole bulk backlog ({bulk_done} persisted)"
        );
    }
    // The bulk organization's own single assign does not wait behind its own bulk job either.
    let own_flow = app.create_flow(&bulk, "Single", &[5]).await;
    app.assign_persisted(&bulk, &own_flow, &bulk_emails[0], json!({}))
        .await;
    let bulk_done = persisted_by_org(&app)
        .await
        .get(&bulk.id)
        .copied()
        .unwrap_or(0);
    assert!(
        bulk_done <= 20_000,
        "the bulk organization's single assign waited for its own bulk backlog ({bulk_done} persisted)"
    );
    // The bulk job is not starved either: it drains completely (a worker of the usual size takes
    // over), each item once.
    drop(app.assign_worker.take());
    app.assign_worker = Some(app.start_assign_worker());
    app.eventually(
        Duration::from_secs(120),
        "the bulk backlog to drain",
        || async {
            (persisted_by_org(&app).await.get(&bulk.id).copied() == Some(20_001)).then_some(())
        },
    )
    .await;
    assert_eq!(app.assignment_count().await, 20_006);
}

#[tokio::test]
async fn two_organizations_with_bulk_backlogs_share_the_persist_rate() {
    let mut app = TestApp::spawn_with(without_worker()).await;
    let (first, first_flow, first_emails) = app.org_with_users(10_000).await;
    let (second, second_flow, second_emails) = app.org_with_users(10_000).await;
    // The first organization's whole job is queued before the second's: in one FIFO queue the
    // second would get nothing until the first is done.
    bulk_assign_all(&app, &first, &first_flow, &first_emails).await;
    bulk_assign_all(&app, &second, &second_flow, &second_emails).await;
    // Both queues' messages are in the worker's hands at once: the turns decide.
    app.assign_worker = Some(slow_worker(&app, 32));
    app.wait_for_consumer().await;

    // Read once about a third of all the work is persisted, while both backlogs remain.
    let shares = app
        .eventually(
            Duration::from_secs(120),
            "a third of the work persisted",
            || async {
                let persisted = persisted_by_org(&app).await;
                let total: i64 = persisted.values().sum();
                (total >= 6_000).then_some(persisted)
            },
        )
        .await;
    let first_done = shares.get(&first.id).copied().unwrap_or(0);
    let second_done = shares.get(&second.id).copied().unwrap_or(0);
    let total = (first_done + second_done) as f64;
    for (name, done) in [("first", first_done), ("second", second_done)] {
        let share = done as f64 / total;
        assert!(
            (0.3..=0.7).contains(&share),
            "the {name} organization got {done} of {total} persisted ({share:.2}); \
             expected about half"
        );
    }
    drop(app.assign_worker.take());
    app.assign_worker = Some(app.start_assign_worker());
    app.eventually(
        Duration::from_secs(120),
        "both backlogs to drain",
        || async { (app.assignment_count().await == 20_000).then_some(()) },
    )
    .await;
}

#[tokio::test]
async fn organizations_get_bulk_queues_in_creation_order_and_an_operator_can_move_one() {
    let app = TestApp::spawn_with(without_worker()).await;
    let mut created = Vec::new();
    for _ in 0..(usize::from(BULK_SHARDS) + 2) {
        created.push(app.create_org(Tier::Standard).await);
    }
    let mut shards = Vec::new();
    for org in &created {
        let org = orgs::get(&app.db, org.id).await.unwrap().unwrap();
        shards.push(bulk_shard(org.bulk_lane));
    }
    let first: std::collections::HashSet<u16> =
        shards[..usize::from(BULK_SHARDS)].iter().copied().collect();
    assert_eq!(
        first.len(),
        usize::from(BULK_SHARDS),
        "the first organizations each have a queue of their own: {shards:?}"
    );
    assert_eq!(
        orgs::bulk_shard_counts(&app.db).await.unwrap(),
        [2, 2, 1, 1, 1, 1, 1, 1],
        "later ones are spread evenly"
    );

    // An operator moves the ninth organization off the first one's queue.
    let moved = &created[usize::from(BULK_SHARDS)];
    flowctl::admin::org(
        &app.core,
        flowctl::admin::OrgCommand::Lane {
            org: moved.id.to_string(),
            shard: Some(5),
        },
    )
    .await
    .unwrap();
    assert_eq!(
        bulk_shard(
            orgs::get(&app.db, moved.id)
                .await
                .unwrap()
                .unwrap()
                .bulk_lane
        ),
        5
    );
    // The API's cached copy of the organization is dropped: its next bulk call goes to queue 5.
    let flow = app.create_flow(moved, "Moved", &[10]).await;
    app.create_users(moved, &["moved@example.com"]).await;
    let before = app.queue_state(QueueKind::BulkAssign(5)).await.unwrap().0;
    app.eventually(
        Duration::from_secs(10),
        "the move to reach the API",
        || async {
            let response = app
                .assign_bulk(
                    moved,
                    &assign_items(&flow, &["moved@example.com".to_owned()]),
                    &[],
                )
                .await;
            assert_eq!(response.status, 200, "{:?}", response.body);
            let now = app.queue_state(QueueKind::BulkAssign(5)).await.unwrap().0;
            (now > before).then_some(())
        },
    )
    .await;
}

#[tokio::test]
async fn single_and_bulk_commands_travel_in_their_lanes_and_so_do_their_events() {
    let app = TestApp::spawn().await;
    let (org, flow, emails) = app.org_with_users(3).await;
    let single = app
        .assign_persisted(&org, &flow, &emails[0], json!({}))
        .await;
    let response = app
        .assign_bulk(&org, &assign_items(&flow, &emails[1..]), &[])
        .await;
    assert_eq!(response.status, 200, "{:?}", response.body);
    let bulk: Vec<String> = response.body["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|item| item["result"]["assignmentId"].as_str().unwrap().to_owned())
        .collect();
    for id in &bulk {
        app.eventually(Duration::from_secs(10), "bulk persisted", || async {
            (app.get(&org, &format!("/v1/assignments/{id}")).await.status == 200).then_some(())
        })
        .await;
    }
    let lane_of = |id: String| {
        let db = app.db.clone();
        async move {
            let id = flow_domain::ids::AssignmentId::parse(&id).unwrap();
            let interactive: bool = sqlx::query_scalar(
                "SELECT interactive FROM outbox WHERE assignment_id = $1 AND event_type = 'flow.assigned'",
            )
            .bind(id)
            .fetch_one(&db)
            .await
            .unwrap();
            if interactive {
                Lane::Interactive
            } else {
                Lane::Bulk
            }
        }
    };
    assert_eq!(lane_of(single).await, Lane::Interactive);
    for id in bulk {
        assert_eq!(lane_of(id).await, Lane::Bulk);
    }
}

/// The assignment ids of the `flow.assigned` events `receiver` got at `path`.
fn assigned_ids(receiver: &Receiver, path: &str) -> Vec<String> {
    receiver
        .received(path)
        .iter()
        .map(|request| request.event())
        .filter(|event| event["type"] == "flow.assigned")
        .filter_map(|event| event["data"]["assignmentId"].as_str().map(str::to_owned))
        .collect()
}

#[tokio::test]
async fn a_single_assigns_webhook_is_delivered_while_a_bulk_flood_of_events_waits() {
    let mut app = TestApp::spawn_with(TestOptions {
        webhooks: true,
        ..TestOptions::default()
    })
    .await;
    let (bulk, bulk_flow, bulk_emails) = app.org_with_users(5_000).await;
    let (bystander, flow, emails) = app.org_with_users(1).await;
    let receiver = Receiver::start().await.expect("webhook receiver");
    // The bulk organization's endpoint takes 20 ms a request: its events drain slowly.
    receiver.set("bulk", Behaviour::Delay(20));
    receiver.set("single", Behaviour::Succeed);
    for (org, path) in [(&bulk, "bulk"), (&bystander, "single")] {
        app.create_webhook(org, &json!({ "url": receiver.url(path) }))
            .await;
    }
    // The webhook-worker is stopped while the bulk job's 5,000 events are relayed: they wait in
    // the bulk lane's webhook queue.
    drop(app.webhook_worker.take());
    bulk_assign_all(&app, &bulk, &bulk_flow, &bulk_emails).await;
    app.eventually(
        Duration::from_secs(60),
        "the bulk events to be relayed",
        || async {
            let persisted = persisted_by_org(&app).await.get(&bulk.id).copied();
            (persisted == Some(5_000) && outbox_backlog(&app).await == 0).then_some(())
        },
    )
    .await;
    let single = app
        .assign_persisted(&bystander, &flow, &emails[0], json!({}))
        .await;
    let bulk_webhooks = webhook_queue(&app, &bulk).await;
    let (waiting, _) = app.queue_state(bulk_webhooks).await.expect("queue");
    assert!(waiting > 0, "the bulk events wait in their queue");
    // A webhook-worker comes back that takes one message of each queue at a time and sends one
    // request at a time to each endpoint.
    app.webhook_worker = Some(app.start_webhook_worker_with(|config| {
        config.endpoint_concurrency = 1;
        config.prefetch = 1;
    }));
    app.eventually(
        Duration::from_secs(30),
        "the single assign's webhook",
        || async {
            assigned_ids(&receiver, "single")
                .contains(&single)
                .then_some(())
        },
    )
    .await;
    let (still_waiting, _) = app.queue_state(bulk_webhooks).await.expect("queue");
    assert!(
        still_waiting > 0,
        "the single assign's event waited until the bulk flood was taken ({} bulk events delivered)",
        assigned_ids(&receiver, "bulk").len()
    );
}

/// Events written and not yet published, in both lanes.
async fn outbox_backlog(app: &TestApp) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM outbox_unpublished")
        .fetch_one(&app.db)
        .await
        .expect("backlog")
}

#[tokio::test]
async fn a_poison_command_of_a_bulk_queue_is_dead_lettered_with_that_queue_and_reads_as_failed() {
    let app = TestApp::spawn().await;
    let org = app.create_org(Tier::Enterprise).await;
    let flow = app.create_flow(&org, "F", &[5]).await;
    let poison = flow_domain::messages::AssignCommand {
        version: flow_domain::messages::ASSIGN_COMMAND_VERSION,
        assignment_id: flow_domain::ids::AssignmentId::new(),
        existing_assignment_id: None,
        org_id: org.id,
        flow_id: flow_domain::ids::FlowId::parse(&flow).unwrap(),
        flow_name: "F".into(),
        // A user that does not exist: the command can never be persisted.
        user_id: flow_domain::ids::UserId::new(),
        assignee_email: "nobody@example.com".into(),
        priority: flow_domain::Priority::Medium,
        notes: None,
        due_at: None,
        assigned_at: chrono::Utc::now(),
        request_id: None,
        schedule_id: None,
        traceparent: None,
    };
    let queue = QueueKind::BulkAssign(3);
    app.publish_raw(
        &queue.suffix(),
        flow_domain::messages::ASSIGN_KIND,
        &serde_json::to_vec(&poison).unwrap(),
    )
    .await;
    let dead = app.dead_letters(1).await;
    assert_eq!(
        dead[0].origin_queue.as_deref(),
        Some(app.topology().queue(queue).as_str()),
        "marked with the bulk queue it came from, so a replay goes back there"
    );
    let failed = app
        .get(&org, &format!("/v1/assignments/{}", poison.assignment_id))
        .await;
    assert_eq!(failed.status, 200, "{:?}", failed.body);
    assert_eq!(failed.body["status"], "failed", "{:?}", failed.body);
}

/// Creates an endpoint of `org` at `path` of `receiver`, which checks its signatures (and so
/// tallies its arrivals).
async fn signed_endpoint(app: &TestApp, org: &TestOrg, receiver: &Receiver, path: &str) {
    let endpoint = app
        .create_webhook(org, &json!({ "url": receiver.url(path) }))
        .await;
    receiver.sign(path, endpoint["secret"].as_str().expect("secret"));
}

/// Deliveries written for `org`'s events.
async fn deliveries_of(app: &TestApp, org: &TestOrg) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM webhook_deliveries WHERE org_id = $1")
        .bind(org.id)
        .fetch_one(&app.db)
        .await
        .expect("deliveries")
}

#[tokio::test]
async fn another_organizations_bulk_webhooks_are_fanned_out_before_a_floods_backlog_drains() {
    let mut app = TestApp::spawn_with(TestOptions {
        webhooks: true,
        ..TestOptions::default()
    })
    .await;
    let (flood, flood_flow, flood_emails) = app.org_with_users(3_000).await;
    let (other, other_flow, other_emails) = app.org_with_users(3).await;
    assert_ne!(
        webhook_queue(&app, &flood).await,
        webhook_queue(&app, &other).await,
        "two organizations created one after the other have webhook queues of their own"
    );
    let receiver = Receiver::start().await.expect("webhook receiver");
    signed_endpoint(&app, &flood, &receiver, "flood").await;
    signed_endpoint(&app, &other, &receiver, "other").await;
    // No webhook-worker while both bulk jobs are relayed: the flood's 3,000 events are queued
    // before the other organization's three, as a single FIFO queue would hold them.
    drop(app.webhook_worker.take());
    bulk_assign_all(&app, &flood, &flood_flow, &flood_emails).await;
    app.eventually(
        Duration::from_secs(60),
        "the flood's events to be relayed",
        || async {
            let persisted = persisted_by_org(&app).await.get(&flood.id).copied();
            (persisted == Some(3_000) && outbox_backlog(&app).await == 0).then_some(())
        },
    )
    .await;
    bulk_assign_all(&app, &other, &other_flow, &other_emails).await;
    app.eventually(
        Duration::from_secs(60),
        "the other organization's events to be relayed",
        || async {
            let persisted = persisted_by_org(&app).await.get(&other.id).copied();
            (persisted == Some(3) && outbox_backlog(&app).await == 0).then_some(())
        },
    )
    .await;
    let flood_queue = webhook_queue(&app, &flood).await;
    let (flood_waiting, _) = app.queue_state(flood_queue).await.expect("flood's queue");
    let (other_waiting, _) = app
        .queue_state(webhook_queue(&app, &other).await)
        .await
        .expect("other's queue");
    assert!(
        flood_waiting > 10 && other_waiting > 0,
        "each organization's events wait in its own queue ({flood_waiting} and {other_waiting} messages)"
    );
    // A webhook-worker that takes one message at a time from each queue.
    app.webhook_worker = Some(app.start_webhook_worker_with(|config| {
        config.prefetch = flow_common::amqp::BULK_SHARDS;
        config.batch_size = 1;
    }));
    app.eventually(
        Duration::from_secs(30),
        "the other organization's deliveries",
        || async { (deliveries_of(&app, &other).await == 3).then_some(()) },
    )
    .await;
    // Order, not time: when the other organization's events were fanned out, most of the
    // flood's had not been; with one queue for everyone they would all have come first.
    let flood_before: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM webhook_deliveries
         WHERE org_id = $1
           AND created_at < (SELECT max(created_at) FROM webhook_deliveries WHERE org_id = $2)",
    )
    .bind(flood.id)
    .bind(other.id)
    .fetch_one(&app.db)
    .await
    .expect("order");
    assert!(
        flood_before < 1_500,
        "{flood_before} of the flood's 3,000 deliveries were written before the other \
         organization's last one"
    );
    receiver
        .wait_for_deliveries("other", 3, Duration::from_secs(30))
        .await;
    // Nothing lost or sent twice: the flood drains completely, each event once.
    receiver
        .wait_for_deliveries("flood", 3_000, Duration::from_secs(120))
        .await;
    assert_eq!(deliveries_of(&app, &flood).await, 3_000);
    let tally = receiver.tally();
    assert_eq!(tally.first_arrivals("flood"), 3_000);
    assert_eq!(tally.duplicates, 0);
}

#[tokio::test]
async fn a_slow_endpoint_does_not_hold_another_organizations_bulk_webhooks() {
    let mut app = TestApp::spawn_with(TestOptions {
        webhooks: true,
        ..TestOptions::default()
    })
    .await;
    let (slow, slow_flow, slow_emails) = app.org_with_users(200).await;
    let (other, other_flow, other_emails) = app.org_with_users(20).await;
    let receiver = Receiver::start().await.expect("webhook receiver");
    // Answers every request after 8 s, inside the send timeout.
    receiver.set("slow", Behaviour::Delay(8_000));
    signed_endpoint(&app, &slow, &receiver, "slow").await;
    signed_endpoint(&app, &other, &receiver, "other").await;
    // Batches of one message: were batches to wait on the slow endpoint's attempts, its events
    // would take every batch slot. The send timeout is the production default, so the slow
    // endpoint's 8 s are inside it.
    drop(app.webhook_worker.take());
    app.webhook_worker = Some(app.start_webhook_worker_with(|config| {
        config.batch_size = 1;
        config.timeout = Duration::from_secs(15);
        config.lease = Duration::from_secs(60);
    }));
    app.wait_for_consumers(QueueKind::Webhooks, 1).await;
    bulk_assign_all(&app, &slow, &slow_flow, &slow_emails).await;
    app.eventually(
        Duration::from_secs(30),
        "the slow endpoint's first requests",
        || async { (receiver.tally().first_arrivals("slow") > 0).then_some(()) },
    )
    .await;
    bulk_assign_all(&app, &other, &other_flow, &other_emails).await;
    receiver
        .wait_for_deliveries("other", 20, Duration::from_secs(30))
        .await;
    assert!(
        receiver.received("slow").is_empty(),
        "every delivery of the other organization arrived while the slow endpoint's first \
         requests were still sleeping"
    );
    // The slow endpoint's deliveries are not lost: it gets requests again once it answers.
    assert!(receiver.tally().first_arrivals("slow") >= 1);
}

#[tokio::test]
async fn events_left_in_the_single_webhook_queue_of_earlier_versions_are_still_delivered() {
    let mut app = TestApp::spawn_with(TestOptions {
        webhooks: true,
        ..TestOptions::default()
    })
    .await;
    let org = app.create_org(Tier::Standard).await;
    let receiver = Receiver::start().await.expect("webhook receiver");
    signed_endpoint(&app, &org, &receiver, "old").await;
    app.wait_for_consumers(QueueKind::Webhooks, 1).await;
    // What a relay of an earlier version left in `{prefix}.webhooks`: a lone event.
    let event_id = flow_domain::ids::EventId::new();
    let body = flow_domain::events::event_body(
        event_id,
        "flow.assigned",
        chrono::Utc::now(),
        json!({ "assignmentId": "asg_left_behind" }),
    );
    let connection = flow_common::amqp::connect(&app.core.amqp_url, "test")
        .await
        .expect("amqp");
    let channel = connection.create_channel().await.expect("channel");
    channel
        .confirm_select(lapin::options::ConfirmSelectOptions::default())
        .await
        .expect("confirm mode");
    let mut headers = lapin::types::FieldTable::default();
    headers.insert(
        flow_domain::events::ORG_HEADER.into(),
        lapin::types::AMQPValue::LongString(org.id.to_string().into()),
    );
    channel
        .basic_publish(
            "".into(),
            app.topology().queue(QueueKind::Webhooks).into(),
            lapin::options::BasicPublishOptions::default(),
            &serde_json::to_vec(&body).expect("json"),
            lapin::BasicProperties::default()
                .with_delivery_mode(2)
                .with_type(flow_domain::events::EVENT_KIND.into())
                .with_message_id(event_id.to_string().into())
                .with_headers(headers),
        )
        .await
        .expect("publish")
        .await
        .expect("confirm");
    drop(connection.close(200, "ok".into()).await);
    let delivered = receiver
        .wait_for_deliveries("old", 1, Duration::from_secs(30))
        .await;
    assert_eq!(delivered[0].header("webhook-id"), event_id.to_string());
    assert_eq!(receiver.tally().duplicates, 0);
    // The queue of earlier versions is no longer bound: a new event goes to the shard only.
    drop(app.webhook_worker.take());
    let flow = app.create_flow(&org, "F", &[5]).await;
    app.create_users(&org, &["new@example.com"]).await;
    let response = app
        .assign_bulk(
            &org,
            &assign_items(&flow, &["new@example.com".to_owned()]),
            &[],
        )
        .await;
    assert_eq!(response.status, 200, "{:?}", response.body);
    let shard = webhook_queue(&app, &org).await;
    app.eventually(
        Duration::from_secs(30),
        "the new event in the organization's shard",
        || async {
            app.queue_state(shard)
                .await
                .is_some_and(|(ready, _)| ready == 1)
                .then_some(())
        },
    )
    .await;
    // The old queue may hold the first event again: an inline first attempt is sent before its
    // delivery is written and its message acked, so a worker stopped right after the send gives
    // the message back (sent again later with the same webhook-id). It holds nothing else.
    let connection = flow_common::amqp::connect(&app.core.amqp_url, "test")
        .await
        .expect("amqp");
    let channel = connection.create_channel().await.expect("channel");
    let mut left = Vec::new();
    while let Some(message) = channel
        .basic_get(
            app.topology().queue(QueueKind::Webhooks).into(),
            lapin::options::BasicGetOptions { no_ack: true },
        )
        .await
        .expect("basic.get")
    {
        left.push(
            message
                .delivery
                .properties
                .message_id()
                .as_ref()
                .map(|id| id.as_str().to_owned())
                .unwrap_or_default(),
        );
    }
    drop(connection.close(200, "ok".into()).await);
    assert!(
        left.iter().all(|id| *id == event_id.to_string()),
        "the queue of earlier versions gets no copy of the new event: {left:?}"
    );
}
