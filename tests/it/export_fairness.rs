//! Exports are fair between organizations: each may have a few exports waiting or running and a
//! bounded number of bytes of files at a time (429 with `retry_after` past either), and the
//! report-workers claim in turn across organizations rather than first come first served.

use std::time::Duration;

use flow_common::db::exports;
use flow_common::db::orgs::Tier;
use flow_domain::ids::{ExportId, OrgId};
use flow_tests::dashboard::{DashboardClient, role};
use flow_tests::reports::{create_flow, create_org_in_zone, report, report_ok};
use flow_tests::{TestApp, TestOrg, TestResponse};
use serde_json::json;

/// Requests a CSV export of `flow`.
async fn request_export(app: &TestApp, org: &TestOrg, flow: &str) -> TestResponse {
    report(app, org, json!({ "flowId": flow, "format": "csv" })).await
}

/// Requests a CSV export of `flow` and insists it is accepted; returns its id.
async fn export_accepted(app: &TestApp, org: &TestOrg, flow: &str) -> ExportId {
    let body = report_ok(app, org, json!({ "flowId": flow, "format": "csv" })).await;
    ExportId::parse(body["exportId"].as_str().expect("exportId")).expect("export id")
}

/// A 429 `rate_limit_exceeded` whose body and `Retry-After` agree on a wait; returns it.
fn assert_throttled(response: &TestResponse) -> u64 {
    assert_eq!(response.status, 429, "{}", response.body);
    assert_eq!(response.body["error"], json!("rate_limit_exceeded"));
    let retry_after = response.body["retry_after"]
        .as_u64()
        .unwrap_or_else(|| panic!("retry_after in {}", response.body));
    assert!(retry_after >= 1, "{retry_after}");
    assert_eq!(
        response.header("retry-after"),
        Some(retry_after.to_string().as_str())
    );
    retry_after
}

#[tokio::test]
async fn a_sixth_export_waiting_in_a_standard_organization_is_429_until_one_finishes() {
    // No report-worker runs: every export requested stays waiting.
    let app = TestApp::spawn().await;
    let org = create_org_in_zone(&app, Tier::Standard, "UTC", Some(1_000)).await;
    let flow = create_flow(&app, &org, "Security", &["One"]).await.id;
    let mut accepted = Vec::new();
    for _ in 0..5 {
        accepted.push(export_accepted(&app, &org, &flow.to_string()).await);
    }
    let refused = request_export(&app, &org, &flow.to_string()).await;
    assert_throttled(&refused);
    let message = refused.body["message"].as_str().unwrap();
    assert!(
        message.contains("5 exports waiting or running"),
        "{message}"
    );
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM exports WHERE org_id = $1")
        .bind(org.id)
        .fetch_one(&app.db)
        .await
        .unwrap();
    assert_eq!(rows, 5, "nothing written for the refused export");
    // The report without a format is still answered: only exports are capped.
    let inline = report(&app, &org, json!({ "flowId": flow.to_string() })).await;
    assert_eq!(inline.status, 200, "{}", inline.body);
    // Another organization is not held back by this one's cap.
    let other = create_org_in_zone(&app, Tier::Standard, "UTC", None).await;
    let other_flow = create_flow(&app, &other, "Security", &["One"]).await.id;
    export_accepted(&app, &other, &other_flow.to_string()).await;
    // Once one of the five is ready, there is room for one more.
    sqlx::query(
        "UPDATE exports SET status = 'ready', size_bytes = 10, finished_at = now() WHERE id = $1",
    )
    .bind(accepted[0])
    .execute(&app.db)
    .await
    .unwrap();
    export_accepted(&app, &org, &flow.to_string()).await;
    assert_throttled(&request_export(&app, &org, &flow.to_string()).await);
}

#[tokio::test]
async fn the_dashboards_export_button_is_refused_past_the_cap_with_retry_after() {
    let app = TestApp::spawn().await;
    let org = create_org_in_zone(&app, Tier::Standard, "UTC", Some(1_000)).await;
    let flow = create_flow(&app, &org, "Security", &["One"]).await.id;
    let admin = DashboardClient::signed_in(&app, org.id, "ada@example.com", role("admin")).await;
    let path = format!("/dashboard/flows/{flow}/exports");
    for _ in 0..5 {
        let page = admin.post_form(&path, &[("format", "csv")]).await;
        assert_eq!(page.status, 303, "{}", page.body);
    }
    let page = admin.post_form(&path, &[("format", "csv")]).await;
    assert_eq!(page.status, 429, "{}", page.body);
    assert!(
        page.body.contains("5 exports waiting or running"),
        "{}",
        page.body
    );
    let retry_after: u64 = page
        .headers
        .get("retry-after")
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse().ok())
        .expect("Retry-After");
    assert!(retry_after >= 1);
}

#[tokio::test]
async fn an_organization_over_its_export_storage_is_refused_until_its_oldest_file_expires() {
    let app = TestApp::spawn().await;
    let org = create_org_in_zone(&app, Tier::Standard, "UTC", Some(1_000)).await;
    let flow = create_flow(&app, &org, "Security", &["One"]).await.id;
    // Two ready exports holding 1 GiB between them (the standard cap): the older expires in an
    // hour, the newer in twenty.
    const MIB: i64 = 1 << 20;
    let mut ready = Vec::new();
    for (size, hours_left) in [(600 * MIB, 1), (424 * MIB, 20)] {
        let id = export_accepted(&app, &org, &flow.to_string()).await;
        sqlx::query(
            "UPDATE exports SET status = 'ready', size_bytes = $2, finished_at = now(),
                    expires_at = now() + $3 * interval '1 hour'
             WHERE id = $1",
        )
        .bind(id)
        .bind(size)
        .bind(hours_left)
        .execute(&app.db)
        .await
        .unwrap();
        ready.push(id);
    }
    let refused = request_export(&app, &org, &flow.to_string()).await;
    let retry_after = assert_throttled(&refused);
    // The wait is until the oldest file expires (an hour), not a fixed pause.
    assert!((3_000..=3_601).contains(&retry_after), "{retry_after}");
    let message = refused.body["message"].as_str().unwrap();
    assert!(
        message.contains("1024 MiB of its 1024 MiB of export storage"),
        "{message}"
    );
    // An enterprise organization keeps up to 10 GiB: the same files leave it room.
    let enterprise = create_org_in_zone(&app, Tier::Enterprise, "UTC", Some(1_000)).await;
    let enterprise_flow = create_flow(&app, &enterprise, "Security", &["One"])
        .await
        .id;
    let id = export_accepted(&app, &enterprise, &enterprise_flow.to_string()).await;
    sqlx::query("UPDATE exports SET status = 'ready', size_bytes = $2 WHERE id = $1")
        .bind(id)
        .bind(1024 * MIB)
        .execute(&app.db)
        .await
        .unwrap();
    export_accepted(&app, &enterprise, &enterprise_flow.to_string()).await;
    // Once the oldest expires, its bytes no longer count.
    sqlx::query("UPDATE exports SET expires_at = now() - interval '1 second' WHERE id = $1")
        .bind(ready[0])
        .execute(&app.db)
        .await
        .unwrap();
    export_accepted(&app, &org, &flow.to_string()).await;
}

/// Claims the next export as a report-worker would; returns its organization and id.
async fn claim(app: &TestApp, worker: &str) -> Option<(OrgId, ExportId)> {
    exports::claim_next(&app.db, worker, Duration::from_secs(60), 3)
        .await
        .expect("claim")
        .map(|export| (export.org_id, export.id))
}

/// Marks a claimed export ready, as its worker would when done.
async fn finish(app: &TestApp, id: ExportId) {
    sqlx::query(
        "UPDATE exports SET status = 'ready', size_bytes = 10, finished_at = now(),
                lease_until = NULL
         WHERE id = $1",
    )
    .bind(id)
    .execute(&app.db)
    .await
    .unwrap();
}

#[tokio::test]
async fn claims_take_turns_across_organizations_instead_of_first_come_first_served() {
    // No report-worker runs: the test claims as one would, and reads the order of the claims.
    let app = TestApp::spawn().await;
    let mut orgs = Vec::new();
    for _ in 0..3 {
        let org = create_org_in_zone(&app, Tier::Enterprise, "UTC", Some(10_000)).await;
        let flow = create_flow(&app, &org, "Security", &["One"]).await.id;
        orgs.push((org, flow));
    }
    let (a, b, c) = (&orgs[0], &orgs[1], &orgs[2]);
    // A queues a backlog first; B and C queue one each after it.
    let mut a_exports = Vec::new();
    for _ in 0..6 {
        a_exports.push(export_accepted(&app, &a.0, &a.1.to_string()).await);
    }
    let b_export = export_accepted(&app, &b.0, &b.1.to_string()).await;
    let c_export = export_accepted(&app, &c.0, &c.1.to_string()).await;

    // While A's first export runs, B's and C's come before the rest of A's backlog.
    let order = [
        claim(&app, "worker-1").await,
        claim(&app, "worker-2").await,
        claim(&app, "worker-3").await,
        claim(&app, "worker-4").await,
    ];
    assert_eq!(
        order,
        [
            Some((a.0.id, a_exports[0])),
            Some((b.0.id, b_export)),
            Some((c.0.id, c_export)),
            Some((a.0.id, a_exports[1])),
        ]
    );

    // Whoever finishes, turns go by the last claim: B (whose last claim is older than A's)
    // comes before A's backlog again once it has an export waiting.
    for (_, id) in order.iter().flatten() {
        finish(&app, *id).await;
    }
    let b_second = export_accepted(&app, &b.0, &b.1.to_string()).await;
    assert_eq!(claim(&app, "worker-1").await, Some((b.0.id, b_second)));
    assert_eq!(claim(&app, "worker-2").await, Some((a.0.id, a_exports[2])));
    // A's backlog is claimed oldest first, and every export exactly once.
    assert_eq!(claim(&app, "worker-3").await, Some((a.0.id, a_exports[3])));
    assert_eq!(claim(&app, "worker-4").await, Some((a.0.id, a_exports[4])));
    assert_eq!(claim(&app, "worker-5").await, Some((a.0.id, a_exports[5])));
    assert_eq!(claim(&app, "worker-6").await, None);
}

#[tokio::test]
async fn workers_claiming_at_once_never_take_the_same_export() {
    let app = TestApp::spawn().await;
    let mut expected = Vec::new();
    for _ in 0..3 {
        let org = create_org_in_zone(&app, Tier::Enterprise, "UTC", Some(10_000)).await;
        let flow = create_flow(&app, &org, "Security", &["One"]).await.id;
        for _ in 0..5 {
            expected.push(export_accepted(&app, &org, &flow.to_string()).await);
        }
    }
    let mut claims = tokio::task::JoinSet::new();
    for worker in 0..8 {
        let db = app.db.clone();
        claims.spawn(async move {
            let mut mine = Vec::new();
            while let Some(export) =
                exports::claim_next(&db, &format!("worker-{worker}"), Duration::from_secs(60), 3)
                    .await
                    .expect("claim")
            {
                mine.push(export.id);
            }
            mine
        });
    }
    let mut claimed: Vec<ExportId> = claims.join_all().await.into_iter().flatten().collect();
    claimed.sort();
    expected.sort();
    assert_eq!(claimed, expected, "each export claimed exactly once");
}
