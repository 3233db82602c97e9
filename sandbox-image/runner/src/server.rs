//! Listens on the runner's unix socket, serves each connection on its own task, exits
//! after an idle period with no connection, and kills every live command on shutdown.
//!
//! Owns the socket file (created atomically, removed on exit); touches nothing else.

use std::{
    collections::HashSet,
    fs, io,
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use thiserror::Error;
use tokio::{net::UnixListener, time::Instant};

use crate::{
    connection,
    process_group::{ProcessGroup, kill_group_id},
    working_directory::Roots,
};

/// Why the server could not start.
#[derive(Debug, Error)]
pub enum ServerError {
    #[error("failed to bind runner socket {path}")]
    Bind { path: PathBuf, source: io::Error },
    #[error("failed to publish runner socket {path}")]
    Publish { path: PathBuf, source: io::Error },
}

/// What every connection shares.
#[derive(Debug)]
pub struct State {
    /// Where commands may run.
    pub roots: Roots,
    /// The directory with the Porter shims, first on every command's `PATH`.
    pub shim_directory: PathBuf,
    /// The shell that runs command lines (`/bin/sh`).
    pub shell: PathBuf,
    /// Timeout for requests that name none.
    pub default_timeout_seconds: u64,
    /// The token every request must carry.
    token: String,
    active_connections: AtomicUsize,
    last_activity: Mutex<Instant>,
    live_groups: Mutex<HashSet<i32>>,
}

impl State {
    /// Shared state for a server.
    pub fn new(
        roots: Roots,
        shim_directory: PathBuf,
        shell: PathBuf,
        default_timeout_seconds: u64,
        token: String,
    ) -> Self {
        Self {
            roots,
            shim_directory,
            shell,
            default_timeout_seconds,
            token,
            active_connections: AtomicUsize::new(0),
            last_activity: Mutex::new(Instant::now()),
            live_groups: Mutex::new(HashSet::new()),
        }
    }

    /// Compares in constant time, so response timing does not reveal a token prefix.
    pub fn token_matches(&self, offered: &str) -> bool {
        let (expected, offered) = (self.token.as_bytes(), offered.as_bytes());
        if expected.len() != offered.len() {
            return false;
        }
        expected
            .iter()
            .zip(offered)
            .fold(0_u8, |difference, (a, b)| difference | (a ^ b))
            == 0
    }

    /// Records a live process group until the returned guard drops.
    pub fn register_group<'a>(&'a self, group: &ProcessGroup) -> GroupRegistration<'a> {
        let id = group.id();
        if let Some(id) = id {
            self.live_groups
                .lock()
                .expect("live groups lock")
                .insert(id);
        }
        GroupRegistration { state: self, id }
    }

    fn kill_live_groups(&self) {
        for id in self.live_groups.lock().expect("live groups lock").drain() {
            kill_group_id(id);
        }
    }

    fn touch(&self) {
        *self.last_activity.lock().expect("activity lock") = Instant::now();
    }

    fn idle_for(&self) -> Option<Duration> {
        if self.active_connections.load(Ordering::SeqCst) > 0 {
            return None;
        }
        Some(self.last_activity.lock().expect("activity lock").elapsed())
    }
}

/// Removes a group from the live list when its command ends.
pub struct GroupRegistration<'a> {
    state: &'a State,
    id: Option<i32>,
}

impl Drop for GroupRegistration<'_> {
    fn drop(&mut self) {
        if let Some(id) = self.id {
            self.state
                .live_groups
                .lock()
                .expect("live groups lock")
                .remove(&id);
        }
    }
}

/// Counts a connection as active for as long as it lives.
struct ActiveConnection(Arc<State>);

impl ActiveConnection {
    fn new(state: Arc<State>) -> Self {
        state.active_connections.fetch_add(1, Ordering::SeqCst);
        state.touch();
        Self(state)
    }
}

impl Drop for ActiveConnection {
    fn drop(&mut self) {
        self.0.touch();
        self.0.active_connections.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Binds `path` atomically: the socket is bound under a temporary name and renamed into
/// place, so a client that sees the path can connect (readiness = the path exists).
pub fn bind(path: &Path, mode: u32) -> Result<UnixListener, ServerError> {
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent).map_err(|source| ServerError::Bind {
            path: path.to_path_buf(),
            source,
        })?;
    }
    let temporary = path.with_extension("sock.binding");
    let _ = fs::remove_file(&temporary);
    let listener = UnixListener::bind(&temporary).map_err(|source| ServerError::Bind {
        path: path.to_path_buf(),
        source,
    })?;
    fs::set_permissions(&temporary, fs::Permissions::from_mode(mode)).map_err(|source| {
        ServerError::Publish {
            path: path.to_path_buf(),
            source,
        }
    })?;
    fs::rename(&temporary, path).map_err(|source| ServerError::Publish {
        path: path.to_path_buf(),
        source,
    })?;
    Ok(listener)
}

/// Why the server stopped.
#[derive(Debug, PartialEq, Eq)]
pub enum Stopped {
    /// No connection for the idle timeout.
    Idle,
    /// SIGTERM or SIGINT.
    Signal,
}

/// Serves until idle or until `shutdown` resolves; then kills live commands and removes
/// the socket file.
pub async fn serve(
    listener: UnixListener,
    socket_path: PathBuf,
    state: Arc<State>,
    idle_timeout: Duration,
    shutdown: impl std::future::Future<Output = ()>,
) -> Stopped {
    tokio::pin!(shutdown);
    let check_every = (idle_timeout / 4).clamp(Duration::from_millis(50), Duration::from_secs(5));
    let mut idle_check = tokio::time::interval(check_every);
    let stopped = loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let active = ActiveConnection::new(state.clone());
                    tokio::spawn(async move {
                        let state = active.0.clone();
                        if let Err(error) = connection::serve(stream, state).await {
                            // As an error value the text log prints its causes too.
                            tracing::debug!(
                                error = &error as &dyn std::error::Error,
                                "connection ended early"
                            );
                        }
                        drop(active);
                    });
                }
                Err(error) => tracing::warn!(%error, "failed to accept connection"),
            },
            _ = idle_check.tick() => {
                if state.idle_for().is_some_and(|idle| idle >= idle_timeout) {
                    break Stopped::Idle;
                }
            }
            () = &mut shutdown => break Stopped::Signal,
        }
    };
    state.kill_live_groups();
    let _ = fs::remove_file(&socket_path);
    stopped
}
