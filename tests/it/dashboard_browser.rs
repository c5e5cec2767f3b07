//! The dashboard in a real browser: Debian's headless Chromium driven over WebDriver
//! (chromedriver on a free local port). One journey through what an organization's admin does:
//! open the one-time link and set a password; Settings → API Keys → Generate New Key, use the key
//! (200) and revoke it (401); add a webhook endpoint pointing at a local receiver, send a test
//! event and see it delivered in the log with its attempt; assign a flow with the form, complete
//! it through the API and see the completion rate change; export CSV and download it.
//!
//! A screenshot of each page is saved (to `FLOW_SCREENSHOTS` when set, e.g. `docs/screenshots`,
//! else to a temporary directory; see [`flow_tests::browser`]). Without Chromium the test fails:
//! it never skips.

use std::time::Duration;

use fantoccini::Locator;
use flow_common::db::orgs::Tier;
use flow_tests::browser::Browser;
use flow_tests::dashboard::create_account;
use flow_tests::receiver::Receiver;
use flow_tests::{TestApp, TestOptions};
use serde_json::json;

#[tokio::test]
async fn an_admin_goes_through_the_dashboard_in_a_real_browser() {
    let app = TestApp::spawn_with(TestOptions {
        webhooks: true,
        ..TestOptions::default()
    })
    .await;
    let _report_worker = flow_tests::reports::start_report_worker(&app);
    let receiver = Receiver::start().await.expect("webhook receiver");
    let org = app.create_org(Tier::Standard).await;
    let names = [
        "Alice Martin",
        "Bruno Keller",
        "Chloé Dubois",
        "Dmitri Volkov",
        "Emma Schmidt",
        "Farid Haddad",
        "Grace Okafor",
        "Hiro Tanaka",
        "Inès Moreau",
        "Jonas Berg",
        "Kaja Nowak",
        "Liam O'Brien",
    ];
    let people: Vec<String> = names
        .iter()
        .map(|name| {
            let first = name.split(' ').next().unwrap_or(name);
            format!(
                "{}@example.com",
                first.to_lowercase().replace(['é', 'è'], "e")
            )
        })
        .collect();
    let users: Vec<serde_json::Value> = people
        .iter()
        .zip(names)
        .map(|(email, name)| json!({"email": email, "name": name}))
        .collect();
    let created = app
        .post(&org, "/v1/users/bulk", &json!({"users": users}))
        .await;
    assert_eq!(created.status, 200, "{:?}", created.body);
    let security = app
        .create_flow(&org, "Security Basics", &[30, 45, 75])
        .await;
    let onboarding = app
        .create_flow(&org, "New Hire Onboarding", &[20, 60, 90])
        .await;
    // Some history, so the pages show what they look like in use.
    let onboarding_modules = app.module_ids(&org, &onboarding).await;
    for (index, email) in people.iter().skip(1).take(8).enumerate() {
        let id = app
            .assign_persisted(
                &org,
                &onboarding,
                email,
                json!({"dueDate": "2099-06-30", "priority": "medium"}),
            )
            .await;
        for module in onboarding_modules.iter().take(index % 4) {
            app.post(
                &org,
                &format!("/v1/assignments/{id}/progress"),
                &json!({"moduleId": module, "status": "completed"}),
            )
            .await;
        }
    }
    let schedule = app
        .post(
            &org,
            "/v1/flows/schedule",
            &json!({"flowId": security, "userEmail": "bruno@example.com", "scheduledAt": "2099-01-31T09:00:00Z", "recurrence": "monthly", "dueInDays": 14}),
        )
        .await;
    assert_eq!(schedule.status, 201);
    let link = create_account(
        &app,
        org.id,
        "admin@example.com",
        flow_tests::dashboard::role("admin"),
    )
    .await;
    let browser = Browser::start(&app.base_url).await;
    let api_status = |key: String| {
        let app = &app;
        async move {
            app.request(reqwest::Method::GET, "/v1/flows", Some(&key), None, &[])
                .await
                .status
        }
    };

    // The one-time link: set a password, land on the home page (what needs attention).
    browser.client.goto(&link).await.expect("opens the link");
    browser.find("#set-password").await;
    browser.screenshot("welcome").await;
    browser
        .fill("#password", "correct horse battery staple")
        .await;
    browser
        .fill("#confirm", "correct horse battery staple")
        .await;
    browser.click("#set-password button[type=submit]").await;
    browser.find("#notice").await;
    assert_eq!(browser.path().await, "/dashboard");
    assert!(browser.html().await.contains("Welcome!"));
    browser.find("#attention-counts").await;
    browser.screenshot("home").await;
    browser.link("Flows").await;
    browser.find("#flows").await;
    assert_eq!(browser.path().await, "/dashboard/flows");
    browser.screenshot("flows").await;

    // Settings → API Keys → Generate New Key; the key works, then is revoked.
    browser.link("Settings").await;
    browser.find("#generate-key").await;
    assert_eq!(browser.path().await, "/dashboard/settings/api-keys");
    browser.fill("#key-name", "HR sync").await;
    browser.click("#generate").await;
    let secret = browser
        .find("#new-key-secret")
        .await
        .text()
        .await
        .expect("the secret");
    assert!(secret.starts_with("fsk_"), "{secret}");
    assert!(
        browser
            .find("button[data-copy='#new-key-secret']")
            .await
            .is_displayed()
            .await
            .unwrap(),
        "a copy button"
    );
    browser.screenshot("api-keys").await;
    assert_eq!(api_status(secret.clone()).await, 200);
    let key_row = browser.find("#keys tbody tr").await;
    assert!(
        key_row.text().await.unwrap().contains("HR sync"),
        "newest first"
    );
    key_row
        .find(Locator::Css("button.revoke"))
        .await
        .expect("a revoke button")
        .click()
        .await
        .expect("clicks");
    browser
        .client
        .accept_alert()
        .await
        .expect("confirms the revocation");
    browser.find("#notice").await;
    assert!(browser.html().await.contains("Revoked"));
    app.eventually(
        Duration::from_secs(5),
        "the revoked key to be refused",
        || {
            let secret = secret.clone();
            let api_status = &api_status;
            async move { (api_status(secret).await == 401).then_some(()) }
        },
    )
    .await;

    // Webhooks: an endpoint on the local receiver, a test event, delivered, with its attempt.
    browser.link("Webhooks").await;
    browser.find("#add-endpoint").await;
    browser.screenshot("webhooks-empty").await;
    browser.click("#add-endpoint").await;
    browser.fill("#url", &receiver.url("journey")).await;
    browser.fill("#description", "HR system").await;
    browser.screenshot("webhook-form").await;
    browser.click("#endpoint-form button[type=submit]").await;
    let signing = browser.find("#endpoint-secret").await.text().await.unwrap();
    assert!(signing.starts_with("whsec_"));
    browser.screenshot("webhook-secret").await;
    browser.click("#to-endpoint").await;
    browser.click("#send-test").await;
    browser.find("#notice").await;
    let delivered = browser
        .reload_until(
            "tr[data-event-type='webhook.test'][data-status='succeeded']",
            "the test event to be delivered",
        )
        .await;
    let received = receiver
        .wait_for_deliveries("journey", 1, Duration::from_secs(10))
        .await;
    assert!(
        received[0].verifies_with(&signing),
        "signed with the secret shown"
    );
    browser.screenshot("webhook-endpoint").await;
    delivered
        .find(Locator::LinkText("Attempts →"))
        .await
        .expect("a link to the attempts")
        .click()
        .await
        .expect("clicks");
    let attempt = browser.find("#attempts [data-status-code='200']").await;
    assert_eq!(attempt.text().await.unwrap(), "200");
    browser.screenshot("delivery").await;

    // Assign with the form; complete through the API; the completion rate follows.
    browser.link("Assign").await;
    browser
        .find("#flow")
        .await
        .select_by_label("Security Basics (3 modules)")
        .await
        .expect("selects the flow");
    browser.fill("#email", "alice@example.com").await;
    browser
        .find("#priority")
        .await
        .select_by_label("High")
        .await
        .expect("selects");
    browser
        .fill("#notes", "Please finish before the audit.")
        .await;
    browser.screenshot("assign").await;
    browser.click("#assign-submit").await;
    let notice = browser.find("#notice").await.text().await.unwrap();
    assert!(notice.contains("assigned to alice@example.com"), "{notice}");
    let assignment = notice
        .split(['(', ')'])
        .find(|part| part.starts_with("asg_"))
        .expect("the assignment id")
        .to_owned();
    app.eventually(
        Duration::from_secs(10),
        "the assignment to be persisted",
        || async {
            (app.get(&org, &format!("/v1/assignments/{assignment}"))
                .await
                .status
                == 200)
                .then_some(())
        },
    )
    .await;
    browser.open(&format!("/dashboard/flows/{security}")).await;
    let before = browser.find("#completion-rate").await.text().await.unwrap();
    assert_eq!(before, "0%");
    for module in app.module_ids(&org, &security).await {
        let done = app
            .post(
                &org,
                &format!("/v1/assignments/{assignment}/progress"),
                &json!({"moduleId": module, "status": "completed"}),
            )
            .await;
        assert_eq!(done.status, 202);
    }
    app.wait_for_status(&org, &assignment, "completed").await;
    browser.client.refresh().await.unwrap();
    let after = browser.find("#completion-rate").await.text().await.unwrap();
    assert_eq!(after, "100%");
    assert!(browser.html().await.contains("alice@example.com"));
    browser
        .open(&format!("/dashboard/flows/{onboarding}"))
        .await;
    browser.find("#completion-chart").await;
    browser.screenshot("flow").await;

    // Export CSV: progress, then the download.
    browser.open(&format!("/dashboard/flows/{security}")).await;
    browser.click("#export-csv").await;
    let download = browser.find("#download").await;
    browser.screenshot("export").await;
    download.click().await.expect("downloads");
    let file = app
        .eventually(
            Duration::from_secs(20),
            "the CSV to be downloaded",
            || async {
                std::fs::read_dir(&browser.downloads)
                    .ok()?
                    .filter_map(Result::ok)
                    .map(|entry| entry.path())
                    .find(|path| path.extension().is_some_and(|extension| extension == "csv"))
            },
        )
        .await;
    let csv = std::fs::read_to_string(&file).expect("the downloaded file");
    assert!(csv.contains("alice@example.com"), "{csv}");
    assert!(csv.lines().count() >= 2);

    // The other pages, for the screenshots.
    for (path, name, ready) in [
        ("/dashboard/flows", "flows-after", "#flows"),
        ("/dashboard/webhooks", "webhooks", "#endpoints"),
        ("/dashboard/users", "users", "#users"),
        ("/dashboard/schedules", "schedules", "#schedules"),
        ("/dashboard/settings/team", "team", "#accounts"),
        ("/dashboard/settings/audit", "audit", "#audit"),
    ] {
        browser.open(path).await;
        browser.find(ready).await;
        browser.screenshot(name).await;
    }
    let audit_source = {
        browser.open("/dashboard/settings/audit").await;
        browser.html().await
    };
    assert!(audit_source.contains("Revoked an API key"));
    assert!(audit_source.contains("Created a webhook endpoint"));

    // Signing out ends the session.
    browser.click(".sidebar-foot button").await;
    browser.find("#sign-in").await;
    browser.screenshot("sign-in").await;
    browser.open("/dashboard/flows").await;
    browser.find("#sign-in").await;
    assert_eq!(browser.path().await, "/dashboard/sign-in");
    browser.close().await;
}
