//! What every page shows around its content (organization, account, navigation, a one-time
//! notice), and the formatting of times and figures the pages share.

use super::auth::SignedIn;
use super::session::{Flash, take_flash};
use chrono::{DateTime, Utc};
use chrono_tz::Tz;

/// A sidebar section.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Section {
    /// The home page: what needs attention.
    Home,
    /// Flows and their reports.
    Flows,
    /// Assign form and upload.
    Assign,
    Users,
    Schedules,
    /// Enrollment rules.
    Rules,
    /// Webhook endpoints and deliveries.
    Webhooks,
    /// API keys, team, audit trail.
    Settings,
}

impl Section {
    /// The name the navigation uses.
    pub fn name(self) -> &'static str {
        match self {
            Self::Home => "home",
            Self::Flows => "flows",
            Self::Assign => "assign",
            Self::Users => "users",
            Self::Schedules => "schedules",
            Self::Rules => "rules",
            Self::Webhooks => "webhooks",
            Self::Settings => "settings",
        }
    }
}

/// The frame of a signed-in page.
#[derive(Debug, Clone)]
pub struct Layout {
    /// Organization name.
    pub org_name: String,
    /// The account's e-mail.
    pub email: String,
    /// Whether the account may change things.
    pub is_admin: bool,
    /// `admin` or `viewer`.
    pub role: String,
    /// The current section.
    pub section: Section,
    /// A notice from the previous action.
    pub flash: Option<Flash>,
    /// The organization's time zone.
    pub zone: Tz,
}

impl Layout {
    /// The frame for `account` in `section`, taking any pending notice.
    pub async fn new(account: &SignedIn, section: Section) -> Self {
        let flash = take_flash(&account.session).await;
        Self {
            org_name: account.org.name.clone(),
            email: account.account.email.clone(),
            is_admin: account.is_admin(),
            role: account.account.role.to_string(),
            section,
            flash,
            zone: account.zone(),
        }
    }

    /// Whether `name` is the section of the page shown (its nav link says so with
    /// `aria-current`).
    pub fn is_current(&self, name: &str) -> bool {
        self.section.name() == name
    }

    /// `current` for the navigation link of the current section, else nothing.
    pub fn nav(&self, name: &str) -> &'static str {
        if self.is_current(name) { "current" } else { "" }
    }

    /// A time in the organization's zone, to the minute.
    pub fn time(&self, at: &DateTime<Utc>) -> String {
        time_in(self.zone, *at)
    }

    /// Like [`Layout::time`], or `fallback` when there is none.
    pub fn time_or(&self, at: &Option<DateTime<Utc>>, fallback: &str) -> String {
        at.map_or_else(|| fallback.to_owned(), |at| time_in(self.zone, at))
    }

    /// The zone's abbreviation, e.g. `CET`, for column headers.
    pub fn zone_name(&self) -> String {
        self.zone.name().to_owned()
    }
}

/// `2026-11-22 10:04` in `zone`.
pub fn time_in(zone: Tz, at: DateTime<Utc>) -> String {
    at.with_timezone(&zone).format("%Y-%m-%d %H:%M").to_string()
}

/// A percentage with one decimal and no trailing `.0`: `66.7%`, `100%`.
pub fn percent(value: f64) -> String {
    let text = format!("{value:.1}");
    format!("{}%", text.strip_suffix(".0").unwrap_or(&text))
}

/// `1 row`, `2 rows`, `1,200 rows`: a count with its noun (plural by an `s`).
pub fn plural(n: i64, one: &str) -> String {
    if n == 1 {
        format!("1 {one}")
    } else {
        format!("{} {one}s", count(n))
    }
}

/// A count with thousands separators: `12,345`.
pub fn count(value: i64) -> String {
    let digits = value.unsigned_abs().to_string();
    let mut grouped = String::with_capacity(digits.len() + digits.len() / 3);
    for (index, digit) in digits.chars().enumerate() {
        if index > 0 && (digits.len() - index).is_multiple_of(3) {
            grouped.push(',');
        }
        grouped.push(digit);
    }
    if value < 0 {
        format!("-{grouped}")
    } else {
        grouped
    }
}

/// A status as people read it: `in_progress` → `In progress`.
pub fn label(status: &str) -> String {
    let text = status.replace('_', " ");
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_read_as_people_write_them() {
        assert_eq!(percent(66.66), "66.7%");
        assert_eq!(percent(100.0), "100%");
        assert_eq!(percent(0.0), "0%");
        assert_eq!(count(0), "0");
        assert_eq!(count(999), "999");
        assert_eq!(count(1_000), "1,000");
        assert_eq!(count(1_234_567), "1,234,567");
        assert_eq!(count(-1_500), "-1,500");
        assert_eq!(label("in_progress"), "In progress");
    }
}

/// A delivery's transport error as people read it: a short kind on the row, the whole text (a
/// TLS library's message runs to hundreds of characters) behind it on demand.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorText {
    /// `TLS error`, `Connection refused`, `Timed out`, ...
    pub kind: &'static str,
    /// The error as the worker recorded it.
    pub detail: String,
}

impl ErrorText {
    /// The kind of `detail`, read from the words transport errors use.
    pub fn new(detail: &str) -> Self {
        let lower = detail.to_ascii_lowercase();
        let has = |words: &[&str]| words.iter().any(|word| lower.contains(word));
        let kind = if lower.starts_with("timed out") || has(&["timed out", "deadline"]) {
            "Timed out"
        } else if has(&["certificate", "tls", "ssl", "handshake"]) {
            "TLS error"
        } else if has(&["resolves only to"]) {
            "Address not allowed"
        } else if has(&["dns error", "failed to lookup", "name or service not known"]) {
            "Host not found"
        } else if has(&["connection refused"]) {
            "Connection refused"
        } else if has(&["connection reset", "connection closed", "broken pipe"]) {
            "Connection dropped"
        } else if lower.starts_with("could not connect") {
            "Could not connect"
        } else {
            "Request failed"
        };
        Self {
            kind,
            detail: detail.to_owned(),
        }
    }
}

#[cfg(test)]
mod error_text_tests {
    use super::ErrorText;

    #[test]
    fn transport_errors_read_as_their_kind() {
        for (detail, kind) in [
            ("timed out: operation timed out", "Timed out"),
            (
                "could not connect: client error (Connect): invalid peer certificate: \
                 UnknownIssuer",
                "TLS error",
            ),
            (
                "could not connect: client error (Connect): dns error: failed to lookup address \
                 information: Name or service not known",
                "Host not found",
            ),
            (
                "could not connect: hr.local resolves only to loopback, private, link-local or \
                 metadata addresses",
                "Address not allowed",
            ),
            (
                "could not connect: client error (Connect): tcp connect error: Connection \
                 refused (os error 111)",
                "Connection refused",
            ),
            (
                "request failed: connection closed before message completed",
                "Connection dropped",
            ),
            ("could not connect: something else", "Could not connect"),
            ("request failed: body write aborted", "Request failed"),
        ] {
            assert_eq!(ErrorText::new(detail).kind, kind, "{detail}");
        }
    }
}
