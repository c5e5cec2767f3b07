//! A flow required of an enrollment rule's audience (issue 39, design §18; docs/compliance.md
//! "Required of a rule's audience"): `requiredForRuleId` on create and `PATCH /v1/flows/{id}`
//! (validated, audited, a refused edit changing nothing), the compliance report judging people
//! outside the audience `not_required` and counting them nowhere (a hand-computed fixture: the
//! rule's matches recorded by the real evaluation on user writes, the assignments written
//! straight into the table), the CSV export carrying the same, a rule that a flow is required of
//! not deleted, and the dashboard's choice on the flow's page.

use chrono::{Duration, DurationRound, Utc};
use flow_common::db::orgs::Tier;
use flow_tests::dashboard::DashboardClient;
use flow_tests::enrollment::{create_rule, matched_by};
use std::io::Cursor;

use calamine::{Data, Reader, Xlsx};
use flow_tests::reports::{
    create_org_in_zone, csv_columns, start_report_worker, wait_for_export, write_assignment,
};
use flow_tests::{TestApp, TestOptions, TestOrg, TestResponse};
use serde_json::{Value, json};
use uuid::Uuid;

/// A rule matching the Sales department, assigning `onboarding` (another flow than the one
/// required of its audience); its id.
async fn sales_rule(app: &TestApp, org: &TestOrg, onboarding: &str) -> String {
    create_rule(
        app,
        org,
        json!({"name": "Sales", "condition": {"departmentEquals": "Sales"}, "flowId": onboarding}),
    )
    .await
}

/// Makes the people `(email, department)` and has the rules evaluated for them (the department
/// is what an identity provider writes; the upsert through the API is the change rules run on).
async fn people(app: &TestApp, org: &TestOrg, people: &[(&str, &str)]) -> Vec<Uuid> {
    let emails: Vec<&str> = people.iter().map(|(email, _)| *email).collect();
    app.create_users(org, &emails).await;
    let mut ids = Vec::new();
    for (email, department) in people {
        let id: Uuid = sqlx::query_scalar(
            "UPDATE users SET department = $3, created_at = now() - interval '400 days'
             WHERE org_id = $1 AND email_normalized = $2 RETURNING id",
        )
        .bind(org.id)
        .bind(email.to_lowercase())
        .bind(department)
        .fetch_one(&app.db)
        .await
        .expect("profile");
        ids.push(id);
    }
    app.create_users(org, &emails).await;
    ids
}

async fn compliance(app: &TestApp, org: &TestOrg, body: Value) -> Value {
    let response = app.post(org, "/v1/compliance/report", &body).await;
    assert_eq!(response.status, 200, "{body}: {:?}", response.body);
    response.body
}

async fn patch(app: &TestApp, org: &TestOrg, flow: &str, body: Value) -> TestResponse {
    app.request(
        reqwest::Method::PATCH,
        &format!("/v1/flows/{flow}"),
        Some(&org.key),
        Some(&body),
        &[],
    )
    .await
}

async fn delete_rule(app: &TestApp, org: &TestOrg, rule: &str) -> TestResponse {
    app.request(
        reqwest::Method::DELETE,
        &format!("/v1/enrollment-rules/{rule}"),
        Some(&org.key),
        None,
        &[],
    )
    .await
}

/// The person of the report with this e-mail.
fn person<'a>(body: &'a Value, email: &str) -> &'a Value {
    body["people"]
        .as_array()
        .expect("people")
        .iter()
        .find(|person| person["email"] == email)
        .unwrap_or_else(|| panic!("{email} not in {body}"))
}

/// `(status, required)` of the person's first flow.
fn standing(body: &Value, email: &str) -> (String, bool) {
    let cell = &person(body, email)["flows"][0];
    (
        cell["status"].as_str().expect("status").to_owned(),
        cell["required"].as_bool().expect("required"),
    )
}

/// What `GET /v1/flows/{id}` says of whom the flow is required: `(required, requiredForRuleId)`.
async fn required_of(app: &TestApp, org: &TestOrg, flow: &str) -> (Value, Value) {
    let got = app.get(org, &format!("/v1/flows/{flow}")).await;
    assert_eq!(got.status, 200, "{:?}", got.body);
    (
        got.body["required"].clone(),
        got.body["requiredForRuleId"].clone(),
    )
}

/// The details of the organization's `flow.updated` audit rows, oldest first.
async fn flow_audit(app: &TestApp, org: &TestOrg) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT detail FROM audit_events WHERE org_id = $1 AND action = 'flow.updated'
         ORDER BY id",
    )
    .bind(org.id)
    .fetch_all(&app.db)
    .await
    .expect("audit")
}

/// By hand, a flow required of the Sales rule's audience, now (T = now):
///
/// | person | department | in the audience | assignment of the flow       | status       | counted |
/// |--------|------------|-----------------|------------------------------|--------------|---------|
/// | ann    | Sales      | yes             | completed 5 days ago         | compliant    | yes     |
/// | bob    | Sales      | yes             | none                         | not_assigned | yes     |
/// | cid    | Support    | no              | none                         | not_required | no      |
/// | dee    | Support    | no              | assigned 2 days ago, pending | pending      | no      |
///
/// Totals: 2 people (ann, bob), 1 compliant in every required flow, 1 compliant of 2 required
/// (50 %), 2 pairs not required. Three days ago dee held nothing yet: `not_required`.
#[tokio::test]
async fn a_flow_required_of_a_rules_audience_counts_only_the_audience() {
    let app = TestApp::spawn_with(TestOptions {
        assign_worker: false,
        ..TestOptions::default()
    })
    .await;
    let _worker = start_report_worker(&app);
    let org = create_org_in_zone(&app, Tier::Enterprise, "UTC", Some(1_000_000)).await;
    let onboarding = app.create_flow(&org, "Sales onboarding", &[10]).await;
    let rule = sales_rule(&app, &org, &onboarding).await;
    let created = app
        .post(
            &org,
            "/v1/flows",
            &json!({"name": "Sales compliance", "required": true, "requiredForRuleId": rule,
                    "modules": [{"name": "One"}]}),
        )
        .await;
    assert_eq!(created.status, 201, "{:?}", created.body);
    assert_eq!(created.body["requiredForRuleId"], json!(rule));
    let flow = created.body["flowId"].as_str().expect("flowId").to_owned();
    let ids = people(
        &app,
        &org,
        &[
            ("ann@example.com", "Sales"),
            ("bob@example.com", "Sales"),
            ("cid@example.com", "Support"),
            ("dee@example.com", "Support"),
        ],
    )
    .await;
    assert_eq!(
        matched_by(&app, &rule).await,
        ["ann@example.com", "bob@example.com"],
        "the rule's evaluation recorded its audience"
    );
    let now = Utc::now()
        .duration_trunc(Duration::seconds(1))
        .expect("truncate");
    let day = Duration::days(1);
    write_assignment(
        &app,
        &org,
        &flow,
        ids[0],
        now - day * 10,
        None,
        Some(now - day * 5),
    )
    .await;
    write_assignment(&app, &org, &flow, ids[3], now - day * 2, None, None).await;

    // No flowIds: the required flows, this one alone.
    let body = compliance(&app, &org, json!({})).await;
    assert_eq!(body["flows"][0]["flowId"], json!(flow));
    assert_eq!(body["flows"][0]["requiredForRuleId"], json!(rule));
    assert_eq!(
        standing(&body, "ann@example.com"),
        ("compliant".into(), true)
    );
    assert_eq!(
        standing(&body, "bob@example.com"),
        ("not_assigned".into(), true)
    );
    assert_eq!(
        standing(&body, "cid@example.com"),
        ("not_required".into(), false)
    );
    assert_eq!(
        standing(&body, "dee@example.com"),
        ("pending".into(), false)
    );
    for (email, summary) in [
        (
            "ann@example.com",
            json!({"compliant": 1, "required": 1, "percent": 100.0}),
        ),
        (
            "bob@example.com",
            json!({"compliant": 0, "required": 1, "percent": 0.0}),
        ),
        (
            "cid@example.com",
            json!({"compliant": 0, "required": 0, "percent": null}),
        ),
        (
            "dee@example.com",
            json!({"compliant": 0, "required": 0, "percent": null}),
        ),
    ] {
        assert_eq!(person(&body, email)["summary"], summary, "{email}");
    }
    let totals = &body["totals"];
    assert_eq!(totals["people"], 2, "{body}");
    assert_eq!(totals["peopleCompliant"], 1);
    assert_eq!(
        totals["statuses"],
        json!({"compliant": 1, "dueSoon": 0, "overdue": 0, "expired": 0, "pending": 0,
               "inProgress": 0, "notAssigned": 1, "cancelled": 0, "notRequired": 2}),
        "{body}"
    );
    assert_eq!(
        totals["summary"],
        json!({"compliant": 1, "required": 2, "percent": 50.0})
    );

    // Per department: Support has nobody the flow is required of.
    let grouped = compliance(&app, &org, json!({"groupBy": "department"})).await;
    let groups = grouped["groups"].as_array().expect("groups");
    assert_eq!(groups.len(), 2, "{grouped}");
    assert_eq!(groups[0]["key"], "Sales");
    assert_eq!(groups[0]["people"], 2);
    assert_eq!(
        groups[0]["summary"],
        json!({"compliant": 1, "required": 2, "percent": 50.0})
    );
    assert_eq!(groups[1]["key"], "Support");
    assert_eq!(groups[1]["people"], 0);
    assert_eq!(groups[1]["statuses"]["notRequired"], 2);
    assert_eq!(
        groups[1]["summary"],
        json!({"compliant": 0, "required": 0, "percent": null})
    );
    assert_eq!(grouped["totals"], body["totals"]);

    // Three days ago (against today's audience): ann was completed already; dee held nothing.
    let then = compliance(
        &app,
        &org,
        json!({"asOf": flow_domain::format_timestamp(now - day * 3)}),
    )
    .await;
    assert_eq!(
        standing(&then, "ann@example.com"),
        ("compliant".into(), true)
    );
    assert_eq!(
        standing(&then, "dee@example.com"),
        ("not_required".into(), false)
    );
    assert_eq!(then["totals"]["statuses"]["notRequired"], 2);
    assert_eq!(
        then["totals"]["summary"],
        json!({"compliant": 1, "required": 2, "percent": 50.0})
    );

    // The CSV says the same: every pair, with whether it is required.
    let answer = compliance(&app, &org, json!({"format": "csv"})).await;
    let url = answer["downloadUrl"].as_str().expect("downloadUrl");
    let file = wait_for_export(&app, &org, url).await;
    assert_eq!(file.status, 200, "{}", String::from_utf8_lossy(&file.body));
    let mut rows = csv_columns(&file.body, ["email", "status", "required"]);
    rows.sort();
    assert_eq!(
        rows,
        [
            ["ann@example.com", "compliant", "true"],
            ["bob@example.com", "not_assigned", "true"],
            ["cid@example.com", "not_required", "false"],
            ["dee@example.com", "pending", "false"],
        ]
    );

    // Excel: the same rows with a boolean `required`, and the totals count the pairs not
    // required apart.
    let answer = compliance(&app, &org, json!({"format": "excel"})).await;
    let url = answer["downloadUrl"].as_str().expect("downloadUrl");
    let file = wait_for_export(&app, &org, url).await;
    assert_eq!(file.status, 200);
    let mut workbook: Xlsx<_> =
        calamine::open_workbook_from_rs(Cursor::new(file.body)).expect("a valid XLSX");
    let sheet = workbook.worksheet_range("Compliance").expect("Compliance");
    let row_of = |email: &str| {
        sheet
            .rows()
            .find(|row| row.iter().any(|cell| *cell == Data::String(email.into())))
            .unwrap_or_else(|| panic!("no row of {email}"))
            .to_vec()
    };
    for (email, status, required) in [
        ("ann@example.com", "compliant", true),
        ("cid@example.com", "not_required", false),
        ("dee@example.com", "pending", false),
    ] {
        let row = row_of(email);
        assert!(
            row.contains(&Data::String(status.into())),
            "{email}: {row:?}"
        );
        assert_eq!(row.get(10), Some(&Data::Bool(required)), "{email}: {row:?}");
    }
    let totals = workbook.worksheet_range("Totals").expect("Totals");
    let not_required = totals
        .rows()
        .find(|row| row.first() == Some(&Data::String("not_required".into())))
        .map(|row| row.get(1).cloned());
    assert_eq!(not_required, Some(Some(Data::Float(2.0))));

    // PDF: a pair judged though not required says so.
    let answer = compliance(&app, &org, json!({"format": "pdf"})).await;
    let url = answer["downloadUrl"].as_str().expect("downloadUrl");
    let file = wait_for_export(&app, &org, url).await;
    assert_eq!(file.status, 200);
    let document = lopdf::Document::load_mem(&file.body).expect("a valid PDF");
    let pages: Vec<u32> = document.get_pages().keys().copied().collect();
    let text = document.extract_text(&pages).expect("text");
    assert!(text.contains("pending (not req.)"), "{text}");
    assert!(text.contains("not required"), "{text}");
    assert!(
        text.contains("\"(not req.)\": judged, though the flow is not required of the person"),
        "{text}"
    );
    // Statuses and instants are never cut (names may be).
    assert!(
        !text
            .lines()
            .any(|line| line.contains('…') && (line.starts_with("20") || line.contains('('))),
        "{text}"
    );
}

#[tokio::test]
async fn a_flows_audience_is_validated_audited_and_its_rule_is_not_deleted_under_it() {
    let app = TestApp::spawn_with(TestOptions {
        assign_worker: false,
        ..TestOptions::default()
    })
    .await;
    let org = app.create_org(Tier::Standard).await;
    let onboarding = app.create_flow(&org, "Sales onboarding", &[10]).await;
    let rule = sales_rule(&app, &org, &onboarding).await;
    let other = app.create_org(Tier::Standard).await;
    let other_flow = app.create_flow(&other, "Elsewhere", &[10]).await;
    let foreign_rule = sales_rule(&app, &other, &other_flow).await;
    let flow = app.create_flow(&org, "Sales compliance", &[10]).await;

    // Each refused edit answers 4xx and changes nothing.
    let unknown = "enr_00000000000000000000000000000000";
    for (body, status, message) in [
        (
            json!({"required": true, "requiredForRuleId": foreign_rule}),
            404,
            "enrollment rule",
        ),
        (
            json!({"required": true, "requiredForRuleId": unknown}),
            404,
            "enrollment rule",
        ),
        (
            json!({"requiredForRuleId": rule}),
            400,
            "requiredForRuleId needs \"required\": true",
        ),
        (
            json!({"required": false, "requiredForRuleId": rule}),
            400,
            "requiredForRuleId needs \"required\": true",
        ),
        (
            json!({"required": true, "requiredForRuleId": "rule_42"}),
            400,
            "requiredForRuleId must be an enrollment rule id",
        ),
        (
            json!({"required": true, "requiredForRuleId": 7}),
            400,
            "requiredForRuleId",
        ),
    ] {
        let response = patch(&app, &org, &flow, body.clone()).await;
        assert_eq!(response.status, status, "{body}: {:?}", response.body);
        let text = response.body["message"].as_str().unwrap_or_default();
        assert!(text.contains(message), "{body}: {text}");
        assert_eq!(
            required_of(&app, &org, &flow).await,
            (json!(false), Value::Null),
            "{body}"
        );
    }
    assert!(flow_audit(&app, &org).await.is_empty());
    // The same rules on creation.
    for (body, status) in [
        (json!({"requiredForRuleId": rule}), 400),
        (
            json!({"required": true, "requiredForRuleId": foreign_rule}),
            404,
        ),
    ] {
        let mut request = body.clone();
        request["name"] = json!("Refused");
        request["modules"] = json!([{"name": "One"}]);
        let response = app.post(&org, "/v1/flows", &request).await;
        assert_eq!(response.status, status, "{body}: {:?}", response.body);
    }
    let names: Vec<String> = sqlx::query_scalar("SELECT name FROM flows WHERE org_id = $1")
        .bind(org.id)
        .fetch_all(&app.db)
        .await
        .expect("flows");
    assert!(!names.iter().any(|name| name == "Refused"), "{names:?}");

    // Set, kept by `required: true` alone, cleared to everyone, set again, cleared by
    // `required: false`.
    let set = patch(
        &app,
        &org,
        &flow,
        json!({"required": true, "requiredForRuleId": rule}),
    )
    .await;
    assert_eq!(set.status, 200, "{:?}", set.body);
    assert_eq!(
        (
            set.body["required"].clone(),
            set.body["requiredForRuleId"].clone()
        ),
        (json!(true), json!(rule))
    );
    let kept = patch(&app, &org, &flow, json!({"required": true})).await;
    assert_eq!(
        kept.body["requiredForRuleId"],
        json!(rule),
        "{:?}",
        kept.body
    );
    let listed = app.get(&org, "/v1/flows").await;
    let entry = listed.body["data"]
        .as_array()
        .expect("data")
        .iter()
        .find(|entry| entry["flowId"] == json!(flow))
        .expect("listed")
        .clone();
    assert_eq!(entry["requiredForRuleId"], json!(rule));

    // The rule is not deleted while the flow is required of its audience.
    let refused = delete_rule(&app, &org, &rule).await;
    assert_eq!(refused.status, 409, "{:?}", refused.body);
    assert_eq!(refused.body["error"], "conflict");
    let text = refused.body["message"].as_str().unwrap_or_default();
    assert!(
        text.contains("Sales compliance") && text.contains(&flow),
        "{text}"
    );
    assert_eq!(
        app.get(&org, &format!("/v1/enrollment-rules/{rule}"))
            .await
            .status,
        200
    );

    let everyone = patch(&app, &org, &flow, json!({"requiredForRuleId": null})).await;
    assert_eq!(everyone.status, 200, "{:?}", everyone.body);
    assert_eq!(
        required_of(&app, &org, &flow).await,
        (json!(true), Value::Null)
    );
    let again = patch(
        &app,
        &org,
        &flow,
        json!({"required": true, "requiredForRuleId": rule}),
    )
    .await;
    assert_eq!(again.status, 200, "{:?}", again.body);
    let cleared = patch(&app, &org, &flow, json!({"required": false})).await;
    assert_eq!(cleared.status, 200, "{:?}", cleared.body);
    assert_eq!(
        required_of(&app, &org, &flow).await,
        (json!(false), Value::Null)
    );
    assert_eq!(
        flow_audit(&app, &org).await,
        [
            format!(
                "Sales compliance (required, required of the audience of rule \"Sales\" ({rule}))"
            ),
            "Sales compliance (required)".to_owned(),
            "Sales compliance (required of everyone)".to_owned(),
            format!(
                "Sales compliance (required, required of the audience of rule \"Sales\" ({rule}))"
            ),
            "Sales compliance (not required)".to_owned(),
        ]
    );

    // No flow is required of it now: it is deleted.
    assert_eq!(delete_rule(&app, &org, &rule).await.status, 204);
}

#[tokio::test]
async fn an_admin_chooses_on_the_flows_page_whom_it_is_required_of() {
    let app = TestApp::spawn_with(TestOptions {
        assign_worker: false,
        ..TestOptions::default()
    })
    .await;
    let org = app.create_org(Tier::Standard).await;
    let onboarding = app.create_flow(&org, "Sales onboarding", &[10]).await;
    let rule = sales_rule(&app, &org, &onboarding).await;
    let flow = app.create_flow(&org, "Sales compliance", &[10]).await;
    let client = DashboardClient::admin(&app, org.id).await;
    let path = format!("/dashboard/flows/{flow}");

    let page = client.page(&path).await;
    assert!(
        page.contains("Not required: the compliance report"),
        "{page}"
    );
    assert!(
        page.contains(&format!(
            "<option value=\"{rule}\">The audience of the rule"
        )),
        "{page}"
    );

    let saved = client
        .post_form(&format!("{path}/required"), &[("required_of", &rule)])
        .await;
    assert_eq!(saved.status, 303, "{}", saved.body);
    assert_eq!(saved.location(), Some(path.as_str()));
    assert_eq!(
        required_of(&app, &org, &flow).await,
        (json!(true), json!(rule))
    );
    let page = client.page(&path).await;
    assert!(
        page.contains("Required of the audience of the rule \u{201c}Sales\u{201d}"),
        "{page}"
    );
    assert!(
        page.contains(&format!("<option value=\"{rule}\" selected>")),
        "{page}"
    );

    // A rule that is no rule of the organization is refused and changes nothing.
    let refused = client
        .post_form(
            &format!("{path}/required"),
            &[("required_of", "enr_00000000000000000000000000000000")],
        )
        .await;
    assert_eq!(refused.status, 303);
    assert!(
        client
            .page(&path)
            .await
            .contains("That rule no longer exists"),
        "the refusal is shown"
    );
    assert_eq!(
        required_of(&app, &org, &flow).await,
        (json!(true), json!(rule))
    );

    // Deleting the rule from the rules page is refused, saying which flow to change first.
    let delete = client
        .post_form(&format!("/dashboard/rules/{rule}/delete"), &[])
        .await;
    assert_eq!(delete.status, 303, "{}", delete.body);
    let rules = client.page("/dashboard/rules").await;
    assert!(
        rules.contains("The rule is not deleted") && rules.contains("Sales compliance"),
        "{rules}"
    );
    assert_eq!(
        app.get(&org, &format!("/v1/enrollment-rules/{rule}"))
            .await
            .status,
        200
    );

    let everyone = client
        .post_form(&format!("{path}/required"), &[("required_of", "everyone")])
        .await;
    assert_eq!(everyone.status, 303);
    assert_eq!(
        required_of(&app, &org, &flow).await,
        (json!(true), Value::Null)
    );
    assert!(
        client
            .page(&path)
            .await
            .contains("Required of everyone in the organization."),
    );
}
