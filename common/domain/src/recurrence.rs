//! Recurring schedules: the occurrences of a series, computed on the calendar of the
//! organization's time zone. Each occurrence is counted from the series' anchor, not from the
//! previous one, so month-end clamping does not drift: Jan 31 → Feb 28 (29) → Mar 31 → Apr 30.

use chrono::{DateTime, Datelike, Days, Months, Utc};
use chrono_tz::Tz;

use crate::{local_to_utc, year_in_range};

string_enum!(
    /// How often a schedule repeats.
    Recurrence {
        /// Once.
        None => "none",
        /// Every day.
        Daily => "daily",
        /// Every week.
        Weekly => "weekly",
        /// Every month (day clamped to the month's end).
        Monthly => "monthly",
        /// Every three months.
        Quarterly => "quarterly",
        /// Every year (Feb 29 → Feb 28 in common years).
        Yearly => "yearly",
    }
);

impl Recurrence {
    /// The `n`th occurrence (0 = the anchor itself) of a series anchored at `anchor`, on the wall
    /// clock of `zone`; `None` for a one-off series past its first occurrence, and for
    /// occurrences after the year 9999 (the series ends there).
    pub fn occurrence(self, anchor: DateTime<Utc>, n: u32, zone: Tz) -> Option<DateTime<Utc>> {
        if n == 0 {
            return Some(anchor);
        }
        let local = anchor.with_timezone(&zone).naive_local();
        let date = local.date();
        let shifted = match self {
            Recurrence::None => return None,
            Recurrence::Daily => date.checked_add_days(Days::new(u64::from(n)))?,
            Recurrence::Weekly => date.checked_add_days(Days::new(u64::from(n) * 7))?,
            Recurrence::Monthly => date.checked_add_months(Months::new(n))?,
            Recurrence::Quarterly => date.checked_add_months(Months::new(n.checked_mul(3)?))?,
            Recurrence::Yearly => date.checked_add_months(Months::new(n.checked_mul(12)?))?,
        };
        if !year_in_range(shifted.year()) {
            return None;
        }
        local_to_utc(zone, shifted.and_time(local.time()))
    }

    /// The first occurrence from index `from` on that is after `now`: its index and time, or its
    /// index and `None` when the series ends before one comes.
    ///
    /// Computed, not stepped to: the index is estimated from the time elapsed since the anchor on
    /// the local calendar (days for daily and weekly series, months for the others) and then
    /// corrected by the one or two steps that daylight saving changes and month-end clamping can
    /// put it off by. A series anchored centuries ago costs the same as one anchored yesterday.
    pub fn first_after(
        self,
        anchor: DateTime<Utc>,
        from: u32,
        now: DateTime<Utc>,
        zone: Tz,
    ) -> (u32, Option<DateTime<Utc>>) {
        // Whether occurrence `n` is past `now` or past the end of the series. Occurrences never go
        // back in time and a series never resumes once over, so this is false up to some index
        // and true from there on: the answer is that index.
        let done = |n: u32| self.occurrence(anchor, n, zone).is_none_or(|at| at > now);
        let mut n = self.estimate(anchor, now, zone).max(from);
        while n > from && done(n - 1) {
            n -= 1;
        }
        while !done(n) {
            n = match n.checked_add(1) {
                Some(next) => next,
                None => return (n, None),
            };
        }
        (n, self.occurrence(anchor, n, zone))
    }

    /// An index near the first occurrence after `now`: the whole periods between the local
    /// anchor and the local `now`, plus one.
    fn estimate(self, anchor: DateTime<Utc>, now: DateTime<Utc>, zone: Tz) -> u32 {
        let local_anchor = anchor.with_timezone(&zone).naive_local();
        let local_now = now.with_timezone(&zone).naive_local();
        if local_now <= local_anchor {
            return 0;
        }
        let months = |at: chrono::NaiveDateTime| i64::from(at.year()) * 12 + i64::from(at.month0());
        let periods = match self {
            Recurrence::None => return 1,
            Recurrence::Daily => (local_now - local_anchor).num_days(),
            Recurrence::Weekly => (local_now - local_anchor).num_days() / 7,
            Recurrence::Monthly => months(local_now) - months(local_anchor),
            Recurrence::Quarterly => (months(local_now) - months(local_anchor)) / 3,
            Recurrence::Yearly => (months(local_now) - months(local_anchor)) / 12,
        };
        u32::try_from(periods.saturating_add(1).max(0)).unwrap_or(u32::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format_timestamp;

    /// The first occurrence after `now` found by stepping through every one: the reference
    /// [`Recurrence::first_after`] must agree with.
    fn first_after_by_stepping(
        recurrence: Recurrence,
        anchor: DateTime<Utc>,
        from: u32,
        now: DateTime<Utc>,
        zone: Tz,
    ) -> (u32, Option<DateTime<Utc>>) {
        let mut n = from;
        loop {
            match recurrence.occurrence(anchor, n, zone) {
                Some(at) if at <= now => n += 1,
                other => return (n, other),
            }
        }
    }

    #[test]
    fn the_computed_first_occurrence_after_now_matches_stepping_through_the_series() {
        let zones: Vec<Tz> = [
            "UTC",
            "Europe/Paris",
            "America/New_York",
            "Australia/Lord_Howe",
            "Pacific/Apia",
            "Asia/Kolkata",
            "America/Santiago",
            "Pacific/Chatham",
        ]
        .iter()
        .map(|name| name.parse().unwrap())
        .collect();
        let anchors = [
            "2011-12-29T19:30:00Z",
            "2020-01-31T08:00:00Z",
            "2020-02-29T23:30:00Z",
            "2021-03-28T01:30:00Z",
            "2021-10-31T00:59:59Z",
            "2023-08-31T21:15:00Z",
            "2024-11-03T06:30:00Z",
            "1999-12-31T23:59:59Z",
        ];
        let recurrences = [
            Recurrence::Daily,
            Recurrence::Weekly,
            Recurrence::Monthly,
            Recurrence::Quarterly,
            Recurrence::Yearly,
            Recurrence::None,
        ];
        // From just after the anchor to decades later, at offsets that fall on and around
        // occurrences.
        let offsets_hours: [i64; 12] = [
            -5,
            0,
            1,
            23,
            24,
            25,
            24 * 7,
            24 * 31 - 1,
            24 * 92,
            24 * 366,
            24 * 3_000,
            24 * 11_000,
        ];
        let mut compared = 0;
        for zone in &zones {
            for anchor in anchors {
                let anchor = at(anchor);
                for recurrence in recurrences {
                    for hours in offsets_hours {
                        for minutes in [0, 1, 59] {
                            let now = anchor
                                + chrono::Duration::hours(hours)
                                + chrono::Duration::minutes(minutes);
                            for from in [0, 1, 3] {
                                let computed = recurrence.first_after(anchor, from, now, *zone);
                                assert_eq!(
                                    computed,
                                    first_after_by_stepping(recurrence, anchor, from, now, *zone),
                                    "{recurrence} from {anchor} in {zone} at {now}, index {from}"
                                );
                                // The estimate is at most two steps off.
                                let estimate = recurrence.estimate(anchor, now, *zone).max(from);
                                assert!(
                                    estimate.abs_diff(computed.0) <= 2,
                                    "{recurrence} from {anchor} in {zone} at {now}: estimate {estimate}, answer {}",
                                    computed.0
                                );
                                compared += 1;
                            }
                        }
                    }
                }
            }
        }
        assert!(compared > 10_000);
    }

    #[test]
    fn a_daily_series_anchored_in_year_one_reaches_now_at_once() {
        let anchor = at("0001-01-01T09:00:00Z");
        let now = at("2026-11-23T10:00:00Z");
        let (index, next) = Recurrence::Daily.first_after(anchor, 1, now, Tz::UTC);
        assert_eq!(
            next.map(format_timestamp).as_deref(),
            Some("2026-11-24T09:00:00.000Z")
        );
        assert_eq!(Recurrence::Daily.occurrence(anchor, index, Tz::UTC), next);
        assert_eq!(
            Recurrence::Daily
                .occurrence(anchor, index - 1, Tz::UTC)
                .map(format_timestamp),
            Some("2026-11-23T09:00:00.000Z".to_owned())
        );
    }

    #[test]
    fn series_end_after_the_year_9999() {
        let anchor = at("9999-06-30T09:00:00Z");
        assert!(Recurrence::Monthly.occurrence(anchor, 6, Tz::UTC).is_some());
        assert_eq!(Recurrence::Monthly.occurrence(anchor, 7, Tz::UTC), None);
        let now = at("9999-12-31T12:00:00Z");
        assert_eq!(
            Recurrence::Monthly.first_after(anchor, 1, now, Tz::UTC),
            (7, None)
        );
        assert_eq!(
            Recurrence::None.first_after(anchor, 1, now, Tz::UTC),
            (1, None)
        );
    }

    fn at(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text)
            .unwrap()
            .with_timezone(&Utc)
    }

    #[test]
    fn monthly_series_clamp_to_month_ends_without_drifting() {
        let anchor = at("2027-01-31T09:00:00Z");
        let dates: Vec<String> = (0..5)
            .map(|n| format_timestamp(Recurrence::Monthly.occurrence(anchor, n, Tz::UTC).unwrap()))
            .collect();
        assert_eq!(
            dates,
            [
                "2027-01-31T09:00:00.000Z",
                "2027-02-28T09:00:00.000Z",
                "2027-03-31T09:00:00.000Z",
                "2027-04-30T09:00:00.000Z",
                "2027-05-31T09:00:00.000Z",
            ]
        );
        let leap = at("2028-01-31T09:00:00Z");
        assert_eq!(
            format_timestamp(Recurrence::Monthly.occurrence(leap, 1, Tz::UTC).unwrap()),
            "2028-02-29T09:00:00.000Z"
        );
    }

    #[test]
    fn occurrences_keep_the_local_time_across_daylight_saving_changes() {
        let paris: Tz = "Europe/Paris".parse().unwrap();
        // 09:00 in Paris is 08:00 UTC in winter and 07:00 UTC in summer.
        let anchor = at("2027-03-27T08:00:00Z");
        assert_eq!(
            format_timestamp(Recurrence::Daily.occurrence(anchor, 1, paris).unwrap()),
            "2027-03-28T07:00:00.000Z"
        );
        assert_eq!(
            format_timestamp(Recurrence::Weekly.occurrence(anchor, 1, paris).unwrap()),
            "2027-04-03T07:00:00.000Z"
        );
    }

    #[test]
    fn quarterly_yearly_and_one_off_series() {
        let anchor = at("2028-02-29T12:00:00Z");
        assert_eq!(
            format_timestamp(Recurrence::Yearly.occurrence(anchor, 1, Tz::UTC).unwrap()),
            "2029-02-28T12:00:00.000Z"
        );
        assert_eq!(
            format_timestamp(Recurrence::Yearly.occurrence(anchor, 4, Tz::UTC).unwrap()),
            "2032-02-29T12:00:00.000Z"
        );
        assert_eq!(
            format_timestamp(
                Recurrence::Quarterly
                    .occurrence(anchor, 1, Tz::UTC)
                    .unwrap()
            ),
            "2028-05-29T12:00:00.000Z"
        );
        assert_eq!(Recurrence::None.occurrence(anchor, 1, Tz::UTC), None);
        assert_eq!(
            Recurrence::None.occurrence(anchor, 0, Tz::UTC),
            Some(anchor)
        );
    }
}
