//! The queue-depth poller: the depth and consumer count of every queue as gauges, so `/metrics`
//! shows a backlog building up behind the API; its latest readings are also kept in
//! [`QueueDepths`], which the dashboard's operations page reads (no second poll).

use std::sync::{Arc, RwLock};
use std::time::Duration;

use chrono::{DateTime, Utc};
use flow_common::amqp::{QueueKind, Topology};
use lapin::Connection;
use tokio_util::sync::CancellationToken;

/// How often the queues are read.
pub const POLL_INTERVAL: Duration = Duration::from_secs(5);

/// One queue as the poller last read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueDepth {
    /// Which queue.
    pub kind: QueueKind,
    /// Messages ready for a consumer.
    pub messages: u32,
    /// Consumers.
    pub consumers: u32,
}

/// The poller's latest reading of every queue.
#[derive(Debug, Clone)]
pub struct Reading {
    /// When it was taken.
    pub read_at: DateTime<Utc>,
    /// Every queue the broker answered for.
    pub queues: Vec<QueueDepth>,
}

impl Reading {
    /// The depth of `kind`, if it was read.
    pub fn of(&self, kind: QueueKind) -> Option<QueueDepth> {
        self.queues.iter().copied().find(|queue| queue.kind == kind)
    }
}

/// The latest [`Reading`], shared by the poller (writing) and the pages (reading). Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct QueueDepths(Arc<RwLock<Option<Reading>>>);

impl QueueDepths {
    /// The latest reading; `None` until the poller has read the queues once.
    pub fn latest(&self) -> Option<Reading> {
        self.0
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Keeps `reading` as the latest.
    pub fn store(&self, reading: Reading) {
        *self
            .0
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(reading);
    }
}

/// Reads the queues every [`POLL_INTERVAL`] until `shutdown`, on a connection of its own that it
/// opens again whenever the broker dropped it (declaring the topology each time it opens one);
/// sets the gauges and keeps the reading in `latest`.
pub async fn poll(
    amqp_url: String,
    topology: Topology,
    latest: QueueDepths,
    shutdown: CancellationToken,
) {
    let mut connection = None;
    loop {
        tokio::select! {
            () = shutdown.cancelled() => break,
            () = tokio::time::sleep(POLL_INTERVAL) => {}
        }
        if connection
            .as_ref()
            .is_none_or(|open: &Connection| !open.status().connected())
        {
            connection = open(&amqp_url, &topology).await;
        }
        let Some(open) = &connection else { continue };
        match flow_common::amqp::queue_depths(open, &topology).await {
            Ok(depths) => {
                let mut queues = Vec::with_capacity(depths.len());
                for (kind, messages, consumers) in depths {
                    flow_common::amqp::record_queue_depth(
                        kind,
                        &topology.queue(kind),
                        messages,
                        consumers,
                    );
                    queues.push(QueueDepth {
                        kind,
                        messages,
                        consumers,
                    });
                }
                latest.store(Reading {
                    read_at: Utc::now(),
                    queues,
                });
            }
            Err(error) => {
                tracing::debug!(%error, "could not read queue depths");
                connection = None;
            }
        }
    }
    if let Some(open) = connection {
        drop(open.close(200, "shutting down".into()).await);
    }
}

/// A connection to read the queues on, with the topology declared first (the declare every
/// component makes at start-up): the poller may be the first component to reach the broker, and
/// a passive declare of a queue nobody declared is refused (`NOT_FOUND`, logged as an error, the
/// channel closed), so the queues would go unread until another component declared them.
async fn open(amqp_url: &str, topology: &Topology) -> Option<Connection> {
    let connection = flow_common::amqp::connect(amqp_url, "flow-api-metrics")
        .await
        .ok()?;
    let declared = async {
        let channel = connection.create_channel().await?;
        topology.declare(&channel).await?;
        channel.close(200, "topology declared".into()).await
    }
    .await;
    match declared {
        Ok(()) => Some(connection),
        Err(error) => {
            tracing::debug!(%error, "could not declare the topology before reading queue depths");
            drop(connection.close(200, "topology not declared".into()).await);
            None
        }
    }
}
