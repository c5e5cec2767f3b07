//! Generating one export. The report engine reads it in one snapshot (metrics, schedules,
//! aggregates and rows agree with each other, and with what the API answers for the same
//! parameters), and the rows flow through three stages running at once: this task streams them
//! from the engine's row source, a blocking thread formats them, and an upload task writes the
//! bytes to the export store. Bounded channels between the stages keep memory flat.
//!
//! The job holds a lease on its `exports` row, renewed by a heartbeat that also records progress.
//! If the lease is lost (this worker stalled and another took over), the job stops, and every
//! write it could still make is fenced on holding the lease.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use flow_app::engine::report::{Half, Report, ReportError};
use flow_app::exports::job as exports;
use flow_common::db::exports::{ExportFile, ExportParameters, ExportRecord};
use flow_common::db::replicas::{ReadPurpose, ReadRouter, Served, Source};
use flow_common::db::reports::ExportRow;
use flow_common::db::snapshot::Snapshot;
use flow_common::export_store::ExportStore;
use flow_domain::report::{ExportFormat, export_file_name};
use futures::stream::{Stream, StreamExt, TryStreamExt};
use sqlx::PgPool;
use tokio::sync::{OwnedSemaphorePermit, mpsc};
use tokio_util::sync::CancellationToken;

use super::FormatWriter;
use super::model::ExportHeader;
use super::sink::{self, ChannelWriter};
use crate::runtime::JobError;

/// Rows handed from the reader to the writer at once.
const ROW_BATCH: usize = 2_000;
/// Batches in flight between the reader and the writer.
pub(super) const BATCHES_IN_FLIGHT: usize = 4;

/// What every job of a worker shares.
pub struct Context {
    /// Postgres (the primary): claims, leases, progress.
    pub pool: PgPool,
    /// Where the export's report is read: a fresh replica that has replayed the request, else
    /// the primary.
    pub reads: ReadRouter,
    /// Where files go.
    pub store: ExportStore,
    /// This worker's identity on claimed rows.
    pub worker_id: String,
    /// How long a claim lasts without renewal.
    pub lease: Duration,
    /// Claims before an export is failed for good.
    pub max_attempts: i32,
    /// Directory for the Excel writer's temporary files (system default when `None`).
    pub temp_dir: Option<PathBuf>,
    /// Exports of at least this many rows without module details are read as two halves.
    pub split_rows: i64,
}

impl Context {
    /// `export`, claimed by this worker: the writes fenced on its lease.
    pub(super) fn claim(&self, export: &ExportRecord) -> exports::Claim<'_> {
        exports::Claim {
            pool: &self.pool,
            id: export.id,
            worker_id: &self.worker_id,
        }
    }
}

/// What the reader hands the writer stage.
pub(super) enum Rows<Row = ExportRow> {
    /// Rows, in order.
    Batch(Vec<Row>),
    /// Every row was read.
    End,
}

/// Runs a claimed export to its end: ready, failed, released for a retry, or abandoned to the
/// worker that took over its lease.
pub async fn run(
    context: Arc<Context>,
    export: ExportRecord,
    cancel: CancellationToken,
    permit: OwnedSemaphorePermit,
) {
    let _permit = permit;
    let started = Instant::now();
    let format = export.format();
    tracing::info!(export_id = %export.id, %format, attempt = export.attempts, "export started");
    let progress = Arc::new(AtomicI64::new(0));
    let job = cancel.child_token();
    let lease_lost = CancellationToken::new();
    let heartbeat = tokio::spawn(heartbeat(
        context.clone(),
        export.clone(),
        progress.clone(),
        job.clone(),
        lease_lost.clone(),
    ));
    let result = generate(&context, &export, &progress, &job).await;
    job.cancel();
    drop(heartbeat.await);
    let outcome = match result {
        Ok(Served {
            value: file,
            source,
        }) => {
            match context.claim(&export).complete(&file).await {
                Ok(true) => {
                    tracing::info!(
                        export_id = %export.id, %format, rows = file.rows_written,
                        bytes = file.size_bytes, elapsed_ms = started.elapsed().as_millis() as u64,
                        server = %source.server,
                        data_as_of = %flow_domain::format_timestamp(source.data_as_of),
                        "export ready"
                    );
                    "ready"
                }
                Ok(false) => {
                    discard(&context, &file).await;
                    tracing::warn!(export_id = %export.id, "export finished after its lease was taken over or it was withdrawn; discarded");
                    "lease_lost"
                }
                Err(error) => {
                    // The lease will lapse and another worker redo the export.
                    discard(&context, &file).await;
                    tracing::warn!(export_id = %export.id, %error, "could not record a finished export");
                    "retry"
                }
            }
        }
        Err(_) if lease_lost.is_cancelled() => {
            tracing::warn!(export_id = %export.id, "export lease lost; another worker took over");
            "lease_lost"
        }
        Err(_) if cancel.is_cancelled() => {
            release(&context, &export, Duration::ZERO, false).await;
            tracing::info!(export_id = %export.id, "export handed back on shutdown");
            "released"
        }
        Err(error) if error.is_transient() && export.attempts < context.max_attempts => {
            let delay = Duration::from_secs(5 * u64::try_from(export.attempts).unwrap_or(1));
            tracing::warn!(export_id = %export.id, error = format!("{error:#}"), ?delay, "export failed; will retry");
            release(&context, &export, delay, true).await;
            "retry"
        }
        Err(error) => {
            // The caller sees only a reason worded for them; the error chain (which may name
            // internal paths, hosts or queries) stays in the log and the row's error_detail.
            let detail = error.to_string();
            let reason = error
                .reason()
                .unwrap_or("the export could not be generated")
                .to_owned();
            tracing::error!(export_id = %export.id, error = %detail, "export failed");
            if let Err(error) = context.claim(&export).fail(&reason, Some(&detail)).await {
                tracing::warn!(export_id = %export.id, %error, "could not record a failed export");
            }
            "failed"
        }
    };
    metrics::counter!("flow_exports_total", "format" => format.as_str(), "outcome" => outcome)
        .increment(1);
    metrics::histogram!("flow_export_seconds", "format" => format.as_str())
        .record(started.elapsed().as_secs_f64());
}

async fn discard(context: &Context, file: &ExportFile) {
    let key = object_store::path::Path::from(file.object_key.as_str());
    if let Err(error) =
        object_store::ObjectStoreExt::delete(context.store.store().as_ref(), &key).await
    {
        tracing::warn!(%error, key = %file.object_key, "could not delete a discarded export file");
    }
}

async fn release(context: &Context, export: &ExportRecord, delay: Duration, count_attempt: bool) {
    if let Err(error) = context.claim(export).release(delay, count_attempt).await {
        // The lease lapses anyway and another worker takes the export over.
        tracing::warn!(export_id = %export.id, %error, "could not hand an export back");
    }
}

/// Renews the lease every third of its length and records progress; cancels the job when the
/// lease turns out to be someone else's.
async fn heartbeat(
    context: Arc<Context>,
    export: ExportRecord,
    progress: Arc<AtomicI64>,
    job: CancellationToken,
    lease_lost: CancellationToken,
) {
    let interval = (context.lease / 3).max(Duration::from_millis(100));
    loop {
        tokio::select! {
            () = job.cancelled() => return,
            () = tokio::time::sleep(interval) => {}
        }
        let written = progress.load(Ordering::Relaxed);
        match context.claim(&export).renew(context.lease, written).await {
            Ok(true) => {}
            Ok(false) => {
                lease_lost.cancel();
                job.cancel();
                return;
            }
            Err(error) => {
                tracing::warn!(export_id = %export.id, %error, "could not renew an export lease")
            }
        }
    }
}

/// Generates the export's file from a snapshot of a fresh replica that has replayed the primary's
/// WAL up to the request (what was committed before the request is in the file), else of the
/// primary. A passing failure on a replica (a conflict with recovery, a lost connection) starts
/// the file again elsewhere, the primary last.
async fn generate(
    context: &Context,
    export: &ExportRecord,
    progress: &AtomicI64,
    cancel: &CancellationToken,
) -> Result<Served<ExportFile>, JobError> {
    let mut read = context
        .reads
        .read(ReadPurpose::Export, export.requested_wal_position);
    loop {
        let (mut snapshot, source) = read.begin().await?;
        progress.store(0, Ordering::Relaxed);
        let outcome =
            generate_from(context, export, &mut snapshot, &source, progress, cancel).await;
        if let Some(served) = read.end(snapshot, source, outcome).await? {
            return Ok(served);
        }
    }
}

async fn generate_from(
    context: &Context,
    export: &ExportRecord,
    snapshot: &mut Snapshot,
    source: &Source,
    progress: &AtomicI64,
    cancel: &CancellationToken,
) -> Result<ExportFile, JobError> {
    let parameters = match export.parameters() {
        Ok(ExportParameters::FlowReport(parameters)) => parameters,
        Ok(ExportParameters::Compliance(parameters)) => {
            return super::compliance::generate(
                context,
                export,
                &parameters,
                snapshot,
                source,
                progress,
                cancel,
            )
            .await;
        }
        Err(error) => {
            return Err(JobError::Permanent {
                reason: None,
                error: anyhow::Error::new(error).context("reading the export's parameters"),
            });
        }
    };
    let format = export.format();
    let (flow, modules) = exports::flow(snapshot, export.org_id, parameters.flow_id)
        .await?
        .ok_or_else(|| JobError::refused("the flow no longer exists"))?;
    let mut report = Report::read(snapshot, &parameters)
        .await
        .map_err(permanent_if_invalid)?;
    let scope = report.scope;
    let rows_total = report.export_row_count(format);
    let aggregates = parameters.aggregate.clone().zip(report.aggregates.take());
    let chart = match (&aggregates, format) {
        (Some((spec, rows)), ExportFormat::Pdf) => Some((spec.by, rows.clone())),
        (None, ExportFormat::Pdf) => Some(
            exports::chart(snapshot, &scope, &parameters.timezone)
                .await
                .map_err(permanent_if_invalid)?,
        ),
        _ => None,
    };
    let module_rows_total = if format == ExportFormat::Excel && parameters.detailed {
        exports::module_progress_count(snapshot, &scope).await?
    } else {
        0
    };
    context
        .claim(export)
        .record_read(rows_total, source)
        .await?;
    let file_name = export_file_name(&flow.name, export.created_at, format);
    let key = context
        .store
        .object_key(export.id, export.attempts, &file_name);
    let header = Arc::new(ExportHeader {
        export_id: export.id,
        flow_id: flow.id,
        flow_name: flow.name,
        modules,
        parameters: parameters.clone(),
        generated_at: report.generated_at,
        data_as_of: source.data_as_of,
        metrics: report.metrics,
        aggregates,
        chart,
        schedules: std::mem::take(&mut report.schedules),
        rows_total,
        module_rows_total,
    });

    let (sink, chunks) = sink::channel();
    let upload = tokio::spawn(sink::upload(context.store.clone(), key.clone(), chunks));
    let (rows_sender, rows_receiver) = mpsc::channel(BATCHES_IN_FLIGHT);
    let temp_dir = context.temp_dir.clone();
    let writer = tokio::task::spawn_blocking(move || {
        write_file(header, format, sink, temp_dir, rows_receiver)
    });
    let read = read_rows(
        context,
        snapshot,
        &report,
        format,
        parameters.detailed,
        rows_sender,
        progress,
        cancel,
    )
    .await;
    let written = written(writer).await;
    let uploaded = uploaded(upload).await;
    let (rows_written, size) = stages_outcome(read, written, uploaded)?;
    Ok(ExportFile {
        object_key: key.to_string(),
        file_name,
        content_type: format.content_type().to_owned(),
        size_bytes: i64::try_from(size).unwrap_or(i64::MAX),
        rows_written,
    })
}

/// What the writer stage ended with.
pub(super) async fn written(
    writer: tokio::task::JoinHandle<Result<(), JobError>>,
) -> Result<(), JobError> {
    writer
        .await
        .map_err(|error| JobError::Permanent {
            reason: None,
            error: anyhow::anyhow!("the export writer panicked: {error}"),
        })
        .and_then(|result| result)
}

/// What the upload stage ended with: the size of the file.
pub(super) async fn uploaded(
    upload: tokio::task::JoinHandle<anyhow::Result<u64>>,
) -> Result<u64, JobError> {
    upload
        .await
        .map_err(|error| anyhow::anyhow!("the export upload panicked: {error}"))
        .and_then(|result| result)
        .map_err(JobError::classify)
}

/// The rows written and the file's size when the reader, the writer and the upload all ended
/// well; else the root cause, not the stages that stopped because of it.
pub(super) fn stages_outcome(
    read: Result<i64, JobError>,
    written: Result<(), JobError>,
    uploaded: Result<u64, JobError>,
) -> Result<(i64, u64), JobError> {
    match (read, written, uploaded) {
        (Ok(rows), Ok(()), Ok(size)) => Ok((rows, size)),
        (read, written, uploaded) => {
            let errors: Vec<JobError> = [read.err(), written.err(), uploaded.err()]
                .into_iter()
                .flatten()
                .collect();
            let cause = errors
                .iter()
                .position(|error| !error.is_interruption())
                .unwrap_or(0);
            Err(errors
                .into_iter()
                .nth(cause)
                .unwrap_or_else(|| JobError::interrupted("the export stopped")))
        }
    }
}

/// A report that cannot be answered as asked (too many periods) cannot be fixed by retrying.
fn permanent_if_invalid(error: ReportError) -> JobError {
    match error {
        ReportError::Invalid(invalid) => JobError::refused(invalid.0),
        ReportError::Database(error) => error.into(),
    }
}

/// Streams the export's rows to the writer in batches and ends with [`Rows::End`] only when every
/// row was read, so the writer never completes a truncated file. One statement; or, for
/// an export of at least `split_rows` rows without module details, two halves of assigned time
/// on two connections of the snapshot: polling the second half once sends its statement, so
/// Postgres joins and sorts it on the other core while the first half is written (the halves
/// are disjoint ranges of the ordering key, so their concatenation is the one order).
#[allow(clippy::too_many_arguments)]
async fn read_rows(
    context: &Context,
    snapshot: &Snapshot,
    report: &Report,
    format: ExportFormat,
    detailed: bool,
    sender: mpsc::Sender<Rows>,
    progress: &AtomicI64,
    cancel: &CancellationToken,
) -> Result<i64, JobError> {
    let mut own = snapshot.lane().await?;
    let mut first = own.join().await?;
    exports::allow_export_memory(&mut first).await?;
    let split =
        exports::split_point(&mut first, report, format, detailed, context.split_rows).await?;
    let helper = match split {
        Some(_) => snapshot.helper().await,
        None => None,
    };
    let count = match (split, helper) {
        (Some(at), Some(mut helper)) => {
            let mut second = helper.join().await?;
            exports::allow_export_memory(&mut second).await?;
            let first_rows = report.half_rows(&mut first, at, Half::Before);
            let mut second_rows = report.half_rows(&mut second, at, Half::From).peekable();
            // The second half's statement runs while the first half is sent; a failed or
            // cancelled first half stops waiting for it at once.
            let warm = async {
                tokio::select! {
                    () = cancel.cancelled() => {}
                    _ = std::pin::Pin::new(&mut second_rows).peek() => {}
                }
                Ok(())
            };
            let (sent, ()) = futures::future::try_join(
                send_rows(first_rows, &sender, progress, cancel, 0, READING),
                warm,
            )
            .await?;
            send_rows(second_rows, &sender, progress, cancel, sent, READING).await?
        }
        _ => {
            let rows = report.rows(&mut first, format, detailed);
            send_rows(rows, &sender, progress, cancel, 0, READING).await?
        }
    };
    end_rows(&sender, progress, count).await
}

/// What the reader was doing when a flow report's rows failed to read.
const READING: &str = "reading the export rows";

/// Sends `rows` to the writer stage in batches; `count` rows were sent before them. Returns the
/// count after them. A row that fails to read fails the export with the context `reading`.
pub(super) async fn send_rows<Row>(
    mut rows: impl Stream<Item = Result<Row, sqlx::Error>> + Unpin,
    sender: &mpsc::Sender<Rows<Row>>,
    progress: &AtomicI64,
    cancel: &CancellationToken,
    mut count: i64,
    reading: &'static str,
) -> Result<i64, JobError> {
    let mut batch = Vec::with_capacity(ROW_BATCH);
    let stopped = || JobError::interrupted("the export writer stopped");
    loop {
        let next = tokio::select! {
            biased;
            () = cancel.cancelled() => return Err(JobError::Permanent {
                reason: None,
                error: anyhow::anyhow!("the export was interrupted"),
            }),
            next = rows.try_next() => next,
        };
        let next = next.map_err(|error| JobError::from(error).context(reading))?;
        let Some(row) = next else { break };
        batch.push(row);
        if batch.len() == ROW_BATCH {
            count += batch.len() as i64;
            let full = std::mem::replace(&mut batch, Vec::with_capacity(ROW_BATCH));
            sender
                .send(Rows::Batch(full))
                .await
                .map_err(|_| stopped())?;
            progress.store(count, Ordering::Relaxed);
        }
    }
    if !batch.is_empty() {
        count += batch.len() as i64;
        sender
            .send(Rows::Batch(batch))
            .await
            .map_err(|_| stopped())?;
    }
    Ok(count)
}

/// Tells the writer stage that all `count` rows were read, so it finishes the file. Returns
/// `count`.
pub(super) async fn end_rows<Row>(
    sender: &mpsc::Sender<Rows<Row>>,
    progress: &AtomicI64,
    count: i64,
) -> Result<i64, JobError> {
    sender
        .send(Rows::End)
        .await
        .map_err(|_| JobError::interrupted("the export writer stopped"))?;
    progress.store(count, Ordering::Relaxed);
    Ok(count)
}

/// The writer stage (on a blocking thread): formats every batch, then finishes the file.
fn write_file(
    header: Arc<ExportHeader>,
    format: ExportFormat,
    sink: ChannelWriter,
    temp_dir: Option<PathBuf>,
    mut rows: mpsc::Receiver<Rows>,
) -> Result<(), JobError> {
    let writer: Box<dyn FormatWriter> = match format {
        ExportFormat::Csv => {
            Box::new(super::csv::CsvWriter::new(header, sink).map_err(JobError::classify)?)
        }
        ExportFormat::Excel => Box::new(
            super::xlsx::XlsxWriter::new(header, sink, temp_dir.as_deref())
                .map_err(JobError::classify)?,
        ),
        ExportFormat::Pdf => Box::new(super::pdf::PdfWriter::new(header, sink)),
    };
    drain(writer, &mut rows)
}

/// Formats every batch `rows` brings with `writer`, then finishes the file; a reader that stops
/// before [`Rows::End`] leaves the file unfinished (its upload is aborted).
pub(super) fn drain<Row>(
    mut writer: Box<dyn FormatWriter<Row>>,
    rows: &mut mpsc::Receiver<Rows<Row>>,
) -> Result<(), JobError> {
    loop {
        match rows.blocking_recv() {
            Some(Rows::Batch(batch)) => writer.write_rows(&batch).map_err(JobError::classify)?,
            Some(Rows::End) => return writer.finish().map_err(JobError::classify),
            None => {
                return Err(JobError::interrupted(
                    "the row reader stopped before the last row",
                ));
            }
        }
    }
}
