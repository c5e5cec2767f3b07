//! A TCP proxy a test can cut, to make a dependency unreachable mid-run (and bring it back).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Mutex;
use tokio::task::JoinSet;

/// Forwards connections to `target` while enabled.
pub struct Proxy {
    /// Where it listens.
    pub address: SocketAddr,
    enabled: Arc<AtomicBool>,
    connections: Arc<Mutex<JoinSet<()>>>,
    acceptor: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// Starts a proxy to `target` on an ephemeral port.
    pub async fn start(target: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let address = listener.local_addr().expect("proxy address");
        let enabled = Arc::new(AtomicBool::new(true));
        let connections = Arc::new(Mutex::new(JoinSet::new()));
        let acceptor = {
            let enabled = enabled.clone();
            let connections = connections.clone();
            tokio::spawn(async move {
                while let Ok((mut inbound, _)) = listener.accept().await {
                    if !enabled.load(Ordering::SeqCst) {
                        drop(inbound);
                        continue;
                    }
                    connections.lock().await.spawn(async move {
                        if let Ok(mut outbound) = TcpStream::connect(target).await {
                            drop(tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await);
                        }
                    });
                }
            })
        };
        Self {
            address,
            enabled,
            connections,
            acceptor,
        }
    }

    /// Cuts every open connection and refuses new ones.
    pub async fn disable(&self) {
        self.enabled.store(false, Ordering::SeqCst);
        self.connections.lock().await.abort_all();
    }

    /// Accepts connections again.
    pub fn enable(&self) {
        self.enabled.store(true, Ordering::SeqCst);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.acceptor.abort();
    }
}
