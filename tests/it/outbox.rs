//! The outbox relay's cursor (migration 0100): events are published in the order of the outbox,
//! and none is skipped when transactions commit in another order than they wrote their events —
//! the relay reads past no transaction of its database still running (and a transaction in another
//! database of the server does not hold it back). Relays take turns on the cursor.

use flow_common::amqp::Lane;
use flow_common::db::outbox::{self, PendingEvent};
use flow_domain::events::{EventType, NewEvent, event_body};
use flow_domain::ids::{AssignmentId, EventId, OrgId};
use flow_tests::{TestApp, TestOptions};
use sqlx::PgPool;

fn event() -> NewEvent {
    let assignment_id = AssignmentId::new();
    let id = EventId::for_transition(
        assignment_id,
        EventType::Assigned.as_str(),
        chrono::Utc::now(),
    );
    NewEvent {
        id,
        org_id: OrgId::new(),
        event_type: EventType::Assigned,
        assignment_id,
        body: event_body(
            id,
            EventType::Assigned.as_str(),
            chrono::Utc::now(),
            serde_json::json!({}),
        ),
        traceparent: None,
    }
}

/// One relay round: the events it would publish, with the cursor moved past them (`None`: another
/// relay holds the cursor).
async fn relay_round(db: &PgPool) -> Option<Vec<EventId>> {
    let mut transaction = db.begin().await.expect("transaction");
    let batch = outbox::next_batch(&mut transaction, Lane::Bulk, 100)
        .await
        .expect("next batch");
    if let Some(last) = batch.as_ref().and_then(|events| events.last()) {
        outbox::advance(&mut transaction, Lane::Bulk, last.seq)
            .await
            .expect("advance");
    }
    transaction.commit().await.expect("commit");
    batch.map(|events| {
        events
            .iter()
            .map(|event: &PendingEvent| event.event_id)
            .collect()
    })
}

/// 3,000 events written and published (the cursor past them), then two written after them and
/// not published yet.
async fn published_then_waiting(db: &PgPool) -> (Vec<NewEvent>, [NewEvent; 2]) {
    let published: Vec<NewEvent> = (0..3_000).map(|_| event()).collect();
    let mut transaction = db.begin().await.expect("transaction");
    outbox::insert(&mut transaction, Lane::Bulk, &published)
        .await
        .expect("insert");
    transaction.commit().await.expect("commit");
    while relay_round(db).await.is_some_and(|ids| !ids.is_empty()) {}
    let waiting = [event(), event()];
    let mut transaction = db.begin().await.expect("transaction");
    outbox::insert(&mut transaction, Lane::Bulk, &waiting)
        .await
        .expect("insert");
    transaction.commit().await.expect("commit");
    (published, waiting)
}

async fn database() -> TestApp {
    TestApp::spawn_with(TestOptions {
        assign_worker: false,
        ..TestOptions::default()
    })
    .await
}

#[tokio::test]
async fn an_event_committed_after_a_later_one_is_published_and_none_twice() {
    let app = database().await;
    let (first, second) = (event(), event());
    // The first transaction writes its event and stays open while a later one commits.
    let mut slow = app.db.begin().await.expect("transaction");
    outbox::insert(&mut slow, Lane::Bulk, std::slice::from_ref(&first))
        .await
        .expect("insert");
    let mut quick = app.db.begin().await.expect("transaction");
    outbox::insert(&mut quick, Lane::Bulk, std::slice::from_ref(&second))
        .await
        .expect("insert");
    quick.commit().await.expect("commit");

    // The later event is committed, but reading it would move the cursor past the running one.
    assert_eq!(relay_round(&app.db).await, Some(vec![]));
    slow.commit().await.expect("commit");
    assert_eq!(relay_round(&app.db).await, Some(vec![first.id, second.id]));
    assert_eq!(relay_round(&app.db).await, Some(vec![]), "nothing twice");
    let unpublished: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox_unpublished")
        .fetch_one(&app.db)
        .await
        .expect("count");
    assert_eq!(unpublished, 0);
}

#[tokio::test]
async fn relays_take_turns_on_the_cursor_and_a_failed_round_publishes_again() {
    let app = database().await;
    let written = event();
    let mut transaction = app.db.begin().await.expect("transaction");
    outbox::insert(&mut transaction, Lane::Bulk, std::slice::from_ref(&written))
        .await
        .expect("insert");
    transaction.commit().await.expect("commit");

    // One relay holds the cursor while it publishes: another skips its round.
    let mut holder = app.db.begin().await.expect("transaction");
    let held = outbox::next_batch(&mut holder, Lane::Bulk, 100)
        .await
        .expect("batch");
    assert_eq!(
        held.map(|events| events
            .iter()
            .map(|event| event.event_id)
            .collect::<Vec<_>>()),
        Some(vec![written.id])
    );
    assert_eq!(relay_round(&app.db).await, None);
    // Its broker did not confirm: it rolls back, and the event goes out in the next round.
    holder.rollback().await.expect("rollback");
    assert_eq!(relay_round(&app.db).await, Some(vec![written.id]));
    assert_eq!(relay_round(&app.db).await, Some(vec![]));
}

#[tokio::test]
async fn a_transaction_left_open_in_another_database_does_not_hold_events_back() {
    let app = database().await;
    // Another database of the same server, with a write transaction left open.
    let other = PgPool::connect(&flow_tests::server_url())
        .await
        .expect("the server's own database");
    let mut elsewhere = other.begin().await.expect("transaction");
    sqlx::query("SELECT pg_current_xact_id()")
        .execute(&mut *elsewhere)
        .await
        .expect("an id for the open transaction");

    let written = event();
    let mut transaction = app.db.begin().await.expect("transaction");
    outbox::insert(&mut transaction, Lane::Bulk, std::slice::from_ref(&written))
        .await
        .expect("insert");
    transaction.commit().await.expect("commit");
    assert_eq!(relay_round(&app.db).await, Some(vec![written.id]));
    elsewhere.rollback().await.expect("rollback");
}

/// Sequential scans of the outbox this backend made while `read` ran.
async fn outbox_seq_scans(connection: &mut sqlx::PgConnection, read: &str) -> i64 {
    let scans = "SELECT seq_scan FROM pg_stat_xact_user_tables WHERE relname = 'outbox'";
    let before: i64 = sqlx::query_scalar(scans)
        .fetch_one(&mut *connection)
        .await
        .expect("scan count");
    sqlx::query(sqlx::AssertSqlSafe(read.to_owned()))
        .execute(&mut *connection)
        .await
        .expect("read");
    let after: i64 = sqlx::query_scalar(scans)
        .fetch_one(&mut *connection)
        .await
        .expect("scan count");
    after - before
}

#[tokio::test]
async fn the_backlog_is_read_past_the_cursor_in_the_order_index_whatever_the_estimates() {
    let app = database().await;
    // 3,000 published events behind the cursor, two unpublished after it.
    published_then_waiting(&app.db).await;
    sqlx::query("ANALYZE outbox")
        .execute(&app.db)
        .await
        .expect("analyze");

    let mut connection = app.db.acquire().await.expect("connection");
    // Index reads priced as high as a planner misled by its estimates would price them.
    sqlx::query("SET random_page_cost = 1000")
        .execute(&mut *connection)
        .await
        .expect("set");
    assert!(
        outbox_seq_scans(&mut connection, "SELECT count(*) FROM outbox_unpublished").await > 0,
        "the view's comparison with the cursor is read by scanning the table"
    );
    assert_eq!(
        outbox_seq_scans(&mut connection, "SELECT * FROM flow_outbox_backlog(100000)").await,
        0,
        "the backlog reads the order index"
    );
    let (count, oldest) = outbox::backlog(&mut *connection).await.expect("backlog");
    assert_eq!(count, 2, "the two unpublished events");
    assert!(oldest.is_some_and(|seconds| (0.0..60.0).contains(&seconds)));
    let capped: i64 = sqlx::query_scalar("SELECT backlog FROM flow_outbox_backlog(1)")
        .fetch_one(&mut *connection)
        .await
        .expect("capped backlog");
    assert_eq!(capped, 1, "a backlog past the cap reads as the cap");
}

#[tokio::test]
async fn the_prune_deletes_old_published_events_and_reads_no_further_than_its_limit() {
    let app = database().await;
    // 3,000 published events, then two unpublished ones.
    let (published, waiting) = published_then_waiting(&app.db).await;
    let before = chrono::Utc::now() - chrono::Duration::hours(1);

    // None is old enough: nothing is deleted, and the prune reads no more than its limit of the
    // order index (reading on for old events read all 3,000).
    let mut transaction = app.db.begin().await.expect("transaction");
    // The index's entries read in this transaction (`idx_tup_read`, not yet flushed).
    let reads = "SELECT pg_stat_get_xact_tuples_returned('outbox_order_idx'::regclass)";
    let read_before: i64 = sqlx::query_scalar(reads)
        .fetch_one(&mut *transaction)
        .await
        .expect("index reads");
    let pruned = outbox::prune(&mut *transaction, before, 100)
        .await
        .expect("prune");
    let read_after: i64 = sqlx::query_scalar(reads)
        .fetch_one(&mut *transaction)
        .await
        .expect("index reads");
    transaction.commit().await.expect("commit");
    assert_eq!(pruned, 0);
    assert!(
        read_after - read_before <= 101,
        "the prune read {} index entries",
        read_after - read_before
    );

    // The first 250 published events and both unpublished ones written two days ago: the
    // published ones go, in rounds of the limit as the relay prunes; the rest stays.
    let old: Vec<EventId> = published[..250].iter().map(|event| event.id).collect();
    let waiting_ids: Vec<EventId> = waiting.iter().map(|event| event.id).collect();
    sqlx::query(
        "UPDATE outbox SET created_at = now() - interval '2 days' WHERE event_id = ANY($1)",
    )
    .bind(old.iter().chain(&waiting_ids).collect::<Vec<_>>())
    .execute(&app.db)
    .await
    .expect("backdate");
    let mut rounds = Vec::new();
    loop {
        let count = outbox::prune(&app.db, before, 100).await.expect("prune");
        if count == 0 {
            break;
        }
        rounds.push(count);
    }
    assert_eq!(rounds, vec![100, 100, 50]);
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox")
        .fetch_one(&app.db)
        .await
        .expect("count");
    assert_eq!(left, 2_750 + 2, "younger and unpublished events stay");
    let old_left: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox WHERE event_id = ANY($1)")
        .bind(&old)
        .fetch_one(&app.db)
        .await
        .expect("count");
    assert_eq!(old_left, 0);
}

#[tokio::test]
async fn an_event_of_a_type_this_build_does_not_know_holds_the_relay_naming_it() {
    let app = database().await;
    let (known, unknown) = (event(), event());
    let mut transaction = app.db.begin().await.expect("transaction");
    outbox::insert(
        &mut transaction,
        Lane::Bulk,
        &[known.clone(), unknown.clone()],
    )
    .await
    .expect("insert");
    transaction.commit().await.expect("commit");
    // As a newer build with another event type would have written it.
    sqlx::query("UPDATE outbox SET event_type = 'flow.archived' WHERE event_id = $1")
        .bind(unknown.id)
        .execute(&app.db)
        .await
        .expect("update");

    let mut transaction = app.db.begin().await.expect("transaction");
    let error = outbox::next_batch(&mut transaction, Lane::Bulk, 100)
        .await
        .expect_err("an unknown type is an error, not a routing key");
    assert!(error.to_string().contains("\"flow.archived\""), "{error}");
    transaction.rollback().await.expect("rollback");
    // Nothing was skipped: once a build knows the type, both events go out, in order.
    sqlx::query("UPDATE outbox SET event_type = 'flow.overdue' WHERE event_id = $1")
        .bind(unknown.id)
        .execute(&app.db)
        .await
        .expect("update");
    assert_eq!(relay_round(&app.db).await, Some(vec![known.id, unknown.id]));
}
