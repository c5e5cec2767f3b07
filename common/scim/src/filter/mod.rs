//! Filters (RFC 7644 §3.4.2.2): `filter` strings parsed into an AST that the service
//! translates into SQL, and checked against the attributes a resource type lets callers
//! filter on.
//!
//! [`parse`] reads any well-formed filter; [`parse_for`] also checks it against a resource
//! type ([`check`]) and returns it with canonical names (`USERNAME` → `userName`,
//! `emails` → `emails.value`, core-URN prefixes dropped, extension URNs in their canonical
//! spelling), so the translator matches on exact strings. Limits: [`MAX_FILTER_LENGTH`]
//! characters and [`MAX_FILTER_DEPTH`] levels of nesting.

mod check;
mod eval;
pub(crate) mod lexer;
pub(crate) mod parser;

use std::fmt;

pub(crate) use check::check_value_filter;
pub use check::{check, filterable_paths};
pub(crate) use eval::{ElementValue, matches_element};

use crate::error::ScimError;
use crate::schema::ResourceType;

/// The longest filter accepted, in characters.
pub const MAX_FILTER_LENGTH: usize = 4096;

/// The deepest nesting accepted: parentheses, value-filter brackets and `not` each open a
/// level.
pub const MAX_FILTER_DEPTH: usize = 32;

/// A syntax error and the 1-based character position where it was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SyntaxError {
    pub message: String,
    pub position: usize,
}

impl SyntaxError {
    pub(crate) fn new(message: impl Into<String>, position: usize) -> Self {
        Self {
            message: message.into(),
            position,
        }
    }
}

impl fmt::Display for SyntaxError {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            formatter,
            "{} (at character {})",
            self.message, self.position
        )
    }
}

/// An attribute path: `[urn:]name[.subAttribute]`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AttrPath {
    /// The schema URN prefix, when given (kept in the caller's spelling until checked).
    pub urn: Option<String>,
    /// The attribute name.
    pub name: String,
    /// The sub-attribute name, when given.
    pub sub_attribute: Option<String>,
}

impl AttrPath {
    /// A path of a core attribute (no URN).
    pub fn new(name: impl Into<String>, sub_attribute: Option<&str>) -> Self {
        Self {
            urn: None,
            name: name.into(),
            sub_attribute: sub_attribute.map(str::to_owned),
        }
    }

    /// Parses one lexed word as an attribute path.
    pub(crate) fn from_word(word: &str, position: usize) -> Result<Self, SyntaxError> {
        let not_a_path = |why: &str| {
            SyntaxError::new(
                format!("'{word}' is not an attribute path: {why}"),
                position,
            )
        };
        let (urn, rest) = match word.rfind(':') {
            Some(colon) => {
                let urn = &word[..colon];
                if !urn
                    .get(..4)
                    .is_some_and(|start| start.eq_ignore_ascii_case("urn:"))
                    || urn.len() == 4
                {
                    return Err(not_a_path("a schema prefix must be a URN (urn:…)"));
                }
                (Some(urn.to_owned()), &word[colon + 1..])
            }
            None => (None, word),
        };
        let mut parts = rest.split('.');
        let name = parts.next().unwrap_or_default();
        let sub_attribute = parts.next();
        if parts.next().is_some() {
            return Err(not_a_path("at most one sub-attribute may follow the name"));
        }
        for part in std::iter::once(name).chain(sub_attribute) {
            if !is_attribute_name(part) {
                return Err(not_a_path(
                    "names start with a letter and hold letters, digits, '_' and '-'",
                ));
            }
        }
        Ok(Self {
            urn,
            name: name.to_owned(),
            sub_attribute: sub_attribute.map(str::to_owned),
        })
    }

    /// Whether this path is `name[.sub]` (no URN), compared case-insensitively; e.g.
    /// `path.is("emails", Some("value"))`.
    pub fn is(&self, name: &str, sub_attribute: Option<&str>) -> bool {
        self.urn.is_none()
            && self.name.eq_ignore_ascii_case(name)
            && match (&self.sub_attribute, sub_attribute) {
                (None, None) => true,
                (Some(mine), Some(theirs)) => mine.eq_ignore_ascii_case(theirs),
                _ => false,
            }
    }
}

/// RFC 7643 `ATTRNAME = ALPHA *(nameChar)`, plus the `$ref` of references.
fn is_attribute_name(name: &str) -> bool {
    if name == "$ref" {
        return true;
    }
    let mut characters = name.chars();
    characters
        .next()
        .is_some_and(|first| first.is_ascii_alphabetic())
        && characters.all(|character| {
            character.is_ascii_alphanumeric() || character == '_' || character == '-'
        })
}

impl fmt::Display for AttrPath {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(urn) = &self.urn {
            write!(formatter, "{urn}:")?;
        }
        formatter.write_str(&self.name)?;
        if let Some(sub) = &self.sub_attribute {
            write!(formatter, ".{sub}")?;
        }
        Ok(())
    }
}

/// A comparison operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operator {
    /// `eq`: equal.
    Equal,
    /// `ne`: not equal.
    NotEqual,
    /// `co`: contains.
    Contains,
    /// `sw`: starts with.
    StartsWith,
    /// `ew`: ends with.
    EndsWith,
    /// `gt`: greater than.
    GreaterThan,
    /// `ge`: greater than or equal.
    GreaterOrEqual,
    /// `lt`: less than.
    LessThan,
    /// `le`: less than or equal.
    LessOrEqual,
}

impl Operator {
    /// The operator of that keyword, matched case-insensitively (`pr` is not a comparison).
    pub fn from_keyword(keyword: &str) -> Option<Self> {
        Some(match keyword.to_ascii_lowercase().as_str() {
            "eq" => Operator::Equal,
            "ne" => Operator::NotEqual,
            "co" => Operator::Contains,
            "sw" => Operator::StartsWith,
            "ew" => Operator::EndsWith,
            "gt" => Operator::GreaterThan,
            "ge" => Operator::GreaterOrEqual,
            "lt" => Operator::LessThan,
            "le" => Operator::LessOrEqual,
            _ => return None,
        })
    }

    /// The keyword, lower-case.
    pub fn keyword(self) -> &'static str {
        match self {
            Operator::Equal => "eq",
            Operator::NotEqual => "ne",
            Operator::Contains => "co",
            Operator::StartsWith => "sw",
            Operator::EndsWith => "ew",
            Operator::GreaterThan => "gt",
            Operator::GreaterOrEqual => "ge",
            Operator::LessThan => "lt",
            Operator::LessOrEqual => "le",
        }
    }

    /// Whether it matches text inside a value (`co`, `sw`, `ew`).
    pub fn is_substring(self) -> bool {
        matches!(
            self,
            Operator::Contains | Operator::StartsWith | Operator::EndsWith
        )
    }

    /// Whether it orders values (`gt`, `ge`, `lt`, `le`).
    pub fn is_ordering(self) -> bool {
        matches!(
            self,
            Operator::GreaterThan
                | Operator::GreaterOrEqual
                | Operator::LessThan
                | Operator::LessOrEqual
        )
    }
}

/// A comparison value: a JSON string, number, boolean or null.
#[derive(Debug, Clone, PartialEq)]
pub enum FilterValue {
    /// A string, unescaped.
    String(String),
    /// A number.
    Number(serde_json::Number),
    /// `true` or `false`.
    Boolean(bool),
    /// `null`.
    Null,
}

impl fmt::Display for FilterValue {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FilterValue::String(text) => {
                write!(formatter, "{}", serde_json::Value::String(text.clone()))
            }
            FilterValue::Number(number) => write!(formatter, "{number}"),
            FilterValue::Boolean(value) => write!(formatter, "{value}"),
            FilterValue::Null => formatter.write_str("null"),
        }
    }
}

/// A parsed filter. `and` and `or` chains are flat lists; inside a [`Filter::ValuePath`] the
/// paths are relative to the multi-valued attribute (`emails[type eq "work"]` holds `type`).
#[derive(Debug, Clone, PartialEq)]
pub enum Filter {
    /// `path op value`.
    Compare {
        /// The attribute compared.
        path: AttrPath,
        /// The operator.
        operator: Operator,
        /// The value compared with.
        value: FilterValue,
    },
    /// `path pr`: the attribute has a value.
    Present(AttrPath),
    /// `path[filter]`: some value of the multi-valued attribute matches the inner filter.
    ValuePath {
        /// The multi-valued attribute.
        path: AttrPath,
        /// The filter on its sub-attributes.
        filter: Box<Filter>,
    },
    /// `not (filter)`.
    Not(Box<Filter>),
    /// Every term matches.
    And(Vec<Filter>),
    /// Some term matches.
    Or(Vec<Filter>),
}

impl fmt::Display for Filter {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Filter::Compare {
                path,
                operator,
                value,
            } => write!(formatter, "{path} {} {value}", operator.keyword()),
            Filter::Present(path) => write!(formatter, "{path} pr"),
            Filter::ValuePath { path, filter } => write!(formatter, "{path}[{filter}]"),
            Filter::Not(inner) => write!(formatter, "not ({inner})"),
            Filter::And(terms) => write_terms(formatter, terms, "and"),
            Filter::Or(terms) => write_terms(formatter, terms, "or"),
        }
    }
}

fn write_terms(formatter: &mut fmt::Formatter<'_>, terms: &[Filter], keyword: &str) -> fmt::Result {
    for (index, term) in terms.iter().enumerate() {
        if index > 0 {
            write!(formatter, " {keyword} ")?;
        }
        let grouped =
            matches!(term, Filter::Or(_)) || matches!(term, Filter::And(_)) && keyword == "and";
        if grouped {
            write!(formatter, "({term})")?;
        } else {
            write!(formatter, "{term}")?;
        }
    }
    Ok(())
}

/// Parses a filter (any attribute names; see [`parse_for`] to check them too). Errors are 400
/// `invalidFilter` naming the problem and its character position.
pub fn parse(input: &str) -> Result<Filter, ScimError> {
    let length = input.chars().count();
    if length > MAX_FILTER_LENGTH {
        return Err(ScimError::invalid_filter(format!(
            "the filter is {length} characters long; at most {MAX_FILTER_LENGTH} are accepted"
        )));
    }
    parse_syntax(input, length)
        .map_err(|error| ScimError::invalid_filter(format!("invalid filter: {error}")))
}

fn parse_syntax(input: &str, length: usize) -> Result<Filter, SyntaxError> {
    let tokens = lexer::tokenize(input)?;
    let mut parser = parser::Parser::new(tokens, length);
    if parser.peek().is_none() {
        return Err(SyntaxError::new("the filter is empty", 1));
    }
    let filter = parser.filter(false)?;
    parser.expect_end()?;
    Ok(filter)
}

/// Parses a filter and checks it against `resource`'s filterable attributes, returning it
/// with canonical names: what the surface calls for `GET /Users?filter=…`.
pub fn parse_for(input: &str, resource: ResourceType) -> Result<Filter, ScimError> {
    check(&parse(input)?, resource)
}

#[cfg(test)]
mod tests;
