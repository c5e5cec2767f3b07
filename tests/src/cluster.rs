//! The real 3-node RabbitMQ cluster the cluster tests run on, started by `.ci/rabbit-cluster`:
//! `TEST_AMQP_CLUSTER_URLS` (what `.ci/run` exports: the nodes in order, comma-separated), or,
//! when it is not set, the cluster the script starts on its default ports (left running for the
//! next run; `.ci/rabbit-cluster stop` stops it). A test that cannot get a cluster fails, saying
//! why: it never passes without one.
//!
//! Killing a node affects every test on the cluster, so the tests that use it take turns:
//! [`cluster`] hands out the cluster with a turn, every node running.

use std::time::Duration;

use tokio::sync::{Mutex, MutexGuard, OnceCell};

/// The nodes of the cluster, node `n` (1-based, `rabbitN@localhost`) at `urls[n - 1]`.
#[derive(Debug, Clone)]
pub struct RabbitCluster {
    /// One AMQP URL per node.
    pub urls: Vec<String>,
}

/// The turn of the test that holds the cluster.
pub type Turn = MutexGuard<'static, ()>;

static CLUSTER: OnceCell<RabbitCluster> = OnceCell::const_new();
static TURN: Mutex<()> = Mutex::const_new(());

/// The cluster, every node running, and this test's turn on it (see the module docs).
pub async fn cluster() -> (RabbitCluster, Turn) {
    let turn = TURN.lock().await;
    let cluster = CLUSTER.get_or_init(find_or_start).await.clone();
    // Idempotent: starts a node an earlier test left killed, and waits for every node.
    run_script(&["start"]).await;
    (cluster, turn)
}

async fn find_or_start() -> RabbitCluster {
    let list = match std::env::var("TEST_AMQP_CLUSTER_URLS") {
        Ok(list) => list,
        Err(_) => {
            eprintln!(
                "TEST_AMQP_CLUSTER_URLS is not set: starting the cluster with .ci/rabbit-cluster \
                 start (stop it with .ci/rabbit-cluster stop)"
            );
            run_script(&["start"]).await;
            run_script(&["urls"]).await.trim().to_owned()
        }
    };
    let urls: Vec<String> = list.split(',').map(|url| url.trim().to_owned()).collect();
    assert_eq!(
        urls.len(),
        3,
        "TEST_AMQP_CLUSTER_URLS must list the 3 nodes of the cluster in order"
    );
    RabbitCluster { urls }
}

/// The `.ci/rabbit-cluster` script of this checkout.
fn script() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../.ci/rabbit-cluster")
}

/// Runs `.ci/rabbit-cluster ARGS` (its settings from the environment, as `.ci/run` exports
/// them); returns its output, or panics with it when it fails.
async fn run_script(args: &[&str]) -> String {
    let output = tokio::time::timeout(
        Duration::from_secs(180),
        tokio::process::Command::new(script()).args(args).output(),
    )
    .await
    .unwrap_or_else(|_| panic!("`.ci/rabbit-cluster {}` took over 180 s", args.join(" ")))
    .unwrap_or_else(|error| panic!("cannot run {}: {error}", script().display()));
    assert!(
        output.status.success(),
        "the cluster tests need a 3-node RabbitMQ cluster, and `.ci/rabbit-cluster {}` failed \
         ({}): {}{}\nStart one with `.ci/rabbit-cluster start` and export what \
         `.ci/rabbit-cluster env` prints, or install rabbitmq-server.",
        args.join(" "),
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// One quorum queue as the cluster reports it.
#[derive(Debug, Clone)]
pub struct QueueMembers {
    /// Queue name.
    pub name: String,
    /// Node number of its leader, if it has one.
    pub leader: Option<usize>,
    /// Node numbers of its members.
    pub members: Vec<usize>,
    /// Node numbers of its members that are online.
    pub online: Vec<usize>,
}

/// `rabbit2@localhost` → 2.
fn node_number(name: &str) -> Option<usize> {
    name.trim()
        .strip_prefix("rabbit")?
        .split('@')
        .next()?
        .parse()
        .ok()
}

/// `[rabbit1@localhost, rabbit2@localhost]` → [1, 2].
fn node_numbers(list: &str) -> Vec<usize> {
    list.trim_matches(|c| c == '[' || c == ']')
        .split(',')
        .filter_map(node_number)
        .collect()
}

impl RabbitCluster {
    /// `AMQP_URL` naming the nodes `order` (1-based) in that order.
    pub fn list(&self, order: &[usize]) -> String {
        order
            .iter()
            .map(|&node| self.urls[node - 1].as_str())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The number of the node at `label` (`host:port`, as publishers and metrics name it).
    pub fn node_at(&self, label: &str) -> usize {
        let labels = flow_common::amqp::nodes::labels(&self.list(&[1, 2, 3])).expect("node list");
        labels
            .iter()
            .position(|known| known == label)
            .unwrap_or_else(|| panic!("{label} is not a node of the cluster ({labels:?})"))
            + 1
    }

    /// `kill -9` of node `node`'s Erlang VM, as a crash would.
    pub async fn kill(&self, node: usize) {
        run_script(&["kill", &node.to_string()]).await;
    }

    /// Starts node `node` again and waits until it runs.
    pub async fn restart(&self, node: usize) {
        run_script(&["restart", &node.to_string()]).await;
    }

    /// Every quorum queue whose name starts with `prefix`.
    pub async fn queues(&self, prefix: &str) -> Vec<QueueMembers> {
        run_script(&["queues", prefix])
            .await
            .lines()
            .filter_map(|line| {
                let mut fields = line.split('\t');
                Some(QueueMembers {
                    name: fields.next()?.to_owned(),
                    leader: node_number(fields.next()?),
                    members: node_numbers(fields.next()?),
                    online: node_numbers(fields.next()?),
                })
            })
            .collect()
    }

    /// The node leading `queue` now.
    pub async fn leader_of(&self, queue: &str) -> Option<usize> {
        self.queues(queue)
            .await
            .into_iter()
            .find(|members| members.name == queue)
            .and_then(|members| members.leader)
    }

    /// Waits (up to `within`) until every queue of `names` has a member on each of the 3 nodes,
    /// all online, and a leader; panics with what the cluster reports otherwise.
    pub async fn wait_for_full_queues(&self, prefix: &str, names: &[String], within: Duration) {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let queues = self.queues(prefix).await;
            let missing: Vec<String> = names
                .iter()
                .filter(|name| {
                    !queues.iter().any(|queue| {
                        &queue.name == *name
                            && sorted(&queue.members) == [1, 2, 3]
                            && sorted(&queue.online) == [1, 2, 3]
                            && queue.leader.is_some()
                    })
                })
                .cloned()
                .collect();
            if missing.is_empty() {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "within {within:?}, these queues did not get 3 online members and a leader: \
                 {missing:?}; the cluster reports {queues:#?}"
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}

fn sorted(nodes: &[usize]) -> Vec<usize> {
    let mut nodes = nodes.to_vec();
    nodes.sort_unstable();
    nodes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_names_read_as_numbers() {
        assert_eq!(node_number("rabbit2@localhost"), Some(2));
        assert_eq!(
            node_numbers("[rabbit1@localhost, rabbit3@localhost]"),
            [1, 3]
        );
        assert_eq!(node_numbers("[]"), Vec::<usize>::new());
    }
}
