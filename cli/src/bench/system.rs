//! What a benchmark needs from the machine: components started as their own processes (as in
//! production) and killed in turn with SIGKILL, and the CPU and memory each process used, read
//! from /proc.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use anyhow::Context;
use flow_common::config::CoreConfig;
use flow_common::webhook::vault::{SecretVault, generate_master_key};
use tokio::process::{Child, Command};
use tokio::sync::Mutex;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// The webhook secret vault of a benchmark's components: `WEBHOOK_SECRET_KEY` when set, else a
/// key drawn for this run (its endpoints are thrown away with its database).
pub fn secret_vault() -> SecretVault {
    static KEY: OnceLock<String> = OnceLock::new();
    SecretVault::with_key(KEY.get_or_init(|| {
        std::env::var("WEBHOOK_SECRET_KEY")
            .ok()
            .filter(|key| !key.trim().is_empty())
            .unwrap_or_else(generate_master_key)
    }))
}

/// Starts `flowctl up --only <component>` as a child process against `core`, its API (if any) on
/// `port`, with `extra` environment variables.
pub fn spawn_component(
    component: &str,
    port: u16,
    core: &CoreConfig,
    extra: &[(&str, &str)],
) -> anyhow::Result<Child> {
    let exe = std::env::current_exe().context("locating flowctl")?;
    let mut command = Command::new(exe);
    command
        .args(["up", "--only", component])
        .env("DATABASE_URL", &core.database_url)
        .env("AMQP_URL", &core.amqp_url)
        .env("QUEUE_PREFIX", &core.queue_prefix)
        .env("API_BIND", format!("127.0.0.1:{port}"))
        .env("PUBLIC_BASE_URL", format!("http://127.0.0.1:{port}"))
        .env(
            "WEBHOOK_SECRET_KEY",
            secret_vault().master_key.unwrap_or_default(),
        )
        .env(
            "RUST_LOG",
            std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .kill_on_drop(true);
    for (name, value) in extra {
        command.env(name, value);
    }
    command
        .spawn()
        .with_context(|| format!("starting {component}"))
}

/// Starts each of `components` with [`spawn_component`] and watches it under its name.
pub fn spawn_components(
    components: &[&str],
    port: u16,
    core: &CoreConfig,
    extra: &[(&str, &str)],
    watched: &mut Watched,
) -> anyhow::Result<Vec<Child>> {
    let mut children = Vec::with_capacity(components.len());
    for component in components {
        let child = spawn_component(component, port, core, extra)?;
        if let Some(pid) = child.id() {
            watched.add(component, vec![pid]);
        }
        children.push(child);
    }
    Ok(children)
}

/// Kills the benchmark's child processes and waits for each to end.
pub async fn stop_components(children: impl IntoIterator<Item = Child>) {
    for mut child in children {
        drop(child.start_kill());
        drop(child.wait().await);
    }
}

/// Components started with [`spawn_component`] that [`kill_in_turn`] kills one after another, and
/// what was noted of each kill.
pub(super) struct InTurn<Kill> {
    /// Each component and its running process, in the order they are killed.
    pub(super) running: Vec<(&'static str, Child)>,
    /// What [`Witness::before`] noted of each kill, in order.
    pub(super) kills: Vec<Kill>,
}

impl<Kill> Default for InTurn<Kill> {
    fn default() -> Self {
        Self {
            running: Vec::new(),
            kills: Vec::new(),
        }
    }
}

/// What a benchmark reads of a process just before [`kill_in_turn`] kills it, and the line it
/// prints once the process was started again.
pub(super) trait Witness: Send + Sync + 'static {
    /// What is noted of one kill.
    type Kill: Send + 'static;

    /// Reads what the bench wants of `component`, the `place`th of the running list, whose
    /// process is `pid`, about to be killed.
    fn before(
        &self,
        component: &'static str,
        place: usize,
        pid: Option<u32>,
    ) -> impl Future<Output = Self::Kill> + Send;

    /// Prints the kill's line, once the component runs again.
    fn after(&self, kill: &Self::Kill);
}

/// Starts a task that, every `every`, kills the next process of `processes` with SIGKILL and
/// starts its component again at once with the same settings (`core`, `port`, `environment`),
/// until `stop`; `witness` notes and prints each kill.
pub(super) fn kill_in_turn<W: Witness>(
    processes: Arc<Mutex<InTurn<W::Kill>>>,
    every: Duration,
    core: &CoreConfig,
    port: u16,
    environment: &[(&str, &str)],
    stop: CancellationToken,
    witness: W,
) -> JoinHandle<anyhow::Result<()>> {
    let core = core.clone();
    let environment: Vec<(String, String)> = environment
        .iter()
        .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
        .collect();
    tokio::spawn(async move {
        let environment: Vec<(&str, &str)> = environment
            .iter()
            .map(|(name, value)| (name.as_str(), value.as_str()))
            .collect();
        loop {
            tokio::select! {
                () = stop.cancelled() => return Ok(()),
                () = tokio::time::sleep(every) => {}
            }
            let mut processes = processes.lock().await;
            let place = processes.kills.len() % processes.running.len().max(1);
            let Some((component, child)) = processes.running.get_mut(place) else {
                return Ok(());
            };
            let component = *component;
            let kill = witness.before(component, place, child.id()).await;
            // tokio's kill is SIGKILL: no shutdown path runs.
            child.kill().await?;
            *child = spawn_component(component, port, &core, &environment)?;
            witness.after(&kill);
            processes.kills.push(kill);
        }
    })
}

/// Resident and peak memory of a process, in MiB, from /proc.
pub fn memory_mib(pid: u32) -> Option<(f64, f64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find(|line| line.starts_with(name))
            .and_then(|line| line.split_whitespace().nth(1))
            .and_then(|kb| kb.parse::<f64>().ok())
            .map(|kb| kb / 1024.0)
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

/// CPU time (user + system) a process has used so far, in clock ticks.
fn cpu_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces: fields are counted after its closing parenthesis.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
}

/// Processes whose command name is `name` (e.g. every `postgres` backend).
fn pids_named(name: &str) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|comm| comm.trim() == name)
        })
        .collect()
}

/// Processes listening on one of the TCP `ports` of this machine (a RabbitMQ node is the Erlang VM
/// listening on its AMQP port), found through their sockets' inodes.
fn pids_listening_on(ports: &[u16]) -> Vec<u32> {
    let mut sockets = std::collections::HashSet::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // State 0A is LISTEN; the local address is `hex ip:hex port`.
            let listening_port = fields
                .get(1)
                .and_then(|address| address.rsplit_once(':'))
                .and_then(|(_, port)| u16::from_str_radix(port, 16).ok());
            if fields.get(3) == Some(&"0A")
                && listening_port.is_some_and(|port| ports.contains(&port))
                && let Some(inode) = fields.get(9)
            {
                sockets.insert(format!("socket:[{inode}]"));
            }
        }
    }
    if sockets.is_empty() {
        return Vec::new();
    }
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_dir(format!("/proc/{pid}/fd")).is_ok_and(|fds| {
                fds.filter_map(Result::ok).any(|fd| {
                    std::fs::read_link(fd.path())
                        .is_ok_and(|target| target.to_str().is_some_and(|t| sockets.contains(t)))
                })
            })
        })
        .collect()
}

/// The database a Postgres process works for, from its title (`postgres: [CLUSTER:] USER DB
/// HOST(PORT) ACTIVITY` for a backend, `postgres: [CLUSTER:] autovacuum worker DB`), or `None` for
/// the server's own processes (the postmaster, WAL writer, checkpointer, ...), which work for
/// every database.
fn postgres_database(pid: u32) -> Option<String> {
    let title = std::fs::read_to_string(format!("/proc/{pid}/cmdline")).ok()?;
    let mut words: Vec<&str> = title
        .split(|c: char| c == '\0' || c.is_whitespace())
        .filter(|word| !word.is_empty())
        .collect();
    // Debian names the cluster first (`postgres: 15/main: ...`).
    if words.len() > 1 && words[0] == "postgres:" && words[1].ends_with(':') {
        words.remove(1);
    }
    match words.as_slice() {
        ["postgres:", "autovacuum", "worker", database, ..] => Some((*database).to_owned()),
        ["postgres:", _user, database, client, ..]
            if client.ends_with(')') || *client == "[local]" =>
        {
            Some((*database).to_owned())
        }
        _ => None,
    }
}

/// The parent of a process.
fn parent(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 2..]
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// How a server's processes are found at each sample.
#[derive(Debug, Clone)]
enum ServerProcesses {
    /// Postgres processes working for this database (its backends and autovacuum workers) and the
    /// server's own (WAL writer, checkpointer, ...), not the backends of other databases: other
    /// work on a shared server stays out of the figures (the server's own processes still hold
    /// a share of it).
    Postgres { database: String, port: u16 },
    /// The processes listening on these local ports (the RabbitMQ nodes of `AMQP_URL`).
    Listening(Vec<u16>),
}

impl ServerProcesses {
    fn pids(&self) -> Vec<u32> {
        match self {
            ServerProcesses::Postgres { database, port } => {
                // The server is the postmaster listening on the port, with its children.
                let servers = pids_listening_on(&[*port]);
                pids_named("postgres")
                    .into_iter()
                    .filter(|pid| {
                        servers.contains(pid)
                            || parent(*pid).is_some_and(|parent| servers.contains(&parent))
                    })
                    .filter(|pid| postgres_database(*pid).is_none_or(|theirs| &theirs == database))
                    .collect()
            }
            ServerProcesses::Listening(ports) => pids_listening_on(ports),
        }
    }
}

/// The ports of the nodes of `amqp_url` that run on this machine.
fn local_broker_ports(amqp_url: &str) -> Vec<u16> {
    flow_common::amqp::nodes::parse(amqp_url)
        .unwrap_or_default()
        .iter()
        .filter(|uri| ["localhost", "127.0.0.1", "::1"].contains(&uri.authority.host.as_str()))
        .map(|uri| uri.authority.port)
        .collect()
}

/// Busy and idle ticks of the whole machine.
fn machine_ticks() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().next()?;
    let values: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|value| value.parse().ok())
        .collect();
    let idle = values.get(3)? + values.get(4).copied().unwrap_or(0);
    let total: u64 = values.iter().take(8).sum();
    Some((total - idle, idle))
}

/// The processes a benchmark watches, by label: its own children, this process (the load
/// generator), and the Postgres and RabbitMQ servers (every process of each).
#[derive(Debug, Clone, Default)]
pub struct Watched {
    groups: BTreeMap<String, Vec<u32>>,
    /// Servers, by label: their processes are listed again at every sample (Postgres starts a
    /// backend per connection), and their memory is not shown (their processes share it, so a
    /// sum would overstate it).
    servers: BTreeMap<String, ServerProcesses>,
}

impl Watched {
    /// Watches this process (as `load generator`), Postgres (the processes of `core`'s
    /// database and the server's own) and the RabbitMQ nodes of
    /// `core.amqp_url` that run on this machine (each node's Erlang VM; a cluster's nodes
    /// together, and no other broker of the machine).
    pub fn with_servers(core: &CoreConfig) -> Self {
        let mut watched = Self::default();
        watched.add("load generator (flowctl bench)", vec![std::process::id()]);
        let options: Option<sqlx::postgres::PgConnectOptions> = core.database_url.parse().ok();
        let database = options
            .as_ref()
            .and_then(|options| options.get_database())
            .unwrap_or("postgres")
            .to_owned();
        let port = options.as_ref().map_or(5432, |options| options.get_port());
        watched.servers.insert(
            format!("postgres ({database} and the server's own)"),
            ServerProcesses::Postgres { database, port },
        );
        let ports = local_broker_ports(&core.amqp_url);
        let label = match ports.len() {
            0 => "rabbitmq (not on this machine)".to_owned(),
            1 => "rabbitmq (1 node)".to_owned(),
            nodes => format!("rabbitmq ({nodes} nodes)"),
        };
        watched
            .servers
            .insert(label, ServerProcesses::Listening(ports));
        watched
    }

    /// Watches `pids` under `label`.
    pub fn add(&mut self, label: &str, pids: Vec<u32>) {
        self.groups.insert(label.to_owned(), pids);
    }

    /// A reading of every group's CPU time and of the machine now.
    pub fn sample(&self) -> Sample {
        let servers = self
            .servers
            .iter()
            .map(|(label, processes)| (label.clone(), processes.pids()));
        Sample {
            at: Instant::now(),
            groups: self
                .groups
                .iter()
                .map(|(label, pids)| (label.clone(), pids.clone()))
                .chain(servers)
                .map(|(label, pids)| (label, pids.iter().filter_map(|pid| cpu_ticks(*pid)).sum()))
                .collect(),
            machine: machine_ticks().unwrap_or_default(),
        }
    }

    /// Peak resident memory of each group (MiB), summed over its processes.
    pub fn peak_memory(&self) -> BTreeMap<String, f64> {
        self.groups
            .iter()
            .map(|(label, pids)| {
                (
                    label.clone(),
                    pids.iter()
                        .filter_map(|pid| memory_mib(*pid).map(|(_, peak)| peak))
                        .sum(),
                )
            })
            .collect()
    }
}

/// CPU counters at one moment.
#[derive(Debug, Clone)]
pub struct Sample {
    at: Instant,
    groups: BTreeMap<String, u64>,
    machine: (u64, u64),
}

/// How the CPU was used between two samples.
#[derive(Debug, Clone)]
pub struct Usage {
    /// Cores used by each group on average (1.0 = one core busy).
    pub cores: BTreeMap<String, f64>,
    /// Share of the machine's CPU time that was idle (0..1).
    pub idle: f64,
}

impl Sample {
    /// The usage from `self` to `later`.
    pub fn usage_until(&self, later: &Sample) -> Usage {
        // Linux reports CPU times in clock ticks of 1/100 s on every platform this runs on.
        const TICKS_PER_SECOND: f64 = 100.0;
        let seconds = later.at.duration_since(self.at).as_secs_f64().max(1e-3);
        let cores = later
            .groups
            .iter()
            .map(|(label, ticks)| {
                let before = self.groups.get(label).copied().unwrap_or(0);
                (
                    label.clone(),
                    ticks.saturating_sub(before) as f64 / TICKS_PER_SECOND / seconds,
                )
            })
            .collect();
        let busy = later.machine.0.saturating_sub(self.machine.0) as f64;
        let idle = later.machine.1.saturating_sub(self.machine.1) as f64;
        Usage {
            cores,
            idle: if busy + idle > 0.0 {
                idle / (busy + idle)
            } else {
                0.0
            },
        }
    }
}

impl Sample {
    /// CPU time each group used from `self` to `later` per item of work, in µs, and the machine's
    /// busy time per item (every process, this benchmark's or not).
    pub fn cost_per_item(&self, later: &Sample, items: u64) -> (BTreeMap<String, f64>, f64) {
        // Clock ticks of 1/100 s, as in `usage_until`.
        let micros = |ticks: u64| ticks as f64 * 10_000.0 / items.max(1) as f64;
        let groups = later
            .groups
            .iter()
            .map(|(label, ticks)| {
                let before = self.groups.get(label).copied().unwrap_or(0);
                (label.clone(), micros(ticks.saturating_sub(before)))
            })
            .collect();
        // The machine's counters add up both cores.
        (
            groups,
            micros(later.machine.0.saturating_sub(self.machine.0)),
        )
    }
}

/// Prints CPU per item of work: one line per group, their sum, and, when known, what the whole
/// machine spent (the difference is other work on it).
pub fn print_cost(groups: &BTreeMap<String, f64>, machine: Option<f64>, item: &str) {
    for (label, micros) in groups {
        println!("  {label:<34} {micros:>6.1} µs");
    }
    let machine = machine
        .map(|micros| format!(" (the whole machine: {micros:.1} µs per {item})"))
        .unwrap_or_default();
    println!(
        "  {:<34} {:>6.1} µs{machine}",
        "sum",
        groups.values().sum::<f64>()
    );
}

impl Usage {
    /// Prints one line per group, then the idle share.
    pub fn print(&self, memory: &BTreeMap<String, f64>) {
        for (label, cores) in &self.cores {
            let memory = memory
                .get(label)
                .map(|mib| format!(", peak RSS {mib:.0} MiB"))
                .unwrap_or_default();
            println!("  {label:<34} {:>5.0}% of a core{memory}", cores * 100.0);
        }
        println!(
            "  {:<34} {:>5.0}% of the machine",
            "idle",
            self.idle * 100.0
        );
    }
}

/// Runs `measure` against `core` with a queue prefix of its own, whose queues are deleted
/// afterwards, so nothing left in the configured queues, and nothing this run leaves, mixes with
/// another run.
pub(super) async fn on_own_queues<F, Measured>(core: &CoreConfig, measure: F) -> anyhow::Result<()>
where
    F: FnOnce(CoreConfig) -> Measured,
    Measured: Future<Output = anyhow::Result<()>>,
{
    let mut own = core.clone();
    own.queue_prefix = format!(
        "{}.bench-{}",
        core.queue_prefix,
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );
    let result = measure(own.clone()).await;
    let topology = flow_common::amqp::Topology::new(&own.queue_prefix, own.delivery_limit);
    flow_common::amqp::delete_topology(&own.amqp_url, "flowctl-bench", &topology).await;
    result
}
