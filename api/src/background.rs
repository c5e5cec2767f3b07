//! The API's background tasks (cache invalidation, key-use recording, the lookup batcher, the
//! queue-depth poller), supervised: each is spawned through the one [`Background`] of the
//! server, so a task that panics or stops early is logged under its name instead of vanishing,
//! and at shutdown the server cancels them and waits for them rather than dropping them
//! mid-write with the runtime.

use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::time::Duration;

use futures::FutureExt;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Longest [`Background::stop`] waits for the tasks: each stops at its next await, so only a
/// stuck dependency holds one longer, and that must not hold up the process's exit.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);

/// The supervisor of the background tasks. Cheap to clone.
#[derive(Clone)]
pub struct Background {
    tasks: TaskTracker,
    /// Cancelled by the process's shutdown, or by [`Background::stop`].
    stop: CancellationToken,
}

impl Background {
    /// A supervisor whose tasks are cancelled when `shutdown` is.
    pub fn new(shutdown: &CancellationToken) -> Self {
        Self {
            tasks: TaskTracker::new(),
            stop: shutdown.child_token(),
        }
    }

    /// Runs `task(stop)` in the background, where `stop` is cancelled when the task should
    /// return. Its end is logged: at debug level once stopping, as an error before that.
    pub fn spawn<F, Fut>(&self, name: &'static str, task: F)
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
        });
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;

    #[tokio::test]
    async fn stop_cancels_the_tasks_and_waits_for_them() {
        let shutdown = CancellationToken::new();
        let background = Background::new(&shutdown);
        let finished = Arc::new(AtomicBool::new(false));
        let flag = finished.clone();
        background.spawn("waits for stop", |stop| async move {
            stop.cancelled().await;
            tokio::time::sleep(Duration::from_millis(50)).await;
            flag.store(true, Ordering::SeqCst);
        });
        background.spawn("panics", |_| async { panic!("on purpose") });
        background.stop().await;
        assert!(finished.load(Ordering::SeqCst));
        assert!(!shutdown.is_cancelled(), "only the background tasks stop");
    }

    #[tokio::test]
    async fn the_process_shutdown_cancels_the_tasks() {
        let shutdown = CancellationToken::new();
        let background = Background::new(&shutdown);
        let (sender, receiver) = tokio::sync::oneshot::channel();
        background.spawn("waits for stop", |stop| async move {
            stop.cancelled().await;
            let _ = sender.send(());
        });
        shutdown.cancel();
        receiver.await.expect("the task saw the shutdown");
    }
}
