//! A person and their assignments (design §16): `GET /v1/users/{id}` with the attributes the
//! identity provider sent and the groups, and `GET /v1/users/{id}/assignments` across flows.

use flow_common::db::orgs::Tier;
use flow_tests::TestApp;
use serde_json::json;

const USER_SCHEMA: &str = "urn:ietf:params:scim:schemas:core:2.0:User";
const GROUP_SCHEMA: &str = "urn:ietf:params:scim:schemas:core:2.0:Group";
const ENTERPRISE: &str = "urn:ietf:params:scim:schemas:extension:enterprise:2.0:User";

#[tokio::test]
async fn a_person_shows_their_attributes_groups_and_every_assignment_only_to_their_organization() {
    let app = TestApp::spawn().await;
    let org = app.create_org(Tier::Standard).await;
    let other = app.create_org(Tier::Standard).await;
    let created = app
        .scim_request(
            &org.key,
            reqwest::Method::POST,
            "/Users",
            Some(&json!({
                "schemas": [USER_SCHEMA, ENTERPRISE],
                "userName": "pat@example.com",
                "active": true,
                "displayName": "Pat Doe",
                "emails": [{ "primary": true, "value": "pat@example.com" }],
                "title": "Engineer",
                ENTERPRISE: { "department": "R&D", "employeeNumber": "42",
                              "manager": { "value": "mgr-7", "displayName": "Sam Boss" } }
            })),
            &[],
        )
        .await;
    assert_eq!(created.status, 201, "{:?}", created.body);
    let id = created.body["id"].as_str().expect("id").to_owned();
    let group = app
        .scim_request(
            &org.key,
            reqwest::Method::POST,
            "/Groups",
            Some(&json!({ "schemas": [GROUP_SCHEMA], "displayName": "Sales",
                          "members": [{ "value": id }] })),
            &[],
        )
        .await;
    assert_eq!(group.status, 201, "{:?}", group.body);

    let person = app.get(&org, &format!("/v1/users/{id}")).await;
    assert_eq!(person.status, 200, "{:?}", person.body);
    assert_eq!(person.body["email"], json!("pat@example.com"));
    assert_eq!(person.body["title"], json!("Engineer"));
    assert_eq!(person.body["department"], json!("R&D"));
    assert_eq!(person.body["managerId"], json!("mgr-7"));
    assert_eq!(person.body["active"], json!(true));
    assert_eq!(person.body["groups"][0]["displayName"], json!("Sales"));
    assert_eq!(person.body["groups"][0]["groupId"], group.body["id"]);

    // Assignments across flows; a cancelled one only when asked for.
    let first = app.create_flow(&org, "First", &[10]).await;
    let second = app.create_flow(&org, "Second", &[10]).await;
    let a = app
        .assign_persisted(&org, &first, "pat@example.com", json!({}))
        .await;
    let b = app
        .assign_persisted(&org, &second, "pat@example.com", json!({}))
        .await;
    let listed = app.get(&org, &format!("/v1/users/{id}/assignments")).await;
    assert_eq!(listed.status, 200, "{:?}", listed.body);
    let ids: Vec<&str> = listed.body["data"]
        .as_array()
        .expect("data")
        .iter()
        .map(|row| row["assignmentId"].as_str().expect("id"))
        .collect();
    assert_eq!(ids, [a.as_str(), b.as_str()]);
    let cancelled = app
        .post(&org, &format!("/v1/assignments/{a}/cancel"), &json!({}))
        .await;
    assert_eq!(cancelled.status, 200, "{:?}", cancelled.body);
    app.wait_for_status(&org, &a, "cancelled").await;
    let open = app.get(&org, &format!("/v1/users/{id}/assignments")).await;
    assert_eq!(open.body["data"].as_array().expect("data").len(), 1);
    let all = app
        .get(
            &org,
            &format!("/v1/users/{id}/assignments?includeCancelled=true&limit=1"),
        )
        .await;
    assert_eq!(all.body["data"].as_array().expect("data").len(), 1);
    let cursor = all.body["nextCursor"].as_str().expect("cursor");
    let next = app
        .get(
            &org,
            &format!("/v1/users/{id}/assignments?includeCancelled=true&limit=1&cursor={cursor}"),
        )
        .await;
    assert_eq!(next.body["data"][0]["assignmentId"], json!(b));

    // Another organization, an unknown id and a bad filter.
    assert_eq!(
        app.get(&other, &format!("/v1/users/{id}")).await.status,
        404
    );
    assert_eq!(
        app.get(&other, &format!("/v1/users/{id}/assignments"))
            .await
            .status,
        404
    );
    assert_eq!(app.get(&org, "/v1/users/usr_nope").await.status, 404);
    let bad = app
        .get(&org, &format!("/v1/users/{id}/assignments?status=done"))
        .await;
    assert_eq!(bad.status, 400, "{:?}", bad.body);
}
