//! A local HTTP server playing the customer's webhook endpoints: it records every request and
//! answers per path as the test tells it (succeed, fail a few times, answer a status or a body,
//! answer slowly, wait for the test to open a gate, or hang).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::Value;
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
    /// 200 with this body once the test calls [`Receiver::open_gate`] (at once after that).
    Gated(&'static [u8]),
    /// Never answers (until the test ends).
    Hang,
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
    /// What the receiver answered.
    pub status: u16,
    /// When it arrived.
    pub at: tokio::time::Instant,
}

impl Received {
    /// A header as text.
    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|value| value.to_str().ok())
            .unwrap_or("")
    }

    /// The body as JSON.
    pub fn event(&self) -> Value {
        serde_json::from_slice(&self.body).expect("webhook body is JSON")
    }

    /// Whether the request's `webhook-signature` holds `secret`'s signature of this very
    /// request, checked as a receiver following Standard Webhooks would.
    pub fn verifies_with(&self, secret: &str) -> bool {
        let timestamp: i64 = self.header("webhook-timestamp").parse().unwrap_or(0);
        flow_common::webhook::verify(
            secret,
            self.header("webhook-signature"),
            self.header("webhook-id"),
            timestamp,
            &self.body,
        )
    }
}

struct Shared {
    behaviours: Mutex<HashMap<String, Behaviour>>,
    calls: Mutex<HashMap<String, usize>>,
    received: Mutex<Vec<Received>>,
    gate: tokio::sync::watch::Sender<bool>,
}

/// The receiver.
pub struct Receiver {
    /// `http://127.0.0.1:port`.
    pub base_url: String,
    shared: Arc<Shared>,
    shutdown: CancellationToken,
}

impl Receiver {
    /// Starts a receiver on an ephemeral port.
    pub async fn start() -> Self {
        let shared = Arc::new(Shared {
            behaviours: Mutex::default(),
            calls: Mutex::default(),
            received: Mutex::default(),
            gate: tokio::sync::watch::Sender::new(false),
        });
        let app = Router::new()
            .route("/hooks/{*path}", post(receive))
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind receiver");
        let base_url = format!("http://{}", listener.local_addr().expect("address"));
        let shutdown = CancellationToken::new();
        let stop = shutdown.clone();
        tokio::spawn(async move {
            drop(
                axum::serve(listener, app)
                    .with_graceful_shutdown(stop.cancelled_owned())
                    .await,
            );
        });
        Self {
            base_url,
            shared,
            shutdown,
        }
    }

    /// The URL of endpoint `path`.
    pub fn url(&self, path: &str) -> String {
        format!("{}/hooks/{path}", self.base_url)
    }

    /// Sets how `path` answers (default: succeed).
    pub fn set(&self, path: &str, behaviour: Behaviour) {
        self.shared
            .behaviours
            .lock()
            .expect("lock")
            .insert(path.to_owned(), behaviour);
    }

    /// Lets every request of a [`Behaviour::Gated`] path be answered, waiting or to come.
    pub fn open_gate(&self) {
        self.shared.gate.send_replace(true);
    }

    /// Every request `path` received so far, in order.
    pub fn received(&self, path: &str) -> Vec<Received> {
        self.shared
            .received
            .lock()
            .expect("lock")
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
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

async fn receive(
    State(shared): State<Arc<Shared>>,
    Path(path): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let at = tokio::time::Instant::now();
    let behaviour = shared
        .behaviours
        .lock()
        .expect("lock")
        .get(&path)
        .copied()
        .unwrap_or(Behaviour::Succeed);
    let call = {
        let mut calls = shared.calls.lock().expect("lock");
        let count = calls.entry(path.clone()).or_default();
        *count += 1;
        *count
    };
    let record = |status: u16| {
        shared.received.lock().expect("lock").push(Received {
            path: path.clone(),
            headers: headers.clone(),
            body: body.clone(),
            status,
            at,
        });
    };
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
            // Recorded on arrival, so a test can act while the request is in flight.
            record(200);
            let mut gate = shared.gate.subscribe();
            drop(gate.wait_for(|open| *open).await);
            return (StatusCode::OK, answer).into_response();
        }
        Behaviour::Hang => {
            record(0);
            tokio::time::sleep(Duration::from_secs(3_600)).await;
            return StatusCode::OK.into_response();
        }
    };
    record(status);
    (
        StatusCode::from_u16(status).unwrap_or(StatusCode::OK),
        answer,
    )
        .into_response()
}
