//! Reports: what a report is about ([`ReportParameters`], the [`AggregateSpec`]), the rules of
//! the figures (completion rate rounding, period labels), the export formats and the page cursor;
//! and the modules that make a report out of a request:
//!
//! - [`params`]: a report request validated into those parameters;
//! - [`cost`]: what a report costs against the organization's report limit.
//!
//! The one place a report is assembled from the database (metrics, schedules, aggregates, the
//! rows), for the API's inline answer and every export format, is `flow_app::engine::report`.

pub mod cost;
pub mod params;

use chrono::{DateTime, Datelike, Duration, NaiveDate, NaiveDateTime, TimeZone, Utc};
use chrono_tz::Tz;
use serde::{Deserialize, Serialize};

use crate::ids::{AssignmentId, FlowId};
use crate::{AssignmentStatus, Invalid};

/// Page size of a report when the request gives none.
pub const DEFAULT_PAGE_LIMIT: u32 = 1_000;
/// Largest page size of a report.
pub const MAX_PAGE_LIMIT: u32 = 10_000;
/// Most periods one aggregation may produce.
pub const MAX_PERIODS: i64 = 10_000;
/// Assignments shown in a PDF export; CSV and Excel hold every row.
pub const PDF_ROW_LIMIT: i64 = 5_000;
/// How long an export can be downloaded after it was requested.
pub const EXPORT_VALIDITY: Duration = Duration::hours(24);

string_enum!(
    /// Length of an aggregation period; periods are cut in the report's time zone.
    Period {
        /// A calendar day, labelled `2026-11-22`.
        Day => "day",
        /// An ISO week (Monday to Sunday), labelled `2026-W47`.
        Week => "week",
        /// A calendar month, labelled `2026-11`.
        Month => "month",
        /// A calendar quarter, labelled `2026-Q4`.
        Quarter => "quarter",
        /// A calendar year, labelled `2026`.
        Year => "year",
    }
);

impl Period {
    /// The label of the period starting at the local time `start`.
    pub fn label(self, start: NaiveDateTime) -> String {
        let date = start.date();
        match self {
            Self::Day => date.format("%Y-%m-%d").to_string(),
            Self::Week => {
                let week = date.iso_week();
                format!("{}-W{:02}", week.year(), week.week())
            }
            Self::Month => date.format("%Y-%m").to_string(),
            Self::Quarter => format!("{}-Q{}", date.year(), date.month0() / 3 + 1),
            Self::Year => format!("{}", date.year()),
        }
    }

    /// Number of periods from the one containing local date `first` to the one containing `last`,
    /// both included.
    pub fn count_between(self, first: NaiveDate, last: NaiveDate) -> i64 {
        if last < first {
            return 0;
        }
        let months = |date: NaiveDate| i64::from(date.year()) * 12 + i64::from(date.month0());
        match self {
            Self::Day => (last - first).num_days() + 1,
            Self::Week => {
                let monday = |date: NaiveDate| {
                    date - Duration::days(i64::from(date.weekday().num_days_from_monday()))
                };
                (monday(last) - monday(first)).num_days() / 7 + 1
            }
            Self::Month => months(last) - months(first) + 1,
            Self::Quarter => months(last) / 3 - months(first) / 3 + 1,
            Self::Year => i64::from(last.year()) - i64::from(first.year()) + 1,
        }
    }
}

string_enum!(
    /// A figure computed per aggregation period.
    AggregateMetric {
        /// Completed / total × 100, one decimal.
        CompletionRate => "completion_rate",
        /// Mean of completedAt − startedAt over completed assignments.
        AverageDuration => "average_duration",
        /// Assignments made in the period.
        TotalAssignments => "total_assignments",
        /// Of those, completed.
        CompletedAssignments => "completed_assignments",
        /// Of those, overdue now.
        OverdueAssignments => "overdue_assignments",
    }
);

string_enum!(
    /// File format of an export.
    ExportFormat {
        /// RFC 4180 CSV, UTF-8.
        Csv => "csv",
        /// Office Open XML workbook.
        Excel => "excel",
        /// A printable report.
        Pdf => "pdf",
    }
);

string_enum!(
    /// What an export is of.
    ExportKind {
        /// The report on one flow (`POST /v1/flows/report`).
        FlowReport => "flow_report",
        /// The compliance report across flows (`POST /v1/compliance/report`).
        Compliance => "compliance",
    }
);

string_enum!(
    /// Lifecycle of an export.
    ExportStatus {
        /// Waiting for a worker.
        Pending => "pending",
        /// A worker is generating it.
        Running => "running",
        /// The file can be downloaded.
        Ready => "ready",
        /// Generation failed; the export's error says why.
        Failed => "failed",
        /// Past its expiry; the file is gone.
        Expired => "expired",
    }
);

impl ExportFormat {
    /// The name people read: `CSV`, `Excel`, `PDF`.
    pub fn label(self) -> &'static str {
        match self {
            Self::Csv => "CSV",
            Self::Excel => "Excel",
            Self::Pdf => "PDF",
        }
    }

    /// The `Content-Type` of the file.
    pub fn content_type(self) -> &'static str {
        match self {
            Self::Csv => "text/csv; charset=utf-8",
            Self::Excel => "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
            Self::Pdf => "application/pdf",
        }
    }

    /// The file name extension.
    pub fn extension(self) -> &'static str {
        match self {
            Self::Csv => "csv",
            Self::Excel => "xlsx",
            Self::Pdf => "pdf",
        }
    }

    /// Most assignment rows a file of this format holds; `None` when it holds every one.
    pub fn row_limit(self) -> Option<i64> {
        match self {
            Self::Pdf => Some(PDF_ROW_LIMIT),
            Self::Csv | Self::Excel => None,
        }
    }
}

/// The `aggregate` part of a report request, validated.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AggregateSpec {
    /// Period length.
    pub by: Period,
    /// Figures to compute; never empty (an empty request means all).
    pub metrics: Vec<AggregateMetric>,
}

impl AggregateSpec {
    /// Validates `by` and `metrics` (field names as the caller sent them).
    pub fn parse(by: &str, metrics: Option<&[String]>) -> Result<Self, Invalid> {
        let by = Period::parse_field("aggregate.by", by)?;
        let mut parsed: Vec<AggregateMetric> = Vec::new();
        for name in metrics.unwrap_or_default() {
            let metric = name.parse::<AggregateMetric>().map_err(|_| {
                Invalid::new(format!(
                    "aggregate.metrics: unknown metric \"{name}\"; allowed values: {}",
                    AggregateMetric::allowed()
                ))
            })?;
            if !parsed.contains(&metric) {
                parsed.push(metric);
            }
        }
        if parsed.is_empty() {
            parsed = AggregateMetric::ALL.to_vec();
        }
        Ok(Self {
            by,
            metrics: parsed,
        })
    }

    /// Whether `metric` was asked for.
    pub fn wants(&self, metric: AggregateMetric) -> bool {
        self.metrics.contains(&metric)
    }
}

/// What a report is about, whatever answers it: the API inline, or the report-worker replaying it
/// into a file (it is stored with the export, so its serialized shape must stay readable).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReportParameters {
    /// Flow reported on.
    pub flow_id: FlowId,
    /// Inclusive start of the `assignedAt` (schedules: `scheduledAt`) range.
    pub start: Option<DateTime<Utc>>,
    /// Exclusive end of the range.
    pub end: Option<DateTime<Utc>>,
    /// Status filter of the assignments and schedules lists.
    pub status: Option<AssignmentStatus>,
    /// Cancelled assignments count in the metrics and are listed (left out by default; absent
    /// in parameters stored before cancelling existed).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub include_cancelled: bool,
    /// Include module progress.
    pub detailed: bool,
    /// Aggregation, when asked.
    pub aggregate: Option<AggregateSpec>,
    /// IANA time zone of plain dates and periods.
    pub timezone: String,
}

/// The earliest instant a date input can name (RFC 3339 years start at 0000).
fn lowest_instant() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(0, 1, 1, 0, 0, 0)
        .single()
        .unwrap_or(DateTime::<Utc>::MIN_UTC)
}

/// Just after the latest instant a date input can name.
fn highest_instant() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(10_000, 1, 1, 0, 0, 0)
        .single()
        .unwrap_or(DateTime::<Utc>::MAX_UTC)
}

impl ReportParameters {
    /// The time zone (UTC if the stored name is unknown to this build).
    pub fn zone(&self) -> Tz {
        self.timezone.parse().unwrap_or(Tz::UTC)
    }

    /// The range as concrete bounds `[lower, upper)`, so queries need no NULL cases (which would
    /// keep Postgres from using the index range on a generic plan).
    pub fn bounds(&self) -> (DateTime<Utc>, DateTime<Utc>) {
        let (lowest, highest) = Self::open_bounds();
        (self.start.unwrap_or(lowest), self.end.unwrap_or(highest))
    }

    /// The bounds that stand for "no bound": wider than any date input can name.
    pub fn open_bounds() -> (DateTime<Utc>, DateTime<Utc>) {
        (lowest_instant(), highest_instant())
    }
}

/// `completed / total × 100`, rounded half away from zero to one decimal; 0 when `total` is 0.
/// Computed on integers so `2/3` gives exactly 66.7 and `1/8` gives 12.5.
pub fn completion_rate(completed: i64, total: i64) -> f64 {
    if total <= 0 || completed <= 0 {
        return 0.0;
    }
    let (completed, total) = (i128::from(completed), i128::from(total));
    // Tenths of a percent, rounded half up (both operands are positive).
    let tenths = (2 * completed * 1_000 + total) / (2 * total);
    tenths as f64 / 10.0
}

/// Seconds rounded half away from zero to a whole second, for durations shown as text.
pub fn whole_seconds(seconds: f64) -> u64 {
    if seconds.is_finite() && seconds > 0.0 {
        seconds.round() as u64
    } else {
        0
    }
}

/// A position in a report's assignments: after (`assigned_at`, `id`) in that order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageCursor {
    /// Assignment time of the last row of the previous page.
    pub assigned_at: DateTime<Utc>,
    /// Id of that row.
    pub id: AssignmentId,
}

impl PageCursor {
    /// The opaque text handed to callers.
    pub fn encode(&self) -> String {
        encode_keyset(self.assigned_at, &self.id.0)
    }

    /// Parses [`PageCursor::encode`]'s output; `None` for anything else.
    pub fn decode(text: &str) -> Option<Self> {
        decode_keyset(text).map(|(assigned_at, id)| Self {
            assigned_at,
            id: AssignmentId(id),
        })
    }
}

/// A keyset position (a timestamp and an id) as opaque text: hex of the microsecond timestamp
/// and the id.
pub fn encode_keyset(at: DateTime<Utc>, id: &uuid::Uuid) -> String {
    let mut bytes = Vec::with_capacity(24);
    bytes.extend_from_slice(&at.timestamp_micros().to_be_bytes());
    bytes.extend_from_slice(id.as_bytes());
    hex::encode(bytes)
}

/// Parses [`encode_keyset`]'s output; `None` for anything else, including a crafted cursor
/// whose time is outside the years a date input may name (Postgres could not compare it).
pub fn decode_keyset(text: &str) -> Option<(DateTime<Utc>, uuid::Uuid)> {
    let bytes = hex::decode(text).ok()?;
    if bytes.len() != 24 {
        return None;
    }
    let micros = i64::from_be_bytes(bytes[..8].try_into().ok()?);
    let at = DateTime::<Utc>::from_timestamp_micros(micros)
        .filter(|at| crate::year_in_range(at.year()))?;
    let id = uuid::Uuid::from_slice(&bytes[8..]).ok()?;
    Some((at, id))
}

/// A file name for an export: the flow name made safe for any file system, and the date.
pub fn export_file_name(
    flow_name: &str,
    requested_at: DateTime<Utc>,
    format: ExportFormat,
) -> String {
    let mut slug = String::with_capacity(flow_name.len());
    for character in flow_name.chars() {
        if character.is_ascii_alphanumeric() {
            slug.push(character.to_ascii_lowercase());
        } else if !slug.ends_with('-') && !slug.is_empty() {
            slug.push('-');
        }
        if slug.len() >= 60 {
            break;
        }
    }
    let slug = slug.trim_end_matches('-');
    let slug = if slug.is_empty() { "flow" } else { slug };
    format!(
        "{slug}-report-{}.{}",
        requested_at.format("%Y%m%d-%H%M%S"),
        format.extension()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completion_rate_rounds_half_away_from_zero_to_one_decimal() {
        assert_eq!(completion_rate(0, 0), 0.0);
        assert_eq!(completion_rate(0, 7), 0.0);
        assert_eq!(completion_rate(2, 3), 66.7);
        assert_eq!(completion_rate(1, 3), 33.3);
        assert_eq!(completion_rate(1, 8), 12.5);
        // 1/16 = 6.25 % → 6.3 (half away from zero), 1/80 = 1.25 % → 1.3.
        assert_eq!(completion_rate(1, 16), 6.3);
        assert_eq!(completion_rate(1, 80), 1.3);
        assert_eq!(completion_rate(1, 2_000), 0.1);
        assert_eq!(completion_rate(1, 2_001), 0.0);
        assert_eq!(completion_rate(5, 5), 100.0);
    }

    #[test]
    fn period_labels_follow_the_contract() {
        let at = |text: &str| NaiveDateTime::parse_from_str(text, "%Y-%m-%d %H:%M").unwrap();
        assert_eq!(Period::Day.label(at("2026-11-22 00:00")), "2026-11-22");
        assert_eq!(Period::Week.label(at("2026-11-16 00:00")), "2026-W47");
        // 2026-12-28 is a Monday of ISO week 53 of 2026; 2027-01-04 starts 2027-W01.
        assert_eq!(Period::Week.label(at("2026-12-28 00:00")), "2026-W53");
        assert_eq!(Period::Week.label(at("2027-01-04 00:00")), "2027-W01");
        // 2024-12-30 is a Monday in ISO week 1 of 2025.
        assert_eq!(Period::Week.label(at("2024-12-30 00:00")), "2025-W01");
        assert_eq!(Period::Month.label(at("2026-11-01 00:00")), "2026-11");
        assert_eq!(Period::Quarter.label(at("2026-10-01 00:00")), "2026-Q4");
        assert_eq!(Period::Quarter.label(at("2026-03-01 00:00")), "2026-Q1");
        assert_eq!(Period::Year.label(at("2026-01-01 00:00")), "2026");
    }

    #[test]
    fn periods_are_counted_inclusively() {
        let date = |text: &str| NaiveDate::parse_from_str(text, "%Y-%m-%d").unwrap();
        assert_eq!(
            Period::Day.count_between(date("2026-11-01"), date("2026-11-30")),
            30
        );
        assert_eq!(
            Period::Week.count_between(date("2026-12-27"), date("2027-01-04")),
            3
        );
        assert_eq!(
            Period::Month.count_between(date("2026-11-30"), date("2027-02-01")),
            4
        );
        assert_eq!(
            Period::Quarter.count_between(date("2026-03-31"), date("2026-04-01")),
            2
        );
        assert_eq!(
            Period::Year.count_between(date("2026-12-31"), date("2026-01-01")),
            0
        );
    }

    #[test]
    fn aggregate_specs_name_the_allowed_values() {
        let spec = AggregateSpec::parse("week", None).unwrap();
        assert_eq!(spec.metrics, AggregateMetric::ALL.to_vec());
        let error = AggregateSpec::parse("fortnight", None).unwrap_err();
        assert_eq!(
            error.0,
            "aggregate.by must be one of: day, week, month, quarter, year"
        );
        let error = AggregateSpec::parse("day", Some(&["median".to_owned()])).unwrap_err();
        assert!(
            error.0.contains("completion_rate, average_duration"),
            "{}",
            error.0
        );
        let spec = AggregateSpec::parse(
            "day",
            Some(&["completion_rate".to_owned(), "completion_rate".to_owned()]),
        )
        .unwrap();
        assert_eq!(spec.metrics, vec![AggregateMetric::CompletionRate]);
    }

    #[test]
    fn cursors_round_trip_and_reject_garbage() {
        let cursor = PageCursor {
            assigned_at: DateTime::from_timestamp_micros(1_790_000_000_123_456).unwrap(),
            id: AssignmentId::new(),
        };
        assert_eq!(PageCursor::decode(&cursor.encode()), Some(cursor));
        assert_eq!(PageCursor::decode("zz"), None);
        assert_eq!(PageCursor::decode(""), None);
        assert_eq!(PageCursor::decode(&"0".repeat(46)), None);
        // Well-formed, but at a time Postgres cannot hold (about 290,000 years BC / AD).
        for micros in [i64::MIN, i64::MAX, -8_000_000_000_000_000_000] {
            let crafted = format!("{}{}", hex::encode(micros.to_be_bytes()), "00".repeat(16));
            assert_eq!(PageCursor::decode(&crafted), None, "{micros}");
        }
    }

    #[test]
    fn export_file_names_are_portable() {
        let at = DateTime::from_timestamp(1_790_000_000, 0).unwrap();
        assert_eq!(
            export_file_name("Sécurité: Basics!", at, ExportFormat::Csv),
            "s-curit-basics-report-20260921-141320.csv"
        );
        assert_eq!(
            export_file_name("***", at, ExportFormat::Pdf),
            "flow-report-20260921-141320.pdf"
        );
    }
}
