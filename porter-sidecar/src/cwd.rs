//! Working-directory translation: a sandbox path (`/workspace/...`, `/agent/...`) becomes
//! a directory inside the real workspace root, or the call is refused.
//!
//! Reads the filesystem only to resolve symlinks; never creates or changes anything.

use std::path::{Component, Path, PathBuf};

use thiserror::Error;

/// The sandbox mount points that stand for the workspace root.
pub const SANDBOX_ROOTS: &[&str] = &["/workspace", "/agent"];

/// Why a working directory was refused.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum CwdError {
    #[error("working directory {0:?} is not under /workspace or /agent")]
    OutsideSandboxRoots(String),
    #[error("working directory {0:?} does not exist in the workspace")]
    Missing(String),
    #[error("working directory {0:?} resolves outside the workspace")]
    Escapes(String),
    #[error("working directory {0:?} is not a directory")]
    NotDirectory(String),
}

/// Translates `sandbox_cwd` to a canonical directory inside `workspace_root` (itself
/// canonical). Symlinks and `..` are resolved first, then containment is checked, so
/// neither can lead out of the workspace.
pub fn translate(workspace_root: &Path, sandbox_cwd: &str) -> Result<PathBuf, CwdError> {
    let sandbox_path = Path::new(sandbox_cwd);
    let relative = SANDBOX_ROOTS
        .iter()
        .find_map(|root| sandbox_path.strip_prefix(root).ok())
        .filter(|_| sandbox_path.is_absolute())
        .ok_or_else(|| CwdError::OutsideSandboxRoots(sandbox_cwd.to_owned()))?;
    // Refuse `..` outright as well: containment would catch it, but a request that
    // needs it is malformed and the refusal reads better.
    if relative
        .components()
        .any(|component| matches!(component, Component::ParentDir))
    {
        return Err(CwdError::Escapes(sandbox_cwd.to_owned()));
    }
    let joined = workspace_root.join(relative);
    let resolved = joined
        .canonicalize()
        .map_err(|_| CwdError::Missing(sandbox_cwd.to_owned()))?;
    if !resolved.starts_with(workspace_root) {
        return Err(CwdError::Escapes(sandbox_cwd.to_owned()));
    }
    if !resolved.is_dir() {
        return Err(CwdError::NotDirectory(sandbox_cwd.to_owned()));
    }
    Ok(resolved)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sandbox_paths_map_into_the_workspace_and_escapes_are_refused() {
        let workspace = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let root = workspace.path().canonicalize().unwrap();
        std::fs::create_dir(root.join("repo")).unwrap();
        std::fs::write(root.join("file"), "x").unwrap();
        std::os::unix::fs::symlink(outside.path(), root.join("out")).unwrap();

        assert_eq!(translate(&root, "/workspace"), Ok(root.clone()));
        assert_eq!(translate(&root, "/agent/repo"), Ok(root.join("repo")));
        assert_eq!(translate(&root, "/workspace/repo/"), Ok(root.join("repo")));
        assert!(matches!(
            translate(&root, "/workspace/../etc"),
            Err(CwdError::Escapes(_))
        ));
        assert!(matches!(
            translate(&root, "/workspace/out"),
            Err(CwdError::Escapes(_))
        ));
        assert!(matches!(
            translate(&root, "/etc"),
            Err(CwdError::OutsideSandboxRoots(_))
        ));
        assert!(matches!(
            translate(&root, "/workspacefoo"),
            Err(CwdError::OutsideSandboxRoots(_))
        ));
        assert!(matches!(
            translate(&root, "workspace/repo"),
            Err(CwdError::OutsideSandboxRoots(_))
        ));
        assert!(matches!(
            translate(&root, "/workspace/missing"),
            Err(CwdError::Missing(_))
        ));
        assert!(matches!(
            translate(&root, "/workspace/file"),
            Err(CwdError::NotDirectory(_))
        ));
    }
}
