use chrono::{TimeZone, Utc};
use serde_json::json;

use super::*;
use crate::{PatchRequest, ScimType};

fn patch(user: &User, body: Value) -> Result<User, ScimError> {
    user.apply_patch(&PatchRequest::parse(&body)?.operations)
}

fn operations(operations: Value) -> Value {
    json!({
        "schemas": ["urn:ietf:params:scim:api:messages:2.0:PatchOp"],
        "Operations": operations
    })
}

fn meta() -> ResourceMeta {
    ResourceMeta {
        id: "usr_0190d5b0-0000-7000-8000-000000000001".into(),
        created: Utc.with_ymd_and_hms(2026, 3, 1, 9, 0, 0).unwrap(),
        last_modified: Utc.with_ymd_and_hms(2026, 3, 2, 9, 30, 0).unwrap(),
        version: Some("3".into()),
    }
}

/// Okta's create-user body (its SCIM 2.0 reference), with attributes Flow does not keep.
fn okta_create_body() -> Value {
    json!({
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
    })
}

/// Entra ID's create-user body (its "develop a SCIM endpoint" guide): `userName` is not an
/// e-mail address there, and `meta` and `roles` come along.
fn entra_create_body() -> Value {
    json!({
        "schemas": [
            "urn:ietf:params:scim:schemas:core:2.0:User",
            "urn:ietf:params:scim:schemas:extension:enterprise:2.0:User"
        ],
        "externalId": "0a21f0f2-8d2a-4f8e-bf98-7363c4aed4ef",
        "userName": "Test_User_ab6490ee-1e48-479e-a20b-2d77186b5dd1",
        "active": true,
        "emails": [{
            "primary": true,
            "type": "work",
            "value": "Test_User_fd0ea19b-0777-472c-9f96-4f70d2226f2e@testuser.com"
        }],
        "meta": {"resourceType": "User"},
        "name": {
            "formatted": "givenName familyName",
            "familyName": "familyName",
            "givenName": "givenName"
        },
        "roles": []
    })
}

#[test]
fn okta_create_body_parses_and_ignores_what_flow_does_not_keep() {
    let user = User::from_json(&okta_create_body()).unwrap();
    assert_eq!(
        user,
        User {
            user_name: "test.user@okta.local".into(),
            name: Name {
                formatted: None,
                family_name: Some("User".into()),
                given_name: Some("Test".into()),
            },
            display_name: Some("Test User".into()),
            title: None,
            emails: vec![Email {
                value: "test.user@okta.local".into(),
                kind: Some("work".into()),
                primary: true,
            }],
            active: true,
            external_id: Some("00ujl29u0le5T6Aj10h7".into()),
            department: None,
            employee_number: None,
            manager: None,
            start_date: None,
        }
    );
    assert_eq!(user.email(), "test.user@okta.local");
}

#[test]
fn okta_put_replaces_the_profile_and_never_reactivates() {
    let deactivated = User {
        active: false,
        title: Some("Engineer".into()),
        ..User::from_json(&okta_create_body()).unwrap()
    };
    // Okta's PUT for a profile change: the whole user, with id and meta it must not set.
    let body = json!({
        "schemas": ["urn:ietf:params:scim:schemas:core:2.0:User"],
        "id": "23a35c27-23d3-4c03-b4c5-6443c09e7173",
        "userName": "test.user@okta.local",
        "name": {"givenName": "Another", "middleName": "", "familyName": "User"},
        "emails": [{"primary": true, "value": "test.user@okta.local", "type": "work"}],
        "groups": [],
        "meta": {"resourceType": "User"}
    });
    let replaced = deactivated.replaced_by(&body).unwrap();
    assert_eq!(replaced.name.given_name.as_deref(), Some("Another"));
    assert_eq!(replaced.title, None, "PUT clears what it leaves out");
    assert_eq!(replaced.display_name, None);
    assert!(!replaced.active, "active left out keeps its value");
    let mut with_active = body.clone();
    with_active["active"] = json!(true);
    assert!(deactivated.replaced_by(&with_active).unwrap().active);
}

#[test]
fn okta_patch_active_false_deactivates_and_true_reactivates() {
    let user = User::from_json(&okta_create_body()).unwrap();
    let deactivated = patch(
        &user,
        operations(json!([{"op": "replace", "value": {"active": false}}])),
    )
    .unwrap();
    assert!(!deactivated.active);
    assert_eq!(deactivated.user_name, user.user_name);
    let reactivated = patch(
        &deactivated,
        operations(json!([{"op": "replace", "value": {"active": true}}])),
    )
    .unwrap();
    assert_eq!(reactivated, user);
}

#[test]
fn entra_create_body_parses_and_the_work_email_is_the_address() {
    let user = User::from_json(&entra_create_body()).unwrap();
    assert_eq!(
        user.user_name,
        "Test_User_ab6490ee-1e48-479e-a20b-2d77186b5dd1"
    );
    assert_eq!(
        user.email(),
        "Test_User_fd0ea19b-0777-472c-9f96-4f70d2226f2e@testuser.com"
    );
    assert_eq!(user.name.formatted.as_deref(), Some("givenName familyName"));
    assert_eq!(
        user.external_id.as_deref(),
        Some("0a21f0f2-8d2a-4f8e-bf98-7363c4aed4ef")
    );
}

#[test]
fn entra_patch_of_multi_valued_properties() {
    let user = User::from_json(&entra_create_body()).unwrap();
    let changed = patch(
        &user,
        operations(json!([
            {"op": "Replace", "path": "emails[type eq \"work\"].value", "value": "updatedEmail@microsoft.com"},
            {"op": "Replace", "path": "name.familyName", "value": "updatedFamilyName"}
        ])),
    )
    .unwrap();
    assert_eq!(
        changed.emails,
        vec![Email {
            value: "updatedEmail@microsoft.com".into(),
            kind: Some("work".into()),
            primary: true,
        }]
    );
    assert_eq!(
        changed.name.family_name.as_deref(),
        Some("updatedFamilyName")
    );
    assert_eq!(changed.name.given_name.as_deref(), Some("givenName"));
}

#[test]
fn entra_patch_of_single_valued_user_name_and_disable() {
    let user = User::from_json(&entra_create_body()).unwrap();
    let changed = patch(
        &user,
        operations(json!([
            {"op": "Replace", "path": "userName", "value": "5b50642d-79fc-4410-9e90-4c077cdd1a59@testuser.com"}
        ])),
    )
    .unwrap();
    assert_eq!(
        changed.user_name,
        "5b50642d-79fc-4410-9e90-4c077cdd1a59@testuser.com"
    );
    assert_eq!(
        changed.email(),
        "5b50642d-79fc-4410-9e90-4c077cdd1a59@testuser.com"
    );
    let disabled = patch(
        &changed,
        json!({"Operations": [{"op": "Replace", "path": "active", "value": false}], "schemas": ["urn:ietf:params:scim:api:messages:2.0:PatchOp"]}),
    )
    .unwrap();
    assert!(!disabled.active);
}

#[test]
fn entra_active_as_the_string_false_and_true() {
    let user = User::from_json(&entra_create_body()).unwrap();
    let disabled = patch(
        &user,
        operations(json!([{"op": "Replace", "path": "active", "value": "False"}])),
    )
    .unwrap();
    assert!(!disabled.active);
    let enabled = patch(
        &disabled,
        operations(json!([{"op": "replace", "value": {"active": "True"}}])),
    )
    .unwrap();
    assert!(enabled.active);
    let error = patch(
        &user,
        operations(json!([{"op": "Replace", "path": "active", "value": "nope"}])),
    )
    .unwrap_err();
    assert_eq!(error.scim_type(), Some(ScimType::InvalidValue));
    assert_eq!(
        error.detail(),
        r#"Operations[0] (replace active): active must be true or false, not the string "nope""#
    );
}

#[test]
fn entra_path_less_value_object_with_dotted_filtered_and_urn_keys() {
    let user = User::from_json(&entra_create_body()).unwrap();
    let changed = patch(
        &user,
        operations(json!([{
            "op": "replace",
            "value": {
                "displayName": "Henry Doe",
                "emails[type eq \"work\"].value": "henry@contoso.com",
                "name.givenName": "Henry",
                "name.familyName": "Doe",
                "title": "Account Executive",
                "urn:ietf:params:scim:schemas:extension:enterprise:2.0:User:department": "Sales",
                "urn:ietf:params:scim:schemas:extension:enterprise:2.0:User": {
                    "employeeNumber": "701984",
                    "manager": {"value": "usr_boss"}
                },
                "nickName": "Hank"
            }
        }])),
    )
    .unwrap();
    assert_eq!(changed.display_name.as_deref(), Some("Henry Doe"));
    assert_eq!(changed.email(), "henry@contoso.com");
    assert_eq!(changed.name.given_name.as_deref(), Some("Henry"));
    assert_eq!(changed.name.family_name.as_deref(), Some("Doe"));
    assert_eq!(
        changed.name.formatted.as_deref(),
        Some("givenName familyName")
    );
    assert_eq!(changed.title.as_deref(), Some("Account Executive"));
    assert_eq!(changed.department.as_deref(), Some("Sales"));
    assert_eq!(changed.employee_number.as_deref(), Some("701984"));
    assert_eq!(changed.manager.unwrap().value.as_deref(), Some("usr_boss"));
}

#[test]
fn entra_adds_a_work_email_through_a_filtered_path() {
    let user = User::new("adele@contoso.com");
    let changed = patch(
        &user,
        operations(json!([
            {"op": "Add", "path": "emails[type eq \"work\"].value", "value": "adele@contoso.com"},
            {"op": "Add", "path": "emails[type eq \"work\"].primary", "value": true}
        ])),
    )
    .unwrap();
    assert_eq!(
        changed.emails,
        vec![Email {
            value: "adele@contoso.com".into(),
            kind: Some("work".into()),
            primary: true,
        }]
    );
    // Add cannot create an e-mail from anything but its address.
    let error = patch(
        &user,
        operations(json!([
            {"op": "Add", "path": "emails[type eq \"work\"].primary", "value": true}
        ])),
    )
    .unwrap_err();
    assert_eq!(error.scim_type(), Some(ScimType::NoTarget));
    assert!(error.detail().ends_with(
        r#"no value of emails matches [type eq "work"], and one cannot be added without its value"#
    ), "{error}");
    // Replace that matches nothing is noTarget, as RFC 7644 §3.5.2.3 says.
    let error = patch(
        &user,
        operations(json!([
            {"op": "Replace", "path": "emails[type eq \"home\"].value", "value": "a@home.example"}
        ])),
    )
    .unwrap_err();
    assert_eq!(error.scim_type(), Some(ScimType::NoTarget));
    assert_eq!(
        error.detail(),
        r#"Operations[0] (replace emails[type eq "home"].value): no value of emails matches [type eq "home"]"#
    );
}

#[test]
fn entra_manager_as_a_bare_id_and_its_removal() {
    let user = User::from_json(&entra_create_body()).unwrap();
    let managed = patch(
        &user,
        operations(json!([{
            "op": "Add",
            "path": "urn:ietf:params:scim:schemas:extension:enterprise:2.0:User:manager",
            "value": "2819c223-7f76-453a-919d-413861904646"
        }])),
    )
    .unwrap();
    assert_eq!(
        managed.manager,
        Some(Manager {
            value: Some("2819c223-7f76-453a-919d-413861904646".into()),
            display_name: None,
        })
    );
    let unmanaged = patch(
        &managed,
        operations(json!([{
            "op": "Remove",
            "path": "urn:ietf:params:scim:schemas:extension:enterprise:2.0:User:manager"
        }])),
    )
    .unwrap();
    assert_eq!(unmanaged.manager, None);
    let named = patch(
        &managed,
        operations(json!([{
            "op": "replace",
            "path": "urn:ietf:params:scim:schemas:extension:enterprise:2.0:User:manager.displayName",
            "value": "Boss"
        }])),
    )
    .unwrap();
    assert_eq!(named.manager.unwrap().display_name.as_deref(), Some("Boss"));
}

#[test]
fn enterprise_extension_in_a_create_body_and_as_a_whole_path() {
    let mut body = entra_create_body();
    body["urn:ietf:params:scim:schemas:extension:enterprise:2.0:User"] = json!({
        "department": "Sales",
        "employeeNumber": "42",
        "costCenter": "ignored",
        "manager": {"value": "usr_boss", "displayName": "Boss"}
    });
    let user = User::from_json(&body).unwrap();
    assert_eq!(user.department.as_deref(), Some("Sales"));
    assert_eq!(user.employee_number.as_deref(), Some("42"));
    assert_eq!(
        user.manager.as_ref().unwrap().display_name.as_deref(),
        Some("Boss")
    );
    let cleared = patch(
        &user,
        operations(json!([{"op": "remove", "path": "urn:ietf:params:scim:schemas:extension:enterprise:2.0:User"}])),
    )
    .unwrap();
    assert_eq!(
        (cleared.department, cleared.employee_number, cleared.manager),
        (None, None, None)
    );
    let merged = patch(
        &user,
        operations(json!([{
            "op": "add",
            "path": "urn:ietf:params:scim:schemas:extension:enterprise:2.0:User",
            "value": {"department": "Support"}
        }])),
    )
    .unwrap();
    assert_eq!(merged.department.as_deref(), Some("Support"));
    assert_eq!(merged.employee_number.as_deref(), Some("42"));
}

#[test]
fn start_date_from_the_flow_extension_and_the_common_aliases() {
    let mut body = okta_create_body();
    body["urn:ietf:params:scim:schemas:extension:flow:2.0:User"] =
        json!({"startDate": "2026-04-01"});
    let user = User::from_json(&body).unwrap();
    assert_eq!(
        user.start_date,
        Some(StartDate::Date(
            NaiveDate::from_ymd_opt(2026, 4, 1).unwrap()
        ))
    );
    let mut body = okta_create_body();
    body["urn:ietf:params:scim:schemas:extension:enterprise:2.0:User"] =
        json!({"employeeHireDate": "2026-04-01T00:00:00Z"});
    let user = User::from_json(&body).unwrap();
    let start = user.start_date.unwrap();
    assert!(matches!(start, StartDate::Timestamp(_)));
    assert_eq!(start.date(), NaiveDate::from_ymd_opt(2026, 4, 1).unwrap());
    assert_eq!(start.to_string(), "2026-04-01T00:00:00Z");
    let mut body = okta_create_body();
    body["hireDate"] = json!("2026-04-01T08:00:00");
    assert_eq!(
        User::from_json(&body).unwrap().start_date,
        Some(StartDate::Date(
            NaiveDate::from_ymd_opt(2026, 4, 1).unwrap()
        ))
    );
    let changed = patch(
        &user,
        operations(json!([{
            "op": "replace",
            "path": "urn:ietf:params:scim:schemas:extension:flow:2.0:User:startDate",
            "value": "2026-05-04"
        }])),
    )
    .unwrap();
    assert_eq!(changed.start_date.unwrap().to_string(), "2026-05-04");
    let error = patch(
        &user,
        operations(json!([{"op": "replace", "path": "startDate", "value": "04/05/2026"}])),
    )
    .unwrap_err();
    assert_eq!(error.scim_type(), Some(ScimType::InvalidValue));
    assert!(error.detail().contains("YYYY-MM-DD"), "{error}");
}

#[test]
fn read_only_and_required_attributes_are_guarded() {
    let user = User::from_json(&okta_create_body()).unwrap();
    for path in ["id", "meta.created", "meta"] {
        let error = patch(
            &user,
            operations(json!([{"op": "replace", "path": path, "value": "x"}])),
        )
        .unwrap_err();
        assert_eq!(error.scim_type(), Some(ScimType::Mutability), "{path}");
    }
    for (operation, expected) in [
        (
            json!({"op": "remove", "path": "userName"}),
            "userName is required and cannot be removed",
        ),
        (
            json!({"op": "replace", "path": "userName", "value": ""}),
            "userName must not be empty",
        ),
        (
            json!({"op": "replace", "path": "userName", "value": null}),
            "userName is required and cannot be removed",
        ),
        (
            json!({"op": "remove", "path": "active"}),
            "active cannot be removed",
        ),
        (
            json!({"op": "remove", "path": "emails[type eq \"work\"].type"}),
            "",
        ),
    ] {
        let result = patch(&user, operations(json!([operation])));
        if expected.is_empty() {
            assert!(result.is_ok());
            continue;
        }
        let error = result.unwrap_err();
        assert_eq!(error.scim_type(), Some(ScimType::InvalidValue), "{error}");
        assert!(error.detail().contains(expected), "{error}");
    }
}

#[test]
fn wrong_types_and_missing_user_name() {
    let cases = [
        (
            json!("alice@example.com"),
            ScimType::InvalidSyntax,
            "the body must be a User object, not the string",
        ),
        (
            json!({"schemas": "urn:ietf:params:scim:schemas:core:2.0:User", "userName": "a@b.c"}),
            ScimType::InvalidSyntax,
            "schemas must be an array",
        ),
        (
            json!({"displayName": "No Name"}),
            ScimType::InvalidValue,
            "userName is required",
        ),
        (
            json!({"userName": "   "}),
            ScimType::InvalidValue,
            "userName must not be empty",
        ),
        (
            json!({"userName": 42}),
            ScimType::InvalidValue,
            "userName must be a string, not the number 42",
        ),
        (
            json!({"userName": "a@b.c", "active": "maybe"}),
            ScimType::InvalidValue,
            "active must be true or false",
        ),
        (
            json!({"userName": "a@b.c", "name": "Ann"}),
            ScimType::InvalidValue,
            "name must be an object",
        ),
        (
            json!({"userName": "a@b.c", "name": {"givenName": 1}}),
            ScimType::InvalidValue,
            "name.givenName must be a string",
        ),
        (
            json!({"userName": "a@b.c", "emails": "a@b.c"}),
            ScimType::InvalidValue,
            "emails must be an array of objects",
        ),
        (
            json!({"userName": "a@b.c", "emails": [{"type": "work"}]}),
            ScimType::InvalidValue,
            "emails.value is required",
        ),
        (
            json!({"userName": "a@b.c", "emails": [{"value": "a@b.c", "primary": "yes"}]}),
            ScimType::InvalidValue,
            "emails.primary must be true or false",
        ),
        (
            json!({"userName": "a@b.c", "urn:ietf:params:scim:schemas:extension:enterprise:2.0:User": "Sales"}),
            ScimType::InvalidValue,
            "must be an object",
        ),
        (
            json!({"userName": "a@b.c", "title": "x".repeat(MAX_STRING_LENGTH_FOR_TESTS + 1)}),
            ScimType::InvalidValue,
            "at most 1024",
        ),
    ];
    for (body, scim_type, expected) in cases {
        let error = User::from_json(&body).unwrap_err();
        assert_eq!(error.scim_type(), Some(scim_type), "{body}: {error}");
        assert!(
            error.detail().contains(expected),
            "{body}: {}",
            error.detail()
        );
    }
}

const MAX_STRING_LENGTH_FOR_TESTS: usize = crate::MAX_STRING_LENGTH;

#[test]
fn unknown_attributes_are_ignored_in_bodies_and_patches() {
    let mut body = okta_create_body();
    body["phoneNumbers"] = json!([{"value": "555-555-5555", "type": "work"}]);
    body["urn:ietf:params:scim:schemas:extension:custom:2.0:User"] = json!({"worksiteId": "180"});
    body["$ref"] = json!("x");
    body["weird key!"] = json!(1);
    let user = User::from_json(&body).unwrap();
    assert_eq!(user, User::from_json(&okta_create_body()).unwrap());
    let unchanged = patch(
        &user,
        operations(json!([
            {"op": "Add", "path": "phoneNumbers[type eq \"mobile\"].value", "value": "555"},
            {"op": "Add", "path": "nickName", "value": "Babs"},
            {"op": "add", "value": {"nickName": "Babs", "preferredLanguage": "en"}},
            {"op": "Replace", "path": "addresses[type eq \"work\"].locality", "value": "Paris"},
            {"op": "Replace", "path": "name.middleName", "value": "M"},
            {"op": "Remove", "path": "urn:ietf:params:scim:schemas:extension:custom:2.0:User:worksiteId"}
        ])),
    )
    .unwrap();
    assert_eq!(unchanged, user);
}

#[test]
fn emails_add_merge_primary_and_remove() {
    let user = User::from_json(&okta_create_body()).unwrap();
    let changed = patch(
        &user,
        operations(json!([
            {"op": "add", "path": "emails", "value": [{"value": "test@home.example", "type": "home", "primary": true}]},
            {"op": "add", "path": "emails", "value": [{"value": "TEST.USER@okta.local", "type": "other"}]}
        ])),
    )
    .unwrap();
    assert_eq!(
        changed.emails,
        vec![
            // The same address again updates it, spelling included.
            Email {
                value: "TEST.USER@okta.local".into(),
                kind: Some("other".into()),
                primary: false,
            },
            Email {
                value: "test@home.example".into(),
                kind: Some("home".into()),
                primary: true,
            },
        ]
    );
    let removed = patch(
        &changed,
        operations(json!([{"op": "remove", "path": "emails[type eq \"home\"]"}])),
    )
    .unwrap();
    assert_eq!(removed.emails.len(), 1);
    // Removing what is not there changes nothing (retries are harmless).
    assert_eq!(
        patch(
            &removed,
            operations(json!([{"op": "remove", "path": "emails[type eq \"home\"]"}]))
        )
        .unwrap(),
        removed
    );
    let none = patch(
        &changed,
        operations(json!([{"op": "remove", "path": "emails"}])),
    )
    .unwrap();
    assert!(none.emails.is_empty());
    let replaced = patch(
        &changed,
        operations(json!([{"op": "replace", "path": "emails", "value": [{"value": "n@x.example", "primary": true}, {"value": "m@x.example", "primary": true}]}])),
    )
    .unwrap();
    assert_eq!(
        replaced.emails.iter().filter(|email| email.primary).count(),
        1,
        "at most one primary"
    );
    let retyped = patch(
        &changed,
        operations(json!([{"op": "replace", "path": "emails[value eq \"test@home.example\"]", "value": {"type": "work"}}])),
    )
    .unwrap();
    assert_eq!(retyped.emails[1].kind.as_deref(), Some("work"));
    assert_eq!(retyped.emails[1].value, "test@home.example");
    let dropped_by_value = patch(
        &changed,
        operations(json!([{"op": "remove", "path": "emails[type eq \"home\"].value"}])),
    )
    .unwrap();
    assert_eq!(dropped_by_value.emails.len(), 1);
}

#[test]
fn a_failing_operation_changes_nothing() {
    let user = User::from_json(&okta_create_body()).unwrap();
    let error = patch(
        &user,
        operations(json!([
            {"op": "replace", "path": "title", "value": "Changed"},
            {"op": "replace", "path": "id", "value": "usr_other"}
        ])),
    )
    .unwrap_err();
    assert_eq!(error.scim_type(), Some(ScimType::Mutability));
    assert_eq!(
        error.detail(),
        "Operations[1] (replace id): 'id' is read-only"
    );
    assert_eq!(user.title, None);
}

#[test]
fn renders_schemas_id_attributes_extensions_and_meta() {
    let mut user = User::from_json(&okta_create_body()).unwrap();
    user.title = Some("Engineer".into());
    user.department = Some("R&D".into());
    user.manager = Some(Manager {
        value: Some("usr_boss".into()),
        display_name: Some("Boss".into()),
    });
    user.start_date = StartDate::parse("2026-04-01");
    let rendered = user.to_json(&meta(), "https://flow.example.com");
    assert_eq!(
        rendered,
        json!({
            "schemas": [
                "urn:ietf:params:scim:schemas:core:2.0:User",
                "urn:ietf:params:scim:schemas:extension:enterprise:2.0:User",
                "urn:ietf:params:scim:schemas:extension:flow:2.0:User"
            ],
            "id": "usr_0190d5b0-0000-7000-8000-000000000001",
            "externalId": "00ujl29u0le5T6Aj10h7",
            "userName": "test.user@okta.local",
            "name": {"givenName": "Test", "familyName": "User"},
            "displayName": "Test User",
            "title": "Engineer",
            "active": true,
            "emails": [{"value": "test.user@okta.local", "type": "work", "primary": true}],
            "urn:ietf:params:scim:schemas:extension:enterprise:2.0:User": {
                "department": "R&D",
                "manager": {
                    "value": "usr_boss",
                    "displayName": "Boss",
                    "$ref": "https://flow.example.com/scim/v2/Users/usr_boss"
                }
            },
            "urn:ietf:params:scim:schemas:extension:flow:2.0:User": {"startDate": "2026-04-01"},
            "meta": {
                "resourceType": "User",
                "created": "2026-03-01T09:00:00.000Z",
                "lastModified": "2026-03-02T09:30:00.000Z",
                "location": "https://flow.example.com/scim/v2/Users/usr_0190d5b0-0000-7000-8000-000000000001",
                "version": "W/\"3\""
            }
        })
    );
    // What is rendered reads back as the same user.
    assert_eq!(User::from_json(&rendered).unwrap(), user);
    let plain = User::new("a@b.c").to_json(&meta(), "https://flow.example.com");
    assert_eq!(
        plain["schemas"],
        json!(["urn:ietf:params:scim:schemas:core:2.0:User"])
    );
    assert!(plain.get("emails").is_none());
}

#[test]
fn every_writable_user_attribute_can_be_patched() {
    let user = User::new("a@b.c");
    let samples = [
        ("userName", json!("z@b.c")),
        ("name", json!({"givenName": "G"})),
        ("displayName", json!("D")),
        ("title", json!("T")),
        ("active", json!(false)),
        ("emails", json!([{"value": "e@b.c"}])),
        ("externalId", json!("X")),
        (
            "urn:ietf:params:scim:schemas:extension:enterprise:2.0:User:employeeNumber",
            json!("7"),
        ),
        (
            "urn:ietf:params:scim:schemas:extension:enterprise:2.0:User:department",
            json!("Dep"),
        ),
        (
            "urn:ietf:params:scim:schemas:extension:enterprise:2.0:User:manager",
            json!({"value": "m"}),
        ),
        (
            "urn:ietf:params:scim:schemas:extension:flow:2.0:User:startDate",
            json!("2026-01-01"),
        ),
    ];
    let declared: Vec<String> = schema::USER
        .attributes
        .iter()
        .map(|attribute| attribute.name.to_owned())
        .chain(
            [&schema::ENTERPRISE_USER, &schema::FLOW_USER]
                .iter()
                .flat_map(|extension| {
                    extension
                        .attributes
                        .iter()
                        .map(|attribute| format!("{}:{}", extension.id, attribute.name))
                }),
        )
        .chain(["externalId".to_owned()])
        .collect();
    let mut sampled: Vec<String> = samples.iter().map(|(path, _)| (*path).to_owned()).collect();
    sampled.sort();
    let mut declared_sorted = declared.clone();
    declared_sorted.sort();
    assert_eq!(
        sampled, declared_sorted,
        "every declared attribute has a sample"
    );
    for (path, value) in samples {
        let changed = patch(
            &user,
            operations(json!([{"op": "replace", "path": path, "value": value}])),
        )
        .unwrap();
        assert_ne!(changed, user, "{path} changed nothing");
    }
}

#[test]
fn garbled_patch_bodies_never_panic() {
    let user = User::from_json(&entra_create_body()).unwrap();
    let seed = operations(json!([
        {"op": "Replace", "path": "emails[type eq \"work\"].value", "value": "x@y.z"},
        {"op": "replace", "value": {"active": "False", "name.givenName": "G", "urn:ietf:params:scim:schemas:extension:enterprise:2.0:User": {"manager": "m"}}},
        {"op": "Add", "path": "emails", "value": [{"value": "a@b.c", "primary": true}]},
        {"op": "Remove", "path": "emails[value eq \"a@b.c\"]"}
    ]))
    .to_string();
    let characters: Vec<char> = seed.chars().collect();
    let mut parsed = 0;
    for cut in 0..characters.len() {
        for noise in ['"', '[', ']', '{', '}', ':', ',', 'x', '\\', '1'] {
            let mut garbled = characters.clone();
            garbled[cut] = noise;
            let garbled: String = garbled.into_iter().collect();
            if let Ok(body) = serde_json::from_str::<Value>(&garbled) {
                parsed += 1;
                if let Ok(request) = PatchRequest::parse(&body) {
                    let _ = user.apply_patch(&request.operations);
                }
                let _ = User::from_json(&body);
            }
        }
    }
    assert!(parsed > 100, "{parsed}");
    // Values of every JSON type in every position.
    let values = [
        json!(null),
        json!(true),
        json!(1),
        json!("s"),
        json!([]),
        json!({}),
        json!([1]),
        json!({"value": 1}),
    ];
    for path in [
        "userName",
        "name",
        "name.givenName",
        "active",
        "emails",
        "emails.value",
        "emails[type eq \"work\"]",
        "emails[type eq \"work\"].primary",
        "urn:ietf:params:scim:schemas:extension:enterprise:2.0:User",
        "urn:ietf:params:scim:schemas:extension:enterprise:2.0:User:manager",
        "startDate",
    ] {
        for op in ["add", "replace", "remove"] {
            for value in &values {
                let body = operations(json!([{"op": op, "path": path, "value": value}]));
                if let Ok(request) = PatchRequest::parse(&body) {
                    let _ = user.apply_patch(&request.operations);
                }
                let mut create = entra_create_body();
                create[path] = value.clone();
                let _ = User::from_json(&create);
            }
        }
    }
}

fn addresses(user: &User) -> Vec<&str> {
    user.emails
        .iter()
        .map(|email| email.value.as_str())
        .collect()
}

#[test]
fn at_most_ten_emails_in_a_body_or_after_a_patch() {
    let emails = |count: usize| -> Vec<Value> {
        (0..count)
            .map(|index| json!({"value": format!("ann{index}@example.com"), "type": "work"}))
            .collect()
    };
    let user =
        User::from_json(&json!({"userName": "ann@example.com", "emails": emails(MAX_EMAILS)}))
            .unwrap();
    assert_eq!(user.emails.len(), MAX_EMAILS);
    let error = User::from_json(&json!({"userName": "ann@example.com", "emails": emails(10_000)}))
        .unwrap_err();
    assert_eq!(error.scim_type(), Some(ScimType::InvalidValue));
    assert!(
        error.detail().contains("emails holds at most 10 values"),
        "{error}"
    );
    // One more through PATCH, by a path-less value, a plain add or a filtered path.
    for operation in [
        json!({"op": "add", "path": "emails", "value": [{"value": "new@example.com"}]}),
        json!({"op": "add", "value": {"emails": [{"value": "new@example.com"}]}}),
        json!({"op": "add", "path": "emails[type eq \"home\"].value", "value": "new@example.com"}),
    ] {
        let error = patch(&user, operations(json!([operation.clone()]))).unwrap_err();
        assert_eq!(
            error.scim_type(),
            Some(ScimType::InvalidValue),
            "{operation}"
        );
        assert!(
            error.detail().contains("at most 10"),
            "{operation}: {error}"
        );
    }
    // Adding an address already there (in another case) updates it: still ten.
    let same = patch(
        &user,
        operations(json!([{"op": "add", "path": "emails", "value": [{"value": "ANN3@example.com", "primary": true}]}])),
    )
    .unwrap();
    assert_eq!(same.emails.len(), MAX_EMAILS);
    assert!(same.emails[3].primary);
}

#[test]
fn the_largest_patch_of_emails_applies_every_operation() {
    // A thousand operations of ten values each (the most one PATCH carries): each adds ten
    // addresses, the next removes them again by value list or by filter.
    let user = User::new("ann@example.com");
    let batch = |round: usize| -> Vec<Value> {
        (0..10)
            .map(|index| json!({"value": format!("r{round}-{index}@example.com")}))
            .collect()
    };
    let mut list = Vec::new();
    for round in 0..500 {
        list.push(json!({"op": "add", "path": "emails", "value": batch(round)}));
        if round % 2 == 0 {
            list.push(json!({"op": "remove", "path": "emails", "value": batch(round)}));
        } else {
            let filter = (0..10)
                .map(|index| format!("value eq \"R{round}-{index}@EXAMPLE.com\""))
                .collect::<Vec<_>>()
                .join(" or ");
            list.push(
                json!({"op": "remove", "path": format!("emails[{filter}]"), "value": batch(round)}),
            );
        }
    }
    let changed = patch(&user, operations(json!(list))).unwrap();
    assert!(changed.emails.is_empty(), "{:?}", addresses(&changed));
}
