//! `porter`: the credential broker daemon.

use std::{net::SocketAddr, path::PathBuf, time::Duration};

use anyhow::{Context, Result};
use clap::Parser;
use porter::{inject::InjectConfig, server, state::DaemonConfig};
use saint_config::ErrorChain;

/// Runs registered CLIs with their credentials for callers in the sandbox and streams
/// the output back. Callers connect on --socket with a token; the agent registers
/// per-command tokens on --control-socket; local mode reads tokens from --tokens-file.
#[derive(Debug, Parser)]
#[command(version)]
struct Arguments {
    /// The call socket (mode 0660).
    #[arg(
        long,
        env = "PORTER_SOCKET",
        default_value = saint_config::sandbox_contract::PORTER_SOCKET_PATH
    )]
    socket: PathBuf,
    /// The control socket for token registration (only the agent container reaches it).
    #[arg(long, env = "PORTER_CONTROL_SOCKET")]
    control_socket: Option<PathBuf>,
    /// The registry file (reloaded when it changes).
    #[arg(
        long,
        env = "PORTER_REGISTRY",
        default_value = "/etc/saint/porter-registry.json"
    )]
    registry: PathBuf,
    /// The real workspace root that sandbox /workspace and /agent map to.
    #[arg(
        long,
        env = "PORTER_WORKSPACE",
        default_value = "/var/lib/saint/workspace"
    )]
    workspace: PathBuf,
    /// The audit log (one JSON line per call).
    #[arg(long, env = "PORTER_AUDIT_LOG")]
    audit_log: Option<PathBuf>,
    /// Local mode: a JSON file of long-lived tokens ({"tokens":[{"token":"...","role":"owner"}]}).
    #[arg(long, env = "PORTER_TOKENS_FILE")]
    tokens_file: Option<PathBuf>,
    /// Peer uid allowed on the call socket (repeatable; default: any uid, token decides).
    /// In the bot pod: the sandbox uid only (`saint_config::uids::SANDBOX_UID`).
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
    /// Directory where each call gets a fresh, empty HOME, removed when the call ends
    /// (default: porter-call-homes-<uid> in the temp directory). Emptied at start.
    #[arg(long, env = "PORTER_CALL_HOMES")]
    call_homes: Option<PathBuf>,
    /// Calls one session (one agent command's token) may have running at once.
    #[arg(long, env = "PORTER_MAX_CALLS_PER_SESSION", default_value_t = 16)]
    max_calls_per_session: usize,
    /// Connections one peer process may have open before their handshake completes.
    #[arg(long, env = "PORTER_MAX_HANDSHAKES_PER_PEER", default_value_t = 32)]
    max_handshakes_per_peer: usize,
    /// Seconds between SIGTERM and SIGKILL.
    #[arg(long, env = "PORTER_KILL_GRACE_SECONDS", default_value_t = 5)]
    kill_grace_seconds: u64,
    /// Seconds running calls may finish after porter is told to stop.
    #[arg(long, env = "PORTER_SHUTDOWN_DEADLINE_SECONDS", default_value_t = 30)]
    shutdown_deadline_seconds: u64,
    /// Milliseconds between checks of the registry and tokens files.
    #[arg(long, env = "PORTER_RELOAD_INTERVAL_MS", default_value_t = 1000)]
    reload_interval_ms: u64,
    /// Address for /metrics and /healthz (off unless set).
    #[arg(long, env = "PORTER_METRICS_LISTEN")]
    metrics_listen: Option<SocketAddr>,
    /// Loopback address of the injecting HTTPS proxy (default: a free port on 127.0.0.1).
    #[arg(long, env = "PORTER_INJECT_LISTEN")]
    inject_listen: Option<SocketAddr>,
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

fn config(arguments: Arguments) -> Result<DaemonConfig> {
    let workspace_root = arguments
        .workspace
        .canonicalize()
        .with_context(|| format!("workspace {} does not exist", arguments.workspace.display()))?;
    let audit_log = arguments
        .audit_log
        .unwrap_or_else(|| workspace_root.join("logs/porter.jsonl"));
    let control_uids = if arguments.control_uids.is_empty() {
        vec![nix::unistd::getuid().as_raw()]
    } else {
        arguments.control_uids
    };
    let uid = nix::unistd::getuid().as_raw();
    let call_homes = arguments
        .call_homes
        .unwrap_or_else(|| std::env::temp_dir().join(format!("porter-call-homes-{uid}")));
    // The small `porter-supervise` next to this binary; this binary itself (which
    // understands `__supervise` too) when it is missing, at some cost per call.
    let own = std::env::current_exe().context("failed to find porter's own binary")?;
    let supervisor = Some(own.with_file_name("porter-supervise"))
        .filter(|path| path.is_file())
        .unwrap_or(own);
    Ok(DaemonConfig {
        socket: arguments.socket,
        control_socket: arguments.control_socket,
        registry: arguments.registry,
        workspace_root,
        audit_log,
        tokens_file: arguments.tokens_file,
        allowed_uids: arguments.allowed_uids,
        control_uids,
        call_homes,
        supervisor,
        max_calls_per_session: arguments.max_calls_per_session,
        max_handshakes_per_peer: arguments.max_handshakes_per_peer,
        kill_grace: Duration::from_secs(arguments.kill_grace_seconds),
        shutdown_deadline: Duration::from_secs(arguments.shutdown_deadline_seconds),
        reload_interval: Duration::from_millis(arguments.reload_interval_ms.max(50)),
        metrics_listen: arguments.metrics_listen,
        inject: InjectConfig {
            listen: arguments.inject_listen,
            upstream_overrides: arguments.upstream_overrides.into_iter().collect(),
            upstream_ca_file: arguments.upstream_ca_file,
        },
    })
}

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
    // Each call's supervisor is this binary again; it needs no runtime.
    if let Some(status) = porter::supervisor::main_if_asked() {
        std::process::exit(status);
    }
    // Porter and its CLIs run as their own uid, the agent as another in the same group:
    // what a CLI creates on the workspace (a clone, a download) must stay writable for
    // the agent, and nothing Porter creates is for other users.
    nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o007));
    // Every connection and call holds descriptors: use all the hard limit allows.
    if let Ok((_, hard)) =
        nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
    {
        let _ =
            nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE, hard, hard);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    runtime.block_on(daemon());
}

async fn daemon() {
    // Not dumpable: a child running as the same uid cannot read this process's memory or
    // environment through /proc or ptrace (where the secrets and the proxy CA key live).
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
    let started = config(Arguments::parse())
        .and_then(|config| server::build_state(config).map_err(Into::into));
    let state = match started {
        Ok(state) => state,
        Err(error) => {
            // `{:#}`: the whole chain on one line, each cause once.
            eprintln!("porter: {error:#}");
            std::process::exit(2);
        }
    };
    if let Err(error) = server::serve(state, stop_signal()).await {
        eprintln!("porter: {}", ErrorChain(&error));
        std::process::exit(1);
    }
}
