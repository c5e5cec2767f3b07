//! The dashboard on a phone (issue 40): every page, opened in Debian's headless Chromium
//! ([`flow_tests::browser`]) 400 CSS pixels wide, fits the screen (nothing scrolls the page
//! sideways: wide tables scroll inside their card) and keeps every section of the navigation and
//! Sign out on screen. Each page also offers a skip link to its content as the first thing a
//! keyboard reaches, and marks its section in the navigation with `aria-current`.
//!
//! Seeded through the API with what makes pages wide in use: long flow and person names, a long
//! e-mail address, a flow's table of assignments with progress, a schedule, a rule and a webhook
//! endpoint with a delivery. A screenshot of each page at 400 pixels is saved, as the other
//! browser tests do.

use std::time::Duration;

use flow_common::db::orgs::Tier;
use flow_tests::browser::Browser;
use flow_tests::dashboard::{create_account, role};
use flow_tests::receiver::Receiver;
use flow_tests::{TestApp, TestOptions};
use serde_json::{Value, json};

/// The phone's width in CSS pixels.
const PHONE_WIDTH: u32 = 400;

/// What a page must hold at [`PHONE_WIDTH`], measured in the page: its width against the
/// window's, every navigation link and the Sign out button inside the screen, the skip link, and
/// the link marked as the current section.
const MEASURE: &str = r#"
const inside = (element) => {
  if (!element || element.offsetParent === null) { return false; }
  const box = element.getBoundingClientRect();
  return box.width > 0 && box.left >= 0 && box.right <= window.innerWidth + 0.5;
};
const nav = [...document.querySelectorAll('.nav a')];
const first = document.querySelector('body a, body button, body input, body select, body textarea');
return {
  pageWidth: document.documentElement.scrollWidth,
  windowWidth: window.innerWidth,
  navLinks: nav.length,
  navHidden: nav.filter((link) => !inside(link)).map((link) => link.textContent.trim()),
  signOutShown: inside(document.querySelector('.sidebar-foot button')),
  skipLinkFirst: !!first && first.classList.contains('skip-link')
    && first.getAttribute('href') === '#main',
  current: [...document.querySelectorAll('.nav a[aria-current="page"]')]
    .map((link) => link.textContent.trim()),
};
"#;

#[tokio::test]
async fn every_dashboard_page_fits_a_phone_and_keeps_its_navigation_on_screen() {
    let app = TestApp::spawn_with(TestOptions {
        webhooks: true,
        ..TestOptions::default()
    })
    .await;
    let receiver = Receiver::start().await.expect("webhook receiver");
    let org = app.create_org(Tier::Standard).await;
    let people = [
        (
            "maximiliane.von-hohenzollern-sigmaringen@subsidiary.example.com",
            "Maximiliane von Hohenzollern-Sigmaringen",
        ),
        ("ann@example.com", "Ann Lee"),
        ("bo@example.com", "Bo Park"),
        ("cy@example.com", "Cy Reed"),
    ];
    let users: Vec<Value> = people
        .iter()
        .map(|(email, name)| json!({"email": email, "name": name}))
        .collect();
    let created = app
        .post(&org, "/v1/users/bulk", &json!({"users": users}))
        .await;
    assert_eq!(created.status, 200, "{:?}", created.body);
    let flow = app
        .create_flow(
            &org,
            "Annual Information Security Awareness and Acceptable Use Refresher",
            &[30, 45, 75],
        )
        .await;
    let modules = app.module_ids(&org, &flow).await;
    // Required, so the Compliance page has a column to show.
    let required = app
        .request(
            reqwest::Method::PATCH,
            &format!("/v1/flows/{flow}"),
            Some(&org.key),
            Some(&json!({"required": true})),
            &[],
        )
        .await;
    assert_eq!(required.status, 200, "{:?}", required.body);
    for (index, (email, _)) in people.iter().enumerate() {
        let id = app
            .assign_persisted(
                &org,
                &flow,
                email,
                json!({"dueDate": "2099-06-30", "priority": "high", "notes": "Before the audit"}),
            )
            .await;
        for module in modules.iter().take(index % 3) {
            let progress = app
                .post(
                    &org,
                    &format!("/v1/assignments/{id}/progress"),
                    &json!({"moduleId": module, "status": "completed"}),
                )
                .await;
            assert_eq!(progress.status, 202, "{:?}", progress.body);
        }
    }
    let schedule = app
        .post(
            &org,
            "/v1/flows/schedule",
            &json!({"flowId": flow, "userEmail": people[0].0, "scheduledAt": "2099-01-31T09:00:00Z",
                    "recurrence": "monthly", "dueInDays": 14}),
        )
        .await;
    assert_eq!(schedule.status, 201, "{:?}", schedule.body);
    let rule = flow_tests::enrollment::create_rule(
        &app,
        &org,
        json!({"name": "Research and Development security onboarding",
                "condition": {"all": [{"departmentEquals": "Research and Development"}]},
                "flowId": flow, "due": {"days": 14, "from": "start_date"}}),
    )
    .await;
    let endpoint = app
        .create_webhook(
            &org,
            &json!({"url": receiver.url("/hooks/a-rather-long-path/for-the-hr-system"), "events": []}),
        )
        .await;
    let endpoint = endpoint["webhookId"]
        .as_str()
        .expect("endpoint id")
        .to_owned();
    let test = app
        .post(&org, &format!("/v1/webhooks/{endpoint}/test"), &json!({}))
        .await;
    assert!(test.status < 300, "{:?}", test.body);
    let trigger = app
        .post(
            &org,
            "/v1/event-triggers",
            &json!({"name": "New hires from the human resources information system",
                    "match": {"typePrefix": "com.example.hr.employee.", "source": "https://hr.example.com/events/outbound"},
                    "userEmailPointer": "/data/employee/workEmail", "action": "assign",
                    "flowId": flow, "due": {"fromPointer": "/data/employee/startDate"},
                    "notes": "Before the first day"}),
        )
        .await;
    assert_eq!(trigger.status, 201, "{:?}", trigger.body);
    let trigger = trigger.body["triggerId"]
        .as_str()
        .expect("trigger id")
        .to_owned();
    // A past day for the Compliance page's as-of (two days back: not the future in any zone).
    let past_day = (chrono::Utc::now() - chrono::Duration::days(2)).date_naive();
    let user = app
        .get(&org, &format!("/v1/users?email={}", people[0].0))
        .await;
    assert_eq!(user.status, 200, "{:?}", user.body);
    let user = user.body["data"][0]["userId"]
        .as_str()
        .expect("user id")
        .to_owned();

    let link = create_account(&app, org.id, "admin@example.com", role("admin")).await;
    let browser = Browser::start(&app.base_url).await;
    browser.client.goto(&link).await.expect("opens the link");
    browser
        .fill("#password", "correct horse battery staple")
        .await;
    browser
        .fill("#confirm", "correct horse battery staple")
        .await;
    browser.click("#set-password button[type=submit]").await;
    browser.find("#notice").await;
    browser
        .client
        .set_window_size(PHONE_WIDTH, 860)
        .await
        .expect("resizes");

    // The delivery's page is linked from its endpoint's log once the worker has delivered.
    browser
        .open(&format!("/dashboard/webhooks/{endpoint}"))
        .await;
    let delivery = browser
        .reload_until("a[href*='/deliveries/']", "the test delivery in the log")
        .await
        .attr("href")
        .await
        .expect("href")
        .expect("a delivery link");

    let pages: Vec<(String, &str, Option<&str>)> = vec![
        ("/dashboard".into(), "home", Some("Home")),
        ("/dashboard/flows".into(), "flows", Some("Flows")),
        (format!("/dashboard/flows/{flow}"), "flow", Some("Flows")),
        (
            format!("/dashboard/flows/{flow}/efficiency"),
            "flow-efficiency",
            Some("Flows"),
        ),
        ("/dashboard/assign".into(), "assign", Some("Assign")),
        ("/dashboard/users".into(), "users", Some("Users")),
        (format!("/dashboard/users/{user}"), "person", Some("Users")),
        ("/dashboard/compliance".into(), "compliance", Some("Users")),
        (
            "/dashboard/compliance?by=department".into(),
            "compliance-departments",
            Some("Users"),
        ),
        (
            format!("/dashboard/compliance?flow={flow}&asOf={past_day}"),
            "compliance-as-of",
            Some("Users"),
        ),
        (
            "/dashboard/schedules".into(),
            "schedules",
            Some("Schedules"),
        ),
        ("/dashboard/rules".into(), "rules", Some("Rules")),
        ("/dashboard/rules/new".into(), "rule-new", Some("Rules")),
        (format!("/dashboard/rules/{rule}"), "rule", Some("Rules")),
        ("/dashboard/events".into(), "events", Some("Rules")),
        (
            format!("/dashboard/events/triggers/{trigger}"),
            "event-trigger",
            Some("Rules"),
        ),
        ("/dashboard/webhooks".into(), "webhooks", Some("Webhooks")),
        (
            "/dashboard/webhooks/new".into(),
            "webhook-new",
            Some("Webhooks"),
        ),
        (
            format!("/dashboard/webhooks/{endpoint}"),
            "webhook",
            Some("Webhooks"),
        ),
        (delivery, "delivery", Some("Webhooks")),
        (
            "/dashboard/settings/api-keys".into(),
            "api-keys",
            Some("Settings"),
        ),
        ("/dashboard/settings/team".into(), "team", Some("Settings")),
        (
            "/dashboard/settings/organization".into(),
            "organization",
            Some("Settings"),
        ),
        (
            "/dashboard/settings/operations".into(),
            "operations",
            Some("Settings"),
        ),
        (
            "/dashboard/settings/audit".into(),
            "audit",
            Some("Settings"),
        ),
    ];
    let mut misfits = Vec::new();
    for (path, name, section) in &pages {
        let path = path.strip_prefix(&app.base_url).unwrap_or(path);
        browser.open(path).await;
        browser.find("main#main").await;
        // Let the page's own scripts (htmx swaps) settle before measuring.
        tokio::time::sleep(Duration::from_millis(150)).await;
        let measured = browser
            .client
            .execute(MEASURE, vec![])
            .await
            .expect("measures");
        browser.screenshot(&format!("phone-{name}")).await;
        let page_width = measured["pageWidth"].as_u64().expect("page width");
        let window_width = measured["windowWidth"].as_u64().expect("window width");
        assert!(
            window_width <= u64::from(PHONE_WIDTH),
            "{path}: the window is {window_width} px wide"
        );
        if page_width > window_width {
            misfits.push(format!("{path}: {page_width} px wide in {window_width}"));
        }
        assert_eq!(measured["navLinks"], 8, "{path}: {measured}");
        if measured["navHidden"] != json!([]) || measured["signOutShown"] != json!(true) {
            misfits.push(format!(
                "{path}: off screen: {} (Sign out shown: {})",
                measured["navHidden"], measured["signOutShown"]
            ));
        }
        assert_eq!(
            measured["skipLinkFirst"], true,
            "{path}: the skip link to #main comes first"
        );
        let current: Vec<&str> = section.iter().copied().collect();
        assert_eq!(measured["current"], json!(current), "{path}: aria-current");
    }
    assert!(
        misfits.is_empty(),
        "pages that do not fit 400 px:\n{}",
        misfits.join("\n")
    );
    browser.close().await;
}
