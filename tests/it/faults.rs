//! The faults users live through, each under a steady assign load with every component running
//! (API, assign-worker, outbox relay, webhook-worker delivering to a local endpoint): a broker
//! outage, a Postgres outage, workers killed twice, two API replicas answering concurrent
//! duplicates. Each ends with the same check: every id answered 200 resolves to exactly one
//! assignment, each assignment has one `flow.assigned` event, every event is published and reaches
//! the endpoint, and nothing exists twice. Loopback only; the outages are TCP proxies the test
//! cuts, so other tests sharing the servers are untouched.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use flow_common::db::orgs::Tier;
use flow_tests::receiver::Receiver;
use flow_tests::{TestApp, TestOptions, TestOrg, TestResponse};
use serde_json::json;
use tokio::time::Instant;

/// One answered request of the load.
struct Answer {
    user: usize,
    status: u16,
    id: Option<String>,
    at: Instant,
}

/// An organization with `users` users, a flow and a webhook endpoint on `receiver`.
async fn setup(app: &TestApp, users: usize, receiver: &Receiver) -> (TestOrg, String, Vec<String>) {
    let org = app.create_org_with(Tier::Enterprise, Some(1_000_000)).await;
    let emails: Vec<String> = (0..users).map(|i| format!("load{i}@example.com")).collect();
    for chunk in emails.chunks(1_000) {
        let refs: Vec<&str> = chunk.iter().map(String::as_str).collect();
        app.create_users(&org, &refs).await;
    }
    let flow = app.create_flow(&org, "Safety", &[20]).await;
    let endpoint = app
        .post(
            &org,
            "/v1/webhooks",
            &json!({ "url": receiver.url("load"), "events": ["flow.assigned"] }),
        )
        .await;
    assert_eq!(endpoint.status, 201, "{:?}", endpoint.body);
    (org, flow, emails)
}

/// How long the load lasts.
const LOAD: Duration = Duration::from_secs(6);

/// `clients` concurrent clients assign the flow to one user after another (each user once), a
/// few milliseconds apart, for [`LOAD`] or until every user was tried. With several `bases` (API
/// replicas), each request goes to every replica at once under the same X-Request-ID: concurrent
/// duplicates.
async fn load(
    app: &TestApp,
    org: &TestOrg,
    flow: &str,
    emails: &[String],
    bases: &[String],
    clients: usize,
) -> Vec<Answer> {
    let next = Arc::new(AtomicUsize::new(0));
    let deadline = Instant::now() + LOAD;
    let runs = (0..clients).map(|_| {
        let next = next.clone();
        async move {
            let mut answers = Vec::new();
            while Instant::now() < deadline {
                let user = next.fetch_add(1, Ordering::Relaxed);
                let Some(email) = emails.get(user) else {
                    return answers;
                };
                let body = json!({ "flowId": flow, "userEmail": email });
                let key = format!("load-{user}");
                let headers = [("X-Request-ID", key.as_str())];
                let sends = bases.iter().map(|base| {
                    app.request_at(
                        base,
                        reqwest::Method::POST,
                        "/v1/flows/assign",
                        Some(&org.key),
                        Some(&body),
                        &headers,
                    )
                });
                for response in futures::future::join_all(sends).await {
                    answers.push(answer(user, &response));
                }
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
            answers
        }
    });
    futures::future::join_all(runs)
        .await
        .into_iter()
        .flatten()
        .collect()
}

fn answer(user: usize, response: &TestResponse) -> Answer {
    Answer {
        user,
        status: response.status,
        id: response.body["assignmentId"].as_str().map(str::to_owned),
        at: Instant::now(),
    }
}

/// Nothing accepted is lost, nothing is written or delivered twice.
async fn assert_nothing_lost_nothing_twice(
    app: &TestApp,
    org: &TestOrg,
    answers: &[Answer],
    receiver: &Receiver,
) {
    for answer in answers {
        assert!(
            matches!(answer.status, 200 | 503),
            "only 200 or 503 under a fault, got {} for user {}",
            answer.status,
            answer.user
        );
    }
    let accepted: Vec<&Answer> = answers.iter().filter(|a| a.status == 200).collect();
    assert!(!accepted.is_empty(), "some requests were accepted");
    let ids: Vec<String> = accepted.iter().filter_map(|a| a.id.clone()).collect();
    assert_eq!(ids.len(), accepted.len(), "every 200 names an assignment");
    let resolved = app.resolve_all(org, &ids, Duration::from_secs(90)).await;
    // Every answer for one user names the same assignment, and it is that user's only one.
    let mut by_user: HashMap<usize, HashSet<&String>> = HashMap::new();
    for answer in &accepted {
        let id = answer.id.as_ref().unwrap();
        by_user
            .entry(answer.user)
            .or_default()
            .insert(&resolved[id]);
    }
    for (user, targets) in &by_user {
        assert_eq!(
            targets.len(),
            1,
            "user {user}: answers resolve to {targets:?}"
        );
    }
    app.wait_all_published(Duration::from_secs(60)).await;
    let audit = app.audit().await;
    assert_eq!(audit.duplicate_events, 0, "{audit:?}");
    assert_eq!(audit.assignments_without_one_assigned_event, 0, "{audit:?}");
    assert_eq!(audit.duplicate_active, 0, "{audit:?}");
    assert!(
        audit.assignments >= by_user.len() as i64,
        "every accepted user has an assignment: {audit:?}"
    );
    // Assignments beyond the accepted ones can only come from requests answered 503 whose
    // command the broker did store (the confirm was lost with the connection).
    let refused_users: HashSet<usize> = answers
        .iter()
        .filter(|a| a.status == 503)
        .map(|a| a.user)
        .collect();
    assert!(
        audit.assignments as usize <= by_user.len() + refused_users.len(),
        "no assignment comes from nowhere: {audit:?}"
    );
    // Every event reaches the endpoint; deliveries are unique per event.
    let events: Vec<String> =
        sqlx::query_scalar("SELECT 'evt_' || replace(event_id::text, '-', '') FROM outbox")
            .fetch_all(&app.db)
            .await
            .unwrap();
    // Counted by distinct `webhook-id`: a worker killed between a send and its record sends that
    // delivery again, and a count of requests would stop waiting before the last event arrived
    // (a delivery its dead worker held comes back when the lease expires).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let delivered: HashSet<String> = loop {
        let delivered: HashSet<String> = receiver
            .delivered("load")
            .iter()
            .map(|request| request.header("webhook-id").to_owned())
            .collect();
        if events.iter().all(|event| delivered.contains(event))
            || tokio::time::Instant::now() > deadline
        {
            break delivered;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    for event in &events {
        assert!(delivered.contains(event), "{event} was not delivered");
    }
    // A first attempt made inline is written once it answered: the last rows may follow their
    // requests by a batch. One row per event, never more.
    let deliveries = app
        .eventually(
            Duration::from_secs(30),
            "one delivery row per event",
            || async {
                let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM webhook_deliveries")
                    .fetch_one(&app.db)
                    .await
                    .unwrap();
                (rows >= events.len() as i64).then_some(rows)
            },
        )
        .await;
    assert_eq!(deliveries, events.len() as i64, "one delivery per event");
    app.assert_rollups_exact().await;
}

#[tokio::test]
async fn a_broker_outage_under_load_answers_503_never_200_and_recovers_by_itself() {
    let app = TestApp::spawn_with(TestOptions {
        webhooks: true,
        rabbit_proxy: true,
        ..TestOptions::default()
    })
    .await;
    let receiver = Receiver::start().await.expect("webhook receiver");
    let (org, flow, emails) = setup(&app, 3_000, &receiver).await;
    let proxy = app.rabbit_proxy.as_ref().unwrap();
    let outage = async {
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        proxy.disable().await;
        let down = Instant::now();
        tokio::time::sleep(Duration::from_secs(2)).await;
        proxy.enable();
        (down, Instant::now())
    };
    let bases = [app.base_url.clone()];
    let (answers, (down, up)) = tokio::join!(load(&app, &org, &flow, &emails, &bases, 8), outage);
    // While the broker was unreachable (after a moment for requests already confirmed), nothing
    // was accepted.
    let during: Vec<&Answer> = answers
        .iter()
        .filter(|a| a.at > down + Duration::from_millis(200) && a.at < up)
        .collect();
    assert!(
        !during.is_empty(),
        "requests were answered during the outage"
    );
    assert!(
        during.iter().all(|a| a.status == 503),
        "no 200 while the broker was down"
    );
    assert!(
        answers.iter().any(|a| a.at > up && a.status == 200),
        "assigns are accepted again after the broker is back, without a restart"
    );
    assert_nothing_lost_nothing_twice(&app, &org, &answers, &receiver).await;
}

#[tokio::test]
async fn a_postgres_outage_under_load_loses_nothing_and_recovers_by_itself() {
    // The webhook-worker holds a 10-minute lease, longer than the test waits: a fan-out whose
    // COMMIT answer is lost must reclaim its own deliveries on the retry, not leave them to the
    // lease.
    let mut app = TestApp::spawn_with(TestOptions {
        webhooks: true,
        postgres_proxy: true,
        ..TestOptions::default()
    })
    .await;
    if let Some(worker) = app.webhook_worker.take() {
        worker.stop().expect("stopping the default webhook-worker");
    }
    app.webhook_worker = Some(app.start_webhook_worker_with(|config| {
        config.lease = Duration::from_secs(600);
    }));
    let receiver = Receiver::start().await.expect("webhook receiver");
    let (org, flow, emails) = setup(&app, 3_000, &receiver).await;
    let proxy = app.postgres_proxy.as_ref().unwrap();
    let outage = async {
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        proxy.disable().await;
        tokio::time::sleep(Duration::from_secs(2)).await;
        proxy.enable();
        Instant::now()
    };
    let bases = [app.base_url.clone()];
    let (answers, up) = tokio::join!(load(&app, &org, &flow, &emails, &bases, 8), outage);
    assert!(
        answers.iter().any(|a| a.status == 503),
        "the outage was seen by callers"
    );
    assert!(
        answers.iter().any(|a| a.at > up && a.status == 200),
        "assigns are accepted again after Postgres is back"
    );
    assert_nothing_lost_nothing_twice(&app, &org, &answers, &receiver).await;
}

#[tokio::test]
async fn workers_killed_twice_under_load_with_two_replicas_and_duplicates_lose_nothing() {
    let mut app = TestApp::spawn_with(TestOptions {
        webhooks: true,
        ..TestOptions::default()
    })
    .await;
    let replica = app.start_api_replica().await;
    let receiver = Receiver::start().await.expect("webhook receiver");
    let (org, flow, emails) = setup(&app, 3_000, &receiver).await;
    let mut assign_worker = app.assign_worker.take();
    let mut relay = app.relay.take();
    // Deliveries a killed worker held come back when their lease expires: every webhook-worker
    // of this test, the first included, holds them for 12 s instead of the default 10 minutes.
    if let Some(worker) = app.webhook_worker.take() {
        worker.stop().expect("stopping the default webhook-worker");
    }
    let mut webhook_worker = Some(app.start_webhook_worker_with(|config| {
        config.lease = Duration::from_secs(12);
    }));
    let bases = [app.base_url.clone(), replica];
    let killer = async {
        for round in 0..2 {
            tokio::time::sleep(Duration::from_millis(1_000)).await;
            for worker in [assign_worker.take(), relay.take(), webhook_worker.take()]
                .into_iter()
                .flatten()
            {
                worker.kill();
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
            assign_worker = Some(app.start_assign_worker());
            relay = Some(app.start_relay());
            webhook_worker = Some(app.start_webhook_worker_with(|config| {
                config.lease = Duration::from_secs(12);
            }));
            tracing::info!(round, "workers killed and restarted");
        }
        (assign_worker, relay, webhook_worker)
    };
    let (answers, workers) = tokio::join!(load(&app, &org, &flow, &emails, &bases, 6), killer);
    (app.assign_worker, app.relay, app.webhook_worker) = workers;
    assert!(
        answers.iter().all(|a| a.status == 200),
        "a worker dying does not stop the API from accepting"
    );
    assert_nothing_lost_nothing_twice(&app, &org, &answers, &receiver).await;
    let users: HashSet<usize> = answers.iter().map(|a| a.user).collect();
    assert_eq!(app.audit().await.assignments, users.len() as i64);
}
