//! The xAPI surface at `/xapi` (design §17, docs/xapi.md): the statement resource of an LRS —
//! `PUT /xapi/statements?statementId=` (204), `POST /xapi/statements` with one statement or an
//! array (200 and the ids), `GET /xapi/statements?statementId=` — and `GET /xapi/about`. Every
//! statement request names its version in `X-Experience-API-Version` (1.0.3 or 2.0; otherwise
//! 400). Authentication is the organization's API key as a Bearer token or in HTTP Basic (as LRS
//! clients send credentials: the key as the username, or as the password). The work is
//! `flow_app::xapi`'s; this module only translates HTTP.

use std::collections::HashMap;
use std::net::SocketAddr;

use axum::body::Bytes;
use axum::extract::{ConnectInfo, FromRequest, FromRequestParts, Query, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use base64::Engine;
use flow_app::ServiceError;
use flow_app::ratelimit::Operation;
use flow_domain::xapi::{VERSIONS, version_supported};
use serde_json::{Value, json};

use crate::error::{ApiError, RateHeaders};
use crate::extract::{Auth, MAX_BODY_BYTES, RequestId};
use crate::state::AppState;

/// The header every statement request and answer carries.
pub const VERSION_HEADER: &str = "x-experience-api-version";

/// The answer's header counting the statements of the request that mapped onto no assignment.
pub const UNMATCHED_HEADER: &str = "x-flow-unmatched-statements";

/// The xAPI routes, to nest under `/xapi`.
pub fn router() -> Router<AppState> {
    Router::new().route("/about", get(about)).route(
        "/statements",
        get(get_statement).put(put_statement).post(post_statements),
    )
}

/// The caller: the organization's API key, sent as a Bearer token or in HTTP Basic.
pub struct XapiAuth(Auth);

/// The API key of an `Authorization` header: a Bearer token, or HTTP Basic with the key as the
/// username (any password) or, when the username is not a key, as the password.
fn key_of(header: &str) -> Option<String> {
    let (scheme, value) = header.trim().split_once(' ')?;
    let value = value.trim();
    if scheme.eq_ignore_ascii_case("bearer") {
        return (!value.is_empty()).then(|| value.to_owned());
    }
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(value)
        .ok()?;
    let decoded = String::from_utf8(decoded).ok()?;
    let (user, password) = decoded.split_once(':').unwrap_or((&decoded, ""));
    let key = if user.starts_with(flow_common::db::keys::KEY_PREFIX) {
        user
    } else {
        password
    };
    (!key.is_empty()).then(|| key.to_owned())
}

impl FromRequestParts<AppState> for XapiAuth {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let header = parts
            .headers
            .get(header::AUTHORIZATION)
            .ok_or(ApiError::Unauthorized(
                "missing API key: send Authorization: Bearer <API_KEY>, or HTTP Basic with the key",
            ))?;
        let key = header
            .to_str()
            .ok()
            .and_then(key_of)
            .ok_or(ApiError::Unauthorized(
                "malformed Authorization header: expected Bearer <API_KEY> or Basic with the key",
            ))?;
        let client = parts
            .extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map(|info| info.0.ip());
        let caller = state
            .caches
            .authenticate(&state.db, &key, client)
            .await
            .map_err(ServiceError::from)?
            .ok_or(ApiError::Unauthorized("invalid or revoked API key"))?;
        if caller.scim_only {
            return Err(ApiError::Forbidden(
                "this API key is restricted to SCIM provisioning (/scim/v2); use another key for /xapi",
            ));
        }
        Ok(Self(Auth(caller)))
    }
}

/// A statement request's body: any JSON (one statement, or an array of them) sent as
/// `application/json` (415 otherwise; `multipart/mixed` with attachments is not supported), at
/// most [`MAX_BODY_BYTES`] (413).
pub struct StatementBody(Value);

impl<S: Send + Sync> FromRequest<S> for StatementBody {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        let json = request
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.split(';').next())
            .is_some_and(|mime| mime.trim().eq_ignore_ascii_case("application/json"));
        if !json {
            return Err(ApiError::UnsupportedMediaType);
        }
        let bytes = Bytes::from_request(request, state)
            .await
            .map_err(|rejection| {
                if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                    ApiError::PayloadTooLarge(MAX_BODY_BYTES)
                } else {
                    ApiError::InvalidRequest(format!(
                        "could not read the request body: {rejection}"
                    ))
                }
            })?;
        serde_json::from_slice(&bytes).map(Self).map_err(|error| {
            ApiError::InvalidRequest(format!("request body is not valid JSON: {error}"))
        })
    }
}

/// The version the request names, as answered (`1.0.3` or `2.0.0`); 400 when missing or another.
fn version(headers: &HeaderMap) -> Result<&'static str, ApiError> {
    let named = headers
        .get(VERSION_HEADER)
        .and_then(|value| value.to_str().ok())
        .ok_or_else(|| {
            ApiError::InvalidRequest("X-Experience-API-Version is required: 1.0.3 or 2.0".into())
        })?;
    if !version_supported(named) {
        return Err(ApiError::InvalidRequest(format!(
            "X-Experience-API-Version {named:?} is not supported: 1.0.3 or 2.0"
        )));
    }
    Ok(if named.trim() == "1.0.3" {
        "1.0.3"
    } else {
        "2.0.0"
    })
}

/// The answer's version header.
fn version_header(version: &'static str) -> [(HeaderName, HeaderValue); 1] {
    [(
        HeaderName::from_static(VERSION_HEADER),
        HeaderValue::from_static(version),
    )]
}

/// `GET /xapi/about`: the versions Flow speaks (no key needed, as the specification allows).
async fn about() -> Response {
    (
        version_header("2.0.0"),
        Json(json!({ "version": VERSIONS })),
    )
        .into_response()
}

/// The `statementId` parameter, required here.
fn statement_id(query: &HashMap<String, String>) -> Result<String, ApiError> {
    if let Some(other) = query.keys().find(|key| key.as_str() != "statementId") {
        return Err(ApiError::InvalidRequest(format!(
            "{other} is not supported: Flow stores statements and reads them back by statementId \
             only (docs/xapi.md)"
        )));
    }
    query
        .get("statementId")
        .cloned()
        .ok_or_else(|| ApiError::InvalidRequest("statementId is required".into()))
}

/// `GET /xapi/statements?statementId=`: the statement as stored; 404 for an id the organization
/// has not stored (another organization's included).
async fn get_statement(
    State(state): State<AppState>,
    XapiAuth(auth): XapiAuth,
    headers: HeaderMap,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let version = version(&headers)?;
    let id = statement_id(&query)?;
    let rate = RateHeaders(state.limiter.check(&auth, Operation::Read, 1).await?);
    let statement = flow_app::xapi::get(&state, auth.acting(), &id).await?;
    Ok((rate, version_header(version), Json(statement)).into_response())
}

/// The statements a request holds: one statement, or an array of them.
fn statements_of(body: Value) -> Vec<Value> {
    match body {
        Value::Array(items) => items,
        single => vec![single],
    }
}

/// Charges `count` writes, stores `statements` and answers the unmatched count with the rate.
async fn store(
    state: &AppState,
    auth: &Auth,
    statements: Vec<Value>,
    put_id: Option<uuid::Uuid>,
    request_id: &RequestId,
) -> Result<(RateHeaders, flow_app::xapi::Stored), ApiError> {
    let count = u32::try_from(statements.len()).unwrap_or(u32::MAX).max(1);
    let rate = RateHeaders(state.limiter.check(auth, Operation::Write, count).await?);
    let stored = flow_app::xapi::store(
        state,
        auth.acting(),
        statements,
        put_id,
        Some(&request_id.value),
    )
    .await?;
    Ok((rate, stored))
}

fn unmatched_header(unmatched: usize) -> [(HeaderName, HeaderValue); 1] {
    [(
        HeaderName::from_static(UNMATCHED_HEADER),
        HeaderValue::from(unmatched),
    )]
}

/// `PUT /xapi/statements?statementId=`: stores one statement under that id; 204 (also when the
/// same statement is stored already), 409 when another is.
async fn put_statement(
    State(state): State<AppState>,
    XapiAuth(auth): XapiAuth,
    request_id: RequestId,
    headers: HeaderMap,
    Query(query): Query<HashMap<String, String>>,
    StatementBody(body): StatementBody,
) -> Result<Response, ApiError> {
    let version = version(&headers)?;
    let id = statement_id(&query)?;
    let id = uuid::Uuid::parse_str(id.trim())
        .ok()
        .filter(|_| flow_domain::xapi::is_uuid(id.trim()))
        .ok_or_else(|| ApiError::InvalidRequest("statementId must be a UUID".into()))?;
    if body.is_array() {
        return Err(ApiError::InvalidRequest(
            "PUT takes one statement; POST takes an array".into(),
        ));
    }
    let (rate, stored) = store(&state, &auth, vec![body], Some(id), &request_id).await?;
    Ok((
        StatusCode::NO_CONTENT,
        rate,
        version_header(version),
        unmatched_header(stored.unmatched),
    )
        .into_response())
}

/// `POST /xapi/statements`: stores one statement or an array (at most 1,000); 200 with their
/// ids in order (v4 UUIDs given where missing).
async fn post_statements(
    State(state): State<AppState>,
    XapiAuth(auth): XapiAuth,
    request_id: RequestId,
    headers: HeaderMap,
    StatementBody(body): StatementBody,
) -> Result<Response, ApiError> {
    let version = version(&headers)?;
    let statements = statements_of(body);
    let (rate, stored) = store(&state, &auth, statements, None, &request_id).await?;
    let ids: Vec<String> = stored
        .ids
        .iter()
        .map(|id| id.hyphenated().to_string())
        .collect();
    Ok((
        rate,
        version_header(version),
        unmatched_header(stored.unmatched),
        Json(ids),
    )
        .into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_is_read_from_bearer_and_from_either_half_of_basic() {
        let basic = |text: &str| {
            format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(text)
            )
        };
        assert_eq!(key_of("Bearer fsk_abc").as_deref(), Some("fsk_abc"));
        assert_eq!(key_of(&basic("fsk_abc:")).as_deref(), Some("fsk_abc"));
        assert_eq!(
            key_of(&basic("fsk_abc:ignored")).as_deref(),
            Some("fsk_abc")
        );
        assert_eq!(key_of(&basic("lms:fsk_abc")).as_deref(), Some("fsk_abc"));
        assert_eq!(key_of(&basic("lms:")), None);
        assert_eq!(key_of("Digest x"), None);
    }
}
