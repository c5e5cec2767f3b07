//! The dashboard over HTTP: sign-in links and passwords, sessions (new id at sign-in, idle and
//! maximum age), cross-site refusal, viewers, organization scoping, escaping, the
//! Content-Security-Policy, and each page's actions against the real services. Sign-in
//! throttling is in `sign_in.rs`, account changes in `accounts.rs`.

use std::time::Duration;

use flow_common::db::orgs::Tier;
use flow_tests::dashboard::{DashboardClient, between, create_account, org_with_admin, role};
use flow_tests::receiver::{Behaviour, Receiver};
use flow_tests::{TestApp, TestOptions, TestOrg};
use serde_json::json;

const PASSWORD: &str = "a long enough password";

async fn count(app: &TestApp, sql: &str) -> i64 {
    sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_owned()))
        .fetch_one(&app.db)
        .await
        .expect("count")
}

/// The address of the link whose tag holds `marker` (HTML-unescaped).
fn href_before(html: &str, marker: &str) -> String {
    let at = html.find(marker).expect("the link");
    let start = html[..at].rfind("href=\"").expect("an href") + 6;
    let end = start + html[start..].find('"').expect("end of href");
    html[start..end].replace("&#38;", "&").replace("&amp;", "&")
}

async fn create_endpoint(app: &TestApp, org: &TestOrg, url: &str) -> String {
    let response = app.post(org, "/v1/webhooks", &json!({ "url": url })).await;
    assert_eq!(response.status, 201, "{:?}", response.body);
    response.body["webhookId"].as_str().expect("id").to_owned()
}

#[tokio::test]
async fn a_sign_in_link_sets_the_password_once_and_signs_in() {
    let app = TestApp::spawn().await;
    let org = app.create_org(Tier::Standard).await;
    let link = create_account(&app, org.id, "Pat@Example.com", role("admin")).await;
    let path = link
        .strip_prefix(&app.base_url)
        .expect("link of this service");
    let client = DashboardClient::new(&app);

    let form = client.page(path).await;
    assert!(form.contains("Pat@Example.com"), "{form}");

    let short = client
        .post_form(path, &[("password", "short"), ("confirm", "short")])
        .await;
    assert_eq!(short.status, 400);
    assert!(
        short.body.contains("at least 10 characters"),
        "{}",
        short.body
    );
    let mismatch = client
        .post_form(
            path,
            &[("password", PASSWORD), ("confirm", "another long password")],
        )
        .await;
    assert_eq!(mismatch.status, 400);
    assert!(mismatch.body.contains("not the same"));
    assert!(
        client.session().is_none(),
        "no session before the password is set"
    );

    let set = client
        .post_form(path, &[("password", PASSWORD), ("confirm", PASSWORD)])
        .await;
    assert_eq!(set.status, 303);
    assert_eq!(set.location(), Some("/dashboard"));
    let home = client.page("/dashboard").await;
    assert!(home.contains("Welcome!"), "a welcome notice: {home}");
    assert!(home.contains("Pat@Example.com"));
    assert!(home.contains("What needs attention"), "{home}");

    let hash: String = sqlx::query_scalar("SELECT password_hash FROM dashboard_accounts")
        .fetch_one(&app.db)
        .await
        .unwrap();
    assert!(hash.starts_with("$argon2id$"), "{hash}");
    assert!(!hash.contains(PASSWORD));

    // The link works once.
    let again = DashboardClient::new(&app).get(path).await;
    assert_eq!(again.status, 410);
    let reuse = DashboardClient::new(&app)
        .post_form(
            path,
            &[
                ("password", "yet another password"),
                ("confirm", "yet another password"),
            ],
        )
        .await;
    assert_eq!(reuse.status, 410);

    // The password signs in, case-insensitively by e-mail.
    let other = DashboardClient::new(&app);
    let signed_in = other
        .post_form(
            "/dashboard/sign-in",
            &[
                ("email", "pat@example.com"),
                ("password", PASSWORD),
                ("next", "/dashboard/users"),
            ],
        )
        .await;
    assert_eq!(signed_in.status, 303, "{}", signed_in.body);
    assert_eq!(signed_in.location(), Some("/dashboard/users"));
    other.page("/dashboard/users").await;
}

#[tokio::test]
async fn an_expired_sign_in_link_is_refused() {
    let app = TestApp::spawn().await;
    let org = app.create_org(Tier::Standard).await;
    let link = create_account(&app, org.id, "late@example.com", role("viewer")).await;
    sqlx::query("UPDATE dashboard_sign_in_links SET expires_at = now() - interval '1 second'")
        .execute(&app.db)
        .await
        .unwrap();
    let path = link.strip_prefix(&app.base_url).unwrap();
    let client = DashboardClient::new(&app);
    assert_eq!(client.get(path).await.status, 410);
    let refused = client
        .post_form(path, &[("password", PASSWORD), ("confirm", PASSWORD)])
        .await;
    assert_eq!(refused.status, 410);
    assert!(client.session().is_none());
}

#[tokio::test]
async fn pages_need_a_session_and_send_people_to_sign_in() {
    let app = TestApp::spawn().await;
    let client = DashboardClient::new(&app);
    for path in [
        "/dashboard/flows",
        "/dashboard/settings/api-keys",
        "/dashboard/webhooks",
        "/dashboard/users?search=a",
    ] {
        let page = client.get(path).await;
        assert!(
            page.is_sign_in_redirect(),
            "{path}: {} {:?}",
            page.status,
            page.location()
        );
        let next = serde_html_form::to_string([("next", path)]).unwrap();
        assert!(
            page.location().unwrap().contains(&next),
            "{path} comes back after sign-in: {:?}",
            page.location()
        );
    }
    let refused = client
        .post_form("/dashboard/settings/api-keys", &[("name", "sneaky")])
        .await;
    assert!(refused.is_sign_in_redirect());
    assert_eq!(count(&app, "SELECT count(*) FROM api_keys").await, 0);
}

#[tokio::test]
async fn a_wrong_password_is_refused_without_a_session() {
    let app = TestApp::spawn().await;
    let org = app.create_org(Tier::Standard).await;
    let link = create_account(&app, org.id, "sam@example.com", role("admin")).await;
    DashboardClient::with_link(&app, &link, PASSWORD).await;

    let client = DashboardClient::new(&app);
    let wrong = client
        .post_form(
            "/dashboard/sign-in",
            &[
                ("email", "sam@example.com"),
                ("password", "not the password"),
            ],
        )
        .await;
    assert_eq!(wrong.status, 401);
    assert!(
        wrong
            .body
            .contains("The e-mail or the password is not right.")
    );
    assert!(client.session().is_none());
    assert!(client.get("/dashboard/flows").await.is_sign_in_redirect());

    // An unknown e-mail gets the very same answer.
    let unknown = client
        .post_form(
            "/dashboard/sign-in",
            &[("email", "nobody@example.com"), ("password", PASSWORD)],
        )
        .await;
    assert_eq!(unknown.status, 401);
    assert!(
        unknown
            .body
            .contains("The e-mail or the password is not right.")
    );
}

#[tokio::test]
async fn signing_in_gives_a_new_session_id_and_signing_out_ends_it() {
    let app = TestApp::spawn().await;
    let org = app.create_org(Tier::Standard).await;
    let client = DashboardClient::signed_in(&app, org.id, "kim@example.com", role("admin")).await;
    let first = client.session().expect("session");

    let again = client
        .post_form(
            "/dashboard/sign-in",
            &[("email", "kim@example.com"), ("password", PASSWORD)],
        )
        .await;
    assert_eq!(again.status, 303);
    let second = client.session().expect("session");
    assert_ne!(first, second, "the session id changes at sign-in");
    let cookie = again
        .headers
        .get_all("set-cookie")
        .iter()
        .filter_map(|value| value.to_str().ok())
        .find(|value| value.starts_with("flow_session="))
        .expect("session cookie")
        .to_owned();
    assert!(cookie.contains("HttpOnly"), "{cookie}");
    assert!(cookie.contains("SameSite=Lax"), "{cookie}");
    assert!(cookie.contains("Path=/dashboard"), "{cookie}");
    assert!(
        !cookie.contains("Secure"),
        "not Secure over plain http: {cookie}"
    );

    // The id from before sign-in no longer opens anything.
    let stale = DashboardClient::new(&app);
    stale.set_session(Some(first));
    assert!(stale.get("/dashboard/flows").await.is_sign_in_redirect());

    client.page("/dashboard/flows").await;
    let out = client.post_form("/dashboard/sign-out", &[]).await;
    assert_eq!(out.status, 303);
    let replay = DashboardClient::new(&app);
    replay.set_session(Some(second));
    assert!(replay.get("/dashboard/flows").await.is_sign_in_redirect());
}

#[tokio::test]
async fn cross_site_requests_that_change_things_are_refused() {
    let app = TestApp::spawn().await;
    let (_org, client) = org_with_admin(&app).await;
    for headers in [
        vec![("origin", "https://evil.example")],
        vec![("sec-fetch-site", "cross-site")],
        vec![
            ("origin", "https://evil.example"),
            ("sec-fetch-site", "cross-site"),
        ],
    ] {
        let refused = client
            .post_form_with(
                "/dashboard/settings/api-keys",
                &[("name", "planted")],
                &headers,
            )
            .await;
        assert_eq!(refused.status, 403, "{headers:?}");
        assert!(
            refused.body.contains("came from another site"),
            "{}",
            refused.body
        );
    }
    assert_eq!(
        count(&app, "SELECT count(*) FROM api_keys WHERE name = 'planted'").await,
        0
    );
    // Signing someone in from another site (login CSRF) is refused too.
    let login = DashboardClient::new(&app)
        .post_form_with(
            "/dashboard/sign-in",
            &[("email", "x@example.com"), ("password", PASSWORD)],
            &[("sec-fetch-site", "cross-site")],
        )
        .await;
    assert_eq!(login.status, 403);
    // Reading is fine from anywhere, and the dashboard's own forms go through.
    let read = client.get("/dashboard/settings/api-keys").await;
    assert_eq!(read.status, 200);
    let own = client
        .post_form("/dashboard/settings/api-keys", &[("name", "mine")])
        .await;
    assert_eq!(own.status, 200, "{}", own.body);
    assert_eq!(
        count(&app, "SELECT count(*) FROM api_keys WHERE name = 'mine'").await,
        1
    );
}

#[tokio::test]
async fn an_idle_session_ends() {
    let app = TestApp::spawn_with(TestOptions {
        dashboard: Some(flow_api::config::DashboardConfig {
            session_idle: Duration::from_secs(2),
            session_max: Duration::from_secs(3_600),
        }),
        ..TestOptions::default()
    })
    .await;
    let (_org, client) = org_with_admin(&app).await;
    // Activity keeps it alive past the idle time.
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(1_000)).await;
        client.page("/dashboard/flows").await;
    }
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let ended = client.get("/dashboard/flows").await;
    assert!(
        ended.is_sign_in_redirect(),
        "{} {:?}",
        ended.status,
        ended.location()
    );
}

#[tokio::test]
async fn a_session_ends_at_its_maximum_age_however_active() {
    let app = TestApp::spawn_with(TestOptions {
        dashboard: Some(flow_api::config::DashboardConfig {
            session_idle: Duration::from_secs(3_600),
            session_max: Duration::from_secs(3),
        }),
        ..TestOptions::default()
    })
    .await;
    let (_org, client) = org_with_admin(&app).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let ended = loop {
        let page = client.get("/dashboard/flows").await;
        if page.status != 200 {
            break page;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the session never ended"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    assert!(ended.is_sign_in_redirect());
    assert!(ended.location().unwrap().contains("expired=1"));
    let sign_in = client.page(ended.location().unwrap()).await;
    assert!(sign_in.contains("Your session has ended"));
}

#[tokio::test]
async fn viewers_see_everything_but_cannot_change_anything() {
    let app = TestApp::spawn().await;
    let receiver = Receiver::start().await.expect("webhook receiver");
    let org = app.create_org(Tier::Standard).await;
    app.create_users(&org, &["amy@example.com"]).await;
    let flow = app.create_flow(&org, "Safety", &[10]).await;
    let endpoint = create_endpoint(&app, &org, &receiver.url("viewer")).await;
    let schedule = app
        .post(
            &org,
            "/v1/flows/schedule",
            &json!({"flowId": flow, "userEmail": "amy@example.com", "scheduledAt": "2099-01-01", "recurrence": "monthly"}),
        )
        .await;
    assert_eq!(schedule.status, 201, "{:?}", schedule.body);
    let schedule = schedule.body["scheduleId"].as_str().unwrap().to_owned();
    let key: String =
        sqlx::query_scalar("SELECT 'key_' || replace(id::text, '-', '') FROM api_keys")
            .fetch_one(&app.db)
            .await
            .unwrap();
    let viewer = DashboardClient::signed_in(&app, org.id, "vic@example.com", role("viewer")).await;

    for path in [
        "/dashboard".to_owned(),
        "/dashboard/flows".to_owned(),
        format!("/dashboard/flows/{flow}"),
        "/dashboard/assign".to_owned(),
        "/dashboard/users".to_owned(),
        "/dashboard/schedules".to_owned(),
        "/dashboard/webhooks".to_owned(),
        format!("/dashboard/webhooks/{endpoint}"),
        "/dashboard/settings/api-keys".to_owned(),
        "/dashboard/settings/team".to_owned(),
        "/dashboard/settings/audit".to_owned(),
    ] {
        let html = viewer.page(&path).await;
        for control in [
            "Generate New Key",
            ">Revoke<",
            "Send test event",
            "Create sign-in link",
            "Upload and assign",
            ">Cancel</button>",
        ] {
            assert!(
                !html.contains(control),
                "{path} offers {control} to a viewer"
            );
        }
    }

    let before = counts(&app).await;
    let posts: Vec<(String, Vec<(&str, &str)>)> = vec![
        (
            "/dashboard/settings/api-keys".into(),
            vec![("name", "viewer key")],
        ),
        (format!("/dashboard/settings/api-keys/{key}/revoke"), vec![]),
        (
            format!("/dashboard/settings/api-keys/{key}/roll"),
            vec![("expires_in", "now")],
        ),
        (
            "/dashboard/settings/team".into(),
            vec![("email", "friend@example.com"), ("role", "admin")],
        ),
        (
            "/dashboard/webhooks".into(),
            vec![("url", "http://127.0.0.1:1/x")],
        ),
        (
            format!("/dashboard/webhooks/{endpoint}/edit"),
            vec![("url", "http://127.0.0.1:1/y")],
        ),
        (format!("/dashboard/webhooks/{endpoint}/rotate"), vec![]),
        (format!("/dashboard/webhooks/{endpoint}/test"), vec![]),
        (
            format!("/dashboard/webhooks/{endpoint}/recover"),
            vec![("since", "2020-01-01T00:00")],
        ),
        (format!("/dashboard/webhooks/{endpoint}/delete"), vec![]),
        (
            "/dashboard/assign".into(),
            vec![("flow", flow.as_str()), ("email", "amy@example.com")],
        ),
        (format!("/dashboard/schedules/{schedule}/cancel"), vec![]),
    ];
    for (path, form) in &posts {
        let refused = viewer.post_form(path, form).await;
        assert_eq!(refused.status, 403, "POST {path}: {}", refused.body);
        assert!(
            refused
                .body
                .contains("can view this organization but not change it")
        );
    }
    let upload = viewer
        .post_file(
            "/dashboard/assign/upload",
            &[("flow", &flow)],
            "a.csv",
            b"email\namy@example.com\n",
        )
        .await;
    assert_eq!(upload.status, 403);
    let import = viewer
        .post_file(
            "/dashboard/users",
            &[],
            "u.csv",
            b"email\nzed@example.com\n",
        )
        .await;
    assert_eq!(import.status, 403);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(counts(&app).await, before, "a viewer changed nothing");
}

/// Counts of everything a dashboard action could change.
async fn counts(app: &TestApp) -> Vec<i64> {
    let mut values = Vec::new();
    for sql in [
        "SELECT count(*) FROM api_keys",
        "SELECT count(*) FROM api_keys WHERE revoked_at IS NOT NULL OR expires_at IS NOT NULL",
        "SELECT count(*) FROM dashboard_accounts",
        "SELECT count(*) FROM webhook_endpoints",
        "SELECT count(*) FROM webhook_endpoints WHERE previous_secret IS NOT NULL OR url LIKE '%/y'",
        "SELECT count(*) FROM webhook_deliveries",
        "SELECT count(*) FROM assignments",
        "SELECT count(*) FROM schedules WHERE deleted_at IS NULL",
        "SELECT count(*) FROM users",
        "SELECT count(*) FROM audit_events",
    ] {
        values.push(count(app, sql).await);
    }
    values
}

#[tokio::test]
async fn another_organizations_ids_are_not_found() {
    let app = TestApp::spawn().await;
    let receiver = Receiver::start().await.expect("webhook receiver");
    let (_mine, client) = org_with_admin(&app).await;
    let theirs = app.create_org(Tier::Standard).await;
    app.create_users(&theirs, &["their@example.com"]).await;
    let flow = app.create_flow(&theirs, "Their flow", &[10]).await;
    let endpoint = create_endpoint(&app, &theirs, &receiver.url("theirs")).await;
    let test = app
        .post(
            &theirs,
            &format!("/v1/webhooks/{endpoint}/test"),
            &json!({}),
        )
        .await;
    let delivery = test.body["deliveryId"].as_str().unwrap().to_owned();
    let schedule = app
        .post(
            &theirs,
            "/v1/flows/schedule",
            &json!({"flowId": flow, "userEmail": "their@example.com", "scheduledAt": "2099-01-01"}),
        )
        .await;
    let schedule = schedule.body["scheduleId"].as_str().unwrap().to_owned();
    let export = app
        .post(
            &theirs,
            "/v1/flows/report",
            &json!({"flowId": flow, "format": "csv"}),
        )
        .await;
    let export = export.body["exportId"].as_str().unwrap().to_owned();
    let key: String = sqlx::query_scalar(
        "SELECT 'key_' || replace(id::text, '-', '') FROM api_keys WHERE org_id = $1",
    )
    .bind(theirs.id)
    .fetch_one(&app.db)
    .await
    .unwrap();
    let their_admin =
        DashboardClient::signed_in(&app, theirs.id, "boss@example.com", role("admin")).await;
    let account: String = sqlx::query_scalar(
        "SELECT 'acc_' || replace(id::text, '-', '') FROM dashboard_accounts WHERE org_id = $1",
    )
    .bind(theirs.id)
    .fetch_one(&app.db)
    .await
    .unwrap();
    drop(their_admin);

    for path in [
        format!("/dashboard/flows/{flow}"),
        format!("/dashboard/webhooks/{endpoint}"),
        format!("/dashboard/webhooks/{endpoint}/edit"),
        format!("/dashboard/webhooks/{endpoint}/deliveries/{delivery}"),
        format!("/dashboard/webhooks/{endpoint}/recover?since=2020-01-01T00:00"),
        format!("/dashboard/exports/{export}"),
        format!("/dashboard/exports/{export}/download"),
        "/dashboard/flows/flow_not_an_id".to_owned(),
        "/dashboard/webhooks/whe_00000000000000000000000000000000".to_owned(),
    ] {
        let page = client.get(&path).await;
        assert_eq!(page.status, 404, "GET {path}: {}", page.body);
    }
    let before = counts(&app).await;
    for (path, form) in [
        (format!("/dashboard/settings/api-keys/{key}/revoke"), vec![]),
        (
            format!("/dashboard/settings/api-keys/{key}/roll"),
            vec![("expires_in", "now")],
        ),
        (format!("/dashboard/settings/team/{account}/link"), vec![]),
        (
            format!("/dashboard/webhooks/{endpoint}/edit"),
            vec![("url", "http://127.0.0.1:1/y")],
        ),
        (format!("/dashboard/webhooks/{endpoint}/rotate"), vec![]),
        (format!("/dashboard/webhooks/{endpoint}/test"), vec![]),
        (
            format!("/dashboard/webhooks/{endpoint}/recover"),
            vec![("since", "2020-01-01T00:00")],
        ),
        (
            format!("/dashboard/webhooks/{endpoint}/deliveries/{delivery}/resend"),
            vec![],
        ),
        (format!("/dashboard/webhooks/{endpoint}/delete"), vec![]),
        (format!("/dashboard/schedules/{schedule}/cancel"), vec![]),
        (
            format!("/dashboard/flows/{flow}/exports"),
            vec![("format", "csv")],
        ),
    ] {
        let page = client.post_form(&path, &form).await;
        assert_eq!(page.status, 404, "POST {path}: {}", page.body);
    }
    // Assigning their flow from my dashboard finds no such flow.
    let assign = client
        .post_form(
            "/dashboard/assign",
            &[("flow", &flow), ("email", "their@example.com")],
        )
        .await;
    assert_eq!(assign.status, 404);
    assert!(assign.body.contains("flow not found"), "{}", assign.body);
    assert_eq!(counts(&app).await, before, "nothing of theirs changed");
    assert_eq!(count(&app, "SELECT count(*) FROM exports").await, 1);
}

#[tokio::test]
async fn every_value_is_html_escaped() {
    let app = TestApp::spawn().await;
    let receiver = Receiver::start().await.expect("webhook receiver");
    let (org, client) = org_with_admin(&app).await;
    let evil = "<script>alert(1)</script>";
    let flow = app.create_flow(&org, evil, &[10]).await;
    let response = app
        .post(
            &org,
            "/v1/users",
            &json!({"email": "evil@example.com", "name": "<img src=x onerror=alert(2)>"}),
        )
        .await;
    assert_eq!(response.status, 201);
    let created = app
        .post(
            &org,
            "/v1/webhooks",
            &json!({"url": receiver.url("x"), "description": "\"><script>alert(3)</script>"}),
        )
        .await;
    let endpoint = created.body["webhookId"].as_str().unwrap().to_owned();
    let generated = client
        .post_form(
            "/dashboard/settings/api-keys",
            &[("name", "'\"><b onmouseover=alert(4)>")],
        )
        .await;
    assert_eq!(generated.status, 200);
    app.assign_persisted(&org, &flow, "evil@example.com", json!({"notes": evil}))
        .await;

    for path in [
        "/dashboard/flows".to_owned(),
        format!("/dashboard/flows/{flow}"),
        "/dashboard/users".to_owned(),
        "/dashboard/assign".to_owned(),
        "/dashboard/webhooks".to_owned(),
        format!("/dashboard/webhooks/{endpoint}"),
        "/dashboard/settings/api-keys".to_owned(),
        "/dashboard/settings/audit".to_owned(),
    ] {
        let html = client.page(&path).await;
        for raw in ["<script>alert", "<img src=x", "<b onmouseover"] {
            assert!(!html.contains(raw), "{path} contains raw {raw}");
        }
    }
    let flows = client.page("/dashboard/flows").await;
    assert!(
        flows.contains("&#60;script&#62;alert(1)&#60;/script&#62;"),
        "shown as text"
    );
    let users = client.page("/dashboard/users").await;
    assert!(users.contains("&#60;img src=x onerror=alert(2)&#62;"));
    // A search term goes back into the page escaped as well.
    let search = client.page("/dashboard/users?search=%3Cscript%3E").await;
    assert!(!search.contains("<script>"));
    assert!(search.contains("&#60;script&#62;"));
}

#[tokio::test]
async fn pages_allow_no_inline_script_or_style() {
    let app = TestApp::spawn().await;
    let (org, client) = org_with_admin(&app).await;
    let flow = app.create_flow(&org, "Onboarding", &[10, 20]).await;
    for path in [
        "/dashboard/sign-in".to_owned(),
        "/dashboard".to_owned(),
        "/dashboard/flows".to_owned(),
        format!("/dashboard/flows/{flow}"),
        "/dashboard/assign".to_owned(),
        "/dashboard/users".to_owned(),
        "/dashboard/schedules".to_owned(),
        "/dashboard/webhooks".to_owned(),
        "/dashboard/webhooks/new".to_owned(),
        "/dashboard/settings/api-keys".to_owned(),
        "/dashboard/settings/team".to_owned(),
        "/dashboard/settings/audit".to_owned(),
        "/dashboard/no-such-page".to_owned(),
    ] {
        let page = client.get(&path).await;
        let policy = page
            .header("content-security-policy")
            .expect("a CSP")
            .to_owned();
        assert!(policy.contains("script-src 'self'"), "{policy}");
        assert!(policy.contains("style-src 'self'"), "{policy}");
        assert!(policy.contains("frame-ancestors 'none'"));
        assert!(!policy.contains("unsafe"), "{policy}");
        assert_eq!(page.header("x-frame-options"), Some("DENY"));
        assert_eq!(page.header("cache-control"), Some("no-store"));
        let html = page.body.to_lowercase();
        let mut rest = html.as_str();
        while let Some(start) = rest.find("<script") {
            let tag = &rest[start..start + rest[start..].find('>').unwrap()];
            assert!(
                tag.contains(" src=\"/dashboard/assets/"),
                "{path}: inline script {tag}"
            );
            rest = &rest[start + 7..];
        }
        assert!(!html.contains(" style="), "{path} has an inline style");
        assert!(!html.contains("<style"), "{path} has a style element");
        assert!(
            !html.contains(" onclick=")
                && !html.contains(" onsubmit=")
                && !html.contains(" onload="),
            "{path} has an inline handler"
        );
    }
    for asset in ["app.css", "app.js", "htmx.min.js"] {
        let page = DashboardClient::new(&app)
            .get(&format!("/dashboard/assets/{asset}"))
            .await;
        assert_eq!(page.status, 200, "{asset}");
        assert!(!page.body.is_empty());
    }
}

#[tokio::test]
async fn a_generated_key_works_until_it_is_revoked() {
    let app = TestApp::spawn().await;
    let (_org, client) = org_with_admin(&app).await;
    let generated = client
        .post_form("/dashboard/settings/api-keys", &[("name", "HR sync")])
        .await;
    assert_eq!(generated.status, 200);
    let secret = between(&generated.body, "<code id=\"new-key-secret\">", "</code>")
        .expect("the secret is shown")
        .to_owned();
    assert!(secret.starts_with("fsk_"));
    let call = |key: String| {
        let app = &app;
        async move {
            app.request(reqwest::Method::GET, "/v1/flows", Some(&key), None, &[])
                .await
                .status
        }
    };
    assert_eq!(call(secret.clone()).await, 200);

    // The list shows it, never its secret again.
    let list = client.page("/dashboard/settings/api-keys").await;
    assert!(list.contains("HR sync"));
    assert!(list.contains(&secret[..12]));
    assert!(!list.contains(&secret));
    let key_id = between(&list, "data-key=\"", "\"").unwrap().to_owned();

    let empty = client
        .post_form("/dashboard/settings/api-keys", &[("name", "  ")])
        .await;
    assert_eq!(empty.status, 400);
    assert!(empty.body.contains("Give the key a name"));

    let revoked = client
        .post_form(
            &format!("/dashboard/settings/api-keys/{key_id}/revoke"),
            &[],
        )
        .await;
    assert_eq!(revoked.status, 303);
    app.eventually(
        Duration::from_secs(5),
        "the revoked key to be refused",
        || {
            let secret = secret.clone();
            let call = &call;
            async move { (call(secret).await == 401).then_some(()) }
        },
    )
    .await;
    let list = client.page("/dashboard/settings/api-keys").await;
    assert!(list.contains("Revoked"));
    assert!(list.contains("every request with it is refused"));
}

#[tokio::test]
async fn a_rolled_key_keeps_working_until_the_chosen_expiry() {
    let app = TestApp::spawn().await;
    let (org, client) = org_with_admin(&app).await;
    let status = |key: &str| {
        let key = key.to_owned();
        let app = &app;
        async move {
            app.request(reqwest::Method::GET, "/v1/flows", Some(&key), None, &[])
                .await
                .status
        }
    };
    let key_id = |html: &str| between(html, "data-key=\"", "\"").unwrap().to_owned();

    // Rolled with a day of overlap: old and new both work.
    let list = client.page("/dashboard/settings/api-keys").await;
    let old_id = key_id(&list);
    let rolled = client
        .post_form(
            &format!("/dashboard/settings/api-keys/{old_id}/roll"),
            &[("expires_in", "24h")],
        )
        .await;
    assert_eq!(rolled.status, 200, "{}", rolled.body);
    let new_secret = between(&rolled.body, "<code id=\"new-key-secret\">", "</code>")
        .unwrap()
        .to_owned();
    assert!(rolled.body.contains("keeps working until"));
    assert_eq!(status(&org.key).await, 200);
    assert_eq!(status(&new_secret).await, 200);
    let expiry_hours: f64 = sqlx::query_scalar(
        "SELECT extract(epoch FROM expires_at - now())::float8 / 3600 FROM api_keys WHERE org_id = $1 AND expires_at IS NOT NULL",
    )
    .bind(org.id)
    .fetch_one(&app.db)
    .await
    .unwrap();
    assert!((23.9..=24.0).contains(&expiry_hours), "{expiry_hours}");

    // Rolled with "now": the old key stops at once, on every replica.
    let list = client.page("/dashboard/settings/api-keys").await;
    let new_id = between(&list, "data-key=\"", "\"").unwrap().to_owned();
    let now = client
        .post_form(
            &format!("/dashboard/settings/api-keys/{new_id}/roll"),
            &[("expires_in", "now")],
        )
        .await;
    assert_eq!(now.status, 200);
    let newest = between(&now.body, "<code id=\"new-key-secret\">", "</code>")
        .unwrap()
        .to_owned();
    app.eventually(Duration::from_secs(5), "the rolled key to stop", || async {
        (status(&new_secret).await == 401).then_some(())
    })
    .await;
    assert_eq!(status(&newest).await, 200);
    assert_eq!(
        status(&org.key).await,
        200,
        "the first key still has its day"
    );

    // A key already cached by the API stops at its expiry without a notification.
    let newest_id = flow_common::db::keys::list(&app.db, org.id)
        .await
        .unwrap()
        .into_iter()
        .find(|key| key.revoked_at.is_none() && key.expires_at.is_none())
        .expect("the newest key")
        .id;
    let mut transaction = app.db.begin().await.unwrap();
    flow_common::db::keys::roll(&mut transaction, org.id, newest_id, Duration::from_secs(2))
        .await
        .unwrap()
        .expect("rolled");
    transaction.commit().await.unwrap();
    assert_eq!(status(&newest).await, 200, "cached with its expiry");
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    assert_eq!(
        status(&newest).await,
        401,
        "refused at its expiry although cached"
    );
}

#[tokio::test]
async fn the_audit_log_shows_key_and_endpoint_changes_from_everywhere() {
    let app = TestApp::spawn().await;
    let receiver = Receiver::start().await.expect("webhook receiver");
    let (org, client) = org_with_admin(&app).await;
    // Dashboard: generate and revoke a key.
    let generated = client
        .post_form("/dashboard/settings/api-keys", &[("name", "dash key")])
        .await;
    assert_eq!(generated.status, 200);
    let list = client.page("/dashboard/settings/api-keys").await;
    let dash_key = between(&list, "data-key=\"", "\"").unwrap().to_owned();
    client
        .post_form(
            &format!("/dashboard/settings/api-keys/{dash_key}/revoke"),
            &[],
        )
        .await;
    // API: create, change, rotate, delete an endpoint.
    let endpoint = create_endpoint(&app, &org, &receiver.url("audit")).await;
    let patched = app
        .request(
            reqwest::Method::PATCH,
            &format!("/v1/webhooks/{endpoint}"),
            Some(&org.key),
            Some(&json!({"description": "changed"})),
            &[],
        )
        .await;
    assert_eq!(patched.status, 200);
    app.post(
        &org,
        &format!("/v1/webhooks/{endpoint}/rotate-secret"),
        &json!({}),
    )
    .await;
    let deleted = app
        .request(
            reqwest::Method::DELETE,
            &format!("/v1/webhooks/{endpoint}"),
            Some(&org.key),
            None,
            &[],
        )
        .await;
    assert_eq!(deleted.status, 204);
    // flowctl: create and revoke a key.
    let core = app.core.clone();
    flowctl::admin::key(
        &core,
        flowctl::admin::KeyCommand::Create {
            org: org.id.to_string(),
            name: "ops key".into(),
        },
    )
    .await
    .unwrap();
    let ops_key: String = sqlx::query_scalar(
        "SELECT 'key_' || replace(id::text, '-', '') FROM api_keys WHERE name = 'ops key'",
    )
    .fetch_one(&app.db)
    .await
    .unwrap();
    flowctl::admin::key(
        &core,
        flowctl::admin::KeyCommand::Revoke {
            key: ops_key.clone(),
        },
    )
    .await
    .unwrap();

    let audit = client.page("/dashboard/settings/audit").await;
    let prefix = &org.key[..12];
    let rows: Vec<&str> = audit.split("<tr>").skip(2).collect();
    let row_with = |action: &str, actor: &str| {
        rows.iter()
            .any(|row| row.contains(action) && row.contains(actor))
    };
    let account = format!("admin-{}@example.com", org.id);
    assert!(row_with("Generated an API key", &account), "{audit}");
    assert!(row_with("Revoked an API key", &account));
    assert!(row_with("Created a webhook endpoint", prefix));
    assert!(row_with("Changed a webhook endpoint", prefix));
    assert!(row_with("Rotated a webhook signing secret", prefix));
    assert!(row_with("Deleted a webhook endpoint", prefix));
    assert!(row_with("Generated an API key", "flowctl"));
    assert!(row_with("Revoked an API key", "flowctl"));
    assert!(audit.contains(&ops_key));
    // Newest first: the flowctl revocation leads.
    assert!(rows[0].contains("Revoked an API key") && rows[0].contains("flowctl"));
}

#[tokio::test]
async fn the_audit_log_fails_on_an_action_this_build_does_not_know() {
    let app = TestApp::spawn().await;
    let (org, client) = org_with_admin(&app).await;
    assert_eq!(client.get("/dashboard/settings/audit").await.status, 200);
    // A row a newer build wrote (or a hand-made one): the log is not shown with the raw name or
    // a guess in its place; the read fails naming the action, and the page is a 500.
    sqlx::query(
        "INSERT INTO audit_events (org_id, actor_kind, actor, action, target, detail)
         VALUES ($1, 'flowctl', 'flowctl', 'key.exported', 'key_x', 'a key')",
    )
    .bind(org.id)
    .execute(&app.db)
    .await
    .unwrap();
    let error = flow_common::db::audit::list(&app.db, org.id, Default::default(), None, 10)
        .await
        .unwrap_err();
    assert!(
        error
            .to_string()
            .contains("unknown AuditAction \"key.exported\" in the database"),
        "{error}"
    );
    let page = client.get("/dashboard/settings/audit").await;
    assert_eq!(page.status, 500, "{}", page.body);
    assert!(!page.body.contains("key.exported"), "{}", page.body);
}

#[tokio::test]
async fn webhook_endpoints_are_managed_with_the_api_address_policy() {
    let app = TestApp::spawn_with(TestOptions {
        strict_webhook_policy: true,
        ..TestOptions::default()
    })
    .await;
    let (_org, client) = org_with_admin(&app).await;
    let empty = client.page("/dashboard/webhooks").await;
    assert!(empty.contains("No endpoints yet"));
    let refused = client
        .post_form(
            "/dashboard/webhooks",
            &[
                ("url", "https://127.0.0.1/hook"),
                ("events", "flow.completed"),
                ("description", "local"),
            ],
        )
        .await;
    assert_eq!(refused.status, 400);
    assert!(
        refused.body.contains("id=\"url-error\""),
        "the error is next to the URL: {}",
        refused.body
    );
    assert!(
        refused.body.contains("value=\"local\""),
        "what was typed stays"
    );
    let plain = client
        .post_form(
            "/dashboard/webhooks",
            &[("url", "http://hooks.example.com/x")],
        )
        .await;
    assert_eq!(plain.status, 400);
    let bad_event = client
        .post_form(
            "/dashboard/webhooks",
            &[
                ("url", "https://93.184.215.14/x"),
                ("events", "flow.exploded"),
            ],
        )
        .await;
    assert_eq!(bad_event.status, 400);
    assert!(bad_event.body.contains("Choose among"));
    assert_eq!(
        count(&app, "SELECT count(*) FROM webhook_endpoints").await,
        0
    );

    let created = client
        .post_form(
            "/dashboard/webhooks",
            &[
                ("url", "https://93.184.215.14/flow"),
                ("events", "flow.completed"),
                ("events", "flow.overdue"),
                ("description", "HR system"),
            ],
        )
        .await;
    assert_eq!(created.status, 200, "{}", created.body);
    let secret = between(&created.body, "<code id=\"endpoint-secret\">", "</code>")
        .unwrap()
        .to_owned();
    assert!(secret.starts_with("whsec_"));
    // Beside the secret: how to verify a delivery with the stock libraries.
    let snippet = between(
        &created.body,
        "<section class=\"card\" id=\"verify-snippet\">",
        "</section>",
    )
    .expect("the verification snippet");
    for needed in [
        "pip install standardwebhooks",
        "npm install standardwebhooks",
        ".verify(",
    ] {
        assert!(snippet.contains(needed), "{needed}: {snippet}");
    }
    let (id, events): (flow_domain::ids::WebhookEndpointId, Vec<String>) =
        sqlx::query_as("SELECT id, events FROM webhook_endpoints")
            .fetch_one(&app.db)
            .await
            .unwrap();
    assert_eq!(events, vec!["flow.completed", "flow.overdue"]);
    let page = client.page(&format!("/dashboard/webhooks/{id}")).await;
    assert!(page.contains("flow.completed, flow.overdue"));
    assert!(!page.contains(&secret), "the secret is not shown again");

    let edited = client
        .post_form(
            &format!("/dashboard/webhooks/{id}/edit"),
            &[("url", "https://93.184.215.14/flow2"), ("description", "")],
        )
        .await;
    assert_eq!(edited.status, 303);
    let (url, enabled, events): (String, bool, Vec<String>) =
        sqlx::query_as("SELECT url, enabled, events FROM webhook_endpoints")
            .fetch_one(&app.db)
            .await
            .unwrap();
    assert_eq!(url, "https://93.184.215.14/flow2");
    assert!(!enabled, "the unticked box disables it");
    assert!(events.is_empty(), "no event ticked means all");
    let disabled = client.page(&format!("/dashboard/webhooks/{id}")).await;
    assert!(disabled.contains("Events are not delivered until it is enabled again"));

    let rotated = client
        .post_form(&format!("/dashboard/webhooks/{id}/rotate"), &[])
        .await;
    assert_eq!(rotated.status, 200);
    let new_secret = between(&rotated.body, "<code id=\"endpoint-secret\">", "</code>").unwrap();
    assert_ne!(new_secret, secret);
    assert!(
        rotated
            .body
            .contains("signed with both the old and the new secret")
    );

    let deleted = client
        .post_form(&format!("/dashboard/webhooks/{id}/delete"), &[])
        .await;
    assert_eq!(deleted.status, 303);
    assert_eq!(
        count(&app, "SELECT count(*) FROM webhook_endpoints").await,
        0
    );
}

async fn endpoint_with_receiver(
    client: &DashboardClient,
    app: &TestApp,
    receiver: &Receiver,
    path: &str,
) -> String {
    let created = client
        .post_form("/dashboard/webhooks", &[("url", &receiver.url(path))])
        .await;
    assert_eq!(created.status, 200, "{}", created.body);
    let id: flow_domain::ids::WebhookEndpointId =
        sqlx::query_scalar("SELECT id FROM webhook_endpoints WHERE url = $1")
            .bind(receiver.url(path))
            .fetch_one(&app.db)
            .await
            .unwrap();
    id.to_string()
}

async fn delivery_statuses(app: &TestApp, endpoint: &str) -> Vec<String> {
    let id = flow_domain::ids::WebhookEndpointId::parse(endpoint).unwrap();
    sqlx::query_scalar(
        "SELECT status FROM webhook_deliveries WHERE endpoint_id = $1 ORDER BY created_at",
    )
    .bind(id)
    .fetch_all(&app.db)
    .await
    .unwrap()
}

#[tokio::test]
async fn the_delivery_log_filters_searches_and_pages() {
    let app = TestApp::spawn_with(TestOptions {
        webhooks: true,
        ..TestOptions::default()
    })
    .await;
    let receiver = Receiver::start().await.expect("webhook receiver");
    let (org, client) = org_with_admin(&app).await;
    let endpoint = endpoint_with_receiver(&client, &app, &receiver, "log").await;
    // Three test events that fail for good, then 25 that succeed, then an assignment event.
    receiver.set("log", Behaviour::Status(500));
    for _ in 0..3 {
        assert_eq!(
            client
                .post_form(&format!("/dashboard/webhooks/{endpoint}/test"), &[])
                .await
                .status,
            303
        );
    }
    app.eventually(
        Duration::from_secs(20),
        "three failed deliveries",
        || async {
            (delivery_statuses(&app, &endpoint)
                .await
                .iter()
                .filter(|status| *status == "failed")
                .count()
                == 3)
                .then_some(())
        },
    )
    .await;
    receiver.set("log", Behaviour::Succeed);
    for _ in 0..25 {
        client
            .post_form(&format!("/dashboard/webhooks/{endpoint}/test"), &[])
            .await;
    }
    app.create_users(&org, &["ann@example.com"]).await;
    let flow = app.create_flow(&org, "Log flow", &[5]).await;
    let assignment = app
        .assign_persisted(&org, &flow, "ann@example.com", json!({}))
        .await;
    app.eventually(
        Duration::from_secs(20),
        "every delivery to succeed",
        || async {
            let statuses = delivery_statuses(&app, &endpoint).await;
            (statuses.len() == 29
                && statuses
                    .iter()
                    .filter(|status| *status == "succeeded")
                    .count()
                    == 26)
                .then_some(())
        },
    )
    .await;

    let base = format!("/dashboard/webhooks/{endpoint}");
    let first = client.page(&base).await;
    assert_eq!(
        first.matches("data-delivery=").count(),
        25,
        "a page holds 25"
    );
    assert!(first.contains("flow.assigned"), "newest first");
    let older = href_before(&first, "id=\"older\"");
    let second = client.page(&older).await;
    assert_eq!(second.matches("data-delivery=").count(), 4);
    assert!(!second.contains("id=\"older\""));

    let failed = client.page(&format!("{base}?status=failed")).await;
    assert_eq!(failed.matches("data-status=\"failed\"").count(), 3);
    assert_eq!(failed.matches("data-delivery=").count(), 3);
    let both = client
        .page(&format!(
            "{base}?status=failed&status=succeeded&event=flow.assigned"
        ))
        .await;
    assert_eq!(
        both.matches("data-delivery=").count(),
        1,
        "status and event filters combine"
    );
    let tests_only = client
        .page(&format!("{base}?event=webhook.test&status=succeeded"))
        .await;
    assert_eq!(tests_only.matches("data-delivery=").count(), 25);

    let by_assignment = client.page(&format!("{base}?search={assignment}")).await;
    assert_eq!(by_assignment.matches("data-delivery=").count(), 1);
    assert!(by_assignment.contains("data-event-type=\"flow.assigned\""));
    let event_id = between(&by_assignment, "<div class=\"mono muted small\">", "</div>")
        .unwrap()
        .to_owned();
    let by_event = client.page(&format!("{base}?search={event_id}")).await;
    assert_eq!(by_event.matches("data-delivery=").count(), 1);

    let future = client.page(&format!("{base}?from=2099-01-01T00:00")).await;
    assert_eq!(future.matches("data-delivery=").count(), 0);
    assert!(future.contains("No deliveries match"));
    let past = client.page(&format!("{base}?to=2000-01-01T00:00")).await;
    assert_eq!(past.matches("data-delivery=").count(), 0);
    let bad = client
        .get(&format!("{base}?search=nonsense&from=yesterday"))
        .await;
    assert_eq!(bad.status, 400);
    assert!(bad.body.contains("Search by an event id"));
    assert!(bad.body.contains("not a date and time"));

    // A delivery opens to its attempts.
    let delivery = between(&by_assignment, "data-delivery=\"", "\"")
        .unwrap()
        .to_owned();
    let detail = client.page(&format!("{base}/deliveries/{delivery}")).await;
    assert!(detail.contains("data-status-code=\"200\""), "{detail}");
    assert!(detail.contains(&assignment));
    let failed_one = between(&failed, "data-delivery=\"", "\"")
        .unwrap()
        .to_owned();
    let failed_detail = client
        .page(&format!("{base}/deliveries/{failed_one}"))
        .await;
    assert_eq!(
        failed_detail.matches("data-status-code=\"500\"").count(),
        5,
        "every attempt is listed"
    );

    // The endpoint's health over 24 hours: 26 good attempts of 41.
    let list = client.page("/dashboard/webhooks").await;
    assert!(list.contains("63.4%"), "{list}");
    assert!(list.contains("41 attempts"));
    assert!(list.contains("HTTP 500"));
}

#[tokio::test]
async fn a_delivery_can_be_resent_and_failed_ones_recovered_after_counting_them() {
    let app = TestApp::spawn_with(TestOptions {
        webhooks: true,
        ..TestOptions::default()
    })
    .await;
    let receiver = Receiver::start().await.expect("webhook receiver");
    let (_org, client) = org_with_admin(&app).await;
    let endpoint = endpoint_with_receiver(&client, &app, &receiver, "recover").await;
    receiver.set("recover", Behaviour::Status(503));
    for _ in 0..4 {
        client
            .post_form(&format!("/dashboard/webhooks/{endpoint}/test"), &[])
            .await;
    }
    app.eventually(
        Duration::from_secs(30),
        "four failed deliveries",
        || async {
            (delivery_statuses(&app, &endpoint)
                .await
                .iter()
                .filter(|status| *status == "failed")
                .count()
                == 4)
                .then_some(())
        },
    )
    .await;
    receiver.set("recover", Behaviour::Succeed);

    // Resend one.
    let failed = client
        .page(&format!("/dashboard/webhooks/{endpoint}?status=failed"))
        .await;
    let one = between(&failed, "data-delivery=\"", "\"")
        .unwrap()
        .to_owned();
    let resent = client
        .post_form(
            &format!("/dashboard/webhooks/{endpoint}/deliveries/{one}/resend"),
            &[],
        )
        .await;
    assert_eq!(resent.status, 303);
    receiver
        .wait_for_deliveries("recover", 1, Duration::from_secs(10))
        .await;

    // Count the rest since an hour ago, then recover them.
    let since = (chrono::Utc::now() - chrono::Duration::hours(1))
        .format("%Y-%m-%dT%H:%M")
        .to_string();
    let preview = client
        .page(&format!(
            "/dashboard/webhooks/{endpoint}/recover?since={since}"
        ))
        .await;
    assert!(preview.contains("3 failed deliveries since"), "{preview}");
    assert_eq!(
        delivery_statuses(&app, &endpoint)
            .await
            .iter()
            .filter(|s| *s == "failed")
            .count(),
        3,
        "counting changes nothing"
    );
    let later = (chrono::Utc::now() + chrono::Duration::hours(1))
        .format("%Y-%m-%dT%H:%M")
        .to_string();
    let none = client
        .page(&format!(
            "/dashboard/webhooks/{endpoint}/recover?since={later}"
        ))
        .await;
    assert!(none.contains("Nothing to recover"));
    let recovered = client
        .post_form(
            &format!("/dashboard/webhooks/{endpoint}/recover"),
            &[("since", &since)],
        )
        .await;
    assert_eq!(recovered.status, 303);
    let page = client
        .page(&format!("/dashboard/webhooks/{endpoint}"))
        .await;
    assert!(page.contains("3 failed deliveries are queued for another attempt."));
    receiver
        .wait_for_deliveries("recover", 4, Duration::from_secs(10))
        .await;
    app.eventually(
        Duration::from_secs(10),
        "every delivery to succeed",
        || async {
            delivery_statuses(&app, &endpoint)
                .await
                .iter()
                .all(|status| status == "succeeded")
                .then_some(())
        },
    )
    .await;
    let audit = client.page("/dashboard/settings/audit").await;
    assert!(audit.contains("Recovered failed webhook deliveries"));
    assert!(audit.contains("3 failed since"));
}

#[tokio::test]
async fn the_assign_form_takes_the_api_path_with_errors_beside_the_fields() {
    let app = TestApp::spawn().await;
    let (org, client) = org_with_admin(&app).await;
    app.create_users(&org, &["Ada@Example.com"]).await;
    let flow = app.create_flow(&org, "Security Basics", &[30, 45]).await;
    let form = client.page("/dashboard/assign").await;
    assert!(form.contains("Security Basics"));
    let request_id = between(&form, "name=\"request_id\" value=\"", "\"")
        .unwrap()
        .to_owned();

    let unknown = client
        .post_form(
            "/dashboard/assign",
            &[
                ("flow", &flow),
                ("email", "nobody@example.com"),
                ("request_id", &request_id),
            ],
        )
        .await;
    assert_eq!(unknown.status, 404);
    assert!(unknown.body.contains("id=\"email-error\""));
    assert!(
        unknown
            .body
            .contains("user nobody@example.com not found in this organization")
    );
    let past = client
        .post_form(
            "/dashboard/assign",
            &[
                ("flow", &flow),
                ("email", "ada@example.com"),
                ("due_date", "2001-01-01"),
            ],
        )
        .await;
    assert_eq!(past.status, 400);
    assert!(past.body.contains("id=\"due-date-error\""));
    assert!(past.body.contains("Due date must be in the future"));
    assert!(
        past.body.contains("value=\"ada@example.com\""),
        "what was typed stays"
    );
    let no_flow = client
        .post_form(
            "/dashboard/assign",
            &[("flow", ""), ("email", "ada@example.com")],
        )
        .await;
    assert_eq!(no_flow.status, 400);
    assert!(no_flow.body.contains("Flow is required"));
    assert_eq!(app.assignment_count().await, 0);

    let fields = [
        ("flow", flow.as_str()),
        ("email", "ada@example.com"),
        ("due_date", "2099-12-31"),
        ("priority", "high"),
        ("notes", "Before the audit"),
        ("request_id", request_id.as_str()),
    ];
    let assigned = client.post_form("/dashboard/assign", &fields).await;
    assert_eq!(assigned.status, 303, "{}", assigned.body);
    let page = client.page("/dashboard/assign").await;
    assert!(
        page.contains("Flow &#34;Security Basics&#34; assigned to Ada@Example.com"),
        "{page}"
    );
    // Sending the same form again (a double click) assigns once.
    assert_eq!(
        client.post_form("/dashboard/assign", &fields).await.status,
        303
    );
    app.eventually(
        Duration::from_secs(10),
        "the assignment to be persisted",
        || async { (app.assignment_count().await == 1).then_some(()) },
    )
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(app.assignment_count().await, 1);
    let (priority, notes, request): (String, Option<String>, Option<String>) =
        sqlx::query_as("SELECT priority, notes, request_id FROM assignments")
            .fetch_one(&app.db)
            .await
            .unwrap();
    assert_eq!(priority, "high");
    assert_eq!(notes.as_deref(), Some("Before the audit"));
    assert_eq!(request.as_deref(), Some(request_id.as_str()));
}

#[tokio::test]
async fn a_csv_upload_refuses_a_flow_name_that_several_flows_have() {
    let app = TestApp::spawn().await;
    let (org, client) = org_with_admin(&app).await;
    app.create_users(&org, &["a@example.com", "b@example.com"])
        .await;
    let first = app.create_flow(&org, "Onboarding", &[30]).await;
    app.create_flow(&org, "onboarding", &[20]).await;
    let csv = format!(
        "email,flow\n\
         a@example.com,Onboarding\n\
         b@example.com,{first}\n"
    );
    let results = client
        .post_file(
            "/dashboard/assign/upload",
            &[("flow", "")],
            "team.csv",
            csv.as_bytes(),
        )
        .await;
    assert_eq!(results.status, 200, "{}", results.body);
    let rows: Vec<&str> = results.body.split("<tr class=").skip(1).collect();
    assert_eq!(rows.len(), 2);
    assert!(
        rows[0].starts_with("\"failed\"") && rows[0].contains("2 flows are named"),
        "{}",
        rows[0]
    );
    assert!(rows[1].starts_with("\"ok\""), "{}", rows[1]);
    // Only the row naming the flow by its id made an assignment.
    app.eventually(
        std::time::Duration::from_secs(10),
        "the one assignment",
        || async { (app.assignment_count().await == 1).then_some(()) },
    )
    .await;
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_eq!(app.assignment_count().await, 1);
}

#[tokio::test]
async fn a_csv_upload_assigns_each_row_with_its_own_result() {
    let app = TestApp::spawn().await;
    let (org, client) = org_with_admin(&app).await;
    app.create_users(&org, &["a@example.com", "b@example.com", "c@example.com"])
        .await;
    let security = app.create_flow(&org, "Security Basics", &[30]).await;
    let privacy = app.create_flow(&org, "Data Privacy", &[20]).await;
    let csv = format!(
        "email,flow,dueDate,priority\n\
         a@example.com,security basics,2099-01-31,high\n\
         b@example.com,{privacy},,\n\
         c@example.com,,,\n\
         ghost@example.com,Data Privacy,,\n\
         a@example.com,Data Privacy,,urgent\n\
         b@example.com,No Such Flow,,\n"
    );
    let results = client
        .post_file(
            "/dashboard/assign/upload",
            &[("flow", &security)],
            "team.csv",
            csv.as_bytes(),
        )
        .await;
    assert_eq!(results.status, 200, "{}", results.body);
    let html = results.body;
    assert!(html.contains("Results of team.csv"));
    assert!(html.contains("<strong>3</strong> assigned"), "{html}");
    assert!(html.contains("<strong>3</strong> not assigned"));
    let rows: Vec<&str> = html.split("<tr class=").skip(1).collect();
    assert_eq!(rows.len(), 6);
    assert!(rows[0].starts_with("\"ok\"") && rows[0].contains("Security Basics"));
    assert!(rows[1].starts_with("\"ok\"") && rows[1].contains("Data Privacy"));
    assert!(
        rows[2].starts_with("\"ok\"") && rows[2].contains("Security Basics"),
        "the form's flow fills in"
    );
    assert!(
        rows[3].starts_with("\"failed\"") && rows[3].contains("user ghost@example.com not found")
    );
    assert!(
        rows[4].starts_with("\"failed\"")
            && rows[4].contains("Priority must be one of: low, medium, high")
    );
    assert!(rows[5].starts_with("\"failed\"") && rows[5].contains("flow not found"));
    app.eventually(Duration::from_secs(10), "three assignments", || async {
        (app.assignment_count().await == 3).then_some(())
    })
    .await;

    let no_email = client
        .post_file("/dashboard/assign/upload", &[], "bad.csv", b"name\nx\n")
        .await;
    assert_eq!(no_email.status, 400);
    assert!(no_email.body.contains("needs an `email` column"));
}

#[tokio::test]
async fn users_are_searched_and_imported_with_errors_per_row() {
    let app = TestApp::spawn().await;
    let (org, client) = org_with_admin(&app).await;
    let empty = client.page("/dashboard/users").await;
    assert!(empty.contains("No users yet"));
    let imported = client
        .post_file(
            "/dashboard/users",
            &[],
            "people.csv",
            b"email,name\nalice@example.com,Alice Martin\nbob@example.com,Bob\nbroken-address,Carol\nALICE@example.com,Alice M.\n",
        )
        .await;
    assert_eq!(imported.status, 200, "{}", imported.body);
    assert!(
        imported.body.contains("<strong>2</strong> new"),
        "{}",
        imported.body
    );
    assert!(
        imported
            .body
            .contains("<strong>1</strong> rows not imported")
    );
    let problems = between(&imported.body, "id=\"import-problems\"", "</table>").unwrap();
    assert!(problems.contains("<td class=\"num\">4</td>"), "{problems}");
    assert!(problems.contains("broken-address"));
    let name: String = sqlx::query_scalar(
        "SELECT name FROM users WHERE email_normalized = 'alice@example.com' AND org_id = $1",
    )
    .bind(org.id)
    .fetch_one(&app.db)
    .await
    .unwrap();
    assert_eq!(name, "Alice M.", "the last row for a person wins");

    let found = client.page("/dashboard/users?search=MARTIN").await;
    assert!(!found.contains("bob@example.com"));
    let by_email = client.page("/dashboard/users?search=bob@").await;
    assert!(by_email.contains("bob@example.com") && !by_email.contains("alice@example.com"));
    let nobody = client.page("/dashboard/users?search=zzz").await;
    assert!(nobody.contains("No one matches"));
}

#[tokio::test]
async fn schedules_are_listed_and_cancelled() {
    let app = TestApp::spawn().await;
    let (org, client) = org_with_admin(&app).await;
    app.create_users(&org, &["sid@example.com"]).await;
    let flow = app.create_flow(&org, "Fire Drill", &[15]).await;
    let created = app
        .post(
            &org,
            "/v1/flows/schedule",
            &json!({"flowId": flow, "userEmail": "sid@example.com", "scheduledAt": "2099-03-31T09:00:00Z", "recurrence": "quarterly", "dueInDays": 14}),
        )
        .await;
    assert_eq!(created.status, 201);
    let id = created.body["scheduleId"].as_str().unwrap().to_owned();
    let list = client.page("/dashboard/schedules").await;
    assert!(list.contains("Fire Drill") && list.contains("sid@example.com"));
    assert!(list.contains("Quarterly") && list.contains("14 days after"));
    assert!(list.contains("2099-03-31 09:00"));
    let cancelled = client
        .post_form(&format!("/dashboard/schedules/{id}/cancel"), &[])
        .await;
    assert_eq!(cancelled.status, 303);
    let after = client.page("/dashboard/schedules").await;
    assert!(after.contains("The schedule is cancelled"));
    assert!(after.contains("No schedules"));
    let gone = app.get(&org, &format!("/v1/schedules/{id}")).await;
    assert_eq!(gone.status, 404);
}

#[tokio::test]
async fn a_flow_page_shows_the_report_chart_and_filtered_assignments() {
    let app = TestApp::spawn().await;
    let (org, client) = org_with_admin(&app).await;
    let emails: Vec<String> = (0..30)
        .map(|index| format!("p{index:02}@example.com"))
        .collect();
    let refs: Vec<&str> = emails.iter().map(String::as_str).collect();
    app.create_users(&org, &refs).await;
    let flow = app.create_flow(&org, "Onboarding", &[10]).await;
    let module = app.module_ids(&org, &flow).await.remove(0);
    let mut ids = Vec::new();
    for email in &emails {
        ids.push(app.assign_persisted(&org, &flow, email, json!({})).await);
    }
    for id in &ids[..6] {
        let done = app
            .post(
                &org,
                &format!("/v1/assignments/{id}/progress"),
                &json!({"moduleId": module, "status": "completed"}),
            )
            .await;
        assert_eq!(done.status, 202);
    }
    for id in &ids[..6] {
        app.wait_for_status(&org, id, "completed").await;
    }
    sqlx::query("UPDATE assignments SET due_at = now() - interval '1 hour' WHERE id = ANY($1)")
        .bind(
            ids[6..8]
                .iter()
                .map(|id| flow_domain::ids::AssignmentId::parse(id).unwrap())
                .collect::<Vec<_>>(),
        )
        .execute(&app.db)
        .await
        .unwrap();

    let list = client.page("/dashboard/flows").await;
    let row = between(&list, &format!("data-flow=\"{flow}\""), "</tr>").unwrap();
    assert!(
        row.contains(">30<") && row.contains("20%") && row.contains(">2<"),
        "{row}"
    );

    let page = client.page(&format!("/dashboard/flows/{flow}")).await;
    assert!(page.contains("id=\"completion-rate\">20%<"), "{page}");
    assert!(page.contains("id=\"metric-total\">30<"));
    assert!(page.contains("id=\"metric-overdue\">2<"));
    let chart = between(&page, "<svg class=\"chart\"", "</svg>").expect("a chart");
    assert!(chart.contains("30 assigned, 6 completed (20%)"), "{chart}");
    assert_eq!(page.matches("data-assignment=").count(), 25, "pages of 25");
    let next = href_before(&page, ">Next →");
    let second = client.page(&next).await;
    assert_eq!(second.matches("data-assignment=").count(), 5);

    let completed = client
        .page(&format!("/dashboard/flows/{flow}?status=completed"))
        .await;
    assert_eq!(completed.matches("data-assignment=").count(), 6);
    let overdue = client
        .page(&format!("/dashboard/flows/{flow}?status=overdue"))
        .await;
    assert_eq!(overdue.matches("data-assignment=").count(), 2);
    let search = client
        .page(&format!("/dashboard/flows/{flow}?email=P1"))
        .await;
    assert_eq!(search.matches("data-assignment=").count(), 10, "p10 … p19");
    let both = client
        .page(&format!(
            "/dashboard/flows/{flow}?email=p0&status=completed"
        ))
        .await;
    assert_eq!(both.matches("data-assignment=").count(), 6);
}

#[tokio::test]
async fn an_export_shows_its_progress_then_downloads() {
    let app = TestApp::spawn().await;
    let (org, client) = org_with_admin(&app).await;
    app.create_users(&org, &["eve@example.com", "fay@example.com"])
        .await;
    let flow = app.create_flow(&org, "Compliance", &[10]).await;
    for email in ["eve@example.com", "fay@example.com"] {
        app.assign_persisted(&org, &flow, email, json!({})).await;
    }
    let requested = client
        .post_form(
            &format!("/dashboard/flows/{flow}/exports"),
            &[("format", "csv"), ("status", "")],
        )
        .await;
    assert_eq!(requested.status, 303, "{}", requested.body);
    let progress_path = requested.location().unwrap().to_owned();
    assert!(progress_path.starts_with("/dashboard/exports/exp_"));
    // No report-worker yet: the export waits, and the page says so and refreshes itself.
    let waiting = client.page(&progress_path).await;
    assert!(waiting.contains("data-status=\"pending\""));
    assert!(waiting.contains("hx-trigger=\"every 1s\""));
    assert!(
        waiting.contains("http-equiv=\"refresh\""),
        "works without JavaScript too"
    );
    let early = client.get(&format!("{progress_path}/download")).await;
    assert_eq!(early.status, 303, "asked too early: back to the progress");
    let _worker = flow_tests::reports::start_report_worker(&app);
    let ready = app
        .eventually(
            Duration::from_secs(20),
            "the export to be ready",
            || async {
                let page = client.page(&progress_path).await;
                page.contains("data-status=\"ready\"").then_some(page)
            },
        )
        .await;
    assert!(ready.contains("Download CSV"));
    // htmx asks for the panel alone.
    let panel = client.get_htmx(&progress_path).await;
    assert!(
        panel.starts_with("<div class=\"card\" id=\"export-panel\""),
        "{panel}"
    );
    let file = client.get(&format!("{progress_path}/download")).await;
    assert_eq!(file.status, 200);
    assert!(file.header("content-type").unwrap().starts_with("text/csv"));
    assert!(
        file.header("content-disposition")
            .unwrap()
            .starts_with("attachment")
    );
    assert!(file.body.contains("eve@example.com") && file.body.contains("fay@example.com"));
    let bad = client
        .post_form(
            &format!("/dashboard/flows/{flow}/exports"),
            &[("format", "docx")],
        )
        .await;
    assert_eq!(bad.status, 400);
}

#[tokio::test]
async fn admins_invite_people_with_a_one_time_link() {
    let app = TestApp::spawn().await;
    let (org, client) = org_with_admin(&app).await;
    let invited = client
        .post_form(
            "/dashboard/settings/team",
            &[("email", "new@example.com"), ("role", "viewer")],
        )
        .await;
    assert_eq!(invited.status, 200, "{}", invited.body);
    let link = between(&invited.body, "<code id=\"sign-in-link\">", "</code>")
        .unwrap()
        .to_owned();
    assert!(link.starts_with(&format!("{}/dashboard/welcome/", app.base_url)));
    let viewer = DashboardClient::with_link(&app, &link, "the viewer's password").await;
    let team = viewer.page("/dashboard/settings/team").await;
    assert!(team.contains("new@example.com") && team.contains("Viewer"));
    let taken = client
        .post_form(
            "/dashboard/settings/team",
            &[("email", "NEW@example.com"), ("role", "admin")],
        )
        .await;
    assert_eq!(taken.status, 409);
    assert!(
        taken
            .body
            .contains("NEW@example.com is already on this team"),
        "{}",
        taken.body
    );
    let bad = client
        .post_form(
            "/dashboard/settings/team",
            &[("email", "not an address"), ("role", "admin")],
        )
        .await;
    assert_eq!(bad.status, 400);
    let accounts: i64 =
        sqlx::query_scalar("SELECT count(*) FROM dashboard_accounts WHERE org_id = $1")
            .bind(org.id)
            .fetch_one(&app.db)
            .await
            .unwrap();
    assert_eq!(accounts, 2);
}

#[tokio::test]
async fn demo_admins_get_a_working_link_even_when_an_earlier_demo_took_the_address() {
    let app = TestApp::spawn().await;
    // The API's context stands in for the one `flowctl demo` opens (its links point at the API).
    let first = flowctl::demo::create(&app.api, 3, "Demo Org", None)
        .await
        .unwrap();
    let second = flowctl::demo::create(&app.api, 3, "Demo Org", None)
        .await
        .unwrap();
    let one = flowctl::demo::create_admin(&app.api, &first).await.unwrap();
    let two = flowctl::demo::create_admin(&app.api, &second)
        .await
        .unwrap();
    assert_eq!(one.email, flowctl::demo::DEMO_ADMIN_EMAIL);
    assert_ne!(two.email, one.email);
    let client = DashboardClient::with_link(&app, &two.link, PASSWORD).await;
    let flows = client.page("/dashboard/flows").await;
    assert!(flows.contains("Security Basics") && flows.contains("New Hire Onboarding"));
}

#[tokio::test]
async fn flowctl_admin_create_refuses_duplicates_and_a_new_link_replaces_the_old_one() {
    let app = TestApp::spawn().await;
    let org = app.create_org(Tier::Standard).await;
    let first = create_account(&app, org.id, "ops@example.com", role("admin")).await;
    let duplicate = flowctl::accounts::create(&app.api, org.id, "OPS@example.com", role("viewer"))
        .await
        .unwrap_err();
    assert!(
        duplicate
            .to_string()
            .contains("already has a dashboard account"),
        "{duplicate}"
    );
    let unknown = flowctl::accounts::create(
        &app.api,
        flow_domain::ids::OrgId::new(),
        "new@example.com",
        role("admin"),
    )
    .await
    .unwrap_err();
    assert!(unknown.to_string().contains("no organization"));
    // An admin issues a new link from the team page: the first one stops working.
    let (_, admin_client) = org_with_admin(&app).await;
    let account: String = sqlx::query_scalar(
        "SELECT 'acc_' || replace(id::text, '-', '') FROM dashboard_accounts WHERE email = 'ops@example.com'",
    )
    .fetch_one(&app.db)
    .await
    .unwrap();
    let issued = admin_client
        .post_form(&format!("/dashboard/settings/team/{account}/link"), &[])
        .await;
    // An admin of another organization cannot; one of the same organization can.
    assert_eq!(
        issued.status, 404,
        "the admin fixture is another organization's"
    );
    let same_org =
        DashboardClient::signed_in(&app, org.id, "lead@example.com", role("admin")).await;
    let issued = same_org
        .post_form(&format!("/dashboard/settings/team/{account}/link"), &[])
        .await;
    assert_eq!(issued.status, 200);
    let second = between(&issued.body, "<code id=\"sign-in-link\">", "</code>")
        .unwrap()
        .to_owned();
    let old_path = first.strip_prefix(&app.base_url).unwrap();
    assert_eq!(DashboardClient::new(&app).get(old_path).await.status, 410);
    DashboardClient::with_link(&app, &second, PASSWORD).await;
}

/// The figure in the `num` cell right after the row labelled `label` of the operations page
/// (its first number column: messages waiting).
fn queue_figure(html: &str, label: &str) -> String {
    let at = html.find(label).unwrap_or_else(|| panic!("no row {label}"));
    let cell = at + html[at..].find("<td class=\"num\">").expect("a figure") + 16;
    html[cell..cell + html[cell..].find('<').expect("end of cell")].to_owned()
}

#[tokio::test]
async fn the_operations_view_shows_admins_the_lane_depths_their_shard_and_their_webhook_backlog() {
    // No assign-worker: bulk commands wait in their queues.
    let app = TestApp::spawn_with(TestOptions {
        assign_worker: false,
        ..TestOptions::default()
    })
    .await;
    let rival = app.create_org(Tier::Standard).await;
    sqlx::query("UPDATE organizations SET name = 'Rival Corp' WHERE id = $1")
        .bind(rival.id)
        .execute(&app.db)
        .await
        .expect("rename");
    let (org, client) = org_with_admin(&app).await;
    let shard: i64 = sqlx::query_scalar("SELECT bulk_lane % 8 FROM organizations WHERE id = $1")
        .bind(org.id)
        .fetch_one(&app.db)
        .await
        .expect("shard");
    // Two bulk calls of this organization and one of the rival's wait in the bulk lane.
    for (who, emails) in [
        (&org, ["a@example.com", "b@example.com"]),
        (&rival, ["c@example.com", "d@example.com"]),
    ] {
        let flow = app.create_flow(who, "Onboarding", &[10]).await;
        app.create_users(who, &emails).await;
        let calls = if who.id == org.id { 2 } else { 1 };
        for _ in 0..calls {
            let items: Vec<String> = emails.iter().map(|email| (*email).to_owned()).collect();
            let response = app
                .assign_bulk(who, &flow_tests::assign_items(&flow, &items), &[])
                .await;
            assert_eq!(response.status, 200, "{:?}", response.body);
        }
    }
    // A test ping no webhook-worker takes: one delivery waiting for its first attempt.
    let endpoint = create_endpoint(&app, &org, "http://127.0.0.1:9/hooks/ops").await;
    let ping = app
        .post(&org, &format!("/v1/webhooks/{endpoint}/test"), &json!({}))
        .await;
    assert!(ping.status < 300, "{:?}", ping.body);

    let own_label = format!("Bulk assigns, your shard ({shard})");
    let html = app
        .eventually(
            Duration::from_secs(30),
            "the poller's reading of the bulk queues",
            || async {
                let html = client.page("/dashboard/settings/operations").await;
                (html.contains(&own_label) && queue_figure(&html, &own_label) == "2")
                    .then_some(html)
            },
        )
        .await;
    assert!(
        html.contains(&format!("id=\"bulk-shard\">{shard}<")),
        "{html}"
    );
    assert_eq!(
        queue_figure(&html, "Bulk assigns, every shard"),
        "3",
        "every organization's messages count in the total"
    );
    assert_eq!(queue_figure(&html, "Assigns, one at a time"), "0");
    assert!(html.contains("id=\"webhooks-waiting\">1<"), "{html}");
    assert!(html.contains("id=\"webhooks-retrying\">0<"), "{html}");
    assert!(!html.contains("Rival Corp"), "another organization's name");
    assert!(
        client
            .page("/dashboard/settings/api-keys")
            .await
            .contains("/dashboard/settings/operations"),
        "in the settings navigation of admins"
    );

    let viewer =
        DashboardClient::signed_in(&app, org.id, "ops-viewer@example.com", role("viewer")).await;
    assert_eq!(
        viewer.get("/dashboard/settings/operations").await.status,
        403
    );
    assert!(
        !viewer
            .page("/dashboard/settings/api-keys")
            .await
            .contains("/dashboard/settings/operations"),
        "not offered to viewers"
    );
}

#[tokio::test]
async fn the_operations_view_counts_only_the_organizations_own_unpublished_events() {
    // No outbox relay: every persisted assignment's `flow.assigned` stays unpublished.
    let app = TestApp::spawn().await;
    let rival = app.create_org(Tier::Standard).await;
    let (org, client) = org_with_admin(&app).await;
    for (who, emails) in [
        (&org, vec!["own@example.com"]),
        (
            &rival,
            vec!["r1@example.com", "r2@example.com", "r3@example.com"],
        ),
    ] {
        let flow = app.create_flow(who, "Onboarding", &[10]).await;
        app.create_users(who, &emails).await;
        let items: Vec<String> = emails.iter().map(|email| (*email).to_owned()).collect();
        let response = app
            .assign_bulk(who, &flow_tests::assign_items(&flow, &items), &[])
            .await;
        assert_eq!(response.status, 200, "{:?}", response.body);
    }
    app.eventually(
        Duration::from_secs(30),
        "four events in the outbox",
        || async {
            let written: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox_unpublished")
                .fetch_one(&app.db)
                .await
                .expect("unpublished");
            (written == 4).then_some(())
        },
    )
    .await;
    let html = client.page("/dashboard/settings/operations").await;
    assert!(
        html.contains("id=\"unpublished\">1<"),
        "the organization's one event, not the rival's three: {html}"
    );
}
