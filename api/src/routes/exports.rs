//! `GET /v1/exports/{id}`: the state of an export while it is generated, then the file itself,
//! streamed from the export store. `GET /v1/exports`: the organization's exports, newest first.

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use flow_app::exports::{self as service, Opened};
use flow_app::ratelimit::{Operation, page_cost};
use flow_common::db::exports::ExportRecord;
use flow_domain::ids::ExportId;
use flow_domain::ids::FlowId;
use flow_domain::report::{ExportFormat, ExportKind, ExportStatus};
use flow_domain::timestamp;
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::pagination::{Page, PageQuery};
use crate::error::{ApiError, ErrorBody, RateHeaders};
use crate::extract::{ApiPath, ApiQuery, Auth};
use crate::state::AppState;

/// Seconds a caller is asked to wait before polling a pending export again.
const RETRY_AFTER_SECONDS: u32 = 2;

/// Routes of this module.
pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_exports))
        .routes(routes!(get_export))
}

/// An export that is not ready yet (202).
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExportState {
    /// Identifier.
    pub export_id: ExportId,
    /// What it is an export of: `flow_report` or `compliance`.
    #[schema(value_type = String, example = "compliance")]
    pub kind: ExportKind,
    /// pending (waiting for a worker) or running.
    #[schema(value_type = String, example = "running")]
    pub status: ExportStatus,
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
            kind: export.kind,
            status: export.status,
            progress: export.progress_percent(),
            rows_written: export.rows_written,
            rows_total: export.rows_total,
            expires_at: export.expires_at,
        }
    }
}

/// An export as `GET /v1/exports` lists it.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExportSummary {
    /// Identifier.
    pub export_id: ExportId,
    /// What it is an export of: `flow_report` (`POST /v1/flows/report`) or `compliance`
    /// (`POST /v1/compliance/report`).
    #[schema(value_type = String, example = "flow_report")]
    pub kind: ExportKind,
    /// Flow reported on; null for a compliance export (it covers several flows).
    pub flow_id: Option<FlowId>,
    /// csv, excel or pdf.
    #[schema(value_type = String, example = "csv")]
    pub format: ExportFormat,
    /// pending, running, ready, failed or expired (now).
    #[schema(value_type = String, example = "ready")]
    pub status: ExportStatus,
    /// Rows written so far.
    pub rows_written: i64,
    /// Rows the file holds (or will), once known.
    pub rows_total: Option<i64>,
    /// Where the file is downloaded: `{base_url}/v1/exports/<export_id>`.
    pub download_url: String,
    /// Request time.
    #[serde(serialize_with = "timestamp::serialize")]
    #[schema(value_type = String, format = DateTime)]
    pub created_at: DateTime<Utc>,
    /// When the download address expires.
    #[serde(serialize_with = "timestamp::serialize")]
    #[schema(value_type = String, format = DateTime)]
    pub expires_at: DateTime<Utc>,
}

/// List the organization's exports, newest first, in keyset pages (expired ones too, until they
/// are purged).
#[utoipa::path(
    get,
    path = "/v1/exports",
    tag = "reports",
    params(PageQuery),
    responses(
        (status = 200, description = "A page of exports", body = Page<ExportSummary>),
        (status = 400, description = "Invalid limit or cursor", body = ErrorBody),
        (status = 429, description = "Read limit exceeded", body = ErrorBody),
    )
)]
pub async fn list_exports(
    State(state): State<AppState>,
    auth: Auth,
    ApiQuery(page): ApiQuery<PageQuery>,
) -> Result<(RateHeaders, Json<Page<ExportSummary>>), ApiError> {
    let limit = page.limit()?;
    let before = page.cursor(ExportId::parse)?;
    let rate = state
        .limiter
        .check(&auth, Operation::Read, page_cost(limit))
        .await?;
    let rows = service::list(&state, auth.acting(), before, limit + 1).await?;
    let now = Utc::now();
    let base_url = state
        .config
        .public_base_url
        .trim_end_matches('/')
        .to_owned();
    let page = Page::from_rows(
        rows,
        limit,
        |export| export.id.to_string(),
        |export| ExportSummary {
            export_id: export.id,
            kind: export.kind,
            flow_id: export.flow_id,
            format: export.format,
            status: service::status_at(&export, now),
            rows_written: export.rows_written,
            rows_total: export.rows_total,
            download_url: format!("{base_url}/v1/exports/{}", export.id),
            created_at: export.created_at,
            expires_at: export.expires_at,
        },
    );
    Ok((RateHeaders(rate), Json(page)))
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
        // Its content types, one per export format, are filled in by `crate::docs`.
        (status = 200, description = "The file", headers(("X-Data-As-Of" = String, description = "The instant the file's data is current to (RFC 3339)"))),
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
) -> Result<(RateHeaders, Response), ApiError> {
    let Some(id) = ExportId::parse(&id) else {
        return Err(super::unknown_id(&state, &auth, Operation::Read, "export").await);
    };
    let (opened, rate) = service::open(&state, auth.acting(), id).await?;
    let response = match opened {
        Opened::Working(export) => {
            let mut response =
                (StatusCode::ACCEPTED, Json(ExportState::from(&*export))).into_response();
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECONDS));
            response
        }
        Opened::Failed(reason) => {
            let body = ErrorBody {
                error: "internal_error",
                message: format!("export {id} failed: {reason}; request a new export"),
                retry_after: None,
            };
            (StatusCode::INTERNAL_SERVER_ERROR, Json(body)).into_response()
        }
        Opened::Ready(file) => crate::download::attachment(file),
    };
    Ok((RateHeaders(rate), response))
}
