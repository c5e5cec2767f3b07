//! Human-readable durations: the largest two units, e.g. `"2 hours 30 minutes"`, `"45 minutes"`,
//! `"3 days 4 hours"`.

const UNITS: [(u64, &str); 4] = [
    (86_400, "day"),
    (3_600, "hour"),
    (60, "minute"),
    (1, "second"),
];

/// Formats a whole number of seconds with the largest two non-zero consecutive units.
/// Zero is `"0 minutes"`.
pub fn humanize_seconds(seconds: u64) -> String {
    let Some(first) = UNITS.iter().position(|(size, _)| seconds >= *size) else {
        return "0 minutes".to_owned();
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

/// Formats a number of minutes (module estimates) the same way.
pub fn humanize_minutes(minutes: u64) -> String {
    humanize_seconds(minutes.saturating_mul(60))
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
    }
}
