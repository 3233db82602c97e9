//! One-machine mode's Porter: chooses Porter's sockets, registry and logs, runs the
//! `porter` binary as a child in its own process group, waits until it listens,
//! restarts it (with backoff) when it dies, and stops it — SIGTERM, a grace period,
//! then SIGKILL — when the agent shuts down.
//!
//! Creates only Porter's socket directory under the workspace, a private control
//! directory and (when none exists) an empty registry under the state directory.
//! Reads the registry only for CLI names; never its credential values.

use std::{
    ffi::OsString,
    fs, io,
    os::unix::{
        ffi::OsStrExt,
        fs::{DirBuilderExt, FileTypeExt, OpenOptionsExt, PermissionsExt},
    },
    path::{Path, PathBuf},
    process::{ExitStatus, Stdio},
    sync::{
        Arc,
        atomic::{AtomicU32, Ordering},
    },
    time::{Duration, Instant},
};

use porter_protocol::registry::Registry;
use rustix::process::{Pid, Signal, kill_process, kill_process_group};
use saint_config::{BotConfig, ErrorChain, SandboxBackend};
use tokio::{process::Child, task::JoinHandle};
use tokio_util::sync::CancellationToken;

use crate::{
    SandboxError,
    backend::{self, ExecBackend, LocalMachine},
};

/// Where Porter's proxy socket lives relative to the workspace (the same place the
/// operator puts it on the bot's volume): the sandbox binds this directory read-only.
pub const SOCKET_SUBDIRECTORY: &str = saint_config::sandbox_contract::PORTER_RUN_SUBPATH;
/// The proxy socket's file name (the sandbox runner's relay connects to exactly this).
pub const SOCKET_NAME: &str = saint_config::sandbox_contract::PORTER_SOCKET_FILE_NAME;
/// Porter's audit log in its private control directory.
pub const AUDIT_LOG: &str = "audit.jsonl";

/// util-linux `setpriv` (essential in Debian) sets Porter's parent-death signal before
/// it execs Porter, so a Porter whose agent was killed (SIGKILL, OOM) is told to stop
/// instead of running on with its credentials. The signal follows the thread that
/// started Porter: the first start runs on the thread that lives as long as the agent.
/// Without `setpriv`, the next agent stops the leftover through the pid file.
const SETPRIV: &str = "/usr/bin/setpriv";
/// Longest path a unix socket address holds (`sun_path` is 108 bytes with the NUL).
const MAX_SOCKET_PATH: usize = 107;
/// First restart delay; doubled after each crash up to [`MAX_RESTART_DELAY`].
const FIRST_RESTART_DELAY: Duration = Duration::from_millis(500);
const MAX_RESTART_DELAY: Duration = Duration::from_secs(30);
/// A Porter that ran this long before dying gets the first delay again.
const HEALTHY_RUN: Duration = Duration::from_secs(60);

/// Why the local Porter could not be set up or started.
#[derive(Debug, thiserror::Error)]
pub enum LocalPorterError {
    #[error(
        "failed to find the porter binary at {0} (build it with `cargo build -p porter`, or set SAINT_PORTER_BIN)"
    )]
    MissingBinary(PathBuf),
    #[error("failed to prepare {path}")]
    Prepare { path: PathBuf, source: io::Error },
    #[error("failed to read porter registry {path}: {detail}")]
    Registry { path: PathBuf, detail: String },
    #[error(
        "failed to use socket path {path}: {length} bytes, a unix socket takes at most {MAX_SOCKET_PATH}; use a shorter workspace or SAINT_SANDBOX_STATE"
    )]
    SocketPathTooLong { path: PathBuf, length: usize },
    #[error("failed to run porter ({binary})")]
    Spawn { binary: PathBuf, source: io::Error },
    #[error(
        "failed to start porter: it exited ({status}) before listening: {last_line} (log: {log})"
    )]
    Exited {
        status: String,
        last_line: String,
        log: PathBuf,
    },
    #[error("failed to start porter: {socket} was not listening after {seconds} s (log: {log})")]
    NotReady {
        socket: PathBuf,
        seconds: u64,
        log: PathBuf,
    },
}

/// Every path the local Porter uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PorterPaths {
    /// The real workspace Porter translates sandbox paths into.
    pub workspace: PathBuf,
    /// `<workspace>/.saint/run/porter`: bound read-only into every sandbox.
    pub socket_directory: PathBuf,
    /// `<socket_directory>/proxy.sock`: Porter's proxy socket.
    pub socket: PathBuf,
    /// `<socket_directory>/ca.pem`: the proxy's CA certificate, for sandboxes.
    pub ca_certificate: PathBuf,
    /// `<state>/porter-control`: private (0700), bound into no sandbox.
    pub control_directory: PathBuf,
    /// `<control_directory>/control.sock`: token registration, for the agent only.
    pub control_socket: PathBuf,
    /// The registry file (it holds credential values: mode 0600, outside the workspace
    /// unless the operator of this machine chose otherwise).
    pub registry: PathBuf,
    /// `<control_directory>/audit.jsonl`: one line per proxy decision, never a
    /// credential; outside the workspace, so no sandbox and no tool can write it.
    pub audit_log: PathBuf,
    /// Porter's own stdout and stderr, appended across restarts.
    pub log: PathBuf,
    /// The running Porter's pid, so a later agent can stop one left behind.
    pub pid_file: PathBuf,
}

impl PorterPaths {
    /// The layout for `workspace` and the machine's `state_directory`; `registry` is
    /// the file given on the command line, else `<state>/porter-registry.json`.
    pub fn new(workspace: &Path, state_directory: &Path, registry: Option<&Path>) -> Self {
        let socket_directory = workspace.join(SOCKET_SUBDIRECTORY);
        let control_directory = state_directory.join("porter-control");
        Self {
            workspace: workspace.to_path_buf(),
            socket: socket_directory.join(SOCKET_NAME),
            ca_certificate: socket_directory
                .join(saint_config::sandbox_contract::PORTER_CA_FILE_NAME),
            socket_directory,
            control_socket: control_directory.join("control.sock"),
            registry: registry.map_or_else(
                || state_directory.join("porter-registry.json"),
                Path::to_path_buf,
            ),
            audit_log: control_directory.join(AUDIT_LOG),
            log: control_directory.join("porter.log"),
            pid_file: control_directory.join("porter.pid"),
            control_directory,
        }
    }

    /// Refuses socket paths the kernel cannot bind.
    pub fn check(&self) -> Result<(), LocalPorterError> {
        for path in [&self.socket, &self.control_socket] {
            let length = path.as_os_str().len();
            if length > MAX_SOCKET_PATH {
                return Err(LocalPorterError::SocketPathTooLong {
                    path: path.clone(),
                    length,
                });
            }
        }
        Ok(())
    }
}

/// Porter's command line for `paths` (pure). Porter drains its running calls for
/// `drain` before killing them, so it is done before the agent's SIGKILL deadline.
pub fn porter_arguments(paths: &PorterPaths) -> Vec<OsString> {
    let mut arguments: Vec<OsString> = Vec::new();
    for (flag, value) in [
        ("--proxy-socket", paths.socket.as_os_str()),
        ("--ca-certificate", paths.ca_certificate.as_os_str()),
        ("--control-socket", paths.control_socket.as_os_str()),
        ("--registry", paths.registry.as_os_str()),
        ("--audit-log", paths.audit_log.as_os_str()),
    ] {
        arguments.push(flag.into());
        arguments.push(value.to_owned());
    }
    arguments
}

/// The `porter` binary: `explicit` (flag or `SAINT_PORTER_BIN`), else `porter` next
/// to this executable.
pub fn locate_binary(explicit: Option<PathBuf>) -> PathBuf {
    explicit.unwrap_or_else(|| {
        std::env::current_exe()
            .ok()
            .and_then(|executable| {
                executable
                    .parent()
                    .map(|directory| directory.join("porter"))
            })
            .unwrap_or_else(|| PathBuf::from("porter"))
    })
}

/// Whether something accepts connections on the unix socket at `path` (a Porter
/// someone else runs). Connecting to a proxy socket costs one refused connection, so
/// callers probe only when deciding whether to start their own.
pub fn is_listening(path: &Path) -> bool {
    std::os::unix::net::UnixStream::connect(path).is_ok()
}

/// Reads the registry's CLI names, creating an empty registry (mode 0600) when the
/// file does not exist. Returns the names and whether the file was created.
pub fn ensure_registry(path: &Path) -> Result<(Vec<String>, bool), LocalPorterError> {
    match fs::read_to_string(path) {
        Ok(text) => {
            let registry =
                Registry::from_json(&text).map_err(|error| LocalPorterError::Registry {
                    path: path.to_path_buf(),
                    detail: ErrorChain(&error).to_string(),
                })?;
            Ok((registry.clis.into_keys().collect(), false))
        }
        Err(error) if error.kind() == io::ErrorKind::NotFound => {
            let prepare = |source| LocalPorterError::Prepare {
                path: path.to_path_buf(),
                source,
            };
            if let Some(parent) = path
                .parent()
                .filter(|parent| !parent.as_os_str().is_empty())
            {
                fs::create_dir_all(parent).map_err(prepare)?;
            }
            // create_new: never clobber a registry that appeared meanwhile.
            let mut file = fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(path)
                .map_err(prepare)?;
            io::Write::write_all(&mut file, Registry::default().to_json().as_bytes())
                .map_err(prepare)?;
            Ok((Vec::new(), true))
        }
        Err(source) => Err(LocalPorterError::Registry {
            path: path.to_path_buf(),
            detail: source.to_string(),
        }),
    }
}

/// How to run the local Porter.
#[derive(Clone, Debug)]
pub struct LocalPorterSettings {
    /// The `porter` binary.
    pub binary: PathBuf,
    pub paths: PorterPaths,
    /// Give up on a first start whose socket is not listening after this long.
    pub start_timeout: Duration,
    /// After SIGTERM, how long Porter may drain before SIGKILL.
    pub stop_grace: Duration,
    /// Variables removed from Porter's environment (the agent's own secrets: Porter
    /// needs none of them, and a registry `envPassthrough` must not reach them).
    pub removed_variables: Vec<OsString>,
}

impl LocalPorterSettings {
    /// Defaults: 10 s to start, 10 s to stop; every `SAINT_*` variable of this process
    /// (model key, channel secrets) removed from Porter's environment.
    pub fn new(binary: PathBuf, paths: PorterPaths) -> Self {
        let removed_variables = std::env::vars_os()
            .map(|(name, _)| name)
            .filter(|name| name.as_bytes().starts_with(b"SAINT_"))
            .collect();
        Self {
            binary,
            paths,
            start_timeout: Duration::from_secs(10),
            stop_grace: Duration::from_secs(10),
            removed_variables,
        }
    }
}

/// Whether `saint-agent run` starts its own Porter.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LocalPorterMode {
    /// When the sandbox backend is local and no Porter listens on the configured socket.
    #[default]
    Auto,
    /// Always (fails the start if Porter cannot be started).
    On,
    /// Never: use the Porter the config or `SAINT_PORTER_SOCKET_DIR` points at, if any.
    Off,
}

/// What `saint-agent run` asks for.
#[derive(Clone, Debug, Default)]
pub struct LocalPorterOptions {
    pub mode: LocalPorterMode,
    /// `--porter-registry`: the registry file (default `<state>/porter-registry.json`).
    pub registry: Option<PathBuf>,
    /// `--porter-bin` / `SAINT_PORTER_BIN`: the porter binary (default beside this one).
    pub binary: Option<PathBuf>,
}

/// Starts this bot's own Porter when `options.mode` calls for it (see
/// [`LocalPorterMode`]); `None` when the bot uses another Porter (or none). A Porter
/// that fails to start is an error when it was asked for (`on`, or a registry given),
/// else a warning. Logs where the registry is and which CLIs the bot file and the
/// registry disagree on.
pub async fn start_for_bot(
    config: &BotConfig,
    workspace: &Path,
    options: LocalPorterOptions,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<LocalPorter>, LocalPorterError> {
    let machine = LocalMachine::from_environment(config, workspace, env);
    let configured_socket = machine.porter_socket_directory.join(SOCKET_NAME);
    let wanted = match options.mode {
        LocalPorterMode::Off => false,
        LocalPorterMode::On => true,
        LocalPorterMode::Auto => {
            config.sandbox.backend == SandboxBackend::Local && !is_listening(&configured_socket)
        }
    };
    if !wanted {
        return Ok(None);
    }
    let required = options.mode == LocalPorterMode::On || options.registry.is_some();
    // Absolute, so logs and the `cliport` hint name the file wherever they are read.
    let registry = options
        .registry
        .map(|path| std::path::absolute(&path).unwrap_or(path));
    let paths = PorterPaths::new(workspace, &machine.state_directory, registry.as_deref());
    paths.check()?;
    let (registered, created) = ensure_registry(&paths.registry)?;
    let registry = paths.registry.display().to_string();
    if created {
        tracing::info!(%registry, "created an empty porter registry");
    }
    tracing::info!(
        %registry,
        clis = ?registered,
        "porter registry; add a CLI with `cliport --registry {registry} install NAME --bin PATH --env KEY=VALUE`"
    );
    for name in config
        .porter
        .clis
        .iter()
        .filter(|name| !registered.contains(name))
    {
        tracing::warn!(
            cli = %name,
            %registry,
            "the bot file lists this CLI but porter's registry has no entry for it: its requests get no credential until it is registered (cliport install)"
        );
    }
    // An MCP server's entry is used by the server, not by a CLI of the sandbox.
    let server_entry = |name: &str| {
        config.mcp.servers.iter().any(|server| {
            server
                .credential
                .as_ref()
                .is_some_and(|credential| credential.porter_entry == name)
        })
    };
    for name in registered
        .iter()
        .filter(|name| !config.porter.clis.contains(name) && !server_entry(name))
    {
        tracing::warn!(
            cli = %name,
            "porter's registry has this CLI but the bot file's porter.clis does not list it: sandboxes get no command for it"
        );
    }
    let binary = locate_binary(options.binary);
    match LocalPorter::start(LocalPorterSettings::new(binary, paths)).await {
        Ok(porter) => Ok(Some(porter)),
        // Asked for explicitly (on, or a registry given): failing is the clear answer.
        Err(error) if required => Err(error),
        Err(error) => {
            tracing::warn!(error = %ErrorChain(&error), "no porter: CLIs through porter are refused; exec still runs in the sandbox");
            Ok(None)
        }
    }
}

/// A supervised Porter child. Call [`LocalPorter::stop`] on shutdown; if it is dropped
/// instead, the runtime's teardown kills the child (`kill_on_drop`).
pub struct LocalPorter {
    paths: PorterPaths,
    pid: Arc<AtomicU32>,
    stop: CancellationToken,
    supervisor: JoinHandle<()>,
}

impl LocalPorter {
    /// Prepares the directories, stops a Porter an earlier agent left behind, starts
    /// Porter and waits until it listens; from then on restarts it when it dies.
    pub async fn start(settings: LocalPorterSettings) -> Result<Self, LocalPorterError> {
        let paths = &settings.paths;
        paths.check()?;
        if !settings.binary.is_file() {
            return Err(LocalPorterError::MissingBinary(settings.binary.clone()));
        }
        prepare_directories(paths)?;
        stop_leftover(paths);
        let child = spawn(&settings)?;
        let pid = Arc::new(AtomicU32::new(child.id().unwrap_or(0)));
        let child = wait_until_listening(&settings, child).await?;
        let stop = CancellationToken::new();
        let supervisor = tokio::spawn(supervise(
            settings.clone(),
            child,
            pid.clone(),
            stop.clone(),
        ));
        Ok(Self {
            paths: settings.paths,
            pid,
            stop,
            supervisor,
        })
    }

    /// The paths Porter was started with.
    pub fn paths(&self) -> &PorterPaths {
        &self.paths
    }

    /// The local sandbox backend wired to this Porter: sandboxes bind its socket
    /// directory read-only, and `exec` registers tokens on its control socket.
    pub fn exec_backend(
        &self,
        config: &BotConfig,
        workspace: PathBuf,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<ExecBackend, SandboxError> {
        let mut machine = LocalMachine::from_environment(config, &workspace, env);
        machine.porter_socket_directory = self.paths.socket_directory.clone();
        let mut config = config.clone();
        config.porter.socket_path = self.paths.socket.display().to_string();
        config.porter.control_socket_path = self.paths.control_socket.display().to_string();
        backend::local(&config, workspace, machine)
    }

    /// The running Porter's pid (0 while it is being restarted).
    pub fn pid(&self) -> u32 {
        self.pid.load(Ordering::SeqCst)
    }

    /// Stops Porter: SIGTERM (it refuses new calls and drains running ones), then
    /// SIGKILL to its process group after the grace period. Returns once it is gone.
    pub async fn stop(self) {
        self.stop.cancel();
        let _ = self.supervisor.await;
    }
}

fn prepare_directories(paths: &PorterPaths) -> Result<(), LocalPorterError> {
    let prepare = |path: &Path| {
        let path = path.to_path_buf();
        move |source| LocalPorterError::Prepare { path, source }
    };
    // Sandboxes reach the proxy socket through this directory (read-only), as the
    // agent's uid mapped into their user namespace.
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o750)
        .create(&paths.socket_directory)
        .map_err(prepare(&paths.socket_directory))?;
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&paths.control_directory)
        .map_err(prepare(&paths.control_directory))?;
    // The control socket registers tokens: nobody but this uid may even look at it.
    fs::set_permissions(&paths.control_directory, fs::Permissions::from_mode(0o700))
        .map_err(prepare(&paths.control_directory))?;
    if let Some(logs) = paths.audit_log.parent() {
        fs::create_dir_all(logs).map_err(prepare(logs))?;
    }
    // A socket file left by an earlier Porter would look ready before ours binds.
    for socket in [&paths.socket, &paths.control_socket] {
        if fs::symlink_metadata(socket).is_ok_and(|metadata| metadata.file_type().is_socket()) {
            fs::remove_file(socket).map_err(prepare(socket))?;
        }
    }
    Ok(())
}

/// Kills a Porter whose pid an earlier agent recorded, if that process is still a
/// Porter serving this control socket (a crashed agent cannot stop its child).
fn stop_leftover(paths: &PorterPaths) {
    let Some(pid) = fs::read_to_string(&paths.pid_file)
        .ok()
        .and_then(|text| text.trim().parse::<i32>().ok())
        .and_then(Pid::from_raw)
    else {
        return;
    };
    let command_line =
        fs::read(format!("/proc/{}/cmdline", pid.as_raw_nonzero())).unwrap_or_default();
    let needle = paths.control_socket.as_os_str().as_bytes();
    if command_line
        .windows(needle.len())
        .any(|window| window == needle)
    {
        tracing::warn!(
            pid = pid.as_raw_nonzero().get(),
            "stopping a porter left behind by an earlier agent"
        );
        let _ = kill_process_group(pid, Signal::KILL);
        let _ = kill_process(pid, Signal::KILL);
    }
    let _ = fs::remove_file(&paths.pid_file);
}

fn spawn(settings: &LocalPorterSettings) -> Result<Child, LocalPorterError> {
    let paths = &settings.paths;
    let open_log = || {
        fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(&paths.log)
            .map_err(|source| LocalPorterError::Prepare {
                path: paths.log.clone(),
                source,
            })
    };
    let mut command = if Path::new(SETPRIV).is_file() {
        let mut command = tokio::process::Command::new(SETPRIV);
        command
            .args(["--pdeathsig", "TERM", "--"])
            .arg(&settings.binary);
        command
    } else {
        tokio::process::Command::new(&settings.binary)
    };
    command
        .args(porter_arguments(paths))
        .stdin(Stdio::null())
        .stdout(open_log()?)
        .stderr(open_log()?)
        // Its own process group: a terminal's Ctrl-C reaches only the agent, which
        // stops Porter after running turns have drained, not in the middle of them.
        .process_group(0)
        .kill_on_drop(true);
    if std::env::var_os("PORTER_LOG").is_none() {
        command.env("PORTER_LOG", "info");
    }
    for name in &settings.removed_variables {
        command.env_remove(name);
    }
    let child = command.spawn().map_err(|source| LocalPorterError::Spawn {
        binary: settings.binary.clone(),
        source,
    })?;
    if let Some(pid) = child.id() {
        let _ = fs::write(&paths.pid_file, format!("{pid}\n"));
    }
    Ok(child)
}

/// Porter binds its control socket first and its proxy socket last, so a fresh call
/// socket file (stale ones were removed) means both are up.
fn is_ready(paths: &PorterPaths) -> bool {
    fs::symlink_metadata(&paths.socket).is_ok_and(|metadata| metadata.file_type().is_socket())
        && is_listening(&paths.control_socket)
}

async fn wait_until_listening(
    settings: &LocalPorterSettings,
    mut child: Child,
) -> Result<Child, LocalPorterError> {
    let paths = &settings.paths;
    let started = Instant::now();
    loop {
        if is_ready(paths) {
            return Ok(child);
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Err(LocalPorterError::Exited {
                status: status.to_string(),
                last_line: last_line(&paths.log),
                log: paths.log.clone(),
            });
        }
        if started.elapsed() >= settings.start_timeout {
            terminate(&mut child, Duration::from_secs(1)).await;
            return Err(LocalPorterError::NotReady {
                socket: paths.socket.clone(),
                seconds: settings.start_timeout.as_secs(),
                log: paths.log.clone(),
            });
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn last_line(log: &Path) -> String {
    fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .rev()
        .find(|line| !line.trim().is_empty())
        .unwrap_or("(no output)")
        .to_string()
}

/// SIGTERM to Porter, then SIGKILL to its process group after `grace`.
async fn terminate(child: &mut Child, grace: Duration) -> Option<ExitStatus> {
    let pid = child
        .id()
        .and_then(|pid| i32::try_from(pid).ok())
        .and_then(Pid::from_raw)?;
    let _ = kill_process(pid, Signal::TERM);
    match tokio::time::timeout(grace, child.wait()).await {
        Ok(status) => status.ok(),
        Err(_) => {
            tracing::warn!(
                grace_seconds = grace.as_secs(),
                "porter did not stop in time; killing it"
            );
            let _ = kill_process_group(pid, Signal::KILL);
            child.wait().await.ok()
        }
    }
}

/// Waits on Porter; restarts it with growing delays when it dies; stops it when told.
async fn supervise(
    settings: LocalPorterSettings,
    child: Child,
    pid: Arc<AtomicU32>,
    stop: CancellationToken,
) {
    let paths = &settings.paths;
    let mut child = Some(child);
    let mut delay = FIRST_RESTART_DELAY;
    let mut running_since = Instant::now();
    loop {
        if let Some(running) = child.as_mut() {
            tokio::select! {
                () = stop.cancelled() => {
                    let status = terminate(running, settings.stop_grace).await;
                    tracing::info!(status = ?status, "porter stopped");
                    pid.store(0, Ordering::SeqCst);
                    let _ = fs::remove_file(&paths.pid_file);
                    return;
                }
                status = running.wait() => {
                    if running_since.elapsed() >= HEALTHY_RUN {
                        delay = FIRST_RESTART_DELAY;
                    }
                    tracing::error!(
                        status = ?status,
                        restart_in_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
                        last_line = %last_line(&paths.log),
                        log = %paths.log.display(),
                        "porter exited unexpectedly; restarting it"
                    );
                }
            }
            child = None;
            pid.store(0, Ordering::SeqCst);
        }
        tokio::select! {
            () = stop.cancelled() => {
                let _ = fs::remove_file(&paths.pid_file);
                return;
            }
            () = tokio::time::sleep(delay) => {}
        }
        delay = (delay * 2).min(MAX_RESTART_DELAY);
        // A restart that is still starting when shutdown comes is dropped, and
        // kill_on_drop ends it.
        let restarted = tokio::select! {
            () = stop.cancelled() => {
                let _ = fs::remove_file(&paths.pid_file);
                return;
            }
            restarted = respawn(&settings) => restarted,
        };
        match restarted {
            Ok(restarted) => {
                pid.store(restarted.id().unwrap_or(0), Ordering::SeqCst);
                child = Some(restarted);
                running_since = Instant::now();
            }
            Err(error) => tracing::error!(
                error = %ErrorChain(&error),
                retry_in_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
                "failed to restart porter"
            ),
        }
    }
}

async fn respawn(settings: &LocalPorterSettings) -> Result<Child, LocalPorterError> {
    prepare_directories(&settings.paths)?;
    let child = spawn(settings)?;
    let child = wait_until_listening(settings, child).await?;
    tracing::info!(socket = %settings.paths.socket.display(), "porter restarted");
    Ok(child)
}

#[cfg(test)]
mod tests {
    use std::ffi::OsStr;

    use super::*;

    #[test]
    fn proxy_socket_lives_in_the_workspace_and_control_and_audit_in_private_state() {
        let paths = PorterPaths::new(
            Path::new("/srv/acme-ws"),
            Path::new("/var/state/acme"),
            None,
        );
        assert_eq!(
            paths.socket,
            PathBuf::from("/srv/acme-ws/.saint/run/porter/proxy.sock")
        );
        assert_eq!(
            paths.control_socket,
            PathBuf::from("/var/state/acme/porter-control/control.sock")
        );
        assert_eq!(
            paths.registry,
            PathBuf::from("/var/state/acme/porter-registry.json")
        );
        assert_eq!(
            paths.audit_log,
            PathBuf::from("/var/state/acme/porter-control/audit.jsonl")
        );
        assert_eq!(
            paths.ca_certificate,
            PathBuf::from("/srv/acme-ws/.saint/run/porter/ca.pem")
        );
        assert!(!paths.control_socket.starts_with(&paths.workspace));
        assert!(!paths.audit_log.starts_with(&paths.workspace));
        let given = PorterPaths::new(
            Path::new("/srv/acme-ws"),
            Path::new("/var/state/acme"),
            Some(Path::new("/home/ana/porter.json")),
        );
        assert_eq!(given.registry, PathBuf::from("/home/ana/porter.json"));
    }

    #[test]
    fn porter_arguments_name_every_path() {
        let paths = PorterPaths::new(Path::new("/w"), Path::new("/s"), None);
        let arguments: Vec<String> = porter_arguments(&paths)
            .into_iter()
            .map(|argument| argument.to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            arguments,
            [
                "--proxy-socket",
                "/w/.saint/run/porter/proxy.sock",
                "--ca-certificate",
                "/w/.saint/run/porter/ca.pem",
                "--control-socket",
                "/s/porter-control/control.sock",
                "--registry",
                "/s/porter-registry.json",
                "--audit-log",
                "/s/porter-control/audit.jsonl",
            ]
        );
    }

    #[test]
    fn overlong_socket_paths_are_refused_with_the_path() {
        let deep = PathBuf::from("/").join("d".repeat(120));
        let error = PorterPaths::new(&deep, Path::new("/s"), None)
            .check()
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("proxy.sock") && error.contains("at most 107"),
            "{error}"
        );
    }

    #[test]
    fn a_missing_registry_is_created_empty_and_private_and_an_invalid_one_is_refused() {
        let directory = tempfile::tempdir().unwrap();
        let path = directory.path().join("state/porter-registry.json");
        let (names, created) = ensure_registry(&path).unwrap();
        assert!(created && names.is_empty());
        let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(
            Registry::from_json(&fs::read_to_string(&path).unwrap()).unwrap(),
            Registry::default()
        );
        let (_, created_again) = ensure_registry(&path).unwrap();
        assert!(!created_again);

        fs::write(
            &path,
            r#"{"clis":{"gh":{"hosts":[],"secret":{"value":"x"}}}}"#,
        )
        .unwrap();
        let error = ensure_registry(&path).unwrap_err().to_string();
        assert!(
            error.contains("porter-registry.json") && error.contains("clis.gh.hosts"),
            "{error}"
        );
    }

    fn bot_config(backend: &str) -> BotConfig {
        serde_json::from_value(serde_json::json!({
            "schemaVersion": saint_config::SCHEMA_VERSION,
            "bot": {"name": "my-bot"},
            "model": {"provider": "anthropic", "name": "m", "baseUrl": "http://127.0.0.1:9"},
            "defaultRole": "external",
            "roles": {"external": {}},
            "sandbox": {"backend": backend},
        }))
        .unwrap()
    }

    #[tokio::test]
    async fn auto_leaves_porter_to_whoever_already_listens_and_to_kubernetes() {
        let directory = tempfile::tempdir().unwrap();
        let workspace = directory.path().join("workspace");
        fs::create_dir_all(&workspace).unwrap();
        let external = directory.path().join("external-porter");
        fs::create_dir_all(&external).unwrap();
        let _listener = std::os::unix::net::UnixListener::bind(external.join(SOCKET_NAME)).unwrap();
        let state = directory.path().join("state");
        let lookup = |name: &str| match name {
            "SAINT_PORTER_SOCKET_DIR" => Some(external.display().to_string()),
            "SAINT_SANDBOX_STATE" => Some(state.display().to_string()),
            _ => None,
        };
        let options = LocalPorterOptions {
            binary: Some(PathBuf::from("/nonexistent/porter")),
            ..LocalPorterOptions::default()
        };
        let started = start_for_bot(&bot_config("local"), &workspace, options.clone(), &lookup)
            .await
            .unwrap();
        assert!(
            started.is_none(),
            "a listening porter is used, not replaced"
        );
        let started = start_for_bot(
            &bot_config("kubernetes"),
            &workspace,
            options.clone(),
            &lookup,
        )
        .await
        .unwrap();
        assert!(started.is_none(), "in Kubernetes porter is a sidecar");
        assert!(
            !state.join("porter-control").exists(),
            "nothing was prepared"
        );

        // Asked for explicitly, a porter that cannot start is an error naming the binary.
        let required = LocalPorterOptions {
            mode: LocalPorterMode::On,
            ..options
        };
        let error = start_for_bot(&bot_config("local"), &workspace, required, &lookup)
            .await
            .err()
            .unwrap()
            .to_string();
        assert!(error.contains("/nonexistent/porter"), "{error}");
    }

    #[test]
    fn the_binary_defaults_to_the_one_beside_this_executable() {
        let located = locate_binary(None);
        assert_eq!(located.file_name(), Some(OsStr::new("porter")));
        assert_eq!(located.parent(), std::env::current_exe().unwrap().parent());
        assert_eq!(
            locate_binary(Some(PathBuf::from("/opt/porter"))),
            PathBuf::from("/opt/porter")
        );
    }
}
