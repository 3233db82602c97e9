//! One fresh, empty HOME per call: nothing a call writes there (gh aliases and
//! extensions, git config, credential caches) is seen by the next call, and nothing of
//! Porter's own home (`~/.config/gh/hosts.yml`) is seen by any.
//!
//! Creates directories under the homes root given at start-up and removes them; never
//! touches anything else.

use std::{
    os::unix::fs::{DirBuilderExt, PermissionsExt},
    path::{Path, PathBuf},
};

/// The directory holding the per-call homes (mode 0700), emptied at start-up of
/// leftovers from a previous run.
#[derive(Debug)]
pub struct HomesRoot {
    path: PathBuf,
}

impl HomesRoot {
    /// Creates (or empties) the root.
    pub fn prepare(path: &Path) -> std::io::Result<Self> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(path)?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700))?;
        for entry in std::fs::read_dir(path)?.flatten() {
            remove_tree(&entry.path());
        }
        Ok(Self {
            path: path.to_owned(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A fresh home for one call (mode 0700, random name).
    pub fn create(&self) -> std::io::Result<CallHome> {
        let mut bytes = [0_u8; 12];
        getrandom::fill(&mut bytes).map_err(std::io::Error::other)?;
        let path = self.path.join(format!("call-{}", hex::encode(bytes)));
        // Not recursive: an existing directory (a clash, or a planted one) is an error.
        std::fs::DirBuilder::new().mode(0o700).create(&path)?;
        Ok(CallHome { path })
    }
}

/// A call's home; removed with everything in it by [`CallHome::remove`] once no
/// process of the call is left.
#[derive(Debug)]
pub struct CallHome {
    path: PathBuf,
}

impl CallHome {
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Removes the home (blocking; run it off the async workers).
    pub fn remove(self) {
        remove_tree(&self.path);
    }
}

/// Removes a tree, first giving its owner back write permission on directories a
/// call made read-only (`chmod 0500 ~/.config` must not leave the tree behind).
/// `remove_dir_all` never follows symlinks out of the tree.
fn remove_tree(path: &Path) {
    if std::fs::remove_dir_all(path).is_ok() || !path.exists() {
        return;
    }
    restore_permissions(path);
    if let Err(error) = std::fs::remove_dir_all(path) {
        tracing::warn!(path = %path.display(), %error, "failed to remove a call home");
    }
}

fn restore_permissions(path: &Path) {
    let Ok(metadata) = std::fs::symlink_metadata(path) else {
        return;
    };
    if !metadata.is_dir() {
        return;
    }
    let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700));
    if let Ok(entries) = std::fs::read_dir(path) {
        for entry in entries.flatten() {
            restore_permissions(&entry.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn homes_are_fresh_private_and_removed_even_when_made_read_only() {
        let directory = tempfile::tempdir().unwrap();
        let root = HomesRoot::prepare(&directory.path().join("homes")).unwrap();
        let first = root.create().unwrap();
        let second = root.create().unwrap();
        assert_ne!(first.path(), second.path());
        assert_eq!(std::fs::read_dir(first.path()).unwrap().count(), 0);
        let mode = std::fs::metadata(first.path())
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o700);

        let locked = first.path().join(".config/gh");
        std::fs::create_dir_all(&locked).unwrap();
        std::fs::write(locked.join("config.yml"), "aliases: {}").unwrap();
        std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o500)).unwrap();
        let path = first.path().to_owned();
        first.remove();
        assert!(!path.exists());

        // A restart clears what a crash left behind.
        let leftover = second.path().to_owned();
        HomesRoot::prepare(root.path()).unwrap();
        assert!(!leftover.exists());
    }
}
