//! The two scheduler processes and their killing: every interval one of them, the two in turn,
//! is killed with SIGKILL and started again at once (by [`crate::bench::system::kill_in_turn`],
//! the loop `bench fairness` kills its workers with). Just before each kill the bench reads from
//! `pg_stat_activity` whether the victim had a transaction open (its connections found by their
//! client ports, from `/proc`), so the printout says how many kills landed in the middle of a
//! claim rather than between two.

use std::collections::HashSet;
use std::time::Instant;

use flow_common::config::CoreConfig;
use sqlx::PgPool;

use crate::bench::system::{InTurn, Witness, spawn_component};

/// The two schedulers and the kills so far.
pub(super) type Schedulers = InTurn<Kill>;

/// One SIGKILL.
pub(super) struct Kill {
    /// Which replica (0 or 1).
    pub(super) replica: usize,
    /// The transactions the victim had open, each as its state and the start of its last
    /// statement.
    pub(super) open: Vec<(String, String)>,
}

/// Starts the two schedulers.
pub(super) fn start(
    core: &CoreConfig,
    port: u16,
    environment: &[(&str, &str)],
) -> anyhow::Result<Schedulers> {
    Ok(InTurn {
        running: vec![
            (
                "scheduler",
                spawn_component("scheduler", port, core, environment)?,
            ),
            (
                "scheduler",
                spawn_component("scheduler", port, core, environment)?,
            ),
        ],
        kills: Vec::new(),
    })
}

/// Reads the victim's open transactions just before each kill, and prints a line per kill with
/// the time since `started`.
pub(super) struct OpenTransactions {
    /// The benchmark database.
    pub(super) pool: PgPool,
    /// When the components started.
    pub(super) started: Instant,
}

impl Witness for OpenTransactions {
    type Kill = Kill;

    async fn before(&self, _: &'static str, replica: usize, pid: Option<u32>) -> Kill {
        let open = match pid {
            Some(pid) => open_transactions(&self.pool, pid)
                .await
                .unwrap_or_else(|error| {
                    tracing::warn!(%error, "could not read the scheduler's transactions");
                    Vec::new()
                }),
            None => Vec::new(),
        };
        Kill { replica, open }
    }

    fn after(&self, kill: &Kill) {
        println!(
            "  {:>5.1} s: scheduler {} killed with SIGKILL and started again; {}",
            self.started.elapsed().as_secs_f64(),
            kill.replica + 1,
            if kill.open.is_empty() {
                "no transaction open".to_owned()
            } else {
                kill.open
                    .iter()
                    .map(|(state, statement)| format!("{state}: {statement}"))
                    .collect::<Vec<_>>()
                    .join("; ")
            }
        );
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
