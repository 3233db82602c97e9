//! Working-directory translation: a sandbox path (`/workspace/...`, `/agent/...`) becomes
//! a directory inside the real workspace root, or the call is refused.
//!
//! The directory is opened beneath the root by the kernel (`saint-paths`): `..`,
//! symlinks and encoded separators are refused, never resolved. Reads the filesystem
//! only to open directories; never creates or changes anything.

use std::path::{Path, PathBuf};

use saint_config::sandbox_contract::SANDBOX_WORKSPACE_ROOTS;
use saint_paths::{BeneathPath, PathError, Workspace};
use thiserror::Error;

/// Why a working directory was refused.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum CwdError {
    #[error("working directory {0:?} is not under /workspace or /agent")]
    OutsideSandboxRoots(String),
    #[error("working directory {0:?} does not exist in the workspace")]
    Missing(String),
    #[error(
        "working directory {0:?} leads out of the workspace ('..' and symbolic links are not followed)"
    )]
    Escapes(String),
    #[error("working directory {0:?} is not a directory")]
    NotDirectory(String),
    #[error("working directory {path:?} is refused")]
    Refused {
        path: String,
        #[source]
        source: PathError,
    },
}

/// Translates `sandbox_cwd` to a directory inside `workspace_root` (itself canonical),
/// opened beneath the root so neither `..` nor a symlink can lead out of it.
pub fn translate(workspace_root: &Path, sandbox_cwd: &str) -> Result<PathBuf, CwdError> {
    let roots = SANDBOX_WORKSPACE_ROOTS.map(Path::new);
    // EXDEV (an open that would leave the root) arrives as OutsideWorkspace.
    let refused = |source: PathError| match source {
        PathError::ParentComponent(_) | PathError::Symlink(_) | PathError::OutsideWorkspace(_) => {
            CwdError::Escapes(sandbox_cwd.to_owned())
        }
        PathError::NotFound(_) => CwdError::Missing(sandbox_cwd.to_owned()),
        PathError::NotDirectory(_) => CwdError::NotDirectory(sandbox_cwd.to_owned()),
        source => CwdError::Refused {
            path: sandbox_cwd.to_owned(),
            source,
        },
    };
    let (_, relative) = BeneathPath::parse_absolute(sandbox_cwd, &roots).map_err(|error| {
        match error {
            // Lexically outside both sandbox roots: not a containment question.
            PathError::OutsideWorkspace(_) => CwdError::OutsideSandboxRoots(sandbox_cwd.to_owned()),
            error => refused(error),
        }
    })?;
    let workspace = Workspace::open(workspace_root).map_err(refused)?;
    let directory = workspace
        .open_directory(&relative, sandbox_cwd)
        .map_err(refused)?;
    Ok(directory.path().to_path_buf())
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

    #[test]
    fn encoded_separators_and_control_characters_are_refused_before_any_lookup() {
        let workspace = tempfile::tempdir().unwrap();
        let root = workspace.path().canonicalize().unwrap();
        for cwd in [
            "/workspace/%2e%2e/etc",
            "/workspace/repo\\..",
            "/workspace/\u{7}",
        ] {
            assert!(
                matches!(
                    translate(&root, cwd),
                    Err(CwdError::Refused {
                        source: PathError::SuspiciousCharacters(_),
                        ..
                    })
                ),
                "{cwd:?}"
            );
        }
    }
}
