//! People and attention in the dashboard (issue 37, design §16): the home page of what needs
//! attention (overdue and due-soon assignments across flows with exact counts and days, failing
//! endpoints, failed backfills, assignments not persisted), a page per person (attributes,
//! manager, groups, assignments), and changing and cancelling assignments from a flow's table
//! and a person's page, per row and for the rows selected: through the same services as the API,
//! so each cancel is one `flow.cancelled`, each change one `flow.updated`, and the audit trail
//! names the signed-in account.

use std::time::Duration;

use flow_common::db::orgs::Tier;
use flow_domain::ids::{AssignmentId, UserId};
use flow_tests::dashboard::{DashboardClient, org_with_admin, role};
use flow_tests::enrollment::create_rule;
use flow_tests::receiver::{Behaviour, Receiver};
use flow_tests::{TestApp, TestOptions, TestOrg};
use serde_json::json;

const USER_SCHEMA: &str = "urn:ietf:params:scim:schemas:core:2.0:User";
const GROUP_SCHEMA: &str = "urn:ietf:params:scim:schemas:core:2.0:Group";
const ENTERPRISE: &str = "urn:ietf:params:scim:schemas:extension:enterprise:2.0:User";

/// The id of the organization's user with this e-mail.
async fn user_id(app: &TestApp, org: &TestOrg, email: &str) -> String {
    let id: UserId =
        sqlx::query_scalar("SELECT id FROM users WHERE org_id = $1 AND email_normalized = $2")
            .bind(org.id)
            .bind(email.to_lowercase())
            .fetch_one(&app.db)
            .await
            .expect("user");
    id.to_string()
}

/// Moves the assignment's due date to `now() + offset` (an SQL interval), as time passing would.
async fn set_due(app: &TestApp, id: &str, offset: &str) {
    let id = AssignmentId::parse(id).expect("id");
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "UPDATE assignments SET due_at = now() + interval '{offset}' WHERE id = $1"
    )))
    .bind(id)
    .execute(&app.db)
    .await
    .expect("due date");
}

/// The text of the element whose tag holds `marker`, up to the next `<`.
fn text_after<'a>(html: &'a str, marker: &str) -> &'a str {
    let at = html
        .find(marker)
        .unwrap_or_else(|| panic!("{marker} in {html}"));
    let start = at + html[at..].find('>').expect("end of tag") + 1;
    let end = start + html[start..].find('<').expect("next tag");
    html[start..end].trim()
}

/// The HTML of the section whose tag holds `marker`.
fn section<'a>(html: &'a str, marker: &str) -> &'a str {
    let at = html
        .find(marker)
        .unwrap_or_else(|| panic!("{marker} in {html}"));
    let end = at + html[at..].find("</section>").expect("end of section");
    &html[at..end]
}

/// Waits until the assignment's events are `expected`, and checks they stay so a moment longer.
async fn assert_events(app: &TestApp, id: &str, expected: &[&str]) {
    app.eventually(Duration::from_secs(10), "the events", || async {
        (app.events_of(id).await == expected).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(app.events_of(id).await, expected);
}

/// The audit rows of `action` on the assignment: (actor kind, actor, detail).
async fn audit_rows(app: &TestApp, action: &str, id: &str) -> Vec<(String, String, String)> {
    sqlx::query_as(
        "SELECT actor_kind, actor, detail FROM audit_events WHERE action = $1 AND target = $2
         ORDER BY id",
    )
    .bind(action)
    .bind(id)
    .fetch_all(&app.db)
    .await
    .expect("audit rows")
}

#[tokio::test]
async fn the_home_page_counts_and_lists_what_needs_attention_and_links_where_it_is_fixed() {
    let app = TestApp::spawn_with(TestOptions {
        webhooks: true,
        ..TestOptions::default()
    })
    .await;
    let receiver = Receiver::start().await.expect("webhook receiver");
    receiver.set("gone", Behaviour::Status(410));
    let (org, client) = org_with_admin(&app).await;

    // Nothing yet: all clear, and the home page is where a session lands.
    let empty = client.page("/dashboard").await;
    assert!(empty.contains("id=\"all-clear\""), "{empty}");
    assert_eq!(text_after(&empty, "id=\"count-overdue\""), "0");

    let endpoint = app
        .post(
            &org,
            "/v1/webhooks",
            &json!({ "url": receiver.url("gone") }),
        )
        .await;
    assert_eq!(endpoint.status, 201, "{:?}", endpoint.body);
    let endpoint = endpoint.body["webhookId"].as_str().expect("id").to_owned();
    app.create_users(
        &org,
        &[
            "ann@example.com",
            "bob@example.com",
            "cy@example.com",
            "di@example.com",
        ],
    )
    .await;
    let security = app.create_flow(&org, "Security Basics", &[10, 10]).await;
    let privacy = app.create_flow(&org, "Privacy", &[10]).await;
    let later = json!({ "dueDate": "2031-01-31" });
    let overdue = app
        .assign_persisted(&org, &security, "ann@example.com", later.clone())
        .await;
    let soon = app
        .assign_persisted(&org, &privacy, "bob@example.com", later.clone())
        .await;
    let far = app
        .assign_persisted(&org, &security, "cy@example.com", later.clone())
        .await;
    let no_due = app
        .assign_persisted(&org, &privacy, "di@example.com", json!({}))
        .await;
    set_due(&app, &overdue, "-3 days").await;
    set_due(&app, &soon, "2 days").await;
    // A completed assignment past its due date needs no attention.
    let done = app
        .assign_persisted(&org, &privacy, "cy@example.com", later.clone())
        .await;
    let module = app.module_ids(&org, &privacy).await.remove(0);
    let progress = app
        .post(
            &org,
            &format!("/v1/assignments/{done}/progress"),
            &json!({ "moduleId": module, "status": "completed" }),
        )
        .await;
    assert_eq!(progress.status, 202, "{:?}", progress.body);
    app.wait_for_status(&org, &done, "completed").await;
    set_due(&app, &done, "-1 day").await;

    // Another organization's overdue assignment is not counted here.
    let other = app.create_org(Tier::Standard).await;
    app.create_users(&other, &["ann@example.com"]).await;
    let other_flow = app.create_flow(&other, "Other", &[5]).await;
    let theirs = app
        .assign_persisted(&other, &other_flow, "ann@example.com", later.clone())
        .await;
    set_due(&app, &theirs, "-5 days").await;

    // A rule whose backfill failed.
    let rule = create_rule(
        &app,
        &org,
        json!({ "name": "Nobody yet", "condition": { "departmentEquals": "nowhere" },
                "flowId": security }),
    )
    .await;
    let backfill = app
        .post(
            &org,
            &format!("/v1/enrollment-rules/{rule}/backfill"),
            &json!({}),
        )
        .await;
    assert_eq!(backfill.status, 202, "{:?}", backfill.body);
    sqlx::query(
        "UPDATE enrollment_backfills SET status = 'failed', error = 'the flow was archived',
                finished_at = now()",
    )
    .execute(&app.db)
    .await
    .expect("backfill failed");

    // The endpoint answers 410 to the first event and is disabled.
    app.eventually(
        Duration::from_secs(20),
        "the endpoint to be disabled",
        || async {
            let response = app.get(&org, &format!("/v1/webhooks/{endpoint}")).await;
            (response.body["enabled"] == json!(false)).then_some(())
        },
    )
    .await;

    let home = client.page("/dashboard").await;
    assert!(!home.contains("id=\"all-clear\""));
    assert_eq!(text_after(&home, "id=\"count-overdue\""), "1", "{home}");
    assert_eq!(text_after(&home, "id=\"count-due-soon\""), "1");
    assert_eq!(text_after(&home, "id=\"count-endpoints\""), "1");
    assert_eq!(text_after(&home, "id=\"count-backfills\""), "1");
    assert_eq!(text_after(&home, "id=\"count-failed-assigns\""), "0");

    let ann = user_id(&app, &org, "ann@example.com").await;
    let bob = user_id(&app, &org, "bob@example.com").await;
    let overdue_list = section(&home, "id=\"overdue\"");
    assert!(overdue_list.contains(&format!("data-assignment=\"{overdue}\"")));
    assert!(overdue_list.contains("3 days overdue"), "{overdue_list}");
    assert!(overdue_list.contains(&format!("href=\"/dashboard/users/{ann}\"")));
    assert!(overdue_list.contains(&format!("href=\"/dashboard/flows/{security}\"")));
    assert!(overdue_list.contains("0 / 2"));
    for absent in [&soon, &far, &no_due, &done, &theirs] {
        assert!(!overdue_list.contains(absent.as_str()), "{absent} listed");
    }
    let soon_list = section(&home, "id=\"due-soon\"");
    assert!(soon_list.contains(&format!("data-assignment=\"{soon}\"")));
    assert!(soon_list.contains("due in 2 days"), "{soon_list}");
    assert!(soon_list.contains(&format!("href=\"/dashboard/users/{bob}\"")));
    for absent in [&overdue, &far, &no_due, &done] {
        assert!(!soon_list.contains(absent.as_str()), "{absent} listed");
    }
    let endpoints = section(&home, "id=\"failing-endpoints\"");
    assert!(endpoints.contains(&format!("href=\"/dashboard/webhooks/{endpoint}\"")));
    assert!(
        endpoints.contains("disabled by the service (gone)"),
        "{endpoints}"
    );
    let backfills = section(&home, "id=\"failed-backfills\"");
    assert!(backfills.contains(&format!("href=\"/dashboard/rules/{rule}\"")));
    assert!(backfills.contains("the flow was archived"));

    // The flows table stays reachable from the navigation.
    assert!(home.contains("href=\"/dashboard/flows\""));
    // A cancelled overdue assignment leaves the home page.
    let cancelled = client
        .post_form(
            &format!("/dashboard/assignments/{overdue}/cancel"),
            &[("back", "/dashboard")],
        )
        .await;
    assert_eq!(cancelled.status, 303, "{}", cancelled.body);
    app.wait_for_status(&org, &overdue, "cancelled").await;
    let after = client.page("/dashboard").await;
    assert_eq!(text_after(&after, "id=\"count-overdue\""), "0");
    assert!(after.contains("1 assignment cancelled."), "{after}");
}

#[tokio::test]
async fn a_person_page_shows_attributes_manager_groups_and_every_assignment() {
    let app = TestApp::spawn().await;
    let (org, client) = org_with_admin(&app).await;
    let scim_user = |body: serde_json::Value| {
        let app = &app;
        let key = org.key.clone();
        async move {
            let created = app
                .scim_request(&key, reqwest::Method::POST, "/Users", Some(&body), &[])
                .await;
            assert_eq!(created.status, 201, "{:?}", created.body);
            created.body["id"].as_str().expect("id").to_owned()
        }
    };
    let sam = scim_user(json!({
        "schemas": [USER_SCHEMA], "userName": "sam@example.com", "active": true,
        "externalId": "mgr-7", "displayName": "Sam Boss",
        "emails": [{ "primary": true, "value": "sam@example.com" }]
    }))
    .await;
    let pat = scim_user(json!({
        "schemas": [USER_SCHEMA, ENTERPRISE], "userName": "pat@example.com", "active": true,
        "displayName": "Pat Doe", "title": "Engineer",
        "emails": [{ "primary": true, "value": "pat@example.com" }],
        ENTERPRISE: { "department": "Research", "employeeNumber": "42",
                      "manager": { "value": "mgr-7", "displayName": "Sam Boss" } }
    }))
    .await;
    let group = app
        .scim_request(
            &org.key,
            reqwest::Method::POST,
            "/Groups",
            Some(&json!({ "schemas": [GROUP_SCHEMA], "displayName": "Sales",
                          "members": [{ "value": pat }] })),
            &[],
        )
        .await;
    assert_eq!(group.status, 201, "{:?}", group.body);
    let first = app.create_flow(&org, "First steps", &[10, 10]).await;
    let second = app.create_flow(&org, "Second wind", &[10]).await;
    let a = app
        .assign_persisted(&org, &first, "pat@example.com", json!({}))
        .await;
    let b = app
        .assign_persisted(&org, &second, "pat@example.com", json!({}))
        .await;
    let module = app.module_ids(&org, &first).await.remove(0);
    let progress = app
        .post(
            &org,
            &format!("/v1/assignments/{a}/progress"),
            &json!({ "moduleId": module, "status": "completed" }),
        )
        .await;
    assert_eq!(progress.status, 202, "{:?}", progress.body);
    app.wait_for_status(&org, &a, "in_progress").await;

    let page = client.page(&format!("/dashboard/users/{pat}")).await;
    assert!(page.contains("Pat Doe"));
    assert_eq!(text_after(&page, "id=\"attr-email\""), "pat@example.com");
    assert_eq!(text_after(&page, "id=\"attr-title\""), "Engineer");
    assert_eq!(text_after(&page, "id=\"attr-department\""), "Research");
    assert_eq!(text_after(&page, "id=\"attr-active\""), "Yes");
    let manager = section(&page, "id=\"attr-manager\"");
    assert!(
        manager.contains(&format!("<a href=\"/dashboard/users/{sam}\">Sam Boss</a>")),
        "{manager}"
    );
    assert!(section(&page, "id=\"attr-groups\"").contains("Sales"));
    let table = section(&page, "id=\"assignments\"");
    for (id, flow, name) in [(&a, &first, "First steps"), (&b, &second, "Second wind")] {
        assert!(table.contains(&format!("data-assignment=\"{id}\"")));
        assert!(table.contains(&format!("<a href=\"/dashboard/flows/{flow}\">{name}</a>")));
    }
    assert!(table.contains("1 / 2"), "progress: {table}");
    assert!(table.contains("In progress"));
    // Admins get the actions.
    assert!(table.contains(&format!("/dashboard/assignments/{a}/cancel")));
    assert!(table.contains("id=\"bulk-cancel\""));

    // The manager's page, and people linked from the users list and a flow's table.
    let manager_page = client.page(&format!("/dashboard/users/{sam}")).await;
    assert!(manager_page.contains("Sam Boss"));
    let users = client.page("/dashboard/users").await;
    assert!(users.contains(&format!("href=\"/dashboard/users/{pat}\"")));
    let flow_page = client.page(&format!("/dashboard/flows/{first}")).await;
    assert!(flow_page.contains(&format!("href=\"/dashboard/users/{pat}\"")));

    // A cancelled assignment stays on the page, without actions.
    let cancelled = client
        .post_form(
            &format!("/dashboard/assignments/{b}/cancel"),
            &[
                ("reason", "Left the team"),
                ("back", &format!("/dashboard/users/{pat}")),
            ],
        )
        .await;
    assert_eq!(cancelled.status, 303, "{}", cancelled.body);
    assert_eq!(
        cancelled.location(),
        Some(format!("/dashboard/users/{pat}").as_str())
    );
    app.wait_for_status(&org, &b, "cancelled").await;
    let page = client.page(&format!("/dashboard/users/{pat}")).await;
    let table = section(&page, "id=\"assignments\"");
    assert!(table.contains("Cancelled"));
    assert!(table.contains("Left the team"));
    assert!(!table.contains(&format!("/dashboard/assignments/{b}/cancel")));

    // Viewers see the person but no actions, and cannot act; other organizations see nothing.
    let viewer = DashboardClient::signed_in(&app, org.id, "vic@example.com", role("viewer")).await;
    let seen = viewer.page(&format!("/dashboard/users/{pat}")).await;
    assert!(seen.contains("Pat Doe"));
    assert!(!seen.contains("/dashboard/assignments/"));
    let refused = viewer
        .post_form(&format!("/dashboard/assignments/{a}/cancel"), &[])
        .await;
    assert_eq!(refused.status, 403);
    let (_, stranger) = org_with_admin(&app).await;
    assert_eq!(
        stranger
            .get(&format!("/dashboard/users/{pat}"))
            .await
            .status,
        404
    );
    let foreign = stranger
        .post_form(&format!("/dashboard/assignments/{a}/cancel"), &[])
        .await;
    assert_eq!(foreign.status, 404);
    assert_eq!(client.get("/dashboard/users/usr_nope").await.status, 404);
    app.wait_for_status(&org, &a, "in_progress").await;
}

#[tokio::test]
async fn cancelling_a_row_and_two_selected_emits_flow_cancelled_once_each_audited_as_the_account() {
    let app = TestApp::spawn().await;
    let (org, client) = org_with_admin(&app).await;
    let admin = format!("admin-{}@example.com", org.id);
    app.create_users(
        &org,
        &[
            "ann@example.com",
            "bob@example.com",
            "cy@example.com",
            "di@example.com",
        ],
    )
    .await;
    let flow = app.create_flow(&org, "Onboarding", &[10]).await;
    let mut ids = Vec::new();
    for email in [
        "ann@example.com",
        "bob@example.com",
        "cy@example.com",
        "di@example.com",
    ] {
        ids.push(app.assign_persisted(&org, &flow, email, json!({})).await);
    }
    let [one, two, three, finished] = <[String; 4]>::try_from(ids).expect("four");
    let module = app.module_ids(&org, &flow).await.remove(0);
    let progress = app
        .post(
            &org,
            &format!("/v1/assignments/{finished}/progress"),
            &json!({ "moduleId": module, "status": "completed" }),
        )
        .await;
    assert_eq!(progress.status, 202, "{:?}", progress.body);
    app.wait_for_status(&org, &finished, "completed").await;

    let back = format!("/dashboard/flows/{flow}#assignments");
    let table = client.page(&format!("/dashboard/flows/{flow}")).await;
    assert!(table.contains(&format!("name=\"ids\" value=\"{one}\"")));
    assert!(!table.contains(&format!("name=\"ids\" value=\"{finished}\"")));

    // One row.
    let row = client
        .post_form(
            &format!("/dashboard/assignments/{one}/cancel"),
            &[("reason", "Moved on"), ("back", &back)],
        )
        .await;
    assert_eq!(row.status, 303, "{}", row.body);
    assert_eq!(row.location(), Some(back.as_str()));
    let shown = client.page(&format!("/dashboard/flows/{flow}")).await;
    assert!(shown.contains("1 assignment cancelled."), "{shown}");

    // Two selected, and a completed one that is refused.
    let bulk = client
        .post_form(
            "/dashboard/assignments/bulk",
            &[
                ("action", "cancel"),
                ("ids", two.as_str()),
                ("ids", three.as_str()),
                ("ids", finished.as_str()),
                ("reason", "Reorganised"),
                ("back", &back),
            ],
        )
        .await;
    assert_eq!(bulk.status, 303, "{}", bulk.body);
    let shown = client.page(&format!("/dashboard/flows/{flow}")).await;
    assert!(shown.contains("2 assignments cancelled."), "{shown}");
    assert!(
        shown.contains("1 not: the assignment is completed"),
        "{shown}"
    );

    for (id, reason) in [
        (&one, "Moved on"),
        (&two, "Reorganised"),
        (&three, "Reorganised"),
    ] {
        app.wait_for_status(&org, id, "cancelled").await;
        assert_events(&app, id, &["flow.assigned", "flow.cancelled"]).await;
        assert_eq!(
            audit_rows(&app, "assignment.cancelled", id).await,
            [("account".to_owned(), admin.clone(), reason.to_owned())]
        );
    }
    let events = app.events_of(&finished).await;
    assert!(
        events.contains(&"flow.completed".to_owned())
            && !events.contains(&"flow.cancelled".to_owned()),
        "{events:?}"
    );
    assert!(
        audit_rows(&app, "assignment.cancelled", &finished)
            .await
            .is_empty()
    );

    // Cancelling again changes nothing and emits nothing.
    let again = client
        .post_form(
            "/dashboard/assignments/bulk",
            &[("action", "cancel"), ("ids", two.as_str()), ("back", &back)],
        )
        .await;
    assert_eq!(again.status, 303);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        app.events_of(&two).await,
        ["flow.assigned", "flow.cancelled"]
    );

    // Refusals of the form itself: nothing selected, too long a reason, an unknown action, a
    // return address elsewhere.
    let none = client
        .post_form(
            "/dashboard/assignments/bulk",
            &[("action", "cancel"), ("back", &back)],
        )
        .await;
    assert_eq!(none.status, 400);
    let long = "x".repeat(501);
    let too_long = client
        .post_form(
            &format!("/dashboard/assignments/{three}/cancel"),
            &[("reason", long.as_str())],
        )
        .await;
    assert_eq!(too_long.status, 400, "{}", too_long.body);
    let unknown = client
        .post_form(
            "/dashboard/assignments/bulk",
            &[("action", "delete"), ("ids", two.as_str())],
        )
        .await;
    assert_eq!(unknown.status, 400);
    let elsewhere = client
        .post_form(
            &format!("/dashboard/assignments/{two}/cancel"),
            &[("back", "https://evil.example/")],
        )
        .await;
    assert_eq!(elsewhere.location(), Some("/dashboard"));
}

#[tokio::test]
async fn a_due_date_change_from_the_dashboard_returns_an_overdue_assignment_to_pending() {
    let app = TestApp::spawn().await;
    let (org, client) = org_with_admin(&app).await;
    let admin = format!("admin-{}@example.com", org.id);
    app.create_users(
        &org,
        &["cy@example.com", "dee@example.com", "eve@example.com"],
    )
    .await;
    let flow = app.create_flow(&org, "Due soon", &[10, 10]).await;
    let due = (chrono::Utc::now() + chrono::Duration::seconds(2)).to_rfc3339();
    let late = app
        .assign_persisted(&org, &flow, "cy@example.com", json!({ "dueDate": due }))
        .await;
    let also_late = app
        .assign_persisted(&org, &flow, "dee@example.com", json!({ "dueDate": due }))
        .await;
    let on_time = app
        .assign_persisted(
            &org,
            &flow,
            "eve@example.com",
            json!({ "dueDate": "2031-01-31" }),
        )
        .await;
    tokio::time::sleep(Duration::from_millis(2_300)).await;
    flow_workers::scheduler::scan_overdue(&app.db, 100)
        .await
        .expect("scan");
    app.wait_for_status(&org, &late, "overdue").await;
    app.wait_for_status(&org, &also_late, "overdue").await;
    let home = client.page("/dashboard").await;
    assert_eq!(text_after(&home, "id=\"count-overdue\""), "2");

    // A date in the past is refused, and changes nothing.
    let cy = user_id(&app, &org, "cy@example.com").await;
    let back = format!("/dashboard/users/{cy}#assignments");
    let past = client
        .post_form(
            &format!("/dashboard/assignments/{late}/due-date"),
            &[("due_date", "2020-01-01"), ("back", &back)],
        )
        .await;
    assert_eq!(past.status, 400);
    assert!(past.body.contains("future"), "{}", past.body);

    // One row from the person's page.
    let row = client
        .post_form(
            &format!("/dashboard/assignments/{late}/due-date"),
            &[("due_date", "2031-06-30"), ("back", &back)],
        )
        .await;
    assert_eq!(row.status, 303, "{}", row.body);
    assert_eq!(row.location(), Some(back.as_str()));
    let body = app.wait_for_status(&org, &late, "pending").await;
    assert!(
        body["dueDate"]
            .as_str()
            .is_some_and(|due| due.starts_with("2031-06-30T23:59:59")),
        "{body}"
    );
    assert_events(
        &app,
        &late,
        &["flow.assigned", "flow.overdue", "flow.updated"],
    )
    .await;
    assert_eq!(
        audit_rows(&app, "assignment.updated", &late).await,
        [("account".to_owned(), admin.clone(), "dueDate".to_owned())]
    );
    let page = client.page(&back.replace("#assignments", "")).await;
    assert!(
        page.contains("1 assignment given the new due date."),
        "{page}"
    );

    // Two selected on the flow's table.
    let bulk = client
        .post_form(
            "/dashboard/assignments/bulk",
            &[
                ("action", "due_date"),
                ("due_date", "2031-07-31"),
                ("ids", also_late.as_str()),
                ("ids", on_time.as_str()),
                ("back", &format!("/dashboard/flows/{flow}")),
            ],
        )
        .await;
    assert_eq!(bulk.status, 303, "{}", bulk.body);
    app.wait_for_status(&org, &also_late, "pending").await;
    assert_events(
        &app,
        &also_late,
        &["flow.assigned", "flow.overdue", "flow.updated"],
    )
    .await;
    assert_events(&app, &on_time, &["flow.assigned", "flow.updated"]).await;
    for id in [&also_late, &on_time] {
        assert_eq!(audit_rows(&app, "assignment.updated", id).await.len(), 1);
    }
    let shown = client.page(&format!("/dashboard/flows/{flow}")).await;
    assert!(
        shown.contains("2 assignments given the new due date."),
        "{shown}"
    );
    let home = client.page("/dashboard").await;
    assert_eq!(text_after(&home, "id=\"count-overdue\""), "0");
}

#[tokio::test]
async fn the_home_page_lists_completions_expiring_within_seven_days() {
    let app = TestApp::spawn().await;
    let (org, client) = org_with_admin(&app).await;
    app.create_users(
        &org,
        &["ann@example.com", "bob@example.com", "cy@example.com"],
    )
    .await;
    let short = app.create_flow(&org, "Fire safety", &[10]).await;
    let long = app.create_flow(&org, "Privacy", &[10]).await;
    for (flow, days) in [(&short, 5), (&long, 30)] {
        let edited = app
            .request(
                reqwest::Method::PATCH,
                &format!("/v1/flows/{flow}"),
                Some(&org.key),
                Some(&json!({ "validFor": { "days": days } })),
                &[],
            )
            .await;
        assert_eq!(edited.status, 200, "{:?}", edited.body);
    }
    let complete = |flow: String, email: &'static str| {
        let (app, org) = (&app, &org);
        async move {
            let id = app.assign_persisted(org, &flow, email, json!({})).await;
            let module = app.module_ids(org, &flow).await.remove(0);
            let done = app
                .post(
                    org,
                    &format!("/v1/assignments/{id}/progress"),
                    &json!({ "moduleId": module, "status": "completed" }),
                )
                .await;
            assert_eq!(done.status, 202, "{:?}", done.body);
            app.wait_for_status(org, &id, "completed").await;
            id
        }
    };
    let expiring = complete(short.clone(), "ann@example.com").await;
    let later = complete(long.clone(), "bob@example.com").await;
    let settled = complete(short.clone(), "cy@example.com").await;
    // A completion the scheduler has settled already (expired, or renewed in time) is not listed.
    sqlx::query("UPDATE assignments SET expiry_settled_at = now() WHERE id = $1")
        .bind(AssignmentId::parse(&settled).expect("id"))
        .execute(&app.db)
        .await
        .expect("settled");

    let home = client.page("/dashboard").await;
    assert!(!home.contains("id=\"all-clear\""), "{home}");
    assert_eq!(text_after(&home, "id=\"count-expiring\""), "1", "{home}");
    let listed = section(&home, "id=\"expiring\"");
    assert!(
        listed.contains(&format!("data-assignment=\"{expiring}\"")),
        "{listed}"
    );
    assert!(listed.contains("expires in 5 days"), "{listed}");
    let ann = user_id(&app, &org, "ann@example.com").await;
    assert!(listed.contains(&format!("href=\"/dashboard/users/{ann}\"")));
    assert!(listed.contains(&format!("href=\"/dashboard/flows/{short}\"")));
    for absent in [&later, &settled] {
        assert!(!listed.contains(absent.as_str()), "{absent} listed");
    }
}
