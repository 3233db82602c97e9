//! The runner daemon: parses flags, starts the relay to Porter, serves until idle or
//! SIGTERM.

use std::{path::PathBuf, sync::Arc, time::Duration};

use anyhow::Context;
use clap::Parser;
use saint_config::sandbox_contract::{
    PORTER_RELAY_ADDRESS, PORTER_SOCKET_PATH, RUNNER_TOKEN_ENV, RunnerSettings,
    SANDBOX_SCRATCH_MOUNT_PATH, SANDBOX_VIEW_MOUNT_PATH,
};
use saint_sandbox_runner::{network_cut, seed, server, state::State, working_directory::Roots};

/// Serves exec requests inside a sandbox over a unix socket (frame protocol), and
/// relays a loopback port to Porter's proxy socket: the sandbox's only way out.
///
/// Every command runs as `sh -c <command>` in its own process group, with only PATH,
/// HOME, LANG and the variables the request carries (Porter's proxy URL, placeholders,
/// CA). The runner exits after the idle timeout without a connection, or on SIGTERM.
///
/// What varies per sandbox (socket, token, seed, idle timeout) arrives in the
/// environment the agent fills into the Job (`SAINT_RUNNER_SOCKET`, `SAINT_RUNNER_TOKEN`,
/// `SAINT_SANDBOX_SEED` as a JSON array, `SAINT_RUNNER_IDLE_TIMEOUT_SECONDS`); a flag
/// given here wins over its variable.
#[derive(Debug, Parser)]
#[command(version)]
struct Flags {
    /// Unix socket to listen on (created atomically; its appearance means ready).
    #[arg(long)]
    socket: Option<PathBuf>,
    /// File holding the token (first line); wins over `SAINT_RUNNER_TOKEN`.
    #[arg(long, env = "SAINT_RUNNER_TOKEN_FILE", value_name = "PATH")]
    token_file: Option<PathBuf>,
    /// Seed the scratch copy from the real workspace with this file or directory
    /// (relative; repeatable; only when the copy was never seeded).
    #[arg(long = "seed", value_name = "PATH")]
    seed: Vec<String>,
    /// The writable scratch copy: default working directory and HOME.
    #[arg(long, default_value = SANDBOX_SCRATCH_MOUNT_PATH)]
    workspace: PathBuf,
    /// The read-only real workspace.
    #[arg(long, default_value = SANDBOX_VIEW_MOUNT_PATH)]
    agent: PathBuf,
    /// Porter's proxy socket, where the relay sends every connection.
    #[arg(long, default_value = PORTER_SOCKET_PATH)]
    porter_socket: PathBuf,
    /// The loopback address of the relay (commands' `HTTPS_PROXY` names it).
    #[arg(long, default_value = PORTER_RELAY_ADDRESS)]
    relay_listen: std::net::SocketAddr,
    /// Shell that runs command lines.
    #[arg(long, default_value = "/bin/sh")]
    shell: PathBuf,
    /// Timeout for requests that name none.
    #[arg(long, default_value_t = 120)]
    default_timeout_seconds: u64,
    /// Exit after this long without any connection.
    #[arg(long)]
    idle_timeout_seconds: Option<u64>,
    /// Permission bits of the socket file (octal).
    #[arg(long, default_value = "660", value_parser = parse_octal)]
    socket_mode: u32,
}

fn parse_octal(text: &str) -> Result<u32, String> {
    u32::from_str_radix(text, 8).map_err(|error| format!("not an octal mode: {error}"))
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_target(false)
        .init();
    if let Err(error) = run(Flags::parse()).await {
        eprintln!("saint-sandbox-runner: {error:#}");
        std::process::exit(2);
    }
}

async fn run(flags: Flags) -> anyhow::Result<()> {
    let settings = RunnerSettings::from_env(|name| std::env::var(name).ok())?;
    // In a pod (the kubelet sets KUBERNETES_SERVICE_HOST in every one) the cut is
    // required whatever the settings say: a Job from an older agent or a hand-written
    // template must not run commands unchecked.
    let require_network_cut =
        settings.require_network_cut || std::env::var_os("KUBERNETES_SERVICE_HOST").is_some();
    let token = match &flags.token_file {
        Some(path) => std::fs::read_to_string(path)
            .with_context(|| format!("failed to read token file {}", path.display()))?
            .lines()
            .next()
            .unwrap_or_default()
            .to_string(),
        None => settings.token,
    };
    // A runner without a token would serve anyone who can reach its socket (every
    // sandbox can reach every socket on the shared volume through /agent).
    anyhow::ensure!(
        !token.trim().is_empty(),
        "no runner token: set {RUNNER_TOKEN_ENV} or --token-file"
    );
    let socket = flags
        .socket
        .clone()
        .unwrap_or_else(|| PathBuf::from(&settings.socket));
    let idle_timeout_seconds = flags
        .idle_timeout_seconds
        .unwrap_or(settings.idle_timeout_seconds);
    let mut seeds = settings.seed;
    seeds.extend(flags.seed.iter().cloned());
    let seeded = seed::seed(&flags.agent, &flags.workspace, &seeds)?;
    let roots = Roots::resolve(&flags.workspace, &flags.agent).with_context(|| {
        format!(
            "failed to resolve {} and {}",
            flags.workspace.display(),
            flags.agent.display()
        )
    })?;
    let state = Arc::new(State::new(
        roots,
        flags.shell.clone(),
        flags.default_timeout_seconds,
        token,
    ));
    // The socket appearing is the agent's signal that commands may run: only after the
    // network is proven cut.
    if require_network_cut {
        let target = network_cut::api_server_from_env(|name| std::env::var(name).ok())?;
        let cut = network_cut::await_network_cut(target, network_cut::DEFAULT_DEADLINE).await?;
        tracing::info!(
            %target,
            attempts = cut.attempts,
            waited_ms = cut.waited.as_millis() as u64,
            "network cut: the API server is unreachable"
        );
    }
    let relay_listener = porter_protocol::relay::bind(flags.relay_listen).await?;
    let relay_task = tokio::spawn(porter_protocol::relay::serve(
        relay_listener,
        flags.porter_socket.clone(),
    ));
    let listener = server::bind(&socket, flags.socket_mode)?;
    tracing::info!(socket = %socket.display(), relay = %flags.relay_listen, seeded, "runner ready");
    let stopped = server::serve(
        listener,
        socket,
        state,
        Duration::from_secs(idle_timeout_seconds),
        shutdown_signal(),
    )
    .await;
    relay_task.abort();
    tracing::info!(?stopped, "runner stopped");
    Ok(())
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut terminate), Ok(mut interrupt)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        // Without signal handlers the runner still stops on idle; never stop at once.
        return std::future::pending().await;
    };
    tokio::select! {
        _ = terminate.recv() => {}
        _ = interrupt.recv() => {}
    }
}
