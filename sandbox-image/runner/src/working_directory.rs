//! Validates the working directory a request asks for: it must resolve (symlinks
//! followed) inside one of the sandbox's roots, `/workspace` or `/agent`.
//!
//! Reads the filesystem only to resolve paths; never creates or changes anything.

use std::{
    io,
    path::{Path, PathBuf},
};

use thiserror::Error;

/// Why a working directory was refused.
#[derive(Debug, Error)]
pub enum WorkingDirectoryError {
    #[error("failed to use working directory {0:?}: it must be an absolute path")]
    Relative(String),
    #[error("failed to use working directory {path:?}")]
    Resolve { path: String, source: io::Error },
    #[error("failed to use working directory {0:?}: it is outside /workspace and /agent")]
    Outside(String),
    #[error("failed to use working directory {0:?}: not a directory")]
    NotDirectory(String),
}

/// The roots a command may run in, as canonical paths.
#[derive(Clone, Debug)]
pub struct Roots {
    /// The writable scratch copy (`/workspace`); also the default directory.
    pub workspace: PathBuf,
    /// The read-only real workspace (`/agent`).
    pub agent: PathBuf,
}

impl Roots {
    /// Canonicalises both roots once at start, so later checks compare resolved paths.
    pub fn resolve(workspace: &Path, agent: &Path) -> io::Result<Self> {
        Ok(Self {
            workspace: workspace.canonicalize()?,
            agent: agent.canonicalize()?,
        })
    }

    /// Resolves `requested` (empty: the workspace root) and checks it stays inside a root.
    ///
    /// The check runs on the canonical path, so `/workspace/link -> /etc` is refused.
    pub fn check(&self, requested: &str) -> Result<PathBuf, WorkingDirectoryError> {
        if requested.is_empty() {
            return Ok(self.workspace.clone());
        }
        if !requested.starts_with('/') {
            return Err(WorkingDirectoryError::Relative(requested.to_string()));
        }
        let resolved = Path::new(requested).canonicalize().map_err(|source| {
            WorkingDirectoryError::Resolve {
                path: requested.to_string(),
                source,
            }
        })?;
        if !(resolved.starts_with(&self.workspace) || resolved.starts_with(&self.agent)) {
            return Err(WorkingDirectoryError::Outside(requested.to_string()));
        }
        if !resolved.is_dir() {
            return Err(WorkingDirectoryError::NotDirectory(requested.to_string()));
        }
        Ok(resolved)
    }
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;

    fn roots() -> (tempfile::TempDir, Roots) {
        let base = tempfile::tempdir().unwrap();
        fs::create_dir_all(base.path().join("workspace/sub")).unwrap();
        fs::create_dir_all(base.path().join("agent")).unwrap();
        fs::create_dir_all(base.path().join("elsewhere")).unwrap();
        std::os::unix::fs::symlink(
            base.path().join("elsewhere"),
            base.path().join("workspace/escape"),
        )
        .unwrap();
        let roots =
            Roots::resolve(&base.path().join("workspace"), &base.path().join("agent")).unwrap();
        (base, roots)
    }

    #[test]
    fn directories_inside_either_root_are_accepted() {
        let (base, roots) = roots();
        let sub = base.path().join("workspace/sub");
        assert_eq!(
            roots.check(sub.to_str().unwrap()).unwrap(),
            sub.canonicalize().unwrap()
        );
        assert_eq!(roots.check("").unwrap(), roots.workspace);
        let agent = base.path().join("agent");
        assert!(roots.check(agent.to_str().unwrap()).is_ok());
    }

    #[test]
    fn symlinks_and_dot_dots_out_of_the_roots_are_refused() {
        let (base, roots) = roots();
        let escape = base.path().join("workspace/escape");
        assert!(matches!(
            roots.check(escape.to_str().unwrap()),
            Err(WorkingDirectoryError::Outside(_))
        ));
        let dotdot = format!("{}/workspace/../elsewhere", base.path().display());
        assert!(matches!(
            roots.check(&dotdot),
            Err(WorkingDirectoryError::Outside(_))
        ));
        assert!(matches!(
            roots.check("workspace"),
            Err(WorkingDirectoryError::Relative(_))
        ));
        assert!(matches!(
            roots.check("/no/such/dir"),
            Err(WorkingDirectoryError::Resolve { .. })
        ));
    }
}
