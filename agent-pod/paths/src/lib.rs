//! Path containment, written once: a path a caller named (the model through the file
//! tools, the agent through the sandbox runner's working directory) is checked lexically and then opened beneath its root by the kernel
//! (`openat2(2)` with `RESOLVE_BENEATH`), or refused.
//!
//! Touches only the roots it is given, through file descriptors. Error messages name
//! only the path the caller gave, never a host path.

mod error;
mod parse;
mod workspace;

use std::{ffi::OsStr, os::unix::ffi::OsStrExt};

pub use crate::{
    error::PathError,
    parse::{BeneathPath, WorkspacePath},
    workspace::{Directory, Workspace, WriteOutcome},
};

/// Whether a single path component is a plain, safe name (used for slugs in paths).
pub fn is_safe_component(name: &str) -> bool {
    !name.is_empty()
        && name != "."
        && name != ".."
        && name.len() <= 128
        && OsStr::new(name).as_bytes().iter().all(|byte| {
            byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'@' | b'+')
        })
}
