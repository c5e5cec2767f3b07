//! The compliance CSV: RFC 4180 (comma, double quotes, CRLF), UTF-8, a header row, then one row
//! per person × flow: `email, name, department, manager, flow, status, assignedAt, dueDate,
//! completedAt, expiresAt, required` (`required`: `true`, or `false` outside the audience of a
//! flow required of a rule's audience; instants as the API writes them, in UTC; empty when none). Text a
//! spreadsheet would read as a formula gets a leading `'`, as in the flow report's CSV.

use chrono::{DateTime, Utc};

use super::super::FormatWriter;
use super::super::csv::guard_formula;
use super::super::model::push_timestamp;
use super::super::sink::ChannelWriter;
use super::ComplianceRow;

/// The header row.
pub const COLUMNS: [&str; 11] = [
    "email",
    "name",
    "department",
    "manager",
    "flow",
    "status",
    "assignedAt",
    "dueDate",
    "completedAt",
    "expiresAt",
    "required",
];

/// Writes the CSV file.
pub struct CsvWriter {
    writer: csv::Writer<ChannelWriter>,
    field: Vec<u8>,
}

impl CsvWriter {
    /// Starts the file with its header row.
    pub fn new(sink: ChannelWriter) -> anyhow::Result<Self> {
        let mut writer = csv::WriterBuilder::new()
            .terminator(csv::Terminator::CRLF)
            .buffer_capacity(256 * 1024)
            .from_writer(sink);
        writer.write_record(COLUMNS)?;
        Ok(Self {
            writer,
            field: Vec::with_capacity(32),
        })
    }

    fn text(&mut self, text: Option<&str>) -> csv::Result<()> {
        self.writer
            .write_field(guard_formula(text.unwrap_or_default()).as_bytes())
    }

    fn timestamp(&mut self, at: Option<DateTime<Utc>>) -> csv::Result<()> {
        self.field.clear();
        if let Some(at) = at {
            push_timestamp(&mut self.field, at);
        }
        self.writer.write_field(&self.field)
    }
}

impl FormatWriter<ComplianceRow> for CsvWriter {
    fn write_rows(&mut self, rows: &[ComplianceRow]) -> anyhow::Result<()> {
        for row in rows {
            self.text(Some(&row.email))?;
            self.text(row.name.as_deref())?;
            self.text(row.department.as_deref())?;
            self.text(row.manager.as_deref())?;
            self.text(Some(&row.flow))?;
            self.writer.write_field(&row.status)?;
            self.timestamp(row.assigned_at)?;
            self.timestamp(row.due_at)?;
            self.timestamp(row.completed_at)?;
            self.timestamp(row.expires_at)?;
            self.writer
                .write_field(if row.required { "true" } else { "false" })?;
            self.writer.write_record(None::<&[u8]>)?;
        }
        Ok(())
    }

    fn finish(self: Box<Self>) -> anyhow::Result<()> {
        let sink = self
            .writer
            .into_inner()
            .map_err(|error| anyhow::anyhow!("flushing the CSV file: {}", error.error()))?;
        sink.finish()?;
        Ok(())
    }
}
