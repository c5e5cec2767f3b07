//! The change feed of assignments (issue 39): `GET /v1/assignments?updatedSince=` lists the
//! organization's assignments in the order of their last change, and its cursor neither skips nor
//! repeats a change, even when a transaction that changed an assignment commits after a later
//! one was read.

use flow_common::db::orgs::Tier;
use flow_tests::{TestApp, TestOrg};
use serde_json::{Value, json};

/// One page of the feed.
async fn feed(app: &TestApp, org: &TestOrg, query: &str) -> (Vec<String>, Option<String>) {
    let response = app.get(org, &format!("/v1/assignments?{query}")).await;
    assert_eq!(response.status, 200, "{query}: {:?}", response.body);
    let ids = response.body["data"]
        .as_array()
        .expect("data")
        .iter()
        .map(|row| row["assignmentId"].as_str().expect("id").to_owned())
        .collect();
    let next = response.body["nextCursor"].as_str().map(str::to_owned);
    (ids, next)
}

/// Follows the feed from `cursor` until an empty page; the ids and the last cursor.
async fn drain(
    app: &TestApp,
    org: &TestOrg,
    mut cursor: String,
    limit: u32,
) -> (Vec<String>, String) {
    let mut ids = Vec::new();
    for _ in 0..100 {
        let (page, next) = feed(app, org, &format!("limit={limit}&cursor={cursor}")).await;
        match next {
            Some(next) => {
                assert!(!page.is_empty());
                ids.extend(page);
                cursor = next;
            }
            None => {
                assert!(page.is_empty(), "{page:?}");
                return (ids, cursor);
            }
        }
    }
    panic!("more than 100 pages");
}

/// Follows the feed from `cursor` until it has listed `count` changes (a change shows once every
/// transaction older than it ended: the tests' databases share one server, so another test's
/// transaction can hold it back a moment), then checks nothing more comes.
async fn changes_after(
    app: &TestApp,
    org: &TestOrg,
    mut cursor: String,
    limit: u32,
    count: usize,
) -> (Vec<String>, String) {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    let mut ids = Vec::new();
    while ids.len() < count {
        assert!(
            tokio::time::Instant::now() < deadline,
            "only {ids:?} of {count} changes within 30 s"
        );
        let (more, next) = drain(app, org, cursor, limit).await;
        ids.extend(more);
        cursor = next;
        if ids.len() < count {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }
    let (more, cursor) = drain(app, org, cursor, limit).await;
    ids.extend(more);
    (ids, cursor)
}

#[tokio::test]
async fn the_change_feed_lists_each_change_once_in_order_even_when_an_earlier_transaction_commits_late()
 {
    let app = TestApp::spawn().await;
    let org = app.create_org(Tier::Standard).await;
    let other = app.create_org(Tier::Standard).await;
    let emails = [
        "a@example.com",
        "b@example.com",
        "c@example.com",
        "d@example.com",
    ];
    app.create_users(&org, &emails).await;
    app.create_users(&other, &["a@example.com"]).await;
    let flow = app.create_flow(&org, "Safety", &[10, 10]).await;
    let since = chrono::Utc::now() - chrono::Duration::seconds(1);
    let mut made = Vec::new();
    for email in emails {
        made.push(app.assign_persisted(&org, &flow, email, json!({})).await);
    }
    let theirs = app.create_flow(&other, "Theirs", &[10]).await;
    app.assign_persisted(&other, &theirs, "a@example.com", json!({}))
        .await;

    // From `updatedSince`, pages of three: every assignment once, in the order made; the feed
    // hands out a cursor on every page but an empty one.
    let since_text = since.to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    let (first, next) = loop {
        let (first, next) = feed(&app, &org, &format!("updatedSince={since_text}&limit=3")).await;
        if first.len() == 3 || tokio::time::Instant::now() > deadline {
            break (first, next);
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    assert_eq!(first, made[..3]);
    let (rest, cursor) = changes_after(&app, &org, next.expect("a cursor"), 3, 1).await;
    assert_eq!(rest, made[3..]);
    let page = app
        .get(&org, &format!("/v1/assignments?updatedSince={since_text}"))
        .await;
    assert!(
        page.body["data"][0]["updatedAt"].as_str().is_some(),
        "{:?}",
        page.body
    );

    // A change moves an assignment to the end: a progress, and a cancellation.
    let module = app.module_ids(&org, &flow).await.remove(0);
    let progress = app
        .post(
            &org,
            &format!("/v1/assignments/{}/progress", made[1]),
            &json!({ "moduleId": module, "status": "completed" }),
        )
        .await;
    assert_eq!(progress.status, 202, "{:?}", progress.body);
    app.wait_for_status(&org, &made[1], "in_progress").await;
    let cancelled = app
        .post(
            &org,
            &format!("/v1/assignments/{}/cancel", made[2]),
            &json!({}),
        )
        .await;
    assert_eq!(cancelled.status, 200, "{:?}", cancelled.body);
    app.wait_for_status(&org, &made[2], "cancelled").await;
    let (changed, cursor) = changes_after(&app, &org, cursor, 10, 2).await;
    assert_eq!(changed, [made[1].clone(), made[2].clone()]);

    // A second module's progress neither starts nor completes the assignment: still a change.
    let second = app.module_ids(&org, &flow).await.remove(1);
    let progress = app
        .post(
            &org,
            &format!("/v1/assignments/{}/progress", made[0]),
            &json!({ "moduleId": second, "status": "in_progress" }),
        )
        .await;
    assert_eq!(progress.status, 202, "{:?}", progress.body);
    let (changed, cursor) = changes_after(&app, &org, cursor, 10, 1).await;
    assert_eq!(changed, [made[0].clone()]);

    // A transaction changes `late` and stays open; another changes `early` and commits. The
    // feed shows neither yet (the open transaction is older than the committed one), then
    // both once the first commits, in transaction order: nothing behind the cursor is skipped.
    let (late, early) = (&made[3], &made[1]);
    let mut open = app.db.begin().await.expect("transaction");
    sqlx::query("UPDATE assignments SET notes = 'late' WHERE id = $1")
        .bind(flow_domain::ids::AssignmentId::parse(late).expect("id"))
        .execute(&mut *open)
        .await
        .expect("update");
    sqlx::query("UPDATE assignments SET notes = 'early' WHERE id = $1")
        .bind(flow_domain::ids::AssignmentId::parse(early).expect("id"))
        .execute(&app.db)
        .await
        .expect("update");
    let (held, cursor) = drain(&app, &org, cursor, 10).await;
    assert!(held.is_empty(), "{held:?}");
    open.commit().await.expect("commit");
    let (both, cursor) = changes_after(&app, &org, cursor, 1, 2).await;
    assert_eq!(both, [late.clone(), early.clone()]);
    let (nothing, _) = drain(&app, &org, cursor, 10).await;
    assert!(nothing.is_empty());

    // Filters: the flow and the assignee narrow it; status does not combine with it; bad
    // values are refused by name; another organization's feed is its own.
    let (one, _) = feed(
        &app,
        &org,
        &format!("updatedSince={since_text}&userEmail=D@example.com"),
    )
    .await;
    assert_eq!(one, [made[3].clone()]);
    let (none, next) = feed(&app, &org, "updatedSince=2026-01-01&flowId=flow_nope").await;
    assert!(none.is_empty() && next.is_none());
    for (query, names) in [
        ("updatedSince=yesterday", "updatedSince"),
        ("updatedSince=2026-01-01&status=pending", "status"),
        (
            "updatedSince=2026-01-01&includeCancelled=true",
            "includeCancelled",
        ),
        ("cursor=chg_12_nope", "cursor"),
        (
            "cursor=chg_-1_asg_00000000000000000000000000000000",
            "cursor",
        ),
        ("updatedSince=2026-01-01&limit=0", "limit"),
    ] {
        let response = app.get(&org, &format!("/v1/assignments?{query}")).await;
        assert_eq!(response.status, 400, "{query}: {:?}", response.body);
        let message = response.body["message"].as_str().unwrap_or_default();
        assert!(message.contains(names), "{query}: {message}");
    }
    let (in_other, _) = feed(&app, &other, "updatedSince=2026-01-01").await;
    assert_eq!(in_other.len(), 1);
    assert!(!made.contains(&in_other[0]));
    let future: Value = app
        .get(&org, "/v1/assignments?updatedSince=2999-01-01")
        .await
        .body;
    assert_eq!(future["data"], json!([]));
    assert!(future["nextCursor"].is_null());
}
