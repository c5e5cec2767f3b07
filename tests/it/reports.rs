//! `POST /v1/flows/report`: metrics, lists, schedules, filters, pages and aggregates, checked
//! against figures computed by hand from fixtures with known timestamps.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use flow_common::db::orgs::Tier;
use flow_domain::ids::{AssignmentId, FlowId};
use flow_tests::TestApp;
use flow_tests::reports::{
    Fixture, REPORTED, all_pages, assignment_ids, create_flow, create_org_in_zone,
    insert_assignment, insert_many, report, report_ok, schedule_ids, security,
};
use serde_json::{Value, json};

#[tokio::test]
async fn report_metrics_lists_and_schedules_match_hand_computed_figures() {
    let app = TestApp::spawn().await;
    let fixture = security(&app).await;
    let flow_id = fixture.flow.id.to_string();

    let body = report_ok(&app, &fixture.org, json!({ "flowId": flow_id })).await;
    assert_eq!(body["flowId"], json!(flow_id));
    assert_eq!(body["flowName"], json!("Security Basics"));
    // Completion times 48 h, 6 h and 25 h: mean 94,800 s.
    assert_eq!(
        body["metrics"],
        json!({
            "totalAssignments": 8, "completedAssignments": 3,
            "averageCompletionTime": "1 day 2 hours", "averageCompletionSeconds": 94_800,
            "completionRate": 37.5, "inProgressAssignments": 1, "pendingAssignments": 1,
            "overdueAssignments": 3
        })
    );
    assert_eq!(
        assignment_ids(&body),
        fixture.ids_of(&["a1", "a2", "a3", "a4", "a5", "a6", "a7", "a8"])
    );
    let rows = body["assignments"].as_array().unwrap();
    for (row, (name, status)) in rows.iter().zip(REPORTED) {
        assert_eq!(row["status"], json!(status), "status of {name}");
        assert_eq!(row["totalModules"], json!(3));
        assert!(row.get("moduleProgress").is_none());
    }
    assert_eq!(
        rows[0],
        json!({
            "assignmentId": fixture.ids["a1"].to_string(), "assigneeEmail": "alice@example.com",
            "userActive": true,
            "assignedAt": "2025-03-03T09:00:00.000Z", "status": "completed",
            "completedModules": 3, "totalModules": 3, "dueDate": null,
            "startedAt": "2025-03-03T10:00:00.000Z", "completedAt": "2025-03-05T09:00:00.000Z",
            "priority": "medium"
        })
    );
    assert_eq!(rows[2]["completedModules"], json!(1));
    assert_eq!(body["nextCursor"], Value::Null);
    assert!(body.get("aggregates").is_none());
    assert!(body.get("downloadUrl").is_none());
    assert_eq!(
        body["schedules"],
        json!([
            { "scheduleId": fixture.schedules["s1"].to_string(), "assigneeEmail": "ivan@example.com",
              "scheduledAt": "2025-03-15T09:00:00.000Z", "status": "pending", "recurrence": "weekly" },
            { "scheduleId": fixture.schedules["s3"].to_string(), "assigneeEmail": "dave@example.com",
              "scheduledAt": "2025-03-20T09:00:00.000Z", "status": "overdue", "recurrence": "none" },
            { "scheduleId": fixture.schedules["s2"].to_string(), "assigneeEmail": "heidi@example.com",
              "scheduledAt": "2025-06-01T09:00:00.000Z", "status": "completed", "recurrence": "monthly" },
        ])
    );

    // Plain dates are days in the organization's zone; the end is exclusive (a6 at 04-02 08:00).
    let body = report_ok(
        &app,
        &fixture.org,
        json!({ "flowId": flow_id, "startDate": "2025-03-04", "endDate": "2025-04-02" }),
    )
    .await;
    assert_eq!(
        body["metrics"],
        json!({
            "totalAssignments": 4, "completedAssignments": 1,
            "averageCompletionTime": "6 hours", "averageCompletionSeconds": 21_600,
            "completionRate": 25.0, "inProgressAssignments": 1, "pendingAssignments": 0,
            "overdueAssignments": 2
        })
    );
    assert_eq!(
        assignment_ids(&body),
        fixture.ids_of(&["a2", "a3", "a4", "a5"])
    );
    assert_eq!(schedule_ids(&body), fixture.schedule_ids(&["s1", "s3"]));
    assert_eq!(
        body["range"],
        json!({ "startDate": "2025-03-04T00:00:00.000Z", "endDate": "2025-04-02T00:00:00.000Z",
                "timezone": "UTC" })
    );

    // Either bound alone; the start is inclusive and the end exclusive to the microsecond.
    let body = report_ok(
        &app,
        &fixture.org,
        json!({ "flowId": flow_id, "startDate": "2025-04-01" }),
    )
    .await;
    assert_eq!(assignment_ids(&body), fixture.ids_of(&["a6", "a7", "a8"]));
    assert_eq!(schedule_ids(&body), fixture.schedule_ids(&["s2"]));
    let body = report_ok(
        &app,
        &fixture.org,
        json!({ "flowId": flow_id, "endDate": "2025-03-04T12:00:00Z" }),
    )
    .await;
    assert_eq!(assignment_ids(&body), fixture.ids_of(&["a1"]));
    assert_eq!(body["metrics"]["completionRate"], json!(100.0));
    let body = report_ok(
        &app,
        &fixture.org,
        json!({ "flowId": flow_id, "startDate": "2025-03-04T12:00:00+00:00",
                "endDate": "2025-03-04T12:00:00.001Z" }),
    )
    .await;
    assert_eq!(assignment_ids(&body), fixture.ids_of(&["a2"]));

    // A range with nothing in it: zeros, null average, empty lists.
    let body = report_ok(
        &app,
        &fixture.org,
        json!({ "flowId": flow_id, "startDate": "2030-01-01" }),
    )
    .await;
    assert_eq!(
        body["metrics"],
        json!({
            "totalAssignments": 0, "completedAssignments": 0, "averageCompletionTime": null,
            "averageCompletionSeconds": null, "completionRate": 0.0,
            "inProgressAssignments": 0, "pendingAssignments": 0, "overdueAssignments": 0
        })
    );
    assert_eq!(body["assignments"], json!([]));
    assert_eq!(body["schedules"], json!([]));
}

#[tokio::test]
async fn status_filter_narrows_the_lists_and_never_the_metrics() {
    let app = TestApp::spawn().await;
    let fixture = security(&app).await;
    let flow_id = fixture.flow.id.to_string();
    // Schedules: s1 pending (03-15), s3 overdue via a4 (03-20), s2 completed via a8 (06-01).
    let schedules = [("s1", "pending"), ("s3", "overdue"), ("s2", "completed")];
    // (startDate, endDate, assignments in range, schedules in range)
    type Range<'a> = (
        Option<&'a str>,
        Option<&'a str>,
        &'a [&'a str],
        &'a [&'a str],
    );
    let ranges: [Range<'_>; 3] = [
        (
            None,
            None,
            &["a1", "a2", "a3", "a4", "a5", "a6", "a7", "a8"],
            &["s1", "s3", "s2"],
        ),
        (
            Some("2025-03-04"),
            Some("2025-04-02"),
            &["a2", "a3", "a4", "a5"],
            &["s1", "s3"],
        ),
        (Some("2025-04-01"), None, &["a6", "a7", "a8"], &["s2"]),
    ];
    for (start, end, in_range, schedules_in_range) in ranges {
        let mut base = json!({ "flowId": flow_id });
        if let Some(start) = start {
            base["startDate"] = json!(start);
        }
        if let Some(end) = end {
            base["endDate"] = json!(end);
        }
        let unfiltered = report_ok(&app, &fixture.org, base.clone()).await;
        for status in ["pending", "in_progress", "completed", "overdue"] {
            let mut body = base.clone();
            body["status"] = json!(status);
            for detailed in [false, true] {
                body["detailed"] = json!(detailed);
                let filtered = report_ok(&app, &fixture.org, body.clone()).await;
                let expected: Vec<&str> = REPORTED
                    .iter()
                    .filter(|(name, reported)| *reported == status && in_range.contains(name))
                    .map(|(name, _)| *name)
                    .collect();
                assert_eq!(
                    assignment_ids(&filtered),
                    fixture.ids_of(&expected),
                    "assignments for {body}"
                );
                assert!(
                    filtered["assignments"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .all(|row| row["status"] == json!(status))
                );
                let expected: Vec<&str> = schedules
                    .iter()
                    .filter(|(name, reported)| {
                        *reported == status && schedules_in_range.contains(name)
                    })
                    .map(|(name, _)| *name)
                    .collect();
                assert_eq!(
                    schedule_ids(&filtered),
                    fixture.schedule_ids(&expected),
                    "schedules for {body}"
                );
                assert_eq!(
                    filtered["metrics"], unfiltered["metrics"],
                    "metrics ignore the status filter ({body})"
                );
            }
        }
    }
}

#[tokio::test]
async fn detailed_reports_add_module_progress_in_flow_order() {
    let app = TestApp::spawn().await;
    let fixture = security(&app).await;
    let body = report_ok(
        &app,
        &fixture.org,
        json!({ "flowId": fixture.flow.id.to_string(), "detailed": true }),
    )
    .await;
    let rows = body["assignments"].as_array().unwrap();
    let by_id: HashMap<String, &Value> = rows
        .iter()
        .map(|row| (row["assignmentId"].as_str().unwrap().to_owned(), row))
        .collect();
    let [m1, m2, m3] = [
        fixture.flow.modules[0].to_string(),
        fixture.flow.modules[1].to_string(),
        fixture.flow.modules[2].to_string(),
    ];
    let a3 = by_id[&fixture.ids["a3"].to_string()];
    assert_eq!(
        a3["moduleProgress"],
        json!([
            { "moduleId": m1, "moduleName": "Passwords", "status": "completed",
              "startedAt": "2025-03-11T08:00:00.000Z", "completedAt": "2025-03-12T07:00:00.000Z" },
            { "moduleId": m2, "moduleName": "Phishing", "status": "in_progress",
              "startedAt": "2025-03-12T08:00:00.000Z" },
        ])
    );
    assert_eq!(a3["completedModules"], json!(1));
    let a1 = by_id[&fixture.ids["a1"].to_string()];
    let modules: Vec<&str> = a1["moduleProgress"]
        .as_array()
        .unwrap()
        .iter()
        .map(|module| module["moduleId"].as_str().unwrap())
        .collect();
    assert_eq!(modules, vec![m1.as_str(), m2.as_str(), m3.as_str()]);
    let a6 = by_id[&fixture.ids["a6"].to_string()];
    assert_eq!(
        a6["moduleProgress"],
        json!([]),
        "no module started: an empty list"
    );
}

#[tokio::test]
async fn overdue_is_reported_from_the_due_date_before_the_scheduler_records_it() {
    let app = TestApp::spawn().await;
    let org = create_org_in_zone(&app, Tier::Standard, "UTC", Some(10_000)).await;
    let flow = create_flow(&app, &org, "Compliance", &["Read", "Sign"]).await;
    let due_soon = (chrono::Utc::now() + chrono::Duration::seconds(2)).to_rfc3339();
    let id = insert_assignment(
        &app,
        &org,
        &flow,
        &Fixture::new("zoe@example.com", "2025-01-01T00:00:00Z", "pending").due(&due_soon),
    )
    .await;
    let body = json!({ "flowId": flow.id.to_string() });
    let before = report_ok(&app, &org, body.clone()).await;
    assert_eq!(before["assignments"][0]["status"], json!("pending"));
    assert_eq!(before["metrics"]["pendingAssignments"], json!(1));
    tokio::time::sleep(Duration::from_millis(2_100)).await;
    let after = report_ok(&app, &org, body.clone()).await;
    assert_eq!(after["assignments"][0]["status"], json!("overdue"));
    assert_eq!(after["metrics"]["overdueAssignments"], json!(1));
    assert_eq!(after["metrics"]["pendingAssignments"], json!(0));
    let pending = report_ok(
        &app,
        &org,
        json!({ "flowId": flow.id.to_string(), "status": "pending" }),
    )
    .await;
    assert_eq!(pending["assignments"], json!([]));
    let overdue = report_ok(
        &app,
        &org,
        json!({ "flowId": flow.id.to_string(), "status": "overdue" }),
    )
    .await;
    assert_eq!(assignment_ids(&overdue), vec![id.to_string()]);
    let stored: String = sqlx::query_scalar("SELECT status FROM assignments WHERE id = $1")
        .bind(id)
        .fetch_one(&app.db)
        .await
        .unwrap();
    assert_eq!(
        stored, "pending",
        "nothing was written; the report derived it"
    );
}

fn periods(body: &Value) -> Vec<Value> {
    body["aggregates"].as_array().expect("aggregates").clone()
}

#[tokio::test]
async fn aggregates_by_month_and_week_match_hand_computed_figures() {
    let app = TestApp::spawn().await;
    let fixture = security(&app).await;
    let flow_id = fixture.flow.id.to_string();
    let body = report_ok(
        &app,
        &fixture.org,
        json!({ "flowId": flow_id, "aggregate": { "by": "month" } }),
    )
    .await;
    // March: a1..a5 (a1, a2 completed; a4, a5 overdue); started→completed 47 h and 5.5 h.
    assert_eq!(
        periods(&body),
        vec![
            json!({ "period": "2025-03", "periodStart": "2025-03-01T00:00:00.000Z",
                    "periodEnd": "2025-04-01T00:00:00.000Z", "totalAssignments": 5,
                    "completedAssignments": 2, "overdueAssignments": 2, "completionRate": 40.0,
                    "averageDuration": "1 day 2 hours", "averageDurationSeconds": 94_500 }),
            json!({ "period": "2025-04", "periodStart": "2025-04-01T00:00:00.000Z",
                    "periodEnd": "2025-05-01T00:00:00.000Z", "totalAssignments": 2,
                    "completedAssignments": 0, "overdueAssignments": 1, "completionRate": 0.0,
                    "averageDuration": null, "averageDurationSeconds": null }),
            json!({ "period": "2025-05", "periodStart": "2025-05-01T00:00:00.000Z",
                    "periodEnd": "2025-06-01T00:00:00.000Z", "totalAssignments": 1,
                    "completedAssignments": 1, "overdueAssignments": 0, "completionRate": 100.0,
                    "averageDuration": "1 day", "averageDurationSeconds": 86_400 }),
        ]
    );
    // The list and metrics are still there (the same as without aggregation); the status filter
    // does not touch aggregates.
    let plain = report_ok(&app, &fixture.org, json!({ "flowId": flow_id })).await;
    assert_eq!(body["metrics"], plain["metrics"]);
    assert_eq!(body["assignments"], plain["assignments"]);
    let filtered = report_ok(
        &app,
        &fixture.org,
        json!({ "flowId": flow_id, "status": "pending", "aggregate": { "by": "month" } }),
    )
    .await;
    assert_eq!(filtered["aggregates"], body["aggregates"]);

    // Weeks of the range, empty ones included; rows outside the range do not count.
    let body = report_ok(
        &app,
        &fixture.org,
        json!({ "flowId": flow_id, "startDate": "2025-03-04", "endDate": "2025-04-02",
                "aggregate": { "by": "week", "metrics": ["total_assignments"] } }),
    )
    .await;
    let plain = report_ok(
        &app,
        &fixture.org,
        json!({ "flowId": flow_id, "startDate": "2025-03-04", "endDate": "2025-04-02" }),
    )
    .await;
    assert_eq!(body["metrics"], plain["metrics"]);
    let weeks: Vec<(String, i64, String)> = periods(&body)
        .iter()
        .map(|row| {
            assert_eq!(
                row.as_object().unwrap().len(),
                4,
                "only the asked figures: {row}"
            );
            (
                row["period"].as_str().unwrap().to_owned(),
                row["totalAssignments"].as_i64().unwrap(),
                row["periodStart"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        weeks,
        vec![
            ("2025-W10".into(), 1, "2025-03-03T00:00:00.000Z".into()),
            ("2025-W11".into(), 2, "2025-03-10T00:00:00.000Z".into()),
            ("2025-W12".into(), 1, "2025-03-17T00:00:00.000Z".into()),
            ("2025-W13".into(), 0, "2025-03-24T00:00:00.000Z".into()),
            ("2025-W14".into(), 0, "2025-03-31T00:00:00.000Z".into()),
        ]
    );

    // Quarter and year labels; a metrics subset always keeps totalAssignments.
    let body = report_ok(
        &app,
        &fixture.org,
        json!({ "flowId": flow_id, "aggregate": { "by": "quarter", "metrics": ["completion_rate"] } }),
    )
    .await;
    assert_eq!(
        periods(&body),
        vec![
            json!({ "period": "2025-Q1", "periodStart": "2025-01-01T00:00:00.000Z",
                    "periodEnd": "2025-04-01T00:00:00.000Z", "totalAssignments": 5,
                    "completionRate": 40.0 }),
            json!({ "period": "2025-Q2", "periodStart": "2025-04-01T00:00:00.000Z",
                    "periodEnd": "2025-07-01T00:00:00.000Z", "totalAssignments": 3,
                    "completionRate": 33.3 }),
        ]
    );
    let body = report_ok(
        &app,
        &fixture.org,
        json!({ "flowId": flow_id, "aggregate": { "by": "year", "metrics": [] } }),
    )
    .await;
    assert_eq!(periods(&body).len(), 1);
    assert_eq!(periods(&body)[0]["period"], json!("2025"));
    assert_eq!(periods(&body)[0]["completionRate"], json!(37.5));
    let body = report_ok(
        &app,
        &fixture.org,
        json!({ "flowId": flow_id, "startDate": "2025-03-01", "endDate": "2025-03-08",
                "aggregate": { "by": "day", "metrics": ["completed_assignments"] } }),
    )
    .await;
    let days: Vec<(String, i64, i64)> = periods(&body)
        .iter()
        .map(|row| {
            (
                row["period"].as_str().unwrap().to_owned(),
                row["totalAssignments"].as_i64().unwrap(),
                row["completedAssignments"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(days.len(), 7);
    assert_eq!(days[2], ("2025-03-03".to_owned(), 1, 1));
    assert_eq!(days[3], ("2025-03-04".to_owned(), 1, 1));
    assert_eq!(days[6], ("2025-03-07".to_owned(), 0, 0));
}

#[tokio::test]
async fn aggregates_cut_periods_in_the_organization_zone_across_daylight_saving() {
    let app = TestApp::spawn().await;
    let org = create_org_in_zone(&app, Tier::Standard, "Europe/Paris", Some(10_000)).await;
    let flow = create_flow(&app, &org, "Onboarding", &["Welcome"]).await;
    // Paris moves to summer time on 2025-03-30 at 02:00 (a 23-hour day) and back on 2025-10-26
    // at 03:00 (a 25-hour day).
    for (email, assigned, status) in [
        ("b1@example.com", "2025-03-29T22:30:00Z", "completed"), // 03-29 23:30 CET
        ("b2@example.com", "2025-03-29T23:30:00Z", "completed"), // 03-30 00:30 CET
        ("b3@example.com", "2025-03-30T21:30:00Z", "pending"),   // 03-30 23:30 CEST
        ("b4@example.com", "2025-03-30T22:30:00Z", "pending"),   // 03-31 00:30 CEST
        ("c1@example.com", "2025-10-25T22:30:00Z", "pending"),   // 10-26 00:30 CEST
        ("c2@example.com", "2025-10-26T22:30:00Z", "pending"),   // 10-26 23:30 CET
    ] {
        let mut fixture = Fixture::new(email, assigned, status);
        if status == "completed" {
            fixture = fixture
                .started("2025-03-31T08:00:00Z")
                .completed("2025-03-31T09:00:00Z");
        }
        insert_assignment(&app, &org, &flow, &fixture).await;
    }
    let flow_id = flow.id.to_string();
    let days = |body: &Value| -> Vec<(String, String, String, i64)> {
        periods(body)
            .iter()
            .map(|row| {
                (
                    row["period"].as_str().unwrap().to_owned(),
                    row["periodStart"].as_str().unwrap().to_owned(),
                    row["periodEnd"].as_str().unwrap().to_owned(),
                    row["totalAssignments"].as_i64().unwrap(),
                )
            })
            .collect()
    };
    let body = report_ok(
        &app,
        &org,
        json!({ "flowId": flow_id, "startDate": "2025-03-29", "endDate": "2025-04-01",
                "aggregate": { "by": "day" } }),
    )
    .await;
    assert_eq!(
        body["range"],
        json!({ "startDate": "2025-03-28T23:00:00.000Z", "endDate": "2025-03-31T22:00:00.000Z",
                "timezone": "Europe/Paris" })
    );
    assert_eq!(
        days(&body),
        vec![
            (
                "2025-03-29".into(),
                "2025-03-28T23:00:00.000Z".into(),
                "2025-03-29T23:00:00.000Z".into(),
                1
            ),
            (
                "2025-03-30".into(),
                "2025-03-29T23:00:00.000Z".into(),
                "2025-03-30T22:00:00.000Z".into(),
                2
            ),
            (
                "2025-03-31".into(),
                "2025-03-30T22:00:00.000Z".into(),
                "2025-03-31T22:00:00.000Z".into(),
                1
            ),
        ]
    );
    assert_eq!(periods(&body)[1]["completionRate"], json!(50.0));
    assert_eq!(body["metrics"]["totalAssignments"], json!(4));

    // The 25-hour day in October.
    let body = report_ok(
        &app,
        &org,
        json!({ "flowId": flow_id, "startDate": "2025-10-26", "endDate": "2025-10-27",
                "aggregate": { "by": "day" } }),
    )
    .await;
    assert_eq!(
        days(&body),
        vec![(
            "2025-10-26".into(),
            "2025-10-25T22:00:00.000Z".into(),
            "2025-10-26T23:00:00.000Z".into(),
            2
        )]
    );

    // Weeks start on Monday at local midnight, whatever the offset.
    let body = report_ok(
        &app,
        &org,
        json!({ "flowId": flow_id, "startDate": "2025-03-24", "endDate": "2025-04-07",
                "aggregate": { "by": "week" } }),
    )
    .await;
    assert_eq!(
        days(&body),
        vec![
            (
                "2025-W13".into(),
                "2025-03-23T23:00:00.000Z".into(),
                "2025-03-30T22:00:00.000Z".into(),
                3
            ),
            (
                "2025-W14".into(),
                "2025-03-30T22:00:00.000Z".into(),
                "2025-04-06T22:00:00.000Z".into(),
                1
            ),
        ]
    );

    // A time zone in the request overrides the organization's, for plain dates and periods.
    let body = report_ok(
        &app,
        &org,
        json!({ "flowId": flow_id, "startDate": "2025-03-29", "endDate": "2025-04-01",
                "timezone": "UTC", "aggregate": { "by": "day" } }),
    )
    .await;
    assert_eq!(
        days(&body),
        vec![
            (
                "2025-03-29".into(),
                "2025-03-29T00:00:00.000Z".into(),
                "2025-03-30T00:00:00.000Z".into(),
                2
            ),
            (
                "2025-03-30".into(),
                "2025-03-30T00:00:00.000Z".into(),
                "2025-03-31T00:00:00.000Z".into(),
                2
            ),
            (
                "2025-03-31".into(),
                "2025-03-31T00:00:00.000Z".into(),
                "2025-04-01T00:00:00.000Z".into(),
                0
            ),
        ]
    );
}

#[tokio::test]
async fn an_empty_period_has_no_completion_rate_rather_than_zero() {
    let app = TestApp::spawn().await;
    let org = create_org_in_zone(&app, Tier::Standard, "UTC", Some(10_000)).await;
    let flow = create_flow(&app, &org, "Gaps", &["Review"]).await;
    // Weeks 2026-W10 and 2026-W12 have assignments; 2026-W11 between them has none.
    for (email, assigned, status) in [
        ("g1@example.com", "2026-03-03T10:00:00Z", "completed"),
        ("g2@example.com", "2026-03-17T10:00:00Z", "pending"),
    ] {
        let mut fixture = Fixture::new(email, assigned, status);
        if status == "completed" {
            fixture = fixture
                .started("2026-03-04T10:00:00Z")
                .completed("2026-03-04T12:00:00Z");
        }
        insert_assignment(&app, &org, &flow, &fixture).await;
    }
    let body = report_ok(
        &app,
        &org,
        json!({ "flowId": flow.id.to_string(),
                "aggregate": { "by": "week", "metrics": ["completion_rate"] } }),
    )
    .await;
    let rates: Vec<(Value, Value, Value)> = periods(&body)
        .iter()
        .map(|period| {
            (
                period["period"].clone(),
                period["totalAssignments"].clone(),
                period["completionRate"].clone(),
            )
        })
        .collect();
    assert_eq!(
        rates,
        [
            (json!("2026-W10"), json!(1), json!(100.0)),
            (json!("2026-W11"), json!(0), Value::Null),
            (json!("2026-W12"), json!(1), json!(0.0)),
        ]
    );
    // Null, not absent: the rate was asked for.
    assert!(
        periods(&body)[1]
            .as_object()
            .is_some_and(|period| period.contains_key("completionRate"))
    );
}

#[tokio::test]
async fn iso_weeks_cross_the_year_boundary() {
    let app = TestApp::spawn().await;
    let org = create_org_in_zone(&app, Tier::Standard, "UTC", Some(10_000)).await;
    let flow = create_flow(&app, &org, "Year end", &["Review"]).await;
    // 2026 has 53 ISO weeks: 2026-W53 runs from Monday 2026-12-28 to Sunday 2027-01-03.
    for (email, assigned, status) in [
        ("y1@example.com", "2026-12-30T10:00:00Z", "completed"),
        ("y2@example.com", "2027-01-02T10:00:00Z", "completed"),
        ("y3@example.com", "2027-01-04T10:00:00Z", "pending"),
    ] {
        let mut fixture = Fixture::new(email, assigned, status);
        if status == "completed" {
            fixture = fixture
                .started("2027-01-05T10:00:00Z")
                .completed("2027-01-05T12:00:00Z");
        }
        insert_assignment(&app, &org, &flow, &fixture).await;
    }
    let flow_id = flow.id.to_string();
    let body = report_ok(
        &app,
        &org,
        json!({ "flowId": flow_id, "aggregate": { "by": "week", "metrics": ["completion_rate"] } }),
    )
    .await;
    assert_eq!(
        periods(&body),
        vec![
            json!({ "period": "2026-W53", "periodStart": "2026-12-28T00:00:00.000Z",
                    "periodEnd": "2027-01-04T00:00:00.000Z", "totalAssignments": 2,
                    "completionRate": 100.0 }),
            json!({ "period": "2027-W01", "periodStart": "2027-01-04T00:00:00.000Z",
                    "periodEnd": "2027-01-11T00:00:00.000Z", "totalAssignments": 1,
                    "completionRate": 0.0 }),
        ]
    );
    assert_eq!(body["metrics"]["completionRate"], json!(66.7));
    let body = report_ok(
        &app,
        &org,
        json!({ "flowId": flow_id, "aggregate": { "by": "year", "metrics": ["total_assignments"] } }),
    )
    .await;
    let years: Vec<(String, i64)> = periods(&body)
        .iter()
        .map(|row| {
            (
                row["period"].as_str().unwrap().to_owned(),
                row["totalAssignments"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(years, vec![("2026".into(), 1), ("2027".into(), 2)]);
}

#[tokio::test]
async fn pagination_returns_every_assignment_once_while_assignments_are_inserted() {
    let app = TestApp::spawn().await;
    let org = create_org_in_zone(&app, Tier::Enterprise, "UTC", Some(100_000)).await;
    let flow = create_flow(&app, &org, "Paged", &["One"]).await;
    // 400 assignments one second apart, and 40 more sharing one timestamp (ties on assignedAt are
    // broken by id).
    insert_many(&app, &org, &flow, 400, "2025-06-01T00:00:00Z", "early").await;
    for index in 0..40 {
        insert_assignment(
            &app,
            &org,
            &flow,
            &Fixture::new(
                &format!("tie-{index}@example.com"),
                "2025-06-01T00:03:00Z",
                "pending",
            ),
        )
        .await;
    }
    let existing: HashSet<String> =
        sqlx::query_scalar::<_, AssignmentId>("SELECT id FROM assignments WHERE flow_id = $1")
            .bind(flow.id)
            .fetch_all(&app.db)
            .await
            .unwrap()
            .into_iter()
            .map(|id| id.to_string())
            .collect();
    assert_eq!(existing.len(), 440);

    // Meanwhile: real assigns through the API (assignedAt = now, written by the worker a moment
    // later) and late rows landing inside pages already read.
    let emails: Vec<String> = (0..60).map(|n| format!("new-{n}@example.com")).collect();
    let refs: Vec<&str> = emails.iter().map(String::as_str).collect();
    app.create_users(&org, &refs).await;
    let writer = {
        let client = app.client.clone();
        let base = app.base_url.clone();
        let key = org.key.clone();
        let pool = app.db.clone();
        let flow_id = flow.id;
        let org_id = org.id;
        tokio::spawn(async move {
            for (index, email) in emails.iter().enumerate() {
                let response = client
                    .post(format!("{base}/v1/flows/assign"))
                    .bearer_auth(&key)
                    .json(&json!({ "flowId": flow_id.to_string(), "userEmail": email }))
                    .send()
                    .await
                    .expect("assign");
                assert_eq!(response.status(), 200);
                let late_user: flow_domain::ids::UserId = sqlx::query_scalar(
                    "INSERT INTO users (id, org_id, email, email_normalized)
                     VALUES ($1, $2, $3, $3) RETURNING id",
                )
                .bind(flow_domain::ids::UserId::new())
                .bind(org_id)
                .bind(format!("late-{index}@example.com"))
                .fetch_one(&pool)
                .await
                .expect("late user");
                sqlx::query(
                    "INSERT INTO assignments (id, org_id, flow_id, user_id, status, assigned_at)
                     VALUES ($1, $2, $3, $4, 'pending',
                             '2025-06-01T00:00:00Z'::timestamptz + $5 * interval '7 seconds')",
                )
                .bind(AssignmentId::new())
                .bind(org_id)
                .bind(flow_id)
                .bind(late_user)
                .bind(index as i32)
                .execute(&pool)
                .await
                .expect("late assignment");
                tokio::time::sleep(Duration::from_millis(15)).await;
            }
        })
    };
    let mut seen: Vec<String> = Vec::new();
    let mut positions: Vec<(String, String)> = Vec::new();
    let mut body = json!({ "flowId": flow.id.to_string(), "limit": 23 });
    loop {
        let page = report_ok(&app, &org, body.clone()).await;
        for row in page["assignments"].as_array().unwrap() {
            seen.push(row["assignmentId"].as_str().unwrap().to_owned());
            positions.push((
                row["assignedAt"].as_str().unwrap().to_owned(),
                row["assignmentId"].as_str().unwrap().to_owned(),
            ));
        }
        match page["nextCursor"].as_str() {
            Some(cursor) => body["cursor"] = json!(cursor),
            None => break,
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    writer.await.unwrap();
    let unique: HashSet<&String> = seen.iter().collect();
    assert_eq!(unique.len(), seen.len(), "no assignment appears twice");
    for id in &existing {
        assert!(
            unique.contains(id),
            "assignment {id} that existed before paging was missed"
        );
    }
    let mut sorted = positions.clone();
    sorted.sort();
    assert_eq!(positions, sorted, "pages follow (assignedAt, id) order");
    // Once the writes settle, a fresh walk sees all of them exactly once.
    let total = app
        .eventually(Duration::from_secs(10), "assigns to persist", || async {
            let count: i64 =
                sqlx::query_scalar("SELECT count(*) FROM assignments WHERE flow_id = $1")
                    .bind(flow.id)
                    .fetch_one(&app.db)
                    .await
                    .unwrap();
            (count == 560).then_some(count)
        })
        .await;
    let rows = all_pages(&app, &org, json!({ "flowId": flow.id.to_string() }), 97).await;
    let ids: HashSet<&str> = rows
        .iter()
        .map(|row| row["assignmentId"].as_str().unwrap())
        .collect();
    assert_eq!(rows.len() as i64, total);
    assert_eq!(ids.len() as i64, total);
}

#[tokio::test]
async fn invalid_report_requests_are_400_naming_the_field() {
    let app = TestApp::spawn().await;
    let org = create_org_in_zone(&app, Tier::Standard, "UTC", Some(10_000)).await;
    let flow = create_flow(&app, &org, "Validation", &["One"]).await;
    let flow_id = flow.id.to_string();
    let cases: Vec<(Value, &str)> = vec![
        (
            json!({ "flowId": flow_id, "startDate": "2025-03-02", "endDate": "2025-03-01" }),
            "endDate must be after startDate",
        ),
        (
            json!({ "flowId": flow_id, "startDate": "2025-03-01T10:00:00Z", "endDate": "2025-03-01T10:00:00Z" }),
            "endDate must be after startDate",
        ),
        (
            json!({ "flowId": flow_id, "status": "done" }),
            "status must be one of: pending, in_progress, completed, overdue, cancelled",
        ),
        (
            json!({ "flowId": flow_id, "format": "xml" }),
            "format must be one of: csv, excel, pdf",
        ),
        (
            json!({ "flowId": flow_id, "aggregate": { "by": "fortnight" } }),
            "aggregate.by must be one of: day, week, month, quarter, year",
        ),
        (
            json!({ "flowId": flow_id, "aggregate": { "by": "week", "metrics": ["median"] } }),
            "allowed values: completion_rate, average_duration, total_assignments, completed_assignments, overdue_assignments",
        ),
        (
            json!({ "flowId": flow_id, "aggregate": {} }),
            "aggregate.by is required",
        ),
        (
            json!({ "flowId": flow_id, "aggregate": { "by": "day", "bucket": 2 } }),
            "unknown field: aggregate.bucket",
        ),
        (
            json!({ "flowId": flow_id, "limit": 0 }),
            "limit must be between 1 and 10000",
        ),
        (
            json!({ "flowId": flow_id, "limit": 10_001 }),
            "limit must be between 1 and 10000",
        ),
        (json!({ "flowId": flow_id, "limit": "ten" }), "limit"),
        (
            json!({ "flowId": flow_id, "cursor": "not-a-cursor" }),
            "cursor is not valid",
        ),
        (
            json!({ "flowId": flow_id, "startDate": "03/01/2025" }),
            "startDate must be an ISO 8601 date",
        ),
        (
            json!({ "flowId": flow_id, "endDate": "2025-02-30" }),
            "endDate must be an ISO 8601 date",
        ),
        (
            json!({ "flowId": flow_id, "timezone": "Mars/Olympus" }),
            "timezone must be an IANA time zone name",
        ),
        (json!({ "flowId": flow_id, "detailed": "yes" }), "detailed"),
        (
            json!({ "flowId": flow_id, "groupBy": "week" }),
            "unknown field: groupBy",
        ),
        (json!({}), "flowId is required"),
        (
            json!({ "flowId": flow_id, "startDate": "1900-01-01", "endDate": "2025-01-01",
                    "aggregate": { "by": "day" } }),
            "at most 10000 are allowed",
        ),
    ];
    for (body, message) in cases {
        let response = report(&app, &org, body.clone()).await;
        assert_eq!(response.status, 400, "{body} → {}", response.body);
        assert_eq!(response.body["error"], json!("invalid_request"));
        let text = response.body["message"].as_str().unwrap_or_default();
        assert!(
            text.contains(message),
            "{body}: message {text:?} lacks {message:?}"
        );
    }
    // Not JSON at all, and the wrong content type.
    let response = app
        .client
        .post(format!("{}/v1/flows/report", app.base_url))
        .bearer_auth(&org.key)
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    let response = app
        .client
        .post(format!("{}/v1/flows/report", app.base_url))
        .bearer_auth(&org.key)
        .header("content-type", "text/plain")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 415);
    let count: i64 = sqlx::query_scalar("SELECT count(*) FROM exports")
        .fetch_one(&app.db)
        .await
        .unwrap();
    assert_eq!(count, 0, "no bad request left an export behind");
}

#[tokio::test]
async fn unknown_malformed_or_foreign_flows_are_404() {
    let app = TestApp::spawn().await;
    let org = create_org_in_zone(&app, Tier::Standard, "UTC", Some(10_000)).await;
    let other = create_org_in_zone(&app, Tier::Standard, "UTC", Some(10_000)).await;
    let foreign = create_flow(&app, &other, "Theirs", &["One"]).await;
    insert_assignment(
        &app,
        &other,
        &foreign,
        &Fixture::new("secret@other.example", "2025-01-01T00:00:00Z", "pending"),
    )
    .await;
    for flow_id in [
        FlowId::new().to_string(),
        foreign.id.to_string(),
        "flow_123".to_owned(),
        AssignmentId::new().to_string(),
        "not an id".to_owned(),
    ] {
        for extra in [json!({}), json!({ "format": "csv", "detailed": true })] {
            let mut body = extra.clone();
            body["flowId"] = json!(flow_id);
            let response = report(&app, &org, body).await;
            assert_eq!(response.status, 404, "{flow_id}: {}", response.body);
            assert_eq!(response.body["error"], json!("not_found"));
            assert_eq!(response.body["message"], json!("flow not found"));
        }
    }
    let count: i64 = sqlx::query_scalar("SELECT count(*) FROM exports")
        .fetch_one(&app.db)
        .await
        .unwrap();
    assert_eq!(count, 0);
}

#[tokio::test]
async fn reports_require_a_valid_key() {
    let app = TestApp::spawn().await;
    let org = create_org_in_zone(&app, Tier::Standard, "UTC", Some(10_000)).await;
    let flow = create_flow(&app, &org, "Keys", &["One"]).await;
    let body = json!({ "flowId": flow.id.to_string() });
    for key in [
        None,
        Some("fsk_0000000000000000000000000000000000000000000000000"),
        Some("garbage"),
    ] {
        let response = app
            .request(
                reqwest::Method::POST,
                "/v1/flows/report",
                key,
                Some(&body),
                &[],
            )
            .await;
        assert_eq!(response.status, 401, "{key:?}");
        assert_eq!(response.body["error"], json!("unauthorized"));
    }
}

#[tokio::test]
async fn reports_are_rate_limited_by_size() {
    let app = TestApp::spawn().await;
    // Standard tier: 50 report requests a minute.
    let org = create_org_in_zone(&app, Tier::Standard, "UTC", None).await;
    let flow = create_flow(&app, &org, "Limits", &["One"]).await;
    insert_many(&app, &org, &flow, 25_000, "2025-01-01T00:00:00Z", "limit").await;
    let flow_id = flow.id.to_string();

    let small = report(&app, &org, json!({ "flowId": flow_id, "limit": 10 })).await;
    assert_eq!(small.status, 200);
    assert_eq!(small.header("ratelimit-limit"), Some("50"));
    let before: i64 = small
        .header("ratelimit-remaining")
        .unwrap()
        .parse()
        .unwrap();
    // An export of 25,000 rows: one request for the page and three for the rows.
    let export = report(
        &app,
        &org,
        json!({ "flowId": flow_id, "limit": 10, "format": "csv" }),
    )
    .await;
    assert_eq!(export.status, 200, "{}", export.body);
    let after: i64 = export
        .header("ratelimit-remaining")
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        (3..=4).contains(&(before - after)),
        "an export of 25,000 rows costs 4 (remaining {before} → {after})"
    );
    // Pages of 10,000 cost 10 each: the allowance runs out within a few requests.
    let mut limited = None;
    for _ in 0..10 {
        let response = report(&app, &org, json!({ "flowId": flow_id, "limit": 10_000 })).await;
        if response.status == 429 {
            limited = Some(response);
            break;
        }
        assert_eq!(response.status, 200);
        assert_eq!(
            response.body["assignments"].as_array().unwrap().len(),
            10_000
        );
    }
    let limited = limited.expect("a 429 once the minute's allowance is spent");
    assert_eq!(limited.body["error"], json!("rate_limit_exceeded"));
    let retry_after = limited.body["retry_after"].as_u64().unwrap();
    assert!(retry_after >= 1);
    assert_eq!(
        limited.header("retry-after"),
        Some(retry_after.to_string().as_str())
    );
    assert_eq!(limited.header("ratelimit-limit"), Some("50"));
}

#[tokio::test]
async fn a_helper_that_cannot_import_the_snapshot_goes_back_to_the_pool_usable() {
    use flow_common::db::snapshot::Snapshot;
    let app = TestApp::spawn_with(flow_tests::TestOptions {
        assign_worker: false,
        ..flow_tests::TestOptions::default()
    })
    .await;
    // Two connections: the snapshot's own, and the one helper.
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(2)
        .connect_with((*app.db.connect_options()).clone())
        .await
        .expect("pool");
    let mut snapshot = Snapshot::begin(&pool).await.expect("snapshot");
    // A failing statement aborts the snapshot's transaction, and its exported snapshot with it
    // (as when a report's first query fails while another part joins a helper).
    sqlx::query("SELECT 1 / 0")
        .execute(snapshot.connection())
        .await
        .expect_err("division by zero");
    {
        let mut helper = snapshot.helper().await.expect("a helper connection");
        assert!(
            helper.join().await.is_err(),
            "the snapshot cannot be imported"
        );
    }
    // The helper's connection is the pool's only free one: the next user gets it, out of any
    // transaction (before, it came back inside the aborted import and every statement failed).
    let mut next = pool.acquire().await.expect("connection");
    let one: i32 = sqlx::query_scalar("SELECT 1")
        .fetch_one(&mut *next)
        .await
        .expect("the returned connection works");
    assert_eq!(one, 1);
    drop(next);
    snapshot.close().await.ok();
}
