//! People as an identity provider provisions them (SCIM), with the attributes rules, the
//! dashboard and teams read.

use serde_json::json;

use crate::{TestApp, TestOrg};

/// The SCIM core user schema.
pub const USER_SCHEMA: &str = "urn:ietf:params:scim:schemas:core:2.0:User";
/// The SCIM core group schema.
pub const GROUP_SCHEMA: &str = "urn:ietf:params:scim:schemas:core:2.0:Group";
/// The SCIM enterprise user extension.
pub const ENTERPRISE: &str = "urn:ietf:params:scim:schemas:extension:enterprise:2.0:User";

/// Provisions a person through SCIM as an identity provider does; returns their id.
pub async fn provision(
    app: &TestApp,
    org: &TestOrg,
    email: &str,
    name: &str,
    department: &str,
    manager: Option<&str>,
) -> String {
    let mut enterprise = json!({ "department": department });
    if let Some(manager) = manager {
        enterprise["manager"] = json!({ "value": manager });
    }
    let body = json!({
        "schemas": [USER_SCHEMA, ENTERPRISE],
        "userName": email,
        "externalId": format!("ext-{email}"),
        "active": true,
        "displayName": name,
        "title": "Engineer",
        "emails": [{ "primary": true, "value": email }],
        ENTERPRISE: enterprise,
    });
    let created = app
        .scim_request(&org.key, reqwest::Method::POST, "/Users", Some(&body), &[])
        .await;
    assert_eq!(created.status, 201, "{:?}", created.body);
    created.body["id"].as_str().expect("id").to_owned()
}

/// Provisions a group with `members` (user ids) through SCIM; returns its id.
pub async fn provision_group(app: &TestApp, org: &TestOrg, name: &str, members: &[&str]) -> String {
    let members: Vec<serde_json::Value> = members
        .iter()
        .map(|member| json!({ "value": member }))
        .collect();
    let created = app
        .scim_request(
            &org.key,
            reqwest::Method::POST,
            "/Groups",
            Some(&json!({ "schemas": [GROUP_SCHEMA], "displayName": name, "members": members })),
            &[],
        )
        .await;
    assert_eq!(created.status, 201, "{:?}", created.body);
    created.body["id"].as_str().expect("id").to_owned()
}
