//! A local HTTP server playing customers' webhook endpoints, for the benchmarks and the tests:
//! endpoint `path` is `POST /hooks/{path}`. Each path answers as it is told (succeed, fail a few
//! times, a status or a body, slowly, once a gate opens, or never).
//!
//! For the endpoints whose secret it is given ([`Receiver::sign`]) it tallies the events as a
//! receiver following Standard Webhooks would see them: it verifies every signature, records the
//! first arrival of each event with its timestamp (the latency) and counts duplicates. With
//! [`Options::keep_requests`] it also keeps every request, headers and body, for a test to
//! inspect; a benchmark, receiving hundreds of thousands, keeps the tally only.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use anyhow::Context;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use chrono::{DateTime, Utc};
use serde_json::Value;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// How a path answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Behaviour {
    /// 200 at once.
    Succeed,
    /// 500 for the first `n` requests, then 200.
    FailTimes(usize),
    /// Always this status.
    Status(u16),
    /// Always this status with this body.
    Body(u16, &'static [u8]),
    /// 200 after this many milliseconds.
    Delay(u64),
    /// 200 with this body once [`Receiver::open_gate`] is called (at once after that).
    Gated(&'static [u8]),
    /// Never answers (until the receiver stops).
    Hang,
}

/// How a receiver runs.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// Port on 127.0.0.1; 0 picks a free one.
    pub port: u16,
    /// Whether to keep every request for [`Receiver::received`]; the tally is kept either way.
    pub keep_requests: bool,
    /// How a path answers until [`Receiver::set`] says otherwise.
    pub default_behaviour: Behaviour,
}

impl Default for Options {
    /// What a test wants: any free port, every request kept, every path succeeding.
    fn default() -> Self {
        Self {
            port: 0,
            keep_requests: true,
            default_behaviour: Behaviour::Succeed,
        }
    }
}

/// One request received.
#[derive(Debug, Clone)]
pub struct Received {
    /// Path after `/hooks/`.
    pub path: String,
    /// Request headers.
    pub headers: HeaderMap,
    /// Raw body.
    pub body: Bytes,
    /// What the receiver answered (0 for a request it never answers).
    pub status: u16,
    /// When it arrived.
    pub at: tokio::time::Instant,
}

impl Received {
    /// A header as text (empty when absent).
    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|value| value.to_str().ok())
            .unwrap_or("")
    }

    /// The body as JSON (`null` when it is not JSON, which a test comparing it then reports).
    pub fn event(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

    /// Whether the request's `webhook-signature` holds `secret`'s signature of this very
    /// request, checked as a receiver following Standard Webhooks would.
    pub fn verifies_with(&self, secret: &str) -> bool {
        signed_with(secret, &self.headers, &self.body)
    }
}

/// The first arrival of an event at an endpoint.
#[derive(Debug, Clone)]
pub struct Arrival {
    /// The endpoint's path.
    pub path: String,
    /// The event id (`webhook-id`).
    pub event_id: String,
    /// The event's own timestamp: when the state change happened.
    pub event_at: DateTime<Utc>,
    /// When it arrived, on the wall clock (to compare with `event_at`).
    pub arrived_at: DateTime<Utc>,
    /// When it arrived, on the monotonic clock (to compare arrivals).
    pub arrived: Instant,
}

/// What the endpoints with a known secret received so far.
#[derive(Debug, Default)]
pub struct Tally {
    /// First arrivals, in order.
    pub arrivals: Vec<Arrival>,
    /// (path, event id) pairs seen.
    seen: HashSet<(String, String)>,
    /// First arrivals per endpoint (every signed endpoint has one, from zero).
    pub per_endpoint: HashMap<String, u64>,
    /// Arrivals of an event already seen at the same endpoint.
    pub duplicates: u64,
    /// Arrivals whose signature did not verify.
    pub signature_failures: u64,
    /// Arrivals whose body was not an event.
    pub malformed: u64,
    /// Requests for a path with no secret: for a benchmark, whose endpoints all have one, an
    /// endpoint it did not create.
    pub unknown_endpoint: u64,
}

impl Tally {
    /// (endpoint, event) pairs received so far.
    pub fn unique(&self) -> usize {
        self.seen.len()
    }

    /// First arrivals at endpoint `path`.
    pub fn first_arrivals(&self, path: &str) -> u64 {
        self.per_endpoint.get(path).copied().unwrap_or(0)
    }
}

/// What the receiver knows of a path.
#[derive(Default)]
struct Endpoint {
    behaviour: Option<Behaviour>,
    secret: Option<Arc<str>>,
    calls: usize,
}

struct Shared {
    options: Options,
    endpoints: Mutex<HashMap<String, Endpoint>>,
    received: Mutex<Vec<Received>>,
    tally: Mutex<Tally>,
    gate: tokio::sync::watch::Sender<bool>,
}

/// A running receiver; stops when dropped.
pub struct Receiver {
    address: SocketAddr,
    shared: Arc<Shared>,
    stop: CancellationToken,
    server: Option<JoinHandle<()>>,
}

impl Receiver {
    /// A receiver with the [`Options::default`] of a test.
    pub async fn start() -> anyhow::Result<Self> {
        Self::start_with(Options::default()).await
    }

    /// Starts a receiver.
    pub async fn start_with(options: Options) -> anyhow::Result<Self> {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", options.port))
            .await
            .with_context(|| format!("binding the receiver to 127.0.0.1:{}", options.port))?;
        let address = listener.local_addr()?;
        let shared = Arc::new(Shared {
            options,
            endpoints: Mutex::default(),
            received: Mutex::default(),
            tally: Mutex::default(),
            gate: tokio::sync::watch::Sender::new(false),
        });
        let app = Router::new()
            .route("/hooks/{*path}", post(receive))
            .with_state(shared.clone());
        let stop = CancellationToken::new();
        let stopped = stop.clone();
        let server = tokio::spawn(async move {
            drop(
                axum::serve(listener, app)
                    .with_graceful_shutdown(stopped.cancelled_owned())
                    .await,
            );
        });
        Ok(Self {
            address,
            shared,
            stop,
            server: Some(server),
        })
    }

    /// The address it listens on.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// The URL of endpoint `path`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}/hooks/{path}", self.address)
    }

    /// Sets how `path` answers.
    pub fn set(&self, path: &str, behaviour: Behaviour) {
        lock(&self.shared.endpoints)
            .entry(path.to_owned())
            .or_default()
            .behaviour = Some(behaviour);
    }

    /// Gives the secret endpoint `path` signs with: its events are tallied from now on.
    pub fn sign(&self, path: &str, secret: &str) {
        lock(&self.shared.endpoints)
            .entry(path.to_owned())
            .or_default()
            .secret = Some(Arc::from(secret));
        lock(&self.shared.tally)
            .per_endpoint
            .entry(path.to_owned())
            .or_default();
    }

    /// Lets every request of a [`Behaviour::Gated`] path be answered, waiting or to come.
    pub fn open_gate(&self) {
        self.shared.gate.send_replace(true);
    }

    /// The tally of the signed endpoints, locked.
    pub fn tally(&self) -> MutexGuard<'_, Tally> {
        lock(&self.shared.tally)
    }

    /// (endpoint, event) pairs the signed endpoints received so far.
    pub fn unique(&self) -> usize {
        self.tally().unique()
    }

    /// Every request `path` received so far, in order (none unless
    /// [`Options::keep_requests`]).
    pub fn received(&self, path: &str) -> Vec<Received> {
        lock(&self.shared.received)
            .iter()
            .filter(|request| request.path == path)
            .cloned()
            .collect()
    }

    /// The requests `path` answered with a 2xx.
    pub fn delivered(&self, path: &str) -> Vec<Received> {
        self.received(path)
            .into_iter()
            .filter(|request| (200..300).contains(&request.status))
            .collect()
    }

    /// Waits until `path` has received `count` requests (answered or not); returns them.
    ///
    /// # Panics
    /// After `timeout`: it is a test's assertion.
    pub async fn wait_for_requests(
        &self,
        path: &str,
        count: usize,
        timeout: Duration,
    ) -> Vec<Received> {
        self.wait_until(path, count, timeout, "requests", Self::received)
            .await
    }

    /// Waits until `path` has answered `count` requests with a 2xx; returns them.
    ///
    /// # Panics
    /// After `timeout`: it is a test's assertion.
    pub async fn wait_for_deliveries(
        &self,
        path: &str,
        count: usize,
        timeout: Duration,
    ) -> Vec<Received> {
        self.wait_until(path, count, timeout, "deliveries", Self::delivered)
            .await
    }

    /// Polls `read` of `path` until it holds `count` requests; panics after `timeout`, naming
    /// them `what`.
    async fn wait_until(
        &self,
        path: &str,
        count: usize,
        timeout: Duration,
        what: &str,
        read: fn(&Self, &str) -> Vec<Received>,
    ) -> Vec<Received> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let found = read(self, path);
            if found.len() >= count {
                return found;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{path} got {} of {count} {what} within {timeout:?}",
                found.len()
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// Stops serving, waiting a few seconds at most for requests in flight; the tally and the
    /// requests stay readable.
    pub async fn stop(&mut self) {
        self.stop.cancel();
        if let Some(server) = self.server.take() {
            drop(tokio::time::timeout(Duration::from_secs(5), server).await);
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// The data stays usable after a panic elsewhere: every update is a single step.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Whether `headers` carry `secret`'s Standard Webhooks signature of `body`.
fn signed_with(secret: &str, headers: &HeaderMap, body: &[u8]) -> bool {
    let header = |name: &str| headers.get(name).and_then(|value| value.to_str().ok());
    match (
        header("webhook-signature"),
        header("webhook-timestamp").and_then(|text| text.parse::<i64>().ok()),
    ) {
        (Some(signature), Some(timestamp)) => flow_domain::webhook::signing::verify(
            secret,
            signature,
            header("webhook-id").unwrap_or_default(),
            timestamp,
            body,
        ),
        _ => false,
    }
}

impl Shared {
    /// Counts the call to `path`; returns how it answers, which call this is, and its secret.
    fn arrive(&self, path: &str) -> (Behaviour, usize, Option<Arc<str>>) {
        let mut endpoints = lock(&self.endpoints);
        let endpoint = endpoints.entry(path.to_owned()).or_default();
        endpoint.calls += 1;
        (
            endpoint.behaviour.unwrap_or(self.options.default_behaviour),
            endpoint.calls,
            endpoint.secret.clone(),
        )
    }

    /// Tallies an arrival at `path`, which signs with `secret` (none: not an endpoint of ours).
    fn count(
        &self,
        path: &str,
        secret: Option<&str>,
        headers: &HeaderMap,
        body: &[u8],
        arrived_at: DateTime<Utc>,
        arrived: Instant,
    ) {
        let Some(secret) = secret else {
            lock(&self.tally).unknown_endpoint += 1;
            return;
        };
        let signed = signed_with(secret, headers, body);
        #[derive(serde::Deserialize)]
        struct Event {
            timestamp: DateTime<Utc>,
        }
        let event_at = serde_json::from_slice::<Event>(body)
            .ok()
            .map(|event| event.timestamp);
        let event_id = headers
            .get("webhook-id")
            .and_then(|value| value.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let mut tally = lock(&self.tally);
        if !signed {
            tally.signature_failures += 1;
        }
        let Some(event_at) = event_at else {
            tally.malformed += 1;
            return;
        };
        if !tally.seen.insert((path.to_owned(), event_id.clone())) {
            tally.duplicates += 1;
            return;
        }
        *tally.per_endpoint.entry(path.to_owned()).or_default() += 1;
        tally.arrivals.push(Arrival {
            path: path.to_owned(),
            event_id,
            event_at,
            arrived_at,
            arrived,
        });
    }

    /// Keeps the request, when the receiver keeps requests.
    fn keep(
        &self,
        path: &str,
        headers: &HeaderMap,
        body: &Bytes,
        status: u16,
        at: tokio::time::Instant,
    ) {
        if self.options.keep_requests {
            lock(&self.received).push(Received {
                path: path.to_owned(),
                headers: headers.clone(),
                body: body.clone(),
                status,
                at,
            });
        }
    }
}

/// `POST /hooks/{path}`: tallies the arrival, then answers as the path is told to.
async fn receive(
    State(shared): State<Arc<Shared>>,
    Path(path): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let at = tokio::time::Instant::now();
    let arrived_at = Utc::now();
    let (behaviour, call, secret) = shared.arrive(&path);
    shared.count(
        &path,
        secret.as_deref(),
        &headers,
        &body,
        arrived_at,
        at.into_std(),
    );
    let (status, answer): (u16, &'static [u8]) = match behaviour {
        Behaviour::Succeed => (200, b""),
        Behaviour::FailTimes(failures) if call <= failures => (500, b""),
        Behaviour::FailTimes(_) => (200, b""),
        Behaviour::Status(status) => (status, b""),
        Behaviour::Body(status, answer) => (status, answer),
        Behaviour::Delay(millis) => {
            tokio::time::sleep(Duration::from_millis(millis)).await;
            (200, b"")
        }
        Behaviour::Gated(answer) => {
            // Kept on arrival, so a test can act while the request is in flight.
            shared.keep(&path, &headers, &body, 200, at);
            let mut gate = shared.gate.subscribe();
            drop(gate.wait_for(|open| *open).await);
            return (StatusCode::OK, answer).into_response();
        }
        Behaviour::Hang => {
            shared.keep(&path, &headers, &body, 0, at);
            tokio::time::sleep(Duration::from_secs(3_600)).await;
            return StatusCode::OK.into_response();
        }
    };
    shared.keep(&path, &headers, &body, status, at);
    (
        StatusCode::from_u16(status).unwrap_or(StatusCode::OK),
        answer,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Posts `body` to `path`, signed with `secret`, as event `id`.
    async fn post(receiver: &Receiver, path: &str, secret: &str, id: &str, body: &str) -> u16 {
        let timestamp = Utc::now().timestamp();
        let signature = flow_domain::webhook::signing::signature_header(
            &[secret],
            id,
            timestamp,
            body.as_bytes(),
        );
        reqwest::Client::new()
            .post(receiver.url(path))
            .header("webhook-id", id)
            .header("webhook-timestamp", timestamp.to_string())
            .header("webhook-signature", signature)
            .body(body.to_owned())
            .send()
            .await
            .expect("receiver answers")
            .status()
            .as_u16()
    }

    #[tokio::test]
    async fn signed_endpoints_tally_first_arrivals_duplicates_and_bad_signatures() {
        let mut receiver = Receiver::start_with(Options {
            port: 0,
            keep_requests: false,
            default_behaviour: Behaviour::Status(404),
        })
        .await
        .expect("receiver");
        receiver.set("0", Behaviour::Status(204));
        receiver.sign("0", "whsec_first");
        receiver.sign("1", "whsec_second");
        let event = r#"{"timestamp":"2025-03-03T09:00:00Z"}"#;

        assert_eq!(
            post(&receiver, "0", "whsec_first", "evt_1", event).await,
            204
        );
        assert_eq!(
            post(&receiver, "0", "whsec_first", "evt_1", event).await,
            204
        );
        assert_eq!(
            post(&receiver, "0", "whsec_wrong", "evt_2", event).await,
            204
        );
        assert_eq!(
            post(&receiver, "0", "whsec_first", "evt_3", "nope").await,
            204
        );
        assert_eq!(
            post(&receiver, "2", "whsec_first", "evt_1", event).await,
            404
        );
        receiver.stop().await;

        let tally = receiver.tally();
        assert_eq!(tally.unique(), 2);
        assert_eq!(tally.first_arrivals("0"), 2);
        assert_eq!(tally.first_arrivals("1"), 0);
        assert_eq!(tally.per_endpoint.len(), 2, "every signed endpoint counts");
        assert_eq!(tally.duplicates, 1);
        assert_eq!(tally.signature_failures, 1);
        assert_eq!(tally.malformed, 1);
        assert_eq!(tally.unknown_endpoint, 1);
        let first = &tally.arrivals[0];
        assert_eq!(
            (first.path.as_str(), first.event_id.as_str()),
            ("0", "evt_1")
        );
        assert_eq!(first.event_at.to_rfc3339(), "2025-03-03T09:00:00+00:00");
        assert!(first.arrived_at > first.event_at);
        drop(tally);
        assert!(receiver.received("0").is_empty(), "requests are not kept");
    }

    #[tokio::test]
    async fn kept_requests_follow_each_paths_behaviour() {
        let receiver = Receiver::start().await.expect("receiver");
        receiver.set("flaky", Behaviour::FailTimes(1));
        for _ in 0..2 {
            post(&receiver, "flaky", "whsec_any", "evt_1", "{}").await;
        }
        post(&receiver, "other", "whsec_any", "evt_1", "{}").await;
        let received = receiver.received("flaky");
        let statuses: Vec<u16> = received.iter().map(|request| request.status).collect();
        assert_eq!(statuses, [500, 200]);
        assert!(received[0].verifies_with("whsec_any"));
        assert!(!received[0].verifies_with("whsec_other"));
        assert_eq!(received[0].header("webhook-id"), "evt_1");
        assert_eq!(received[0].event(), serde_json::json!({}));
        assert_eq!(receiver.delivered("flaky").len(), 1);
        assert_eq!(receiver.received("other").len(), 1);
        assert_eq!(receiver.tally().unique(), 0, "no endpoint was signed");
    }
}
