//! Bad input never reaches Postgres as a 500 (README guarantee 7): dates outside the years
//! 0001–9999 and crafted cursors, NUL bytes and over-long text in every free-text field, query
//! strings and paths that do not decode, and a failed export, all answer the error body with a
//! 4xx (or, for the export, a message without internal detail) and write nothing.

use flow_common::db::orgs::Tier;
use flow_domain::ids::ExportId;
use flow_tests::reports::{report_ok, start_report_worker, wait_for_export};
use flow_tests::{TestApp, TestOptions, TestOrg, TestResponse};
use reqwest::Method;
use serde_json::{Value, json};

/// A 4xx with the error body, whose message starts with the name of `field`.
fn assert_refused(response: &TestResponse, status: u16, code: &str, field: &str, what: &str) {
    assert_eq!(response.status, status, "{what}: {:?}", response.body);
    assert_eq!(
        response.body["error"],
        json!(code),
        "{what}: {:?}",
        response.body
    );
    let message = response.body["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with(&format!("{field} ")),
        "{what}: the message should name {field}: {message}"
    );
}

async fn setup(app: &TestApp) -> (TestOrg, String) {
    let org = app.create_org(Tier::Enterprise).await;
    app.create_users(&org, &["alice@example.com"]).await;
    let flow = app.create_flow(&org, "Security Basics", &[45]).await;
    (org, flow)
}

async fn count(app: &TestApp, table: &str) -> i64 {
    sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT count(*) FROM {table}")))
        .fetch_one(&app.db)
        .await
        .expect("count")
}

/// A well-formed keyset cursor (hex of microseconds and an id) at a time Postgres cannot hold:
/// about 190,000 years BC, still within what the date library represents.
fn crafted_cursor() -> String {
    let micros: i64 = -6_000_000_000_000_000_000;
    format!("{}{}", hex::encode(micros.to_be_bytes()), "00".repeat(16))
}

#[tokio::test]
async fn dates_outside_years_1_to_9999_and_crafted_cursors_are_400_naming_the_field() {
    let app = TestApp::spawn_with(TestOptions {
        assign_worker: false,
        ..TestOptions::default()
    })
    .await;
    let (org, flow) = setup(&app).await;
    let dates = [
        "-5000-01-01",
        "0000-12-31",
        "10000-01-01",
        "+10000-01-01",
        "0000-06-01T00:00:00Z",
        "200000-01-01",
    ];
    for date in dates {
        for field in ["startDate", "endDate"] {
            let response = app
                .post(
                    &org,
                    "/v1/flows/report",
                    &json!({ "flowId": flow, field: date }),
                )
                .await;
            assert_refused(&response, 400, "invalid_request", field, date);
        }
        let response = app
            .post(
                &org,
                "/v1/flows/assign",
                &json!({ "flowId": flow, "userEmail": "alice@example.com", "dueDate": date }),
            )
            .await;
        assert_refused(&response, 400, "invalid_request", "dueDate", date);
        let response = app
            .post(
                &org,
                "/v1/flows/schedule",
                &json!({ "flowId": flow, "userEmail": "alice@example.com", "scheduledAt": date, "recurrence": "daily" }),
            )
            .await;
        assert_refused(&response, 400, "invalid_request", "scheduledAt", date);
        let response = app
            .post(
                &org,
                "/v1/assignments/asg_0193a1b2c3d47e8f9a0b1c2d3e4f5a6b/progress",
                &json!({ "moduleId": "mod_0193a1b2c3d47e8f9a0b1c2d3e4f5a6b", "status": "completed", "at": date }),
            )
            .await;
        assert_refused(&response, 400, "invalid_request", "at", date);
    }
    // The message says what is allowed.
    let response = app
        .post(
            &org,
            "/v1/flows/report",
            &json!({ "flowId": flow, "startDate": "-5000-01-01" }),
        )
        .await;
    assert_eq!(
        response.body["message"],
        json!("startDate must be a date between the years 0001 and 9999")
    );
    // The extremes of the range are fine.
    let response = app
        .post(
            &org,
            "/v1/flows/report",
            &json!({ "flowId": flow, "startDate": "0001-01-01", "endDate": "9999-12-31" }),
        )
        .await;
    assert_eq!(response.status, 200, "{:?}", response.body);

    // A cursor that decodes to a time Postgres cannot hold is as invalid as garbage.
    let cursor = crafted_cursor();
    let response = app
        .post(
            &org,
            "/v1/flows/report",
            &json!({ "flowId": flow, "cursor": cursor }),
        )
        .await;
    assert_refused(&response, 400, "invalid_request", "cursor", "report cursor");
    let response = app
        .get(&org, &format!("/v1/assignments?cursor={cursor}"))
        .await;
    assert_refused(
        &response,
        400,
        "invalid_request",
        "cursor",
        "assignments cursor",
    );
    let webhook = app
        .post(
            &org,
            "/v1/webhooks",
            &json!({ "url": "http://127.0.0.1:9/hook" }),
        )
        .await;
    assert_eq!(webhook.status, 201, "{:?}", webhook.body);
    let webhook = webhook.body["webhookId"].as_str().expect("id").to_owned();
    let response = app
        .get(
            &org,
            &format!("/v1/webhooks/{webhook}/deliveries?cursor={cursor}"),
        )
        .await;
    assert_refused(
        &response,
        400,
        "invalid_request",
        "cursor",
        "deliveries cursor",
    );
    assert_eq!(count(&app, "schedules").await, 0);
    assert_eq!(count(&app, "exports").await, 0);
}

#[tokio::test]
async fn nul_bytes_and_over_long_text_in_every_free_text_field_are_400_and_write_nothing() {
    let app = TestApp::spawn_with(TestOptions {
        assign_worker: false,
        ..TestOptions::default()
    })
    .await;
    let (org, flow) = setup(&app).await;
    let nul = "Alice\u{0}Smith";
    let long_name = "n".repeat(201);
    let long_text = "d".repeat(2_001);
    let module = |name: &str| json!([{ "name": name, "estimatedMinutes": 5 }]);
    let cases: Vec<(&str, Value, &str)> = vec![
        (
            "/v1/users",
            json!({ "email": "bob@example.com", "name": nul }),
            "name",
        ),
        (
            "/v1/users",
            json!({ "email": "bob@example.com", "name": long_name }),
            "name",
        ),
        (
            "/v1/users",
            json!({ "email": "bob\u{0}@example.com" }),
            "email",
        ),
        (
            "/v1/users/bulk",
            json!({ "users": [{ "email": "bob@example.com" }, { "email": "carol@example.com", "name": nul }] }),
            "users[1].name",
        ),
        (
            "/v1/users/bulk",
            json!({ "users": [{ "email": "carol@example.com", "name": "Carol\nNewline" }] }),
            "users[0].name",
        ),
        (
            "/v1/flows",
            json!({ "name": nul, "modules": module("One") }),
            "name",
        ),
        (
            "/v1/flows",
            json!({ "name": long_name, "modules": module("One") }),
            "name",
        ),
        (
            "/v1/flows",
            json!({ "name": "Flow", "description": "a\u{0}b", "modules": module("One") }),
            "description",
        ),
        (
            "/v1/flows",
            json!({ "name": "Flow", "description": long_text, "modules": module("One") }),
            "description",
        ),
        (
            "/v1/flows",
            json!({ "name": "Flow", "modules": [{ "name": "One" }, { "name": nul }] }),
            "modules[1].name",
        ),
        (
            "/v1/flows",
            json!({ "name": "Flow", "modules": [{ "name": long_name }] }),
            "modules[0].name",
        ),
        (
            "/v1/flows/assign",
            json!({ "flowId": flow, "userEmail": "alice@example.com", "notes": "x\u{0}" }),
            "notes",
        ),
        (
            "/v1/flows/assign",
            json!({ "flowId": flow, "userEmail": "alice@example.com", "notes": long_text }),
            "notes",
        ),
        (
            "/v1/flows/schedule",
            json!({ "flowId": flow, "userEmail": "alice@example.com", "scheduledAt": "2099-01-01", "notes": "x\u{0}" }),
            "notes",
        ),
        (
            "/v1/webhooks",
            json!({ "url": "http://127.0.0.1:9/hook", "description": "a\u{0}b" }),
            "description",
        ),
        (
            "/v1/webhooks",
            json!({ "url": "http://127.0.0.1:9/hook", "description": "d".repeat(501) }),
            "description",
        ),
    ];
    for (path, body, field) in &cases {
        let response = app.post(&org, path, body).await;
        assert_refused(
            &response,
            400,
            "invalid_request",
            field,
            &format!("{path} {body}"),
        );
    }
    // Bulk assign refuses the bad item alone, with the error body.
    let response = app
        .post(
            &org,
            "/v1/flows/assign/bulk",
            &json!({ "assignments": [{ "flowId": flow, "userEmail": "alice@example.com", "notes": "x\u{0}" }] }),
        )
        .await;
    assert_eq!(response.status, 200, "{:?}", response.body);
    assert_eq!(response.body["results"][0]["status"], json!(400));
    assert_eq!(
        response.body["results"][0]["error"]["error"],
        json!("invalid_request")
    );

    // A webhook endpoint's PATCH is held to the same rule.
    let created = app
        .post(
            &org,
            "/v1/webhooks",
            &json!({ "url": "http://127.0.0.1:9/hook", "description": "  Payroll sync  " }),
        )
        .await;
    assert_eq!(created.status, 201, "{:?}", created.body);
    assert_eq!(created.body["description"], json!("Payroll sync"));
    let id = created.body["webhookId"].as_str().expect("id").to_owned();
    let patched = app
        .request(
            Method::PATCH,
            &format!("/v1/webhooks/{id}"),
            Some(&org.key),
            Some(&json!({ "description": "a\u{0}b" })),
            &[],
        )
        .await;
    assert_refused(&patched, 400, "invalid_request", "description", "patch");

    // Nothing was written by any refused request; the one flow and user are the setup's.
    assert_eq!(count(&app, "users").await, 1);
    assert_eq!(count(&app, "flows").await, 1);
    assert_eq!(count(&app, "modules").await, 1);
    assert_eq!(count(&app, "schedules").await, 0);
    assert_eq!(count(&app, "webhook_endpoints").await, 1);

    // Text at its limits, with line breaks where they belong, is accepted as given (trimmed).
    let description = format!("Line one\nLine two\t{}", "d".repeat(1_980));
    let created = app
        .post(
            &org,
            "/v1/flows",
            &json!({ "name": format!(" {} ", "n".repeat(200)), "description": description,
                     "modules": [{ "name": "Module é" }] }),
        )
        .await;
    assert_eq!(created.status, 201, "{:?}", created.body);
    assert_eq!(created.body["name"], json!("n".repeat(200)));
    assert_eq!(created.body["description"], json!(description));
}

#[tokio::test]
async fn query_string_and_path_errors_answer_the_error_body() {
    let app = TestApp::spawn_with(TestOptions {
        assign_worker: false,
        ..TestOptions::default()
    })
    .await;
    let (org, _) = setup(&app).await;
    let webhook = app
        .post(
            &org,
            "/v1/webhooks",
            &json!({ "url": "http://127.0.0.1:9/hook" }),
        )
        .await;
    let webhook = webhook.body["webhookId"].as_str().expect("id").to_owned();
    let deliveries = format!("/v1/webhooks/{webhook}/deliveries");
    for path in [
        "/v1/users",
        "/v1/flows",
        "/v1/assignments",
        "/v1/webhooks",
        deliveries.as_str(),
    ] {
        for query in ["limit=abc", "limit=1.5", "limit=99999999999999999999"] {
            let response = app.get(&org, &format!("{path}?{query}")).await;
            assert_eq!(response.status, 400, "{path}?{query}: {:?}", response.body);
            assert_eq!(response.body["error"], json!("invalid_request"));
            let message = response.body["message"].as_str().unwrap_or_default();
            assert!(message.contains("limit"), "{path}?{query}: {message}");
            assert_eq!(
                response.header("content-type"),
                Some("application/json"),
                "{path}?{query}"
            );
        }
        let response = app.get(&org, &format!("{path}?limit=0")).await;
        assert_refused(&response, 400, "invalid_request", "limit", path);
    }
    // A path parameter that does not even decode is an id that does not exist.
    for path in [
        "/v1/flows/%FF",
        "/v1/assignments/%C3%28",
        "/v1/schedules/%FF%FE",
        "/v1/exports/%80",
        "/v1/webhooks/%FF",
    ] {
        let response = app.get(&org, path).await;
        assert_eq!(response.status, 404, "{path}: {:?}", response.body);
        assert_eq!(response.body["error"], json!("not_found"), "{path}");
    }
}

#[tokio::test]
async fn a_failed_export_shows_the_caller_no_internal_detail() {
    let app = TestApp::spawn().await;
    let (org, flow) = setup(&app).await;
    let response = report_ok(&app, &org, json!({ "flowId": flow, "format": "csv" })).await;
    let export_id = ExportId::parse(response["exportId"].as_str().expect("exportId")).expect("id");
    // The report-worker's query fails on something internal (a table it reads is gone).
    sqlx::query("ALTER TABLE assignments RENAME TO assignments_moved")
        .execute(&app.db)
        .await
        .expect("rename");
    let _worker = start_report_worker(&app);
    let failed = wait_for_export(
        &app,
        &org,
        response["downloadUrl"].as_str().expect("downloadUrl"),
    )
    .await;
    assert_eq!(failed.status, 500);
    let body = failed.json();
    assert_eq!(
        body,
        json!({
            "error": "internal_error",
            "message": format!("export {export_id} failed: the export could not be generated; request a new export"),
        })
    );
    // Operators keep the detail.
    let detail: Option<String> =
        sqlx::query_scalar("SELECT error_detail FROM exports WHERE id = $1")
            .bind(export_id)
            .fetch_one(&app.db)
            .await
            .expect("detail");
    assert!(
        detail
            .as_deref()
            .is_some_and(|detail| detail.contains("assignments")),
        "{detail:?}"
    );
}

#[tokio::test]
async fn postgres_data_exceptions_become_400_invalid_request() {
    let app = TestApp::spawn_with(TestOptions {
        assign_worker: false,
        ..TestOptions::default()
    })
    .await;
    // Whatever validation misses, Postgres's own refusal of a value (class 22) is the caller's
    // fault, not a server error.
    let refusals = [
        sqlx::query("SELECT '-5000-01-01'::timestamptz").execute(&app.db),
        sqlx::query("SELECT 'abc'::int").execute(&app.db),
        sqlx::query("SELECT $1::text")
            .bind("a\u{0}b")
            .execute(&app.db),
        sqlx::query("SELECT $1::timestamptz + interval '300000 years'")
            .bind(chrono::Utc::now())
            .execute(&app.db),
    ];
    for (index, refusal) in refusals.into_iter().enumerate() {
        let error = refusal.await.expect_err("refused");
        let sqlx::Error::Database(database) = &error else {
            panic!("query {index}: {error}");
        };
        let code = database.code().unwrap_or_default().into_owned();
        assert!(code.starts_with("22"), "query {index}: {code}");
        let api_error = flow_api::error::ApiError::from(error);
        assert_eq!(api_error.status().as_u16(), 400, "query {index}");
        assert_eq!(api_error.code(), "invalid_request", "query {index}");
    }
    // Other database failures stay internal errors.
    let error = sqlx::query("SELECT * FROM no_such_table")
        .execute(&app.db)
        .await
        .expect_err("refused");
    assert_eq!(
        flow_api::error::ApiError::from(error).status().as_u16(),
        500
    );
}

#[tokio::test]
async fn the_openapi_document_describes_what_the_service_returns() {
    let app = TestApp::spawn().await;
    let (org, flow) = setup(&app).await;
    let document = app
        .request(Method::GET, "/v1/openapi.json", None, None, &[])
        .await
        .body;
    let schemas = &document["components"]["schemas"];

    // A report has its export fields only when a format was asked: they are optional properties
    // of the one object, not a flattened nullable object the plain report cannot match.
    let report_schema = &schemas["ReportResponse"];
    assert_eq!(report_schema["type"], json!("object"), "{report_schema}");
    let properties = report_schema["properties"].as_object().expect("properties");
    let required: Vec<&str> = report_schema["required"]
        .as_array()
        .expect("required")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for field in ["exportId", "downloadUrl", "expiresAt", "exportStatus"] {
        assert!(properties.contains_key(field), "{field}");
        assert!(!required.contains(&field), "{field}");
    }
    for body in [
        json!({ "flowId": flow }),
        json!({ "flowId": flow, "format": "csv" }),
    ] {
        let response = report_ok(&app, &org, body.clone()).await;
        let response = response.as_object().expect("object");
        for key in response.keys() {
            assert!(
                properties.contains_key(key),
                "{body}: {key} is not in the schema"
            );
        }
        for field in &required {
            assert!(response.contains_key(*field), "{body}: {field} missing");
        }
    }

    // Enumerations list the values as they are sent.
    assert_eq!(
        schemas["AssignmentStatus"]["enum"],
        json!([
            "pending",
            "in_progress",
            "completed",
            "overdue",
            "cancelled"
        ])
    );
    assert_eq!(
        schemas["ModuleStatus"]["enum"],
        json!(["in_progress", "completed"])
    );

    // Every operation lists the errors the shared extractors give it.
    for (path, item) in document["paths"].as_object().expect("paths") {
        for (method, operation) in item.as_object().expect("path item") {
            let responses = operation["responses"].as_object().expect("responses");
            let name = format!("{method} {path}");
            assert!(responses.contains_key("401"), "{name}");
            if operation.get("requestBody").is_some() {
                for status in ["400", "413", "415"] {
                    assert!(responses.contains_key(status), "{name}: {status}");
                }
            }
            let has_query = operation["parameters"]
                .as_array()
                .is_some_and(|parameters| parameters.iter().any(|p| p["in"] == json!("query")));
            if has_query {
                assert!(responses.contains_key("400"), "{name}: 400");
            }
        }
    }
}

#[tokio::test]
async fn flowctl_imports_and_flow_files_are_held_to_the_same_text_rules() {
    let app = TestApp::spawn_with(TestOptions {
        assign_worker: false,
        ..TestOptions::default()
    })
    .await;
    let org = app.create_org(Tier::Standard).await;
    let file = |name: &str, contents: &str| {
        let path = std::env::temp_dir().join(format!("{}-{name}", uuid::Uuid::new_v4().simple()));
        std::fs::write(&path, contents).expect("write");
        path
    };
    let users = file(
        "users.csv",
        "email,name\nann@example.com,Ann\nbob@example.com,Bob\u{0}By\n",
    );
    let error = flowctl::admin::users(
        &app.core,
        flowctl::admin::UsersCommand::Import {
            org: org.id.to_string(),
            file: users,
        },
    )
    .await
    .expect_err("refused");
    assert!(
        error.to_string().contains("row 3: name must not contain"),
        "{error}"
    );
    for flow in [
        r#"{"name": "Privacy", "modules": [{"name": "GDPR\u0000"}]}"#.to_owned(),
        format!(
            r#"{{"name": "{}", "modules": [{{"name": "GDPR"}}]}}"#,
            "n".repeat(201)
        ),
        format!(
            r#"{{"name": "Privacy", "description": "{}", "modules": [{{"name": "GDPR"}}]}}"#,
            "d".repeat(2_001)
        ),
    ] {
        let error = flowctl::admin::flows(
            &app.core,
            flowctl::admin::FlowsCommand::Create {
                org: org.id.to_string(),
                file: file("flow.json", &flow),
            },
        )
        .await
        .expect_err("refused");
        assert!(error.to_string().contains("must"), "{error}");
    }
    assert_eq!(count(&app, "users").await, 0);
    assert_eq!(count(&app, "flows").await, 0);
}
