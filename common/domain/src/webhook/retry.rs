//! When a failed delivery is tried again: the retry schedule, and the durations it is written in.

use std::time::Duration;

use crate::duration::{DurationError, parse_duration};

/// Delays before each attempt of a delivery: the first is usually zero (immediately).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetrySchedule(pub Vec<Duration>);

impl RetrySchedule {
    /// Parses `0s,5s,5m,30m,2h,5h,10h,10h` (units ms, s, m, h, d).
    pub fn parse(text: &str) -> Result<Self, ScheduleError> {
        let delays = text
            .split(',')
            .map(str::trim)
            .filter(|part| !part.is_empty())
            .map(parse_duration)
            .collect::<Result<Vec<_>, _>>()?;
        if delays.is_empty() {
            return Err(ScheduleError::Empty);
        }
        Ok(Self(delays))
    }

    /// Attempts a delivery gets in all.
    pub fn attempts(&self) -> usize {
        self.0.len()
    }

    /// Delay before attempt `number` (1-based) with ±20% jitter, or `None` past the last one.
    pub fn delay_before(&self, number: usize) -> Option<Duration> {
        let base = *self.0.get(number.checked_sub(1)?)?;
        let factor = 0.8 + rand::random::<f64>() * 0.4;
        Some(base.mul_f64(factor))
    }
}

impl std::str::FromStr for RetrySchedule {
    type Err = ScheduleError;
    fn from_str(text: &str) -> Result<Self, ScheduleError> {
        Self::parse(text)
    }
}

/// Why a retry schedule could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    /// A delay of the schedule is not a duration.
    #[error(transparent)]
    Duration(#[from] DurationError),
    /// No delay at all.
    #[error("the retry schedule needs at least one attempt")]
    Empty,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_schedules_parse_and_jitter_within_twenty_percent() {
        let schedule = RetrySchedule::parse("0s,5s,5m,30m,2h,5h,10h,10h").unwrap();
        assert_eq!(schedule.attempts(), 8);
        assert_eq!(schedule.0[2], Duration::from_secs(300));
        assert_eq!(schedule.delay_before(1), Some(Duration::ZERO));
        let second = schedule.delay_before(2).unwrap();
        assert!(second >= Duration::from_secs(4) && second <= Duration::from_secs(6));
        assert_eq!(schedule.delay_before(9), None);
        assert!(RetrySchedule::parse("5x").is_err());
        assert!(RetrySchedule::parse("").is_err());
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
    }
}
