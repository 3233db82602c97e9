//! What every connection shares: the daemon's configuration and its live state (the
//! registry, tokens, limits, supervisors, audit log, injecting proxy and metrics).
//!
//! Data only: the daemon (`server`) builds it, and the call and control handlers read it,
//! so neither handler needs the daemon's module.

use std::{net::SocketAddr, path::PathBuf, sync::Arc, time::Duration};

use tokio_util::sync::CancellationToken;

use crate::{
    audit::AuditLog,
    capacity::KeyedSlots,
    home::HomesRoot,
    inject::{InjectConfig, Injector},
    metrics::Metrics,
    registry_store::{RateLimits, RegistryStore},
    supervisor::Pool,
    tokens::TokenStore,
};

/// Everything the daemon is told at start.
#[derive(Clone, Debug)]
pub struct DaemonConfig {
    pub socket: PathBuf,
    pub control_socket: Option<PathBuf>,
    pub registry: PathBuf,
    /// Canonical workspace root (sandbox `/workspace` and `/agent` map here).
    pub workspace_root: PathBuf,
    pub audit_log: PathBuf,
    pub tokens_file: Option<PathBuf>,
    /// Peer uids allowed on the call socket; empty: any (the token still decides).
    pub allowed_uids: Vec<u32>,
    /// Peer uids allowed on the control socket.
    pub control_uids: Vec<u32>,
    /// Where each call's fresh HOME is made (and removed after the call).
    pub call_homes: PathBuf,
    /// The supervisor binary (`porter-supervise`, or `porter` itself).
    pub supervisor: PathBuf,
    /// Calls one session may have running at once.
    pub max_calls_per_session: usize,
    /// Connections one peer process may have waiting for their handshake.
    pub max_handshakes_per_peer: usize,
    /// Between SIGTERM and SIGKILL.
    pub kill_grace: Duration,
    /// How long running calls may finish after SIGTERM to the daemon.
    pub shutdown_deadline: Duration,
    pub reload_interval: Duration,
    pub metrics_listen: Option<SocketAddr>,
    /// The injecting proxy.
    pub inject: InjectConfig,
}

/// Shared by every connection.
#[derive(Debug)]
pub struct State {
    pub config: DaemonConfig,
    pub registry: RegistryStore,
    pub rate_limits: RateLimits,
    /// Running calls per session.
    pub session_calls: KeyedSlots,
    /// Connections per peer process that have not passed their handshake yet.
    pub handshakes: KeyedSlots,
    /// The per-call homes.
    pub homes: HomesRoot,
    /// Supervisors waiting for calls.
    pub supervisors: Pool,
    pub tokens: TokenStore,
    pub audit: Arc<AuditLog>,
    /// The injecting proxy and its live calls.
    pub injector: Arc<Injector>,
    pub metrics: Metrics,
    /// Cancelled when shutdown starts: new calls are refused.
    pub shutdown: CancellationToken,
    /// Cancelled when the shutdown deadline passes: running calls are killed.
    pub force: CancellationToken,
}
