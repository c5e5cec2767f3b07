//! What needs attention, in a real browser (issue 37, design §16): the journey of an HR admin
//! through the home page, a person's page, the actions on assignments and Settings →
//! Organization, in Debian's headless Chromium ([`flow_tests::browser`]). Seeded through the
//! API and SCIM: people with a department and a manager, an overdue assignment, one due within
//! seven days and a completion expiring within seven days. The admin sees them on the home page
//! with their days and follows the links; on the person's page sees the attributes and
//! assignments and gives the overdue one a new due date with the row's action; on a flow's table
//! selects two rows and cancels them; finds both actions in the audit log; and turns on
//! `cancelOnDeactivate` with a default reminder policy. Every change is checked through the API,
//! waiting for it where it goes through the queue.
//!
//! A screenshot of each page is saved, as the other browser test does.

use std::time::Duration;

use chrono::{NaiveDate, Utc};
use flow_common::db::orgs::Tier;
use flow_domain::ids::AssignmentId;
use flow_tests::browser::Browser;
use flow_tests::dashboard::{create_account, role};
use flow_tests::people::provision;
use flow_tests::{TestApp, TestOrg};
use serde_json::{Value, json};

const GROUP_SCHEMA: &str = "urn:ietf:params:scim:schemas:core:2.0:Group";

/// The assignment as `GET /v1/assignments/{id}` shows it.
async fn assignment(app: &TestApp, org: &TestOrg, id: &str) -> Value {
    let read = app.get(org, &format!("/v1/assignments/{id}")).await;
    assert_eq!(read.status, 200, "{:?}", read.body);
    read.body
}

/// The visible text of the element `css` selects.
async fn text(browser: &Browser, css: &str) -> String {
    browser
        .find(css)
        .await
        .text()
        .await
        .unwrap_or_else(|error| panic!("the text of {css}: {error}"))
}

/// Whole calendar days from today (UTC, the organization's zone) to `date`.
fn days_until(date: NaiveDate) -> i64 {
    (date - Utc::now().date_naive()).num_days()
}

#[tokio::test]
async fn an_hr_admin_handles_what_needs_attention_in_a_real_browser() {
    let app = TestApp::spawn().await;
    let org = app.create_org(Tier::Standard).await;

    // People, with their departments and managers, as the HR system provisions them.
    let sam = provision(&app, &org, "sam@example.com", "Sam Boss", "People", None).await;
    let pat = provision(
        &app,
        &org,
        "pat@example.com",
        "Pat Doe",
        "Research",
        Some("ext-sam@example.com"),
    )
    .await;
    for (email, name) in [
        ("bob@example.com", "Bob Stone"),
        ("cy@example.com", "Cy Reed"),
        ("di@example.com", "Di Lane"),
        ("eve@example.com", "Eve Park"),
    ] {
        provision(
            &app,
            &org,
            email,
            name,
            "Sales",
            Some("ext-sam@example.com"),
        )
        .await;
    }
    let group = app
        .scim_request(
            &org.key,
            reqwest::Method::POST,
            "/Groups",
            Some(
                &json!({ "schemas": [GROUP_SCHEMA], "displayName": "Research team",
                          "members": [{ "value": pat }] }),
            ),
            &[],
        )
        .await;
    assert_eq!(group.status, 201, "{:?}", group.body);

    // Flows, one of whose completions are valid for five days.
    let security = app.create_flow(&org, "Security Basics", &[10, 10]).await;
    let privacy = app.create_flow(&org, "Privacy", &[10]).await;
    let fire = app.create_flow(&org, "Fire Safety", &[10]).await;
    let valid = app
        .request(
            reqwest::Method::PATCH,
            &format!("/v1/flows/{fire}"),
            Some(&org.key),
            Some(&json!({ "validFor": { "days": 5 } })),
            &[],
        )
        .await;
    assert_eq!(valid.status, 200, "{:?}", valid.body);

    // Overdue: Pat's Security Basics was due three days ago (the due date is moved back as time
    // passing would; the API takes only due dates in the future) and the scheduler's scan marks
    // it overdue.
    let later = json!({ "dueDate": "2031-01-31" });
    let overdue = app
        .assign_persisted(&org, &security, "pat@example.com", later.clone())
        .await;
    sqlx::query("UPDATE assignments SET due_at = now() - interval '3 days' WHERE id = $1")
        .bind(AssignmentId::parse(&overdue).expect("id"))
        .execute(&app.db)
        .await
        .expect("due three days ago");
    flow_workers::scheduler::scan_overdue(&app.db, 100)
        .await
        .expect("the overdue scan");
    app.wait_for_status(&org, &overdue, "overdue").await;
    // Due soon: Bob's Privacy, due in three days.
    let soon_date = Utc::now().date_naive() + chrono::Duration::days(3);
    let soon = app
        .assign_persisted(
            &org,
            &privacy,
            "bob@example.com",
            json!({ "dueDate": soon_date.to_string() }),
        )
        .await;
    // Expiring: Cy completed Fire Safety, valid for five days.
    let expiring = app
        .assign_persisted(&org, &fire, "cy@example.com", json!({}))
        .await;
    let module = app.module_ids(&org, &fire).await.remove(0);
    let done = app
        .post(
            &org,
            &format!("/v1/assignments/{expiring}/progress"),
            &json!({ "moduleId": module, "status": "completed" }),
        )
        .await;
    assert_eq!(done.status, 202, "{:?}", done.body);
    app.wait_for_status(&org, &expiring, "completed").await;
    // Open assignments on Security Basics to cancel from its table, and one of Pat's without a
    // due date.
    let di = app
        .assign_persisted(&org, &security, "di@example.com", later.clone())
        .await;
    let eve = app
        .assign_persisted(&org, &security, "eve@example.com", later.clone())
        .await;
    let pat_privacy = app
        .assign_persisted(&org, &privacy, "pat@example.com", json!({}))
        .await;

    // The admin signs in with their one-time link and lands on what needs attention.
    let link = create_account(&app, org.id, "hr@example.com", role("admin")).await;
    let browser = Browser::start(&app.base_url).await;
    browser.client.goto(&link).await.expect("opens the link");
    browser
        .fill("#password", "correct horse battery staple")
        .await;
    browser
        .fill("#confirm", "correct horse battery staple")
        .await;
    browser.click("#set-password button[type=submit]").await;
    browser.find("#attention-counts").await;
    assert_eq!(browser.path().await, "/dashboard");
    assert_eq!(text(&browser, "#count-overdue").await, "1");
    assert_eq!(text(&browser, "#count-due-soon").await, "1");
    assert_eq!(text(&browser, "#count-expiring").await, "1");
    let overdue_row = format!("#overdue tr[data-assignment='{overdue}']");
    let row = text(&browser, &overdue_row).await;
    for shown in ["Pat Doe", "Security Basics", "3 days overdue", "0 / 2"] {
        assert!(row.contains(shown), "{shown} in {row}");
    }
    let row = text(&browser, &format!("#due-soon tr[data-assignment='{soon}']")).await;
    let due_in = format!("due in {} days", days_until(soon_date));
    for shown in ["Bob Stone", "Privacy", due_in.as_str(), "Pending"] {
        assert!(row.contains(shown), "{shown} in {row}");
    }
    let row = text(
        &browser,
        &format!("#expiring tr[data-assignment='{expiring}']"),
    )
    .await;
    for shown in ["Cy Reed", "Fire Safety", "expires in 5 days"] {
        assert!(row.contains(shown), "{shown} in {row}");
    }
    let listed = browser.html().await;
    for absent in [&di, &eve, &pat_privacy] {
        assert!(
            !listed.contains(&format!("data-assignment=\"{absent}\"")),
            "{absent} needs no attention"
        );
    }
    browser.screenshot("attention-home").await;

    // The flow's link leads to its table, the person's link to their page.
    browser
        .click(&format!(
            "{overdue_row} a[href='/dashboard/flows/{security}']"
        ))
        .await;
    browser.find("#assignment-table").await;
    assert_eq!(browser.path().await, format!("/dashboard/flows/{security}"));
    browser.client.back().await.expect("goes back");
    browser
        .click(&format!("{overdue_row} a[href='/dashboard/users/{pat}']"))
        .await;
    browser.find("#attributes").await;
    let person = format!("/dashboard/users/{pat}");
    assert_eq!(browser.path().await, person);

    // The person's page: attributes, manager, groups and every assignment.
    assert_eq!(text(&browser, "#person-name").await, "Pat Doe");
    assert_eq!(text(&browser, "#attr-email").await, "pat@example.com");
    assert_eq!(text(&browser, "#attr-title").await, "Engineer");
    assert_eq!(text(&browser, "#attr-department").await, "Research");
    assert_eq!(text(&browser, "#attr-active").await, "Yes");
    assert_eq!(text(&browser, "#attr-groups").await, "Research team");
    assert_eq!(text(&browser, "#attr-manager a").await, "Sam Boss");
    let pat_row = format!("#person-assignments tr[data-assignment='{overdue}']");
    let row = text(&browser, &pat_row).await;
    for shown in ["Security Basics", "Overdue", "0 / 2"] {
        assert!(row.contains(shown), "{shown} in {row}");
    }
    let row = text(
        &browser,
        &format!("#person-assignments tr[data-assignment='{pat_privacy}']"),
    )
    .await;
    for shown in ["Privacy", "Pending"] {
        assert!(row.contains(shown), "{shown} in {row}");
    }
    browser.screenshot("attention-person").await;

    // The row's action: a new due date, a month from now.
    let new_due = Utc::now().date_naive() + chrono::Duration::days(30);
    assert!(
        fits(&browser, "#assignments .table-wrap").await,
        "the table fits, its row actions in sight"
    );
    browser.click(&format!("{pat_row} summary")).await;
    // Open, the actions lie over the table in sight, without widening it.
    assert!(fits(&browser, "#assignments .table-wrap").await);
    assert!(in_view(&browser, &format!("{pat_row} .due-date-form button")).await);
    assert!(in_view(&browser, &format!("{pat_row} .cancel-form button")).await);
    let field = format!("{pat_row} .due-date-form input[name=due_date]");
    browser.type_date(&field, new_due).await;
    browser.screenshot("attention-person-due-date").await;
    browser
        .click(&format!("{pat_row} .due-date-form button[type=submit]"))
        .await;
    let notice = text(&browser, "#notice").await;
    assert_eq!(notice, "1 assignment given the new due date.");
    assert!(
        in_view(&browser, "#notice").await,
        "the notice is in sight at the table"
    );
    assert_eq!(browser.path().await, person);
    let changed = app
        .eventually(
            Duration::from_secs(10),
            "the new due date to be applied",
            || async {
                let body = assignment(&app, &org, &overdue).await;
                body["dueDate"]
                    .as_str()
                    .is_some_and(|due| due.starts_with(&format!("{new_due}T23:59:59")))
                    .then_some(body)
            },
        )
        .await;
    assert_eq!(changed["status"], "pending", "{changed}");
    browser.client.refresh().await.expect("reloads");
    let row = text(&browser, &pat_row).await;
    assert!(row.contains("Pending"), "{row}");
    assert!(!row.contains("Overdue"), "{row}");
    browser.screenshot("attention-person-after").await;
    // The manager's link leads to the manager's page.
    browser.click("#attr-manager a").await;
    browser.find("#attributes").await;
    assert_eq!(browser.path().await, format!("/dashboard/users/{sam}"));
    assert_eq!(text(&browser, "#person-name").await, "Sam Boss");

    // Back home: nothing overdue any more.
    browser.link("Home").await;
    browser.find("#attention-counts").await;
    assert_eq!(text(&browser, "#count-overdue").await, "0");
    assert!(!browser.html().await.contains(&overdue));

    // A flow's table: two rows selected and cancelled together.
    browser.open(&format!("/dashboard/flows/{security}")).await;
    browser.find("#assignment-table").await;
    assert!(
        fits(&browser, "#assignments .table-wrap").await,
        "the table fits, its row actions in sight"
    );
    for id in [&di, &eve] {
        browser
            .click(&format!("#assignment-table input[name=ids][value='{id}']"))
            .await;
    }
    browser
        .fill("#bulk input[name=reason]", "Left for another team")
        .await;
    browser.screenshot("attention-flow-selected").await;
    browser.click("#bulk-cancel").await;
    // Cancelling is final: asked first, as for one row.
    let question = browser
        .client
        .get_alert_text()
        .await
        .expect("a confirmation");
    assert!(
        question.starts_with("Cancel the selected assignments?"),
        "{question}"
    );
    browser
        .client
        .accept_alert()
        .await
        .expect("confirms the cancellation");
    let notice = text(&browser, "#notice").await;
    assert_eq!(notice, "2 assignments cancelled.");
    assert!(
        in_view(&browser, "#notice").await,
        "the notice is in sight at the table"
    );
    for id in [&di, &eve] {
        let body = app.wait_for_status(&org, id, "cancelled").await;
        assert_eq!(body["status"], "cancelled", "{body}");
    }
    // The others stay as they were.
    assert_eq!(assignment(&app, &org, &overdue).await["status"], "pending");
    // Cancelled assignments leave the table of all (design §16) for the Cancelled tab.
    browser.client.refresh().await.expect("reloads");
    browser
        .find(&format!(
            "#assignment-table tr[data-assignment='{overdue}']"
        ))
        .await;
    let table = browser.html().await;
    for id in [&di, &eve] {
        assert!(
            !table.contains(&format!("data-assignment=\"{id}\"")),
            "{id} listed"
        );
    }
    browser.link("Cancelled").await;
    for id in [&di, &eve] {
        let row = text(
            &browser,
            &format!("#assignment-table tr[data-assignment='{id}']"),
        )
        .await;
        assert!(row.contains("Cancelled"), "{row}");
        assert!(row.contains("Left for another team"), "the reason: {row}");
    }
    // Nothing here can be selected, so there is nothing to do with the selected.
    assert!(!browser.html().await.contains("id=\"bulk\""));
    browser.screenshot("attention-flow-cancelled").await;

    // The audit log names both actions and the admin who took them.
    browser.link("Settings").await;
    browser.link("Audit log").await;
    browser.find("#audit").await;
    assert!(text(&browser, ".lead").await.contains("assignments"));
    let rows = audit_rows(&browser).await;
    for (action, target) in [
        ("Changed an assignment", &overdue),
        ("Cancelled an assignment", &di),
        ("Cancelled an assignment", &eve),
    ] {
        assert!(
            rows.iter().any(|row| row.contains(action)
                && row.contains(target.as_str())
                && row.contains("hr@example.com")
                && row.contains("Dashboard")),
            "{action} {target} in {rows:#?}"
        );
    }
    browser.screenshot("attention-audit").await;

    // Settings → Organization: cancel on deactivation, and a default reminder policy.
    browser.link("Organization").await;
    browser.find("#organization-settings").await;
    assert_eq!(browser.path().await, "/dashboard/settings/organization");
    let cancel_on_deactivate = browser
        .find("#organization-settings input[name=cancel_on_deactivate]")
        .await;
    assert!(!cancel_on_deactivate.is_selected().await.expect("state"));
    cancel_on_deactivate.click().await.expect("ticks");
    browser.fill("#before-due-days", "7, 1").await;
    browser.fill("#after-due-days", "1, 3").await;
    browser.fill("#escalate-after-days", "5").await;
    browser.screenshot("attention-settings").await;
    browser
        .click("#organization-settings button[type=submit]")
        .await;
    assert_eq!(text(&browser, "#notice").await, "The settings are saved.");
    // Kept in order, as the API keeps them.
    let settings = app.get(&org, "/v1/settings").await;
    assert_eq!(settings.status, 200, "{:?}", settings.body);
    assert_eq!(
        settings.body,
        json!({
            "cancelOnDeactivate": true,
            "reminders": { "beforeDueDays": [1, 7], "afterDueDays": [1, 3], "escalateAfterDays": 5 },
        })
    );
    // The form shows what was saved.
    assert!(
        browser
            .find("#organization-settings input[name=cancel_on_deactivate]")
            .await
            .is_selected()
            .await
            .expect("state")
    );
    let before = browser
        .find("#before-due-days")
        .await
        .prop("value")
        .await
        .expect("value");
    assert_eq!(before.as_deref(), Some("1, 7"));
    browser.screenshot("attention-settings-saved").await;
    browser.link("Audit log").await;
    browser.find("#audit").await;
    let rows = audit_rows(&browser).await;
    assert!(
        rows.iter()
            .any(|row| row.contains("Changed the organization's settings")
                && row.contains("cancelOnDeactivate: true")),
        "{rows:#?}"
    );
    browser.close().await;
}

/// The text of each row of the audit log.
async fn audit_rows(browser: &Browser) -> Vec<String> {
    let mut rows = Vec::new();
    for row in browser
        .client
        .find_all(fantoccini::Locator::Css("#audit tbody tr"))
        .await
        .expect("rows")
    {
        rows.push(row.text().await.expect("text"));
    }
    rows
}

/// Whether the element `css` selects is within the window, where the person sees it.
async fn in_view(browser: &Browser, css: &str) -> bool {
    let element = browser.find(css).await;
    browser
        .client
        .execute(
            "const box = arguments[0].getBoundingClientRect();
             return box.top >= 0 && box.bottom <= window.innerHeight
                 && box.left >= 0 && box.right <= window.innerWidth;",
            vec![serde_json::to_value(&element).expect("element")],
        )
        .await
        .expect("runs")
        .as_bool()
        .expect("a boolean")
}

/// Whether the element `css` selects shows all of its content without scrolling sideways.
async fn fits(browser: &Browser, css: &str) -> bool {
    let element = browser.find(css).await;
    browser
        .client
        .execute(
            "return arguments[0].scrollWidth <= arguments[0].clientWidth;",
            vec![serde_json::to_value(&element).expect("element")],
        )
        .await
        .expect("runs")
        .as_bool()
        .expect("a boolean")
}
