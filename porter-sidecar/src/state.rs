//! What every connection shares: the daemon's configuration and its live state (the
//! registry, keys, limits, audit log, injecting proxy and metrics).
//!
//! Data only: the daemon (`server`) builds it, and the proxy and control handlers read
//! it, so neither handler needs the daemon's module.

use std::{net::SocketAddr, path::PathBuf, sync::Arc, time::Duration};

use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::{
    audit::AuditLog,
    capacity::KeyedSlots,
    inject::{InjectConfig, Injector, oauth::AccessTokens},
    keys::KeyStore,
    metrics::Metrics,
    registry_store::RegistryStore,
};

/// Everything the daemon is told at start.
#[derive(Clone, Debug)]
pub struct DaemonConfig {
    /// The proxy socket sandboxes reach through their relay.
    pub proxy_socket: PathBuf,
    /// The control socket for key registration (the agent only).
    pub control_socket: Option<PathBuf>,
    pub registry: PathBuf,
    pub audit_log: PathBuf,
    /// Peer uids allowed on the proxy socket; empty: any (the key still decides).
    pub allowed_uids: Vec<u32>,
    /// Peer uids allowed on the control socket.
    pub control_uids: Vec<u32>,
    /// Proxy connections one uid may hold open at once, with or without a key.
    pub max_connections_per_uid: usize,
    /// Tunnels one command (one key) may hold open at once.
    pub max_tunnels_per_command: usize,
    /// Tunnels open at once over all commands.
    pub max_tunnels: usize,
    pub reload_interval: Duration,
    pub metrics_listen: Option<SocketAddr>,
    /// The injecting proxy's CA and upstream trust.
    pub inject: InjectConfig,
    /// Install the no-spawn seccomp filter once started (`seal`); off only for tests
    /// that run the daemon inside their own process.
    pub seal: bool,
}

/// Shared by every connection.
#[derive(Debug)]
pub struct State {
    pub config: DaemonConfig,
    pub registry: RegistryStore,
    pub keys: KeyStore,
    pub audit: Arc<AuditLog>,
    pub injector: Arc<Injector>,
    /// Real OAuth 2.0 access tokens, by credential.
    pub access_tokens: AccessTokens,
    pub metrics: Metrics,
    /// Open proxy connections per peer uid.
    pub uid_connections: KeyedSlots,
    /// Open tunnels per key.
    pub key_tunnels: KeyedSlots,
    /// Open tunnels over all keys.
    pub tunnels: Arc<Semaphore>,
    /// Cancelled when shutdown starts: tunnels close.
    pub shutdown: CancellationToken,
}
