//! Reports on a Postgres streaming replica (`DATABASE_REPLICA_URLS`), against a real primary and
//! replica (`.ci/pg-replica`, see `flow_tests::replicas`): reads go to the replica while its
//! measured staleness is within the bound, to the primary otherwise, and say how old their data
//! is; exports read what was committed before they were requested.

use std::time::Duration;

use chrono::{DateTime, Utc};
use flow_common::db::orgs::Tier;
use flow_common::db::replicas::{PRIMARY, ReadPurpose, ReadRouter, is_recovery_conflict};
use flow_common::runtime::Supervisor;
use flow_tests::dashboard::{DashboardClient, role};
use flow_tests::replicas::{ReplicaPair, pair, reads, until};
use flow_tests::reports::{
    create_flow, create_org_in_zone, insert_many, report, report_ok, start_report_worker,
    wait_for_export,
};
use flow_tests::{TestApp, TestOptions, TestOrg};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

fn options(pair: &ReplicaPair, max_staleness: Duration) -> TestOptions {
    TestOptions {
        replica: Some((pair.clone(), max_staleness)),
        ..Default::default()
    }
}

/// An enterprise organization without a practical report limit.
async fn org(app: &TestApp) -> TestOrg {
    create_org_in_zone(app, Tier::Enterprise, "UTC", Some(100_000)).await
}

/// Waits until the API's router counts the replica fresh.
async fn until_fresh(app: &TestApp, pair: &ReplicaPair) {
    let server = pair.replica_server();
    until(Duration::from_secs(30), "the replica to be fresh", || {
        app.api
            .reads
            .fresh_replicas()
            .iter()
            .any(|fresh| **fresh == *server)
    })
    .await;
}

fn data_as_of(response: &flow_tests::TestResponse) -> DateTime<Utc> {
    let header = response
        .header("x-data-as-of")
        .unwrap_or_else(|| panic!("no X-Data-As-Of in {:?}", response.headers));
    DateTime::parse_from_rfc3339(header)
        .expect("X-Data-As-Of is RFC 3339")
        .to_utc()
}

fn generated_at(body: &Value) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(body["generatedAt"].as_str().expect("generatedAt"))
        .expect("generatedAt is RFC 3339")
        .to_utc()
}

/// What the exports row says it read, and when its data is from.
async fn export_source(app: &TestApp, body: &Value) -> (String, DateTime<Utc>) {
    let id = flow_domain::ids::ExportId::parse(body["exportId"].as_str().expect("exportId"))
        .expect("export id");
    sqlx::query_as("SELECT read_on, data_as_of FROM exports WHERE id = $1")
        .bind(id)
        .fetch_one(&app.db)
        .await
        .expect("the export row")
}

fn csv_rows(body: &[u8]) -> Vec<csv::StringRecord> {
    csv::Reader::from_reader(body)
        .records()
        .map(Result::unwrap)
        .collect()
}

#[tokio::test]
async fn under_write_load_reports_and_exports_are_read_on_the_replica_within_the_bound() {
    let (pair, _turn) = pair().await;
    let max_staleness = Duration::from_secs(5);
    let app = TestApp::spawn_with(options(&pair, max_staleness)).await;
    let _worker = start_report_worker(&app);
    let org = org(&app).await;
    let reported = create_flow(&app, &org, "Reported", &["One", "Two"]).await;
    insert_many(
        &app,
        &org,
        &reported,
        1_000,
        "2025-01-01T00:00:00Z",
        "reported",
    )
    .await;
    let loaded = create_flow(&app, &org, "Loaded", &["One"]).await;
    until_fresh(&app, &pair).await;

    // Writes keep the primary's WAL moving (and the replica replaying) all along.
    let stop = CancellationToken::new();
    let load = {
        let stop = stop.clone();
        let db = app.db.clone();
        let (org_id, flow_id) = (org.id, loaded.id);
        tokio::spawn(async move {
            let mut batches = 0;
            while !stop.is_cancelled() {
                sqlx::query(
                    "WITH new_users AS (
                        INSERT INTO users (id, org_id, email, email_normalized)
                        SELECT gen_random_uuid(), $1, e, e
                        FROM (SELECT 'load-' || $3 || '-' || n || '@load.example' AS e
                              FROM generate_series(1, 200) AS n) emails
                        RETURNING id)
                     INSERT INTO assignments (id, org_id, flow_id, user_id, status, assigned_at)
                     SELECT gen_random_uuid(), $1, $2, id, 'pending', now() FROM new_users",
                )
                .bind(org_id)
                .bind(flow_id)
                .bind(batches)
                .execute(&db)
                .await
                .expect("a batch of writes");
                batches += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            batches
        })
    };

    let server = pair.replica_server();
    let bound = chrono::Duration::from_std(max_staleness).unwrap();
    let before = reads("report", &server);
    let request = json!({ "flowId": reported.id.to_string(), "limit": 10 });
    for _ in 0..10 {
        let sent = Utc::now();
        let response = report(&app, &org, request.clone()).await;
        let received = Utc::now();
        assert_eq!(response.status, 200, "{}", response.body);
        assert_eq!(response.body["metrics"]["totalAssignments"], 1_000);
        let as_of = data_as_of(&response);
        assert!(
            as_of >= sent - bound && as_of <= received,
            "X-Data-As-Of {as_of} within {max_staleness:?} of the request ({sent} to {received})"
        );
        assert!(as_of <= generated_at(&response.body));
    }
    // The replica's counter is this pair's alone; the primary's is shared by every test of this
    // binary that reads a report, so only the replica's can be counted exactly.
    let after = reads("report", &server);
    assert_eq!(
        after - before,
        10.0,
        "every report was read on the replica {server}"
    );

    let requested = Utc::now();
    let exported = report_ok(
        &app,
        &org,
        json!({ "flowId": reported.id.to_string(), "format": "csv" }),
    )
    .await;
    let file = wait_for_export(&app, &org, exported["downloadUrl"].as_str().unwrap()).await;
    assert_eq!(file.status, 200);
    assert_eq!(csv_rows(&file.body).len(), 1_000);
    let (read_on, export_as_of) = export_source(&app, &exported).await;
    assert_eq!(read_on, server, "the export was read on the replica");
    assert!(export_as_of >= requested - bound);
    assert_eq!(
        file.header("x-data-as-of"),
        Some(flow_domain::format_timestamp(export_as_of).as_str()),
        "the download says when its data is from"
    );
    assert!(reads("export", &server) >= 1.0);

    // The dashboard's report views: the flow list's counts, a flow's report and its table.
    let dashboard =
        DashboardClient::signed_in(&app, org.id, "admin@example.com", role("admin")).await;
    let before = (reads("dashboard", &server), reads("report", &server));
    let list = dashboard.page("/dashboard/flows").await;
    assert!(
        list.contains("Reported") && list.contains("1,000"),
        "{list}"
    );
    let page = dashboard
        .page(&format!("/dashboard/flows/{}", reported.id))
        .await;
    assert!(page.contains("reported-1@bulk.example"), "{page}");
    let after = (reads("dashboard", &server), reads("report", &server));
    assert_eq!(
        (after.0 - before.0, after.1 - before.1),
        (2.0, 1.0),
        "the counts, the table and the flow's report read on the replica"
    );

    stop.cancel();
    let batches = load.await.expect("the load");
    assert!(batches > 10, "writes ran throughout: {batches} batches");
}

#[tokio::test]
async fn with_the_replicas_replay_paused_reads_go_to_the_primary_until_it_catches_up() {
    let (pair, _turn) = pair().await;
    let app = TestApp::spawn_with(options(&pair, Duration::from_secs(1))).await;
    let org = org(&app).await;
    let flow = create_flow(&app, &org, "Paused", &["One"]).await;
    insert_many(&app, &org, &flow, 10, "2025-01-01T00:00:00Z", "first").await;
    until_fresh(&app, &pair).await;
    let server = pair.replica_server();
    let request = json!({ "flowId": flow.id.to_string() });

    let paused = pair.pause_replay().await;
    // The primary writes on; the replica falls behind, and out of the choice once its data is
    // older than the bound.
    insert_many(&app, &org, &flow, 5, "2025-02-01T00:00:00Z", "second").await;
    until(
        Duration::from_secs(30),
        "the paused replica to go stale",
        || app.api.reads.fresh_replicas().is_empty(),
    )
    .await;
    let before = (reads("report", &server), reads("report", PRIMARY));
    let response = report(&app, &org, request.clone()).await;
    assert_eq!(response.status, 200, "{}", response.body);
    assert_eq!(
        response.body["metrics"]["totalAssignments"], 15,
        "the primary has every write"
    );
    assert_eq!(
        data_as_of(&response),
        generated_at(&response.body),
        "data read on the primary is current to the read"
    );
    let after = (reads("report", &server), reads("report", PRIMARY));
    // Not on the replica; on the primary (whose counter other tests of this binary share, so at
    // least this read).
    assert_eq!(after.0 - before.0, 0.0, "not read on the stale replica");
    assert!(after.1 - before.1 >= 1.0, "read on the primary");

    paused.resume().await;
    until_fresh(&app, &pair).await;
    let response = report(&app, &org, request).await;
    assert_eq!(response.status, 200);
    assert_eq!(response.body["metrics"]["totalAssignments"], 15);
    assert_eq!(
        reads("report", &server) - after.0,
        1.0,
        "back on the replica once it caught up"
    );
}

#[tokio::test]
async fn with_the_replica_stopped_reports_still_answer_from_the_primary() {
    let (pair, _turn) = pair().await;
    let app = TestApp::spawn_with(options(&pair, Duration::from_secs(5))).await;
    let org = org(&app).await;
    let flow = create_flow(&app, &org, "Stopped", &["One"]).await;
    insert_many(&app, &org, &flow, 20, "2025-01-01T00:00:00Z", "user").await;
    until_fresh(&app, &pair).await;
    let server = pair.replica_server();
    let request = json!({ "flowId": flow.id.to_string() });
    assert_eq!(report(&app, &org, request.clone()).await.status, 200);

    let stopped = pair.stop_replica();
    let before = reads("report", PRIMARY);
    // The first reads may still choose the replica (the sampler has not noticed yet): they find
    // it gone and read on the primary.
    for _ in 0..5 {
        let response = report(&app, &org, request.clone()).await;
        assert_eq!(response.status, 200, "{}", response.body);
        assert_eq!(response.body["metrics"]["totalAssignments"], 20);
    }
    // At least these five on the primary: its counter is shared with the other tests of this
    // binary that read reports.
    assert!(reads("report", PRIMARY) - before >= 5.0);
    until(
        Duration::from_secs(10),
        "the stopped replica to be skipped",
        || app.api.reads.fresh_replicas().is_empty(),
    )
    .await;

    stopped.start();
    until_fresh(&app, &pair).await;
    let before = reads("report", &server);
    assert_eq!(report(&app, &org, request).await.status, 200);
    assert_eq!(
        reads("report", &server) - before,
        1.0,
        "back on the replica"
    );
}

#[tokio::test]
async fn an_export_requested_right_after_writes_has_them_though_the_replica_lags() {
    let (pair, _turn) = pair().await;
    // A generous bound: the paused replica stays fresh enough for reports, so only the export's
    // own rule (the replica must have replayed its request) keeps it from reading stale data.
    let app = TestApp::spawn_with(options(&pair, Duration::from_secs(60))).await;
    let _worker = start_report_worker(&app);
    let org = org(&app).await;
    let flow = create_flow(&app, &org, "Lagging", &["One"]).await;
    insert_many(&app, &org, &flow, 100, "2025-01-01T00:00:00Z", "before").await;
    until_fresh(&app, &pair).await;
    let server = pair.replica_server();
    let request = json!({ "flowId": flow.id.to_string() });
    // The replica has the first writes before its replay stops.
    let replica_db = flow_tests::database_on(
        &pair.replica_url,
        app.db
            .connect_options()
            .get_database()
            .expect("database name"),
    );
    let replica_pool = sqlx::PgPool::connect(&replica_db)
        .await
        .expect("replica db");
    let mut replicated = 0_i64;
    for _ in 0..100 {
        replicated = sqlx::query_scalar("SELECT count(*) FROM assignments")
            .fetch_one(&replica_pool)
            .await
            .expect("count on the replica");
        if replicated == 100 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(replicated, 100);

    let paused = pair.pause_replay().await;
    insert_many(&app, &org, &flow, 50, "2025-02-01T00:00:00Z", "after").await;
    let written = Utc::now();
    let primary_count: i64 = sqlx::query_scalar("SELECT count(*) FROM assignments")
        .fetch_one(&app.db)
        .await
        .unwrap();
    assert_eq!(primary_count, 150);

    let mut export = request.clone();
    export["format"] = json!("csv");
    let response = report(&app, &org, export).await;
    assert_eq!(response.status, 200, "{}", response.body);
    // The inline report was read on the lagging replica, and says so.
    assert_eq!(response.body["metrics"]["totalAssignments"], 100);
    assert!(data_as_of(&response) < written);
    // The export waits for the replica to replay its request; replay resumes a moment later.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let pending = flow_tests::reports::download(
        &app,
        Some(&org.key),
        response.body["downloadUrl"].as_str().unwrap(),
    )
    .await;
    assert_eq!(
        pending.status, 202,
        "not generated from the replica that lacks the writes"
    );
    paused.resume().await;
    let file = wait_for_export(&app, &org, response.body["downloadUrl"].as_str().unwrap()).await;
    assert_eq!(file.status, 200);
    assert_eq!(
        csv_rows(&file.body).len() as i64,
        primary_count,
        "the export has every write committed before it was requested"
    );
    let (read_on, as_of) = export_source(&app, &response.body).await;
    assert_eq!(read_on, server, "read on the replica once it caught up");
    assert!(as_of >= written);
    replica_pool.close().await;
}

#[tokio::test]
async fn a_split_export_reads_its_two_halves_in_one_snapshot_on_the_standby() {
    let (pair, _turn) = pair().await;
    let app = TestApp::spawn_with(options(&pair, Duration::from_secs(5))).await;
    let mut config = flow_tests::reports::report_worker_config(&app);
    config.split_rows = 1;
    let _worker = flow_tests::WorkerHandle::spawn(move |shutdown| {
        flow_workers::runtime::run(config, shutdown)
    });
    let org = org(&app).await;
    let flow = create_flow(&app, &org, "Split", &["One"]).await;
    insert_many(&app, &org, &flow, 3_000, "2025-01-01T00:00:00Z", "split").await;
    until_fresh(&app, &pair).await;
    let response = report_ok(
        &app,
        &org,
        json!({ "flowId": flow.id.to_string(), "format": "csv" }),
    )
    .await;
    let file = wait_for_export(&app, &org, response["downloadUrl"].as_str().unwrap()).await;
    assert_eq!(file.status, 200, "{}", String::from_utf8_lossy(&file.body));
    let rows = csv_rows(&file.body);
    assert_eq!(rows.len(), 3_000);
    let assigned: Vec<&str> = rows.iter().map(|row| &row[2]).collect();
    assert!(
        assigned.windows(2).all(|two| two[0] < two[1]),
        "one order across the halves"
    );
    let (read_on, _) = export_source(&app, &response).await;
    assert_eq!(read_on, pair.replica_server());
}

/// A read holding a lock on the standby that replay needs is cancelled there once
/// `max_standby_streaming_delay` passes (2 s on the test pair); the router reads again on the
/// primary.
#[tokio::test]
async fn a_read_cancelled_by_a_conflict_with_recovery_is_read_again_on_the_primary() {
    let (pair, _turn) = pair().await;
    let app = TestApp::spawn_with(TestOptions {
        assign_worker: false,
        ..options(&pair, Duration::from_secs(60))
    })
    .await;
    let shutdown = CancellationToken::new();
    let supervisor = Supervisor::new(&shutdown);
    let router = ReadRouter::new(app.db.clone(), &app.core.replicas, 4).expect("router");
    router.start(&supervisor);
    until(Duration::from_secs(30), "the replica to be fresh", || {
        !router.fresh_replicas().is_empty()
    })
    .await;
    let server = pair.replica_server();
    let retries = || {
        flow_tests::replicas::metric(
            "flow_replica_read_retries_total",
            &[("server", server.as_str()), ("reason", "recovery_conflict")],
        )
    };
    let retried = retries();

    let mut read = router.read(ReadPurpose::Report, None);
    let (mut snapshot, source) = read.begin().await.expect("a snapshot");
    assert_eq!(*source.server, *server, "first on the replica");
    let read_only: String = sqlx::query_scalar("SHOW default_transaction_read_only")
        .fetch_one(snapshot.connection())
        .await
        .unwrap();
    assert_eq!(read_only, "on", "replica sessions are read-only");
    // The snapshot reads the table (and holds a lock on it on the standby)...
    let _: i64 = sqlx::query_scalar("SELECT count(*) FROM assignments")
        .fetch_one(snapshot.connection())
        .await
        .unwrap();
    // ...that the primary now locks exclusively, which replay must take too.
    let mut transaction = app.db.begin().await.unwrap();
    sqlx::query("LOCK TABLE assignments IN ACCESS EXCLUSIVE MODE")
        .execute(&mut *transaction)
        .await
        .unwrap();
    transaction.commit().await.unwrap();
    let outcome: Result<i64, sqlx::Error> =
        sqlx::query_scalar("SELECT count(*) FROM assignments, pg_sleep(30)")
            .fetch_one(snapshot.connection())
            .await;
    let error = outcome.as_ref().expect_err("cancelled by the conflict");
    assert!(is_recovery_conflict(error), "{error}");
    assert!(
        read.end(snapshot, source, outcome).await.unwrap().is_none(),
        "read again"
    );

    let (mut snapshot, source) = read.begin().await.expect("a snapshot");
    assert_eq!(&*source.server, PRIMARY, "then on the primary");
    let outcome: Result<i64, sqlx::Error> = sqlx::query_scalar("SELECT count(*) FROM assignments")
        .fetch_one(snapshot.connection())
        .await;
    let served = read
        .end(snapshot, source, outcome)
        .await
        .unwrap()
        .expect("served");
    assert_eq!(served.value, 0);
    assert_eq!(retries() - retried, 1.0);
    supervisor.stop().await;
}

/// A server that is not in recovery (a promoted replica, or a primary listed by mistake) is
/// never read as a replica: reads stay on the primary.
#[tokio::test]
async fn a_replica_that_is_not_in_recovery_is_skipped() {
    let database = flow_tests::ScratchDatabase::create()
        .await
        .expect("a database");
    let primary = flow_common::db::connect(database.url(), 2)
        .await
        .expect("pool");
    let config = flow_common::config::ReplicaConfig {
        urls: vec![database.url().to_owned()],
        max_staleness: Duration::from_secs(5),
    };
    let shutdown = CancellationToken::new();
    let supervisor = Supervisor::new(&shutdown);
    let router = ReadRouter::new(primary.clone(), &config, 2).expect("router");
    router.start(&supervisor);
    for _ in 0..3 {
        let mut read = router.read(ReadPurpose::Report, None);
        let served = loop {
            let (mut snapshot, source) = read.begin().await.expect("a snapshot");
            let outcome: Result<bool, sqlx::Error> =
                sqlx::query_scalar("SELECT pg_is_in_recovery()")
                    .fetch_one(snapshot.connection())
                    .await;
            if let Some(served) = read.end(snapshot, source, outcome).await.unwrap() {
                break served;
            }
        };
        assert_eq!(&*served.source.server, PRIMARY);
        assert!(!served.source.on_replica);
        tokio::time::sleep(flow_common::db::replicas::SAMPLE_INTERVAL).await;
    }
    assert!(router.fresh_replicas().is_empty());
    supervisor.stop().await;
    primary.close().await;
}
