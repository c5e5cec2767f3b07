//! The domain of Flow, with no infrastructure in it (no database, broker, object store, HTTP
//! server or runtime: the compiler keeps it so, this crate does not depend on them): what the
//! service talks about and the rules it applies, shared by the API, the workers and `flowctl`.
//!
//! At the root, the types that validate on construction, so invalid input cannot reach a worker:
//! statuses, priorities, e-mails, free text, dates and time zones, and the effective-status rule.
//! Error messages name the field the caller sent (`"userEmail must be a valid e-mail address"`).
//! In modules: [`ids`], the actions of the [`audit`] trail, the [`lane`]s work travels in,
//! [`recurrence`] of schedules, [`duration`]s, [`enrollment`] rules (their conditions and due
//! dates), the command [`messages`] of the queues, lifecycle [`events`] and their bodies, what a
//! [`report`] is about, and the [`webhook`] signatures and retry schedule.
//!
//! Database encodings (ids are stored as plain `uuid`s) are derived only with the `sqlx` feature,
//! which `flow-common` turns on.

#[macro_use]
mod macros;

pub mod audit;
pub mod duration;
pub mod enrollment;
pub mod events;
pub mod expiry;
pub mod ids;
pub mod lane;
pub mod messages;
pub mod recurrence;
pub mod reminders;
pub mod report;
pub mod webhook;
pub mod xapi;

use std::fmt;

use chrono::{DateTime, Datelike, Days, NaiveDate, NaiveTime, Offset, TimeZone, Utc};
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

/// Longest notes text accepted on an assignment or schedule, in characters.
pub const MAX_NOTES_CHARS: usize = 2_000;

/// The rules of one kind of free-text field: how long it may be and whether line breaks belong
/// in it. Every free-text input goes through [`TextRule::parse`], so none can carry a NUL (which
/// Postgres cannot store) or run past what its column and indexes hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TextRule {
    /// Longest accepted text, in characters, after trimming.
    pub max_chars: usize,
    /// Whether line breaks and tabs are allowed (descriptions, notes); names are one line.
    pub multiline: bool,
}

impl TextRule {
    /// Names: user, flow and module names. One line, at most 200 characters.
    pub const NAME: Self = Self {
        max_chars: 200,
        multiline: false,
    };
    /// Descriptions of flows. Line breaks allowed, at most 2,000 characters.
    pub const DESCRIPTION: Self = Self {
        max_chars: 2_000,
        multiline: true,
    };
    /// Notes for the assignee. Line breaks allowed, at most [`MAX_NOTES_CHARS`] characters.
    pub const NOTES: Self = Self {
        max_chars: MAX_NOTES_CHARS,
        multiline: true,
    };

    /// Validates the text of field `field`: trims surrounding whitespace, refuses control
    /// characters (except line breaks and tabs where [`TextRule::multiline`] allows them) and text
    /// longer than [`TextRule::max_chars`]. An empty result is the caller's to accept or refuse.
    pub fn parse(self, field: &str, text: &str) -> Result<String, Invalid> {
        let text = text.trim();
        let allowed = |character: char| self.multiline && matches!(character, '\n' | '\r' | '\t');
        if text.chars().any(|character| {
            (character.is_control() && !allowed(character))
                // Line and paragraph separators break a one-line name as a newline would.
                || (!self.multiline && matches!(character, '\u{2028}' | '\u{2029}'))
        }) {
            return Err(Invalid(format!(
                "{field} must not contain control characters{}",
                if self.multiline {
                    " other than line breaks and tabs"
                } else {
                    " or line breaks"
                }
            )));
        }
        let max = self.max_chars;
        if text.chars().count() > max {
            return Err(Invalid(format!("{field} must be at most {max} characters")));
        }
        Ok(text.to_owned())
    }
}

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
        /// Withdrawn before it was completed (`POST /v1/assignments/{id}/cancel`). Final; keeps
        /// its progress, takes no more, never goes overdue; not active, so the flow can be
        /// assigned again.
        Cancelled => "cancelled",
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
    /// before the scheduler has recorded it (README guarantee 5), so reports never lag the clock.
    pub fn effective(self, due_at: Option<DateTime<Utc>>, now: DateTime<Utc>) -> Self {
        match (self, due_at) {
            (Self::Pending | Self::InProgress, Some(due)) if due <= now => Self::Overdue,
            (status, _) => status,
        }
    }
}

string_enum!(
    /// What a dashboard account may do.
    Role {
        /// Everything in its organization: keys, webhooks, assigns, users, schedules, team.
        Admin => "admin",
        /// Read only.
        Viewer => "viewer",
    }
);

string_enum!(
    /// Service tier of an organization, which sets its default rate limits.
    Tier {
        /// assign 100/min, report 50/min.
        Standard => "standard",
        /// assign 1,000/min, report 500/min.
        Enterprise => "enterprise",
    }
);

impl Tier {
    /// Default assign requests per minute.
    pub fn assign_limit(self) -> u32 {
        match self {
            Self::Standard => 100,
            Self::Enterprise => 1_000,
        }
    }

    /// Default report requests per minute.
    pub fn report_limit(self) -> u32 {
        match self {
            Self::Standard => 50,
            Self::Enterprise => 500,
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

/// Notes for the assignee, validated by [`TextRule::NOTES`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notes(String);

impl Notes {
    /// Validates the notes of field `field`.
    pub fn parse(field: &str, text: String) -> Result<Self, Invalid> {
        TextRule::NOTES.parse(field, &text).map(Self)
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

/// Earliest year a date input may name.
pub const MIN_YEAR: i32 = 1;
/// Latest year a date input may name. Together with [`MIN_YEAR`] this keeps every date inside
/// what Postgres, RFC 3339 and the export formats all represent.
pub const MAX_YEAR: i32 = 9_999;

/// Whether `year` is one a date input may name ([`MIN_YEAR`] to [`MAX_YEAR`]).
pub fn year_in_range(year: i32) -> bool {
    (MIN_YEAR..=MAX_YEAR).contains(&year)
}

/// Parses a date input: an RFC 3339 timestamp, or a plain `YYYY-MM-DD` taken in `zone` at
/// `bound` of that day. The year, as written, must be within [`MIN_YEAR`] and [`MAX_YEAR`].
pub fn parse_date_input(
    field: &str,
    text: &str,
    zone: Tz,
    bound: DayBound,
) -> Result<DateTime<Utc>, Invalid> {
    let text = text.trim();
    let out_of_range = || {
        Invalid(format!(
            "{field} must be a date between the years {MIN_YEAR:04} and {MAX_YEAR}"
        ))
    };
    if let Ok(at) = DateTime::parse_from_rfc3339(text) {
        if !year_in_range(at.year()) {
            return Err(out_of_range());
        }
        return Ok(at.with_timezone(&Utc));
    }
    let invalid = || {
        Invalid(format!(
            "{field} must be an ISO 8601 date (YYYY-MM-DD) or RFC 3339 timestamp"
        ))
    };
    let date = NaiveDate::parse_from_str(text, "%Y-%m-%d").map_err(|_| invalid())?;
    if !year_in_range(date.year()) {
        return Err(out_of_range());
    }
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
        chrono::LocalResult::None => (1..=180)
            .find_map(|minutes| {
                zone.from_local_datetime(&(local + chrono::Duration::minutes(minutes)))
                    .earliest()
                    .map(|at| at.with_timezone(&Utc))
            })
            .or_else(|| {
                // A gap longer than three hours (a zone that skipped a whole day, as Samoa did in
                // 2011): read the time with the offset in force before the gap, which lands just
                // after it.
                let before = zone
                    .offset_from_utc_datetime(&(local - chrono::Duration::days(2)))
                    .fix();
                before
                    .from_local_datetime(&local)
                    .single()
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
    fn date_inputs_outside_years_1_to_9999_are_refused_naming_the_field() {
        let out_of_range = "startDate must be a date between the years 0001 and 9999";
        for text in [
            "-5000-01-01",
            "0000-12-31",
            "+10000-01-01",
            "10000-01-01",
            "262143-12-31",
            "0000-01-01T00:00:00Z",
        ] {
            let error = parse_date_input("startDate", text, Tz::UTC, DayBound::Start);
            assert!(error.is_err(), "{text} accepted");
            if let Err(Invalid(message)) = error
                && !message.contains("ISO 8601")
            {
                assert_eq!(message, out_of_range, "{text}");
            }
        }
        assert_eq!(
            parse_date_input("startDate", "-5000-01-01", Tz::UTC, DayBound::Start)
                .unwrap_err()
                .0,
            out_of_range
        );
        // The extremes themselves are fine, in any zone.
        let kiritimati: Tz = "Pacific/Kiritimati".parse().unwrap();
        let honolulu: Tz = "Pacific/Honolulu".parse().unwrap();
        for zone in [Tz::UTC, kiritimati, honolulu] {
            for bound in [DayBound::Start, DayBound::End] {
                assert!(parse_date_input("dueDate", "0001-01-01", zone, bound).is_ok());
                assert!(parse_date_input("dueDate", "9999-12-31", zone, bound).is_ok());
            }
        }
        assert!(
            parse_date_input("at", "9999-12-31T23:59:59-12:00", Tz::UTC, DayBound::Start).is_ok()
        );
    }

    #[test]
    fn local_times_in_a_skipped_day_land_just_after_the_gap() {
        // Samoa skipped 30 December 2011, moving from UTC-10 to UTC+14.
        let apia: Tz = "Pacific/Apia".parse().unwrap();
        let skipped = NaiveDate::from_ymd_opt(2011, 12, 30)
            .unwrap()
            .and_hms_opt(9, 0, 0)
            .unwrap();
        let at = local_to_utc(apia, skipped).unwrap();
        assert_eq!(format_timestamp(at), "2011-12-30T19:00:00.000Z");
        // 10:00 on the 31st, the first local time after that instant's 09:00, is later.
        let next = local_to_utc(apia, skipped + chrono::Duration::days(1)).unwrap();
        assert!(next >= at);
    }

    #[test]
    fn free_text_is_trimmed_bounded_and_free_of_control_characters() {
        assert_eq!(TextRule::NAME.parse("name", "  Alice  ").unwrap(), "Alice");
        assert_eq!(
            TextRule::NAME
                .parse("modules[2].name", "a\0b")
                .unwrap_err()
                .0,
            "modules[2].name must not contain control characters or line breaks"
        );
        for bad in ["a\nb", "a\u{7}b", "a\u{85}b", "a\u{2028}b", "tab\there"] {
            assert!(
                TextRule::NAME.parse("name", bad).is_err(),
                "{bad:?} accepted"
            );
        }
        let long = "é".repeat(201);
        assert_eq!(
            TextRule::NAME.parse("name", &long).unwrap_err().0,
            "name must be at most 200 characters"
        );
        assert!(TextRule::NAME.parse("name", &long[2..]).is_ok());
        assert_eq!(
            TextRule::DESCRIPTION
                .parse("description", "line one\r\n\tline two")
                .unwrap(),
            "line one\r\n\tline two"
        );
        assert_eq!(
            TextRule::DESCRIPTION
                .parse("description", "nul \0 here")
                .unwrap_err()
                .0,
            "description must not contain control characters other than line breaks and tabs"
        );
        assert!(
            TextRule::DESCRIPTION
                .parse("description", &"x".repeat(2_001))
                .is_err()
        );
        assert_eq!(
            Notes::parse("notes", "x".repeat(2_001)).unwrap_err().0,
            "notes must be at most 2000 characters"
        );
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
