//! The User resource as Flow keeps it: parsed from POST/PUT bodies, changed by PATCH
//! operations, rendered with its `id` and `meta`.

use std::fmt;

use chrono::{DateTime, FixedOffset, NaiveDate, NaiveDateTime, SecondsFormat};
use serde_json::{Map, Value, json};

use crate::error::ScimError;
use crate::filter::{ElementValue, Filter};
use crate::meta::{ResourceMeta, location};
use crate::multi::{self, Element, Values};
use crate::patch::{PatchOpKind, PatchOperation};
use crate::resource::{self, Patchable};
use crate::schema::{self, Attribute, Resolved, ResourceType};
use crate::value;
use crate::{CORE_USER_SCHEMA, ENTERPRISE_USER_SCHEMA, FLOW_USER_SCHEMA};

/// The most `emails` a user has; more is 400 `invalidValue` naming the cap.
pub const MAX_EMAILS: usize = 10;

/// A user as SCIM describes it, with the attributes Flow keeps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    /// `userName`: unique in the organization; Flow's users are e-mail addresses (see
    /// [`User::email`]).
    pub user_name: String,
    /// `name`.
    pub name: Name,
    /// `displayName`.
    pub display_name: Option<String>,
    /// `title`.
    pub title: Option<String>,
    /// `emails`.
    pub emails: Vec<Email>,
    /// `active`: false when the identity provider deactivated (Okta) or soft-deleted (Entra
    /// ID) the user.
    pub active: bool,
    /// `externalId`: the identity provider's id for the user.
    pub external_id: Option<String>,
    /// Enterprise extension `department`.
    pub department: Option<String>,
    /// Enterprise extension `employeeNumber`.
    pub employee_number: Option<String>,
    /// Enterprise extension `manager`.
    pub manager: Option<Manager>,
    /// Flow extension `startDate` (also read from the aliases in
    /// [`START_DATE_ALIASES`](crate::schema::START_DATE_ALIASES)).
    pub start_date: Option<StartDate>,
}

/// The components of a user's name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Name {
    /// `formatted`: the full name for display.
    pub formatted: Option<String>,
    /// `familyName`.
    pub family_name: Option<String>,
    /// `givenName`.
    pub given_name: Option<String>,
}

impl Name {
    /// Whether no component is set.
    pub fn is_empty(&self) -> bool {
        self.formatted.is_none() && self.family_name.is_none() && self.given_name.is_none()
    }

    fn field_mut(&mut self, sub: &str) -> Option<&mut Option<String>> {
        match sub {
            "formatted" => Some(&mut self.formatted),
            "familyName" => Some(&mut self.family_name),
            "givenName" => Some(&mut self.given_name),
            _ => None,
        }
    }
}

/// One of a user's e-mail addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Email {
    /// `value`: the address.
    pub value: String,
    /// `type`: `work`, `home`, `other`, or what the provider sends.
    pub kind: Option<String>,
    /// `primary`.
    pub primary: bool,
}

/// A user's manager (enterprise extension).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Manager {
    /// `value`: the manager's User id, as the identity provider knows it.
    pub value: Option<String>,
    /// `displayName`.
    pub display_name: Option<String>,
}

impl Manager {
    fn field_mut(&mut self, sub: &str) -> Option<&mut Option<String>> {
        match sub {
            "value" => Some(&mut self.value),
            "displayName" => Some(&mut self.display_name),
            _ => None,
        }
    }

    fn is_empty(&self) -> bool {
        self.value.is_none() && self.display_name.is_none()
    }
}

/// A start (hire) date as the provider sent it: a calendar date, or a timestamp (Entra ID's
/// `employeeHireDate` is one). The service resolves a timestamp in the organization's time
/// zone if it needs a day; [`StartDate::date`] gives the date in the timestamp's own offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartDate {
    /// `YYYY-MM-DD` (also a timestamp without an offset, of which only the date is kept).
    Date(NaiveDate),
    /// An RFC 3339 timestamp.
    Timestamp(DateTime<FixedOffset>),
}

impl StartDate {
    /// Reads `YYYY-MM-DD`, an RFC 3339 timestamp, or a timestamp without an offset.
    pub fn parse(text: &str) -> Option<Self> {
        let text = text.trim();
        if let Ok(date) = NaiveDate::parse_from_str(text, "%Y-%m-%d") {
            return Some(StartDate::Date(date));
        }
        if let Ok(at) = DateTime::parse_from_rfc3339(text) {
            return Some(StartDate::Timestamp(at));
        }
        NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M:%S%.f")
            .ok()
            .map(|at| StartDate::Date(at.date()))
    }

    /// The calendar date (a timestamp's date in its own offset).
    pub fn date(&self) -> NaiveDate {
        match self {
            StartDate::Date(date) => *date,
            StartDate::Timestamp(at) => at.date_naive(),
        }
    }
}

impl fmt::Display for StartDate {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StartDate::Date(date) => write!(formatter, "{}", date.format("%Y-%m-%d")),
            StartDate::Timestamp(at) => {
                formatter.write_str(&at.to_rfc3339_opts(SecondsFormat::AutoSi, true))
            }
        }
    }
}

impl User {
    /// A user with only a `userName`, active.
    pub fn new(user_name: impl Into<String>) -> Self {
        Self {
            user_name: user_name.into(),
            name: Name::default(),
            display_name: None,
            title: None,
            emails: Vec::new(),
            active: true,
            external_id: None,
            department: None,
            employee_number: None,
            manager: None,
            start_date: None,
        }
    }

    /// Parses a POST body. `userName` is required; `active` defaults to true; attributes Flow
    /// does not keep, read-only ones and nulls are ignored; a value of the wrong type is 400
    /// `invalidValue`, a body that is not a User object `invalidSyntax`.
    pub fn from_json(body: &Value) -> Result<Self, ScimError> {
        Self::read(body).map(|(user, _)| user)
    }

    /// Parses a PUT body that replaces this user: the body's attributes replace all of this
    /// user's (what it leaves out is cleared), except `active`, which keeps its value when
    /// the body leaves it out so that a profile update never reactivates anyone.
    pub fn replaced_by(&self, body: &Value) -> Result<Self, ScimError> {
        let (mut user, active_given) = Self::read(body)?;
        if !active_given {
            user.active = self.active;
        }
        Ok(user)
    }

    fn read(body: &Value) -> Result<(Self, bool), ScimError> {
        let mut user = Self::new(String::new());
        let given = resource::read_body(&mut user, body)?;
        if user.user_name.is_empty() {
            return Err(ScimError::invalid_value("userName is required"));
        }
        user.validate()?;
        Ok((user, given.iter().any(|path| path == "active")))
    }

    /// Applies PATCH operations in order and returns the changed user; all or nothing.
    pub fn apply_patch(&self, operations: &[PatchOperation]) -> Result<Self, ScimError> {
        resource::apply_operations(self, operations)
    }

    /// The e-mail address Flow identifies the user by: `userName` when it is an address
    /// (Okta's default, Entra ID's user principal name), otherwise the primary e-mail, then
    /// the work one, then the first; `userName` if there is none. The service validates it.
    pub fn email(&self) -> &str {
        if self.user_name.contains('@') {
            return &self.user_name;
        }
        self.emails
            .iter()
            .find(|email| email.primary)
            .or_else(|| {
                self.emails.iter().find(|email| {
                    email
                        .kind
                        .as_deref()
                        .is_some_and(|kind| kind.eq_ignore_ascii_case("work"))
                })
            })
            .or_else(|| self.emails.first())
            .map_or(&self.user_name, |email| &email.value)
    }

    /// The SCIM representation: `schemas` (with the extensions in use), `id`, the attributes
    /// that have values, and `meta`.
    pub fn to_json(&self, meta: &ResourceMeta, base_url: &str) -> Value {
        let mut body = Map::new();
        let mut schemas = vec![CORE_USER_SCHEMA];
        body.insert("id".into(), json!(meta.id));
        insert_text(&mut body, "externalId", &self.external_id);
        body.insert("userName".into(), json!(self.user_name));
        if !self.name.is_empty() {
            let mut name = Map::new();
            insert_text(&mut name, "formatted", &self.name.formatted);
            insert_text(&mut name, "familyName", &self.name.family_name);
            insert_text(&mut name, "givenName", &self.name.given_name);
            body.insert("name".into(), Value::Object(name));
        }
        insert_text(&mut body, "displayName", &self.display_name);
        insert_text(&mut body, "title", &self.title);
        body.insert("active".into(), json!(self.active));
        if !self.emails.is_empty() {
            let emails = self
                .emails
                .iter()
                .map(|email| {
                    let mut object = Map::new();
                    object.insert("value".into(), json!(email.value));
                    insert_text(&mut object, "type", &email.kind);
                    object.insert("primary".into(), json!(email.primary));
                    Value::Object(object)
                })
                .collect();
            body.insert("emails".into(), Value::Array(emails));
        }
        let mut enterprise = Map::new();
        insert_text(&mut enterprise, "department", &self.department);
        insert_text(&mut enterprise, "employeeNumber", &self.employee_number);
        if let Some(manager) = &self.manager {
            let mut object = Map::new();
            insert_text(&mut object, "value", &manager.value);
            insert_text(&mut object, "displayName", &manager.display_name);
            if let Some(id) = &manager.value {
                object.insert(
                    "$ref".into(),
                    json!(location(base_url, ResourceType::User, id)),
                );
            }
            enterprise.insert("manager".into(), Value::Object(object));
        }
        if !enterprise.is_empty() {
            schemas.push(ENTERPRISE_USER_SCHEMA);
            body.insert(ENTERPRISE_USER_SCHEMA.into(), Value::Object(enterprise));
        }
        if let Some(start_date) = &self.start_date {
            schemas.push(FLOW_USER_SCHEMA);
            body.insert(
                FLOW_USER_SCHEMA.into(),
                json!({"startDate": start_date.to_string()}),
            );
        }
        body.insert("schemas".into(), json!(schemas));
        body.insert("meta".into(), meta.to_json(ResourceType::User, base_url));
        Value::Object(body)
    }
}

fn insert_text(object: &mut Map<String, Value>, key: &str, value: &Option<String>) {
    if let Some(value) = value {
        object.insert(key.into(), json!(value));
    }
}

/// Sets or clears a single-valued string attribute.
fn set_text(
    field: &mut Option<String>,
    clearing: bool,
    value: &Value,
    what: &str,
) -> Result<(), ScimError> {
    *field = if clearing {
        None
    } else {
        value::text(value, what)?
    };
    Ok(())
}

/// A single-valued complex attribute whose sub-attributes are strings (`name`, `manager`).
trait TextFields {
    /// The field of the sub-attribute `sub` (canonical name), if Flow keeps it.
    fn field_mut(&mut self, sub: &str) -> Option<&mut Option<String>>;
}

impl TextFields for Name {
    fn field_mut(&mut self, sub: &str) -> Option<&mut Option<String>> {
        Name::field_mut(self, sub)
    }
}

impl TextFields for Manager {
    fn field_mut(&mut self, sub: &str) -> Option<&mut Option<String>> {
        Manager::field_mut(self, sub)
    }
}

/// Sets the sub-attributes that the object `value` names, leaving the others unchanged
/// (RFC 7644 §3.5.2.3: also what `replace` of a complex attribute does).
fn merge_complex<T: TextFields>(
    target: &mut T,
    attribute: &Attribute,
    value: &Value,
) -> Result<(), ScimError> {
    let object = value::object(value, attribute.name)?;
    for (key, inner) in object {
        if let Some(sub) = attribute.sub_attribute(key)
            && let Some(field) = target.field_mut(sub.name)
        {
            let what = format!("{}.{}", attribute.name, sub.name);
            set_text(field, inner.is_null(), inner, &what)?;
        }
    }
    Ok(())
}

impl Patchable for User {
    const RESOURCE: ResourceType = ResourceType::User;

    fn apply_attribute(
        &mut self,
        kind: PatchOpKind,
        resolved: &Resolved,
        filter: Option<&Filter>,
        value: Option<&Value>,
    ) -> Result<(), ScimError> {
        let attribute = resolved.attribute;
        let sub = resolved.sub_attribute;
        let value = value.unwrap_or(&Value::Null);
        if kind == PatchOpKind::Add && value.is_null() {
            return Ok(());
        }
        let clearing = kind == PatchOpKind::Remove || value.is_null();
        match attribute.name {
            "userName" => {
                if clearing {
                    return Err(ScimError::invalid_value(
                        "userName is required and cannot be removed",
                    ));
                }
                self.user_name = value::text(value, "userName")?
                    .ok_or_else(|| ScimError::invalid_value("userName must not be empty"))?;
            }
            "active" => {
                if clearing {
                    return Err(ScimError::invalid_value(
                        "active cannot be removed; replace it with true or false",
                    ));
                }
                self.active = value::boolean(value, "active")?.unwrap_or(self.active);
            }
            "displayName" => set_text(&mut self.display_name, clearing, value, "displayName")?,
            "title" => set_text(&mut self.title, clearing, value, "title")?,
            "externalId" => set_text(&mut self.external_id, clearing, value, "externalId")?,
            "department" => set_text(&mut self.department, clearing, value, "department")?,
            "employeeNumber" => {
                set_text(&mut self.employee_number, clearing, value, "employeeNumber")?
            }
            "startDate" => {
                self.start_date = if clearing {
                    None
                } else {
                    parse_start_date(value)?
                };
            }
            "name" => match sub {
                Some(sub) => {
                    if let Some(field) = self.name.field_mut(sub.name) {
                        set_text(field, clearing, value, &format!("name.{}", sub.name))?;
                    }
                }
                None if clearing => self.name = Name::default(),
                None => merge_complex(&mut self.name, attribute, value)?,
            },
            "manager" => {
                let mut manager = self.manager.take().unwrap_or_default();
                match (sub, value) {
                    (Some(sub), _) => {
                        if let Some(field) = manager.field_mut(sub.name) {
                            set_text(field, clearing, value, &format!("manager.{}", sub.name))?;
                        }
                    }
                    (None, _) if clearing => manager = Manager::default(),
                    // Entra ID sends the manager as the bare id string.
                    (None, Value::String(_)) => {
                        manager = Manager {
                            value: value::text(value, "manager")?,
                            display_name: None,
                        }
                    }
                    // A one-element array of the manager object: also seen from Entra ID.
                    (None, Value::Array(items)) if items.len() == 1 => {
                        merge_complex(&mut manager, attribute, &items[0])?
                    }
                    (None, _) => merge_complex(&mut manager, attribute, value)?,
                }
                self.manager = (!manager.is_empty()).then_some(manager);
            }
            "emails" => {
                let mut emails = Values::new(std::mem::take(&mut self.emails), Some(MAX_EMAILS));
                multi::apply(&mut emails, kind, sub, filter, Some(value), "emails")?;
                self.emails = emails.into_vec();
            }
            _ => {}
        }
        Ok(())
    }

    fn validate(&self) -> Result<(), ScimError> {
        if self.user_name.trim().is_empty() {
            return Err(ScimError::invalid_value("userName is required"));
        }
        if self.emails.len() > MAX_EMAILS {
            return Err(multi::too_many_values("emails", MAX_EMAILS));
        }
        Ok(())
    }
}

fn parse_start_date(value: &Value) -> Result<Option<StartDate>, ScimError> {
    match value::text(value, "startDate")? {
        None => Ok(None),
        Some(text) => StartDate::parse(&text).map(Some).ok_or_else(|| {
            ScimError::invalid_value(format!(
                "startDate must be a date (YYYY-MM-DD) or an RFC 3339 timestamp, not {}",
                Value::String(text)
            ))
        }),
    }
}

impl Element for Email {
    fn attribute() -> &'static Attribute {
        schema::USER
            .attribute("emails")
            .expect("the User schema declares emails")
    }

    fn from_object(object: &Map<String, Value>, what: &str) -> Result<Self, ScimError> {
        let address = value::get(object, "value").unwrap_or(&Value::Null);
        let address = value::text(address, &format!("{what}.value"))?
            .ok_or_else(|| ScimError::invalid_value(format!("{what}.value is required")))?;
        let kind = match value::get(object, "type") {
            Some(kind) => value::text(kind, &format!("{what}.type"))?,
            None => None,
        };
        let primary = match value::get(object, "primary") {
            Some(primary) => value::boolean(primary, &format!("{what}.primary"))?,
            None => None,
        };
        Ok(Self {
            value: address,
            kind,
            primary: primary.unwrap_or(false),
        })
    }

    fn set(&mut self, sub: &str, value: &Value, what: &str) -> Result<(), ScimError> {
        match sub {
            "value" => {
                self.value = value::text(value, what)?
                    .ok_or_else(|| ScimError::invalid_value(format!("{what} must not be empty")))?;
            }
            "type" => self.kind = value::text(value, what)?,
            "primary" => self.primary = value::boolean(value, what)?.unwrap_or(false),
            _ => {}
        }
        Ok(())
    }

    fn clear(&mut self, sub: &str) -> bool {
        match sub {
            "value" => return false,
            "type" => self.kind = None,
            "primary" => self.primary = false,
            _ => {}
        }
        true
    }

    fn lookup(&self, sub: &str) -> Option<ElementValue<'_>> {
        match sub {
            "value" => Some(ElementValue::Text(&self.value)),
            "type" => self.kind.as_deref().map(ElementValue::Text),
            "primary" => Some(ElementValue::Boolean(self.primary)),
            _ => None,
        }
    }

    fn value(&self) -> &str {
        &self.value
    }

    fn key_of(value: &str) -> String {
        value.to_lowercase()
    }

    fn is_primary(&self) -> bool {
        self.primary
    }

    fn unset_primary(&mut self) {
        self.primary = false;
    }
}

#[cfg(test)]
mod tests;
