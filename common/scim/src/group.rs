//! The Group resource: a named set of users, as identity providers push them (Okta's Group
//! Push, Entra ID's group assignment). Members are users only.

use std::collections::HashSet;

use serde_json::{Map, Value, json};

use crate::CORE_GROUP_SCHEMA;
use crate::error::ScimError;
use crate::filter::{ElementValue, Filter};
use crate::meta::{ResourceMeta, location};
use crate::multi::{self, Element, Values};
use crate::patch::{PatchOpKind, PatchOperation};
use crate::resource::{self, Patchable};
use crate::schema::{self, Attribute, Resolved, ResourceType};
use crate::value;

/// The most members a `POST` or `PUT` of a group carries; more is 400 `invalidValue` naming the
/// cap. A group may have more: PATCH `add` them, in requests of at most
/// [`MAX_PATCH_VALUES`](crate::patch::MAX_PATCH_VALUES) values.
pub const MAX_MEMBERS_PER_WRITE: usize = 1000;

/// A group as SCIM describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    /// `displayName`: required.
    pub display_name: String,
    /// `externalId`: the identity provider's id for the group.
    pub external_id: Option<String>,
    /// `members`: users, by their SCIM id, each at most once.
    pub members: Vec<Member>,
}

/// One member of a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// `value`: the member's User id (as this service gave it; the service checks it exists
    /// in the organization).
    pub value: String,
    /// `display`: the member's name as the provider sent it, or as the service renders it.
    pub display: Option<String>,
}

/// What a change did to a group's membership, so the service writes only the difference.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MembershipChanges {
    /// Members that were not in the group before, in the order they now appear.
    pub added: Vec<Member>,
    /// User ids that were members and no longer are.
    pub removed: Vec<String>,
}

impl MembershipChanges {
    /// Whether the membership is unchanged.
    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.removed.is_empty()
    }
}

impl Group {
    /// A group with a name and no members.
    pub fn new(display_name: impl Into<String>) -> Self {
        Self {
            display_name: display_name.into(),
            external_id: None,
            members: Vec::new(),
        }
    }

    /// Parses a POST body, or a PUT body (which replaces the whole group, members included).
    /// `displayName` is required; attributes Flow does not keep, read-only ones and nulls are
    /// ignored; a member that is not a user (`type` other than `User`) is 400 `invalidValue`.
    /// More than [`MAX_MEMBERS_PER_WRITE`] members is 400 `invalidValue`.
    pub fn from_json(body: &Value) -> Result<Self, ScimError> {
        let mut draft = Draft::from(Self::new(String::new()));
        resource::read_body(&mut draft, body)?;
        let group = Self::from(draft);
        if group.display_name.is_empty() {
            return Err(ScimError::invalid_value("displayName is required"));
        }
        if group.members.len() > MAX_MEMBERS_PER_WRITE {
            return Err(ScimError::invalid_value(format!(
                "members: a POST or PUT carries at most {MAX_MEMBERS_PER_WRITE} members \
                 ({} sent); add more with PATCH",
                group.members.len()
            )));
        }
        Ok(group)
    }

    /// Applies PATCH operations in order and returns the changed group; all or nothing. Each
    /// operation costs what it carries, however many members the group has (members are
    /// indexed by id for the whole request).
    pub fn apply_patch(&self, operations: &[PatchOperation]) -> Result<Self, ScimError> {
        resource::apply_operations(&Draft::from(self.clone()), operations).map(Self::from)
    }

    /// The members `after` has that this group had not, and those it lost.
    pub fn membership_changes(&self, after: &Group) -> MembershipChanges {
        let before: HashSet<&str> = self.members.iter().map(|m| m.value.as_str()).collect();
        let now: HashSet<&str> = after.members.iter().map(|m| m.value.as_str()).collect();
        let had = |value: &str| before.contains(value);
        let has = |value: &str| now.contains(value);
        MembershipChanges {
            added: after
                .members
                .iter()
                .filter(|member| !had(&member.value))
                .cloned()
                .collect(),
            removed: self
                .members
                .iter()
                .filter(|member| !has(&member.value))
                .map(|member| member.value.clone())
                .collect(),
        }
    }

    /// The SCIM representation: `schemas`, `id`, `displayName`, `externalId`, `members` (each
    /// with `$ref` and `type`), `meta`.
    pub fn to_json(&self, meta: &ResourceMeta, base_url: &str) -> Value {
        let members: Vec<Value> = self
            .members
            .iter()
            .map(|member| {
                let mut object = Map::new();
                object.insert("value".into(), json!(member.value));
                if let Some(display) = &member.display {
                    object.insert("display".into(), json!(display));
                }
                object.insert(
                    "$ref".into(),
                    json!(location(base_url, ResourceType::User, &member.value)),
                );
                object.insert("type".into(), json!("User"));
                Value::Object(object)
            })
            .collect();
        let mut body = json!({
            "schemas": [CORE_GROUP_SCHEMA],
            "id": meta.id,
            "displayName": self.display_name,
            "members": members,
            "meta": meta.to_json(ResourceType::Group, base_url),
        });
        if let Some(external_id) = &self.external_id {
            body["externalId"] = json!(external_id);
        }
        body
    }
}

/// A group while a body or PATCH operations change it: its members indexed by id.
#[derive(Debug, Clone)]
struct Draft {
    display_name: String,
    external_id: Option<String>,
    members: Values<Member>,
}

impl From<Group> for Draft {
    fn from(group: Group) -> Self {
        Self {
            display_name: group.display_name,
            external_id: group.external_id,
            members: Values::new(group.members, None),
        }
    }
}

impl From<Draft> for Group {
    fn from(draft: Draft) -> Self {
        Self {
            display_name: draft.display_name,
            external_id: draft.external_id,
            members: draft.members.into_vec(),
        }
    }
}

impl Patchable for Draft {
    const RESOURCE: ResourceType = ResourceType::Group;

    fn apply_attribute(
        &mut self,
        kind: PatchOpKind,
        resolved: &Resolved,
        filter: Option<&Filter>,
        value: Option<&Value>,
    ) -> Result<(), ScimError> {
        let null = Value::Null;
        let given = value.unwrap_or(&null);
        if kind == PatchOpKind::Add && given.is_null() {
            return Ok(());
        }
        let clearing = kind == PatchOpKind::Remove || given.is_null();
        match resolved.attribute.name {
            "displayName" => {
                if clearing {
                    return Err(ScimError::invalid_value(
                        "displayName is required and cannot be removed",
                    ));
                }
                self.display_name = value::text(given, "displayName")?
                    .ok_or_else(|| ScimError::invalid_value("displayName must not be empty"))?;
            }
            "externalId" => {
                self.external_id = if clearing {
                    None
                } else {
                    value::text(given, "externalId")?
                };
            }
            "members" => multi::apply(
                &mut self.members,
                kind,
                resolved.sub_attribute,
                filter,
                value,
                "members",
            )?,
            _ => {}
        }
        Ok(())
    }

    fn validate(&self) -> Result<(), ScimError> {
        if self.display_name.trim().is_empty() {
            return Err(ScimError::invalid_value("displayName is required"));
        }
        Ok(())
    }
}

fn check_type(value: &Value, what: &str) -> Result<(), ScimError> {
    match value::text(value, what)? {
        Some(kind) if !kind.eq_ignore_ascii_case("User") => Err(ScimError::invalid_value(format!(
            "{what} must be User: Flow's groups hold users, not {kind}"
        ))),
        _ => Ok(()),
    }
}

impl Element for Member {
    fn attribute() -> &'static Attribute {
        schema::GROUP
            .attribute("members")
            .expect("the Group schema declares members")
    }

    fn from_object(object: &Map<String, Value>, what: &str) -> Result<Self, ScimError> {
        let id = value::get(object, "value").unwrap_or(&Value::Null);
        let id = value::text(id, &format!("{what}.value"))?
            .ok_or_else(|| ScimError::invalid_value(format!("{what}.value is required")))?;
        if let Some(kind) = value::get(object, "type") {
            check_type(kind, &format!("{what}.type"))?;
        }
        let display = match value::get(object, "display") {
            Some(display) => value::text(display, &format!("{what}.display"))?,
            None => None,
        };
        Ok(Self { value: id, display })
    }

    fn set(&mut self, sub: &str, value: &Value, what: &str) -> Result<(), ScimError> {
        match sub {
            "value" => {
                self.value = value::text(value, what)?
                    .ok_or_else(|| ScimError::invalid_value(format!("{what} must not be empty")))?;
            }
            "display" => self.display = value::text(value, what)?,
            "type" => check_type(value, what)?,
            _ => {}
        }
        Ok(())
    }

    fn clear(&mut self, sub: &str) -> bool {
        match sub {
            "value" => false,
            "display" => {
                self.display = None;
                true
            }
            _ => true,
        }
    }

    fn lookup(&self, sub: &str) -> Option<ElementValue<'_>> {
        match sub {
            "value" => Some(ElementValue::Text(&self.value)),
            "display" => self.display.as_deref().map(ElementValue::Text),
            "type" => Some(ElementValue::Text("User")),
            _ => None,
        }
    }

    fn value(&self) -> &str {
        &self.value
    }

    fn key_of(value: &str) -> String {
        value.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use chrono::{TimeZone, Utc};

    use super::*;
    use crate::{PatchRequest, ScimType};

    fn patch(group: &Group, operations: Value) -> Result<Group, ScimError> {
        let body = json!({
            "schemas": ["urn:ietf:params:scim:api:messages:2.0:PatchOp"],
            "Operations": operations
        });
        group.apply_patch(&PatchRequest::parse(&body)?.operations)
    }

    fn member(value: &str, display: Option<&str>) -> Member {
        Member {
            value: value.into(),
            display: display.map(str::to_owned),
        }
    }

    fn values(group: &Group) -> Vec<&str> {
        group
            .members
            .iter()
            .map(|member| member.value.as_str())
            .collect()
    }

    #[test]
    fn okta_group_push_create_rename_add_remove() {
        // Okta creates the pushed group empty, then renames it and PATCHes its members.
        let group = Group::from_json(&json!({
            "schemas": ["urn:ietf:params:scim:schemas:core:2.0:Group"],
            "displayName": "Test SCIMv2",
            "members": []
        }))
        .unwrap();
        assert_eq!(group, Group::new("Test SCIMv2"));
        let renamed = patch(
            &group,
            json!([{"op": "replace", "value": {"id": "abf4dd94-a4c0-4f67-89c9-76b03340cb9b", "displayName": "Test SCIMv2 renamed"}}]),
        )
        .unwrap();
        assert_eq!(renamed.display_name, "Test SCIMv2 renamed");
        let with_member = patch(
            &renamed,
            json!([{"op": "add", "path": "members", "value": [{"value": "23a35c27-23d3-4c03-b4c5-6443c09e7173", "display": "test.user@okta.local"}]}]),
        )
        .unwrap();
        assert_eq!(
            with_member.members,
            vec![member(
                "23a35c27-23d3-4c03-b4c5-6443c09e7173",
                Some("test.user@okta.local")
            )]
        );
        let without = patch(
            &with_member,
            json!([{"op": "remove", "path": "members[value eq \"23a35c27-23d3-4c03-b4c5-6443c09e7173\"]"}]),
        )
        .unwrap();
        assert!(without.members.is_empty());
        // Okta retries: removing again and adding again are harmless.
        assert_eq!(
            patch(&without, json!([{"op": "remove", "path": "members[value eq \"23a35c27-23d3-4c03-b4c5-6443c09e7173\"]"}])).unwrap(),
            without
        );
        let twice = patch(
            &with_member,
            json!([{"op": "add", "path": "members", "value": [{"value": "23a35c27-23d3-4c03-b4c5-6443c09e7173", "display": "test.user@okta.local"}]}]),
        )
        .unwrap();
        assert_eq!(twice, with_member);
    }

    #[test]
    fn okta_replaces_the_whole_membership() {
        let group = Group {
            members: vec![member("usr_a", None), member("usr_b", None)],
            ..Group::new("Sales")
        };
        let replaced = patch(
            &group,
            json!([{"op": "replace", "path": "members", "value": [{"value": "usr_b"}, {"value": "usr_c", "display": "c@x.example"}]}]),
        )
        .unwrap();
        assert_eq!(values(&replaced), vec!["usr_b", "usr_c"]);
        assert_eq!(
            group.membership_changes(&replaced),
            MembershipChanges {
                added: vec![member("usr_c", Some("c@x.example"))],
                removed: vec!["usr_a".into()],
            }
        );
        assert!(group.membership_changes(&group).is_empty());
    }

    #[test]
    fn entra_group_create_add_and_remove_members() {
        // Entra ID's create body names a Microsoft schema and carries meta.
        let group = Group::from_json(&json!({
            "schemas": [
                "urn:ietf:params:scim:schemas:core:2.0:Group",
                "http://schemas.microsoft.com/2006/11/ResourceManagement/ADSCIM/Group"
            ],
            "externalId": "8aa1a0c0-c4c3-4bc0-b4a5-2ef676900159",
            "displayName": "displayName",
            "meta": {"resourceType": "Group"}
        }))
        .unwrap();
        assert_eq!(
            group.external_id.as_deref(),
            Some("8aa1a0c0-c4c3-4bc0-b4a5-2ef676900159")
        );
        let added = patch(
            &group,
            json!([{"op": "Add", "path": "members", "value": [{"$ref": null, "value": "f648f8d5ea4e4cd38e9c"}]}]),
        )
        .unwrap();
        assert_eq!(values(&added), vec!["f648f8d5ea4e4cd38e9c"]);
        // Entra ID's older removal shape: path "members" with the members to remove as value.
        let removed = patch(
            &added,
            json!([{"op": "Remove", "path": "members", "value": [{"$ref": null, "value": "f648f8d5ea4e4cd38e9c"}]}]),
        )
        .unwrap();
        assert!(removed.members.is_empty());
        // Its current shape: a value filter in the path.
        let removed = patch(
            &added,
            json!([{"op": "remove", "path": "members[value eq \"f648f8d5ea4e4cd38e9c\"]"}]),
        )
        .unwrap();
        assert!(removed.members.is_empty());
        let renamed = patch(
            &group,
            json!([{"op": "Replace", "path": "displayName", "value": "1879db59-3bdf-4490-ad68-ab880a269474updatedDisplayName"}]),
        )
        .unwrap();
        assert_eq!(
            renamed.display_name,
            "1879db59-3bdf-4490-ad68-ab880a269474updatedDisplayName"
        );
    }

    #[test]
    fn remove_without_value_empties_and_filters_can_or() {
        let group = Group {
            members: vec![
                member("usr_a", None),
                member("usr_b", None),
                member("usr_c", None),
            ],
            ..Group::new("Sales")
        };
        let some = patch(
            &group,
            json!([{"op": "remove", "path": "members[value eq \"usr_a\" or value eq \"usr_c\"]"}]),
        )
        .unwrap();
        assert_eq!(values(&some), vec!["usr_b"]);
        let none = patch(&group, json!([{"op": "remove", "path": "members"}])).unwrap();
        assert!(none.members.is_empty());
        // Member ids are case-exact.
        let same = patch(
            &group,
            json!([{"op": "remove", "path": "members[value eq \"USR_A\"]"}]),
        )
        .unwrap();
        assert_eq!(same, group);
    }

    #[test]
    fn group_errors() {
        let group = Group::new("Sales");
        for (operations, scim_type, expected) in [
            (
                json!([{"op": "remove", "path": "displayName"}]),
                ScimType::InvalidValue,
                "displayName is required and cannot be removed",
            ),
            (
                json!([{"op": "add", "path": "members", "value": [{"display": "x"}]}]),
                ScimType::InvalidValue,
                "members.value is required",
            ),
            (
                json!([{"op": "add", "path": "members", "value": [{"value": "grp_1", "type": "Group"}]}]),
                ScimType::InvalidValue,
                "Flow's groups hold users, not Group",
            ),
            (
                json!([{"op": "add", "path": "members", "value": "usr_1"}]),
                ScimType::InvalidValue,
                "members must be an array of objects",
            ),
            (
                json!([{"op": "replace", "path": "members[value eq \"usr_x\"].value", "value": "usr_y"}]),
                ScimType::NoTarget,
                "no value of members matches",
            ),
            (
                json!([{"op": "replace", "path": "members[value eq \"usr_1\"].display", "value": "X"}]),
                ScimType::Mutability,
                "'members.display' is read-only",
            ),
            (
                json!([{"op": "replace", "path": "id", "value": "grp_2"}]),
                ScimType::Mutability,
                "'id' is read-only",
            ),
            (
                json!([{"op": "replace", "path": "displayName.value", "value": "x"}]),
                ScimType::InvalidPath,
                "has no sub-attributes",
            ),
        ] {
            let error = patch(&group, operations.clone()).unwrap_err();
            assert_eq!(error.scim_type(), Some(scim_type), "{operations}: {error}");
            assert!(
                error.detail().contains(expected),
                "{operations}: {}",
                error.detail()
            );
        }
        for (body, expected) in [
            (json!({"members": []}), "displayName is required"),
            (
                json!({"displayName": ["x"]}),
                "displayName must be a string",
            ),
            (json!(null), "the body must be a Group object"),
        ] {
            let error = Group::from_json(&body).unwrap_err();
            assert!(
                error.detail().contains(expected),
                "{body}: {}",
                error.detail()
            );
        }
    }

    #[test]
    fn renders_members_with_ref_and_type() {
        let group = Group {
            external_id: Some("ext-1".into()),
            members: vec![member("usr_a", Some("a@x.example"))],
            ..Group::new("Sales")
        };
        let meta = ResourceMeta {
            id: "grp_1".into(),
            created: Utc.with_ymd_and_hms(2026, 3, 1, 9, 0, 0).unwrap(),
            last_modified: Utc.with_ymd_and_hms(2026, 3, 1, 9, 0, 0).unwrap(),
            version: None,
        };
        let rendered = group.to_json(&meta, "https://flow.example.com");
        assert_eq!(
            rendered,
            json!({
                "schemas": ["urn:ietf:params:scim:schemas:core:2.0:Group"],
                "id": "grp_1",
                "externalId": "ext-1",
                "displayName": "Sales",
                "members": [{
                    "value": "usr_a",
                    "display": "a@x.example",
                    "$ref": "https://flow.example.com/scim/v2/Users/usr_a",
                    "type": "User"
                }],
                "meta": {
                    "resourceType": "Group",
                    "created": "2026-03-01T09:00:00.000Z",
                    "lastModified": "2026-03-01T09:00:00.000Z",
                    "location": "https://flow.example.com/scim/v2/Groups/grp_1"
                }
            })
        );
        assert_eq!(Group::from_json(&rendered).unwrap(), group);
    }
}

#[cfg(test)]
mod limits {
    use super::*;
    use crate::patch::MAX_PATCH_VALUES;
    use crate::{MAX_SCANNED_VALUES, PatchRequest, ScimType};

    fn patch(group: &Group, operations: Vec<Value>) -> Result<Group, ScimError> {
        let body = json!({"Operations": operations});
        group.apply_patch(&PatchRequest::parse(&body)?.operations)
    }

    fn large(count: usize) -> Group {
        Group {
            members: (0..count)
                .map(|index| Member {
                    value: format!("usr_{index}"),
                    display: Some(format!("User {index}")),
                })
                .collect(),
            ..Group::new("All staff")
        }
    }

    #[test]
    fn filtered_removals_from_a_large_group_are_lookups() {
        // A thousand `remove members[value eq …]` on a group of 100,000: one lookup each (the
        // old scan of every member for every operation would not finish in minutes).
        let group = large(100_000);
        let removals: Vec<Value> = (0..1000)
            .map(|index| {
                json!({"op": "remove", "path": format!("members[value eq \"usr_{}\"]", index * 7)})
            })
            .collect();
        let changed = patch(&group, removals).unwrap();
        assert_eq!(changed.members.len(), 99_000);
        assert!(changed.members.iter().all(|member| {
            let index: usize = member.value["usr_".len()..].parse().unwrap();
            !index.is_multiple_of(7) || index >= 7000
        }));
        // Order is kept.
        assert_eq!(changed.members[0].value, "usr_1");
        let changes = group.membership_changes(&changed);
        assert_eq!(changes.removed.len(), 1000);
        assert!(changes.added.is_empty());
    }

    #[test]
    fn the_largest_member_patch_on_a_large_group_applies() {
        // 1,000 operations × 10 members: re-adds existing members (updating their display),
        // adds new ones, and removes by value list and by `or`-ed filter.
        let group = large(20_000);
        let mut operations = Vec::new();
        for round in 0..1000 {
            let members: Vec<Value> = (0..10)
                .map(|index| json!({"value": format!("usr_{}", 19_995 + round * 10 + index)}))
                .collect();
            operations.push(json!({"op": "add", "path": "members", "value": members}));
        }
        let added = patch(&group, operations).unwrap();
        assert_eq!(added.members.len(), 20_000 + 10_000 - 5);
        let filter = (0..10)
            .map(|index| format!("value eq \"usr_{index}\""))
            .collect::<Vec<_>>()
            .join(" or ");
        let removed = patch(
            &added,
            vec![
                json!({"op": "remove", "path": format!("members[{filter}]")}),
                json!({"op": "remove", "path": "members", "value": [{"value": "usr_10"}, {"value": "usr_11"}]}),
                json!({"op": "remove", "path": "members[value eq \"usr_missing\"]"}),
            ],
        )
        .unwrap();
        assert_eq!(removed.members.len(), added.members.len() - 12);
        assert_eq!(removed.members[0].value, "usr_12");
    }

    #[test]
    fn filtered_add_and_remove_are_correct() {
        let group = large(5);
        // A filter other than `value eq` (scanned) selects the same values.
        let changed = patch(
            &group,
            vec![
                json!({"op": "replace", "path": "members[display sw \"User 1\"]", "value": {"display": "One"}}),
                json!({"op": "remove", "path": "members[value eq \"usr_3\" or display eq \"user 4\"]"}),
                json!({"op": "add", "path": "members[value eq \"usr_9\"]", "value": {"display": "Nine"}}),
                json!({"op": "add", "path": "members", "value": [{"value": "usr_0", "display": "Zero"}]}),
            ],
        )
        .unwrap();
        let shown: Vec<(&str, Option<&str>)> = changed
            .members
            .iter()
            .map(|member| (member.value.as_str(), member.display.as_deref()))
            .collect();
        assert_eq!(
            shown,
            vec![
                ("usr_0", Some("Zero")),
                ("usr_1", Some("One")),
                ("usr_2", Some("User 2")),
                ("usr_9", Some("Nine")),
            ]
        );
        // A member whose id is changed to one already there replaces it: each id once.
        let moved = patch(
            &group,
            vec![json!({"op": "replace", "path": "members[value eq \"usr_0\"].value", "value": "usr_4"})],
        )
        .unwrap();
        let ids: Vec<&str> = moved.members.iter().map(|m| m.value.as_str()).collect();
        assert_eq!(ids, vec!["usr_4", "usr_1", "usr_2", "usr_3"]);
        // Member ids are case-exact in lookups too.
        assert_eq!(
            patch(
                &group,
                vec![json!({"op": "remove", "path": "members[value eq \"USR_1\"]"})]
            )
            .unwrap(),
            group
        );
    }

    #[test]
    fn caps_answer_a_scim_400_naming_them() {
        let members: Vec<Value> = (0..=MAX_MEMBERS_PER_WRITE)
            .map(|index| json!({"value": format!("usr_{index}")}))
            .collect();
        let error =
            Group::from_json(&json!({"displayName": "Big", "members": members})).unwrap_err();
        assert_eq!(error.scim_type(), Some(ScimType::InvalidValue));
        assert!(error.detail().contains("at most 1000 members"), "{error}");
        assert_eq!(
            Group::from_json(
                &json!({"displayName": "Big", "members": members[..MAX_MEMBERS_PER_WRITE]})
            )
            .unwrap()
            .members
            .len(),
            MAX_MEMBERS_PER_WRITE
        );

        let values: Vec<Value> = (0..=MAX_PATCH_VALUES)
            .map(|index| json!({"value": format!("usr_{index}")}))
            .collect();
        let error = patch(
            &Group::new("Big"),
            vec![json!({"op": "add", "path": "members", "value": values})],
        )
        .unwrap_err();
        assert_eq!(error.scim_type(), Some(ScimType::TooMany));
        assert!(error.detail().contains("at most 10000"), "{error}");
        // Also when the values hide in a path-less value object.
        let error = patch(
            &Group::new("Big"),
            vec![json!({"op": "add", "value": {"members": values}})],
        )
        .unwrap_err();
        assert_eq!(error.scim_type(), Some(ScimType::TooMany));

        // Filters that scan: a thousand over 2,000 members is past the scan budget.
        let scans: Vec<Value> = (0..1000)
            .map(|_| json!({"op": "remove", "path": "members[display co \"nobody\"]"}))
            .collect();
        let error = patch(&large(2000), scans.clone()).unwrap_err();
        assert_eq!(error.scim_type(), Some(ScimType::TooMany));
        assert!(
            error.detail().contains(&MAX_SCANNED_VALUES.to_string()),
            "{error}"
        );
        assert!(patch(&large(500), scans).is_ok());
    }
}
