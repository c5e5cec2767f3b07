//! Seeding shared by the benchmarks: a database of their own, an organization whose flows carry a
//! reminder policy and a validity, the `COPY … FROM STDIN` writer their rows go through, the
//! assignment rows the scheduler benches write, and what a running system would have done to
//! them (expiry windows, renewal links, vacuumed tables).

use std::fmt::Write as _;
use std::future::Future;

use anyhow::Context as _;
use chrono::{DateTime, Utc};
use flow_common::amqp::Topology;
use flow_common::config::CoreConfig;
use flow_common::db::{self, flows::FlowEdit, flows::NewModule, orgs};
use flow_domain::expiry::Validity;
use flow_domain::ids::{AssignmentId, FlowId, OrgId, UserId};
use flow_domain::reminders::ReminderPolicy;
use sqlx::PgPool;
use sqlx::migrate::MigrateDatabase;
use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgCopyIn, PgPoolCopyExt};

use super::report::{copy_time, database_url};

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

/// A `COPY … FROM STDIN` and the buffer its rows are written to, sent every 4 MiB.
pub(super) struct CopyIn {
    copy: PgCopyIn<PoolConnection<sqlx::Postgres>>,
    /// Rows in `COPY`'s text format not sent yet.
    pub(super) rows: String,
}

/// Starts `statement` (a `COPY … FROM STDIN`) on a connection of `pool`.
pub(super) async fn copy_in(pool: &PgPool, statement: &str) -> anyhow::Result<CopyIn> {
    Ok(CopyIn {
        copy: pool.copy_in_raw(statement).await?,
        rows: String::new(),
    })
}

impl CopyIn {
    /// Sends the rows written so far once they pass 4 MiB; answers whether it sent them.
    pub(super) async fn flush_when_full(&mut self) -> anyhow::Result<bool> {
        if self.rows.len() <= 4 << 20 {
            return Ok(false);
        }
        self.copy
            .send(std::mem::take(&mut self.rows).into_bytes())
            .await?;
        Ok(true)
    }

    /// Sends the rest and ends the `COPY`; answers how many rows it wrote.
    pub(super) async fn finish(mut self) -> anyhow::Result<u64> {
        self.copy.send(self.rows.into_bytes()).await?;
        Ok(self.copy.finish().await?)
    }
}

/// The `COPY` whose rows [`Assignment::write`] writes.
pub(super) const COPY_ASSIGNMENTS: &str = "COPY assignments (id, org_id, flow_id, user_id, status, \
     priority, due_at, assigned_at, started_at, completed_at, overdue_at) FROM STDIN";

/// A row of [`COPY_ASSIGNMENTS`] (the priority is `medium`).
pub(super) struct Assignment {
    pub(super) id: AssignmentId,
    pub(super) org_id: OrgId,
    pub(super) flow_id: FlowId,
    pub(super) user_id: UserId,
    pub(super) status: &'static str,
    pub(super) due_at: Option<DateTime<Utc>>,
    pub(super) assigned_at: DateTime<Utc>,
    pub(super) started_at: Option<DateTime<Utc>>,
    pub(super) completed_at: Option<DateTime<Utc>>,
    pub(super) overdue_at: Option<DateTime<Utc>>,
}

impl Assignment {
    /// Writes the row to `out`.
    pub(super) fn write(&self, out: &mut String) {
        let _ = write!(
            out,
            "{}\t{}\t{}\t{}\t{}\tmedium\t",
            self.id.0, self.org_id.0, self.flow_id.0, self.user_id.0, self.status
        );
        optional_time(out, self.due_at);
        out.push('\t');
        copy_time(out, self.assigned_at);
        out.push('\t');
        optional_time(out, self.started_at);
        out.push('\t');
        optional_time(out, self.completed_at);
        out.push('\t');
        optional_time(out, self.overdue_at);
        out.push('\n');
    }
}

/// The `COPY` whose rows [`write_renewal`] writes.
pub(super) const COPY_RENEWALS: &str = "COPY assignments (id, org_id, flow_id, user_id, status, \
     priority, due_at, assigned_at) FROM STDIN";

/// Writes to `out` the row of the renewal assignment `id` of `user_id` to `flow_id` as the
/// scheduler creates it: pending, due at the completion's expiry (`due_at`), assigned when the
/// renewal window opened (`assigned_at`).
pub(super) fn write_renewal(
    out: &mut String,
    id: AssignmentId,
    (org_id, flow_id, user_id): (OrgId, FlowId, UserId),
    due_at: DateTime<Utc>,
    assigned_at: DateTime<Utc>,
) {
    let _ = write!(
        out,
        "{}\t{}\t{}\t{}\tpending\tmedium\t",
        id.0, org_id.0, flow_id.0, user_id.0
    );
    copy_time(out, due_at);
    out.push('\t');
    copy_time(out, assigned_at);
    out.push('\n');
}

/// Writes `at` (or `\N`) as a `COPY` text field.
pub(super) fn optional_time(out: &mut String, at: Option<DateTime<Utc>>) {
    match at {
        Some(at) => copy_time(out, at),
        None => out.push_str("\\N"),
    }
}

/// Sets the expiry and renewal window of every completion of `org_id` by the very SQL a
/// completion uses ([`db::lifecycle::EXPIRY_AND_RENEWAL`], its completion instant taken from the
/// row).
pub(super) async fn set_expiry_and_renewal(pool: &PgPool, org_id: OrgId) -> anyhow::Result<()> {
    let expiry = db::lifecycle::EXPIRY_AND_RENEWAL;
    anyhow::ensure!(
        expiry.contains("$2::timestamptz"),
        "EXPIRY_AND_RENEWAL no longer takes the completion as $2::timestamptz"
    );
    let expiry = expiry.replace("$2::timestamptz", "a.completed_at");
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "UPDATE assignments a SET (expires_at, renew_at) = {expiry}
         WHERE a.org_id = $1 AND a.status = 'completed'"
    )))
    .bind(org_id)
    .execute(pool)
    .await?;
    Ok(())
}

/// Records each of `renewal_ids` as the renewal of the completion at the same place in `ids`
/// (its `renewal_id`), as the scheduler does when it renews one.
pub(super) async fn link_renewals(
    pool: &PgPool,
    ids: &[AssignmentId],
    renewal_ids: &[AssignmentId],
) -> anyhow::Result<()> {
    sqlx::query(
        "UPDATE assignments a SET renewal_id = t.renewal_id
         FROM UNNEST($1::uuid[], $2::uuid[]) AS t(id, renewal_id) WHERE a.id = t.id",
    )
    .bind(ids)
    .bind(renewal_ids)
    .execute(pool)
    .await?;
    Ok(())
}

/// `VACUUM (ANALYZE)` of each of `tables`, in order, as a running system's autovacuum leaves
/// them.
pub(super) async fn vacuum_analyze(pool: &PgPool, tables: &[&str]) -> anyhow::Result<()> {
    for table in tables {
        sqlx::query(sqlx::AssertSqlSafe(format!("VACUUM (ANALYZE) {table}")))
            .execute(pool)
            .await?;
    }
    Ok(())
}
