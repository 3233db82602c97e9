//! `porter`: the credential sidecar daemon.

use std::{net::SocketAddr, path::PathBuf, time::Duration};

use clap::Parser;
use porter::{inject::InjectConfig, server, state::DaemonConfig};
use saint_config::{ErrorChain, sandbox_contract};

/// Holds the credentials and injects them on the wire. Sandbox commands reach their
/// hosts only through the proxy socket (--proxy-socket) with the key the agent
/// registered for them on --control-socket; the proxy opens only the hosts of a
/// registered credential, checks each request against the caller's role, and swaps the
/// command's placeholder for the secret where the registry says. Porter never starts a
/// program: once listening it refuses exec and fork by seccomp.
#[derive(Debug, Parser)]
#[command(version)]
struct Arguments {
    /// The proxy socket (mode 0660) sandboxes reach through their runner's relay.
    #[arg(
        long,
        env = "PORTER_PROXY_SOCKET",
        default_value = sandbox_contract::PORTER_SOCKET_PATH
    )]
    proxy_socket: PathBuf,
    /// Where the proxy's CA certificate is written for sandboxes to trust (made at
    /// start-up; its key never leaves Porter's memory).
    #[arg(
        long,
        env = "PORTER_CA_CERTIFICATE",
        default_value = sandbox_contract::PORTER_CA_PATH
    )]
    ca_certificate: PathBuf,
    /// The control socket for key registration (only the agent container reaches it).
    #[arg(long, env = "PORTER_CONTROL_SOCKET")]
    control_socket: Option<PathBuf>,
    /// The registry file (reloaded when it changes).
    #[arg(
        long,
        env = "PORTER_REGISTRY",
        default_value = "/etc/saint/porter-registry.json"
    )]
    registry: PathBuf,
    /// The audit log: one JSON line per proxy decision and per key; keep it where no
    /// sandbox and no tool can write.
    #[arg(
        long,
        env = "PORTER_AUDIT_LOG",
        default_value = "/var/lib/saint/workspace/logs/porter.jsonl"
    )]
    audit_log: PathBuf,
    /// Peer uid allowed on the proxy socket (repeatable; default: any uid, the key
    /// decides). In the bot pod: the sandbox uid (`saint_config::uids::SANDBOX_UID`),
    /// and the agent uid too when the bot declares an MCP server over HTTP, which the
    /// agent reaches only through the proxy.
    #[arg(
        long = "allowed-uid",
        env = "PORTER_ALLOWED_UIDS",
        value_delimiter = ','
    )]
    allowed_uids: Vec<u32>,
    /// Peer uid allowed on the control socket (repeatable; default: porter's own uid).
    /// In the bot pod: the agent uid only (`saint_config::uids::AGENT_UID`).
    #[arg(
        long = "control-uid",
        env = "PORTER_CONTROL_UIDS",
        value_delimiter = ','
    )]
    control_uids: Vec<u32>,
    /// Proxy connections one uid may hold at once, keyed or not (a connection without
    /// a live key is closed after 3 s).
    #[arg(long, env = "PORTER_MAX_CONNECTIONS_PER_UID", default_value_t = 256)]
    max_connections_per_uid: usize,
    /// Tunnels one sandbox command may hold open at once.
    #[arg(long, env = "PORTER_MAX_TUNNELS_PER_COMMAND", default_value_t = 32)]
    max_tunnels_per_command: usize,
    /// Tunnels open at once over all commands.
    #[arg(long, env = "PORTER_MAX_TUNNELS", default_value_t = 1024)]
    max_tunnels: usize,
    /// Milliseconds between checks of the registry file.
    #[arg(long, env = "PORTER_RELOAD_INTERVAL_MS", default_value_t = 1000)]
    reload_interval_ms: u64,
    /// Address for /metrics and /healthz (off unless set).
    #[arg(long, env = "PORTER_METRICS_LISTEN")]
    metrics_listen: Option<SocketAddr>,
    /// For tests and air-gapped mirrors only: HOST=ADDRESS makes the proxy connect to
    /// ADDRESS for HOST (TLS is still verified for HOST). Repeatable.
    #[arg(long = "upstream-override", env = "PORTER_UPSTREAM_OVERRIDES", value_delimiter = ',', value_parser = upstream_override)]
    upstream_overrides: Vec<(String, SocketAddr)>,
    /// For tests and air-gapped mirrors only: PEM file of extra CAs trusted upstream.
    #[arg(long, env = "PORTER_UPSTREAM_CA_FILE")]
    upstream_ca_file: Option<PathBuf>,
}

fn upstream_override(text: &str) -> Result<(String, SocketAddr), String> {
    let (host, address) = text
        .split_once('=')
        .ok_or_else(|| format!("{text:?} is not HOST=ADDRESS"))?;
    let address = address
        .parse()
        .map_err(|error| format!("{address:?}: {error}"))?;
    Ok((host.to_ascii_lowercase(), address))
}

fn config(arguments: Arguments) -> DaemonConfig {
    let control_uids = if arguments.control_uids.is_empty() {
        vec![nix::unistd::getuid().as_raw()]
    } else {
        arguments.control_uids
    };
    DaemonConfig {
        proxy_socket: arguments.proxy_socket,
        control_socket: arguments.control_socket,
        registry: arguments.registry,
        audit_log: arguments.audit_log,
        allowed_uids: arguments.allowed_uids,
        control_uids,
        max_connections_per_uid: arguments.max_connections_per_uid,
        max_tunnels_per_command: arguments.max_tunnels_per_command,
        max_tunnels: arguments.max_tunnels,
        reload_interval: Duration::from_millis(arguments.reload_interval_ms.max(50)),
        metrics_listen: arguments.metrics_listen,
        inject: InjectConfig {
            ca_certificate: arguments.ca_certificate,
            upstream_overrides: arguments.upstream_overrides.into_iter().collect(),
            upstream_ca_file: arguments.upstream_ca_file,
        },
        seal: true,
    }
}

/// SIGTERM or SIGINT. Installed before anything else runs, so a stop signal always
/// ends Porter (nothing it waits on can block the runtime: files are opened
/// non-blocking).
async fn stop_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut terminate = signal(SignalKind::terminate()).expect("SIGTERM handler");
    let mut interrupt = signal(SignalKind::interrupt()).expect("SIGINT handler");
    tokio::select! {
        _ = terminate.recv() => {}
        _ = interrupt.recv() => {}
    }
}

fn main() {
    // Hidden: proves the seal (the integration tests run it).
    if std::env::args().nth(1).as_deref() == Some("__check-seal") {
        std::process::exit(porter::seal::check());
    }
    // What Porter creates (its sockets, the CA certificate) is for its group (the agent
    // and sandboxes share it), never for other users.
    nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o007));
    // Every tunnel holds descriptors: use all the hard limit allows.
    if let Ok((_, hard)) =
        nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
    {
        let _ =
            nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE, hard, hard);
    }
    let arguments = Arguments::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    runtime.block_on(daemon(arguments));
}

async fn daemon(arguments: Arguments) {
    // Not dumpable: no process of the same uid can read this process's memory or
    // environment through /proc or ptrace (where the secrets and the CA key live).
    if let Err(error) = nix::sys::prctl::set_dumpable(false) {
        eprintln!("porter: failed to make the process non-dumpable: {error}");
        std::process::exit(2);
    }
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("PORTER_LOG")
                .unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .json()
        .init();
    let stop = stop_signal();
    let state = match server::build_state(config(arguments)) {
        Ok(state) => state,
        Err(error) => {
            eprintln!("porter: {}", ErrorChain(&error));
            std::process::exit(2);
        }
    };
    if let Err(error) = server::serve(state, stop).await {
        eprintln!("porter: {}", ErrorChain(&error));
        std::process::exit(1);
    }
}
