//! Durations as people write them: read in the short form of configuration (`250ms`, `5s`,
//! `2h`), written in words with the largest two units (`"2 hours 30 minutes"`, `"45 minutes"`,
//! `"3 days 4 hours"`).

use std::time::Duration;

const UNITS: [(u64, &str); 4] = [
    (86_400, "day"),
    (3_600, "hour"),
    (60, "minute"),
    (1, "second"),
];

/// Formats a whole number of seconds with the largest two non-zero consecutive units.
/// Zero is `"0 seconds"`: the unit of the smallest non-zero value (`"9 seconds"`), so that one
/// quantity (a completion time) reads the same way at every size.
pub fn humanize_seconds(seconds: u64) -> String {
    let Some(first) = UNITS.iter().position(|(size, _)| seconds >= *size) else {
        return "0 seconds".to_owned();
    };
    let mut parts = Vec::with_capacity(2);
    let mut rest = seconds;
    for (size, name) in &UNITS[first..(first + 2).min(UNITS.len())] {
        let count = rest / size;
        rest %= size;
        if count > 0 {
            parts.push(format!(
                "{count} {name}{}",
                if count == 1 { "" } else { "s" }
            ));
        }
    }
    parts.join(" ")
}

/// Formats a number of minutes (module estimates) the same way; zero is `"0 minutes"`, the
/// unit estimates are given in.
pub fn humanize_minutes(minutes: u64) -> String {
    if minutes == 0 {
        return "0 minutes".to_owned();
    }
    humanize_seconds(minutes.saturating_mul(60))
}

/// Why a text is not a duration such as `250ms` or `5s`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// Digits only.
    #[error("`{0}` has no unit (ms, s, m, h or d)")]
    NoUnit(String),
    /// No number before the unit.
    #[error("`{0}` does not start with a number")]
    NoNumber(String),
    /// A unit other than ms, s, m, h or d.
    #[error("`{0}` has an unknown unit (ms, s, m, h or d)")]
    UnknownUnit(String),
}

/// Parses `250ms`, `5s`, `30m`, `2h`, `5d`.
pub fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| DurationError::NoUnit(text.to_owned()))?;
    let (number, unit) = text.split_at(split);
    let number: u64 = number
        .parse()
        .map_err(|_| DurationError::NoNumber(text.to_owned()))?;
    let millis = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return Err(DurationError::UnknownUnit(text.to_owned())),
    };
    Ok(Duration::from_millis(number.saturating_mul(millis)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_use_the_largest_two_units() {
        assert_eq!(humanize_minutes(150), "2 hours 30 minutes");
        assert_eq!(humanize_minutes(45), "45 minutes");
        assert_eq!(
            humanize_minutes(3 * 24 * 60 + 4 * 60 + 17),
            "3 days 4 hours"
        );
        assert_eq!(humanize_minutes(60), "1 hour");
        assert_eq!(humanize_minutes(24 * 60 + 5), "1 day");
        assert_eq!(humanize_minutes(0), "0 minutes");
        assert_eq!(humanize_seconds(61), "1 minute 1 second");
        assert_eq!(humanize_seconds(59), "59 seconds");
        assert_eq!(humanize_seconds(0), "0 seconds");
    }

    #[test]
    fn short_durations_parse_with_their_unit() {
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(
            parse_duration("5d").unwrap(),
            Duration::from_secs(5 * 86_400)
        );
        assert_eq!(
            parse_duration("5").unwrap_err().to_string(),
            "`5` has no unit (ms, s, m, h or d)"
        );
        assert_eq!(
            parse_duration("ms").unwrap_err().to_string(),
            "`ms` does not start with a number"
        );
        assert_eq!(
            parse_duration("5x").unwrap_err().to_string(),
            "`5x` has an unknown unit (ms, s, m, h or d)"
        );
    }
}
