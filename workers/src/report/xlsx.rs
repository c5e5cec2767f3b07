//! Excel export: a real XLSX workbook with typed cells (timestamps as Excel date-times in UTC,
//! counts as numbers) and the sheets Summary, Assignments, Module progress (detailed: each
//! module's status, times and result — score, passed, time spent), Aggregates
//! (when asked) and Schedules, each data sheet with a bold frozen header row and an autofilter.
//!
//! Every sheet is written in constant-memory mode: rows go to a temporary file as they come, so
//! memory stays flat on a million rows. Row counts are known before the first row (they were
//! counted in the export's snapshot), so a sheet that would pass Excel's 1,048,576-row limit is
//! continued on "Assignments (2)" and so on, in order.

use std::path::Path;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use flow_common::db::reports::ExportRow;
use flow_domain::report::{AggregateMetric, completion_rate, whole_seconds};
use rust_xlsxwriter::{Format, Workbook, Worksheet, XlsxError};

use super::FormatWriter;
use super::model::{ExportHeader, aggregate_columns, metric_lines, module_entries};
use super::sink::ChannelWriter;

/// Data rows per sheet: Excel's row limit less the header row.
pub(super) const ROWS_PER_SHEET: i64 = 1_048_575;

const ASSIGNMENT_COLUMNS: [(&str, f64); 10] = [
    ("Assignment ID", 40.0),
    ("Assignee e-mail", 32.0),
    ("Assigned at (UTC)", 20.0),
    ("Status", 12.0),
    ("Completed modules", 10.0),
    ("Total modules", 10.0),
    ("Due date (UTC)", 20.0),
    ("Started at (UTC)", 20.0),
    ("Completed at (UTC)", 20.0),
    ("Priority", 10.0),
];

const MODULE_COLUMNS: [(&str, f64); 11] = [
    ("Assignment ID", 40.0),
    ("Assignee e-mail", 32.0),
    ("Module #", 9.0),
    ("Module ID", 40.0),
    ("Module", 28.0),
    ("Status", 12.0),
    ("Started at (UTC)", 20.0),
    ("Completed at (UTC)", 20.0),
    ("Score (-1 to 1)", 12.0),
    ("Passed", 9.0),
    ("Time spent (seconds)", 12.0),
];

/// A run of sheets holding one table, continued when a sheet is full.
pub(super) struct SheetRun {
    /// Workbook indexes of its sheets, in order.
    pub(super) sheets: Vec<usize>,
    /// Rows written so far.
    pub(super) written: i64,
}

impl SheetRun {
    /// The sheet index and row for the next row.
    pub(super) fn next(&mut self) -> (usize, u32) {
        let sheet = usize::try_from(self.written / ROWS_PER_SHEET).unwrap_or(usize::MAX);
        let row = (self.written % ROWS_PER_SHEET) as u32 + 1;
        self.written += 1;
        let last = self.sheets.len().saturating_sub(1);
        (self.sheets[sheet.min(last)], row)
    }
}

/// Writes the workbook.
pub struct XlsxWriter {
    workbook: Workbook,
    header: Arc<ExportHeader>,
    sink: Option<ChannelWriter>,
    assignments: SheetRun,
    modules: Option<SheetRun>,
    date: Format,
}

pub(super) fn sheet_names(title: &str, rows: i64) -> Vec<String> {
    let count = (rows.max(1) + ROWS_PER_SHEET - 1) / ROWS_PER_SHEET;
    (1..=count)
        .map(|index| {
            if index == 1 {
                title.to_owned()
            } else {
                format!("{title} ({index})")
            }
        })
        .collect()
}

pub(super) fn excel_time(at: DateTime<Utc>) -> chrono::NaiveDateTime {
    at.naive_utc()
}

/// Adds a constant-memory sheet named `name` with a bold frozen header, an autofilter over `rows`
/// data rows, and column widths; returns its index.
pub(super) fn add_table_sheet(
    workbook: &mut Workbook,
    name: &str,
    columns: &[(&str, f64)],
    rows: i64,
    bold: &Format,
) -> Result<usize, XlsxError> {
    let index = workbook.worksheets().len();
    let sheet = workbook.add_worksheet_with_constant_memory()?;
    sheet.set_name(name)?;
    write_table_header(sheet, columns, bold)?;
    let last_row = u32::try_from(rows.clamp(0, ROWS_PER_SHEET)).unwrap_or(0);
    let last_col = u16::try_from(columns.len().saturating_sub(1)).unwrap_or(0);
    sheet.autofilter(0, 0, last_row, last_col)?;
    Ok(index)
}

fn write_table_header(
    sheet: &mut Worksheet,
    columns: &[(&str, f64)],
    bold: &Format,
) -> Result<(), XlsxError> {
    for (column, (title, width)) in columns.iter().enumerate() {
        let column = u16::try_from(column).unwrap_or(u16::MAX);
        sheet.set_column_width(column, *width)?;
        sheet.write_string_with_format(0, column, *title, bold)?;
    }
    sheet.set_freeze_panes(1, 0)?;
    Ok(())
}

impl XlsxWriter {
    /// Creates the workbook and writes the sheets that are known up front (Summary, Aggregates,
    /// Schedules); Assignments and Module progress fill as rows arrive.
    pub fn new(
        header: Arc<ExportHeader>,
        sink: ChannelWriter,
        temp_dir: Option<&Path>,
    ) -> anyhow::Result<Self> {
        let mut workbook = Workbook::new();
        if let Some(directory) = temp_dir {
            workbook.set_tempdir(directory)?;
        }
        let bold = Format::new().set_bold();
        let date = Format::new().set_num_format("yyyy-mm-dd hh:mm:ss");
        let title = Format::new().set_bold().set_font_size(14);

        // Summary.
        let summary = workbook.add_worksheet_with_constant_memory()?;
        summary.set_name("Summary")?;
        summary.set_column_width(0, 28)?;
        summary.set_column_width(1, 48)?;
        summary.write_string_with_format(0, 0, "Flow report", &title)?;
        let mut row = 2;
        let mut text_line = |sheet: &mut Worksheet, label: &str, value: &str| {
            let result = sheet
                .write_string_with_format(row, 0, label, &bold)
                .and_then(|sheet| sheet.write_string(row, 1, value));
            row += 1;
            result.map(|_| ())
        };
        text_line(summary, "Flow", &header.flow_name)?;
        text_line(summary, "Flow ID", &header.flow_id.to_string())?;
        text_line(summary, "Range", &header.range_text())?;
        text_line(summary, "Export ID", &header.export_id.to_string())?;
        text_line(summary, "Status filter", header.status_filter_text())?;
        text_line(
            summary,
            "Module progress",
            if header.parameters.detailed {
                "included"
            } else {
                "not included"
            },
        )?;
        summary.write_string_with_format(row, 0, "Generated at (UTC)", &bold)?;
        summary.write_datetime_with_format(row, 1, excel_time(header.generated_at), &date)?;
        row += 1;
        summary.write_string_with_format(row, 0, "Data as of (UTC)", &bold)?;
        summary.write_datetime_with_format(row, 1, excel_time(header.data_as_of), &date)?;
        row += 2;
        summary.write_string_with_format(row, 0, "Metrics", &title)?;
        row += 1;
        let metrics = &header.metrics;
        let numbers: [(&str, f64); 6] = [
            ("Total assignments", metrics.total as f64),
            ("Completed", metrics.completed as f64),
            (
                "Completion rate (%)",
                completion_rate(metrics.completed, metrics.total),
            ),
            ("In progress", metrics.in_progress as f64),
            ("Pending", metrics.pending as f64),
            ("Overdue", metrics.overdue as f64),
        ];
        for (label, value) in numbers {
            summary.write_string_with_format(row, 0, label, &bold)?;
            summary.write_number(row, 1, value)?;
            row += 1;
        }
        let average = metric_lines(metrics)
            .into_iter()
            .find(|(label, _)| *label == "Average completion time")
            .map(|(_, value)| value)
            .unwrap_or_default();
        summary.write_string_with_format(row, 0, "Average completion time", &bold)?;
        summary.write_string(row, 1, &average)?;
        row += 1;
        summary.write_string_with_format(row, 0, "Average completion (seconds)", &bold)?;
        match metrics.average_completion_seconds {
            Some(seconds) => summary.write_number(row, 1, whole_seconds(seconds) as f64)?,
            None => summary.write_blank(row, 1, &Format::new())?,
        };
        row += 1;
        summary.write_string_with_format(row, 0, "Assignments in this file", &bold)?;
        summary.write_number(row, 1, header.rows_total as f64)?;

        // Assignments (continued on further sheets past Excel's row limit).
        let mut assignment_sheets = Vec::new();
        for name in sheet_names("Assignments", header.rows_total) {
            let rows = (header.rows_total - assignment_sheets.len() as i64 * ROWS_PER_SHEET)
                .clamp(0, ROWS_PER_SHEET);
            assignment_sheets.push(add_table_sheet(
                &mut workbook,
                &name,
                &ASSIGNMENT_COLUMNS,
                rows,
                &bold,
            )?);
        }

        // Module progress.
        let modules = if header.parameters.detailed {
            let mut sheets = Vec::new();
            for name in sheet_names("Module progress", header.module_rows_total) {
                let rows = (header.module_rows_total - sheets.len() as i64 * ROWS_PER_SHEET)
                    .clamp(0, ROWS_PER_SHEET);
                sheets.push(add_table_sheet(
                    &mut workbook,
                    &name,
                    &MODULE_COLUMNS,
                    rows,
                    &bold,
                )?);
            }
            Some(SheetRun { sheets, written: 0 })
        } else {
            None
        };

        // Aggregates.
        if let Some((spec, rows)) = &header.aggregates {
            let extra = aggregate_columns(spec);
            let mut columns: Vec<(&str, f64)> = vec![
                ("Period", 12.0),
                ("Period start (UTC)", 20.0),
                ("Period end (UTC)", 20.0),
                ("Total assignments", 12.0),
            ];
            for (title, metric) in &extra {
                columns.push((title, 14.0));
                if *metric == AggregateMetric::AverageDuration {
                    columns.push(("Average duration (seconds)", 14.0));
                }
            }
            let index = add_table_sheet(
                &mut workbook,
                "Aggregates",
                &columns,
                rows.len() as i64,
                &bold,
            )?;
            let sheet = workbook.worksheet_from_index(index)?;
            for (offset, aggregate) in rows.iter().enumerate() {
                let row = offset as u32 + 1;
                sheet.write_string(row, 0, spec.by.label(aggregate.local_start))?;
                sheet.write_datetime_with_format(
                    row,
                    1,
                    excel_time(aggregate.period_start),
                    &date,
                )?;
                sheet.write_datetime_with_format(
                    row,
                    2,
                    excel_time(aggregate.period_end),
                    &date,
                )?;
                sheet.write_number(row, 3, aggregate.total as f64)?;
                let mut column = 4u16;
                for (_, metric) in &extra {
                    match metric {
                        AggregateMetric::CompletedAssignments => {
                            sheet.write_number(row, column, aggregate.completed as f64)?;
                        }
                        AggregateMetric::OverdueAssignments => {
                            sheet.write_number(row, column, aggregate.overdue() as f64)?;
                        }
                        // A period without assignments has no rate (as the API's null): the
                        // cell stays empty rather than 0 %.
                        AggregateMetric::CompletionRate if aggregate.total == 0 => {}
                        AggregateMetric::CompletionRate => {
                            sheet.write_number(
                                row,
                                column,
                                completion_rate(aggregate.completed, aggregate.total),
                            )?;
                        }
                        AggregateMetric::AverageDuration => {
                            let seconds = aggregate.average_duration_seconds.map(whole_seconds);
                            match seconds {
                                Some(seconds) => {
                                    sheet.write_string(
                                        row,
                                        column,
                                        flow_domain::duration::humanize_seconds(seconds),
                                    )?;
                                    sheet.write_number(row, column + 1, seconds as f64)?;
                                }
                                None => {
                                    sheet.write_blank(row, column, &Format::new())?;
                                }
                            }
                            column += 1;
                        }
                        AggregateMetric::TotalAssignments => {}
                    }
                    column += 1;
                }
            }
        }

        // Schedules.
        let columns = [
            ("Schedule ID", 40.0),
            ("Assignee e-mail", 32.0),
            ("Scheduled at (UTC)", 20.0),
            ("Status", 12.0),
            ("Recurrence", 12.0),
        ];
        let index = add_table_sheet(
            &mut workbook,
            "Schedules",
            &columns,
            header.schedules.len() as i64,
            &bold,
        )?;
        let sheet = workbook.worksheet_from_index(index)?;
        for (offset, schedule) in header.schedules.iter().enumerate() {
            let row = offset as u32 + 1;
            sheet.write_string(row, 0, schedule.id.to_string())?;
            sheet.write_string(row, 1, &schedule.assignee_email)?;
            sheet.write_datetime_with_format(row, 2, excel_time(schedule.scheduled_at), &date)?;
            sheet.write_string(row, 3, schedule.status.as_str())?;
            sheet.write_string(row, 4, schedule.recurrence.as_str())?;
        }

        Ok(Self {
            workbook,
            header,
            sink: Some(sink),
            assignments: SheetRun {
                sheets: assignment_sheets,
                written: 0,
            },
            modules,
            date,
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

impl FormatWriter for XlsxWriter {
    fn write_rows(&mut self, rows: &[ExportRow]) -> anyhow::Result<()> {
        let total_modules = self.header.modules.len() as f64;
        for export_row in rows {
            let assignment = &export_row.assignment;
            let (index, row) = self.assignments.next();
            let sheet = self.workbook.worksheet_from_index(index)?;
            sheet.write_string(row, 0, assignment.id.to_string())?;
            sheet.write_string(row, 1, &assignment.assignee_email)?;
            sheet.write_datetime_with_format(
                row,
                2,
                excel_time(assignment.assigned_at),
                &self.date,
            )?;
            sheet.write_string(row, 3, assignment.status.as_str())?;
            sheet.write_number(row, 4, assignment.completed_modules as f64)?;
            sheet.write_number(row, 5, total_modules)?;
            Self::datetime(sheet, row, 6, assignment.due_at, &self.date)?;
            Self::datetime(sheet, row, 7, assignment.started_at, &self.date)?;
            Self::datetime(sheet, row, 8, assignment.completed_at, &self.date)?;
            sheet.write_string(row, 9, assignment.priority.as_str())?;
            let Some(modules) = self.modules.as_mut() else {
                continue;
            };
            for entry in module_entries(export_row) {
                let (index, row) = modules.next();
                let module = self.header.module_at(entry.position);
                let sheet = self.workbook.worksheet_from_index(index)?;
                sheet.write_string(row, 0, assignment.id.to_string())?;
                sheet.write_string(row, 1, &assignment.assignee_email)?;
                sheet.write_number(row, 2, f64::from(entry.position + 1))?;
                if let Some(module) = module {
                    sheet.write_string(row, 3, module.id.to_string())?;
                    sheet.write_string(row, 4, &module.name)?;
                }
                sheet.write_string(row, 5, entry.status.as_str())?;
                Self::datetime(sheet, row, 6, entry.started_at, &self.date)?;
                Self::datetime(sheet, row, 7, entry.completed_at, &self.date)?;
                if let Some(score) = entry.score {
                    sheet.write_number(row, 8, score)?;
                }
                if let Some(success) = entry.success {
                    sheet.write_boolean(row, 9, success)?;
                }
                if let Some(seconds) = entry.duration_seconds {
                    sheet.write_number(row, 10, seconds as f64)?;
                }
            }
        }
        Ok(())
    }

    fn finish(mut self: Box<Self>) -> anyhow::Result<()> {
        let mut sink = self
            .sink
            .take()
            .ok_or_else(|| anyhow::anyhow!("the workbook was already saved"))?;
        self.workbook.save_to_writer(&mut sink)?;
        sink.finish()?;
        Ok(())
    }
}
