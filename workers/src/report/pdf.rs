//! PDF export: a report a person reads. Page one has the title, the flow, the range and the
//! metrics, then a bar chart of completion by period (drawn as paths); then the aggregates and
//! schedules when there are any, for a detailed report the results per module (of every
//! assignment, not only the rows shown: started, completed, passed, failed, mean score and mean
//! time spent), and the assignments table: the first 5,000 rows, with a note
//! pointing to the CSV and Excel exports for the rest. Every page has a footer with
//! "page N of M".
//!
//! Built with `krilla`, which embeds a subset of the font actually used (DejaVu Sans, which covers
//! accented Latin, Greek and Cyrillic names) and writes a ToUnicode map, so text stays selectable
//! and searchable. Layout happens in a first pass (so the page count is known for the footers),
//! drawing in a second.

use std::sync::{Arc, LazyLock};

use chrono::{DateTime, Utc};
use flow_common::db::reports::{AggregateRow, ExportRow};
use flow_domain::duration::humanize_seconds;
use flow_domain::report::{AggregateMetric, PDF_ROW_LIMIT, completion_rate, whole_seconds};
use krilla::Document;
use krilla::color::rgb;
use krilla::geom::{PathBuilder, Point, Rect};
use krilla::metadata::Metadata;
use krilla::num::NormalizedF32;
use krilla::page::PageSettings;
use krilla::paint::{Fill, Stroke};
use krilla::text::{Font, TextDirection};
use skrifa::instance::{LocationRef, Size};
use skrifa::{FontRef, MetadataProvider};

use super::FormatWriter;
use super::model::{ExportHeader, aggregate_columns, metric_lines, module_entries, score_text};
use super::sink::ChannelWriter;

const REGULAR_TTF: &[u8] = include_bytes!("../../assets/fonts/DejaVuSans.ttf");
const BOLD_TTF: &[u8] = include_bytes!("../../assets/fonts/DejaVuSans-Bold.ttf");

/// A4 portrait, in points.
pub(super) const PAGE_WIDTH: f32 = 595.28;
const PAGE_HEIGHT: f32 = 841.89;
pub(super) const MARGIN: f32 = 40.0;
pub(super) const CONTENT_WIDTH: f32 = PAGE_WIDTH - 2.0 * MARGIN;
/// Lowest baseline of body content (the footer lives below).
const CONTENT_BOTTOM: f32 = PAGE_HEIGHT - MARGIN - 14.0;
const TABLE_FONT: f32 = 7.5;
const ROW_HEIGHT: f32 = 12.0;
/// Schedules listed in the PDF (the Excel export holds all).
const PDF_SCHEDULE_LIMIT: usize = 500;

pub(super) type Color = (u8, u8, u8);
pub(super) const BLACK: Color = (33, 37, 41);
pub(super) const GREY: Color = (108, 117, 125);
pub(super) const LIGHT: Color = (241, 243, 245);
const RULE: Color = (206, 212, 218);
const TOTAL_BAR: Color = (189, 215, 238);
pub(super) const COMPLETED_BAR: Color = (33, 113, 181);

/// Advance widths of a font, to fit text into columns.
struct Metrics {
    font: FontRef<'static>,
    units_per_em: f32,
}

impl Metrics {
    fn new(data: &'static [u8]) -> Option<Self> {
        let font = FontRef::new(data).ok()?;
        let units_per_em = font
            .metrics(Size::unscaled(), LocationRef::default())
            .units_per_em;
        Some(Self {
            font,
            units_per_em: f32::from(units_per_em.max(1)),
        })
    }

    fn width(&self, text: &str, size: f32) -> f32 {
        let charmap = self.font.charmap();
        let glyphs = self
            .font
            .glyph_metrics(Size::unscaled(), LocationRef::default());
        let units: f32 = text
            .chars()
            .map(|character| {
                charmap
                    .map(character)
                    .and_then(|glyph| glyphs.advance_width(glyph))
                    .unwrap_or(self.units_per_em * 0.6)
            })
            .sum();
        units * size / self.units_per_em
    }
}

pub(super) struct Fonts {
    regular: Font,
    bold: Font,
    regular_metrics: Metrics,
    bold_metrics: Metrics,
}

pub(super) static FONTS: LazyLock<Option<Fonts>> = LazyLock::new(|| {
    Some(Fonts {
        regular: Font::new(REGULAR_TTF.into(), 0)?,
        bold: Font::new(BOLD_TTF.into(), 0)?,
        regular_metrics: Metrics::new(REGULAR_TTF)?,
        bold_metrics: Metrics::new(BOLD_TTF)?,
    })
});

/// One drawing operation of a page.
#[derive(Debug, Clone)]
pub(super) enum Op {
    Text {
        x: f32,
        y: f32,
        size: f32,
        bold: bool,
        color: Color,
        text: String,
    },
    Rect {
        x: f32,
        y: f32,
        width: f32,
        height: f32,
        color: Color,
    },
    Line {
        from: (f32, f32),
        to: (f32, f32),
        color: Color,
        width: f32,
    },
}

/// Text alignment within a column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Align {
    Left,
    Right,
}

/// A table column: title, width and alignment.
pub(super) struct Column {
    title: &'static str,
    width: f32,
    align: Align,
}

pub(super) const fn column(title: &'static str, width: f32, align: Align) -> Column {
    Column {
        title,
        width,
        align,
    }
}

/// Lays pages out: a list of operations per page and a cursor.
pub(super) struct Layout<'f> {
    fonts: &'f Fonts,
    pub(super) pages: Vec<Vec<Op>>,
    /// The cursor: where the next content starts, from the top of the page.
    pub(super) y: f32,
}

impl<'f> Layout<'f> {
    pub(super) fn new(fonts: &'f Fonts) -> Self {
        Self {
            fonts,
            pages: vec![Vec::new()],
            y: MARGIN,
        }
    }

    fn page(&mut self) -> &mut Vec<Op> {
        if self.pages.is_empty() {
            self.pages.push(Vec::new());
        }
        let last = self.pages.len() - 1;
        &mut self.pages[last]
    }

    pub(super) fn new_page(&mut self) {
        self.pages.push(Vec::new());
        self.y = MARGIN;
    }

    /// Starts a new page unless `height` more points fit on this one.
    pub(super) fn ensure(&mut self, height: f32) -> bool {
        if self.y + height > CONTENT_BOTTOM {
            self.new_page();
            true
        } else {
            false
        }
    }

    pub(super) fn width(&self, text: &str, size: f32, bold: bool) -> f32 {
        if bold {
            self.fonts.bold_metrics.width(text, size)
        } else {
            self.fonts.regular_metrics.width(text, size)
        }
    }

    /// `text` shortened with an ellipsis to fit `width`.
    pub(super) fn fit(&self, text: &str, size: f32, bold: bool, width: f32) -> String {
        if self.width(text, size, bold) <= width {
            return text.to_owned();
        }
        let mut fitted: String = text.to_owned();
        while !fitted.is_empty() {
            fitted.pop();
            let candidate = format!("{fitted}…");
            if self.width(&candidate, size, bold) <= width {
                return candidate;
            }
        }
        String::new()
    }

    pub(super) fn text(&mut self, x: f32, y: f32, size: f32, bold: bool, color: Color, text: &str) {
        self.page().push(Op::Text {
            x,
            y,
            size,
            bold,
            color,
            text: text.to_owned(),
        });
    }

    /// A line of text at the cursor, which then moves down.
    pub(super) fn line(&mut self, size: f32, bold: bool, color: Color, text: &str) {
        let height = size * 1.45;
        self.ensure(height);
        let fitted = self.fit(text, size, bold, CONTENT_WIDTH);
        self.text(MARGIN, self.y + size, size, bold, color, &fitted);
        self.y += height;
    }

    pub(super) fn rect(&mut self, x: f32, y: f32, width: f32, height: f32, color: Color) {
        self.page().push(Op::Rect {
            x,
            y,
            width,
            height,
            color,
        });
    }

    fn rule(&mut self, from: (f32, f32), to: (f32, f32), color: Color, width: f32) {
        self.page().push(Op::Line {
            from,
            to,
            color,
            width,
        });
    }

    pub(super) fn heading(&mut self, text: &str) {
        self.ensure(22.0 + 3.0 * ROW_HEIGHT);
        self.y += 8.0;
        self.line(11.0, true, BLACK, text);
        self.y += 2.0;
    }

    fn table_header(&mut self, columns: &[Column]) {
        let mut x = MARGIN;
        for column in columns {
            let title = self.fit(column.title, TABLE_FONT, true, column.width - 4.0);
            let text_x = match column.align {
                Align::Left => x + 2.0,
                Align::Right => x + column.width - 2.0 - self.width(&title, TABLE_FONT, true),
            };
            self.text(text_x, self.y + 8.5, TABLE_FONT, true, BLACK, &title);
            x += column.width;
        }
        let bottom = self.y + ROW_HEIGHT;
        self.rule(
            (MARGIN, bottom),
            (MARGIN + CONTENT_WIDTH, bottom),
            GREY,
            0.6,
        );
        self.y += ROW_HEIGHT;
    }

    /// Rows of a table, repeating the header on each new page.
    pub(super) fn table(&mut self, columns: &[Column], rows: impl Iterator<Item = Vec<String>>) {
        self.ensure(2.0 * ROW_HEIGHT);
        self.table_header(columns);
        for (index, cells) in rows.enumerate() {
            if self.ensure(ROW_HEIGHT) {
                self.table_header(columns);
            }
            if index % 2 == 1 {
                self.rect(MARGIN, self.y, CONTENT_WIDTH, ROW_HEIGHT, LIGHT);
            }
            let mut x = MARGIN;
            for (column, cell) in columns.iter().zip(cells) {
                let cell = self.fit(&cell, TABLE_FONT, false, column.width - 4.0);
                let text_x = match column.align {
                    Align::Left => x + 2.0,
                    Align::Right => x + column.width - 2.0 - self.width(&cell, TABLE_FONT, false),
                };
                self.text(text_x, self.y + 8.5, TABLE_FONT, false, BLACK, &cell);
                x += column.width;
            }
            self.y += ROW_HEIGHT;
        }
    }
}

/// A row kept for the assignments table.
struct PdfRow {
    email: String,
    assigned_at: DateTime<Utc>,
    status: String,
    completed_modules: i64,
    due_at: Option<DateTime<Utc>>,
    completed_at: Option<DateTime<Utc>>,
}

/// The results of one module over every assignment of a detailed report.
#[derive(Debug, Clone, Copy, Default)]
struct ModuleResults {
    started: i64,
    completed: i64,
    passed: i64,
    failed: i64,
    score_sum: f64,
    scores: i64,
    seconds_sum: i64,
    durations: i64,
}

/// Writes the PDF once every shown row has arrived (at most [`PDF_ROW_LIMIT`]).
pub struct PdfWriter {
    header: Arc<ExportHeader>,
    sink: Option<ChannelWriter>,
    rows: Vec<PdfRow>,
    /// Per module position, for a detailed report.
    modules: std::collections::BTreeMap<i32, ModuleResults>,
}

impl PdfWriter {
    /// A writer for `header`'s report.
    pub fn new(header: Arc<ExportHeader>, sink: ChannelWriter) -> Self {
        let capacity = usize::try_from(header.rows_total.clamp(0, PDF_ROW_LIMIT)).unwrap_or(0);
        Self {
            header,
            sink: Some(sink),
            rows: Vec::with_capacity(capacity),
            modules: std::collections::BTreeMap::new(),
        }
    }
}

impl FormatWriter for PdfWriter {
    fn write_rows(&mut self, rows: &[ExportRow]) -> anyhow::Result<()> {
        if self.header.parameters.detailed {
            for entry in rows.iter().flat_map(module_entries) {
                let results = self.modules.entry(entry.position).or_default();
                results.started += 1;
                results.completed += i64::from(entry.completed_at.is_some());
                match entry.success {
                    Some(true) => results.passed += 1,
                    Some(false) => results.failed += 1,
                    None => {}
                }
                if let Some(score) = entry.score {
                    results.score_sum += score;
                    results.scores += 1;
                }
                if let Some(seconds) = entry.duration_seconds {
                    results.seconds_sum += seconds;
                    results.durations += 1;
                }
            }
        }
        let room = usize::try_from(PDF_ROW_LIMIT)
            .unwrap_or(0)
            .saturating_sub(self.rows.len());
        self.rows.extend(rows.iter().take(room).map(|row| PdfRow {
            email: row.assignment.assignee_email.clone(),
            assigned_at: row.assignment.assigned_at,
            status: row.assignment.status.as_str().to_owned(),
            completed_modules: row.assignment.completed_modules,
            due_at: row.assignment.due_at,
            completed_at: row.assignment.completed_at,
        }));
        Ok(())
    }

    fn finish(mut self: Box<Self>) -> anyhow::Result<()> {
        let bytes = render(&self.header, &self.rows, &self.modules)?;
        let mut sink = self
            .sink
            .take()
            .ok_or_else(|| anyhow::anyhow!("the PDF was already written"))?;
        std::io::Write::write_all(&mut sink, &bytes)?;
        sink.finish()?;
        Ok(())
    }
}

pub(super) fn short_time(at: DateTime<Utc>) -> String {
    at.format("%Y-%m-%d %H:%M").to_string()
}

pub(super) fn optional_time(at: Option<DateTime<Utc>>) -> String {
    at.map(short_time).unwrap_or_default()
}

/// Renders the whole document.
fn render(
    header: &ExportHeader,
    rows: &[PdfRow],
    modules: &std::collections::BTreeMap<i32, ModuleResults>,
) -> anyhow::Result<Vec<u8>> {
    let fonts = FONTS
        .as_ref()
        .ok_or_else(|| anyhow::anyhow!("the embedded PDF font could not be read"))?;
    let mut layout = Layout::new(fonts);
    title_block(&mut layout, header);
    metrics_block(&mut layout, header);
    chart_block(&mut layout, header);
    aggregates_block(&mut layout, header);
    schedules_block(&mut layout, header);
    module_results_block(&mut layout, header, modules);
    assignments_block(&mut layout, header, rows);
    draw(
        fonts,
        &format!("Flow report: {}", header.flow_name),
        &format!("Flow report · {}", header.flow_name),
        header.generated_at,
        layout.pages,
    )
}

fn title_block(layout: &mut Layout<'_>, header: &ExportHeader) {
    layout.line(20.0, true, BLACK, "Flow report");
    layout.line(14.0, true, COMPLETED_BAR, &header.flow_name);
    layout.y += 4.0;
    let lines = [
        format!("Flow ID: {} · export {}", header.flow_id, header.export_id),
        format!("Range: {}", header.range_text()),
        format!("Status filter: {}", header.status_filter_text()),
        format!(
            "Generated: {} UTC (statuses as of this time)",
            short_time(header.generated_at)
        ),
        format!(
            "Data as of: {} UTC",
            header.data_as_of.format("%Y-%m-%d %H:%M:%S")
        ),
    ];
    for line in lines {
        layout.line(9.0, false, GREY, &line);
    }
    layout.y += 6.0;
}

fn metrics_block(layout: &mut Layout<'_>, header: &ExportHeader) {
    let lines = metric_lines(&header.metrics);
    let per_row = 4;
    let gap = 8.0;
    let card_width = (CONTENT_WIDTH - gap * (per_row as f32 - 1.0)) / per_row as f32;
    let card_height = 40.0;
    for chunk in lines.chunks(per_row) {
        layout.ensure(card_height + gap);
        let top = layout.y;
        for (index, (label, value)) in chunk.iter().enumerate() {
            let x = MARGIN + index as f32 * (card_width + gap);
            layout.rect(x, top, card_width, card_height, LIGHT);
            let label = layout.fit(label, 7.5, false, card_width - 12.0);
            layout.text(x + 6.0, top + 13.0, 7.5, false, GREY, &label);
            let value = layout.fit(value, 13.0, true, card_width - 12.0);
            layout.text(x + 6.0, top + 31.0, 13.0, true, BLACK, &value);
        }
        layout.y = top + card_height + gap;
    }
}

/// A round step for an axis going up to `max` in about `ticks` steps.
fn nice_step(max: f64, ticks: f64) -> f64 {
    let raw = (max / ticks).max(1.0);
    let magnitude = 10f64.powf(raw.log10().floor());
    let fraction = raw / magnitude;
    let nice = if fraction <= 1.0 {
        1.0
    } else if fraction <= 2.0 {
        2.0
    } else if fraction <= 5.0 {
        5.0
    } else {
        10.0
    };
    nice * magnitude
}

fn chart_block(layout: &mut Layout<'_>, header: &ExportHeader) {
    let Some((period, rows)) = &header.chart else {
        return;
    };
    let chart_height = 170.0;
    layout.ensure(chart_height + 70.0);
    layout.heading(&format!("Completion by {period}"));
    if rows.is_empty() {
        layout.line(9.0, false, GREY, "No assignments in this range.");
        return;
    }
    let axis_width = 36.0;
    let left = MARGIN + axis_width;
    let width = CONTENT_WIDTH - axis_width;
    let top = layout.y + 4.0;
    let bottom = top + chart_height;
    let max_total = rows.iter().map(|row| row.total).max().unwrap_or(0).max(1) as f64;
    let step = nice_step(max_total, 4.0);
    let axis_max = (max_total / step).ceil() * step;
    let scale = |value: f64| bottom - (value / axis_max) as f32 * chart_height;
    let mut tick = 0.0;
    while tick <= axis_max + f64::EPSILON {
        let y = scale(tick);
        layout.rule((left, y), (left + width, y), RULE, 0.4);
        let label = format!("{tick:.0}");
        let label_width = layout.width(&label, 7.0, false);
        layout.text(left - 4.0 - label_width, y + 2.5, 7.0, false, GREY, &label);
        tick += step;
    }
    let slot = width / rows.len() as f32;
    let bar = (slot * 0.7).max(0.5);
    for (index, row) in rows.iter().enumerate() {
        let x = left + index as f32 * slot + (slot - bar) / 2.0;
        if row.total > 0 {
            let y = scale(row.total as f64);
            layout.rect(x, y, bar, bottom - y, TOTAL_BAR);
        }
        if row.completed > 0 {
            let y = scale(row.completed as f64);
            layout.rect(x, y, bar, bottom - y, COMPLETED_BAR);
        }
    }
    layout.rule((left, bottom), (left + width, bottom), GREY, 0.8);
    // About eight labels at most, evenly spread, so they never touch.
    let every = rows.len().div_ceil(8).max(1);
    for (index, row) in rows.iter().enumerate().step_by(every) {
        let label = period.label(row.local_start);
        let label_width = layout.width(&label, 6.5, false);
        let center = left + (index as f32 + 0.5) * slot;
        let x = (center - label_width / 2.0).clamp(left, left + width - label_width);
        layout.text(x, bottom + 10.0, 6.5, false, GREY, &label);
    }
    let legend_y = bottom + 24.0;
    let mut x = left;
    for (color, label) in [
        (TOTAL_BAR, "Assigned in period".to_owned()),
        (COMPLETED_BAR, "Completed".to_owned()),
    ] {
        layout.rect(x, legend_y - 7.0, 8.0, 8.0, color);
        layout.text(x + 12.0, legend_y, 7.5, false, GREY, &label);
        x += 24.0 + layout.width(&label, 7.5, false);
    }
    let completed: i64 = rows.iter().map(|row| row.completed).sum();
    let total: i64 = rows.iter().map(|row| row.total).sum();
    let summary = format!(
        "{:.1} % of {total} assignments completed across {} periods",
        completion_rate(completed, total),
        rows.len()
    );
    layout.text(x + 12.0, legend_y, 7.5, false, GREY, &summary);
    layout.y = legend_y + 10.0;
}

fn aggregates_block(layout: &mut Layout<'_>, header: &ExportHeader) {
    let Some((spec, rows)) = &header.aggregates else {
        return;
    };
    layout.heading(&format!("Aggregates by {}", spec.by));
    let extra = aggregate_columns(spec);
    let mut columns = vec![
        column("Period", 70.0, Align::Left),
        column("Period start (UTC)", 90.0, Align::Left),
        column("Total", 55.0, Align::Right),
    ];
    for (title, _) in &extra {
        columns.push(column(title, 75.0, Align::Right));
    }
    let cells = rows.iter().map(|row: &AggregateRow| {
        let mut cells = vec![
            spec.by.label(row.local_start),
            short_time(row.period_start),
            row.total.to_string(),
        ];
        for (_, metric) in &extra {
            cells.push(match metric {
                AggregateMetric::CompletedAssignments => row.completed.to_string(),
                AggregateMetric::OverdueAssignments => row.overdue().to_string(),
                // A period without assignments has no rate (as the API's null), not 0 %.
                AggregateMetric::CompletionRate if row.total == 0 => "–".to_owned(),
                AggregateMetric::CompletionRate => {
                    format!("{:.1}", completion_rate(row.completed, row.total))
                }
                AggregateMetric::AverageDuration => row
                    .average_duration_seconds
                    .map(|seconds| humanize_seconds(whole_seconds(seconds)))
                    .unwrap_or_else(|| "–".to_owned()),
                AggregateMetric::TotalAssignments => String::new(),
            });
        }
        cells
    });
    layout.table(&columns, cells);
}

fn schedules_block(layout: &mut Layout<'_>, header: &ExportHeader) {
    if header.schedules.is_empty() {
        return;
    }
    layout.heading("Schedules");
    if header.schedules.len() > PDF_SCHEDULE_LIMIT {
        layout.line(
            8.0,
            false,
            GREY,
            &format!(
                "Showing the first {PDF_SCHEDULE_LIMIT} of {} schedules; the Excel export lists all.",
                header.schedules.len()
            ),
        );
    }
    let columns = [
        column("Assignee", 200.0, Align::Left),
        column("Scheduled at (UTC)", 105.0, Align::Left),
        column("Status", 80.0, Align::Left),
        column("Recurrence", 80.0, Align::Left),
    ];
    let cells = header
        .schedules
        .iter()
        .take(PDF_SCHEDULE_LIMIT)
        .map(|schedule| {
            vec![
                schedule.assignee_email.clone(),
                short_time(schedule.scheduled_at),
                schedule.status.as_str().to_owned(),
                schedule.recurrence.as_str().to_owned(),
            ]
        });
    layout.table(&columns, cells);
}

fn module_results_block(
    layout: &mut Layout<'_>,
    header: &ExportHeader,
    modules: &std::collections::BTreeMap<i32, ModuleResults>,
) {
    if !header.parameters.detailed {
        return;
    }
    layout.heading("Module results");
    layout.line(
        8.0,
        false,
        GREY,
        "Over every assignment of the report. Scores are scaled, -1 to 1 (0.85 is 85 %); means \
         count the modules that reported one.",
    );
    let columns = [
        column("#", 25.0, Align::Right),
        column("Module", 150.0, Align::Left),
        column("Started", 50.0, Align::Right),
        column("Completed", 55.0, Align::Right),
        column("Passed", 45.0, Align::Right),
        column("Failed", 45.0, Align::Right),
        column("Mean score", 60.0, Align::Right),
        column("Mean time", 85.0, Align::Right),
    ];
    let cells = header.modules.iter().map(|module| {
        let results = modules.get(&module.position).copied().unwrap_or_default();
        let mean_score = if results.scores > 0 {
            score_text(results.score_sum / results.scores as f64)
        } else {
            "–".to_owned()
        };
        let mean_time = if results.durations > 0 {
            let seconds = results.seconds_sum as f64 / results.durations as f64;
            humanize_seconds(seconds.round() as u64)
        } else {
            "–".to_owned()
        };
        vec![
            (module.position + 1).to_string(),
            module.name.clone(),
            results.started.to_string(),
            results.completed.to_string(),
            results.passed.to_string(),
            results.failed.to_string(),
            mean_score,
            mean_time,
        ]
    });
    layout.table(&columns, cells);
}

fn assignments_block(layout: &mut Layout<'_>, header: &ExportHeader, rows: &[PdfRow]) {
    layout.new_page();
    layout.line(12.0, true, BLACK, "Assignments");
    let shown = rows.len() as i64;
    let note = if header.metrics.matching > shown {
        format!(
            "Showing the first {shown} of {} assignments (by assignment time). The CSV and Excel \
             exports of this report hold every row.",
            header.metrics.matching
        )
    } else {
        format!(
            "All {shown} assignments ({}), by assignment time.",
            header.status_filter_text()
        )
    };
    layout.line(8.0, false, GREY, &note);
    layout.y += 4.0;
    if rows.is_empty() {
        layout.line(9.0, false, GREY, "No assignments match.");
        return;
    }
    let total_modules = header.modules.len();
    let columns = [
        column("#", 30.0, Align::Right),
        column("Assignee", 165.0, Align::Left),
        column("Assigned (UTC)", 72.0, Align::Left),
        column("Status", 52.0, Align::Left),
        column("Modules", 42.0, Align::Right),
        column("Due (UTC)", 72.0, Align::Left),
        column("Completed (UTC)", 82.0, Align::Left),
    ];
    let cells = rows.iter().enumerate().map(|(index, row)| {
        vec![
            (index + 1).to_string(),
            row.email.clone(),
            short_time(row.assigned_at),
            row.status.replace('_', " "),
            format!("{}/{total_modules}", row.completed_modules),
            optional_time(row.due_at),
            optional_time(row.completed_at),
        ]
    });
    layout.table(&columns, cells);
}

fn fill(color: Color) -> Fill {
    Fill {
        paint: rgb::Color::new(color.0, color.1, color.2).into(),
        opacity: NormalizedF32::ONE,
        rule: Default::default(),
    }
}

/// Draws the laid-out pages, titling the document `title` and adding footers that start with
/// `footer` and say when it was generated.
pub(super) fn draw(
    fonts: &Fonts,
    title: &str,
    footer: &str,
    generated_at: DateTime<Utc>,
    pages: Vec<Vec<Op>>,
) -> anyhow::Result<Vec<u8>> {
    let mut document = Document::new();
    document.set_metadata(
        Metadata::new()
            .title(title.to_owned())
            .creator("Flow report-worker".to_owned()),
    );
    let page_count = pages.len();
    let settings = PageSettings::from_wh(PAGE_WIDTH, PAGE_HEIGHT)
        .ok_or_else(|| anyhow::anyhow!("invalid page size"))?;
    for (index, ops) in pages.into_iter().enumerate() {
        let mut page = document.start_page_with(settings.clone());
        let mut surface = page.surface();
        let footer = format!(
            "{footer} · generated {} UTC · page {} of {page_count}",
            short_time(generated_at),
            index + 1
        );
        let footer_ops = [
            Op::Line {
                from: (MARGIN, PAGE_HEIGHT - MARGIN + 2.0),
                to: (PAGE_WIDTH - MARGIN, PAGE_HEIGHT - MARGIN + 2.0),
                color: RULE,
                width: 0.5,
            },
            Op::Text {
                x: MARGIN,
                y: PAGE_HEIGHT - MARGIN + 14.0,
                size: 7.0,
                bold: false,
                color: GREY,
                text: footer,
            },
        ];
        for op in ops.iter().chain(footer_ops.iter()) {
            match op {
                Op::Text {
                    x,
                    y,
                    size,
                    bold,
                    color,
                    text,
                } => {
                    surface.set_fill(Some(fill(*color)));
                    let font = if *bold { &fonts.bold } else { &fonts.regular };
                    surface.draw_text(
                        Point::from_xy(*x, *y),
                        font.clone(),
                        *size,
                        text,
                        false,
                        TextDirection::Auto,
                    );
                }
                Op::Rect {
                    x,
                    y,
                    width,
                    height,
                    color,
                } => {
                    let Some(rect) = Rect::from_xywh(*x, *y, *width, height.max(0.01)) else {
                        continue;
                    };
                    let mut builder = PathBuilder::new();
                    builder.push_rect(rect);
                    if let Some(path) = builder.finish() {
                        surface.set_fill(Some(fill(*color)));
                        surface.set_stroke(None);
                        surface.draw_path(&path);
                    }
                }
                Op::Line {
                    from,
                    to,
                    color,
                    width,
                } => {
                    let mut builder = PathBuilder::new();
                    builder.move_to(from.0, from.1);
                    builder.line_to(to.0, to.1);
                    if let Some(path) = builder.finish() {
                        surface.set_fill(None);
                        surface.set_stroke(Some(Stroke {
                            paint: rgb::Color::new(color.0, color.1, color.2).into(),
                            width: *width,
                            ..Default::default()
                        }));
                        surface.draw_path(&path);
                        surface.set_stroke(None);
                    }
                }
            }
        }
        surface.finish();
        page.finish();
    }
    document
        .finish()
        .map_err(|error| anyhow::anyhow!("writing the PDF: {error:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axis_steps_are_round() {
        assert_eq!(nice_step(100.0, 4.0), 50.0);
        assert_eq!(nice_step(7.0, 4.0), 2.0);
        assert_eq!(nice_step(1.0, 4.0), 1.0);
        assert_eq!(nice_step(27_000.0, 4.0), 10_000.0);
    }

    #[test]
    fn embedded_fonts_load_and_measure_accented_text() {
        let fonts = FONTS.as_ref().expect("fonts");
        let plain = fonts.regular_metrics.width("Jose", 10.0);
        let accented = fonts.regular_metrics.width("José", 10.0);
        assert!(plain > 10.0 && (accented - plain).abs() < 1.0);
        assert!(fonts.bold_metrics.width("José", 10.0) > plain);
    }
}
