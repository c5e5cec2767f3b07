//! Expiry and renewal (design §16): a flow's validity gives each completion an `expiresAt` on the
//! organization's calendar; the scheduler assigns the renewal with `flow.expiring` when the window
//! opens and sends `flow.expired` at expiry unless the renewal was completed in time, each once
//! with two schedulers and a scheduler killed mid-run; nothing for deactivated users; the
//! previous cycle's report keeps the completion.

use std::time::Duration;

use chrono::{DateTime, Utc};
use flow_common::amqp::Publisher;
use flow_common::db::orgs::Tier;
use flow_domain::ids::AssignmentId;
use flow_tests::{TestApp, TestOrg, TestResponse};
use serde_json::{Value, json};

const USER_SCHEMA: &str = "urn:ietf:params:scim:schemas:core:2.0:User";
const PATCH_OP: &str = "urn:ietf:params:scim:api:messages:2.0:PatchOp";

fn at(text: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(text).expect("time").to_utc()
}

async fn publisher(app: &TestApp) -> Publisher {
    let publisher = Publisher::new(
        flow_tests::amqp_url(),
        "test-renewals",
        app.topology(),
        2,
        Duration::from_secs(10),
    );
    publisher.connect_now().await.expect("broker");
    publisher
}

/// One scheduler's renewal scan at `now`: (completions renewed, completions settled).
async fn scan(app: &TestApp, publisher: &Publisher, now: &str) -> (usize, usize) {
    flow_workers::scheduler::scan_renewals(&app.db, publisher, at(now), 100)
        .await
        .expect("scan")
}

async fn edit_flow(app: &TestApp, org: &TestOrg, flow: &str, body: Value) -> TestResponse {
    app.request(
        reqwest::Method::PATCH,
        &format!("/v1/flows/{flow}"),
        Some(&org.key),
        Some(&body),
        &[],
    )
    .await
}

async fn set_zone(app: &TestApp, org: &TestOrg, zone: &str) {
    sqlx::query("UPDATE organizations SET timezone = $2 WHERE id = $1")
        .bind(org.id)
        .bind(zone)
        .execute(&app.db)
        .await
        .expect("zone");
}

async fn scim_user(app: &TestApp, org: &TestOrg, email: &str) -> String {
    let created = app
        .scim_request(
            &org.key,
            reqwest::Method::POST,
            "/Users",
            Some(&json!({
                "schemas": [USER_SCHEMA],
                "userName": email,
                "active": true,
                "emails": [{ "primary": true, "value": email }]
            })),
            &[],
        )
        .await;
    assert_eq!(created.status, 201, "{:?}", created.body);
    created.body["id"].as_str().expect("id").to_owned()
}

async fn deactivate(app: &TestApp, org: &TestOrg, user: &str) {
    let deactivated = app
        .scim_request(
            &org.key,
            reqwest::Method::PATCH,
            &format!("/Users/{user}"),
            Some(&json!({ "schemas": [PATCH_OP],
                          "Operations": [{ "op": "replace", "path": "active", "value": false }] })),
            &[],
        )
        .await;
    assert_eq!(deactivated.status, 200, "{:?}", deactivated.body);
}

/// Assigns `flow` to `email` as if it had been assigned at `assigned_at` (so a completion in the
/// past may be recorded), and completes it at `completed_at`; returns the assignment.
async fn completed_at(
    app: &TestApp,
    org: &TestOrg,
    flow: &str,
    email: &str,
    assigned_at: &str,
    completed_at: &str,
) -> Value {
    let id = app.assign_persisted(org, flow, email, json!({})).await;
    sqlx::query("UPDATE assignments SET assigned_at = $2 WHERE id = $1")
        .bind(AssignmentId::parse(&id).expect("id"))
        .bind(at(assigned_at))
        .execute(&app.db)
        .await
        .expect("assigned_at");
    complete(app, org, flow, &id, completed_at).await
}

/// Completes every module of the assignment at `when`; returns the completed assignment.
async fn complete(app: &TestApp, org: &TestOrg, flow: &str, id: &str, when: &str) -> Value {
    for module in app.module_ids(org, flow).await {
        let done = app
            .post(
                org,
                &format!("/v1/assignments/{id}/progress"),
                &json!({ "moduleId": module, "status": "completed", "at": when }),
            )
            .await;
        assert_eq!(done.status, 202, "{:?}", done.body);
    }
    app.wait_for_status(org, id, "completed").await
}

/// The bodies of the outbox events of `event_type` about the assignment, oldest first.
async fn events(app: &TestApp, id: &str, event_type: &str) -> Vec<Value> {
    sqlx::query_scalar(
        "SELECT payload FROM outbox WHERE assignment_id = $1 AND event_type = $2 ORDER BY seq",
    )
    .bind(AssignmentId::parse(id).expect("id"))
    .bind(event_type)
    .fetch_all(&app.db)
    .await
    .expect("events")
}

/// The assignments of a flow.
async fn assignments_of(app: &TestApp, org: &TestOrg, flow: &str) -> Vec<Value> {
    let listed = app
        .get(org, &format!("/v1/assignments?flowId={flow}&limit=100"))
        .await;
    assert_eq!(listed.status, 200, "{:?}", listed.body);
    listed.body["data"]
        .as_array()
        .or_else(|| listed.body["assignments"].as_array())
        .expect("a list")
        .clone()
}

/// The renewal of `id`, once persisted.
async fn renewal_of(app: &TestApp, org: &TestOrg, id: &str) -> Value {
    let renewal = AssignmentId::for_renewal(AssignmentId::parse(id).expect("id")).to_string();
    app.eventually(
        Duration::from_secs(10),
        "the renewal to be persisted",
        || async {
            let response = app.get(org, &format!("/v1/assignments/{renewal}")).await;
            (response.status == 200).then_some(response.body)
        },
    )
    .await
}

/// Checks an event body against the OpenAPI document's schema of its webhook.
async fn assert_matches_webhook_schema(app: &TestApp, body: &Value) {
    let document = app
        .client
        .get(format!("{}/v1/openapi.json", app.base_url))
        .send()
        .await
        .expect("openapi")
        .json::<Value>()
        .await
        .expect("json");
    let event_type = body["type"].as_str().expect("type");
    let reference = document["webhooks"][event_type]["post"]["requestBody"]["content"]
        ["application/json"]["schema"]["$ref"]
        .clone();
    assert!(
        reference.is_string(),
        "{event_type} is a documented webhook"
    );
    let mut schema = document.clone();
    schema["$ref"] = reference;
    let validator = jsonschema::validator_for(&schema).expect("the schema compiles");
    let errors: Vec<String> = validator
        .iter_errors(body)
        .map(|error| format!("{}: {error}", error.instance_path()))
        .collect();
    assert_eq!(errors, Vec::<String>::new(), "{body}");
    // Every key of `data.expiry` is documented.
    let expiry = &document["components"]["schemas"]["ExpiryData"]["properties"];
    for key in body["data"]["expiry"]
        .as_object()
        .expect("data.expiry")
        .keys()
    {
        assert!(expiry[key].is_object(), "data.expiry.{key} is documented");
    }
}

#[tokio::test]
async fn a_flow_validity_is_checked_and_completions_expire_on_the_organization_calendar() {
    let app = TestApp::spawn().await;
    let org = app.create_org(Tier::Standard).await;
    let flow = app.create_flow(&org, "Safety", &[10]).await;
    for (body, message) in [
        (
            json!({ "validFor": {} }),
            "validFor must give exactly one of months and days",
        ),
        (
            json!({ "validFor": { "months": 1, "days": 1 } }),
            "validFor must give exactly one of months and days",
        ),
        (
            json!({ "validFor": { "months": 121 } }),
            "validFor.months must be between 1 and 120",
        ),
        (
            json!({ "validFor": { "days": 0 } }),
            "validFor.days must be between 1 and 3650",
        ),
        (
            json!({ "renewBeforeDays": 0 }),
            "renewBeforeDays must be between 1 and 365",
        ),
        (
            json!({ "validFor": { "months": 1 }, "renewBeforeDays": 28 }),
            "renewBeforeDays must be less than the validity",
        ),
        // Alone, against what is stored (no validity yet).
        (
            json!({ "renewBeforeDays": 5 }),
            "renewBeforeDays must be less than the flow's validity",
        ),
    ] {
        let refused = edit_flow(&app, &org, &flow, body.clone()).await;
        assert_eq!(refused.status, 400, "{body}: {:?}", refused.body);
        assert_eq!(refused.body["error"], json!("invalid_request"), "{body}");
        let said = refused.body["message"].as_str().unwrap_or_default();
        assert!(said.starts_with(message), "{body}: {said}");
    }
    let set = edit_flow(
        &app,
        &org,
        &flow,
        json!({ "validFor": { "months": 1 }, "renewBeforeDays": 7 }),
    )
    .await;
    assert_eq!(set.status, 200, "{:?}", set.body);
    assert_eq!(set.body["validFor"], json!({ "months": 1 }));
    assert_eq!(set.body["renewBeforeDays"], json!(7));
    // Longer than the stored validity allows: refused, nothing changed.
    let too_long = edit_flow(&app, &org, &flow, json!({ "renewBeforeDays": 30 })).await;
    assert_eq!(too_long.status, 400, "{:?}", too_long.body);
    assert_eq!(
        app.get(&org, &format!("/v1/flows/{flow}")).await.body["renewBeforeDays"],
        json!(7)
    );

    // Auckland (UTC+13 in summer): 12:00Z on 30 January is 01:00 on the 31st there. A month
    // later on that calendar is the last day of February, 01:00 local: 12:00Z on the 27th (in
    // UTC it would have been the 28th).
    set_zone(&app, &org, "Pacific/Auckland").await;
    scim_user(&app, &org, "ann@example.com").await;
    let done = completed_at(
        &app,
        &org,
        &flow,
        "ann@example.com",
        "2026-01-01T00:00:00Z",
        "2026-01-30T12:00:00Z",
    )
    .await;
    assert_eq!(done["expiresAt"], json!("2026-02-27T12:00:00.000Z"));
    assert!(done.get("expiredAt").is_none(), "{done}");

    // Paris across the change to summer time (29 March 2026): 30 local days after 10:00 CET on
    // 1 March is 10:00 CEST on the 31st, 08:00Z (not 09:00Z).
    set_zone(&app, &org, "Europe/Paris").await;
    let edited = edit_flow(&app, &org, &flow, json!({ "validFor": { "days": 30 } })).await;
    assert_eq!(edited.status, 200, "{:?}", edited.body);
    scim_user(&app, &org, "bob@example.com").await;
    let paris = completed_at(
        &app,
        &org,
        &flow,
        "bob@example.com",
        "2026-02-01T00:00:00Z",
        "2026-03-01T09:00:00Z",
    )
    .await;
    assert_eq!(paris["expiresAt"], json!("2026-03-31T08:00:00.000Z"));
    // A later change of the validity leaves existing completions as they are; removing it
    // removes the window too.
    let cleared = edit_flow(&app, &org, &flow, json!({ "validFor": null })).await;
    assert_eq!(cleared.status, 200, "{:?}", cleared.body);
    assert!(cleared.body.get("validFor").is_none());
    assert!(cleared.body.get("renewBeforeDays").is_none());
    let id = paris["assignmentId"].as_str().expect("id");
    assert_eq!(
        app.get(&org, &format!("/v1/assignments/{id}")).await.body["expiresAt"],
        json!("2026-03-31T08:00:00.000Z")
    );
}

#[tokio::test]
async fn renewal_and_expiry_come_once_with_two_schedulers_and_one_killed_mid_run() {
    let app = TestApp::spawn().await;
    let org = app.create_org(Tier::Standard).await;
    let flow = app.create_flow(&org, "Safety", &[10]).await;
    let set = edit_flow(
        &app,
        &org,
        &flow,
        json!({ "validFor": { "months": 12 }, "renewBeforeDays": 30 }),
    )
    .await;
    assert_eq!(set.status, 200, "{:?}", set.body);
    scim_user(&app, &org, "kim@example.com").await;
    let done = completed_at(
        &app,
        &org,
        &flow,
        "kim@example.com",
        "2026-01-01T00:00:00Z",
        "2026-01-15T10:00:00Z",
    )
    .await;
    let id = done["assignmentId"].as_str().expect("id").to_owned();
    assert_eq!(done["expiresAt"], json!("2027-01-15T10:00:00.000Z"));
    let (first, second) = (publisher(&app).await, publisher(&app).await);

    // Before the window: nothing.
    assert_eq!(scan(&app, &first, "2026-12-16T09:59:59Z").await, (0, 0));
    // A scheduler claims the renewal, publishes it and dies before committing: the renewal
    // may be persisted, but nothing is claimed and no event written.
    let claim = flow_app::upkeep::claim_renewals(&app.db, at("2026-12-16T10:00:00Z"), 100)
        .await
        .expect("claim");
    assert_eq!(claim.claimed, 1);
    assert_eq!(claim.renewals.len(), 1);
    flow_workers::scheduler::publish_renewals(&first, &claim.renewals)
        .await
        .expect("publish");
    drop(claim);
    assert!(events(&app, &id, "flow.expiring").await.is_empty());
    // Two schedulers at once, then again: one claim, one event, one renewal.
    let (a, b) = tokio::join!(
        scan(&app, &first, "2026-12-16T10:00:00Z"),
        scan(&app, &second, "2026-12-16T10:00:00Z")
    );
    assert_eq!(a.0 + b.0, 1, "{a:?} {b:?}");
    assert_eq!(scan(&app, &first, "2026-12-20T10:00:00Z").await, (0, 0));
    let renewal = renewal_of(&app, &org, &id).await;
    let renewal_id = renewal["assignmentId"].as_str().expect("id").to_owned();
    assert_eq!(renewal["renewalOf"], json!(id));
    assert_eq!(renewal["dueDate"], json!("2027-01-15T10:00:00.000Z"));
    assert_eq!(renewal["status"], json!("pending"));
    let old = app.get(&org, &format!("/v1/assignments/{id}")).await.body;
    assert_eq!(old["renewedBy"], json!(renewal_id));
    assert_eq!(old["status"], json!("completed"));
    let expiring = events(&app, &id, "flow.expiring").await;
    assert_eq!(expiring.len(), 1);
    assert_eq!(
        expiring[0]["data"]["expiry"],
        json!({ "expiresAt": "2027-01-15T10:00:00.000Z", "renewalAssignmentId": renewal_id })
    );
    assert_eq!(expiring[0]["data"]["status"], json!("completed"));
    assert_matches_webhook_schema(&app, &expiring[0]).await;
    assert_eq!(
        assignments_of(&app, &org, &flow)
            .await
            .iter()
            .filter(|assignment| assignment["renewalOf"] == json!(id))
            .count(),
        1
    );

    // Expiry, not renewed in time: one `flow.expired` with two schedulers and a repeat.
    assert_eq!(scan(&app, &first, "2027-01-15T09:59:59Z").await, (0, 0));
    let (a, b) = tokio::join!(
        scan(&app, &first, "2027-01-15T10:00:00Z"),
        scan(&app, &second, "2027-01-15T10:00:00Z")
    );
    assert_eq!(a.1 + b.1, 1, "{a:?} {b:?}");
    assert_eq!(scan(&app, &first, "2027-02-01T00:00:00Z").await, (0, 0));
    let expired = events(&app, &id, "flow.expired").await;
    assert_eq!(expired.len(), 1);
    assert_eq!(
        expired[0]["data"]["expiry"],
        json!({ "expiresAt": "2027-01-15T10:00:00.000Z", "renewalAssignmentId": renewal_id })
    );
    assert_matches_webhook_schema(&app, &expired[0]).await;
    let old = app.get(&org, &format!("/v1/assignments/{id}")).await.body;
    assert_eq!(old["status"], json!("completed"));
    assert_eq!(old["expiredAt"], json!("2027-01-15T10:00:00.000Z"));
    // Expiring comes before expired; the renewal itself is untouched.
    assert_eq!(
        app.events_of(&id).await,
        [
            "flow.assigned",
            "flow.started",
            "flow.completed",
            "flow.expiring",
            "flow.expired"
        ]
    );
    assert_eq!(app.events_of(&renewal_id).await, ["flow.assigned"]);

    // The previous cycle's report still counts the completion.
    let report = app
        .post(
            &org,
            "/v1/flows/report",
            &json!({ "flowId": flow, "startDate": "2026-01-01", "endDate": "2026-01-31" }),
        )
        .await;
    assert_eq!(report.status, 200, "{:?}", report.body);
    assert_eq!(report.body["metrics"]["completedAssignments"], json!(1));
    assert_eq!(report.body["metrics"]["totalAssignments"], json!(1));
    // Its row says when it expired (and stays `completed`); the renewal, open, has no expiry.
    let rows = report.body["assignments"].as_array().expect("rows");
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["status"], json!("completed"));
    assert_eq!(rows[0]["expiresAt"], json!("2027-01-15T10:00:00.000Z"));
    app.assert_rollups_exact().await;
}

#[tokio::test]
async fn a_renewal_completed_in_time_keeps_the_completion_from_expiring() {
    let app = TestApp::spawn().await;
    let org = app.create_org(Tier::Standard).await;
    let flow = app.create_flow(&org, "Safety", &[10]).await;
    let set = edit_flow(
        &app,
        &org,
        &flow,
        json!({ "validFor": { "days": 10 }, "renewBeforeDays": 5 }),
    )
    .await;
    assert_eq!(set.status, 200, "{:?}", set.body);
    // Times in the past (progress is never in the future): completions 20 days ago expired 10
    // days ago; their renewal window opened 15 days ago. Whole seconds, as the API shows them.
    let now = chrono::SubsecRound::trunc_subsecs(Utc::now(), 0);
    let days_ago = |days: i64| (now - chrono::Duration::days(days)).to_rfc3339();
    let first = publisher(&app).await;
    let mut ids = Vec::new();
    for email in ["ann@example.com", "bob@example.com", "cy@example.com"] {
        scim_user(&app, &org, email).await;
        let done = completed_at(&app, &org, &flow, email, &days_ago(30), &days_ago(20)).await;
        ids.push(done["assignmentId"].as_str().expect("id").to_owned());
    }
    let expires_at = app
        .get(&org, &format!("/v1/assignments/{}", ids[0]))
        .await
        .body["expiresAt"]
        .clone();
    assert!(expires_at.is_string());
    // cy completed the flow again before the window opened (assigned it once more): no
    // renewal and no expiry for the first completion, ever.
    let again = app
        .assign_persisted(&org, &flow, "cy@example.com", json!({}))
        .await;
    sqlx::query("UPDATE assignments SET assigned_at = $2 WHERE id = $1")
        .bind(AssignmentId::parse(&again).expect("id"))
        .bind(now - chrono::Duration::days(19))
        .execute(&app.db)
        .await
        .expect("assigned_at");
    complete(&app, &org, &flow, &again, &days_ago(18)).await;

    assert_eq!(scan(&app, &first, &days_ago(16)).await, (0, 0));
    assert_eq!(scan(&app, &first, &days_ago(15)).await, (3, 0));
    let renewals = [
        renewal_of(&app, &org, &ids[0]).await,
        renewal_of(&app, &org, &ids[1]).await,
    ];
    assert!(events(&app, &ids[2], "flow.expiring").await.is_empty());
    // ann completes her renewal in time; bob a second after the expiry.
    let ann = renewals[0]["assignmentId"].as_str().expect("id").to_owned();
    let bob = renewals[1]["assignmentId"].as_str().expect("id").to_owned();
    complete(&app, &org, &flow, &ann, &days_ago(12)).await;
    let late =
        (at(expires_at.as_str().expect("expiresAt")) + chrono::Duration::seconds(1)).to_rfc3339();
    complete(&app, &org, &flow, &bob, &late).await;

    // At the expiry: ann's is settled without an event, bob's expires, cy's first was settled
    // when the window opened.
    let (_, settled) = scan(&app, &first, expires_at.as_str().expect("expiresAt")).await;
    assert_eq!(settled, 2);
    assert!(events(&app, &ids[0], "flow.expired").await.is_empty());
    assert_eq!(events(&app, &ids[1], "flow.expired").await.len(), 1);
    assert!(events(&app, &ids[2], "flow.expired").await.is_empty());
    let old = app
        .get(&org, &format!("/v1/assignments/{}", ids[0]))
        .await
        .body;
    assert!(old.get("expiredAt").is_none(), "{old}");
    assert_eq!(old["renewedBy"], json!(ann));
    let old = app
        .get(&org, &format!("/v1/assignments/{}", ids[2]))
        .await
        .body;
    assert!(old.get("expiredAt").is_none(), "{old}");
    assert!(old.get("renewedBy").is_none(), "{old}");
    // The renewal completed in time has a cycle of its own.
    let renewed = app.get(&org, &format!("/v1/assignments/{ann}")).await.body;
    assert_eq!(renewed["renewalOf"], json!(ids[0]));
    assert!(renewed["expiresAt"].is_string(), "{renewed}");
    // Later scans never expire ann's first completion.
    scan(&app, &first, &now.to_rfc3339()).await;
    assert!(events(&app, &ids[0], "flow.expired").await.is_empty());
    assert!(events(&app, &ids[2], "flow.expired").await.is_empty());
    assert_eq!(events(&app, &ids[1], "flow.expired").await.len(), 1);
}

#[tokio::test]
async fn deactivated_users_get_no_renewal_and_cancelled_renewals_are_not_made_again() {
    let app = TestApp::spawn().await;
    let org = app.create_org(Tier::Standard).await;
    let flow = app.create_flow(&org, "Safety", &[10]).await;
    let set = edit_flow(
        &app,
        &org,
        &flow,
        json!({ "validFor": { "months": 1 }, "renewBeforeDays": 7 }),
    )
    .await;
    assert_eq!(set.status, 200, "{:?}", set.body);
    let gone = scim_user(&app, &org, "gone@example.com").await;
    let stays = scim_user(&app, &org, "stays@example.com").await;
    assert!(!stays.is_empty());
    let mut ids = Vec::new();
    for email in ["gone@example.com", "stays@example.com"] {
        let done = completed_at(
            &app,
            &org,
            &flow,
            email,
            "2026-03-01T00:00:00Z",
            "2026-03-10T12:00:00Z",
        )
        .await;
        assert_eq!(done["expiresAt"], json!("2026-04-10T12:00:00.000Z"));
        ids.push(done["assignmentId"].as_str().expect("id").to_owned());
    }
    // Deactivated meanwhile: no renewal, no `flow.expiring`.
    deactivate(&app, &org, &gone).await;
    let first = publisher(&app).await;
    assert_eq!(scan(&app, &first, "2026-04-03T12:00:00Z").await, (1, 0));
    assert!(events(&app, &ids[0], "flow.expiring").await.is_empty());
    assert_eq!(events(&app, &ids[1], "flow.expiring").await.len(), 1);
    let renewal = renewal_of(&app, &org, &ids[1]).await;
    let renewal_id = renewal["assignmentId"].as_str().expect("id").to_owned();
    let status: i64 = sqlx::query_scalar("SELECT count(*) FROM assignments WHERE user_id = (SELECT id FROM users WHERE email = 'gone@example.com')")
        .fetch_one(&app.db)
        .await
        .expect("count");
    assert_eq!(status, 1, "no renewal for the deactivated user");

    // The renewal is cancelled: not made again; the old completion expires.
    let cancelled = app
        .post(
            &org,
            &format!("/v1/assignments/{renewal_id}/cancel"),
            &json!({ "reason": "left the team" }),
        )
        .await;
    assert_eq!(cancelled.status, 200, "{:?}", cancelled.body);
    app.wait_for_status(&org, &renewal_id, "cancelled").await;
    assert_eq!(scan(&app, &first, "2026-04-05T12:00:00Z").await, (0, 0));
    assert_eq!(scan(&app, &first, "2026-04-10T12:00:00Z").await, (0, 2));
    assert_eq!(events(&app, &ids[1], "flow.expired").await.len(), 1);
    // The deactivated user's lapse is recorded without an event.
    assert!(events(&app, &ids[0], "flow.expired").await.is_empty());
    let lapsed = app
        .get(&org, &format!("/v1/assignments/{}", ids[0]))
        .await
        .body;
    assert_eq!(lapsed["expiredAt"], json!("2026-04-10T12:00:00.000Z"));
    assert!(lapsed.get("renewedBy").is_none(), "{lapsed}");
    assert_eq!(
        app.events_of(&renewal_id).await,
        ["flow.assigned", "flow.cancelled"]
    );
    assert_eq!(scan(&app, &first, "2026-05-10T12:00:00Z").await, (0, 0));
}
