//! The API reference people open: Swagger UI served by the API itself at /docs, the webhook
//! events in the OpenAPI document's `webhooks` section (from the types that build them), and the
//! shared headers documented on the operations.

use chrono::{TimeZone, Utc};
use flow_common::db::lifecycle::AssignmentSnapshot;
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
            assert!(
                operation.get("security").is_none(),
                "{method} {path} overrides the API key requirement"
            );
            let unauthorized = &operation["responses"]["401"];
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
