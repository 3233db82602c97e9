//! What a sandbox mounts (read-only) at `/agent`: whole workspace folders and single
//! files, decided from the caller's role by the tools' guard (`saint_tools::guard::view`).
//! The set of mounts can change when files appear; backends compare it before each
//! command and restart a sandbox whose view is out of date.

use std::{
    fmt,
    path::{Path, PathBuf},
};

use sha2::{Digest, Sha256};

/// Most mounts one view may have: each is a bubblewrap argument or a Kubernetes
/// volume mount, and a pod spec with thousands of mounts is refused or slow to start.
pub const MAX_VIEW_ENTRIES: usize = 256;

/// One mount of the view.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ViewEntry {
    /// Workspace-relative, `/`-separated, never empty, no `.` or `..` components.
    pub path: String,
    /// A whole directory or one regular file.
    pub kind: EntryKind,
    /// A file's inode: a mount of one file holds that inode, so a file replaced by a
    /// rename (an atomic write) is a different view and needs a new mount. 0 for
    /// directories, whose mounts follow their contents.
    pub inode: u64,
}

/// What a [`ViewEntry`] mounts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum EntryKind {
    #[default]
    Directory,
    File,
}

/// The mounts of one caller's `/agent`, sorted by path. No entry lies below another: a
/// directory mounted whole is never walked into.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct View {
    entries: Vec<ViewEntry>,
}

impl View {
    /// A view that shows nothing.
    pub const fn empty() -> Self {
        Self {
            entries: Vec::new(),
        }
    }

    /// A view of exactly these entries (sorted).
    pub fn from_entries(mut entries: Vec<ViewEntry>) -> Self {
        entries.sort();
        entries.dedup();
        Self { entries }
    }

    /// The mounts, sorted by path.
    pub fn entries(&self) -> &[ViewEntry] {
        &self.entries
    }

    /// The host path of each entry below `workspace`.
    pub fn sources<'a>(
        &'a self,
        workspace: &'a Path,
    ) -> impl Iterator<Item = (&'a ViewEntry, PathBuf)> + 'a {
        self.entries
            .iter()
            .map(move |entry| (entry, workspace.join(&entry.path)))
    }

    /// A short digest of the mounts (for logs and labels).
    pub fn digest(&self) -> String {
        let mut hasher = Sha256::new();
        for entry in &self.entries {
            hasher.update(entry.path.as_bytes());
            hasher.update([0, entry.kind as u8]);
            hasher.update(entry.inode.to_be_bytes());
        }
        hex::encode(hasher.finalize())[..12].to_string()
    }
}

impl fmt::Display for View {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        let paths: Vec<String> = self
            .entries
            .iter()
            .map(|entry| match entry.kind {
                EntryKind::Directory => format!("{}/", entry.path),
                EntryKind::File => entry.path.clone(),
            })
            .collect();
        write!(formatter, "[{}]", paths.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_digest_follows_the_entries() {
        let one = View::from_entries(vec![ViewEntry {
            path: "data".into(),
            kind: EntryKind::Directory,
            inode: 0,
        }]);
        let two = View::from_entries(vec![ViewEntry {
            path: "data".into(),
            kind: EntryKind::File,
            inode: 7,
        }]);
        assert_ne!(one.digest(), two.digest());
        assert_eq!(one.digest(), one.clone().digest());
    }
}
