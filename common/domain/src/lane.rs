//! The lanes work travels in (README §Lanes): interactive work never waits behind bulk work, and
//! inside the bulk lane organizations share the persist rate fairly, spread over
//! [`BULK_SHARDS`] shards. The broker gives each lane and shard its queues; storage records the
//! lane of each outbox row and each organization's shard.

/// The two lanes work travels in. Interactive work (one assign at a time, from the API or the
/// dashboard form, and what follows from it) never queues behind bulk work (bulk calls, uploads,
/// schedules): it has queues of its own that the workers consume beside, not after, the bulk ones.
/// Inside the bulk lane, organizations are spread over [`BULK_SHARDS`] queues taken in turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Lane {
    /// A person or an integration waiting on one answer.
    Interactive,
    /// Many items at once; fair between organizations, never ahead of interactive work.
    Bulk,
}

impl Lane {
    /// The label of the lane in metrics and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Lane::Interactive => "interactive",
            Lane::Bulk => "bulk",
        }
    }
}

/// Shards of the bulk lane. Each organization has one (see `organizations.bulk_lane`, given in
/// creation order, so the first `BULK_SHARDS` organizations never share one); the assign-worker
/// takes them in turn. Fixed: every process must agree on it, and changing it leaves messages in
/// queues nobody consumes.
pub const BULK_SHARDS: u16 = 8;

/// The bulk shard of an organization whose lane number is `bulk_lane`.
pub fn bulk_shard(bulk_lane: i64) -> u16 {
    u16::try_from(bulk_lane.rem_euclid(i64::from(BULK_SHARDS))).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::{BULK_SHARDS, Lane, bulk_shard};

    #[test]
    fn lanes_are_labelled_as_metrics_and_logs_name_them() {
        assert_eq!(Lane::Interactive.as_str(), "interactive");
        assert_eq!(Lane::Bulk.as_str(), "bulk");
    }

    #[test]
    fn lane_numbers_spread_over_the_bulk_shards_in_turn() {
        let shards: Vec<u16> = (0..i64::from(BULK_SHARDS) * 2).map(bulk_shard).collect();
        assert_eq!(shards[..8], [0, 1, 2, 3, 4, 5, 6, 7]);
        assert_eq!(shards[8..], shards[..8]);
        assert_eq!(bulk_shard(-1), BULK_SHARDS - 1);
    }
}
