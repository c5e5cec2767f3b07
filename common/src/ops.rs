//! The ops endpoints every Flow process serves on its ops address (`METRICS_BIND`): `/metrics`
//! (Prometheus), `/healthz` (the process is up) and `/readyz` (its own dependencies answer:
//! Postgres, RabbitMQ, and its consumers or loops are running).
//!
//! The one piece of HTTP in `common`: every binary serves it, the API and the workers alike.
//! Roles register what their readiness depends on in a [`Health`] handle they get through their
//! configuration; `flowctl up` hands one handle to every role and serves it once.

use std::fmt;
use std::net::SocketAddr;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use sqlx::PgPool;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::amqp::Publisher;

/// Longest a readiness check may take before it counts as down.
const CHECK_TIMEOUT: Duration = Duration::from_secs(2);

/// What a process's readiness depends on. Cheap to clone; a default handle has no checks (and so
/// is not ready) until roles register theirs.
#[derive(Clone, Default)]
pub struct Health {
    checks: Arc<Mutex<Vec<Check>>>,
}

#[derive(Clone)]
enum Check {
    /// `SELECT 1` answers.
    Postgres { name: String, pool: PgPool },
    /// The publisher has, or can open, a broker connection.
    Broker { name: String, publisher: Publisher },
    /// A consumer or loop reports itself alive.
    Loop { name: String, liveness: Liveness },
}

impl Check {
    fn name(&self) -> &str {
        match self {
            Check::Postgres { name, .. }
            | Check::Broker { name, .. }
            | Check::Loop { name, .. } => name,
        }
    }

    async fn passes(&self) -> bool {
        match self {
            Check::Postgres { pool, .. } => matches!(
                tokio::time::timeout(CHECK_TIMEOUT, sqlx::query("SELECT 1").execute(pool)).await,
                Ok(Ok(_))
            ),
            Check::Broker { publisher, .. } => matches!(
                tokio::time::timeout(CHECK_TIMEOUT, publisher.connect_now()).await,
                Ok(Ok(()))
            ),
            Check::Loop { liveness, .. } => liveness.is_alive(),
        }
    }
}

impl fmt::Debug for Health {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        let checks = self
            .checks
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        formatter
            .debug_list()
            .entries(checks.iter().map(Check::name))
            .finish()
    }
}

impl Health {
    /// Readiness requires `SELECT 1` on `pool` to answer within two seconds.
    pub fn add_postgres(&self, role: &str, pool: PgPool) {
        self.push(Check::Postgres {
            name: format!("{role}.postgres"),
            pool,
        });
    }

    /// Readiness requires `publisher` to hold, or be able to open, a broker connection.
    pub fn add_broker(&self, role: &str, publisher: Publisher) {
        self.push(Check::Broker {
            name: format!("{role}.rabbitmq"),
            publisher,
        });
    }

    /// Readiness requires the returned liveness to report alive; it starts down. `what` names the
    /// consumer or loop (`assign-worker.consumer`).
    pub fn add_loop(&self, what: impl Into<String>, stale_after: Option<Duration>) -> Liveness {
        let liveness = Liveness::new(stale_after);
        self.push(Check::Loop {
            name: what.into(),
            liveness: liveness.clone(),
        });
        liveness
    }

    fn push(&self, check: Check) {
        self.checks
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .push(check);
    }

    /// Runs every check; ready when there is at least one and all pass.
    pub async fn report(&self) -> Readiness {
        // Cloned out: no lock is held across the checks.
        let checks: Vec<Check> = self
            .checks
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone();
        let outcomes = futures::future::join_all(checks.iter().map(Check::passes)).await;
        let checks: Vec<(String, bool)> = checks
            .iter()
            .map(|check| check.name().to_owned())
            .zip(outcomes)
            .collect();
        Readiness {
            ready: !checks.is_empty() && checks.iter().all(|(_, up)| *up),
            checks,
        }
    }
}

/// The outcome of every readiness check.
#[derive(Debug, Clone)]
pub struct Readiness {
    /// Every check passed (and there was at least one).
    pub ready: bool,
    /// Each check's name and whether it passed.
    pub checks: Vec<(String, bool)>,
}

/// Whether one consumer or loop is running: a consumer says so with [`Liveness::set_alive`], a
/// loop with [`Liveness::beat`] each round (it counts as stuck once no beat came for
/// `stale_after`). Cheap to clone.
#[derive(Clone, Debug)]
pub struct Liveness {
    inner: Arc<LivenessState>,
}

#[derive(Debug)]
struct LivenessState {
    alive: AtomicBool,
    started: Instant,
    /// Milliseconds after `started` of the last beat.
    last_beat_ms: AtomicU64,
    stale_after: Option<Duration>,
}

impl Liveness {
    fn new(stale_after: Option<Duration>) -> Self {
        Self {
            inner: Arc::new(LivenessState {
                alive: AtomicBool::new(false),
                started: Instant::now(),
                last_beat_ms: AtomicU64::new(0),
                stale_after,
            }),
        }
    }

    /// A liveness no readiness check looks at (for code run outside a served process).
    pub fn detached() -> Self {
        Self::new(None)
    }

    /// Marks the consumer or loop running (or stopped).
    pub fn set_alive(&self, alive: bool) {
        self.inner.alive.store(alive, Ordering::Relaxed);
    }

    /// Marks one round of a loop done: alive, and not stuck for `stale_after` from now.
    pub fn beat(&self) {
        let elapsed = u64::try_from(self.inner.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.inner.last_beat_ms.store(elapsed, Ordering::Relaxed);
        self.set_alive(true);
    }

    /// Running, and (for a loop) beating.
    pub fn is_alive(&self) -> bool {
        if !self.inner.alive.load(Ordering::Relaxed) {
            return false;
        }
        match self.inner.stale_after {
            None => true,
            Some(stale_after) => {
                let last = Duration::from_millis(self.inner.last_beat_ms.load(Ordering::Relaxed));
                self.inner.started.elapsed().saturating_sub(last) <= stale_after
            }
        }
    }
}

/// Where a process serves its ops endpoints: an address, or `off`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpsAddress(pub Option<SocketAddr>);

impl FromStr for OpsAddress {
    type Err = std::net::AddrParseError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let text = text.trim();
        if text.is_empty() || text.eq_ignore_ascii_case("off") {
            return Ok(Self(None));
        }
        text.parse().map(|address| Self(Some(address)))
    }
}

/// `/metrics`, `/healthz` and `/readyz` over `health`.
pub fn router(health: Health) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(health)
}

/// Binds `address` now (so a taken port fails start-up) and serves the ops endpoints until
/// `shutdown`; returns the bound address (port 0 picks one).
pub async fn spawn(
    address: SocketAddr,
    health: Health,
    shutdown: CancellationToken,
) -> std::io::Result<SocketAddr> {
    // Install the recorder before anything records, so early metrics are not lost.
    crate::telemetry::metrics_handle();
    let listener = TcpListener::bind(address).await?;
    let bound = listener.local_addr()?;
    tracing::info!(address = %bound, "ops endpoints (/metrics, /healthz, /readyz) listening");
    tokio::spawn(async move {
        let served = axum::serve(listener, router(health))
            .with_graceful_shutdown(shutdown.cancelled_owned())
            .await;
        if let Err(error) = served {
            tracing::error!(%error, "ops endpoints stopped");
        }
    });
    Ok(bound)
}

/// Starts the ops endpoints when `address` is not `off`; logs and returns the bound address.
pub async fn spawn_if(
    address: OpsAddress,
    health: Health,
    shutdown: CancellationToken,
) -> anyhow::Result<Option<SocketAddr>> {
    use anyhow::Context;
    match address.0 {
        None => Ok(None),
        Some(address) => spawn(address, health, shutdown)
            .await
            .map(Some)
            .with_context(|| format!("binding the ops address {address} (METRICS_BIND)")),
    }
}

async fn metrics() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        crate::telemetry::render_metrics(),
    )
}

async fn healthz() -> impl IntoResponse {
    axum::Json(serde_json::json!({ "status": "ok" }))
}

async fn readyz(State(health): State<Health>) -> impl IntoResponse {
    let readiness = health.report().await;
    let checks: serde_json::Map<String, serde_json::Value> = readiness
        .checks
        .iter()
        .map(|(name, up)| (name.clone(), (if *up { "up" } else { "down" }).into()))
        .collect();
    let status = if readiness.ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (
        status,
        axum::Json(serde_json::json!({
            "status": if readiness.ready { "ready" } else { "not_ready" },
            "checks": checks,
        })),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ops_address_parses_an_address_or_off() {
        assert_eq!(
            "127.0.0.1:9101".parse::<OpsAddress>().unwrap(),
            OpsAddress(Some("127.0.0.1:9101".parse().unwrap()))
        );
        assert_eq!("off".parse::<OpsAddress>().unwrap(), OpsAddress(None));
        assert_eq!("".parse::<OpsAddress>().unwrap(), OpsAddress(None));
        assert!("nine".parse::<OpsAddress>().is_err());
    }

    #[test]
    fn a_loop_that_stops_beating_is_not_alive() {
        let consumer = Liveness::new(None);
        assert!(!consumer.is_alive(), "starts down");
        consumer.set_alive(true);
        assert!(consumer.is_alive());
        let stuck = Liveness::new(Some(Duration::from_millis(20)));
        stuck.beat();
        assert!(stuck.is_alive());
        std::thread::sleep(Duration::from_millis(60));
        assert!(!stuck.is_alive(), "no beat for longer than stale_after");
    }

    #[tokio::test]
    async fn readiness_needs_a_check_and_every_check_up() {
        let health = Health::default();
        assert!(!health.report().await.ready, "nothing registered yet");
        let consumer = health.add_loop("test.consumer", None);
        assert!(!health.report().await.ready);
        consumer.set_alive(true);
        let readiness = health.report().await;
        assert!(readiness.ready);
        assert_eq!(readiness.checks, vec![("test.consumer".to_owned(), true)]);
    }
}
