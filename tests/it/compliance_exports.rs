//! Compliance exports (issue 39): `POST /v1/compliance/report` with a `format` records an export
//! of the whole report (every person × flow, all pages) judged at the answer's instant, which
//! the report-worker writes as CSV, Excel or PDF. Fixtures are written straight into the tables
//! (past instants) and every expected status is computed by hand; files are read back with
//! independent readers (`csv`, `calamine`, `lopdf`). Exports share the flow report's caps and
//! stay within their organization.

use std::collections::HashMap;
use std::io::Cursor;

use calamine::{Data, DataType, Reader, Xlsx};
use chrono::{DateTime, Duration, DurationRound, Utc};
use flow_common::db::orgs::Tier;
use flow_domain::format_timestamp;
use flow_domain::ids::FlowId;
use flow_tests::reports::{create_org_in_zone, download, start_report_worker, wait_for_export};
use flow_tests::{TestApp, TestOrg, TestResponse};
use serde_json::{Value, json};
use uuid::Uuid;

/// The seeded organization: two required flows and an elective one, four people with
/// assignments, one who joined after the audit instant, and `bulk` people with none.
struct Seed {
    org: TestOrg,
    safety: String,
    privacy: String,
    /// The instant the seed calls now (whole seconds).
    now: DateTime<Utc>,
    /// Ten days before `now`.
    audit: DateTime<Utc>,
}

/// A flow made over the API; its id.
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

/// Makes a person with a profile, existing since `since`; their id.
async fn person(
    app: &TestApp,
    org: &TestOrg,
    email: &str,
    profile: (&str, Option<&str>, Option<&str>, Option<&str>),
    since: DateTime<Utc>,
) -> Uuid {
    app.create_users(org, &[email]).await;
    let (name, department, manager_id, manager_name) = profile;
    sqlx::query_scalar(
        "UPDATE users SET created_at = $3, name = $4, department = $5, manager_id = $6,
                          manager_name = $7
         WHERE org_id = $1 AND email_normalized = $2 RETURNING id",
    )
    .bind(org.id)
    .bind(email)
    .bind(since)
    .bind(name)
    .bind(department)
    .bind(manager_id)
    .bind(manager_name)
    .fetch_one(&app.db)
    .await
    .expect("user")
}

/// An assignment as it stands, written directly.
#[derive(Clone, Copy, Default)]
struct Fixture {
    assigned: Option<DateTime<Utc>>,
    due: Option<DateTime<Utc>>,
    completed: Option<DateTime<Utc>>,
    expires: Option<DateTime<Utc>>,
    cancelled: Option<DateTime<Utc>>,
}

async fn assignment(app: &TestApp, org: &TestOrg, flow: &str, user: Uuid, at: Fixture) {
    let status = if at.cancelled.is_some() {
        "cancelled"
    } else if at.completed.is_some() {
        "completed"
    } else {
        "pending"
    };
    sqlx::query(
        "INSERT INTO assignments (id, org_id, flow_id, user_id, status, due_at, assigned_at,
                                  completed_at, expires_at, cancelled_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
    )
    .bind(Uuid::now_v7())
    .bind(org.id)
    .bind(FlowId::parse(flow).expect("flow id").0)
    .bind(user)
    .bind(status)
    .bind(at.due)
    .bind(at.assigned.expect("assigned"))
    .bind(at.completed)
    .bind(at.expires)
    .bind(at.cancelled)
    .execute(&app.db)
    .await
    .expect("insert assignment");
}

/// The seed. What each person's standing is, by hand (T = the audit instant, ten days ago):
///
/// | person | Safety at T / now        | Privacy at T / now       |
/// |--------|--------------------------|--------------------------|
/// | ann    | compliant / compliant    | overdue / overdue        |
/// | bob    | pending / compliant      | not_assigned (both)      |
/// | cid    | due_soon / overdue       | cancelled / cancelled    |
/// | dee    | not_assigned / pending   | expired / expired        |
/// | late   | (joined after T) / not_assigned, not_assigned now     |
async fn seed(app: &TestApp, tier: Tier, bulk: usize) -> Seed {
    let org = create_org_in_zone(app, tier, "UTC", Some(1_000_000)).await;
    let safety = flow(app, &org, "A Safety", true).await;
    let privacy = flow(app, &org, "B Privacy", true).await;
    let _elective = flow(app, &org, "C Elective", false).await;
    let now = Utc::now()
        .duration_trunc(Duration::seconds(1))
        .expect("truncate");
    let day = Duration::days(1);
    let ago = |days: i32| Some(now - day * days);
    let long_ago = now - day * 400;
    let ann = person(
        app,
        &org,
        "ann@example.com",
        ("Ann Archer", Some("Sales"), Some("m-1"), Some("Maya Boss")),
        long_ago,
    )
    .await;
    let bob = person(
        app,
        &org,
        "bob@example.com",
        ("Bob Baker", Some("Sales"), Some("m-2"), None),
        long_ago,
    )
    .await;
    let cid = person(
        app,
        &org,
        "cid@example.com",
        ("=Cid", Some("Ops"), None, None),
        long_ago,
    )
    .await;
    let dee = person(
        app,
        &org,
        "dee@example.com",
        ("Dee Dale", None, None, None),
        long_ago,
    )
    .await;
    person(
        app,
        &org,
        "late@example.com",
        ("Late Comer", None, None, None),
        now - day * 2,
    )
    .await;
    let cases = [
        // Completed 20 days ago, no expiry.
        (
            &safety,
            ann,
            Fixture {
                assigned: ago(40),
                completed: ago(20),
                ..Fixture::default()
            },
        ),
        // Due 12 days ago, still open.
        (
            &privacy,
            ann,
            Fixture {
                assigned: ago(30),
                due: ago(12),
                ..Fixture::default()
            },
        ),
        // Completed 5 days ago; due 10 days ahead, so plain pending at T.
        (
            &safety,
            bob,
            Fixture {
                assigned: ago(30),
                due: Some(now + day * 10),
                completed: ago(5),
                ..Fixture::default()
            },
        ),
        // Due 7 days ago: within a week of T, overdue now.
        (
            &safety,
            cid,
            Fixture {
                assigned: ago(15),
                due: ago(7),
                ..Fixture::default()
            },
        ),
        // Cancelled 12 days ago.
        (
            &privacy,
            cid,
            Fixture {
                assigned: ago(20),
                cancelled: ago(12),
                ..Fixture::default()
            },
        ),
        // Assigned after T.
        (
            &safety,
            dee,
            Fixture {
                assigned: ago(5),
                ..Fixture::default()
            },
        ),
        // Completed 100 days ago, expired 20 days ago.
        (
            &privacy,
            dee,
            Fixture {
                assigned: ago(120),
                completed: ago(100),
                expires: ago(20),
                ..Fixture::default()
            },
        ),
    ];
    for (flow, user, fixture) in cases {
        assignment(app, &org, flow, user, fixture).await;
    }
    if bulk > 0 {
        let emails: Vec<String> = (0..bulk)
            .map(|index| format!("bulk{index:04}@example.com"))
            .collect();
        let refs: Vec<&str> = emails.iter().map(String::as_str).collect();
        app.create_users(&org, &refs).await;
        sqlx::query("UPDATE users SET created_at = $2 WHERE org_id = $1 AND email LIKE 'bulk%'")
            .bind(org.id)
            .bind(long_ago)
            .execute(&app.db)
            .await
            .expect("bulk people");
    }
    Seed {
        org,
        safety,
        privacy,
        now,
        audit: now - day * 10,
    }
}

async fn compliance(app: &TestApp, org: &TestOrg, body: Value) -> TestResponse {
    app.post(org, "/v1/compliance/report", &body).await
}

/// Requests an export and waits for its file; returns the answer and the file's bytes.
async fn export(app: &TestApp, org: &TestOrg, body: Value) -> (Value, Vec<u8>) {
    let response = compliance(app, org, body.clone()).await;
    assert_eq!(response.status, 200, "{body}: {:?}", response.body);
    let url = response.body["downloadUrl"]
        .as_str()
        .unwrap_or_else(|| panic!("downloadUrl in {}", response.body))
        .to_owned();
    let file = wait_for_export(app, org, &url).await;
    assert_eq!(
        file.status,
        200,
        "export ended with {}: {}",
        file.status,
        String::from_utf8_lossy(&file.body)
    );
    (response.body, file.body)
}

fn stamp(at: DateTime<Utc>) -> String {
    format_timestamp(at)
}

#[tokio::test]
async fn a_csv_export_holds_every_person_and_flow_as_of_the_instant_asked() {
    let app = TestApp::spawn().await;
    let _worker = start_report_worker(&app);
    // 600 people more than a page of the worker's reads (500 people).
    let seed = seed(&app, Tier::Enterprise, 600).await;
    let (answer, file) = export(
        &app,
        &seed.org,
        json!({ "asOf": stamp(seed.audit), "format": "csv", "limit": 1 }),
    )
    .await;
    // The answer is the report's page (one person) with where the export will be.
    assert_eq!(answer["people"].as_array().expect("people").len(), 1);
    assert_eq!(answer["exportStatus"], "pending");
    assert!(answer["exportId"].as_str().expect("id").starts_with("exp_"));
    assert!(answer["expiresAt"].is_string());
    assert_eq!(answer["totals"]["summary"]["required"], 1_208);

    let mut reader = csv::ReaderBuilder::new().from_reader(file.as_slice());
    let headers: Vec<String> = reader
        .headers()
        .expect("header row")
        .iter()
        .map(str::to_owned)
        .collect();
    assert_eq!(
        headers,
        [
            "email",
            "name",
            "department",
            "manager",
            "flow",
            "status",
            "assignedAt",
            "dueDate",
            "completedAt",
            "expiresAt",
            "required"
        ]
    );
    let records: Vec<Vec<String>> = reader
        .records()
        .map(|record| record.expect("row").iter().map(str::to_owned).collect())
        .collect();
    // Everyone who existed at T (not late@) × the two required flows, each once.
    assert_eq!(records.len(), 604 * 2);
    let rows: HashMap<(String, String), Vec<String>> = records
        .iter()
        .map(|record| ((record[0].clone(), record[4].clone()), record.clone()))
        .collect();
    assert_eq!(rows.len(), records.len(), "no row twice");
    assert!(!rows.keys().any(|(email, _)| email == "late@example.com"));
    let day = Duration::days(1);
    let ago = |days: i32| stamp(seed.now - day * days);
    let row = |email: &str, flow: &str| -> Vec<String> {
        rows.get(&(email.to_owned(), flow.to_owned()))
            .unwrap_or_else(|| panic!("no row for {email} in {flow}"))
            .clone()
    };
    let expected: [(&str, &str, [String; 10]); 8] = [
        (
            "ann@example.com",
            "A Safety",
            [
                "ann@example.com".into(),
                "Ann Archer".into(),
                "Sales".into(),
                "Maya Boss".into(),
                "A Safety".into(),
                "compliant".into(),
                ago(40),
                String::new(),
                ago(20),
                String::new(),
            ],
        ),
        (
            "ann@example.com",
            "B Privacy",
            [
                "ann@example.com".into(),
                "Ann Archer".into(),
                "Sales".into(),
                "Maya Boss".into(),
                "B Privacy".into(),
                "overdue".into(),
                ago(30),
                ago(12),
                String::new(),
                String::new(),
            ],
        ),
        (
            "bob@example.com",
            "A Safety",
            [
                "bob@example.com".into(),
                "Bob Baker".into(),
                "Sales".into(),
                "m-2".into(),
                "A Safety".into(),
                "pending".into(),
                ago(30),
                stamp(seed.now + day * 10),
                String::new(),
                String::new(),
            ],
        ),
        (
            "bob@example.com",
            "B Privacy",
            [
                "bob@example.com".into(),
                "Bob Baker".into(),
                "Sales".into(),
                "m-2".into(),
                "B Privacy".into(),
                "not_assigned".into(),
                String::new(),
                String::new(),
                String::new(),
                String::new(),
            ],
        ),
        (
            "cid@example.com",
            "A Safety",
            [
                "cid@example.com".into(),
                "'=Cid".into(),
                "Ops".into(),
                String::new(),
                "A Safety".into(),
                "due_soon".into(),
                ago(15),
                ago(7),
                String::new(),
                String::new(),
            ],
        ),
        (
            "cid@example.com",
            "B Privacy",
            [
                "cid@example.com".into(),
                "'=Cid".into(),
                "Ops".into(),
                String::new(),
                "B Privacy".into(),
                "cancelled".into(),
                ago(20),
                String::new(),
                String::new(),
                String::new(),
            ],
        ),
        (
            "dee@example.com",
            "A Safety",
            [
                "dee@example.com".into(),
                "Dee Dale".into(),
                String::new(),
                String::new(),
                "A Safety".into(),
                "not_assigned".into(),
                String::new(),
                String::new(),
                String::new(),
                String::new(),
            ],
        ),
        (
            "dee@example.com",
            "B Privacy",
            [
                "dee@example.com".into(),
                "Dee Dale".into(),
                String::new(),
                String::new(),
                "B Privacy".into(),
                "expired".into(),
                ago(120),
                String::new(),
                ago(100),
                ago(20),
            ],
        ),
    ];
    for (email, flow, cells) in expected {
        let got = row(email, flow);
        assert_eq!(got[..10], cells, "{email} in {flow}");
        // Every flow is required of everyone here.
        assert_eq!(got[10], "true", "{email} in {flow}");
    }
    let bulk: Vec<&Vec<String>> = records
        .iter()
        .filter(|record| record[0].starts_with("bulk"))
        .collect();
    assert_eq!(bulk.len(), 1_200);
    assert!(bulk.iter().all(|record| record[5] == "not_assigned"));

    // What happens after T does not change a file as of T: the same request gives the same file.
    let bob: Uuid = sqlx::query_scalar("SELECT id FROM users WHERE email = 'bob@example.com'")
        .fetch_one(&app.db)
        .await
        .expect("bob");
    assignment(
        &app,
        &seed.org,
        &seed.privacy,
        bob,
        Fixture {
            assigned: Some(seed.now - day),
            completed: Some(seed.now),
            ..Fixture::default()
        },
    )
    .await;
    let (_, again) = export(
        &app,
        &seed.org,
        json!({ "asOf": stamp(seed.audit), "format": "csv" }),
    )
    .await;
    assert!(again == file, "the export as of T changed after T");

    // The same export without asOf judges the instant it was requested: bob is compliant now.
    let (answer, file) = export(&app, &seed.org, json!({ "format": "csv", "limit": 1 })).await;
    let mut reader = csv::ReaderBuilder::new().from_reader(file.as_slice());
    let now_rows: HashMap<(String, String), String> = reader
        .records()
        .map(|record| {
            let record = record.expect("row");
            (
                (record[0].to_owned(), record[4].to_owned()),
                record[5].to_owned(),
            )
        })
        .collect();
    assert_eq!(now_rows.len(), 605 * 2, "late@ counts now");
    for (email, flow, status) in [
        ("bob@example.com", "A Safety", "compliant"),
        ("cid@example.com", "A Safety", "overdue"),
        ("dee@example.com", "A Safety", "pending"),
        ("late@example.com", "B Privacy", "not_assigned"),
    ] {
        assert_eq!(
            now_rows[&(email.to_owned(), flow.to_owned())],
            status,
            "{email} now"
        );
    }
    assert_eq!(
        answer["totals"]["statuses"]["compliant"], 3,
        "bob's Privacy too"
    );
}

#[tokio::test]
async fn an_excel_export_has_the_rows_the_totals_and_the_roll_up() {
    let app = TestApp::spawn().await;
    let _worker = start_report_worker(&app);
    let seed = seed(&app, Tier::Enterprise, 0).await;
    let (answer, file) = export(
        &app,
        &seed.org,
        json!({ "format": "excel", "groupBy": "department",
                "flowIds": [seed.safety, seed.privacy] }),
    )
    .await;
    let mut workbook: Xlsx<_> =
        calamine::open_workbook_from_rs(Cursor::new(file)).expect("a valid XLSX");
    assert_eq!(workbook.sheet_names(), ["Totals", "Compliance", "Groups"]);

    // Now: 5 people × 2 flows; by hand: compliant ann/Safety and bob/Safety, overdue
    // ann/Privacy and cid/Safety, pending dee/Safety, expired dee/Privacy, cancelled
    // cid/Privacy, not assigned bob/Privacy and both of late's.
    let totals = workbook.worksheet_range("Totals").expect("Totals");
    let values: HashMap<String, Data> = totals
        .rows()
        .filter_map(|row| match (row.first(), row.get(1)) {
            (Some(Data::String(label)), Some(value)) => Some((label.clone(), value.clone())),
            _ => None,
        })
        .collect();
    for (label, expected) in [
        ("People", 5.0),
        ("People compliant in every flow", 0.0),
        ("Required (people × flows)", 10.0),
        ("Compliant", 2.0),
        ("overdue", 2.0),
        ("pending", 1.0),
        ("expired", 1.0),
        ("cancelled", 1.0),
        ("not_assigned", 3.0),
        ("due_soon", 0.0),
        ("Compliant (%)", 20.0),
    ] {
        assert_eq!(values[label], Data::Float(expected), "{label}");
    }
    assert_eq!(values["Flows"], Data::String("A Safety, B Privacy".into()));
    assert_eq!(
        values["As of taken from"],
        Data::String("the instant the export was requested".into())
    );
    assert!(values["As of (UTC)"].is_datetime());
    let as_of = values["As of (UTC)"].as_datetime().expect("as of");
    let answered = DateTime::parse_from_rfc3339(answer["asOf"].as_str().expect("asOf"))
        .expect("rfc 3339")
        .naive_utc();
    assert!(
        (as_of - answered).num_milliseconds().abs() < 2,
        "{as_of} vs {answered}"
    );

    let rows = workbook.worksheet_range("Compliance").expect("Compliance");
    assert_eq!(rows.height(), 10 + 1);
    assert_eq!(rows.get((0, 0)), Some(&Data::String("E-mail".into())));
    let mut statuses: Vec<(String, String, String)> = rows
        .rows()
        .skip(1)
        .map(|row| (row[0].to_string(), row[4].to_string(), row[5].to_string()))
        .collect();
    statuses.sort();
    let expected: Vec<(String, String, String)> = [
        ("ann@example.com", "A Safety", "compliant"),
        ("ann@example.com", "B Privacy", "overdue"),
        ("bob@example.com", "A Safety", "compliant"),
        ("bob@example.com", "B Privacy", "not_assigned"),
        ("cid@example.com", "A Safety", "overdue"),
        ("cid@example.com", "B Privacy", "cancelled"),
        ("dee@example.com", "A Safety", "pending"),
        ("dee@example.com", "B Privacy", "expired"),
        ("late@example.com", "A Safety", "not_assigned"),
        ("late@example.com", "B Privacy", "not_assigned"),
    ]
    .iter()
    .map(|(email, flow, status)| (email.to_string(), flow.to_string(), status.to_string()))
    .collect();
    assert_eq!(statuses, expected);
    // Typed cells: a date-time where there is an instant, the manager's name where known.
    let ann_safety = rows
        .rows()
        .find(|row| {
            row[0] == Data::String("ann@example.com".into())
                && row[4] == Data::String("A Safety".into())
        })
        .expect("ann's Safety row");
    assert!(ann_safety[8].is_datetime(), "{:?}", ann_safety[8]);
    assert_eq!(ann_safety[3], Data::String("Maya Boss".into()));

    // Departments in key order: none (dee, late), Ops (cid), Sales (ann, bob).
    let groups = workbook.worksheet_range("Groups").expect("Groups");
    assert_eq!(groups.height(), 3 + 1);
    let sales: Vec<Data> = groups.rows().nth(3).expect("Sales").to_vec();
    assert_eq!(sales[0], Data::String("Sales".into()));
    assert_eq!(sales[2], Data::Float(2.0), "people");
    assert_eq!(sales[4], Data::Float(4.0), "required");
    assert_eq!(sales[5], Data::Float(2.0), "compliant");
    assert_eq!(sales[6], Data::Float(50.0), "percent");
}

#[tokio::test]
async fn a_pdf_export_states_scope_instant_and_totals_for_filing() {
    let app = TestApp::spawn().await;
    let _worker = start_report_worker(&app);
    let seed = seed(&app, Tier::Enterprise, 0).await;
    let (_, file) = export(
        &app,
        &seed.org,
        json!({ "asOf": stamp(seed.audit), "format": "pdf", "filter": { "active": true } }),
    )
    .await;
    assert!(file.starts_with(b"%PDF-"));
    let document = lopdf::Document::load_mem(&file).expect("a valid PDF");
    let pages: Vec<u32> = document.get_pages().keys().copied().collect();
    let text = document.extract_text(&pages).expect("text");
    let as_of = seed.audit.format("%Y-%m-%d %H:%M:%S").to_string();
    // At T: ann, bob, cid, dee × 2 flows; compliant only ann/Safety.
    for expected in [
        "Compliance report".to_owned(),
        format!("As of {as_of} UTC"),
        "the asOf of the request".to_owned(),
        "the organization's required flows: A Safety, B Privacy".to_owned(),
        "active people only".to_owned(),
        "Compliant: 1 of 8 (12.5 %)".to_owned(),
        "0 of 4 people compliant in every flow".to_owned(),
        "Generated at".to_owned(),
        "ann@example.com".to_owned(),
        "due soon".to_owned(),
        "All 8 rows".to_owned(),
    ] {
        assert!(
            text.contains(&expected),
            "the PDF lacks {expected:?}:\n{text}"
        );
    }
    assert!(
        !text.contains("late@example.com"),
        "late@ joined after the instant"
    );
}

#[tokio::test]
async fn exports_list_their_kind_and_stay_within_their_organization() {
    let app = TestApp::spawn().await;
    let seed = seed(&app, Tier::Enterprise, 0).await;
    let other = create_org_in_zone(&app, Tier::Enterprise, "UTC", Some(1_000_000)).await;
    // No worker yet: the export waits, and says what it is.
    let response = compliance(&app, &seed.org, json!({ "format": "csv" })).await;
    assert_eq!(response.status, 200, "{:?}", response.body);
    let id = response.body["exportId"]
        .as_str()
        .expect("exportId")
        .to_owned();
    let waiting = download(&app, Some(&seed.org.key), &format!("/v1/exports/{id}")).await;
    assert_eq!(waiting.status, 202);
    assert_eq!(waiting.json()["kind"], "compliance");
    assert_eq!(waiting.json()["rowsTotal"], 10);

    let listed = app.get(&seed.org, "/v1/exports").await;
    assert_eq!(listed.status, 200, "{:?}", listed.body);
    let entry = &listed.body["data"][0];
    assert_eq!(entry["exportId"], id.as_str());
    assert_eq!(entry["kind"], "compliance");
    assert_eq!(entry["flowId"], Value::Null);
    assert_eq!(entry["format"], "csv");

    // Another organization neither sees nor downloads it, before or after it is ready.
    let foreign = download(&app, Some(&other.key), &format!("/v1/exports/{id}")).await;
    assert_eq!(foreign.status, 404, "{:?}", foreign.json());
    assert_eq!(foreign.json()["error"], "not_found");
    let other_list = app.get(&other, "/v1/exports").await;
    assert_eq!(other_list.body["data"], json!([]));
    let _worker = start_report_worker(&app);
    let file = wait_for_export(&app, &seed.org, &format!("/v1/exports/{id}")).await;
    assert_eq!(file.status, 200);
    assert!(
        file.header("content-disposition")
            .expect("disposition")
            .contains("compliance-report-"),
    );
    let foreign = download(&app, Some(&other.key), &format!("/v1/exports/{id}")).await;
    assert_eq!(foreign.status, 404);
    // Nor can it export with the first organization's flows.
    let refused = compliance(
        &app,
        &other,
        json!({ "flowIds": [seed.safety], "format": "csv" }),
    )
    .await;
    assert_eq!(refused.status, 404, "{:?}", refused.body);
}

#[tokio::test]
async fn an_export_whose_answer_fails_after_it_was_recorded_is_withdrawn() {
    // No report-worker runs: the export waits until the request that recorded it withdraws it.
    let app = TestApp::spawn().await;
    let seed = seed(&app, Tier::Standard, 0).await;
    // Due-date changes applied after the audit instant whose earlier date Postgres cannot read:
    // counting the population (the export's rows) reads none of them, the answer's cells do.
    let broken = sqlx::query(
        "INSERT INTO assignment_changes (id, org_id, assignment_id, kind, changed, outcome,
                                         requested_at, applied_at)
         SELECT gen_random_uuid(), org_id, id, 'update',
                '{\"dueDate\": {\"from\": \"not a date\", \"to\": null}}', 'applied',
                now(), now()
         FROM assignments WHERE org_id = $1 AND assigned_at <= $2",
    )
    .bind(seed.org.id)
    .bind(seed.audit)
    .execute(&app.db)
    .await
    .expect("break the history");
    assert!(broken.rows_affected() > 0);
    let failed = compliance(
        &app,
        &seed.org,
        json!({ "asOf": stamp(seed.audit), "format": "csv" }),
    )
    .await;
    assert!(failed.status >= 400, "{:?}", failed.body);
    assert!(failed.body.get("exportId").is_none(), "{:?}", failed.body);
    // The export was recorded before the answer failed, and is withdrawn: failed, saying why.
    let exports: Vec<(String, Option<String>)> =
        sqlx::query_as("SELECT status, error FROM exports WHERE org_id = $1")
            .bind(seed.org.id)
            .fetch_all(&app.db)
            .await
            .expect("exports");
    assert_eq!(exports.len(), 1, "{exports:?}");
    assert_eq!(exports[0].0, "failed", "{exports:?}");
    assert!(
        exports[0]
            .1
            .as_deref()
            .is_some_and(|error| error.contains("failed before it answered")),
        "{exports:?}"
    );
    // The same report at the present reads none of those changes: it answers, with its export.
    let now = compliance(&app, &seed.org, json!({ "format": "csv" })).await;
    assert_eq!(now.status, 200, "{:?}", now.body);
    assert!(now.body["exportId"].is_string(), "{:?}", now.body);
}

#[tokio::test]
async fn compliance_exports_share_the_export_caps_and_check_their_format() {
    // No report-worker runs: every export requested stays waiting.
    let app = TestApp::spawn().await;
    let seed = seed(&app, Tier::Standard, 0).await;
    let bad = compliance(&app, &seed.org, json!({ "format": "docx" })).await;
    assert_eq!(bad.status, 400, "{:?}", bad.body);
    assert_eq!(bad.body["error"], "invalid_request");
    assert!(
        bad.body["message"]
            .as_str()
            .expect("message")
            .contains("format must be one of: csv, excel, pdf"),
        "{:?}",
        bad.body
    );
    for _ in 0..5 {
        let accepted = compliance(&app, &seed.org, json!({ "format": "csv" })).await;
        assert_eq!(accepted.status, 200, "{:?}", accepted.body);
    }
    let refused = compliance(&app, &seed.org, json!({ "format": "pdf" })).await;
    assert_eq!(refused.status, 429, "{:?}", refused.body);
    assert_eq!(refused.body["error"], "rate_limit_exceeded");
    assert!(
        refused.body["message"]
            .as_str()
            .expect("message")
            .contains("5 exports waiting or running"),
        "{:?}",
        refused.body
    );
    assert!(refused.header("retry-after").is_some());
    // The cap is the organization's, whatever the kind: a flow report export is refused too.
    let flow_export = app
        .post(
            &seed.org,
            "/v1/flows/report",
            &json!({ "flowId": seed.safety, "format": "csv" }),
        )
        .await;
    assert_eq!(flow_export.status, 429, "{:?}", flow_export.body);
    // Nothing half-written: five rows, and the report itself still answers without a format.
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM exports WHERE org_id = $1")
        .bind(seed.org.id)
        .fetch_one(&app.db)
        .await
        .expect("count");
    assert_eq!(rows, 5);
    let plain = compliance(&app, &seed.org, json!({})).await;
    assert_eq!(plain.status, 200, "{:?}", plain.body);
    assert!(plain.body.get("exportId").is_none());
}
