//! PATCH paths (RFC 7644 §3.5.2): `PATH = attrPath / valuePath [subAttr]`, e.g. `userName`,
//! `name.familyName`, `urn:…:enterprise:2.0:User:department`, `members[value eq "2819c223"]`,
//! `emails[type eq "work"].value`; and, as identity providers also send, a whole extension by
//! its URN.

use std::fmt;

use crate::error::ScimError;
use crate::filter::lexer::{self, TokenKind};
use crate::filter::parser::Parser;
use crate::filter::{AttrPath, Filter, MAX_FILTER_LENGTH, SyntaxError};
use crate::schema;

/// A parsed PATCH path, not yet resolved against a resource type.
#[derive(Debug, Clone, PartialEq)]
pub enum PatchPath {
    /// A whole schema by its URN, e.g. the enterprise extension; the URN in canonical spelling.
    Schema(&'static str),
    /// An attribute, possibly a sub-attribute, possibly narrowed to the values of a
    /// multi-valued attribute that match a filter. With a filter, `path.sub_attribute` is the
    /// sub-attribute after the brackets (`emails[type eq "work"].value`).
    Attribute {
        /// The attribute (and sub-attribute) named.
        path: AttrPath,
        /// The value filter in brackets, if any; its paths are relative to the attribute.
        filter: Option<Filter>,
    },
}

impl PatchPath {
    /// Parses a PATCH `path`. Malformed paths are 400 `invalidPath`; a malformed filter
    /// inside the brackets is 400 `invalidFilter` (RFC 7644 §3.12 gives it to path filters).
    pub fn parse(input: &str) -> Result<Self, ScimError> {
        let trimmed = input.trim();
        let length = trimmed.chars().count();
        if length == 0 {
            return Err(ScimError::invalid_path("the path is empty"));
        }
        if length > MAX_FILTER_LENGTH {
            return Err(ScimError::invalid_path(format!(
                "the path is {length} characters long; at most {MAX_FILTER_LENGTH} are accepted"
            )));
        }
        if let Some(schema) = schema::ALL
            .iter()
            .find(|schema| schema.id.eq_ignore_ascii_case(trimmed))
        {
            return Ok(PatchPath::Schema(schema.id));
        }
        let mut bracket = None;
        parse_syntax(trimmed, length, &mut bracket).map_err(|error| {
            let detail = format!("invalid path '{trimmed}': {error}");
            match bracket {
                Some(open) if error.position > open => ScimError::invalid_filter(detail),
                _ => ScimError::invalid_path(detail),
            }
        })
    }

    /// The attribute path, unless the path is a whole schema.
    pub fn attribute(&self) -> Option<&AttrPath> {
        match self {
            PatchPath::Schema(_) => None,
            PatchPath::Attribute { path, .. } => Some(path),
        }
    }
}

fn parse_syntax(
    input: &str,
    length: usize,
    bracket: &mut Option<usize>,
) -> Result<PatchPath, SyntaxError> {
    let tokens = lexer::tokenize(input)?;
    let mut parser = Parser::new(tokens, length);
    let mut path = parser.attribute_path()?;
    let mut filter = None;
    if let Some(token) = parser.peek()
        && token.kind == TokenKind::OpenBracket
    {
        if path.sub_attribute.is_some() {
            return Err(SyntaxError::new(
                format!(
                    "a value filter must follow a multi-valued attribute, not the sub-attribute '{path}'"
                ),
                token.position,
            ));
        }
        *bracket = Some(token.position);
        filter = Some(parser.bracketed_value_filter()?);
        *bracket = None;
        if let Some(dot) = parser.peek()
            && dot.kind == TokenKind::Dot
        {
            let position = dot.position;
            parser.advance();
            let sub = parser.attribute_path()?;
            if sub.urn.is_some() || sub.sub_attribute.is_some() {
                return Err(SyntaxError::new(
                    format!("'{sub}' is not a sub-attribute name"),
                    position + 1,
                ));
            }
            path.sub_attribute = Some(sub.name);
        }
    }
    parser.expect_end()?;
    Ok(PatchPath::Attribute { path, filter })
}

impl fmt::Display for PatchPath {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PatchPath::Schema(urn) => formatter.write_str(urn),
            PatchPath::Attribute { path, filter: None } => write!(formatter, "{path}"),
            PatchPath::Attribute {
                path,
                filter: Some(filter),
            } => {
                let base = AttrPath {
                    sub_attribute: None,
                    ..path.clone()
                };
                write!(formatter, "{base}[{filter}]")?;
                if let Some(sub) = &path.sub_attribute {
                    write!(formatter, ".{sub}")?;
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ScimType;
    use crate::filter::{FilterValue, Operator};

    fn attribute(path: &PatchPath) -> (&AttrPath, Option<&Filter>) {
        match path {
            PatchPath::Attribute { path, filter } => (path, filter.as_ref()),
            PatchPath::Schema(urn) => panic!("a schema: {urn}"),
        }
    }

    #[test]
    fn simple_and_sub_attribute_paths() {
        let path = PatchPath::parse("userName").unwrap();
        assert_eq!(attribute(&path), (&AttrPath::new("userName", None), None));
        let path = PatchPath::parse("name.familyName").unwrap();
        assert_eq!(
            attribute(&path),
            (&AttrPath::new("name", Some("familyName")), None)
        );
        assert_eq!(path.to_string(), "name.familyName");
    }

    #[test]
    fn urn_prefixed_paths() {
        let path =
            PatchPath::parse("urn:ietf:params:scim:schemas:extension:enterprise:2.0:User:manager")
                .unwrap();
        let (path, filter) = attribute(&path);
        assert_eq!(
            path.urn.as_deref(),
            Some("urn:ietf:params:scim:schemas:extension:enterprise:2.0:User")
        );
        assert_eq!(path.name, "manager");
        assert!(filter.is_none());
        assert_eq!(
            PatchPath::parse("urn:ietf:params:scim:schemas:extension:enterprise:2.0:user").unwrap(),
            PatchPath::Schema("urn:ietf:params:scim:schemas:extension:enterprise:2.0:User")
        );
    }

    #[test]
    fn value_filtered_paths_with_and_without_a_sub_attribute() {
        // Entra ID's shape for a work e-mail.
        let path = PatchPath::parse(r#"emails[type eq "work"].value"#).unwrap();
        let (attribute_path, filter) = attribute(&path);
        assert_eq!(attribute_path, &AttrPath::new("emails", Some("value")));
        assert_eq!(
            filter,
            Some(&Filter::Compare {
                path: AttrPath::new("type", None),
                operator: Operator::Equal,
                value: FilterValue::String("work".into()),
            })
        );
        assert_eq!(path.to_string(), r#"emails[type eq "work"].value"#);
        // Okta's shape for removing a member.
        let path = PatchPath::parse(r#"members[value eq "2819c223-7f76-453a-919d-413861904646"]"#)
            .unwrap();
        let (attribute_path, filter) = attribute(&path);
        assert_eq!(attribute_path, &AttrPath::new("members", None));
        assert!(filter.is_some());
    }

    #[test]
    fn malformed_paths_are_invalid_path() {
        for (input, expected) in [
            ("", "the path is empty"),
            ("   ", "the path is empty"),
            ("name.", "is not an attribute path"),
            ("a.b.c", "at most one sub-attribute"),
            (
                "emails[type eq \"work\"].",
                "expected an attribute name, but the input ended",
            ),
            (
                "emails[type eq \"work\"].value.x",
                "is not a sub-attribute name",
            ),
            ("emails[type eq \"work\"]x", "unexpected 'x'"),
            (
                "emails.value[type eq \"work\"]",
                "must follow a multi-valued attribute",
            ),
            ("userName eq \"x\"", "unexpected 'eq'"),
            ("\"userName\"", "expected an attribute name"),
            ("1abc", "expected an attribute name"),
        ] {
            let error = PatchPath::parse(input).unwrap_err();
            assert_eq!(
                error.scim_type(),
                Some(ScimType::InvalidPath),
                "{input}: {error}"
            );
            assert!(
                error.detail().contains(expected),
                "{input}: {}",
                error.detail()
            );
        }
    }

    #[test]
    fn malformed_filters_inside_brackets_are_invalid_filter() {
        for input in [
            "members[value eq]",
            "members[value]",
            "members[value eq \"x\"",
            "emails[type eq \"work\" and]",
            "members[value eq \"x\" or (]",
        ] {
            let error = PatchPath::parse(input).unwrap_err();
            assert_eq!(
                error.scim_type(),
                Some(ScimType::InvalidFilter),
                "{input}: {error}"
            );
        }
    }

    #[test]
    fn garbled_paths_never_panic() {
        let seed = r#"urn:ietf:params:scim:schemas:core:2.0:User:emails[type eq "work" and not (primary eq true)].value"#;
        let characters: Vec<char> = seed.chars().collect();
        for cut in 0..=characters.len() {
            let truncated: String = characters[..cut].iter().collect();
            let _ = PatchPath::parse(&truncated);
            for noise in ['[', ']', '.', '"', ':', ' ', '\\', 'ß'] {
                let mut garbled = characters.clone();
                garbled.insert(cut, noise);
                let garbled: String = garbled.into_iter().collect();
                if let Ok(path) = PatchPath::parse(&garbled) {
                    assert_eq!(PatchPath::parse(&path.to_string()).unwrap(), path);
                }
            }
        }
    }
}
