//! The local backend: one `saint-sandbox-runner` per scope under bubblewrap — new
//! user, PID, network (no interfaces), IPC, UTS and cgroup namespaces, no
//! capabilities, a seccomp filter like the container runtime's default, a cleared
//! environment, read-only system directories, the caller's view of the workspace
//! read-only at `/agent` (see [`super::view`]), a per-scope scratch directory at
//! `/workspace`.
//!
//! The view is bound by descriptor: each entry opened beneath the workspace and checked
//! to be the object the walk judged ([`View::open`]), then handed to bubblewrap
//! (`--ro-bind-fd`), which mounts that object and checks the mount is it. A rename in the
//! workspace between the walk and the mount cannot change what `/agent` shows.
//!
//! Creates and deletes only below its state directory, which must lie outside the
//! workspace (else every sandbox could read every other scope's scratch via `/agent`).
//! If bubblewrap is missing or fails, `ensure` returns an error: nothing ever runs
//! outside the sandbox.

use std::{
    ffi::OsString,
    fs, io,
    os::{
        fd::{AsFd, AsRawFd, BorrowedFd},
        unix::fs::PermissionsExt,
    },
    path::{Path, PathBuf},
    process::Stdio,
    sync::Arc,
    time::{Duration, Instant},
};

use futures::future::BoxFuture;
use saint_config::sandbox_contract::{
    RUNNER_SOCKET_FILE_NAME, SANDBOX_BROWSER_MOUNT_PATH, SANDBOX_PORTER_MOUNT_PATH,
    SANDBOX_RUN_MOUNT_PATH, SANDBOX_SCRATCH_MOUNT_PATH, SANDBOX_VIEW_MOUNT_PATH,
};
use tokio::process::{Child, Command};

use super::{
    Activity, Sandbox, SandboxError, SandboxHandle, ScopeKey, Slots, View, random_token, seccomp,
};
use parking_lot::Mutex;

/// Where things appear inside the sandbox.
pub const SANDBOX_RUNNER: &str = "/opt/saint/bin/saint-sandbox-runner";
/// The runner's own directory (socket and token), inside the sandbox.
pub const SANDBOX_RUN_DIRECTORY: &str = SANDBOX_RUN_MOUNT_PATH;
/// Porter's socket directory, inside the sandbox (`porter.sock` in it).
pub const SANDBOX_PORTER_DIRECTORY: &str = SANDBOX_PORTER_MOUNT_PATH;

/// The uid and gid commands run as inside the sandbox (mapped to the agent's own).
const SANDBOX_ID: &str = "1000";

/// `/etc` entries the sandbox sees (read-only): what the dynamic loader, Python and
/// git need. Never the whole `/etc` (shadow, host keys, credentials of host tools).
const ETC_ENTRIES: &[&str] = &[
    "alternatives",
    // fontconfig: the browser tool's Chromium renders text in screenshots with it.
    "fonts",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "nsswitch.conf",
    "python3",
    "python3.11",
    "python3.12",
    "python3.13",
];

/// Settings of the local backend.
#[derive(Clone, Debug)]
pub struct LocalConfig {
    /// The bubblewrap binary (`/usr/bin/bwrap`).
    pub bwrap: PathBuf,
    /// The `saint-sandbox-runner` binary on this machine.
    pub runner: PathBuf,
    /// The real workspace (the caller's view of it read-only at `/agent`).
    pub workspace: PathBuf,
    /// Scratch copies and runner sockets, one directory per scope; outside `workspace`.
    pub state_directory: PathBuf,
    /// Directory holding Porter's socket (read-only at `/run/saint/porter`).
    pub porter_socket_directory: Option<PathBuf>,
    /// Reap a sandbox after this long without a command.
    pub idle_timeout: Duration,
    /// Give up on a sandbox whose runner is not listening after this long.
    pub start_timeout: Duration,
    /// Files and directories copied from the workspace into a new `/workspace`.
    pub seed: Vec<String>,
    /// Where runner sockets go when the state directory is too deep for them
    /// (`<root>/saint-<uid>/<hash of the state directory>/`): `/tmp`.
    pub short_socket_root: PathBuf,
}

impl LocalConfig {
    /// Defaults for a workspace and state directory: `/usr/bin/bwrap`, 30 min idle,
    /// 10 s start timeout, seeded with bootstrap files and skills.
    pub fn new(workspace: PathBuf, state_directory: PathBuf, runner: PathBuf) -> Self {
        Self {
            bwrap: PathBuf::from("/usr/bin/bwrap"),
            runner,
            workspace,
            state_directory,
            porter_socket_directory: None,
            idle_timeout: Duration::from_secs(1800),
            start_timeout: Duration::from_secs(10),
            seed: super::seed_entries(),
            short_socket_root: PathBuf::from("/tmp"),
        }
    }
}

impl LocalConfig {
    /// Settings for the bot in `config`: its idle timeout; the machine paths (binaries,
    /// state, Porter's socket directory) come from the caller.
    pub fn for_bot(
        config: &saint_config::BotConfig,
        workspace: PathBuf,
        state_directory: PathBuf,
        runner: PathBuf,
    ) -> Self {
        Self {
            idle_timeout: Duration::from_secs(config.sandbox.idle_timeout_seconds),
            ..Self::new(workspace, state_directory, runner)
        }
    }
}

/// How this machine lays out its system directories (merged `/usr` or not).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostLayout {
    /// Top-level directories to re-create: (path, symlink target if it is a link).
    pub system_directories: Vec<(String, Option<String>)>,
    /// `/etc` entries that exist here (from [`ETC_ENTRIES`]).
    pub etc_entries: Vec<String>,
}

impl HostLayout {
    /// Probes `/bin`, `/sbin`, `/lib*` and the allowed `/etc` entries.
    pub fn probe() -> Self {
        let mut layout = Self::default();
        for directory in ["/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"] {
            match fs::symlink_metadata(directory) {
                Ok(metadata) if metadata.file_type().is_symlink() => {
                    let target = fs::read_link(directory)
                        .ok()
                        .map(|target| target.display().to_string());
                    layout
                        .system_directories
                        .push((directory.to_string(), target));
                }
                Ok(metadata) if metadata.is_dir() => layout
                    .system_directories
                    .push((directory.to_string(), None)),
                _ => {}
            }
        }
        for entry in ETC_ENTRIES {
            if Path::new("/etc").join(entry).exists() {
                layout.etc_entries.push(entry.to_string());
            }
        }
        layout
    }
}

/// Longest path a unix socket address holds (`sun_path` is 108 bytes with the NUL).
const MAX_SOCKET_PATH: usize = 107;

/// Whether runner sockets under `base` (`<base>/<scope id>/…/runner.sock` at the
/// longest) fit in a socket address.
fn sockets_fit(paths: &ScopePaths) -> bool {
    longest_socket_path(paths) <= MAX_SOCKET_PATH
}

/// The length of the longest socket path of a scope: the runner's, or a browser egress
/// socket's.
fn longest_socket_path(paths: &ScopePaths) -> usize {
    let browser = paths.browsers.as_os_str().len() + 1 + crate::BROWSER_SOCKET_FILE_NAME_LENGTH;
    paths.socket().as_os_str().len().max(browser)
}

/// Where runner directories go: under the state directory when their sockets fit there;
/// else under a short private directory (`<root>/saint-<uid>/<8 hex of the state
/// directory>`), so a deep home directory or a long bot name never leaves `exec`
/// waiting for a socket that cannot be bound. `None`: the state directory.
fn runner_base(state: &Path, root: &Path) -> Result<Option<PathBuf>, SandboxError> {
    let longest = ScopeKey::longest();
    if sockets_fit(&ScopePaths::new(state, &longest)) {
        return Ok(None);
    }
    let private = root.join(format!("saint-{}", rustix::process::getuid().as_raw()));
    let base = private.join(state_hash(state));
    let mut paths = ScopePaths::new(state, &longest);
    paths.move_sockets_to(&base, &longest);
    if !sockets_fit(&paths) {
        return Err(SandboxError::Start(format!(
            "runner sockets fit neither under the sandbox state directory {} nor under {}: \
             a unix socket path holds at most {MAX_SOCKET_PATH} bytes; set \
             SAINT_SANDBOX_STATE to a shorter directory",
            state.display(),
            private.display()
        )));
    }
    create_private_directory(&private)?;
    create_private_directory(&base)?;
    Ok(Some(base))
}

fn state_hash(state: &Path) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(Sha256::digest(state.as_os_str().as_encoded_bytes()))[..8].to_string()
}

/// Creates `path` (mode 0700) or accepts it only when it already is a real directory of
/// this user that no one else may enter: in a shared `/tmp` another user could have
/// made it first, or left a symlink, to receive the runner's token.
fn create_private_directory(path: &Path) -> Result<(), SandboxError> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    match fs::DirBuilder::new().mode(0o700).create(path) {
        Ok(()) => return Ok(()),
        Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {}
        Err(error) => {
            return Err(SandboxError::Start(format!(
                "failed to create {}: {error}",
                path.display()
            )));
        }
    }
    let metadata = fs::symlink_metadata(path).map_err(|error| {
        SandboxError::Start(format!("failed to inspect {}: {error}", path.display()))
    })?;
    let ours = metadata.uid() == rustix::process::getuid().as_raw();
    if !metadata.is_dir() || !ours || metadata.mode() & 0o077 != 0 {
        return Err(SandboxError::Start(format!(
            "{} exists but is not a private directory of this user (a symlink, another \
             user's, or open to others): remove it, or set SAINT_SANDBOX_STATE to a \
             shorter directory",
            path.display()
        )));
    }
    Ok(())
}

/// Host paths of one scope's sandbox.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScopePaths {
    /// Persistent scratch copy (`/workspace`).
    pub scratch: PathBuf,
    /// The runner's directory: socket and token (`/run/saint/sandbox`).
    pub run: PathBuf,
    /// The agent's directory for the browser's egress sockets, bound read-only at
    /// `/run/saint/browser`. Not inside `run`, which the sandbox may write.
    pub browsers: PathBuf,
    /// bubblewrap's and the runner's own output, for start errors.
    pub log: PathBuf,
    /// Synthetic `/etc/passwd` and `/etc/group`.
    pub etc: PathBuf,
}

impl ScopePaths {
    fn new(state_directory: &Path, scope: &ScopeKey) -> Self {
        let base = state_directory.join("scopes").join(scope.id());
        Self {
            scratch: base.join("workspace"),
            run: base.join("run"),
            browsers: base.join("browser"),
            log: base.join("sandbox.log"),
            etc: state_directory.join("etc"),
        }
    }

    /// Puts the socket directories under `base` (a short directory: a unix socket path
    /// holds at most 107 bytes).
    fn move_sockets_to(&mut self, base: &Path, scope: &ScopeKey) {
        self.run = base.join(scope.id());
        self.browsers = base.join(format!("{}.browser", scope.id()));
    }

    /// The runner socket on this machine.
    pub fn socket(&self) -> PathBuf {
        self.run.join(RUNNER_SOCKET_FILE_NAME)
    }
}

fn push(arguments: &mut Vec<OsString>, items: &[&str]) {
    arguments.extend(items.iter().map(OsString::from));
}

fn push_bind(arguments: &mut Vec<OsString>, flag: &str, source: &Path, destination: &str) {
    arguments.push(flag.into());
    arguments.push(source.as_os_str().to_owned());
    arguments.push(destination.into());
}

/// The complete bubblewrap command line for one scope (pure): `view` is what `/agent`
/// shows, each entry's path below it with the descriptor bubblewrap inherits holding the
/// object to bind there (see [`View::open`]); `seccomp_fds` are the descriptors holding
/// the seccomp programs (see [`seccomp::programs`]).
pub fn bwrap_arguments(
    config: &LocalConfig,
    paths: &ScopePaths,
    host: &HostLayout,
    view: &[(&str, i32)],
    seccomp_fds: &[i32],
) -> Vec<OsString> {
    let mut arguments = Vec::new();
    isolate(&mut arguments, seccomp_fds);
    bind_system(&mut arguments, paths, host);
    bind_view(&mut arguments, view);
    bind_sockets_and_scratch(&mut arguments, config, paths);
    start_runner(&mut arguments, config);
    arguments
}

/// Namespaces: all of them (network with only a downed loopback, PID, IPC, UTS,
/// cgroup, user); no nested user namespaces; the sandbox dies with the agent; no
/// capabilities; the seccomp programs.
fn isolate(arguments: &mut Vec<OsString>, seccomp_fds: &[i32]) {
    push(
        arguments,
        &[
            "--unshare-all",
            "--unshare-user",
            "--disable-userns",
            "--uid",
            SANDBOX_ID,
            "--gid",
            SANDBOX_ID,
            "--hostname",
            "sandbox",
            "--die-with-parent",
            "--new-session",
            "--clearenv",
            "--cap-drop",
            "ALL",
        ],
    );
    for fd in seccomp_fds {
        push(arguments, &["--add-seccomp-fd", &fd.to_string()]);
    }
}

/// The host's programs and libraries read-only, the sandbox user's own `passwd` and
/// `group`, and fresh `/proc`, `/dev` and `/tmp`.
fn bind_system(arguments: &mut Vec<OsString>, paths: &ScopePaths, host: &HostLayout) {
    push_bind(arguments, "--ro-bind", Path::new("/usr"), "/usr");
    for (directory, link) in &host.system_directories {
        match link {
            Some(target) => push(arguments, &["--symlink", target, directory]),
            None => push_bind(arguments, "--ro-bind", Path::new(directory), directory),
        }
    }
    for entry in &host.etc_entries {
        let path = format!("/etc/{entry}");
        push_bind(arguments, "--ro-bind", Path::new(&path), &path);
    }
    push_bind(
        arguments,
        "--ro-bind",
        &paths.etc.join("passwd"),
        "/etc/passwd",
    );
    push_bind(
        arguments,
        "--ro-bind",
        &paths.etc.join("group"),
        "/etc/group",
    );
    push(
        arguments,
        &["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"],
    );
}

/// `/agent` is an empty read-only directory with the view's subtrees and files bound
/// into it: nothing else of the workspace exists in the sandbox's mount namespace.
/// Bound by descriptor, never by path: a path is resolved again when bubblewrap mounts
/// it, after whatever renames happened since the view was judged.
fn bind_view(arguments: &mut Vec<OsString>, view: &[(&str, i32)]) {
    push(
        arguments,
        &["--perms", "0555", "--tmpfs", SANDBOX_VIEW_MOUNT_PATH],
    );
    for (path, descriptor) in view {
        push(
            arguments,
            &[
                "--ro-bind-fd",
                &descriptor.to_string(),
                &format!("{SANDBOX_VIEW_MOUNT_PATH}/{path}"),
            ],
        );
    }
    push(arguments, &["--remount-ro", SANDBOX_VIEW_MOUNT_PATH]);
}

/// The scope's scratch `/workspace` and runner directory, writable; Porter's and the
/// browser's socket directories and the runner binary, read-only.
fn bind_sockets_and_scratch(
    arguments: &mut Vec<OsString>,
    config: &LocalConfig,
    paths: &ScopePaths,
) {
    push_bind(
        arguments,
        "--bind",
        &paths.scratch,
        SANDBOX_SCRATCH_MOUNT_PATH,
    );
    // Porter's directory is read-only: a command must not replace Porter's socket
    // with its own listener and collect other sandboxes' calls.
    if let Some(porter) = &config.porter_socket_directory {
        push_bind(arguments, "--ro-bind", porter, SANDBOX_PORTER_DIRECTORY);
    }
    push_bind(arguments, "--bind", &paths.run, SANDBOX_RUN_DIRECTORY);
    push_bind(
        arguments,
        "--ro-bind",
        &paths.browsers,
        SANDBOX_BROWSER_MOUNT_PATH,
    );
    push_bind(arguments, "--ro-bind", &config.runner, SANDBOX_RUNNER);
}

/// The runner's environment and command line, then its seed entries.
fn start_runner(arguments: &mut Vec<OsString>, config: &LocalConfig) {
    push(
        arguments,
        &[
            "--setenv",
            "PATH",
            "/usr/local/bin:/usr/bin:/bin",
            "--setenv",
            "HOME",
            SANDBOX_SCRATCH_MOUNT_PATH,
            "--setenv",
            "LANG",
            "C.UTF-8",
            "--chdir",
            SANDBOX_SCRATCH_MOUNT_PATH,
            "--",
            SANDBOX_RUNNER,
            "--socket",
            &format!("{SANDBOX_RUN_DIRECTORY}/{RUNNER_SOCKET_FILE_NAME}"),
            "--token-file",
            &format!("{SANDBOX_RUN_DIRECTORY}/token"),
            "--workspace",
            SANDBOX_SCRATCH_MOUNT_PATH,
            "--agent",
            SANDBOX_VIEW_MOUNT_PATH,
            "--socket-mode",
            "600",
            "--idle-timeout-seconds",
            // The runner's own idle exit is a backstop; the agent reaps first.
            &(config.idle_timeout.as_secs() * 2).max(60).to_string(),
        ],
    );
    // One flag per entry: a path may contain a comma.
    for entry in &config.seed {
        push(arguments, &["--seed", entry]);
    }
}

/// A running sandbox.
struct Running {
    child: Child,
    socket: PathBuf,
    token: String,
    activity: Arc<Activity>,
    /// What its `/agent` shows.
    view: View,
}

impl Running {
    fn is_alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    async fn stop(mut self) {
        // Killing the outer bwrap kills the namespace's init (--die-with-parent), and
        // with it every process in the sandbox's PID namespace.
        let _ = self.child.kill().await;
        let _ = fs::remove_file(&self.socket);
    }
}

/// Sandboxes under bubblewrap on this machine.
pub struct LocalSandbox {
    config: LocalConfig,
    host: HostLayout,
    slots: Slots<Running>,
    /// Files holding the seccomp programs, opened afresh for each bubblewrap.
    seccomp_programs: Vec<PathBuf>,
    /// Where runner directories go when not under the state directory.
    runner_base: Option<PathBuf>,
}

impl LocalSandbox {
    /// Checks the configuration. The state directory must not be inside the workspace.
    pub fn new(config: LocalConfig) -> Result<Self, SandboxError> {
        fs::create_dir_all(&config.state_directory).map_err(|error| {
            SandboxError::Start(format!(
                "failed to create sandbox state directory {}: {error}",
                config.state_directory.display()
            ))
        })?;
        let state = config.state_directory.canonicalize().map_err(|error| {
            SandboxError::Start(format!(
                "failed to resolve {}: {error}",
                config.state_directory.display()
            ))
        })?;
        let workspace = config.workspace.canonicalize().map_err(|error| {
            SandboxError::Start(format!(
                "failed to resolve workspace {}: {error}",
                config.workspace.display()
            ))
        })?;
        if state.starts_with(&workspace) {
            return Err(SandboxError::Start(format!(
                "sandbox state directory {} is inside the workspace; every sandbox could read \
                 every other scope's scratch through /agent",
                state.display()
            )));
        }
        let runner_base = runner_base(&state, &config.short_socket_root)?;
        let seccomp_programs = write_seccomp_programs(&state)?;
        let config = LocalConfig {
            state_directory: state,
            workspace,
            ..config
        };
        Ok(Self {
            config,
            host: HostLayout::probe(),
            slots: Slots::default(),
            seccomp_programs,
            runner_base,
        })
    }

    /// The host paths of a scope (for tests and operators inspecting a sandbox).
    pub fn paths(&self, scope: &ScopeKey) -> ScopePaths {
        let mut paths = ScopePaths::new(&self.config.state_directory, scope);
        if let Some(base) = &self.runner_base {
            paths.move_sockets_to(base, scope);
        }
        paths
    }

    fn prepare(&self, paths: &ScopePaths, token: &str) -> io::Result<()> {
        fs::create_dir_all(&paths.scratch)?;
        fs::create_dir_all(&paths.etc)?;
        fs::write(
            paths.etc.join("passwd"),
            format!("sandbox:x:{SANDBOX_ID}:{SANDBOX_ID}:sandbox:/workspace:/bin/sh\n"),
        )?;
        fs::write(
            paths.etc.join("group"),
            format!("sandbox:x:{SANDBOX_ID}:\n"),
        )?;
        // A fresh runner directory per start: no stale socket can look ready.
        if paths.run.exists() {
            fs::remove_dir_all(&paths.run)?;
        }
        fs::create_dir_all(&paths.run)?;
        fs::set_permissions(&paths.run, fs::Permissions::from_mode(0o700))?;
        // The browser's egress sockets: the agent's directory, read-only inside and not
        // in the writable runner directory, so a command can neither replace a socket
        // with its own listener nor rename the directory to collect the browser's key.
        if paths.browsers.exists() {
            fs::remove_dir_all(&paths.browsers)?;
        }
        fs::create_dir_all(&paths.browsers)?;
        fs::set_permissions(&paths.browsers, fs::Permissions::from_mode(0o750))?;
        let token_path = paths.run.join("token");
        fs::write(&token_path, token)?;
        fs::set_permissions(&token_path, fs::Permissions::from_mode(0o600))
    }

    async fn start(&self, scope: &ScopeKey, view: &View) -> Result<Running, SandboxError> {
        let paths = self.paths(scope);
        let token = random_token()?;
        self.prepare(&paths, &token).map_err(|error| {
            SandboxError::Start(format!(
                "failed to prepare sandbox directories for {}: {error}",
                scope.id()
            ))
        })?;
        let log = fs::File::create(&paths.log).map_err(|error| {
            SandboxError::Start(format!("failed to create {}: {error}", paths.log.display()))
        })?;
        let log_for_stderr = log
            .try_clone()
            .map_err(|error| SandboxError::Start(format!("failed to open sandbox log: {error}")))?;
        // The view by descriptor, each entry checked to be what the walk judged: a
        // workspace changed since (an entry renamed to a symlink into memory/private, a
        // hard link planted in a folder shown whole) refuses the command rather than
        // start a sandbox with a view nobody judged.
        // Blocking (it lists every folder mounted whole), so off the async workers.
        let (judged, workspace) = (view.clone(), self.config.workspace.clone());
        let opened = tokio::task::spawn_blocking(move || judged.open(&workspace))
            .await
            .map_err(|error| SandboxError::Start(format!("failed to open the view: {error}")))?
            .map_err(|error| {
                SandboxError::Start(format!(
                    "{error}; exec is refused until the view is computed again"
                ))
            })?;
        // bubblewrap reads each seccomp program from a descriptor it inherits.
        let seccomp_files = self
            .seccomp_programs
            .iter()
            .map(|path| {
                fs::File::open(path).map_err(|error| {
                    SandboxError::Start(format!("failed to open {}: {error}", path.display()))
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let seccomp_fds: Vec<i32> = seccomp_files.iter().map(AsRawFd::as_raw_fd).collect();
        let view_fds: Vec<(&str, i32)> = opened
            .mounts()
            .map(|(path, descriptor)| (path, descriptor.as_raw_fd()))
            .collect();
        let mut command = Command::new(&self.config.bwrap);
        command
            .args(bwrap_arguments(
                &self.config,
                &paths,
                &self.host,
                &view_fds,
                &seccomp_fds,
            ))
            // bubblewrap gets nothing from the agent's environment either.
            .env_clear()
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_for_stderr)
            // Its own process group: a terminal's Ctrl-C reaches only the agent, which
            // stops sandboxes after running turns have drained.
            .process_group(0)
            .kill_on_drop(true);
        let spawned = {
            // The descriptors are inheritable only while this lock is held, and closed
            // before it is released: a bubblewrap for another scope started at the same
            // moment would inherit them too and pass them on into its sandbox, where a
            // descriptor of a folder this view shows opens whatever lies below it.
            let _spawning = SPAWNING.lock();
            let descriptors = seccomp_files
                .iter()
                .map(AsFd::as_fd)
                .chain(opened.mounts().map(|(_, descriptor)| descriptor));
            let spawned = inherit(descriptors).and_then(|()| {
                command.spawn().map_err(|error| {
                    SandboxError::Start(format!(
                        "failed to run bubblewrap ({}): {error}; exec is disabled rather than \
                         run unsandboxed",
                        self.config.bwrap.display()
                    ))
                })
            });
            drop(seccomp_files);
            drop(opened);
            spawned
        };
        let running = Running {
            child: spawned?,
            socket: paths.socket(),
            token,
            activity: Activity::new(),
            view: view.clone(),
        };
        self.wait_for_runner(running, &paths).await
    }

    /// Waits until the runner answers on its socket; a bubblewrap that exited, or a
    /// runner that never listened within the start timeout, is an error naming its log.
    async fn wait_for_runner(
        &self,
        mut running: Running,
        paths: &ScopePaths,
    ) -> Result<Running, SandboxError> {
        let started = Instant::now();
        loop {
            if running.socket.exists()
                && tokio::net::UnixStream::connect(&running.socket)
                    .await
                    .is_ok()
            {
                return Ok(running);
            }
            if let Ok(Some(status)) = running.child.try_wait() {
                let output = fs::read_to_string(&paths.log).unwrap_or_default();
                return Err(SandboxError::Start(format!(
                    "bubblewrap exited ({status}) before the runner was ready: {}; exec is disabled \
                     rather than run unsandboxed",
                    output.trim()
                )));
            }
            if started.elapsed() >= self.config.start_timeout {
                running.stop().await;
                let output = fs::read_to_string(&paths.log).unwrap_or_default();
                return Err(SandboxError::NotReady {
                    seconds: self.config.start_timeout.as_secs(),
                    detail: format!("runner socket never appeared; log: {}", output.trim()),
                });
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
}

/// Writes the seccomp programs below the state directory (rewritten at every start, so
/// an upgraded agent never loads an old filter).
fn write_seccomp_programs(state: &Path) -> Result<Vec<PathBuf>, SandboxError> {
    let programs = seccomp::programs().map_err(|error| SandboxError::Start(error.to_string()))?;
    let directory = state.join("seccomp");
    let write = || -> io::Result<Vec<PathBuf>> {
        fs::create_dir_all(&directory)?;
        let mut paths = Vec::new();
        for (index, program) in programs.iter().enumerate() {
            let path = directory.join(format!("filter-{index}.bpf"));
            fs::write(&path, program)?;
            paths.push(path);
        }
        Ok(paths)
    };
    write().map_err(|error| {
        SandboxError::Start(format!(
            "failed to write seccomp filters to {}: {error}",
            directory.display()
        ))
    })
}

/// Held from making descriptors inheritable for one bubblewrap until they are closed
/// again (see [`LocalSandbox::start`]). Other children this process spawns meanwhile
/// (Porter, say) run unsandboxed on the host and could open the workspace anyway.
static SPAWNING: Mutex<()> = Mutex::new(());

/// Clears close-on-exec on `descriptors`, so the next child inherits them.
fn inherit<'a>(descriptors: impl Iterator<Item = BorrowedFd<'a>>) -> Result<(), SandboxError> {
    for descriptor in descriptors {
        rustix::io::fcntl_setfd(descriptor, rustix::io::FdFlags::empty()).map_err(|error| {
            SandboxError::Start(format!(
                "failed to pass a descriptor to bubblewrap: {error}"
            ))
        })?;
    }
    Ok(())
}

impl Sandbox for LocalSandbox {
    fn ensure<'a>(
        &'a self,
        scope: &'a ScopeKey,
        view: &'a View,
    ) -> BoxFuture<'a, Result<SandboxHandle, SandboxError>> {
        Box::pin(async move {
            let slot = self.slots.slot(scope);
            let mut guard = slot.lock().await;
            if let Some(running) = guard.as_mut() {
                let alive = running.is_alive();
                if alive && running.view == *view {
                    return Ok(SandboxHandle {
                        socket: running.socket.clone(),
                        token: running.token.clone(),
                        browser_sockets: Some(self.paths(scope).browsers),
                        lease: running.activity.lease(),
                    });
                }
                if alive {
                    // Mounts cannot change under a running sandbox: files the caller may
                    // now read (or no longer read) need a new one. Its scratch stays.
                    tracing::info!(
                        scope = scope.id(),
                        view = %view.digest(),
                        "the caller's view changed; restarting the sandbox"
                    );
                } else {
                    tracing::warn!(scope = scope.id(), "sandbox died; starting a new one");
                }
                if let Some(old) = guard.take() {
                    old.stop().await;
                }
            }
            let running = self.start(scope, view).await?;
            let handle = SandboxHandle {
                socket: running.socket.clone(),
                token: running.token.clone(),
                browser_sockets: Some(self.paths(scope).browsers),
                lease: running.activity.lease(),
            };
            *guard = Some(running);
            Ok(handle)
        })
    }

    fn discard<'a>(&'a self, scope: &'a ScopeKey) -> BoxFuture<'a, Result<(), SandboxError>> {
        Box::pin(async move {
            let slot = self.slots.slot(scope);
            if let Some(running) = slot.lock().await.take() {
                running.stop().await;
            }
            Ok(())
        })
    }

    fn reap_idle(&self) -> BoxFuture<'_, Result<usize, SandboxError>> {
        Box::pin(async move {
            let mut reaped = 0;
            for (scope, slot) in self.slots.all() {
                // A locked slot is starting a sandbox: not idle.
                let Ok(mut guard) = slot.try_lock() else {
                    continue;
                };
                let idle = match guard.as_mut() {
                    Some(running) => {
                        !running.is_alive()
                            || running
                                .activity
                                .is_idle(self.config.idle_timeout, Instant::now())
                    }
                    None => false,
                };
                if idle && let Some(running) = guard.take() {
                    tracing::info!(scope = scope.id(), "reaping idle sandbox");
                    running.stop().await;
                    reaped += 1;
                }
            }
            Ok(reaped)
        })
    }

    fn shutdown(&self) -> BoxFuture<'_, usize> {
        Box::pin(async move {
            let mut stopped = 0;
            for (_, slot) in self.slots.all() {
                // Waits for a sandbox that is starting; stop() waits for bwrap to exit.
                if let Some(running) = slot.lock().await.take() {
                    running.stop().await;
                    stopped += 1;
                }
            }
            stopped
        })
    }
}

#[cfg(test)]
mod tests {
    use saint_config::SandboxScope;

    use super::*;

    fn strings(arguments: &[OsString]) -> Vec<String> {
        arguments
            .iter()
            .map(|argument| argument.to_string_lossy().into_owned())
            .collect()
    }

    fn window(arguments: &[String], items: &[&str]) -> bool {
        arguments.windows(items.len()).any(|window| window == items)
    }

    #[test]
    fn bwrap_isolates_network_pids_env_and_mounts_the_workspace_read_only() {
        let mut config = LocalConfig::new(
            "/srv/acme-ws".into(),
            "/var/lib/acme-state".into(),
            "/opt/runner".into(),
        );
        config.porter_socket_directory = Some("/srv/porter-run".into());
        let scope = ScopeKey::for_caller(
            SandboxScope::Session,
            "http:ana",
            &super::super::Viewer {
                role: "employee",
                person: Some("acme-ana"),
            },
        );
        let paths = ScopePaths::new(&config.state_directory, &scope);
        let view = [("SOUL.md", 11), ("memory/shared", 12)];
        let host = HostLayout {
            system_directories: vec![
                ("/bin".into(), Some("usr/bin".into())),
                ("/lib64".into(), None),
            ],
            etc_entries: vec!["ld.so.cache".into()],
        };
        let arguments = strings(&bwrap_arguments(&config, &paths, &host, &view, &[7, 9]));
        for flag in [
            "--unshare-all",
            "--unshare-user",
            "--disable-userns",
            "--die-with-parent",
            "--clearenv",
            "--new-session",
        ] {
            assert!(arguments.contains(&flag.to_string()), "missing {flag}");
        }
        assert!(
            !arguments
                .iter()
                .any(|argument| argument.starts_with("--share")),
            "no namespace may be shared"
        );
        assert!(window(&arguments, &["--cap-drop", "ALL"]));
        // The view, never the whole workspace: an empty read-only /agent with the
        // view's entries bound into it, by descriptor — no workspace path at all.
        assert!(
            !arguments
                .iter()
                .any(|argument| argument.starts_with("/srv/acme-ws")),
            "nothing of the workspace is bound by path"
        );
        assert!(window(&arguments, &["--tmpfs", "/agent"]));
        assert!(window(
            &arguments,
            &["--ro-bind-fd", "11", "/agent/SOUL.md"]
        ));
        assert!(window(
            &arguments,
            &["--ro-bind-fd", "12", "/agent/memory/shared"]
        ));
        assert!(window(&arguments, &["--remount-ro", "/agent"]));
        assert!(window(&arguments, &["--add-seccomp-fd", "7"]));
        assert!(window(&arguments, &["--add-seccomp-fd", "9"]));
        let scratch = paths.scratch.display().to_string();
        assert!(window(&arguments, &["--bind", &scratch, "/workspace"]));
        assert!(window(
            &arguments,
            &["--ro-bind", "/srv/porter-run", "/run/saint/porter"]
        ));
        // Writable: only the scope's scratch copy and its own runner directory. Porter's
        // socket directory (and every other sandbox's runner directory) is out of reach.
        let writable: Vec<&str> = arguments
            .windows(3)
            .filter(|window| window[0] == "--bind")
            .map(|window| window[2].as_str())
            .collect();
        assert_eq!(writable, vec!["/workspace", SANDBOX_RUN_DIRECTORY]);
        let run = paths.run.display().to_string();
        assert!(window(&arguments, &["--bind", &run, "/run/saint/sandbox"]));
        assert!(window(&arguments, &["--symlink", "usr/bin", "/bin"]));
        assert!(window(&arguments, &["--ro-bind", "/lib64", "/lib64"]));
        assert!(window(
            &arguments,
            &["--ro-bind", "/etc/ld.so.cache", "/etc/ld.so.cache"]
        ));
        assert!(
            !window(&arguments, &["--ro-bind", "/etc", "/etc"]),
            "never the whole /etc"
        );
        // Everything before `--` is bubblewrap's; the runner comes right after it.
        let separator = arguments
            .iter()
            .position(|argument| argument == "--")
            .unwrap();
        assert_eq!(arguments[separator + 1], SANDBOX_RUNNER);
        assert!(
            !arguments.iter().any(|argument| argument.contains("TOKEN")),
            "the token travels in a file"
        );
    }

    #[test]
    fn a_state_directory_inside_the_workspace_is_refused() {
        let workspace = tempfile::tempdir().unwrap();
        let config = LocalConfig::new(
            workspace.path().into(),
            workspace.path().join(".sandboxes"),
            "/opt/runner".into(),
        );
        let refused = LocalSandbox::new(config).err().unwrap();
        assert!(
            refused.to_string().contains("inside the workspace"),
            "{refused}"
        );
    }

    #[test]
    fn runner_sockets_move_to_a_short_private_directory_when_the_state_directory_is_deep() {
        use std::os::unix::fs::PermissionsExt;
        let workspace = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let root = tempfile::tempdir().unwrap();
        let deep = |length: usize| {
            let base = outside.path().canonicalize().unwrap();
            let filler = length - base.as_os_str().len() - 1;
            base.join("d".repeat(filler))
        };
        let scope = ScopeKey::longest();
        let sandbox = |state: PathBuf| {
            let mut config = LocalConfig::new(workspace.path().into(), state, "/opt/runner".into());
            config.short_socket_root = root.path().to_path_buf();
            LocalSandbox::new(config).unwrap()
        };
        // The deepest state directory whose sockets fit keeps them; one byte deeper
        // moves them: the check sizes the real longest socket path.
        // (A browser egress socket is the longest: `browser/<20 hex>.sock`.)
        let fits = sandbox(deep(47));
        assert_eq!(longest_socket_path(&fits.paths(&scope)), MAX_SOCKET_PATH);
        assert!(fits.paths(&scope).run.starts_with(deep(47)));
        let one_deeper = sandbox(deep(48));
        assert!(one_deeper.paths(&scope).run.starts_with(root.path()));
        let moved = sandbox(deep(200));
        let run = moved.paths(&scope).run;
        assert!(run.starts_with(root.path()), "{}", run.display());
        assert!(moved.paths(&scope).browsers.starts_with(root.path()));
        assert!(longest_socket_path(&moved.paths(&scope)) <= MAX_SOCKET_PATH);
        let private = run.parent().unwrap().parent().unwrap();
        let mode = fs::metadata(private).unwrap().permissions().mode();
        assert_eq!(mode & 0o077, 0, "{mode:o}");
        // Two state directories never share runner directories.
        let other = sandbox(deep(201));
        assert_ne!(other.paths(&scope).run, run);
        // Scratch stays with the state directory.
        assert!(moved.paths(&scope).scratch.starts_with(deep(200)));
    }

    #[test]
    fn a_short_socket_directory_someone_else_prepared_is_refused() {
        let workspace = tempfile::tempdir().unwrap();
        let state = tempfile::tempdir().unwrap();
        let deep = state.path().join("d".repeat(120));
        let root = tempfile::tempdir().unwrap();
        let private = root
            .path()
            .join(format!("saint-{}", rustix::process::getuid().as_raw()));
        // A symlink planted where the private directory would be.
        let elsewhere = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(elsewhere.path(), &private).unwrap();
        let mut config =
            LocalConfig::new(workspace.path().into(), deep.clone(), "/opt/runner".into());
        config.short_socket_root = root.path().to_path_buf();
        let refused = LocalSandbox::new(config.clone()).err().unwrap().to_string();
        assert!(refused.contains("not a private directory"), "{refused}");
        // A directory open to others is refused too.
        fs::remove_file(&private).unwrap();
        fs::create_dir(&private).unwrap();
        fs::set_permissions(
            &private,
            std::os::unix::fs::PermissionsExt::from_mode(0o777),
        )
        .unwrap();
        let refused = LocalSandbox::new(config).err().unwrap().to_string();
        assert!(refused.contains("not a private directory"), "{refused}");
    }
}
