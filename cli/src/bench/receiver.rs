//! The in-process webhook receiver of the benchmarks: endpoint `i` is `POST /hook/i`; it verifies
//! every signature (Standard Webhooks), records the first arrival of each (endpoint, event) and
//! counts duplicates, and answers 204 at once.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::Context;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use chrono::{DateTime, Utc};
use flow_common::db::webhooks;
use flow_common::ids::{OrgId, WebhookEndpointId};
use flow_common::webhook::SecretVault;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

/// One delivery as the receiver saw it (the first arrival of each endpoint and event).
pub struct Arrival {
    pub event_id: String,
    pub event_at: DateTime<Utc>,
    pub arrived_at: DateTime<Utc>,
    pub arrived: Instant,
}

/// What the receiver has recorded so far.
#[derive(Default)]
pub struct ReceiverLog {
    /// First arrivals, in order.
    pub arrivals: Vec<Arrival>,
    /// (endpoint, event id) pairs seen.
    pub seen: HashSet<(usize, String)>,
    /// First arrivals per endpoint.
    pub per_endpoint: Vec<u64>,
    /// Arrivals of an (endpoint, event) pair seen before.
    pub duplicates: u64,
    /// Arrivals whose signature did not verify.
    pub signature_failures: u64,
    /// Arrivals whose body was not an event.
    pub malformed: u64,
    /// Arrivals for an endpoint index the receiver does not know.
    pub unknown_endpoint: u64,
}

/// The in-process webhook receiver: the endpoints' secrets and the log of arrivals.
pub struct Receiver {
    secrets: Vec<String>,
    log: Mutex<ReceiverLog>,
}

impl Receiver {
    /// A receiver for endpoints signing with `secrets` (endpoint `i` is `/hook/i`).
    pub fn new(secrets: Vec<String>) -> Arc<Self> {
        Arc::new(Self {
            log: Mutex::new(ReceiverLog {
                per_endpoint: vec![0; secrets.len()],
                ..ReceiverLog::default()
            }),
            secrets,
        })
    }

    /// Serves on 127.0.0.1:`port` (0: any free port) until the returned token is cancelled.
    pub async fn serve(
        self: &Arc<Self>,
        port: u16,
    ) -> anyhow::Result<(SocketAddr, CancellationToken, tokio::task::JoinHandle<()>)> {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
            .await
            .with_context(|| format!("binding the receiver to 127.0.0.1:{port}"))?;
        let address = listener.local_addr()?;
        let stop = CancellationToken::new();
        let router = Router::new()
            .route("/hook/{index}", post(receive))
            .with_state(self.clone());
        let shutdown = stop.clone();
        let server = tokio::spawn(async move {
            drop(
                axum::serve(listener, router)
                    .with_graceful_shutdown(shutdown.cancelled_owned())
                    .await,
            );
        });
        Ok((address, stop, server))
    }

    /// The log, locked.
    pub fn lock(&self) -> std::sync::MutexGuard<'_, ReceiverLog> {
        self.log
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// (endpoint, event) pairs received so far.
    pub fn unique(&self) -> usize {
        self.lock().seen.len()
    }
}

/// `POST /hook/{index}`: verifies the signature, records the arrival, answers 204 at once.
async fn receive(
    State(receiver): State<Arc<Receiver>>,
    Path(index): Path<usize>,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    let arrived_at = Utc::now();
    let arrived = Instant::now();
    let Some(secret) = receiver.secrets.get(index) else {
        receiver.lock().unknown_endpoint += 1;
        return StatusCode::NOT_FOUND;
    };
    let header = |name: &str| headers.get(name).and_then(|value| value.to_str().ok());
    let message_id = header("webhook-id").unwrap_or_default().to_owned();
    let signed = match (
        header("webhook-signature"),
        header("webhook-timestamp").and_then(|text| text.parse::<i64>().ok()),
    ) {
        (Some(signature), Some(timestamp)) => {
            flow_common::webhook::verify(secret, signature, &message_id, timestamp, &body)
        }
        _ => false,
    };
    #[derive(serde::Deserialize)]
    struct Event {
        timestamp: DateTime<Utc>,
    }
    let event_at = serde_json::from_slice::<Event>(&body)
        .ok()
        .map(|event| event.timestamp);
    let mut log = receiver.lock();
    if !signed {
        log.signature_failures += 1;
    }
    let Some(event_at) = event_at else {
        log.malformed += 1;
        return StatusCode::NO_CONTENT;
    };
    if !log.seen.insert((index, message_id.clone())) {
        log.duplicates += 1;
        return StatusCode::NO_CONTENT;
    }
    log.per_endpoint[index] += 1;
    log.arrivals.push(Arrival {
        event_id: message_id,
        event_at,
        arrived_at,
        arrived,
    });
    StatusCode::NO_CONTENT
}

/// Creates one endpoint per secret for `org_id`, endpoint `i` at `/hook/i` of `receiver` and
/// subscribed to `events(i)` (empty: every type).
pub async fn create_endpoints(
    pool: &PgPool,
    secrets: &[String],
    vault: &SecretVault,
    receiver: SocketAddr,
    org_id: OrgId,
    events: impl Fn(usize) -> Vec<String>,
) -> anyhow::Result<Vec<WebhookEndpointId>> {
    let mut endpoints = Vec::with_capacity(secrets.len());
    for (index, secret) in secrets.iter().enumerate() {
        let mut transaction = pool.begin().await?;
        let endpoint = webhooks::create(
            &mut transaction,
            org_id,
            &webhooks::NewEndpoint {
                url: format!("http://{receiver}/hook/{index}"),
                description: Some(format!("Benchmark receiver {index}")),
                events: events(index),
                secret: vault.seal(secret).map_err(anyhow::Error::msg)?,
            },
        )
        .await?
        .context("the organization has too many endpoints")?;
        transaction.commit().await?;
        endpoints.push(endpoint.id);
    }
    Ok(endpoints)
}
