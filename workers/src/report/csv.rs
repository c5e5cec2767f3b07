//! CSV export: RFC 4180 (comma, double quotes, CRLF), UTF-8, a header row, one row per
//! assignment. A detailed export adds three columns per module of the flow (status, startedAt,
//! completedAt) in flow order, then, after all of them so the earlier columns keep their places,
//! three more per module with its result (score, success, durationSeconds). Text cells that a spreadsheet would read as a formula (starting
//! with `=`, `+`, `-`, `@`, tab or carriage return) are prefixed with `'`.

use std::io::Write;

use flow_common::db::reports::ExportRow;

use super::FormatWriter;
use super::model::{ExportHeader, module_entries, push_timestamp, score_text};
use super::sink::ChannelWriter;

/// Writes the CSV file.
pub struct CsvWriter {
    writer: csv::Writer<ChannelWriter>,
    header: std::sync::Arc<ExportHeader>,
    field: Vec<u8>,
}

/// The cell as written: text a spreadsheet could execute gets a leading `'`.
pub fn guard_formula(text: &str) -> std::borrow::Cow<'_, str> {
    match text.as_bytes().first() {
        Some(b'=' | b'+' | b'-' | b'@' | b'\t' | b'\r') => format!("'{text}").into(),
        _ => text.into(),
    }
}

impl CsvWriter {
    /// Starts the file with its header row.
    pub fn new(header: std::sync::Arc<ExportHeader>, sink: ChannelWriter) -> anyhow::Result<Self> {
        let writer = csv::WriterBuilder::new()
            .terminator(csv::Terminator::CRLF)
            .buffer_capacity(256 * 1024)
            .from_writer(sink);
        let mut this = Self {
            writer,
            header,
            field: Vec::with_capacity(64),
        };
        this.write_header_row()?;
        Ok(this)
    }

    fn write_header_row(&mut self) -> anyhow::Result<()> {
        for title in [
            "assignmentId",
            "assigneeEmail",
            "assignedAt",
            "status",
            "completedModules",
            "totalModules",
            "dueDate",
            "startedAt",
            "completedAt",
            "priority",
        ] {
            self.writer.write_field(title)?;
        }
        if self.header.parameters.detailed {
            let header = self.header.clone();
            for module in &header.modules {
                let name = format!("module {} ({})", module.position + 1, module.name);
                for suffix in ["status", "startedAt", "completedAt"] {
                    self.writer
                        .write_field(guard_formula(&format!("{name} {suffix}")).as_bytes())?;
                }
            }
            for module in &header.modules {
                let name = format!("module {} ({})", module.position + 1, module.name);
                for suffix in ["score", "success", "durationSeconds"] {
                    self.writer
                        .write_field(guard_formula(&format!("{name} {suffix}")).as_bytes())?;
                }
            }
        }
        self.writer.write_record(None::<&[u8]>)?;
        Ok(())
    }

    fn timestamp(&mut self, at: Option<chrono::DateTime<chrono::Utc>>) -> csv::Result<()> {
        self.field.clear();
        if let Some(at) = at {
            push_timestamp(&mut self.field, at);
        }
        self.writer.write_field(&self.field)
    }

    fn number(&mut self, value: i64) -> csv::Result<()> {
        self.field.clear();
        write!(self.field, "{value}").map_err(csv::Error::from)?;
        self.writer.write_field(&self.field)
    }
}

impl FormatWriter for CsvWriter {
    fn write_rows(&mut self, rows: &[ExportRow]) -> anyhow::Result<()> {
        let total_modules = self.header.modules.len() as i64;
        let detailed = self.header.parameters.detailed;
        for row in rows {
            let assignment = &row.assignment;
            self.field.clear();
            write!(self.field, "{}", assignment.id)?;
            self.writer.write_field(&self.field)?;
            self.writer
                .write_field(guard_formula(&assignment.assignee_email).as_bytes())?;
            self.timestamp(Some(assignment.assigned_at))?;
            self.writer.write_field(assignment.status.as_str())?;
            self.number(assignment.completed_modules)?;
            self.number(total_modules)?;
            self.timestamp(assignment.due_at)?;
            self.timestamp(assignment.started_at)?;
            self.timestamp(assignment.completed_at)?;
            self.writer.write_field(assignment.priority.as_str())?;
            if detailed {
                let entries = module_entries(row);
                let mut next = entries.iter().peekable();
                let header = self.header.clone();
                for module in &header.modules {
                    match next.next_if(|entry| entry.position == module.position) {
                        Some(entry) => {
                            self.writer.write_field(entry.status.as_str())?;
                            self.timestamp(entry.started_at)?;
                            self.timestamp(entry.completed_at)?;
                        }
                        None => {
                            for _ in 0..3 {
                                self.writer.write_field([])?;
                            }
                        }
                    }
                }
                let mut next = entries.iter().peekable();
                for module in &header.modules {
                    let entry = next.next_if(|entry| entry.position == module.position);
                    self.field.clear();
                    if let Some(score) = entry.and_then(|entry| entry.score) {
                        self.field.extend_from_slice(score_text(score).as_bytes());
                    }
                    self.writer.write_field(&self.field)?;
                    match entry.and_then(|entry| entry.success) {
                        Some(success) => {
                            self.writer
                                .write_field(if success { "true" } else { "false" })?
                        }
                        None => self.writer.write_field([])?,
                    }
                    match entry.and_then(|entry| entry.duration_seconds) {
                        Some(seconds) => self.number(seconds)?,
                        None => self.writer.write_field([])?,
                    }
                }
            }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formula_like_cells_are_neutralised() {
        for text in ["=1+1", "+33", "-2", "@SUM(A1)", "\tx", "\rx"] {
            assert_eq!(guard_formula(text), format!("'{text}"));
        }
        assert_eq!(guard_formula("alice@example.com"), "alice@example.com");
        assert_eq!(guard_formula(""), "");
    }
}
