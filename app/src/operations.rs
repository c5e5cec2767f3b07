//! The operations view of one organization (issue 26): how deep each lane's queues are, from the
//! API's queue-depth poller (its latest reading, not a poll of its own), which bulk shard the
//! organization's bulk work and webhook events travel in, and its own backlogs (events not yet
//! published, webhook deliveries). Queue depths are counts over every organization, the lane's
//! state as a status page would show it; every other figure is the organization's own, and no
//! other organization is ever named.

use chrono::{DateTime, Utc};
use flow_common::amqp::{self, BULK_SHARDS, Lane, QueueKind};
use flow_common::db::{outbox, webhooks};
use flow_domain::ids::OrgId;

use crate::Context;
use crate::ServiceError;
use crate::queue_depths::Reading;

/// One line of the view: a queue, or the sum of a lane's queues.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DepthRow {
    /// What it is, in words.
    pub label: String,
    /// The queue's name, or the pattern of the queues summed.
    pub queue: String,
    /// `interactive` or `bulk`.
    pub lane: &'static str,
    /// Messages ready for a consumer (`None` before the first reading).
    pub messages: Option<u64>,
    /// Consumers.
    pub consumers: Option<u64>,
}

/// What the operations view shows an organization.
#[derive(Debug, Clone)]
pub struct Overview {
    /// The organization's bulk shard (`0..BULK_SHARDS`).
    pub bulk_shard: u16,
    /// When the queues were read (`None`: not yet since the API started, or the broker is down).
    pub read_at: Option<DateTime<Utc>>,
    /// The queues, lane by lane.
    pub queues: Vec<DepthRow>,
    /// The organization's own events written and not yet published to the broker.
    pub unpublished_events: outbox::OrgBacklog,
    /// The organization's own webhook deliveries not finished yet.
    pub webhook_backlog: webhooks::log::Backlog,
}

/// The view of organization `org_id`, whose bulk lane number is `bulk_lane`.
pub async fn overview(
    ctx: &Context,
    org_id: OrgId,
    bulk_lane: i64,
) -> Result<Overview, ServiceError> {
    let bulk_shard = amqp::bulk_shard(bulk_lane);
    let reading = ctx.queue_depths.latest();
    let unpublished_events = outbox::backlog_of(&ctx.db, org_id).await?;
    let webhook_backlog = webhooks::log::backlog(&ctx.db, org_id).await?;
    let prefix = ctx.topology().prefix();
    Ok(Overview {
        bulk_shard,
        read_at: reading.as_ref().map(|reading| reading.read_at),
        queues: rows(reading.as_ref(), prefix, bulk_shard),
        unpublished_events,
        webhook_backlog,
    })
}

/// The rows of the view from `reading`, for an organization in shard `shard`.
fn rows(reading: Option<&Reading>, prefix: &str, shard: u16) -> Vec<DepthRow> {
    let sum = |kinds: &[QueueKind]| -> (Option<u64>, Option<u64>) {
        let Some(reading) = reading else {
            return (None, None);
        };
        let found: Vec<_> = kinds.iter().filter_map(|kind| reading.of(*kind)).collect();
        if found.is_empty() {
            return (None, None);
        }
        (
            Some(found.iter().map(|queue| u64::from(queue.messages)).sum()),
            Some(found.iter().map(|queue| u64::from(queue.consumers)).sum()),
        )
    };
    let row = |label: &str, queue: String, lane: Lane, kinds: &[QueueKind]| {
        let (messages, consumers) = sum(kinds);
        DepthRow {
            label: label.to_owned(),
            queue,
            lane: lane.as_str(),
            messages,
            consumers,
        }
    };
    let name = |kind: QueueKind| format!("{prefix}.{}", kind.suffix());
    let last = BULK_SHARDS - 1;
    let mut bulk_webhooks = QueueKind::bulk_webhooks();
    bulk_webhooks.push(QueueKind::Webhooks);
    vec![
        row(
            "Assigns, one at a time",
            name(QueueKind::Assign),
            Lane::Interactive,
            &[QueueKind::Assign],
        ),
        row(
            "Module progress",
            name(QueueKind::Progress),
            Lane::Interactive,
            &[QueueKind::Progress],
        ),
        row(
            &format!("Bulk assigns, your shard ({shard})"),
            name(QueueKind::BulkAssign(shard)),
            Lane::Bulk,
            &[QueueKind::BulkAssign(shard)],
        ),
        row(
            "Bulk assigns, every shard",
            format!("{prefix}.assign.bulk.0–{last}"),
            Lane::Bulk,
            &QueueKind::bulk_assign(),
        ),
        row(
            "Webhook events of single assigns",
            name(QueueKind::InteractiveWebhooks),
            Lane::Interactive,
            &[QueueKind::InteractiveWebhooks],
        ),
        row(
            &format!("Webhook events of bulk work, your shard ({shard})"),
            name(QueueKind::BulkWebhooks(shard)),
            Lane::Bulk,
            &[QueueKind::BulkWebhooks(shard)],
        ),
        row(
            "Webhook events of bulk work, every shard",
            format!("{prefix}.webhooks.bulk.0–{last}"),
            Lane::Bulk,
            &bulk_webhooks,
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue_depths::QueueDepth;

    #[test]
    fn a_shard_row_is_the_organizations_queue_and_a_total_sums_every_shard() {
        let queue = |kind, messages| QueueDepth {
            kind,
            messages,
            consumers: 1,
        };
        let reading = Reading {
            read_at: Utc::now(),
            queues: vec![
                queue(QueueKind::BulkAssign(2), 5),
                queue(QueueKind::BulkAssign(3), 7),
                queue(QueueKind::BulkWebhooks(2), 11),
                queue(QueueKind::Webhooks, 1),
            ],
        };
        let rows = rows(Some(&reading), "flow", 2);
        let find = |label: &str| rows.iter().find(|row| row.label == label).expect(label);
        assert_eq!(find("Bulk assigns, your shard (2)").messages, Some(5));
        assert_eq!(find("Bulk assigns, every shard").messages, Some(12));
        assert_eq!(find("Bulk assigns, every shard").consumers, Some(2));
        assert_eq!(
            find("Webhook events of bulk work, every shard").messages,
            Some(12),
            "the queue of earlier versions counts in the bulk lane"
        );
        assert_eq!(find("Assigns, one at a time").messages, None, "not read");
        assert!(
            super::rows(None, "flow", 2)
                .iter()
                .all(|row| row.messages.is_none())
        );
    }
}
