//! REQUEST_TIMEOUT: a request that takes longer than the limit is answered 503 with the
//! service's error body, not left hanging on a stuck dependency.

use std::time::Duration;

use flow_common::db::orgs::Tier;
use flow_tests::TestApp;
use serde_json::json;

#[tokio::test]
async fn a_request_over_request_timeout_is_503_service_unavailable_with_the_error_body() {
    let app = TestApp::spawn_with(flow_tests::TestOptions {
        assign_worker: false,
        ..Default::default()
    })
    .await;
    let org = app.create_org(Tier::Standard).await;

    // A second API on the same database whose limit no request that waits on Postgres can meet:
    // the key lookup of a cold cache already waits.
    let mut config: flow_api::ApiConfig = flow_common::config::from_env();
    config.core = app.core.clone();
    config.request_timeout = Duration::ZERO;
    config.webhook_secrets =
        flow_common::webhook::vault::SecretVault::with_key(flow_tests::TEST_SECRET_KEY);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let shutdown = tokio_util::sync::CancellationToken::new();
    let state = flow_api::build_state(config, shutdown.clone())
        .await
        .unwrap();
    tokio::spawn(flow_api::serve(listener, state, shutdown.clone()));

    let response = app
        .client
        .get(format!("{base}/v1/flows"))
        .bearer_auth(&org.key)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 503);
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(body["error"], json!("service_unavailable"));
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("took longer than"),
        "{body}"
    );

    // What answers without waiting is not affected, and the usual limit lets requests through.
    let live = app
        .client
        .get(format!("{base}/healthz"))
        .send()
        .await
        .unwrap();
    assert_eq!(live.status(), 200);
    assert_eq!(app.get(&org, "/v1/flows").await.status, 200);
    shutdown.cancel();
}
