//! Exports end to end: API → `exports` row (and its `NOTIFY`) → report-worker → export store →
//! `GET /v1/exports/{id}`. Files are read back with independent readers (the `csv` crate,
//! `calamine`, `lopdf`) and compared with the inline report.

use std::collections::HashMap;
use std::io::Cursor;
use std::time::Duration;

use calamine::{Data, DataType, Reader, Xlsx};
use flow_common::db::orgs::Tier;
use flow_domain::ids::{ExportId, FlowId};
use flow_tests::reports::{
    Fixture, FixtureFlow, all_pages, create_flow, create_org_in_zone, download, export_file,
    insert_assignment, insert_many, insert_progress, insert_schedule, report_ok,
    report_worker_config, start_report_worker, wait_for_export,
};
use flow_tests::{TestApp, TestOptions, TestOrg};
use serde_json::{Value, json};

/// A flow with accented and formula-looking e-mails, module progress and a schedule, plus
/// `bulk` plain assignments (more than one batch of rows when large).
async fn export_fixture(app: &TestApp, bulk: i64) -> (TestOrg, FixtureFlow) {
    let org = create_org_in_zone(app, Tier::Enterprise, "UTC", Some(100_000)).await;
    let flow = create_flow(
        app,
        &org,
        "Sécurité de base",
        &["Mots de passe", "Hameçonnage", "=Formule"],
    )
    .await;
    let jose = insert_assignment(
        app,
        &org,
        &flow,
        &Fixture::new(
            "josé.müller@exemple.fr",
            "2025-02-01T09:00:00Z",
            "completed",
        )
        .started("2025-02-01T10:00:00Z")
        .completed("2025-02-03T10:00:00Z"),
    )
    .await;
    for (module, started, completed) in [
        (
            flow.modules[0],
            "2025-02-01T10:00:00Z",
            "2025-02-02T10:00:00Z",
        ),
        (
            flow.modules[1],
            "2025-02-02T10:00:00Z",
            "2025-02-03T09:00:00Z",
        ),
        (
            flow.modules[2],
            "2025-02-03T09:00:00Z",
            "2025-02-03T10:00:00Z",
        ),
    ] {
        insert_progress(app, jose, module, "completed", started, Some(completed)).await;
    }
    // Results (issue 38) on two of José's modules: a pass and a fail; the third has none.
    for (module, score, success, seconds) in [
        (flow.modules[0], 0.85, true, 3_600_i64),
        (flow.modules[1], -0.25, false, 45),
    ] {
        sqlx::query(
            "UPDATE module_progress SET score = $3, success = $4, duration_seconds = $5
             WHERE assignment_id = $1 AND module_id = $2",
        )
        .bind(jose)
        .bind(module)
        .bind(score)
        .bind(success)
        .bind(seconds)
        .execute(&app.db)
        .await
        .expect("module results");
    }
    let formula = insert_assignment(
        app,
        &org,
        &flow,
        &Fixture::new("=1+2@evil.example", "2025-02-02T09:00:00Z", "in_progress")
            .started("2025-02-02T09:30:00Z")
            .due("2099-01-01T00:00:00Z"),
    )
    .await;
    insert_progress(
        app,
        formula,
        flow.modules[1],
        "in_progress",
        "2025-02-02T09:30:00Z",
        None,
    )
    .await;
    insert_assignment(
        app,
        &org,
        &flow,
        &Fixture::new("-minus@example.com", "2025-02-03T09:00:00Z", "pending")
            .due("2025-03-01T00:00:00Z"),
    )
    .await;
    insert_assignment(
        app,
        &org,
        &flow,
        &Fixture::new("zoë@exemple.fr", "2025-02-04T09:00:00Z", "pending"),
    )
    .await;
    insert_schedule(
        app,
        &org,
        &flow,
        "zoë@exemple.fr",
        "2025-02-10T09:00:00Z",
        "monthly",
        None,
    )
    .await;
    if bulk > 0 {
        insert_many(app, &org, &flow, bulk, "2025-03-01T00:00:00Z", "bulk").await;
    }
    (org, flow)
}

/// The CSV cell the export writes for a value of the inline report.
fn csv_cell(value: &Value) -> String {
    match value {
        Value::Null => String::new(),
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

fn guarded(text: &str) -> String {
    match text.chars().next() {
        Some('=' | '+' | '-' | '@' | '\t' | '\r') => format!("'{text}"),
        _ => text.to_owned(),
    }
}

#[tokio::test]
async fn csv_export_parses_back_to_the_report_rows() {
    let app = TestApp::spawn().await;
    let _worker = start_report_worker(&app);
    let (org, flow) = export_fixture(&app, 4_500).await;
    let request = json!({ "flowId": flow.id.to_string(), "detailed": true, "format": "csv" });
    let (response, file) = export_file(&app, &org, request).await;
    assert_eq!(file.header("content-type"), Some("text/csv; charset=utf-8"));
    let disposition = file.header("content-disposition").unwrap();
    assert!(
        disposition.starts_with("attachment; filename=\"s-curit-de-base-report-")
            && disposition.ends_with(".csv\""),
        "{disposition}"
    );
    assert_eq!(
        file.header("content-length"),
        Some(file.body.len().to_string().as_str())
    );
    let text = String::from_utf8(file.body.clone()).expect("UTF-8");
    assert!(text.contains("\r\n"), "RFC 4180 line ends are CRLF");
    assert!(!text.replace("\r\n", "").contains('\n'));

    let mut reader = csv::ReaderBuilder::new().from_reader(file.body.as_slice());
    let headers: Vec<String> = reader
        .headers()
        .unwrap()
        .iter()
        .map(str::to_owned)
        .collect();
    assert_eq!(
        headers[..10],
        [
            "assignmentId",
            "assigneeEmail",
            "assignedAt",
            "status",
            "completedModules",
            "totalModules",
            "dueDate",
            "startedAt",
            "completedAt",
            "priority"
        ]
    );
    assert_eq!(headers[10], "module 1 (Mots de passe) status");
    assert_eq!(headers[14], "module 2 (Hameçonnage) startedAt");
    // The results come after every earlier column, so those keep their places.
    assert_eq!(headers[19], "module 1 (Mots de passe) score");
    assert_eq!(headers[20], "module 1 (Mots de passe) success");
    assert_eq!(headers[24], "module 2 (Hameçonnage) durationSeconds");
    assert_eq!(headers.len(), 10 + 3 * 3 + 3 * 3);
    let records: Vec<csv::StringRecord> = reader.records().map(Result::unwrap).collect();

    let expected = all_pages(
        &app,
        &org,
        json!({ "flowId": flow.id.to_string(), "detailed": true }),
        10_000,
    )
    .await;
    assert_eq!(records.len(), 4_504);
    assert_eq!(records.len(), expected.len());
    assert_eq!(
        response["metrics"]["totalAssignments"],
        json!(4_504),
        "the export response carries the normal report"
    );
    let modules: Vec<String> = flow.modules.iter().map(ToString::to_string).collect();
    for (record, row) in records.iter().zip(&expected) {
        let mut cells: Vec<String> = [
            "assignmentId",
            "assigneeEmail",
            "assignedAt",
            "status",
            "completedModules",
            "totalModules",
            "dueDate",
            "startedAt",
            "completedAt",
            "priority",
        ]
        .iter()
        .map(|field| csv_cell(&row[field]))
        .collect();
        cells[1] = guarded(&cells[1]);
        let progress: HashMap<&str, &Value> = row["moduleProgress"]
            .as_array()
            .unwrap()
            .iter()
            .map(|module| (module["moduleId"].as_str().unwrap(), module))
            .collect();
        for module in &modules {
            match progress.get(module.as_str()) {
                Some(entry) => {
                    cells.push(csv_cell(&entry["status"]));
                    cells.push(csv_cell(&entry["startedAt"]));
                    cells.push(csv_cell(&entry["completedAt"]));
                }
                None => cells.extend([String::new(), String::new(), String::new()]),
            }
        }
        for module in &modules {
            match progress.get(module.as_str()) {
                Some(entry) => {
                    cells.push(csv_cell(&entry["score"]));
                    cells.push(csv_cell(&entry["success"]));
                    cells.push(csv_cell(&entry["durationSeconds"]));
                }
                None => cells.extend([String::new(), String::new(), String::new()]),
            }
        }
        let record: Vec<&str> = record.iter().collect();
        assert_eq!(record, cells, "row {}", row["assignmentId"]);
    }
    // Spot checks of what the comparison relies on.
    assert_eq!(&records[0][1], "josé.müller@exemple.fr");
    assert_eq!(&records[0][10], "completed");
    assert_eq!(
        (&records[0][19], &records[0][20], &records[0][21]),
        ("0.85", "true", "3600")
    );
    assert_eq!(
        (&records[0][22], &records[0][23], &records[0][24]),
        ("-0.25", "false", "45")
    );
    assert_eq!((&records[0][25], &records[0][26]), ("", ""));
    assert_eq!(&records[1][1], "'=1+2@evil.example");
    assert_eq!(&records[1][13], "in_progress");
    assert_eq!(&records[2][1], "'-minus@example.com");
    assert_eq!(&records[2][3], "overdue");
}

#[tokio::test]
async fn csv_export_honours_the_range_and_status_filter() {
    let app = TestApp::spawn().await;
    let _worker = start_report_worker(&app);
    let (org, flow) = export_fixture(&app, 30).await;
    let (_, file) = export_file(
        &app,
        &org,
        json!({ "flowId": flow.id.to_string(), "startDate": "2025-02-02", "endDate": "2025-03-01",
                "status": "overdue", "format": "csv" }),
    )
    .await;
    let mut reader = csv::Reader::from_reader(file.body.as_slice());
    assert_eq!(
        reader.headers().unwrap().len(),
        10,
        "not detailed: no module columns"
    );
    let records: Vec<csv::StringRecord> = reader.records().map(Result::unwrap).collect();
    assert_eq!(records.len(), 1);
    assert_eq!(&records[0][1], "'-minus@example.com");
}

/// An export without module details counts each assignment's completed modules in one grouped
/// join over the scope (a page counts them row by row), and from `EXPORT_SPLIT_ROWS` rows on is
/// read as two halves of assigned time on two connections: the file has the rows, order and
/// counts of the report pages all the same.
#[tokio::test]
async fn csv_export_without_details_read_in_two_halves_has_the_pages_rows() {
    let app = TestApp::spawn().await;
    let mut config = report_worker_config(&app);
    config.split_rows = 1;
    let _worker = flow_tests::WorkerHandle::spawn(move |shutdown| {
        flow_workers::runtime::run(config, shutdown)
    });
    let (org, flow) = export_fixture(&app, 4_500).await;
    let lower = chrono::DateTime::parse_from_rfc3339("2025-01-01T00:00:00Z")
        .unwrap()
        .to_utc();
    let scope = flow_common::db::reports::Scope {
        flow_id: flow.id,
        lower,
        upper: lower + chrono::Duration::days(3_650),
        now: chrono::Utc::now(),
        status: None,
        include_cancelled: false,
    };
    let split = flow_common::db::reports::midpoint(&app.db, &scope)
        .await
        .unwrap()
        .expect("a midpoint");
    let request = json!({ "flowId": flow.id.to_string(), "startDate": "2025-01-01" });
    let mut export = request.clone();
    export["format"] = json!("csv");
    let (_, file) = export_file(&app, &org, export).await;
    let mut reader = csv::Reader::from_reader(file.body.as_slice());
    let fields = ["assignmentId", "assignedAt", "status", "completedModules"];
    let columns = [0, 2, 3, 4];
    let exported: Vec<Vec<String>> = reader
        .records()
        .map(Result::unwrap)
        .map(|record| columns.iter().map(|&i| record[i].to_owned()).collect())
        .collect();
    let expected: Vec<Vec<String>> = all_pages(&app, &org, request, 1_000)
        .await
        .iter()
        .map(|row| fields.iter().map(|field| csv_cell(&row[field])).collect())
        .collect();
    assert_eq!(exported.len(), 4_504);
    assert_eq!(exported, expected);
    let before = exported
        .iter()
        .filter(|row| {
            row[1].as_str()
                < split
                    .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
                    .as_str()
        })
        .count();
    assert!(
        (1_000..3_500).contains(&before),
        "the halves split near the middle: {before} rows before {split}"
    );
    assert!(
        exported.iter().any(|row| row[3].as_str() > "0"),
        "the fixture has completed modules"
    );
}

fn cell(range: &calamine::Range<Data>, row: usize, column: usize) -> &Data {
    range.get((row, column)).unwrap_or(&Data::Empty)
}

#[tokio::test]
async fn excel_export_has_every_sheet_and_typed_cells() {
    let app = TestApp::spawn().await;
    let _worker = start_report_worker(&app);
    let (org, flow) = export_fixture(&app, 2_500).await;
    let request = json!({ "flowId": flow.id.to_string(), "detailed": true, "format": "excel",
                          "aggregate": { "by": "month" } });
    let (response, file) = export_file(&app, &org, request).await;
    assert_eq!(
        file.header("content-type"),
        Some("application/vnd.openxmlformats-officedocument.spreadsheetml.sheet")
    );
    assert!(
        file.header("content-disposition")
            .unwrap()
            .ends_with(".xlsx\"")
    );
    let mut workbook: Xlsx<_> =
        calamine::open_workbook_from_rs(Cursor::new(file.body.clone())).expect("a valid XLSX");
    assert_eq!(
        workbook.sheet_names(),
        vec![
            "Summary",
            "Assignments",
            "Module progress",
            "Aggregates",
            "Schedules"
        ]
    );
    let expected = all_pages(
        &app,
        &org,
        json!({ "flowId": flow.id.to_string(), "detailed": true }),
        10_000,
    )
    .await;

    let assignments = workbook.worksheet_range("Assignments").unwrap();
    assert_eq!(assignments.height(), expected.len() + 1);
    assert_eq!(
        cell(&assignments, 0, 0),
        &Data::String("Assignment ID".into())
    );
    for (index, row) in expected.iter().enumerate() {
        let line = index + 1;
        assert_eq!(
            cell(&assignments, line, 0),
            &Data::String(row["assignmentId"].as_str().unwrap().into())
        );
        assert_eq!(
            cell(&assignments, line, 1),
            &Data::String(row["assigneeEmail"].as_str().unwrap().into())
        );
        let assigned = cell(&assignments, line, 2);
        assert!(assigned.is_datetime(), "assignedAt is a date: {assigned:?}");
        let expected_at = chrono::DateTime::parse_from_rfc3339(row["assignedAt"].as_str().unwrap())
            .unwrap()
            .naive_utc();
        let read_at = assigned.as_datetime().unwrap();
        assert!(
            (read_at - expected_at).num_milliseconds().abs() < 2,
            "{read_at} vs {expected_at}"
        );
        assert_eq!(
            cell(&assignments, line, 3),
            &Data::String(row["status"].as_str().unwrap().into())
        );
        assert_eq!(
            cell(&assignments, line, 4),
            &Data::Float(row["completedModules"].as_f64().unwrap())
        );
        assert_eq!(cell(&assignments, line, 5), &Data::Float(3.0));
        if row["completedAt"].is_null() {
            assert_eq!(cell(&assignments, line, 8), &Data::Empty);
        } else {
            assert!(cell(&assignments, line, 8).is_datetime());
        }
    }

    let progress = workbook.worksheet_range("Module progress").unwrap();
    let progress_rows: usize = expected
        .iter()
        .map(|row| row["moduleProgress"].as_array().unwrap().len())
        .sum();
    assert_eq!(progress_rows, 4);
    assert_eq!(progress.height(), progress_rows + 1);
    assert_eq!(cell(&progress, 1, 4), &Data::String("Mots de passe".into()));
    assert_eq!(cell(&progress, 1, 2), &Data::Float(1.0));
    assert!(cell(&progress, 1, 6).is_datetime());
    assert_eq!(
        cell(&progress, 4, 1),
        &Data::String("=1+2@evil.example".into())
    );
    assert_eq!(cell(&progress, 4, 5), &Data::String("in_progress".into()));
    // Each module's result: score, passed, time spent; empty when none was reported.
    assert_eq!(
        cell(&progress, 0, 8),
        &Data::String("Score (-1 to 1)".into())
    );
    assert_eq!(cell(&progress, 1, 8), &Data::Float(0.85));
    assert_eq!(cell(&progress, 1, 9), &Data::Bool(true));
    assert_eq!(cell(&progress, 1, 10), &Data::Float(3_600.0));
    assert_eq!(cell(&progress, 2, 8), &Data::Float(-0.25));
    assert_eq!(cell(&progress, 2, 9), &Data::Bool(false));
    assert_eq!(cell(&progress, 3, 8), &Data::Empty);
    assert_eq!(cell(&progress, 3, 10), &Data::Empty);

    let aggregates = workbook.worksheet_range("Aggregates").unwrap();
    let periods = response["aggregates"].as_array().unwrap();
    assert_eq!(periods.len(), 2, "February and March 2025");
    assert_eq!(aggregates.height(), periods.len() + 1);
    for (index, period) in periods.iter().enumerate() {
        assert_eq!(
            cell(&aggregates, index + 1, 0),
            &Data::String(period["period"].as_str().unwrap().into())
        );
        assert!(cell(&aggregates, index + 1, 1).is_datetime());
        assert_eq!(
            cell(&aggregates, index + 1, 3),
            &Data::Float(period["totalAssignments"].as_f64().unwrap())
        );
    }

    let schedules = workbook.worksheet_range("Schedules").unwrap();
    assert_eq!(schedules.height(), 2);
    assert_eq!(
        cell(&schedules, 1, 1),
        &Data::String("zoë@exemple.fr".into())
    );
    assert!(cell(&schedules, 1, 2).is_datetime());

    let summary = workbook.worksheet_range("Summary").unwrap();
    let values: HashMap<String, Data> = summary
        .rows()
        .filter_map(|row| match (row.first(), row.get(1)) {
            (Some(Data::String(label)), Some(value)) => Some((label.clone(), value.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(values["Flow"], Data::String("Sécurité de base".into()));
    assert_eq!(values["Total assignments"], Data::Float(2_504.0));
    assert_eq!(values["Completed"], Data::Float(1.0));
    assert!(values["Generated at (UTC)"].is_datetime());
}

#[tokio::test]
async fn pdf_export_is_a_paginated_readable_report() {
    let app = TestApp::spawn().await;
    let _worker = start_report_worker(&app);
    let (org, flow) = export_fixture(&app, 5_200).await;
    let (_, file) = export_file(
        &app,
        &org,
        json!({ "flowId": flow.id.to_string(), "format": "pdf" }),
    )
    .await;
    assert_eq!(file.header("content-type"), Some("application/pdf"));
    assert!(file.body.starts_with(b"%PDF-"));
    let document = lopdf::Document::load_mem(&file.body).expect("a valid PDF");
    let pages = document.get_pages();
    // 5,000 table rows at most ~60 a page, after the summary page.
    assert!(pages.len() >= 80, "{} pages", pages.len());
    let first = document.extract_text(&[1]).expect("text of page 1");
    for expected in [
        "Flow report",
        "Sécurité de base",
        "Total assignments",
        "5204",
        "Completion rate",
        "0.0 %",
        "Completion by",
    ] {
        assert!(
            first.contains(expected),
            "page 1 lacks {expected:?}:\n{first}"
        );
    }
    let second = document.extract_text(&[2]).expect("text of page 2");
    assert!(
        second.contains("Showing the first 5000 of 5204 assignments")
            && second.contains("CSV and Excel"),
        "{second}"
    );
    assert!(second.contains("josé.müller@exemple.fr"), "{second}");
    let last_page = u32::try_from(pages.len()).unwrap();
    let last = document
        .extract_text(&[last_page])
        .expect("text of the last page");
    assert!(
        last.contains("5000"),
        "the table ends at row 5,000:\n{last}"
    );
    assert!(last.contains(&format!("page {last_page} of {last_page}")));
    // The font is embedded (a subset of DejaVu Sans).
    let embedded = document.objects.values().any(|object| {
        object
            .as_dict()
            .ok()
            .and_then(|dict| dict.get(b"FontName").ok())
            .and_then(|name| name.as_name().ok())
            .is_some_and(|name| String::from_utf8_lossy(name).contains("DejaVuSans"))
    }) && document.objects.values().any(|object| {
        object
            .as_dict()
            .is_ok_and(|dict| dict.has(b"FontFile2") || dict.has(b"FontFile3"))
    });
    assert!(embedded, "DejaVu Sans is embedded");
}

#[tokio::test]
async fn a_detailed_pdf_export_lists_each_modules_results() {
    let app = TestApp::spawn().await;
    let _worker = start_report_worker(&app);
    let (org, flow) = export_fixture(&app, 0).await;
    let (_, file) = export_file(
        &app,
        &org,
        json!({ "flowId": flow.id.to_string(), "format": "pdf", "detailed": true }),
    )
    .await;
    let document = lopdf::Document::load_mem(&file.body).expect("a valid PDF");
    let pages: Vec<u32> = document.get_pages().keys().copied().collect();
    let text = document.extract_text(&pages).expect("text");
    let section = text
        .split("Module results")
        .nth(1)
        .unwrap_or_else(|| panic!("no module results:\n{text}"));
    // Module 1: José's pass (0.85, an hour); module 2: José's fail (-0.25, 45 s) and the
    // in-progress start of the second assignment; module 3: completed without a result.
    for expected in [
        "Mots de passe",
        "0.85",
        "1 hour",
        "Hameçonnage",
        "-0.25",
        "45 seconds",
        "=Formule",
    ] {
        assert!(
            section.contains(expected),
            "module results lack {expected:?}:\n{section}"
        );
    }
}

#[tokio::test]
async fn export_lifecycle_is_pending_ready_downloaded_then_gone() {
    let app = TestApp::spawn().await;
    let (org, flow) = export_fixture(&app, 0).await;
    let other = create_org_in_zone(&app, Tier::Standard, "UTC", Some(1_000)).await;
    let requested_at = chrono::Utc::now();
    let response = report_ok(
        &app,
        &org,
        json!({ "flowId": flow.id.to_string(), "format": "csv", "limit": 2 }),
    )
    .await;
    // The normal report (first page) plus the export result.
    assert_eq!(response["assignments"].as_array().unwrap().len(), 2);
    assert!(response["nextCursor"].is_string());
    assert_eq!(response["metrics"]["totalAssignments"], json!(4));
    let export_id = response["exportId"].as_str().unwrap().to_owned();
    assert!(ExportId::parse(&export_id).is_some());
    let url = response["downloadUrl"].as_str().unwrap().to_owned();
    assert_eq!(url, format!("{}/v1/exports/{export_id}", app.base_url));
    assert_eq!(response["exportStatus"], json!("pending"));
    let expires_at =
        chrono::DateTime::parse_from_rfc3339(response["expiresAt"].as_str().unwrap()).unwrap();
    let validity = expires_at.with_timezone(&chrono::Utc) - requested_at;
    assert!(
        (validity - chrono::Duration::hours(24)).num_seconds().abs() <= 5,
        "{validity}"
    );

    // No worker yet: 202 with progress and Retry-After.
    let pending = download(&app, Some(&org.key), &url).await;
    assert_eq!(pending.status, 202);
    assert_eq!(pending.header("retry-after"), Some("2"));
    let state = pending.json();
    assert_eq!(state["status"], json!("pending"));
    assert_eq!(state["progress"], json!(0.0));
    assert_eq!(state["exportId"], json!(export_id));

    // Another organization's key, unknown and malformed ids: 404; no key: 401.
    let path = format!("/v1/exports/{export_id}");
    assert_eq!(download(&app, Some(&other.key), &path).await.status, 404);
    let unknown = download(
        &app,
        Some(&org.key),
        &format!("/v1/exports/{}", ExportId::new()),
    )
    .await;
    assert_eq!(unknown.status, 404);
    assert_eq!(unknown.json()["error"], json!("not_found"));
    assert_eq!(
        download(&app, Some(&org.key), "/v1/exports/exp_nope")
            .await
            .status,
        404
    );
    assert_eq!(download(&app, None, &path).await.status, 401);

    let worker = start_report_worker(&app);
    let ready = wait_for_export(&app, &org, &url).await;
    assert_eq!(ready.status, 200);
    let rows = csv::Reader::from_reader(ready.body.as_slice())
        .records()
        .count();
    assert_eq!(rows, 4, "the file holds every row, not the first page");
    let again = download(&app, Some(&org.key), &path).await;
    assert_eq!(again.status, 200);
    assert_eq!(again.body, ready.body, "downloadable until it expires");
    assert_eq!(download(&app, Some(&other.key), &path).await.status, 404);
    let (status, written, total): (String, i64, Option<i64>) =
        sqlx::query_as("SELECT status, rows_written, rows_total FROM exports WHERE id = $1")
            .bind(ExportId::parse(&export_id).unwrap())
            .fetch_one(&app.db)
            .await
            .unwrap();
    assert_eq!((status.as_str(), written, total), ("ready", 4, Some(4)));
    worker.stop().unwrap();

    // Past its expiry: 410, and the sweep purges the file.
    let object_key: String = sqlx::query_scalar(
        "UPDATE exports SET expires_at = now() - interval '1 second' WHERE id = $1
         RETURNING object_key",
    )
    .bind(ExportId::parse(&export_id).unwrap())
    .fetch_one(&app.db)
    .await
    .unwrap();
    let gone = download(&app, Some(&org.key), &path).await;
    assert_eq!(gone.status, 410);
    assert_eq!(gone.json()["error"], json!("gone"));
    let file_path =
        std::path::Path::new(&flow_common::export_store::default_export_dir()).join(&object_key);
    assert!(file_path.exists(), "{file_path:?}");
    flow_workers::report::sweep_once(&report_worker_config(&app))
        .await
        .unwrap();
    assert!(!file_path.exists(), "expired files are purged");
    let status: String = sqlx::query_scalar("SELECT status FROM exports WHERE id = $1")
        .bind(ExportId::parse(&export_id).unwrap())
        .fetch_one(&app.db)
        .await
        .unwrap();
    assert_eq!(status, "expired");
    assert_eq!(download(&app, Some(&org.key), &path).await.status, 410);
    assert_eq!(download(&app, Some(&other.key), &path).await.status, 404);
}

#[tokio::test]
async fn a_failed_export_says_why() {
    let app = TestApp::spawn().await;
    let (org, flow) = export_fixture(&app, 0).await;
    let response = report_ok(
        &app,
        &org,
        json!({ "flowId": flow.id.to_string(), "format": "pdf" }),
    )
    .await;
    let export_id = ExportId::parse(response["exportId"].as_str().unwrap()).unwrap();
    // The flow it reports on disappears before a worker gets to it.
    sqlx::query(
        "UPDATE exports SET parameters = jsonb_set(parameters, '{flowId}', to_jsonb($2::text))
         WHERE id = $1",
    )
    .bind(export_id)
    .bind(FlowId::new().to_string())
    .execute(&app.db)
    .await
    .unwrap();
    let _worker = start_report_worker(&app);
    let failed = wait_for_export(&app, &org, response["downloadUrl"].as_str().unwrap()).await;
    assert_eq!(failed.status, 500);
    let body = failed.json();
    assert_eq!(body["error"], json!("internal_error"));
    let message = body["message"].as_str().unwrap();
    assert!(
        message.contains("failed: the flow no longer exists")
            && message.contains("request a new export"),
        "{message}"
    );
}

#[tokio::test]
async fn an_export_is_generated_by_one_worker_at_a_time() {
    let app = TestApp::spawn().await;
    let (org, flow) = export_fixture(&app, 300).await;
    // An export whose worker is alive (its lease is current) is left alone...
    let response = report_ok(
        &app,
        &org,
        json!({ "flowId": flow.id.to_string(), "format": "csv" }),
    )
    .await;
    let held = ExportId::parse(response["exportId"].as_str().unwrap()).unwrap();
    sqlx::query(
        "UPDATE exports SET status = 'running', worker_id = 'another-worker', attempts = 1,
                lease_until = now() + interval '1 hour'
         WHERE id = $1",
    )
    .bind(held)
    .execute(&app.db)
    .await
    .unwrap();
    let mut others = Vec::new();
    for format in ["csv", "excel", "pdf", "csv", "excel", "pdf"] {
        let response = report_ok(
            &app,
            &org,
            json!({ "flowId": flow.id.to_string(), "format": format, "detailed": true }),
        )
        .await;
        others.push(response["downloadUrl"].as_str().unwrap().to_owned());
    }
    let _first = start_report_worker(&app);
    let _second = start_report_worker(&app);
    for url in &others {
        assert_eq!(wait_for_export(&app, &org, url).await.status, 200);
    }
    let (status, worker): (String, String) =
        sqlx::query_as("SELECT status, worker_id FROM exports WHERE id = $1")
            .bind(held)
            .fetch_one(&app.db)
            .await
            .unwrap();
    assert_eq!(
        (status.as_str(), worker.as_str()),
        ("running", "another-worker"),
        "not taken over while its lease is current"
    );
    // ...until its worker stops renewing the lease (it died): then another takes it over.
    sqlx::query("UPDATE exports SET lease_until = now() - interval '1 second' WHERE id = $1")
        .bind(held)
        .execute(&app.db)
        .await
        .unwrap();
    let ready = wait_for_export(&app, &org, response["downloadUrl"].as_str().unwrap()).await;
    assert_eq!(ready.status, 200);
    let attempts: Vec<(ExportId, i32, String)> =
        sqlx::query_as("SELECT id, attempts, worker_id FROM exports ORDER BY created_at")
            .fetch_all(&app.db)
            .await
            .unwrap();
    for (id, count, worker) in &attempts {
        let expected = if *id == held { 2 } else { 1 };
        assert_eq!(*count, expected, "export {id} claims");
        assert!(worker.starts_with("report-worker-"), "{worker}");
    }
}

/// Reads an export's row: status, claims and the worker holding (or that last held) it.
async fn export_row(app: &TestApp, id: ExportId) -> (String, i32, Option<String>) {
    sqlx::query_as("SELECT status, attempts, worker_id FROM exports WHERE id = $1")
        .bind(id)
        .fetch_one(&app.db)
        .await
        .unwrap()
}

#[tokio::test]
async fn exports_need_no_broker_and_wait_for_a_worker_to_start() {
    let proxy = flow_tests::proxy::Proxy::start("127.0.0.1:5672".parse().unwrap()).await;
    let app = TestApp::spawn_with(TestOptions {
        api_amqp_url: Some(format!("amqp://guest:guest@{}/%2f", proxy.address)),
        ..TestOptions::default()
    })
    .await;
    let (org, flow) = export_fixture(&app, 0).await;
    // The API cannot reach RabbitMQ and no report-worker runs: the export is still accepted,
    // since writing its row is the request's one commit point.
    proxy.disable().await;
    let response = report_ok(
        &app,
        &org,
        json!({ "flowId": flow.id.to_string(), "format": "excel" }),
    )
    .await;
    assert_eq!(response["exportStatus"], json!("pending"));
    let first = ExportId::parse(response["exportId"].as_str().unwrap()).unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(export_row(&app, first).await, ("pending".into(), 0, None));
    // A worker that only polls once an hour: it claims what waits when it starts...
    let mut config = report_worker_config(&app);
    config.poll_interval_ms = 3_600_000;
    let worker = flow_tests::WorkerHandle::spawn(move |shutdown| {
        flow_workers::runtime::run(config, shutdown)
    });
    let file = wait_for_export(&app, &org, response["downloadUrl"].as_str().unwrap()).await;
    assert_eq!(file.status, 200);
    // ...and is woken by the notification of the next one, long before it would poll.
    let next = report_ok(
        &app,
        &org,
        json!({ "flowId": flow.id.to_string(), "format": "csv" }),
    )
    .await;
    let file = wait_for_export(&app, &org, next["downloadUrl"].as_str().unwrap()).await;
    assert_eq!(file.status, 200);
    assert_eq!(
        csv::Reader::from_reader(file.body.as_slice())
            .records()
            .count(),
        4
    );
    worker.stop().unwrap();
}

#[tokio::test]
async fn an_export_whose_worker_is_killed_is_taken_over_once_the_lease_lapses() {
    let app = TestApp::spawn().await;
    let (org, flow) = export_fixture(&app, 50).await;
    let response = report_ok(
        &app,
        &org,
        json!({ "flowId": flow.id.to_string(), "format": "csv" }),
    )
    .await;
    let id = ExportId::parse(response["exportId"].as_str().unwrap()).unwrap();
    // Hold the export mid-way: the worker's snapshot reads the schedules, which this
    // transaction keeps locked until the worker is dead.
    let mut lock = app.db.begin().await.unwrap();
    sqlx::query("LOCK TABLE schedules IN ACCESS EXCLUSIVE MODE")
        .execute(&mut *lock)
        .await
        .unwrap();
    let mut config = report_worker_config(&app);
    config.lease_seconds = 5;
    let doomed = flow_tests::WorkerHandle::spawn(move |shutdown| {
        flow_workers::runtime::run(config, shutdown)
    });
    let first_worker = app
        .eventually(
            Duration::from_secs(20),
            "the export to be claimed",
            || async {
                match export_row(&app, id).await {
                    (status, _, Some(worker)) if status == "running" => Some(worker),
                    _ => None,
                }
            },
        )
        .await;
    // Blocked on the lock for longer than a heartbeat: the claim stays the worker's.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (status, _, holder) = export_row(&app, id).await;
    assert_eq!(
        (status.as_str(), holder),
        ("running", Some(first_worker.clone()))
    );
    doomed.kill();
    lock.rollback().await.unwrap();
    // Nobody renews the lease any more; once it lapses, another worker takes the export over.
    let _survivor = start_report_worker(&app);
    let file = wait_for_export(&app, &org, response["downloadUrl"].as_str().unwrap()).await;
    assert_eq!(file.status, 200);
    assert_eq!(
        csv::Reader::from_reader(file.body.as_slice())
            .records()
            .count(),
        54
    );
    let (status, attempts, worker) = export_row(&app, id).await;
    assert_eq!(status, "ready");
    assert!(
        attempts >= 2,
        "claimed again after the kill ({attempts} claims)"
    );
    assert_ne!(worker, Some(first_worker), "finished by the other worker");
}

#[tokio::test]
async fn inline_and_exported_metrics_are_the_same_figures() {
    let app = TestApp::spawn().await;
    let _worker = start_report_worker(&app);
    let (org, flow) = export_fixture(&app, 40).await;
    // Completions in several months and of uneven lengths, so an aggregated report's periods
    // each hold part of the average completion time.
    for (index, (assigned, completed)) in [
        ("2025-01-05T08:00:00Z", "2025-01-05T08:00:01Z"),
        ("2025-01-20T08:00:00Z", "2025-02-11T17:31:07Z"),
        ("2025-03-03T00:00:00Z", "2025-03-03T00:00:02Z"),
        ("2025-04-30T23:59:59Z", "2025-05-01T00:00:00Z"),
    ]
    .into_iter()
    .enumerate()
    {
        insert_assignment(
            &app,
            &org,
            &flow,
            &Fixture::new(&format!("done-{index}@example.com"), assigned, "completed")
                .started(assigned)
                .completed(completed),
        )
        .await;
    }
    for request in [
        json!({ "flowId": flow.id.to_string(), "format": "excel" }),
        json!({ "flowId": flow.id.to_string(), "format": "excel", "status": "completed",
                "aggregate": { "by": "month" } }),
        json!({ "flowId": flow.id.to_string(), "format": "excel", "startDate": "2025-01-10",
                "endDate": "2025-04-01", "timezone": "America/New_York",
                "aggregate": { "by": "week", "metrics": ["completion_rate"] } }),
    ] {
        let (response, file) = export_file(&app, &org, request.clone()).await;
        let mut workbook: Xlsx<_> =
            calamine::open_workbook_from_rs(Cursor::new(file.body)).expect("a valid XLSX");
        let summary = workbook.worksheet_range("Summary").unwrap();
        let exported: HashMap<String, Data> = summary
            .rows()
            .filter_map(|row| match (row.first(), row.get(1)) {
                (Some(Data::String(label)), Some(value)) => Some((label.clone(), value.clone())),
                _ => None,
            })
            .collect();
        let inline = &response["metrics"];
        for (label, field) in [
            ("Total assignments", "totalAssignments"),
            ("Completed", "completedAssignments"),
            ("Completion rate (%)", "completionRate"),
            ("In progress", "inProgressAssignments"),
            ("Pending", "pendingAssignments"),
            ("Overdue", "overdueAssignments"),
            ("Average completion (seconds)", "averageCompletionSeconds"),
        ] {
            assert_eq!(
                exported[label],
                Data::Float(inline[field].as_f64().unwrap()),
                "{label} of {request}: inline {inline}"
            );
        }
        assert_eq!(
            exported["Average completion time"],
            Data::String(inline["averageCompletionTime"].as_str().unwrap().into()),
            "{request}"
        );
        if request["aggregate"]["metrics"] == json!(["completion_rate"]) {
            // The weekly rate, period by period: a week without assignments has no rate (an
            // empty cell, as the API's null), not 0 %.
            let aggregates = workbook.worksheet_range("Aggregates").unwrap();
            let periods = response["aggregates"].as_array().unwrap();
            assert!(
                periods
                    .iter()
                    .any(|period| period["completionRate"].is_null())
                    && periods
                        .iter()
                        .any(|period| period["completionRate"].is_f64()),
                "the range holds empty weeks and others: {periods:?}"
            );
            for (index, period) in periods.iter().enumerate() {
                let expected = match period["completionRate"].as_f64() {
                    Some(rate) => Data::Float(rate),
                    None => Data::Empty,
                };
                assert_eq!(cell(&aggregates, index + 1, 4), &expected, "{period}");
            }
        }
    }
}

/// Reads `text` from Postgres as the domain enum `T`, as every row decode does.
async fn read_as<T>(db: &sqlx::PgPool, text: &str) -> Result<T, sqlx::Error>
where
    T: for<'r> sqlx::Decode<'r, sqlx::Postgres> + sqlx::Type<sqlx::Postgres> + Send + Unpin,
{
    sqlx::query_scalar::<_, T>("SELECT $1::text")
        .bind(text)
        .fetch_one(db)
        .await
}

/// Every name of `T` reads back as itself, and one this build does not know is a decoding error
/// naming the enum and the value.
async fn assert_loud<T>(db: &sqlx::PgPool, values: &[T], unknown: &str)
where
    T: for<'r> sqlx::Decode<'r, sqlx::Postgres>
        + sqlx::Type<sqlx::Postgres>
        + Send
        + Unpin
        + std::fmt::Display
        + std::fmt::Debug
        + PartialEq,
{
    for value in values {
        assert_eq!(&read_as::<T>(db, &value.to_string()).await.unwrap(), value);
    }
    let error = read_as::<T>(db, unknown).await.unwrap_err();
    assert!(
        error
            .to_string()
            .contains(&format!("{unknown:?} in the database")),
        "{error}"
    );
}

#[tokio::test]
async fn unknown_enum_names_in_the_database_fail_the_read_instead_of_defaulting() {
    use flow_domain::events::EventType;
    use flow_domain::report::{ExportFormat, ExportKind, ExportStatus};
    use flow_domain::webhook::DeliveryStatus;
    use flow_domain::{AssignmentStatus, Role};

    let app = TestApp::spawn().await;
    assert_loud(&app.db, ExportStatus::ALL, "archived").await;
    assert_loud(&app.db, ExportFormat::ALL, "ods").await;
    assert_loud(&app.db, ExportKind::ALL, "audit").await;
    assert_loud(&app.db, Tier::ALL, "platinum").await;
    assert_loud(&app.db, Role::ALL, "owner").await;
    assert_loud(&app.db, AssignmentStatus::ALL, "paused").await;
    assert_loud(&app.db, DeliveryStatus::ALL, "bounced").await;
    assert_loud(&app.db, EventType::ALL, "flow.deleted").await;

    // A whole export row whose status or format a newer build wrote: the API answers 500 (and
    // logs why), not `pending` and not a CSV file.
    let org = create_org_in_zone(&app, Tier::Enterprise, "UTC", None).await;
    let flow = create_flow(&app, &org, "Loud enums", &["Only"]).await;
    let response = report_ok(
        &app,
        &org,
        json!({"flowId": flow.id.to_string(), "format": "csv"}),
    )
    .await;
    let export_id = response["exportId"].as_str().expect("exportId").to_owned();
    let path = format!("/v1/exports/{export_id}");
    assert_eq!(download(&app, Some(&org.key), &path).await.status, 202);
    // The constraints stand in for an older schema; this test's database is its own.
    sqlx::query(
        "ALTER TABLE exports DROP CONSTRAINT exports_status_check,
                             DROP CONSTRAINT exports_format_check",
    )
    .execute(&app.db)
    .await
    .unwrap();
    let id = ExportId::parse(&export_id).unwrap();
    for (status, format) in [("archived", "csv"), ("pending", "ods")] {
        sqlx::query("UPDATE exports SET status = $2, format = $3 WHERE id = $1")
            .bind(id)
            .bind(status)
            .bind(format)
            .execute(&app.db)
            .await
            .unwrap();
        let read = flow_common::db::exports::get(&app.db, org.id, id).await;
        assert!(read.is_err(), "{status} {format} was read as {read:?}");
        let answer = download(&app, Some(&org.key), &path).await;
        assert_eq!(answer.status, 500, "{status} {format}");
    }
}
