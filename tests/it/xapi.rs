//! The xAPI statement resource at `/xapi` (issue 38, docs/xapi.md): versions, PUT/POST/GET by
//! id, conflicts, validation (cases written after the ADL LRS conformance suite's statement data,
//! `adlnet/lrs-conformance-test-suite`, test/v1_0_3/configs and test/v2_0/configs), the mapping of
//! verbs onto module and assignment status with score, success and duration, unmatched
//! statements, and authentication.

use std::time::Duration;

use base64::Engine;
use flow_common::db::orgs::Tier;
use flow_tests::{TestApp, TestOrg, TestResponse};
use serde_json::{Value, json};

const COMPLETED: &str = "http://adlnet.gov/expapi/verbs/completed";
const COURSE: &str = "https://courses.example.com/security";
const PHISHING: &str = "https://courses.example.com/security/phishing";
const PASSWORDS: &str = "https://courses.example.com/security/passwords";
const DEVICES: &str = "https://courses.example.com/security/devices";

/// Sends `method path` with `authorization` and the version header `version` (none: left out).
async fn send(
    app: &TestApp,
    method: reqwest::Method,
    path: &str,
    authorization: &str,
    version: Option<&str>,
    body: Option<&Value>,
) -> TestResponse {
    let mut headers = vec![("authorization", authorization)];
    if let Some(version) = version {
        headers.push(("x-experience-api-version", version));
    }
    app.request(method, path, None, body, &headers).await
}

fn bearer(org: &TestOrg) -> String {
    format!("Bearer {}", org.key)
}

fn basic(user: &str, password: &str) -> String {
    let pair = format!("{user}:{password}");
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(pair)
    )
}

async fn post(app: &TestApp, org: &TestOrg, body: &Value) -> TestResponse {
    send(
        app,
        reqwest::Method::POST,
        "/xapi/statements",
        &bearer(org),
        Some("1.0.3"),
        Some(body),
    )
    .await
}

async fn put(app: &TestApp, org: &TestOrg, id: &str, body: &Value) -> TestResponse {
    send(
        app,
        reqwest::Method::PUT,
        &format!("/xapi/statements?statementId={id}"),
        &bearer(org),
        Some("2.0"),
        Some(body),
    )
    .await
}

async fn get(app: &TestApp, org: &TestOrg, id: &str) -> TestResponse {
    send(
        app,
        reqwest::Method::GET,
        &format!("/xapi/statements?statementId={id}"),
        &bearer(org),
        Some("1.0.3"),
        None,
    )
    .await
}

async fn stored_count(app: &TestApp) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM xapi_statements")
        .fetch_one(&app.db)
        .await
        .unwrap()
}

/// A valid statement: `mbox` completed `activity`.
fn statement(email: &str, verb: &str, activity: &str) -> Value {
    json!({
        "actor": { "objectType": "Agent", "name": "Learner", "mbox": format!("mailto:{email}") },
        "verb": { "id": verb, "display": { "en-US": "did" } },
        "object": { "objectType": "Activity", "id": activity },
    })
}

fn verb(name: &str) -> String {
    format!("http://adlnet.gov/expapi/verbs/{name}")
}

#[tokio::test]
async fn about_names_the_versions_and_statements_need_a_supported_version_header() {
    let app = TestApp::spawn().await;
    let org = app.create_org(Tier::Standard).await;
    let about = app
        .request(reqwest::Method::GET, "/xapi/about", None, None, &[])
        .await;
    assert_eq!(about.status, 200);
    assert_eq!(about.body, json!({ "version": ["1.0.3", "2.0.0"] }));
    let body = statement("ann@example.com", COMPLETED, PHISHING);
    for version in [None, Some("1.0.0"), Some("0.95"), Some("3.0")] {
        let response = send(
            &app,
            reqwest::Method::POST,
            "/xapi/statements",
            &bearer(&org),
            version,
            Some(&body),
        )
        .await;
        assert_eq!(response.status, 400, "{version:?}: {:?}", response.body);
        assert!(
            response.body["message"]
                .as_str()
                .unwrap()
                .contains("X-Experience-API-Version"),
            "{:?}",
            response.body
        );
    }
    assert_eq!(stored_count(&app).await, 0);
    for (version, answered) in [("1.0.3", "1.0.3"), ("2.0", "2.0.0"), ("2.0.0", "2.0.0")] {
        let response = send(
            &app,
            reqwest::Method::POST,
            "/xapi/statements",
            &bearer(&org),
            Some(version),
            Some(&body),
        )
        .await;
        assert_eq!(response.status, 200, "{version}: {:?}", response.body);
        assert_eq!(response.header("x-experience-api-version"), Some(answered));
    }
}

#[tokio::test]
async fn statements_are_put_posted_and_read_back_by_id_with_conflicts_refused() {
    let app = TestApp::spawn().await;
    let org = app.create_org(Tier::Standard).await;
    let id = "aa97b177-9383-4934-8543-0f91a7a02836";
    let body = statement("ann@example.com", COMPLETED, PHISHING);

    let response = put(&app, &org, id, &body).await;
    assert_eq!(response.status, 204, "{:?}", response.body);
    let read = get(&app, &org, id).await;
    assert_eq!(read.status, 200, "{:?}", read.body);
    assert_eq!(read.body["id"], json!(id));
    assert_eq!(read.body["actor"], body["actor"]);
    assert_eq!(read.body["verb"], body["verb"]);
    assert!(read.body["stored"].is_string(), "{:?}", read.body);

    // The same statement again changes nothing; other content under the id is a conflict.
    assert_eq!(put(&app, &org, id, &body).await.status, 204);
    let mut with_id = body.clone();
    with_id["id"] = json!(id);
    let again = post(&app, &org, &with_id).await;
    assert_eq!(again.status, 200, "{:?}", again.body);
    assert_eq!(again.body, json!([id]));
    let other = statement("bob@example.com", COMPLETED, PHISHING);
    let conflict = put(&app, &org, id, &other).await;
    assert_eq!(conflict.status, 409, "{:?}", conflict.body);
    assert_eq!(get(&app, &org, id).await.body["actor"], body["actor"]);
    // An id in the body that is not the statementId.
    let mut mismatched = other.clone();
    mismatched["id"] = json!("bb97b177-9383-4934-8543-0f91a7a02836");
    assert_eq!(put(&app, &org, id, &mismatched).await.status, 400);
    assert_eq!(
        put(&app, &org, "not-a-uuid", &other).await.status,
        400,
        "statementId must be a UUID"
    );
    assert_eq!(stored_count(&app).await, 1);

    // POST an array: ids given where missing (v4), in order.
    let given = "cc97b177-9383-4934-8543-0f91a7a02836";
    let mut first = other.clone();
    first["id"] = json!(given);
    let response = post(&app, &org, &json!([first, other.clone()])).await;
    assert_eq!(response.status, 200, "{:?}", response.body);
    let ids = response.body.as_array().unwrap();
    assert_eq!(ids.len(), 2);
    assert_eq!(ids[0], json!(given));
    let generated = uuid::Uuid::parse_str(ids[1].as_str().unwrap()).unwrap();
    assert_eq!(generated.get_version_num(), 4);
    assert_eq!(
        get(&app, &org, &generated.to_string()).await.body["id"],
        json!(generated.to_string())
    );
    assert_eq!(stored_count(&app).await, 3);

    // Duplicate ids in one batch: 400, nothing stored; a conflict in a batch: 409, nothing stored.
    let fresh = "dd97b177-9383-4934-8543-0f91a7a02836";
    let mut duplicate = other.clone();
    duplicate["id"] = json!(fresh);
    let response = post(&app, &org, &json!([duplicate.clone(), duplicate.clone()])).await;
    assert_eq!(response.status, 400, "{:?}", response.body);
    let mut clash = other.clone();
    clash["id"] = json!(id);
    let response = post(&app, &org, &json!([duplicate, clash])).await;
    assert_eq!(response.status, 409, "{:?}", response.body);
    assert_eq!(get(&app, &org, fresh).await.status, 404);
    assert_eq!(stored_count(&app).await, 3);

    // GET needs statementId; other queries are not supported.
    let response = send(
        &app,
        reqwest::Method::GET,
        "/xapi/statements?verb=http://adlnet.gov/expapi/verbs/completed",
        &bearer(&org),
        Some("1.0.3"),
        None,
    )
    .await;
    assert_eq!(response.status, 400);
    assert_eq!(
        get(&app, &org, "ee97b177-9383-4934-8543-0f91a7a02836")
            .await
            .status,
        404
    );
}

/// Invalid statements after the ADL suite's cases: each is refused with 400 and nothing stored.
fn invalid_cases() -> Vec<(&'static str, Value)> {
    let base = statement("ann@example.com", COMPLETED, PHISHING);
    let with = |pointer: &str, value: Value| {
        let mut statement = base.clone();
        *statement.pointer_mut(pointer).expect(pointer) = value;
        statement
    };
    let adding = |field: &str, value: Value| {
        let mut statement = base.clone();
        statement[field] = value;
        statement
    };
    let result = |result: Value| adding("result", result);
    let context = |context: Value| adding("context", context);
    vec![
        (
            "actor objectType numeric",
            with("/actor/objectType", json!(123)),
        ),
        (
            "actor objectType object",
            with("/actor/objectType", json!({ "key": "value" })),
        ),
        ("actor name numeric", with("/actor/name", json!(123))),
        (
            "mbox not mailto",
            with("/actor/mbox", json!("http://should.fail.com")),
        ),
        (
            "mbox without address",
            with("/actor/mbox", json!("mailto:should.fail.com")),
        ),
        (
            "two identifiers",
            with(
                "/actor",
                json!({ "mbox": "mailto:a@example.com", "openid": "http://a.example.com" }),
            ),
        ),
        ("no identifier", with("/actor", json!({ "name": "nobody" }))),
        (
            "mbox_sha1sum not hex",
            with("/actor", json!({ "mbox_sha1sum": "xyz" })),
        ),
        (
            "account homePage not IRI",
            with(
                "/actor",
                json!({ "account": { "homePage": "ab=c://should.fail.com", "name": "a" } }),
            ),
        ),
        (
            "account name object",
            with(
                "/actor",
                json!({ "account": { "homePage": "http://example.com", "name": { "key": "value" } } }),
            ),
        ),
        (
            "anonymous group without member",
            with("/actor", json!({ "objectType": "Group" })),
        ),
        (
            "verb missing id",
            with("/verb", json!({ "display": { "en-US": "did" } })),
        ),
        (
            "verb id not IRI",
            with("/verb/id", json!("ab=c://should.fail.com")),
        ),
        (
            "verb display string",
            with("/verb/display", json!("a12345 attended")),
        ),
        (
            "verb display numeric",
            with("/verb/display", json!({ "en-US": 12345 })),
        ),
        ("object id not IRI", with("/object/id", json!("not an iri"))),
        (
            "object without id",
            with("/object", json!({ "objectType": "Activity" })),
        ),
        (
            "object objectType unknown",
            with("/object/objectType", json!("Thing")),
        ),
        (
            "statement id too many digits",
            adding("id", json!("AA97B177-9383-4934-8543-0F91A7A028368")),
        ),
        (
            "statement id non hex",
            adding("id", json!("MA97B177-9383-4934-8543-0F91A7A02836")),
        ),
        ("statement id numeric", adding("id", json!(12345))),
        ("unknown top-level property", adding("extra", json!("nope"))),
        (
            "unknown actor property",
            with(
                "/actor",
                json!({ "mbox": "mailto:ann@example.com", "extra": "nope" }),
            ),
        ),
        (
            "timestamp invalid string",
            adding("timestamp", json!("should fail")),
        ),
        (
            "timestamp invalid date",
            adding("timestamp", json!("01/011/2015")),
        ),
        (
            "timestamp -00:00 offset",
            adding("timestamp", json!("2008-09-15T15:53:00.601-00:00")),
        ),
        ("score numeric", result(json!({ "score": 12345 }))),
        (
            "scaled above 1",
            result(json!({ "score": { "scaled": 1.01 } })),
        ),
        (
            "scaled below -1",
            result(json!({ "score": { "scaled": -1.00001 } })),
        ),
        (
            "raw above max",
            result(json!({ "score": { "raw": 11, "min": 0, "max": 10 } })),
        ),
        (
            "min above max",
            result(json!({ "score": { "min": 10, "max": 1 } })),
        ),
        ("success string", result(json!({ "success": "yes" }))),
        (
            "duration invalid",
            result(json!({ "duration": "PA1H0M0S" })),
        ),
        ("duration numeric", result(json!({ "duration": 12345 }))),
        (
            "registration not UUID",
            context(json!({ "registration": "MA97B177-9383-4934-8543-0F91A7A02836" })),
        ),
        (
            "revision on an agent object",
            json!({
                "actor": { "mbox": "mailto:ann@example.com" },
                "verb": { "id": COMPLETED },
                "object": { "objectType": "Agent", "mbox": "mailto:bob@example.com" },
                "context": { "revision": "1" },
            }),
        ),
        (
            "nested SubStatement",
            with(
                "/object",
                json!({ "objectType": "SubStatement",
                        "actor": { "mbox": "mailto:a@example.com" }, "verb": { "id": COMPLETED },
                        "object": { "objectType": "SubStatement",
                                    "actor": { "mbox": "mailto:a@example.com" },
                                    "verb": { "id": COMPLETED }, "object": { "id": PHISHING } } }),
            ),
        ),
        (
            "extensions key not IRI",
            result(json!({ "extensions": { "notiri": 1 } })),
        ),
        (
            "language map bad tag",
            with("/verb/display", json!({ "not a tag!": "x" })),
        ),
        ("missing verb", {
            let mut statement = base.clone();
            statement.as_object_mut().unwrap().remove("verb");
            statement
        }),
        ("not an object", json!("a statement")),
    ]
}

/// Valid statements after the ADL suite's cases: each is stored.
fn valid_cases() -> Vec<(&'static str, Value)> {
    let base = statement("ann@example.com", COMPLETED, PHISHING);
    let adding = |field: &str, value: Value| {
        let mut statement = base.clone();
        statement[field] = value;
        statement
    };
    vec![
        (
            "minimal",
            json!({ "actor": { "mbox": "mailto:a@example.com" }, "verb": { "id": COMPLETED }, "object": { "id": PHISHING } }),
        ),
        (
            "account actor",
            json!({ "actor": { "account": { "homePage": "http://www.example.com", "name": "xAPI account name" } }, "verb": { "id": COMPLETED }, "object": { "id": PHISHING } }),
        ),
        (
            "openid actor",
            json!({ "actor": { "openid": "http://openid.example.org/12345" }, "verb": { "id": COMPLETED }, "object": { "id": PHISHING } }),
        ),
        (
            "mbox_sha1sum actor",
            json!({ "actor": { "mbox_sha1sum": "cd9b00a5611f94eaa7b1661edab976068e364975" }, "verb": { "id": COMPLETED }, "object": { "id": PHISHING } }),
        ),
        (
            "identified group with members",
            json!({ "actor": { "objectType": "Group", "mbox": "mailto:team@example.com", "member": [{ "mbox": "mailto:a@example.com" }] }, "verb": { "id": COMPLETED }, "object": { "id": PHISHING } }),
        ),
        (
            "scaled 1.0 and raw within min and max",
            adding(
                "result",
                json!({ "score": { "scaled": 1.0, "raw": 100.6767676, "min": 0, "max": 200 }, "success": true, "completion": true, "response": "ok" }),
            ),
        ),
        (
            "scaled -1.0000",
            adding("result", json!({ "score": { "scaled": -1.0 } })),
        ),
        (
            "duration PT4H35M59.14S",
            adding("result", json!({ "duration": "PT4H35M59.14S" })),
        ),
        (
            "duration PT16559.14S",
            adding("result", json!({ "duration": "PT16559.14S" })),
        ),
        (
            "timestamp with offset",
            adding("timestamp", json!("2013-05-18T05:32:34.804+00:00")),
        ),
        (
            "context with registration and activities",
            adding(
                "context",
                json!({ "registration": "ec531277-b57b-4c15-8d91-d292c5b2b8f7", "contextActivities": { "parent": { "id": COURSE }, "grouping": [{ "id": COURSE }] }, "revision": "2", "platform": "Example LMS", "language": "en-US", "extensions": { "http://example.com/ext": { "x": 1 } } }),
            ),
        ),
        (
            "statement ref object",
            json!({ "actor": { "mbox": "mailto:a@example.com" }, "verb": { "id": COMPLETED }, "object": { "objectType": "StatementRef", "id": "aa97b177-9383-4934-8543-0f91a7a02836" } }),
        ),
        (
            "sub-statement object",
            json!({ "actor": { "mbox": "mailto:a@example.com" }, "verb": { "id": COMPLETED }, "object": { "objectType": "SubStatement", "actor": { "mbox": "mailto:b@example.com" }, "verb": { "id": COMPLETED }, "object": { "id": PHISHING } } }),
        ),
        (
            "interaction activity",
            json!({ "actor": { "mbox": "mailto:a@example.com" }, "verb": { "id": verb("answered") }, "object": { "id": PHISHING, "definition": { "name": { "en-US": "Q1" }, "type": "http://adlnet.gov/expapi/activities/cmi.interaction", "interactionType": "choice", "correctResponsesPattern": ["golf"], "choices": [{ "id": "golf", "description": { "en-US": "Golf" } }, { "id": "tetris", "description": { "en-US": "Tetris" } }] } } }),
        ),
        ("version 1.0.3", adding("version", json!("1.0.3"))),
    ]
}

#[tokio::test]
async fn statements_are_validated_as_the_adl_conformance_cases_require() {
    let app = TestApp::spawn().await;
    let org = app.create_org(Tier::Enterprise).await;
    let invalid = invalid_cases();
    assert!(invalid.len() >= 25);
    for (name, body) in &invalid {
        let response = post(&app, &org, body).await;
        assert_eq!(response.status, 400, "{name}: {:?}", response.body);
        assert!(response.body["message"].is_string(), "{name}");
    }
    assert_eq!(
        stored_count(&app).await,
        0,
        "nothing of a malformed statement is stored"
    );
    // One malformed statement refuses the whole batch, naming it.
    let batch = json!([
        statement("ann@example.com", COMPLETED, PHISHING),
        invalid[0].1.clone()
    ]);
    let response = post(&app, &org, &batch).await;
    assert_eq!(response.status, 400);
    assert!(
        response.body["message"]
            .as_str()
            .unwrap()
            .starts_with("statements[1]"),
        "{:?}",
        response.body
    );
    assert_eq!(stored_count(&app).await, 0);
    let valid = valid_cases();
    assert!(valid.len() >= 10);
    for (name, body) in &valid {
        let response = post(&app, &org, body).await;
        assert_eq!(response.status, 200, "{name}: {:?}", response.body);
    }
    assert_eq!(stored_count(&app).await, valid.len() as i64);
}

/// A flow with its own activity and three modules with activities, assigned to ann; returns the
/// org, the flow, its module ids and the assignment.
async fn course(app: &TestApp) -> (TestOrg, String, Vec<String>, String) {
    let org = app.create_org(Tier::Standard).await;
    app.create_users(&org, &["ann@example.com"]).await;
    let response = app
        .post(
            &org,
            "/v1/flows",
            &json!({ "name": "Security", "activityId": COURSE, "modules": [
                { "name": "Phishing", "estimatedMinutes": 10, "activityId": PHISHING },
                { "name": "Passwords", "estimatedMinutes": 10, "activityId": PASSWORDS },
                { "name": "Devices", "estimatedMinutes": 10, "activityId": DEVICES },
            ] }),
        )
        .await;
    assert_eq!(response.status, 201, "{:?}", response.body);
    assert_eq!(response.body["activityId"], json!(COURSE));
    assert_eq!(response.body["modules"][1]["activityId"], json!(PASSWORDS));
    let flow = response.body["flowId"].as_str().unwrap().to_owned();
    let modules = app.module_ids(&org, &flow).await;
    let id = app
        .assign_persisted(&org, &flow, "ann@example.com", json!({}))
        .await;
    (org, flow, modules, id)
}

/// The assignment once its module `index` reads `status` (and `field`, when given, is set).
async fn module_reads(
    app: &TestApp,
    org: &TestOrg,
    id: &str,
    module: &str,
    status: &str,
    field: Option<&str>,
) -> Value {
    let path = format!("/v1/assignments/{id}");
    app.eventually(Duration::from_secs(10), "the module's progress", || async {
        let body = app.get(org, &path).await.body;
        let entry = body["moduleProgress"]
            .as_array()?
            .iter()
            .find(|entry| entry["moduleId"] == json!(module))?
            .clone();
        (entry["status"] == json!(status) && field.is_none_or(|field| !entry[field].is_null()))
            .then_some(entry)
    })
    .await
}

#[tokio::test]
async fn verbs_map_onto_module_and_assignment_status_with_results_in_the_report() {
    let app = TestApp::spawn().await;
    let (org, flow, modules, id) = course(&app).await;
    let ann = "ann@example.com";

    // launched → module in progress (and the assignment with it).
    let response = post(&app, &org, &statement(ann, &verb("launched"), PHISHING)).await;
    assert_eq!(response.status, 200, "{:?}", response.body);
    assert_eq!(response.header("x-flow-unmatched-statements"), Some("0"));
    module_reads(&app, &org, &id, &modules[0], "in_progress", None).await;
    app.wait_for_status(&org, &id, "in_progress").await;

    // failed → stays in progress, the result kept.
    let mut failed = statement(ann, &verb("failed"), PASSWORDS);
    failed["result"] = json!({ "score": { "scaled": 0.4 }, "success": false, "duration": "PT5M" });
    assert_eq!(post(&app, &org, &failed).await.status, 200);
    let entry = module_reads(&app, &org, &id, &modules[1], "in_progress", Some("score")).await;
    assert_eq!(entry["score"], json!(0.4));
    assert_eq!(entry["success"], json!(false));
    assert_eq!(entry["durationSeconds"], json!(300));

    // passed → completed, with the new result; completed (cmi5's registration names the
    // assignment) → completed.
    let mut passed = statement(ann, &verb("passed"), PASSWORDS);
    passed["result"] = json!({ "score": { "scaled": 0.9, "raw": 9, "min": 0, "max": 10 },
                               "success": true, "duration": "PT10M30S" });
    passed["timestamp"] = json!(chrono::Utc::now().to_rfc3339());
    let registration = flow_domain::ids::AssignmentId::parse(&id).unwrap().0;
    let mut completed = statement(ann, COMPLETED, PHISHING);
    completed["context"] = json!({ "registration": registration.to_string() });
    let response = post(&app, &org, &json!([passed, completed])).await;
    assert_eq!(response.status, 200, "{:?}", response.body);
    let entry = module_reads(&app, &org, &id, &modules[1], "completed", None).await;
    assert_eq!(entry["score"], json!(0.9));
    assert_eq!(entry["success"], json!(true));
    assert_eq!(entry["durationSeconds"], json!(630));
    module_reads(&app, &org, &id, &modules[0], "completed", None).await;

    // Unmatched: an activity no module has, a person with no assignment, a verb Flow does not
    // map: stored and counted, not errors.
    let response = post(
        &app,
        &org,
        &json!([
            statement(ann, COMPLETED, "https://courses.example.com/other"),
            statement("nobody@example.com", COMPLETED, DEVICES),
            statement(ann, &verb("experienced"), DEVICES),
        ]),
    )
    .await;
    assert_eq!(response.status, 200, "{:?}", response.body);
    assert_eq!(response.header("x-flow-unmatched-statements"), Some("3"));
    let unmatched: i64 =
        sqlx::query_scalar("SELECT count(*) FROM xapi_statements WHERE NOT matched")
            .fetch_one(&app.db)
            .await
            .unwrap();
    assert_eq!(unmatched, 3);
    assert_eq!(
        app.get(&org, &format!("/v1/assignments/{id}")).await.body["status"],
        json!("in_progress"),
        "the third module is still open"
    );

    // satisfied on the flow's own activity → the assignment completed.
    let response = post(&app, &org, &statement(ann, &verb("satisfied"), COURSE)).await;
    assert_eq!(response.status, 200, "{:?}", response.body);
    app.wait_for_status(&org, &id, "completed").await;
    assert_eq!(
        app.events_of(&id).await,
        vec!["flow.assigned", "flow.started", "flow.completed"]
    );

    let report = app
        .post(
            &org,
            "/v1/flows/report",
            &json!({ "flowId": flow, "detailed": true }),
        )
        .await;
    assert_eq!(report.status, 200, "{:?}", report.body);
    let progress = &report.body["assignments"][0]["moduleProgress"];
    assert_eq!(progress[1]["score"], json!(0.9));
    assert_eq!(progress[1]["success"], json!(true));
    assert_eq!(progress[1]["durationSeconds"], json!(630));
    assert_eq!(progress[2]["status"], json!("completed"));
}

#[tokio::test]
async fn activity_ids_of_a_flow_are_checked() {
    let app = TestApp::spawn().await;
    let (org, _, _, _) = course(&app).await;
    let create = |body: Value| {
        let app = &app;
        let org = &org;
        async move { app.post(org, "/v1/flows", &body).await }
    };
    let response = create(json!({ "name": "Bad", "modules": [
        { "name": "A", "activityId": "not an iri" } ] }))
    .await;
    assert_eq!(response.status, 400, "{:?}", response.body);
    assert!(
        response.body["message"]
            .as_str()
            .unwrap()
            .contains("modules[0].activityId")
    );
    let response = create(json!({ "name": "Twice", "modules": [
        { "name": "A", "activityId": PHISHING }, { "name": "B", "activityId": PHISHING } ] }))
    .await;
    assert_eq!(response.status, 400, "{:?}", response.body);
    let response = create(json!({ "name": "Same course", "activityId": COURSE,
                                  "modules": [{ "name": "A" }] }))
    .await;
    assert_eq!(response.status, 409, "{:?}", response.body);
    // A module's activity may recur in another flow.
    let response = create(json!({ "name": "Refresher", "modules": [
        { "name": "A", "activityId": PHISHING } ] }))
    .await;
    assert_eq!(response.status, 201, "{:?}", response.body);
}

#[tokio::test]
async fn basic_and_bearer_keys_authenticate_and_another_orgs_statement_is_not_found() {
    let app = TestApp::spawn().await;
    let org = app.create_org(Tier::Standard).await;
    let other = app.create_org(Tier::Standard).await;
    let body = statement("ann@example.com", COMPLETED, PHISHING);
    let post_as = |authorization: String| {
        let app = &app;
        let body = &body;
        async move {
            send(
                app,
                reqwest::Method::POST,
                "/xapi/statements",
                &authorization,
                Some("1.0.3"),
                Some(body),
            )
            .await
        }
    };
    let as_user = post_as(basic(&org.key, "")).await;
    assert_eq!(as_user.status, 200, "{:?}", as_user.body);
    let as_password = post_as(basic("lms", &org.key)).await;
    assert_eq!(as_password.status, 200, "{:?}", as_password.body);
    assert_eq!(post_as(bearer(&org)).await.status, 200);
    assert_eq!(post_as(basic("lms", "fsk_wrong")).await.status, 401);
    assert_eq!(post_as("Basic !!!".into()).await.status, 401);
    let id = as_user.body[0].as_str().unwrap().to_owned();
    let response = send(
        &app,
        reqwest::Method::GET,
        &format!("/xapi/statements?statementId={id}"),
        &basic("lms", &org.key),
        Some("2.0"),
        None,
    )
    .await;
    assert_eq!(response.status, 200, "{:?}", response.body);
    assert_eq!(get(&app, &other, &id).await.status, 404);
    let missing = app
        .request(
            reqwest::Method::GET,
            &format!("/xapi/statements?statementId={id}"),
            None,
            None,
            &[("x-experience-api-version", "1.0.3")],
        )
        .await;
    assert_eq!(missing.status, 401);
}

#[tokio::test]
async fn activity_ids_are_changed_after_creation_and_statements_follow_them() {
    let app = TestApp::spawn().await;
    let (org, flow, modules, id) = course(&app).await;
    let patch = |path: String, body: Value| {
        let app = &app;
        let org = &org;
        async move {
            app.request(
                reqwest::Method::PATCH,
                &path,
                Some(&org.key),
                Some(&body),
                &[],
            )
            .await
        }
    };
    let path = format!("/v1/flows/{flow}");

    // Two modules trade their activities in one edit.
    let swapped = patch(
        path.clone(),
        json!({ "modules": [
            { "moduleId": modules[0], "activityId": PASSWORDS },
            { "moduleId": modules[1], "activityId": PHISHING },
        ] }),
    )
    .await;
    assert_eq!(swapped.status, 200, "{:?}", swapped.body);
    assert_eq!(swapped.body["modules"][0]["activityId"], json!(PASSWORDS));
    assert_eq!(swapped.body["modules"][1]["activityId"], json!(PHISHING));
    assert_eq!(swapped.body["modules"][2]["activityId"], json!(DEVICES));

    // Refusals change nothing.
    let other_flow = app
        .post(
            &org,
            "/v1/flows",
            &json!({ "name": "Other", "activityId": "https://courses.example.com/other",
                     "modules": [{ "name": "Only" }] }),
        )
        .await;
    assert_eq!(other_flow.status, 201, "{:?}", other_flow.body);
    let other_module = other_flow.body["modules"][0]["moduleId"].clone();
    for (body, status, says) in [
        (
            json!({ "modules": [{ "moduleId": modules[2], "activityId": PASSWORDS }] }),
            400,
            "repeats the activity id of another module",
        ),
        (
            json!({ "modules": [
                { "moduleId": modules[2], "activityId": null },
                { "moduleId": modules[2], "activityId": null },
            ] }),
            400,
            "modules[1].moduleId names a module listed before",
        ),
        (
            json!({ "activityId": PHISHING }),
            400,
            "repeats the activity id of one of the flow's modules",
        ),
        (
            json!({ "activityId": "https://courses.example.com/other" }),
            409,
            "another flow of the organization",
        ),
        (
            json!({ "modules": [{ "moduleId": other_module, "activityId": DEVICES }] }),
            404,
            "modules[0].moduleId is not a module of this flow",
        ),
        (
            json!({ "modules": [{ "moduleId": modules[2], "activityId": "not an iri" }] }),
            400,
            "modules[0].activityId must be an absolute IRI",
        ),
        (json!({ "modules": [] }), 400, "modules must list 1 to 500"),
    ] {
        let refused = patch(path.clone(), body.clone()).await;
        assert_eq!(refused.status, status, "{body}: {:?}", refused.body);
        let message = refused.body["message"].as_str().unwrap_or_default();
        assert!(message.contains(says), "{body}: {message}");
    }
    let unchanged = app.get(&org, &path).await;
    assert_eq!(unchanged.body["activityId"], json!(COURSE));
    assert_eq!(unchanged.body["modules"][2]["activityId"], json!(DEVICES));

    // A new activity for a module, and the flow's own removed.
    const DEVICES_V2: &str = "https://courses.example.com/security/devices-v2";
    let changed = patch(
        path.clone(),
        json!({ "activityId": null,
                "modules": [{ "moduleId": modules[2], "activityId": DEVICES_V2 }] }),
    )
    .await;
    assert_eq!(changed.status, 200, "{:?}", changed.body);
    assert!(changed.body["activityId"].is_null(), "{:?}", changed.body);
    assert_eq!(changed.body["modules"][2]["activityId"], json!(DEVICES_V2));

    // Statements follow the new activities: the old one matches nothing, the new one the module.
    let ann = "ann@example.com";
    let old = post(&app, &org, &statement(ann, COMPLETED, DEVICES)).await;
    assert_eq!(old.status, 200, "{:?}", old.body);
    assert_eq!(old.header("x-flow-unmatched-statements"), Some("1"));
    let new = post(&app, &org, &statement(ann, COMPLETED, DEVICES_V2)).await;
    assert_eq!(new.status, 200, "{:?}", new.body);
    assert_eq!(new.header("x-flow-unmatched-statements"), Some("0"));
    module_reads(&app, &org, &id, &modules[2], "completed", None).await;
    // PASSWORDS now names the first module.
    let first = post(&app, &org, &statement(ann, COMPLETED, PASSWORDS)).await;
    assert_eq!(first.header("x-flow-unmatched-statements"), Some("0"));
    module_reads(&app, &org, &id, &modules[0], "completed", None).await;
}
