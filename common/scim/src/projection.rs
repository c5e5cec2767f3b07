//! `attributes` and `excludedAttributes` (RFC 7644 §3.4.2.5, §3.9) applied to a rendered
//! resource. Names are case-insensitive and may be sub-attributes (`name.givenName`,
//! `emails.value`), URN-qualified extension attributes, or a whole extension by its URN.
//! What RFC 7643 §7 marks `returned: always` — `id` — is kept whatever the parameters say,
//! and so is `schemas`, without which the representation is not a resource; `meta` is
//! returned by default like any other attribute. Names Flow does not keep are ignored.
//! Both parameters together: `attributes` first, then `excludedAttributes` from the rest.

use serde_json::{Map, Value};

use crate::error::ScimError;
use crate::filter::AttrPath;
use crate::schema::{self, Container, ResourceType, Returned};

/// One selected attribute, in canonical spelling.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Selector {
    /// The extension URN, or `None` for core and common attributes.
    extension: Option<&'static str>,
    /// The attribute, or `None` for a whole extension.
    attribute: Option<&'static str>,
    /// The sub-attribute, when one is named.
    sub_attribute: Option<&'static str>,
}

/// The parsed `attributes` / `excludedAttributes` of one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Projection {
    resource: ResourceType,
    only: Option<Vec<Selector>>,
    except: Vec<Selector>,
}

impl Projection {
    /// Everything returned by default.
    pub fn all(resource: ResourceType) -> Self {
        Self {
            resource,
            only: None,
            except: Vec::new(),
        }
    }

    /// Parses the two query parameters (comma-separated lists; either may be absent or
    /// empty). A malformed name is 400 without a `scimType` (the RFC defines none for query
    /// parameters); names Flow does not keep are ignored.
    pub fn parse(
        resource: ResourceType,
        attributes: Option<&str>,
        excluded_attributes: Option<&str>,
    ) -> Result<Self, ScimError> {
        let only = match attributes.map(str::trim).filter(|list| !list.is_empty()) {
            Some(list) => Some(selectors(resource, list, "attributes")?),
            None => None,
        };
        let except = match excluded_attributes {
            Some(list) => selectors(resource, list, "excludedAttributes")?,
            None => Vec::new(),
        };
        Ok(Self {
            resource,
            only,
            except,
        })
    }

    /// Whether the top-level attribute `name` (canonical, e.g. `members`) can appear in the
    /// result, so the service may skip loading it (Entra ID reads groups with
    /// `excludedAttributes=members`).
    pub fn includes(&self, name: &str) -> bool {
        let named =
            |selector: &Selector| selector.extension.is_none() && selector.attribute == Some(name);
        let selected = self.only.as_ref().is_none_or(|only| only.iter().any(named));
        let excluded = self
            .except
            .iter()
            .any(|selector| named(selector) && selector.sub_attribute.is_none());
        selected && !excluded
    }

    /// Whether `attributes` names the top-level attribute `name` (canonical, e.g. `members`)
    /// or one of its sub-attributes, and `excludedAttributes` does not exclude it: for what a
    /// service returns only when asked (a list's group members).
    pub fn names(&self, name: &str) -> bool {
        let named =
            |selector: &Selector| selector.extension.is_none() && selector.attribute == Some(name);
        self.only
            .as_ref()
            .is_some_and(|only| only.iter().any(named))
            && self.includes(name)
    }

    /// The same projection with the top-level attribute `name` (canonical) excluded too.
    pub fn excluding(mut self, name: &'static str) -> Self {
        self.except.push(Selector {
            extension: None,
            attribute: Some(name),
            sub_attribute: None,
        });
        self
    }

    /// Applies the projection to a resource rendered by this crate.
    pub fn apply(&self, mut resource: Value) -> Value {
        let Some(object) = resource.as_object_mut() else {
            return resource;
        };
        let always = always_returned(self.resource);
        if let Some(only) = &self.only {
            let keys: Vec<String> = object.keys().cloned().collect();
            for key in keys {
                if key == "schemas" || always.contains(&key.as_str()) {
                    continue;
                }
                let keep = retain(object.get_mut(&key), &key, only, self.resource);
                if !keep {
                    object.remove(&key);
                }
            }
        }
        for selector in &self.except {
            exclude(object, selector, &always);
        }
        self.leave_out_unrequested(object);
        let present: Vec<String> = object.keys().cloned().collect();
        if let Some(Value::Array(schemas)) = object.get_mut("schemas") {
            schemas.retain(|urn| {
                urn.as_str().is_none_or(|urn| {
                    urn == self.resource.schema().id || present.iter().any(|key| key == urn)
                })
            });
        }
        resource
    }
}

impl Projection {
    /// Removes the sub-attributes returned only on request (`members.display`) that
    /// `attributes` does not name.
    fn leave_out_unrequested(&self, object: &mut Map<String, Value>) {
        for attribute in self.resource.schema().attributes {
            for sub in attribute.sub_attributes {
                if sub.returned != Returned::Request {
                    continue;
                }
                let named = self.only.as_ref().is_some_and(|only| {
                    only.iter().any(|selector| {
                        selector.extension.is_none()
                            && selector.attribute == Some(attribute.name)
                            && selector.sub_attribute == Some(sub.name)
                    })
                });
                if named {
                    continue;
                }
                match object.get_mut(attribute.name) {
                    Some(Value::Array(values)) => {
                        for value in values {
                            if let Some(value) = value.as_object_mut() {
                                value.remove(sub.name);
                            }
                        }
                    }
                    Some(Value::Object(value)) => {
                        value.remove(sub.name);
                    }
                    _ => {}
                }
            }
        }
    }
}

fn always_returned(resource: ResourceType) -> Vec<&'static str> {
    resource
        .schema()
        .attributes
        .iter()
        .chain(schema::COMMON_ATTRIBUTES)
        .filter(|attribute| attribute.returned == Returned::Always)
        .map(|attribute| attribute.name)
        .collect()
}

fn selectors(
    resource: ResourceType,
    list: &str,
    parameter: &str,
) -> Result<Vec<Selector>, ScimError> {
    let mut selectors = Vec::new();
    for name in list
        .split(',')
        .map(str::trim)
        .filter(|name| !name.is_empty())
    {
        if let Some(extension) = resource
            .extensions()
            .iter()
            .find(|extension| extension.id.eq_ignore_ascii_case(name))
        {
            selectors.push(Selector {
                extension: Some(extension.id),
                attribute: None,
                sub_attribute: None,
            });
            continue;
        }
        let path = AttrPath::from_word(name, 1)
            .map_err(|error| ScimError::bad_request(format!("{parameter}: {}", error.message)))?;
        if let Ok(resolved) = schema::resolve(
            resource,
            path.urn.as_deref(),
            &path.name,
            path.sub_attribute.as_deref(),
        ) {
            selectors.push(Selector {
                extension: match resolved.container {
                    Container::Core => None,
                    Container::Extension(extension) => Some(extension.id),
                },
                attribute: Some(resolved.attribute.name),
                sub_attribute: resolved.sub_attribute.map(|sub| sub.name),
            });
        }
    }
    Ok(selectors)
}

/// Trims the value at top-level `key` to what `only` selects; false when nothing is left.
fn retain(value: Option<&mut Value>, key: &str, only: &[Selector], resource: ResourceType) -> bool {
    let Some(value) = value else {
        return false;
    };
    if let Some(extension) = resource
        .extensions()
        .iter()
        .find(|extension| extension.id == key)
    {
        let selected: Vec<&Selector> = only
            .iter()
            .filter(|selector| selector.extension == Some(extension.id))
            .collect();
        if selected.iter().any(|selector| selector.attribute.is_none()) {
            return true;
        }
        let Some(inner) = value.as_object_mut() else {
            return false;
        };
        let inner_keys: Vec<String> = inner.keys().cloned().collect();
        for inner_key in inner_keys {
            let subs: Vec<&Selector> = selected
                .iter()
                .copied()
                .filter(|selector| selector.attribute == Some(inner_key.as_str()))
                .collect();
            let keep = keep_subs(inner.get_mut(&inner_key), &subs);
            if !keep {
                inner.remove(&inner_key);
            }
        }
        return !inner.is_empty();
    }
    let subs: Vec<&Selector> = only
        .iter()
        .filter(|selector| selector.extension.is_none() && selector.attribute == Some(key))
        .collect();
    keep_subs(Some(value), &subs)
}

/// Keeps an attribute that `subs` select: whole when one selects it without a sub-attribute,
/// otherwise only the selected sub-attributes (of the object, or of each array element).
fn keep_subs(value: Option<&mut Value>, subs: &[&Selector]) -> bool {
    let Some(value) = value else {
        return false;
    };
    if subs.is_empty() {
        return false;
    }
    if subs.iter().any(|selector| selector.sub_attribute.is_none()) {
        return true;
    }
    let wanted: Vec<&str> = subs
        .iter()
        .filter_map(|selector| selector.sub_attribute)
        .collect();
    let trim = |object: &mut Map<String, Value>| {
        object.retain(|key, _| wanted.contains(&key.as_str()));
        !object.is_empty()
    };
    match value {
        Value::Object(object) => trim(object),
        Value::Array(items) => {
            items.retain_mut(|item| item.as_object_mut().is_some_and(trim));
            !items.is_empty()
        }
        _ => false,
    }
}

fn exclude(object: &mut Map<String, Value>, selector: &Selector, always: &[&str]) {
    let container = match selector.extension {
        Some(urn) => {
            let Some(attribute) = selector.attribute else {
                object.remove(urn);
                return;
            };
            let Some(Value::Object(inner)) = object.get_mut(urn) else {
                return;
            };
            remove_from(inner, attribute, selector.sub_attribute);
            if inner.is_empty() {
                object.remove(urn);
            }
            return;
        }
        None => object,
    };
    let Some(attribute) = selector.attribute else {
        return;
    };
    if always.contains(&attribute) {
        return;
    }
    remove_from(container, attribute, selector.sub_attribute);
}

fn remove_from(object: &mut Map<String, Value>, attribute: &str, sub: Option<&str>) {
    let Some(sub) = sub else {
        object.remove(attribute);
        return;
    };
    let empty = match object.get_mut(attribute) {
        Some(Value::Object(inner)) => {
            inner.remove(sub);
            inner.is_empty()
        }
        Some(Value::Array(items)) => {
            for item in items.iter_mut() {
                if let Some(inner) = item.as_object_mut() {
                    inner.remove(sub);
                }
            }
            items.retain(|item| item.as_object().is_none_or(|inner| !inner.is_empty()));
            items.is_empty()
        }
        _ => false,
    };
    if empty {
        object.remove(attribute);
    }
}

#[cfg(test)]
mod tests {
    use chrono::{TimeZone, Utc};
    use serde_json::json;

    use super::*;
    use crate::{Group, Member, ResourceMeta, StartDate, User};

    fn rendered_user() -> Value {
        let mut user = User::new("ann@example.com");
        user.name.given_name = Some("Ann".into());
        user.name.family_name = Some("Lee".into());
        user.display_name = Some("Ann Lee".into());
        user.emails = vec![crate::Email {
            value: "ann@example.com".into(),
            kind: Some("work".into()),
            primary: true,
        }];
        user.department = Some("Sales".into());
        user.employee_number = Some("7".into());
        user.start_date = StartDate::parse("2026-04-01");
        user.to_json(&meta("usr_1"), "https://flow.example.com")
    }

    fn meta(id: &str) -> ResourceMeta {
        ResourceMeta {
            id: id.into(),
            created: Utc.with_ymd_and_hms(2026, 3, 1, 0, 0, 0).unwrap(),
            last_modified: Utc.with_ymd_and_hms(2026, 3, 1, 0, 0, 0).unwrap(),
            version: None,
        }
    }

    fn project(attributes: Option<&str>, excluded: Option<&str>) -> Value {
        Projection::parse(ResourceType::User, attributes, excluded)
            .unwrap()
            .apply(rendered_user())
    }

    #[test]
    fn no_parameters_change_nothing() {
        assert_eq!(project(None, None), rendered_user());
        assert_eq!(project(Some(" "), Some("")), rendered_user());
    }

    #[test]
    fn attributes_keep_id_and_schemas_and_what_is_named() {
        assert_eq!(
            project(Some("USERNAME, name.givenName"), None),
            json!({
                "schemas": ["urn:ietf:params:scim:schemas:core:2.0:User"],
                "id": "usr_1",
                "userName": "ann@example.com",
                "name": {"givenName": "Ann"}
            })
        );
        assert_eq!(
            project(Some("emails.value,meta.location,nickName"), None),
            json!({
                "schemas": ["urn:ietf:params:scim:schemas:core:2.0:User"],
                "id": "usr_1",
                "emails": [{"value": "ann@example.com"}],
                "meta": {"location": "https://flow.example.com/scim/v2/Users/usr_1"}
            })
        );
    }

    #[test]
    fn extension_attributes_and_whole_extensions() {
        assert_eq!(
            project(
                Some("urn:ietf:params:scim:schemas:extension:enterprise:2.0:User:department"),
                None
            ),
            json!({
                "schemas": [
                    "urn:ietf:params:scim:schemas:core:2.0:User",
                    "urn:ietf:params:scim:schemas:extension:enterprise:2.0:User"
                ],
                "id": "usr_1",
                "urn:ietf:params:scim:schemas:extension:enterprise:2.0:User": {"department": "Sales"}
            })
        );
        let whole = project(
            Some("userName,urn:ietf:params:scim:schemas:extension:enterprise:2.0:user"),
            None,
        );
        assert_eq!(
            whole["urn:ietf:params:scim:schemas:extension:enterprise:2.0:User"],
            json!({"department": "Sales", "employeeNumber": "7"})
        );
        let excluded = project(
            None,
            Some(
                "urn:ietf:params:scim:schemas:extension:flow:2.0:User,urn:ietf:params:scim:schemas:extension:enterprise:2.0:User:department,urn:ietf:params:scim:schemas:extension:enterprise:2.0:User:employeeNumber",
            ),
        );
        assert!(
            excluded
                .get("urn:ietf:params:scim:schemas:extension:flow:2.0:User")
                .is_none()
        );
        assert!(
            excluded
                .get("urn:ietf:params:scim:schemas:extension:enterprise:2.0:User")
                .is_none()
        );
        assert_eq!(
            excluded["schemas"],
            json!(["urn:ietf:params:scim:schemas:core:2.0:User"])
        );
    }

    #[test]
    fn excluded_attributes_never_remove_id() {
        let projected = project(None, Some("id,emails,name.familyName,meta,schemas"));
        assert_eq!(projected["id"], json!("usr_1"));
        assert!(projected.get("schemas").is_some());
        assert!(projected.get("emails").is_none());
        assert!(projected.get("meta").is_none());
        assert_eq!(projected["name"], json!({"givenName": "Ann"}));
    }

    #[test]
    fn both_parameters_apply_attributes_then_exclusions() {
        assert_eq!(
            project(Some("name"), Some("name.givenName")),
            json!({
                "schemas": ["urn:ietf:params:scim:schemas:core:2.0:User"],
                "id": "usr_1",
                "name": {"familyName": "Lee"}
            })
        );
    }

    #[test]
    fn entra_reads_groups_without_members() {
        let group = Group {
            external_id: None,
            members: vec![Member {
                value: "usr_1".into(),
                display: None,
            }],
            ..Group::new("Sales")
        };
        let projection = Projection::parse(ResourceType::Group, None, Some("members")).unwrap();
        assert!(!projection.includes("members"));
        assert!(projection.includes("displayName"));
        let projected = projection.apply(group.to_json(&meta("grp_1"), "https://flow.example.com"));
        assert!(projected.get("members").is_none());
        assert_eq!(projected["displayName"], json!("Sales"));
        let only_name = Projection::parse(ResourceType::Group, Some("displayName"), None).unwrap();
        assert!(!only_name.includes("members"));
        let member_ids =
            Projection::parse(ResourceType::Group, Some("members.value"), None).unwrap();
        assert!(member_ids.includes("members"));
        assert!(Projection::all(ResourceType::Group).includes("members"));
    }

    #[test]
    fn malformed_names_are_400() {
        let error =
            Projection::parse(ResourceType::User, Some("userName,name..x"), None).unwrap_err();
        assert_eq!(error.status(), 400);
        assert_eq!(error.scim_type(), None);
        assert!(
            error
                .detail()
                .starts_with("attributes: 'name..x' is not an attribute path"),
            "{error}"
        );
    }

    #[test]
    fn members_are_named_only_when_attributes_lists_them() {
        let parse = |attributes, excluded| {
            Projection::parse(ResourceType::Group, attributes, excluded).unwrap()
        };
        assert!(!parse(None, None).names("members"));
        assert!(parse(None, None).includes("members"));
        assert!(parse(Some("displayName,members"), None).names("members"));
        assert!(parse(Some("members.value"), None).names("members"));
        assert!(!parse(Some("displayName"), None).names("members"));
        assert!(!parse(Some("members"), Some("members")).names("members"));
        let without = parse(None, None).excluding("members");
        assert!(!without.includes("members"));
        let group = json!({"schemas": [], "id": "grp_1", "displayName": "Sales", "members": []});
        assert_eq!(
            without.apply(group),
            json!({"schemas": [], "id": "grp_1", "displayName": "Sales"})
        );
    }
}
