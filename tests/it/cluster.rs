//! Design §13 on a real 3-node RabbitMQ cluster (`.ci/rabbit-cluster`, see
//! `flow_tests::cluster`): every process given the node list keeps working when its node is
//! killed, and under load a `kill -9` of the node leading the assign queue, then of another node,
//! loses nothing accepted and writes no event twice (design §2, guarantees 1 to 4).

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use flow_common::amqp::QueueKind;
use flow_common::db::orgs::Tier;
use flow_tests::cluster::cluster;
use flow_tests::receiver::Receiver;
use flow_tests::{TestApp, TestOptions, TestOrg};
use serde_json::{Value, json};
use tokio::time::Instant;

/// Longest a call keeps being retried before the test gives up on it.
const CALL_DEADLINE: Duration = Duration::from_secs(120);

/// What one assign call came to, after its retries.
struct Accepted {
    /// The assignment ids handed out by the 200.
    ids: Vec<String>,
    /// When the 200 came.
    at: Instant,
    /// 503s (and refused connections) before it.
    retries: usize,
}

/// POSTs `body` to `path` on the replicas `bases` in turn, with the same `X-Request-ID` each
/// time, until every item is accepted (a 200; for a bulk, every item's 200), within `within`.
async fn assign_until_accepted(
    client: &reqwest::Client,
    bases: &[String],
    org: &TestOrg,
    path: &str,
    body: &Value,
    request_id: &str,
    attempts: &AtomicUsize,
) -> Accepted {
    let within = CALL_DEADLINE;
    let deadline = Instant::now() + within;
    let mut retries = 0;
    loop {
        assert!(
            Instant::now() < deadline,
            "{path} {request_id} not accepted within {within:?} ({retries} retries)"
        );
        let base = &bases[retries % bases.len()];
        attempts.fetch_add(1, Ordering::Relaxed);
        let sent = client
            .post(format!("{base}{path}"))
            .bearer_auth(&org.key)
            .header("X-Request-ID", request_id)
            .json(body)
            .send()
            .await;
        let (status, answer) = match sent {
            Ok(response) => {
                let status = response.status().as_u16();
                (
                    status,
                    response.json::<Value>().await.unwrap_or(Value::Null),
                )
            }
            // The replica is not at fault here; a caller would retry.
            Err(_) => (0, Value::Null),
        };
        match status {
            200 if answer["assignmentId"].is_string() => {
                return Accepted {
                    ids: vec![
                        answer["assignmentId"]
                            .as_str()
                            .unwrap_or_default()
                            .to_owned(),
                    ],
                    at: Instant::now(),
                    retries,
                };
            }
            200 if answer["failed"] == json!(0) => {
                let ids = answer["results"]
                    .as_array()
                    .expect("bulk results")
                    .iter()
                    .map(|item| {
                        item["result"]["assignmentId"]
                            .as_str()
                            .expect("assignmentId")
                            .to_owned()
                    })
                    .collect();
                return Accepted {
                    ids,
                    at: Instant::now(),
                    retries,
                };
            }
            200 => {
                // Some items were not accepted: each must be a 503, retried with the request.
                for item in answer["results"].as_array().expect("bulk results") {
                    assert!(
                        item["status"] == json!(200) || item["status"] == json!(503),
                        "{item}"
                    );
                }
            }
            0 | 503 => {}
            other => panic!("{path} {request_id}: {other} {answer}"),
        }
        retries += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// An organization with `count` users, `flows` one-module flows and a webhook endpoint at `path`
/// of `receiver` for `flow.assigned`.
async fn org_with_endpoint(
    app: &TestApp,
    receiver: &Receiver,
    path: &str,
    count: usize,
    flows: usize,
) -> (TestOrg, Vec<String>, Vec<String>) {
    let org = app.create_org_with(Tier::Enterprise, Some(1_000_000)).await;
    let emails: Vec<String> = (0..count).map(|i| format!("c{i}@example.com")).collect();
    for chunk in emails.chunks(1_000) {
        let refs: Vec<&str> = chunk.iter().map(String::as_str).collect();
        app.create_users(&org, &refs).await;
    }
    let mut created = Vec::new();
    for index in 0..flows {
        created.push(
            app.create_flow(&org, &format!("Cluster {index}"), &[5])
                .await,
        );
    }
    let response = app
        .post(
            &org,
            "/v1/webhooks",
            &json!({ "url": receiver.url(path), "events": ["flow.assigned"] }),
        )
        .await;
    assert_eq!(response.status, 201, "{:?}", response.body);
    receiver.sign(path, response.body["secret"].as_str().expect("secret"));
    (org, created, emails)
}

/// Waits until every id of `ids` is a persisted assignment, each with one `flow.assigned` event.
async fn assert_persisted_once(app: &TestApp, ids: &HashSet<String>, within: Duration) {
    let expected = i64::try_from(ids.len()).expect("count");
    app.eventually(within, "every accepted assignment to persist", || async {
        (app.assignment_count().await == expected).then_some(())
    })
    .await;
    let stored: Vec<flow_domain::ids::AssignmentId> = ids
        .iter()
        .map(|id| flow_domain::ids::AssignmentId::parse(id).expect("assignment id"))
        .collect();
    let (found, events, distinct): (i64, i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM assignments WHERE id = ANY($1)), \
                (SELECT count(*) FROM outbox WHERE event_type = 'flow.assigned'), \
                (SELECT count(DISTINCT assignment_id) FROM outbox \
                  WHERE event_type = 'flow.assigned' AND assignment_id = ANY($1))",
    )
    .bind(&stored)
    .fetch_one(&app.db)
    .await
    .expect("counts");
    assert_eq!(found, expected, "every id handed out is an assignment");
    assert_eq!(events, expected, "one flow.assigned event per assignment");
    assert_eq!(distinct, expected, "every assignment has its event");
}

#[tokio::test]
async fn a_process_given_the_node_list_keeps_working_when_its_node_is_killed() {
    tokio::time::timeout(Duration::from_secs(300), async {
        let (cluster, _turn) = cluster().await;
        let app = TestApp::spawn_with(TestOptions {
            amqp_url: Some(cluster.list(&[1, 2, 3])),
            ..TestOptions::default()
        })
        .await;
        let org = app.create_org(Tier::Enterprise).await;
        app.create_users(&org, &["before@example.com", "after@example.com"])
            .await;
        let flow = app.create_flow(&org, "F", &[5]).await;
        let first = app
            .assign_persisted(&org, &flow, "before@example.com", json!({}))
            .await;

        let node = app
            .api
            .publisher
            .node()
            .await
            .expect("the API is connected");
        let killed = cluster.node_at(&node);
        // As in production, the queues have formed on every node before one dies: a quorum queue
        // that loses its leader within moments of being declared, before its members have all
        // started, can be left without a majority.
        cluster
            .wait_for_full_queues(
                app.topology().prefix(),
                &app.topology().all_queues(),
                Duration::from_secs(60),
            )
            .await;
        cluster.kill(killed).await;
        let bases = [app.base_url.clone()];
        let accepted = assign_until_accepted(
            &app.client,
            &bases,
            &org,
            "/v1/flows/assign",
            &json!({ "flowId": flow, "userEmail": "after@example.com" }),
            "after-the-kill",
            &AtomicUsize::new(0),
        )
        .await;
        let now_on = app.api.publisher.node().await.expect("reconnected");
        assert_ne!(
            cluster.node_at(&now_on),
            killed,
            "the API moved to another node"
        );
        let ids: HashSet<String> = accepted.ids.into_iter().chain([first]).collect();
        // The assign-worker, wherever it was connected, consumes the command from a live node.
        assert_persisted_once(&app, &ids, Duration::from_secs(60)).await;
        assert!(
            flow_tests::replicas::metric(
                "flow_amqp_connects_total",
                &[("role", "flow-api"), ("node", &now_on), ("outcome", "ok")]
            ) >= 1.0,
            "the reconnect is counted for its node"
        );

        cluster.restart(killed).await;
        cluster
            .wait_for_full_queues(
                app.topology().prefix(),
                &app.topology().all_queues(),
                Duration::from_secs(60),
            )
            .await;
    })
    .await
    .expect("the test finished within 300 s");
}

/// Singles in a row, then one bulk: how the load is made.
const BULK_EVERY: usize = 8;
const BULK_SIZE: usize = 10;
/// The pause of each caller between two calls: the load must outlast the chaos.
const PACE: Duration = Duration::from_millis(40);
const CALLERS: usize = 6;
/// Users and flows: their pairs are the distinct assignments the load makes, more than it makes
/// until the chaos is over.
const USERS: usize = 4_000;
const FLOWS: usize = 8;
const PAIRS: usize = USERS * FLOWS;

#[tokio::test]
async fn broker_node_loss_under_load_loses_nothing_and_writes_no_event_twice() {
    tokio::time::timeout(Duration::from_secs(600), async {
        let (cluster, _turn) = cluster().await;
        let receiver = Receiver::start().await.expect("webhook receiver");
        // Every component gets the nodes in another order.
        let app = TestApp::spawn_with(TestOptions {
            amqp_url: Some(cluster.list(&[1, 2, 3])),
            assign_worker: false,
            ..TestOptions::default()
        })
        .await;
        let (second_api, _second_state) = app.start_api_replica_on(&cluster.list(&[2, 3, 1])).await;
        let mut workers = vec![
            app.start_assign_worker_with(|config| config.core.amqp_url = cluster.list(&[3, 1, 2])),
            app.start_assign_worker_with(|config| config.core.amqp_url = cluster.list(&[2, 1, 3])),
            app.start_relay_with(|config| config.core.amqp_url = cluster.list(&[3, 2, 1])),
            app.start_webhook_worker_with(|config| config.core.amqp_url = cluster.list(&[1, 3, 2])),
        ];
        app.wait_for_consumers(QueueKind::Assign, 2).await;
        app.wait_for_consumers(QueueKind::Webhooks, 1).await;

        // The load runs until the chaos is over (each call a user or users of their own).
        let (org, flows, emails) =
            org_with_endpoint(&app, &receiver, "cluster", USERS, FLOWS).await;
        // Distinct pair `index`: a user and a flow.
        let pair = move |flows: &[String], emails: &[String], index: usize| {
            json!({ "flowId": flows[index / USERS], "userEmail": emails[index % USERS] })
        };
        let bases = Arc::new([app.base_url.clone(), second_api]);
        let next_item = Arc::new(AtomicUsize::new(0));
        let next_user = Arc::new(AtomicUsize::new(0));
        let done = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let attempts = Arc::new(AtomicUsize::new(0));
        let alive = Arc::new(AtomicUsize::new(CALLERS));
        let started = Instant::now();
        let mut callers = tokio::task::JoinSet::new();
        for caller in 0..CALLERS {
            let (client, bases, org, flows, emails) = (
                app.client.clone(),
                bases.clone(),
                org.clone(),
                flows.clone(),
                emails.clone(),
            );
            let (next_item, next_user, done, stop, attempts) = (
                next_item.clone(),
                next_user.clone(),
                done.clone(),
                stop.clone(),
                attempts.clone(),
            );
            let alive = Alive(alive.clone());
            callers.spawn(async move {
                let _alive = alive;
                let mut accepted = Vec::new();
                loop {
                    let item = next_item.fetch_add(1, Ordering::Relaxed);
                    let bulk = item % BULK_EVERY == BULK_EVERY - 1;
                    let first = next_user.fetch_add(if bulk { BULK_SIZE } else { 1 }, Ordering::Relaxed);
                    // The chaos is over, or (which the test refuses below) the users ran out.
                    if stop.load(Ordering::Relaxed) || first + BULK_SIZE > PAIRS {
                        return (accepted, stop.load(Ordering::Relaxed));
                    }
                    // Each caller starts on a replica of its own; a retry goes to the other.
                    let order: Vec<String> = (0..2).map(|i| bases[(caller + i) % 2].clone()).collect();
                    let request_id = format!("cluster-{item}");
                    let outcome = if bulk {
                        let items: Vec<Value> =
                            (first..first + BULK_SIZE).map(|index| pair(&flows, &emails, index)).collect();
                        let body = json!({ "assignments": items });
                        assign_until_accepted(&client, &order, &org, "/v1/flows/assign/bulk", &body, &request_id, &attempts).await
                    } else {
                        let body = pair(&flows, &emails, first);
                        assign_until_accepted(&client, &order, &org, "/v1/flows/assign", &body, &request_id, &attempts).await
                    };
                    done.fetch_add(1, Ordering::Relaxed);
                    accepted.push(outcome);
                    tokio::time::sleep(PACE).await;
                }
            });
        }

        // The chaos, mid-load: kill the node leading the assign queue, restart it, wait until
        // every queue has its 3 members back, then kill another node and restart it.
        let assign_queue = app.topology().queue(QueueKind::Assign);
        let wait_for = |calls: usize| {
            let (done, attempts, alive) = (done.clone(), attempts.clone(), alive.clone());
            async move {
                let deadline = Instant::now() + Duration::from_secs(150);
                while done.load(Ordering::Relaxed) < calls {
                    assert!(
                        Instant::now() < deadline,
                        "the load stalled: {} of {calls} calls accepted after {} requests, {} \
                         callers running",
                        done.load(Ordering::Relaxed),
                        attempts.load(Ordering::Relaxed),
                        alive.load(Ordering::Relaxed),
                    );
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        };
        wait_for(50).await;
        let leader = cluster
            .leader_of(&assign_queue)
            .await
            .expect("the assign queue has a leader");
        eprintln!("kill -9 of node {leader}, leader of {assign_queue}, after {:?}", started.elapsed());
        cluster.kill(leader).await;
        tokio::time::sleep(Duration::from_secs(3)).await;
        cluster.restart(leader).await;
        cluster
            .wait_for_full_queues(app.topology().prefix(), &app.topology().all_queues(), Duration::from_secs(60))
            .await;
        let calls = done.load(Ordering::Relaxed);
        wait_for(calls + 50).await;
        let other = (leader % 3) + 1;
        eprintln!("kill -9 of node {other} after {:?}", started.elapsed());
        cluster.kill(other).await;
        tokio::time::sleep(Duration::from_secs(3)).await;
        cluster.restart(other).await;
        eprintln!("node {other} back after {:?}", started.elapsed());
        // A little more load on the whole cluster, then the callers stop.
        let calls = done.load(Ordering::Relaxed);
        wait_for(calls + 30).await;
        stop.store(true, Ordering::Relaxed);

        let mut accepted = Vec::new();
        while let Some(outcome) = callers.join_next().await {
            let (outcomes, stopped) = outcome.expect("caller");
            assert!(stopped, "the load ran out of distinct assignments before the chaos was over");
            accepted.extend(outcomes);
        }
        let mut times: Vec<Instant> = accepted.iter().map(|outcome| outcome.at).collect();
        times.sort_unstable();
        let longest_gap = times
            .windows(2)
            .map(|pair| pair[1] - pair[0])
            .max()
            .unwrap_or_default();
        let retries: usize = accepted.iter().map(|outcome| outcome.retries).sum();
        let ids: HashSet<String> = accepted.iter().flat_map(|outcome| outcome.ids.clone()).collect();
        eprintln!(
            "{} calls ({} assignments) in {:?}; {retries} retries after a 503 or a refused \
             connection; longest gap between two 200s: {longest_gap:?}",
            accepted.len(),
            ids.len(),
            times.last().map(|last| *last - started).unwrap_or_default(),
        );
        let users = ids.len();
        let assigned: usize = accepted.iter().map(|outcome| outcome.ids.len()).sum();
        assert_eq!(ids.len(), assigned, "every item got an id of its own");
        assert!(
            longest_gap < Duration::from_secs(30),
            "the longest gap between two 200s was {longest_gap:?}"
        );

        // Nothing accepted lost, no event written twice, every event delivered.
        assert_persisted_once(&app, &ids, Duration::from_secs(120)).await;
        let deadline = Instant::now() + Duration::from_secs(120);
        while receiver.tally().first_arrivals("cluster") < users as u64 {
            assert!(
                Instant::now() < deadline,
                "{} of {users} webhooks delivered within 120 s",
                receiver.tally().first_arrivals("cluster")
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let (signature_failures, duplicates) = {
            let tally = receiver.tally();
            (tally.signature_failures, tally.duplicates)
        };
        assert_eq!(signature_failures, 0);
        eprintln!("webhooks: {users} events delivered, {duplicates} duplicate deliveries (at-least-once)");
        let dead = app.queue_state(QueueKind::DeadLetters).await.map_or(0, |(ready, _)| ready);
        assert_eq!(dead, 0, "no command was dead-lettered");

        cluster
            .wait_for_full_queues(app.topology().prefix(), &app.topology().all_queues(), Duration::from_secs(60))
            .await;
        for worker in workers.drain(..) {
            worker.stop().expect("worker stops");
        }
    })
    .await
    .expect("the test finished within 600 s");
}

/// Counts a running caller down when it ends, however it ends.
struct Alive(Arc<AtomicUsize>);

impl Drop for Alive {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}
