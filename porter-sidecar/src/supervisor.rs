//! The per-call supervisor: Porter runs every CLI through `porter-supervise
//! __supervise …` (or `porter __supervise …`), a small process that is a child
//! subreaper, so descendants that `setsid` or double-fork are re-parented to it
//! instead of escaping to init — and it kills them all when the CLI exits, when
//! Porter asks (timeout, disconnect, shutdown) or when Porter itself dies. It enters
//! the working directory by a descriptor it opened beneath the workspace root, so a
//! directory swapped for a symlink after Porter's check is refused instead of
//! followed.
//!
//! Signals from Porter: SIGTERM asks every descendant to stop, SIGUSR1 kills them all
//! (repeatedly, until none is left); SIGINT is forwarded to the CLI's process group.
//! The supervisor exits with the CLI's status (`128 + n` for a signal), after the last
//! descendant is gone. Runs in its own process; touches only its own descendants.

use std::{
    ffi::{OsStr, OsString},
    os::unix::process::CommandExt,
    path::{Component, Path},
    process::ExitStatus,
};

use nix::{
    errno::Errno,
    fcntl::{OFlag, OpenHow, ResolveFlag},
    sys::{
        signal::Signal,
        stat::Mode,
        wait::{WaitPidFlag, WaitStatus},
    },
    unistd::Pid,
};
use signal_hook::consts::{SIGCHLD, SIGINT, SIGTERM, SIGUSR1};

/// `argv[1]` that asks `porter-supervise` (or the `porter` binary) to supervise a call.
pub const SUBCOMMAND: &str = "__supervise";

/// Exit status when the supervisor could not set the call up (its reason is on stderr).
pub const SETUP_FAILED: i32 = 125;

/// Exit status when the CLI could not be started.
pub const START_FAILED: i32 = 127;

/// The supervisor's command line: `__supervise <root> <relative cwd> <porter pid> --
/// <bin> <args…>`.
pub fn arguments(
    workspace_root: &Path,
    relative_cwd: &Path,
    bin: &str,
    cli_arguments: &[String],
) -> Vec<OsString> {
    let mut arguments: Vec<OsString> = vec![
        SUBCOMMAND.into(),
        workspace_root.into(),
        if relative_cwd.as_os_str().is_empty() {
            ".".into()
        } else {
            relative_cwd.into()
        },
        std::process::id().to_string().into(),
        "--".into(),
        bin.into(),
    ];
    arguments.extend(cli_arguments.iter().map(OsString::from));
    arguments
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

fn supervise(arguments: &[OsString]) -> i32 {
    let [root, cwd, parent, separator, bin, cli_arguments @ ..] = arguments else {
        return fail(format_args!("supervisor: bad arguments"));
    };
    if separator != "--" {
        return fail(format_args!("supervisor: bad arguments"));
    }
    let parent: i32 = parent
        .to_str()
        .and_then(|pid| pid.parse().ok())
        .unwrap_or(0);
    // Orphans of the call become ours, and Porter's death ends the call.
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
    // Registered before the CLI starts, so not even its earliest exit is missed.
    let mut signals = match signal_hook::iterator::Signals::new([SIGCHLD, SIGTERM, SIGUSR1, SIGINT])
    {
        Ok(signals) => signals,
        Err(error) => return fail(format_args!("failed to handle signals: {error}")),
    };
    if let Err(error) = enter(Path::new(root), Path::new(cwd)) {
        return fail(format_args!(
            "working directory {}: {error}",
            Path::new(cwd).display()
        ));
    }
    // Its own process group: Ctrl-C reaches the CLI and its jobs, not the supervisor.
    let child = match std::process::Command::new(bin)
        .args(cli_arguments)
        .process_group(0)
        .spawn()
    {
        Ok(child) => child,
        Err(error) => {
            eprintln!(
                "porter: failed to start {}: {error}",
                Path::new(bin).display()
            );
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

/// Enters `relative` beneath `root` by a descriptor opened without following any
/// symlink or leaving `root`. Porter hands over the canonical path it checked, so a
/// symlink or `..` met here means the tree changed since.
fn enter(root: &Path, relative: &Path) -> nix::Result<()> {
    let root = nix::fcntl::open(
        root,
        OFlag::O_DIRECTORY | OFlag::O_RDONLY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )?;
    let how = OpenHow::new()
        .flags(OFlag::O_DIRECTORY | OFlag::O_RDONLY | OFlag::O_CLOEXEC)
        .resolve(ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_SYMLINKS);
    let directory = match nix::fcntl::openat2(&root, relative, how) {
        // Kernels before 5.6 (or a seccomp filter) lack openat2: walk component by
        // component with O_NOFOLLOW, which is as strict.
        Err(Errno::ENOSYS) => {
            let mut current = root;
            for component in relative.components() {
                match component {
                    Component::CurDir => {}
                    Component::Normal(name) => {
                        current = nix::fcntl::openat(
                            &current,
                            name,
                            OFlag::O_DIRECTORY
                                | OFlag::O_RDONLY
                                | OFlag::O_NOFOLLOW
                                | OFlag::O_CLOEXEC,
                            Mode::empty(),
                        )?;
                    }
                    _ => return Err(Errno::EXDEV),
                }
            }
            current
        }
        other => other?,
    };
    nix::unistd::fchdir(&directory)
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
