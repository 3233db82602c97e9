//! A TCP relay on loopback between the agent and one platform server, whose open
//! connections the soak cuts on a timer: every byte is passed through unchanged until
//! [`ChaosProxy::drop_all`] closes both sides of every connection at once, as a network
//! failure or a server restart would (a request in flight loses its answer, a long
//! poll or an IMAP IDLE ends, a socket reconnects). New connections are accepted as
//! soon as the old ones are gone.

use std::{
    net::SocketAddr,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use tokio::{net::TcpListener, task::JoinHandle};

type Connections = Arc<Mutex<Vec<(Instant, JoinHandle<()>)>>>;

pub struct ChaosProxy {
    pub address: SocketAddr,
    connections: Connections,
    accepted: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl ChaosProxy {
    /// Relays 127.0.0.1:<free port> to `upstream`.
    pub async fn start(upstream: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let connections: Connections = Arc::default();
        let accepted = Arc::new(AtomicU64::new(0));
        let task = {
            let connections = connections.clone();
            let accepted = accepted.clone();
            tokio::spawn(async move {
                while let Ok((mut client, _)) = listener.accept().await {
                    accepted.fetch_add(1, Ordering::Relaxed);
                    let _ = client.set_nodelay(true);
                    let relay = tokio::spawn(async move {
                        let Ok(mut server) = tokio::net::TcpStream::connect(upstream).await else {
                            return;
                        };
                        let _ = server.set_nodelay(true);
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    });
                    let mut connections = connections.lock().unwrap();
                    // Finished relays are forgotten here, so the list holds open ones.
                    connections.retain(|(_, relay)| !relay.is_finished());
                    connections.push((Instant::now(), relay));
                }
            })
        };
        Self {
            address,
            connections,
            accepted,
            task,
        }
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.address)
    }

    pub fn port(&self) -> u16 {
        self.address.port()
    }

    /// Closes every open connection (both sides); returns how many there were.
    pub fn drop_all(&self) -> usize {
        let mut connections = self.connections.lock().unwrap();
        connections.retain(|(_, relay)| !relay.is_finished());
        for (_, relay) in connections.iter() {
            relay.abort();
        }
        let open = connections.len();
        connections.clear();
        open
    }

    /// Open connections that have lasted at least `age`.
    pub fn open_for(&self, age: Duration) -> usize {
        self.connections
            .lock()
            .unwrap()
            .iter()
            .filter(|(opened, relay)| !relay.is_finished() && opened.elapsed() >= age)
            .count()
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> u64 {
        self.accepted.load(Ordering::Relaxed)
    }
}

impl Drop for ChaosProxy {
    fn drop(&mut self) {
        self.task.abort();
        for (_, relay) in self.connections.lock().unwrap().drain(..) {
            relay.abort();
        }
    }
}
