//! Why a path was refused or a file operation beneath a root failed.

use rustix::io::Errno;

/// Why a path was refused or a file operation failed. Messages name only the path the
/// caller gave (an absolute one as `<absolute path>`), never a host path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    #[error("path {0:?} is empty or names the workspace itself")]
    Empty(String),
    #[error("path contains a NUL byte")]
    NulByte,
    #[error("path {0:?} contains control characters, backslashes or percent-encoded separators")]
    SuspiciousCharacters(String),
    #[error("path {0:?} is too long")]
    TooLong(String),
    #[error("path {0:?} uses '..'; name files relative to the workspace instead")]
    ParentComponent(String),
    #[error("path {0:?} is outside the workspace")]
    OutsideWorkspace(String),
    #[error("path {0:?} goes through a symbolic link; symbolic links are not followed")]
    Symlink(String),
    #[error("path {0:?} is a hard link shared with another file; refusing to use it")]
    HardLink(String),
    #[error("path {0:?} is not a regular file")]
    NotRegularFile(String),
    #[error("path {0:?} is a directory")]
    IsDirectory(String),
    #[error("path {0:?} is not a directory")]
    NotDirectory(String),
    #[error("file {0:?} does not exist")]
    NotFound(String),
    #[error("file {0:?} is larger than {1} bytes")]
    TooLarge(String, u64),
    #[error("failed to open the workspace")]
    Workspace,
    #[error("failed to access {path:?}: {reason}")]
    Io { path: String, reason: String },
}

impl PathError {
    /// Whether this error is a security refusal (as opposed to a missing file, a wrong
    /// file type the caller could not have known, or an I/O error).
    pub fn is_refusal(&self) -> bool {
        !matches!(
            self,
            PathError::NotFound(_)
                | PathError::NotDirectory(_)
                | PathError::Io { .. }
                | PathError::Workspace
        )
    }
}

/// The refusal a failed `openat2` (or a `*at` call beneath it) stands for.
pub(crate) fn map_errno(errno: Errno, shown: &str) -> PathError {
    let shown = shown.to_string();
    match errno {
        Errno::NOENT | Errno::NOTDIR => PathError::NotFound(shown),
        // RESOLVE_NO_SYMLINKS answers ELOOP for any symlink on the way.
        Errno::LOOP => PathError::Symlink(shown),
        // RESOLVE_BENEATH answers EXDEV for `..` above the root, an absolute symlink or
        // a magic link: the walk would have left the root.
        Errno::XDEV => PathError::OutsideWorkspace(shown),
        Errno::ISDIR => PathError::IsDirectory(shown),
        Errno::NXIO | Errno::OPNOTSUPP => PathError::NotRegularFile(shown),
        Errno::NAMETOOLONG => PathError::TooLong(shown),
        Errno::NOSYS => PathError::Io {
            path: shown,
            reason: "the kernel lacks openat2; refusing file access".to_string(),
        },
        other => PathError::Io {
            path: shown,
            reason: other.to_string(),
        },
    }
}
