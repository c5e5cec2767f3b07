//! Compliance across flows (issue 39): `POST /v1/compliance/report` judges each person's standing
//! per flow from the assignment history, now or `asOf` a past instant (hand-computed fixtures
//! written straight into the tables, since the API cannot make past instants), filters and rolls
//! up the population, pages it without repeats or skips with totals of the whole population, and
//! keeps organizations apart. Flows carry `required`.

use chrono::{DateTime, Duration, DurationRound, Utc};
use flow_common::db::orgs::{self, NewOrganization, Tier};
use flow_domain::ids::{FlowId, GroupId};
use flow_tests::{TestApp, TestOrg};
use serde_json::{Value, json};
use uuid::Uuid;

/// An organization in `zone` with a report limit no test reaches.
async fn org_in(app: &TestApp, zone: chrono_tz::Tz) -> TestOrg {
    let org = orgs::create(
        &app.db,
        &NewOrganization {
            name: "Compliance org".into(),
            tier: Tier::Enterprise,
            timezone: zone,
            assign_limit_per_minute: None,
            report_limit_per_minute: Some(1_000_000),
        },
    )
    .await
    .expect("create org");
    let (_, key) = flow_common::db::keys::create(&app.db, org.id, "test")
        .await
        .expect("create key");
    TestOrg { id: org.id, key }
}

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
    assert_eq!(response.body["required"], json!(required));
    response.body["flowId"].as_str().expect("flowId").to_owned()
}

fn uuid_of(flow: &str) -> Uuid {
    FlowId::parse(flow).expect("flow id").0
}

/// Makes the people of `emails`, existing since `since`; their ids in order.
async fn people(app: &TestApp, org: &TestOrg, emails: &[&str], since: DateTime<Utc>) -> Vec<Uuid> {
    app.create_users(org, emails).await;
    let mut ids = Vec::new();
    for email in emails {
        let id: Uuid = sqlx::query_scalar(
            "UPDATE users SET created_at = $3 WHERE org_id = $1 AND email_normalized = $2
             RETURNING id",
        )
        .bind(org.id)
        .bind(email.to_lowercase())
        .bind(since)
        .fetch_one(&app.db)
        .await
        .expect("user");
        ids.push(id);
    }
    ids
}

/// An assignment as it stands, written directly.
#[derive(Clone, Copy, Default)]
struct Fixture {
    assigned: Option<DateTime<Utc>>,
    due: Option<DateTime<Utc>>,
    started: Option<DateTime<Utc>>,
    completed: Option<DateTime<Utc>>,
    expires: Option<DateTime<Utc>>,
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
                                  started_at, completed_at, expires_at, cancelled_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
    )
    .bind(id)
    .bind(org.id)
    .bind(uuid_of(flow))
    .bind(user)
    .bind(status)
    .bind(at.due)
    .bind(at.assigned.expect("assigned"))
    .bind(at.started)
    .bind(at.completed)
    .bind(at.expires)
    .bind(at.cancelled)
    .execute(&app.db)
    .await
    .expect("insert assignment");
    id
}

async fn report(app: &TestApp, org: &TestOrg, body: Value) -> Value {
    let response = app.post(org, "/v1/compliance/report", &body).await;
    assert_eq!(response.status, 200, "{body}: {:?}", response.body);
    response.body
}

/// The status of each person (by e-mail) in the flow at `index` of the report.
fn statuses(body: &Value, index: usize) -> Vec<(String, String)> {
    body["people"]
        .as_array()
        .expect("people")
        .iter()
        .map(|person| {
            (
                person["email"].as_str().expect("email").to_owned(),
                person["flows"][index]["status"]
                    .as_str()
                    .expect("status")
                    .to_owned(),
            )
        })
        .collect()
}

fn status_of<'a>(statuses: &'a [(String, String)], email: &str) -> &'a str {
    statuses
        .iter()
        .find(|(address, _)| address == email)
        .map(|(_, status)| status.as_str())
        .unwrap_or_else(|| panic!("{email} not in {statuses:?}"))
}

/// The statuses of every cell of the page, counted in the shape of `totals.statuses`: where the
/// page holds the whole population, the totals (read set-wise for the whole organization) must
/// say the same as the page (read a cell at a time).
fn page_counts(body: &Value) -> Value {
    let mut counts = serde_json::Map::new();
    for key in [
        "compliant",
        "dueSoon",
        "overdue",
        "expired",
        "pending",
        "inProgress",
        "notAssigned",
        "cancelled",
        "notRequired",
    ] {
        counts.insert(key.to_owned(), json!(0));
    }
    for person in body["people"].as_array().expect("people") {
        for cell in person["flows"].as_array().expect("flows") {
            let status = cell["status"].as_str().expect("status");
            let key = match status {
                "due_soon" => "dueSoon",
                "in_progress" => "inProgress",
                "not_assigned" => "notAssigned",
                "not_required" => "notRequired",
                other => other,
            };
            let count = counts.get_mut(key).unwrap_or_else(|| panic!("{status}"));
            *count = json!(count.as_i64().expect("count") + 1);
        }
    }
    Value::Object(counts)
}

fn person<'a>(body: &'a Value, email: &str) -> &'a Value {
    body["people"]
        .as_array()
        .expect("people")
        .iter()
        .find(|person| person["email"] == email)
        .unwrap_or_else(|| panic!("{email} not in {body}"))
}

fn instant(value: &Value) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(value.as_str().expect("timestamp"))
        .expect("rfc 3339")
        .with_timezone(&Utc)
}

#[tokio::test]
async fn every_status_now_and_as_of_a_past_instant_matches_hand_computed_fixtures() {
    let app = TestApp::spawn().await;
    let org = org_in(&app, chrono_tz::Tz::UTC).await;
    let safety = flow(&app, &org, "A Safety", true).await;
    let privacy = flow(&app, &org, "B Privacy", true).await;
    let _elective = flow(&app, &org, "C Elective", false).await;
    let now = Utc::now()
        .duration_trunc(Duration::seconds(1))
        .expect("truncate");
    let day = Duration::days(1);
    // The audit instant: ten days ago.
    let audit = now - day * 10;
    let emails = [
        "compliant@example.com",
        "expired@example.com",
        "renewing@example.com",
        "overdue@example.com",
        "soon@example.com",
        "started@example.com",
        "pending@example.com",
        "cancelled@example.com",
        "moved@example.com",
        "nobody@example.com",
    ];
    let ids = people(&app, &org, &emails, now - day * 400).await;
    let user = |email: &str| ids[emails.iter().position(|e| *e == email).expect("known")];
    let assigned = |days: i32| Some(now - day * days);

    // Completed 20 days ago, valid 100 more days; Privacy completed without expiry.
    assignment(
        &app,
        &org,
        &safety,
        user("compliant@example.com"),
        Fixture {
            assigned: assigned(40),
            completed: assigned(20),
            expires: Some(now + day * 100),
            ..Fixture::default()
        },
    )
    .await;
    assignment(
        &app,
        &org,
        &privacy,
        user("compliant@example.com"),
        Fixture {
            assigned: assigned(40),
            completed: assigned(30),
            ..Fixture::default()
        },
    )
    .await;
    // Expired five days ago: compliant at the audit instant, expired now.
    assignment(
        &app,
        &org,
        &safety,
        user("expired@example.com"),
        Fixture {
            assigned: assigned(300),
            completed: assigned(200),
            expires: Some(now - day * 5),
            ..Fixture::default()
        },
    )
    .await;
    // The previous completion is still valid while its renewal is open.
    assignment(
        &app,
        &org,
        &safety,
        user("renewing@example.com"),
        Fixture {
            assigned: assigned(380),
            completed: assigned(360),
            expires: Some(now + day * 3),
            ..Fixture::default()
        },
    )
    .await;
    assignment(
        &app,
        &org,
        &safety,
        user("renewing@example.com"),
        Fixture {
            assigned: assigned(11),
            due: Some(now + day * 3),
            ..Fixture::default()
        },
    )
    .await;
    // Due two days ago: overdue now; at the audit instant due in 8 days, so pending.
    assignment(
        &app,
        &org,
        &safety,
        user("overdue@example.com"),
        Fixture {
            assigned: assigned(30),
            due: Some(now - day * 2),
            ..Fixture::default()
        },
    )
    .await;
    // Assigned after the audit instant, due in three days: due soon now, not assigned then.
    assignment(
        &app,
        &org,
        &safety,
        user("soon@example.com"),
        Fixture {
            assigned: assigned(5),
            due: Some(now + day * 3),
            ..Fixture::default()
        },
    )
    .await;
    // Started after the audit instant.
    assignment(
        &app,
        &org,
        &safety,
        user("started@example.com"),
        Fixture {
            assigned: assigned(20),
            started: assigned(5),
            ..Fixture::default()
        },
    )
    .await;
    assignment(
        &app,
        &org,
        &safety,
        user("pending@example.com"),
        Fixture {
            assigned: assigned(20),
            due: Some(now + day * 30),
            ..Fixture::default()
        },
    )
    .await;
    // Cancelled five days ago: cancelled now, open (pending) at the audit instant.
    assignment(
        &app,
        &org,
        &safety,
        user("cancelled@example.com"),
        Fixture {
            assigned: assigned(20),
            cancelled: assigned(5),
            ..Fixture::default()
        },
    )
    .await;
    // Its due date was moved a day ago from twelve days ago to thirty days ahead: pending now,
    // overdue at the audit instant (the due date it had then).
    let moved = assignment(
        &app,
        &org,
        &safety,
        user("moved@example.com"),
        Fixture {
            assigned: assigned(30),
            due: Some(now + day * 30),
            ..Fixture::default()
        },
    )
    .await;
    sqlx::query(
        "INSERT INTO assignment_changes (id, org_id, assignment_id, kind, changed, outcome,
                                         requested_at, applied_at)
         VALUES ($1, $2, $3, 'update', $4, 'applied', $5, $5)",
    )
    .bind(Uuid::now_v7())
    .bind(org.id)
    .bind(moved)
    .bind(json!({ "dueDate": {
        "from": flow_domain::format_timestamp(now - day * 12),
        "to": flow_domain::format_timestamp(now + day * 30),
    }}))
    .bind(now - day)
    .execute(&app.db)
    .await
    .expect("change");

    // Now: the required flows, by name.
    let body = report(&app, &org, json!({})).await;
    let flows: Vec<&str> = body["flows"]
        .as_array()
        .expect("flows")
        .iter()
        .map(|flow| flow["flowId"].as_str().expect("id"))
        .collect();
    assert_eq!(flows, [safety.as_str(), privacy.as_str()], "{body}");
    assert_eq!(body["dueSoonDays"], 7);
    let now_statuses = statuses(&body, 0);
    for (email, expected) in [
        ("compliant@example.com", "compliant"),
        ("expired@example.com", "expired"),
        ("renewing@example.com", "compliant"),
        ("overdue@example.com", "overdue"),
        ("soon@example.com", "due_soon"),
        ("started@example.com", "in_progress"),
        ("pending@example.com", "pending"),
        ("cancelled@example.com", "cancelled"),
        ("moved@example.com", "pending"),
        ("nobody@example.com", "not_assigned"),
    ] {
        assert_eq!(status_of(&now_statuses, email), expected, "{email} now");
    }
    // Dates of the deciding assignment.
    let expired = &person(&body, "expired@example.com")["flows"][0];
    assert_eq!(instant(&expired["completedAt"]), now - day * 200);
    assert_eq!(instant(&expired["expiresAt"]), now - day * 5);
    let renewing = &person(&body, "renewing@example.com")["flows"][0];
    assert_eq!(instant(&renewing["completedAt"]), now - day * 360);
    let cancelled = &person(&body, "cancelled@example.com")["flows"][0];
    assert_eq!(instant(&cancelled["cancelledAt"]), now - day * 5);
    assert!(person(&body, "nobody@example.com")["flows"][0]["assignmentId"].is_null());
    // Summaries: compliant of the two required flows.
    let compliant = &person(&body, "compliant@example.com")["summary"];
    assert_eq!(
        *compliant,
        json!({ "compliant": 2, "required": 2, "percent": 100.0 })
    );
    assert_eq!(
        person(&body, "renewing@example.com")["summary"],
        json!({ "compliant": 1, "required": 2, "percent": 50.0 })
    );
    // Totals of the population: 10 people × 2 flows.
    let totals = &body["totals"];
    assert_eq!(totals["people"], 10);
    assert_eq!(totals["peopleCompliant"], 1);
    assert_eq!(
        totals["statuses"],
        json!({ "compliant": 3, "dueSoon": 1, "overdue": 1, "expired": 1, "pending": 2,
                "inProgress": 1, "notAssigned": 10, "cancelled": 1, "notRequired": 0 }),
        "{body}"
    );
    assert_eq!(
        totals["summary"],
        json!({ "compliant": 3, "required": 20, "percent": 15.0 })
    );

    // At the audit instant, from the history.
    let body = report(
        &app,
        &org,
        json!({ "asOf": flow_domain::format_timestamp(audit) }),
    )
    .await;
    assert_eq!(instant(&body["asOf"]), audit);
    let then = statuses(&body, 0);
    for (email, expected) in [
        ("compliant@example.com", "compliant"),
        ("expired@example.com", "compliant"),
        ("renewing@example.com", "compliant"),
        ("overdue@example.com", "pending"),
        ("soon@example.com", "not_assigned"),
        ("started@example.com", "pending"),
        ("pending@example.com", "pending"),
        ("cancelled@example.com", "pending"),
        ("moved@example.com", "overdue"),
        ("nobody@example.com", "not_assigned"),
    ] {
        assert_eq!(
            status_of(&then, email),
            expected,
            "{email} at the audit instant"
        );
    }
    let cancelled = &person(&body, "cancelled@example.com")["flows"][0];
    assert!(cancelled["cancelledAt"].is_null(), "{cancelled}");
    let moved = &person(&body, "moved@example.com")["flows"][0];
    assert_eq!(instant(&moved["dueAt"]), now - day * 12);
    // The totals at the instant (one pass over the organization, the due dates read back as a
    // set) agree with the page (a lookup per cell): moved@ is overdue in both.
    assert_eq!(body["totals"]["statuses"], page_counts(&body), "{body}");
    // The expiry after the audit instant is shown, the completion it belongs to counted.
    let expired = &person(&body, "expired@example.com")["flows"][0];
    assert_eq!(instant(&expired["expiresAt"]), now - day * 5);

    // A day before the cancellation and a day after: each side of it.
    for (days, expected) in [(6, "pending"), (4, "cancelled")] {
        let body = report(
            &app,
            &org,
            json!({ "asOf": flow_domain::format_timestamp(now - day * days),
                    "filter": { "userEmails": ["CANCELLED@example.com", "expired@example.com"] } }),
        )
        .await;
        let at = statuses(&body, 0);
        assert_eq!(
            status_of(&at, "cancelled@example.com"),
            expected,
            "{days} days ago"
        );
        let expiry = if days == 6 { "compliant" } else { "expired" };
        assert_eq!(
            status_of(&at, "expired@example.com"),
            expiry,
            "{days} days ago"
        );
        assert_eq!(body["totals"]["people"], 2);
    }

    // People who did not exist yet at the instant are not counted then.
    let late = people(&app, &org, &["late@example.com"], now - day).await;
    assert_eq!(late.len(), 1);
    let body = report(
        &app,
        &org,
        json!({ "asOf": flow_domain::format_timestamp(audit) }),
    )
    .await;
    assert_eq!(body["totals"]["people"], 10);
    let body = report(&app, &org, json!({})).await;
    assert_eq!(body["totals"]["people"], 11);
}

#[tokio::test]
async fn a_date_as_of_is_the_end_of_that_day_in_the_organizations_time_zone() {
    let app = TestApp::spawn().await;
    // Auckland is UTC+12 in June: June 30 ends at 12:00 UTC that day.
    let org = org_in(&app, "Pacific/Auckland".parse().expect("zone")).await;
    let safety = flow(&app, &org, "Safety", true).await;
    let at = |text: &str| {
        DateTime::parse_from_rfc3339(text)
            .expect("instant")
            .with_timezone(&Utc)
    };
    let emails = [
        "before@example.com",
        "after@example.com",
        "lapsed@example.com",
    ];
    let ids = people(&app, &org, &emails, at("2024-01-01T00:00:00Z")).await;
    // Completed at 23:30 on June 30 in Auckland.
    assignment(
        &app,
        &org,
        &safety,
        ids[0],
        Fixture {
            assigned: Some(at("2025-06-01T00:00:00Z")),
            completed: Some(at("2025-06-30T11:30:00Z")),
            ..Fixture::default()
        },
    )
    .await;
    // Completed at 00:30 on July 1 in Auckland (still June 30 in UTC).
    assignment(
        &app,
        &org,
        &safety,
        ids[1],
        Fixture {
            assigned: Some(at("2025-06-01T00:00:00Z")),
            completed: Some(at("2025-06-30T12:30:00Z")),
            ..Fixture::default()
        },
    )
    .await;
    // Expired at 23:59 on June 30 in Auckland.
    assignment(
        &app,
        &org,
        &safety,
        ids[2],
        Fixture {
            assigned: Some(at("2024-06-01T00:00:00Z")),
            completed: Some(at("2024-06-30T00:00:00Z")),
            expires: Some(at("2025-06-30T11:59:00Z")),
            ..Fixture::default()
        },
    )
    .await;
    let body = report(&app, &org, json!({ "asOf": "2025-06-30" })).await;
    assert_eq!(
        instant(&body["asOf"]),
        at("2025-06-30T11:59:59.999Z"),
        "{body}"
    );
    let on_date = statuses(&body, 0);
    assert_eq!(status_of(&on_date, "before@example.com"), "compliant");
    assert_eq!(status_of(&on_date, "after@example.com"), "pending");
    assert_eq!(status_of(&on_date, "lapsed@example.com"), "expired");
    // The same instant in UTC terms answers otherwise: the day's end there is 12 hours later.
    let body = report(&app, &org, json!({ "asOf": "2025-06-30T23:59:59Z" })).await;
    let utc = statuses(&body, 0);
    assert_eq!(status_of(&utc, "after@example.com"), "compliant");
}

/// Sales (Ann, Bo, deactivated Cy) under manager m1, Ops (Di) under m2, Ed without either; Ann
/// and Di in the group "Leads".
async fn population(app: &TestApp, org: &TestOrg, flow: &str) -> (Uuid, Vec<Uuid>) {
    let now = Utc::now();
    let emails = [
        "ann@example.com",
        "bo@example.com",
        "cy@example.com",
        "di@example.com",
        "ed@example.com",
    ];
    let ids = people(app, org, &emails, now - Duration::days(100)).await;
    for (id, department, manager, manager_name) in [
        (ids[0], Some("Sales"), Some("m1"), Some("Mia")),
        (ids[1], Some("Sales"), Some("m1"), Some("Mia")),
        (ids[2], Some("Sales"), Some("m1"), Some("Mia")),
        (ids[3], Some("Ops"), Some("m2"), Some("Max")),
        (ids[4], None, None, None),
    ] {
        sqlx::query(
            "UPDATE users SET department = $2, manager_id = $3, manager_name = $4 WHERE id = $1",
        )
        .bind(id)
        .bind(department)
        .bind(manager)
        .bind(manager_name)
        .execute(&app.db)
        .await
        .expect("profile");
    }
    sqlx::query("UPDATE users SET active = false, deactivated_at = now() WHERE id = $1")
        .bind(ids[2])
        .execute(&app.db)
        .await
        .expect("deactivate");
    let group = Uuid::now_v7();
    sqlx::query(
        "INSERT INTO user_groups (id, org_id, display_name, display_name_normalized)
         VALUES ($1, $2, 'Leads', 'leads')",
    )
    .bind(group)
    .bind(org.id)
    .execute(&app.db)
    .await
    .expect("group");
    for member in [ids[0], ids[3]] {
        sqlx::query(
            "INSERT INTO user_group_members (group_id, user_id, org_id) VALUES ($1, $2, $3)",
        )
        .bind(group)
        .bind(member)
        .bind(org.id)
        .execute(&app.db)
        .await
        .expect("member");
    }
    // Ann and Di completed; Bo pending; Cy and Ed have nothing.
    let past = |days: i64| Some(now - Duration::days(days));
    for (user, completed) in [(ids[0], past(1)), (ids[3], past(2)), (ids[1], None)] {
        assignment(
            app,
            org,
            flow,
            user,
            Fixture {
                assigned: past(10),
                completed,
                ..Fixture::default()
            },
        )
        .await;
    }
    (group, ids)
}

fn emails_of(body: &Value) -> Vec<String> {
    body["people"]
        .as_array()
        .expect("people")
        .iter()
        .map(|person| person["email"].as_str().expect("email").to_owned())
        .collect()
}

#[tokio::test]
async fn filters_narrow_the_population_and_group_by_rolls_it_up_with_counts() {
    let app = TestApp::spawn().await;
    let org = org_in(&app, chrono_tz::Tz::UTC).await;
    let safety = flow(&app, &org, "Safety", true).await;
    let (group, _) = population(&app, &org, &safety).await;
    let group_id = GroupId(group).to_string();

    for (filter, expected) in [
        (json!({ "department": "sales" }), vec!["ann", "bo", "cy"]),
        (
            json!({ "department": "Sales", "active": true }),
            vec!["ann", "bo"],
        ),
        (json!({ "managerId": "m2" }), vec!["di"]),
        (json!({ "groupId": group_id }), vec!["ann", "di"]),
        (json!({ "active": false }), vec!["cy"]),
        (
            json!({ "userEmails": ["Ed@Example.com", "bo@example.com", "nobody@example.com"] }),
            vec!["bo", "ed"],
        ),
    ] {
        let body = report(&app, &org, json!({ "filter": filter })).await;
        let expected: Vec<String> = expected
            .iter()
            .map(|name| format!("{name}@example.com"))
            .collect();
        let mut found = emails_of(&body);
        found.sort();
        assert_eq!(found, expected, "{filter}");
        assert_eq!(body["totals"]["people"], expected.len(), "{filter}");
    }

    // Per department: Ops, Sales and the people without one (key null), in key order.
    let body = report(&app, &org, json!({ "groupBy": "department" })).await;
    assert!(body.get("people").is_none(), "{body}");
    let groups = body["groups"].as_array().expect("groups");
    let rows: Vec<(Value, i64, i64, i64, i64)> = groups
        .iter()
        .map(|group| {
            (
                group["key"].clone(),
                group["people"].as_i64().expect("people"),
                group["statuses"]["compliant"].as_i64().expect("compliant"),
                group["statuses"]["pending"].as_i64().expect("pending"),
                group["statuses"]["notAssigned"]
                    .as_i64()
                    .expect("not assigned"),
            )
        })
        .collect();
    assert_eq!(
        rows,
        vec![
            (Value::Null, 1, 0, 0, 1),
            (json!("Ops"), 1, 1, 0, 0),
            (json!("Sales"), 3, 1, 1, 1),
        ],
        "{body}"
    );
    let sales = &groups[2];
    assert_eq!(sales["name"], "Sales");
    assert_eq!(sales["summary"]["percent"], 33.3);
    assert_eq!(body["totals"]["people"], 5);
    assert_eq!(body["totals"]["summary"]["compliant"], 2);

    // A roll-up's totals (summed with its groups in one pass) are the whole population's,
    // whichever page of groups is read.
    let plain = report(&app, &org, json!({})).await;
    for ask in [
        json!({ "groupBy": "department" }),
        json!({ "groupBy": "manager", "limit": 1 }),
    ] {
        let grouped = report(&app, &org, ask.clone()).await;
        assert_eq!(grouped["totals"], plain["totals"], "{ask}");
        if let Some(cursor) = grouped["nextCursor"].as_str() {
            let next = report(
                &app,
                &org,
                json!({ "groupBy": "manager", "limit": 1, "cursor": cursor }),
            )
            .await;
            assert_eq!(next["groups"].as_array().map(Vec::len), Some(1), "{next}");
            assert_eq!(next["totals"], plain["totals"], "the second page");
        }
    }

    // Per manager, with the manager's name.
    let body = report(&app, &org, json!({ "groupBy": "manager" })).await;
    let groups = body["groups"].as_array().expect("groups");
    let rows: Vec<(Value, Value, i64, i64)> = groups
        .iter()
        .map(|group| {
            (
                group["key"].clone(),
                group["name"].clone(),
                group["people"].as_i64().expect("people"),
                group["peopleCompliant"].as_i64().expect("compliant people"),
            )
        })
        .collect();
    assert_eq!(
        rows,
        vec![
            (Value::Null, Value::Null, 1, 0),
            (json!("m1"), json!("Mia"), 3, 1),
            (json!("m2"), json!("Max"), 1, 1),
        ]
    );

    // Per group: Leads (both compliant) and the people in none.
    let body = report(
        &app,
        &org,
        json!({ "groupBy": "group", "filter": { "active": true } }),
    )
    .await;
    let groups = body["groups"].as_array().expect("groups");
    assert_eq!(groups.len(), 2, "{body}");
    assert!(groups[0]["key"].is_null());
    assert_eq!(groups[0]["people"], 2);
    assert_eq!(groups[1]["key"], json!(GroupId(group).to_string()));
    assert_eq!(groups[1]["name"], "Leads");
    assert_eq!(groups[1]["people"], 2);
    assert_eq!(groups[1]["summary"]["percent"], 100.0);
    assert_eq!(body["totals"]["people"], 4);
}

#[tokio::test]
async fn pages_neither_repeat_nor_skip_and_every_page_has_the_whole_totals() {
    let app = TestApp::spawn().await;
    let org = org_in(&app, chrono_tz::Tz::UTC).await;
    let safety = flow(&app, &org, "Safety", true).await;
    let emails: Vec<String> = (0..23).map(|i| format!("p{i:02}@example.com")).collect();
    let refs: Vec<&str> = emails.iter().map(String::as_str).collect();
    let now = Utc::now();
    let ids = people(&app, &org, &refs, now - Duration::days(50)).await;
    for user in ids.iter().step_by(3) {
        assignment(
            &app,
            &org,
            &safety,
            *user,
            Fixture {
                assigned: Some(now - Duration::days(5)),
                completed: Some(now - Duration::days(4)),
                ..Fixture::default()
            },
        )
        .await;
    }
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    let mut first_totals: Option<Value> = None;
    let mut pages = 0;
    loop {
        let mut body = json!({ "limit": 5 });
        if let Some(cursor) = &cursor {
            body["cursor"] = json!(cursor);
        }
        let page = report(&app, &org, body).await;
        pages += 1;
        let people = page["people"].as_array().expect("people");
        assert!(people.len() <= 5);
        seen.extend(emails_of(&page));
        match &first_totals {
            None => first_totals = Some(page["totals"].clone()),
            Some(totals) => assert_eq!(&page["totals"], totals),
        }
        // People assigned between pages do not change the answer: the cursor keeps the instant.
        if pages == 2 {
            assignment(
                &app,
                &org,
                &safety,
                ids[1],
                Fixture {
                    assigned: Some(Utc::now()),
                    completed: Some(Utc::now()),
                    ..Fixture::default()
                },
            )
            .await;
        }
        match page["nextCursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
    }
    assert_eq!(pages, 5);
    let mut unique = seen.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), seen.len(), "a person repeated: {seen:?}");
    assert_eq!(unique, emails, "a person skipped");
    let totals = first_totals.expect("totals");
    assert_eq!(totals["people"], 23);
    assert_eq!(totals["statuses"]["compliant"], 8);
    assert_eq!(totals["statuses"]["notAssigned"], 15);

    // Groups page the same way; a people cursor does not fit a roll-up.
    let page = report(&app, &org, json!({ "groupBy": "department", "limit": 1 })).await;
    assert!(page["nextCursor"].is_null(), "{page}");
    let people_page = report(&app, &org, json!({ "limit": 1 })).await;
    let response = app
        .post(
            &org,
            "/v1/compliance/report",
            &json!({ "groupBy": "manager", "cursor": people_page["nextCursor"] }),
        )
        .await;
    assert_eq!(response.status, 400, "{:?}", response.body);
}

async fn refused(app: &TestApp, org: &TestOrg, body: Value) -> (u16, String) {
    let response = app.post(org, "/v1/compliance/report", &body).await;
    (
        response.status,
        response.body["message"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
    )
}

#[tokio::test]
async fn bad_requests_are_refused_and_organizations_never_see_each_other() {
    let app = TestApp::spawn().await;
    let org = org_in(&app, chrono_tz::Tz::UTC).await;
    let other = org_in(&app, chrono_tz::Tz::UTC).await;
    // Nothing required yet.
    let (status, message) = refused(&app, &org, json!({})).await;
    assert_eq!(status, 400);
    assert!(message.contains("required"), "{message}");

    let safety = flow(&app, &org, "Safety", true).await;
    let theirs = flow(&app, &other, "Theirs", true).await;
    people(
        &app,
        &org,
        &["mine@example.com"],
        Utc::now() - Duration::days(1),
    )
    .await;
    people(
        &app,
        &other,
        &["theirs@example.com", "more@example.com"],
        Utc::now() - Duration::days(1),
    )
    .await;

    // Another organization's flow is not found, nor is an id that names nothing.
    for flow_ids in [
        json!([safety, theirs]),
        json!([FlowId::new().to_string()]),
        json!(["not-a-flow"]),
    ] {
        let (status, _) = refused(&app, &org, json!({ "flowIds": flow_ids })).await;
        assert_eq!(status, 404, "{flow_ids}");
    }
    let too_many: Vec<String> = (0..51).map(|_| FlowId::new().to_string()).collect();
    let emails: Vec<String> = (0..1001).map(|i| format!("u{i}@example.com")).collect();
    let future = flow_domain::format_timestamp(Utc::now() + Duration::days(2));
    for (body, field) in [
        (json!({ "flowIds": too_many }), "flowIds"),
        (json!({ "flowIds": [] }), "flowIds"),
        (json!({ "filter": { "userEmails": emails } }), "userEmails"),
        (
            json!({ "filter": { "userEmails": ["not an address"] } }),
            "userEmails",
        ),
        (json!({ "filter": { "groupId": "sales" } }), "groupId"),
        (json!({ "filter": { "department": " " } }), "department"),
        (json!({ "asOf": "last tuesday" }), "asOf"),
        (json!({ "asOf": future }), "asOf"),
        (json!({ "asOf": "2999-01-01" }), "asOf"),
        (json!({ "cursor": "nonsense" }), "cursor"),
        (json!({ "cursor": "00000000" }), "cursor"),
        (json!({ "limit": 0 }), "limit"),
        (json!({ "limit": 1001 }), "limit"),
        (json!({ "groupBy": "team" }), "groupBy"),
        (json!({ "unknown": true }), "unknown"),
    ] {
        let (status, message) = refused(&app, &org, body.clone()).await;
        assert_eq!(status, 400, "{body}: {message}");
        assert!(message.contains(field), "{body}: {message}");
    }

    // Each organization sees its own people and flows only.
    let mine = report(&app, &org, json!({})).await;
    assert_eq!(emails_of(&mine), ["mine@example.com"]);
    assert_eq!(mine["totals"]["people"], 1);
    let named = report(&app, &org, json!({ "flowIds": [safety] })).await;
    assert_eq!(named["totals"]["people"], 1);
    let body = report(&app, &other, json!({})).await;
    assert_eq!(body["totals"]["people"], 2);
    assert_eq!(body["flows"][0]["flowId"], json!(theirs));
    let grouped = report(&app, &org, json!({ "groupBy": "department" })).await;
    assert_eq!(grouped["totals"]["people"], 1);
}

#[tokio::test]
async fn flows_are_marked_required_on_creation_and_edit_and_reads_show_it() {
    let app = TestApp::spawn().await;
    let org = org_in(&app, chrono_tz::Tz::UTC).await;
    let safety = flow(&app, &org, "Safety", true).await;
    let privacy = flow(&app, &org, "Privacy", false).await;
    let read = app.get(&org, &format!("/v1/flows/{safety}")).await;
    assert_eq!(read.body["required"], true, "{:?}", read.body);
    let list = app.get(&org, "/v1/flows").await;
    let required: Vec<(String, bool)> = list.body["data"]
        .as_array()
        .expect("data")
        .iter()
        .map(|flow| {
            (
                flow["flowId"].as_str().expect("id").to_owned(),
                flow["required"].as_bool().expect("required"),
            )
        })
        .collect();
    assert!(required.contains(&(safety.clone(), true)), "{required:?}");
    assert!(required.contains(&(privacy.clone(), false)), "{required:?}");

    // Edits swap them; the report's default set follows.
    for (flow, value) in [(&safety, false), (&privacy, true)] {
        let edited = app
            .request(
                reqwest::Method::PATCH,
                &format!("/v1/flows/{flow}"),
                Some(&org.key),
                Some(&json!({ "required": value })),
                &[],
            )
            .await;
        assert_eq!(edited.status, 200, "{:?}", edited.body);
        assert_eq!(edited.body["required"], value);
    }
    let body = report(&app, &org, json!({})).await;
    let flows: Vec<&str> = body["flows"]
        .as_array()
        .expect("flows")
        .iter()
        .map(|flow| flow["flowId"].as_str().expect("id"))
        .collect();
    assert_eq!(flows, [privacy.as_str()]);
    // An archived required flow leaves the default set.
    let archived = app
        .request(
            reqwest::Method::PATCH,
            &format!("/v1/flows/{privacy}"),
            Some(&org.key),
            Some(&json!({ "archived": true })),
            &[],
        )
        .await;
    assert_eq!(archived.status, 200);
    let response = app.post(&org, "/v1/compliance/report", &json!({})).await;
    assert_eq!(response.status, 400, "{:?}", response.body);
    let audit: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM audit_events WHERE org_id = $1 AND detail LIKE '%required%'",
    )
    .bind(org.id)
    .fetch_one(&app.db)
    .await
    .expect("audit");
    assert_eq!(audit, 2);
}
