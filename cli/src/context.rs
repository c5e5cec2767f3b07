//! What a `flowctl` command connects with: a small pool ([`pool`]), or the application layer as
//! `flowctl` reaches it: an `app::Context` of its own over a small pool
//! (the broker is connected on first use, which the account and key commands never make), whose
//! background tasks stop with [`Tool::close`]. `flowctl` calls the same operations as the API
//! and the dashboard, as `Actor::Flowctl`.

use std::time::Duration;

use anyhow::Context as _;
use flow_app::{Acting, Caller, Context, Settings, StartConfig};
use flow_common::amqp::BatchLimits;
use flow_common::config::{CoreConfig, from_env};
use flow_common::db::audit::Actor;
use flow_common::runtime::Supervisor;
use flow_domain::ids::OrgId;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

/// Opens a small pool for a one-shot command.
pub async fn pool(core: &CoreConfig) -> anyhow::Result<PgPool> {
    flow_common::db::connect(&core.database_url, 4)
        .await
        .with_context(|| format!("connecting to {}", redact(&core.database_url)))
}

/// A connection string without its credentials, for messages.
pub fn redact(url: &str) -> String {
    flow_common::redact::redact_url(url)
}

/// Address the dashboard is reachable at when a command names none (`PUBLIC_BASE_URL`'s
/// default).
pub const DEFAULT_BASE_URL: &str = "http://localhost:8080";

/// How big a [`Tool`]'s connections are.
#[derive(Debug, Clone, Copy)]
pub struct Size {
    /// Postgres connections.
    pub connections: u32,
    /// Confirm-mode channels to publish commands on.
    pub publish_channels: usize,
}

impl Default for Size {
    /// What a one-shot command needs: a small pool, one channel.
    fn default() -> Self {
        Self {
            connections: 4,
            publish_channels: 1,
        }
    }
}

/// A context for one command.
pub struct Tool {
    context: Context,
    background: Supervisor,
    shutdown: CancellationToken,
}

impl std::ops::Deref for Tool {
    type Target = Context;

    fn deref(&self) -> &Context {
        &self.context
    }
}

impl Tool {
    /// Opens the context: `public_base_url` is where the links it makes point.
    pub async fn open(core: &CoreConfig, public_base_url: &str) -> anyhow::Result<Self> {
        Self::open_with(core, public_base_url, &Size::default(), |_| {}).await
    }

    /// [`Tool::open`] of `size`, its settings (read from the environment) changed by `adjust`
    /// first: the demo allows its local webhook receiver.
    pub async fn open_with(
        core: &CoreConfig,
        public_base_url: &str,
        size: &Size,
        adjust: impl FnOnce(&mut Settings),
    ) -> anyhow::Result<Self> {
        let db = flow_common::db::connect(&core.database_url, size.connections)
            .await
            .with_context(|| format!("connecting to {}", redact(&core.database_url)))?;
        let shutdown = CancellationToken::new();
        let background = Supervisor::new(&shutdown);
        let mut settings = Settings {
            public_base_url: public_base_url.to_owned(),
            webhook_policy: from_env(),
            webhook_secrets: from_env(),
        };
        adjust(&mut settings);
        let context = Context::start(
            db,
            StartConfig {
                core: core.clone(),
                settings,
                connection_name: "flowctl",
                publish_channels: size.publish_channels,
                publish_confirm_timeout: Duration::from_secs(5),
                batch_limits: BatchLimits {
                    max_batch: 128,
                    in_flight: 1,
                    fill_wait: Duration::ZERO,
                },
                lookup_concurrency: 1,
                export_store: from_env(),
            },
            &background,
            &shutdown,
        )
        .await?;
        Ok(Self {
            context,
            background,
            shutdown,
        })
    }

    /// Stops the background tasks and closes the connections.
    pub async fn close(self) {
        self.background.stop().await;
        self.shutdown.cancel();
        self.context.publisher.close().await;
        self.context.db.close().await;
    }
}

/// The organization `org_id` as the operations act for it, or an error naming it.
pub async fn organization(context: &Context, org_id: OrgId) -> anyhow::Result<Caller> {
    let org = flow_app::orgs::get(context, org_id)
        .await?
        .ok_or_else(|| anyhow::anyhow!("no organization {org_id}"))?;
    Ok(Caller::without_key(org))
}

/// `flowctl` acting in `caller`'s organization.
pub fn acting(caller: &Caller) -> Acting<'_> {
    Acting {
        caller,
        actor: Actor::Flowctl,
    }
}
