//! The SCIM 2.0 surface at `/scim/v2` (RFC 7643, RFC 7644), for identity providers: it turns
//! requests into `flow_scim` values and calls of `flow_app::users` and `flow_app::groups`, and
//! renders their results with `flow_scim`. Authentication is the organization's API key
//! (`Authorization: Bearer`); every resource is the key's organization's; the per-key read and
//! write limits of `/v1` apply. Every answer, errors included, is `application/scim+json`, and
//! every error is a SCIM error message. See docs/scim.md.

mod groups;
mod resource;
mod users;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Path, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use flow_app::ServiceError;
use flow_app::ratelimit::Operation;
use flow_scim::{ResourceMeta, ResourceType, ScimError, discovery};
use serde_json::Value;

use crate::error::{ApiError, RateHeaders};
use crate::extract::{Auth, MAX_BODY_BYTES};
use crate::state::AppState;

/// The media type of every answer.
pub const SCIM_MEDIA_TYPE: &str = "application/scim+json";

/// The SCIM routes, to nest under `/scim/v2`.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/ServiceProviderConfig", get(service_provider_config))
        .route("/ResourceTypes", get(resource_types))
        .route("/ResourceTypes/{name}", get(resource_type))
        .route("/Schemas", get(schemas))
        .route("/Schemas/{id}", get(schema))
        .route("/Users", get(users::list).post(users::create))
        .route(
            "/Users/{id}",
            get(users::get)
                .put(users::replace)
                .patch(users::patch)
                .delete(users::delete),
        )
        // Searching several resource types at once is not supported: 501, as RFC 7644 §3.12
        // answers an operation a service provider does not support.
        .route(
            "/.search",
            axum::routing::post(|| async {
                Failure::from(ScimError::with_status(
                    501,
                    "POST /.search over several resource types is not supported; GET /Users or /Groups with a filter",
                ))
            }),
        )
        .route("/Groups", get(groups::list).post(groups::create))
        .route(
            "/Groups/{id}",
            get(groups::get)
                .put(groups::replace)
                .patch(groups::patch)
                .delete(groups::delete),
        )
        .fallback(|| async { Failure::from(ScimError::not_found("no such SCIM endpoint")) })
        .method_not_allowed_fallback(|| async {
            Failure::from(ScimError::method_not_allowed(
                "this SCIM endpoint does not take that method",
            ))
        })
}

/// A SCIM error as an answer, with `Retry-After` on a 429 or 503.
#[derive(Debug)]
pub struct Failure {
    error: ScimError,
    retry_after: Option<u64>,
}

impl From<ScimError> for Failure {
    fn from(error: ScimError) -> Self {
        Self {
            error,
            retry_after: None,
        }
    }
}

/// The API's errors in SCIM's words: the same status, the same message.
impl From<ApiError> for Failure {
    fn from(error: ApiError) -> Self {
        let retry_after = error.retry_after();
        let message = error.body().message;
        let scim = match &error {
            ApiError::InvalidRequest(_) => ScimError::invalid_value(message),
            ApiError::Unauthorized(_) => ScimError::unauthorized(message),
            ApiError::Forbidden(_) => ScimError::forbidden(message),
            ApiError::NotFound(_) => ScimError::not_found(message),
            ApiError::MethodNotAllowed => ScimError::method_not_allowed(message),
            ApiError::Conflict(_) | ApiError::NotYet => ScimError::conflict(message),
            ApiError::PayloadTooLarge(_) => ScimError::payload_too_large(message),
            ApiError::UnsupportedMediaType | ApiError::UnsupportedMediaTypeSaying(_) => {
                ScimError::unsupported_media_type(message)
            }
            ApiError::RateLimited { .. } | ApiError::Throttled { .. } => {
                ScimError::too_many_requests(message)
            }
            ApiError::Unavailable(_) => ScimError::service_unavailable(message),
            ApiError::Internal(cause) => {
                tracing::error!(error = format!("{cause:#}"), "SCIM request failed");
                ScimError::internal()
            }
            ApiError::Gone(_) => ScimError::with_status(410, message),
        };
        Self {
            error: scim,
            retry_after: retry_after.or(matches!(error, ApiError::Unavailable(_)).then_some(1)),
        }
    }
}

/// A service's refusal in SCIM's words: a conflict is `uniqueness` (the only conflicts of user
/// and group writes are a taken e-mail or group name), a broken rule `invalidValue`.
impl From<ServiceError> for Failure {
    fn from(error: ServiceError) -> Self {
        match error {
            ServiceError::Conflict(message) => ScimError::uniqueness(message).into(),
            ServiceError::Invalid(invalid) => ScimError::invalid_value(invalid.0).into(),
            fields @ ServiceError::Fields(_) => ScimError::invalid_value(fields.to_string()).into(),
            other => ApiError::from(other).into(),
        }
    }
}

impl From<flow_app::ratelimit::RateLimitError> for Failure {
    fn from(error: flow_app::ratelimit::RateLimitError) -> Self {
        ApiError::from(error).into()
    }
}

impl IntoResponse for Failure {
    fn into_response(self) -> Response {
        let status =
            StatusCode::from_u16(self.error.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut response = (status, scim_json(self.error.to_json())).into_response();
        let headers = response.headers_mut();
        if let Some(seconds) = self.retry_after {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        if status == StatusCode::UNAUTHORIZED {
            headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

/// A JSON body with the SCIM media type.
pub struct ScimJson(pub Value);

impl IntoResponse for ScimJson {
    fn into_response(self) -> Response {
        scim_json(self.0).into_response()
    }
}

fn scim_json(body: Value) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static(SCIM_MEDIA_TYPE),
        )],
        body.to_string(),
    )
}

/// A resource with its `ETag` and, for a creation, its `Location`.
pub struct Resource {
    status: StatusCode,
    body: Value,
    version: Option<String>,
    location: Option<String>,
    rate: RateHeaders,
}

impl IntoResponse for Resource {
    fn into_response(self) -> Response {
        // 204 No Content (a PATCH of a group too large for one response) has no body.
        let mut response = if self.status == StatusCode::NO_CONTENT {
            (self.status, self.rate, ()).into_response()
        } else {
            (self.status, self.rate, ScimJson(self.body)).into_response()
        };
        let headers = response.headers_mut();
        if let Some(version) = self
            .version
            .and_then(|version| HeaderValue::from_str(&flow_scim::meta::etag(&version)).ok())
        {
            headers.insert(header::ETAG, version);
        }
        if let Some(location) = self
            .location
            .and_then(|location| HeaderValue::from_str(&location).ok())
        {
            headers.insert(header::LOCATION, location);
        }
        response
    }
}

/// The caller's organization, as `/v1` authenticates it, with SCIM errors.
pub struct ScimAuth(pub Auth);

impl FromRequestParts<AppState> for ScimAuth {
    type Rejection = Failure;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Failure> {
        Auth::any_scope(parts, state)
            .await
            .map(ScimAuth)
            .map_err(Failure::from)
    }
}

impl ScimAuth {
    /// Counts the request against the key's organization's `/v1` limit of its kind.
    async fn limit(&self, state: &AppState, operation: Operation) -> Result<RateHeaders, Failure> {
        Ok(RateHeaders(
            state.limiter.check(&self.0, operation, 1).await?,
        ))
    }
}

/// A request body: `application/scim+json` or `application/json` (415 otherwise), at most
/// [`MAX_BODY_BYTES`] (413), valid JSON (400 `invalidSyntax`).
pub struct ScimBody(pub Value);

impl<S: Send + Sync> FromRequest<S> for ScimBody {
    type Rejection = Failure;

    async fn from_request(request: Request, state: &S) -> Result<Self, Failure> {
        if !is_json(request.headers()) {
            return Err(ScimError::unsupported_media_type(format!(
                "send the body as {SCIM_MEDIA_TYPE} (or application/json)"
            ))
            .into());
        }
        let bytes = Bytes::from_request(request, state)
            .await
            .map_err(|rejection| {
                if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                    ScimError::payload_too_large(format!(
                        "the body is larger than {MAX_BODY_BYTES} bytes"
                    ))
                } else {
                    ScimError::bad_request(format!("could not read the request body: {rejection}"))
                }
            })?;
        serde_json::from_slice(&bytes)
            .map(ScimBody)
            .map_err(|error| {
                let text = error.to_string();
                let text = text.split(" at line ").next().unwrap_or(&text).to_owned();
                ScimError::invalid_syntax(format!("the body is not valid JSON: {text}")).into()
            })
    }
}

fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.split(';').next())
        .is_some_and(|mime| {
            let mime = mime.trim().to_ascii_lowercase();
            mime == "application/json" || mime == SCIM_MEDIA_TYPE
        })
}

/// The `If-Match` precondition of a change: 412 when the header names another version.
fn check_if_match(headers: &HeaderMap, meta: &ResourceMeta) -> Result<(), Failure> {
    let Some(header) = headers.get(header::IF_MATCH) else {
        return Ok(());
    };
    let matches = match (header.to_str(), &meta.version) {
        (Ok(header), Some(version)) => flow_scim::meta::if_match(header, version),
        _ => false,
    };
    if matches {
        Ok(())
    } else {
        Err(ScimError::precondition_failed(
            "If-Match does not name the resource's current version; read it again",
        )
        .into())
    }
}

/// Runs CPU-bound SCIM work on a request's body (parsing a resource or PATCH operations, which
/// may carry thousands of values) on the blocking pool, so the async threads keep serving
/// every other request meanwhile.
async fn off_async<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, ScimError> + Send + 'static,
) -> Result<T, Failure> {
    match tokio::task::spawn_blocking(work).await {
        Ok(result) => Ok(result?),
        Err(error) => {
            tracing::error!(error = %error, "SCIM parsing task failed");
            Err(ScimError::internal().into())
        }
    }
}

/// Runs CPU-bound work where it cannot move to the blocking pool (applying PATCH operations to
/// a row read and locked in an open transaction): the async thread hands its other tasks to
/// another thread first ([`tokio::task::block_in_place`]). On a single-threaded runtime (some
/// tests) it simply runs.
fn in_place<T>(work: impl FnOnce() -> T) -> T {
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current() {
        Ok(handle) if handle.runtime_flavor() == RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(work)
        }
        _ => work(),
    }
}

/// A path id that is not one of ours: the resource does not exist.
fn not_found(kind: &str) -> Failure {
    ScimError::not_found(format!("{kind} not found")).into()
}

fn base_url(state: &AppState) -> &str {
    &state.config.public_base_url
}

async fn service_provider_config(
    State(state): State<AppState>,
    auth: ScimAuth,
) -> Result<(RateHeaders, ScimJson), Failure> {
    let rate = auth.limit(&state, Operation::Read).await?;
    Ok((
        rate,
        ScimJson(discovery::service_provider_config(base_url(&state))),
    ))
}

async fn resource_types(
    State(state): State<AppState>,
    auth: ScimAuth,
) -> Result<(RateHeaders, ScimJson), Failure> {
    let rate = auth.limit(&state, Operation::Read).await?;
    Ok((rate, ScimJson(discovery::resource_types(base_url(&state)))))
}

async fn resource_type(
    State(state): State<AppState>,
    auth: ScimAuth,
    Path(name): Path<String>,
) -> Result<(RateHeaders, ScimJson), Failure> {
    let rate = auth.limit(&state, Operation::Read).await?;
    let resource =
        discovery::find_resource_type(&name).ok_or_else(|| not_found("resource type"))?;
    Ok((
        rate,
        ScimJson(discovery::resource_type(base_url(&state), resource)),
    ))
}

async fn schemas(
    State(state): State<AppState>,
    auth: ScimAuth,
) -> Result<(RateHeaders, ScimJson), Failure> {
    let rate = auth.limit(&state, Operation::Read).await?;
    Ok((rate, ScimJson(discovery::schemas(base_url(&state)))))
}

async fn schema(
    State(state): State<AppState>,
    auth: ScimAuth,
    Path(id): Path<String>,
) -> Result<(RateHeaders, ScimJson), Failure> {
    let rate = auth.limit(&state, Operation::Read).await?;
    let schema = discovery::find_schema(&id).ok_or_else(|| not_found("schema"))?;
    Ok((
        rate,
        ScimJson(discovery::schema_document(base_url(&state), schema)),
    ))
}

/// Query parameters of a list.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListQuery {
    filter: Option<String>,
    start_index: Option<String>,
    count: Option<String>,
    attributes: Option<String>,
    excluded_attributes: Option<String>,
}

/// Query parameters of a read of one resource.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReadQuery {
    attributes: Option<String>,
    excluded_attributes: Option<String>,
}

/// Reads the query string leniently: parameters are matched as written (SCIM's are
/// camelCase); anything undecodable is a 400.
fn query<T: serde::de::DeserializeOwned + Default>(uri: &axum::http::Uri) -> Result<T, Failure> {
    match uri.query() {
        None => Ok(T::default()),
        Some(text) => serde_html_form::from_str(text).map_err(|error| {
            ScimError::bad_request(format!("invalid query string: {error}")).into()
        }),
    }
}

/// The location of a resource.
fn location(state: &AppState, resource: ResourceType, id: &str) -> String {
    flow_scim::meta::location(base_url(state), resource, id)
}
