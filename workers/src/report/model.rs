//! What every export format writes: the report's summary (read once, in the export's snapshot)
//! and the rows streamed after it, plus the small helpers the formats share.

use chrono::{DateTime, Datelike, Timelike, Utc};
use flow_common::db::flows::Module;
use flow_common::db::reports::{AggregateRow, ExportRow, Metrics, ScheduleRow};
use flow_domain::duration::humanize_seconds;
use flow_domain::ids::{ExportId, FlowId};
use flow_domain::report::{
    AggregateMetric, AggregateSpec, Period, ReportParameters, completion_rate, whole_seconds,
};
use flow_domain::{ModuleStatus, format_timestamp};

/// Everything about an export except its assignment rows.
#[derive(Debug, Clone)]
pub struct ExportHeader {
    /// The export.
    pub export_id: ExportId,
    /// Flow reported on.
    pub flow_id: FlowId,
    /// Its name.
    pub flow_name: String,
    /// Its modules, in order.
    pub modules: Vec<Module>,
    /// The request replayed.
    pub parameters: ReportParameters,
    /// The instant statuses and figures were read at.
    pub generated_at: DateTime<Utc>,
    /// The instant the data is current to (a replica's data may be a moment older than
    /// `generated_at`).
    pub data_as_of: DateTime<Utc>,
    /// Metrics of the range.
    pub metrics: Metrics,
    /// Aggregates, when asked.
    pub aggregates: Option<(AggregateSpec, Vec<AggregateRow>)>,
    /// Completion by period for the PDF chart (the aggregates when asked, else a period chosen
    /// from the span of the data).
    pub chart: Option<(Period, Vec<AggregateRow>)>,
    /// Schedules of the flow.
    pub schedules: Vec<ScheduleRow>,
    /// Assignment rows the file will hold.
    pub rows_total: i64,
    /// Module progress rows of those (detailed exports).
    pub module_rows_total: i64,
}

impl ExportHeader {
    /// The range as text, for titles: `2026-11-01 – 2026-12-01 (Europe/Paris)`.
    pub fn range_text(&self) -> String {
        let zone = self.parameters.zone();
        let show = |at: Option<DateTime<Utc>>, open: &str| match at {
            Some(at) => at.with_timezone(&zone).format("%Y-%m-%d %H:%M").to_string(),
            None => open.to_owned(),
        };
        format!(
            "{} – {} ({})",
            show(self.parameters.start, "first assignment"),
            show(self.parameters.end, "now"),
            self.parameters.timezone
        )
    }

    /// The status filter as text.
    pub fn status_filter_text(&self) -> &'static str {
        self.parameters
            .status
            .map_or("all statuses", |status| status.as_str())
    }

    /// The module at `position`, if the flow has it.
    pub fn module_at(&self, position: i32) -> Option<&Module> {
        usize::try_from(position)
            .ok()
            .and_then(|index| self.modules.get(index))
            .filter(|module| module.position == position)
            .or_else(|| {
                self.modules
                    .iter()
                    .find(|module| module.position == position)
            })
    }
}

/// The headline figures, as (label, value) text pairs, in display order.
pub fn metric_lines(metrics: &Metrics) -> Vec<(&'static str, String)> {
    let average = metrics
        .average_completion_seconds
        .map(whole_seconds)
        .map_or_else(|| "–".to_owned(), humanize_seconds);
    vec![
        ("Total assignments", metrics.total.to_string()),
        ("Completed", metrics.completed.to_string()),
        (
            "Completion rate",
            format!("{:.1} %", completion_rate(metrics.completed, metrics.total)),
        ),
        ("Average completion time", average),
        ("In progress", metrics.in_progress.to_string()),
        ("Pending", metrics.pending.to_string()),
        ("Overdue", metrics.overdue.to_string()),
    ]
}

/// One module progress entry of a row.
#[derive(Debug, Clone, Copy)]
pub struct ModuleEntry {
    /// Position in the flow.
    pub position: i32,
    /// Started or completed.
    pub status: ModuleStatus,
    /// Start time.
    pub started_at: Option<DateTime<Utc>>,
    /// Completion time (completed modules only).
    pub completed_at: Option<DateTime<Utc>>,
    /// Scaled score, -1..1, when reported.
    pub score: Option<f64>,
    /// Passed (true) or failed (false), when reported.
    pub success: Option<bool>,
    /// Seconds spent, when reported.
    pub duration_seconds: Option<i64>,
}

/// The module progress of a detailed row, in flow order.
pub fn module_entries(row: &ExportRow) -> Vec<ModuleEntry> {
    let (Some(positions), Some(statuses)) = (&row.module_positions, &row.module_statuses) else {
        return Vec::new();
    };
    positions
        .iter()
        .zip(statuses)
        .enumerate()
        .map(|(index, (position, status))| {
            let at = |values: &Option<Vec<Option<DateTime<Utc>>>>| nth(values, index);
            ModuleEntry {
                position: *position,
                status: *status,
                started_at: at(&row.module_started),
                completed_at: if *status == ModuleStatus::Completed {
                    at(&row.module_completed)
                } else {
                    None
                },
                score: nth(&row.module_scores, index),
                success: nth(&row.module_success, index),
                duration_seconds: nth(&row.module_durations, index),
            }
        })
        .collect()
}

/// The `index`th value of an optional array column, when there is one.
fn nth<T: Copy>(values: &Option<Vec<Option<T>>>, index: usize) -> Option<T> {
    values
        .as_ref()
        .and_then(|values| values.get(index).copied().flatten())
}

/// A scaled score as text: `0.85`; as stored, without trailing zeros.
pub fn score_text(score: f64) -> String {
    let text = format!("{score:.4}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    if text == "-0" {
        "0".to_owned()
    } else {
        text.to_owned()
    }
}

/// Writes a timestamp as the API does (`2026-11-22T10:05:00.000Z`) without going through the
/// formatting machinery: exports write millions of them.
pub fn push_timestamp(out: &mut Vec<u8>, at: DateTime<Utc>) {
    let naive = at.naive_utc();
    let year = naive.year();
    if !(0..=9999).contains(&year) {
        out.extend_from_slice(format_timestamp(at).as_bytes());
        return;
    }
    let millis = naive.and_utc().timestamp_subsec_millis().min(999);
    let mut text = *b"0000-00-00T00:00:00.000Z";
    let mut put = |value: u32, at: usize, width: usize| {
        let mut rest = value;
        for slot in text[at..at + width].iter_mut().rev() {
            *slot = b'0' + (rest % 10) as u8;
            rest /= 10;
        }
    };
    put(year as u32, 0, 4);
    put(naive.month(), 5, 2);
    put(naive.day(), 8, 2);
    put(naive.hour(), 11, 2);
    put(naive.minute(), 14, 2);
    put(naive.second(), 17, 2);
    put(millis, 20, 3);
    out.extend_from_slice(&text);
}

/// The figures of an aggregate row a spec asks for, as (column title, value) pairs. Values are
/// numbers, or text for the duration.
pub fn aggregate_columns(spec: &AggregateSpec) -> Vec<(&'static str, AggregateMetric)> {
    let mut columns = Vec::new();
    for metric in AggregateMetric::ALL {
        if !spec.wants(*metric) {
            continue;
        }
        match metric {
            AggregateMetric::TotalAssignments => {}
            AggregateMetric::CompletedAssignments => columns.push(("Completed", *metric)),
            AggregateMetric::OverdueAssignments => columns.push(("Overdue", *metric)),
            AggregateMetric::CompletionRate => columns.push(("Completion rate (%)", *metric)),
            AggregateMetric::AverageDuration => columns.push(("Average duration", *metric)),
        }
    }
    columns
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_match_the_api_format() {
        for text in [
            "2026-11-22T10:05:00.000Z",
            "2027-01-01T00:00:00.999Z",
            "0001-02-03T04:05:06.007Z",
        ] {
            let at = DateTime::parse_from_rfc3339(text)
                .unwrap()
                .with_timezone(&Utc);
            let mut out = Vec::new();
            push_timestamp(&mut out, at);
            assert_eq!(String::from_utf8(out).unwrap(), text);
            assert_eq!(format_timestamp(at), text);
        }
    }
}
