//! One delivery attempt: sign per Standard Webhooks v1, POST with bounded timeouts and no
//! redirects, connect only to addresses the policy permits (the resolver drops the others, so a
//! name that changes to an internal address after creation is still refused), and decide what
//! follows from the answer. Proxies configured in the environment (`HTTP_PROXY`, `HTTPS_PROXY`,
//! `ALL_PROXY`) are ignored: a proxy resolves the name itself, past the guarded resolver.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;
use flow_common::db::webhooks::fan_out::ClaimedDelivery;
use flow_common::db::webhooks::outcomes::{
    AttemptOutcome, EndpointVerdict, NextStep, STORED_TEXT_BYTES, storable_text,
};
use flow_common::telemetry;
use flow_common::webhook::address::{AddressPolicy, parse_endpoint_url};
use flow_common::webhook::vault::SecretVault;
use flow_domain::webhook::retry::RetrySchedule;
use flow_domain::webhook::signing::signature_header;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use reqwest::header::{CONTENT_TYPE, HeaderMap, RETRY_AFTER};
use tracing::Instrument;

/// Sends attempts.
pub struct Sender {
    client: reqwest::Client,
    policy: AddressPolicy,
    schedule: RetrySchedule,
    retry_after_cap: Duration,
    vault: SecretVault,
}

/// How the endpoint answered.
struct Answer {
    status: u16,
    retry_after: Option<Duration>,
    excerpt: String,
}

impl Sender {
    /// A sender with the given policy, secret vault, retry schedule and timeouts.
    pub fn new(
        policy: AddressPolicy,
        vault: SecretVault,
        schedule: RetrySchedule,
        connect_timeout: Duration,
        timeout: Duration,
        retry_after_cap: Duration,
    ) -> anyhow::Result<Self> {
        let client = reqwest::Client::builder()
            .connect_timeout(connect_timeout)
            .timeout(timeout)
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .user_agent(concat!("Flow-Webhooks/", env!("CARGO_PKG_VERSION")))
            .dns_resolver(Arc::new(GuardedResolver { policy }))
            .pool_idle_timeout(Duration::from_secs(60))
            .build()?;
        Ok(Self {
            client,
            policy,
            schedule,
            retry_after_cap,
            vault,
        })
    }

    /// Attempts `delivery` once and says what follows. The attempt is a span of the event's trace
    /// (the work that caused it), and the request names that span in its `traceparent` header so
    /// the receiver can continue the trace.
    pub async fn attempt(&self, delivery: &ClaimedDelivery) -> AttemptOutcome {
        let attempt = delivery.attempts.saturating_add(1);
        let span = tracing::info_span!(
            "webhook.attempt",
            event_id = %delivery.event_id,
            endpoint_id = %delivery.endpoint_id,
            delivery_id = %delivery.id,
            attempt,
            status_code = tracing::field::Empty,
            outcome = tracing::field::Empty,
        );
        telemetry::continue_trace(&span, delivery.traceparent.as_deref());
        let traceparent = telemetry::traceparent(&span);
        let attempted_at = Utc::now();
        let started = Instant::now();
        let result = self
            .send(delivery, attempted_at.timestamp(), traceparent.as_deref())
            .instrument(span.clone())
            .await;
        let latency_ms = i32::try_from(started.elapsed().as_millis()).unwrap_or(i32::MAX);
        let mut outcome = AttemptOutcome {
            delivery_id: delivery.id,
            endpoint_id: delivery.endpoint_id,
            claim_token: delivery.claim_token,
            attempt,
            attempted_at,
            status_code: None,
            latency_ms,
            error: None,
            response_excerpt: None,
            next: NextStep::Failed,
            verdict: EndpointVerdict::Failing,
        };
        match result {
            Ok(answer) => {
                outcome.status_code = Some(i32::from(answer.status));
                outcome.response_excerpt = (!answer.excerpt.is_empty()).then_some(answer.excerpt);
                if (200..300).contains(&answer.status) {
                    outcome.next = NextStep::Succeeded;
                    outcome.verdict = EndpointVerdict::Healthy;
                } else if answer.status == 410 {
                    outcome.error = Some("endpoint answered 410 Gone; it is disabled".into());
                    outcome.verdict = EndpointVerdict::Gone;
                } else {
                    outcome.error = Some(format!("endpoint answered {}", answer.status));
                    let honoured = matches!(answer.status, 429 | 503)
                        .then_some(answer.retry_after)
                        .flatten();
                    outcome.next = self.after_failure(attempt, honoured);
                }
            }
            Err(error) => {
                outcome.error = Some(error);
                outcome.next = self.after_failure(attempt, None);
            }
        }
        if let Some(status) = outcome.status_code {
            span.record("status_code", status);
        }
        span.record(
            "outcome",
            match (outcome.next, outcome.verdict) {
                (NextStep::Succeeded, _) => "succeeded",
                (_, EndpointVerdict::Gone) => "gone",
                (NextStep::Failed, _) => "failed",
                _ => "retry",
            },
        );
        outcome
    }

    /// The next attempt by the schedule (later when the endpoint asked for it, within the cap),
    /// or failed when the schedule is used up.
    fn after_failure(&self, attempt: i32, retry_after: Option<Duration>) -> NextStep {
        let number = usize::try_from(attempt)
            .unwrap_or(usize::MAX)
            .saturating_add(1);
        match self.schedule.delay_before(number) {
            None => NextStep::Failed,
            Some(delay) => {
                let delay = delay.max(retry_after.unwrap_or_default().min(self.retry_after_cap));
                let delay =
                    chrono::Duration::from_std(delay).unwrap_or(chrono::Duration::hours(24));
                NextStep::RetryAt(Utc::now() + delay)
            }
        }
    }

    async fn send(
        &self,
        delivery: &ClaimedDelivery,
        timestamp: i64,
        traceparent: Option<&str>,
    ) -> Result<Answer, String> {
        let url = parse_endpoint_url(&delivery.url, self.policy).map_err(|invalid| invalid.0)?;
        let body = delivery.payload.get().as_bytes().to_vec();
        let message_id = delivery.event_id.to_string();
        let secrets: Vec<String> = std::iter::once(delivery.secret.as_str())
            .chain(delivery.previous_secret.as_deref())
            .map(|stored| self.vault.open(delivery.endpoint_id, stored))
            .collect::<Result<_, _>>()
            .map_err(|error| error.to_string())?;
        let secrets: Vec<&str> = secrets.iter().map(String::as_str).collect();
        let signature = signature_header(&secrets, &message_id, timestamp, &body);
        let mut request = self
            .client
            .post(url)
            .header(CONTENT_TYPE, "application/json")
            .header("webhook-id", &message_id)
            .header("webhook-timestamp", timestamp.to_string())
            .header("webhook-signature", signature);
        if let Some(traceparent) = traceparent {
            request = request.header(telemetry::TRACEPARENT, traceparent);
        }
        let response = request
            .body(body)
            .send()
            .await
            .map_err(|error| describe(&error))?;
        let status = response.status().as_u16();
        let retry_after = retry_after(response.headers());
        let excerpt = excerpt(response).await;
        Ok(Answer {
            status,
            retry_after,
            excerpt,
        })
    }
}

/// `Retry-After` in seconds (the HTTP-date form is rare from webhook receivers and ignored).
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    headers
        .get(RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse::<u64>()
        .ok()
        .map(Duration::from_secs)
}

/// The first bytes of the body, as text Postgres can store: invalid UTF-8 replaced, NUL
/// characters dropped, at most [`STORED_TEXT_BYTES`] bytes.
async fn excerpt(mut response: reqwest::Response) -> String {
    let mut bytes = Vec::new();
    while bytes.len() < STORED_TEXT_BYTES {
        match response.chunk().await {
            Ok(Some(chunk)) => bytes.extend_from_slice(&chunk),
            _ => break,
        }
    }
    bytes.truncate(STORED_TEXT_BYTES);
    // A character cut in half by the bound is left out rather than shown as a replacement.
    if let Err(error) = std::str::from_utf8(&bytes)
        && error.error_len().is_none()
    {
        bytes.truncate(error.valid_up_to());
    }
    storable_text(&String::from_utf8_lossy(&bytes), STORED_TEXT_BYTES)
}

/// A transport error with its causes, for the attempt log.
fn describe(error: &reqwest::Error) -> String {
    let mut text = if error.is_timeout() {
        "timed out".to_owned()
    } else if error.is_connect() {
        "could not connect".to_owned()
    } else {
        "request failed".to_owned()
    };
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// Resolves names with the system resolver and keeps only the addresses the policy permits.
struct GuardedResolver {
    policy: AddressPolicy,
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let policy = self.policy;
        Box::pin(async move {
            let host = name.as_str().to_owned();
            let resolved: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let permitted: Vec<SocketAddr> = resolved
                .into_iter()
                .filter(|address| policy.permits(address.ip()))
                .collect();
            if permitted.is_empty() {
                return Err(format!(
                    "{host} resolves only to loopback, private, link-local or metadata addresses"
                )
                .into());
            }
            Ok(Box::new(permitted.into_iter()) as Addrs)
        })
    }
}
