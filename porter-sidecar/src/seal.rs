//! Porter runs no program: after start-up it installs a seccomp filter, on every
//! thread, that refuses `execve`, `execveat`, `fork`, `vfork` and `clone` without
//! `CLONE_THREAD` with `EPERM`, and `clone3` (whose flags a filter cannot read) with
//! `ENOSYS`, so the C library falls back to `clone` for threads. Nothing Porter parses
//! can start a process next to the secrets, by construction.
//!
//! Touches only the calling process.

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

/// Why the filter could not be installed.
#[derive(Debug, thiserror::Error)]
#[error("failed to install porter's no-spawn seccomp filter: {0}")]
pub struct SealError(String);

/// On x86-64 the same calls under their x32 numbers, which the filter must refuse too.
const X32_BIT: i64 = 0x4000_0000;

fn failed(error: impl std::fmt::Display) -> SealError {
    SealError(error.to_string())
}

fn program(
    rules: BTreeMap<i64, Vec<SeccompRule>>,
    action: SeccompAction,
) -> Result<BpfProgram, SealError> {
    let arch = TargetArch::try_from(std::env::consts::ARCH).map_err(failed)?;
    SeccompFilter::new(rules, SeccompAction::Allow, action, arch)
        .map_err(failed)?
        .try_into()
        .map_err(|error: seccompiler::BackendError| failed(error))
}

/// The two programs: `EPERM` for process creation and exec, `ENOSYS` for `clone3`.
pub fn programs() -> Result<[BpfProgram; 2], SealError> {
    let not_a_thread = SeccompRule::new(vec![
        SeccompCondition::new(
            0,
            SeccompCmpArgLen::Qword,
            SeccompCmpOp::MaskedEq(libc::CLONE_THREAD as u64),
            0,
        )
        .map_err(failed)?,
    ])
    .map_err(failed)?;
    let mut refused: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    let mut clone3 = BTreeMap::new();
    let x32 = cfg!(target_arch = "x86_64");
    for offset in std::iter::once(0).chain(x32.then_some(X32_BIT)) {
        for call in [
            libc::SYS_execve,
            libc::SYS_execveat,
            libc::SYS_fork,
            libc::SYS_vfork,
        ] {
            refused.insert(call + offset, Vec::new());
        }
        refused.insert(libc::SYS_clone + offset, vec![not_a_thread.clone()]);
        clone3.insert(libc::SYS_clone3 + offset, Vec::new());
    }
    if x32 {
        // x32's own numbers for execve and execveat differ from x86-64's.
        refused.insert(X32_BIT + 520, Vec::new());
        refused.insert(X32_BIT + 545, Vec::new());
    }
    Ok([
        program(refused, SeccompAction::Errno(libc::EPERM as u32))?,
        program(clone3, SeccompAction::Errno(libc::ENOSYS as u32))?,
    ])
}

/// Installs the filter on every thread of this process (and every thread started
/// later). Irreversible.
pub fn install() -> Result<(), SealError> {
    for program in programs()? {
        seccompiler::apply_filter_all_threads(&program).map_err(failed)?;
    }
    Ok(())
}

/// What `porter __check-seal` does: installs the filter, then tries to start a program
/// every way the standard library and the C library offer; exit status 0 only if every
/// attempt failed. The integration tests run it, and the daemon's own filter is the
/// same [`install`].
pub fn check() -> i32 {
    if let Err(error) = install() {
        eprintln!("{error}");
        return 2;
    }
    let mut escaped = Vec::new();
    match std::process::Command::new("/bin/true").status() {
        Ok(status) => escaped.push(format!("Command::status ran /bin/true ({status})")),
        Err(error) => println!("spawn refused: {error}"),
    }
    // A thread still starts (tokio needs them).
    let thread = std::thread::spawn(|| 7).join();
    if thread.ok() != Some(7) {
        escaped.push("a thread did not start".into());
    }
    if escaped.is_empty() {
        println!("sealed: no process can be started");
        0
    } else {
        eprintln!("{}", escaped.join("; "));
        1
    }
}
