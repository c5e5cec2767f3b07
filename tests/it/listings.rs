//! Lists that integrators asked for (issue 40): `GET /v1/schedules` and `GET /v1/exports` answer
//! the organization's own, newest first, in keyset pages that neither repeat nor skip; a bad
//! limit or cursor is a 400 by name; another organization's are never listed. `GET /v1/users?q=`
//! finds users by part of their e-mail or name, as the dashboard does. An endpoint made for every
//! event reads back with `allEvents: true`.

use std::collections::HashSet;

use flow_common::db::orgs::Tier;
use flow_tests::{TestApp, TestOrg};
use serde_json::{Value, json};

/// Every item of `path`'s pages of `limit`, and the number of pages.
async fn every_page(app: &TestApp, org: &TestOrg, path: &str, limit: u32) -> (Vec<Value>, usize) {
    let mut items = Vec::new();
    let mut cursor: Option<String> = None;
    for pages in 1..=50 {
        let separator = if path.contains('?') { '&' } else { '?' };
        let mut url = format!("{path}{separator}limit={limit}");
        if let Some(cursor) = &cursor {
            url.push_str(&format!("&cursor={cursor}"));
        }
        let page = app.get(org, &url).await;
        assert_eq!(page.status, 200, "{url}: {:?}", page.body);
        let data = page.body["data"].as_array().expect("data");
        assert!(data.len() <= limit as usize);
        items.extend(data.iter().cloned());
        match page.body["nextCursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => return (items, pages),
        }
    }
    panic!("more than 50 pages of {path}");
}

#[tokio::test]
async fn schedules_and_exports_are_listed_newest_first_in_pages_for_their_organization_only() {
    let app = TestApp::spawn().await;
    let org = app.create_org(Tier::Standard).await;
    let other = app.create_org(Tier::Standard).await;
    app.create_users(&org, &["ann@example.com"]).await;
    app.create_users(&other, &["zed@example.com"]).await;
    let flow = app.create_flow(&org, "Safety", &[10]).await;
    let theirs = app.create_flow(&other, "Theirs", &[10]).await;

    let mut made = Vec::new();
    for month in 1..=5 {
        let created = app
            .post(
                &org,
                "/v1/flows/schedule",
                &json!({"flowId": flow, "userEmail": "ann@example.com",
                        "scheduledAt": format!("2099-{month:02}-15T09:00:00Z"), "recurrence": "yearly"}),
            )
            .await;
        assert_eq!(created.status, 201, "{:?}", created.body);
        made.push(created.body["scheduleId"].as_str().expect("id").to_owned());
    }
    let deleted = made.remove(1);
    let gone = app
        .request(
            reqwest::Method::DELETE,
            &format!("/v1/schedules/{deleted}"),
            Some(&org.key),
            None,
            &[],
        )
        .await;
    assert_eq!(gone.status, 204);
    let foreign = app
        .post(
            &other,
            "/v1/flows/schedule",
            &json!({"flowId": theirs, "userEmail": "zed@example.com", "scheduledAt": "2099-03-01T09:00:00Z"}),
        )
        .await;
    assert_eq!(foreign.status, 201, "{:?}", foreign.body);

    let (listed, pages) = every_page(&app, &org, "/v1/schedules", 2).await;
    let ids: Vec<&str> = listed
        .iter()
        .map(|schedule| schedule["scheduleId"].as_str().expect("id"))
        .collect();
    let newest_first: Vec<&str> = made.iter().rev().map(String::as_str).collect();
    assert_eq!(ids, newest_first, "newest first, the deleted one left out");
    assert_eq!(pages, 2);
    assert_eq!(listed[0]["flowName"], "Safety");
    assert_eq!(listed[0]["assigneeEmail"], "ann@example.com");
    assert_eq!(listed[0]["recurrence"], "yearly");

    let mut exports = Vec::new();
    for format in ["csv", "excel", "pdf"] {
        let requested = app
            .post(
                &org,
                "/v1/flows/report",
                &json!({"flowId": flow, "format": format}),
            )
            .await;
        assert_eq!(requested.status, 200, "{:?}", requested.body);
        exports.push(
            requested.body["exportId"]
                .as_str()
                .expect("export id")
                .to_owned(),
        );
    }
    let foreign = app
        .post(
            &other,
            "/v1/flows/report",
            &json!({"flowId": theirs, "format": "csv"}),
        )
        .await;
    assert_eq!(foreign.status, 200, "{:?}", foreign.body);
    let (listed, _) = every_page(&app, &org, "/v1/exports", 2).await;
    let ids: Vec<&str> = listed
        .iter()
        .map(|export| export["exportId"].as_str().expect("id"))
        .collect();
    let newest_first: Vec<&str> = exports.iter().rev().map(String::as_str).collect();
    assert_eq!(ids, newest_first);
    let formats: Vec<&str> = listed
        .iter()
        .map(|export| export["format"].as_str().expect("format"))
        .collect();
    assert_eq!(formats, ["pdf", "excel", "csv"]);
    for export in &listed {
        assert_eq!(export["flowId"], json!(flow));
        assert!(
            ["pending", "running", "ready"].contains(&export["status"].as_str().expect("status")),
            "{export}"
        );
        let url = export["downloadUrl"].as_str().expect("download url");
        assert!(
            url.ends_with(&format!(
                "/v1/exports/{}",
                export["exportId"].as_str().unwrap()
            )),
            "{url}"
        );
    }
    let unique: HashSet<&str> = ids.iter().copied().collect();
    assert_eq!(unique.len(), ids.len(), "no export twice");

    for path in ["/v1/schedules", "/v1/exports"] {
        for query in ["limit=0", "limit=1001", "cursor=nonsense"] {
            let refused = app.get(&org, &format!("{path}?{query}")).await;
            assert_eq!(refused.status, 400, "{path}?{query}: {:?}", refused.body);
            assert_eq!(refused.body["error"], "invalid_request");
            let message = refused.body["message"].as_str().expect("message");
            assert!(
                message.contains("limit") || message.contains("cursor"),
                "{message}"
            );
        }
    }
}

#[tokio::test]
async fn an_endpoint_for_every_event_says_so_when_read_back() {
    let app = TestApp::spawn().await;
    let org = app.create_org(Tier::Standard).await;
    let every = app
        .create_webhook(&org, &json!({"url": "http://127.0.0.1:9/every"}))
        .await;
    assert_eq!(every["events"], json!([]));
    assert_eq!(every["allEvents"], true);
    let some = app
        .create_webhook(
            &org,
            &json!({"url": "http://127.0.0.1:9/some", "events": ["flow.completed"]}),
        )
        .await;
    assert_eq!(some["events"], json!(["flow.completed"]));
    assert_eq!(some["allEvents"], false);
    let read = app
        .get(
            &org,
            &format!("/v1/webhooks/{}", every["webhookId"].as_str().unwrap()),
        )
        .await;
    assert_eq!(read.body["allEvents"], true, "{:?}", read.body);
}

#[tokio::test]
async fn users_are_searched_by_part_of_their_e_mail_or_name_in_pages() {
    let app = TestApp::spawn().await;
    let org = app.create_org(Tier::Standard).await;
    let other = app.create_org(Tier::Standard).await;
    let people = [
        ("ann.lee@example.com", "Ann Lee"),
        ("joanna@example.com", "Joanna Smith"),
        ("bo@example.com", "Bo Annerl"),
        ("cy@example.com", "Cy Reed"),
    ];
    let users: Vec<Value> = people
        .iter()
        .map(|(email, name)| json!({"email": email, "name": name}))
        .collect();
    let created = app
        .post(&org, "/v1/users/bulk", &json!({"users": users}))
        .await;
    assert_eq!(created.status, 200, "{:?}", created.body);
    app.create_users(&other, &["anne@example.com"]).await;

    // "ANN" is in two e-mails and one name, in any case; never another organization's.
    let (found, pages) = every_page(&app, &org, "/v1/users?q=ANN", 2).await;
    let mut emails: Vec<&str> = found
        .iter()
        .map(|user| user["email"].as_str().expect("email"))
        .collect();
    emails.sort_unstable();
    assert_eq!(
        emails,
        [
            "ann.lee@example.com",
            "bo@example.com",
            "joanna@example.com"
        ]
    );
    assert_eq!(pages, 2);
    let whole = app.get(&org, "/v1/users?email=Ann.Lee@example.com").await;
    assert_eq!(whole.status, 200);
    assert_eq!(whole.body["data"].as_array().map(Vec::len), Some(1));
    let partial = app.get(&org, "/v1/users?q=reed").await;
    assert_eq!(partial.body["data"][0]["email"], "cy@example.com");

    let long = "a".repeat(321);
    for query in [
        "q=",
        "q=%20%20",
        &format!("q={long}"),
        "q=ann&email=ann.lee@example.com",
    ] {
        let refused = app.get(&org, &format!("/v1/users?{query}")).await;
        assert_eq!(refused.status, 400, "{query}: {:?}", refused.body);
        assert_eq!(refused.body["error"], "invalid_request");
    }
}
