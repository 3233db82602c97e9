//! The caller's view of the workspace: which subtrees and single files a sandbox
//! mounts (read-only) at `/agent`, computed from the caller's role so that `exec` can
//! show nothing the `read` tool would refuse.
//!
//! Reads the workspace's directory entries (never file contents). A directory is
//! mounted whole only when the role's patterns make everything below it readable,
//! whatever appears there later; otherwise it is walked and each readable regular file
//! is mounted on its own. Runtime state (`.saint/`, `sessions/`, `logs/`, `config/`)
//! is never walked into. Symbolic links, hard-linked files, sockets and devices are
//! left out, as the file tools refuse them. The set of mounts can change when files
//! appear; backends compare it before each command and restart a sandbox whose view
//! is out of date.

use std::{
    fmt, fs, io,
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
};

use sha2::{Digest, Sha256};

use crate::guard::role_paths::RolePaths;

/// Most mounts one view may have: each is a bubblewrap argument or a Kubernetes
/// volume mount, and a pod spec with thousands of mounts is refused or slow to start.
pub const MAX_VIEW_ENTRIES: usize = 256;

/// One mount of the view.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ViewEntry {
    /// Workspace-relative, `/`-separated, never empty, no `.` or `..` components.
    pub path: String,
    /// A whole directory or one regular file.
    pub kind: EntryKind,
}

/// What a [`ViewEntry`] mounts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum EntryKind {
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

/// Why a view could not be computed.
#[derive(Debug, thiserror::Error)]
pub enum ViewError {
    #[error("failed to read workspace directory {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error(
        "the role's read rules select more than {MAX_VIEW_ENTRIES} separate files and \
         folders for the sandbox (so far: {first}, …); name whole folders in the role's \
         read globs (like `data/**`) instead of single files"
    )]
    TooManyEntries { first: String },
}

/// Computes the view of `workspace` for a caller with `rules`.
pub fn compute(workspace: &Path, rules: &RolePaths) -> Result<View, ViewError> {
    let mut entries = Vec::new();
    // The root itself is never one mount: runtime state lies directly below it.
    if !rules.excludes_subtree("") {
        walk(workspace, "", rules, &mut entries)?;
    }
    Ok(View::from_entries(entries))
}

fn walk(
    workspace: &Path,
    directory: &str,
    rules: &RolePaths,
    entries: &mut Vec<ViewEntry>,
) -> Result<(), ViewError> {
    let host = workspace.join(directory);
    let read_error = |source| ViewError::Read {
        path: host.clone(),
        source,
    };
    let mut children: Vec<(String, fs::Metadata)> = Vec::new();
    for child in fs::read_dir(&host).map_err(read_error)? {
        let child = child.map_err(read_error)?;
        let Some(name) = child.file_name().to_str().map(str::to_string) else {
            tracing::debug!(directory, "skipping a file name that is not UTF-8");
            continue;
        };
        if !is_plain_name(&name) {
            continue;
        }
        // `symlink_metadata`: a link is seen as a link, never followed.
        match fs::symlink_metadata(child.path()) {
            Ok(metadata) => children.push((name, metadata)),
            // Removed since the directory was read.
            Err(error) if error.kind() == io::ErrorKind::NotFound => {}
            Err(source) => {
                return Err(ViewError::Read {
                    path: child.path(),
                    source,
                });
            }
        }
    }
    children.sort_by(|left, right| left.0.cmp(&right.0));
    for (name, metadata) in children {
        let path = if directory.is_empty() {
            name
        } else {
            format!("{directory}/{name}")
        };
        let file_type = metadata.file_type();
        if file_type.is_dir() {
            if rules.covers_subtree(&path) {
                push(
                    entries,
                    ViewEntry {
                        path,
                        kind: EntryKind::Directory,
                    },
                )?;
            } else if !rules.excludes_subtree(&path) {
                walk(workspace, &path, rules, entries)?;
            }
        } else if file_type.is_file() && metadata.nlink() == 1 && rules.check_read(&path).is_ok() {
            push(
                entries,
                ViewEntry {
                    path,
                    kind: EntryKind::File,
                },
            )?;
        }
    }
    Ok(())
}

fn push(entries: &mut Vec<ViewEntry>, entry: ViewEntry) -> Result<(), ViewError> {
    if entries.len() >= MAX_VIEW_ENTRIES {
        let first: Vec<&str> = entries
            .iter()
            .take(3)
            .map(|entry| entry.path.as_str())
            .collect();
        return Err(ViewError::TooManyEntries {
            first: first.join(", "),
        });
    }
    entries.push(entry);
    Ok(())
}

/// Names the file tools accept as a path component: no control characters, no
/// backslash, not `.`/`..` (a mount path must also never contain a `:` or `,` that
/// bubblewrap or a kubelet could read as a separator).
fn is_plain_name(name: &str) -> bool {
    name != "."
        && name != ".."
        && !name
            .chars()
            .any(|character| character.is_control() || matches!(character, '\\' | ':' | ','))
}

#[cfg(test)]
mod tests {
    use saint_config::{FileAccessConfig, FileGlobs, RoleConfig};

    use super::*;

    fn role(read: &[&str], write: &[&str], external: bool) -> RoleConfig {
        let mut role: RoleConfig = serde_json::from_value(serde_json::json!({})).unwrap();
        role.files = FileGlobs {
            read: read.iter().map(|glob| glob.to_string()).collect(),
            write: write.iter().map(|glob| glob.to_string()).collect(),
            deny_write: Vec::new(),
        };
        role.external = external;
        role
    }

    fn rules(role: &RoleConfig, slug: &str) -> RolePaths {
        RolePaths::new(role, &FileAccessConfig::default(), slug).unwrap()
    }

    fn company_workspace() -> tempfile::TempDir {
        let workspace = tempfile::tempdir().unwrap();
        for file in [
            "SOUL.md",
            "IDENTITY.md",
            "COMPANY.md",
            "memory/shared/facts.md",
            "memory/shared/deep/more.md",
            "memory/private/finance.md",
            "memory/users/acme-ivo/notes.md",
            "memory/users/acme-ana/secret.md",
            "memory/2026-11-01.md",
            "data/report.csv",
            ".saint/memory/index.sqlite",
            "sessions/transcripts.sqlite3",
            "logs/usage.jsonl",
            "config/bot.json",
        ] {
            let path = workspace.path().join(file);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(path, file).unwrap();
        }
        workspace
    }

    fn paths(view: &View) -> Vec<String> {
        view.entries()
            .iter()
            .map(|entry| match entry.kind {
                EntryKind::Directory => format!("{}/", entry.path),
                EntryKind::File => entry.path.clone(),
            })
            .collect()
    }

    #[test]
    fn an_employee_sees_shared_memory_their_own_folder_and_named_files_only() {
        let workspace = company_workspace();
        let employee = role(
            &[
                "memory/shared/**",
                "memory/users/<self>/**",
                "data/**",
                "SOUL.md",
            ],
            &["memory/users/<self>/**"],
            false,
        );
        let view = compute(workspace.path(), &rules(&employee, "acme-ivo")).unwrap();
        assert_eq!(
            paths(&view),
            [
                "SOUL.md",
                "data/",
                "memory/shared/",
                "memory/users/acme-ivo/"
            ]
        );
    }

    #[test]
    fn the_owner_sees_everything_but_runtime_state() {
        let workspace = company_workspace();
        let owner = role(&["**"], &["**"], false);
        let view = compute(workspace.path(), &rules(&owner, "acme-ana")).unwrap();
        assert_eq!(
            paths(&view),
            ["COMPANY.md", "IDENTITY.md", "SOUL.md", "data/", "memory/"]
        );
    }

    #[test]
    fn a_stranger_with_no_read_globs_sees_nothing() {
        let workspace = company_workspace();
        let view = compute(workspace.path(), &rules(&role(&[], &[], true), "guest")).unwrap();
        assert!(view.entries().is_empty(), "{view}");
    }

    #[test]
    fn non_recursive_globs_mount_single_files_and_links_are_left_out() {
        let workspace = company_workspace();
        let root = workspace.path();
        std::os::unix::fs::symlink(
            root.join("memory/private/finance.md"),
            root.join("memory/x.md"),
        )
        .unwrap();
        fs::hard_link(
            root.join("memory/private/finance.md"),
            root.join("memory/linked.md"),
        )
        .unwrap();
        let reader = role(&["memory/*.md"], &[], false);
        let view = compute(root, &rules(&reader, "acme-ivo")).unwrap();
        // `memory/*.md` matches below memory/ too (`*` crosses `/`), so each matching
        // file is mounted on its own; the link and the hard link are not. The asker's
        // own folder (writable for every internal role) is whole.
        assert_eq!(
            paths(&view),
            [
                "memory/2026-11-01.md",
                "memory/shared/deep/more.md",
                "memory/shared/facts.md",
                "memory/users/acme-ana/secret.md",
                "memory/users/acme-ivo/",
            ]
        );
    }

    #[test]
    fn too_many_single_files_are_refused_with_advice() {
        let workspace = tempfile::tempdir().unwrap();
        fs::create_dir(workspace.path().join("notes")).unwrap();
        for index in 0..=MAX_VIEW_ENTRIES {
            fs::write(workspace.path().join(format!("notes/{index}.md")), "x").unwrap();
        }
        let reader = role(&["notes/*.md"], &[], false);
        let error = compute(workspace.path(), &rules(&reader, "acme-ivo")).unwrap_err();
        assert!(error.to_string().contains("data/**"), "{error}");
    }

    #[test]
    fn the_digest_follows_the_entries() {
        let one = View::from_entries(vec![ViewEntry {
            path: "data".into(),
            kind: EntryKind::Directory,
        }]);
        let two = View::from_entries(vec![ViewEntry {
            path: "data".into(),
            kind: EntryKind::File,
        }]);
        assert_ne!(one.digest(), two.digest());
        assert_eq!(one.digest(), one.clone().digest());
    }
}
