//! The audit trail over the API (issue 39): `GET /v1/audit-events` answers the rows the
//! dashboard's audit log shows, filtered by actor, action, target and time, newest first in
//! keyset pages that neither repeat nor skip a row; bad filters are 400 by name; an organization
//! sees only its own trail.

use flow_common::db::orgs::Tier;
use flow_tests::{TestApp, TestOrg};
use serde_json::{Value, json};

async fn page(app: &TestApp, org: &TestOrg, query: &str) -> (u16, Value) {
    let response = app.get(org, &format!("/v1/audit-events{query}")).await;
    (response.status, response.body)
}

/// Every row the filter `query` lets through, page by page with `limit`.
async fn all_pages(app: &TestApp, org: &TestOrg, query: &str, limit: u32) -> Vec<Value> {
    let mut rows = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..100 {
        let separator = if query.is_empty() { "?" } else { "&" };
        let mut path = format!("{query}{separator}limit={limit}");
        if let Some(cursor) = &cursor {
            path.push_str(&format!("&cursor={cursor}"));
        }
        let (status, body) = page(app, org, &path).await;
        assert_eq!(status, 200, "{path}: {body}");
        let data = body["data"].as_array().expect("data");
        assert!(data.len() <= limit as usize);
        rows.extend(data.iter().cloned());
        match body["nextCursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => return rows,
        }
    }
    panic!("more than 100 pages");
}

fn ids(rows: &[Value]) -> Vec<i64> {
    rows.iter()
        .map(|row| row["id"].as_i64().expect("id"))
        .collect()
}

#[tokio::test]
async fn the_audit_trail_is_listed_filtered_and_paged_for_the_organization_only() {
    let app = TestApp::spawn().await;
    let org = app.create_org(Tier::Standard).await;
    let other = app.create_org(Tier::Standard).await;

    // Changes through the API: flow edits, a settings change, cancellations.
    app.create_users(&org, &["ann@example.com", "bo@example.com"])
        .await;
    let safety = app.create_flow(&org, "Safety", &[10]).await;
    let privacy = app.create_flow(&org, "Privacy", &[10]).await;
    for (flow, name) in [
        (&safety, "Safety 2027"),
        (&privacy, "Privacy 2027"),
        (&safety, "Safety"),
    ] {
        let edited = app
            .request(
                reqwest::Method::PATCH,
                &format!("/v1/flows/{flow}"),
                Some(&org.key),
                Some(&json!({ "name": name })),
                &[],
            )
            .await;
        assert_eq!(edited.status, 200, "{:?}", edited.body);
    }
    let settings = app
        .request(
            reqwest::Method::PATCH,
            "/v1/settings",
            Some(&org.key),
            Some(&json!({ "cancelOnDeactivate": true })),
            &[],
        )
        .await;
    assert_eq!(settings.status, 200, "{:?}", settings.body);
    let mut cancelled = Vec::new();
    for email in ["ann@example.com", "bo@example.com"] {
        let id = app.assign_persisted(&org, &safety, email, json!({})).await;
        let response = app
            .post(
                &org,
                &format!("/v1/assignments/{id}/cancel"),
                &json!({ "reason": "left the team" }),
            )
            .await;
        assert_eq!(response.status, 200, "{:?}", response.body);
        cancelled.push(id);
    }
    // The other organization's change is not in this one's trail.
    let other_flow = app.create_flow(&other, "Other", &[10]).await;
    let edited = app
        .request(
            reqwest::Method::PATCH,
            &format!("/v1/flows/{other_flow}"),
            Some(&other.key),
            Some(&json!({ "archived": true })),
            &[],
        )
        .await;
    assert_eq!(edited.status, 200, "{:?}", edited.body);

    // Everything, newest first, as the table holds it.
    let (status, body) = page(&app, &org, "").await;
    assert_eq!(status, 200, "{body}");
    assert!(body["nextCursor"].is_null(), "{body}");
    let rows = body["data"].as_array().expect("data").clone();
    let expected: Vec<i64> =
        sqlx::query_scalar("SELECT id FROM audit_events WHERE org_id = $1 ORDER BY id DESC")
            .bind(org.id)
            .fetch_all(&app.db)
            .await
            .expect("rows");
    assert_eq!(ids(&rows), expected);
    assert_eq!(rows.len(), 6, "{rows:?}");
    let newest = &rows[0];
    assert_eq!(newest["action"], json!("assignment.cancelled"));
    assert_eq!(newest["actorKind"], json!("api_key"));
    assert_eq!(newest["target"], json!(cancelled[1]));
    assert_eq!(newest["detail"], json!("left the team"));
    assert!(
        newest["description"]
            .as_str()
            .is_some_and(|text| !text.is_empty())
    );
    assert!(
        newest["occurredAt"]
            .as_str()
            .is_some_and(|at| at.ends_with('Z'))
    );
    let key_prefix = newest["actor"].as_str().expect("actor").to_owned();
    // The key's visible prefix, never the key.
    assert!(
        org.key.starts_with(key_prefix.trim_end_matches('…')) && key_prefix.len() < org.key.len(),
        "{key_prefix}"
    );

    // Pages of two: the same rows, once each, in order.
    assert_eq!(ids(&all_pages(&app, &org, "", 2).await), expected);

    // Filters: by action, by target, by actor; and pages of one through a filter.
    let by_action = all_pages(&app, &org, "?action=flow.updated", 1).await;
    assert_eq!(by_action.len(), 3);
    assert!(
        by_action
            .iter()
            .all(|row| row["action"] == json!("flow.updated"))
    );
    let by_target = all_pages(&app, &org, &format!("?target={safety}"), 10).await;
    assert_eq!(by_target.len(), 2);
    assert!(by_target.iter().all(|row| row["target"] == json!(safety)));
    let both = all_pages(
        &app,
        &org,
        &format!("?action=assignment.cancelled&target={}", cancelled[0]),
        10,
    )
    .await;
    assert_eq!(both.len(), 1);
    assert_eq!(
        all_pages(&app, &org, &format!("?actor={key_prefix}"), 4)
            .await
            .len(),
        6
    );
    assert!(
        all_pages(&app, &org, "?actor=someone@example.com", 4)
            .await
            .is_empty()
    );

    // Time: rows at known instants (the organization's zone is UTC): a day is the whole day,
    // an instant is inclusive.
    for at in [
        "2026-01-01T10:00:00Z",
        "2026-01-02T00:00:00Z",
        "2026-01-02T23:59:59.5Z",
        "2026-01-03T00:00:00Z",
    ] {
        sqlx::query(
            "INSERT INTO audit_events (org_id, occurred_at, actor_kind, actor, action, target)
             VALUES ($1, $2::timestamptz, 'flowctl', 'flowctl', 'key.created', 'key_x')",
        )
        .bind(org.id)
        .bind(at)
        .execute(&app.db)
        .await
        .expect("row");
    }
    let day = all_pages(&app, &org, "?since=2026-01-02&until=2026-01-02", 10).await;
    let times: Vec<&str> = day
        .iter()
        .map(|row| row["occurredAt"].as_str().expect("at"))
        .collect();
    assert_eq!(
        times,
        ["2026-01-02T23:59:59.500Z", "2026-01-02T00:00:00.000Z"]
    );
    let instants = all_pages(
        &app,
        &org,
        "?since=2026-01-01T10:00:00Z&until=2026-01-02T00:00:00Z",
        10,
    )
    .await;
    assert_eq!(instants.len(), 2);
    assert_eq!(
        all_pages(&app, &org, "?until=2026-01-01", 10).await.len(),
        1
    );

    // Bad filters are refused by name.
    let too_long = "x".repeat(321);
    for (query, names) in [
        ("?action=key.exported", "action"),
        ("?since=yesterday", "since"),
        ("?until=2026-13-01", "until"),
        ("?since=2026-01-03&until=2026-01-02", "until"),
        ("?actor=", "actor"),
        (&*format!("?target={too_long}"), "target"),
        ("?limit=0", "limit"),
        ("?limit=1001", "limit"),
        ("?cursor=abc", "cursor"),
        ("?cursor=-5", "cursor"),
    ] {
        let (status, body) = page(&app, &org, query).await;
        assert_eq!(status, 400, "{query}: {body}");
        assert_eq!(body["error"], json!("invalid_request"), "{query}: {body}");
        let message = body["message"].as_str().unwrap_or_default();
        assert!(message.contains(names), "{query}: {message}");
    }

    // The other organization sees its own row only; no key sees another's trail.
    let theirs = all_pages(&app, &other, "", 10).await;
    assert_eq!(theirs.len(), 1);
    assert_eq!(theirs[0]["target"], json!(other_flow));
    assert!(
        all_pages(&app, &other, &format!("?target={safety}"), 10)
            .await
            .is_empty()
    );
    let unauthenticated = app
        .request(reqwest::Method::GET, "/v1/audit-events", None, None, &[])
        .await;
    assert_eq!(unauthenticated.status, 401);
}
