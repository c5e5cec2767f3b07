//! `flowctl health URL`: the containers' healthcheck. One GET with a short timeout; success on a
//! 2xx answer, otherwise an error of one line saying why (the image has no curl, and compose's
//! `CMD-SHELL` runs a shell that cannot open a TCP connection by itself).

use std::time::Duration;

use anyhow::{Context, bail};
use clap::Args;
use serde::Serialize;

use crate::output::Outcome;

/// Options of `flowctl health`.
#[derive(Debug, Clone, Args)]
pub struct HealthArgs {
    /// Address to probe, e.g. http://127.0.0.1:8080/readyz.
    pub url: String,
    /// Longest wait for the whole answer, in seconds.
    #[arg(long, default_value_t = 3.0)]
    pub timeout: f64,
}

/// A healthy answer.
#[derive(Debug, Clone, Serialize)]
pub struct Healthy {
    /// The address probed.
    pub url: String,
    /// Its HTTP status.
    pub status: u16,
}

/// GETs `args.url`: Ok on a 2xx status, an error saying what happened otherwise.
pub async fn check(args: &HealthArgs) -> anyhow::Result<Outcome> {
    let timeout = Duration::try_from_secs_f64(args.timeout)
        .ok()
        .filter(|timeout| !timeout.is_zero())
        .context("--timeout must be a positive number of seconds")?;
    let client = reqwest::Client::builder()
        .timeout(timeout)
        .build()
        .context("building the HTTP client")?;
    let response = client
        .get(&args.url)
        .send()
        .await
        .map_err(|error| anyhow::anyhow!("{}: {}", args.url, reason(&error)))?;
    let status = response.status();
    if !status.is_success() {
        let body = response.text().await.unwrap_or_default();
        let body: String = body.split_whitespace().collect::<Vec<_>>().join(" ");
        let body: String = body.chars().take(200).collect();
        bail!("{} answered {status}: {body}", args.url);
    }
    let healthy = Healthy {
        url: args.url.clone(),
        status: status.as_u16(),
    };
    let text = format!("{} answered {status}", args.url);
    Outcome::new(&healthy, text)
}

/// The innermost cause of a failed request (refused, timed out, unknown host), which is what an
/// operator needs from a healthcheck's one line.
fn reason(error: &reqwest::Error) -> String {
    if error.is_timeout() {
        return "no answer within the timeout".to_owned();
    }
    let mut source: &dyn std::error::Error = error;
    while let Some(next) = source.source() {
        source = next;
    }
    source.to_string()
}
