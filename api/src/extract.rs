//! Extractors whose rejections are the service's own errors: JSON bodies, query strings, path
//! parameters, the caller's organization (Bearer key), and the request id.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::connect_info::ConnectInfo;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{StatusCode, header};
use serde::de::DeserializeOwned;

use crate::error::ApiError;
use crate::state::AppState;
/// What [`Auth`] derefs to, here beside it for the handlers that pass it on.
pub use flow_app::caller::Caller;

/// Largest accepted request body.
pub const MAX_BODY_BYTES: usize = 1024 * 1024;

/// A JSON body: requires `Content-Type: application/json` (415), at most [`MAX_BODY_BYTES`] (413),
/// and turns malformed JSON, wrong types, missing and unknown fields into a 400 naming the field.
#[derive(Debug, Clone, Copy, Default)]
pub struct ApiJson<T>(pub T);

impl<S, T> FromRequest<S> for ApiJson<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        if !is_json(request.headers()) {
            return Err(ApiError::UnsupportedMediaType);
        }
        let bytes = body_bytes(request, state).await?;
        parse_json(&bytes).map(ApiJson)
    }
}

/// A body of any content type, at most [`MAX_BODY_BYTES`] (413), for routes that read the type
/// themselves (CloudEvents' modes).
#[derive(Debug, Clone, Default)]
pub struct RawBody(pub Bytes);

impl<S: Send + Sync> FromRequest<S> for RawBody {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        body_bytes(request, state).await.map(RawBody)
    }
}

/// The body, at most [`MAX_BODY_BYTES`] (413), as every JSON extractor reads it.
async fn body_bytes<S: Send + Sync>(request: Request, state: &S) -> Result<Bytes, ApiError> {
    Bytes::from_request(request, state)
        .await
        .map_err(|rejection| {
            if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::PayloadTooLarge(MAX_BODY_BYTES)
            } else {
                ApiError::InvalidRequest(format!("could not read the request body: {rejection}"))
            }
        })
}

/// A JSON body that may be left out: no body at all is `T::default()`; a body is read as
/// [`ApiJson`] reads it (`Content-Type: application/json`, at most [`MAX_BODY_BYTES`], fields
/// named in errors). For operations whose body has only optional fields (a cancellation's
/// `reason`).
#[derive(Debug, Clone, Copy, Default)]
pub struct OptionalApiJson<T>(pub T);

impl<S, T> FromRequest<S> for OptionalApiJson<T>
where
    T: DeserializeOwned + Default,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        let json = is_json(request.headers());
        let bytes = body_bytes(request, state).await?;
        if bytes.is_empty() {
            return Ok(Self(T::default()));
        }
        if !json {
            return Err(ApiError::UnsupportedMediaType);
        }
        parse_json(&bytes).map(OptionalApiJson)
    }
}

/// Deserializes a field that may be absent, `null` or a value into `None`, `Some(None)` or
/// `Some(Some(value))` (with `#[serde(default, deserialize_with = "...")]`): a change that
/// clears a field is told apart from one that leaves it.
pub fn present<'de, D, T>(deserializer: D) -> Result<Option<Option<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::Deserialize<'de>,
{
    serde::Deserialize::deserialize(deserializer).map(Some)
}

/// Query-string parameters: a value of the wrong type (`?limit=abc`) is a 400 with the error body
/// naming the parameter, not axum's plain-text rejection.
#[derive(Debug, Clone, Copy, Default, axum::extract::FromRequestParts)]
#[from_request(via(axum::extract::Query), rejection(ApiError))]
pub struct ApiQuery<T>(pub T);

impl From<QueryRejection> for ApiError {
    fn from(rejection: QueryRejection) -> Self {
        let text = rejection.body_text();
        let detail = text
            .strip_prefix("Failed to deserialize query string: ")
            .unwrap_or(&text);
        ApiError::InvalidRequest(format!("invalid query string: {detail}"))
    }
}

/// Path parameters with the error body on rejection. Every path parameter is an id, and an id
/// that cannot even be decoded (bad percent-encoding) is one that does not exist: 404.
#[derive(Debug, Clone, Copy, Default, axum::extract::FromRequestParts)]
#[from_request(via(axum::extract::Path), rejection(ApiError))]
pub struct ApiPath<T>(pub T);

impl From<PathRejection> for ApiError {
    fn from(rejection: PathRejection) -> Self {
        match rejection {
            PathRejection::FailedToDeserializePathParams(_) => {
                ApiError::NotFound("not found: the path could not be decoded".into())
            }
            other => ApiError::Internal(anyhow::anyhow!(
                "path parameters missing: {}",
                other.body_text()
            )),
        }
    }
}

fn is_json(headers: &axum::http::HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.split(';').next())
        .is_some_and(|mime| {
            let mime = mime.trim().to_ascii_lowercase();
            mime == "application/json"
                || (mime.starts_with("application/") && mime.ends_with("+json"))
        })
}

/// Deserializes JSON, naming the offending field in the error.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::InvalidRequest(
            "request body is empty; expected a JSON object".into(),
        ));
    }
    // Derived structs would also accept a JSON array (fields by position): insist on an object.
    if bytes.iter().find(|byte| !byte.is_ascii_whitespace()) != Some(&b'{') {
        return Err(ApiError::InvalidRequest(
            "request body must be a JSON object".into(),
        ));
    }
    let deserializer = &mut serde_json::Deserializer::from_slice(bytes);
    serde_path_to_error::deserialize(deserializer)
        .map_err(|error| ApiError::InvalidRequest(describe_json_error(&error)))
}

fn describe_json_error(error: &serde_path_to_error::Error<serde_json::Error>) -> String {
    let path = error.path().to_string();
    let inner = error.inner();
    let text = inner.to_string();
    // serde_json appends " at line L column C"; the field path says more to an API caller.
    let text = text.split(" at line ").next().unwrap_or(&text).to_owned();
    if inner.is_syntax() || inner.is_eof() {
        return format!("request body is not valid JSON: {text}");
    }
    if let Some(field) = between(&text, "missing field `", "`") {
        return format!("{} is required", join_path(&path, field));
    }
    if let Some(field) = between(&text, "unknown field `", "`") {
        // The path already ends at the unknown field.
        let path = if path.is_empty() || path == "." {
            field.to_owned()
        } else {
            path
        };
        return format!("unknown field: {path}");
    }
    if path.is_empty() || path == "." {
        return format!("request body must be a JSON object: {text}");
    }
    if let Some(expected) = text.split(", expected ").nth(1) {
        return format!("{path} must be {}", article(expected));
    }
    format!("{path}: {text}")
}

fn between<'a>(text: &'a str, start: &str, end: &str) -> Option<&'a str> {
    let rest = &text[text.find(start)? + start.len()..];
    Some(&rest[..rest.find(end)?])
}

fn join_path(path: &str, field: &str) -> String {
    if path.is_empty() || path == "." {
        field.to_owned()
    } else {
        format!("{path}.{field}")
    }
}

fn article(expected: &str) -> String {
    let expected = expected.trim();
    if expected.starts_with("a ") || expected.starts_with("an ") {
        expected.to_owned()
    } else if expected.starts_with("struct ") || expected.starts_with("map") {
        "an object".to_owned()
    } else if expected.starts_with("a sequence") || expected.starts_with("sequence") {
        "an array".to_owned()
    } else {
        expected.to_owned()
    }
}

/// The caller's organization, from `Authorization: Bearer <API_KEY>`. Missing, malformed,
/// unknown and revoked keys are all 401 `unauthorized`; a client address that tried too many
/// unknown keys is answered 429 without its key being looked up
/// ([`flow_app::caches::UNKNOWN_KEYS_PER_ADDRESS`]).
#[derive(Debug, Clone)]
pub struct Auth(pub Arc<Caller>);

impl Auth {
    /// The caller as the services take it: its organization, audited as its API key.
    pub fn acting(&self) -> flow_app::Acting<'_> {
        flow_app::Acting {
            caller: &self.0,
            actor: flow_common::db::audit::Actor::ApiKey(self.0.key_id),
        }
    }
}

impl std::ops::Deref for Auth {
    type Target = Caller;
    fn deref(&self) -> &Caller {
        &self.0
    }
}

impl FromRequestParts<AppState> for Auth {
    type Rejection = ApiError;

    /// A key restricted to SCIM is refused here (403): this extractor guards `/v1`.
    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let auth = Self::any_scope(parts, state).await?;
        if auth.scim_only {
            return Err(ApiError::Forbidden(
                "this API key is restricted to SCIM provisioning (/scim/v2); use another key for /v1",
            ));
        }
        Ok(auth)
    }
}

impl Auth {
    /// The caller behind the request's key, whatever the key is restricted to (the SCIM
    /// surface, which every working key may use).
    pub async fn any_scope(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let header = parts
            .headers
            .get(header::AUTHORIZATION)
            .ok_or(ApiError::Unauthorized(
                "missing API key: send Authorization: Bearer <API_KEY>",
            ))?;
        let header = header
            .to_str()
            .map_err(|_| ApiError::Unauthorized("malformed Authorization header"))?;
        let (scheme, key) = header.split_once(' ').ok_or(ApiError::Unauthorized(
            "malformed Authorization header: expected Bearer <API_KEY>",
        ))?;
        if !scheme.eq_ignore_ascii_case("bearer") || key.trim().is_empty() {
            return Err(ApiError::Unauthorized(
                "malformed Authorization header: expected Bearer <API_KEY>",
            ));
        }
        // The TCP peer: behind a proxy, every client shares the proxy's address.
        let client = parts
            .extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map(|info| info.0.ip());
        let caller = state
            .caches
            .authenticate(&state.db, key.trim(), client)
            .await?;
        caller
            .map(Auth)
            .ok_or(ApiError::Unauthorized("invalid or revoked API key"))
    }
}

/// The request id: the caller's `X-Request-ID` when sent (validated by the middleware), else one
/// generated for this request.
#[derive(Debug, Clone)]
pub struct RequestId {
    /// The id.
    pub value: Arc<str>,
    /// Whether the caller chose it (only then does it make a request idempotent).
    pub from_caller: bool,
}

impl RequestId {
    /// The caller's id, if they sent one.
    pub fn caller_supplied(&self) -> Option<&str> {
        self.from_caller.then_some(&*self.value)
    }
}

impl<S: Send + Sync> FromRequestParts<S> for RequestId {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, ApiError> {
        parts
            .extensions
            .get::<RequestId>()
            .cloned()
            .ok_or_else(|| ApiError::Internal(anyhow::anyhow!("request id middleware missing")))
    }
}
