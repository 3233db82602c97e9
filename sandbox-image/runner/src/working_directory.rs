//! Validates the working directory a request asks for: it must name a directory inside
//! one of the sandbox's roots, `/workspace` or `/agent`, opened beneath that root by the
//! kernel (`saint-paths`): `..` and symlinks are refused, never resolved.
//!
//! Reads the filesystem only to open directories; never creates or changes anything.

use std::{
    io,
    path::{Path, PathBuf},
};

use saint_paths::{BeneathPath, Directory, PathError, Workspace};
use thiserror::Error;

/// Why a working directory was refused.
#[derive(Debug, Error)]
pub enum WorkingDirectoryError {
    #[error("failed to use working directory {0:?}: it must be an absolute path")]
    Relative(String),
    #[error("failed to use working directory {path:?}")]
    Resolve { path: String, source: io::Error },
    #[error(
        "failed to use working directory {0:?}: it leads out of /workspace and /agent ('..' and symbolic links are not followed)"
    )]
    Outside(String),
    #[error("failed to use working directory {0:?}: not a directory")]
    NotDirectory(String),
    #[error("failed to use working directory {path:?}")]
    Refused {
        path: String,
        #[source]
        source: PathError,
    },
}

/// The roots a command may run in, held open.
#[derive(Debug)]
pub struct Roots {
    /// The writable scratch copy (`/workspace`), canonical; also the default directory.
    pub workspace: PathBuf,
    /// The read-only real workspace (`/agent`), canonical.
    pub agent: PathBuf,
    /// How each root may be spelled in a request: canonical first, then as configured.
    spellings: [PathBuf; 4],
    opened: [Workspace; 2],
}

impl Roots {
    /// Canonicalises and opens both roots once at start; later checks open beneath them.
    pub fn resolve(workspace: &Path, agent: &Path) -> io::Result<Self> {
        let (workspace_canonical, agent_canonical) =
            (workspace.canonicalize()?, agent.canonicalize()?);
        let open = |root: &Path| {
            Workspace::open(root).map_err(|error| io::Error::other(error.to_string()))
        };
        Ok(Self {
            opened: [open(&workspace_canonical)?, open(&agent_canonical)?],
            spellings: [
                workspace_canonical.clone(),
                agent_canonical.clone(),
                workspace.to_path_buf(),
                agent.to_path_buf(),
            ],
            workspace: workspace_canonical,
            agent: agent_canonical,
        })
    }

    /// Opens `requested` (empty: the workspace root) beneath the root it names and
    /// returns its canonical path. `/workspace/link -> /etc` is refused, and so is
    /// `/workspace/link -> sub`: the path a request names is the directory it gets.
    pub fn check(&self, requested: &str) -> Result<PathBuf, WorkingDirectoryError> {
        self.open(requested)
            .map(|directory| directory.path().to_path_buf())
    }

    /// Like [`Roots::check`], but keeps the directory open: a command started in its
    /// [`Directory::entry_path`] runs in the directory that was checked even if a
    /// command of the sandbox renames it or swaps in a symlink meanwhile.
    pub fn open(&self, requested: &str) -> Result<Directory, WorkingDirectoryError> {
        let workspace = self.workspace.to_string_lossy();
        let requested = if requested.is_empty() {
            workspace.as_ref()
        } else {
            requested
        };
        if !requested.starts_with('/') {
            return Err(WorkingDirectoryError::Relative(requested.to_string()));
        }
        let spellings = self.spellings.each_ref().map(PathBuf::as_path);
        let (index, relative) = match BeneathPath::parse_absolute(requested, &spellings) {
            Ok(parsed) => parsed,
            // Under neither root: a path that does not exist is reported as missing
            // (most likely mistyped), one that does as outside.
            Err(PathError::OutsideWorkspace(_)) => {
                return Err(match Path::new(requested).symlink_metadata() {
                    Err(source) => WorkingDirectoryError::Resolve {
                        path: requested.to_string(),
                        source,
                    },
                    Ok(_) => WorkingDirectoryError::Outside(requested.to_string()),
                });
            }
            Err(error) => return Err(refusal(requested, error)),
        };
        self.opened[index % 2]
            .open_directory(&relative, requested)
            .map_err(|error| refusal(requested, error))
    }
}

fn refusal(requested: &str, error: PathError) -> WorkingDirectoryError {
    let path = requested.to_string();
    match error {
        PathError::ParentComponent(_) | PathError::Symlink(_) | PathError::OutsideWorkspace(_) => {
            WorkingDirectoryError::Outside(path)
        }
        PathError::NotFound(_) => WorkingDirectoryError::Resolve {
            path,
            source: io::Error::from(io::ErrorKind::NotFound),
        },
        PathError::NotDirectory(_) => WorkingDirectoryError::NotDirectory(path),
        source => WorkingDirectoryError::Refused { path, source },
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

    #[test]
    fn symlinks_inside_a_root_and_encoded_forms_are_refused_too() {
        let (base, roots) = roots();
        std::os::unix::fs::symlink("sub", base.path().join("workspace/inner-link")).unwrap();
        let inner = base.path().join("workspace/inner-link");
        assert!(matches!(
            roots.check(inner.to_str().unwrap()),
            Err(WorkingDirectoryError::Outside(_))
        ));
        let encoded = format!("{}/workspace/%2e%2e/elsewhere", base.path().display());
        let error = roots.check(&encoded).unwrap_err();
        assert!(
            matches!(
                error,
                WorkingDirectoryError::Refused {
                    source: PathError::SuspiciousCharacters(_),
                    ..
                }
            ),
            "{error:?}"
        );
        let missing = format!("{}/workspace/missing", base.path().display());
        assert!(matches!(
            roots.check(&missing),
            Err(WorkingDirectoryError::Resolve { .. })
        ));
        let file = base.path().join("workspace/file");
        fs::write(&file, "x").unwrap();
        assert!(matches!(
            roots.check(file.to_str().unwrap()),
            Err(WorkingDirectoryError::NotDirectory(_))
        ));
    }
}
