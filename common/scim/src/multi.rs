//! PATCH semantics of multi-valued complex attributes (a user's `emails`, a group's
//! `members`), written once for both (RFC 7644 §3.5.2.1–3).
//!
//! - `add attr` appends the given values; a value equal to one already there updates it.
//! - `replace attr` replaces the whole list; `remove attr` empties it, or, when the request
//!   carries a value list (Entra ID's older group shape), removes just those values.
//! - `attr[filter]` narrows any of these to the matching values. `replace` that matches
//!   nothing is `noTarget` (as the RFC says); `add` that matches nothing creates a value from
//!   the filter's `eq` terms and the given value (Entra ID adds `emails[type eq "work"].value`
//!   this way); `remove` that matches nothing changes nothing, so retries are harmless.
//! - `attr.sub` / `attr[filter].sub` set or clear one sub-attribute of the values; clearing
//!   `value` removes the value itself.
//! - At most one value is `primary`: the one the operation set last wins.

use serde_json::{Map, Value};

use crate::error::ScimError;
use crate::filter::{ElementValue, Filter, FilterValue, Operator, matches_element};
use crate::patch::PatchOpKind;
use crate::schema::Attribute;
use crate::value;

/// One value of a multi-valued complex attribute.
pub(crate) trait Element: Sized {
    /// The attribute's definition.
    fn attribute() -> &'static Attribute;
    /// Builds a value from a client object; its `value` sub-attribute is required.
    fn from_object(object: &Map<String, Value>, what: &str) -> Result<Self, ScimError>;
    /// Sets the sub-attribute `sub` (canonical name) from a non-null client value.
    fn set(&mut self, sub: &str, value: &Value, what: &str) -> Result<(), ScimError>;
    /// Clears `sub`; false when that leaves the value without its `value`, so it must go.
    fn clear(&mut self, sub: &str) -> bool;
    /// The sub-attribute `sub` (canonical name), for value filters.
    fn lookup(&self, sub: &str) -> Option<ElementValue<'_>>;
    /// Whether two values are the same one (an `add` of it updates instead of duplicating).
    fn same_as(&self, other: &Self) -> bool;
    /// Whether it is the primary value.
    fn is_primary(&self) -> bool {
        false
    }
    /// Makes it not primary.
    fn unset_primary(&mut self) {}
}

/// Applies one operation to the list. `sub` is the sub-attribute the path names, `filter` the
/// checked value filter, `what` the attribute's name for messages.
pub(crate) fn apply<E: Element>(
    list: &mut Vec<E>,
    kind: PatchOpKind,
    sub: Option<&'static Attribute>,
    filter: Option<&Filter>,
    value: Option<&Value>,
    what: &str,
) -> Result<(), ScimError> {
    let value = value.unwrap_or(&Value::Null);
    // Null and unassigned are the same state (RFC 7643 §2.5): adding null changes nothing,
    // replacing with null removes.
    let kind = match kind {
        PatchOpKind::Add if value.is_null() => return Ok(()),
        PatchOpKind::Replace if value.is_null() => PatchOpKind::Remove,
        kind => kind,
    };
    let selected = |list: &[E]| -> Vec<usize> {
        list.iter()
            .enumerate()
            .filter(|(_, element)| {
                filter.is_none_or(|filter| {
                    matches_element(filter, E::attribute(), &|name| element.lookup(name))
                })
            })
            .map(|(index, _)| index)
            .collect()
    };
    let mut touched = Vec::new();
    match (kind, filter, sub) {
        (PatchOpKind::Remove, None, None) if !value.is_null() => {
            let doomed = value::objects(value, what)?
                .into_iter()
                .map(|object| E::from_object(object, what))
                .collect::<Result<Vec<_>, _>>()?;
            list.retain(|element| !doomed.iter().any(|gone| gone.same_as(element)));
        }
        (PatchOpKind::Remove, None, None) => list.clear(),
        (PatchOpKind::Remove, Some(_), None) => {
            let indices = selected(list);
            let mut index = 0;
            list.retain(|_| {
                index += 1;
                !indices.contains(&(index - 1))
            });
        }
        (PatchOpKind::Remove, _, Some(sub)) => {
            let indices = selected(list);
            let mut index = 0;
            list.retain_mut(|element| {
                index += 1;
                !indices.contains(&(index - 1)) || element.clear(sub.name)
            });
        }
        (_, None, None) => {
            if kind == PatchOpKind::Replace {
                list.clear();
            }
            for object in value::objects(value, what)? {
                touched.push(add_object(list, object, what)?);
            }
        }
        (_, filter, Some(sub)) => {
            let indices = selected(list);
            let sub_what = format!("{what}.{}", sub.name);
            if indices.is_empty() {
                if kind == PatchOpKind::Replace && filter.is_some() {
                    return Err(no_match(what, filter));
                }
                let mut object = constraints(filter);
                object.insert(sub.name.to_owned(), value.clone());
                list.push(create(&object, what, filter)?);
                touched.push(list.len() - 1);
            }
            for index in indices {
                list[index].set(sub.name, value, &sub_what)?;
                touched.push(index);
            }
        }
        (_, Some(filter), None) => {
            let object = value::object(value, what)?;
            let indices = selected(list);
            if indices.is_empty() {
                if kind == PatchOpKind::Replace {
                    return Err(no_match(what, Some(filter)));
                }
                let mut created = constraints(Some(filter));
                created.extend(
                    object
                        .iter()
                        .map(|(key, value)| (key.clone(), value.clone())),
                );
                list.push(create(&created, what, Some(filter))?);
                touched.push(list.len() - 1);
            }
            for index in indices {
                merge(&mut list[index], object, what)?;
                touched.push(index);
            }
        }
    }
    keep_one_primary(list, &touched);
    Ok(())
}

/// A value that `add` creates because nothing matched its path: it needs its `value`, which
/// the filter's `eq` terms or the operation's value must give; otherwise nothing can be the
/// target (400 `noTarget`).
fn create<E: Element>(
    object: &Map<String, Value>,
    what: &str,
    filter: Option<&Filter>,
) -> Result<E, ScimError> {
    if value::get(object, "value").is_none_or(Value::is_null) {
        let why = no_match(what, filter);
        return Err(ScimError::no_target(format!(
            "{}, and one cannot be added without its value",
            why.detail()
        )));
    }
    E::from_object(object, what)
}

fn add_object<E: Element>(
    list: &mut Vec<E>,
    object: &Map<String, Value>,
    what: &str,
) -> Result<usize, ScimError> {
    let candidate = E::from_object(object, what)?;
    match list.iter().position(|element| element.same_as(&candidate)) {
        Some(index) => {
            merge(&mut list[index], object, what)?;
            Ok(index)
        }
        None => {
            list.push(candidate);
            Ok(list.len() - 1)
        }
    }
}

fn merge<E: Element>(
    element: &mut E,
    object: &Map<String, Value>,
    what: &str,
) -> Result<(), ScimError> {
    for (key, value) in object {
        if let Some(sub) = E::attribute().sub_attribute(key) {
            let sub_what = format!("{what}.{}", sub.name);
            if value.is_null() {
                if !element.clear(sub.name) {
                    return Err(ScimError::invalid_value(format!("{sub_what} is required")));
                }
            } else {
                element.set(sub.name, value, &sub_what)?;
            }
        }
    }
    Ok(())
}

fn keep_one_primary<E: Element>(list: &mut [E], touched: &[usize]) {
    if list.iter().filter(|element| element.is_primary()).count() <= 1 {
        return;
    }
    let keep = touched
        .iter()
        .rev()
        .copied()
        .find(|index| list[*index].is_primary())
        .or_else(|| list.iter().position(|element| element.is_primary()));
    for (index, element) in list.iter_mut().enumerate() {
        if Some(index) != keep {
            element.unset_primary();
        }
    }
}

/// The sub-attribute values a filter's `eq` terms fix (`type eq "work" and primary eq true`),
/// for a value that `add` creates through a filtered path.
fn constraints(filter: Option<&Filter>) -> Map<String, Value> {
    let mut object = Map::new();
    let mut collect = |filter: &Filter| {
        if let Filter::Compare {
            path,
            operator: Operator::Equal,
            value,
        } = filter
        {
            let value = match value {
                FilterValue::String(text) => Value::String(text.clone()),
                FilterValue::Boolean(flag) => Value::Bool(*flag),
                FilterValue::Number(number) => Value::Number(number.clone()),
                FilterValue::Null => Value::Null,
            };
            object.insert(path.name.clone(), value);
        }
    };
    match filter {
        Some(Filter::And(terms)) => terms.iter().for_each(&mut collect),
        Some(term) => collect(term),
        None => {}
    }
    object
}

fn no_match(what: &str, filter: Option<&Filter>) -> ScimError {
    match filter {
        Some(filter) => ScimError::no_target(format!("no value of {what} matches [{filter}]")),
        None => ScimError::no_target(format!("{what} has no values")),
    }
}
