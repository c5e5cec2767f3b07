//! Seeding shared by the benchmarks: a database of their own, and an organization whose flows carry
//! a reminder policy and a validity.

use std::future::Future;

use anyhow::Context as _;
use flow_common::amqp::Topology;
use flow_common::config::CoreConfig;
use flow_common::db::{self, flows::FlowEdit, flows::NewModule, orgs};
use flow_domain::expiry::Validity;
use flow_domain::ids::{FlowId, OrgId};
use flow_domain::reminders::ReminderPolicy;
use sqlx::PgPool;
use sqlx::migrate::MigrateDatabase;

use super::report::database_url;

/// Runs `bench` on a database of its own, `database` on the server of `core`'s (dropped first if
/// it exists, created and migrated; `connections` in the pool), and on queues of its own
/// (`bench.<uuid>`); then deletes the queues and, unless `keep`, drops the database.
pub(super) async fn on_own_database<F, Measured>(
    core: &CoreConfig,
    database: &str,
    connections: u32,
    keep: bool,
    bench: F,
) -> anyhow::Result<()>
where
    F: FnOnce(CoreConfig, PgPool) -> Measured,
    Measured: Future<Output = anyhow::Result<()>>,
{
    let url = database_url(&core.database_url, database);
    let mut core = core.clone();
    core.database_url = url.clone();
    core.queue_prefix = format!("bench.{}", uuid::Uuid::now_v7().simple());
    if sqlx::Postgres::database_exists(&url).await.unwrap_or(false) {
        sqlx::Postgres::drop_database(&url).await?;
    }
    sqlx::Postgres::create_database(&url).await?;
    let pool = db::connect(&url, connections)
        .await
        .context("connecting to the benchmark database")?;
    let result = async {
        db::migrate(&pool).await?;
        bench(core.clone(), pool.clone()).await
    }
    .await;
    pool.close().await;
    let topology = Topology::new(core.queue_prefix.clone(), core.delivery_limit);
    flow_common::amqp::delete_topology(&core.amqp_url, "flowctl-bench", &topology).await;
    if !keep {
        sqlx::Postgres::drop_database(&url)
            .await
            .context("dropping the benchmark database")?;
    }
    result
}

/// The five modules of a benchmark flow, 30 minutes each.
pub(super) fn modules() -> Vec<NewModule> {
    ["Welcome", "Policies", "Security", "Tools", "Quiz"]
        .iter()
        .map(|name| NewModule {
            name: (*name).to_owned(),
            estimated_minutes: 30,
            activity_id: None,
        })
        .collect()
}

/// Creates the organization `"{bench} bench org"` (Enterprise, in `zone`) and `flows` flows
/// `"{bench} flow {index}"` of [`modules`], each with the reminder `policy`, a completion valid for
/// `validity` and its renewal assigned `renew_before_days` before the expiry (set through
/// `flow_common::db::flows`, as the API sets them).
pub(super) async fn org_with_policy_flows(
    pool: &PgPool,
    bench: &str,
    zone: chrono_tz::Tz,
    flows: u64,
    policy: &ReminderPolicy,
    validity: Validity,
    renew_before_days: i32,
) -> anyhow::Result<(OrgId, Vec<FlowId>)> {
    let org = orgs::create(
        pool,
        &orgs::NewOrganization {
            name: format!("{bench} bench org"),
            tier: orgs::Tier::Enterprise,
            timezone: zone,
            assign_limit_per_minute: None,
            report_limit_per_minute: None,
        },
    )
    .await?;
    let modules = modules();
    let mut created = Vec::new();
    for index in 0..flows {
        let (flow, _) = db::flows::create(
            pool,
            org.id,
            &format!("{bench} flow {index}"),
            None,
            &modules,
        )
        .await?;
        let mut transaction = pool.begin().await?;
        db::flows::edit(
            &mut transaction,
            org.id,
            flow.id,
            &FlowEdit {
                reminders: Some(Some(policy.clone())),
                valid_for: Some(Some(validity)),
                renew_before_days: Some(Some(renew_before_days)),
                ..FlowEdit::default()
            },
        )
        .await?
        .context("the flow just created")?;
        transaction.commit().await?;
        created.push(flow.id);
    }
    Ok((org.id, created))
}
