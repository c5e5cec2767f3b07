//! "Recover failed deliveries since T" is a send on demand like a resend: each delivery it queues
//! counts against the organization's `webhook_send` limit, one recovery queues at most 500 (the
//! oldest first), and the action itself is limited (`webhook_recover`, 5 a minute on the
//! standard tier).

use flow_common::db::orgs::Tier;
use flow_domain::ids::{OrgId, WebhookEndpointId};
use flow_tests::dashboard::{DashboardClient, Page, role};
use flow_tests::{TestApp, TestOrg};
use serde_json::json;

/// An organization of `tier`, an admin signed in to its dashboard, and an endpoint with
/// `failed` deliveries that used up their attempts, created one a second back from now (no
/// webhook-worker runs, so what a recovery queues stays pending).
async fn endpoint_with_failures(
    app: &TestApp,
    tier: Tier,
    failed: i32,
) -> (TestOrg, DashboardClient, WebhookEndpointId) {
    let org = app.create_org(tier).await;
    let admin = DashboardClient::signed_in(app, org.id, "ada@example.com", role("admin")).await;
    let created = app
        .create_webhook(&org, &json!({ "url": "http://127.0.0.1:9/hook" }))
        .await;
    let endpoint =
        WebhookEndpointId::parse(created["webhookId"].as_str().unwrap()).expect("endpoint id");
    sqlx::query(
        "INSERT INTO webhook_deliveries (id, org_id, endpoint_id, event_id, event_type, payload,
                                         status, attempts, created_at, event_at)
         SELECT gen_random_uuid(), $1, $2, gen_random_uuid(), 'flow.assigned', '{}'::jsonb,
                'failed', 5, now() - i * interval '1 second', now() - i * interval '1 second'
         FROM generate_series(1, $3) AS i",
    )
    .bind(org.id)
    .bind(endpoint)
    .bind(failed)
    .execute(&app.db)
    .await
    .expect("failed deliveries");
    (org, admin, endpoint)
}

/// Posts the recover form for everything since 2020.
async fn recover(admin: &DashboardClient, endpoint: WebhookEndpointId) -> Page {
    admin
        .post_form(
            &format!("/dashboard/webhooks/{endpoint}/recover"),
            &[("since", "2020-01-01T00:00")],
        )
        .await
}

/// The number of the endpoint's deliveries in `status`.
async fn count(app: &TestApp, endpoint: WebhookEndpointId, status: &str) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM webhook_deliveries WHERE endpoint_id = $1 AND status = $2",
    )
    .bind(endpoint)
    .bind(status)
    .fetch_one(&app.db)
    .await
    .unwrap()
}

/// Whether the queued deliveries are the oldest `queued` failed ones.
async fn oldest_were_queued(app: &TestApp, endpoint: WebhookEndpointId) -> bool {
    let newest_pending: chrono::DateTime<chrono::Utc> = sqlx::query_scalar(
        "SELECT max(created_at) FROM webhook_deliveries WHERE endpoint_id = $1 AND status = 'pending'",
    )
    .bind(endpoint)
    .fetch_one(&app.db)
    .await
    .unwrap();
    let oldest_failed: chrono::DateTime<chrono::Utc> = sqlx::query_scalar(
        "SELECT min(created_at) FROM webhook_deliveries WHERE endpoint_id = $1 AND status = 'failed'",
    )
    .bind(endpoint)
    .fetch_one(&app.db)
    .await
    .unwrap();
    newest_pending < oldest_failed
}

/// Uses up the organization's `webhook_send` allowance for the next few minutes, as a burst of
/// test pings and resends would.
async fn use_up_send_allowance(app: &TestApp, org: OrgId) {
    sqlx::query(
        "INSERT INTO rate_limit_counters (org_id, operation, tat)
         VALUES ($1, 'webhook_send', now() + interval '5 minutes')
         ON CONFLICT (org_id, operation) DO UPDATE SET tat = excluded.tat",
    )
    .bind(org)
    .execute(&app.db)
    .await
    .unwrap();
}

#[tokio::test]
async fn a_recovery_larger_than_the_send_allowance_queues_what_it_allows_then_is_refused() {
    let app = TestApp::spawn().await;
    let (org, admin, endpoint) = endpoint_with_failures(&app, Tier::Standard, 100).await;
    let preview = admin
        .page(&format!(
            "/dashboard/webhooks/{endpoint}/recover?since=2020-01-01T00:00"
        ))
        .await;
    assert!(preview.contains("100 failed deliveries since"), "{preview}");
    assert!(
        preview.contains("at most 500 deliveries")
            && preview.contains("webhook send limit (60 a minute"),
        "the page says the cap and the limit: {preview}"
    );

    // The standard tier sends 60 a minute on demand: 60 of the 100 are queued, the oldest.
    let first = recover(&admin, endpoint).await;
    assert_eq!(first.status, 303, "{}", first.body);
    assert_eq!(count(&app, endpoint, "pending").await, 60);
    assert_eq!(count(&app, endpoint, "failed").await, 40);
    assert!(oldest_were_queued(&app, endpoint).await);
    let page = admin.page(&format!("/dashboard/webhooks/{endpoint}")).await;
    assert!(
        page.contains("60 failed deliveries are queued for another attempt. 40 more failed")
            && page.contains("the webhook send limit (60 a minute) allows no more now"),
        "{page}"
    );
    let audit = admin.page("/dashboard/settings/audit").await;
    assert!(audit.contains("(of 100)"), "{audit}");

    // With the allowance used up, a recovery queues nothing and says why.
    use_up_send_allowance(&app, org.id).await;
    let refused = recover(&admin, endpoint).await;
    assert_eq!(refused.status, 429, "{}", refused.body);
    assert!(
        refused.body.contains("Nothing was queued")
            && refused.body.contains("webhook send limit (60 a minute"),
        "{}",
        refused.body
    );
    let retry_after: u64 = refused
        .headers
        .get("retry-after")
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse().ok())
        .expect("Retry-After");
    assert!(retry_after >= 1);
    assert_eq!(count(&app, endpoint, "pending").await, 60);
    assert_eq!(count(&app, endpoint, "failed").await, 40);
}

#[tokio::test]
async fn one_recovery_queues_at_most_500_deliveries_oldest_first() {
    let app = TestApp::spawn().await;
    // The enterprise tier sends 600 a minute on demand: the cap of one recovery binds first.
    let (_org, admin, endpoint) = endpoint_with_failures(&app, Tier::Enterprise, 700).await;
    let first = recover(&admin, endpoint).await;
    assert_eq!(first.status, 303, "{}", first.body);
    assert_eq!(count(&app, endpoint, "pending").await, 500);
    assert!(oldest_were_queued(&app, endpoint).await);
    let page = admin.page(&format!("/dashboard/webhooks/{endpoint}")).await;
    assert!(
        page.contains("500 failed deliveries are queued for another attempt. 200 more failed")
            && page.contains("one recovery queues at most 500"),
        "{page}"
    );
    // The next recovery takes the next ones, as far as the 100 sends left allow.
    let second = recover(&admin, endpoint).await;
    assert_eq!(second.status, 303, "{}", second.body);
    let pending = count(&app, endpoint, "pending").await;
    assert!(
        (600..=602).contains(&pending),
        "{pending} pending: 100 more (and a token or two that came back meanwhile)"
    );
    assert!(oldest_were_queued(&app, endpoint).await);
}

#[tokio::test]
async fn the_recover_action_itself_is_limited_to_5_a_minute() {
    let app = TestApp::spawn().await;
    let (_org, admin, endpoint) = endpoint_with_failures(&app, Tier::Standard, 0).await;
    // One comes back every 12 s: at most one more may get through meanwhile.
    let mut allowed = 0;
    let refused = loop {
        let page = recover(&admin, endpoint).await;
        if page.status != 303 {
            break page;
        }
        allowed += 1;
        assert!(allowed <= 6, "more recoveries allowed than the limit");
    };
    assert!(allowed >= 5, "only {allowed} recoveries allowed");
    assert_eq!(refused.status, 429, "{}", refused.body);
    assert!(
        refused
            .body
            .contains("Recoveries are limited to 5 a minute"),
        "{}",
        refused.body
    );
    assert!(refused.headers.get("retry-after").is_some());
}
