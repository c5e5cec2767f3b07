//! Helpers for report and export tests: fixture flows written straight to Postgres with known
//! timestamps (the API stamps `assignedAt` with the request time, so the pipeline cannot produce
//! them), among them the hand-computed [`security`] fixture, the report-worker, and export
//! downloads.

use std::collections::HashMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use flow_common::db::orgs::{NewOrganization, Tier};
use flow_domain::ids::{AssignmentId, FlowId, ModuleId, OrgId, ScheduleId, UserId};
use reqwest::header::HeaderMap;
use serde_json::{Value, json};

use crate::{TestApp, TestOrg, TestResponse, WorkerHandle};

/// Parses an RFC 3339 timestamp (test literals).
pub fn at(text: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(text)
        .unwrap_or_else(|error| panic!("bad test timestamp {text}: {error}"))
        .with_timezone(&Utc)
}

/// Creates an organization in time zone `zone` with a key, optionally overriding its report
/// limit.
pub async fn create_org_in_zone(
    app: &TestApp,
    tier: Tier,
    zone: &str,
    report_limit: Option<u32>,
) -> TestOrg {
    let org = flow_common::db::orgs::create(
        &app.db,
        &NewOrganization {
            name: "Report org".into(),
            tier,
            timezone: zone.parse().expect("time zone"),
            assign_limit_per_minute: None,
            report_limit_per_minute: report_limit,
        },
    )
    .await
    .expect("create org");
    let (_, key) = flow_common::db::keys::create(&app.db, org.id, "test")
        .await
        .expect("create key");
    TestOrg { id: org.id, key }
}

/// A flow written directly, with its modules in order.
#[derive(Debug, Clone)]
pub struct FixtureFlow {
    /// The flow.
    pub id: FlowId,
    /// Its organization.
    pub org_id: OrgId,
    /// Module ids in flow order.
    pub modules: Vec<ModuleId>,
}

/// Creates a flow named `name` with modules named `modules`.
pub async fn create_flow(
    app: &TestApp,
    org: &TestOrg,
    name: &str,
    modules: &[&str],
) -> FixtureFlow {
    let new_modules: Vec<flow_common::db::flows::NewModule> = modules
        .iter()
        .map(|name| flow_common::db::flows::NewModule {
            name: (*name).to_owned(),
            estimated_minutes: 30,
            activity_id: None,
        })
        .collect();
    let (flow, modules) = flow_common::db::flows::create(&app.db, org.id, name, None, &new_modules)
        .await
        .expect("create flow");
    FixtureFlow {
        id: flow.id,
        org_id: org.id,
        modules: modules.into_iter().map(|module| module.id).collect(),
    }
}

/// Creates (or finds) a user by e-mail, written directly so any text can be used.
pub async fn user(app: &TestApp, org: &TestOrg, email: &str) -> UserId {
    sqlx::query_scalar(
        "INSERT INTO users (id, org_id, email, email_normalized) VALUES ($1, $2, $3, lower($3))
         ON CONFLICT (org_id, email_normalized) DO UPDATE SET email = EXCLUDED.email
         RETURNING id",
    )
    .bind(UserId::new())
    .bind(org.id)
    .bind(email)
    .fetch_one(&app.db)
    .await
    .expect("insert user")
}

/// An assignment to write with known timestamps.
#[derive(Debug, Clone)]
pub struct Fixture<'a> {
    /// Assignee e-mail (created if needed).
    pub email: &'a str,
    /// Assignment time.
    pub assigned_at: &'a str,
    /// Stored status.
    pub status: &'a str,
    /// Due date.
    pub due_at: Option<&'a str>,
    /// First activity.
    pub started_at: Option<&'a str>,
    /// Completion.
    pub completed_at: Option<&'a str>,
}

impl<'a> Fixture<'a> {
    /// A pending assignment without due date.
    pub fn new(email: &'a str, assigned_at: &'a str, status: &'a str) -> Self {
        Self {
            email,
            assigned_at,
            status,
            due_at: None,
            started_at: None,
            completed_at: None,
        }
    }

    /// With a due date.
    pub fn due(mut self, due_at: &'a str) -> Self {
        self.due_at = Some(due_at);
        self
    }

    /// Started at.
    pub fn started(mut self, started_at: &'a str) -> Self {
        self.started_at = Some(started_at);
        self
    }

    /// Completed at.
    pub fn completed(mut self, completed_at: &'a str) -> Self {
        self.completed_at = Some(completed_at);
        self
    }
}

/// Writes an assignment of `flow`.
pub async fn insert_assignment(
    app: &TestApp,
    org: &TestOrg,
    flow: &FixtureFlow,
    fixture: &Fixture<'_>,
) -> AssignmentId {
    let user_id = user(app, org, fixture.email).await;
    let id = AssignmentId::new();
    sqlx::query(
        "INSERT INTO assignments (id, org_id, flow_id, user_id, status, due_at, assigned_at,
                                  started_at, completed_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
    )
    .bind(id)
    .bind(org.id)
    .bind(flow.id)
    .bind(user_id)
    .bind(fixture.status)
    .bind(fixture.due_at.map(at))
    .bind(at(fixture.assigned_at))
    .bind(fixture.started_at.map(at))
    .bind(fixture.completed_at.map(at))
    .execute(&app.db)
    .await
    .expect("insert assignment");
    id
}

/// Writes module progress of an assignment.
pub async fn insert_progress(
    app: &TestApp,
    assignment: AssignmentId,
    module: ModuleId,
    status: &str,
    started_at: &str,
    completed_at: Option<&str>,
) {
    sqlx::query(
        "INSERT INTO module_progress (assignment_id, module_id, status, started_at, completed_at)
         VALUES ($1, $2, $3, $4, $5)",
    )
    .bind(assignment)
    .bind(module)
    .bind(status)
    .bind(at(started_at))
    .bind(completed_at.map(at))
    .execute(&app.db)
    .await
    .expect("insert module progress");
}

/// Writes a schedule of `flow`.
pub async fn insert_schedule(
    app: &TestApp,
    org: &TestOrg,
    flow: &FixtureFlow,
    email: &str,
    scheduled_at: &str,
    recurrence: &str,
    current: Option<AssignmentId>,
) -> ScheduleId {
    let user_id = user(app, org, email).await;
    let id = ScheduleId::new();
    sqlx::query(
        "INSERT INTO schedules (id, org_id, flow_id, user_id, anchor_at, scheduled_at, recurrence,
                                current_assignment_id)
         VALUES ($1, $2, $3, $4, $5, $5, $6, $7)",
    )
    .bind(id)
    .bind(org.id)
    .bind(flow.id)
    .bind(user_id)
    .bind(at(scheduled_at))
    .bind(recurrence)
    .bind(current)
    .execute(&app.db)
    .await
    .expect("insert schedule");
    id
}

/// Writes `count` pending assignments of `flow` in one statement, one user each, assigned one
/// second apart from `first`. E-mails are `prefix-<n>@bulk.example`.
pub async fn insert_many(
    app: &TestApp,
    org: &TestOrg,
    flow: &FixtureFlow,
    count: i64,
    first: &str,
    prefix: &str,
) {
    sqlx::query(
        "WITH new_users AS (
            INSERT INTO users (id, org_id, email, email_normalized)
            SELECT gen_random_uuid(), $1, $4 || '-' || n || '@bulk.example',
                   $4 || '-' || n || '@bulk.example'
            FROM generate_series(1, $3) AS n
            RETURNING id, email
         )
         INSERT INTO assignments (id, org_id, flow_id, user_id, status, assigned_at)
         SELECT gen_random_uuid(), $1, $2, u.id, 'pending',
                $5::timestamptz + (split_part(split_part(u.email, '@', 1), '-', -1)::int
                                   * interval '1 second')
         FROM new_users u",
    )
    .bind(org.id)
    .bind(flow.id)
    .bind(count)
    .bind(prefix)
    .bind(at(first))
    .execute(&app.db)
    .await
    .expect("insert many assignments");
}

/// "Security Basics" in a UTC organization: eight assignments over three months, module
/// progress on two of them and three schedules.
///
/// | id | assigned (UTC)     | stored      | due        | reported    | started → completed       |
/// |----|--------------------|-------------|------------|-------------|---------------------------|
/// | a1 | 2025-03-03 09:00   | completed   |            | completed   | 03-03 10:00 → 03-05 09:00 |
/// | a2 | 2025-03-04 12:00   | completed   |            | completed   | 03-04 12:30 → 03-04 18:00 |
/// | a3 | 2025-03-10 08:00   | in_progress | 2099       | in_progress | 03-11 08:00               |
/// | a4 | 2025-03-12 08:00   | pending     | 2025-04-01 | overdue     |                           |
/// | a5 | 2025-03-20 08:00   | in_progress | 2025-04-01 | overdue     | 03-21 08:00               |
/// | a6 | 2025-04-02 08:00   | pending     |            | pending     |                           |
/// | a7 | 2025-04-15 08:00   | overdue     | 2025-04-20 | overdue     |                           |
/// | a8 | 2025-05-01 00:00   | completed   |            | completed   | 05-01 01:00 → 05-02 01:00 |
pub struct Security {
    /// The organization, in UTC.
    pub org: TestOrg,
    /// "Security Basics": Passwords, Phishing, Devices.
    pub flow: FixtureFlow,
    /// The assignments by their name in the table (`a1` to `a8`).
    pub ids: HashMap<&'static str, AssignmentId>,
    /// The schedules by name (`s1` to `s3`).
    pub schedules: HashMap<&'static str, ScheduleId>,
}

/// The status each assignment of [`security`] is reported with, in assignment order.
pub const REPORTED: [(&str, &str); 8] = [
    ("a1", "completed"),
    ("a2", "completed"),
    ("a3", "in_progress"),
    ("a4", "overdue"),
    ("a5", "overdue"),
    ("a6", "pending"),
    ("a7", "overdue"),
    ("a8", "completed"),
];

/// Writes the [`Security`] fixture.
pub async fn security(app: &TestApp) -> Security {
    let org = create_org_in_zone(app, Tier::Standard, "UTC", Some(100_000)).await;
    let flow = create_flow(
        app,
        &org,
        "Security Basics",
        &["Passwords", "Phishing", "Devices"],
    )
    .await;
    let fixtures: [(&str, Fixture<'_>); 8] = [
        (
            "a1",
            Fixture::new("alice@example.com", "2025-03-03T09:00:00Z", "completed")
                .started("2025-03-03T10:00:00Z")
                .completed("2025-03-05T09:00:00Z"),
        ),
        (
            "a2",
            Fixture::new("bob@example.com", "2025-03-04T12:00:00Z", "completed")
                .started("2025-03-04T12:30:00Z")
                .completed("2025-03-04T18:00:00Z"),
        ),
        (
            "a3",
            Fixture::new("carol@example.com", "2025-03-10T08:00:00Z", "in_progress")
                .due("2099-01-01T00:00:00Z")
                .started("2025-03-11T08:00:00Z"),
        ),
        (
            "a4",
            Fixture::new("dave@example.com", "2025-03-12T08:00:00Z", "pending")
                .due("2025-04-01T00:00:00Z"),
        ),
        (
            "a5",
            Fixture::new("erin@example.com", "2025-03-20T08:00:00Z", "in_progress")
                .due("2025-04-01T00:00:00Z")
                .started("2025-03-21T08:00:00Z"),
        ),
        (
            "a6",
            Fixture::new("frank@example.com", "2025-04-02T08:00:00Z", "pending"),
        ),
        (
            "a7",
            Fixture::new("grace@example.com", "2025-04-15T08:00:00Z", "overdue")
                .due("2025-04-20T00:00:00Z"),
        ),
        (
            "a8",
            Fixture::new("heidi@example.com", "2025-05-01T00:00:00Z", "completed")
                .started("2025-05-01T01:00:00Z")
                .completed("2025-05-02T01:00:00Z"),
        ),
    ];
    let mut ids = HashMap::new();
    for (name, fixture) in &fixtures {
        ids.insert(*name, insert_assignment(app, &org, &flow, fixture).await);
    }
    let [m1, m2, m3] = [flow.modules[0], flow.modules[1], flow.modules[2]];
    for (module, started, completed) in [
        (m1, "2025-03-03T10:00:00Z", "2025-03-04T10:00:00Z"),
        (m2, "2025-03-04T10:00:00Z", "2025-03-05T08:00:00Z"),
        (m3, "2025-03-05T08:00:00Z", "2025-03-05T09:00:00Z"),
    ] {
        insert_progress(
            app,
            ids["a1"],
            module,
            "completed",
            started,
            Some(completed),
        )
        .await;
    }
    // Written out of flow order on purpose.
    insert_progress(
        app,
        ids["a3"],
        m2,
        "in_progress",
        "2025-03-12T08:00:00Z",
        None,
    )
    .await;
    insert_progress(
        app,
        ids["a3"],
        m1,
        "completed",
        "2025-03-11T08:00:00Z",
        Some("2025-03-12T07:00:00Z"),
    )
    .await;
    insert_progress(
        app,
        ids["a5"],
        m1,
        "in_progress",
        "2025-03-21T08:00:00Z",
        None,
    )
    .await;
    let mut schedules = HashMap::new();
    schedules.insert(
        "s1",
        insert_schedule(
            app,
            &org,
            &flow,
            "ivan@example.com",
            "2025-03-15T09:00:00Z",
            "weekly",
            None,
        )
        .await,
    );
    schedules.insert(
        "s2",
        insert_schedule(
            app,
            &org,
            &flow,
            "heidi@example.com",
            "2025-06-01T09:00:00Z",
            "monthly",
            Some(ids["a8"]),
        )
        .await,
    );
    schedules.insert(
        "s3",
        insert_schedule(
            app,
            &org,
            &flow,
            "dave@example.com",
            "2025-03-20T09:00:00Z",
            "none",
            Some(ids["a4"]),
        )
        .await,
    );
    Security {
        org,
        flow,
        ids,
        schedules,
    }
}

impl Security {
    /// The ids of the named assignments, as the API writes them.
    pub fn ids_of(&self, names: &[&str]) -> Vec<String> {
        names
            .iter()
            .map(|name| self.ids[name].to_string())
            .collect()
    }

    /// The ids of the named schedules, as the API writes them.
    pub fn schedule_ids(&self, names: &[&str]) -> Vec<String> {
        names
            .iter()
            .map(|name| self.schedules[name].to_string())
            .collect()
    }
}

/// The assignment ids of a report's list, in order.
pub fn assignment_ids(body: &Value) -> Vec<String> {
    ids(body, "assignments", "assignmentId")
}

/// The schedule ids of a report's list, in order.
pub fn schedule_ids(body: &Value) -> Vec<String> {
    ids(body, "schedules", "scheduleId")
}

/// The `field` of every row of the report's `list`.
fn ids(body: &Value, list: &str, field: &str) -> Vec<String> {
    body[list]
        .as_array()
        .unwrap_or_else(|| panic!("{list} in {body}"))
        .iter()
        .map(|row| row[field].as_str().expect("id").to_owned())
        .collect()
}

/// `POST /v1/flows/report`.
pub async fn report(app: &TestApp, org: &TestOrg, body: Value) -> TestResponse {
    app.post(org, "/v1/flows/report", &body).await
}

/// A report that must succeed; returns its body.
pub async fn report_ok(app: &TestApp, org: &TestOrg, body: Value) -> Value {
    let response = report(app, org, body.clone()).await;
    assert_eq!(
        response.status, 200,
        "report {body} answered {}: {}",
        response.status, response.body
    );
    response.body
}

/// Every assignment of a report, following `nextCursor` with pages of `limit`.
pub async fn all_pages(app: &TestApp, org: &TestOrg, mut body: Value, limit: u32) -> Vec<Value> {
    body["limit"] = json!(limit);
    let mut rows = Vec::new();
    loop {
        let page = report_ok(app, org, body.clone()).await;
        rows.extend(page["assignments"].as_array().cloned().unwrap_or_default());
        match page["nextCursor"].as_str() {
            Some(cursor) => body["cursor"] = json!(cursor),
            None => return rows,
        }
    }
}

/// Starts a report-worker for this test (polling fast, sweeping rarely: tests sweep explicitly).
pub fn start_report_worker(app: &TestApp) -> WorkerHandle {
    let config = report_worker_config(app);
    WorkerHandle::spawn(move |shutdown| flow_workers::runtime::run(config, shutdown))
}

/// The report-worker settings tests use.
pub fn report_worker_config(app: &TestApp) -> flow_workers::report::ReportWorkerConfig {
    let mut config: flow_workers::report::ReportWorkerConfig = flow_common::config::from_env();
    config.core = app.core.clone();
    config.core.database_max_connections = 4;
    config.poll_interval_ms = 200;
    config.lease_seconds = 30;
    config.sweep_interval_seconds = 3_600;
    config
}

/// A downloaded file.
#[derive(Debug)]
pub struct Download {
    /// Status code.
    pub status: u16,
    pub headers: HeaderMap,
    /// Body bytes.
    pub body: Vec<u8>,
}

impl Download {
    /// A header as text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|value| value.to_str().ok())
    }

    /// The body as JSON (`Null` when it is not).
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }
}

/// `GET` a path with `key`, keeping the raw body.
pub async fn download(app: &TestApp, key: Option<&str>, path: &str) -> Download {
    let url = if path.starts_with("http") {
        path.to_owned()
    } else {
        format!("{}{path}", app.base_url)
    };
    let mut request = app.client.get(url);
    if let Some(key) = key {
        request = request.bearer_auth(key);
    }
    let response = request.send().await.expect("download sent");
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let body = response.bytes().await.expect("download body").to_vec();
    Download {
        status,
        headers,
        body,
    }
}

/// Polls an export's `downloadUrl` until it stops answering 202; returns the final answer.
pub async fn wait_for_export(app: &TestApp, org: &TestOrg, download_url: &str) -> Download {
    let mut last = None;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while tokio::time::Instant::now() < deadline {
        let answer = download(app, Some(&org.key), download_url).await;
        if answer.status != 202 {
            return answer;
        }
        last = Some(answer);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!(
        "export at {download_url} still pending after 60 s: {:?}",
        last.map(|answer| answer.json())
    );
}

/// Requests an export and waits for the file; panics unless it ends ready.
pub async fn export_file(app: &TestApp, org: &TestOrg, body: Value) -> (Value, Download) {
    let response = report_ok(app, org, body).await;
    let url = response["downloadUrl"]
        .as_str()
        .expect("downloadUrl")
        .to_owned();
    let file = wait_for_export(app, org, &url).await;
    assert_eq!(
        file.status,
        200,
        "export ended with {}: {}",
        file.status,
        String::from_utf8_lossy(&file.body)
    );
    (response, file)
}

/// The rows of a CSV export (after its header row) as the values of the columns `names`, in
/// file order; panics when a column is missing or a row is not CSV.
pub fn csv_columns<const N: usize>(file: &[u8], names: [&str; N]) -> Vec<[String; N]> {
    let mut reader = csv::ReaderBuilder::new().from_reader(file);
    let headers = reader.headers().expect("header row").clone();
    let columns = names.map(|name| {
        headers
            .iter()
            .position(|header| header == name)
            .unwrap_or_else(|| panic!("no column {name} in {headers:?}"))
    });
    reader
        .records()
        .map(|record| {
            let record = record.expect("row");
            columns.map(|column| record[column].to_owned())
        })
        .collect()
}

/// An assignment of `flow` (its API id) to `user` written directly: assigned at `assigned`, due
/// at `due` when given, completed at `completed` when given (stored `completed`, else
/// `pending`).
pub async fn write_assignment(
    app: &TestApp,
    org: &TestOrg,
    flow: &str,
    user: uuid::Uuid,
    assigned: DateTime<Utc>,
    due: Option<DateTime<Utc>>,
    completed: Option<DateTime<Utc>>,
) {
    sqlx::query(
        "INSERT INTO assignments (id, org_id, flow_id, user_id, status, due_at, assigned_at,
                                  completed_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
    )
    .bind(uuid::Uuid::now_v7())
    .bind(org.id)
    .bind(FlowId::parse(flow).expect("flow id").0)
    .bind(user)
    .bind(if completed.is_some() {
        "completed"
    } else {
        "pending"
    })
    .bind(due)
    .bind(assigned)
    .bind(completed)
    .execute(&app.db)
    .await
    .expect("insert assignment");
}
