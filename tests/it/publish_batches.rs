//! The API's batch publisher against a real broker: concurrent commands share broker messages and
//! every one arrives once; a command alone goes out at once, whatever the fill wait; a batch
//! that waits to fill while another is in flight waits no longer than the fill wait.

use std::collections::BTreeMap;
use std::time::Duration;

use flow_common::amqp::{
    BatchLimits, BatchPublisher, BatchTarget, Publisher, QueueKind, Submission,
};
use flow_common::db::orgs::Tier;
use flow_domain::messages::{ASSIGN_BATCH_KIND, ASSIGN_KIND, AssignBatch};
use flow_tests::{TestApp, TestOptions};
use lapin::options::BasicGetOptions;
use serde_json::json;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// A batch publisher of assign commands into the test's topology.
async fn batch_publisher(app: &TestApp, fill_wait: Duration) -> BatchPublisher {
    let publisher = Publisher::new(
        flow_tests::amqp_url(),
        "test-batches",
        app.topology(),
        2,
        Duration::from_secs(10),
    );
    publisher.connect_now().await.expect("broker");
    BatchPublisher::start(
        publisher,
        BatchTarget {
            exchange: app.topology().commands_exchange(),
            routing_key: QueueKind::Assign.suffix(),
            single_kind: ASSIGN_KIND,
            batch_kind: ASSIGN_BATCH_KIND,
            envelope: AssignBatch::envelope,
        },
        BatchLimits {
            max_batch: 128,
            in_flight: 2,
            fill_wait,
        },
        CancellationToken::new(),
    )
}

/// Publishes `{"n": n}` for each of `numbers` at once; returns when every one is confirmed.
async fn publish_all(batches: &BatchPublisher, numbers: impl Iterator<Item = usize>) {
    let publishes = numbers.map(|n| {
        batches.publish(Submission {
            json: format!("{{\"n\":{n}}}").into_bytes(),
            message_id: format!("command-{n}"),
            request_id: None,
            traceparent: None,
        })
    });
    for outcome in futures::future::join_all(publishes).await {
        outcome.expect("confirmed");
    }
}

/// The commands in the assign queue `kind`: how many broker messages, and the commands.
async fn drain_commands(app: &TestApp, kind: QueueKind) -> (usize, Vec<serde_json::Value>) {
    let connection = flow_common::amqp::connect(&flow_tests::amqp_url(), "test-batches-read")
        .await
        .expect("connect");
    let channel = connection.create_channel().await.expect("channel");
    let queue = app.topology().queue(kind);
    let (mut messages, mut seen) = (0, Vec::new());
    while let Some(message) = channel
        .basic_get(queue.as_str().into(), BasicGetOptions { no_ack: true })
        .await
        .expect("basic.get")
    {
        messages += 1;
        let body: serde_json::Value = serde_json::from_slice(&message.delivery.data).expect("json");
        let kind = message
            .delivery
            .properties
            .kind()
            .as_ref()
            .map(|kind| kind.as_str());
        let commands = if kind == Some(ASSIGN_BATCH_KIND) {
            body["commands"].as_array().expect("commands").clone()
        } else {
            vec![body]
        };
        seen.extend(commands);
    }
    drop(channel.close(200, "read".into()).await);
    drop(connection.close(200, "read".into()).await);
    (messages, seen)
}

/// The commands in the assign queue: how many broker messages, and how often each number came.
async fn drain(app: &TestApp) -> (usize, BTreeMap<u64, usize>) {
    let (messages, commands) = drain_commands(app, QueueKind::Assign).await;
    let mut seen = BTreeMap::new();
    for command in commands {
        *seen.entry(command["n"].as_u64().expect("n")).or_default() += 1;
    }
    (messages, seen)
}

fn app_options() -> TestOptions {
    TestOptions {
        assign_worker: false,
        ..TestOptions::default()
    }
}

#[tokio::test]
async fn concurrent_commands_share_messages_and_each_arrives_once() {
    let app = TestApp::spawn_with(app_options()).await;
    let batches = batch_publisher(&app, Duration::from_millis(1)).await;
    publish_all(&batches, 0..500).await;
    let (messages, seen) = drain(&app).await;
    assert_eq!(seen.len(), 500, "every command arrived");
    assert!(seen.values().all(|count| *count == 1), "none twice");
    assert!(messages < 100, "500 commands in {messages} messages");
}

#[tokio::test]
async fn a_command_alone_goes_at_once_and_a_waiting_batch_waits_at_most_the_fill_wait() {
    let app = TestApp::spawn_with(app_options()).await;
    let fill_wait = Duration::from_secs(2);
    let batches = batch_publisher(&app, fill_wait).await;

    // Nothing in flight: the command does not wait to fill.
    let started = Instant::now();
    publish_all(&batches, 0..1).await;
    assert!(
        started.elapsed() < fill_wait / 2,
        "a lone command waited {:?}",
        started.elapsed()
    );

    // Streams of single commands, so a batch is often in flight when the next one forms: each
    // command is answered within the confirm time plus at most one fill wait.
    let started = Instant::now();
    let streams = (0..4).map(|stream| {
        let batches = batches.clone();
        async move {
            for step in 0..5 {
                let n = 1 + stream * 5 + step;
                let sent = Instant::now();
                publish_all(&batches, n..n + 1).await;
                assert!(
                    sent.elapsed() < fill_wait + Duration::from_secs(1),
                    "command {n} took {:?}",
                    sent.elapsed()
                );
            }
        }
    });
    futures::future::join_all(streams).await;
    assert!(started.elapsed() < Duration::from_secs(30));
    let (_, seen) = drain(&app).await;
    assert_eq!(seen.len(), 21, "every command arrived");
    assert!(seen.values().all(|count| *count == 1), "none twice");
}

#[tokio::test]
async fn many_items_of_one_caller_fill_their_own_messages_at_once() {
    let app = TestApp::spawn_with(app_options()).await;
    // A fill wait far longer than the test may take: these items must not queue for it.
    let fill_wait = Duration::from_secs(30);
    let batches = batch_publisher(&app, fill_wait).await;
    let submissions: Vec<Submission> = (0..300)
        .map(|n| Submission {
            json: format!("{{\"n\":{n}}}").into_bytes(),
            message_id: format!("command-{n}"),
            request_id: None,
            traceparent: None,
        })
        .collect();
    let started = Instant::now();
    let outcomes = batches.publish_all(None, &submissions).await;
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "took {:?}",
        started.elapsed()
    );
    assert_eq!(outcomes.len(), 300);
    assert!(outcomes.iter().all(Result::is_ok), "{outcomes:?}");
    let (messages, seen) = drain(&app).await;
    assert_eq!(messages, 3, "300 items in messages of at most 128");
    assert_eq!(seen.len(), 300, "every item arrived");
    assert!(seen.values().all(|count| *count == 1), "none twice");
}

#[tokio::test]
async fn a_bulk_request_goes_out_in_full_messages_each_command_once() {
    let app = TestApp::spawn_with(app_options()).await;
    let org = app.create_org_with(Tier::Enterprise, Some(10_000)).await;
    let emails: Vec<String> = (0..300).map(|i| format!("bulk{i}@example.com")).collect();
    let refs: Vec<&str> = emails.iter().map(String::as_str).collect();
    app.create_users(&org, &refs).await;
    let flow = app.create_flow(&org, "Bulk", &[10]).await;
    let mut items = flow_tests::assign_items(&flow, &emails);
    // Items that fail answer on their own and publish nothing.
    items.insert(
        7,
        json!({ "flowId": flow, "userEmail": "nobody@example.com" }),
    );
    items.insert(
        11,
        json!({ "flowId": flow, "userEmail": "bulk1@example.com", "priority": "urgent" }),
    );
    let response = app.assign_bulk(&org, &items, &[]).await;
    assert_eq!(response.status, 200, "{:?}", response.body);
    assert_eq!(response.body["succeeded"], json!(300));
    let results = response.body["results"].as_array().expect("results");
    assert_eq!(results[7]["status"], json!(404));
    assert_eq!(results[11]["status"], json!(400));
    let answered: BTreeMap<String, String> = results
        .iter()
        .filter(|item| item["status"] == json!(200))
        .map(|item| {
            (
                item["result"]["assignmentId"]
                    .as_str()
                    .expect("id")
                    .to_owned(),
                item["result"]["details"]["assigneeEmail"]
                    .as_str()
                    .expect("email")
                    .to_owned(),
            )
        })
        .collect();
    assert_eq!(answered.len(), 300, "300 distinct ids");

    // A bulk request is bulk work: it goes to its organization's queue of the bulk lane.
    let bulk_lane = flow_common::db::orgs::get(&app.db, org.id)
        .await
        .expect("organization")
        .expect("organization")
        .bulk_lane;
    let queue = QueueKind::assign_for(flow_common::amqp::Lane::Bulk, bulk_lane);
    assert_eq!(drain_commands(&app, QueueKind::Assign).await.0, 0);
    let (messages, commands) = drain_commands(&app, queue).await;
    assert_eq!(
        messages, 3,
        "300 commands of one request in messages of at most 128"
    );
    let mut published = BTreeMap::new();
    for command in &commands {
        let id = command["assignmentId"]
            .as_str()
            .expect("assignmentId")
            .to_owned();
        let email = command["assigneeEmail"]
            .as_str()
            .expect("assigneeEmail")
            .to_owned();
        assert!(
            published.insert(id, email).is_none(),
            "a command published twice"
        );
    }
    assert_eq!(
        published, answered,
        "each answered item published once, as answered"
    );
}
