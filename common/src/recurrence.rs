//! Recurring schedules: the occurrences of a series, computed on the calendar of the
//! organization's time zone. Each occurrence is counted from the series' anchor, not from the
//! previous one, so month-end clamping does not drift: Jan 31 → Feb 28 (29) → Mar 31 → Apr 30.

use chrono::{DateTime, Days, Months, Utc};
use chrono_tz::Tz;

use crate::domain::local_to_utc;

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
    /// clock of `zone`; `None` for a one-off series past its first occurrence or out of range.
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
        local_to_utc(zone, shifted.and_time(local.time()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::format_timestamp;

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
