//! Evaluates a checked value filter (`type eq "work"`) against one value of a multi-valued
//! attribute, for PATCH paths such as `emails[type eq "work"].value`.

use super::{Filter, FilterValue, Operator};
use crate::schema::Attribute;

/// A sub-attribute's value in one element of a multi-valued attribute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ElementValue<'a> {
    /// A string.
    Text(&'a str),
    /// A boolean.
    Boolean(bool),
}

/// Whether the element whose sub-attributes `lookup` returns matches `filter`, a filter
/// already checked against `attribute` (so its names are canonical sub-attribute names).
/// String comparisons follow each sub-attribute's `caseExact`. A comparison with a missing
/// value is false, except `ne`.
pub(crate) fn matches_element<'a>(
    filter: &Filter,
    attribute: &Attribute,
    lookup: &dyn Fn(&str) -> Option<ElementValue<'a>>,
) -> bool {
    match filter {
        Filter::And(terms) => terms
            .iter()
            .all(|term| matches_element(term, attribute, lookup)),
        Filter::Or(terms) => terms
            .iter()
            .any(|term| matches_element(term, attribute, lookup)),
        Filter::Not(inner) => !matches_element(inner, attribute, lookup),
        Filter::ValuePath { .. } => false,
        Filter::Present(path) => match lookup(&path.name) {
            Some(ElementValue::Text(text)) => !text.is_empty(),
            Some(ElementValue::Boolean(_)) => true,
            None => false,
        },
        Filter::Compare {
            path,
            operator,
            value,
        } => {
            let case_exact = attribute
                .sub_attribute(&path.name)
                .is_some_and(|sub| sub.case_exact);
            match (lookup(&path.name), value) {
                (Some(ElementValue::Text(actual)), FilterValue::String(expected)) => {
                    compare_text(actual, expected, *operator, case_exact)
                }
                (Some(ElementValue::Boolean(actual)), FilterValue::Boolean(expected)) => {
                    match operator {
                        Operator::Equal => actual == *expected,
                        Operator::NotEqual => actual != *expected,
                        _ => false,
                    }
                }
                (None, _) => *operator == Operator::NotEqual,
                _ => false,
            }
        }
    }
}

fn compare_text(actual: &str, expected: &str, operator: Operator, case_exact: bool) -> bool {
    let (actual, expected) = if case_exact {
        (actual.to_owned(), expected.to_owned())
    } else {
        (actual.to_lowercase(), expected.to_lowercase())
    };
    match operator {
        Operator::Equal => actual == expected,
        Operator::NotEqual => actual != expected,
        Operator::Contains => actual.contains(&expected),
        Operator::StartsWith => actual.starts_with(&expected),
        Operator::EndsWith => actual.ends_with(&expected),
        Operator::GreaterThan => actual > expected,
        Operator::GreaterOrEqual => actual >= expected,
        Operator::LessThan => actual < expected,
        Operator::LessOrEqual => actual <= expected,
    }
}
