//! Recurring schedules: created over the API, assigned by the scheduler through the normal assign
//! path, advanced on the organization's calendar with month ends clamped.

use std::time::Duration;

use chrono::{Datelike, NaiveDate, TimeZone, Utc};
use flow_common::db::orgs::Tier;
use flow_tests::{TestApp, TestOptions};
use serde_json::{Value, json};

/// The first monthly occurrence of a series anchored on January 31 at 09:00 UTC that is after
/// `now`: the 31st, or the last day of shorter months.
fn next_month_end_after(anchor_year: i32, now: chrono::DateTime<Utc>) -> chrono::DateTime<Utc> {
    let mut year = anchor_year;
    let mut month = 1;
    loop {
        let day = (28..=31)
            .rev()
            .find(|day| NaiveDate::from_ymd_opt(year, month, *day).is_some())
            .expect("a last day");
        let at = Utc
            .with_ymd_and_hms(year, month, day, 9, 0, 0)
            .single()
            .expect("time");
        if at > now {
            return at;
        }
        month += 1;
        if month == 13 {
            month = 1;
            year += 1;
        }
    }
}

#[tokio::test]
async fn a_monthly_schedule_from_january_31_lands_on_month_ends_without_drifting() {
    let app = TestApp::spawn_with(TestOptions {
        scheduler: true,
        ..TestOptions::default()
    })
    .await;
    let org = app.create_org(Tier::Standard).await;
    app.create_users(&org, &["alice@example.com"]).await;
    let flow = app.create_flow(&org, "Annual compliance", &[20]).await;
    let year = Utc::now().year();
    let created = app
        .post(
            &org,
            "/v1/flows/schedule",
            &json!({
                "flowId": flow, "userEmail": "alice@example.com",
                "scheduledAt": format!("{year}-01-31T09:00:00Z"), "recurrence": "monthly",
                "priority": "high", "notes": "Every month"
            }),
        )
        .await;
    assert_eq!(created.status, 201, "{:?}", created.body);
    let schedule = created.body["scheduleId"].as_str().expect("id").to_owned();
    assert!(schedule.starts_with("sch_"));
    assert_eq!(created.body["status"], json!("pending"));
    assert_eq!(created.body["recurrence"], json!("monthly"));
    assert_eq!(created.body["occurrences"], json!(0));

    // The scheduler assigns the due occurrence and moves to the next one after now, skipping the
    // months it missed.
    let advanced = app
        .eventually(
            Duration::from_secs(10),
            "the schedule to advance",
            || async {
                let response = app.get(&org, &format!("/v1/schedules/{schedule}")).await;
                // Advanced, and its assignment persisted by the assign-worker.
                (response.body["occurrences"] != json!(0)
                    && response.body["currentAssignmentId"].is_string())
                .then_some(response.body)
            },
        )
        .await;
    let expected = next_month_end_after(year, Utc::now());
    assert_eq!(
        advanced["scheduledAt"],
        json!(flow_domain::format_timestamp(expected))
    );
    assert_eq!(advanced["active"], json!(true));
    let assignment = advanced["currentAssignmentId"]
        .as_str()
        .expect("current assignment")
        .to_owned();
    // currentAssignmentId is set when the assignment is persisted.
    let assigned = app
        .get(&org, &format!("/v1/assignments/{assignment}"))
        .await;
    assert_eq!(assigned.status, 200, "{:?}", assigned.body);
    let assigned = assigned.body;
    assert_eq!(assigned["scheduleId"], json!(schedule));
    assert_eq!(assigned["priority"], json!("high"));
    assert_eq!(assigned["notes"], json!("Every month"));
    assert_eq!(advanced["status"], json!("pending"));
    assert_eq!(app.events_of(&assignment).await, ["flow.assigned"]);

    // The report lists the schedule with its next time.
    let report = app
        .post(&org, "/v1/flows/report", &json!({ "flowId": flow }))
        .await;
    assert_eq!(report.status, 200, "{:?}", report.body);
    let schedules = report.body["schedules"].as_array().expect("schedules");
    assert_eq!(schedules.len(), 1);
    assert_eq!(schedules[0]["scheduleId"], json!(schedule));
    assert_eq!(schedules[0]["recurrence"], json!("monthly"));
}

#[tokio::test]
async fn a_one_off_schedule_assigns_once_with_its_due_date_and_then_stops() {
    let app = TestApp::spawn_with(TestOptions {
        scheduler: true,
        ..TestOptions::default()
    })
    .await;
    let org = app.create_org(Tier::Standard).await;
    app.create_users(&org, &["bob@example.com"]).await;
    let flow = app.create_flow(&org, "Induction", &[20]).await;
    let at = Utc::now() + chrono::Duration::milliseconds(800);
    let created = app
        .post(
            &org,
            "/v1/flows/schedule",
            &json!({
                "flowId": flow, "userEmail": "BOB@example.com",
                "scheduledAt": at.to_rfc3339(), "dueInDays": 7
            }),
        )
        .await;
    assert_eq!(created.status, 201, "{:?}", created.body);
    assert_eq!(created.body["recurrence"], json!("none"));
    let schedule = created.body["scheduleId"].as_str().expect("id").to_owned();
    let done = app
        .eventually(Duration::from_secs(10), "the occurrence", || async {
            let response = app.get(&org, &format!("/v1/schedules/{schedule}")).await;
            (response.body["active"] == json!(false)
                && response.body["currentAssignmentId"].is_string())
            .then_some(response.body)
        })
        .await;
    assert_eq!(done["occurrences"], json!(1));
    let assignment = done["currentAssignmentId"]
        .as_str()
        .expect("assignment")
        .to_owned();
    // currentAssignmentId is set when the assignment is persisted.
    let assigned = app
        .get(&org, &format!("/v1/assignments/{assignment}"))
        .await;
    assert_eq!(assigned.status, 200, "{:?}", assigned.body);
    let assigned = assigned.body;
    let due = chrono::DateTime::parse_from_rfc3339(assigned["dueDate"].as_str().expect("due"))
        .expect("due date");
    let scheduled = chrono::DateTime::parse_from_rfc3339(done["scheduledAt"].as_str().expect("at"))
        .expect("scheduled");
    assert_eq!(due - scheduled, chrono::Duration::days(7));
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(app.assignment_count().await, 1);
}

#[tokio::test]
async fn schedule_errors_and_deletion() {
    let app = TestApp::spawn_with(TestOptions {
        assign_worker: false,
        ..TestOptions::default()
    })
    .await;
    let org = app.create_org(Tier::Standard).await;
    let other = app.create_org(Tier::Standard).await;
    app.create_users(&org, &["carol@example.com"]).await;
    let flow = app.create_flow(&org, "Flow", &[20]).await;
    let valid =
        json!({ "flowId": flow, "userEmail": "carol@example.com", "scheduledAt": "2099-03-01" });
    let with = |field: &str, value: Value| {
        let mut body = valid.clone();
        body[field] = value;
        body
    };
    let without = |field: &str| {
        let mut body = valid.clone();
        body.as_object_mut().expect("object").remove(field);
        body
    };
    for (body, status, message) in [
        (without("flowId"), 400, "flowId is required"),
        (without("userEmail"), 400, "userEmail is required"),
        (without("scheduledAt"), 400, "scheduledAt is required"),
        (
            with("recurrence", json!("hourly")),
            400,
            "recurrence must be one of: none, daily, weekly, monthly, quarterly, yearly",
        ),
        (
            with("dueInDays", json!(0)),
            400,
            "dueInDays must be between 1 and 3650",
        ),
        (
            with("priority", json!("urgent")),
            400,
            "priority must be one of: low, medium, high",
        ),
        (
            with("scheduledAt", json!("next week")),
            400,
            "scheduledAt must be an ISO 8601 date (YYYY-MM-DD) or RFC 3339 timestamp",
        ),
        (
            with("scheduledAt", json!("-0001-01-01")),
            400,
            "scheduledAt must be a date between the years 0001 and 9999",
        ),
        (
            with("scheduledAt", json!("10000-01-01T00:00:00Z")),
            400,
            "scheduledAt must be an ISO 8601 date (YYYY-MM-DD) or RFC 3339 timestamp",
        ),
        (
            with("scheduledAt", json!("0001-01-01T09:00:00Z")),
            400,
            "scheduledAt must not be more than one year in the past",
        ),
        (
            with(
                "scheduledAt",
                json!((Utc::now() - chrono::Duration::days(367)).to_rfc3339()),
            ),
            400,
            "scheduledAt must not be more than one year in the past",
        ),
        (with("flowId", json!("flow_nope")), 404, "flow not found"),
        (
            with("userEmail", json!("nobody@example.com")),
            404,
            "user nobody@example.com not found in this organization",
        ),
    ] {
        let response = app.post(&org, "/v1/flows/schedule", &body).await;
        assert_eq!(response.status, status, "{body}: {:?}", response.body);
        assert_eq!(response.body["message"], json!(message), "{body}");
    }
    assert_eq!(
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM schedules")
            .fetch_one(&app.db)
            .await
            .expect("count"),
        0,
        "refused schedules write nothing"
    );
    // The bounds themselves are accepted: up to a year ago, and the last day of the year 9999.
    for at in [
        (Utc::now() - chrono::Duration::days(365)).to_rfc3339(),
        "9999-12-31".to_owned(),
    ] {
        let response = app
            .post(&org, "/v1/flows/schedule", &with("scheduledAt", json!(at)))
            .await;
        assert_eq!(response.status, 201, "{at}: {:?}", response.body);
    }
    // Another organization's flow is one that does not exist.
    let response = app.post(&other, "/v1/flows/schedule", &valid).await;
    assert_eq!(response.status, 404);

    let created = app.post(&org, "/v1/flows/schedule", &valid).await;
    assert_eq!(created.status, 201, "{:?}", created.body);
    // A plain date is the start of that day in the organization's zone (UTC here).
    assert_eq!(
        created.body["scheduledAt"],
        json!("2099-03-01T00:00:00.000Z")
    );
    let schedule = created.body["scheduleId"].as_str().expect("id").to_owned();
    let path = format!("/v1/schedules/{schedule}");
    assert_eq!(app.get(&other, &path).await.status, 404);
    let deleted = app
        .request(reqwest::Method::DELETE, &path, Some(&other.key), None, &[])
        .await;
    assert_eq!(deleted.status, 404);
    let deleted = app
        .request(reqwest::Method::DELETE, &path, Some(&org.key), None, &[])
        .await;
    assert_eq!(deleted.status, 204);
    assert_eq!(app.get(&org, &path).await.status, 404);
    let again = app
        .request(reqwest::Method::DELETE, &path, Some(&org.key), None, &[])
        .await;
    assert_eq!(again.status, 404);
    assert_eq!(app.get(&org, "/v1/schedules/sch_nope").await.status, 404);
}

#[tokio::test]
async fn two_schedulers_assign_each_occurrence_once() {
    let app = TestApp::spawn().await;
    let org = app.create_org(Tier::Enterprise).await;
    let emails: Vec<String> = (0..25).map(|i| format!("user{i}@example.com")).collect();
    let refs: Vec<&str> = emails.iter().map(String::as_str).collect();
    app.create_users(&org, &refs).await;
    let flow = app.create_flow(&org, "Daily drill", &[5]).await;
    let at = Utc::now() - chrono::Duration::minutes(1);
    for email in &emails {
        let response = app
            .post(
                &org,
                "/v1/flows/schedule",
                &json!({ "flowId": flow, "userEmail": email, "scheduledAt": at.to_rfc3339(), "recurrence": "daily" }),
            )
            .await;
        assert_eq!(response.status, 201, "{:?}", response.body);
    }
    let first = app.start_scheduler();
    let second = app.start_scheduler();
    app.eventually(Duration::from_secs(15), "25 assignments", || async {
        (app.assignment_count().await == 25).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    drop((first, second));
    assert_eq!(app.assignment_count().await, 25);
    let occurrences: Vec<i32> = sqlx::query_scalar("SELECT DISTINCT occurrence FROM schedules")
        .fetch_all(&app.db)
        .await
        .expect("occurrences");
    assert_eq!(occurrences, [1]);
    let future: bool = sqlx::query_scalar("SELECT bool_and(scheduled_at > now()) FROM schedules")
        .fetch_one(&app.db)
        .await
        .expect("next times");
    assert!(future);
}

#[tokio::test]
async fn a_daily_schedule_anchored_in_the_year_1_is_assigned_at_once_with_the_next_occurrence_tomorrow()
 {
    let app = TestApp::spawn().await;
    let org = app.create_org(Tier::Standard).await;
    app.create_users(&org, &["dora@example.com"]).await;
    let flow = app.create_flow(&org, "Daily drill", &[5]).await;
    let created = app
        .post(
            &org,
            "/v1/flows/schedule",
            &json!({ "flowId": flow, "userEmail": "dora@example.com", "scheduledAt": "2099-01-01", "recurrence": "daily" }),
        )
        .await;
    assert_eq!(created.status, 201, "{:?}", created.body);
    let schedule = created.body["scheduleId"].as_str().expect("id").to_owned();
    // A series anchored at 09:00 on 1 January of the year 1 (the API no longer accepts one, but
    // rows written before the bound may hold one): about 740,000 daily occurrences have passed.
    let anchor = Utc
        .with_ymd_and_hms(1, 1, 1, 9, 0, 0)
        .single()
        .expect("anchor");
    sqlx::query("UPDATE schedules SET anchor_at = $1, scheduled_at = $1")
        .bind(anchor)
        .execute(&app.db)
        .await
        .expect("anchor in year 1");
    let _scheduler = app.start_scheduler();
    let advanced = app
        .eventually(
            Duration::from_secs(10),
            "the schedule to advance",
            || async {
                let response = app.get(&org, &format!("/v1/schedules/{schedule}")).await;
                (response.body["occurrences"] != json!(0)
                    && response.body["currentAssignmentId"].is_string())
                .then_some(response.body)
            },
        )
        .await;
    // The next occurrence is the first 09:00 UTC after now, and its index counts every day since
    // the anchor.
    let now = Utc::now();
    let today = Utc
        .with_ymd_and_hms(now.year(), now.month(), now.day(), 9, 0, 0)
        .single()
        .expect("today");
    let scheduled_at = chrono::DateTime::parse_from_rfc3339(
        advanced["scheduledAt"].as_str().expect("scheduledAt"),
    )
    .expect("timestamp")
    .with_timezone(&Utc);
    assert!(
        scheduled_at == today || scheduled_at == today + chrono::Duration::days(1),
        "{scheduled_at}"
    );
    assert!(scheduled_at > now - chrono::Duration::seconds(15));
    assert_eq!(
        advanced["occurrences"],
        json!((scheduled_at - anchor).num_days())
    );
    assert_eq!(app.assignment_count().await, 1);
}
