//! Compliance exports (issue 39): the compliance report of an organization across flows, one row
//! per person × flow, judged at the instant the export fixed when it was requested (its `asOf`,
//! else the request's instant, with the history read back, so a file generated later says what
//! was true then). Every row is read by one statement as it streams (for the whole organization
//! one ordered pass over its assignments, as the totals read them), in the snapshot the totals
//! were read in, so the totals and every row agree and memory stays flat; the rows then go through the same writer and upload stages as a flow report's
//! ([`super::job`]). CSV ([`csv`]) and Excel ([`xlsx`]) hold every row, the PDF ([`pdf`]) is
//! the filed record: scope, instant, totals and the table.

mod csv;
mod pdf;
mod xlsx;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use chrono::{DateTime, Utc};
use flow_app::exports::job as exports;
use flow_common::db::compliance::{
    Cell, ComplianceParameters, Counts, GroupBy, GroupCounts, ReportFlow,
};
use flow_common::db::exports::{ExportFile, ExportRecord};
use flow_common::db::replicas::Source;
use flow_common::db::snapshot::Snapshot;
use flow_domain::ids::{ExportId, FlowId};
use flow_domain::report::{ExportFormat, export_file_name};
use futures::TryStreamExt as _;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::FormatWriter;
use super::job::{self, Context, Rows};
use super::sink::{self, ChannelWriter};
use crate::runtime::JobError;

/// Rows sent to the writer at a time.
const ROWS_PER_BATCH: usize = 5_000;
/// Groups of the roll-up read per statement.
const GROUPS_PER_PAGE: i64 = 1_000;

/// Everything about a compliance export except its rows.
#[derive(Debug, Clone)]
pub struct ComplianceHeader {
    /// The export.
    pub export_id: ExportId,
    /// The request replayed.
    pub parameters: ComplianceParameters,
    /// The flows, in report order.
    pub flows: Vec<ReportFlow>,
    /// The counts of the whole population.
    pub totals: Counts,
    /// The roll-up, when the request grouped (Excel and PDF).
    pub groups: Option<(GroupBy, Vec<GroupCounts>)>,
    /// When the file was generated.
    pub generated_at: DateTime<Utc>,
    /// The instant the data read is current to.
    pub data_as_of: DateTime<Utc>,
    /// Rows the file holds (CSV, Excel): people × flows, required or not.
    pub rows_total: i64,
}

impl ComplianceHeader {
    /// The instant judged, as people read it: `2026-06-30 23:59:59 UTC`.
    pub fn as_of_text(&self) -> String {
        format!("{} UTC", self.parameters.as_of.format("%Y-%m-%d %H:%M:%S"))
    }

    /// Where the instant came from.
    pub fn as_of_origin(&self) -> &'static str {
        if self.parameters.as_of_given {
            "the asOf of the request"
        } else {
            "the instant the export was requested"
        }
    }

    /// The flows as one line of text.
    pub fn flows_text(&self) -> String {
        let names: Vec<&str> = self.flows.iter().map(|flow| flow.name.as_str()).collect();
        if self.parameters.required {
            format!("the organization's required flows: {}", names.join(", "))
        } else {
            names.join(", ")
        }
    }

    /// Who is counted, as (label, value) lines: one per filter, or "everyone".
    pub fn population_lines(&self) -> Vec<(&'static str, String)> {
        let parameters = &self.parameters;
        let mut lines = Vec::new();
        if let Some(department) = &parameters.department {
            lines.push(("Department", department.clone()));
        }
        if let Some(group_id) = parameters.group_id {
            lines.push(("Group", group_id.to_string()));
        }
        if let Some(manager_id) = &parameters.manager_id {
            lines.push(("Manager", manager_id.clone()));
        }
        if let Some(active) = parameters.active {
            let people = if active {
                "active people only"
            } else {
                "deactivated people only"
            };
            lines.push(("Active", people.to_owned()));
        }
        if let Some(emails) = &parameters.user_emails {
            lines.push(("People", format!("{} named by e-mail", emails.len())));
        }
        if lines.is_empty() {
            lines.push(("People", "everyone".to_owned()));
        }
        lines
    }

    /// Compliant (person, flow) pairs of the required ones, as text: `151 of 200 (75.5 %)`.
    pub fn compliant_text(&self) -> String {
        let totals = &self.totals;
        match flow_app::compliance::percent(totals.compliant, totals.cells) {
            Some(percent) => format!("{} of {} ({percent:.1} %)", totals.compliant, totals.cells),
            None => "nothing required".to_owned(),
        }
    }

    /// Counts per status in the order the report lists them, then the pairs not required.
    pub fn status_counts(&self) -> [(&'static str, i64); 9] {
        let totals = &self.totals;
        [
            ("compliant", totals.compliant),
            ("due_soon", totals.due_soon),
            ("overdue", totals.overdue),
            ("expired", totals.expired),
            ("pending", totals.pending),
            ("in_progress", totals.in_progress),
            ("not_assigned", totals.not_assigned),
            ("cancelled", totals.cancelled),
            ("not_required", totals.not_required),
        ]
    }
}

/// One row of a compliance export: a person's standing in one flow.
#[derive(Debug, Clone)]
pub struct ComplianceRow {
    pub email: String,
    pub name: Option<String>,
    pub department: Option<String>,
    /// The manager's name, else their id.
    pub manager: Option<String>,
    /// The flow's name.
    pub flow: String,
    /// compliant, due_soon, overdue, expired, pending, in_progress, not_assigned, cancelled or
    /// not_required.
    pub status: String,
    /// Whether the flow is required of the person (false outside its rule's audience).
    pub required: bool,
    pub assigned_at: Option<DateTime<Utc>>,
    pub due_at: Option<DateTime<Utc>>,
    pub completed_at: Option<DateTime<Utc>>,
    pub expires_at: Option<DateTime<Utc>>,
}

impl ComplianceRow {
    fn new(cell: Cell, flow_names: &HashMap<FlowId, String>) -> Self {
        Self {
            flow: flow_names.get(&cell.flow_id).cloned().unwrap_or_default(),
            email: cell.email,
            name: cell.name,
            department: cell.department,
            manager: cell.manager_name.or(cell.manager_id),
            status: cell.status,
            required: cell.required,
            assigned_at: cell.assigned_at,
            due_at: cell.due_at,
            completed_at: cell.completed_at,
            expires_at: cell.expires_at,
        }
    }
}

/// Generates a compliance export's file from `snapshot`.
pub(super) async fn generate(
    context: &Context,
    export: &ExportRecord,
    parameters: &ComplianceParameters,
    snapshot: &mut Snapshot,
    source: &Source,
    progress: &AtomicI64,
    cancel: &CancellationToken,
) -> Result<ExportFile, JobError> {
    let format = export.format();
    let flows = exports::compliance_flows(snapshot, export.org_id, &parameters.flow_ids)
        .await?
        .ok_or_else(|| JobError::refused("a flow of this compliance report no longer exists"))?;
    let scope = parameters.scope(export.org_id);
    exports::allow_export_memory(snapshot.connection()).await?;
    let totals = exports::compliance_totals(snapshot.connection(), &scope).await?;
    let groups = match (parameters.group_by, format) {
        (Some(by), ExportFormat::Excel | ExportFormat::Pdf) => {
            let mut groups: Vec<GroupCounts> = Vec::new();
            loop {
                let after = groups.last().map(|group| group.key.clone());
                let page = exports::compliance_groups(
                    snapshot.connection(),
                    &scope,
                    by,
                    after.as_deref(),
                    GROUPS_PER_PAGE,
                )
                .await?;
                let done = (page.len() as i64) < GROUPS_PER_PAGE;
                groups.extend(page);
                if done {
                    break;
                }
            }
            Some((by, groups))
        }
        _ => None,
    };
    let rows_total = totals.rows();
    context
        .claim(export)
        .record_read(rows_total, source)
        .await?;
    let file_name = export_file_name("compliance", export.created_at, format);
    let key = context
        .store
        .object_key(export.id, export.attempts, &file_name);
    let flow_names: HashMap<FlowId, String> = flows
        .iter()
        .map(|flow| (flow.id, flow.name.clone()))
        .collect();
    let header = Arc::new(ComplianceHeader {
        export_id: export.id,
        parameters: parameters.clone(),
        flows,
        totals,
        groups,
        generated_at: Utc::now(),
        data_as_of: source.data_as_of,
        rows_total,
    });

    let (sink, chunks) = sink::channel();
    let upload = tokio::spawn(sink::upload(context.store.clone(), key.clone(), chunks));
    let (rows_sender, mut rows_receiver) = mpsc::channel(job::BATCHES_IN_FLIGHT);
    let temp_dir = context.temp_dir.clone();
    let writer = tokio::task::spawn_blocking(move || {
        let writer = open_writer(header, format, sink, temp_dir)?;
        job::drain(writer, &mut rows_receiver)
    });
    let read = read_rows(snapshot, &scope, &flow_names, rows_sender, progress, cancel).await;
    let written = job::written(writer).await;
    let uploaded = job::uploaded(upload).await;
    let (rows_written, size) = job::stages_outcome(read, written, uploaded)?;
    Ok(ExportFile {
        object_key: key.to_string(),
        file_name,
        content_type: format.content_type().to_owned(),
        size_bytes: i64::try_from(size).unwrap_or(i64::MAX),
        rows_written,
    })
}

/// The writer of `format`.
fn open_writer(
    header: Arc<ComplianceHeader>,
    format: ExportFormat,
    sink: ChannelWriter,
    temp_dir: Option<PathBuf>,
) -> Result<Box<dyn FormatWriter<ComplianceRow>>, JobError> {
    Ok(match format {
        ExportFormat::Csv => Box::new(csv::CsvWriter::new(sink).map_err(JobError::classify)?),
        ExportFormat::Excel => Box::new(
            xlsx::XlsxWriter::new(header, sink, temp_dir.as_deref()).map_err(JobError::classify)?,
        ),
        ExportFormat::Pdf => Box::new(pdf::PdfWriter::new(header, sink)),
    })
}

/// Reads every cell of the population in one statement (user id order, each person's flows in
/// report order) as it streams, and sends the rows to the writer in batches, ending with
/// [`Rows::End`] only when every row was read. Returns the rows sent.
async fn read_rows(
    snapshot: &mut Snapshot,
    scope: &flow_common::db::compliance::Scope,
    flow_names: &HashMap<FlowId, String>,
    sender: mpsc::Sender<Rows<ComplianceRow>>,
    progress: &AtomicI64,
    cancel: &CancellationToken,
) -> Result<i64, JobError> {
    let stopped = || JobError::interrupted("the export writer stopped");
    let reading = |error: sqlx::Error| JobError::from(error).context("reading the compliance rows");
    let mut cells = exports::compliance_cells(snapshot.connection(), scope);
    let mut count = 0i64;
    let mut batch: Vec<ComplianceRow> = Vec::with_capacity(ROWS_PER_BATCH);
    while let Some(cell) = cells.try_next().await.map_err(reading)? {
        batch.push(ComplianceRow::new(cell, flow_names));
        if batch.len() == ROWS_PER_BATCH {
            if cancel.is_cancelled() {
                return Err(JobError::Permanent {
                    reason: None,
                    error: anyhow::anyhow!("the export was interrupted"),
                });
            }
            count += batch.len() as i64;
            let full = std::mem::replace(&mut batch, Vec::with_capacity(ROWS_PER_BATCH));
            sender
                .send(Rows::Batch(full))
                .await
                .map_err(|_| stopped())?;
            progress.store(count, Ordering::Relaxed);
        }
    }
    drop(cells);
    if !batch.is_empty() {
        count += batch.len() as i64;
        sender
            .send(Rows::Batch(batch))
            .await
            .map_err(|_| stopped())?;
        progress.store(count, Ordering::Relaxed);
    }
    sender.send(Rows::End).await.map_err(|_| stopped())?;
    Ok(count)
}
