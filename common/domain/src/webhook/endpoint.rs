//! What a webhook endpoint's fields may hold, one rule for every surface that changes one (the
//! API and the dashboard): the event kinds it takes and its description. Its URL is checked by
//! the address policy in `flow-common`, which needs DNS.

use crate::events::EventType;
use crate::{Invalid, TextRule};

/// Longest description of an endpoint, in characters.
pub const MAX_DESCRIPTION_CHARS: usize = 500;

/// The rule of an endpoint's description: line breaks allowed, no other control character (NUL
/// included), at most [`MAX_DESCRIPTION_CHARS`].
pub const DESCRIPTION: TextRule = TextRule {
    max_chars: MAX_DESCRIPTION_CHARS,
    multiline: true,
};

/// An endpoint's description as stored: trimmed, `None` when empty.
pub fn parse_description(text: &str) -> Result<Option<String>, Invalid> {
    let text = DESCRIPTION.parse("description", text)?;
    Ok(Some(text).filter(|text| !text.is_empty()))
}

/// The event kinds an endpoint takes, in the order of their names and without repeats (empty:
/// every kind). Sorting by name, not declaration, keeps the order the API has always answered.
pub fn parse_events<S: AsRef<str>>(events: &[S]) -> Result<Vec<EventType>, Invalid> {
    let mut parsed = events
        .iter()
        .map(|event| {
            event.as_ref().parse::<EventType>().map_err(|_| {
                Invalid(format!(
                    "events must contain only: {}",
                    EventType::allowed()
                ))
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    parsed.sort_by_key(|event| event.as_str());
    parsed.dedup();
    Ok(parsed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptions_refuse_control_characters_and_long_text() {
        assert_eq!(
            parse_description("  HR\nsystem\t ").unwrap().as_deref(),
            Some("HR\nsystem")
        );
        assert_eq!(parse_description("   ").unwrap(), None);
        for bad in ["a\0b", "bell\u{7}", "escape\u{1b}[31m"] {
            let error = parse_description(bad).unwrap_err();
            assert!(error.0.contains("control characters"), "{error:?}");
        }
        assert!(parse_description(&"é".repeat(MAX_DESCRIPTION_CHARS)).is_ok());
        let error = parse_description(&"é".repeat(MAX_DESCRIPTION_CHARS + 1)).unwrap_err();
        assert_eq!(error.0, "description must be at most 500 characters");
    }

    #[test]
    fn event_kinds_are_checked_sorted_and_deduplicated() {
        assert_eq!(
            parse_events(&[
                "flow.started",
                "flow.overdue",
                "flow.assigned",
                "flow.overdue"
            ])
            .unwrap(),
            [EventType::Assigned, EventType::Overdue, EventType::Started]
        );
        assert!(
            parse_events(&["flow.deleted"])
                .unwrap_err()
                .0
                .starts_with("events must contain only")
        );
    }
}
