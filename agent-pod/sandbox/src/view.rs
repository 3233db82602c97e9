//! What a sandbox mounts (read-only) at `/agent`: whole workspace folders and single
//! files, decided from the caller's role by the tools' guard
//! (`saint_tools::guard::caller_view`), each naming the very object (device, inode) the
//! guard judged. The set of mounts can change when files appear; backends compare it
//! before each command and restart a sandbox whose view is out of date.
//!
//! [`View::open`] is the bind side for a backend that mounts descriptors (local:
//! bubblewrap's `--ro-bind-fd`): each entry opened beneath the workspace without
//! following any symbolic link, and checked to be the object the guard judged, so a
//! rename between the walk and the mount cannot change what is mounted. Reads directory
//! entries and metadata only, never file contents.

use std::{
    ffi::OsStr,
    fmt, io,
    os::unix::ffi::OsStrExt,
    path::{Path, PathBuf},
};

use rustix::{
    fd::{AsFd, BorrowedFd, OwnedFd},
    fs::{AtFlags, Dir, FileType, Mode, OFlags, ResolveFlags, Stat},
    io::Errno,
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
    /// The device of the directory or file the walk judged (see `inode`).
    pub device: u64,
    /// The inode of the directory or file the walk judged. A mount holds that object:
    /// one replaced by a rename (an atomic write, a swapped folder) is a different view
    /// and needs a new mount, and [`View::open`] refuses a path that names anything
    /// else now.
    pub inode: u64,
}

/// What a [`ViewEntry`] mounts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum EntryKind {
    /// A folder holding only folders and regular files with one link each.
    #[default]
    Directory,
    /// A regular file with one link.
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

    /// A short digest of the mounts (for logs and labels).
    pub fn digest(&self) -> String {
        let mut hasher = Sha256::new();
        for entry in &self.entries {
            hasher.update(entry.path.as_bytes());
            hasher.update([0, entry.kind as u8]);
            hasher.update(entry.device.to_be_bytes());
            hasher.update(entry.inode.to_be_bytes());
        }
        hex::encode(hasher.finalize())[..12].to_string()
    }

    /// Opens every entry beneath `workspace` and checks it is the object the walk
    /// judged: the same kind, device and inode, a file still with one link, a folder
    /// still holding no symbolic link, hard-linked file or special file anywhere below
    /// it. Any difference refuses the whole view: the workspace changed since the view
    /// was computed, and a sandbox must not start with a view nobody judged.
    ///
    /// Every open is `openat2(2)` with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
    /// RESOLVE_NO_MAGICLINKS` (the rules `saint-paths` opens by), so a component
    /// renamed to a symbolic link fails instead of being followed.
    pub fn open(&self, workspace: &Path) -> Result<OpenedView, OpenError> {
        // The workspace's own path is configuration: symlinks in it are followed once.
        let root = rustix::fs::open(
            workspace,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|errno| OpenError::Workspace {
            path: workspace.to_path_buf(),
            source: errno.into(),
        })?;
        let mounts = self
            .entries
            .iter()
            .map(|entry| Ok((entry.path.clone(), open_entry(&root, entry)?)))
            .collect::<Result<_, OpenError>>()?;
        Ok(OpenedView { mounts })
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

/// A view's entries, opened and checked by [`View::open`]: what a backend binds.
/// Dropping it closes the descriptors.
#[derive(Debug)]
pub struct OpenedView {
    mounts: Vec<(String, OwnedFd)>,
}

impl OpenedView {
    /// Each mount: its path below `/agent` and an `O_PATH` descriptor of the object to
    /// bind there (close-on-exec: a backend that hands it to a child clears that itself).
    pub fn mounts(&self) -> impl Iterator<Item = (&str, BorrowedFd<'_>)> {
        self.mounts
            .iter()
            .map(|(path, descriptor)| (path.as_str(), descriptor.as_fd()))
    }
}

/// Why [`View::open`] refused a view.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("failed to open the workspace {path}")]
    Workspace {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error(
        "the view entry {path:?} changed after the view was computed: {reason}; the sandbox \
         is not started with it"
    )]
    Changed { path: String, reason: String },
    #[error("failed to open the view entry {path:?}")]
    Io {
        path: String,
        #[source]
        source: io::Error,
    },
}

/// Resolution for every open: beneath the directory opened from, through no symlink.
fn resolve() -> ResolveFlags {
    ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS
}

/// Opens one entry (`O_PATH`) and checks it against what the walk judged.
fn open_entry(root: &OwnedFd, entry: &ViewEntry) -> Result<OwnedFd, OpenError> {
    let changed = |reason: &str| OpenError::Changed {
        path: entry.path.clone(),
        reason: reason.to_string(),
    };
    let failed = |errno: Errno| OpenError::Io {
        path: entry.path.clone(),
        source: errno.into(),
    };
    // O_NOFOLLOW with O_PATH: a final symlink is opened as itself (and refused below as
    // the wrong kind); a symlink on the way fails the open (RESOLVE_NO_SYMLINKS).
    let descriptor = rustix::fs::openat2(
        root,
        entry.path.as_str(),
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
        resolve(),
    )
    .map_err(|errno| match errno {
        Errno::LOOP | Errno::XDEV => changed("a folder on its path is a symbolic link now"),
        Errno::NOENT | Errno::NOTDIR => changed("it is gone"),
        other => failed(other),
    })?;
    let stat = rustix::fs::fstat(&descriptor).map_err(failed)?;
    let (expected, named) = match entry.kind {
        EntryKind::Directory => (FileType::Directory, "folder"),
        EntryKind::File => (FileType::RegularFile, "regular file"),
    };
    if FileType::from_raw_mode(stat.st_mode) != expected {
        return Err(changed(&format!(
            "it is no longer a {named} (a symbolic link, say)"
        )));
    }
    if identity(&stat) != (entry.device, entry.inode) {
        return Err(changed(&format!("it is another {named} now")));
    }
    match entry.kind {
        EntryKind::File if links(&stat) != 1 => Err(changed("it has another hard link now")),
        EntryKind::File => Ok(descriptor),
        EntryKind::Directory => {
            check_tree(&descriptor).map_err(|problem| match problem {
                TreeProblem::Planted(inside) => changed(&format!(
                    "{inside:?} inside it is a symbolic link, a hard-linked file or a special \
                     file now"
                )),
                TreeProblem::Io(errno) => failed(errno),
            })?;
            Ok(descriptor)
        }
    }
}

/// Why a folder may not be mounted whole after all.
enum TreeProblem {
    /// This path below the folder is not a folder or a regular file with one link.
    Planted(String),
    Io(Errno),
}

/// Lists everything below `folder` (by descriptor, never following a link): a folder
/// the walk judged whole-mountable must still hold only folders and regular files with
/// one link. A hard link planted there since would show a file `read` refuses; a socket
/// would let the sandbox connect to whoever listens on it.
fn check_tree(folder: &OwnedFd) -> Result<(), TreeProblem> {
    // Paths relative to the folder, each reopened beneath it: no descriptor is held per
    // pending directory, however wide the tree.
    let mut pending = vec![PathBuf::from(".")];
    while let Some(directory) = pending.pop() {
        let opened = match rustix::fs::openat2(
            folder,
            &directory,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
            resolve(),
        ) {
            Ok(opened) => opened,
            // Removed since it was listed: nothing of it can be mounted.
            Err(Errno::NOENT) => continue,
            Err(Errno::LOOP | Errno::XDEV | Errno::NOTDIR) => {
                return Err(TreeProblem::Planted(shown(&directory)));
            }
            Err(errno) => return Err(TreeProblem::Io(errno)),
        };
        let mut listing = Dir::new(opened).map_err(TreeProblem::Io)?;
        while let Some(item) = listing.read() {
            let item = item.map_err(TreeProblem::Io)?;
            let name = item.file_name();
            if matches!(name.to_bytes(), b"." | b"..") {
                continue;
            }
            let below = directory.join(OsStr::from_bytes(name.to_bytes()));
            let directory_descriptor = listing.fd().map_err(TreeProblem::Io)?;
            let stat =
                match rustix::fs::statat(directory_descriptor, name, AtFlags::SYMLINK_NOFOLLOW) {
                    Ok(stat) => stat,
                    Err(Errno::NOENT) => continue,
                    Err(errno) => return Err(TreeProblem::Io(errno)),
                };
            match FileType::from_raw_mode(stat.st_mode) {
                FileType::Directory => pending.push(below),
                FileType::RegularFile if links(&stat) == 1 => {}
                _ => return Err(TreeProblem::Planted(shown(&below))),
            }
        }
    }
    Ok(())
}

/// A path below a folder as errors show it (`deep/x.md`).
fn shown(relative: &Path) -> String {
    let text = relative.to_string_lossy();
    text.strip_prefix("./").unwrap_or(&text).to_string()
}

#[allow(clippy::unnecessary_cast)] // st_dev and st_ino differ in width between architectures.
fn identity(stat: &Stat) -> (u64, u64) {
    (stat.st_dev as u64, stat.st_ino as u64)
}

#[allow(clippy::unnecessary_cast)] // st_nlink is u32 on some architectures, u64 on others.
fn links(stat: &Stat) -> u64 {
    stat.st_nlink as u64
}

#[cfg(test)]
mod tests {
    use std::{
        fs,
        os::unix::fs::{MetadataExt, symlink},
    };

    use super::*;

    #[test]
    fn the_digest_follows_the_entries() {
        let one = View::from_entries(vec![ViewEntry {
            path: "data".into(),
            kind: EntryKind::Directory,
            device: 1,
            inode: 7,
        }]);
        let two = View::from_entries(vec![ViewEntry {
            path: "data".into(),
            kind: EntryKind::File,
            device: 1,
            inode: 7,
        }]);
        assert_ne!(one.digest(), two.digest());
        assert_eq!(one.digest(), one.clone().digest());
    }

    /// An entry for what `path` names now, as the walk records it.
    fn judged(workspace: &Path, path: &str) -> ViewEntry {
        let metadata = fs::symlink_metadata(workspace.join(path)).unwrap();
        ViewEntry {
            path: path.to_string(),
            kind: if metadata.is_dir() {
                EntryKind::Directory
            } else {
                EntryKind::File
            },
            device: metadata.dev(),
            inode: metadata.ino(),
        }
    }

    fn acme_workspace() -> tempfile::TempDir {
        let workspace = tempfile::tempdir().unwrap();
        for file in [
            "SOUL.md",
            "memory/shared/facts.md",
            "memory/shared/deep/more.md",
            "memory/private/finance.md",
        ] {
            let path = workspace.path().join(file);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(path, file).unwrap();
        }
        workspace
    }

    fn refusal(view: &View, workspace: &Path) -> String {
        view.open(workspace).unwrap_err().to_string()
    }

    #[test]
    fn entries_open_as_the_objects_the_walk_judged() {
        let workspace = acme_workspace();
        let root = workspace.path();
        let view = View::from_entries(vec![judged(root, "SOUL.md"), judged(root, "memory/shared")]);
        let opened = view.open(root).unwrap();
        let mounts: Vec<(&str, (u64, u64))> = opened
            .mounts()
            .map(|(path, descriptor)| (path, identity(&rustix::fs::fstat(descriptor).unwrap())))
            .collect();
        let expected: Vec<(&str, (u64, u64))> = view
            .entries()
            .iter()
            .map(|entry| (entry.path.as_str(), (entry.device, entry.inode)))
            .collect();
        assert_eq!(mounts, expected);
        // Close-on-exec until a backend hands them to its child.
        for (_, descriptor) in opened.mounts() {
            assert!(
                rustix::io::fcntl_getfd(descriptor)
                    .unwrap()
                    .contains(rustix::io::FdFlags::CLOEXEC)
            );
        }
    }

    #[test]
    fn an_entry_renamed_to_a_symlink_into_private_memory_is_refused() {
        // The folder swapped for a link to the private one.
        let workspace = acme_workspace();
        let root = workspace.path();
        let view = View::from_entries(vec![judged(root, "memory/shared")]);
        fs::rename(root.join("memory/shared"), root.join("memory/.away")).unwrap();
        symlink("private", root.join("memory/shared")).unwrap();
        let refused = refusal(&view, root);
        assert!(
            refused.contains("\"memory/shared\"") && refused.contains("no longer a folder"),
            "{refused}"
        );

        // A folder on the way swapped for a link, even to the very same folder.
        let workspace = acme_workspace();
        let root = workspace.path();
        let view = View::from_entries(vec![judged(root, "memory/shared/deep")]);
        fs::rename(root.join("memory"), root.join("away")).unwrap();
        symlink("away", root.join("memory")).unwrap();
        let refused = refusal(&view, root);
        assert!(refused.contains("symbolic link now"), "{refused}");

        // The file swapped for a link to a private file.
        let workspace = acme_workspace();
        let root = workspace.path();
        let view = View::from_entries(vec![judged(root, "SOUL.md")]);
        fs::rename(root.join("SOUL.md"), root.join("SOUL.md.away")).unwrap();
        symlink("memory/private/finance.md", root.join("SOUL.md")).unwrap();
        let refused = refusal(&view, root);
        assert!(refused.contains("no longer a regular file"), "{refused}");
    }

    #[test]
    fn another_object_at_the_same_path_is_refused() {
        let workspace = acme_workspace();
        let root = workspace.path();
        let view = View::from_entries(vec![judged(root, "SOUL.md"), judged(root, "memory/shared")]);
        // The private folder renamed into the shared folder's place.
        fs::rename(root.join("memory/shared"), root.join("memory/.away")).unwrap();
        fs::rename(root.join("memory/private"), root.join("memory/shared")).unwrap();
        let refused = refusal(&view, root);
        assert!(refused.contains("another folder now"), "{refused}");
        fs::rename(root.join("memory/shared"), root.join("memory/private")).unwrap();
        fs::rename(root.join("memory/.away"), root.join("memory/shared")).unwrap();
        // A hard link of a private file in the file's place: another inode.
        fs::remove_file(root.join("SOUL.md")).unwrap();
        fs::hard_link(root.join("memory/private/finance.md"), root.join("SOUL.md")).unwrap();
        let refused = refusal(&view, root);
        assert!(refused.contains("another regular file now"), "{refused}");
        // The judged file itself, hard-linked since.
        let finance = View::from_entries(vec![judged(root, "memory/shared/facts.md")]);
        fs::hard_link(
            root.join("memory/shared/facts.md"),
            root.join("memory/private/alias.md"),
        )
        .unwrap();
        assert!(refusal(&finance, root).contains("another hard link now"));
        // Gone.
        let gone = View::from_entries(vec![judged(root, "memory/shared/deep/more.md")]);
        fs::remove_file(root.join("memory/shared/deep/more.md")).unwrap();
        assert!(refusal(&gone, root).contains("it is gone"));
    }

    #[test]
    fn a_link_or_socket_planted_below_a_whole_folder_since_the_walk_is_refused() {
        let workspace = acme_workspace();
        let root = workspace.path();
        let view = View::from_entries(vec![judged(root, "memory/shared")]);
        assert!(view.open(root).is_ok());
        let planted = root.join("memory/shared/deep/finance.md");
        fs::hard_link(root.join("memory/private/finance.md"), &planted).unwrap();
        let refused = refusal(&view, root);
        assert!(
            refused.contains("\"deep/finance.md\" inside it"),
            "{refused}"
        );
        fs::remove_file(&planted).unwrap();
        symlink("../../private/finance.md", &planted).unwrap();
        assert!(refusal(&view, root).contains("\"deep/finance.md\" inside it"));
        fs::remove_file(&planted).unwrap();
        let _listener =
            std::os::unix::net::UnixListener::bind(root.join("memory/shared/agent.sock")).unwrap();
        assert!(refusal(&view, root).contains("\"agent.sock\" inside it"));
        fs::remove_file(root.join("memory/shared/agent.sock")).unwrap();
        // Ordinary new files and folders are what a whole folder is for.
        fs::create_dir_all(root.join("memory/shared/new/deeper")).unwrap();
        fs::write(root.join("memory/shared/new/deeper/note.md"), "new").unwrap();
        assert!(view.open(root).is_ok());
    }
}
