//! A root directory held open as a descriptor, and everything opened beneath it.
//!
//! Every open goes through `openat2(2)` with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
//! RESOLVE_NO_MAGICLINKS` relative to a descriptor of the root, so the kernel — not a
//! string check followed by an open — guarantees the file is inside the root (no
//! check-then-open race). Symlinks are refused everywhere, even ones that stay inside:
//! a role check runs on the path the caller named, so that path must be what is
//! opened. Regular files with more than one hard link are refused (a hard link can
//! alias a file outside the root or a protected file inside it), and so are FIFOs,
//! sockets and devices.

use std::{
    fs::File,
    io::{Read, Write},
    path::{Path, PathBuf},
    sync::atomic::{AtomicU64, Ordering},
};

use rustix::{
    fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd},
    fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags, Stat},
    io::Errno,
};

use crate::{BeneathPath, PathError, WorkspacePath, error::map_errno};

/// Resolution flags for every open: stay beneath the root, follow no symlink at all.
fn resolve_flags() -> ResolveFlags {
    ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS
}

const DIRECTORY_FLAGS: OFlags = OFlags::PATH.union(OFlags::DIRECTORY).union(OFlags::CLOEXEC);

/// A root directory (the workspace, or a sandbox's `/workspace` or `/agent`), held open
/// as a descriptor.
#[derive(Debug)]
pub struct Workspace {
    root: OwnedFd,
    root_path: PathBuf,
}

/// What a write did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteOutcome {
    /// The file did not exist before.
    Created,
    /// An existing file was replaced.
    Replaced,
}

/// A directory opened beneath a root: its descriptor, and the path that named it when
/// it was checked.
#[derive(Debug)]
pub struct Directory {
    descriptor: OwnedFd,
    path: PathBuf,
}

impl Directory {
    /// The root's path joined with the checked relative path. It named this very
    /// directory when the check ran; a caller that hands it to another process (as a
    /// working directory) gives that process a name, not the descriptor.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A name for this very directory that no rename or symlink can redirect:
    /// `/proc/self/fd/<descriptor>`. Given to `Command::current_dir`, the child enters
    /// it between fork and exec, while it still holds the descriptor (close-on-exec
    /// closes it only at exec), so the command starts in the directory that was
    /// checked even if its name now points elsewhere. Valid while `self` lives.
    pub fn entry_path(&self) -> PathBuf {
        PathBuf::from(format!("/proc/self/fd/{}", self.descriptor.as_raw_fd()))
    }
}

impl AsFd for Directory {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.descriptor.as_fd()
    }
}

static TEMPORARY_COUNTER: AtomicU64 = AtomicU64::new(0);

impl Workspace {
    /// Opens the root directory (its own path is trusted configuration: symlinks in it
    /// are followed once, here).
    pub fn open(root: &Path) -> Result<Self, PathError> {
        let root_descriptor = rustix::fs::open(root, DIRECTORY_FLAGS, Mode::empty())
            .map_err(|_| PathError::Workspace)?;
        Ok(Self {
            root: root_descriptor,
            root_path: root.to_path_buf(),
        })
    }

    /// The path the root was opened by.
    pub fn root_path(&self) -> &Path {
        &self.root_path
    }

    /// Opens the directory `path` names beneath the root (the root itself when `path`
    /// is empty). `shown` is how errors name it.
    ///
    /// The returned path is checked against the descriptor (same device and inode), so
    /// a component swapped for a symlink between the open and the check is caught.
    pub fn open_directory(&self, path: &BeneathPath, shown: &str) -> Result<Directory, PathError> {
        let relative = if path.is_root() { "." } else { path.as_str() };
        let descriptor = match rustix::fs::openat2(
            &self.root,
            relative,
            DIRECTORY_FLAGS,
            Mode::empty(),
            resolve_flags(),
        ) {
            Ok(descriptor) => descriptor,
            // ENOTDIR: either the last component is a file (say so) or one on the way is.
            Err(Errno::NOTDIR) => {
                return Err(
                    match rustix::fs::openat2(
                        &self.root,
                        relative,
                        OFlags::PATH | OFlags::CLOEXEC,
                        Mode::empty(),
                        resolve_flags(),
                    ) {
                        Ok(_) => PathError::NotDirectory(shown.to_string()),
                        Err(errno) => map_errno(errno, shown),
                    },
                );
            }
            Err(errno) => return Err(map_errno(errno, shown)),
        };
        let path = if path.is_root() {
            self.root_path.clone()
        } else {
            self.root_path.join(path.as_str())
        };
        let opened = rustix::fs::fstat(&descriptor).map_err(|errno| map_errno(errno, shown))?;
        let named = rustix::fs::stat(&path).map_err(|errno| map_errno(errno, shown))?;
        if (named.st_dev, named.st_ino) != (opened.st_dev, opened.st_ino) {
            return Err(PathError::Io {
                path: shown.to_string(),
                reason: "directory changed while it was being opened".to_string(),
            });
        }
        Ok(Directory { descriptor, path })
    }

    /// Reads a regular file, refusing anything larger than `max_bytes`.
    pub fn read(&self, path: &WorkspacePath, max_bytes: u64) -> Result<Vec<u8>, PathError> {
        let parent = self.open_parent(path, false)?;
        let file = open_regular(&parent, path, OFlags::RDONLY)?;
        let mut file = File::from(file);
        let mut contents = Vec::new();
        // Read one byte past the limit to detect oversized files without trusting st_size
        // (the file may grow between fstat and read).
        (&mut file)
            .take(max_bytes + 1)
            .read_to_end(&mut contents)
            .map_err(|error| io_error(path, &error.to_string()))?;
        if contents.len() as u64 > max_bytes {
            return Err(PathError::TooLarge(path.as_str().to_string(), max_bytes));
        }
        Ok(contents)
    }

    /// Reads a UTF-8 text file.
    pub fn read_text(&self, path: &WorkspacePath, max_bytes: u64) -> Result<String, PathError> {
        let bytes = self.read(path, max_bytes)?;
        String::from_utf8(bytes).map_err(|_| io_error(path, "file is not UTF-8 text"))
    }

    /// Whether the path names an existing regular file (symlinks, special files and
    /// escapes are errors, not `false`).
    pub fn exists(&self, path: &WorkspacePath) -> Result<bool, PathError> {
        let parent = match self.open_parent(path, false) {
            Ok(parent) => parent,
            Err(PathError::NotFound(_)) => return Ok(false),
            Err(error) => return Err(error),
        };
        match stat_entry(&parent, path)? {
            None => Ok(false),
            Some(stat) => check_plain_file(&stat, path).map(|()| true),
        }
    }

    /// Replaces (or creates) a file atomically: writes a temporary file beside it, syncs
    /// it, then renames it over the target. Missing parent directories are created when
    /// `create_directories` is set.
    pub fn write(
        &self,
        path: &WorkspacePath,
        contents: &[u8],
        create_directories: bool,
    ) -> Result<WriteOutcome, PathError> {
        let parent = self.open_parent(path, create_directories)?;
        let existing = stat_entry(&parent, path)?;
        let mode = match &existing {
            Some(stat) => {
                check_plain_file(stat, path)?;
                Mode::from_raw_mode(stat.st_mode & 0o777)
            }
            None => Mode::from_raw_mode(0o644),
        };
        let counter = TEMPORARY_COUNTER.fetch_add(1, Ordering::Relaxed);
        let temporary = format!(
            ".{}.saint-{}-{counter}.tmp",
            path.file_name(),
            std::process::id()
        );
        let file = rustix::fs::openat2(
            &parent,
            temporary.as_str(),
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            mode,
            resolve_flags(),
        )
        .map_err(|errno| map_errno(errno, path.as_str()))?;
        let mut file = File::from(file);
        let written = file.write_all(contents).and_then(|()| file.sync_all());
        drop(file);
        if let Err(error) = written {
            let _ = rustix::fs::unlinkat(&parent, temporary.as_str(), AtFlags::empty());
            return Err(io_error(path, &error.to_string()));
        }
        // rename(2) replaces the directory entry itself: if the target was swapped for a
        // symlink after the check above, the symlink is replaced, never followed.
        if let Err(errno) =
            rustix::fs::renameat(&parent, temporary.as_str(), &parent, path.file_name())
        {
            let _ = rustix::fs::unlinkat(&parent, temporary.as_str(), AtFlags::empty());
            return Err(map_errno(errno, path.as_str()));
        }
        Ok(if existing.is_some() {
            WriteOutcome::Replaced
        } else {
            WriteOutcome::Created
        })
    }

    /// Removes a regular, singly-linked file.
    pub fn remove(&self, path: &WorkspacePath) -> Result<(), PathError> {
        let parent = self.open_parent(path, false)?;
        let stat = stat_entry(&parent, path)?
            .ok_or_else(|| PathError::NotFound(path.as_str().to_string()))?;
        check_plain_file(&stat, path)?;
        rustix::fs::unlinkat(&parent, path.file_name(), AtFlags::empty())
            .map_err(|errno| map_errno(errno, path.as_str()))
    }

    /// Opens the directory holding `path`, walking one component at a time so missing
    /// directories can be created beneath the root.
    fn open_parent(&self, path: &WorkspacePath, create: bool) -> Result<OwnedFd, PathError> {
        let mut current = rustix::fs::openat2(
            &self.root,
            ".",
            DIRECTORY_FLAGS,
            Mode::empty(),
            resolve_flags(),
        )
        .map_err(|_| PathError::Workspace)?;
        for component in path.parent_components() {
            let next = match rustix::fs::openat2(
                &current,
                component.as_str(),
                DIRECTORY_FLAGS,
                Mode::empty(),
                resolve_flags(),
            ) {
                Ok(next) => next,
                Err(Errno::NOENT) if create => {
                    match rustix::fs::mkdirat(
                        &current,
                        component.as_str(),
                        Mode::from_raw_mode(0o755),
                    ) {
                        Ok(()) | Err(Errno::EXIST) => {}
                        Err(errno) => return Err(map_errno(errno, path.as_str())),
                    }
                    rustix::fs::openat2(
                        &current,
                        component.as_str(),
                        DIRECTORY_FLAGS,
                        Mode::empty(),
                        resolve_flags(),
                    )
                    .map_err(|errno| map_errno(errno, path.as_str()))?
                }
                Err(errno) => return Err(map_errno(errno, path.as_str())),
            };
            current = next;
        }
        Ok(current)
    }
}

/// Stats the final component without following it; `None` when it does not exist.
fn stat_entry(parent: &OwnedFd, path: &WorkspacePath) -> Result<Option<Stat>, PathError> {
    match rustix::fs::statat(parent, path.file_name(), AtFlags::SYMLINK_NOFOLLOW) {
        Ok(stat) => Ok(Some(stat)),
        Err(Errno::NOENT) => Ok(None),
        Err(errno) => Err(map_errno(errno, path.as_str())),
    }
}

/// Refuses anything but a regular file with a single link.
fn check_plain_file(stat: &Stat, path: &WorkspacePath) -> Result<(), PathError> {
    let shown = path.as_str().to_string();
    match FileType::from_raw_mode(stat.st_mode) {
        FileType::RegularFile => {}
        FileType::Directory => return Err(PathError::IsDirectory(shown)),
        FileType::Symlink => return Err(PathError::Symlink(shown)),
        _ => return Err(PathError::NotRegularFile(shown)),
    }
    #[allow(clippy::unnecessary_cast)] // st_nlink is u32 on some architectures, u64 on others.
    if stat.st_nlink as u64 > 1 {
        return Err(PathError::HardLink(shown));
    }
    Ok(())
}

/// Opens the final component as a regular file. The entry is checked before opening (so
/// a FIFO or device is never opened at all) and the opened descriptor is checked again
/// (the decision is made on what was actually opened).
fn open_regular(
    parent: &OwnedFd,
    path: &WorkspacePath,
    access: OFlags,
) -> Result<OwnedFd, PathError> {
    let before =
        stat_entry(parent, path)?.ok_or_else(|| PathError::NotFound(path.as_str().to_string()))?;
    check_plain_file(&before, path)?;
    let file = rustix::fs::openat2(
        parent,
        path.file_name(),
        access | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
        Mode::empty(),
        resolve_flags(),
    )
    .map_err(|errno| map_errno(errno, path.as_str()))?;
    let after = rustix::fs::fstat(&file).map_err(|errno| map_errno(errno, path.as_str()))?;
    check_plain_file(&after, path)?;
    if (after.st_dev, after.st_ino) != (before.st_dev, before.st_ino) {
        return Err(io_error(path, "file changed while it was being opened"));
    }
    Ok(file)
}

fn io_error(path: &WorkspacePath, reason: &str) -> PathError {
    PathError::Io {
        path: path.as_str().to_string(),
        reason: reason.to_string(),
    }
}
