//! Checks a parsed filter against a resource type's schemas: every attribute must exist and
//! be filterable, and each comparison must suit the attribute's type. The result has canonical
//! names.

use super::{AttrPath, Filter, FilterValue, Operator};
use crate::error::ScimError;
use crate::schema::{self, Attribute, AttributeType, Container, ResourceType, Unresolved};

/// Checks `filter` against `resource`'s filterable attributes and returns it with canonical
/// names. Unknown or unfilterable attributes, and comparisons that do not suit an attribute's
/// type (`active co "x"`, `meta.lastModified gt "yesterday"`), are 400 `invalidFilter`.
pub fn check(filter: &Filter, resource: ResourceType) -> Result<Filter, ScimError> {
    match filter {
        Filter::And(terms) => Ok(Filter::And(
            terms
                .iter()
                .map(|term| check(term, resource))
                .collect::<Result<_, _>>()?,
        )),
        Filter::Or(terms) => Ok(Filter::Or(
            terms
                .iter()
                .map(|term| check(term, resource))
                .collect::<Result<_, _>>()?,
        )),
        Filter::Not(inner) => Ok(Filter::Not(Box::new(check(inner, resource)?))),
        Filter::Present(path) => {
            let (path, _) = resolve_leaf(path, resource)?;
            Ok(Filter::Present(path))
        }
        Filter::Compare {
            path,
            operator,
            value,
        } => {
            let (canonical, leaf) = resolve_leaf(path, resource)?;
            check_comparison(&canonical, leaf, *operator, value)?;
            Ok(Filter::Compare {
                path: canonical,
                operator: *operator,
                value: value.clone(),
            })
        }
        Filter::ValuePath { path, filter } => {
            let resolved = resolve(path, resource)?;
            let attribute = resolved.attribute;
            if !attribute.multi_valued || !attribute.is_complex() {
                return Err(ScimError::invalid_filter(format!(
                    "'{path}' is not a multi-valued attribute, so it takes no [value filter]"
                )));
            }
            let inner =
                check_value_filter(filter, attribute, true).map_err(ScimError::invalid_filter)?;
            Ok(Filter::ValuePath {
                path: canonical_path(resolved.container, attribute, None),
                filter: Box::new(inner),
            })
        }
    }
}

/// Checks the filter inside `attribute[…]` against its sub-attributes (all of them, or only
/// the filterable ones when `filterable_only`), returning it with canonical sub-attribute
/// names. The error is the detail text; the caller picks the `scimType`.
pub(crate) fn check_value_filter(
    filter: &Filter,
    attribute: &'static Attribute,
    filterable_only: bool,
) -> Result<Filter, String> {
    let recurse = |term: &Filter| check_value_filter(term, attribute, filterable_only);
    match filter {
        Filter::And(terms) => Ok(Filter::And(
            terms.iter().map(recurse).collect::<Result<_, _>>()?,
        )),
        Filter::Or(terms) => Ok(Filter::Or(
            terms.iter().map(recurse).collect::<Result<_, _>>()?,
        )),
        Filter::Not(inner) => Ok(Filter::Not(Box::new(recurse(inner)?))),
        Filter::ValuePath { path, .. } => Err(format!(
            "'{path}[…]' cannot appear inside '{}[…]'",
            attribute.name
        )),
        Filter::Present(path) => {
            let sub = sub_attribute(path, attribute, filterable_only)?;
            Ok(Filter::Present(AttrPath::new(sub.name, None)))
        }
        Filter::Compare {
            path,
            operator,
            value,
        } => {
            let sub = sub_attribute(path, attribute, filterable_only)?;
            let canonical = AttrPath::new(sub.name, None);
            check_comparison(&canonical, sub, *operator, value)
                .map_err(|error| error.detail().to_owned())?;
            Ok(Filter::Compare {
                path: canonical,
                operator: *operator,
                value: value.clone(),
            })
        }
    }
}

fn sub_attribute(
    path: &AttrPath,
    attribute: &'static Attribute,
    filterable_only: bool,
) -> Result<&'static Attribute, String> {
    let sub = (path.urn.is_none() && path.sub_attribute.is_none())
        .then(|| attribute.sub_attribute(&path.name))
        .flatten()
        .ok_or_else(|| {
            format!(
                "'{path}' is not a sub-attribute of '{}'; it has {}",
                attribute.name,
                names(
                    attribute
                        .sub_attributes
                        .iter()
                        .filter(|sub| !filterable_only || sub.filterable)
                )
            )
        })?;
    if filterable_only && !sub.filterable {
        return Err(format!(
            "'{}.{}' cannot be filtered on",
            attribute.name, sub.name
        ));
    }
    Ok(sub)
}

fn resolve(path: &AttrPath, resource: ResourceType) -> Result<schema::Resolved, ScimError> {
    schema::resolve(
        resource,
        path.urn.as_deref(),
        &path.name,
        path.sub_attribute.as_deref(),
    )
    .map_err(|unresolved| match unresolved {
        Unresolved::Unknown => ScimError::invalid_filter(format!(
            "unknown attribute '{path}'; {} can be filtered on {}",
            plural(resource),
            filterable_list(resource)
        )),
        Unresolved::UnknownSubAttribute(why) | Unresolved::NotComplex(why) => {
            ScimError::invalid_filter(why)
        }
    })
}

/// Resolves a compared or tested path to a filterable leaf: a complex multi-valued attribute
/// alone stands for its `value` (`emails` → `emails.value`).
fn resolve_leaf(
    path: &AttrPath,
    resource: ResourceType,
) -> Result<(AttrPath, &'static Attribute), ScimError> {
    let mut resolved = resolve(path, resource)?;
    if resolved.sub_attribute.is_none() && resolved.attribute.is_complex() {
        match resolved.attribute.sub_attribute("value") {
            Some(value) if resolved.attribute.multi_valued => resolved.sub_attribute = Some(value),
            _ => {
                return Err(ScimError::invalid_filter(format!(
                    "'{path}' is complex; filter on one of its sub-attributes: {}",
                    names(
                        resolved
                            .attribute
                            .sub_attributes
                            .iter()
                            .filter(|sub| sub.filterable)
                    )
                )));
            }
        }
    }
    let leaf = resolved.leaf();
    if !leaf.filterable {
        return Err(ScimError::invalid_filter(format!(
            "'{}' cannot be filtered on; {} can be filtered on {}",
            resolved.canonical(),
            plural(resource),
            filterable_list(resource)
        )));
    }
    Ok((
        canonical_path(
            resolved.container,
            resolved.attribute,
            resolved.sub_attribute,
        ),
        leaf,
    ))
}

fn canonical_path(
    container: Container,
    attribute: &Attribute,
    sub_attribute: Option<&Attribute>,
) -> AttrPath {
    AttrPath {
        urn: match container {
            Container::Core => None,
            Container::Extension(schema) => Some(schema.id.to_owned()),
        },
        name: attribute.name.to_owned(),
        sub_attribute: sub_attribute.map(|sub| sub.name.to_owned()),
    }
}

fn check_comparison(
    path: &AttrPath,
    leaf: &Attribute,
    operator: Operator,
    value: &FilterValue,
) -> Result<(), ScimError> {
    let refuse = |why: String| {
        ScimError::invalid_filter(format!("'{path} {} {value}': {why}", operator.keyword()))
    };
    match leaf.kind {
        AttributeType::Boolean => {
            if !matches!(operator, Operator::Equal | Operator::NotEqual) {
                return Err(refuse(format!("'{path}' is a boolean; use eq, ne or pr")));
            }
            if !matches!(value, FilterValue::Boolean(_)) {
                return Err(refuse(format!(
                    "'{path}' is a boolean; compare it with true or false"
                )));
            }
        }
        AttributeType::DateTime => {
            if operator.is_substring() {
                return Err(refuse(format!(
                    "'{path}' is a date-time; use eq, ne, gt, ge, lt, le or pr"
                )));
            }
            let parsed = match value {
                FilterValue::String(text) => chrono::DateTime::parse_from_rfc3339(text).ok(),
                _ => None,
            };
            if parsed.is_none() {
                return Err(refuse(format!(
                    "'{path}' is a date-time; compare it with an RFC 3339 timestamp in double quotes"
                )));
            }
        }
        AttributeType::String | AttributeType::Reference | AttributeType::Complex => {
            if !matches!(value, FilterValue::String(_)) {
                return Err(refuse(format!(
                    "'{path}' is a string; compare it with a string in double quotes (use pr to test presence)"
                )));
            }
        }
    }
    Ok(())
}

fn plural(resource: ResourceType) -> &'static str {
    match resource {
        ResourceType::User => "Users",
        ResourceType::Group => "Groups",
    }
}

/// The canonical paths a resource type can be filtered on, in schema order (what an
/// `invalidFilter` for an unknown attribute lists).
pub fn filterable_paths(resource: ResourceType) -> Vec<String> {
    let mut paths = Vec::new();
    let mut collect = |prefix: Option<&str>, attributes: &[Attribute]| {
        for attribute in attributes {
            let base = match prefix {
                Some(urn) => format!("{urn}:{}", attribute.name),
                None => attribute.name.to_owned(),
            };
            if attribute.filterable {
                paths.push(base.clone());
            }
            for sub in attribute.sub_attributes.iter().filter(|sub| sub.filterable) {
                paths.push(format!("{base}.{}", sub.name));
            }
        }
    };
    collect(None, resource.schema().attributes);
    collect(None, schema::COMMON_ATTRIBUTES);
    for extension in resource.extensions() {
        collect(Some(extension.id), extension.attributes);
    }
    paths
}

fn filterable_list(resource: ResourceType) -> String {
    filterable_paths(resource).join(", ")
}

fn names<'a>(attributes: impl Iterator<Item = &'a Attribute>) -> String {
    attributes
        .map(|attribute| attribute.name)
        .collect::<Vec<_>>()
        .join(", ")
}
