//! Seeds the writable `/workspace` copy from the read-only real workspace (`/agent`):
//! bootstrap files and skills, once per scratch directory.
//!
//! Reads only below the source root and writes only below the destination root;
//! symlinks are skipped, never followed, so a link in the real workspace cannot pull
//! anything else into the copy.

use std::{
    fs, io,
    path::{Component, Path, PathBuf},
};

use thiserror::Error;

/// Marker written into a seeded copy, so a restarted sandbox keeps the scope's edits.
pub const SEEDED_MARKER: &str = ".saint-seeded";

/// Why seeding failed.
#[derive(Debug, Error)]
pub enum SeedError {
    #[error("failed to seed {path}")]
    Copy { path: PathBuf, source: io::Error },
    #[error("refusing seed entry {0:?}: it must be a relative path without `..`")]
    BadEntry(String),
}

/// Copies each entry (a file or a directory, relative to `source`) into `destination`,
/// unless `destination` was already seeded. Missing entries are skipped. Returns the
/// number of files copied.
pub fn seed(source: &Path, destination: &Path, entries: &[String]) -> Result<usize, SeedError> {
    let marker = destination.join(SEEDED_MARKER);
    if marker.exists() {
        return Ok(0);
    }
    let mut copied = 0;
    for entry in entries {
        let relative = Path::new(entry);
        let plain = relative
            .components()
            .all(|component| matches!(component, Component::Normal(_)));
        if entry.is_empty() || !plain {
            return Err(SeedError::BadEntry(entry.clone()));
        }
        copied += copy_tree(&source.join(relative), &destination.join(relative))?;
    }
    fs::write(&marker, b"").map_err(|source| SeedError::Copy {
        path: marker.clone(),
        source,
    })?;
    Ok(copied)
}

fn copy_tree(from: &Path, to: &Path) -> Result<usize, SeedError> {
    let error = |source| SeedError::Copy {
        path: from.to_path_buf(),
        source,
    };
    let metadata = match fs::symlink_metadata(from) {
        Ok(metadata) => metadata,
        Err(source) if source.kind() == io::ErrorKind::NotFound => return Ok(0),
        Err(source) => return Err(error(source)),
    };
    if metadata.is_dir() {
        fs::create_dir_all(to).map_err(error)?;
        let mut copied = 0;
        for child in fs::read_dir(from).map_err(error)? {
            let child = child.map_err(error)?;
            copied += copy_tree(&child.path(), &to.join(child.file_name()))?;
        }
        Ok(copied)
    } else if metadata.is_file() {
        if let Some(parent) = to.parent() {
            fs::create_dir_all(parent).map_err(error)?;
        }
        fs::copy(from, to).map_err(error)?;
        Ok(1)
    } else {
        // Symlinks, sockets, fifos: never copied.
        Ok(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_named_files_and_directories_once_and_skips_symlinks() {
        let source = tempfile::tempdir().unwrap();
        let destination = tempfile::tempdir().unwrap();
        fs::write(source.path().join("SOUL.md"), "soul").unwrap();
        fs::create_dir_all(source.path().join("skills/github")).unwrap();
        fs::write(source.path().join("skills/github/SKILL.md"), "use gh").unwrap();
        fs::write(source.path().join("secret.txt"), "not seeded").unwrap();
        std::os::unix::fs::symlink("/etc/hostname", source.path().join("skills/link")).unwrap();
        let entries = ["SOUL.md", "skills", "MISSING.md"].map(String::from);

        assert_eq!(
            seed(source.path(), destination.path(), &entries).unwrap(),
            2
        );
        assert_eq!(
            fs::read_to_string(destination.path().join("SOUL.md")).unwrap(),
            "soul"
        );
        assert!(destination.path().join("skills/github/SKILL.md").exists());
        assert!(!destination.path().join("skills/link").exists());
        assert!(!destination.path().join("secret.txt").exists());

        // A second start keeps the scope's edits instead of re-seeding over them.
        fs::write(destination.path().join("SOUL.md"), "edited").unwrap();
        assert_eq!(
            seed(source.path(), destination.path(), &entries).unwrap(),
            0
        );
        assert_eq!(
            fs::read_to_string(destination.path().join("SOUL.md")).unwrap(),
            "edited"
        );
    }

    #[test]
    fn entries_that_climb_out_are_refused() {
        let directory = tempfile::tempdir().unwrap();
        let refused = seed(directory.path(), directory.path(), &["../etc".to_string()]);
        assert!(matches!(refused, Err(SeedError::BadEntry(_))));
    }
}
