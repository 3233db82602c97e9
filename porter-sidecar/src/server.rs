//! The daemon: binds the proxy and control sockets, reloads the registry when it
//! changes, serves metrics, seals itself against starting programs, and closes every
//! tunnel on shutdown.
//!
//! Owns the sockets it binds (and removes them on exit).

use std::{
    future::Future,
    net::SocketAddr,
    os::unix::fs::{FileTypeExt, PermissionsExt},
    path::{Path, PathBuf},
    sync::Arc,
    time::{Duration, Instant},
};

use saint_config::ErrorChain;
use thiserror::Error;
use tokio::net::UnixListener;

use crate::{
    audit::{AuditError, AuditLog},
    capacity::KeyedSlots,
    control,
    inject::{self, InjectError, Injector, oauth::AccessTokens},
    keys::KeyStore,
    metrics::{Metrics, ReloadLabels},
    registry_store::{LoadError, LoadedRegistry, RegistryStore, read_config_file},
    seal::{self, SealError},
    state::{DaemonConfig, State},
};

/// Why the daemon could not start or serve.
#[derive(Debug, Error)]
pub enum ServeError {
    #[error(transparent)]
    Registry(#[from] LoadError),
    #[error(transparent)]
    Audit(#[from] AuditError),
    #[error(transparent)]
    Inject(#[from] InjectError),
    #[error(transparent)]
    Seal(#[from] SealError),
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

/// Loads the registry (reading every secret), opens the audit log and makes the CA.
pub fn build_state(config: DaemonConfig) -> Result<Arc<State>, ServeError> {
    let registry = LoadedRegistry::load(&config.registry, &environment_lookup)?;
    let audit = Arc::new(AuditLog::open(&config.audit_log)?);
    let injector = Arc::new(Injector::new(&config.inject)?);
    Ok(Arc::new(State {
        registry: RegistryStore::new(registry),
        keys: KeyStore::default(),
        audit,
        injector,
        access_tokens: AccessTokens::default(),
        metrics: Metrics::default(),
        uid_connections: KeyedSlots::new(config.max_connections_per_uid),
        key_tunnels: KeyedSlots::new(config.max_tunnels_per_command),
        tunnels: Arc::new(tokio::sync::Semaphore::new(config.max_tunnels.max(1))),
        shutdown: tokio_util::sync::CancellationToken::new(),
        config,
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

/// Serves until `stop` resolves, then closes every tunnel and removes the sockets.
/// Everything Porter needs is open before it seals itself: from then on it cannot
/// start a program.
pub async fn serve(state: Arc<State>, stop: impl Future<Output = ()>) -> Result<(), ServeError> {
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
    if state.config.seal {
        seal::install()?;
    }
    // The proxy socket last: its existence tells the agent Porter is ready.
    let proxy = bind(&state.config.proxy_socket)?;
    let reloader = tokio::spawn(reload_loop(state.clone()));
    let proxy_stop = tokio_util::sync::CancellationToken::new();
    let proxy_task = tokio::spawn(inject::proxy::serve(
        state.clone(),
        proxy,
        proxy_stop.clone(),
    ));
    tracing::info!(socket = %state.config.proxy_socket.display(), sealed = state.config.seal, "porter listening");

    tokio::pin!(stop);
    loop {
        tokio::select! {
            accepted = async { control.as_ref().expect("guarded").accept().await }, if control.is_some() => match accepted {
                Ok((stream, _)) => { tokio::spawn(control::handle(state.clone(), stream)); }
                Err(error) => accept_failed(&error, "control").await,
            },
            () = &mut stop => break,
        }
    }

    tracing::info!(keys = state.keys.len(), "porter shutting down");
    state.shutdown.cancel();
    proxy_stop.cancel();
    let _ = proxy_task.await;
    state.keys.end_all();
    let _ = std::fs::remove_file(&state.config.proxy_socket);
    if let Some(path) = &state.config.control_socket {
        let _ = std::fs::remove_file(path);
    }
    reloader.abort();
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
    /// (gone, a device, a FIFO, too large) keeps the last good contents serving.
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

/// Polls the registry file and reloads it when its bytes change, and ends expired
/// keys. Polling (not inotify) because a Kubernetes ConfigMap update swaps a symlinked
/// directory, which inotify watches on the file miss.
async fn reload_loop(state: Arc<State>) {
    let mut registry = Watched::new("registry", &state.config.registry);
    let mut interval = tokio::time::interval(state.config.reload_interval);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        interval.tick().await;
        state.keys.sweep(Instant::now());
        state.metrics.live_keys.set(state.keys.len() as i64);
        if registry
            .changed(&state.config.registry, &state.metrics)
            .is_some()
        {
            let result = match LoadedRegistry::load(&state.config.registry, &environment_lookup) {
                Ok(loaded) => {
                    tracing::info!(clis = loaded.entries.len(), "registry reloaded");
                    state.registry.replace(loaded);
                    state.access_tokens.clear().await;
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
