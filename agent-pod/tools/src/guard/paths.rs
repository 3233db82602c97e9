//! Workspace containment for the file tools: a path the model named becomes a file
//! opened beneath the workspace root, or a refusal.
//!
//! The implementation is `saint-paths`, the one shared with Porter's working-directory
//! translation and the sandbox runner: lexical checks (no `..`, no control characters
//! or percent-encoded separators), then `openat2(2)` with `RESOLVE_BENEATH |
//! RESOLVE_NO_SYMLINKS` relative to a descriptor of the root, so the kernel guarantees
//! the file is inside the workspace. Symlinks, hard-linked files, FIFOs, sockets and
//! devices are refused. Error messages name only the path the model gave.

pub use saint_paths::{PathError, Workspace, WorkspacePath, WriteOutcome, is_safe_component};
