//! A report request validated into parameters: the range (plain dates resolved in the report's
//! time zone), the status filter, the aggregation, the export format and the page. Every way of
//! asking for a report (the API, and the dashboard through it) goes through
//! [`ReportParams::parse`], so a request is refused the same way wherever it comes from; an
//! export replays the [`ReportParameters`] it produced.

use chrono::{DateTime, Utc};
use chrono_tz::Tz;

use super::{
    AggregateSpec, DEFAULT_PAGE_LIMIT, ExportFormat, MAX_PAGE_LIMIT, PageCursor, ReportParameters,
};
use crate::ids::FlowId;
use crate::{AssignmentStatus, DayBound, Invalid, parse_date_input, parse_timezone};

/// A report request as the caller wrote it: every field unchecked, as text where the caller sends
/// text. [`ReportParams::parse`] turns it into parameters or says which field is wrong.
#[derive(Debug, Clone, Default)]
pub struct ReportFields {
    /// Flow id.
    pub flow_id: Option<String>,
    /// Range start: RFC 3339, or a plain date (start of that day in the report's time zone).
    pub start_date: Option<String>,
    /// Range end, exclusive.
    pub end_date: Option<String>,
    /// Status filter of the lists.
    pub status: Option<String>,
    /// Whether cancelled assignments count in the metrics and are listed.
    pub include_cancelled: Option<bool>,
    /// Whether module progress is wanted.
    pub detailed: Option<bool>,
    /// Export format.
    pub format: Option<String>,
    /// The `aggregate` object, when present.
    pub aggregate: Option<AggregateFields>,
    /// IANA time zone name.
    pub timezone: Option<String>,
    /// Page size.
    pub limit: Option<i64>,
    /// The `nextCursor` of the previous page.
    pub cursor: Option<String>,
}

/// The `aggregate` object of a report request, unchecked.
#[derive(Debug, Clone, Default)]
pub struct AggregateFields {
    /// Period length.
    pub by: Option<String>,
    /// Figures asked for; none means all.
    pub metrics: Option<Vec<String>>,
}

/// A validated report request: the report's parameters plus what only the request decides (the
/// page, the export format).
#[derive(Debug, Clone)]
pub struct ReportParams {
    /// The flow; `None` when the text was not a flow id (it then does not exist: 404).
    pub flow_id: Option<FlowId>,
    /// Inclusive start of the range.
    pub start: Option<DateTime<Utc>>,
    /// Exclusive end of the range.
    pub end: Option<DateTime<Utc>>,
    /// Status filter of the lists (never of the metrics).
    pub status: Option<AssignmentStatus>,
    /// Whether cancelled assignments count in the metrics and are listed (`includeCancelled`).
    pub include_cancelled: bool,
    /// Whether module progress is wanted.
    pub detailed: bool,
    /// Export format, when a file is wanted too.
    pub format: Option<ExportFormat>,
    /// Aggregation, when asked.
    pub aggregate: Option<AggregateSpec>,
    /// Time zone of plain dates and periods.
    pub zone: Tz,
    /// Which page of assignments the inline answer holds.
    pub page: PageRequest,
}

/// One keyset page of a report's assignments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageRequest {
    /// Rows in the page.
    pub limit: i64,
    /// Position after which the page starts; `None` for the first page.
    pub after: Option<PageCursor>,
}

impl ReportParams {
    /// Validates a request; `org_zone` applies unless the request names a time zone. The error
    /// names the field, in the caller's terms.
    pub fn parse(fields: ReportFields, org_zone: Tz) -> Result<Self, Invalid> {
        let flow_text = fields.flow_id.unwrap_or_default();
        if flow_text.trim().is_empty() {
            return Err(Invalid::new("flowId is required"));
        }
        let zone = match fields.timezone.as_deref() {
            None => org_zone,
            Some(name) => parse_timezone("timezone", name.trim())?,
        };
        let date = |field: &str, text: Option<&str>| {
            text.map(|text| parse_date_input(field, text, zone, DayBound::Start))
                .transpose()
        };
        let start = date("startDate", fields.start_date.as_deref())?;
        let end = date("endDate", fields.end_date.as_deref())?;
        check_range(start, end)?;
        let status = fields
            .status
            .as_deref()
            .map(|text| AssignmentStatus::parse_field("status", text))
            .transpose()?;
        let format = fields
            .format
            .as_deref()
            .map(|text| ExportFormat::parse_field("format", text))
            .transpose()?;
        let aggregate = fields
            .aggregate
            .map(|aggregate| {
                let by = aggregate
                    .by
                    .ok_or_else(|| Invalid::new("aggregate.by is required"))?;
                AggregateSpec::parse(&by, aggregate.metrics.as_deref())
            })
            .transpose()?;
        let limit = match fields.limit {
            None => i64::from(DEFAULT_PAGE_LIMIT),
            Some(limit) if (1..=i64::from(MAX_PAGE_LIMIT)).contains(&limit) => limit,
            Some(_) => {
                return Err(Invalid::new(format!(
                    "limit must be between 1 and {MAX_PAGE_LIMIT}"
                )));
            }
        };
        let after = match fields.cursor.as_deref() {
            None | Some("") => None,
            Some(text) => Some(PageCursor::decode(text).ok_or_else(|| {
                Invalid::new("cursor is not valid: pass the nextCursor of the previous page")
            })?),
        };
        Ok(Self {
            flow_id: FlowId::parse(flow_text.trim()),
            start,
            end,
            status,
            include_cancelled: fields.include_cancelled.unwrap_or(false)
                || status == Some(AssignmentStatus::Cancelled),
            detailed: fields.detailed.unwrap_or(false),
            format,
            aggregate,
            zone,
            page: PageRequest { limit, after },
        })
    }

    /// The parameters of the report on `flow_id` (the flow found from [`ReportParams::flow_id`]).
    pub fn parameters(&self, flow_id: FlowId) -> ReportParameters {
        ReportParameters {
            flow_id,
            start: self.start,
            end: self.end,
            status: self.status,
            include_cancelled: self.include_cancelled,
            detailed: self.detailed,
            aggregate: self.aggregate.clone(),
            timezone: self.zone.name().to_owned(),
        }
    }
}

/// Checks that the range is not empty: `endDate` must be after `startDate`.
fn check_range(start: Option<DateTime<Utc>>, end: Option<DateTime<Utc>>) -> Result<(), Invalid> {
    match (start, end) {
        (Some(start), Some(end)) if end <= start => {
            Err(Invalid::new("endDate must be after startDate"))
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_refused_naming_the_field() {
        let fields = |flow: &str| ReportFields {
            flow_id: Some(flow.to_owned()),
            ..ReportFields::default()
        };
        let refused = |fields: ReportFields| ReportParams::parse(fields, Tz::UTC).unwrap_err().0;
        assert_eq!(refused(fields(" ")), "flowId is required");
        assert_eq!(
            refused(ReportFields {
                limit: Some(0),
                ..fields("flow_x")
            }),
            "limit must be between 1 and 10000"
        );
        assert_eq!(
            refused(ReportFields {
                start_date: Some("2026-02-01".into()),
                end_date: Some("2026-01-01".into()),
                ..fields("flow_x")
            }),
            "endDate must be after startDate"
        );
        assert_eq!(
            refused(ReportFields {
                aggregate: Some(AggregateFields::default()),
                ..fields("flow_x")
            }),
            "aggregate.by is required"
        );
        let parsed = ReportParams::parse(fields("not-a-flow-id"), Tz::UTC).unwrap();
        assert_eq!(parsed.flow_id, None, "an unknown id is a 404, not a 400");
        assert_eq!(parsed.page.limit, 1_000);
    }
}
