//! SCIM 2.0 at `/scim/v2`: every operation, the request sequences Okta and Microsoft Entra ID
//! send, organization scoping, bad input answered with SCIM errors (never a 500), the users it
//! shares with `/v1/users`, and deactivation: refused assigns, stopped schedules and overdue
//! events, reactivation.

use std::time::Duration;

use flow_common::db::orgs::Tier;
use flow_tests::enrollment::{assigned_by, create_rule, matched_by};
use flow_tests::{TestApp, TestOrg, TestResponse};
use serde_json::{Value, json};

const SCIM_JSON: &str = "application/scim+json";
const ERROR_SCHEMA: &str = "urn:ietf:params:scim:api:messages:2.0:Error";
const PATCH_OP: &str = "urn:ietf:params:scim:api:messages:2.0:PatchOp";
const USER_SCHEMA: &str = "urn:ietf:params:scim:schemas:core:2.0:User";
const GROUP_SCHEMA: &str = "urn:ietf:params:scim:schemas:core:2.0:Group";
const ENTERPRISE: &str = "urn:ietf:params:scim:schemas:extension:enterprise:2.0:User";

/// The API without workers, for what needs none.
async fn api_only() -> TestApp {
    TestApp::spawn_with(flow_tests::TestOptions {
        assign_worker: false,
        ..Default::default()
    })
    .await
}

/// Sends a SCIM request as providers do: `application/scim+json`, the org's key.
async fn scim(
    app: &TestApp,
    key: &str,
    method: reqwest::Method,
    path: &str,
    body: Option<&Value>,
    headers: &[(&str, &str)],
) -> TestResponse {
    app.scim_request(key, method, path, body, headers).await
}

async fn get(app: &TestApp, org: &TestOrg, path: &str) -> TestResponse {
    scim(app, &org.key, reqwest::Method::GET, path, None, &[]).await
}

async fn post(app: &TestApp, org: &TestOrg, path: &str, body: Value) -> TestResponse {
    scim(app, &org.key, reqwest::Method::POST, path, Some(&body), &[]).await
}

async fn put(app: &TestApp, org: &TestOrg, path: &str, body: Value) -> TestResponse {
    scim(app, &org.key, reqwest::Method::PUT, path, Some(&body), &[]).await
}

async fn patch(app: &TestApp, org: &TestOrg, path: &str, operations: Value) -> TestResponse {
    let body = json!({ "schemas": [PATCH_OP], "Operations": operations });
    scim(
        app,
        &org.key,
        reqwest::Method::PATCH,
        path,
        Some(&body),
        &[],
    )
    .await
}

async fn delete(app: &TestApp, org: &TestOrg, path: &str) -> TestResponse {
    scim(app, &org.key, reqwest::Method::DELETE, path, None, &[]).await
}

/// `filter` percent-encoded into a query string.
fn filtered(endpoint: &str, filter: &str) -> String {
    let encoded: String = url::form_urlencoded::byte_serialize(filter.as_bytes()).collect();
    format!("{endpoint}?filter={encoded}")
}

/// Asserts a SCIM error: its status (also in the body, as a string), its `scimType`, the media
/// type.
fn assert_scim_error(response: &TestResponse, status: u16, scim_type: Option<&str>) {
    assert_eq!(response.status, status, "{:?}", response.body);
    assert_eq!(
        response.body["schemas"],
        json!([ERROR_SCHEMA]),
        "{:?}",
        response.body
    );
    assert_eq!(response.body["status"], json!(status.to_string()));
    match scim_type {
        Some(kind) => assert_eq!(
            response.body["scimType"],
            json!(kind),
            "{:?}",
            response.body
        ),
        None => assert!(
            response.body.get("scimType").is_none(),
            "{:?}",
            response.body
        ),
    }
    assert!(
        response.body["detail"]
            .as_str()
            .is_some_and(|detail| !detail.is_empty()),
        "{:?}",
        response.body
    );
    assert!(
        response
            .header("content-type")
            .is_some_and(|value| value.starts_with(SCIM_JSON)),
        "{:?}",
        response.headers
    );
}

/// The user Okta creates: its body as Okta sends it.
fn okta_user(email: &str, given: &str, family: &str) -> Value {
    json!({
        "schemas": [USER_SCHEMA],
        "userName": email,
        "name": { "givenName": given, "familyName": family },
        "emails": [{ "primary": true, "value": email, "type": "work" }],
        "displayName": format!("{given} {family}"),
        "locale": "en-US",
        "externalId": format!("00u{given}"),
        "groups": [],
        "password": "never-stored-1!",
        "active": true
    })
}

fn id_of(response: &TestResponse) -> String {
    response.body["id"].as_str().expect("id").to_owned()
}

async fn v1_user(app: &TestApp, org: &TestOrg, email: &str) -> Value {
    let response = app.get(org, &format!("/v1/users?email={email}")).await;
    assert_eq!(response.status, 200, "{:?}", response.body);
    response.body["data"][0].clone()
}

async fn assign(app: &TestApp, org: &TestOrg, flow: &str, email: &str) -> TestResponse {
    app.post(
        org,
        "/v1/flows/assign",
        &json!({ "flowId": flow, "userEmail": email }),
    )
    .await
}

#[tokio::test]
async fn discovery_documents_are_served_as_scim_json_to_any_key_and_errors_are_scim_errors() {
    let app = api_only().await;
    let org = app.create_org(Tier::Standard).await;

    let config = get(&app, &org, "/ServiceProviderConfig").await;
    assert_eq!(config.status, 200, "{:?}", config.body);
    assert_eq!(config.header("content-type"), Some(SCIM_JSON));
    assert_eq!(config.body["patch"]["supported"], json!(true));
    assert_eq!(config.body["filter"]["maxResults"], json!(200));
    assert_eq!(config.body["etag"]["supported"], json!(true));

    let types = get(&app, &org, "/ResourceTypes").await;
    assert_eq!(types.status, 200);
    let names: Vec<&str> = types.body["Resources"]
        .as_array()
        .expect("Resources")
        .iter()
        .filter_map(|resource| resource["name"].as_str())
        .collect();
    assert_eq!(names, ["User", "Group"]);
    assert_eq!(get(&app, &org, "/ResourceTypes/User").await.status, 200);

    let schemas = get(&app, &org, "/Schemas").await;
    assert_eq!(schemas.status, 200);
    assert_eq!(schemas.body["totalResults"], json!(4));
    let user = get(&app, &org, &format!("/Schemas/{USER_SCHEMA}")).await;
    assert_eq!(user.status, 200);
    assert_eq!(user.body["id"], json!(USER_SCHEMA));

    assert_scim_error(&get(&app, &org, "/Schemas/urn:nope").await, 404, None);
    assert_scim_error(&get(&app, &org, "/Nothing").await, 404, None);
    let anonymous = app
        .client
        .get(format!("{}/scim/v2/Users", app.base_url))
        .send()
        .await
        .expect("sent");
    assert_eq!(anonymous.status().as_u16(), 401);
    let body: Value = anonymous.json().await.expect("json");
    assert_eq!(body["schemas"], json!([ERROR_SCHEMA]));
    let wrong_key = scim(
        &app,
        "fsk_000000000000000000000000000000000000000000000000",
        reqwest::Method::GET,
        "/Users",
        None,
        &[],
    )
    .await;
    assert_scim_error(&wrong_key, 401, None);
}

#[tokio::test]
async fn okta_provisions_looks_up_updates_deactivates_and_pushes_groups_as_it_sends_them() {
    let app = TestApp::spawn().await;
    let org = app.create_org(Tier::Standard).await;
    let flow = app.create_flow(&org, "Onboarding", &[30]).await;
    let lookup = filtered("/Users", r#"userName eq "ann@example.com""#) + "&startIndex=1&count=100";

    // Okta looks the user up before creating them.
    let none = get(&app, &org, &lookup).await;
    assert_eq!(none.status, 200, "{:?}", none.body);
    assert_eq!(none.body["totalResults"], json!(0));
    assert_eq!(none.body["Resources"], json!([]));

    let created = post(
        &app,
        &org,
        "/Users",
        okta_user("ann@example.com", "Ann", "Lee"),
    )
    .await;
    assert_eq!(created.status, 201, "{:?}", created.body);
    assert_eq!(created.header("content-type"), Some(SCIM_JSON));
    let id = id_of(&created);
    assert!(id.starts_with("usr_"), "{id}");
    let location = format!("{}/scim/v2/Users/{id}", app.base_url);
    assert_eq!(created.body["meta"]["location"], json!(location));
    assert_eq!(created.header("location"), Some(location.as_str()));
    assert_eq!(created.body["meta"]["resourceType"], json!("User"));
    let version = created.body["meta"]["version"].as_str().expect("version");
    assert_eq!(created.header("etag"), Some(version));
    assert_eq!(created.body["active"], json!(true));
    assert_eq!(created.body["name"]["givenName"], json!("Ann"));
    assert!(created.body.get("password").is_none());

    let found = get(&app, &org, &lookup).await;
    assert_eq!(found.body["totalResults"], json!(1));
    assert_eq!(found.body["Resources"][0]["id"], json!(id));

    // A profile change is a PUT of the whole user.
    let mut changed = okta_user("ann@example.com", "Ann", "Lee-Smith");
    changed["displayName"] = json!("Ann Lee-Smith");
    changed["title"] = json!("Account Executive");
    changed["id"] = json!(id);
    let replaced = put(&app, &org, &format!("/Users/{id}"), changed).await;
    assert_eq!(replaced.status, 200, "{:?}", replaced.body);
    assert_eq!(replaced.body["title"], json!("Account Executive"));
    assert_ne!(replaced.body["meta"]["version"].as_str(), Some(version));
    assert_eq!(
        v1_user(&app, &org, "ann@example.com").await["name"],
        json!("Ann Lee-Smith")
    );

    // Deactivation: a PATCH of active, never a DELETE.
    let deactivated = patch(
        &app,
        &org,
        &format!("/Users/{id}"),
        json!([{ "op": "replace", "value": { "active": false } }]),
    )
    .await;
    assert_eq!(deactivated.status, 200, "{:?}", deactivated.body);
    assert_eq!(deactivated.body["active"], json!(false));
    assert_eq!(
        v1_user(&app, &org, "ann@example.com").await["active"],
        json!(false)
    );
    let refused = assign(&app, &org, &flow, "ann@example.com").await;
    assert_eq!(refused.status, 409, "{:?}", refused.body);
    assert_eq!(refused.body["error"], json!("conflict"));
    let message = refused.body["message"].as_str().expect("message");
    assert!(
        message.contains("ann@example.com") && message.contains("deactivated"),
        "{message}"
    );

    // Group push: the group, then member PATCHes.
    let group = post(
        &app,
        &org,
        "/Groups",
        json!({ "schemas": [GROUP_SCHEMA], "displayName": "Sales", "members": [] }),
    )
    .await;
    assert_eq!(group.status, 201, "{:?}", group.body);
    let group_id = id_of(&group);
    assert!(group_id.starts_with("grp_"), "{group_id}");
    let added = patch(
        &app,
        &org,
        &format!("/Groups/{group_id}"),
        json!([{ "op": "add", "path": "members",
                 "value": [{ "value": id, "display": "ann@example.com" }] }]),
    )
    .await;
    assert_eq!(added.status, 200, "{:?}", added.body);
    assert_eq!(added.body["members"][0]["value"], json!(id));
    // `display` is Flow's (the user's name), returned when asked for.
    assert!(added.body["members"][0].get("display").is_none());
    let shown = get(
        &app,
        &org,
        &format!("/Groups/{group_id}?attributes=members.value,members.display"),
    )
    .await;
    assert_eq!(shown.body["members"][0]["display"], json!("Ann Lee-Smith"));
    // Okta renames with a path-less replace whose value carries the group's id.
    let renamed = patch(
        &app,
        &org,
        &format!("/Groups/{group_id}"),
        json!([{ "op": "replace", "value": { "id": group_id, "displayName": "Sales EMEA" } }]),
    )
    .await;
    assert_eq!(renamed.status, 200, "{:?}", renamed.body);
    assert_eq!(renamed.body["displayName"], json!("Sales EMEA"));
    assert_eq!(renamed.body["members"].as_array().map(Vec::len), Some(1));
    let by_name = get(
        &app,
        &org,
        &filtered("/Groups", r#"displayName eq "sales emea""#),
    )
    .await;
    assert_eq!(by_name.body["totalResults"], json!(1));
    let by_member = get(
        &app,
        &org,
        &filtered("/Groups", &format!(r#"members.value eq "{id}""#)),
    )
    .await;
    assert_eq!(by_member.body["totalResults"], json!(1));
    let removed = patch(
        &app,
        &org,
        &format!("/Groups/{group_id}"),
        json!([{ "op": "remove", "path": format!("members[value eq \"{id}\"]") }]),
    )
    .await;
    assert_eq!(removed.status, 200, "{:?}", removed.body);
    assert!(
        removed.body.get("members").is_none() || removed.body["members"] == json!([]),
        "{:?}",
        removed.body
    );
    let without_members = get(
        &app,
        &org,
        &format!("/Groups/{group_id}?excludedAttributes=members"),
    )
    .await;
    assert_eq!(without_members.status, 200);
    assert!(without_members.body.get("members").is_none());

    // Reactivation restores assignability.
    let reactivated = patch(
        &app,
        &org,
        &format!("/Users/{id}"),
        json!([{ "op": "replace", "value": { "active": true } }]),
    )
    .await;
    assert_eq!(reactivated.body["active"], json!(true));
    let assigned = assign(&app, &org, &flow, "ann@example.com").await;
    assert_eq!(assigned.status, 200, "{:?}", assigned.body);

    let actions: Vec<String> =
        sqlx::query_scalar("SELECT action FROM audit_events WHERE org_id = $1 ORDER BY id")
            .bind(org.id)
            .fetch_all(&app.db)
            .await
            .expect("audit");
    assert_eq!(
        actions,
        [
            "user.provisioned",
            "user.updated",
            "user.deactivated",
            "group.created",
            "group.updated",
            "group.updated",
            "group.updated",
            "user.reactivated"
        ]
    );
}

#[tokio::test]
async fn entra_id_sends_capitalised_ops_string_booleans_value_objects_and_deletes_after_soft_delete()
 {
    let app = api_only().await;
    let org = app.create_org(Tier::Standard).await;
    let created = post(
        &app,
        &org,
        "/Users",
        json!({
            "schemas": [USER_SCHEMA, ENTERPRISE],
            "externalId": "0a21f0f2-8d2a-4f8e-bf98-7363c4aed4ef",
            "userName": "bob@contoso.com",
            "active": true,
            "displayName": "Bob Smith",
            "emails": [{ "primary": true, "type": "work", "value": "bob@contoso.com" }],
            "name": { "formatted": "Bob Smith", "familyName": "Smith", "givenName": "Bob" },
            "title": "Engineer",
            ENTERPRISE: { "department": "R&D", "employeeNumber": "42",
                          "manager": { "value": "mgr-7" } }
        }),
    )
    .await;
    assert_eq!(created.status, 201, "{:?}", created.body);
    let id = id_of(&created);
    assert_eq!(created.body[ENTERPRISE]["department"], json!("R&D"));
    assert_eq!(created.body[ENTERPRISE]["manager"]["value"], json!("mgr-7"));

    // Entra ID matches on externalId, or on the work e-mail.
    let by_external = get(
        &app,
        &org,
        &filtered(
            "/Users",
            r#"externalId eq "0a21f0f2-8d2a-4f8e-bf98-7363c4aed4ef""#,
        ),
    )
    .await;
    assert_eq!(
        by_external.body["totalResults"],
        json!(1),
        "{:?}",
        by_external.body
    );
    // externalId is case-exact.
    let other_case = get(
        &app,
        &org,
        &filtered(
            "/Users",
            r#"externalId eq "0A21F0F2-8D2A-4F8E-BF98-7363C4AED4EF""#,
        ),
    )
    .await;
    assert_eq!(other_case.body["totalResults"], json!(0));

    let path = format!("/Users/{id}");
    let updated = patch(
        &app,
        &org,
        &path,
        json!([
            { "op": "Replace", "path": "emails[type eq \"work\"].value", "value": "robert@contoso.com" },
            { "op": "Add", "value": { "title": "Lead Engineer", "name.givenName": "Robert" } },
            { "op": "Replace", "path": format!("{ENTERPRISE}:department"), "value": "Sales" }
        ]),
    )
    .await;
    assert_eq!(updated.status, 200, "{:?}", updated.body);
    assert_eq!(updated.body["title"], json!("Lead Engineer"));
    assert_eq!(updated.body["name"]["givenName"], json!("Robert"));
    assert_eq!(updated.body[ENTERPRISE]["department"], json!("Sales"));
    let by_work_email = get(
        &app,
        &org,
        &filtered(
            "/Users",
            r#"emails[type eq "work"].value eq "ROBERT@contoso.com""#,
        ),
    )
    .await;
    assert_eq!(
        by_work_email.body["totalResults"],
        json!(1),
        "{:?}",
        by_work_email.body
    );

    // Soft delete: active as the string "False".
    let soft = patch(
        &app,
        &org,
        &path,
        json!([{ "op": "Replace", "path": "active", "value": "False" }]),
    )
    .await;
    assert_eq!(soft.status, 200, "{:?}", soft.body);
    assert_eq!(soft.body["active"], json!(false));
    let inactive = get(&app, &org, &filtered("/Users", "active eq false")).await;
    assert_eq!(inactive.body["totalResults"], json!(1));

    // Then the hard delete: gone for SCIM, kept (inactive) for the service.
    let deleted = delete(&app, &org, &path).await;
    assert_eq!(deleted.status, 204, "{:?}", deleted.body);
    assert_scim_error(&get(&app, &org, &path).await, 404, None);
    assert_scim_error(&delete(&app, &org, &path).await, 404, None);
    let listed = get(&app, &org, "/Users").await;
    assert_eq!(listed.body["totalResults"], json!(0));
    let kept = v1_user(&app, &org, "bob@contoso.com").await;
    assert_eq!(kept["userId"], json!(id));
    assert_eq!(kept["active"], json!(false));

    // Provisioned again: the same person, active again.
    let again = post(
        &app,
        &org,
        "/Users",
        json!({ "schemas": [USER_SCHEMA], "userName": "bob@contoso.com", "active": true }),
    )
    .await;
    assert_eq!(again.status, 201, "{:?}", again.body);
    assert_eq!(again.body["id"], json!(id));
    assert_eq!(again.body["active"], json!(true));
}

#[tokio::test]
async fn lists_page_with_start_index_and_count_and_project_attributes() {
    let app = api_only().await;
    let org = app.create_org(Tier::Standard).await;
    let emails: Vec<String> = (0..5)
        .map(|index| format!("p{index}@example.com"))
        .collect();
    let mut ids = Vec::new();
    for email in &emails {
        let created = post(
            &app,
            &org,
            "/Users",
            json!({ "userName": email, "title": "Rep" }),
        )
        .await;
        assert_eq!(created.status, 201, "{:?}", created.body);
        ids.push(id_of(&created));
    }
    ids.sort();
    let page = get(
        &app,
        &org,
        "/Users?startIndex=3&count=2&attributes=userName",
    )
    .await;
    assert_eq!(page.status, 200, "{:?}", page.body);
    assert_eq!(page.body["totalResults"], json!(5));
    assert_eq!(page.body["startIndex"], json!(3));
    assert_eq!(page.body["itemsPerPage"], json!(2));
    let resources = page.body["Resources"].as_array().expect("Resources");
    let page_ids: Vec<&str> = resources
        .iter()
        .filter_map(|user| user["id"].as_str())
        .collect();
    assert_eq!(page_ids, [ids[2].as_str(), ids[3].as_str()]);
    assert!(resources[0].get("userName").is_some());
    assert!(resources[0].get("title").is_none(), "{:?}", resources[0]);

    let excluded = get(
        &app,
        &org,
        &format!("/Users/{}?excludedAttributes=title", ids[0]),
    )
    .await;
    assert_eq!(excluded.status, 200);
    assert!(excluded.body.get("title").is_none());
    assert!(excluded.body.get("userName").is_some());

    let beyond = get(&app, &org, "/Users?startIndex=99").await;
    assert_eq!(beyond.body["totalResults"], json!(5));
    assert_eq!(beyond.body["Resources"], json!([]));
    let capped = get(&app, &org, "/Users?count=100000").await;
    assert_eq!(capped.status, 200);
    assert_eq!(capped.body["itemsPerPage"], json!(5));

    let starts = get(
        &app,
        &org,
        &filtered(
            "/Users",
            r#"userName sw "P1" or userName ew "3@example.com""#,
        ),
    )
    .await;
    assert_eq!(starts.body["totalResults"], json!(2), "{:?}", starts.body);
    let contains = get(
        &app,
        &org,
        &filtered(
            "/Users",
            r#"userName co "@EXAMPLE" and not (userName eq "p0@example.com")"#,
        ),
    )
    .await;
    assert_eq!(
        contains.body["totalResults"],
        json!(4),
        "{:?}",
        contains.body
    );
    let present = get(&app, &org, &filtered("/Users", "externalId pr")).await;
    assert_eq!(present.body["totalResults"], json!(0), "{:?}", present.body);
    let absent = get(
        &app,
        &org,
        &filtered("/Users", "not (externalId pr) and userName pr"),
    )
    .await;
    assert_eq!(absent.body["totalResults"], json!(5), "{:?}", absent.body);
}

#[tokio::test]
async fn if_match_must_name_the_current_version_or_the_change_is_412() {
    let app = api_only().await;
    let org = app.create_org(Tier::Standard).await;
    let created = post(
        &app,
        &org,
        "/Users",
        json!({ "userName": "etag@example.com" }),
    )
    .await;
    let id = id_of(&created);
    let version = created.header("etag").expect("etag").to_owned();
    let body = json!({ "schemas": [PATCH_OP],
                       "Operations": [{ "op": "replace", "path": "title", "value": "X" }] });
    let stale = scim(
        &app,
        &org.key,
        reqwest::Method::PATCH,
        &format!("/Users/{id}"),
        Some(&body),
        &[("if-match", "W/\"1\"")],
    )
    .await;
    assert_scim_error(&stale, 412, None);
    let current = scim(
        &app,
        &org.key,
        reqwest::Method::PATCH,
        &format!("/Users/{id}"),
        Some(&body),
        &[("if-match", version.as_str())],
    )
    .await;
    assert_eq!(current.status, 200, "{:?}", current.body);
    assert_ne!(current.header("etag"), Some(version.as_str()));
    // The old version no longer deletes it.
    let old = scim(
        &app,
        &org.key,
        reqwest::Method::DELETE,
        &format!("/Users/{id}"),
        None,
        &[("if-match", version.as_str())],
    )
    .await;
    assert_scim_error(&old, 412, None);
}

#[tokio::test]
async fn another_organizations_users_and_groups_are_404_to_every_operation() {
    let app = api_only().await;
    let mine = app.create_org(Tier::Standard).await;
    let theirs = app.create_org(Tier::Standard).await;
    let user = id_of(
        &post(
            &app,
            &theirs,
            "/Users",
            json!({ "userName": "x@their.example" }),
        )
        .await,
    );
    let group = id_of(
        &post(
            &app,
            &theirs,
            "/Groups",
            json!({ "displayName": "Theirs", "members": [{ "value": user }] }),
        )
        .await,
    );
    for path in [format!("/Users/{user}"), format!("/Groups/{group}")] {
        assert_scim_error(&get(&app, &mine, &path).await, 404, None);
        assert_scim_error(
            &patch(
                &app,
                &mine,
                &path,
                json!([{ "op": "replace", "path": "displayName", "value": "Mine" }]),
            )
            .await,
            404,
            None,
        );
        assert_scim_error(&delete(&app, &mine, &path).await, 404, None);
    }
    assert_scim_error(
        &put(
            &app,
            &mine,
            &format!("/Users/{user}"),
            json!({ "userName": "x@their.example" }),
        )
        .await,
        404,
        None,
    );
    assert_eq!(
        get(&app, &mine, "/Users").await.body["totalResults"],
        json!(0)
    );
    assert_eq!(
        get(&app, &mine, "/Groups").await.body["totalResults"],
        json!(0)
    );
    // Their user cannot join my group either.
    let refused = post(
        &app,
        &mine,
        "/Groups",
        json!({ "displayName": "Mine", "members": [{ "value": user }] }),
    )
    .await;
    assert_scim_error(&refused, 400, Some("invalidValue"));
    // And theirs is untouched.
    let still = get(&app, &theirs, &format!("/Groups/{group}")).await;
    assert_eq!(still.body["displayName"], json!("Theirs"));
    assert_eq!(still.body["members"][0]["value"], json!(user));
}

#[tokio::test]
async fn bad_input_is_answered_with_scim_errors_and_never_a_500() {
    let app = api_only().await;
    let org = app.create_org(Tier::Standard).await;
    let taken = post(
        &app,
        &org,
        "/Users",
        json!({ "userName": "taken@example.com" }),
    )
    .await;
    assert_eq!(taken.status, 201);
    let id = id_of(&taken);

    for filter in [
        r#"userName eq "unclosed"#,
        "userName eq",
        "(userName pr",
        "userName zz \"x\"",
    ] {
        assert_scim_error(
            &get(&app, &org, &filtered("/Users", filter)).await,
            400,
            Some("invalidFilter"),
        );
    }
    let unknown = get(&app, &org, &filtered("/Users", r#"nickName eq "x""#)).await;
    assert_scim_error(&unknown, 400, Some("invalidFilter"));
    let too_long = get(
        &app,
        &org,
        &filtered("/Users", &format!("userName eq \"{}\"", "a".repeat(5_000))),
    )
    .await;
    assert_scim_error(&too_long, 400, Some("invalidFilter"));
    assert_scim_error(&get(&app, &org, "/Users?startIndex=abc").await, 400, None);
    assert_scim_error(
        &get(&app, &org, "/Users?attributes=%25%25").await,
        400,
        None,
    );

    // Bodies: not JSON, not an object, the wrong media type, too large.
    let not_json = app
        .client
        .post(format!("{}/scim/v2/Users", app.base_url))
        .bearer_auth(&org.key)
        .header("content-type", SCIM_JSON)
        .body("{\"userName\": ")
        .send()
        .await
        .expect("sent");
    assert_eq!(not_json.status().as_u16(), 400);
    let body: Value = not_json.json().await.expect("json");
    assert_eq!(body["scimType"], json!("invalidSyntax"));
    assert_scim_error(
        &post(&app, &org, "/Users", json!([1, 2])).await,
        400,
        Some("invalidSyntax"),
    );
    let text = app
        .client
        .post(format!("{}/scim/v2/Users", app.base_url))
        .bearer_auth(&org.key)
        .header("content-type", "text/plain")
        .body("{}")
        .send()
        .await
        .expect("sent");
    assert_eq!(text.status().as_u16(), 415);
    assert_eq!(text.headers()["content-type"], SCIM_JSON);
    let huge = json!({ "userName": "big@example.com", "title": "x".repeat(2 * 1024 * 1024) });
    assert_scim_error(&post(&app, &org, "/Users", huge).await, 413, None);
    // application/json is accepted too.
    let plain = app
        .post(
            &org,
            "/scim/v2/Users",
            &json!({ "userName": "plain@example.com" }),
        )
        .await;
    assert_eq!(plain.status, 201, "{:?}", plain.body);

    // Values.
    assert_scim_error(
        &post(&app, &org, "/Users", json!({ "title": "x" })).await,
        400,
        Some("invalidValue"),
    );
    assert_scim_error(
        &post(
            &app,
            &org,
            "/Users",
            json!({ "userName": "not-an-address" }),
        )
        .await,
        400,
        Some("invalidValue"),
    );
    assert_scim_error(
        &post(&app, &org, "/Users", json!({ "userName": 7 })).await,
        400,
        Some("invalidValue"),
    );
    assert_scim_error(
        &post(
            &app,
            &org,
            "/Users",
            json!({ "userName": "TAKEN@example.com" }),
        )
        .await,
        409,
        Some("uniqueness"),
    );
    let path = format!("/Users/{id}");
    assert_scim_error(
        &patch(
            &app,
            &org,
            &path,
            json!([{ "op": "explode", "path": "title" }]),
        )
        .await,
        400,
        Some("invalidSyntax"),
    );
    assert_scim_error(
        &patch(
            &app,
            &org,
            &path,
            json!([{ "op": "replace", "path": "id", "value": "usr_1" }]),
        )
        .await,
        400,
        Some("mutability"),
    );
    assert_scim_error(
        &patch(&app, &org, &path, json!([{ "op": "remove" }])).await,
        400,
        Some("noTarget"),
    );
    assert_scim_error(
        &patch(
            &app,
            &org,
            &path,
            json!([{ "op": "replace", "path": "title.value", "value": "x" }]),
        )
        .await,
        400,
        Some("invalidPath"),
    );
    assert_scim_error(
        &patch(
            &app,
            &org,
            &path,
            json!([{ "op": "replace", "path": "userName", "value": "plain@example.com" }]),
        )
        .await,
        409,
        Some("uniqueness"),
    );
    assert_scim_error(&get(&app, &org, "/Users/nope").await, 404, None);
    assert_scim_error(
        &get(&app, &org, "/Users/usr_00000000000000000000000000000000").await,
        404,
        None,
    );
    assert_scim_error(
        &post(
            &app,
            &org,
            "/Groups",
            json!({ "displayName": "G", "members": [{ "value": "usr_nope" }] }),
        )
        .await,
        400,
        Some("invalidValue"),
    );
    assert_eq!(
        post(&app, &org, "/Groups", json!({ "displayName": "G" }))
            .await
            .status,
        201
    );
    assert_scim_error(
        &post(&app, &org, "/Groups", json!({ "displayName": "g" })).await,
        409,
        Some("uniqueness"),
    );
    let wrong_method = scim(
        &app,
        &org.key,
        reqwest::Method::PATCH,
        "/Users",
        Some(&json!({})),
        &[],
    )
    .await;
    assert_scim_error(&wrong_method, 405, None);
}

#[tokio::test]
async fn scim_users_are_the_users_of_v1_and_the_other_way_round() {
    let app = api_only().await;
    let org = app.create_org(Tier::Standard).await;
    app.create_users(&org, &["Carol@Example.com"]).await;
    let by_name = get(
        &app,
        &org,
        &filtered("/Users", r#"userName eq "carol@example.com""#),
    )
    .await;
    assert_eq!(by_name.body["totalResults"], json!(1), "{:?}", by_name.body);
    let carol = &by_name.body["Resources"][0];
    assert_eq!(carol["userName"], json!("Carol@Example.com"));
    assert_eq!(carol["active"], json!(true));
    // The address is the user's primary work e-mail, where Entra ID looks.
    assert_eq!(
        carol["emails"],
        json!([{ "value": "Carol@Example.com", "type": "work", "primary": true }])
    );
    let by_work = get(
        &app,
        &org,
        &filtered(
            "/Users",
            r#"emails[type eq "work"].value eq "carol@example.com""#,
        ),
    )
    .await;
    assert_eq!(by_work.body["totalResults"], json!(1));
    assert_scim_error(
        &post(
            &app,
            &org,
            "/Users",
            json!({ "userName": "carol@example.com" }),
        )
        .await,
        409,
        Some("uniqueness"),
    );

    let dave = post(
        &app,
        &org,
        "/Users",
        json!({ "userName": "dave@example.com", "displayName": "Dave" }),
    )
    .await;
    assert_eq!(dave.status, 201);
    let listed = v1_user(&app, &org, "dave@example.com").await;
    assert_eq!(listed["userId"], dave.body["id"]);
    assert_eq!(listed["name"], json!("Dave"));
    assert_eq!(listed["active"], json!(true));
}

#[tokio::test]
async fn deactivation_refuses_single_and_bulk_assigns_and_reactivation_restores_them() {
    let app = TestApp::spawn().await;
    let org = app.create_org(Tier::Standard).await;
    let flow = app.create_flow(&org, "Compliance", &[10]).await;
    app.create_users(&org, &["active@example.com"]).await;
    let user = id_of(
        &post(
            &app,
            &org,
            "/Users",
            json!({ "userName": "leaver@example.com", "active": false }),
        )
        .await,
    );

    let single = assign(&app, &org, &flow, "Leaver@example.com").await;
    assert_eq!(single.status, 409, "{:?}", single.body);
    assert_eq!(single.body["error"], json!("conflict"));
    let bulk = app
        .assign_bulk(
            &org,
            &[
                json!({ "flowId": flow, "userEmail": "active@example.com" }),
                json!({ "flowId": flow, "userEmail": "leaver@example.com" }),
            ],
            &[("x-request-id", "bulk-1")],
        )
        .await;
    assert_eq!(bulk.status, 200, "{:?}", bulk.body);
    let statuses: Vec<u64> = bulk.body["results"]
        .as_array()
        .expect("results")
        .iter()
        .map(|item| item["status"].as_u64().expect("status"))
        .collect();
    assert_eq!(statuses, [200, 409]);
    assert!(
        bulk.body["results"][1]["error"]["message"]
            .as_str()
            .is_some_and(|message| message.contains("leaver@example.com is deactivated")),
        "{:?}",
        bulk.body
    );

    let reactivated = patch(
        &app,
        &org,
        &format!("/Users/{user}"),
        json!([{ "op": "replace", "path": "active", "value": true }]),
    )
    .await;
    assert_eq!(reactivated.status, 200, "{:?}", reactivated.body);
    let again = assign(&app, &org, &flow, "leaver@example.com").await;
    assert_eq!(again.status, 200, "{:?}", again.body);
    let id = again.body["assignmentId"].as_str().expect("id").to_owned();
    app.eventually(Duration::from_secs(10), "the assignment", || async {
        (app.get(&org, &format!("/v1/assignments/{id}")).await.status == 200).then_some(())
    })
    .await;

    // Deactivated again: the report keeps the assignment, showing the user inactive.
    patch(
        &app,
        &org,
        &format!("/Users/{user}"),
        json!([{ "op": "replace", "path": "active", "value": false }]),
    )
    .await;
    let report = app
        .post(&org, "/v1/flows/report", &json!({ "flowId": flow }))
        .await;
    assert_eq!(report.status, 200, "{:?}", report.body);
    let rows = report.body["assignments"].as_array().expect("assignments");
    let mut shown: Vec<(String, bool)> = rows
        .iter()
        .map(|row| {
            (
                row["assigneeEmail"].as_str().expect("email").to_owned(),
                row["userActive"].as_bool().expect("userActive"),
            )
        })
        .collect();
    shown.sort();
    assert_eq!(
        shown,
        [
            ("active@example.com".to_owned(), true),
            ("leaver@example.com".to_owned(), false)
        ]
    );
}

#[tokio::test]
async fn deactivated_users_get_no_scheduled_occurrences_and_no_overdue_events() {
    let app = TestApp::spawn().await;
    let org = app.create_org(Tier::Standard).await;
    let flow = app.create_flow(&org, "Refresher", &[10]).await;
    let user = id_of(
        &post(
            &app,
            &org,
            "/Users",
            json!({ "userName": "sam@example.com" }),
        )
        .await,
    );
    let path = format!("/Users/{user}");
    let set_active = |active: bool| {
        let path = path.clone();
        let app = &app;
        let org = &org;
        async move {
            let response = patch(
                app,
                org,
                &path,
                json!([{ "op": "replace", "path": "active", "value": active }]),
            )
            .await;
            assert_eq!(response.status, 200, "{:?}", response.body);
        }
    };

    // An open assignment past its due date.
    let assigned = assign(&app, &org, &flow, "sam@example.com").await;
    assert_eq!(assigned.status, 200, "{:?}", assigned.body);
    let assignment = assigned.body["assignmentId"]
        .as_str()
        .expect("id")
        .to_owned();
    app.eventually(Duration::from_secs(10), "the assignment", || async {
        (app.get(&org, &format!("/v1/assignments/{assignment}"))
            .await
            .status
            == 200)
            .then_some(())
    })
    .await;
    sqlx::query("UPDATE assignments SET due_at = now() - interval '1 hour'")
        .execute(&app.db)
        .await
        .expect("past due");
    // A schedule that is due.
    let scheduled = app
        .post(
            &org,
            "/v1/flows/schedule",
            &json!({ "flowId": flow, "userEmail": "sam@example.com",
                     "scheduledAt": (chrono::Utc::now() + chrono::Duration::hours(1)).to_rfc3339() }),
        )
        .await;
    assert_eq!(scheduled.status, 201, "{:?}", scheduled.body);
    sqlx::query("UPDATE schedules SET scheduled_at = now() - interval '1 minute'")
        .execute(&app.db)
        .await
        .expect("due");

    set_active(false).await;
    let due_schedules = || async {
        let mut transaction = app.db.begin().await.expect("begin");
        let due = flow_common::db::schedules::claim_due(&mut transaction, chrono::Utc::now(), 10)
            .await
            .expect("claim");
        transaction.rollback().await.expect("rollback");
        due.len()
    };
    assert_eq!(due_schedules().await, 0);
    assert_eq!(
        flow_workers::scheduler::scan_overdue(&app.db, 10)
            .await
            .expect("scan"),
        0
    );
    let overdue_events = || async {
        sqlx::query_scalar::<_, i64>(
            "SELECT count(*) FROM outbox WHERE event_type = 'flow.overdue'",
        )
        .fetch_one(&app.db)
        .await
        .expect("count")
    };
    assert_eq!(overdue_events().await, 0);

    set_active(true).await;
    assert_eq!(due_schedules().await, 1);
    assert_eq!(
        flow_workers::scheduler::scan_overdue(&app.db, 10)
            .await
            .expect("scan"),
        1
    );
    assert_eq!(overdue_events().await, 1);
}

#[tokio::test]
async fn a_scim_only_key_provisions_but_is_refused_on_v1() {
    let app = api_only().await;
    let org = app.create_org(Tier::Standard).await;
    let (key, secret) = flow_common::db::keys::create_scoped(&app.db, org.id, "Okta", true)
        .await
        .expect("key");
    assert!(key.scim_only);
    let scim_only = TestOrg {
        id: org.id,
        key: secret,
    };
    let created = post(
        &app,
        &scim_only,
        "/Users",
        json!({ "userName": "idp@example.com" }),
    )
    .await;
    assert_eq!(created.status, 201, "{:?}", created.body);
    let refused = app.get(&scim_only, "/v1/users").await;
    assert_eq!(refused.status, 403, "{:?}", refused.body);
    assert_eq!(refused.body["error"], json!("forbidden"));
    // The organization's other keys still work on both.
    assert_eq!(app.get(&org, "/v1/users").await.status, 200);
    assert_eq!(
        get(&app, &org, "/Users").await.body["totalResults"],
        json!(1)
    );
}

#[tokio::test]
async fn the_dashboard_generates_a_scim_only_key_when_asked_and_marks_it() {
    let app = api_only().await;
    let org = app.create_org(Tier::Standard).await;
    let client = flow_tests::dashboard::DashboardClient::signed_in(
        &app,
        org.id,
        "admin@example.com",
        flow_tests::dashboard::role("admin"),
    )
    .await;
    let generated = client
        .post_form(
            "/dashboard/settings/api-keys",
            &[("name", "Okta provisioning"), ("scim_only", "1")],
        )
        .await;
    assert_eq!(generated.status, 200, "{}", generated.body);
    let secret =
        flow_tests::dashboard::between(&generated.body, "<code id=\"new-key-secret\">", "</code>")
            .expect("the secret is shown")
            .to_owned();
    assert!(generated.body.contains("SCIM only"), "{}", generated.body);
    let key = TestOrg {
        id: org.id,
        key: secret,
    };
    assert_eq!(get(&app, &key, "/Users").await.status, 200);
    assert_eq!(app.get(&key, "/v1/flows").await.status, 403);
    // Without the box, a key works on both.
    let plain = client
        .post_form("/dashboard/settings/api-keys", &[("name", "Reporting")])
        .await;
    let secret =
        flow_tests::dashboard::between(&plain.body, "<code id=\"new-key-secret\">", "</code>")
            .expect("the secret is shown")
            .to_owned();
    let key = TestOrg {
        id: org.id,
        key: secret,
    };
    assert_eq!(app.get(&key, "/v1/flows").await.status, 200);
    assert_eq!(get(&app, &key, "/Users").await.status, 200);
    let details: Vec<String> = sqlx::query_scalar(
        "SELECT detail FROM audit_events WHERE org_id = $1 AND action = 'key.created' ORDER BY id",
    )
    .bind(org.id)
    .fetch_all(&app.db)
    .await
    .expect("audit");
    assert_eq!(details, ["Okta provisioning (SCIM only)", "Reporting"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scim_writes_run_enrollment_rules_and_each_rule_assigns_a_user_once() {
    let app = TestApp::spawn().await;
    let org = app.create_org(Tier::Standard).await;
    let sales_flow = app.create_flow(&org, "Sales onboarding", &[10]).await;
    let engineering_flow = app.create_flow(&org, "Engineering onboarding", &[10]).await;
    let mut rules = Vec::new();
    // Two flows: a user holds one active assignment per flow, whichever rule asks.
    for (name, condition, flow) in [
        ("Sales", json!({"departmentEquals": "Sales"}), &sales_flow),
        (
            "Engineering",
            json!({"memberOf": "Engineering"}),
            &engineering_flow,
        ),
    ] {
        let body = json!({"name": name, "condition": condition, "flowId": flow,
                          "due": {"days": 14, "from": "start_date"}});
        rules.push(create_rule(&app, &org, body).await);
    }
    let (sales, engineering) = (&rules[0], &rules[1]);

    // Provisioned in Sales: the Sales rule assigns; provisioned elsewhere: nothing.
    let mut alice = okta_user("alice@example.com", "Alice", "Able");
    alice[ENTERPRISE] = json!({"department": "Sales"});
    alice["schemas"] = json!([USER_SCHEMA, ENTERPRISE]);
    assert_eq!(post(&app, &org, "/Users", alice).await.status, 201);
    let mut bob = okta_user("bob@example.com", "Bob", "Baker");
    bob[ENTERPRISE] = json!({"department": "Operations"});
    bob["schemas"] = json!([USER_SCHEMA, ENTERPRISE]);
    let bob = post(&app, &org, "/Users", bob).await;
    assert_eq!(bob.status, 201, "{:?}", bob.body);
    let bob_id = id_of(&bob);
    let expected_alice = ["alice@example.com"];
    app.eventually(Duration::from_secs(30), "alice assigned", || async {
        (assigned_by(&app, sales).await == expected_alice).then_some(())
    })
    .await;

    // Bob moves to Sales (an Entra ID style PATCH), twice, as a retrying provider sends it.
    for _ in 0..2 {
        let moved = patch(
            &app,
            &org,
            &format!("/Users/{bob_id}"),
            json!([{"op": "Replace", "path": format!("{ENTERPRISE}:department"), "value": "Sales"}]),
        )
        .await;
        assert_eq!(moved.status, 200, "{:?}", moved.body);
    }
    let both = ["alice@example.com", "bob@example.com"];
    app.eventually(Duration::from_secs(30), "bob assigned", || async {
        (assigned_by(&app, sales).await == both).then_some(())
    })
    .await;

    // A group push makes Bob a member of Engineering: that rule assigns him, once.
    let group = post(
        &app,
        &org,
        "/Groups",
        json!({"schemas": [GROUP_SCHEMA],
               "displayName": "Engineering", "members": [{"value": bob_id}]}),
    )
    .await;
    assert_eq!(group.status, 201, "{:?}", group.body);
    let expected_bob = ["bob@example.com"];
    app.eventually(Duration::from_secs(30), "bob assigned by group", || async {
        (assigned_by(&app, engineering).await == expected_bob).then_some(())
    })
    .await;

    // Settled: nothing more arrives for either rule.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(assigned_by(&app, sales).await, both);
    assert_eq!(assigned_by(&app, engineering).await, expected_bob);
}

#[tokio::test]
async fn a_group_write_that_changes_nothing_evaluates_no_rule_and_a_rename_evaluates_every_member()
{
    let app = api_only().await;
    let org = app.create_org(Tier::Standard).await;
    let flow = app.create_flow(&org, "Sales onboarding", &[10]).await;
    let mut members = Vec::new();
    for (email, given) in [("ann@example.com", "Ann"), ("ben@example.com", "Ben")] {
        let created = post(&app, &org, "/Users", okta_user(email, given, "Sales")).await;
        assert_eq!(created.status, 201, "{:?}", created.body);
        members.push(id_of(&created));
    }
    let group = json!({"schemas": [GROUP_SCHEMA], "displayName": "Sales",
                       "members": [{"value": members[0]}, {"value": members[1]}]});
    let created = post(&app, &org, "/Groups", group.clone()).await;
    assert_eq!(created.status, 201, "{:?}", created.body);
    let group_path = format!("/Groups/{}", id_of(&created));
    // The rule comes after the group: creating it evaluates nobody.
    let body = json!({"name": "Sales", "condition": {"memberOf": "Sales"}, "flowId": flow});
    let rule = create_rule(&app, &org, body).await;
    assert!(matched_by(&app, &rule).await.is_empty());

    // A PUT of the group as it is, and a PATCH whose operations leave it as it is: both answer
    // the group, and neither evaluates the rule for its members (both would match it).
    let replaced = put(&app, &org, &group_path, group).await;
    assert_eq!(replaced.status, 200, "{:?}", replaced.body);
    let patched = patch(
        &app,
        &org,
        &group_path,
        json!([
            {"op": "replace", "path": "displayName", "value": "Sales"},
            {"op": "add", "path": "members", "value": [{"value": members[0]}]},
        ]),
    )
    .await;
    assert_eq!(patched.status, 200, "{:?}", patched.body);
    assert_eq!(patched.body["members"].as_array().map(Vec::len), Some(2));
    assert!(matched_by(&app, &rule).await.is_empty());

    // A write that changes the members evaluates the rule for the member it added, only.
    let cid = post(
        &app,
        &org,
        "/Users",
        okta_user("cid@example.com", "Cid", "Sales"),
    )
    .await;
    assert_eq!(cid.status, 201, "{:?}", cid.body);
    let added = patch(
        &app,
        &org,
        &group_path,
        json!([{"op": "add", "path": "members", "value": [{"value": id_of(&cid)}]}]),
    )
    .await;
    assert_eq!(added.status, 200, "{:?}", added.body);
    assert_eq!(matched_by(&app, &rule).await, ["cid@example.com"]);

    // A rename changes what a rule naming the group matches: every member is evaluated.
    let body = json!({"name": "EMEA", "condition": {"memberOf": "Sales EMEA"}, "flowId": flow});
    let renamed_rule = create_rule(&app, &org, body).await;
    let renamed = patch(
        &app,
        &org,
        &group_path,
        json!([{"op": "replace", "path": "displayName", "value": "Sales EMEA"}]),
    )
    .await;
    assert_eq!(renamed.status, 200, "{:?}", renamed.body);
    assert_eq!(
        matched_by(&app, &renamed_rule).await,
        ["ann@example.com", "ben@example.com", "cid@example.com"]
    );
}

/// An identity provider's PATCHes of the same users reaching two API replicas at once, round after
/// round, with the assign-worker killed after the first round and started again after the third,
/// and the users leaving the rule's department in the fourth round and coming back in the fifth:
/// each (rule, user) assigns once, with one `flow.assigned` and one audit row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_scim_patches_on_two_replicas_with_the_worker_killed_assign_each_user_once() {
    let mut app = TestApp::spawn().await;
    let replica = app.start_api_replica().await;
    let org = app.create_org_with(Tier::Enterprise, Some(1_000_000)).await;
    let flow = app.create_flow(&org, "Sales onboarding", &[10]).await;
    let rule = create_rule(
        &app,
        &org,
        json!({"name": "Sales", "condition": {"departmentEquals": "Sales"}, "flowId": flow}),
    )
    .await;
    let mut ids = Vec::new();
    for i in 0..60 {
        let email = format!("p{i:03}@example.com");
        let created = post(
            &app,
            &org,
            "/Users",
            okta_user(&email, &format!("P{i}"), "Doe"),
        )
        .await;
        assert_eq!(created.status, 201, "{:?}", created.body);
        ids.push(id_of(&created));
    }
    let bases = [app.base_url.clone(), replica];
    for round in 0..5 {
        let department = if round == 3 { "Support" } else { "Sales" };
        let body = json!({ "schemas": [PATCH_OP], "Operations": [
            { "op": "Replace", "path": format!("{ENTERPRISE}:department"), "value": department }
        ]});
        let patches = bases
            .iter()
            .flat_map(|base| ids.iter().map(move |id| (base, id)))
            .map(|(base, id)| {
                app.client
                    .patch(format!("{base}/scim/v2/Users/{id}"))
                    .bearer_auth(&org.key)
                    .header("content-type", SCIM_JSON)
                    .body(body.to_string())
                    .send()
            });
        let statuses: Vec<u16> = futures::future::join_all(patches)
            .await
            .into_iter()
            .map(|response| response.expect("PATCH sent").status().as_u16())
            .collect();
        assert!(
            statuses.iter().all(|status| *status == 200),
            "round {round}: {statuses:?}"
        );
        if round == 0 {
            app.assign_worker.take().expect("worker").kill();
        }
        if round == 2 {
            app.assign_worker = Some(app.start_assign_worker());
        }
    }
    let assigned = app
        .eventually(
            Duration::from_secs(30),
            "an assignment of the rule for each user",
            || async {
                let emails = assigned_by(&app, &rule).await;
                (emails.len() >= ids.len()).then_some(emails)
            },
        )
        .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(assigned_by(&app, &rule).await, assigned);
    assert_eq!(assigned.len(), 60);
    assert_eq!(app.assignment_count().await, 60);
    let counted = |sql: &'static str| {
        let db = app.db.clone();
        async move {
            sqlx::query_scalar::<_, i64>(sql)
                .bind(org.id)
                .fetch_one(&db)
                .await
                .expect("count")
        }
    };
    assert_eq!(
        counted("SELECT count(*) FROM outbox WHERE org_id = $1 AND event_type = 'flow.assigned'")
            .await,
        60
    );
    assert_eq!(
        counted(
            "SELECT count(*) FROM audit_events WHERE org_id = $1 AND action = 'enrollment_rule.assigned'"
        )
        .await,
        60
    );
}
