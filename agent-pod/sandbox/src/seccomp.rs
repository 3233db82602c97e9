//! The local sandbox's seccomp filters, equivalent to the container runtime's default
//! profile (what a Kubernetes sandbox pod gets from `seccompProfile: RuntimeDefault`):
//! the system calls that profile refuses — kernel modules, keyrings, `mount` and the
//! new mount API, namespaces (`unshare`, `setns`, `clone` with namespace flags),
//! `ptrace` and cross-process memory access, `bpf`, `perf_event_open`, `userfaultfd`,
//! `io_uring`, clock and reboot calls, unusual `personality` values — fail with `EPERM`;
//! `clone3` fails with `ENOSYS` so the C library falls back to `clone`, whose flags the
//! filter can see; on x86-64, x32-ABI system call numbers fail with `ENOSYS` so nothing
//! reaches a refused call under another number.
//!
//! Pure: builds BPF programs as bytes in the kernel's `struct sock_filter` layout, which
//! bubblewrap loads from a file descriptor (`--add-seccomp-fd`).

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

/// Why the filters could not be built (an architecture seccompiler does not know).
#[derive(Debug, thiserror::Error)]
#[error("failed to build the sandbox's seccomp filter: {0}")]
pub struct SeccompError(String);

/// System calls refused outright.
fn refused_system_calls() -> Vec<i64> {
    let mut calls = vec![
        libc::SYS_acct,
        libc::SYS_add_key,
        libc::SYS_bpf,
        libc::SYS_clock_adjtime,
        libc::SYS_clock_settime,
        libc::SYS_delete_module,
        libc::SYS_finit_module,
        libc::SYS_fsconfig,
        libc::SYS_fsmount,
        libc::SYS_fsopen,
        libc::SYS_fspick,
        libc::SYS_get_mempolicy,
        libc::SYS_init_module,
        libc::SYS_io_uring_enter,
        libc::SYS_io_uring_register,
        libc::SYS_io_uring_setup,
        libc::SYS_kcmp,
        libc::SYS_kexec_file_load,
        libc::SYS_kexec_load,
        libc::SYS_keyctl,
        libc::SYS_mbind,
        libc::SYS_mount,
        libc::SYS_mount_setattr,
        libc::SYS_move_mount,
        libc::SYS_move_pages,
        libc::SYS_name_to_handle_at,
        libc::SYS_open_by_handle_at,
        libc::SYS_open_tree,
        libc::SYS_perf_event_open,
        libc::SYS_pivot_root,
        libc::SYS_process_vm_readv,
        libc::SYS_process_vm_writev,
        libc::SYS_ptrace,
        libc::SYS_quotactl,
        libc::SYS_reboot,
        libc::SYS_request_key,
        libc::SYS_set_mempolicy,
        libc::SYS_setns,
        libc::SYS_settimeofday,
        libc::SYS_swapoff,
        libc::SYS_swapon,
        libc::SYS_syslog,
        libc::SYS_umount2,
        libc::SYS_unshare,
        libc::SYS_userfaultfd,
        libc::SYS_vhangup,
    ];
    #[cfg(target_arch = "x86_64")]
    calls.extend([
        libc::SYS__sysctl,
        libc::SYS_ioperm,
        libc::SYS_iopl,
        libc::SYS_lookup_dcookie,
        libc::SYS_nfsservctl,
        libc::SYS_sysfs,
        libc::SYS_uselib,
        libc::SYS_ustat,
    ]);
    calls
}

/// `clone` flags that create namespaces.
const NAMESPACE_FLAGS: [u64; 8] = [
    libc::CLONE_NEWNS as u64,
    libc::CLONE_NEWCGROUP as u64,
    libc::CLONE_NEWUTS as u64,
    libc::CLONE_NEWIPC as u64,
    libc::CLONE_NEWUSER as u64,
    libc::CLONE_NEWPID as u64,
    libc::CLONE_NEWNET as u64,
    0x80, // CLONE_NEWTIME
];

/// `personality` values the default profile allows (Linux, `UNAME26`, 32-bit pointers,
/// their combination, and the query `0xffffffff`).
const ALLOWED_PERSONALITIES: [u64; 5] = [0x0, 0x8, 0x20000, 0x20008, 0xffff_ffff];

fn target() -> Result<TargetArch, SeccompError> {
    TargetArch::try_from(std::env::consts::ARCH).map_err(|error| SeccompError(error.to_string()))
}

fn condition(
    argument: u8,
    length: SeccompCmpArgLen,
    operator: SeccompCmpOp,
    value: u64,
) -> Result<SeccompCondition, SeccompError> {
    SeccompCondition::new(argument, length, operator, value)
        .map_err(|error| SeccompError(error.to_string()))
}

fn rule(conditions: Vec<SeccompCondition>) -> Result<SeccompRule, SeccompError> {
    SeccompRule::new(conditions).map_err(|error| SeccompError(error.to_string()))
}

fn compile(
    rules: BTreeMap<i64, Vec<SeccompRule>>,
    action: SeccompAction,
) -> Result<Vec<u8>, SeccompError> {
    let filter = SeccompFilter::new(rules, SeccompAction::Allow, action, target()?)
        .map_err(|error| SeccompError(error.to_string()))?;
    let program: BpfProgram = filter
        .try_into()
        .map_err(|error: seccompiler::BackendError| SeccompError(error.to_string()))?;
    Ok(to_bytes(&program))
}

/// The kernel's `struct sock_filter` array, in this machine's byte order.
fn to_bytes(program: &[seccompiler::sock_filter]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(program.len() * 8);
    for instruction in program {
        bytes.extend_from_slice(&instruction.code.to_ne_bytes());
        bytes.push(instruction.jt);
        bytes.push(instruction.jf);
        bytes.extend_from_slice(&instruction.k.to_ne_bytes());
    }
    bytes
}

/// The programs to load, in order; each one is a separate filter (the kernel applies
/// them all and the strictest answer wins).
pub fn programs() -> Result<Vec<Vec<u8>>, SeccompError> {
    let mut refused: BTreeMap<i64, Vec<SeccompRule>> = refused_system_calls()
        .into_iter()
        .map(|call| (call, Vec::new()))
        .collect();
    let mut clone_rules = Vec::new();
    for flag in NAMESPACE_FLAGS {
        clone_rules.push(rule(vec![condition(
            0,
            SeccompCmpArgLen::Qword,
            SeccompCmpOp::MaskedEq(flag),
            flag,
        )?])?);
    }
    refused.insert(libc::SYS_clone, clone_rules);
    let mut personality = Vec::new();
    for value in ALLOWED_PERSONALITIES {
        personality.push(condition(
            0,
            SeccompCmpArgLen::Dword,
            SeccompCmpOp::Ne,
            value,
        )?);
    }
    refused.insert(libc::SYS_personality, vec![rule(personality)?]);
    let eperm = compile(refused, SeccompAction::Errno(libc::EPERM as u32))?;

    let clone3 = compile(
        BTreeMap::from([(libc::SYS_clone3, Vec::new())]),
        SeccompAction::Errno(libc::ENOSYS as u32),
    )?;
    let mut programs = vec![eperm, clone3];
    if cfg!(target_arch = "x86_64") {
        programs.push(x32_guard());
    }
    Ok(programs)
}

/// x86-64 only: system call numbers with the x32 bit set fail with `ENOSYS`. The other
/// filters match plain numbers, so without this one an x32 alias of a refused call
/// would pass on kernels built with x32 support.
fn x32_guard() -> Vec<u8> {
    const LOAD_WORD: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
    const JUMP_EQUAL: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
    const JUMP_GREATER_EQUAL: u16 = 0x35; // BPF_JMP | BPF_JGE | BPF_K
    const RETURN: u16 = 0x06; // BPF_RET | BPF_K
    const ARCH_OFFSET: u32 = 4; // seccomp_data.arch
    const NUMBER_OFFSET: u32 = 0; // seccomp_data.nr
    const AUDIT_ARCH_X86_64: u32 = 62 | 0x8000_0000 | 0x4000_0000;
    const X32_SYSCALL_BIT: u32 = 0x4000_0000;
    const RET_ALLOW: u32 = 0x7fff_0000;
    const RET_ERRNO: u32 = 0x0005_0000;
    let instruction = |code, jt, jf, k| seccompiler::sock_filter { code, jt, jf, k };
    to_bytes(&[
        instruction(LOAD_WORD, 0, 0, ARCH_OFFSET),
        // Another architecture: the main filter's own architecture check decides.
        instruction(JUMP_EQUAL, 0, 3, AUDIT_ARCH_X86_64),
        instruction(LOAD_WORD, 0, 0, NUMBER_OFFSET),
        instruction(JUMP_GREATER_EQUAL, 0, 1, X32_SYSCALL_BIT),
        instruction(RETURN, 0, 0, RET_ERRNO | libc::ENOSYS as u32),
        instruction(RETURN, 0, 0, RET_ALLOW),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_programs_are_whole_sock_filter_arrays() {
        let programs = programs().unwrap();
        assert!(programs.len() >= 2);
        for program in &programs {
            assert!(!program.is_empty());
            assert_eq!(program.len() % 8, 0, "8 bytes per instruction");
            // The kernel refuses programs longer than 4096 instructions.
            assert!(program.len() / 8 <= 4096);
        }
    }

    #[test]
    fn the_x32_guard_jumps_stay_inside_the_program() {
        let guard = x32_guard();
        let count = guard.len() / 8;
        for (index, chunk) in guard.chunks(8).enumerate() {
            let code = u16::from_ne_bytes([chunk[0], chunk[1]]);
            if code & 0x07 == 0x05 {
                let (jt, jf) = (chunk[2] as usize, chunk[3] as usize);
                assert!(
                    index + 1 + jt.max(jf) < count,
                    "jump out of range at {index}"
                );
            }
        }
        let last = &guard[guard.len() - 8..];
        assert_eq!(
            u16::from_ne_bytes([last[0], last[1]]),
            0x06,
            "ends in a return"
        );
    }
}
