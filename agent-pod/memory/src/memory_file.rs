//! Reads lines of one memory file for `memory_get`, only inside the asker's scope.
//! Reads the file system; never writes, never touches the index tables.
//!
//! Both the path as asked and the path after resolving symlinks must be in scope and
//! inside the workspace, so a link from a shared note to a private one is refused.

use crate::{
    index::{IndexError, MemoryIndex},
    memory_paths::normalise_relative,
    scope::Scope,
};

/// Most lines one call returns.
pub const MAX_LINES: usize = 400;
/// Largest file `memory_get` reads.
const MAX_FILE_BYTES: u64 = 4 << 20;

/// Why a memory file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum MemoryFileError {
    /// The path is malformed, absolute, escapes the workspace, or is not markdown.
    #[error("invalid memory path {0:?}: use a workspace-relative path to a .md file")]
    InvalidPath(String),
    /// The path is outside the asker's memory scope.
    #[error("{0} is outside your memory scope")]
    OutOfScope(String),
    /// No such file.
    #[error("{0} does not exist")]
    NotFound(String),
    /// The file is too large or unreadable.
    #[error("failed to read {path}: {reason}")]
    Unreadable {
        /// The path as asked.
        path: String,
        /// Why.
        reason: String,
    },
    /// The scope check itself failed.
    #[error(transparent)]
    Index(#[from] IndexError),
}

/// Lines of a memory file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryText {
    /// Normalised workspace-relative path.
    pub path: String,
    /// First returned line (1-based).
    pub start_line: usize,
    /// Last returned line (inclusive; `start_line - 1` when nothing was returned).
    pub end_line: usize,
    /// Lines in the file.
    pub total_lines: usize,
    /// The lines, joined by `\n`.
    pub text: String,
}

impl MemoryIndex {
    /// Reads `lines` lines (default and cap [`MAX_LINES`]) from line `from` (1-based,
    /// default 1) of the memory file `path`, if `scope` allows it.
    #[expect(
        clippy::case_sensitive_file_extension_comparisons,
        reason = "memory files are `*.md` exactly, as the role scopes' globs say"
    )]
    pub fn read_memory_file(
        &self,
        scope: &Scope,
        path: &str,
        from: Option<usize>,
        lines: Option<usize>,
    ) -> Result<MemoryText, MemoryFileError> {
        let relative = normalise_relative(path)
            .filter(|relative| relative.ends_with(".md"))
            .ok_or_else(|| MemoryFileError::InvalidPath(path.to_string()))?;
        if !self.is_in_scope(scope, &relative)? {
            return Err(MemoryFileError::OutOfScope(relative));
        }
        let full_path = self.workspace.join(&relative);
        let resolved = match full_path.canonicalize() {
            Ok(resolved) => resolved,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                return Err(MemoryFileError::NotFound(relative));
            }
            Err(error) => {
                return Err(MemoryFileError::Unreadable {
                    path: relative,
                    reason: error.to_string(),
                });
            }
        };
        // The resolved target must itself be a workspace file the scope allows.
        let resolved_relative = resolved
            .strip_prefix(&self.workspace)
            .ok()
            .and_then(|inside| inside.to_str())
            .and_then(normalise_relative)
            .ok_or_else(|| MemoryFileError::OutOfScope(relative.clone()))?;
        if resolved_relative != relative && !self.is_in_scope(scope, &resolved_relative)? {
            return Err(MemoryFileError::OutOfScope(relative));
        }
        let metadata =
            std::fs::metadata(&resolved).map_err(|error| MemoryFileError::Unreadable {
                path: relative.clone(),
                reason: error.to_string(),
            })?;
        if !metadata.is_file() {
            return Err(MemoryFileError::NotFound(relative));
        }
        if metadata.len() > MAX_FILE_BYTES {
            return Err(MemoryFileError::Unreadable {
                path: relative,
                reason: "file too large".to_string(),
            });
        }
        let bytes = std::fs::read(&resolved).map_err(|error| MemoryFileError::Unreadable {
            path: relative.clone(),
            reason: error.to_string(),
        })?;
        let content = String::from_utf8_lossy(&bytes);
        let all_lines: Vec<&str> = content.lines().collect();
        let start_line = from.unwrap_or(1).max(1);
        let count = lines.unwrap_or(MAX_LINES).clamp(1, MAX_LINES);
        let selected: Vec<&str> = all_lines
            .iter()
            .skip(start_line - 1)
            .take(count)
            .copied()
            .collect();
        Ok(MemoryText {
            path: relative,
            start_line,
            end_line: start_line + selected.len() - 1,
            total_lines: all_lines.len(),
            text: selected.join("\n"),
        })
    }
}
