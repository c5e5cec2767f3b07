//! A webhook endpoint is changed the same way from the API and from the dashboard: both refuse
//! the same text with the same rule (NUL and other control characters, descriptions past 500
//! characters), and both commit an update or a secret rotation together with its audit row, or
//! not at all.

use flow_common::db::orgs::Tier;
use flow_tests::dashboard::DashboardClient;
use flow_tests::{TestApp, TestOptions, TestOrg};
use serde_json::json;

/// Descriptions both surfaces refuse, and the words of the refusal.
fn refused_descriptions() -> Vec<(String, &'static str)> {
    vec![
        (
            "before\0after".to_owned(),
            "must not contain control characters other than line breaks and tabs",
        ),
        (
            "a bell\u{7}".to_owned(),
            "must not contain control characters other than line breaks and tabs",
        ),
        (
            "escape \u{1b}[31mred".to_owned(),
            "must not contain control characters other than line breaks and tabs",
        ),
        ("é".repeat(501), "must be at most 500 characters"),
    ]
}

async fn setup() -> (TestApp, TestOrg, DashboardClient) {
    let app = TestApp::spawn_with(TestOptions {
        assign_worker: false,
        ..TestOptions::default()
    })
    .await;
    let org = app.create_org(Tier::Standard).await;
    let client = DashboardClient::admin(&app, org.id).await;
    (app, org, client)
}

async fn endpoint_count(app: &TestApp) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM webhook_endpoints")
        .fetch_one(&app.db)
        .await
        .unwrap()
}

#[tokio::test]
async fn the_api_and_the_dashboard_refuse_the_same_descriptions() {
    let (app, org, client) = setup().await;
    let created = app
        .post(
            &org,
            "/v1/webhooks",
            &json!({ "url": "http://127.0.0.1:9/hook", "description": "kept" }),
        )
        .await;
    assert_eq!(created.status, 201, "{:?}", created.body);
    let id = created.body["webhookId"].as_str().unwrap().to_owned();
    for (description, words) in refused_descriptions() {
        let api = app
            .post(
                &org,
                "/v1/webhooks",
                &json!({ "url": "http://127.0.0.1:9/other", "description": description }),
            )
            .await;
        assert_eq!(api.status, 400, "{:?}", api.body);
        assert_eq!(api.body["error"], "invalid_request");
        assert_eq!(api.body["message"], format!("description {words}"));
        let patched = app
            .request(
                reqwest::Method::PATCH,
                &format!("/v1/webhooks/{id}"),
                Some(&org.key),
                Some(&json!({ "description": description })),
                &[],
            )
            .await;
        assert_eq!(patched.status, 400, "{:?}", patched.body);
        assert_eq!(patched.body["message"], format!("description {words}"));

        let page = client
            .post_form(
                "/dashboard/webhooks",
                &[
                    ("url", "http://127.0.0.1:9/other"),
                    ("description", &description),
                ],
            )
            .await;
        assert_eq!(page.status, 400, "{}", page.body);
        assert!(
            page.body.contains(&format!("Description {words}.")),
            "{}",
            page.body
        );
        let edited = client
            .post_form(
                &format!("/dashboard/webhooks/{id}/edit"),
                &[
                    ("url", "http://127.0.0.1:9/hook"),
                    ("description", &description),
                    ("enabled", "on"),
                ],
            )
            .await;
        assert_eq!(edited.status, 400, "{}", edited.body);
        assert!(edited.body.contains(&format!("Description {words}.")));
    }
    assert_eq!(endpoint_count(&app).await, 1, "nothing was created");
    let kept: Option<String> = sqlx::query_scalar("SELECT description FROM webhook_endpoints")
        .fetch_one(&app.db)
        .await
        .unwrap();
    assert_eq!(kept.as_deref(), Some("kept"), "nothing was changed");
    // Line breaks and tabs are text, on both surfaces.
    let api = app
        .post(
            &org,
            "/v1/webhooks",
            &json!({ "url": "http://127.0.0.1:9/a", "description": "HR\n\tsystem" }),
        )
        .await;
    assert_eq!(api.status, 201, "{:?}", api.body);
    let page = client
        .post_form(
            "/dashboard/webhooks",
            &[
                ("url", "http://127.0.0.1:9/b"),
                ("description", "HR\n\tsystem"),
            ],
        )
        .await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert_eq!(endpoint_count(&app).await, 3);
}

#[tokio::test]
async fn an_update_or_a_rotation_whose_audit_row_fails_changes_nothing() {
    let (app, org, client) = setup().await;
    let created = app
        .post(
            &org,
            "/v1/webhooks",
            &json!({ "url": "http://127.0.0.1:9/hook", "description": "before" }),
        )
        .await;
    assert_eq!(created.status, 201, "{:?}", created.body);
    let id = created.body["webhookId"].as_str().unwrap().to_owned();
    // The audit trail refuses these rows, as a full disk or a lost connection would.
    sqlx::raw_sql(
        "CREATE FUNCTION refuse_audit() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN RAISE EXCEPTION 'audit refused by the test'; END $$;
         CREATE TRIGGER refuse_audit BEFORE INSERT ON audit_events FOR EACH ROW
         WHEN (NEW.action IN ('webhook.updated', 'webhook.secret_rotated'))
         EXECUTE FUNCTION refuse_audit();",
    )
    .execute(&app.db)
    .await
    .unwrap();
    let before: (String, String, Option<String>) = sqlx::query_as(
        "SELECT coalesce(description, ''), secret, previous_secret FROM webhook_endpoints",
    )
    .fetch_one(&app.db)
    .await
    .unwrap();

    let patched = app
        .request(
            reqwest::Method::PATCH,
            &format!("/v1/webhooks/{id}"),
            Some(&org.key),
            Some(&json!({ "description": "after" })),
            &[],
        )
        .await;
    assert_eq!(patched.status, 500, "{:?}", patched.body);
    let rotated = app
        .post(
            &org,
            &format!("/v1/webhooks/{id}/rotate-secret"),
            &json!({}),
        )
        .await;
    assert_eq!(rotated.status, 500, "{:?}", rotated.body);
    let edited = client
        .post_form(
            &format!("/dashboard/webhooks/{id}/edit"),
            &[
                ("url", "http://127.0.0.1:9/hook"),
                ("description", "after"),
                ("enabled", "on"),
            ],
        )
        .await;
    assert_eq!(edited.status, 500, "{}", edited.body);
    let rotated_page = client
        .post_form(&format!("/dashboard/webhooks/{id}/rotate"), &[])
        .await;
    assert_eq!(rotated_page.status, 500, "{}", rotated_page.body);

    let after: (String, String, Option<String>) = sqlx::query_as(
        "SELECT coalesce(description, ''), secret, previous_secret FROM webhook_endpoints",
    )
    .fetch_one(&app.db)
    .await
    .unwrap();
    assert_eq!(
        after, before,
        "neither the change nor the new secret was kept"
    );
}

#[tokio::test]
async fn event_kinds_answer_as_sent_and_an_unknown_stored_kind_fails_loudly() {
    let (app, org, client) = setup().await;
    let created = app
        .post(
            &org,
            "/v1/webhooks",
            &json!({
                "url": "http://127.0.0.1:9/hook",
                "events": ["flow.started", "flow.overdue", "flow.assigned", "flow.started"],
            }),
        )
        .await;
    assert_eq!(created.status, 201, "{:?}", created.body);
    // The API answers the kinds by name, sorted by name, without repeats, as it always has.
    assert_eq!(
        created.body["events"],
        json!(["flow.assigned", "flow.overdue", "flow.started"])
    );
    let id = created.body["webhookId"].as_str().unwrap().to_owned();
    let read = app.get(&org, &format!("/v1/webhooks/{id}")).await;
    assert_eq!(read.body["events"], created.body["events"]);

    // A kind this build does not know, written by a newer build or by hand: the endpoint cannot
    // be read, and the error names the kind, rather than the endpoint receiving more or less.
    sqlx::query("UPDATE webhook_endpoints SET events = '{flow.assigned,flow.archived}'")
        .execute(&app.db)
        .await
        .unwrap();
    let endpoint_id = id.parse().expect("an endpoint id");
    let error = flow_common::db::webhooks::endpoints::get(&app.db, org.id, endpoint_id)
        .await
        .expect_err("an unknown kind is an error");
    assert!(error.to_string().contains("\"flow.archived\""), "{error}");
    let read = app.get(&org, &format!("/v1/webhooks/{id}")).await;
    assert_eq!(read.status, 500, "{:?}", read.body);
    assert_eq!(read.body["error"], "internal_error");
    let page = client.get(&format!("/dashboard/webhooks/{id}/edit")).await;
    assert_eq!(page.status, 500, "{}", page.body);
    let kept: Vec<String> = sqlx::query_scalar("SELECT unnest(events) FROM webhook_endpoints")
        .fetch_all(&app.db)
        .await
        .unwrap();
    assert_eq!(
        kept,
        ["flow.assigned", "flow.archived"],
        "nothing was rewritten"
    );
}
