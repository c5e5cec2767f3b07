//! Report rollups (migration 0090): the figures they give equal a count over the rows for any
//! range and any time zone's periods, before and after merging, under concurrent writers and
//! mergers; `flowctl reports verify` finds a rollup that drifted.

use chrono::{DateTime, Duration, Utc};
use flow_common::config::CoreConfig;
use flow_common::db::rollups::{self, Figures};
use flow_domain::ids::FlowId;
use sqlx::PgPool;

/// Figures counted from the rows, statuses read with the one status rule: the oracle.
async fn counted(
    db: &PgPool,
    flow: FlowId,
    lower: DateTime<Utc>,
    upper: DateTime<Utc>,
    now: DateTime<Utc>,
) -> Figures {
    sqlx::query_as(
        "SELECT count(*) FILTER (WHERE s <> 'cancelled') AS total,
                count(*) FILTER (WHERE s = 'cancelled') AS cancelled,
                count(*) FILTER (WHERE s = 'completed') AS completed,
                count(*) FILTER (WHERE s = 'in_progress') AS in_progress,
                count(*) FILTER (WHERE s = 'pending') AS pending,
                count(*) FILTER (WHERE s = 'overdue') AS overdue,
                COALESCE(sum(flow_completion_seconds(status, assigned_at, completed_at)), 0)::float8
                    AS completion_seconds,
                COALESCE(sum(flow_duration_seconds(status, started_at, completed_at)), 0)::float8
                    AS duration_seconds,
                count(flow_duration_seconds(status, started_at, completed_at)) AS durations
         FROM (SELECT a.*, flow_effective_status(a.status, a.due_at, $4) AS s
               FROM assignments a
               WHERE flow_id = $1 AND assigned_at >= $2 AND assigned_at < $3) rows",
    )
    .bind(flow)
    .bind(lower)
    .bind(upper)
    .bind(now)
    .fetch_one(db)
    .await
    .expect("count over the rows")
}

fn assert_close(maintained: &Figures, counted: &Figures, what: &str) {
    let counts = |f: &Figures| {
        (
            f.total,
            f.cancelled,
            f.completed,
            f.in_progress,
            f.pending,
            f.overdue,
            f.durations,
        )
    };
    assert_eq!(counts(maintained), counts(counted), "{what}");
    for (a, b) in [
        (maintained.completion_seconds, counted.completion_seconds),
        (maintained.duration_seconds, counted.duration_seconds),
    ] {
        assert!(
            (a - b).abs() < 0.01,
            "{what}: {maintained:?} vs {counted:?}"
        );
    }
}

/// Writes `count` assignments of `flow` assigned over the 60 days before `now`, at times that
/// are not on quarter-hour boundaries, in every status, some past due.
async fn seed(db: &PgPool, org: uuid::Uuid, flow: FlowId, count: i32, seed: f64) {
    sqlx::query("SELECT setseed($1)")
        .bind(seed)
        .execute(db)
        .await
        .expect("seed");
    sqlx::query(
        "INSERT INTO assignments (id, org_id, flow_id, user_id, status, due_at, assigned_at,
                                  started_at, completed_at)
         SELECT gen_random_uuid(), $1, $2, gen_random_uuid(), status, due_at, assigned_at,
                CASE WHEN status IN ('in_progress', 'completed') AND random() < 0.8
                     THEN assigned_at + interval '1 hour' END,
                CASE WHEN status = 'completed' THEN assigned_at + random() * interval '3 days' END
         FROM (SELECT (ARRAY['pending', 'in_progress', 'completed', 'overdue'])[1 + floor(random() * 4)::int]
                          AS status,
                      now() - random() * interval '60 days' AS assigned_at,
                      CASE WHEN random() < 0.5 THEN now() + (random() - 0.5) * interval '20 days' END
                          AS due_at
               FROM generate_series(1, $3)) generated",
    )
    .bind(org)
    .bind(flow)
    .bind(count)
    .execute(db)
    .await
    .expect("insert assignments");
}

/// Periods of `unit` in `zone` covering the last 70 days, as Postgres cuts them.
async fn periods(db: &PgPool, unit: &str, zone: &str) -> Vec<(DateTime<Utc>, DateTime<Utc>)> {
    sqlx::query_as(
        "SELECT local AT TIME ZONE $1, (local + ('1 ' || $2)::interval) AT TIME ZONE $1
         FROM generate_series(date_trunc($2, (now() - interval '70 days') AT TIME ZONE $1),
                              date_trunc($2, now() AT TIME ZONE $1),
                              ('1 ' || $2)::interval) AS local",
    )
    .bind(zone)
    .bind(unit)
    .fetch_all(db)
    .await
    .expect("periods")
}

async fn assert_figures_match(db: &PgPool, flow: FlowId, when: &str) {
    let now = Utc::now();
    let (open_lower, open_upper) = flow_domain::report::ReportParameters::open_bounds();
    let odd = now - Duration::days(45) + Duration::seconds(7 * 60 + 13);
    let ranges = [
        (open_lower, open_upper),
        (odd, now - Duration::days(3) - Duration::seconds(401)),
        // Inside one quarter hour, and on exact quarter-hour bounds.
        (odd, odd + Duration::minutes(5)),
        (
            DateTime::from_timestamp(odd.timestamp() / 900 * 900, 0).expect("bucket"),
            DateTime::from_timestamp(now.timestamp() / 900 * 900, 0).expect("bucket"),
        ),
    ];
    for (lower, upper) in ranges {
        let maintained = rollups::interval_figures(db, flow, &[(lower, upper)], lower, upper, now)
            .await
            .expect("rollup figures");
        let expected = counted(db, flow, lower, upper, now).await;
        assert_close(
            &maintained[0],
            &expected,
            &format!("{when}: {lower}..{upper}"),
        );
    }
    let lifetime = rollups::lifetime_figures(db, &[flow], now)
        .await
        .expect("lifetime figures");
    let expected = counted(db, flow, open_lower, open_upper, now).await;
    assert_close(&lifetime[0], &expected, &format!("{when}: lifetime"));
    // Periods of zones a whole, a half and three quarters of an hour from UTC, clipped to a
    // range whose bounds are not on quarter hours.
    let (lower, upper) = (odd, now);
    for (unit, zone) in [
        ("week", "America/New_York"),
        ("day", "Asia/Kolkata"),
        ("month", "Asia/Kathmandu"),
    ] {
        let periods = periods(db, unit, zone).await;
        let maintained = rollups::interval_figures(db, flow, &periods, lower, upper, now)
            .await
            .expect("period figures");
        assert_eq!(maintained.len(), periods.len());
        for ((start, end), figures) in periods.iter().zip(&maintained) {
            let expected = counted(db, flow, (*start).max(lower), (*end).min(upper), now).await;
            assert_close(
                figures,
                &expected,
                &format!("{when}: {zone} {unit} {start}"),
            );
        }
    }
}

#[tokio::test]
async fn rollup_figures_equal_a_count_over_the_rows_for_any_range_and_zone() {
    let database = flow_tests::ScratchDatabase::create()
        .await
        .expect("a database");
    let url = database.url();
    let db = PgPool::connect(url).await.expect("pool");
    let org = uuid::Uuid::new_v4();
    let flow = FlowId::new();
    seed(&db, org, flow, 3_000, 0.25).await;
    // Another flow's assignments never count.
    seed(&db, org, FlowId::new(), 500, 0.5).await;

    assert_figures_match(&db, flow, "deltas only").await;
    rollups::merge(&db, 3).await.expect("merge some");
    assert_figures_match(&db, flow, "partly merged").await;
    flow_tests::assert_rollups_exact(&db).await;
    assert_figures_match(&db, flow, "merged").await;

    // Changes after the merge: starts, completions, a status moved back, deletions.
    sqlx::query(
        "UPDATE assignments SET status = 'in_progress', started_at = assigned_at + interval '5 minutes'
         WHERE flow_id = $1 AND status = 'pending' AND random() < 0.3",
    )
    .bind(flow)
    .execute(&db)
    .await
    .expect("start");
    sqlx::query(
        "UPDATE assignments SET status = 'completed', completed_at = now()
         WHERE flow_id = $1 AND status <> 'completed' AND random() < 0.3",
    )
    .bind(flow)
    .execute(&db)
    .await
    .expect("complete");
    sqlx::query("DELETE FROM assignments WHERE flow_id = $1 AND random() < 0.1")
        .bind(flow)
        .execute(&db)
        .await
        .expect("delete");
    assert_figures_match(&db, flow, "changed after a merge").await;
    flow_tests::assert_rollups_exact(&db).await;
    assert_figures_match(&db, flow, "merged again").await;
}

#[tokio::test]
async fn concurrent_writers_and_mergers_keep_the_rollups_exact() {
    let database = flow_tests::ScratchDatabase::create()
        .await
        .expect("a database");
    let url = database.url();
    let db = PgPool::connect(url).await.expect("pool");
    let org = uuid::Uuid::new_v4();
    let flows: Vec<FlowId> = (0..3).map(|_| FlowId::new()).collect();
    let writing = tokio_util::sync::CancellationToken::new();
    let mut writers = Vec::new();
    for (index, flow) in flows.iter().cycle().take(6).enumerate() {
        let db = db.clone();
        let flow = *flow;
        writers.push(tokio::spawn(async move {
            for round in 0..25 {
                // Concurrent transactions all writing the current quarter hour of one flow.
                let mut transaction = db.begin().await.expect("begin");
                sqlx::query(
                    "INSERT INTO assignments (id, org_id, flow_id, user_id, assigned_at, due_at)
                     SELECT gen_random_uuid(), $1, $2, gen_random_uuid(), now(),
                            CASE WHEN g % 3 = 0 THEN now() - interval '1 minute' END
                     FROM generate_series(1, 40) g",
                )
                .bind(org)
                .bind(flow)
                .execute(&mut *transaction)
                .await
                .expect("insert");
                let next = if (index + round) % 2 == 0 {
                    "UPDATE assignments SET status = 'in_progress', started_at = now()
                     WHERE id IN (SELECT id FROM assignments WHERE flow_id = $1
                                  AND status = 'pending' LIMIT 10 FOR UPDATE SKIP LOCKED)"
                } else {
                    "UPDATE assignments SET status = 'completed', completed_at = now()
                     WHERE id IN (SELECT id FROM assignments WHERE flow_id = $1
                                  AND status = 'in_progress' LIMIT 10 FOR UPDATE SKIP LOCKED)"
                };
                sqlx::query(next)
                    .bind(flow)
                    .execute(&mut *transaction)
                    .await
                    .expect("update");
                transaction.commit().await.expect("commit");
            }
        }));
    }
    let mut mergers = Vec::new();
    for _ in 0..2 {
        let db = db.clone();
        let writing = writing.clone();
        mergers.push(tokio::spawn(async move {
            while !writing.is_cancelled() {
                rollups::merge(&db, 7).await.expect("merge");
            }
        }));
    }
    let scans = {
        let db = db.clone();
        let writing = writing.clone();
        tokio::spawn(async move {
            while !writing.is_cancelled() {
                flow_workers::scheduler::scan_overdue(&db, 25)
                    .await
                    .expect("overdue scan");
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
        })
    };
    for writer in writers {
        writer.await.expect("writer");
    }
    writing.cancel();
    for merger in mergers {
        merger.await.expect("merger");
    }
    scans.await.expect("scans");
    let total: i64 = sqlx::query_scalar("SELECT count(*) FROM assignments")
        .fetch_one(&db)
        .await
        .expect("count");
    assert_eq!(total, 6 * 25 * 40);
    flow_tests::assert_rollups_exact(&db).await;
    let now = Utc::now();
    let (open_lower, open_upper) = flow_domain::report::ReportParameters::open_bounds();
    let lifetime = rollups::lifetime_figures(&db, &flows, now)
        .await
        .expect("lifetime");
    for (flow, figures) in flows.iter().zip(&lifetime) {
        let expected = counted(&db, *flow, open_lower, open_upper, now).await;
        assert_close(figures, &expected, &format!("flow {flow}"));
    }
}

#[tokio::test]
async fn flowctl_reports_verify_finds_a_rollup_that_drifted() {
    let database = flow_tests::ScratchDatabase::create()
        .await
        .expect("a database");
    let url = database.url();
    let db = PgPool::connect(url).await.expect("pool");
    let flow = FlowId::new();
    seed(&db, uuid::Uuid::new_v4(), flow, 200, 0.75).await;
    let core = CoreConfig {
        database_url: url.to_owned(),
        database_max_connections: 2,
        amqp_url: flow_tests::amqp_url(),
        queue_prefix: flow_tests::unique_prefix(),
        delivery_limit: 5,
        replicas: Default::default(),
    };
    let verify = || flowctl::reports::run(&core, flowctl::reports::ReportsCommand::Verify);
    let clean = verify().await.expect("exact rollups pass");
    assert_eq!(clean.json["mismatches"], serde_json::json!([]));
    flow_workers::scheduler::merge_rollups(&db)
        .await
        .expect("merge");
    verify().await.expect("still exact after merging");

    // A lost delta (a write that bypassed the triggers' bookkeeping) is found, key by key.
    sqlx::query(
        "UPDATE assignment_rollups SET assignments = assignments + 1
         WHERE (flow_id, bucket, status) = (SELECT flow_id, bucket, status
                                            FROM assignment_rollups LIMIT 1)",
    )
    .execute(&db)
    .await
    .expect("tamper");
    let error = verify()
        .await
        .expect_err("a drifted rollup fails the check");
    let message = format!("{error:#}");
    assert!(message.contains("1 keys differ"), "{message}");
    assert!(message.contains(&flow.to_string()), "{message}");
}

/// The past-due correction (`flow_past_due_unmarked`, migration 0112) reads the partial overdue
/// index even when the statistics and costs make the planner prefer reading the table, which at
/// 10 million assignments turned a 19-row read into a parallel scan of every row.
#[tokio::test]
async fn the_past_due_correction_reads_its_index_whatever_the_estimates() {
    let database = flow_tests::ScratchDatabase::create()
        .await
        .expect("a database");
    let url = database.url();
    let db = PgPool::connect(url).await.expect("pool");
    let flow = FlowId::new();
    seed(&db, uuid::Uuid::new_v4(), flow, 3_000, 0.75).await;
    // Most of the table active and past due when the statistics are gathered.
    sqlx::query(
        "UPDATE assignments SET status = 'pending', due_at = now() - interval '1 day'
         WHERE random() < 0.6",
    )
    .execute(&db)
    .await
    .expect("past due");
    sqlx::query("ANALYZE assignments")
        .execute(&db)
        .await
        .expect("analyze");
    let bare = "SELECT a.flow_id, a.status, a.assigned_at FROM assignments a
                WHERE a.status IN ('pending', 'in_progress') AND a.due_at IS NOT NULL
                  AND a.due_at <= now()";
    let mut connection = db.begin().await.expect("a transaction");
    // And index reads priced as a large table's would be: scattered over pages not in memory.
    sqlx::query("SET LOCAL random_page_cost = 1000")
        .execute(&mut *connection)
        .await
        .expect("planner cost");
    let plan: Vec<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!("EXPLAIN {bare}")))
        .fetch_all(&mut *connection)
        .await
        .expect("explain");
    assert!(
        plan.join("\n").contains("Seq Scan"),
        "the statistics must make a plain query read the table for this test to mean anything: {plan:?}"
    );
    // Scans this backend counted and has not reported yet (earlier statements' included).
    let scans =
        "SELECT seq_scan, pg_stat_get_xact_numscans('assignments_overdue_scan_idx'::regclass)
                 FROM pg_stat_xact_user_tables WHERE relname = 'assignments'";
    let before: (i64, i64) = sqlx::query_as(scans)
        .fetch_one(&mut *connection)
        .await
        .expect("scan counts");
    let probed: i64 = sqlx::query_scalar("SELECT count(*) FROM flow_past_due_unmarked(now())")
        .fetch_one(&mut *connection)
        .await
        .expect("probe");
    let after: (i64, i64) = sqlx::query_as(scans)
        .fetch_one(&mut *connection)
        .await
        .expect("scan counts");
    let (table_scans, index_scans) = (after.0 - before.0, after.1 - before.1);
    assert_eq!(table_scans, 0, "the probe read the whole table");
    assert!(index_scans >= 1, "the probe did not read the overdue index");
    let counted: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT count(*) FROM ({bare}) rows"
    )))
    .fetch_one(&mut *connection)
    .await
    .expect("count");
    assert!(counted > 100, "the seed has past-due work: {counted}");
    assert_eq!(probed, counted);
}
