//! A detailed report's page is bounded by its module-progress entries (assignments × the flow's
//! modules), so one answer cannot take the API's memory, and it costs by them: a larger `limit`
//! is a 400 naming the largest that fits, a default page shrinks to fit, and each started 10,000
//! entries counts as one more report request.

use std::time::Duration;

use flow_common::db::orgs::Tier;
use flow_domain::report::cost::MAX_DETAILED_ENTRIES;
use flow_tests::{TestApp, TestOrg, assign_items};
use serde_json::{Value, json};

/// The most modules a flow may have.
const MODULES: usize = 500;

async fn report(app: &TestApp, org: &TestOrg, body: Value) -> flow_tests::TestResponse {
    app.post(org, "/v1/flows/report", &body).await
}

fn remaining(response: &flow_tests::TestResponse) -> i64 {
    response
        .header("ratelimit-remaining")
        .and_then(|value| value.parse().ok())
        .expect("RateLimit-Remaining")
}

#[tokio::test]
async fn a_detailed_page_holds_at_most_its_bound_of_module_progress() {
    let app = TestApp::spawn().await;
    let org = app.create_org_with(Tier::Enterprise, Some(1_000_000)).await;
    let flow = app.create_flow(&org, "Long course", &[1; MODULES]).await;
    let largest = usize::try_from(MAX_DETAILED_ENTRIES).unwrap() / MODULES;
    let emails: Vec<String> = (0..=largest)
        .map(|index| format!("learner{index}@example.com"))
        .collect();
    let refs: Vec<&str> = emails.iter().map(String::as_str).collect();
    app.create_users(&org, &refs).await;
    let bulk = app
        .assign_bulk(&org, &assign_items(&flow, &emails), &[])
        .await;
    assert_eq!(bulk.status, 200, "{:?}", bulk.body);
    app.eventually(Duration::from_secs(20), "the assignments", || async {
        (app.assignment_count().await == i64::try_from(emails.len()).unwrap()).then_some(())
    })
    .await;

    let too_large = report(
        &app,
        &org,
        json!({ "flowId": flow, "detailed": true, "limit": largest + 1 }),
    )
    .await;
    assert_eq!(too_large.status, 400, "{:?}", too_large.body);
    assert_eq!(too_large.body["error"], "invalid_request");
    let message = too_large.body["message"].as_str().unwrap();
    assert!(
        message.contains(&format!(
            "at most {MAX_DETAILED_ENTRIES} module-progress entries"
        )) && message.contains(&format!("a limit of at most {largest}"))
            && message.contains("nextCursor"),
        "{message}"
    );

    let at_bound = report(
        &app,
        &org,
        json!({ "flowId": flow, "detailed": true, "limit": largest }),
    )
    .await;
    assert_eq!(at_bound.status, 200, "{:?}", at_bound.body);
    assert_eq!(
        at_bound.body["assignments"].as_array().unwrap().len(),
        largest
    );

    // Without a limit the default page (1,000) shrinks to fit, and the next page follows.
    let first = report(&app, &org, json!({ "flowId": flow, "detailed": true })).await;
    assert_eq!(first.status, 200, "{:?}", first.body);
    assert_eq!(first.body["assignments"].as_array().unwrap().len(), largest);
    let cursor = first.body["nextCursor"].as_str().expect("a next page");
    let second = report(
        &app,
        &org,
        json!({ "flowId": flow, "detailed": true, "cursor": cursor }),
    )
    .await;
    assert_eq!(second.body["assignments"].as_array().unwrap().len(), 1);
    assert_eq!(second.body["nextCursor"], Value::Null);
    // The same request without module progress keeps its page of 1,000.
    let plain = report(&app, &org, json!({ "flowId": flow })).await;
    assert_eq!(
        plain.body["assignments"].as_array().unwrap().len(),
        emails.len()
    );
}

#[tokio::test]
async fn a_detailed_page_costs_one_more_request_per_started_ten_thousand_entries() {
    let app = TestApp::spawn().await;
    let org = app.create_org(Tier::Standard).await;
    let flow = app.create_flow(&org, "Long course", &[1; MODULES]).await;
    let plain = report(&app, &org, json!({ "flowId": flow, "limit": 200 })).await;
    assert_eq!(plain.status, 200, "{:?}", plain.body);
    let detailed = report(
        &app,
        &org,
        json!({ "flowId": flow, "limit": 200, "detailed": true }),
    )
    .await;
    assert_eq!(detailed.status, 200, "{:?}", detailed.body);
    // 200 × 500 = 100,000 entries: ten requests more than the page's one (the bucket refills
    // by less than one request meanwhile).
    let spent = remaining(&plain) - remaining(&detailed);
    assert!((10..=11).contains(&spent), "spent {spent}");
}
