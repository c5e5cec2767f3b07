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
//!   `value` removes the value itself. A value whose `value` is changed to one another value
//!   already has replaces that other value (a list holds each value once).
//! - At most one value is `primary`: the one the operation set last wins.
//!
//! Every operation is linear in the values it carries and, at worst, in the list's length:
//! the list ([`Values`]) keeps an index by `value`, so adding, removing by value and the
//! filters providers send (`members[value eq "…"]`, also `or`-ed) are lookups, not scans,
//! however large a group is. Other filters scan the list; what they may scan in one request
//! is bounded ([`MAX_SCANNED_VALUES`], 400 `tooMany` past it).

use std::collections::HashMap;

use serde_json::{Map, Value};

use crate::error::ScimError;
use crate::filter::{ElementValue, Filter, FilterValue, Operator, matches_element};
use crate::patch::PatchOpKind;
use crate::schema::Attribute;
use crate::value;

/// The most values of a multi-valued attribute that the value filters of one request (other
/// than `value eq "…"`, which are lookups) may examine in all; past it the request is 400
/// `tooMany`. A filtered operation on a list of 10,000 examines 10,000.
pub const MAX_SCANNED_VALUES: usize = 1_000_000;

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
    /// The `value` sub-attribute.
    fn value(&self) -> &str;
    /// What two values that are the same one share (an `add` of it updates instead of
    /// duplicating), from a `value`: as is when `value` is case-exact, else lower-cased, as
    /// value filters compare it.
    fn key_of(value: &str) -> String;
    /// Whether it is the primary value.
    fn is_primary(&self) -> bool {
        false
    }
    /// Makes it not primary.
    fn unset_primary(&mut self) {}
}

/// The values of a multi-valued attribute while operations change them: in order, each
/// `value` once, indexed by it. Removal leaves a hole, so indexes stay valid and nothing
/// shifts.
#[derive(Debug, Clone)]
pub(crate) struct Values<E> {
    slots: Vec<Option<E>>,
    index: HashMap<String, usize>,
    /// The values the request's scanning filters examined so far.
    scanned: usize,
    /// At most this many values: past it, 400 `invalidValue` naming the cap.
    cap: Option<usize>,
}

impl<E: Element> Values<E> {
    /// The list, a later duplicate of a value dropped. `cap` bounds how many values the list
    /// may hold after each operation.
    pub(crate) fn new(list: Vec<E>, cap: Option<usize>) -> Self {
        let mut values = Self {
            slots: Vec::with_capacity(list.len()),
            index: HashMap::with_capacity(list.len()),
            scanned: 0,
            cap,
        };
        for element in list {
            let key = E::key_of(element.value());
            if !values.index.contains_key(&key) {
                values.index.insert(key, values.slots.len());
                values.slots.push(Some(element));
            }
        }
        values
    }

    /// The values, in order.
    pub(crate) fn into_vec(self) -> Vec<E> {
        self.slots.into_iter().flatten().collect()
    }

    /// How many values there are.
    pub(crate) fn len(&self) -> usize {
        self.index.len()
    }

    fn clear(&mut self) {
        self.slots.clear();
        self.index.clear();
    }

    fn remove(&mut self, slot: usize) {
        if let Some(element) = self.slots[slot].take() {
            self.index.remove(&E::key_of(element.value()));
        }
    }

    fn push(&mut self, element: E, what: &str) -> Result<usize, ScimError> {
        self.check_cap(1, what)?;
        let slot = self.slots.len();
        self.index.insert(E::key_of(element.value()), slot);
        self.slots.push(Some(element));
        Ok(slot)
    }

    fn check_cap(&self, more: usize, what: &str) -> Result<(), ScimError> {
        match self.cap {
            Some(cap) if self.len() + more > cap => Err(too_many_values(what, cap)),
            _ => Ok(()),
        }
    }

    /// Changes the value in `slot` with `change`, keeping the index right when its `value`
    /// changed (and dropping another value that had the new one).
    fn change<T>(
        &mut self,
        slot: usize,
        change: impl FnOnce(&mut E) -> Result<T, ScimError>,
    ) -> Result<T, ScimError> {
        let Some(element) = self.slots[slot].as_mut() else {
            return Err(ScimError::internal());
        };
        let before = E::key_of(element.value());
        let result = change(element)?;
        let after = E::key_of(element.value());
        if after != before {
            self.index.remove(&before);
            if let Some(other) = self.index.insert(after, slot)
                && other != slot
            {
                self.slots[other] = None;
            }
        }
        Ok(result)
    }

    /// The slots of the values `filter` selects (every value without one), in order.
    fn select(&mut self, filter: Option<&Filter>) -> Result<Vec<usize>, ScimError> {
        let Some(filter) = filter else {
            return Ok(self.live().collect());
        };
        if let Some(keys) = value_equalities::<E>(filter) {
            let mut slots: Vec<usize> = keys
                .iter()
                .filter_map(|key| self.index.get(key).copied())
                .collect();
            slots.sort_unstable();
            slots.dedup();
            return Ok(slots);
        }
        self.scanned += self.len();
        if self.scanned > MAX_SCANNED_VALUES {
            return Err(ScimError::too_many(format!(
                "the request's value filters would examine more than {MAX_SCANNED_VALUES} values; \
                 select values with [value eq \"…\"] or send fewer operations"
            )));
        }
        Ok(self
            .slots
            .iter()
            .enumerate()
            .filter_map(|(slot, element)| {
                element
                    .as_ref()
                    .filter(|element| {
                        matches_element(filter, E::attribute(), &|name| element.lookup(name))
                    })
                    .map(|_| slot)
            })
            .collect())
    }

    fn live(&self) -> impl Iterator<Item = usize> + '_ {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(slot, element)| element.as_ref().map(|_| slot))
    }
}

/// 400 `invalidValue`: `what` holds at most `cap` values.
pub(crate) fn too_many_values(what: &str, cap: usize) -> ScimError {
    ScimError::invalid_value(format!("{what} holds at most {cap} values"))
}

/// The keys a filter of only `value eq "…"` terms (joined by `or`) selects, so the values are
/// looked up rather than scanned; `None` for any other filter.
fn value_equalities<E: Element>(filter: &Filter) -> Option<Vec<String>> {
    match filter {
        Filter::Compare {
            path,
            operator: Operator::Equal,
            value: FilterValue::String(text),
        } if path.name == "value" && path.sub_attribute.is_none() => Some(vec![E::key_of(text)]),
        Filter::Or(terms) => terms.iter().try_fold(Vec::new(), |mut keys, term| {
            keys.extend(value_equalities::<E>(term)?);
            Some(keys)
        }),
        _ => None,
    }
}

/// Applies one operation to the values. `sub` is the sub-attribute the path names, `filter`
/// the checked value filter, `what` the attribute's name for messages.
pub(crate) fn apply<E: Element>(
    values: &mut Values<E>,
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
    let mut touched = Vec::new();
    match (kind, filter, sub) {
        (PatchOpKind::Remove, None, None) if !value.is_null() => {
            for object in value::objects(value, what)? {
                let gone = E::from_object(object, what)?;
                if let Some(slot) = values.index.get(&E::key_of(gone.value())).copied() {
                    values.remove(slot);
                }
            }
        }
        (PatchOpKind::Remove, None, None) => values.clear(),
        (PatchOpKind::Remove, Some(_), None) => {
            for slot in values.select(filter)? {
                values.remove(slot);
            }
        }
        (PatchOpKind::Remove, _, Some(sub)) => {
            for slot in values.select(filter)? {
                if !values.change(slot, |element| Ok(element.clear(sub.name)))? {
                    values.remove(slot);
                }
            }
        }
        (_, None, None) => {
            if kind == PatchOpKind::Replace {
                values.clear();
            }
            for object in value::objects(value, what)? {
                touched.push(add_object(values, object, what)?);
            }
        }
        (_, filter, Some(sub)) => {
            let slots = values.select(filter)?;
            let sub_what = format!("{what}.{}", sub.name);
            if slots.is_empty() {
                if kind == PatchOpKind::Replace && filter.is_some() {
                    return Err(no_match(what, filter));
                }
                let mut object = constraints(filter);
                object.insert(sub.name.to_owned(), value.clone());
                touched.push(add_new(values, create(&object, what, filter)?, what)?);
            }
            for slot in slots {
                values.change(slot, |element| element.set(sub.name, value, &sub_what))?;
                touched.push(slot);
            }
        }
        (_, Some(filter), None) => {
            let object = value::object(value, what)?;
            let slots = values.select(Some(filter))?;
            if slots.is_empty() {
                if kind == PatchOpKind::Replace {
                    return Err(no_match(what, Some(filter)));
                }
                let mut created = constraints(Some(filter));
                created.extend(
                    object
                        .iter()
                        .map(|(key, value)| (key.clone(), value.clone())),
                );
                touched.push(add_new(
                    values,
                    create(&created, what, Some(filter))?,
                    what,
                )?);
            }
            for slot in slots {
                values.change(slot, |element| merge(element, object, what))?;
                touched.push(slot);
            }
        }
    }
    keep_one_primary(values, &touched);
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

/// Adds a value created through a filtered path; one with the same `value` is replaced by it.
fn add_new<E: Element>(values: &mut Values<E>, element: E, what: &str) -> Result<usize, ScimError> {
    if let Some(slot) = values.index.get(&E::key_of(element.value())).copied() {
        values.remove(slot);
    }
    values.push(element, what)
}

fn add_object<E: Element>(
    values: &mut Values<E>,
    object: &Map<String, Value>,
    what: &str,
) -> Result<usize, ScimError> {
    let candidate = E::from_object(object, what)?;
    match values.index.get(&E::key_of(candidate.value())).copied() {
        Some(slot) => {
            values.change(slot, |element| merge(element, object, what))?;
            Ok(slot)
        }
        None => values.push(candidate, what),
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

/// When the operation made a value primary, the last one it made primary stays so and no
/// other is (a list read from a body is all touched, so this also settles its primaries).
fn keep_one_primary<E: Element>(values: &mut Values<E>, touched: &[usize]) {
    let Some(keep) = touched.iter().rev().copied().find(|slot| {
        values.slots[*slot]
            .as_ref()
            .is_some_and(Element::is_primary)
    }) else {
        return;
    };
    for (slot, element) in values.slots.iter_mut().enumerate() {
        if let Some(element) = element
            && slot != keep
            && element.is_primary()
        {
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
