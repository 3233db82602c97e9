//! The per-call supervisor: Porter runs every CLI under `porter-supervise` (or `porter
//! __supervise`), a small process that is a child subreaper, so descendants that
//! `setsid` or double-fork are re-parented to it instead of escaping to init — and it
//! kills them all when the CLI exits, when Porter asks (timeout, disconnect, shutdown)
//! or when Porter itself dies. It enters the working directory by a descriptor it
//! opened beneath the workspace root, so a directory swapped for a symlink after
//! Porter's check is refused instead of followed.
//!
//! Supervisors are started ahead of their calls ([`Pool`]) with empty environments;
//! each waits on its stdin, a socket, for one [`Launch`] (length-prefixed JSON), then
//! hands the same socket to the CLI as its stdin, so Porter forwards the caller's input
//! on it. Starting a supervisor is thus off the call's critical path.
//!
//! Signals from Porter: SIGTERM asks every descendant to stop, SIGUSR1 kills them all
//! (repeatedly, until none is left); SIGINT is forwarded to the CLI's process group.
//! The supervisor exits with the CLI's status (`128 + n` for a signal), after the last
//! descendant is gone. Runs in its own process; touches only its own descendants.

use std::{
    collections::BTreeMap,
    ffi::{OsStr, OsString},
    io::Read,
    os::{fd::AsFd, unix::process::CommandExt},
    path::{Path, PathBuf},
    process::{ExitStatus, Stdio},
    sync::{Arc, Mutex, mpsc},
};

use nix::{
    errno::Errno,
    sys::{
        signal::Signal,
        wait::{WaitPidFlag, WaitStatus},
    },
    unistd::Pid,
};
use saint_paths::{BeneathPath, PathError, Workspace};
use serde::{Deserialize, Serialize};
use signal_hook::consts::{SIGCHLD, SIGINT, SIGTERM, SIGUSR1};
use tokio::io::AsyncWriteExt;

/// `argv[1]` that asks `porter-supervise` (or the `porter` binary) to supervise a call.
pub const SUBCOMMAND: &str = "__supervise";

/// Exit status when the supervisor could not set the call up (its reason is on stderr).
pub const SETUP_FAILED: i32 = 125;

/// Exit status when the CLI could not be started.
pub const START_FAILED: i32 = 127;

/// Largest launch message a supervisor reads (arguments and environment).
const MAX_LAUNCH_BYTES: u32 = 8 << 20;

/// One call, as Porter hands it to a waiting supervisor.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Launch {
    /// The canonical workspace root.
    pub root: PathBuf,
    /// The working directory, relative to `root` and canonical (as Porter checked it).
    pub cwd: PathBuf,
    pub bin: String,
    pub arguments: Vec<String>,
    /// The CLI's whole environment (the supervisor itself starts with none).
    pub environment: BTreeMap<String, String>,
}

/// A supervisor waiting for its call: its stdout and stderr pipes are the CLI's; its
/// control socket takes the [`Launch`] and then the caller's stdin.
#[derive(Debug)]
pub struct Ready {
    pub child: tokio::process::Child,
    pub control: tokio::net::UnixStream,
}

impl Ready {
    /// Starts `launch` on this supervisor.
    pub async fn launch(&mut self, launch: &Launch) -> std::io::Result<()> {
        let body = serde_json::to_vec(launch).map_err(std::io::Error::other)?;
        let length = u32::try_from(body.len())
            .ok()
            .filter(|length| *length <= MAX_LAUNCH_BYTES)
            .ok_or_else(|| std::io::Error::other("the call is too large to launch"))?;
        let mut message = Vec::with_capacity(4 + body.len());
        message.extend_from_slice(&length.to_be_bytes());
        message.extend_from_slice(&body);
        self.control.write_all(&message).await
    }
}

/// Starts a supervisor that waits for its launch.
fn start(program: &Path) -> std::io::Result<Ready> {
    let (ours, theirs) = std::os::unix::net::UnixStream::pair()?;
    let child = tokio::process::Command::new(program)
        .arg(SUBCOMMAND)
        .arg(std::process::id().to_string())
        .env_clear()
        .current_dir("/")
        .stdin(Stdio::from(std::os::fd::OwnedFd::from(theirs)))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Out of Porter's process group: signals meant for Porter stay with Porter.
        .process_group(0)
        .spawn()?;
    ours.set_nonblocking(true)?;
    Ok(Ready {
        child,
        control: tokio::net::UnixStream::from_std(ours)?,
    })
}

/// Supervisors started ahead of their calls. A thread of its own starts them: a
/// supervisor's parent-death signal follows the thread that started it, and this
/// thread lives as long as Porter.
#[derive(Debug)]
pub struct Pool {
    program: PathBuf,
    ready: Arc<Mutex<Vec<Ready>>>,
    refill: Mutex<mpsc::Sender<()>>,
}

impl Pool {
    /// A pool keeping `size` supervisors ready; call from inside the tokio runtime.
    pub fn new(program: PathBuf, size: usize) -> Self {
        let ready: Arc<Mutex<Vec<Ready>>> = Arc::default();
        let (refill, wanted) = mpsc::channel::<()>();
        let runtime = tokio::runtime::Handle::current();
        let (pool, target) = (ready.clone(), program.clone());
        std::thread::Builder::new()
            .name("porter-supervisors".into())
            .spawn(move || {
                let _runtime = runtime.enter();
                // Each message (and the first start) tops the pool up; the loop ends
                // when the pool is dropped.
                let mut message = Ok(());
                while message.is_ok() {
                    while pool.lock().expect("pool lock").len() < size {
                        match start(&target) {
                            Ok(supervisor) => pool.lock().expect("pool lock").push(supervisor),
                            Err(error) => {
                                tracing::warn!(%error, "failed to start a supervisor");
                                break;
                            }
                        }
                    }
                    message = wanted.recv();
                }
            })
            .expect("supervisor pool thread");
        Self {
            program,
            ready,
            refill: Mutex::new(refill),
        }
    }

    /// A ready supervisor: one from the pool, or a fresh one when it is empty.
    pub fn take(&self) -> std::io::Result<Ready> {
        let pooled = self.ready.lock().expect("pool lock").pop();
        let _ = self.refill.lock().expect("pool lock").send(());
        match pooled {
            Some(ready) => Ok(ready),
            None => start(&self.program),
        }
    }
}

/// Runs the supervisor if `argv[1]` asks for it; returns its exit status.
pub fn main_if_asked() -> Option<i32> {
    let arguments: Vec<OsString> = std::env::args_os().collect();
    (arguments.get(1).map(OsString::as_os_str) == Some(OsStr::new(SUBCOMMAND)))
        .then(|| supervise(&arguments[2..]))
}

fn fail(message: std::fmt::Arguments<'_>) -> i32 {
    eprintln!("porter: {message}");
    SETUP_FAILED
}

/// Reads the launch from stdin without reading past it: the rest of stdin is the
/// caller's input, for the CLI.
fn read_launch() -> std::io::Result<Option<Launch>> {
    let mut stdin = std::fs::File::from(std::io::stdin().as_fd().try_clone_to_owned()?);
    let mut length = [0_u8; 4];
    match stdin.read_exact(&mut length) {
        // Porter let this supervisor go unused (it is shutting down).
        Err(error) if error.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        other => other?,
    }
    let length = u32::from_be_bytes(length);
    if length > MAX_LAUNCH_BYTES {
        return Err(std::io::Error::other("launch message too large"));
    }
    let mut body = vec![0_u8; length as usize];
    stdin.read_exact(&mut body)?;
    serde_json::from_slice(&body)
        .map(Some)
        .map_err(std::io::Error::other)
}

fn supervise(arguments: &[OsString]) -> i32 {
    let [parent] = arguments else {
        return fail(format_args!("supervisor: bad arguments"));
    };
    let parent: i32 = parent
        .to_str()
        .and_then(|pid| pid.parse().ok())
        .unwrap_or(0);
    // Orphans of the call become ours, and Porter's death ends the call (and ends a
    // supervisor still waiting, through SIGUSR1's default action).
    if let Err(error) = nix::sys::prctl::set_child_subreaper(true) {
        return fail(format_args!("failed to become a subreaper: {error}"));
    }
    if let Err(error) = nix::sys::prctl::set_pdeathsig(Signal::SIGUSR1) {
        return fail(format_args!(
            "failed to set the parent-death signal: {error}"
        ));
    }
    if nix::unistd::getppid().as_raw() != parent {
        return fail(format_args!("porter went away before the call started"));
    }
    let launch = match read_launch() {
        Ok(Some(launch)) => launch,
        Ok(None) => return 0,
        Err(error) => return fail(format_args!("failed to read the call: {error}")),
    };
    // Registered before the CLI starts, so not even its earliest exit is missed.
    let mut signals = match signal_hook::iterator::Signals::new([SIGCHLD, SIGTERM, SIGUSR1, SIGINT])
    {
        Ok(signals) => signals,
        Err(error) => return fail(format_args!("failed to handle signals: {error}")),
    };
    if let Err(error) = enter(&launch.root, &launch.cwd) {
        return fail(format_args!(
            "working directory {}: {error}",
            launch.cwd.display()
        ));
    }
    // Its own process group: Ctrl-C reaches the CLI and its jobs, not the supervisor.
    let child = match std::process::Command::new(&launch.bin)
        .args(&launch.arguments)
        .env_clear()
        .envs(&launch.environment)
        .process_group(0)
        .spawn()
    {
        Ok(child) => child,
        Err(error) => {
            eprintln!("porter: failed to start {}: {error}", launch.bin);
            return START_FAILED;
        }
    };
    let child = Pid::from_raw(i32::try_from(child.id()).unwrap_or(0));
    let mut status: Option<i32> = None;
    let mut killing = false;
    for signal in signals.forever() {
        match signal {
            SIGCHLD => {}
            SIGTERM => {
                let _ = nix::sys::signal::killpg(child, Signal::SIGTERM);
                signal_children(Signal::SIGTERM);
            }
            SIGUSR1 => killing = true,
            SIGINT => {
                let _ = nix::sys::signal::killpg(child, Signal::SIGINT);
            }
            _ => {}
        }
        if reap(child, &mut status) {
            break;
        }
        // Once the CLI is gone, nothing of its call may stay behind.
        if killing || status.is_some() {
            let _ = nix::sys::signal::killpg(child, Signal::SIGKILL);
            signal_children(Signal::SIGKILL);
            if reap(child, &mut status) {
                break;
            }
        }
    }
    status.unwrap_or(SETUP_FAILED)
}

/// Reaps every exited child; `true` once none is left.
fn reap(child: Pid, status: &mut Option<i32>) -> bool {
    loop {
        match nix::sys::wait::waitpid(None, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::Exited(pid, code)) if pid == child => *status = Some(code),
            Ok(WaitStatus::Signaled(pid, signal, _)) if pid == child => {
                *status = Some(128 + signal as i32);
            }
            Ok(WaitStatus::StillAlive) => return false,
            Ok(_) => {}
            Err(Errno::EINTR) => {}
            Err(_) => return true,
        }
    }
}

/// Sends `signal` to every direct child. Descendants deeper down become direct
/// children as their parents die, and are caught on the next round; a direct child's
/// pid cannot be reused before this process reaps it, so no stranger is signalled.
fn signal_children(signal: Signal) {
    let me = std::process::id().to_string();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|name| name.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // `pid (comm) state ppid …`: comm may hold spaces and parentheses.
        let parent = stat
            .rsplit_once(") ")
            .and_then(|(_, rest)| rest.split(' ').nth(1));
        if parent == Some(me.as_str()) {
            let _ = nix::sys::signal::kill(Pid::from_raw(pid), signal);
        }
    }
}

/// Enters `relative` beneath `root` through the one path-containment implementation
/// (`saint-paths`: opened beneath `root` by the kernel, no symlink followed). Porter
/// hands over the canonical path it checked, so a symlink or `..` met here means the
/// tree changed since.
fn enter(root: &Path, relative: &Path) -> Result<(), PathError> {
    let shown = relative.to_string_lossy();
    let absolute = root.join(relative);
    let absolute = absolute
        .to_str()
        .ok_or_else(|| PathError::SuspiciousCharacters(shown.to_string()))?;
    let (_, path) = BeneathPath::parse_absolute(absolute, &[root])?;
    let directory = Workspace::open(root)?.open_directory(&path, &shown)?;
    nix::unistd::fchdir(&directory).map_err(|errno| PathError::Io {
        path: shown.to_string(),
        reason: errno.desc().to_string(),
    })
}

/// The supervisor's exit status as the CLI's exit code.
pub fn exit_code(status: ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .or_else(|| status.signal().map(|signal| 128 + signal))
        .unwrap_or(255)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_working_directory_is_entered_only_beneath_the_root_without_symlinks() {
        let directory = tempfile::tempdir().unwrap();
        let root = directory.path().canonicalize().unwrap();
        std::fs::create_dir_all(root.join("repo/sub")).unwrap();
        std::os::unix::fs::symlink("/etc", root.join("swapped")).unwrap();
        std::os::unix::fs::symlink("repo", root.join("inner")).unwrap();
        // Run in a child process: fchdir changes the test process's directory.
        for (relative, ok) in [
            ("repo/sub", true),
            (".", true),
            ("swapped", false),
            ("inner/sub", false),
            ("../", false),
            ("missing", false),
        ] {
            let script = std::process::Command::new(std::env::current_exe().unwrap())
                .args([
                    "--exact",
                    "supervisor::tests::enter_helper",
                    "--nocapture",
                    "--include-ignored",
                ])
                .env("ENTER_ROOT", &root)
                .env("ENTER_RELATIVE", relative)
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&script.stdout);
            assert_eq!(text.contains("ENTERED"), ok, "{relative}: {text}");
        }
    }

    #[test]
    #[ignore = "run by the test above in its own process"]
    fn enter_helper() {
        let root = std::env::var_os("ENTER_ROOT").unwrap();
        let relative = std::env::var_os("ENTER_RELATIVE").unwrap();
        if enter(Path::new(&root), Path::new(&relative)).is_ok() {
            println!("ENTERED {}", std::env::current_dir().unwrap().display());
        }
    }
}
