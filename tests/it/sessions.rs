//! Dashboard sessions stay ended: a session signed out (or ended for its account) is not written
//! back by a request that loaded it before, at the store and over HTTP.

use std::collections::HashMap;
use std::time::Duration;

use flow_common::db::orgs::Tier;
use flow_tests::TestApp;
use flow_tests::dashboard::{DashboardClient, role};
use tower_sessions::cookie::time::OffsetDateTime;
use tower_sessions::session::{Id, Record};
use tower_sessions::session_store::SessionStore;

/// A session record of `account` as the dashboard stores it.
fn record(account: &str) -> Record {
    Record {
        id: Id::default(),
        data: HashMap::from([
            ("account".to_owned(), serde_json::json!(account)),
            ("signed_in_at".to_owned(), serde_json::json!(1)),
        ]),
        expiry_date: OffsetDateTime::now_utc() + tower_sessions::cookie::time::Duration::hours(1),
    }
}

#[tokio::test]
async fn a_deleted_session_is_not_written_back_by_a_save() {
    let app = TestApp::spawn().await;
    let store = flow_api::dashboard::session::PostgresStore::new(app.db.clone());
    let mut created = record("acc_0193a1b2c3d47e8f9a0b1c2d3e4f5a6b");
    store.create(&mut created).await.unwrap();
    // A request loads the session, another signs it out, then the first saves what it loaded.
    let loaded = store.load(&created.id).await.unwrap().expect("loaded");
    store.delete(&created.id).await.unwrap();
    store.save(&loaded).await.unwrap();
    assert!(store.load(&created.id).await.unwrap().is_none());
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM dashboard_sessions")
        .fetch_one(&app.db)
        .await
        .unwrap();
    assert_eq!(rows, 0);
}

#[tokio::test]
async fn a_signed_out_session_is_not_brought_back_by_a_request_in_flight() {
    let app = TestApp::spawn().await;
    let org = app.create_org(Tier::Standard).await;
    let client = DashboardClient::signed_in(&app, org.id, "mo@example.com", role("admin")).await;
    let session = client.session().expect("session");
    // Hold the page request after it has loaded the session: its read of the organization waits
    // behind this lock.
    let mut lock = app.db.begin().await.unwrap();
    sqlx::query("LOCK TABLE organizations IN ACCESS EXCLUSIVE MODE")
        .execute(&mut *lock)
        .await
        .unwrap();
    let in_flight = DashboardClient::new(&app);
    in_flight.set_session(Some(session.clone()));
    let request = tokio::spawn(async move { in_flight.get("/dashboard/flows").await.status });
    app.eventually(
        Duration::from_secs(10),
        "the page request to wait for the organization",
        || async {
            let waiting: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM pg_stat_activity
                 WHERE datname = current_database() AND pid <> pg_backend_pid()
                   AND wait_event_type = 'Lock'
                   AND query LIKE '%JOIN organizations o ON o.id = a.org_id%'",
            )
            .fetch_one(&app.db)
            .await
            .unwrap();
            (waiting > 0).then_some(())
        },
    )
    .await;
    let out = client.post_form("/dashboard/sign-out", &[]).await;
    assert_eq!(out.status, 303);
    lock.commit().await.unwrap();
    assert_eq!(
        request.await.unwrap(),
        200,
        "the request in flight finishes"
    );
    let replay = DashboardClient::new(&app);
    replay.set_session(Some(session));
    assert!(
        replay.get("/dashboard/flows").await.is_sign_in_redirect(),
        "the signed-out session stays dead"
    );
}
