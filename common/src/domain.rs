//! Domain types that validate on construction, so invalid input cannot reach a worker.
//! Error messages name the field the caller sent (`"userEmail must be a valid e-mail address"`).

use std::fmt;

use chrono::{DateTime, Days, NaiveDate, NaiveTime, TimeZone, Utc};
use chrono_tz::Tz;
use serde::Serialize;

/// A validation failure, worded for the API caller.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Invalid(pub String);

impl Invalid {
    /// A failure with the given caller-facing message.
    pub fn new(message: impl Into<String>) -> Self {
        Self(message.into())
    }
}

/// Longest notes text accepted on an assignment, in characters.
pub const MAX_NOTES_CHARS: usize = 2_000;

/// A syntactically valid e-mail address, trimmed. Matching is case-insensitive: see
/// [`Email::normalized`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Email(String);

impl Email {
    /// Validates `text` as the e-mail in field `field`.
    pub fn parse(field: &str, text: &str) -> Result<Self, Invalid> {
        let text = text.trim();
        let invalid = || Invalid(format!("{field} must be a valid e-mail address"));
        if text.is_empty() {
            return Err(Invalid(format!("{field} is required")));
        }
        if text.len() > 254 || text.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(invalid());
        }
        let (local, domain) = text.rsplit_once('@').ok_or_else(invalid)?;
        let domain_ok = !domain.is_empty()
            && domain.len() <= 253
            && domain.contains('.')
            && !domain.contains('@')
            && domain.split('.').all(|label| {
                !label.is_empty()
                    && label.len() <= 63
                    && !label.starts_with('-')
                    && !label.ends_with('-')
                    && label.chars().all(|c| c.is_alphanumeric() || c == '-')
            });
        let local_ok = !local.is_empty()
            && local.len() <= 64
            && !local.contains('@')
            && !local.starts_with('.')
            && !local.ends_with('.')
            && !local.contains("..");
        if !domain_ok || !local_ok {
            return Err(invalid());
        }
        Ok(Self(text.to_owned()))
    }

    /// The address as given (trimmed).
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The form used for lookups and uniqueness: lower-cased.
    pub fn normalized(&self) -> String {
        self.0.to_lowercase()
    }
}

impl fmt::Display for Email {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Declares a string enum with its wire names, parsing that names the allowed values on error.
macro_rules! string_enum {
    ($(#[$doc:meta])* $name:ident { $($(#[$vdoc:meta])* $variant:ident => $text:literal),+ $(,)? }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, ::serde::Serialize, ::serde::Deserialize, ::utoipa::ToSchema)]
        pub enum $name {
            $($(#[$vdoc])* #[serde(rename = $text)] $variant),+
        }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The wire name.
            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }

            /// The allowed values joined for an error message: `low, medium, high`.
            pub fn allowed() -> String {
                [$($text),+].join(", ")
            }

            /// Parses field `field`, naming the allowed values on error.
            pub fn parse_field(field: &str, text: &str) -> Result<Self, $crate::domain::Invalid> {
                text.parse().map_err(|_| {
                    $crate::domain::Invalid(format!("{field} must be one of: {}", Self::allowed()))
                })
            }
        }

        impl ::std::str::FromStr for $name {
            type Err = $crate::domain::Invalid;
            fn from_str(text: &str) -> Result<Self, $crate::domain::Invalid> {
                match text {
                    $($text => Ok($name::$variant),)+
                    _ => Err($crate::domain::Invalid(format!("must be one of: {}", Self::allowed()))),
                }
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

string_enum!(
    /// Priority of an assignment.
    Priority {
        Low => "low",
        Medium => "medium",
        High => "high",
    }
);

#[allow(clippy::derivable_impls)] // the enum comes from a macro shared with enums without a default
impl Default for Priority {
    fn default() -> Self {
        Self::Medium
    }
}

string_enum!(
    /// Status of an assignment (and of a schedule's current occurrence).
    AssignmentStatus {
        /// Assigned, no module activity yet.
        Pending => "pending",
        /// At least one module started or completed.
        InProgress => "in_progress",
        /// Every module completed. Final.
        Completed => "completed",
        /// Past its due date and not completed.
        Overdue => "overdue",
    }
);

impl AssignmentStatus {
    /// Statuses in which an assignment counts as active (one per flow and user).
    pub const ACTIVE: &'static [AssignmentStatus] = &[
        AssignmentStatus::Pending,
        AssignmentStatus::InProgress,
        AssignmentStatus::Overdue,
    ];

    /// The status to report at `now`: an active assignment past its due date is overdue even
    /// before the scheduler has recorded it (design §2, guarantee 5).
    pub fn effective(self, due_at: Option<DateTime<Utc>>, now: DateTime<Utc>) -> Self {
        match (self, due_at) {
            (Self::Pending | Self::InProgress, Some(due)) if due <= now => Self::Overdue,
            (status, _) => status,
        }
    }
}

string_enum!(
    /// Status of one module within an assignment.
    ModuleStatus {
        /// Started, not finished.
        InProgress => "in_progress",
        /// Finished.
        Completed => "completed",
    }
);

/// Notes for the assignee, at most [`MAX_NOTES_CHARS`] characters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notes(String);

impl Notes {
    /// Validates the notes of field `field`.
    pub fn parse(field: &str, text: String) -> Result<Self, Invalid> {
        if text.chars().count() > MAX_NOTES_CHARS {
            return Err(Invalid(format!(
                "{field} must be at most {MAX_NOTES_CHARS} characters"
            )));
        }
        if text.chars().any(|c| c == '\0') {
            return Err(Invalid(format!("{field} must not contain NUL characters")));
        }
        Ok(Self(text))
    }

    /// The text.
    pub fn into_inner(self) -> String {
        self.0
    }
}

/// An IANA time zone name, validated.
pub fn parse_timezone(field: &str, name: &str) -> Result<Tz, Invalid> {
    name.parse::<Tz>().map_err(|_| {
        Invalid(format!(
            "{field} must be an IANA time zone name, e.g. Europe/Paris"
        ))
    })
}

/// Which end of a day a plain `YYYY-MM-DD` date stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DayBound {
    /// The first instant of the day (report `startDate`/`endDate`).
    Start,
    /// The last second of the day (`dueDate`).
    End,
}

/// Parses a date input: an RFC 3339 timestamp, or a plain `YYYY-MM-DD` taken in `zone` at
/// `bound` of that day.
pub fn parse_date_input(
    field: &str,
    text: &str,
    zone: Tz,
    bound: DayBound,
) -> Result<DateTime<Utc>, Invalid> {
    let text = text.trim();
    if let Ok(at) = DateTime::parse_from_rfc3339(text) {
        return Ok(at.with_timezone(&Utc));
    }
    let invalid = || {
        Invalid(format!(
            "{field} must be an ISO 8601 date (YYYY-MM-DD) or RFC 3339 timestamp"
        ))
    };
    let date = NaiveDate::parse_from_str(text, "%Y-%m-%d").map_err(|_| invalid())?;
    let local = match bound {
        DayBound::Start => date.and_time(NaiveTime::MIN),
        DayBound::End => date
            .checked_add_days(Days::new(1))
            .ok_or_else(invalid)?
            .and_time(NaiveTime::MIN),
    };
    let start = local_to_utc(zone, local).ok_or_else(invalid)?;
    Ok(match bound {
        DayBound::Start => start,
        // The last second of the day: one second before the next local midnight.
        DayBound::End => start - chrono::Duration::seconds(1),
    })
}

/// Resolves a local wall-clock time in `zone`, taking the earlier instant when a clock change
/// makes it ambiguous and the first valid instant after a gap.
pub fn local_to_utc(zone: Tz, local: chrono::NaiveDateTime) -> Option<DateTime<Utc>> {
    match zone.from_local_datetime(&local) {
        chrono::LocalResult::Single(at) => Some(at.with_timezone(&Utc)),
        chrono::LocalResult::Ambiguous(earliest, _) => Some(earliest.with_timezone(&Utc)),
        chrono::LocalResult::None => (1..=180).find_map(|minutes| {
            zone.from_local_datetime(&(local + chrono::Duration::minutes(minutes)))
                .earliest()
                .map(|at| at.with_timezone(&Utc))
        }),
    }
}

/// Formats a timestamp the way the API does: RFC 3339, UTC, `Z`, millisecond precision.
pub fn format_timestamp(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// Serde helpers that write timestamps with [`format_timestamp`].
pub mod timestamp {
    use chrono::{DateTime, Utc};
    use serde::Serializer;

    /// Serializes a timestamp.
    pub fn serialize<S: Serializer>(at: &DateTime<Utc>, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&super::format_timestamp(*at))
    }

    /// Serializes an optional timestamp (`null` when absent).
    pub mod option {
        use chrono::{DateTime, Utc};
        use serde::Serializer;

        /// Serializes an optional timestamp.
        pub fn serialize<S: Serializer>(
            at: &Option<DateTime<Utc>>,
            serializer: S,
        ) -> Result<S::Ok, S::Error> {
            match at {
                Some(at) => serializer.serialize_str(&super::super::format_timestamp(*at)),
                None => serializer.serialize_none(),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emails_are_validated_and_normalized() {
        let email = Email::parse("userEmail", "  Alice.Smith@Example.COM ").unwrap();
        assert_eq!(email.as_str(), "Alice.Smith@Example.COM");
        assert_eq!(email.normalized(), "alice.smith@example.com");
        for bad in [
            "",
            "alice",
            "alice@",
            "@example.com",
            "a b@example.com",
            "alice@example",
            "a@@b.com",
            "a..b@x.com",
        ] {
            assert!(Email::parse("userEmail", bad).is_err(), "{bad} accepted");
        }
        assert_eq!(
            Email::parse("userEmail", "").unwrap_err().0,
            "userEmail is required"
        );
    }

    #[test]
    fn enums_name_their_allowed_values() {
        assert_eq!(
            Priority::parse_field("priority", "high").unwrap(),
            Priority::High
        );
        assert_eq!(
            Priority::parse_field("priority", "urgent").unwrap_err().0,
            "priority must be one of: low, medium, high"
        );
    }

    #[test]
    fn plain_due_dates_end_at_the_end_of_the_local_day() {
        let paris: Tz = "Europe/Paris".parse().unwrap();
        let due = parse_date_input("dueDate", "2026-12-01", paris, DayBound::End).unwrap();
        assert_eq!(format_timestamp(due), "2026-12-01T22:59:59.000Z");
        let start = parse_date_input("startDate", "2026-07-01", paris, DayBound::Start).unwrap();
        assert_eq!(format_timestamp(start), "2026-06-30T22:00:00.000Z");
        let exact =
            parse_date_input("dueDate", "2026-12-01T10:00:00+02:00", paris, DayBound::End).unwrap();
        assert_eq!(format_timestamp(exact), "2026-12-01T08:00:00.000Z");
        assert!(parse_date_input("dueDate", "01/12/2026", paris, DayBound::End).is_err());
    }

    #[test]
    fn overdue_is_derived_at_read_time() {
        let now = Utc::now();
        let past = Some(now - chrono::Duration::minutes(1));
        assert_eq!(
            AssignmentStatus::Pending.effective(past, now),
            AssignmentStatus::Overdue
        );
        assert_eq!(
            AssignmentStatus::Completed.effective(past, now),
            AssignmentStatus::Completed
        );
        assert_eq!(
            AssignmentStatus::InProgress.effective(None, now),
            AssignmentStatus::InProgress
        );
    }
}
