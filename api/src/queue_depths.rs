//! The queue-depth poller: the depth and consumer count of every queue as gauges, so `/metrics`
//! shows a backlog building up behind the API.

use std::time::Duration;

use flow_common::amqp::Topology;
use lapin::Connection;
use tokio_util::sync::CancellationToken;

/// How often the queues are read.
const POLL_INTERVAL: Duration = Duration::from_secs(5);

/// Reads the queues every [`POLL_INTERVAL`] until `shutdown`, on a connection of its own that it
/// opens again whenever the broker dropped it.
pub async fn poll(amqp_url: String, topology: Topology, shutdown: CancellationToken) {
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
            connection = flow_common::amqp::connect(&amqp_url, "flow-api-metrics")
                .await
                .ok();
        }
        let Some(open) = &connection else { continue };
        match flow_common::amqp::queue_depths(open, &topology).await {
            Ok(depths) => {
                for (kind, messages, consumers) in depths {
                    flow_common::amqp::record_queue_depth(
                        kind,
                        &topology.queue(kind),
                        messages,
                        consumers,
                    );
                }
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
