//! The two scheduler processes and their killing: every interval one of them, the two in turn,
//! is killed with SIGKILL and started again at once. Just before each kill the bench reads from
//! `pg_stat_activity` whether the victim had a transaction open (its connections found by their
//! client ports, from `/proc`), so the printout says how many kills landed in the middle of a
//! claim rather than between two.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use flow_common::config::CoreConfig;
use sqlx::PgPool;
use tokio::process::Child;
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;

use crate::bench::system::spawn_component;

/// The two schedulers and the kills so far.
pub(super) struct Schedulers {
    /// The running process of each replica.
    pub(super) running: Vec<Child>,
    pub(super) kills: Vec<Kill>,
}

/// One SIGKILL.
pub(super) struct Kill {
    /// Which replica (0 or 1).
    pub(super) replica: usize,
    /// The transactions the victim had open, each as its state and the start of its last
    /// statement.
    pub(super) open: Vec<(String, String)>,
}

impl Schedulers {
    /// Starts the two schedulers.
    pub(super) fn start(
        core: &CoreConfig,
        port: u16,
        environment: &[(&str, &str)],
    ) -> anyhow::Result<Self> {
        Ok(Self {
            running: vec![
                spawn_component("scheduler", port, core, environment)?,
                spawn_component("scheduler", port, core, environment)?,
            ],
            kills: Vec::new(),
        })
    }
}

/// Every `every`, kills the next scheduler with SIGKILL and starts it again with the same
/// settings, until `stop`; prints a line per kill.
#[allow(clippy::too_many_arguments)]
pub(super) async fn kill_in_turn(
    schedulers: Arc<Mutex<Schedulers>>,
    pool: PgPool,
    every: Duration,
    started: Instant,
    core: CoreConfig,
    port: u16,
    environment: Vec<(String, String)>,
    stop: CancellationToken,
) -> anyhow::Result<()> {
    let environment: Vec<(&str, &str)> = environment
        .iter()
        .map(|(name, value)| (name.as_str(), value.as_str()))
        .collect();
    loop {
        tokio::select! {
            () = stop.cancelled() => return Ok(()),
            () = tokio::time::sleep(every) => {}
        }
        let mut schedulers = schedulers.lock().await;
        let replica = schedulers.kills.len() % 2;
        let child = &mut schedulers.running[replica];
        let open = match child.id() {
            Some(pid) => open_transactions(&pool, pid).await.unwrap_or_else(|error| {
                tracing::warn!(%error, "could not read the scheduler's transactions");
                Vec::new()
            }),
            None => Vec::new(),
        };
        // tokio's kill is SIGKILL: no shutdown path runs.
        child.kill().await?;
        *child = spawn_component("scheduler", port, &core, &environment)?;
        let at = started.elapsed();
        println!(
            "  {:>5.1} s: scheduler {} killed with SIGKILL and started again; {}",
            at.as_secs_f64(),
            replica + 1,
            if open.is_empty() {
                "no transaction open".to_owned()
            } else {
                open.iter()
                    .map(|(state, statement)| format!("{state}: {statement}"))
                    .collect::<Vec<_>>()
                    .join("; ")
            }
        );
        schedulers.kills.push(Kill { replica, open });
    }
}

/// The transactions the process `pid` has open on the benchmark database: state and the start of
/// the last statement of each of its connections in a transaction.
async fn open_transactions(pool: &PgPool, pid: u32) -> anyhow::Result<Vec<(String, String)>> {
    let ports = client_ports(pid)?;
    if ports.is_empty() {
        return Ok(Vec::new());
    }
    let ports: Vec<i32> = ports.into_iter().map(i32::from).collect();
    Ok(sqlx::query_as(
        "SELECT state || CASE WHEN wait_event_type = 'Lock'
                               THEN ' (waiting on a ' || wait_event || ' lock)' ELSE '' END,
                regexp_replace(left(btrim(query), 60), '\\s+', ' ', 'g')
         FROM pg_stat_activity
         WHERE datname = current_database() AND client_port = ANY($1)
           AND xact_start IS NOT NULL",
    )
    .bind(&ports)
    .fetch_all(pool)
    .await?)
}

/// Local ports of the TCP connections the process `pid` holds (its socket descriptors, looked up
/// in its network namespace's TCP tables).
fn client_ports(pid: u32) -> anyhow::Result<HashSet<u16>> {
    let mut sockets = HashSet::new();
    for entry in std::fs::read_dir(format!("/proc/{pid}/fd"))? {
        let Ok(target) = std::fs::read_link(entry?.path()) else {
            continue;
        };
        if let Some(inode) = target
            .to_str()
            .and_then(|target| target.strip_prefix("socket:["))
            .and_then(|rest| rest.strip_suffix(']'))
        {
            sockets.insert(inode.to_owned());
        }
    }
    let mut ports = HashSet::new();
    for table in ["tcp", "tcp6"] {
        let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/net/{table}")) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (Some(local), Some(inode)) = (fields.get(1), fields.get(9)) else {
                continue;
            };
            if !sockets.contains(*inode) {
                continue;
            }
            if let Some(port) = local
                .rsplit_once(':')
                .and_then(|(_, port)| u16::from_str_radix(port, 16).ok())
            {
                ports.insert(port);
            }
        }
    }
    Ok(ports)
}
