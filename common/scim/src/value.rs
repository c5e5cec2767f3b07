//! Reading attribute values out of request JSON: case-insensitive keys (RFC 7643 §2.1), null
//! and empty strings as unassigned (§2.5), and the leniencies providers need.

use serde_json::{Map, Value};

use crate::error::ScimError;

/// The longest string attribute accepted, in characters.
pub const MAX_STRING_LENGTH: usize = 1024;

/// The value under `key`, matched case-insensitively.
pub(crate) fn get<'a>(object: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    object.get(key).or_else(|| {
        object
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(key))
            .map(|(_, value)| value)
    })
}

/// A string attribute: `None` for null or a blank string; surrounding whitespace trimmed.
pub(crate) fn text(value: &Value, what: &str) -> Result<Option<String>, ScimError> {
    match value {
        Value::Null => Ok(None),
        Value::String(text) => {
            let trimmed = text.trim();
            let length = trimmed.chars().count();
            if length > MAX_STRING_LENGTH {
                return Err(ScimError::invalid_value(format!(
                    "{what} is {length} characters long; at most {MAX_STRING_LENGTH} are accepted"
                )));
            }
            Ok((!trimmed.is_empty()).then(|| trimmed.to_owned()))
        }
        other => Err(ScimError::invalid_value(format!(
            "{what} must be a string, not {}",
            kind(other)
        ))),
    }
}

/// A boolean attribute: `true`/`false`, or the strings `"True"`/`"False"` in any case, which
/// Microsoft Entra ID sends for `active`; `None` for null.
pub(crate) fn boolean(value: &Value, what: &str) -> Result<Option<bool>, ScimError> {
    match value {
        Value::Null => Ok(None),
        Value::Bool(flag) => Ok(Some(*flag)),
        Value::String(text) if text.trim().eq_ignore_ascii_case("true") => Ok(Some(true)),
        Value::String(text) if text.trim().eq_ignore_ascii_case("false") => Ok(Some(false)),
        other => Err(ScimError::invalid_value(format!(
            "{what} must be true or false, not {}",
            kind(other)
        ))),
    }
}

/// The objects of a multi-valued complex attribute: an array of objects, or one object alone;
/// none for null.
pub(crate) fn objects<'a>(
    value: &'a Value,
    what: &str,
) -> Result<Vec<&'a Map<String, Value>>, ScimError> {
    match value {
        Value::Null => Ok(Vec::new()),
        Value::Object(object) => Ok(vec![object]),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .filter(|(_, item)| !item.is_null())
            .map(|(index, item)| {
                item.as_object().ok_or_else(|| {
                    ScimError::invalid_value(format!(
                        "{what}[{index}] must be an object, not {}",
                        kind(item)
                    ))
                })
            })
            .collect(),
        other => Err(ScimError::invalid_value(format!(
            "{what} must be an array of objects, not {}",
            kind(other)
        ))),
    }
}

/// An object value, for complex attributes.
pub(crate) fn object<'a>(
    value: &'a Value,
    what: &str,
) -> Result<&'a Map<String, Value>, ScimError> {
    value.as_object().ok_or_else(|| {
        ScimError::invalid_value(format!("{what} must be an object, not {}", kind(value)))
    })
}

/// What a JSON value is, for messages.
pub(crate) fn kind(value: &Value) -> String {
    match value {
        Value::Null => "null".into(),
        Value::Bool(flag) => format!("the boolean {flag}"),
        Value::Number(number) => format!("the number {number}"),
        Value::String(text) => format!("the string {}", Value::String(shorten(text))),
        Value::Array(_) => "an array".into(),
        Value::Object(_) => "an object".into(),
    }
}

fn shorten(text: &str) -> String {
    if text.chars().count() <= 40 {
        text.to_owned()
    } else {
        format!("{}…", text.chars().take(40).collect::<String>())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::ScimType;

    #[test]
    fn keys_match_case_insensitively_exact_first() {
        let body = json!({"userName": "a", "USERNAME": "b", "Active": true});
        let object = body.as_object().unwrap();
        assert_eq!(get(object, "userName"), Some(&json!("a")));
        assert_eq!(get(object, "active"), Some(&json!(true)));
        assert_eq!(get(object, "title"), None);
    }

    #[test]
    fn strings_trim_and_blank_is_unassigned() {
        assert_eq!(text(&json!("  Ann "), "x").unwrap(), Some("Ann".into()));
        assert_eq!(text(&json!(""), "x").unwrap(), None);
        assert_eq!(text(&Value::Null, "x").unwrap(), None);
        let error = text(&json!(12), "title").unwrap_err();
        assert_eq!(error.scim_type(), Some(ScimType::InvalidValue));
        assert_eq!(error.detail(), "title must be a string, not the number 12");
        let error = text(&json!("x".repeat(MAX_STRING_LENGTH + 1)), "title").unwrap_err();
        assert!(error.detail().contains("at most 1024"));
    }

    #[test]
    fn booleans_accept_entra_strings() {
        assert_eq!(boolean(&json!("False"), "active").unwrap(), Some(false));
        assert_eq!(boolean(&json!("TRUE"), "active").unwrap(), Some(true));
        assert_eq!(boolean(&json!(false), "active").unwrap(), Some(false));
        let error = boolean(&json!("no"), "active").unwrap_err();
        assert_eq!(
            error.detail(),
            r#"active must be true or false, not the string "no""#
        );
        assert!(boolean(&json!(0), "active").is_err());
    }

    #[test]
    fn multi_valued_accepts_an_array_or_one_object() {
        assert_eq!(
            objects(&json!([{"value": "a"}, null]), "emails")
                .unwrap()
                .len(),
            1
        );
        assert_eq!(objects(&json!({"value": "a"}), "emails").unwrap().len(), 1);
        assert!(objects(&Value::Null, "emails").unwrap().is_empty());
        let error = objects(&json!(["a@b.c"]), "emails").unwrap_err();
        assert_eq!(
            error.detail(),
            r#"emails[0] must be an object, not the string "a@b.c""#
        );
    }
}
