//! `GET /v1/exports/{id}`: the state of an export while it is generated, then the file itself,
//! streamed from the export store.

use axum::Json;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use flow_common::db::exports::{self, CapReached, CreateError, ExportRecord, ExportStatus};
use flow_domain::ids::ExportId;
use flow_domain::{format_timestamp, timestamp};
use futures::TryStreamExt;
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::error::{ApiError, ErrorBody};
use crate::extract::{ApiPath, Auth};
use crate::ratelimit::{Operation, RateInfo};
use crate::routes::report::DataAsOf;
use crate::state::AppState;

/// Seconds a caller is asked to wait before polling a pending export again.
const RETRY_AFTER_SECONDS: u32 = 2;

/// Seconds a caller at its cap of exports waiting or running is asked to wait: about what a
/// small export takes; `GET /v1/exports/{id}` says when one is ready.
const QUEUED_RETRY_AFTER_SECONDS: u64 = 15;

/// Routes of this module.
pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(get_export))
}

/// An export that is not ready yet (202).
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExportState {
    /// Identifier.
    pub export_id: ExportId,
    /// pending (waiting for a worker) or running.
    pub status: String,
    /// Percent of the rows written so far, 0 to 100.
    pub progress: f64,
    /// Rows written so far.
    pub rows_written: i64,
    /// Rows the file will hold, once known.
    pub rows_total: Option<i64>,
    /// When the download address expires.
    #[serde(serialize_with = "timestamp::serialize")]
    #[schema(value_type = String, format = DateTime)]
    pub expires_at: DateTime<Utc>,
}

impl From<&ExportRecord> for ExportState {
    fn from(export: &ExportRecord) -> Self {
        Self {
            export_id: export.id,
            status: export.status().as_str().to_owned(),
            progress: export.progress_percent(),
            rows_written: export.rows_written,
            rows_total: export.rows_total,
            expires_at: export.expires_at,
        }
    }
}

/// Download an export.
///
/// 202 with `Retry-After` and the progress while the export is generated; 200 with the file once
/// it is ready; 410 once it has expired; 500 if it failed (request a new export).
#[utoipa::path(
    get,
    path = "/v1/exports/{id}",
    tag = "reports",
    params(("id" = String, Path, description = "Export id (exp_…)")),
    responses(
        (status = 200, description = "The file", headers(("X-Data-As-Of" = String, description = "The instant the file's data is current to (RFC 3339)")), content(
            (String = "text/csv"),
            (Vec<u8> = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"),
            (Vec<u8> = "application/pdf"),
        )),
        (status = 202, description = "Still being generated; poll again after Retry-After seconds", body = ExportState),
        (status = 404, description = "No such export in this organization", body = ErrorBody),
        (status = 410, description = "The export has expired", body = ErrorBody),
        (status = 429, description = "Read limit exceeded", body = ErrorBody),
        (status = 500, description = "The export failed; request a new export", body = ErrorBody),
    )
)]
pub async fn get_export(
    State(state): State<AppState>,
    auth: Auth,
    ApiPath(id): ApiPath<String>,
) -> Result<(RateInfo, Response), ApiError> {
    let rate = state.limiter.check(&auth, Operation::Read, 1).await?;
    let id = ExportId::parse(&id).ok_or_else(|| ApiError::not_found("export"))?;
    let export = exports::get(&state.db, auth.org_id(), id)
        .await?
        .ok_or_else(|| ApiError::not_found("export"))?;
    if export.expires_at <= Utc::now() || export.status() == ExportStatus::Expired {
        return Err(ApiError::Gone(format!(
            "export {id} expired at {}; request a new export",
            format_timestamp(export.expires_at)
        )));
    }
    let response = match export.status() {
        ExportStatus::Pending | ExportStatus::Running => {
            let mut response =
                (StatusCode::ACCEPTED, Json(ExportState::from(&export))).into_response();
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECONDS));
            Ok(response)
        }
        ExportStatus::Failed => {
            // `error` is worded for the caller by the report-worker; the internal detail stays in
            // the worker's log and the row's error_detail.
            let reason = export
                .error
                .as_deref()
                .unwrap_or("the export could not be generated");
            let body = ErrorBody {
                error: "internal_error",
                message: format!("export {id} failed: {reason}; request a new export"),
                retry_after: None,
            };
            Ok((StatusCode::INTERNAL_SERVER_ERROR, Json(body)).into_response())
        }
        ExportStatus::Ready | ExportStatus::Expired => download(&state, &export).await,
    }?;
    Ok((rate, response))
}

/// Streams the file from the export store without holding it in memory.
async fn download(state: &AppState, export: &ExportRecord) -> Result<Response, ApiError> {
    let key = export.object_key.as_deref().ok_or_else(|| {
        ApiError::Internal(anyhow::anyhow!(
            "export {} is ready without a file",
            export.id
        ))
    })?;
    let file = state.export_store.get(key).await.map_err(|error| {
        ApiError::Internal(anyhow::Error::new(error).context(format!(
            "opening the file of export {} in the export store",
            export.id
        )))
    })?;
    let size = file.meta.size;
    let stream = file.into_stream().map_err(std::io::Error::other);
    let content_type = export
        .content_type
        .clone()
        .unwrap_or_else(|| export.format().content_type().to_owned());
    let file_name = export
        .file_name
        .clone()
        .unwrap_or_else(|| format!("{}.{}", export.id, export.format().extension()));
    let disposition = format!("attachment; filename=\"{}\"", file_name.replace('"', ""));
    let mut response = Response::new(Body::from_stream(stream));
    if let Some(data_as_of) = export.data_as_of {
        response = (DataAsOf(data_as_of), response).into_response();
    }
    let headers = response.headers_mut();
    for (name, value) in [
        (header::CONTENT_TYPE, content_type),
        (header::CONTENT_DISPOSITION, disposition),
        (header::CONTENT_LENGTH, size.to_string()),
        (header::CACHE_CONTROL, "private, no-store".to_owned()),
    ] {
        if let Ok(value) = HeaderValue::from_str(&value) {
            headers.insert(name, value);
        }
    }
    Ok(response)
}

/// An organization at one of its export caps: 429, to retry once an export finishes (the cap of
/// exports waiting or running) or once the oldest file expires (the cap of stored bytes).
impl From<CapReached> for ApiError {
    fn from(reached: CapReached) -> Self {
        let retry_after = match &reached {
            CapReached::Queued { .. } => QUEUED_RETRY_AFTER_SECONDS,
            CapReached::Stored { oldest_expiry, .. } => oldest_expiry
                .map(|expiry| (expiry - Utc::now()).num_seconds().saturating_add(1))
                .unwrap_or(60)
                .max(1)
                .unsigned_abs(),
        };
        ApiError::Throttled {
            message: reached.to_string(),
            retry_after,
        }
    }
}

impl From<CreateError> for ApiError {
    fn from(error: CreateError) -> Self {
        match error {
            CreateError::Cap(reached) => reached.into(),
            CreateError::Database(error) => error.into(),
        }
    }
}
