//! Workflow efficiency of one flow (issue 39, design §18), for every surface: over the flow's
//! assignments made in a range, the module funnel (reached, completed, stalled now), the time
//! spent per module, the time to complete overall and per week or month, and the share
//! completed by the due date. Exact at read time: read in one snapshot on a fresh replica where
//! one is configured, else the primary, and counted against the organization's report limit.
//! The definitions are in `flow_common::db::analysis` and docs/analysis.md.

use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};
use flow_common::db::analysis::{self, ModuleRow, Scope, Spread};
use flow_common::db::flows::FlowSummary;
use flow_common::db::replicas::ReadPurpose;
use flow_common::db::reports::{self, PeriodBounds};
use flow_domain::ids::{FlowId, ModuleId};
use flow_domain::report::Period;
use flow_domain::{DayBound, Invalid, parse_date_input};

use crate::ratelimit::{Operation, RateInfo};
use crate::{Acting, Context, ServiceError};

/// The range without `from`: this many days before `to`.
pub const DEFAULT_RANGE_DAYS: i64 = 90;
/// Longest range, in days (two years and a leap day).
pub const MAX_RANGE_DAYS: i64 = 731;
/// Days without activity after which an open assignment is stalled, without
/// `stalledAfterDays`: a week, the horizon of the reminders.
pub const DEFAULT_STALLED_AFTER_DAYS: i32 = 7;
/// Largest `stalledAfterDays`.
pub const MAX_STALLED_AFTER_DAYS: i64 = 365;

/// An analysis request as a surface received it.
#[derive(Debug, Clone, Default)]
pub struct AnalysisFields {
    /// Inclusive start of the assignment times: RFC 3339, or a date (its start in the zone).
    pub from: Option<String>,
    /// Exclusive end, the same way.
    pub to: Option<String>,
    /// `week` or `month`.
    pub period: Option<String>,
    /// Days without activity after which an open assignment is stalled.
    pub stalled_after_days: Option<i64>,
}

/// An analysis request, checked.
#[derive(Debug, Clone)]
pub struct AnalysisRequest {
    /// Inclusive lower bound of `assigned_at`.
    pub from: DateTime<Utc>,
    /// Exclusive upper bound.
    pub to: DateTime<Utc>,
    /// Length of the trend's periods.
    pub period: Period,
    /// The time zone periods are cut in.
    pub zone: chrono_tz::Tz,
    /// Days without activity after which an open assignment is stalled.
    pub stalled_after_days: i32,
}

impl AnalysisRequest {
    /// The default analysis in `zone` at `now`: the last [`DEFAULT_RANGE_DAYS`] days by week.
    pub fn recent(zone: chrono_tz::Tz, now: DateTime<Utc>) -> Self {
        Self {
            from: now - Duration::days(DEFAULT_RANGE_DAYS),
            to: now,
            period: Period::Week,
            zone,
            stalled_after_days: DEFAULT_STALLED_AFTER_DAYS,
        }
    }
}

/// Checks a request's fields; `zone` reads plain dates and cuts periods, `now` is the default
/// end.
pub fn check(
    fields: AnalysisFields,
    zone: chrono_tz::Tz,
    now: DateTime<Utc>,
) -> Result<AnalysisRequest, Invalid> {
    let date = |field: &str, text: Option<&str>| {
        text.map(str::trim)
            .filter(|text| !text.is_empty())
            .map(|text| parse_date_input(field, text, zone, DayBound::Start))
            .transpose()
    };
    let to = date("to", fields.to.as_deref())?.unwrap_or(now);
    let from = date("from", fields.from.as_deref())?
        .unwrap_or_else(|| to - Duration::days(DEFAULT_RANGE_DAYS));
    if to <= from {
        return Err(Invalid::new("to must be after from"));
    }
    if to - from > Duration::days(MAX_RANGE_DAYS) {
        return Err(Invalid(format!(
            "the range from..to must be at most {MAX_RANGE_DAYS} days"
        )));
    }
    let period = match fields.period.as_deref().map(str::trim) {
        None | Some("") => Period::Week,
        Some("week") => Period::Week,
        Some("month") => Period::Month,
        Some(_) => return Err(Invalid::new("period must be one of: week, month")),
    };
    let stalled_after_days = match fields.stalled_after_days {
        None => DEFAULT_STALLED_AFTER_DAYS,
        Some(days) if (1..=MAX_STALLED_AFTER_DAYS).contains(&days) => {
            i32::try_from(days).unwrap_or(DEFAULT_STALLED_AFTER_DAYS)
        }
        Some(_) => {
            return Err(Invalid(format!(
                "stalledAfterDays must be between 1 and {MAX_STALLED_AFTER_DAYS}"
            )));
        }
    };
    Ok(AnalysisRequest {
        from,
        to,
        period,
        zone,
        stalled_after_days,
    })
}

/// One module's figures.
#[derive(Debug, Clone)]
pub struct ModuleAnalysis {
    /// The module.
    pub id: ModuleId,
    /// Its position (0 first).
    pub position: i32,
    /// Its name.
    pub name: String,
    /// Assignments with progress on it or a later module, or completed.
    pub reached: i64,
    /// Assignments that completed it.
    pub completed: i64,
    /// Open assignments stalled in it now.
    pub stalled: i64,
    /// Time spent in it.
    pub time: Spread,
}

/// One period of the trend.
#[derive(Debug, Clone)]
pub struct TrendPeriod {
    /// The period's bounds (local start for its label).
    pub bounds: PeriodBounds,
    /// Time to complete of the assignments made in it (and in the range).
    pub time: Spread,
}

/// A flow's efficiency as read.
#[derive(Debug, Clone)]
pub struct FlowAnalysis {
    /// The flow.
    pub flow: Arc<FlowSummary>,
    /// What was asked.
    pub request: AnalysisRequest,
    /// The instant statuses and stalls were judged at (the snapshot's).
    pub generated_at: DateTime<Utc>,
    /// The instant the data is current to (a replica's may be a moment behind the primary's).
    pub data_as_of: DateTime<Utc>,
    /// Assignments of the range, cancelled ones left out.
    pub assignments: i64,
    /// Each module in flow order.
    pub modules: Vec<ModuleAnalysis>,
    /// Time to complete over the range.
    pub time_to_complete: Spread,
    /// Time to complete per period, first to last, empty periods included.
    pub trend: Vec<TrendPeriod>,
    /// Completed assignments that had a due date.
    pub completed_with_due_date: i64,
    /// Of those, completed at or before it.
    pub completed_on_time: i64,
    /// Where the organization stands against its report limit.
    pub rate: RateInfo,
}

/// `completed_on_time` of `completed_with_due_date` in percent, to one decimal; `None` when no
/// completed assignment had a due date.
pub fn on_time_share(on_time: i64, with_due_date: i64) -> Option<f64> {
    crate::compliance::percent(on_time, with_due_date)
}

/// What one snapshot read.
struct Read {
    now: DateTime<Utc>,
    modules: Vec<ModuleAnalysis>,
    completions: analysis::Completions,
    trend: Vec<TrendPeriod>,
}

async fn read_on(
    connection: &mut sqlx::PgConnection,
    flow_id: FlowId,
    request: &AnalysisRequest,
    now: DateTime<Utc>,
) -> Result<Read, sqlx::Error> {
    let scope = Scope {
        flow_id,
        lower: request.from,
        upper: request.to,
        now,
        stalled_after_days: request.stalled_after_days,
    };
    let modules: Vec<ModuleRow> = analysis::modules(&mut *connection, flow_id).await?;
    let funnel = analysis::funnel(&mut *connection, &scope).await?;
    let times = analysis::module_times(&mut *connection, &scope).await?;
    let completions = analysis::completions(&mut *connection, &scope).await?;
    // The end is exclusive: its period is the one holding the instant just before it.
    let periods = reports::periods(
        &mut *connection,
        request.period,
        request.zone.name(),
        request.from,
        request.to - Duration::microseconds(1),
    )
    .await?;
    let bounds: Vec<_> = periods
        .iter()
        .map(|period| (period.period_start, period.period_end))
        .collect();
    let spreads = analysis::completion_trend(&mut *connection, &scope, &bounds).await?;
    let modules = modules
        .into_iter()
        .map(|module| {
            let step = funnel.iter().find(|row| row.position == module.position);
            ModuleAnalysis {
                reached: step.map_or(0, |row| row.reached),
                completed: step.map_or(0, |row| row.completed),
                stalled: step.map_or(0, |row| row.stalled),
                time: times
                    .iter()
                    .find(|time| time.module_id == module.id)
                    .map(|time| time.spread)
                    .unwrap_or_default(),
                id: module.id,
                position: module.position,
                name: module.name,
            }
        })
        .collect();
    Ok(Read {
        now,
        modules,
        completions,
        trend: periods
            .into_iter()
            .zip(spreads)
            .map(|(bounds, time)| TrendPeriod { bounds, time })
            .collect(),
    })
}

/// The efficiency of the organization's flow `flow_id` (another organization's is not found),
/// as `request` asks. Counts one request against the report limit, charged first.
pub async fn analyse(
    ctx: &Context,
    acting: Acting<'_>,
    flow_id: FlowId,
    request: AnalysisRequest,
) -> Result<FlowAnalysis, ServiceError> {
    let rate = ctx
        .limiter
        .check(acting.caller, Operation::Report, 1)
        .await?;
    let flow = ctx
        .caches
        .flow(&ctx.db, acting.org_id(), flow_id)
        .await?
        .ok_or(ServiceError::NotFound("flow"))?;
    let mut reading = ctx.reads.read(ReadPurpose::Report, None);
    let served = loop {
        let (mut snapshot, source) = reading.begin().await?;
        let now = snapshot.now();
        let outcome = read_on(snapshot.connection(), flow.id, &request, now).await;
        if let Some(served) = reading.end(snapshot, source, outcome).await? {
            break served;
        }
    };
    let read = served.value;
    Ok(FlowAnalysis {
        flow,
        request,
        generated_at: read.now,
        data_as_of: served.source.data_as_of,
        assignments: read.completions.assignments,
        modules: read.modules,
        time_to_complete: read.completions.spread,
        trend: read.trend,
        completed_with_due_date: read.completions.with_due_date,
        completed_on_time: read.completions.on_time,
        rate,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text)
            .expect("instant")
            .with_timezone(&Utc)
    }

    #[test]
    fn the_default_range_is_the_last_ninety_days_by_week() {
        let now = at("2026-11-28T05:00:00Z");
        let request = check(AnalysisFields::default(), chrono_tz::UTC, now).expect("valid");
        assert_eq!(request.to, now);
        assert_eq!(request.from, at("2026-08-30T05:00:00Z"));
        assert_eq!(request.period, Period::Week);
        assert_eq!(request.stalled_after_days, 7);
    }

    #[test]
    fn plain_dates_start_their_day_in_the_zone() {
        let zone: chrono_tz::Tz = "Europe/Paris".parse().expect("zone");
        let fields = AnalysisFields {
            from: Some("2026-07-01".into()),
            to: Some("2026-08-01".into()),
            period: Some("month".into()),
            stalled_after_days: Some(30),
        };
        let request = check(fields, zone, Utc::now()).expect("valid");
        assert_eq!(request.from, at("2026-06-30T22:00:00Z"));
        assert_eq!(request.to, at("2026-07-31T22:00:00Z"));
        assert_eq!(request.period, Period::Month);
        assert_eq!(request.stalled_after_days, 30);
    }

    #[test]
    fn bad_ranges_periods_and_stall_days_are_refused() {
        let now = Utc::now();
        let refused = |fields: AnalysisFields| check(fields, chrono_tz::UTC, now).unwrap_err().0;
        let range = |from: &str, to: &str| AnalysisFields {
            from: Some(from.into()),
            to: Some(to.into()),
            ..AnalysisFields::default()
        };
        assert_eq!(
            refused(range("2026-02-01", "2026-01-01")),
            "to must be after from"
        );
        assert_eq!(
            refused(range("2026-01-01", "2026-01-01")),
            "to must be after from"
        );
        assert!(refused(range("2024-01-01", "2026-01-03")).contains("at most 731 days"));
        assert!(check(range("2024-01-01", "2026-01-01"), chrono_tz::UTC, now).is_ok());
        assert!(refused(range("yesterday", "2026-01-01")).starts_with("from"));
        assert_eq!(
            refused(AnalysisFields {
                period: Some("day".into()),
                ..AnalysisFields::default()
            }),
            "period must be one of: week, month"
        );
        for days in [0, 366, -1] {
            assert_eq!(
                refused(AnalysisFields {
                    stalled_after_days: Some(days),
                    ..AnalysisFields::default()
                }),
                "stalledAfterDays must be between 1 and 365"
            );
        }
    }
}
