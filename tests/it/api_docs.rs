//! The API reference people open: Swagger UI served by the API itself at /docs, the webhook
//! events in the OpenAPI document's `webhooks` section (from the types that build them), and the
//! shared headers documented on the operations; the whole examples of requests and responses.

use chrono::{TimeZone, Utc};
use flow_common::db::lifecycle::AssignmentSnapshot;
use flow_common::db::orgs::Tier;
use flow_domain::events::EventType;
use flow_domain::ids::{AssignmentId, FlowId, OrgId};
use flow_domain::{AssignmentStatus, Priority};
use flow_tests::TestApp;
use serde_json::{Value, json};

/// The API without workers: the documents it serves need none.
async fn api_only() -> TestApp {
    TestApp::spawn_with(flow_tests::TestOptions {
        assign_worker: false,
        ..Default::default()
    })
    .await
}

async fn text(app: &TestApp, path: &str) -> (u16, String, String) {
    let response = app
        .client
        .get(format!("{}{path}", app.base_url))
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    (status, content_type, response.text().await.unwrap())
}

async fn openapi(app: &TestApp) -> Value {
    let (status, _, body) = text(app, "/v1/openapi.json").await;
    assert_eq!(status, 200);
    serde_json::from_str(&body).unwrap()
}

#[tokio::test]
async fn docs_serves_swagger_ui_from_the_api_itself_over_its_openapi_document() {
    let app = api_only().await;
    let (status, content_type, page) = text(&app, "/docs/").await;
    assert_eq!(status, 200);
    assert!(content_type.starts_with("text/html"), "{content_type}");
    assert!(page.contains("swagger-ui"), "{page}");
    // Every script and stylesheet of the page is served here: no CDN at run time.
    for asset in [
        "swagger-ui-bundle.js",
        "swagger-ui.css",
        "swagger-initializer.js",
    ] {
        assert!(page.contains(asset), "the page loads {asset}");
        let (status, _, body) = text(&app, &format!("/docs/{asset}")).await;
        assert_eq!(status, 200, "{asset}");
        assert!(!body.is_empty(), "{asset}");
    }
    assert!(
        !page.contains("https://"),
        "no external address in the page"
    );
    let (_, _, initializer) = text(&app, "/docs/swagger-initializer.js").await;
    assert!(initializer.contains("/v1/openapi.json"), "{initializer}");
    assert!(
        initializer.contains(r#""validatorUrl": "none""#)
            || initializer.contains(r#""validatorUrl":"none""#),
        "the validator badge would send the document elsewhere: {initializer}"
    );
    let (status, _, _) = text(&app, "/docs").await;
    assert_eq!(status, 200, "/docs redirects to /docs/");
}

#[tokio::test]
async fn openapi_webhooks_describe_the_event_bodies_the_service_sends() {
    let app = api_only().await;
    let document = openapi(&app).await;
    let webhooks = document["webhooks"].as_object().expect("webhooks section");
    let mut names: Vec<&str> = webhooks.keys().map(String::as_str).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "flow.assigned",
            "flow.cancelled",
            "flow.completed",
            "flow.expired",
            "flow.expiring",
            "flow.overdue",
            "flow.reminder",
            "flow.started",
            "flow.updated",
            "webhook.test"
        ]
    );
    let completed = &webhooks["flow.completed"]["post"];
    assert_eq!(
        completed["requestBody"]["content"]["application/json"]["schema"]["$ref"],
        json!("#/components/schemas/AssignmentEvent")
    );
    let headers: Vec<&str> = completed["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|parameter| parameter["name"].as_str())
        .collect();
    assert_eq!(
        headers,
        ["webhook-id", "webhook-timestamp", "webhook-signature"]
    );

    // The documented properties are exactly those of a real event body.
    let schemas = &document["components"]["schemas"];
    let snapshot = AssignmentSnapshot {
        id: AssignmentId::new(),
        org_id: OrgId::new(),
        flow_id: FlowId::new(),
        flow_name: "Security Basics".into(),
        assignee_email: "ann@example.com".into(),
        status: AssignmentStatus::Completed,
        priority: Priority::High,
        due_at: None,
        assigned_at: Utc.with_ymd_and_hms(2026, 1, 2, 3, 4, 5).unwrap(),
        started_at: None,
        completed_at: None,
        due_changes: 0,
    };
    let event = snapshot.event(EventType::Completed, Utc::now(), None);
    let keys = |value: &Value| -> Vec<String> {
        let mut keys: Vec<String> = value.as_object().unwrap().keys().cloned().collect();
        keys.sort_unstable();
        keys
    };
    let body_schema = &schemas["AssignmentEvent"];
    assert_eq!(keys(&body_schema["properties"]), keys(&event.body));
    let data_schema = match &body_schema["properties"]["data"]["$ref"] {
        Value::String(reference) => &schemas[reference.rsplit('/').next().unwrap()],
        _ => &body_schema["properties"]["data"],
    };
    // `source` is there only on the `flow.assigned` event of a rule's assignment, `changed` only
    // on `flow.updated`, `reason` only on a `flow.cancelled` with one, `reminder` only on
    // `flow.reminder`, `expiry` only on `flow.expiring` and `flow.expired`.
    let mut event_keys = keys(&event.body["data"]);
    event_keys.extend(["source", "changed", "reason", "reminder", "expiry"].map(str::to_owned));
    event_keys.sort_unstable();
    assert_eq!(keys(&data_schema["properties"]), event_keys);
    let source = &data_schema["properties"]["source"];
    // A reference, possibly under `oneOf`/`allOf`.
    fn first_reference(value: &Value) -> Option<&str> {
        match value {
            Value::Object(map) => map
                .get("$ref")
                .and_then(Value::as_str)
                .or_else(|| map.values().find_map(first_reference)),
            Value::Array(items) => items.iter().find_map(first_reference),
            _ => None,
        }
    }
    let source_schema = match first_reference(source) {
        Some(reference) => &schemas[reference.rsplit('/').next().unwrap()],
        None => source,
    };
    assert!(
        source_schema["properties"]["enrollmentRuleId"].is_object(),
        "data.source.enrollmentRuleId is documented: {source_schema}"
    );
    assert!(
        !data_schema["required"]
            .as_array()
            .is_some_and(|required| required.iter().any(|name| name == "source")),
        "data.source is optional"
    );
    assert!(schemas["TestEvent"].is_object());

    // Every reference of the document resolves.
    fn references<'a>(value: &'a Value, found: &mut Vec<&'a str>) {
        match value {
            Value::Object(map) => {
                if let Some(Value::String(reference)) = map.get("$ref") {
                    found.push(reference);
                }
                map.values().for_each(|value| references(value, found));
            }
            Value::Array(items) => items.iter().for_each(|value| references(value, found)),
            _ => {}
        }
    }
    let mut found = Vec::new();
    references(&document, &mut found);
    for reference in found {
        let name = reference
            .strip_prefix("#/components/schemas/")
            .unwrap_or_else(|| panic!("{reference}"));
        assert!(schemas[name].is_object(), "{reference} is not defined");
    }
}

#[tokio::test]
async fn rate_limit_retry_after_and_request_id_headers_are_documented() {
    let app = api_only().await;
    let document = openapi(&app).await;
    let assign = &document["paths"]["/v1/flows/assign"]["post"];
    for header in [
        "RateLimit-Limit",
        "RateLimit-Remaining",
        "RateLimit-Reset",
        "X-Request-ID",
    ] {
        assert!(
            assign["responses"]["200"]["headers"][header].is_object(),
            "200 of assign documents {header}"
        );
    }
    for header in [
        "Retry-After",
        "RateLimit-Limit",
        "RateLimit-Remaining",
        "RateLimit-Reset",
    ] {
        assert!(
            assign["responses"]["429"]["headers"][header].is_object(),
            "429 of assign documents {header}"
        );
    }
    assert!(assign["responses"]["503"]["headers"]["Retry-After"].is_object());

    let list = &document["paths"]["/v1/flows"]["get"];
    let parameters = list["parameters"].as_array().unwrap();
    assert!(
        parameters
            .iter()
            .any(|parameter| parameter["name"] == "X-Request-ID" && parameter["in"] == "header"),
        "{parameters:?}"
    );
    assert!(list["responses"]["200"]["headers"]["X-Request-ID"].is_object());
    for header in ["RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"] {
        assert!(
            list["responses"]["200"]["headers"][header].is_object(),
            "listing flows counts against the read limit: its 200 documents {header}"
        );
    }
}

/// Operations that take no API key: a signed event source's deliveries, authenticated by the
/// source's secret (docs/events.md "Signed sources"). Each says so (`security: [{}]`) and
/// documents its own 401.
const WITHOUT_API_KEY: &[&str] = &[
    "get /v1/events/inbound/{sourceId}",
    "post /v1/events/inbound/{sourceId}",
];

#[tokio::test]
async fn every_operation_takes_the_api_key_and_documents_its_401_once_for_all() {
    let app = api_only().await;
    let document = openapi(&app).await;
    assert_eq!(document["security"], json!([{ "bearer": [] }]));
    assert_eq!(
        document["components"]["securitySchemes"]["bearer"],
        json!({ "type": "http", "scheme": "bearer" })
    );
    let mut operations = 0;
    for (path, item) in document["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            operations += 1;
            let unauthorized = &operation["responses"]["401"];
            if WITHOUT_API_KEY.contains(&format!("{method} {path}").as_str()) {
                assert_eq!(operation["security"], json!([{}]), "{method} {path}");
                assert!(
                    unauthorized["description"]
                        .as_str()
                        .is_some_and(|text| text.starts_with("Not authenticated")),
                    "{method} {path}: {unauthorized}"
                );
                continue;
            }
            assert!(
                operation.get("security").is_none(),
                "{method} {path} overrides the API key requirement"
            );
            assert_eq!(
                unauthorized["description"],
                json!("Missing or invalid API key"),
                "{method} {path}"
            );
            assert_eq!(
                unauthorized["content"]["application/json"]["schema"]["$ref"],
                json!("#/components/schemas/ErrorBody"),
                "{method} {path}"
            );
        }
    }
    assert!(operations >= 25, "only {operations} operations documented");
}

fn repository_file(path: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(path);
    std::fs::read_to_string(&path).unwrap_or_else(|error| panic!("{}: {error}", path.display()))
}

/// The lists of event kinds kept in words, which the compiler cannot see: the description of
/// the body's `type` in the OpenAPI document (`EventBody`'s doc comment), docs/api.md's webhooks
/// paragraph and docs/webhooks.md's default subscription.
#[tokio::test]
async fn the_docs_and_the_event_body_schema_name_every_event_type() {
    let app = api_only().await;
    let document = openapi(&app).await;
    let description =
        document["components"]["schemas"]["AssignmentEvent"]["properties"]["type"]["description"]
            .as_str()
            .expect("the description of an event's type");
    let api = repository_file("docs/api.md");
    let webhooks_paragraph = api
        .split("\n\n")
        .find(|paragraph| paragraph.contains("**Webhook events**"))
        .expect("docs/api.md's paragraph on webhook events");
    for event in EventType::ALL {
        let name = event.as_str();
        assert!(
            description.contains(name),
            "EventBody's `type` names {name}: {description}"
        );
        assert!(
            webhooks_paragraph.contains(&format!("`{name}`")),
            "docs/api.md's webhook events name {name}"
        );
    }
    let count = [
        "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
    ]
    .get(EventType::ALL.len())
    .expect("a count in words");
    assert!(
        repository_file("docs/webhooks.md").contains(&format!("(default all {count})")),
        "docs/webhooks.md: endpoints subscribe to all {count} kinds by default"
    );
}

#[tokio::test]
async fn the_bare_address_redirects_to_the_dashboard() {
    let app = api_only().await;
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let response = client
        .get(format!("{}/", app.base_url))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 303);
    assert_eq!(response.headers()["location"], "/dashboard");
    // Followed, it lands on a dashboard page (the sign-in page, without a session), not the
    // API's JSON 404.
    let (status, content_type, _) = text(&app, "/").await;
    assert_eq!(status, 200);
    assert!(content_type.starts_with("text/html"), "{content_type}");
    // Only GET is redirected: another method on `/` is still refused.
    let post = client
        .post(format!("{}/", app.base_url))
        .send()
        .await
        .unwrap();
    assert_eq!(post.status(), 405);
}

/// Operations without whole examples, and why. Empty today: the export download's file has no
/// JSON (its 202 "still being generated" answer carries the example). An operation added here
/// is one where an example would mislead.
const WITHOUT_EXAMPLES: &[&str] = &[];

/// The JSON content (request body or main success response) of an operation: what the API's
/// `Examples` modifier puts an example on.
fn json_contents(operation: &Value) -> [(&'static str, Option<&Value>); 2] {
    let request = operation
        .pointer("/requestBody/content/application~1json")
        .filter(|content| content.is_object());
    let response = ["201", "200", "202"].into_iter().find_map(|status| {
        operation
            .pointer(&format!("/responses/{status}/content/application~1json"))
            .filter(|content| content.is_object())
    });
    [("request", request), ("response", response)]
}

/// What is wrong with `example` against `schema`, with the `components` of `document` in
/// reach of its `$ref`s (OpenAPI 3.1 schemas are JSON Schema 2020-12); empty when valid.
fn example_errors(document: &Value, schema: &Value, example: &Value) -> Vec<String> {
    let mut root = json!({ "$schema": "https://json-schema.org/draft/2020-12/schema" });
    root["components"] = document["components"].clone();
    if let Value::Object(keywords) = schema {
        for (keyword, value) in keywords {
            root[keyword] = value.clone();
        }
    }
    let validator = match jsonschema::options()
        .should_validate_formats(true)
        .build(&root)
    {
        Ok(validator) => validator,
        Err(error) => return vec![format!("the schema does not compile: {error}")],
    };
    validator
        .iter_errors(example)
        .map(|error| format!("at `{}`: {error}", error.instance_path()))
        .collect()
}

/// Every operation shows a whole request (when it takes a JSON body) and a whole answer (when
/// its success has a JSON body), and every example is valid against the schema beside it: an
/// example copied from the reference is accepted, and an answer looks like the real one.
#[tokio::test]
async fn every_operation_has_a_request_and_response_example_valid_against_its_schema() {
    let app = api_only().await;
    let document = openapi(&app).await;
    let mut missing = Vec::new();
    let mut invalid = Vec::new();
    let mut examples = 0;
    for (path, item) in document["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            let key = format!("{} {path}", method.to_uppercase());
            for (part, content) in json_contents(operation) {
                let Some(content) = content else { continue };
                let Some(example) = content.get("example") else {
                    if !WITHOUT_EXAMPLES.contains(&key.as_str()) {
                        missing.push(format!("{key}: no {part} example"));
                    }
                    continue;
                };
                examples += 1;
                for error in example_errors(&document, &content["schema"], example) {
                    invalid.push(format!("{key}: {part} example {error}"));
                }
            }
        }
    }
    // The webhook events carry a whole body too, each of its own type.
    for (event_type, item) in document["webhooks"].as_object().unwrap() {
        let content = &item["post"]["requestBody"]["content"]["application/json"];
        let Some(example) = content.get("example") else {
            missing.push(format!("webhook {event_type}: no example"));
            continue;
        };
        examples += 1;
        if example["type"] != json!(event_type) {
            invalid.push(format!(
                "webhook {event_type}: example of type {}",
                example["type"]
            ));
        }
        for error in example_errors(&document, &content["schema"], example) {
            invalid.push(format!("webhook {event_type}: example {error}"));
        }
    }
    assert!(
        missing.is_empty() && invalid.is_empty(),
        "add them to api/openapi-examples.json:\n{}\n\nfix them there:\n{}",
        missing.join("\n"),
        invalid.join("\n")
    );
    assert!(examples >= 40, "only {examples} examples");
    // The test ping's schema does not suggest an assignment event's type.
    assert_eq!(
        document["components"]["schemas"]["TestEvent"]["properties"]["type"]["examples"],
        json!(["webhook.test"])
    );
}

/// The documented success status and the example request of `method path`.
fn documented(document: &Value, method: &str, path: &str) -> (u16, Value) {
    let operation = &document["paths"][path][method];
    let status = ["201", "200", "202"]
        .into_iter()
        .find(|status| operation["responses"][status].is_object())
        .unwrap_or_else(|| panic!("{method} {path} documents no success"));
    let example = operation
        .pointer("/requestBody/content/application~1json/example")
        .unwrap_or_else(|| panic!("{method} {path} has no request example"))
        .clone();
    (status.parse().unwrap(), example)
}

/// The example with the fixture's ids in place of the example's, and a due date that stays in
/// the future whenever the test runs.
fn substituted(example: &Value, replacements: &[(&str, &str)]) -> Value {
    let mut text = example.to_string();
    for (from, to) in replacements {
        text = text.replace(from, to);
    }
    let mut value: Value = serde_json::from_str(&text).unwrap();
    if value.get("dueDate").is_some() {
        let due = Utc::now().date_naive() + chrono::Days::new(60);
        value["dueDate"] = json!(due.to_string());
    }
    value
}

/// The request examples of the core operations work as printed: sent (with the ids of a fixture
/// in place of the example ids) to a real API, each gets the status the document promises.
#[tokio::test]
async fn the_core_request_examples_are_accepted_with_the_documented_status() {
    let app = api_only().await;
    let document = openapi(&app).await;
    let org = app.create_org(Tier::Enterprise).await;
    let example_flow = documented(&document, "post", "/v1/flows/assign").1["flowId"]
        .as_str()
        .unwrap()
        .to_owned();

    let (status, user) = documented(&document, "post", "/v1/users");
    let created = app.post(&org, "/v1/users", &user).await;
    assert_eq!(created.status, status, "POST /v1/users: {}", created.body);

    let (status, flow) = documented(&document, "post", "/v1/flows");
    let created = app.post(&org, "/v1/flows", &flow).await;
    assert_eq!(created.status, status, "POST /v1/flows: {}", created.body);
    let flow_id = created.body["flowId"].as_str().unwrap().to_owned();
    let replacements = [(example_flow.as_str(), flow_id.as_str())];

    // POST /v1/webhooks is left out: its example address is checked by resolving it, which the
    // test machine cannot do (docs/webhooks.md says how to receive locally).
    for path in ["/v1/flows/assign", "/v1/flows/report"] {
        let (status, example) = documented(&document, "post", path);
        let response = app
            .post(&org, path, &substituted(&example, &replacements))
            .await;
        assert_eq!(response.status, status, "POST {path}: {}", response.body);
    }
}

/// The OpenAPI document names a schema after its Rust type (or its `#[schema(as = …)]`), and
/// two types of one name silently become one schema: the second type's operations then document
/// the first's shape (as `POST /v1/flows/schedule` once documented the report's schedule row).
/// Every schema type of the API's routes has a name of its own.
#[test]
fn every_schema_type_of_the_routes_has_a_name_of_its_own() {
    let directory = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../api/src/routes");
    let mut files: Vec<_> = std::fs::read_dir(&directory)
        .expect("api/src/routes")
        .map(|entry| entry.expect("entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "rs"))
        .collect();
    files.sort();
    let mut names: std::collections::HashMap<String, Vec<String>> = Default::default();
    for path in files {
        let text = std::fs::read_to_string(&path).expect("readable");
        let file = path.file_name().unwrap().to_string_lossy().into_owned();
        let mut schema_type = false;
        let mut alias: Option<String> = None;
        for line in text.lines().map(str::trim) {
            if line.starts_with("#[derive(") && line.contains("ToSchema") {
                schema_type = true;
                alias = None;
            } else if let Some(rest) = line.strip_prefix("#[schema(as = ") {
                alias = Some(rest.trim_end_matches(")]").to_owned());
            } else if let Some(rest) = line
                .strip_prefix("pub struct ")
                .or_else(|| line.strip_prefix("pub enum "))
                .or_else(|| line.strip_prefix("struct "))
                .or_else(|| line.strip_prefix("enum "))
            {
                if schema_type {
                    let name: String = rest
                        .chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_')
                        .collect();
                    let name = alias.take().unwrap_or(name);
                    names.entry(name).or_default().push(file.clone());
                }
                schema_type = false;
            }
        }
    }
    assert!(
        names.len() > 40,
        "the scan found the schema types: {names:?}"
    );
    let shared: Vec<String> = names
        .iter()
        .filter(|(_, files)| files.len() > 1)
        .map(|(name, files)| format!("{name}: {}", files.join(", ")))
        .collect();
    assert!(
        shared.is_empty(),
        "schema names used by more than one type (give one `#[schema(as = …)]`): {shared:?}"
    );
}
