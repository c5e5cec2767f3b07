//! The OpenAPI document and the API reference people open: Swagger UI at `/docs` over
//! `/v1/openapi.json` (its files come from a crate and are served by the API; no CDN, no
//! download at build time). The handlers' annotations give the operations; this module gives the
//! document's root and what the annotations do not: the responses and headers every operation
//! shares, and the webhook events (OpenAPI 3.1 `webhooks`, from the Rust types that build them).

use std::sync::Arc;

use flow_domain::events::{EventBody, EventData, EventType, TestEventData};
use flow_domain::ids::EventId;
use flow_domain::report::ExportFormat;
use utoipa::openapi::header::HeaderBuilder;
use utoipa::openapi::path::{
    Operation, OperationBuilder, ParameterBuilder, ParameterIn, PathItemBuilder,
};
use utoipa::openapi::request_body::RequestBodyBuilder;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme};
use utoipa::openapi::{
    ContentBuilder, HttpMethod, KnownFormat, ObjectBuilder, OpenApi as Document, PathsBuilder, Ref,
    RefOr, Required, Response, ResponseBuilder, Schema, SchemaFormat, Type,
};
use utoipa::{Modify, OpenApi, PartialSchema, ToSchema};
use utoipa_swagger_ui::{Config, SwaggerUi};

use crate::middleware::MAX_REQUEST_ID_LEN;

/// The OpenAPI document's root; paths and schemas come from the handlers.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "Flow",
        version = "1",
        description = "Assign training and onboarding flows to users and report on them."
    ),
    modifiers(&BearerAuth)
)]
struct ApiDoc;

/// The root the handlers' operations are merged into.
pub fn root() -> Document {
    ApiDoc::openapi()
}

/// Serves the document, completed from the handlers' `operations`, at `/v1/openapi.json`, and
/// Swagger UI over it at `/docs`.
pub fn router<S: Clone + Send + Sync + 'static>(mut operations: Document) -> axum::Router<S> {
    operations
        .paths
        .paths
        .retain(|path, _| path.starts_with("/v1/"));
    // After the merge: the handlers' operations only exist from here on.
    CommonResponses.modify(&mut operations);
    DocumentedHeaders.modify(&mut operations);
    ExportFiles.modify(&mut operations);
    Webhooks.modify(&mut operations);
    Examples.modify(&mut operations);
    let document = Arc::new(operations);
    reference().route(
        "/v1/openapi.json",
        axum::routing::get(move || {
            let document = document.clone();
            async move { axum::Json(document.as_ref().clone()) }
        }),
    )
}

/// `GET /docs`: Swagger UI over the service's own document. The validator badge is off: it
/// would send the document to a third-party service.
fn reference<S: Clone + Send + Sync + 'static>() -> axum::Router<S> {
    SwaggerUi::new("/docs")
        .config(
            Config::from("/v1/openapi.json")
                .validator_url("none")
                .try_it_out_enabled(true)
                .persist_authorization(true)
                .display_request_duration(true),
        )
        .into()
}

/// Every operation takes the API key as a Bearer token.
struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut Document) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
        openapi.security = Some(vec![SecurityRequirement::new(
            "bearer",
            Vec::<String>::new(),
        )]);
    }
}

/// Every operation of the document.
fn operations(openapi: &mut Document) -> impl Iterator<Item = &mut Operation> {
    openapi.paths.paths.values_mut().flat_map(|item| {
        [
            &mut item.get,
            &mut item.post,
            &mut item.put,
            &mut item.patch,
            &mut item.delete,
        ]
        .into_iter()
        .flatten()
    })
}

/// Every operation of the document with its key in the examples table: `"POST /v1/flows"`.
fn keyed_operations(openapi: &mut Document) -> impl Iterator<Item = (String, &mut Operation)> {
    openapi.paths.paths.iter_mut().flat_map(|(path, item)| {
        [
            ("GET", &mut item.get),
            ("POST", &mut item.post),
            ("PUT", &mut item.put),
            ("PATCH", &mut item.patch),
            ("DELETE", &mut item.delete),
        ]
        .into_iter()
        .filter_map(move |(method, operation)| {
            operation
                .as_mut()
                .map(|operation| (format!("{method} {path}"), operation))
        })
    })
}

/// A response with the error body.
fn error_response(description: &str) -> RefOr<Response> {
    RefOr::T(
        ResponseBuilder::new()
            .description(description)
            .content(
                "application/json",
                ContentBuilder::new()
                    .schema(Some(Ref::from_schema_name("ErrorBody")))
                    .build(),
            )
            .build(),
    )
}

/// Adds to every operation the error responses that the shared machinery (extractors,
/// middleware) can give it, so that the document lists every status a caller can get without
/// each handler repeating them: 401 everywhere (every operation takes the API key), 400 where
/// there is a body or a query string, 413 and 415 where there is a body, 503 everywhere
/// (Postgres or RabbitMQ unreachable).
struct CommonResponses;

impl Modify for CommonResponses {
    fn modify(&self, openapi: &mut Document) {
        for operation in operations(openapi) {
            let has_body = operation.request_body.is_some();
            let has_query = operation.parameters.iter().flatten().any(|parameter| {
                matches!(parameter, RefOr::T(parameter) if parameter.parameter_in == ParameterIn::Query)
            });
            let mut responses = vec![
                ("401", "Missing or invalid API key"),
                (
                    "503",
                    "Postgres or RabbitMQ unreachable (nothing was accepted), or the request took longer than REQUEST_TIMEOUT; retry",
                ),
            ];
            if has_body || has_query {
                responses.push(("400", "Invalid request"));
            }
            if has_body {
                responses.push(("413", "Request body over 1 MiB"));
                responses.push(("415", "Content-Type is not application/json"));
            }
            for (status, description) in responses {
                operation
                    .responses
                    .responses
                    .entry(status.to_owned())
                    .or_insert_with(|| error_response(description));
            }
        }
    }
}

fn integer_header(description: &str) -> RefOr<utoipa::openapi::header::Header> {
    RefOr::T(
        HeaderBuilder::new()
            .schema(Some(
                ObjectBuilder::new()
                    .schema_type(Type::Integer)
                    .minimum(Some(0)),
            ))
            .description(Some(description))
            .build(),
    )
}

fn string_header(description: &str) -> RefOr<utoipa::openapi::header::Header> {
    RefOr::T(
        HeaderBuilder::new()
            .schema(Some(ObjectBuilder::new().schema_type(Type::String)))
            .description(Some(description))
            .build(),
    )
}

/// Documents the headers the middleware and the error type add: `X-Request-ID` on every request
/// and response; `RateLimit-Limit`, `RateLimit-Remaining`, `RateLimit-Reset` on the answers of
/// rate-limited operations (those that can answer 429); `Retry-After` on 429, 503, and a 409 that
/// says it carries one.
struct DocumentedHeaders;

impl Modify for DocumentedHeaders {
    fn modify(&self, openapi: &mut Document) {
        let request_id = ParameterBuilder::new()
            .name("X-Request-ID")
            .parameter_in(ParameterIn::Header)
            .required(Required::False)
            .description(Some(
                "Caller-chosen id of the request, echoed on the response and logged with it \
                 (generated when absent); on assigns it also makes the request idempotent.",
            ))
            .schema(Some(
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .min_length(Some(1))
                    .max_length(Some(MAX_REQUEST_ID_LEN))
                    .pattern(Some("^[\\x20-\\x7E]+$")),
            ))
            .build();
        for operation in operations(openapi) {
            let parameters = operation.parameters.get_or_insert_with(Vec::new);
            if !parameters.iter().any(|parameter| {
                matches!(parameter, RefOr::T(parameter)
                        if parameter.name.eq_ignore_ascii_case("X-Request-ID"))
            }) {
                parameters.push(RefOr::T(request_id.clone()));
            }
            // An invalid X-Request-ID is refused on every operation.
            if !operation.responses.responses.contains_key("400") {
                operation.responses.responses.insert(
                    "400".to_owned(),
                    error_response("Invalid request (such as a malformed X-Request-ID)"),
                );
            }
            let rate_limited = operation.responses.responses.contains_key("429");
            for (status, response) in operation.responses.responses.iter_mut() {
                let RefOr::T(response) = response else {
                    continue;
                };
                response.headers.insert(
                    "X-Request-ID".to_owned(),
                    string_header(
                        "The request's id: the caller's X-Request-ID, or a generated one",
                    ),
                );
                let success = status.starts_with('2');
                if rate_limited && (success || status == "429") {
                    response.headers.insert(
                        "RateLimit-Limit".to_owned(),
                        integer_header("Requests allowed per minute for this operation"),
                    );
                    response.headers.insert(
                        "RateLimit-Remaining".to_owned(),
                        integer_header("Requests left in the current window"),
                    );
                    response.headers.insert(
                        "RateLimit-Reset".to_owned(),
                        integer_header("Seconds until the window resets"),
                    );
                }
                let retry = status == "429"
                    || status == "503"
                    || (status == "409" && response.description.contains("Retry-After"));
                if retry {
                    response.headers.insert(
                        "Retry-After".to_owned(),
                        integer_header("Seconds to wait before retrying"),
                    );
                }
            }
        }
    }
}

/// The file `GET /v1/exports/{id}` answers: one content type per export format.
struct ExportFiles;

impl Modify for ExportFiles {
    fn modify(&self, openapi: &mut Document) {
        let Some(RefOr::T(file)) = openapi
            .paths
            .paths
            .get_mut("/v1/exports/{id}")
            .and_then(|item| item.get.as_mut())
            .and_then(|operation| operation.responses.responses.get_mut("200"))
        else {
            return;
        };
        for format in ExportFormat::ALL {
            let media_type = format.content_type();
            let media_type = media_type.split(';').next().unwrap_or(media_type);
            file.content.insert(
                media_type.to_owned(),
                ContentBuilder::new()
                    .schema(Some(
                        ObjectBuilder::new()
                            .schema_type(Type::String)
                            .format(Some(SchemaFormat::KnownFormat(KnownFormat::Binary))),
                    ))
                    .build()
                    .into(),
            );
        }
    }
}

/// The OpenAPI 3.1 `webhooks` section: one entry per event type, its body the [`EventBody`]
/// the relay and the webhook-worker send, and the Standard Webhooks signature headers.
struct Webhooks;

impl Modify for Webhooks {
    fn modify(&self, openapi: &mut Document) {
        let components = openapi.components.get_or_insert_with(Default::default);
        let mut schemas = vec![
            (
                "AssignmentEvent".to_owned(),
                <EventBody<EventData> as PartialSchema>::schema(),
            ),
            (
                "TestEvent".to_owned(),
                <EventBody<TestEventData> as PartialSchema>::schema(),
            ),
        ];
        // The generic body's own `schemas` leaves out its type parameter's.
        for (name, schema, collect) in [
            (
                EventData::name(),
                EventData::schema(),
                <EventData as ToSchema>::schemas as fn(&mut _),
            ),
            (
                TestEventData::name(),
                TestEventData::schema(),
                <TestEventData as ToSchema>::schemas,
            ),
            (
                EventId::name(),
                EventId::schema(),
                <EventId as ToSchema>::schemas,
            ),
        ] {
            schemas.push((name.into_owned(), schema));
            collect(&mut schemas);
        }
        <EventBody<EventData> as ToSchema>::schemas(&mut schemas);
        <EventBody<TestEventData> as ToSchema>::schemas(&mut schemas);
        for (name, schema) in schemas {
            components.schemas.entry(name).or_insert(schema);
        }
        // The generic body's `type` example is an assignment event's; the ping's is its own.
        if let Some(RefOr::T(Schema::Object(test_event))) = components.schemas.get_mut("TestEvent")
            && let Some(RefOr::T(Schema::Object(event_type))) =
                test_event.properties.get_mut("type")
        {
            event_type.examples = vec![serde_json::Value::from(
                flow_domain::events::TEST_EVENT_TYPE,
            )];
        }

        let header = |name: &str, description: &str| {
            ParameterBuilder::new()
                .name(name)
                .parameter_in(ParameterIn::Header)
                .required(Required::True)
                .description(Some(description))
                .schema(Some(ObjectBuilder::new().schema_type(Type::String)))
                .build()
        };
        let operation = |summary: String, schema: &str| {
            OperationBuilder::new()
                .summary(Some(summary))
                .description(Some(
                    "Sent as a POST to each enabled endpoint subscribed to the event, signed per \
                     Standard Webhooks (see the README's Webhooks section). Answer 2xx within the \
                     timeout; anything else is retried on the schedule, 410 disables the endpoint.",
                ))
                .parameter(header(
                    "webhook-id",
                    "The event id (the body's `id`): the same on every retry; dedupe on it",
                ))
                .parameter(header(
                    "webhook-timestamp",
                    "Unix seconds of this attempt; refuse old ones",
                ))
                .parameter(header(
                    "webhook-signature",
                    "`v1,<base64 HMAC-SHA256 of id.timestamp.body>`, one per active secret, \
                     space-separated",
                ))
                .request_body(Some(
                    RequestBodyBuilder::new()
                        .required(Some(Required::True))
                        .content(
                            "application/json",
                            ContentBuilder::new()
                                .schema(Some(Ref::from_schema_name(schema)))
                                .build(),
                        )
                        .build(),
                ))
                .response(
                    "2XX",
                    ResponseBuilder::new().description("Received; not sent again"),
                )
                .response(
                    "410",
                    ResponseBuilder::new().description("The endpoint is gone: it is disabled"),
                )
                .build()
        };
        let mut webhooks = PathsBuilder::new();
        for event in EventType::ALL {
            webhooks = webhooks.path(
                event.as_str(),
                PathItemBuilder::new()
                    .operation(
                        HttpMethod::Post,
                        operation(event.summary().to_owned(), "AssignmentEvent"),
                    )
                    .build(),
            );
        }
        webhooks = webhooks.path(
            flow_domain::events::TEST_EVENT_TYPE,
            PathItemBuilder::new()
                .operation(
                    HttpMethod::Post,
                    operation(
                        "A test ping (POST /v1/webhooks/{id}/test)".to_owned(),
                        "TestEvent",
                    ),
                )
                .build(),
        );
        openapi.webhooks = Some(webhooks.build());
    }
}

/// Whole examples of requests and responses, keyed by operation (`"POST /v1/flows/assign"`),
/// each `{"request": …, "response": …}` with either part optional. Kept as data, apart from
/// the handlers, so that one flow, one user and one set of ids run through every example;
/// tests/it/api_docs.rs checks that each operation has its examples and that each one
/// validates against its schema.
const EXAMPLES: &str = include_str!("../openapi-examples.json");

/// Sets the `example` of every operation's JSON request body and of its main success response
/// (the first of 201, 200, 202 with a JSON body: a creation's 201 before its "already there"
/// 200) from [`EXAMPLES`], so Swagger UI shows a whole request and answer. An operation without
/// an entry is left as it is: the test names it.
struct Examples;

impl Modify for Examples {
    fn modify(&self, openapi: &mut Document) {
        let Ok(serde_json::Value::Object(table)) = serde_json::from_str(EXAMPLES) else {
            tracing::error!("api/openapi-examples.json is not a JSON object; no examples");
            return;
        };
        if let Some(webhooks) = &mut openapi.webhooks {
            webhook_examples(webhooks, table.get("webhooks"));
        }
        for (key, operation) in keyed_operations(openapi) {
            let Some(entry) = table.get(&key) else {
                continue;
            };
            if let (Some(example), Some(RefOr::T(body))) =
                (entry.get("request"), &mut operation.request_body)
                && let Some(RefOr::T(content)) = body.content.get_mut("application/json")
            {
                content.example = Some(example.clone());
            }
            if let Some(example) = entry.get("response")
                && let Some(content) = success_content(operation)
            {
                content.example = Some(example.clone());
            }
        }
    }
}

/// The body each webhook event is documented with: the table's `webhooks.testEvent` for the
/// test ping, and its `webhooks.assignmentEvent` with the event's own `type` for the others.
fn webhook_examples(webhooks: &mut utoipa::openapi::Paths, examples: Option<&serde_json::Value>) {
    let Some(examples) = examples else {
        return;
    };
    for (event_type, item) in webhooks.paths.iter_mut() {
        let example = if event_type == flow_domain::events::TEST_EVENT_TYPE {
            examples.get("testEvent").cloned()
        } else {
            examples.get("assignmentEvent").cloned().map(|mut body| {
                if let Some(fields) = body.as_object_mut() {
                    fields.insert("type".to_owned(), event_type.as_str().into());
                }
                body
            })
        };
        let content =
            item.post
                .as_mut()
                .and_then(|operation| match operation.request_body.as_mut()? {
                    RefOr::T(body) => body.content.get_mut("application/json"),
                    RefOr::Ref(_) => None,
                });
        if let (Some(example), Some(RefOr::T(content))) = (example, content) {
            content.example = Some(example);
        }
    }
}

/// The JSON content of an operation's main success response: the first of 201, 200 and 202
/// that has one.
fn success_content(operation: &mut Operation) -> Option<&mut utoipa::openapi::Content> {
    let status = ["201", "200", "202"].into_iter().find(|status| {
        matches!(operation.responses.responses.get(*status),
            Some(RefOr::T(response)) if response.content.contains_key("application/json"))
    })?;
    match operation.responses.responses.get_mut(status)? {
        RefOr::T(response) => match response.content.get_mut("application/json")? {
            RefOr::T(content) => Some(content),
            RefOr::Ref(_) => None,
        },
        RefOr::Ref(_) => None,
    }
}
