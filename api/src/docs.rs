//! The API reference people open: Swagger UI at `/docs` over `/v1/openapi.json` (its files come
//! from a crate and are served by the API; no CDN, no download at build time), and the parts of
//! the OpenAPI document the handlers' annotations do not give: the webhook events (OpenAPI 3.1
//! `webhooks`, from the Rust types that build them) and the headers every operation shares.

use flow_common::events::{EventBody, EventData, EventType, TestEventData};
use flow_common::ids::EventId;
use utoipa::openapi::header::HeaderBuilder;
use utoipa::openapi::path::{OperationBuilder, ParameterBuilder, ParameterIn, PathItemBuilder};
use utoipa::openapi::request_body::RequestBodyBuilder;
use utoipa::openapi::{
    ContentBuilder, HttpMethod, ObjectBuilder, PathsBuilder, Ref, RefOr, Required, ResponseBuilder,
    Type,
};
use utoipa::{PartialSchema, ToSchema};
use utoipa_swagger_ui::{Config, SwaggerUi};

use crate::middleware::MAX_REQUEST_ID_LEN;

/// `GET /docs`: Swagger UI over the service's own document. The validator badge is off: it
/// would send the document to a third-party service.
pub fn reference<S: Clone + Send + Sync + 'static>() -> axum::Router<S> {
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
pub struct DocumentedHeaders;

impl utoipa::Modify for DocumentedHeaders {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
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
        for item in openapi.paths.paths.values_mut() {
            for operation in [
                &mut item.get,
                &mut item.post,
                &mut item.put,
                &mut item.patch,
                &mut item.delete,
            ]
            .into_iter()
            .flatten()
            {
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
                        RefOr::T(
                            ResponseBuilder::new()
                                .description("Invalid request (such as a malformed X-Request-ID)")
                                .content(
                                    "application/json",
                                    ContentBuilder::new()
                                        .schema(Some(Ref::from_schema_name("ErrorBody")))
                                        .build(),
                                )
                                .build(),
                        ),
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
}

/// The OpenAPI 3.1 `webhooks` section: one entry per event type, its body the [`EventBody`]
/// the relay and the webhook-worker send, and the Standard Webhooks signature headers.
pub struct Webhooks;

impl utoipa::Modify for Webhooks {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
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
        for event in [
            EventType::Assigned,
            EventType::Started,
            EventType::Completed,
            EventType::Overdue,
        ] {
            let summary = match event {
                EventType::Assigned => "A flow was assigned",
                EventType::Started => "The assignee started the flow (first module activity)",
                EventType::Completed => "Every module of the flow was completed",
                EventType::Overdue => "The due date passed before completion",
            };
            webhooks = webhooks.path(
                event.as_str(),
                PathItemBuilder::new()
                    .operation(
                        HttpMethod::Post,
                        operation(summary.to_owned(), "AssignmentEvent"),
                    )
                    .build(),
            );
        }
        webhooks = webhooks.path(
            flow_common::events::TEST_EVENT_TYPE,
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
