//! A CloudEvents 1.0 event as Flow reads it (docs/events.md): the required attributes checked,
//! the whole event kept as one JSON document (attributes and `data`), which the triggers'
//! JSON Pointers read. The HTTP modes (structured, batch, binary) are the API's to unwrap.

use serde_json::{Map, Value};

/// Most events in one request (a batch).
pub const MAX_EVENTS: usize = 1_000;

/// Longest `id`, `source` or `type`, in characters.
pub const MAX_ATTRIBUTE_CHARS: usize = 500;

/// The only CloudEvents version accepted.
pub const SPEC_VERSION: &str = "1.0";

/// A valid event.
#[derive(Debug, Clone, PartialEq)]
pub struct CloudEvent {
    /// `id`: with `source`, what identifies the event.
    pub id: String,
    /// `source`.
    pub source: String,
    /// `type`.
    pub event_type: String,
    /// The event as one JSON object: its attributes and its `data`.
    pub document: Value,
}

/// An event that is not valid, with what identifies it as far as it could be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidEvent {
    /// Its `id`, when it is a string.
    pub id: String,
    /// Its `source`, when it is a string.
    pub source: String,
    /// Why it is not valid.
    pub reason: String,
}

/// An event as received: valid, or why not.
pub type Received = Result<CloudEvent, InvalidEvent>;

impl CloudEvent {
    /// Reads an event in the structured form (one JSON object): `specversion` must be "1.0";
    /// `id`, `source` and `type` non-empty strings of at most [`MAX_ATTRIBUTE_CHARS`].
    pub fn from_json(document: Value) -> Received {
        let text = |name: &str| {
            document
                .get(name)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        let (id, source) = (text("id"), text("source"));
        let invalid = |reason: String| InvalidEvent {
            id: id.clone(),
            source: source.clone(),
            reason,
        };
        let Some(attributes) = document.as_object() else {
            return Err(invalid("an event must be a JSON object".into()));
        };
        match attributes.get("specversion") {
            Some(Value::String(version)) if version == SPEC_VERSION => {}
            Some(Value::String(version)) => {
                return Err(invalid(format!(
                    "specversion \"{version}\" is not supported: send \"{SPEC_VERSION}\""
                )));
            }
            _ => return Err(invalid("specversion is required (\"1.0\")".into())),
        }
        for name in ["id", "source", "type"] {
            match attributes.get(name) {
                Some(Value::String(value)) if value.is_empty() => {
                    return Err(invalid(format!("{name} must not be empty")));
                }
                Some(Value::String(value)) if value.chars().count() > MAX_ATTRIBUTE_CHARS => {
                    return Err(invalid(format!(
                        "{name} must be at most {MAX_ATTRIBUTE_CHARS} characters"
                    )));
                }
                Some(Value::String(value)) if value.contains('\0') => {
                    return Err(invalid(format!("{name} must not contain NUL")));
                }
                Some(Value::String(_)) => {}
                Some(_) => return Err(invalid(format!("{name} must be a string"))),
                None => return Err(invalid(format!("{name} is required"))),
            }
        }
        let event_type = text("type");
        Ok(Self {
            id,
            source,
            event_type,
            document,
        })
    }

    /// Reads an event in the binary form: its attributes (the `ce-` headers, names without the
    /// prefix) and its `data` (the body, as its content type says: JSON for a JSON type, else
    /// text), checked as [`CloudEvent::from_json`] checks a structured one.
    pub fn from_binary(attributes: Vec<(String, String)>, data: Option<Value>) -> Received {
        let mut document = Map::new();
        for (name, value) in attributes {
            document.insert(name, Value::String(value));
        }
        if let Some(data) = data {
            document.insert("data".into(), data);
        }
        Self::from_json(Value::Object(document))
    }

    /// The value at a JSON Pointer (RFC 6901) in the event, e.g. `/data/email`.
    pub fn at(&self, pointer: &str) -> Option<&Value> {
        self.document.pointer(pointer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_structured_event_reads_its_attributes_and_pointers() {
        let event = CloudEvent::from_json(json!({
            "specversion": "1.0", "id": "1", "source": "hr", "type": "hired",
            "data": {"employee": {"email": "a@example.com"}}
        }))
        .unwrap();
        assert_eq!(
            (
                event.id.as_str(),
                event.source.as_str(),
                event.event_type.as_str()
            ),
            ("1", "hr", "hired")
        );
        assert_eq!(
            event.at("/data/employee/email"),
            Some(&json!("a@example.com"))
        );
    }

    #[test]
    fn missing_or_wrong_attributes_are_invalid_with_the_reason() {
        let cases = [
            (
                json!({"id": "1", "source": "s", "type": "t"}),
                "specversion is required",
            ),
            (
                json!({"specversion": "0.3", "id": "1", "source": "s", "type": "t"}),
                "not supported",
            ),
            (
                json!({"specversion": "1.0", "source": "s", "type": "t"}),
                "id is required",
            ),
            (
                json!({"specversion": "1.0", "id": "", "source": "s", "type": "t"}),
                "id must not be empty",
            ),
            (
                json!({"specversion": "1.0", "id": "1", "source": 3, "type": "t"}),
                "source must be a string",
            ),
            (
                json!({"specversion": "1.0", "id": "1", "source": "s"}),
                "type is required",
            ),
            (json!([1]), "JSON object"),
        ];
        for (document, reason) in cases {
            let error = CloudEvent::from_json(document.clone()).unwrap_err();
            assert!(
                error.reason.contains(reason),
                "{document}: {}",
                error.reason
            );
        }
    }

    #[test]
    fn a_binary_event_puts_its_body_under_data() {
        let event = CloudEvent::from_binary(
            vec![
                ("specversion".into(), "1.0".into()),
                ("id".into(), "7".into()),
                ("source".into(), "okta".into()),
                ("type".into(), "user.created".into()),
            ],
            Some(json!({"email": "b@example.com"})),
        )
        .unwrap();
        assert_eq!(event.at("/data/email"), Some(&json!("b@example.com")));
    }
}
