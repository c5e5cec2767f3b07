//! What every operation stands on ([`Context`]), and how it is built ([`Context::start`]): the
//! Postgres pools, the broker publishers, the caches, the rate limiter, the lookup batcher, the
//! export store, the assignment id signer and the few settings the operations read. The API's
//! state holds one; `flowctl` builds its own.

use std::time::Duration;

use anyhow::Context as _;
use flow_common::amqp::{BatchLimits, BatchPublisher, BatchTarget, Publisher, Topology};
use flow_common::config::CoreConfig;
use flow_common::db::replicas::ReadRouter;
use flow_common::export_store::{ExportStore, ExportStoreConfig};
use flow_common::runtime::Supervisor;
use flow_common::webhook::address::AddressPolicy;
use flow_common::webhook::vault::SecretVault;
use flow_domain::ids::AssignmentIdSigner;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use crate::caches::Caches;
use crate::lookup::Lookup;
use crate::queue_depths::QueueDepths;
use crate::ratelimit::RateLimiter;

/// The settings the operations read, whatever the surface.
#[derive(Clone)]
pub struct Settings {
    /// Base address callers reach the service at (sign-in links, `downloadUrl`).
    pub public_base_url: String,
    /// Which webhook endpoint addresses are accepted.
    pub webhook_policy: AddressPolicy,
    /// Encryption of webhook secrets at rest.
    pub webhook_secrets: SecretVault,
}

/// What [`Context::start`] needs besides the primary pool.
pub struct StartConfig {
    /// Database, broker and queue settings.
    pub core: CoreConfig,
    /// What the operations read.
    pub settings: Settings,
    /// The broker connection's name (`flow-api`, `flowctl`).
    pub connection_name: &'static str,
    /// Confirm-mode channels used to publish commands.
    pub publish_channels: usize,
    /// How long to wait for the broker's confirm before answering unavailable.
    pub publish_confirm_timeout: Duration,
    /// How assign commands are gathered into messages.
    pub batch_limits: BatchLimits,
    /// Concurrent batched lookup queries.
    pub lookup_concurrency: usize,
    /// Where export files are read from.
    pub export_store: ExportStoreConfig,
}

/// Everything the operations share. Cheap to reach, not to build: a surface builds one and
/// keeps it (the API behind its state's one `Arc`).
pub struct Context {
    /// Postgres pool (the primary): everything that decides, and every write.
    pub db: PgPool,
    /// Where report reads run: a fresh replica, else the primary.
    pub reads: ReadRouter,
    /// Publisher of commands.
    pub publisher: Publisher,
    /// Publisher of assign commands, batching concurrent requests into one message.
    pub assign_publisher: BatchPublisher,
    /// Keys, flows and enrollment rules.
    pub caches: Caches,
    /// Rate limits.
    pub limiter: RateLimiter,
    /// Batched assign lookups.
    pub lookup: Lookup,
    /// Export files.
    pub export_store: ExportStore,
    /// Mints the ids of assignments requested without an `X-Request-ID`, and recognises them.
    pub assignment_ids: AssignmentIdSigner,
    /// The queue-depth poller's latest reading (empty where no poller runs).
    pub queue_depths: QueueDepths,
    /// What the operations read.
    pub settings: Settings,
}

impl Context {
    /// Builds the context over the primary pool `db`: the assignment id key, the publishers (the
    /// broker is connected on first use), the export store, the read router, the caches and the
    /// lookup batcher, whose tasks run under `background` until it stops.
    pub async fn start(
        db: PgPool,
        config: StartConfig,
        background: &Supervisor,
        shutdown: &CancellationToken,
    ) -> anyhow::Result<Self> {
        let core = &config.core;
        let assignment_ids = AssignmentIdSigner::new(
            flow_common::db::secrets::get_or_create(&db, flow_common::db::secrets::ASSIGNMENT_IDS)
                .await
                .context("reading the assignment id key")?,
        );
        let topology = Topology::new(&core.queue_prefix, core.delivery_limit);
        let publisher = Publisher::new(
            &core.amqp_url,
            config.connection_name,
            topology,
            config.publish_channels,
            config.publish_confirm_timeout,
        );
        let export_store =
            ExportStore::open(&config.export_store).context("opening the export store")?;
        let reads = ReadRouter::new(db.clone(), &core.replicas, core.database_max_connections)
            .context("reading DATABASE_REPLICA_URLS")?;
        reads.start(background);
        let caches = Caches::start(&db, background);
        let lookup = Lookup::start(db.clone(), config.lookup_concurrency, background);
        let assign_publisher = BatchPublisher::start(
            publisher.clone(),
            BatchTarget::assign_commands(publisher.topology()),
            config.batch_limits,
            shutdown.clone(),
        );
        Ok(Self {
            assign_publisher,
            limiter: RateLimiter::new(db.clone()),
            db,
            reads,
            publisher,
            caches,
            lookup,
            export_store,
            assignment_ids,
            queue_depths: QueueDepths::default(),
            settings: config.settings,
        })
    }

    /// The topology names.
    pub fn topology(&self) -> &Topology {
        self.publisher.topology()
    }
}
