//! Batched pre-publish lookups. Concurrent assign requests are resolved together in one query
//! (user by e-mail, earlier request with the same id, active assignment of the flow): while one
//! query runs, the next requests queue up and go in the following one, so the batch grows with
//! the load and a lone request waits for nobody. The items of a bulk request go in as one job,
//! so they are resolved in one query (or two, beside other requests).

use std::sync::Arc;

use flow_common::db::assignments::{self, LookupKey, LookupResult};
use flow_common::runtime::Supervisor;
use sqlx::PgPool;
use tokio::sync::{Semaphore, mpsc, oneshot};
use tokio_util::sync::CancellationToken;

type Reply = oneshot::Sender<Result<Vec<LookupResult>, Arc<sqlx::Error>>>;

/// Keys of one caller (one request, or all the items of a bulk request) and where to answer.
struct Job {
    keys: Vec<LookupKey>,
    reply: Reply,
}

/// Keys in one query: jobs are gathered until they reach this many (a job is never split).
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
    queue: mpsc::Sender<Job>,
}

impl Lookup {
    /// Starts the batcher in `background`, with at most `concurrency` queries in flight.
    pub fn start(pool: PgPool, concurrency: usize, background: &Supervisor) -> Self {
        let (queue, receiver) = mpsc::channel(4 * MAX_BATCH);
        background.spawn("assign lookup batcher", |stop| {
            run(pool, receiver, concurrency.max(1), stop)
        });
        Self { queue }
    }

    /// Resolves many keys of one caller, in one query (with other callers' keys when they wait
    /// at the same time); results are in the order of `keys`.
    pub async fn resolve_all(
        &self,
        keys: Vec<LookupKey>,
    ) -> Result<Vec<LookupResult>, LookupError> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let (reply, answer) = oneshot::channel();
        self.queue
            .send(Job { keys, reply })
            .await
            .map_err(|_| LookupError::ShuttingDown)?;
        match answer.await {
            Ok(Ok(results)) => Ok(results),
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
    mut receiver: mpsc::Receiver<Job>,
    concurrency: usize,
    shutdown: CancellationToken,
) {
    let permits = Arc::new(Semaphore::new(concurrency));
    // A job that did not fit in the previous query goes first in the next.
    let mut held: Option<Job> = None;
    loop {
        // Wait for a free query slot first: requests keep queueing meanwhile, so the next query
        // takes all of them.
        let Ok(permit) = permits.clone().acquire_owned().await else {
            return;
        };
        let first = match held.take() {
            Some(job) => job,
            None => {
                let received = tokio::select! {
                    () = shutdown.cancelled() => None,
                    received = receiver.recv() => received,
                };
                match received {
                    Some(job) => job,
                    None => return,
                }
            }
        };
        let mut count = first.keys.len();
        let mut jobs = vec![first];
        while count < MAX_BATCH {
            let Ok(job) = receiver.try_recv() else {
                break;
            };
            if count + job.keys.len() > MAX_BATCH {
                held = Some(job);
                break;
            }
            count += job.keys.len();
            jobs.push(job);
        }
        let pool = pool.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let mut keys = Vec::with_capacity(count);
            let mut replies = Vec::with_capacity(jobs.len());
            for job in jobs {
                replies.push((job.keys.len(), job.reply));
                keys.extend(job.keys);
            }
            metrics::histogram!("flow_lookup_batch_items").record(keys.len() as f64);
            match assignments::lookup(&pool, &keys).await {
                Ok(results) => {
                    let mut results = results.into_iter();
                    for (count, reply) in replies {
                        drop(reply.send(Ok(results.by_ref().take(count).collect())));
                    }
                }
                Err(error) => {
                    let error = Arc::new(error);
                    for (_, reply) in replies {
                        drop(reply.send(Err(error.clone())));
                    }
                }
            }
        });
    }
}
