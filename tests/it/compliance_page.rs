//! The dashboard's Compliance page (issue 39): the flows ticked in its picker are the columns
//! judged, an `asOf` day is judged at its end in the organization's time zone from the history
//! (hand-computed fixtures written straight into the tables, since the API cannot make past
//! instants), a future day is refused, and the export buttons record a compliance export of the
//! page's scope that the report-worker writes and the export panel serves.

use chrono::{DateTime, Duration, DurationRound, NaiveDate, Utc};
use flow_common::db::orgs::Tier;
use flow_domain::ids::UserId;
use flow_tests::dashboard::{DashboardClient, between, role};
use flow_tests::reports::{
    create_org_in_zone, csv_columns, start_report_worker, wait_for_export, write_assignment,
};
use flow_tests::{TestApp, TestOrg};
use serde_json::json;
use uuid::Uuid;

/// The organization's time zone: a day there ends at 22:00 or 23:00 UTC.
const ZONE: &str = "Europe/Paris";

/// A flow made over the API with `required`; its id.
async fn flow(app: &TestApp, org: &TestOrg, name: &str, required: bool) -> String {
    let response = app
        .post(
            org,
            "/v1/flows",
            &json!({ "name": name, "required": required, "modules": [{ "name": "One" }] }),
        )
        .await;
    assert_eq!(response.status, 201, "{:?}", response.body);
    response.body["flowId"].as_str().expect("flowId").to_owned()
}

/// A person of Sales existing since `since`; their id.
async fn person(app: &TestApp, org: &TestOrg, email: &str, since: DateTime<Utc>) -> Uuid {
    app.create_users(org, &[email]).await;
    sqlx::query_scalar(
        "UPDATE users SET created_at = $3, department = 'Sales'
         WHERE org_id = $1 AND email_normalized = $2 RETURNING id",
    )
    .bind(org.id)
    .bind(email)
    .bind(since)
    .fetch_one(&app.db)
    .await
    .expect("user")
}

/// The row of a person on the page.
fn row(html: &str, user: Uuid) -> String {
    let id = UserId(user).to_string();
    let start = html
        .find(&format!("<tr data-user=\"{id}\">"))
        .unwrap_or_else(|| panic!("{id} not on the page: {html}"));
    let rest = &html[start..];
    rest[..rest.find("</tr>").expect("row end")].to_owned()
}

/// Whether the page's table has a column for `flow`.
fn has_column(html: &str, flow: &str) -> bool {
    html.contains(&format!("<th><a href=\"/dashboard/flows/{flow}\">"))
}

/// Whether the picker ticks `flow`.
fn ticked(html: &str, flow: &str) -> bool {
    html.contains(&format!(
        "<input type=\"checkbox\" name=\"flow\" value=\"{flow}\" checked>"
    ))
}

/// The seed, by hand (T = the end of `day` in Paris, ten days ago):
///
/// | person | Safety at T / now   | Privacy (required) | Elective (not required) |
/// |--------|---------------------|--------------------|-------------------------|
/// | ann    | pending / compliant | not_assigned       | pending (assigned now)  |
/// | bob    | compliant (both)    | not_assigned       | not_assigned            |
///
/// Ann's Safety was assigned 30 days ago, due in 20 days (not due within 7 days of T, never
/// started) and completed 5 days ago, after T; Bob's was completed 20 days ago.
#[tokio::test]
async fn the_compliance_page_judges_the_flows_ticked_as_of_a_past_day_and_exports_that_scope() {
    let app = TestApp::spawn().await;
    let org = create_org_in_zone(&app, Tier::Enterprise, ZONE, Some(1_000_000)).await;
    let zone: chrono_tz::Tz = ZONE.parse().expect("zone");
    let safety = flow(&app, &org, "A Safety", true).await;
    let privacy = flow(&app, &org, "B Privacy", true).await;
    let elective = flow(&app, &org, "C Elective", false).await;
    let now = Utc::now()
        .duration_trunc(Duration::seconds(1))
        .expect("truncate");
    let days = |count: i64| Duration::days(count);
    let ann = person(&app, &org, "ann@example.com", now - days(60)).await;
    let bob = person(&app, &org, "bob@example.com", now - days(60)).await;
    write_assignment(
        &app,
        &org,
        &safety,
        ann,
        now - days(30),
        Some(now + days(20)),
        Some(now - days(5)),
    )
    .await;
    write_assignment(
        &app,
        &org,
        &safety,
        bob,
        now - days(30),
        Some(now + days(20)),
        Some(now - days(20)),
    )
    .await;
    write_assignment(&app, &org, &elective, ann, now, Some(now + days(20)), None).await;
    let day: NaiveDate = (now - days(10)).with_timezone(&zone).date_naive();
    let client = DashboardClient::admin(&app, org.id).await;

    // By default the required flows are ticked and judged, now.
    let html = client.page("/dashboard/compliance").await;
    assert!(
        has_column(&html, &safety) && has_column(&html, &privacy),
        "{html}"
    );
    assert!(!has_column(&html, &elective), "{html}");
    assert!(ticked(&html, &safety) && ticked(&html, &privacy) && !ticked(&html, &elective));
    assert!(html.contains("the organization's required flows"), "{html}");
    assert!(row(&html, ann).contains("<span class=\"pill compliant\">Compliant</span>"));

    // The flow ticked is the only column, and stays ticked.
    let html = client
        .page(&format!("/dashboard/compliance?flow={elective}"))
        .await;
    assert!(has_column(&html, &elective), "{html}");
    assert!(!has_column(&html, &safety) && !has_column(&html, &privacy));
    assert!(ticked(&html, &elective) && !ticked(&html, &safety));
    assert!(html.contains("the flows ticked"));
    assert!(row(&html, ann).contains("<span class=\"pill pending\">Pending</span>"));
    assert!(row(&html, bob).contains("<span class=\"pill not_assigned\">Not assigned</span>"));
    // Its roll-up's links keep the flow.
    let groups = client
        .page(&format!(
            "/dashboard/compliance?flow={elective}&by=department"
        ))
        .await;
    assert!(
        groups.contains(&format!(
            "href=\"/dashboard/compliance?department=Sales&#38;flow={elective}\""
        )),
        "{groups}"
    );

    // As of the end of `day` in Paris: Ann's completion came later.
    let as_of = format!("/dashboard/compliance?flow={safety}&asOf={day}");
    let html = client.page(&as_of).await;
    assert!(has_column(&html, &safety) && !has_column(&html, &privacy));
    assert!(
        row(&html, ann).contains("<span class=\"pill pending\">Pending</span>"),
        "{}",
        row(&html, ann)
    );
    assert!(row(&html, ann).contains("0 of 1"));
    assert!(row(&html, bob).contains("<span class=\"pill compliant\">Compliant</span>"));
    let scope = between(&html, "id=\"compliance-scope\">", "</p>").expect("scope");
    assert!(
        scope.contains(&format!(
            "as of {}, end of day, Europe/Paris",
            day.format("%-d %b %Y")
        )),
        "{scope}"
    );
    assert!(
        scope.contains(&format!("<time id=\"judged-at\">{day} 23:59:59</time>")),
        "{scope}"
    );
    assert!(html.contains(&format!("name=\"asOf\" value=\"{day}\"")));
    // Now, the same flow: Ann is compliant.
    let html = client
        .page(&format!("/dashboard/compliance?flow={safety}"))
        .await;
    assert!(row(&html, ann).contains("<span class=\"pill compliant\">Compliant</span>"));

    // A day in the future is refused, saying so.
    let future = (now + days(2)).with_timezone(&zone).date_naive();
    let refused = client
        .get(&format!("/dashboard/compliance?asOf={future}"))
        .await;
    assert_eq!(refused.status, 400, "{}", refused.body);
    let error = between(&refused.body, "id=\"compliance-error\">", "</div>").expect("error");
    assert!(error.contains("asOf must not be in the future"), "{error}");
    assert!(!refused.body.contains("id=\"export-csv\""));
    // A flow id that is not the organization's is refused too.
    let other = app.create_org(Tier::Standard).await;
    let theirs = flow(&app, &other, "Theirs", true).await;
    let refused = client
        .get(&format!("/dashboard/compliance?flow={theirs}"))
        .await;
    assert_eq!(refused.status, 400, "{}", refused.body);
    assert!(refused.body.contains("Tick flows of this organization"));

    // Export the as-of page as CSV: a compliance export of the same scope, written by the worker.
    let _worker = start_report_worker(&app);
    let html = client.page(&as_of).await;
    let action = between(
        &html,
        "<form id=\"compliance-export\" method=\"post\" action=\"",
        "\"",
    )
    .expect("export form");
    assert_eq!(
        action.replace("&#38;", "&"),
        format!("/dashboard/compliance/exports?flow={safety}&asOf={day}")
    );
    let requested = client
        .post_form(
            &format!("/dashboard/compliance/exports?flow={safety}&asOf={day}"),
            &[("format", "csv")],
        )
        .await;
    assert_eq!(requested.status, 303, "{}", requested.body);
    let location = requested.location().expect("location").to_owned();
    let export_id = location
        .strip_prefix("/dashboard/exports/")
        .expect("the export's page")
        .to_owned();
    let kind: String = sqlx::query_scalar("SELECT kind FROM exports WHERE org_id = $1")
        .bind(org.id)
        .fetch_one(&app.db)
        .await
        .expect("one export");
    assert_eq!(kind, "compliance");
    let panel = client.page(&location).await;
    assert!(panel.contains("id=\"export-panel\""), "{panel}");
    let file = wait_for_export(&app, &org, &format!("/v1/exports/{export_id}")).await;
    assert_eq!(file.status, 200, "{}", String::from_utf8_lossy(&file.body));
    let mut rows = csv_columns(&file.body, ["email", "flow", "status"]);
    rows.sort();
    assert_eq!(
        rows,
        [
            ["ann@example.com", "A Safety", "pending"],
            ["bob@example.com", "A Safety", "compliant"],
        ]
    );
    // The panel links the file, which the dashboard serves.
    let ready = client.page(&location).await;
    assert!(ready.contains("id=\"download\""), "{ready}");
    let downloaded = client.get(&format!("{location}/download")).await;
    assert_eq!(downloaded.status, 200);
    assert!(
        downloaded.body.contains("bob@example.com"),
        "{}",
        downloaded.body
    );

    // A format that does not exist is refused; viewers export as they do a flow's report.
    let refused = client
        .post_form("/dashboard/compliance/exports", &[("format", "zip")])
        .await;
    assert_eq!(refused.status, 400);
    assert!(refused.body.contains("Choose CSV, Excel or PDF."));
    let viewer = DashboardClient::signed_in(&app, org.id, "vic@example.com", role("viewer")).await;
    assert!(
        viewer
            .page("/dashboard/compliance")
            .await
            .contains("id=\"export-csv\"")
    );
}
