//! Listens on the runner's unix socket, serves each connection on its own task, exits
//! after an idle period with no connection, and kills every live command on shutdown.
//!
//! Owns the socket file (created atomically, removed on exit); touches nothing else.

use std::{
    fs, io,
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};

use thiserror::Error;
use tokio::net::UnixListener;

use crate::{connection, state::State};

/// Why the server could not start.
#[derive(Debug, Error)]
pub enum ServerError {
    #[error("failed to bind runner socket {path}")]
    Bind { path: PathBuf, source: io::Error },
    #[error("failed to publish runner socket {path}")]
    Publish { path: PathBuf, source: io::Error },
}

/// Counts a connection as active for as long as it lives.
struct ActiveConnection(Arc<State>);

impl ActiveConnection {
    fn new(state: Arc<State>) -> Self {
        state.connection_opened();
        Self(state)
    }
}

impl Drop for ActiveConnection {
    fn drop(&mut self) {
        self.0.connection_closed();
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
                state.browsers.reap_idle();
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
