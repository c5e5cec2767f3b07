//! The broker's nodes: `AMQP_URL` is one address or a comma-separated list of the nodes of a
//! RabbitMQ cluster, and [`connect`] is the one way every process opens a connection to them.
//!
//! Each process starts at a random node of the list and, for every later connection, goes on
//! after the node that last worked, so the processes of a deployment spread over the cluster and
//! a process whose node was lost moves on to the next one. A node that failed recently is tried
//! after the others. Connections carry heartbeats (unless the URL sets its own `heartbeat`), so a
//! node that stops answering without closing its sockets is noticed within twice the interval;
//! a node that dies closes them and is noticed at once. lapin's own recovery reconnects to the
//! one URI it was given: our reconnect loops (the publisher's, the consumers') call [`connect`]
//! again instead, and declare what they need on the node they reach.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

use lapin::uri::AMQPUri;
use lapin::{Connection, ConnectionProperties};

/// Longest wait for one node to accept a connection and finish the AMQP handshake.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Heartbeat interval proposed to the broker when the URL names none, in seconds: a silent node
/// is given up after twice this.
pub const HEARTBEAT_SECONDS: u16 = 5;

/// How long a node that refused a connection is tried after the others.
const FAILED_RECENTLY: Duration = Duration::from_secs(30);

/// Most nodes in `AMQP_URL`.
pub const MAX_NODES: usize = 16;

/// Why `AMQP_URL` cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NodeListError {
    /// No address at all.
    #[error(
        "AMQP_URL is empty: give one amqp:// address, or the nodes of a cluster separated by commas"
    )]
    Empty,
    /// More addresses than [`MAX_NODES`].
    #[error("AMQP_URL lists {0} nodes; at most {MAX_NODES} are accepted")]
    TooMany(usize),
    /// One entry of the list is not an AMQP URL (shown without its password).
    #[error("AMQP_URL: node {position} of {count} ({shown}) is not an AMQP URL: {reason}")]
    Invalid {
        /// 1-based position in the list.
        position: usize,
        /// Entries in the list.
        count: usize,
        /// The entry, password hidden.
        shown: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The same node twice.
    #[error("AMQP_URL names node {0} twice")]
    Duplicate(String),
}

/// One node of the list.
#[derive(Debug)]
struct Node {
    uri: AMQPUri,
    /// `host:port`, for logs and metrics (never the credentials).
    label: String,
    failed_at: Mutex<Option<Instant>>,
}

/// The nodes of one `AMQP_URL` and where this process is in them.
#[derive(Debug)]
pub struct Nodes {
    nodes: Vec<Node>,
    /// Index of the node that last took a connection.
    last: AtomicUsize,
}

/// Parses `AMQP_URL` (one address, or addresses separated by commas; blanks around them are
/// ignored) into its nodes, in order.
pub fn parse(list: &str) -> Result<Vec<AMQPUri>, NodeListError> {
    let entries: Vec<&str> = list
        .split(',')
        .map(str::trim)
        .filter(|entry| !entry.is_empty())
        .collect();
    if entries.is_empty() {
        return Err(NodeListError::Empty);
    }
    if entries.len() > MAX_NODES {
        return Err(NodeListError::TooMany(entries.len()));
    }
    let count = entries.len();
    let mut uris: Vec<AMQPUri> = Vec::with_capacity(count);
    for (index, entry) in entries.iter().enumerate() {
        let invalid = |reason: String| NodeListError::Invalid {
            position: index + 1,
            count,
            shown: redact(entry),
            reason,
        };
        if !(entry.starts_with("amqp://") || entry.starts_with("amqps://")) {
            return Err(invalid("it must start with amqp:// or amqps://".into()));
        }
        let url = url::Url::parse(entry).map_err(|error| invalid(error.to_string()))?;
        if url.host().is_none() {
            return Err(invalid("it names no host".into()));
        }
        // The parser's messages may quote the whole address, password included.
        let mut uri: AMQPUri = entry
            .parse()
            .map_err(|reason: String| invalid(reason.replace(entry, &redact(entry))))?;
        // lapin's parser keeps only domain names and reads an IP address as `localhost`.
        match url.host() {
            Some(url::Host::Ipv4(address)) => uri.authority.host = address.to_string(),
            Some(url::Host::Ipv6(address)) => uri.authority.host = address.to_string(),
            _ => {}
        }
        let label = label(&uri);
        if uris.iter().any(|seen| self::label(seen) == label) {
            return Err(NodeListError::Duplicate(label));
        }
        uris.push(uri);
    }
    Ok(uris)
}

/// Checks `AMQP_URL` (a `clap` value parser): the list as given, or what is wrong with it.
pub fn validate(list: &str) -> Result<String, NodeListError> {
    parse(list).map(|_| list.to_owned())
}

/// `host:port` of a node.
fn label(uri: &AMQPUri) -> String {
    format!("{}:{}", uri.authority.host, uri.authority.port)
}

/// `host:port` of every node of `list`, in order (for logs, metrics and tests).
pub fn labels(list: &str) -> Result<Vec<String>, NodeListError> {
    Ok(parse(list)?.iter().map(label).collect())
}

/// An address fit for logs: its credentials hidden (see [`crate::redact::redact_url`]).
pub fn redact(address: &str) -> String {
    crate::redact::redact_url(address)
}

impl Nodes {
    fn new(uris: Vec<AMQPUri>) -> Self {
        let count = uris.len();
        let nodes = uris
            .into_iter()
            .map(|mut uri| {
                if uri.query.heartbeat.is_none() {
                    uri.query.heartbeat = Some(HEARTBEAT_SECONDS);
                }
                Node {
                    label: label(&uri),
                    uri,
                    failed_at: Mutex::new(None),
                }
            })
            .collect();
        // The first connection goes to a random node: the one after `last`.
        let first = rand::random_range(0..count);
        Self {
            nodes,
            last: AtomicUsize::new((first + count - 1) % count),
        }
    }

    /// The nodes of `list`, shared by every connection of this process to that list.
    pub fn of(list: &str) -> Result<Arc<Nodes>, NodeListError> {
        static KNOWN: LazyLock<Mutex<HashMap<String, Arc<Nodes>>>> = LazyLock::new(Mutex::default);
        let mut known = KNOWN
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(nodes) = known.get(list) {
            return Ok(nodes.clone());
        }
        let nodes = Arc::new(Nodes::new(parse(list)?));
        known.insert(list.to_owned(), nodes.clone());
        Ok(nodes)
    }

    /// The order to try the nodes in: from the one after the last that worked, nodes that failed
    /// recently last.
    fn order(&self) -> Vec<usize> {
        let count = self.nodes.len();
        let start = (self.last.load(Ordering::Relaxed) + 1) % count;
        let mut order: Vec<usize> = (0..count).map(|step| (start + step) % count).collect();
        order.sort_by_key(|&index| {
            self.nodes[index]
                .failed_at
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .is_some_and(|at| at.elapsed() < FAILED_RECENTLY)
        });
        order
    }

    /// Connects to the first node that takes the connection (see the module docs); the error of
    /// the last node tried when none does.
    pub async fn connect(&self, role: &str) -> lapin::Result<(Connection, String)> {
        let mut last_error = None;
        for index in self.order() {
            let node = &self.nodes[index];
            let properties = ConnectionProperties::default().with_connection_name(role.into());
            let outcome = tokio::time::timeout(
                CONNECT_TIMEOUT,
                Connection::connect_uri(node.uri.clone(), properties),
            )
            .await
            .unwrap_or_else(|_| {
                Err(lapin::Error::from(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("no connection within {CONNECT_TIMEOUT:?}"),
                )))
            });
            let mut failed_at = node
                .failed_at
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            match outcome {
                Ok(connection) => {
                    *failed_at = None;
                    self.last.store(index, Ordering::Relaxed);
                    metrics::counter!("flow_amqp_connects_total", "role" => role.to_owned(), "node" => node.label.clone(), "outcome" => "ok")
                        .increment(1);
                    tracing::info!(role, node = %node.label, nodes = self.nodes.len(), "connected to RabbitMQ");
                    return Ok((connection, node.label.clone()));
                }
                Err(error) => {
                    *failed_at = Some(Instant::now());
                    metrics::counter!("flow_amqp_connects_total", "role" => role.to_owned(), "node" => node.label.clone(), "outcome" => "error")
                        .increment(1);
                    tracing::warn!(role, node = %node.label, %error, "cannot connect to this RabbitMQ node");
                    last_error = Some(error);
                }
            }
        }
        Err(last_error
            .unwrap_or_else(|| lapin::Error::from(std::io::Error::other("AMQP_URL names no node"))))
    }
}

/// Runs `setup` (declaring, opening channels on a new connection) within [`CONNECT_TIMEOUT`]: a
/// call on a connection whose node dies at that moment can wait for an answer that never comes,
/// and the caller must get on to the next node.
pub async fn bounded<T>(
    setup: impl std::future::Future<Output = lapin::Result<T>>,
) -> lapin::Result<T> {
    tokio::time::timeout(CONNECT_TIMEOUT, setup)
        .await
        .unwrap_or_else(|_| {
            Err(lapin::Error::from(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("the broker did not answer within {CONNECT_TIMEOUT:?}"),
            )))
        })
}

/// Opens a connection named after the process role (visible in the broker's connection list) to
/// one node of `list` (`AMQP_URL`: see the module docs). Every connection of every process is
/// opened here.
pub async fn connect(list: &str, role: &str) -> lapin::Result<Connection> {
    Ok(connect_naming_node(list, role).await?.0)
}

/// [`connect`], also naming the node connected to (`host:port`).
pub async fn connect_naming_node(list: &str, role: &str) -> lapin::Result<(Connection, String)> {
    let nodes = Nodes::of(list).map_err(|error| {
        lapin::Error::from(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            error.to_string(),
        ))
    })?;
    nodes.connect(role).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_address_and_a_list_parse_in_order() {
        let one = parse("amqp://guest:guest@127.0.0.1:5672/%2f").unwrap();
        assert_eq!(one.len(), 1);
        let labels = labels(
            " amqp://u:p@10.0.0.1:5672/%2f, amqp://u:p@10.0.0.2/%2f ,amqps://u:p@rabbit-3:5671/%2f",
        )
        .unwrap();
        assert_eq!(labels, ["10.0.0.1:5672", "10.0.0.2:5672", "rabbit-3:5671"]);
        assert_eq!(parse("amqp://[::1]:5681").unwrap()[0].authority.host, "::1");
    }

    #[test]
    fn a_bad_list_says_which_node_and_hides_the_password() {
        assert_eq!(parse(" , "), Err(NodeListError::Empty));
        let error = parse("amqp://u:secret@a:5672/%2f,http://u:secret@b:5672/").unwrap_err();
        let message = error.to_string();
        assert!(message.contains("node 2 of 2"), "{message}");
        assert!(!message.contains("secret"), "{message}");
        assert!(message.contains("***"), "{message}");
        // A token given as the user name, with no password, is a credential too.
        let error = parse("amqp://a:5672,ftp://TOKEN0123456789@b:5672/").unwrap_err();
        let message = error.to_string();
        assert!(!message.contains("TOKEN0123456789"), "{message}");
        assert!(message.contains("***@b"), "{message}");
        assert_eq!(
            parse("amqp://a:5672,amqp://u:p@a:5672/%2f"),
            Err(NodeListError::Duplicate("a:5672".into()))
        );
        let many = vec!["amqp://h:1"; MAX_NODES + 1]
            .iter()
            .enumerate()
            .map(|(index, _)| format!("amqp://h:{}", index + 1))
            .collect::<Vec<_>>()
            .join(",");
        assert_eq!(parse(&many), Err(NodeListError::TooMany(MAX_NODES + 1)));
        assert!(matches!(
            parse("amqp://h:notaport"),
            Err(NodeListError::Invalid { position: 1, .. })
        ));
    }

    #[test]
    fn nodes_are_tried_from_the_one_after_the_last_that_worked_and_failed_ones_last() {
        let nodes = Nodes::new(parse("amqp://a:1,amqp://b:2,amqp://c:3").unwrap());
        nodes.last.store(0, Ordering::Relaxed);
        assert_eq!(nodes.order(), [1, 2, 0]);
        *nodes.nodes[1].failed_at.lock().unwrap() = Some(Instant::now());
        assert_eq!(nodes.order(), [2, 0, 1]);
        // Every start is possible: the first node is random.
        let firsts: std::collections::HashSet<usize> = (0..200)
            .map(|_| Nodes::new(parse("amqp://a:1,amqp://b:2,amqp://c:3").unwrap()).order()[0])
            .collect();
        assert_eq!(firsts.len(), 3);
    }

    #[test]
    fn a_heartbeat_is_asked_for_unless_the_url_sets_one() {
        let nodes = Nodes::new(parse("amqp://a:1,amqp://b:2/%2f?heartbeat=30").unwrap());
        assert_eq!(nodes.nodes[0].uri.query.heartbeat, Some(HEARTBEAT_SECONDS));
        assert_eq!(nodes.nodes[1].uri.query.heartbeat, Some(30));
    }
}
