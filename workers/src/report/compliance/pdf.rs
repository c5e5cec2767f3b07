//! The compliance PDF, as an auditor would file it: the title, the scope (flows and who is
//! counted), the instant judged and where it came from, the totals (compliant of required, in
//! percent, and the count of every status), the roll-up when asked, then the table of people ×
//! flows (the first 5,000 rows, with a note pointing to the CSV and Excel exports for the
//! rest), and on every page a footer with the generation time and "page N of M". Laid out and
//! drawn with the flow report's PDF machinery.

use std::sync::Arc;

use flow_domain::report::PDF_ROW_LIMIT;

use super::super::FormatWriter;
use super::super::pdf::{
    Align, BLACK, COMPLETED_BAR, FONTS, GREY, Layout, column, draw, optional_time,
};
use super::super::sink::ChannelWriter;
use super::{ComplianceHeader, ComplianceRow, compliant_text, status_counts, tally_rows};
use flow_common::db::compliance::{Counts, Tally};

/// Groups listed in the PDF (the Excel export holds all).
const PDF_GROUP_LIMIT: usize = 500;

/// Writes the PDF once every row has arrived (and been counted), keeping the first
/// [`PDF_ROW_LIMIT`].
pub struct PdfWriter {
    header: Arc<ComplianceHeader>,
    sink: Option<ChannelWriter>,
    rows: Vec<ComplianceRow>,
    tally: Tally,
}

impl PdfWriter {
    /// A writer for `header`'s report.
    pub fn new(header: Arc<ComplianceHeader>, sink: ChannelWriter) -> Self {
        let capacity = usize::try_from(header.rows_total.clamp(0, PDF_ROW_LIMIT)).unwrap_or(0);
        Self {
            header,
            sink: Some(sink),
            rows: Vec::with_capacity(capacity),
            tally: Tally::default(),
        }
    }
}

impl FormatWriter<ComplianceRow> for PdfWriter {
    fn write_rows(&mut self, rows: &[ComplianceRow]) -> anyhow::Result<()> {
        tally_rows(&mut self.tally, rows);
        let room = usize::try_from(PDF_ROW_LIMIT)
            .unwrap_or(0)
            .saturating_sub(self.rows.len());
        self.rows.extend(rows.iter().take(room).cloned());
        Ok(())
    }

    fn finish(mut self: Box<Self>) -> anyhow::Result<()> {
        let totals = std::mem::take(&mut self.tally).counts();
        let bytes = render(&self.header, &totals, &self.rows)?;
        let mut sink = self
            .sink
            .take()
            .ok_or_else(|| anyhow::anyhow!("the PDF was already written"))?;
        std::io::Write::write_all(&mut sink, &bytes)?;
        sink.finish()?;
        Ok(())
    }
}

/// Renders the whole document.
fn render(
    header: &ComplianceHeader,
    totals: &Counts,
    rows: &[ComplianceRow],
) -> anyhow::Result<Vec<u8>> {
    let fonts = FONTS
        .as_ref()
        .ok_or_else(|| anyhow::anyhow!("the embedded PDF font could not be read"))?;
    let mut layout = Layout::new(fonts);
    layout.line(20.0, true, BLACK, "Compliance report");
    layout.line(
        12.0,
        true,
        COMPLETED_BAR,
        &format!("As of {}", header.as_of_text()),
    );
    layout.y += 4.0;
    scope_block(&mut layout, header);
    totals_block(&mut layout, header, totals);
    groups_block(&mut layout, header);
    rows_block(&mut layout, header, rows);
    draw(
        fonts,
        &format!("Compliance report as of {}", header.as_of_text()),
        &format!("Compliance report as of {}", header.as_of_text()),
        header.generated_at,
        layout.pages,
    )
}

fn scope_block(layout: &mut Layout<'_>, header: &ComplianceHeader) {
    layout.heading("Scope");
    let mut lines = vec![format!("Flows: {}", header.flows_text())];
    for (label, value) in header.population_lines() {
        lines.push(format!("{label}: {value}"));
    }
    lines.push(format!(
        "As of: {} ({})",
        header.as_of_text(),
        header.as_of_origin()
    ));
    lines.push(format!(
        "Generated at: {} UTC · data as of {} UTC · export {}",
        header.generated_at.format("%Y-%m-%d %H:%M:%S"),
        header.data_as_of.format("%Y-%m-%d %H:%M:%S"),
        header.export_id
    ));
    lines.push(format!(
        "An open assignment due within {} days of the instant is due soon.",
        header.parameters.due_soon_days
    ));
    for line in lines {
        layout.line(9.0, false, GREY, &line);
    }
}

fn totals_block(layout: &mut Layout<'_>, header: &ComplianceHeader, totals: &Counts) {
    layout.heading("Totals");
    layout.line(
        11.0,
        true,
        BLACK,
        &format!("Compliant: {}", compliant_text(totals)),
    );
    layout.line(
        9.0,
        false,
        GREY,
        &format!(
            "{} of {} people compliant in every flow; {} flows, {} pairs required, {} not \
             required.",
            totals.people_compliant,
            totals.people,
            header.flows.len(),
            totals.cells,
            totals.not_required
        ),
    );
    layout.y += 4.0;
    let columns = [
        column("Status", 120.0, Align::Left),
        column("People × flows", 90.0, Align::Right),
    ];
    let cells = status_counts(totals)
        .into_iter()
        .map(|(status, count)| vec![status.replace('_', " "), count.to_string()]);
    layout.table(&columns, cells);
}

fn groups_block(layout: &mut Layout<'_>, header: &ComplianceHeader) {
    let Some((by, groups)) = &header.groups else {
        return;
    };
    layout.heading(&format!("By {}", by.as_str()));
    if groups.len() > PDF_GROUP_LIMIT {
        layout.line(
            8.0,
            false,
            GREY,
            &format!(
                "Showing the first {PDF_GROUP_LIMIT} of {} groups; the Excel export lists all.",
                groups.len()
            ),
        );
    }
    let columns = [
        column("Group", 175.0, Align::Left),
        column("People", 55.0, Align::Right),
        column("Compliant people", 80.0, Align::Right),
        column("Compliant", 70.0, Align::Right),
        column("Required", 65.0, Align::Right),
        column("%", 55.0, Align::Right),
    ];
    let cells = groups.iter().take(PDF_GROUP_LIMIT).map(|group| {
        let counts = &group.counts;
        vec![
            group
                .label
                .clone()
                .or_else(|| (!group.key.is_empty()).then(|| group.key.clone()))
                .unwrap_or_else(|| "(none)".to_owned()),
            counts.people.to_string(),
            counts.people_compliant.to_string(),
            counts.compliant.to_string(),
            counts.cells.to_string(),
            flow_app::compliance::percent(counts.compliant, counts.cells)
                .map(|percent| format!("{percent:.1}"))
                .unwrap_or_else(|| "–".to_owned()),
        ]
    });
    layout.table(&columns, cells);
}

/// A row's status in words; a pair judged though not required (outside the flow's audience)
/// says so (`(not req.)`, explained under the table's title).
fn status_text(row: &ComplianceRow) -> String {
    let status = row.status.replace('_', " ");
    if row.required || row.status == "not_required" {
        status
    } else {
        format!("{status} (not req.)")
    }
}

fn rows_block(layout: &mut Layout<'_>, header: &ComplianceHeader, rows: &[ComplianceRow]) {
    layout.new_page();
    layout.line(12.0, true, BLACK, "People × flows");
    let shown = rows.len() as i64;
    let note = if header.rows_total > shown {
        format!(
            "Showing the first {shown} of {} rows (by person, then flow). The CSV and Excel \
             exports of this report hold every row.",
            header.rows_total
        )
    } else {
        format!("All {shown} rows, by person, then flow; instants in UTC.")
    };
    layout.line(8.0, false, GREY, &note);
    layout.line(
        8.0,
        false,
        GREY,
        "\"(not req.)\": judged, though the flow is not required of the person (outside its \
         rule's audience).",
    );
    layout.y += 4.0;
    if rows.is_empty() {
        layout.line(9.0, false, GREY, "Nobody is counted in this scope.");
        return;
    }
    // Wide enough for every status with its "(not req.)" mark and for a whole instant
    // (`YYYY-MM-DD HH:MM`): what an auditor files must not be cut.
    let columns = [
        column("E-mail", 110.0, Align::Left),
        column("Name", 55.0, Align::Left),
        column("Department", 52.0, Align::Left),
        column("Flow", 52.0, Align::Left),
        column("Status", 88.0, Align::Left),
        column("Due", 79.0, Align::Left),
        column("Completed", 79.0, Align::Left),
    ];
    let cells = rows.iter().map(|row| {
        vec![
            row.email.clone(),
            row.name.clone().unwrap_or_default(),
            row.department.clone().unwrap_or_default(),
            row.flow.clone(),
            status_text(row),
            optional_time(row.due_at),
            optional_time(row.completed_at),
        ]
    });
    layout.table(&columns, cells);
}
