//! The webhook client ignores proxies configured in the environment: a proxy resolves the
//! endpoint's name itself, past the resolver that refuses internal addresses.
//!
//! Environment variables are process-wide, so the test runs its attempt in a child process of
//! this test binary, started with the proxy variables pointing at a listener of the parent; the
//! other tests never see them.

use std::io::ErrorKind;
use std::net::TcpListener;
use std::process::Command;
use std::time::Duration;

use flow_common::db::webhooks::fan_out::ClaimedDelivery;
use flow_common::db::webhooks::outcomes::NextStep;
use flow_common::webhook::address::AddressPolicy;
use flow_common::webhook::vault::SecretVault;
use flow_domain::ids::{DeliveryId, EventId, OrgId, WebhookEndpointId};
use flow_domain::webhook::signing::generate_secret;
use flow_tests::receiver::Receiver;
use flow_workers::webhook::sender::Sender;
use serde_json::json;

/// Set in the child process.
const CHILD: &str = "FLOW_TEST_PROXY_CHILD";

const TEST_NAME: &str = "webhook_attempts_ignore_proxy_environment_variables";

/// The test's full name as the test binary lists it: its module path without the crate.
fn test_path() -> String {
    match module_path!().split_once("::") {
        Some((_, module)) => format!("{module}::{TEST_NAME}"),
        None => TEST_NAME.to_owned(),
    }
}

#[test]
fn webhook_attempts_ignore_proxy_environment_variables() {
    if std::env::var_os(CHILD).is_some() {
        attempt_directly();
        return;
    }
    let proxy = TcpListener::bind("127.0.0.1:0").expect("bind proxy");
    proxy.set_nonblocking(true).expect("non-blocking");
    let proxy_url = format!("http://{}", proxy.local_addr().expect("address"));
    let mut child = Command::new(std::env::current_exe().expect("test binary"));
    child
        .args([
            test_path().as_str(),
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, "1")
        .env_remove("NO_PROXY")
        .env_remove("no_proxy");
    for variable in [
        "HTTP_PROXY",
        "http_proxy",
        "HTTPS_PROXY",
        "https_proxy",
        "ALL_PROXY",
        "all_proxy",
    ] {
        child.env(variable, &proxy_url);
    }
    let output = child.output().expect("run the child");
    let report = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && report.contains("1 passed"),
        "the attempt in the child failed:\n{report}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    // A connection made to the proxy waits in its accept queue even after the child exited.
    match proxy.accept() {
        Err(error) if error.kind() == ErrorKind::WouldBlock => {}
        Ok((_, from)) => panic!("the webhook client connected to the proxy from {from}"),
        Err(error) => panic!("proxy listener: {error}"),
    }
}

/// In the child, with the proxy variables set: one attempt to a local receiver must reach it
/// directly.
fn attempt_directly() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let receiver = Receiver::start().await.expect("webhook receiver");
        let sender = Sender::new(
            AddressPolicy {
                allow_private: true,
                allow_http: true,
            },
            SecretVault::with_key(flow_common::webhook::vault::generate_master_key()),
            "0s".parse().expect("schedule"),
            Duration::from_secs(1),
            Duration::from_secs(2),
            Duration::from_secs(1),
        )
        .expect("sender");
        let delivery = ClaimedDelivery {
            id: DeliveryId::new(),
            org_id: OrgId::new(),
            endpoint_id: WebhookEndpointId::new(),
            event_id: EventId::new(),
            event_type: "webhook.test".into(),
            payload: serde_json::value::to_raw_value(&json!({ "type": "webhook.test" }))
                .expect("json"),
            attempts: 0,
            event_at: chrono::Utc::now(),
            url: receiver.url("direct"),
            secret: generate_secret(),
            previous_secret: None,
            claim_token: uuid::Uuid::new_v4(),
            traceparent: None,
        };
        let outcome = sender.attempt(&delivery).await;
        assert_eq!(outcome.next, NextStep::Succeeded, "{:?}", outcome.error);
        assert_eq!(receiver.delivered("direct").len(), 1);
    });
}
