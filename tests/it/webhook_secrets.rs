//! Webhook endpoint secrets at rest: every process that opens them refuses to start without
//! `WEBHOOK_SECRET_KEY` (outside the demo) and says how to make one; a ciphertext is bound to its
//! endpoint, so one copied into another endpoint's row does not open; `flowctl webhooks reseal`
//! rewrites plain-text and older ciphertexts in place, and running it again changes nothing.

use std::time::Duration;

use flow_common::db::orgs::Tier;
use flow_common::webhook::vault::SecretVault;
use flow_domain::ids::WebhookEndpointId;
use flow_tests::receiver::Receiver;
use flow_tests::{TestApp, TestOptions, TestOrg};
use serde_json::{Value, json};

/// The key of the v1 ciphertext below, sealed by an independent AES-256-GCM implementation
/// without associated data (as this service sealed secrets before the binding).
const V1_KEY: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
const V1_SEALED: &str = "enc:v1:ZGVmZ2hpamtsbW5vP3OtAxq2NfFTEj6cDtsZyG45ZkSeR0YSOr29CQ==";
const V1_SECRET: &str = "whsec_compat";

async fn endpoint(app: &TestApp, org: &TestOrg, url: &str) -> (WebhookEndpointId, String) {
    let response = app.post(org, "/v1/webhooks", &json!({ "url": url })).await;
    assert_eq!(response.status, 201, "{:?}", response.body);
    (
        WebhookEndpointId::parse(response.body["webhookId"].as_str().unwrap()).unwrap(),
        response.body["secret"].as_str().unwrap().to_owned(),
    )
}

async fn stored(app: &TestApp, id: WebhookEndpointId) -> (String, Option<String>) {
    sqlx::query_as("SELECT secret, previous_secret FROM webhook_endpoints WHERE id = $1")
        .bind(id)
        .fetch_one(&app.db)
        .await
        .unwrap()
}

async fn store(app: &TestApp, id: WebhookEndpointId, secret: &str) {
    sqlx::query("UPDATE webhook_endpoints SET secret = $2 WHERE id = $1")
        .bind(id)
        .bind(secret)
        .execute(&app.db)
        .await
        .unwrap();
}

async fn send_test(app: &TestApp, org: &TestOrg, id: WebhookEndpointId) {
    let response = app
        .post(org, &format!("/v1/webhooks/{id}/test"), &json!({}))
        .await;
    assert_eq!(response.status, 202, "{:?}", response.body);
}

fn assert_tells_how_to_make_a_key(error: &str) {
    assert!(
        error.contains("WEBHOOK_SECRET_KEY is not set")
            && error.contains("flowctl webhooks generate-key")
            && error.contains("openssl rand -base64 32"),
        "{error}"
    );
}

#[tokio::test]
async fn processes_that_open_secrets_refuse_to_start_without_a_key() {
    let app = TestApp::spawn_with(TestOptions {
        assign_worker: false,
        ..TestOptions::default()
    })
    .await;
    let mut api: flow_api::ApiConfig = flow_common::config::from_env();
    api.core = app.core.clone();
    api.webhook_secrets = SecretVault {
        master_key: None,
        plaintext_allowed: false,
    };
    let error = flow_api::build_state(api, tokio_util::sync::CancellationToken::new())
        .await
        .err()
        .expect("the API refuses to start");
    assert_tells_how_to_make_a_key(&format!("{error:#}"));

    let mut worker: flow_workers::webhook::WebhookWorkerConfig = flow_common::config::from_env();
    worker.core = app.core.clone();
    worker.secrets = SecretVault {
        master_key: None,
        plaintext_allowed: false,
    };
    let error = tokio::time::timeout(
        Duration::from_secs(30),
        flow_workers::runtime::run(worker, tokio_util::sync::CancellationToken::new()),
    )
    .await
    .expect("the webhook-worker stops at once")
    .expect_err("the webhook-worker refuses to start");
    assert_tells_how_to_make_a_key(&format!("{error:#}"));

    // `flowctl up` too, unless it runs the demo.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let error = tokio::time::timeout(
        Duration::from_secs(30),
        flowctl::up::run_until(
            app.core.clone(),
            flowctl::up::UpArgs {
                demo: false,
                bind: Some(port),
                only: vec![flowctl::up::Component::Api],
            },
            tokio_util::sync::CancellationToken::new(),
        ),
    )
    .await
    .expect("flowctl up stops at once");
    // With WEBHOOK_SECRET_KEY in this test's environment, `flowctl up` would start.
    if std::env::var_os("WEBHOOK_SECRET_KEY").is_none() {
        assert_tells_how_to_make_a_key(&format!("{:#}", error.expect_err("refused")));
    }
    let key = flowctl::run(
        <flowctl::Cli as clap::Parser>::try_parse_from(["flowctl", "webhooks", "generate-key"])
            .unwrap(),
    )
    .await
    .unwrap()
    .render(false);
    assert_eq!(SecretVault::with_key(key.trim()).check(), Ok(()));
}

#[tokio::test]
async fn a_ciphertext_moved_to_another_endpoints_row_does_not_open() {
    let app = TestApp::spawn_with(TestOptions {
        webhooks: true,
        ..TestOptions::default()
    })
    .await;
    let receiver = Receiver::start().await.unwrap();
    let org = app.create_org(Tier::Standard).await;
    let (mine, my_secret) = endpoint(&app, &org, &receiver.url("mine")).await;
    let (theirs, _) = endpoint(&app, &org, &receiver.url("theirs")).await;
    let (sealed, _) = stored(&app, mine).await;
    assert!(sealed.starts_with("enc:v2:"), "{sealed}");
    // Someone who can write the table copies my ciphertext into their endpoint's row, to have
    // events for their endpoint signed with my secret.
    store(&app, theirs, &sealed).await;
    send_test(&app, &org, theirs).await;
    send_test(&app, &org, mine).await;
    let delivered = receiver
        .wait_for_deliveries("mine", 1, Duration::from_secs(15))
        .await;
    assert!(delivered[0].verifies_with(&my_secret));
    let failed: Value = app
        .eventually(
            Duration::from_secs(15),
            "the moved secret's attempt",
            || async {
                let page = app
                    .get(&org, &format!("/v1/webhooks/{theirs}/deliveries"))
                    .await;
                page.body["data"]
                    .as_array()
                    .and_then(|deliveries| deliveries.first().cloned())
                    .filter(|delivery| delivery["attempts"].as_i64() > Some(0))
            },
        )
        .await;
    assert!(
        failed["lastError"]
            .as_str()
            .is_some_and(|error| error.contains("cannot be decrypted")),
        "{failed}"
    );
    assert!(
        receiver.received("theirs").is_empty(),
        "nothing is signed with a secret moved from another endpoint"
    );
}

#[tokio::test]
async fn reseal_rewrites_plain_text_and_older_ciphertexts_once() {
    let app = TestApp::spawn_with(TestOptions {
        webhooks: true,
        webhook_secret_key: Some(V1_KEY.to_owned()),
        ..TestOptions::default()
    })
    .await;
    let receiver = Receiver::start().await.unwrap();
    let org = app.create_org(Tier::Standard).await;
    let (plain, _) = endpoint(&app, &org, &receiver.url("plain")).await;
    let (older, _) = endpoint(&app, &org, &receiver.url("older")).await;
    let (current, current_secret) = endpoint(&app, &org, &receiver.url("current")).await;
    store(&app, plain, "whsec_stored_in_plain_text").await;
    store(&app, older, V1_SEALED).await;
    let (untouched, _) = stored(&app, current).await;

    let cli = <flowctl::Cli as clap::Parser>::try_parse_from([
        "flowctl",
        "--database-url",
        &app.core.database_url,
        "--json",
        "webhooks",
        "reseal",
        "--webhook-secret-key",
        V1_KEY,
    ])
    .unwrap();
    let first = flowctl::run(cli).await.unwrap();
    assert_eq!(
        first.json,
        json!({"checked": 2, "resealed": 2, "changedMeanwhile": 0})
    );
    let vault = SecretVault::with_key(V1_KEY);
    for (id, secret) in [
        (plain, "whsec_stored_in_plain_text"),
        (older, V1_SECRET),
        (current, current_secret.as_str()),
    ] {
        let (stored_form, _) = stored(&app, id).await;
        assert!(stored_form.starts_with("enc:v2:"), "{stored_form}");
        assert_eq!(vault.open(id, &stored_form).unwrap(), secret);
    }
    assert_eq!(stored(&app, current).await.0, untouched, "already current");

    // Deliveries are signed with the same secrets as before.
    for (id, path, secret) in [
        (plain, "plain", "whsec_stored_in_plain_text"),
        (older, "older", V1_SECRET),
    ] {
        send_test(&app, &org, id).await;
        let delivered = receiver
            .wait_for_deliveries(path, 1, Duration::from_secs(15))
            .await;
        assert!(delivered[0].verifies_with(secret), "{path}");
    }

    let again = flowctl::webhooks::reseal(&app.db, &vault).await.unwrap();
    assert_eq!(
        again,
        flowctl::webhooks::Resealed::default(),
        "nothing left to do"
    );
}
