//! Editing a flow where it is safe (design §16): `PATCH /v1/flows/{id}` changes its name and
//! description and archives it (no new assignments, its assignments and reports kept); a new
//! flow reusing a name is warned.

use flow_common::db::orgs::Tier;
use flow_tests::{TestApp, TestOrg, TestResponse};
use serde_json::{Value, json};

async fn patch_flow(app: &TestApp, org: &TestOrg, id: &str, body: Value) -> TestResponse {
    app.request(
        reqwest::Method::PATCH,
        &format!("/v1/flows/{id}"),
        Some(&org.key),
        Some(&body),
        &[],
    )
    .await
}

#[tokio::test]
async fn an_archived_flow_takes_no_new_assignments_and_keeps_its_reports_until_unarchived() {
    let app = TestApp::spawn().await;
    let org = app.create_org(Tier::Standard).await;
    let other = app.create_org(Tier::Standard).await;
    app.create_users(&org, &["ivy@example.com", "jo@example.com"])
        .await;
    let flow = app.create_flow(&org, "Security Basics", &[10, 20]).await;
    let kept = app
        .assign_persisted(&org, &flow, "ivy@example.com", json!({}))
        .await;

    let renamed = patch_flow(
        &app,
        &org,
        &flow,
        json!({ "name": "Security Basics 2027", "description": "Yearly" }),
    )
    .await;
    assert_eq!(renamed.status, 200, "{:?}", renamed.body);
    assert_eq!(renamed.body["name"], json!("Security Basics 2027"));
    assert_eq!(renamed.body["description"], json!("Yearly"));
    assert_eq!(renamed.body["archived"], json!(false));
    assert_eq!(renamed.body["moduleCount"], json!(2));

    let archived = patch_flow(&app, &org, &flow, json!({ "archived": true })).await;
    assert_eq!(archived.status, 200, "{:?}", archived.body);
    assert_eq!(archived.body["archived"], json!(true));
    // Seen at once by the assign path (its flow cache is told).
    let refused = app
        .post(
            &org,
            "/v1/flows/assign",
            &json!({ "flowId": flow, "userEmail": "jo@example.com" }),
        )
        .await;
    assert_eq!(refused.status, 409, "{:?}", refused.body);
    assert_eq!(refused.body["error"], json!("conflict"));
    assert!(
        refused.body["message"]
            .as_str()
            .unwrap_or_default()
            .contains("archived"),
        "{:?}",
        refused.body
    );
    // Its assignments and report stay.
    let read = app.get(&org, &format!("/v1/assignments/{kept}")).await;
    assert_eq!(read.status, 200);
    assert_eq!(read.body["flowName"], json!("Security Basics 2027"));
    let report = app
        .post(&org, "/v1/flows/report", &json!({ "flowId": flow }))
        .await;
    assert_eq!(report.status, 200, "{:?}", report.body);
    assert_eq!(report.body["metrics"]["totalAssignments"], json!(1));

    let back = patch_flow(
        &app,
        &org,
        &flow,
        json!({ "archived": false, "description": null }),
    )
    .await;
    assert_eq!(back.status, 200, "{:?}", back.body);
    assert_eq!(back.body["archived"], json!(false));
    assert_eq!(back.body["description"], Value::Null);
    app.assign_persisted(&org, &flow, "jo@example.com", json!({}))
        .await;

    // Bad edits, another organization's flow.
    for body in [
        json!({}),
        json!({ "name": "" }),
        json!({ "name": "a\nb" }),
        json!({ "modules": [] }),
        json!({ "archived": "yes" }),
    ] {
        let response = patch_flow(&app, &org, &flow, body.clone()).await;
        assert_eq!(response.status, 400, "{body}: {:?}", response.body);
    }
    let foreign = patch_flow(&app, &other, &flow, json!({ "archived": true })).await;
    assert_eq!(foreign.status, 404, "{:?}", foreign.body);
    let audited: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM audit_events WHERE action = 'flow.updated' AND target = $1",
    )
    .bind(&flow)
    .fetch_one(&app.db)
    .await
    .expect("audit");
    assert_eq!(audited, 3);
}

#[tokio::test]
async fn a_new_flow_reusing_a_name_is_created_with_a_warning() {
    let app = TestApp::spawn().await;
    let org = app.create_org(Tier::Standard).await;
    let body = json!({ "name": "Onboarding", "modules": [{ "name": "Welcome" }] });
    let first = app.post(&org, "/v1/flows", &body).await;
    assert_eq!(first.status, 201, "{:?}", first.body);
    assert!(first.body.get("warnings").is_none());
    let again = app
        .post(
            &org,
            "/v1/flows",
            &json!({ "name": "onboarding", "modules": [{ "name": "Welcome" }] }),
        )
        .await;
    assert_eq!(again.status, 201, "{:?}", again.body);
    let warning = again.body["warnings"][0].as_str().expect("a warning");
    assert!(warning.contains("already named"), "{warning}");
}

#[tokio::test]
async fn a_new_flow_can_carry_its_reminders_validity_and_renewal_window_from_the_start() {
    let app = TestApp::spawn().await;
    let org = app.create_org(Tier::Standard).await;
    let flows_of_org = || async {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM flows WHERE org_id = $1")
            .bind(org.id)
            .fetch_one(&app.db)
            .await
            .expect("flows")
    };
    let module = json!([{ "name": "Phishing" }]);

    // Bad lifecycle fields are refused by name, and no flow is written.
    for (bad, names) in [
        (json!({ "renewBeforeDays": 30 }), "renewBeforeDays"),
        (
            json!({ "validFor": { "days": 20 }, "renewBeforeDays": 30 }),
            "renewBeforeDays",
        ),
        (json!({ "validFor": { "months": 0 } }), "validFor.months"),
        (
            json!({ "validFor": { "months": 12, "days": 3 } }),
            "validFor",
        ),
        (
            json!({ "reminders": { "beforeDueDays": [400] } }),
            "reminders.beforeDueDays",
        ),
        (json!({ "reminders": { "everyDays": 2 } }), "everyDays"),
    ] {
        let mut body = bad.clone();
        body["name"] = json!("Security Basics");
        body["modules"] = module.clone();
        let refused = app.post(&org, "/v1/flows", &body).await;
        assert_eq!(refused.status, 400, "{bad}: {:?}", refused.body);
        let message = refused.body["message"].as_str().unwrap_or_default();
        assert!(message.contains(names), "{bad}: {message}");
    }
    assert_eq!(flows_of_org().await, 0);

    let created = app
        .post(
            &org,
            "/v1/flows",
            &json!({
                "name": "Security Basics",
                "modules": module,
                "reminders": { "beforeDueDays": [7, 1, 7], "afterDueDays": [3] },
                "validFor": { "months": 12 },
                "renewBeforeDays": 30,
            }),
        )
        .await;
    assert_eq!(created.status, 201, "{:?}", created.body);
    let id = created.body["flowId"].as_str().expect("flow id").to_owned();
    let read = app.get(&org, &format!("/v1/flows/{id}")).await;
    assert_eq!(read.status, 200, "{:?}", read.body);
    for body in [&created.body, &read.body] {
        assert_eq!(
            body["reminders"],
            json!({ "beforeDueDays": [1, 7], "afterDueDays": [3] })
        );
        assert_eq!(body["validFor"], json!({ "months": 12 }));
        assert_eq!(body["renewBeforeDays"], json!(30));
    }
    assert_eq!(flows_of_org().await, 1);
}
