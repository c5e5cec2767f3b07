//! Exports, for every surface: an export's state while a report-worker generates it, then its
//! file, opened in the export store and streamed without being held in memory. Opening an
//! export counts as one read against the organization's limit, whatever the surface. How the
//! report-worker claims, generates and sweeps them is [`job`].

pub mod job;

use chrono::{DateTime, Utc};
use flow_common::db::exports::{self, ExportRecord};
use flow_domain::format_timestamp;
use flow_domain::ids::ExportId;
use flow_domain::report::ExportStatus;
use futures::TryStreamExt;
use futures::stream::BoxStream;

use crate::Context;
use crate::ratelimit::{Operation, RateInfo};
use crate::{Acting, ServiceError};

/// One export of the organization, whatever its state.
pub async fn get(
    ctx: &Context,
    acting: Acting<'_>,
    id: ExportId,
) -> Result<ExportRecord, ServiceError> {
    exports::get(&ctx.db, acting.org_id(), id)
        .await?
        .ok_or(ServiceError::NotFound("export"))
}

/// Up to `limit` of the organization's exports before `before`, newest first.
pub async fn list(
    ctx: &Context,
    acting: Acting<'_>,
    before: Option<ExportId>,
    limit: i64,
) -> Result<Vec<ExportRecord>, ServiceError> {
    Ok(exports::list(&ctx.db, acting.org_id(), before, limit).await?)
}

/// The state of an export at `now`: an export past its expiry is expired even before the
/// report-worker has purged its file.
pub fn status_at(export: &ExportRecord, now: DateTime<Utc>) -> ExportStatus {
    if export.expires_at <= now {
        ExportStatus::Expired
    } else {
        export.status
    }
}

/// An export's file, ready to stream.
pub struct ExportFile {
    /// The bytes, read from the export store as they are sent.
    pub stream: BoxStream<'static, std::io::Result<bytes::Bytes>>,
    /// Size in bytes.
    pub size: u64,
    /// `Content-Type`.
    pub content_type: String,
    /// Download file name.
    pub file_name: String,
    /// The instant the file's data is current to, when recorded.
    pub data_as_of: Option<DateTime<Utc>>,
}

/// What opening an export finds.
pub enum Opened {
    /// Still waiting for a worker, or being generated.
    Working(Box<ExportRecord>),
    /// Generation failed; the reason is worded for the caller by the report-worker (the
    /// internal detail stays in the worker's log and the row's `error_detail`).
    Failed(String),
    /// The file.
    Ready(ExportFile),
}

/// Opens an export: its state while it is generated, its file once ready. An expired export is
/// [`ServiceError::Gone`].
pub async fn open(
    ctx: &Context,
    acting: Acting<'_>,
    id: ExportId,
) -> Result<(Opened, RateInfo), ServiceError> {
    let rate = ctx.limiter.check(acting.caller, Operation::Read, 1).await?;
    let export = get(ctx, acting, id).await?;
    let opened = match status_at(&export, Utc::now()) {
        ExportStatus::Expired => {
            return Err(ServiceError::Gone(format!(
                "export {id} expired at {}; request a new export",
                format_timestamp(export.expires_at)
            )));
        }
        ExportStatus::Pending | ExportStatus::Running => Opened::Working(Box::new(export)),
        ExportStatus::Failed => Opened::Failed(
            export
                .error
                .unwrap_or_else(|| "the export could not be generated".to_owned()),
        ),
        ExportStatus::Ready => Opened::Ready(file(ctx, &export).await?),
    };
    Ok((opened, rate))
}

/// Opens the file of a ready export in the export store.
async fn file(ctx: &Context, export: &ExportRecord) -> Result<ExportFile, ServiceError> {
    let key = export.object_key.as_deref().ok_or_else(|| {
        ServiceError::Internal(anyhow::anyhow!(
            "export {} is ready without a file",
            export.id
        ))
    })?;
    let file = ctx.export_store.get(key).await.map_err(|error| {
        ServiceError::Internal(anyhow::Error::new(error).context(format!(
            "opening the file of export {} in the export store",
            export.id
        )))
    })?;
    let size = file.meta.size;
    Ok(ExportFile {
        stream: Box::pin(file.into_stream().map_err(std::io::Error::other)),
        size,
        content_type: export
            .content_type
            .clone()
            .unwrap_or_else(|| export.format.content_type().to_owned()),
        file_name: export
            .file_name
            .clone()
            .unwrap_or_else(|| format!("{}.{}", export.id, export.format.extension())),
        data_as_of: export.data_as_of,
    })
}
