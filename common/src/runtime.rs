//! What every long-running Flow process runs on, the API and the workers alike: a [`Supervisor`]
//! of the tasks it spawns, a [`Wakeup`] that wakes a loop on a Postgres notification, and the one
//! [`Backoff`] between tries of something that failed on a passing cause. The workers' runtime
//! (`flow_workers::runtime`) builds a role's pool, topology and publisher on top of these.

use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};
use futures::FutureExt;
use sqlx::PgPool;
use sqlx::postgres::PgListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Longest [`Supervisor::stop`] waits for the tasks: each stops at its next await, so only a
/// stuck dependency holds one longer, and that must not hold up the process's exit.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);

/// The supervisor of a process's (or a worker role's) tasks: a task that panics or stops early
/// is logged under its name instead of vanishing, and at shutdown the tasks are cancelled and
/// waited for rather than dropped mid-write with the runtime. Cheap to clone.
#[derive(Clone)]
pub struct Supervisor {
    tasks: TaskTracker,
    /// Cancelled by the process's shutdown, or by [`Supervisor::stop`].
    stop: CancellationToken,
}

impl Supervisor {
    /// A supervisor whose tasks are cancelled when `shutdown` is.
    pub fn new(shutdown: &CancellationToken) -> Self {
        Self {
            tasks: TaskTracker::new(),
            stop: shutdown.child_token(),
        }
    }

    /// Runs `task(stop)`, where `stop` is cancelled when the task should return. Its end is
    /// logged: at debug level once stopping, as an error before that. The handle lets a caller
    /// wait for this task in particular; [`Supervisor::stop`] waits for every task anyway.
    pub fn spawn<F, Fut>(&self, name: &'static str, task: F) -> JoinHandle<()>
    where
        F: FnOnce(CancellationToken) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let stop = self.stop.clone();
        let task = AssertUnwindSafe(task(stop.clone())).catch_unwind();
        self.tasks.spawn(async move {
            match task.await {
                Ok(()) if stop.is_cancelled() => {
                    tracing::debug!(task = name, "background task stopped");
                }
                Ok(()) => tracing::error!(task = name, "background task ended before shutdown"),
                Err(panic) => tracing::error!(
                    task = name,
                    panic = panic_text(panic.as_ref()),
                    "background task panicked"
                ),
            }
        })
    }

    /// Cancels every task and waits for them to return (at most a few seconds).
    pub async fn stop(&self) {
        self.stop.cancel();
        self.tasks.close();
        if tokio::time::timeout(STOP_TIMEOUT, self.tasks.wait())
            .await
            .is_err()
        {
            tracing::warn!(
                running = self.tasks.len(),
                "background tasks still running {} s after being cancelled; leaving them",
                STOP_TIMEOUT.as_secs()
            );
        }
    }
}

/// The message a panic was raised with.
fn panic_text(panic: &(dyn Any + Send)) -> &str {
    panic
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| panic.downcast_ref::<&str>().copied())
        .unwrap_or("unknown panic")
}

/// Wakes a loop when a notification arrives on a Postgres channel (`LISTEN`, on a connection of
/// its own), or when a timeout passes. Notifications sent while it does not listen are lost, so
/// a loop also looks for work when it times out, and a listener that breaks is reopened by the
/// next [`Wakeup::listen`].
pub struct Wakeup {
    pool: PgPool,
    channel: &'static str,
    listener: Option<PgListener>,
}

impl Wakeup {
    /// A wake-up on `channel`, not listening yet.
    pub fn new(pool: PgPool, channel: &'static str) -> Self {
        Self {
            pool,
            channel,
            listener: None,
        }
    }

    /// Listens on the channel unless it already does; true when it has just started to (what
    /// was notified before was missed). When Postgres cannot be reached, the next call tries
    /// again, and [`Wakeup::wait`] sleeps meanwhile.
    pub async fn listen(&mut self) -> bool {
        if self.listener.is_some() {
            return false;
        }
        let opened = async {
            let mut listener = PgListener::connect_with(&self.pool).await?;
            listener.listen(self.channel).await?;
            Ok::<_, sqlx::Error>(listener)
        };
        match opened.await {
            Ok(listener) => {
                self.listener = Some(listener);
                true
            }
            Err(error) => {
                tracing::debug!(channel = self.channel, %error, "cannot listen for notifications yet");
                false
            }
        }
    }

    /// Waits for a notification, at most `timeout` (sleeps `timeout` when not listening);
    /// returns its payload. When the connection fails, stops listening until the next
    /// [`Wakeup::listen`].
    pub async fn wait(&mut self, timeout: Duration) -> Option<String> {
        let Some(listener) = self.listener.as_mut() else {
            tokio::time::sleep(timeout).await;
            return None;
        };
        let error = match tokio::time::timeout(timeout, listener.try_recv()).await {
            Err(_) => return None,
            Ok(Ok(Some(notification))) => return Some(notification.payload().to_owned()),
            // Reconnected by sqlx itself, but what was notified meanwhile is lost: start over.
            Ok(Ok(None)) => "the connection was lost".to_owned(),
            Ok(Err(error)) => error.to_string(),
        };
        tracing::warn!(channel = self.channel, %error, "notifications lost; reconnecting");
        self.listener = None;
        None
    }
}

/// Exponential backoff with jitter that never gives up: the delays between tries of something
/// that failed on a passing cause. The two schedules below are the service's only ones.
#[derive(Debug)]
pub struct Backoff {
    builder: ExponentialBuilder,
    delays: ExponentialBackoff,
}

impl Backoff {
    /// Between attempts to reach Postgres or RabbitMQ, or to redo a round that failed: from
    /// 0.2 s, doubling up to 10 s.
    pub fn reconnect() -> Self {
        Self::new(Duration::from_millis(200), Duration::from_secs(10))
    }

    /// Between tries of a transaction that failed on a transient error (a deadlock, Postgres
    /// restarting): from 20 ms, doubling up to 5 s.
    pub fn transaction() -> Self {
        Self::new(Duration::from_millis(20), Duration::from_secs(5))
    }

    fn new(min: Duration, max: Duration) -> Self {
        let builder = ExponentialBuilder::default()
            .with_min_delay(min)
            .with_max_delay(max)
            .with_jitter()
            .without_max_times();
        Self {
            builder,
            delays: builder.build(),
        }
    }

    /// The next delay.
    pub fn delay(&mut self) -> Duration {
        self.delays.next().unwrap_or(Duration::from_secs(10))
    }

    /// Starts again from the shortest delay (what failed works again).
    pub fn reset(&mut self) {
        self.delays = self.builder.build();
    }

    /// Runs `attempt` until it succeeds, fails in a way `is_transient` says no retry can fix, or
    /// `shutdown` comes; waits for the next delay in between. `what` names the work in the logs.
    pub async fn retry<T, E, Fut>(
        mut self,
        what: &str,
        shutdown: &CancellationToken,
        is_transient: impl Fn(&E) -> bool,
        mut attempt: impl FnMut() -> Fut,
    ) -> Result<T, E>
    where
        E: std::fmt::Display,
        Fut: Future<Output = Result<T, E>>,
    {
        loop {
            let error = match attempt().await {
                Ok(value) => return Ok(value),
                Err(error) => error,
            };
            if !is_transient(&error) || shutdown.is_cancelled() {
                return Err(error);
            }
            let delay = self.delay();
            tracing::warn!(%error, ?delay, what, "transient database error; retrying");
            if shutdown
                .run_until_cancelled(tokio::time::sleep(delay))
                .await
                .is_none()
            {
                return Err(error);
            }
        }
    }
}

/// Runs `attempt` until it succeeds, fails in a way `is_transient` says no retry can fix, or
/// `shutdown` comes, with the [`Backoff::transaction`] delays in between (Postgres restarting,
/// deadlocks between workers). `what` names the work in the logs.
pub async fn retry_transient<T, E, Fut>(
    what: &str,
    shutdown: &CancellationToken,
    is_transient: impl Fn(&E) -> bool,
    attempt: impl FnMut() -> Fut,
) -> Result<T, E>
where
    E: std::fmt::Display,
    Fut: Future<Output = Result<T, E>>,
{
    Backoff::transaction()
        .retry(what, shutdown, is_transient, attempt)
        .await
}

impl Iterator for Backoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        Some(self.delay())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;

    #[tokio::test]
    async fn stop_cancels_the_tasks_and_waits_for_them() {
        let shutdown = CancellationToken::new();
        let supervisor = Supervisor::new(&shutdown);
        let finished = Arc::new(AtomicBool::new(false));
        let flag = finished.clone();
        supervisor.spawn("waits for stop", |stop| async move {
            stop.cancelled().await;
            tokio::time::sleep(Duration::from_millis(50)).await;
            flag.store(true, Ordering::SeqCst);
        });
        supervisor.spawn("panics", |_| async { panic!("on purpose") });
        supervisor.stop().await;
        assert!(finished.load(Ordering::SeqCst));
        assert!(!shutdown.is_cancelled(), "only the supervised tasks stop");
    }

    #[tokio::test]
    async fn the_process_shutdown_cancels_the_tasks() {
        let shutdown = CancellationToken::new();
        let supervisor = Supervisor::new(&shutdown);
        let (sender, receiver) = tokio::sync::oneshot::channel();
        supervisor.spawn("waits for stop", |stop| async move {
            stop.cancelled().await;
            let _ = sender.send(());
        });
        shutdown.cancel();
        receiver.await.expect("the task saw the shutdown");
    }

    #[test]
    fn backoff_grows_to_its_ceiling_and_starts_over_on_reset() {
        let mut backoff = Backoff::transaction();
        let delays: Vec<Duration> = backoff.by_ref().take(12).collect();
        // Jitter adds up to one delay again on top of each.
        assert!(delays[0] >= Duration::from_millis(20) && delays[0] <= Duration::from_millis(40));
        assert!(delays[11] >= Duration::from_secs(5), "{delays:?}");
        assert!(delays.iter().all(|delay| *delay <= Duration::from_secs(10)));
        backoff.reset();
        assert!(backoff.delay() <= Duration::from_millis(40));
    }

    #[tokio::test]
    async fn retry_stops_at_the_first_error_no_retry_can_fix() {
        let shutdown = CancellationToken::new();
        let mut tries = 0;
        let transient_twice: Result<u32, &str> = retry_transient(
            "test",
            &shutdown,
            |error| *error == "transient",
            || {
                tries += 1;
                let outcome = if tries < 3 {
                    Err("transient")
                } else {
                    Ok(tries)
                };
                async move { outcome }
            },
        )
        .await;
        assert_eq!(transient_twice, Ok(3));
        let mut tries = 0;
        let permanent: Result<(), &str> = Backoff::transaction()
            .retry(
                "test",
                &shutdown,
                |error| *error == "transient",
                || {
                    tries += 1;
                    async { Err("permanent") }
                },
            )
            .await;
        assert_eq!((permanent, tries), (Err("permanent"), 1));
        shutdown.cancel();
        let stopped: Result<(), &str> = Backoff::transaction()
            .retry("test", &shutdown, |_| true, || async { Err("transient") })
            .await;
        assert_eq!(stopped, Err("transient"), "no retry once shutting down");
    }

    /// Postgres for this test: `TEST_DATABASE_URL`, else the local server.
    async fn postgres() -> PgPool {
        let url = std::env::var("TEST_DATABASE_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned());
        crate::db::connect(&url, 4)
            .await
            .expect("the test Postgres")
    }

    #[tokio::test]
    async fn a_wakeup_whose_connection_is_terminated_listens_again() {
        let pool = postgres().await;
        // A channel of this test alone: tests of other processes share the server.
        let channel: &'static str = format!("wakeup_test_{}", uuid::Uuid::new_v4().simple()).leak();
        let notify = || crate::db::notify(&pool, channel, "hello");
        let mut wakeup = Wakeup::new(pool.clone(), channel);
        assert!(wakeup.listen().await, "starts listening");
        assert!(!wakeup.listen().await, "listens once");
        notify().await.expect("notify");
        assert_eq!(
            wakeup.wait(Duration::from_secs(5)).await.as_deref(),
            Some("hello")
        );
        assert_eq!(
            wakeup.wait(Duration::from_millis(50)).await,
            None,
            "times out"
        );

        let terminated: Vec<bool> = sqlx::query_scalar(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query = $1",
        )
        .bind(format!(r#"LISTEN "{channel}""#))
        .fetch_all(&pool)
        .await
        .expect("terminating the listener");
        assert_eq!(terminated, [true], "one listening backend");
        // The wait notices the lost connection, and the next listen opens a new one, saying so
        // (notifications may have been missed).
        assert_eq!(wakeup.wait(Duration::from_secs(5)).await, None);
        assert!(wakeup.listen().await, "listens again");
        notify().await.expect("notify");
        assert_eq!(
            wakeup.wait(Duration::from_secs(5)).await.as_deref(),
            Some("hello")
        );
    }
}
