//! Workspace containment: turns a path the model named into a file opened beneath the
//! workspace root, or a refusal.
//!
//! Touches only the workspace directory it is given, through file descriptors: every
//! open goes through `openat2(2)` with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
//! RESOLVE_NO_MAGICLINKS` relative to a descriptor of the root, so the kernel — not a
//! string check followed by an open — guarantees the file is inside the workspace
//! (no check-then-open race). Symlinks are refused everywhere, even ones that stay
//! inside: the role check runs on the path the model named, so that path must be the
//! file that is opened. Regular files with more than one hard link are refused (a
//! hard link can alias a file outside the workspace or a protected file inside it), and
//! so are FIFOs, sockets and devices. Error messages name only the path the model
//! gave, never a host path.

use std::{
    ffi::OsStr,
    fs::File,
    io::{Read, Write},
    os::unix::ffi::OsStrExt,
    path::{Component, Path},
    sync::atomic::{AtomicU64, Ordering},
};

use rustix::{
    fd::OwnedFd,
    fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags, Stat},
    io::Errno,
};

/// Sandbox-side names of the workspace the model may use in absolute paths; they map to
/// the workspace root (the sandbox mounts the real workspace at `/agent` and a copy at
/// `/workspace`).
const WORKSPACE_ALIASES: &[&str] = &["/workspace", "/agent"];

/// Longest path (in bytes) the tools accept.
const MAX_PATH_BYTES: usize = 4_096;

/// Resolution flags for every open: stay beneath the root, follow no symlink at all.
fn resolve_flags() -> ResolveFlags {
    ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS
}

/// Why a path was refused or a file operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    #[error("path {0:?} is empty or names the workspace itself")]
    Empty(String),
    #[error("path contains a NUL byte")]
    NulByte,
    #[error("path {0:?} contains control characters, backslashes or percent-encoded separators")]
    SuspiciousCharacters(String),
    #[error("path {0:?} is too long")]
    TooLong(String),
    #[error("path {0:?} uses '..'; name files relative to the workspace instead")]
    ParentComponent(String),
    #[error("path {0:?} is outside the workspace")]
    OutsideWorkspace(String),
    #[error("path {0:?} goes through a symbolic link; symbolic links are not followed")]
    Symlink(String),
    #[error("path {0:?} is a hard link shared with another file; refusing to use it")]
    HardLink(String),
    #[error("path {0:?} is not a regular file")]
    NotRegularFile(String),
    #[error("path {0:?} is a directory")]
    IsDirectory(String),
    #[error("file {0:?} does not exist")]
    NotFound(String),
    #[error("file {0:?} is larger than {1} bytes")]
    TooLarge(String, u64),
    #[error("failed to open the workspace")]
    Workspace,
    #[error("failed to access {path:?}: {reason}")]
    Io { path: String, reason: String },
}

impl PathError {
    /// Whether this error is a security refusal (as opposed to a missing file or an I/O error).
    pub fn is_refusal(&self) -> bool {
        !matches!(
            self,
            PathError::NotFound(_) | PathError::Io { .. } | PathError::Workspace
        )
    }
}

/// A path relative to the workspace root, lexically normalised: no `..`, no `.`, no
/// empty components, no NUL or control characters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkspacePath {
    components: Vec<String>,
    relative: String,
}

impl WorkspacePath {
    /// Parses a path the model named. `root` is the real workspace root; absolute paths
    /// are accepted only beneath it or beneath a sandbox alias (`/workspace`, `/agent`).
    pub fn parse(raw: &str, root: &Path) -> Result<Self, PathError> {
        if raw.contains('\0') {
            return Err(PathError::NulByte);
        }
        // Absolute paths are not echoed back: they may name host locations.
        let shown = if raw.starts_with('/') {
            "<absolute path>".to_string()
        } else {
            raw.to_string()
        };
        if raw.len() > MAX_PATH_BYTES {
            return Err(PathError::TooLong(shown));
        }
        if has_suspicious_characters(raw) {
            return Err(PathError::SuspiciousCharacters(shown));
        }
        let path = Path::new(raw);
        let relative_part: &Path = if path.is_absolute() {
            strip_workspace_prefix(path, root)
                .ok_or_else(|| PathError::OutsideWorkspace(shown.clone()))?
        } else {
            path
        };
        let mut components = Vec::new();
        for component in relative_part.components() {
            match component {
                Component::Normal(name) => {
                    let name = name
                        .to_str()
                        .ok_or_else(|| PathError::SuspiciousCharacters(shown.clone()))?;
                    if name.len() > 255 {
                        return Err(PathError::TooLong(shown));
                    }
                    components.push(name.to_string());
                }
                Component::CurDir => {}
                // `..` is refused even when it would stay inside: a path with `..` is never
                // needed, and refusing it keeps the role check and the open on one path.
                Component::ParentDir => return Err(PathError::ParentComponent(shown)),
                Component::RootDir | Component::Prefix(_) => {
                    return Err(PathError::OutsideWorkspace(shown));
                }
            }
        }
        if components.is_empty() {
            return Err(PathError::Empty(shown));
        }
        let relative = components.join("/");
        Ok(Self {
            components,
            relative,
        })
    }

    /// The normalised relative path (`memory/users/ana/notes.md`), used for role checks.
    pub fn as_str(&self) -> &str {
        &self.relative
    }

    fn parent_components(&self) -> &[String] {
        &self.components[..self.components.len() - 1]
    }

    fn file_name(&self) -> &str {
        self.components
            .last()
            .expect("a parsed path has at least one component")
    }
}

fn has_suspicious_characters(raw: &str) -> bool {
    if raw
        .chars()
        .any(|character| character.is_control() || character == '\\')
    {
        return true;
    }
    // Percent-encoded dots, slashes, backslashes and NULs are never decoded by us, but a
    // path carrying them is an escape attempt at some other layer: refuse it outright.
    let lower = raw.to_ascii_lowercase();
    ["%2e", "%2f", "%5c", "%00", "%25"]
        .iter()
        .any(|encoded| lower.contains(encoded))
}

fn strip_workspace_prefix<'a>(path: &'a Path, root: &Path) -> Option<&'a Path> {
    if let Ok(rest) = path.strip_prefix(root) {
        return Some(rest);
    }
    WORKSPACE_ALIASES
        .iter()
        .find_map(|alias| path.strip_prefix(alias).ok())
}

/// The workspace root, held open as a directory descriptor.
#[derive(Debug)]
pub struct Workspace {
    root: OwnedFd,
}

/// What a write did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteOutcome {
    /// The file did not exist before.
    Created,
    /// An existing file was replaced.
    Replaced,
}

static TEMPORARY_COUNTER: AtomicU64 = AtomicU64::new(0);

impl Workspace {
    /// Opens the workspace root directory.
    pub fn open(root: &Path) -> Result<Self, PathError> {
        let root = rustix::fs::open(
            root,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|_| PathError::Workspace)?;
        Ok(Self { root })
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
        .map_err(|errno| map_errno(errno, path))?;
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
            return Err(map_errno(errno, path));
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
            .map_err(|errno| map_errno(errno, path))
    }

    /// Opens the directory holding `path`, walking one component at a time so missing
    /// directories can be created beneath the root.
    fn open_parent(&self, path: &WorkspacePath, create: bool) -> Result<OwnedFd, PathError> {
        let directory_flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let mut current = rustix::fs::openat2(
            &self.root,
            ".",
            directory_flags,
            Mode::empty(),
            resolve_flags(),
        )
        .map_err(|_| PathError::Workspace)?;
        for component in path.parent_components() {
            let next = match rustix::fs::openat2(
                &current,
                component.as_str(),
                directory_flags,
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
                        Err(errno) => return Err(map_errno(errno, path)),
                    }
                    rustix::fs::openat2(
                        &current,
                        component.as_str(),
                        directory_flags,
                        Mode::empty(),
                        resolve_flags(),
                    )
                    .map_err(|errno| map_errno(errno, path))?
                }
                Err(errno) => return Err(map_errno(errno, path)),
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
        Err(errno) => Err(map_errno(errno, path)),
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
    .map_err(|errno| map_errno(errno, path))?;
    let after = rustix::fs::fstat(&file).map_err(|errno| map_errno(errno, path))?;
    check_plain_file(&after, path)?;
    if (after.st_dev, after.st_ino) != (before.st_dev, before.st_ino) {
        return Err(io_error(path, "file changed while it was being opened"));
    }
    Ok(file)
}

fn map_errno(errno: Errno, path: &WorkspacePath) -> PathError {
    let shown = path.as_str().to_string();
    match errno {
        Errno::NOENT | Errno::NOTDIR => PathError::NotFound(shown),
        Errno::LOOP => PathError::Symlink(shown),
        Errno::XDEV => PathError::OutsideWorkspace(shown),
        Errno::ISDIR => PathError::IsDirectory(shown),
        Errno::NXIO | Errno::OPNOTSUPP => PathError::NotRegularFile(shown),
        Errno::NAMETOOLONG => PathError::TooLong(shown),
        Errno::NOSYS => PathError::Io {
            path: shown,
            reason: "the kernel lacks openat2; refusing file access".to_string(),
        },
        other => PathError::Io {
            path: shown,
            reason: other.to_string(),
        },
    }
}

fn io_error(path: &WorkspacePath, reason: &str) -> PathError {
    PathError::Io {
        path: path.as_str().to_string(),
        reason: reason.to_string(),
    }
}

/// Whether a single path component is a plain, safe name (used for slugs in paths).
pub fn is_safe_component(name: &str) -> bool {
    !name.is_empty()
        && name != "."
        && name != ".."
        && name.len() <= 128
        && OsStr::new(name).as_bytes().iter().all(|byte| {
            byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'@' | b'+')
        })
}
