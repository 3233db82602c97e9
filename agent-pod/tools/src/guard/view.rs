//! The caller's view of the workspace: which subtrees and single files a sandbox
//! mounts (read-only) at `/agent`, computed from the caller's role so that `exec` can
//! show nothing the `read` tool would refuse.
//!
//! Reads the workspace's directory entries (never file contents). A directory is
//! mounted whole only when the role's patterns make everything below it readable,
//! whatever appears there later; otherwise it is walked and each readable regular file
//! is mounted on its own. Runtime state (`.saint/`, `sessions/`, `logs/`, `config/`)
//! is never walked into. Symbolic links, hard-linked files, sockets and devices are
//! left out, as the file tools refuse them.

use std::{
    collections::HashMap,
    fs, io,
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
    sync::Mutex,
    time::{Duration, SystemTime},
};

use saint_sandbox::view::{EntryKind, MAX_VIEW_ENTRIES, View, ViewEntry};

use saint_sandbox::Viewer;

use super::role_paths::RolePaths;
use saint_config::Skills;

use crate::skills::{WORKSPACE_SKILLS, is_skill_name};

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
         folders for the sandbox (so far: {first}, …); name whole folders in the role's \
         read globs (like `data/**`) instead of single files"
    )]
    TooManyEntries { first: String },
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

impl Snapshot {
    /// Whether every listed directory still has the time it had (a few `stat`s).
    fn is_current(&self) -> bool {
        self.directories.iter().all(|(directory, listed)| {
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
        if let Some((view, snapshot)) = self.views.lock().expect("view cache lock").get(key)
            && snapshot.is_current()
        {
            return Ok(view.clone());
        }
        let rules = rules().map_err(CacheError::Rules)?;
        let (view, snapshot) =
            compute_with_snapshot(workspace, &rules, skills).map_err(CacheError::View)?;
        let mut views = self.views.lock().expect("view cache lock");
        // Callers come and go; a cache that only grows is bounded by starting over.
        if views.len() >= 4096 {
            views.clear();
        }
        views.insert(key.to_string(), (view.clone(), snapshot));
        Ok(view)
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
}

impl Walk<'_> {
    fn directory(&mut self, directory: &str) -> Result<(), ViewError> {
        let host = self.workspace.join(directory);
        let read_error = |source| ViewError::Read {
            path: host.clone(),
            source,
        };
        // The time before the listing: a change during it moves the time past this.
        let listed = fs::symlink_metadata(&host)
            .and_then(|metadata| metadata.modified())
            .map_err(read_error)?;
        self.snapshot.directories.push((host.clone(), listed));
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
                self.subtree(path)?;
            } else if file_type.is_file()
                && metadata.nlink() == 1
                && self.rules.check_read(&path).is_ok()
            {
                push(
                    self.entries,
                    ViewEntry {
                        path,
                        kind: EntryKind::File,
                        inode: metadata.ino(),
                    },
                )?;
            }
        }
        Ok(())
    }

    /// A directory: mounted whole when the rules cover it, walked when they reach into it.
    fn subtree(&mut self, path: String) -> Result<(), ViewError> {
        if self.rules.covers_subtree(&path) {
            push(
                self.entries,
                ViewEntry {
                    path,
                    kind: EntryKind::Directory,
                    inode: 0,
                },
            )
        } else if !self.rules.excludes_subtree(&path) {
            self.directory(&path)
        } else {
            Ok(())
        }
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
            let is_directory = fs::symlink_metadata(self.workspace.join(&folder))
                .is_ok_and(|metadata| metadata.file_type().is_dir());
            if is_directory {
                self.subtree(folder)?;
            }
        }
        Ok(())
    }
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
        // No skills: nothing below skills/; all skills, or no filter: skills/ whole.
        let none = compute_with_skills(root, &owner, Some(&Skills::None)).unwrap();
        assert!(!paths(&none).iter().any(|path| path.starts_with("skills")));
        for skills in [Some(&Skills::All), None] {
            let view = compute_with_skills(root, &owner, skills).unwrap();
            assert!(paths(&view).contains(&"skills/".to_string()), "{skills:?}");
        }
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

    /// Sets every directory below `root` (and `root`) to a time long past, so a
    /// snapshot trusts it.
    fn age_directories(root: &Path) {
        let past = SystemTime::now() - Duration::from_secs(60);
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

        // A folder changed just now is not trusted yet: computed every time.
        let count = computed.get();
        view(&cache);
        view(&cache);
        assert_eq!(computed.get(), count + 2);
    }
}
