//! The caller's view of the workspace: which subtrees and single files a sandbox
//! mounts (read-only) at `/agent`, computed from the caller's role so that `exec` can
//! show nothing the `read` tool would refuse.
//!
//! Reads the workspace's directory entries (never file contents). A directory is
//! mounted whole only when the role's patterns make everything below it readable,
//! whatever appears there later, and it holds nothing the file tools refuse: it is
//! walked to the bottom, and one symbolic link, hard-linked file, socket, FIFO or device
//! anywhere below it (a hard link shows the file it shares, whatever its other name; a
//! socket lets the sandbox connect to its listener) mounts its entries instead. Other
//! directories are walked and each readable regular file is mounted on its own. Runtime
//! state (`.saint/`, `sessions/`, `logs/`, `config/`) is never walked into. Symbolic
//! links, hard-linked files, sockets and devices are never mounted.
//!
//! Each entry records the device and inode it was judged by: a backend binds that very
//! object or refuses (`saint_sandbox::View::open`).

use std::{
    collections::HashMap,
    fs, io,
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
    time::{Duration, SystemTime},
};

use saint_sandbox::view::{EntryKind, MAX_VIEW_ENTRIES, View, ViewEntry};

use saint_sandbox::Viewer;

use super::role_paths::RolePaths;
use saint_config::Skills;

use crate::skills::{WORKSPACE_SKILLS, is_skill_name};
use parking_lot::Mutex;

/// Whose view a caller gets: their role, and themselves when the role's path rules
/// name the asker (`<self>`, or an internal role's own folder).
pub fn viewer<'a>(
    role_name: &'a str,
    role: &saint_config::RoleConfig,
    slug: &'a str,
) -> Viewer<'a> {
    Viewer {
        role: role_name,
        person: RolePaths::depends_on_asker(role).then_some(slug),
    }
}

/// Why a view could not be computed.
#[derive(Debug, thiserror::Error)]
pub enum ViewError {
    #[error("failed to read workspace directory {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error(
        "the role's read rules select more than {MAX_VIEW_ENTRIES} separate files and \
         folders for the sandbox (so far: {first}, …); {advice}"
    )]
    TooManyEntries { first: String, advice: String },
}

/// The advice for too many mounts: whole folders; and when a folder could not be
/// mounted whole, why.
fn advice(split: Option<&str>) -> String {
    let folders = "name whole folders in the role's read globs (like `data/**`) instead \
                   of single files";
    match split {
        Some(path) => format!(
            "{path} is a symbolic link, a hard-linked file or a special file (or a name the \
             file tools refuse), so the folders above it are mounted file by file: remove \
             it, or {folders}"
        ),
        None => folders.to_string(),
    }
}

/// Computes the view of `workspace` for a caller with `rules`.
pub fn compute(workspace: &Path, rules: &RolePaths) -> Result<View, ViewError> {
    compute_with_snapshot(workspace, rules, None).map(|(view, _)| view)
}

/// [`compute`] for a caller whose role's `skills` setting is `skills`: below
/// `skills/` only the folders of skills it allows are shown (all of them for
/// [`Skills::All`], none for [`Skills::None`]), each as far as `rules` let the caller
/// read it, so the sandbox seeds exactly the role's skills. `None` uses the setting
/// `rules` were built from.
pub fn compute_with_skills(
    workspace: &Path,
    rules: &RolePaths,
    skills: Option<&Skills>,
) -> Result<View, ViewError> {
    compute_with_snapshot(workspace, rules, skills).map(|(view, _)| view)
}

/// The view, and the directories its computation listed with their modification
/// times: as long as none of them changed, neither did the view.
fn compute_with_snapshot(
    workspace: &Path,
    rules: &RolePaths,
    skills: Option<&Skills>,
) -> Result<(View, Snapshot), ViewError> {
    let mut snapshot = Snapshot {
        taken_at: SystemTime::now(),
        directories: Vec::new(),
    };
    // The role's own `skills` setting bounds `skills/` when no other is given, as it
    // bounds what `read` allows there.
    let skills = Some(skills.unwrap_or_else(|| rules.skills()));
    let mut entries = Vec::new();
    // The root itself is never one mount: runtime state lies directly below it.
    if !rules.excludes_subtree("") {
        let mut walk = Walk {
            workspace,
            rules,
            skills,
            entries: &mut entries,
            snapshot: &mut snapshot,
            split: None,
        };
        walk.directory("")?;
    }
    Ok((View::from_entries(entries), snapshot))
}

/// The directories a view was computed from.
#[derive(Clone, Debug)]
struct Snapshot {
    taken_at: SystemTime,
    directories: Vec<(PathBuf, SystemTime)>,
}

/// A directory changed this close to the snapshot may have changed again within the
/// file system's timestamp granularity without its time moving: not trusted.
const SETTLE: Duration = Duration::from_millis(100);

/// The longest a snapshot is trusted. Some changes move no listed directory's time: a
/// file below a folder mounted whole given a second name elsewhere, which a backend
/// binding the view refuses (`View::open`) until the view is computed again.
const TRUSTED_FOR: Duration = Duration::from_secs(60);

impl Snapshot {
    /// Whether the snapshot is recent enough and every listed directory still has the
    /// time it had (a few `stat`s).
    fn is_current(&self) -> bool {
        let recent = self
            .taken_at
            .elapsed()
            .is_ok_and(|elapsed| elapsed < TRUSTED_FOR);
        recent
            && self.directories.iter().all(|(directory, listed)| {
                listed
                    .checked_add(SETTLE)
                    .is_some_and(|settled| settled < self.taken_at)
                    && fs::symlink_metadata(directory)
                        .and_then(|metadata| metadata.modified())
                        .is_ok_and(|now| now == *listed)
            })
    }
}

/// Views by caller, recomputed only when a directory they were read from changed, so
/// a warm `exec` pays a few `stat` calls instead of a walk.
#[derive(Debug, Default)]
pub struct ViewCache {
    views: Mutex<HashMap<String, (View, Snapshot)>>,
}

impl ViewCache {
    /// The view for `key` (which must change whenever the caller's rules do), from
    /// the cache while it is current, else computed with the rules `rules` builds.
    pub fn view<E>(
        &self,
        key: &str,
        workspace: &Path,
        rules: impl FnOnce() -> Result<RolePaths, E>,
    ) -> Result<View, CacheError<E>> {
        self.view_with_skills(key, workspace, None, rules)
    }

    /// [`Self::view`] with the role's `skills` setting (see [`compute_with_skills`]);
    /// `key` must change whenever it does.
    pub fn view_with_skills<E>(
        &self,
        key: &str,
        workspace: &Path,
        skills: Option<&Skills>,
        rules: impl FnOnce() -> Result<RolePaths, E>,
    ) -> Result<View, CacheError<E>> {
        if let Some((view, snapshot)) = self.views.lock().get(key)
            && snapshot.is_current()
        {
            return Ok(view.clone());
        }
        let rules = rules().map_err(CacheError::Rules)?;
        let (view, snapshot) =
            compute_with_snapshot(workspace, &rules, skills).map_err(CacheError::View)?;
        let mut views = self.views.lock();
        // Callers come and go; a cache that only grows is bounded by starting over.
        if views.len() >= 4096 {
            views.clear();
        }
        views.insert(key.to_string(), (view.clone(), snapshot));
        Ok(view)
    }
}

impl ViewCache {
    /// Forgets every cached view: the next command of each caller walks again (after a
    /// backend refused to bind a view that changed since it was computed).
    pub fn forget_all(&self) {
        self.views.lock().clear();
    }
}

/// Why [`ViewCache::view`] failed: the rules could not be built, or the walk failed.
#[derive(Debug)]
pub enum CacheError<E> {
    Rules(E),
    View(ViewError),
}

/// One computation's walk: what it reads and what it collects.
struct Walk<'a> {
    workspace: &'a Path,
    rules: &'a RolePaths,
    skills: Option<&'a Skills>,
    entries: &'a mut Vec<ViewEntry>,
    snapshot: &'a mut Snapshot,
    /// The first path that kept a folder the rules cover from being mounted whole.
    split: Option<String>,
}

/// What became of a directory the rules cover.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Covered {
    /// Everything below it is a directory or a readable regular file with one link and
    /// a plain name: the caller may mount it whole (nothing was pushed).
    Whole,
    /// Its parts were pushed instead — each subdirectory that is whole, each such file
    /// — and the rest left out.
    Split,
    /// It vanished while being walked: nothing to mount.
    Gone,
}

/// A listed directory: its children with plain names (sorted, each with its metadata,
/// links not followed), and the first name left out for not being one.
struct Listing {
    children: Vec<(String, fs::Metadata)>,
    skipped: Option<String>,
}

impl Walk<'_> {
    /// A directory the rules reach into but do not cover: each readable regular file on
    /// its own, each subdirectory as [`Self::subtree`] decides.
    fn directory(&mut self, directory: &str) -> Result<(), ViewError> {
        let Some(listing) = self.list(directory)? else {
            return Ok(());
        };
        for (name, metadata) in listing.children {
            let path = join(directory, &name);
            let file_type = metadata.file_type();
            if file_type.is_dir() && path == WORKSPACE_SKILLS {
                match self.skills {
                    Some(Skills::None) => {
                        self.skill_folders(&path, &[])?;
                        continue;
                    }
                    Some(Skills::Only(names)) => {
                        self.skill_folders(&path, names)?;
                        continue;
                    }
                    Some(Skills::All) | None => {}
                }
            }
            if file_type.is_dir() {
                self.subtree(path, &metadata)?;
            } else if is_single_file(&metadata) && self.rules.check_read(&path).is_ok() {
                push(
                    self.entries,
                    judged(path, EntryKind::File, &metadata),
                    self.split.as_deref(),
                )?;
            }
        }
        Ok(())
    }

    /// A directory: mounted whole when the rules cover it and it holds nothing the file
    /// tools refuse, walked when the rules reach into it.
    fn subtree(&mut self, path: String, metadata: &fs::Metadata) -> Result<(), ViewError> {
        if self.rules.covers_subtree(&path) {
            if self.covered(&path)? == Covered::Whole {
                push(
                    self.entries,
                    judged(path, EntryKind::Directory, metadata),
                    self.split.as_deref(),
                )?;
            }
            Ok(())
        } else if !self.rules.excludes_subtree(&path) {
            self.directory(&path)
        } else {
            Ok(())
        }
    }

    /// A directory the rules cover, walked to the bottom in one pass: whole, or split
    /// (see [`Covered`]).
    fn covered(&mut self, directory: &str) -> Result<Covered, ViewError> {
        let Some(listing) = self.list(directory)? else {
            return Ok(Covered::Gone);
        };
        let mut whole = true;
        if let Some(skipped) = listing.skipped {
            whole = false;
            self.split.get_or_insert(join(directory, &skipped));
        }
        let mut parts = Vec::new();
        for (name, metadata) in listing.children {
            let path = join(directory, &name);
            if metadata.is_dir() {
                match self.covered(&path)? {
                    Covered::Whole => parts.push(judged(path, EntryKind::Directory, &metadata)),
                    Covered::Split => whole = false,
                    Covered::Gone => {}
                }
            } else if is_single_file(&metadata) && self.rules.check_read(&path).is_ok() {
                parts.push(judged(path, EntryKind::File, &metadata));
            } else {
                whole = false;
                self.split.get_or_insert(path);
            }
        }
        if whole {
            return Ok(Covered::Whole);
        }
        for part in parts {
            push(self.entries, part, self.split.as_deref())?;
        }
        Ok(Covered::Split)
    }

    /// Lists `directory` (recorded in the snapshot, so any change below it computes the
    /// view again). `None`: a directory below the root that is gone, or no longer a
    /// directory, since its parent was listed — renamed away, say. Its parent's time
    /// moved, so the next command computes the view again; meanwhile nothing of it is
    /// shown.
    fn list(&mut self, directory: &str) -> Result<Option<Listing>, ViewError> {
        let host = self.workspace.join(directory);
        let read_error = |source| ViewError::Read {
            path: host.clone(),
            source,
        };
        let vanished = |error: &io::Error| {
            !directory.is_empty()
                && matches!(
                    error.kind(),
                    io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
                )
        };
        // The time before the listing: a change during it moves the time past this.
        let metadata = match fs::symlink_metadata(&host) {
            Ok(metadata) if metadata.is_dir() || directory.is_empty() => metadata,
            Ok(_) => return Ok(None),
            Err(error) if vanished(&error) => return Ok(None),
            Err(error) => return Err(read_error(error)),
        };
        let listed = metadata.modified().map_err(read_error)?;
        self.snapshot.directories.push((host.clone(), listed));
        let mut listing = Listing {
            children: Vec::new(),
            skipped: None,
        };
        // A directory swapped for a symlink between the `stat` above and this is listed
        // through it: what is judged here is bound only if `View::open` finds the very
        // objects at these paths, through no symlink, when the sandbox starts.
        let children = match fs::read_dir(&host) {
            Ok(children) => children,
            Err(error) if vanished(&error) => return Ok(None),
            Err(error) => return Err(read_error(error)),
        };
        for child in children {
            let child = child.map_err(read_error)?;
            let file_name = child.file_name();
            let Some(name) = file_name.to_str().filter(|name| is_plain_name(name)) else {
                tracing::debug!(directory, "skipping a file name the file tools refuse");
                listing
                    .skipped
                    .get_or_insert_with(|| file_name.to_string_lossy().into_owned());
                continue;
            };
            // `symlink_metadata`: a link is seen as a link, never followed.
            match fs::symlink_metadata(child.path()) {
                Ok(metadata) => listing.children.push((name.to_string(), metadata)),
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
        listing.children.sort_by(|left, right| left.0.cmp(&right.0));
        Ok(Some(listing))
    }

    /// `skills/`: only the folders of the skills `names`, where they are real
    /// directories, each as far as the rules reach. Listed (for the snapshot) like any
    /// directory, so a folder added or removed recomputes the view.
    fn skill_folders(&mut self, skills: &str, names: &[String]) -> Result<(), ViewError> {
        let host = self.workspace.join(skills);
        let listed = fs::symlink_metadata(&host)
            .and_then(|metadata| metadata.modified())
            .map_err(|source| ViewError::Read {
                path: host.clone(),
                source,
            })?;
        self.snapshot.directories.push((host, listed));
        let mut names: Vec<&String> = names.iter().filter(|name| is_skill_name(name)).collect();
        names.sort();
        names.dedup();
        for name in names {
            let folder = format!("{skills}/{name}");
            // `symlink_metadata`: a link is seen as a link, never followed.
            if let Ok(metadata) = fs::symlink_metadata(self.workspace.join(&folder))
                && metadata.file_type().is_dir()
            {
                self.subtree(folder, &metadata)?;
            }
        }
        Ok(())
    }
}

/// `name` below `directory` (`""` is the root).
fn join(directory: &str, name: &str) -> String {
    if directory.is_empty() {
        name.to_string()
    } else {
        format!("{directory}/{name}")
    }
}

/// A regular file with one link: what the file tools read.
fn is_single_file(metadata: &fs::Metadata) -> bool {
    metadata.file_type().is_file() && metadata.nlink() == 1
}

/// An entry for `path`, naming the object it was judged by.
fn judged(path: String, kind: EntryKind, metadata: &fs::Metadata) -> ViewEntry {
    ViewEntry {
        path,
        kind,
        device: metadata.dev(),
        inode: metadata.ino(),
    }
}

fn push(
    entries: &mut Vec<ViewEntry>,
    entry: ViewEntry,
    split: Option<&str>,
) -> Result<(), ViewError> {
    if entries.len() >= MAX_VIEW_ENTRIES {
        let first: Vec<&str> = entries
            .iter()
            .take(3)
            .map(|entry| entry.path.as_str())
            .collect();
        return Err(ViewError::TooManyEntries {
            first: first.join(", "),
            advice: advice(split),
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
    fn below_skills_only_the_roles_skill_folders_are_shown_as_far_as_it_may_read() {
        let workspace = company_workspace();
        let root = workspace.path();
        for folder in ["skills/pdf", "skills/invoices", "skills/secret"] {
            fs::create_dir_all(root.join(folder)).unwrap();
            fs::write(root.join(folder).join("SKILL.md"), folder).unwrap();
        }
        let outside = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(outside.path(), root.join("skills/linked")).unwrap();
        // The roles' own `skills` allow every skill (so their read rules alone bound
        // them); the view's filter under test is the setting passed beside them.
        let mut owner_role = role(&["**"], &["**"], false);
        owner_role.skills = Skills::All;
        let owner = rules(&owner_role, "acme-ana");
        let only = Skills::Only(
            [
                "invoices",
                "pdf",
                "linked",
                "missing",
                "../data",
                "skills/pdf",
            ]
            .map(String::from)
            .to_vec(),
        );
        let view = compute_with_skills(root, &owner, Some(&only)).unwrap();
        assert_eq!(
            paths(&view),
            [
                "COMPANY.md",
                "IDENTITY.md",
                "SOUL.md",
                "data/",
                "memory/",
                "skills/invoices/",
                "skills/pdf/"
            ]
        );
        // Without a setting beside the rules, the one they were built from applies.
        let mut only_role = role(&["**"], &["**"], false);
        only_role.skills = only.clone();
        assert_eq!(
            paths(&compute(root, &rules(&only_role, "acme-ana")).unwrap()),
            paths(&view)
        );
        // No skills: nothing below skills/; all skills, or no filter: every skill
        // folder whole — not skills/ itself, which holds a symlink, never shown.
        let none = compute_with_skills(root, &owner, Some(&Skills::None)).unwrap();
        assert!(!paths(&none).iter().any(|path| path.starts_with("skills")));
        for skills in [Some(&Skills::All), None] {
            let view = compute_with_skills(root, &owner, skills).unwrap();
            let shown: Vec<String> = paths(&view)
                .into_iter()
                .filter(|path| path.starts_with("skills"))
                .collect();
            assert_eq!(
                shown,
                ["skills/invoices/", "skills/pdf/", "skills/secret/"],
                "{skills:?}"
            );
        }
        fs::remove_file(root.join("skills/linked")).unwrap();
        let view = compute_with_skills(root, &owner, Some(&Skills::All)).unwrap();
        assert!(paths(&view).contains(&"skills/".to_string()), "{view}");
        // The read rules still bound it: a role that may read only one skill's file.
        let mut narrow = role(&["skills/pdf/SKILL.md"], &[], false);
        narrow.skills = Skills::All;
        let view = compute_with_skills(root, &rules(&narrow, "acme-ivo"), Some(&only)).unwrap();
        assert_eq!(
            paths(&view),
            ["memory/users/acme-ivo/", "skills/pdf/SKILL.md"],
            "(their own folder is theirs by the file-access defaults)"
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

    fn employee() -> RolePaths {
        rules(
            &role(&["memory/shared/**", "data/**", "SOUL.md"], &[], false),
            "acme-ivo",
        )
    }

    #[test]
    fn entries_name_the_objects_they_were_judged_by() {
        let workspace = company_workspace();
        let root = workspace.path();
        let view = compute(root, &employee()).unwrap();
        assert_eq!(
            paths(&view),
            [
                "SOUL.md",
                "data/",
                "memory/shared/",
                "memory/users/acme-ivo/"
            ]
        );
        for entry in view.entries() {
            let metadata = fs::symlink_metadata(root.join(&entry.path)).unwrap();
            assert_eq!(
                (entry.device, entry.inode),
                (metadata.dev(), metadata.ino()),
                "{}",
                entry.path
            );
        }
        // And a backend can open each as that object.
        assert!(view.open(root).is_ok());
    }

    #[test]
    fn a_hard_link_planted_in_a_whole_folder_splits_it_and_is_never_shown() {
        let workspace = company_workspace();
        let root = workspace.path();
        // Below a subfolder: the folders above it are split, their other parts stay.
        fs::hard_link(
            root.join("memory/private/finance.md"),
            root.join("memory/shared/deep/finance.md"),
        )
        .unwrap();
        fs::create_dir_all(root.join("memory/shared/clean")).unwrap();
        fs::write(root.join("memory/shared/clean/a.md"), "a").unwrap();
        let view = compute(root, &employee()).unwrap();
        assert_eq!(
            paths(&view),
            [
                "SOUL.md",
                "data/",
                "memory/shared/clean/",
                "memory/shared/deep/more.md",
                "memory/shared/facts.md",
                "memory/users/acme-ivo/",
            ]
        );
        assert!(view.open(root).is_ok());
    }

    #[test]
    fn symlinks_sockets_and_refused_names_split_a_folder_too() {
        let workspace = company_workspace();
        let root = workspace.path();
        std::os::unix::fs::symlink("../private/finance.md", root.join("memory/shared/x.md"))
            .unwrap();
        let view = compute(root, &employee()).unwrap();
        assert_eq!(
            paths(&view),
            [
                "SOUL.md",
                "data/",
                "memory/shared/deep/",
                "memory/shared/facts.md",
                "memory/users/acme-ivo/",
            ]
        );
        fs::remove_file(root.join("memory/shared/x.md")).unwrap();
        let _listener =
            std::os::unix::net::UnixListener::bind(root.join("data/porter.sock")).unwrap();
        fs::write(root.join("data/back\\slash.csv"), "x").unwrap();
        let view = compute(root, &employee()).unwrap();
        assert_eq!(
            paths(&view),
            [
                "SOUL.md",
                "data/report.csv",
                "memory/shared/",
                "memory/users/acme-ivo/"
            ]
        );
    }

    #[test]
    fn a_split_folder_past_the_mount_limit_names_the_link_that_split_it() {
        let workspace = company_workspace();
        let root = workspace.path();
        for index in 0..MAX_VIEW_ENTRIES {
            fs::write(root.join(format!("data/{index}.csv")), "x").unwrap();
        }
        let view = compute(root, &employee()).unwrap();
        assert!(paths(&view).contains(&"data/".to_string()));
        fs::hard_link(
            root.join("memory/private/finance.md"),
            root.join("data/finance.csv"),
        )
        .unwrap();
        let error = compute(root, &employee()).unwrap_err().to_string();
        assert!(
            error.contains("data/finance.csv is a symbolic link, a hard-linked file")
                && error.contains("data/**"),
            "{error}"
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

    /// Sets every directory below `root` (and `root`) to an hour ago, so a
    /// snapshot trusts it.
    fn age_directories(root: &Path) {
        let past = SystemTime::now() - Duration::from_secs(3600);
        let mut queue = vec![root.to_path_buf()];
        while let Some(directory) = queue.pop() {
            fs::File::open(&directory)
                .unwrap()
                .set_modified(past)
                .unwrap();
            for entry in fs::read_dir(&directory).unwrap().flatten() {
                if entry.file_type().unwrap().is_dir() {
                    queue.push(entry.path());
                }
            }
        }
    }

    #[test]
    fn a_snapshot_is_trusted_for_a_minute_at_most() {
        let workspace = company_workspace();
        age_directories(workspace.path());
        let (_, mut snapshot) = compute_with_snapshot(workspace.path(), &employee(), None).unwrap();
        assert!(snapshot.is_current());
        // A second name given elsewhere to a file below `memory/shared/` moves no
        // listed folder's time; the view is computed again within a minute anyway.
        snapshot.taken_at -= TRUSTED_FOR;
        assert!(!snapshot.is_current());
    }

    #[test]
    fn the_cache_answers_until_a_listed_folder_changes_or_a_file_is_replaced() {
        let workspace = company_workspace();
        let root = workspace.path();
        let owner = rules(&role(&["**"], &["**"], false), "acme-ana");
        let cache = ViewCache::default();
        let computed = std::cell::Cell::new(0);
        let view = |cache: &ViewCache| {
            cache
                .view("owner", root, || {
                    computed.set(computed.get() + 1);
                    Ok::<_, ()>(owner.clone())
                })
                .unwrap()
        };
        age_directories(root);
        let first = view(&cache);
        assert_eq!(view(&cache), first);
        assert_eq!(
            computed.get(),
            1,
            "an unchanged workspace is not walked again"
        );

        // A new top-level file: the root's time moves, the view is computed anew.
        fs::write(root.join("NEW.md"), "new").unwrap();
        let second = view(&cache);
        assert_eq!(computed.get(), 2);
        assert!(paths(&second).contains(&"NEW.md".to_string()), "{second}");

        // An atomic rewrite of a single-file mount (new inode) is a different view.
        age_directories(root);
        let before = view(&cache);
        fs::write(root.join("SOUL.md.tmp"), "new soul").unwrap();
        fs::rename(root.join("SOUL.md.tmp"), root.join("SOUL.md")).unwrap();
        let after = view(&cache);
        assert_ne!(before, after, "the replaced SOUL.md needs a new mount");
        let inode = |view: &View| {
            view.entries()
                .iter()
                .find(|entry| entry.path == "SOUL.md")
                .map(|entry| entry.inode)
        };
        assert_ne!(inode(&before), inode(&after));

        // A hard link planted in a folder mounted whole: that folder was listed too, so
        // the view is computed anew and the folder is no longer whole.
        age_directories(root);
        let whole = view(&cache);
        assert!(paths(&whole).contains(&"memory/".to_string()), "{whole}");
        fs::hard_link(
            root.join("memory/private/finance.md"),
            root.join("memory/shared/deep/linked.md"),
        )
        .unwrap();
        let split = view(&cache);
        assert!(!paths(&split).contains(&"memory/".to_string()), "{split}");
        assert!(
            paths(&split).contains(&"memory/shared/deep/more.md".to_string()),
            "{split}"
        );
        // Both names of the file are hard links now: neither is shown, as `read`
        // refuses both.
        assert!(
            !paths(&split)
                .iter()
                .any(|path| path.contains("linked") || path.contains("finance")),
            "{split}"
        );

        // A folder changed just now is not trusted yet: computed every time.
        let count = computed.get();
        view(&cache);
        view(&cache);
        assert_eq!(computed.get(), count + 2);
    }
}
