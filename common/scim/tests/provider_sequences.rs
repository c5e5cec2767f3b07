//! The request sequences Okta and Microsoft Entra ID send, as their published SCIM guides
//! describe them, played through the crate's public API the way the `/scim/v2` surface will:
//! parse each request, let a stand-in for the service keep the state, render each response.

use std::collections::BTreeMap;

use chrono::{Duration, TimeZone, Utc};
use flow_scim::filter::{self, Filter, FilterValue, Operator};
use flow_scim::{
    Group, ListResponse, Page, PatchRequest, Projection, ResourceMeta, ResourceType, ScimError,
    ScimType, User, discovery, meta,
};
use serde_json::{Value, json};

const BASE: &str = "https://flow.example.com";

/// What the service would keep: users and groups by id, with a version clock.
#[derive(Default)]
struct Directory {
    users: BTreeMap<String, (User, ResourceMeta)>,
    groups: BTreeMap<String, (Group, ResourceMeta)>,
    clock: i64,
}

impl Directory {
    fn tick(&mut self) -> chrono::DateTime<Utc> {
        self.clock += 1;
        Utc.with_ymd_and_hms(2026, 3, 1, 0, 0, 0).unwrap() + Duration::seconds(self.clock)
    }

    /// `GET /Users?filter=…`: only `userName eq` and `externalId eq` are evaluated here,
    /// which is what the look-ups before create use.
    fn list_users(
        &self,
        query: &str,
        start: Option<&str>,
        count: Option<&str>,
    ) -> Result<Value, ScimError> {
        let filter = filter::parse_for(query, ResourceType::User)?;
        let page = Page::parse(start, count)?;
        let (attribute, wanted) = match &filter {
            Filter::Compare {
                path,
                operator: Operator::Equal,
                value: FilterValue::String(wanted),
            } => (path.to_string(), wanted.clone()),
            other => panic!("the stand-in does not evaluate {other}"),
        };
        let found: Vec<Value> = self
            .users
            .values()
            .filter(|(user, _)| match attribute.as_str() {
                "userName" => user.user_name.eq_ignore_ascii_case(&wanted),
                "externalId" => user.external_id.as_deref() == Some(wanted.as_str()),
                other => panic!("the stand-in does not evaluate {other}"),
            })
            .map(|(user, meta)| user.to_json(meta, BASE))
            .collect();
        let total = found.len() as u64;
        Ok(ListResponse::new(page, total, found).to_json())
    }

    fn create_user(&mut self, body: &Value) -> Result<Value, ScimError> {
        let user = User::from_json(body)?;
        if self
            .users
            .values()
            .any(|(existing, _)| existing.user_name.eq_ignore_ascii_case(&user.user_name))
        {
            return Err(ScimError::uniqueness(format!(
                "userName {} is taken",
                user.user_name
            )));
        }
        let at = self.tick();
        let id = format!("usr_{}", self.users.len() + 1);
        let meta = ResourceMeta::new(id.clone(), at, at);
        let rendered = user.to_json(&meta, BASE);
        self.users.insert(id, (user, meta));
        Ok(rendered)
    }

    fn update_user(
        &mut self,
        id: &str,
        change: impl FnOnce(&User) -> Result<User, ScimError>,
    ) -> Result<Value, ScimError> {
        let at = self.tick();
        let (user, meta) = self
            .users
            .get_mut(id)
            .ok_or_else(|| ScimError::not_found(format!("User {id} not found")))?;
        *user = change(user)?;
        *meta = ResourceMeta::new(id, meta.created, at);
        Ok(user.to_json(meta, BASE))
    }

    fn create_group(&mut self, body: &Value) -> Result<Value, ScimError> {
        let group = Group::from_json(body)?;
        let at = self.tick();
        let id = format!("grp_{}", self.groups.len() + 1);
        let meta = ResourceMeta::new(id.clone(), at, at);
        let rendered = group.to_json(&meta, BASE);
        self.groups.insert(id, (group, meta));
        Ok(rendered)
    }

    fn patch_group(&mut self, id: &str, body: &Value) -> Result<Value, ScimError> {
        let request = PatchRequest::parse(body)?;
        let at = self.tick();
        let (group, meta) = self.groups.get_mut(id).expect("group exists");
        let changed = group.apply_patch(&request.operations)?;
        for added in group.membership_changes(&changed).added {
            assert!(
                self.users.contains_key(&added.value),
                "unknown member {}",
                added.value
            );
        }
        *group = changed;
        *meta = ResourceMeta::new(id, meta.created, at);
        Ok(group.to_json(meta, BASE))
    }

    fn get_group(
        &self,
        id: &str,
        attributes: Option<&str>,
        excluded: Option<&str>,
    ) -> Result<Value, ScimError> {
        let projection = Projection::parse(ResourceType::Group, attributes, excluded)?;
        let (group, meta) = &self.groups[id];
        Ok(projection.apply(group.to_json(meta, BASE)))
    }
}

fn patch_op(operations: Value) -> Value {
    json!({"schemas": ["urn:ietf:params:scim:api:messages:2.0:PatchOp"], "Operations": operations})
}

#[test]
fn okta_provisioning_sequence() {
    let mut directory = Directory::default();
    // 1. Is the user there? GET /Users?filter=userName eq "…"&startIndex=1&count=100
    let found = directory
        .list_users(
            r#"userName eq "test.user@okta.local""#,
            Some("1"),
            Some("100"),
        )
        .unwrap();
    assert_eq!(found["totalResults"], json!(0));
    assert_eq!(found["Resources"], json!([]));
    // 2. No: POST /Users.
    let created = directory
        .create_user(&json!({
            "schemas": ["urn:ietf:params:scim:schemas:core:2.0:User"],
            "userName": "test.user@okta.local",
            "name": {"givenName": "Test", "familyName": "User"},
            "emails": [{"primary": true, "value": "test.user@okta.local", "type": "work"}],
            "displayName": "Test User",
            "locale": "en-US",
            "externalId": "00ujl29u0le5T6Aj10h7",
            "groups": [],
            "password": "1mz050nq",
            "active": true
        }))
        .unwrap();
    let id = created["id"].as_str().unwrap().to_owned();
    assert_eq!(
        created["meta"]["location"],
        json!(format!("{BASE}/scim/v2/Users/{id}"))
    );
    assert!(created.get("password").is_none());
    // A second create of the same userName is the service's 409 uniqueness.
    let again = directory
        .create_user(&json!({"userName": "TEST.USER@okta.local"}))
        .unwrap_err();
    assert_eq!(
        (again.status(), again.scim_type()),
        (409, Some(ScimType::Uniqueness))
    );
    // 3. The look-up now finds it.
    let found = directory
        .list_users(
            r#"userName eq "test.user@okta.local""#,
            Some("1"),
            Some("100"),
        )
        .unwrap();
    assert_eq!(found["totalResults"], json!(1));
    assert_eq!(found["Resources"][0]["id"], json!(id));
    // 4. A profile change: PUT /Users/{id} with the whole user.
    let version_before = created["meta"]["version"].as_str().unwrap().to_owned();
    let put = json!({
        "schemas": ["urn:ietf:params:scim:schemas:core:2.0:User"],
        "id": id,
        "userName": "test.user@okta.local",
        "name": {"givenName": "Another", "middleName": "", "familyName": "User"},
        "emails": [{"primary": true, "value": "test.user@okta.local", "type": "work"}],
        "active": true,
        "groups": [],
        "meta": {"resourceType": "User"}
    });
    let updated = directory
        .update_user(&id, |user| user.replaced_by(&put))
        .unwrap();
    assert_eq!(
        updated["name"],
        json!({"givenName": "Another", "familyName": "User"})
    );
    // The ETag moved on: If-Match with the old one fails, with the new one succeeds.
    let current = directory.users[&id].1.version.clone().unwrap();
    assert!(!meta::if_match(&version_before, &current));
    assert!(meta::if_match(
        updated["meta"]["version"].as_str().unwrap(),
        &current
    ));
    // 5. Deactivation: PATCH active false (Okta never deletes).
    let request = PatchRequest::parse(&patch_op(
        json!([{"op": "replace", "value": {"active": false}}]),
    ))
    .unwrap();
    let deactivated = directory
        .update_user(&id, |user| user.apply_patch(&request.operations))
        .unwrap();
    assert_eq!(deactivated["active"], json!(false));
    assert_eq!(deactivated["name"]["givenName"], json!("Another"));
    // 6. Group Push: create the group, rename it, add and remove the member.
    let group = directory
        .create_group(&json!({
            "schemas": ["urn:ietf:params:scim:schemas:core:2.0:Group"],
            "displayName": "Test SCIMv2",
            "members": []
        }))
        .unwrap();
    let group_id = group["id"].as_str().unwrap().to_owned();
    directory
        .patch_group(
            &group_id,
            &patch_op(
                json!([{"op": "replace", "value": {"id": group_id, "displayName": "Sales"}}]),
            ),
        )
        .unwrap();
    let with_member = directory
        .patch_group(
            &group_id,
            &patch_op(json!([{"op": "add", "path": "members", "value": [{"value": id, "display": "test.user@okta.local"}]}])),
        )
        .unwrap();
    assert_eq!(with_member["displayName"], json!("Sales"));
    assert_eq!(
        with_member["members"][0]["$ref"],
        json!(format!("{BASE}/scim/v2/Users/{id}"))
    );
    let without = directory
        .patch_group(
            &group_id,
            &patch_op(json!([{"op": "remove", "path": format!("members[value eq \"{id}\"]")}])),
        )
        .unwrap();
    assert_eq!(without["members"], json!([]));
}

#[test]
fn entra_provisioning_sequence() {
    let mut directory = Directory::default();
    // Entra ID matches on userName (or externalId) before creating.
    for query in [
        r#"userName eq "Test_User_ab6490ee-1e48-479e-a20b-2d77186b5dd1""#,
        r#"externalId eq "0a21f0f2-8d2a-4f8e-bf98-7363c4aed4ef""#,
    ] {
        assert_eq!(
            directory.list_users(query, None, None).unwrap()["totalResults"],
            json!(0)
        );
    }
    let created = directory
        .create_user(&json!({
            "schemas": [
                "urn:ietf:params:scim:schemas:core:2.0:User",
                "urn:ietf:params:scim:schemas:extension:enterprise:2.0:User"
            ],
            "externalId": "0a21f0f2-8d2a-4f8e-bf98-7363c4aed4ef",
            "userName": "Test_User_ab6490ee-1e48-479e-a20b-2d77186b5dd1",
            "active": true,
            "emails": [{"primary": true, "type": "work", "value": "Test_User_fd0ea19b-0777-472c-9f96-4f70d2226f2e@testuser.com"}],
            "meta": {"resourceType": "User"},
            "name": {"formatted": "givenName familyName", "familyName": "familyName", "givenName": "givenName"},
            "roles": []
        }))
        .unwrap();
    let id = created["id"].as_str().unwrap().to_owned();
    let found = directory
        .list_users(
            r#"externalId eq "0a21f0f2-8d2a-4f8e-bf98-7363c4aed4ef""#,
            None,
            None,
        )
        .unwrap();
    assert_eq!(found["Resources"][0]["id"], json!(id));
    // Multi-valued and single-valued updates with capitalised ops.
    let request = PatchRequest::parse(&patch_op(json!([
        {"op": "Replace", "path": "emails[type eq \"work\"].value", "value": "updatedEmail@microsoft.com"},
        {"op": "Replace", "path": "name.familyName", "value": "updatedFamilyName"}
    ])))
    .unwrap();
    let updated = directory
        .update_user(&id, |user| user.apply_patch(&request.operations))
        .unwrap();
    assert_eq!(
        updated["emails"],
        json!([{"value": "updatedEmail@microsoft.com", "type": "work", "primary": true}])
    );
    assert_eq!(updated["name"]["familyName"], json!("updatedFamilyName"));
    // Soft delete: active as the string "False".
    let request = PatchRequest::parse(&patch_op(
        json!([{"op": "Replace", "path": "active", "value": "False"}]),
    ))
    .unwrap();
    let disabled = directory
        .update_user(&id, |user| user.apply_patch(&request.operations))
        .unwrap();
    assert_eq!(disabled["active"], json!(false));
    // Groups: created with a Microsoft schema, read without members, members added and removed.
    let group = directory
        .create_group(&json!({
            "schemas": [
                "urn:ietf:params:scim:schemas:core:2.0:Group",
                "http://schemas.microsoft.com/2006/11/ResourceManagement/ADSCIM/Group"
            ],
            "externalId": "8aa1a0c0-c4c3-4bc0-b4a5-2ef676900159",
            "displayName": "displayName",
            "meta": {"resourceType": "Group"}
        }))
        .unwrap();
    let group_id = group["id"].as_str().unwrap().to_owned();
    directory
        .patch_group(
            &group_id,
            &patch_op(
                json!([{"op": "Add", "path": "members", "value": [{"$ref": null, "value": id}]}]),
            ),
        )
        .unwrap();
    let read = directory
        .get_group(&group_id, None, Some("members"))
        .unwrap();
    assert!(read.get("members").is_none());
    assert_eq!(
        read["externalId"],
        json!("8aa1a0c0-c4c3-4bc0-b4a5-2ef676900159")
    );
    let removed = directory
        .patch_group(&group_id, &patch_op(json!([{"op": "Remove", "path": "members", "value": [{"$ref": null, "value": id}]}])))
        .unwrap();
    assert_eq!(removed["members"], json!([]));
}

#[test]
fn bad_input_is_a_scim_error_never_a_panic() {
    let directory = Directory::default();
    let error = directory
        .list_users(r#"userName eq "x" and ("#, None, None)
        .unwrap_err();
    assert_eq!(error.scim_type(), Some(ScimType::InvalidFilter));
    assert_eq!(
        error.to_json(),
        json!({
            "schemas": ["urn:ietf:params:scim:api:messages:2.0:Error"],
            "status": "400",
            "scimType": "invalidFilter",
            "detail": "invalid filter: expected an attribute name, but the input ended (at character 22)"
        })
    );
    let error = directory
        .list_users(r#"nickName eq "x""#, None, None)
        .unwrap_err();
    assert!(
        error
            .detail()
            .starts_with("unknown attribute 'nickName'; Users can be filtered on userName")
    );
    let error = directory
        .list_users(r#"userName eq "x""#, None, Some("ten"))
        .unwrap_err();
    assert_eq!(error.status(), 400);
}

#[test]
fn discovery_documents_are_served_from_the_base_url() {
    let config = discovery::service_provider_config(BASE);
    assert_eq!(
        config["filter"]["maxResults"],
        json!(flow_scim::list::MAX_PAGE_SIZE)
    );
    let types = discovery::resource_types(BASE);
    assert_eq!(types["Resources"][1]["endpoint"], json!("/Groups"));
    let schemas = discovery::schemas(BASE);
    assert_eq!(schemas["totalResults"], json!(4));
}
