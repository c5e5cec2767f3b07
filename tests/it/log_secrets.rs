//! Secrets never reach logs or spans: the request span names the route template, never the raw
//! path, so the one-time token of a sign-in link is nowhere in what the API logs.

use std::io::Write;
use std::sync::{Arc, Mutex};

use flow_common::db::orgs::Tier;
use flow_tests::TestApp;
use flow_tests::dashboard::{DashboardClient, create_account, role};

const PASSWORD: &str = "a long enough password";

/// A writer that keeps everything a subscriber writes.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

#[tokio::test]
async fn a_sign_in_link_token_reaches_no_log_or_span_when_setting_the_password_fails() {
    use tracing_subscriber::fmt::format::FmtSpan;
    use tracing_subscriber::prelude::*;

    let app = TestApp::spawn().await;
    let org = app.create_org(Tier::Standard).await;
    let link = create_account(&app, org.id, "new@example.com", role("viewer")).await;
    let path = link.strip_prefix(&app.base_url).unwrap().to_owned();
    let token = path.rsplit('/').next().unwrap().to_owned();
    // Everything the API logs on this thread (the test runtime runs it), at every level, with
    // every field of every span, as it is created, recorded and closed: what a collector of logs
    // or of exported spans would be given. The filter is the one every binary installs.
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::registry()
        .with(flow_common::telemetry::hide_raw_paths())
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(move || writer.clone())
                .with_ansi(false)
                .with_span_events(FmtSpan::FULL)
                .with_filter(tracing_subscriber::filter::LevelFilter::TRACE),
        );
    let guard = tracing::subscriber::set_default(subscriber);
    let client = DashboardClient::new(&app);
    let refused = client
        .post_form(&path, &[("password", "short"), ("confirm", "short")])
        .await;
    assert_eq!(refused.status, 400, "{}", refused.body);
    drop(guard);
    let logs = captured.text();
    assert!(
        logs.contains("request rejected"),
        "the 400 was logged: {logs}"
    );
    assert!(
        logs.contains("/dashboard/welcome/{token}"),
        "the log names the route template: {logs}"
    );
    let leaked: Vec<&str> = logs.lines().filter(|line| line.contains(&token)).collect();
    assert!(leaked.is_empty(), "the token leaked: {leaked:#?}");
    // The link still works: nothing was spent.
    DashboardClient::with_link(&app, &link, PASSWORD).await;
}
