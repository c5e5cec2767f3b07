//! The status rule is defined once in SQL (migration 0070: `flow_effective_status`,
//! `flow_is_active`) and once in Rust (`AssignmentStatus::effective`, `AssignmentStatus::ACTIVE`);
//! these tests hold the two to the same answers, and check that the SQL spelling keeps the
//! indexes it must use and that every SQL function of the rule and of the report rollups is
//! inlined.

use chrono::{Duration, Utc};
use flow_domain::AssignmentStatus;
use sqlx::PgPool;

const STATUSES: [AssignmentStatus; 4] = [
    AssignmentStatus::Pending,
    AssignmentStatus::InProgress,
    AssignmentStatus::Completed,
    AssignmentStatus::Overdue,
];

#[tokio::test]
async fn sql_effective_status_agrees_with_rust_for_every_status_and_due_date() {
    let database = flow_tests::ScratchDatabase::create()
        .await
        .expect("a database");
    let url = database.url();
    let pool = PgPool::connect(url).await.expect("connecting");
    let now = Utc::now();
    let dues = [
        None,
        Some(now - Duration::days(3)),
        Some(now - Duration::microseconds(1)),
        Some(now),
        Some(now + Duration::microseconds(1)),
        Some(now + Duration::days(3)),
    ];
    let mut checked = 0;
    for status in STATUSES {
        for due in dues {
            let sql: String = sqlx::query_scalar("SELECT flow_effective_status($1, $2, $3)")
                .bind(status.as_str())
                .bind(due)
                .bind(now)
                .fetch_one(&pool)
                .await
                .expect("calling flow_effective_status");
            let rust = status.effective(due, now);
            assert_eq!(sql, rust.as_str(), "status {status:?} due {due:?} at {now}");
            checked += 1;
        }
    }
    assert_eq!(checked, 24);
}

#[tokio::test]
async fn sql_active_set_agrees_with_rust() {
    let database = flow_tests::ScratchDatabase::create()
        .await
        .expect("a database");
    let url = database.url();
    let pool = PgPool::connect(url).await.expect("connecting");
    for status in STATUSES {
        let sql: bool = sqlx::query_scalar("SELECT flow_is_active($1)")
            .bind(status.as_str())
            .fetch_one(&pool)
            .await
            .expect("calling flow_is_active");
        assert_eq!(
            sql,
            AssignmentStatus::ACTIVE.contains(&status),
            "status {status:?}"
        );
    }
}

/// The functions are inlined, so a lookup of the active assignment still uses the partial unique
/// index, and a report's status filter is an inlined expression over the report index.
#[tokio::test]
async fn status_functions_keep_their_indexes() {
    let database = flow_tests::ScratchDatabase::create()
        .await
        .expect("a database");
    let url = database.url();
    let pool = PgPool::connect(url).await.expect("connecting");
    let mut connection = pool.acquire().await.expect("a connection");
    sqlx::query("SET enable_seqscan = off")
        .execute(&mut *connection)
        .await
        .expect("planner setting");
    let plan = explain(
        &mut connection,
        "SELECT a.id FROM assignments a
         WHERE a.flow_id = '00000000-0000-0000-0000-000000000000' AND a.user_id = '00000000-0000-0000-0000-000000000000'
           AND flow_is_active(a.status)",
    )
    .await;
    assert!(
        plan.contains("assignments_one_active_idx"),
        "active lookup plan: {plan}"
    );
    let plan = explain(
        &mut connection,
        "SELECT count(*) FROM assignments a
         WHERE a.flow_id = '00000000-0000-0000-0000-000000000000' AND a.assigned_at >= now() - interval '1 day'
           AND flow_effective_status(a.status, a.due_at, now()) = 'overdue'",
    )
    .await;
    assert!(
        plan.contains("assignments_report_idx")
            && plan.contains("CASE WHEN")
            && !plan.contains("flow_effective_status"),
        "report filter plan: {plan}"
    );
}

async fn explain(connection: &mut sqlx::PgConnection, query: &str) -> String {
    let lines: Vec<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!("EXPLAIN {query}")))
        .fetch_all(&mut *connection)
        .await
        .expect("explaining");
    lines.join("\n")
}

/// Every SQL function of the status rule and the report rollups is inlined where it is called:
/// one that is not runs as a separate SQL-function execution per row, which made the rollup
/// trigger a third of the assign-worker's insert (migration 0110). A function's declared
/// volatility must not be stricter than its body's, or Postgres silently stops inlining it.
#[tokio::test]
async fn sql_functions_are_inlined_where_they_are_called() {
    let database = flow_tests::ScratchDatabase::create()
        .await
        .expect("a database");
    let url = database.url();
    let pool = PgPool::connect(url).await.expect("connecting");
    let mut connection = pool.acquire().await.expect("a connection");
    let functions = [
        "flow_effective_status(status, due_at, now())",
        "flow_is_active(status)",
        "flow_rollup_bucket(assigned_at)",
        "flow_completion_seconds(status, assigned_at, completed_at)",
        "flow_duration_seconds(status, started_at, completed_at)",
    ];
    for call in functions {
        let plan = explain(
            &mut connection,
            &format!("(VERBOSE) SELECT {call} FROM assignments"),
        )
        .await;
        let name = &call[..call.find('(').expect("a call")];
        assert!(!plan.contains(name), "{name} is not inlined: {plan}");
    }
}
