//! The compliance workbook: a Totals sheet (the scope, the instant judged, the counts of the
//! whole population per status and compliant of required), the Compliance sheet with one row
//! per person × flow (continued on "Compliance (2)" and so on past Excel's row limit), and with
//! a roll-up a Groups sheet. Typed cells (instants as Excel date-times in UTC, counts as
//! numbers), the rows written in constant-memory mode like the flow report's workbook; the
//! Totals sheet, first in the workbook, is a small sheet kept in memory and written last, once
//! every row has been counted.

use std::path::Path;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use rust_xlsxwriter::{Format, Workbook, Worksheet, XlsxError};

use super::super::FormatWriter;
use super::super::sink::ChannelWriter;
use super::super::xlsx::{ROWS_PER_SHEET, SheetRun, add_table_sheet, excel_time, sheet_names};
use super::{ComplianceHeader, ComplianceRow, status_counts, tally_rows};
use flow_common::db::compliance::{Counts, Tally};

const ROW_COLUMNS: [(&str, f64); 11] = [
    ("E-mail", 32.0),
    ("Name", 24.0),
    ("Department", 18.0),
    ("Manager", 22.0),
    ("Flow", 28.0),
    ("Status", 13.0),
    ("Assigned at (UTC)", 20.0),
    ("Due date (UTC)", 20.0),
    ("Completed at (UTC)", 20.0),
    ("Expires at (UTC)", 20.0),
    ("Required", 10.0),
];

/// Writes the workbook.
pub struct XlsxWriter {
    header: Arc<ComplianceHeader>,
    workbook: Workbook,
    sink: Option<ChannelWriter>,
    rows: SheetRun,
    date: Format,
    tally: Tally,
}

impl XlsxWriter {
    /// Creates the workbook and writes the Groups sheet, known up front; the Compliance sheet
    /// fills as rows arrive, the Totals sheet when they have all arrived.
    pub fn new(
        header: Arc<ComplianceHeader>,
        sink: ChannelWriter,
        temp_dir: Option<&Path>,
    ) -> anyhow::Result<Self> {
        let mut workbook = Workbook::new();
        if let Some(directory) = temp_dir {
            workbook.set_tempdir(directory)?;
        }
        let bold = Format::new().set_bold();
        workbook.add_worksheet().set_name("Totals")?;

        let mut sheets = Vec::new();
        for name in sheet_names("Compliance", header.rows_total) {
            let rows =
                (header.rows_total - sheets.len() as i64 * ROWS_PER_SHEET).clamp(0, ROWS_PER_SHEET);
            sheets.push(add_table_sheet(
                &mut workbook,
                &name,
                &ROW_COLUMNS,
                rows,
                &bold,
            )?);
        }

        if let Some((by, groups)) = &header.groups {
            let key_title = match by.as_str() {
                "department" => "Department",
                "group" => "Group",
                _ => "Manager",
            };
            let columns = [
                (key_title, 28.0),
                ("Key", 36.0),
                ("People", 10.0),
                ("People compliant", 12.0),
                ("Required", 10.0),
                ("Compliant", 10.0),
                ("Compliant (%)", 12.0),
                ("Overdue", 10.0),
                ("Due soon", 10.0),
                ("Not assigned", 12.0),
            ];
            let index = add_table_sheet(
                &mut workbook,
                "Groups",
                &columns,
                groups.len() as i64,
                &bold,
            )?;
            let sheet = workbook.worksheet_from_index(index)?;
            for (offset, group) in groups.iter().enumerate() {
                let row = offset as u32 + 1;
                let counts = &group.counts;
                sheet.write_string(row, 0, group.label.as_deref().unwrap_or("(none)"))?;
                sheet.write_string(row, 1, &group.key)?;
                let numbers = [
                    counts.people,
                    counts.people_compliant,
                    counts.cells,
                    counts.compliant,
                ];
                for (column, value) in numbers.into_iter().enumerate() {
                    sheet.write_number(row, column as u16 + 2, value as f64)?;
                }
                if let Some(percent) = flow_app::compliance::percent(counts.compliant, counts.cells)
                {
                    sheet.write_number(row, 6, percent)?;
                }
                sheet.write_number(row, 7, counts.overdue as f64)?;
                sheet.write_number(row, 8, counts.due_soon as f64)?;
                sheet.write_number(row, 9, counts.not_assigned as f64)?;
            }
        }

        Ok(Self {
            header,
            workbook,
            sink: Some(sink),
            rows: SheetRun { sheets, written: 0 },
            date: date_format(),
            tally: Tally::default(),
        })
    }

    fn datetime(
        sheet: &mut Worksheet,
        row: u32,
        column: u16,
        at: Option<DateTime<Utc>>,
        format: &Format,
    ) -> Result<(), XlsxError> {
        if let Some(at) = at {
            sheet.write_datetime_with_format(row, column, excel_time(at), format)?;
        }
        Ok(())
    }
}

/// Instants as Excel shows them.
fn date_format() -> Format {
    Format::new().set_num_format("yyyy-mm-dd hh:mm:ss")
}

/// The Totals sheet: label in column A, value in column B.
fn write_totals(
    sheet: &mut Worksheet,
    header: &ComplianceHeader,
    totals: &Counts,
) -> Result<(), XlsxError> {
    let bold = &Format::new().set_bold();
    let date = &date_format();
    let title = &Format::new().set_bold().set_font_size(14);
    sheet.set_column_width(0, 30)?;
    sheet.set_column_width(1, 60)?;
    sheet.write_string_with_format(0, 0, "Compliance report", title)?;
    let mut row = 2;
    let mut text = |sheet: &mut Worksheet, label: &str, value: &str| {
        let result = sheet
            .write_string_with_format(row, 0, label, bold)
            .and_then(|sheet| sheet.write_string(row, 1, value));
        row += 1;
        result.map(|_| ())
    };
    text(sheet, "Flows", &header.flows_text())?;
    for (label, value) in header.population_lines() {
        text(sheet, label, &value)?;
    }
    text(sheet, "As of", &header.as_of_text())?;
    text(sheet, "As of taken from", header.as_of_origin())?;
    text(sheet, "Export ID", &header.export_id.to_string())?;
    sheet.write_string_with_format(row, 0, "As of (UTC)", bold)?;
    sheet.write_datetime_with_format(row, 1, excel_time(header.parameters.as_of), date)?;
    row += 1;
    sheet.write_string_with_format(row, 0, "Generated at (UTC)", bold)?;
    sheet.write_datetime_with_format(row, 1, excel_time(header.generated_at), date)?;
    row += 1;
    sheet.write_string_with_format(row, 0, "Data as of (UTC)", bold)?;
    sheet.write_datetime_with_format(row, 1, excel_time(header.data_as_of), date)?;
    row += 2;
    sheet.write_string_with_format(row, 0, "Totals", title)?;
    row += 1;
    let mut numbers: Vec<(&str, i64)> = vec![
        ("People", totals.people),
        ("People compliant in every flow", totals.people_compliant),
        ("Required (people × flows)", totals.cells),
        ("Compliant", totals.compliant),
    ];
    numbers.extend(status_counts(totals).into_iter().skip(1));
    for (label, value) in numbers {
        sheet.write_string_with_format(row, 0, label, bold)?;
        sheet.write_number(row, 1, value as f64)?;
        row += 1;
    }
    sheet.write_string_with_format(row, 0, "Compliant (%)", bold)?;
    match flow_app::compliance::percent(totals.compliant, totals.cells) {
        Some(percent) => sheet.write_number(row, 1, percent)?,
        None => sheet.write_string(row, 1, "nothing required")?,
    };
    Ok(())
}

impl FormatWriter<ComplianceRow> for XlsxWriter {
    fn write_rows(&mut self, rows: &[ComplianceRow]) -> anyhow::Result<()> {
        tally_rows(&mut self.tally, rows);
        for entry in rows {
            let (index, row) = self.rows.next();
            let sheet = self.workbook.worksheet_from_index(index)?;
            sheet.write_string(row, 0, &entry.email)?;
            for (column, text) in [
                (1, &entry.name),
                (2, &entry.department),
                (3, &entry.manager),
            ] {
                if let Some(text) = text {
                    sheet.write_string(row, column, text)?;
                }
            }
            sheet.write_string(row, 4, &entry.flow)?;
            sheet.write_string(row, 5, &entry.status)?;
            Self::datetime(sheet, row, 6, entry.assigned_at, &self.date)?;
            Self::datetime(sheet, row, 7, entry.due_at, &self.date)?;
            Self::datetime(sheet, row, 8, entry.completed_at, &self.date)?;
            Self::datetime(sheet, row, 9, entry.expires_at, &self.date)?;
            sheet.write_boolean(row, 10, entry.required)?;
        }
        Ok(())
    }

    fn finish(mut self: Box<Self>) -> anyhow::Result<()> {
        let mut sink = self
            .sink
            .take()
            .ok_or_else(|| anyhow::anyhow!("the workbook was already saved"))?;
        let totals = std::mem::take(&mut self.tally).counts();
        let sheet = self.workbook.worksheet_from_name("Totals")?;
        write_totals(sheet, &self.header, &totals)?;
        self.workbook.save_to_writer(&mut sink)?;
        sink.finish()?;
        Ok(())
    }
}
