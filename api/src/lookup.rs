//! Batched pre-publish lookups. Concurrent assign requests are resolved together in one query
//! (user by e-mail, earlier request with the same id, active assignment of the flow): while one
//! query runs, the next requests queue up and go in the following one, so the batch grows with
//! the load and a lone request waits for nobody.

use std::sync::Arc;

use flow_common::db::assignments::{self, LookupKey, LookupResult};
use flow_common::runtime::Supervisor;
use sqlx::PgPool;
use tokio::sync::{Semaphore, mpsc, oneshot};
use tokio_util::sync::CancellationToken;

type Reply = oneshot::Sender<Result<LookupResult, Arc<sqlx::Error>>>;

/// Largest number of lookups in one query.
const MAX_BATCH: usize = 512;

/// Why a lookup got no answer.
#[derive(Debug, thiserror::Error)]
pub enum LookupError {
    /// The batcher has stopped: the service is shutting down.
    #[error("the service is shutting down")]
    ShuttingDown,
    /// The batch's query failed (every request of the batch sees the same error).
    #[error("assign lookup: {0}")]
    Database(#[from] sqlx::Error),
}

/// Handle to the lookup batcher. Cheap to clone.
#[derive(Clone)]
pub struct Lookup {
    queue: mpsc::Sender<(LookupKey, Reply)>,
}

impl Lookup {
    /// Starts the batcher in `background`, with at most `concurrency` queries in flight.
    pub fn start(pool: PgPool, concurrency: usize, background: &Supervisor) -> Self {
        let (queue, receiver) = mpsc::channel(16 * MAX_BATCH);
        background.spawn("assign lookup batcher", |stop| {
            run(pool, receiver, concurrency.max(1), stop)
        });
        Self { queue }
    }

    /// Resolves one request.
    pub async fn resolve(&self, key: LookupKey) -> Result<LookupResult, LookupError> {
        let (reply, answer) = oneshot::channel();
        self.queue
            .send((key, reply))
            .await
            .map_err(|_| LookupError::ShuttingDown)?;
        match answer.await {
            Ok(Ok(result)) => Ok(result),
            Ok(Err(error)) => Err(LookupError::Database(
                Arc::try_unwrap(error).unwrap_or_else(|shared| clone_error(&shared)),
            )),
            Err(_) => Err(LookupError::ShuttingDown),
        }
    }
}

/// A shared query error seen by several requests: keep whether it was transient.
fn clone_error(error: &sqlx::Error) -> sqlx::Error {
    if flow_common::db::is_transient(error) {
        sqlx::Error::PoolTimedOut
    } else {
        sqlx::Error::Protocol(error.to_string())
    }
}

async fn run(
    pool: PgPool,
    mut receiver: mpsc::Receiver<(LookupKey, Reply)>,
    concurrency: usize,
    shutdown: CancellationToken,
) {
    let permits = Arc::new(Semaphore::new(concurrency));
    let mut batch = Vec::with_capacity(MAX_BATCH);
    loop {
        // Wait for a free query slot first: requests keep queueing meanwhile, so the next batch
        // takes all of them.
        let Ok(permit) = permits.clone().acquire_owned().await else {
            return;
        };
        let received = tokio::select! {
            () = shutdown.cancelled() => 0,
            received = receiver.recv_many(&mut batch, MAX_BATCH) => received,
        };
        if received == 0 {
            return;
        }
        let (keys, replies): (Vec<LookupKey>, Vec<Reply>) = batch.drain(..).unzip();
        let pool = pool.clone();
        tokio::spawn(async move {
            let _permit = permit;
            metrics::histogram!("flow_lookup_batch_items").record(keys.len() as f64);
            match assignments::lookup(&pool, &keys).await {
                Ok(results) => {
                    for (reply, result) in replies.into_iter().zip(results) {
                        drop(reply.send(Ok(result)));
                    }
                }
                Err(error) => {
                    let error = Arc::new(error);
                    for reply in replies {
                        drop(reply.send(Err(error.clone())));
                    }
                }
            }
        });
    }
}
