//! The daemon: binds the call and control sockets, reloads the registry and tokens
//! files when they change, serves metrics, and drains calls on shutdown.
//!
//! Owns the sockets it binds (and removes them on exit); everything else is per call.

use std::{
    future::Future,
    net::SocketAddr,
    os::unix::fs::{FileTypeExt, PermissionsExt},
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};

use saint_config::ErrorChain;
use thiserror::Error;
use tokio::net::UnixListener;
use tokio_util::{sync::CancellationToken, task::TaskTracker};

use crate::{
    audit::{AuditError, AuditLog},
    call,
    capacity::KeyedSlots,
    control,
    home::HomesRoot,
    inject::{self, InjectError, Injector},
    metrics::{Metrics, ReloadLabels},
    registry_store::{LoadError, LoadedRegistry, RateLimits, RegistryStore, read_config_file},
    state::{DaemonConfig, State},
    supervisor::Pool,
    tokens::{TokenError, TokenStore},
};

/// Most call connections served at once (each holds a few file descriptors and, once
/// running, a child process).
pub const MAX_CONNECTIONS: usize = 256;

/// Supervisors kept started ahead of calls (each holds a socket and two pipes).
const SUPERVISORS_READY: usize = 4;

/// Why the daemon could not start or serve.
#[derive(Debug, Error)]
pub enum ServeError {
    #[error("failed to prepare the call homes directory {path}")]
    Homes {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Registry(#[from] LoadError),
    #[error("invalid tokens file {path}")]
    Tokens {
        path: PathBuf,
        #[source]
        source: TokenError,
    },
    #[error(transparent)]
    Audit(#[from] AuditError),
    #[error(transparent)]
    Inject(#[from] InjectError),
    #[error("failed to read tokens file {path}")]
    TokensFile {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to bind {path}")]
    Bind {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to serve metrics on {address}")]
    Metrics {
        address: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

fn environment_lookup(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// Loads the registry and tokens and opens the audit log.
pub fn build_state(config: DaemonConfig) -> Result<Arc<State>, ServeError> {
    let registry = LoadedRegistry::load(&config.registry, &environment_lookup)?;
    registry.warn_unrunnable_binaries();
    let session_calls = KeyedSlots::new(config.max_calls_per_session);
    let handshakes = KeyedSlots::new(config.max_handshakes_per_peer);
    let supervisors = Pool::new(config.supervisor.clone(), SUPERVISORS_READY);
    let homes = HomesRoot::prepare(&config.call_homes).map_err(|source| ServeError::Homes {
        path: config.call_homes.clone(),
        source,
    })?;
    let tokens = TokenStore::default();
    if let Some(path) = &config.tokens_file {
        let text = read_config_file(path).map_err(|source| ServeError::TokensFile {
            path: path.clone(),
            source,
        })?;
        tokens
            .load_local(&text)
            .map_err(|source| ServeError::Tokens {
                path: path.clone(),
                source,
            })?;
    }
    let audit = Arc::new(AuditLog::open(&config.audit_log)?);
    let injector = Arc::new(Injector::new(&config.inject, audit.clone())?);
    Ok(Arc::new(State {
        injector,
        config,
        registry: RegistryStore::new(registry),
        rate_limits: RateLimits::default(),
        session_calls,
        handshakes,
        homes,
        supervisors,
        tokens,
        audit,
        metrics: Metrics::default(),
        shutdown: CancellationToken::new(),
        force: CancellationToken::new(),
    }))
}

/// Binds a unix socket with mode 0660, replacing a stale socket file (never any other
/// kind of file). The socket is bound and listening under a temporary name first and
/// then renamed into place, so a client that waits for the path to appear never finds
/// it before it accepts connections.
fn bind(path: &Path) -> Result<UnixListener, ServeError> {
    let error = |source| ServeError::Bind {
        path: path.to_owned(),
        source,
    };
    if let Ok(metadata) = std::fs::symlink_metadata(path)
        && !metadata.file_type().is_socket()
    {
        return Err(error(std::io::Error::new(
            std::io::ErrorKind::AlreadyExists,
            "exists and is not a socket",
        )));
    }
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(error)?;
    }
    let staging = path.with_file_name(format!(
        ".{}.{}",
        path.file_name()
            .map(|name| name.to_string_lossy())
            .unwrap_or_default(),
        std::process::id()
    ));
    let _ = std::fs::remove_file(&staging);
    let listener = UnixListener::bind(&staging).map_err(error)?;
    std::fs::set_permissions(&staging, std::fs::Permissions::from_mode(0o660)).map_err(error)?;
    std::fs::rename(&staging, path).map_err(error)?;
    Ok(listener)
}

/// Serves until `stop` resolves, then drains: new calls are refused, running calls get
/// `shutdown_deadline` to finish, then their process groups are killed.
pub async fn serve(state: Arc<State>, stop: impl Future<Output = ()>) -> Result<(), ServeError> {
    // Metrics and control first: once the call socket exists, everything is up.
    if let Some(address) = state.config.metrics_listen {
        let listener = tokio::net::TcpListener::bind(address)
            .await
            .map_err(|source| ServeError::Metrics { address, source })?;
        tokio::spawn(serve_metrics(state.clone(), listener));
    }
    let control = state
        .config
        .control_socket
        .as_deref()
        .map(bind)
        .transpose()?;
    // The call socket last: its existence tells callers porter is ready.
    let calls = bind(&state.config.socket)?;
    let reloader = tokio::spawn(reload_loop(state.clone()));
    // Stopped last: calls draining after SIGTERM still reach their hosts.
    let proxy_stop = CancellationToken::new();
    let proxy = tokio::spawn(inject::proxy::serve(
        state.injector.clone(),
        proxy_stop.clone(),
    ));
    tracing::info!(socket = %state.config.socket.display(), "porter listening");

    let tracker = TaskTracker::new();
    let connections = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    tokio::pin!(stop);
    loop {
        tokio::select! {
            accepted = calls.accept() => match accepted {
                Ok((stream, _)) => match connections.clone().try_acquire_owned() {
                    Ok(permit) => {
                        let state = state.clone();
                        tracker.spawn(async move {
                            call::handle(state, stream).await;
                            drop(permit);
                        });
                    }
                    // Over the limit: refuse at once rather than queue unbounded sockets.
                    Err(_) => { tokio::spawn(call::refuse_busy(state.clone(), stream)); }
                },
                Err(error) => accept_failed(&error, "call").await,
            },
            accepted = async { control.as_ref().expect("guarded").accept().await }, if control.is_some() => match accepted {
                Ok((stream, _)) => { tokio::spawn(control::handle(state.clone(), stream)); }
                Err(error) => accept_failed(&error, "control").await,
            },
            () = &mut stop => break,
        }
    }

    tracing::info!(running = tracker.len(), "porter shutting down");
    state.shutdown.cancel();
    drop(calls);
    let _ = std::fs::remove_file(&state.config.socket);
    if let Some(path) = &state.config.control_socket {
        let _ = std::fs::remove_file(path);
    }
    tracker.close();
    if tokio::time::timeout(state.config.shutdown_deadline, tracker.wait())
        .await
        .is_err()
    {
        tracing::warn!(
            running = tracker.len(),
            "shutdown deadline passed, killing running calls"
        );
        state.force.cancel();
        let _ = tokio::time::timeout(
            state.config.kill_grace + Duration::from_secs(3),
            tracker.wait(),
        )
        .await;
    }
    reloader.abort();
    proxy_stop.cancel();
    let _ = proxy.await;
    Ok(())
}

/// Out of file descriptors (or another accept error): back off instead of retrying at
/// once, which would spin a core while the condition lasts.
async fn accept_failed(error: &std::io::Error, socket: &str) {
    tracing::warn!(%error, socket, "failed to accept a connection");
    let out_of_descriptors = matches!(
        error.raw_os_error(),
        Some(code) if code == nix::libc::EMFILE || code == nix::libc::ENFILE
    );
    let pause = if out_of_descriptors { 100 } else { 10 };
    tokio::time::sleep(Duration::from_millis(pause)).await;
}

/// One file the reload loop watches.
struct Watched {
    /// The `file` label of its reload metrics.
    file: &'static str,
    /// The text last seen, applied or refused: the same bytes are not tried twice.
    last: Option<String>,
    /// Whether the last check could not read the file; reported once until it reads
    /// again, not on every tick.
    unreadable: bool,
}

impl Watched {
    fn new(file: &'static str, path: &Path) -> Self {
        Self {
            file,
            last: read_config_file(path).ok(),
            unreadable: false,
        }
    }

    /// The file's text if it changed since the last check. A file that cannot be read
    /// (gone, a device, too large) keeps the last good contents serving.
    fn changed(&mut self, path: &Path, metrics: &Metrics) -> Option<String> {
        match read_config_file(path) {
            Ok(text) => {
                self.unreadable = false;
                if self.last.as_deref() == Some(text.as_str()) {
                    return None;
                }
                self.last = Some(text.clone());
                Some(text)
            }
            Err(error) => {
                if !self.unreadable {
                    self.unreadable = true;
                    tracing::error!(
                        file = self.file,
                        path = %path.display(),
                        %error,
                        "failed to read a watched file; the last good one keeps serving"
                    );
                    count_reload(metrics, self.file, "unreadable");
                }
                None
            }
        }
    }
}

fn count_reload(metrics: &Metrics, file: &str, result: &str) {
    metrics
        .reloads
        .get_or_create(&ReloadLabels {
            file: file.into(),
            result: result.into(),
        })
        .inc();
}

/// Polls the registry and tokens files and reloads them when their bytes change. Polling
/// (not inotify) because a Kubernetes ConfigMap update swaps a symlinked directory,
/// which inotify watches on the file miss.
async fn reload_loop(state: Arc<State>) {
    let mut registry = Watched::new("registry", &state.config.registry);
    let mut tokens = state
        .config
        .tokens_file
        .as_deref()
        .map(|path| (path, Watched::new("tokens", path)));
    let mut interval = tokio::time::interval(state.config.reload_interval);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        interval.tick().await;
        if registry
            .changed(&state.config.registry, &state.metrics)
            .is_some()
        {
            let result = match LoadedRegistry::load(&state.config.registry, &environment_lookup) {
                Ok(loaded) => {
                    tracing::info!(clis = loaded.clis.len(), "registry reloaded");
                    loaded.warn_unrunnable_binaries();
                    state.registry.replace(loaded);
                    "ok"
                }
                Err(error) => {
                    // Keep serving the last good registry.
                    tracing::error!(error = %ErrorChain(&error), "registry reload refused");
                    "error"
                }
            };
            count_reload(&state.metrics, "registry", result);
        }
        if let Some((path, watched)) = &mut tokens
            && let Some(text) = watched.changed(path, &state.metrics)
        {
            let result = match state.tokens.load_local(&text) {
                Ok(count) => {
                    tracing::info!(count, "local tokens reloaded");
                    "ok"
                }
                Err(error) => {
                    tracing::error!(error = %ErrorChain(&error), "tokens reload refused");
                    "error"
                }
            };
            count_reload(&state.metrics, "tokens", result);
        }
    }
}

async fn serve_metrics(state: Arc<State>, listener: tokio::net::TcpListener) {
    use axum::{Router, routing::get};
    let app = Router::new()
        .route(
            "/metrics",
            get(
                |axum::extract::State(state): axum::extract::State<Arc<State>>| async move {
                    state.metrics.render()
                },
            ),
        )
        .route("/healthz", get(|| async { "ok" }))
        .with_state(state);
    if let Err(error) = axum::serve(listener, app).await {
        tracing::error!(%error, "metrics server failed");
    }
}
