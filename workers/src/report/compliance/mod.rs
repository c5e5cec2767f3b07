//! Compliance exports (issue 39): the compliance report of an organization across flows, one row
//! per person × flow, judged at the instant the export fixed when it was requested (its `asOf`,
//! else the request's instant, with the history read back, so a file generated later says what
//! was true then). Every row is read by one statement as it streams (for the whole organization
//! one ordered pass over its assignments), and memory stays flat; the rows then go through the
//! same writer and upload stages as a flow report's ([`super::job`]). The totals are counted
//! from the rows as they are written ([`Tally`]), so they agree with the rows by construction
//! and the population is read once. CSV ([`csv`]) and Excel ([`xlsx`]) hold every row, the PDF
//! ([`pdf`]) is the filed record: scope, instant, totals and the table.

mod csv;
mod pdf;
mod xlsx;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicI64;

use chrono::{DateTime, Utc};
use flow_app::exports::job as exports;
use flow_common::db::compliance::{
    Cell, ComplianceParameters, Counts, GroupBy, GroupCounts, ReportFlow, Tally,
};
use flow_common::db::exports::{ExportFile, ExportRecord};
use flow_common::db::replicas::Source;
use flow_common::db::snapshot::Snapshot;
use flow_domain::ids::{ExportId, FlowId, UserId};
use flow_domain::report::{ExportFormat, export_file_name};
use futures::TryStreamExt as _;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::FormatWriter;
use super::job::{self, Context};
use super::sink::{self, ChannelWriter};
use crate::runtime::JobError;

/// What the reader was doing when a compliance export's rows failed to read.
const READING: &str = "reading the compliance rows";

/// Everything about a compliance export except its rows.
#[derive(Debug, Clone)]
pub struct ComplianceHeader {
    /// The export.
    pub export_id: ExportId,
    /// The request replayed.
    pub parameters: ComplianceParameters,
    /// The flows, in report order.
    pub flows: Vec<ReportFlow>,
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
}

/// Compliant (person, flow) pairs of the required ones, as text: `151 of 200 (75.5 %)`.
pub fn compliant_text(totals: &Counts) -> String {
    match flow_app::compliance::percent(totals.compliant, totals.cells) {
        Some(percent) => format!("{} of {} ({percent:.1} %)", totals.compliant, totals.cells),
        None => "nothing required".to_owned(),
    }
}

/// Counts per status in the order the report lists them, then the pairs not required.
pub fn status_counts(totals: &Counts) -> [(&'static str, i64); 9] {
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

/// Counts `rows` into `tally`.
fn tally_rows(tally: &mut Tally, rows: &[ComplianceRow]) {
    for row in rows {
        tally.add(row.user_id, row.required, &row.status);
    }
}

/// One row of a compliance export: a person's standing in one flow.
#[derive(Debug, Clone)]
pub struct ComplianceRow {
    /// The person (the rows of one person come together).
    pub user_id: UserId,
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
            user_id: cell.user_id,
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
    let people = exports::compliance_population(snapshot.connection(), &scope).await?;
    let groups = match (parameters.group_by, format) {
        (Some(by), ExportFormat::Excel | ExportFormat::Pdf) => {
            let groups = exports::compliance_groups(snapshot.connection(), &scope, by).await?;
            Some((by, groups))
        }
        _ => None,
    };
    let rows_total = people * flows.len() as i64;
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
    let cells = exports::compliance_cells(snapshot.connection(), &scope)
        .map_ok(|cell| ComplianceRow::new(cell, &flow_names));
    let read = match job::send_rows(cells, &rows_sender, progress, cancel, 0, READING).await {
        Ok(count) => job::end_rows(&rows_sender, progress, count).await,
        Err(error) => Err(error),
    };
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
