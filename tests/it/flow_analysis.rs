//! Workflow efficiency per flow (issue 39): `GET /v1/flows/{id}/analysis` over a hand-computed
//! fixture written straight into the tables (the API cannot make past instants), checking every
//! number of the funnel, the time per module, the time to complete and its trend (an empty
//! period included) and the on-time share; the range, period and stall parameters and their
//! 400s; another organization's flow is 404. And the dashboard: the flow page's funnel and the
//! Compliance page with its statuses, links to people, roll-up and pages.

use chrono::{DateTime, Datelike, Duration, Months, NaiveDate, Utc};
use flow_common::db::orgs::Tier;
use flow_domain::ids::{FlowId, UserId};
use flow_tests::dashboard::DashboardClient;
use flow_tests::{TestApp, TestOrg};
use serde_json::{Value, json};
use uuid::Uuid;

/// A flow made over the API with these modules; its id and its modules' ids in order.
async fn flow(
    app: &TestApp,
    org: &TestOrg,
    name: &str,
    modules: &[&str],
    required: bool,
) -> (String, Vec<Uuid>) {
    let modules: Vec<Value> = modules.iter().map(|name| json!({ "name": name })).collect();
    let response = app
        .post(
            org,
            "/v1/flows",
            &json!({ "name": name, "required": required, "modules": modules }),
        )
        .await;
    assert_eq!(response.status, 201, "{:?}", response.body);
    let id = response.body["flowId"].as_str().expect("flowId").to_owned();
    let module_ids: Vec<Uuid> =
        sqlx::query_scalar("SELECT id FROM modules WHERE flow_id = $1 ORDER BY position")
            .bind(FlowId::parse(&id).expect("flow id").0)
            .fetch_all(&app.db)
            .await
            .expect("modules");
    (id, module_ids)
}

/// Makes the people of `emails`; their ids in order.
async fn people(app: &TestApp, org: &TestOrg, emails: &[&str]) -> Vec<Uuid> {
    app.create_users(org, emails).await;
    let mut ids = Vec::new();
    for email in emails {
        let id: Uuid =
            sqlx::query_scalar("SELECT id FROM users WHERE org_id = $1 AND email_normalized = $2")
                .bind(org.id)
                .bind(email.to_lowercase())
                .fetch_one(&app.db)
                .await
                .expect("user");
        ids.push(id);
    }
    ids
}

/// An assignment as it stands: its status follows from the instants given.
#[derive(Clone, Copy, Default)]
struct Fixture {
    assigned: Option<DateTime<Utc>>,
    due: Option<DateTime<Utc>>,
    started: Option<DateTime<Utc>>,
    completed: Option<DateTime<Utc>>,
    cancelled: Option<DateTime<Utc>>,
}

async fn assignment(app: &TestApp, org: &TestOrg, flow: &str, user: Uuid, at: Fixture) -> Uuid {
    let status = if at.cancelled.is_some() {
        "cancelled"
    } else if at.completed.is_some() {
        "completed"
    } else if at.started.is_some() {
        "in_progress"
    } else {
        "pending"
    };
    let id = Uuid::now_v7();
    sqlx::query(
        "INSERT INTO assignments (id, org_id, flow_id, user_id, status, due_at, assigned_at,
                                  started_at, completed_at, cancelled_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
    )
    .bind(id)
    .bind(org.id)
    .bind(FlowId::parse(flow).expect("flow id").0)
    .bind(user)
    .bind(status)
    .bind(at.due)
    .bind(at.assigned.expect("assigned"))
    .bind(at.started)
    .bind(at.completed)
    .bind(at.cancelled)
    .execute(&app.db)
    .await
    .expect("insert assignment");
    id
}

/// Progress on one module: completed when `completed` is given, else in progress.
async fn progress(
    app: &TestApp,
    assignment: Uuid,
    module: Uuid,
    started: Option<DateTime<Utc>>,
    completed: Option<DateTime<Utc>>,
    duration_seconds: Option<i64>,
) {
    sqlx::query(
        "INSERT INTO module_progress (assignment_id, module_id, status, started_at, completed_at,
                                      duration_seconds)
         VALUES ($1, $2, $3, $4, $5, $6)",
    )
    .bind(assignment)
    .bind(module)
    .bind(if completed.is_some() {
        "completed"
    } else {
        "in_progress"
    })
    .bind(started)
    .bind(completed)
    .bind(duration_seconds)
    .execute(&app.db)
    .await
    .expect("insert progress");
}

/// The first instant of the UTC month `back` months before this one.
fn month_start(back: u32) -> DateTime<Utc> {
    let today = Utc::now().date_naive();
    let first = NaiveDate::from_ymd_opt(today.year(), today.month(), 1).expect("first");
    (first - Months::new(back))
        .and_hms_opt(0, 0, 0)
        .expect("midnight")
        .and_utc()
}

fn day(text: DateTime<Utc>) -> String {
    text.date_naive().to_string()
}

async fn analysis(app: &TestApp, org: &TestOrg, flow: &str, query: &str) -> Value {
    let response = app
        .get(org, &format!("/v1/flows/{flow}/analysis{query}"))
        .await;
    assert_eq!(response.status, 200, "{query}: {:?}", response.body);
    assert!(response.header("x-data-as-of").is_some());
    response.body
}

/// The funnel as (reached, completed, stalledNow) per module.
fn funnel(body: &Value) -> Vec<(i64, i64, i64)> {
    body["funnel"]
        .as_array()
        .expect("funnel")
        .iter()
        .map(|step| {
            (
                step["reached"].as_i64().expect("reached"),
                step["completed"].as_i64().expect("completed"),
                step["stalledNow"].as_i64().expect("stalledNow"),
            )
        })
        .collect()
}

/// (samples, medianSeconds, p90Seconds) of a spread.
fn spread(value: &Value, samples: &str) -> (i64, Option<u64>, Option<u64>) {
    (
        value[samples].as_i64().expect("samples"),
        value["medianSeconds"].as_u64(),
        value["p90Seconds"].as_u64(),
    )
}

/// Three modules, seven assignments counted over three months, one cancelled and one made
/// before the range; every figure below is worked out by hand in the comments.
#[tokio::test]
async fn the_analysis_of_a_flow_matches_a_hand_computed_fixture() {
    let app = TestApp::spawn().await;
    let org = app.create_org(Tier::Enterprise).await;
    let (flow_id, modules) =
        flow(&app, &org, "Onboarding", &["Alpha", "Beta", "Gamma"], false).await;
    let [a, b, c] = [modules[0], modules[1], modules[2]];
    let users = people(
        &app,
        &org,
        &[
            "c1@example.com",
            "c2@example.com",
            "c3@example.com",
            "o1@example.com",
            "o2@example.com",
            "o3@example.com",
            "o4@example.com",
            "x1@example.com",
            "early@example.com",
        ],
    )
    .await;
    // Months m0, m1, m2 of the range: six, five and four months ago (all before the default
    // range, the last 90 days; all within a year).
    let m0 = month_start(6);
    let m1 = month_start(5);
    let m2 = month_start(4);
    let end = month_start(3);
    let h = Duration::hours;
    let d = Duration::days;
    let now = Utc::now();

    // c1: completed in 2 days (172,800 s), on time. Alpha 3,600 s; Beta reports 600 s (its
    // timestamps say 5 hours: the reported duration wins); Gamma 43,200 s.
    let c1 = assignment(
        &app,
        &org,
        &flow_id,
        users[0],
        Fixture {
            assigned: Some(m0 + d(4)),
            due: Some(m0 + d(19)),
            started: Some(m0 + d(4) + h(1)),
            completed: Some(m0 + d(6)),
            ..Fixture::default()
        },
    )
    .await;
    progress(
        &app,
        c1,
        a,
        Some(m0 + d(4) + h(1)),
        Some(m0 + d(4) + h(2)),
        None,
    )
    .await;
    progress(
        &app,
        c1,
        b,
        Some(m0 + d(5)),
        Some(m0 + d(5) + h(5)),
        Some(600),
    )
    .await;
    progress(&app, c1, c, Some(m0 + d(5) + h(12)), Some(m0 + d(6)), None).await;
    // c2: completed in 4 days (345,600 s), after its due date. Alpha 7,200 s; Beta reports
    // 1,200 s; Gamma 172,800 s.
    let c2 = assignment(
        &app,
        &org,
        &flow_id,
        users[1],
        Fixture {
            assigned: Some(m0 + d(9)),
            due: Some(m0 + d(10)),
            started: Some(m0 + d(9)),
            completed: Some(m0 + d(13)),
            ..Fixture::default()
        },
    )
    .await;
    progress(&app, c2, a, Some(m0 + d(9)), Some(m0 + d(9) + h(2)), None).await;
    progress(&app, c2, b, Some(m0 + d(10)), Some(m0 + d(11)), Some(1_200)).await;
    progress(&app, c2, c, Some(m0 + d(11)), Some(m0 + d(13)), None).await;
    // c3 (month m1): completed in 1 day (86,400 s), no due date. Alpha 10,800 s; Beta has no
    // start and no reported duration (not a sample); Gamma 43,200 s.
    let c3 = assignment(
        &app,
        &org,
        &flow_id,
        users[2],
        Fixture {
            assigned: Some(m1 + d(1)),
            started: Some(m1 + d(1)),
            completed: Some(m1 + d(2)),
            ..Fixture::default()
        },
    )
    .await;
    progress(&app, c3, a, Some(m1 + d(1)), Some(m1 + d(1) + h(3)), None).await;
    progress(&app, c3, b, None, Some(m1 + d(1) + h(12)), None).await;
    progress(&app, c3, c, Some(m1 + d(1) + h(12)), Some(m1 + d(2)), None).await;
    // o1: open (and overdue), Alpha done (3,600 s), Beta started months ago: stalled in Beta.
    let o1 = assignment(
        &app,
        &org,
        &flow_id,
        users[3],
        Fixture {
            assigned: Some(m0 + d(14)),
            due: Some(m0 + d(24)),
            started: Some(m0 + d(14)),
            ..Fixture::default()
        },
    )
    .await;
    progress(&app, o1, a, Some(m0 + d(14)), Some(m0 + d(14) + h(1)), None).await;
    progress(&app, o1, b, Some(m0 + d(15)), None, None).await;
    // o2 (m1): Alpha done (1,800 s), Beta started yesterday: waiting in Beta, not stalled.
    let o2 = assignment(
        &app,
        &org,
        &flow_id,
        users[4],
        Fixture {
            assigned: Some(m1 + d(9)),
            started: Some(m1 + d(9)),
            ..Fixture::default()
        },
    )
    .await;
    progress(
        &app,
        o2,
        a,
        Some(m1 + d(9)),
        Some(m1 + d(9) + Duration::minutes(30)),
        None,
    )
    .await;
    progress(&app, o2, b, Some(now - d(1)), None, None).await;
    // o3 (m1): never started: reached nothing, stalled in Alpha.
    assignment(
        &app,
        &org,
        &flow_id,
        users[5],
        Fixture {
            assigned: Some(m1 + d(19)),
            ..Fixture::default()
        },
    )
    .await;
    // o4 (m2): jumped to Gamma (in progress): reached every module, completed none, stalled in
    // Alpha, its first module not completed.
    let o4 = assignment(
        &app,
        &org,
        &flow_id,
        users[6],
        Fixture {
            assigned: Some(m2 + d(4)),
            started: Some(m2 + d(5)),
            ..Fixture::default()
        },
    )
    .await;
    progress(&app, o4, c, Some(m2 + d(5)), None, None).await;
    // Left out: a cancelled assignment, and one made before the range.
    let x1 = assignment(
        &app,
        &org,
        &flow_id,
        users[7],
        Fixture {
            assigned: Some(m0 + d(7)),
            started: Some(m0 + d(7)),
            cancelled: Some(m0 + d(8)),
            ..Fixture::default()
        },
    )
    .await;
    progress(&app, x1, a, Some(m0 + d(7)), Some(m0 + d(7) + h(10)), None).await;
    let early = assignment(
        &app,
        &org,
        &flow_id,
        users[8],
        Fixture {
            assigned: Some(m0 - d(3)),
            started: Some(m0 - d(3)),
            completed: Some(m0 - d(2)),
            due: Some(m0 - d(1)),
            ..Fixture::default()
        },
    )
    .await;
    progress(&app, early, a, Some(m0 - d(3)), Some(m0 - d(2)), None).await;

    let query = format!("?from={}&to={}&period=month", day(m0), day(end));
    let body = analysis(&app, &org, &flow_id, &query).await;
    assert_eq!(body["flowId"], json!(flow_id));
    assert_eq!(body["flowName"], json!("Onboarding"));
    assert_eq!(body["range"]["period"], json!("month"));
    assert_eq!(body["range"]["stalledAfterDays"], json!(7));
    assert_eq!(body["range"]["timezone"], json!("UTC"));
    assert_eq!(body["assignments"], json!(7));

    // Reached: Alpha and Beta by c1–c3, o1, o2 (furthest Beta) and o4 (furthest Gamma); Gamma
    // by c1–c3 and o4. Completed: Alpha by c1–c3, o1, o2; Beta and Gamma by c1–c3. Stalled:
    // o3 and o4 in Alpha, o1 in Beta (o2 was active yesterday).
    assert_eq!(funnel(&body), vec![(6, 5, 2), (6, 3, 1), (4, 3, 0)]);
    let names: Vec<&str> = body["funnel"]
        .as_array()
        .unwrap()
        .iter()
        .map(|step| step["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["Alpha", "Beta", "Gamma"]);

    // Alpha: 1,800, 3,600, 3,600, 7,200, 10,800: median 3,600; p90 at 0.9 × 4 = 3.6, so
    // 7,200 + 0.6 × 3,600 = 9,360. Beta: 600, 1,200: median 900, p90 600 + 0.9 × 600 = 1,140.
    // Gamma: 43,200, 43,200, 172,800: median 43,200, p90 43,200 + 0.8 × 129,600 = 146,880.
    let times = body["timePerModule"].as_array().expect("timePerModule");
    assert_eq!(spread(&times[0], "samples"), (5, Some(3_600), Some(9_360)));
    assert_eq!(spread(&times[1], "samples"), (2, Some(900), Some(1_140)));
    assert_eq!(
        spread(&times[2], "samples"),
        (3, Some(43_200), Some(146_880))
    );
    assert_eq!(times[0]["median"], json!("1 hour"));
    assert_eq!(times[0]["p90"], json!("2 hours 36 minutes"));
    assert_eq!(times[2]["p90"], json!("1 day 16 hours"));

    // Time to complete: 86,400, 172,800, 345,600: median 172,800; p90 at 1.8: 172,800 + 0.8 ×
    // 172,800 = 311,040.
    let ttc = &body["timeToComplete"];
    assert_eq!(spread(ttc, "samples"), (3, Some(172_800), Some(311_040)));
    assert_eq!(ttc["median"], json!("2 days"));
    assert_eq!(ttc["p90"], json!("3 days 14 hours"));
    // Per month of assignment: m0 holds c1 and c2 (median 259,200, p90 172,800 + 0.9 × 172,800
    // = 328,320), m1 c3, m2 no completion.
    let trend = ttc["trend"].as_array().expect("trend");
    assert_eq!(trend.len(), 3, "{trend:?}");
    let label = |at: DateTime<Utc>| at.format("%Y-%m").to_string();
    assert_eq!(trend[0]["period"], json!(label(m0)));
    assert_eq!(trend[1]["period"], json!(label(m1)));
    assert_eq!(trend[2]["period"], json!(label(m2)));
    assert_eq!(
        trend[0]["periodStart"],
        json!(flow_domain::format_timestamp(m0))
    );
    assert_eq!(
        trend[2]["periodEnd"],
        json!(flow_domain::format_timestamp(end))
    );
    assert_eq!(
        spread(&trend[0], "completed"),
        (2, Some(259_200), Some(328_320))
    );
    assert_eq!(
        spread(&trend[1], "completed"),
        (1, Some(86_400), Some(86_400))
    );
    assert_eq!(spread(&trend[2], "completed"), (0, None, None));
    assert_eq!(trend[2]["median"], Value::Null);
    assert_eq!(trend[2]["p90"], Value::Null);

    // On time: c1 and c2 had a due date, c1 met it.
    assert_eq!(body["completedWithDueDate"], json!(2));
    assert_eq!(body["completedOnTime"], json!(1));
    assert_eq!(body["onTimeShare"], json!(50.0));

    // Stalled after a year: nobody (o1's last activity is about six months old).
    let patient = analysis(
        &app,
        &org,
        &flow_id,
        &format!("{query}&stalledAfterDays=365"),
    )
    .await;
    assert_eq!(funnel(&patient), vec![(6, 5, 0), (6, 3, 0), (4, 3, 0)]);

    // Month m1 alone, by week: c3, o2, o3 only.
    let one_month = analysis(
        &app,
        &org,
        &flow_id,
        &format!("?from={}&to={}", day(m1), day(m2)),
    )
    .await;
    assert_eq!(one_month["assignments"], json!(3));
    assert_eq!(one_month["range"]["period"], json!("week"));
    assert_eq!(funnel(&one_month), vec![(2, 2, 1), (2, 1, 0), (1, 1, 0)]);
    assert_eq!(one_month["completedWithDueDate"], json!(0));
    assert_eq!(one_month["onTimeShare"], Value::Null);
    let weeks = one_month["timeToComplete"]["trend"]
        .as_array()
        .expect("trend");
    assert!((4..=6).contains(&weeks.len()), "{weeks:?}");
    let completed: i64 = weeks
        .iter()
        .map(|week| week["completed"].as_i64().unwrap())
        .sum();
    assert_eq!(completed, 1);
    assert!(
        weeks
            .iter()
            .all(|week| week["period"].as_str().unwrap().contains("-W"))
    );

    // The default range (the last 90 days) holds none of them.
    let recent = analysis(&app, &org, &flow_id, "").await;
    assert_eq!(recent["assignments"], json!(0));
    assert_eq!(funnel(&recent), vec![(0, 0, 0), (0, 0, 0), (0, 0, 0)]);
    assert_eq!(recent["timeToComplete"]["samples"], json!(0));
    assert_eq!(recent["timeToComplete"]["medianSeconds"], Value::Null);
}

#[tokio::test]
async fn bad_ranges_periods_and_stall_days_are_400_and_another_organizations_flow_is_404() {
    let app = TestApp::spawn().await;
    let org = app.create_org(Tier::Enterprise).await;
    let other = app.create_org(Tier::Enterprise).await;
    let (flow_id, _) = flow(&app, &org, "Mine", &["One"], false).await;
    let (theirs, _) = flow(&app, &other, "Theirs", &["One"], false).await;

    for query in [
        "?from=2026-03-01&to=2026-02-01",
        "?from=2026-03-01&to=2026-03-01",
        "?from=2023-01-01&to=2026-01-01",
        "?from=yesterday",
        "?to=2026-13-01",
        "?period=day",
        "?period=quarter",
        "?stalledAfterDays=0",
        "?stalledAfterDays=366",
        "?stalledAfterDays=seven",
    ] {
        let response = app
            .get(&org, &format!("/v1/flows/{flow_id}/analysis{query}"))
            .await;
        assert_eq!(response.status, 400, "{query}: {:?}", response.body);
        assert_eq!(response.body["error"], json!("invalid_request"), "{query}");
    }
    let response = app
        .get(
            &org,
            &format!("/v1/flows/{flow_id}/analysis?from=2023-01-01&to=2026-01-01"),
        )
        .await;
    assert!(
        response.body["message"]
            .as_str()
            .unwrap()
            .contains("at most 731 days"),
        "{:?}",
        response.body
    );
    // Two years exactly (with a leap day) is allowed.
    let response = app
        .get(
            &org,
            &format!("/v1/flows/{flow_id}/analysis?from=2024-01-01&to=2026-01-01"),
        )
        .await;
    assert_eq!(response.status, 200, "{:?}", response.body);

    for path in [
        format!("/v1/flows/{theirs}/analysis"),
        format!("/v1/flows/{}/analysis", FlowId(Uuid::now_v7())),
        "/v1/flows/not-a-flow/analysis".to_owned(),
    ] {
        let response = app.get(&org, &path).await;
        assert_eq!(response.status, 404, "{path}: {:?}", response.body);
        assert_eq!(response.body["error"], json!("not_found"));
    }
    // The owner reads it.
    let response = app
        .get(&other, &format!("/v1/flows/{theirs}/analysis"))
        .await;
    assert_eq!(response.status, 200, "{:?}", response.body);
}

/// The row of the funnel table for `module`: its cells' text.
fn table_row(html: &str, module: &str) -> Vec<String> {
    let table = flow_tests::dashboard::between(html, "<table id=\"funnel-table\">", "</table>")
        .expect("funnel table");
    let start = table
        .find(&format!("<td class=\"wrap\">{module}</td>"))
        .unwrap_or_else(|| panic!("{module} not in {table}"));
    let row = &table[start..];
    let row = &row[..row.find("</tr>").expect("row end")];
    row.split("</td>")
        .skip(1)
        .filter_map(|cell| cell.rsplit('>').next())
        .filter(|text| !text.is_empty())
        .map(str::to_owned)
        .collect()
}

#[tokio::test]
async fn the_flow_page_shows_the_funnel_and_the_time_per_module() {
    let app = TestApp::spawn().await;
    let org = app.create_org(Tier::Enterprise).await;
    let client = DashboardClient::admin(&app, org.id).await;
    let (flow_id, modules) = flow(&app, &org, "Safety", &["Alpha", "Beta"], false).await;
    let users = people(&app, &org, &["done@example.com", "stuck@example.com"]).await;
    let now = Utc::now();
    let d = Duration::days;
    // Done: Alpha in 1 hour, Beta in 3 hours, the flow in 2 days.
    let done = assignment(
        &app,
        &org,
        &flow_id,
        users[0],
        Fixture {
            assigned: Some(now - d(30)),
            started: Some(now - d(30)),
            completed: Some(now - d(28)),
            due: Some(now - d(20)),
            ..Fixture::default()
        },
    )
    .await;
    progress(
        &app,
        done,
        modules[0],
        Some(now - d(30)),
        Some(now - d(30) + Duration::hours(1)),
        None,
    )
    .await;
    progress(
        &app,
        done,
        modules[1],
        Some(now - d(29)),
        Some(now - d(29) + Duration::hours(3)),
        None,
    )
    .await;
    // Stuck in Beta for 10 days.
    let stuck = assignment(
        &app,
        &org,
        &flow_id,
        users[1],
        Fixture {
            assigned: Some(now - d(20)),
            started: Some(now - d(20)),
            ..Fixture::default()
        },
    )
    .await;
    progress(
        &app,
        stuck,
        modules[0],
        Some(now - d(20)),
        Some(now - d(10)),
        None,
    )
    .await;

    // The flow's page loads the section after it is shown (htmx); without script the section has
    // a page of its own with the same figures.
    let page = client.page(&format!("/dashboard/flows/{flow_id}")).await;
    assert!(
        page.contains(&format!(
            r#"hx-get="/dashboard/flows/{flow_id}/efficiency" hx-trigger="load""#
        )),
        "{page}"
    );
    let own_page = client
        .page(&format!("/dashboard/flows/{flow_id}/efficiency"))
        .await;
    assert!(own_page.contains("id=\"funnel-table\""), "{own_page}");
    let html = client
        .get_htmx(&format!("/dashboard/flows/{flow_id}/efficiency"))
        .await;
    assert!(!html.contains("<nav"), "a fragment: {html}");
    assert!(html.contains("id=\"funnel-chart\""), "{html}");
    assert!(html.contains("id=\"module-time-chart\""));
    // Alpha: reached 2, completed 2, stalled 0; times 1 hour and 10 days: median 433,800 s
    // (5 days 30 minutes), p90 3,600 + 0.9 × 860,400 = 777,960 s (9 days 6 minutes).
    assert_eq!(
        table_row(&html, "Alpha"),
        ["2", "2", "0", "5 days", "9 days"]
    );
    // Beta: reached 1 (the completed one), completed 1, stalled 1; one time of 3 hours.
    assert_eq!(
        table_row(&html, "Beta"),
        ["1", "1", "1", "3 hours", "3 hours"]
    );
    let assignments = flow_tests::dashboard::between(&html, "id=\"efficiency-assignments\">", "<")
        .expect("assignments");
    assert_eq!(assignments, "2");
    let on_time =
        flow_tests::dashboard::between(&html, "id=\"efficiency-on-time\">", "<").expect("on time");
    assert_eq!(on_time, "100%");
    // The chart says what it shows to a screen reader.
    assert!(html.contains("aria-label=\"For each of the 2 modules"));
}

#[tokio::test]
async fn the_compliance_page_shows_each_persons_status_per_required_flow_and_links_to_them() {
    let app = TestApp::spawn().await;
    let org = app.create_org(Tier::Enterprise).await;
    let other = app.create_org(Tier::Enterprise).await;
    let client = DashboardClient::admin(&app, org.id).await;
    let (flow_id, _) = flow(&app, &org, "Code of conduct", &["Read"], true).await;
    let users = people(
        &app,
        &org,
        &["ann@example.com", "bob@example.com", "cy@example.com"],
    )
    .await;
    sqlx::query("UPDATE users SET department = 'Sales' WHERE id = ANY($1)")
        .bind(&users[..2])
        .execute(&app.db)
        .await
        .expect("departments");
    let now = Utc::now();
    // Ann completed it, Bob has it with a due date far away, Cy does not have it.
    assignment(
        &app,
        &org,
        &flow_id,
        users[0],
        Fixture {
            assigned: Some(now - Duration::days(10)),
            started: Some(now - Duration::days(10)),
            completed: Some(now - Duration::days(9)),
            ..Fixture::default()
        },
    )
    .await;
    assignment(
        &app,
        &org,
        &flow_id,
        users[1],
        Fixture {
            assigned: Some(now - Duration::days(2)),
            due: Some(now + Duration::days(60)),
            ..Fixture::default()
        },
    )
    .await;
    // Another organization's person with a required flow of theirs.
    flow(&app, &other, "Theirs", &["One"], true).await;
    people(&app, &other, &["stranger@example.com"]).await;

    let home = client.page("/dashboard").await;
    assert!(home.contains("href=\"/dashboard/compliance\""));
    let users_page = client.page("/dashboard/users").await;
    assert!(users_page.contains("href=\"/dashboard/compliance\""));

    let html = client.page("/dashboard/compliance").await;
    assert!(html.contains("Code of conduct"), "{html}");
    assert!(!html.contains("stranger@example.com"));
    let row = |user: Uuid| {
        let id = UserId(user).to_string();
        let start = html
            .find(&format!("<tr data-user=\"{id}\">"))
            .unwrap_or_else(|| panic!("{id} not on the page"));
        let rest = &html[start..];
        rest[..rest.find("</tr>").expect("row end")].to_owned()
    };
    let ann = row(users[0]);
    assert!(ann.contains(&format!("href=\"/dashboard/users/{}\"", UserId(users[0]))));
    assert!(
        ann.contains("<span class=\"pill compliant\">Compliant</span>"),
        "{ann}"
    );
    assert!(ann.contains("1 of 1"));
    let bob = row(users[1]);
    assert!(
        bob.contains("<span class=\"pill pending\">Pending</span>"),
        "{bob}"
    );
    assert!(bob.contains("due "));
    assert!(bob.contains("0 of 1"));
    let cy = row(users[2]);
    assert!(
        cy.contains("<span class=\"pill not_assigned\">Not assigned</span>"),
        "{cy}"
    );
    let people_total =
        flow_tests::dashboard::between(&html, "id=\"total-people\">", "<").expect("total");
    assert_eq!(people_total, "3");
    assert!(html.contains("data-status=\"compliant\">Compliant: 1<"));
    assert!(html.contains("data-status=\"not_assigned\">Not assigned: 1<"));

    // Rolled up by department: Sales (Ann and Bob, one compliant) and the people without one.
    let groups = client.page("/dashboard/compliance?by=department").await;
    let table =
        flow_tests::dashboard::between(&groups, "<table id=\"compliance-groups\">", "</table>")
            .expect("groups table");
    assert!(
        table.contains("<a href=\"/dashboard/compliance?department=Sales\">Sales</a></td><td class=\"num\">2</td><td class=\"num\">1</td><td class=\"num\">50%</td>"),
        "{table}"
    );
    assert!(table.contains("(none)</td><td class=\"num\">1</td><td class=\"num\">0</td>"));
    // The department's people.
    let sales = client.page("/dashboard/compliance?department=sales").await;
    assert!(sales.contains(&format!("data-user=\"{}\"", UserId(users[0]))));
    assert!(!sales.contains(&format!("data-user=\"{}\"", UserId(users[2]))));

    // A refused filter says why, with a 400.
    let refused = client.get("/dashboard/compliance?group=nope").await;
    assert_eq!(refused.status, 400);
    assert!(refused.body.contains("filter.groupId must be a group id"));
}

#[tokio::test]
async fn the_compliance_page_pages_with_the_reports_cursor_and_says_when_nothing_is_required() {
    let app = TestApp::spawn().await;
    let org = app.create_org(Tier::Enterprise).await;
    let client = DashboardClient::admin(&app, org.id).await;
    let empty = client.page("/dashboard/compliance").await;
    assert!(empty.contains("marked required"), "{empty}");

    flow(&app, &org, "Required", &["One"], true).await;
    let emails: Vec<String> = (0..51)
        .map(|n| format!("person{n:02}@example.com"))
        .collect();
    let emails: Vec<&str> = emails.iter().map(String::as_str).collect();
    people(&app, &org, &emails).await;
    let first = client.page("/dashboard/compliance").await;
    assert_eq!(first.matches("<tr data-user=").count(), 50);
    let next = flow_tests::dashboard::between(&first, "<a href=\"", "\" id=\"next-page\"")
        .map(|text| {
            text.rsplit("<a href=\"")
                .next()
                .unwrap_or(text)
                .replace("&amp;", "&")
        })
        .expect("next page link");
    assert!(next.starts_with("/dashboard/compliance?cursor="), "{next}");
    let second = client.page(&next).await;
    assert_eq!(second.matches("<tr data-user=").count(), 1);
    assert!(!second.contains("id=\"next-page\""));
    assert!(second.contains("← First page"));
    let seen: Vec<&str> = [&first, &second]
        .iter()
        .flat_map(|html| {
            html.match_indices("<tr data-user=\"")
                .map(|(at, _)| &html[at + 15..at + 51])
        })
        .collect();
    let mut unique = seen.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), 51, "{seen:?}");
}
