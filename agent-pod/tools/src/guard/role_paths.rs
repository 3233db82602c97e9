//! Role path rules for the file tools: which workspace paths a role may read and write.
//!
//! Pure: decides on normalised workspace-relative paths (see [`super::paths`]); never
//! touches the file system. The three write tiers:
//! 1. platform-protected files (`fileAccess.platformProtected`) — no role writes them;
//! 2. owner files (`fileAccess.ownerFiles`, e.g. `COMPANY.md`) — only roles whose own
//!    `files.write` globs match them;
//! 3. the asker's own directory (`fileAccess.selfWritable`, `memory/users/<self>/**`) —
//!    every internal role, plus whatever else the role's `files.write` globs name.
//!
//! `<self>` is replaced by the asker's slug; a slug that is not a plain path component
//! makes every `<self>` glob match nothing (fail closed). Globs use `globset` semantics
//! with `*` also matching `/` (as SQLite `GLOB` does for the memory scopes).

use globset::{Glob, GlobBuilder, GlobSet, GlobSetBuilder};
use saint_config::{FileAccessConfig, RoleConfig, Skills};

use super::paths::is_safe_component;
use crate::skills::{WORKSPACE_SKILLS, role_allows};

/// The placeholder for the asker's slug in path globs.
pub const SELF_PLACEHOLDER: &str = "<self>";

/// The runtime's own state on the workspace volume, which no role reads or writes through
/// the file tools whatever its globs say: the sessions database (visible only through the
/// session tools and their visibility rules), the memory index and sockets under
/// `.saint/`, config and logs (usage and costs are none of the model's business).
pub const PLATFORM_PRIVATE: &[&str] = &[".saint/**", "sessions/**", "config/**", "logs/**"];

/// Why a path is refused for this role.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RolePathError {
    #[error("{path:?} is internal to the assistant and cannot be read or changed")]
    PlatformPrivate { path: String },
    #[error("{path:?} is managed by the platform and cannot be changed by any role")]
    PlatformProtected { path: String },
    #[error("{path:?} may only be changed for people whose role allows editing it")]
    OwnerFile { path: String },
    #[error("your role may not read {path:?}")]
    ReadDenied { path: String },
    #[error("your role may not write {path:?}")]
    WriteDenied { path: String },
    #[error("failed to compile path glob {glob:?}: {reason}")]
    BadGlob { glob: String, reason: String },
}

/// A role's compiled path rules for one asker.
#[derive(Clone, Debug)]
pub struct RolePaths {
    platform_private: GlobSet,
    read: GlobSet,
    write: GlobSet,
    deny_write: GlobSet,
    platform_protected: GlobSet,
    owner_files: GlobSet,
    self_writable: GlobSet,
    internal: bool,
    /// The role's `skills` setting: files of a skill it does not allow are not read,
    /// whatever the read globs say (the sandbox does not show them either).
    skills: Skills,
    /// The same rules as pattern text (`<self>` substituted), for subtree decisions.
    patterns: RolePatterns,
}

/// The pattern text behind a [`RolePaths`], after `<self>` substitution.
#[derive(Clone, Debug, Default)]
struct RolePatterns {
    platform_private: Vec<String>,
    read: Vec<String>,
    write: Vec<String>,
    /// Patterns that can take away what `write` grants: deny-write, platform-protected
    /// and owner files.
    write_exceptions: Vec<String>,
    self_writable: Vec<String>,
}

impl RolePaths {
    /// Compiles the rules of `role` for the asker `slug`.
    pub fn new(
        role: &RoleConfig,
        access: &FileAccessConfig,
        slug: &str,
    ) -> Result<Self, RolePathError> {
        let self_dir = [access.self_writable.clone()];
        let platform_private: Vec<String> = PLATFORM_PRIVATE
            .iter()
            .map(|glob| glob.to_string())
            .collect();
        let patterns = RolePatterns {
            platform_private: substitute(&platform_private, slug),
            read: substitute(&role.files.read, slug),
            write: substitute(&role.files.write, slug),
            write_exceptions: [
                substitute(&role.files.deny_write, slug),
                substitute(&access.platform_protected, slug),
                substitute(&access.owner_files, slug),
            ]
            .concat(),
            self_writable: if role.external {
                Vec::new()
            } else {
                substitute(&self_dir, slug)
            },
        };
        Ok(Self {
            patterns,
            platform_private: compile(&platform_private, slug)?,
            read: compile(&role.files.read, slug)?,
            write: compile(&role.files.write, slug)?,
            deny_write: compile(&role.files.deny_write, slug)?,
            platform_protected: compile(&access.platform_protected, slug)?,
            owner_files: compile(&access.owner_files, slug)?,
            self_writable: compile(&self_dir, slug)?,
            internal: !role.external,
            skills: role.skills.clone(),
        })
    }

    /// The role's `skills` setting, which bounds what is read below `skills/`.
    pub fn skills(&self) -> &Skills {
        &self.skills
    }

    /// May the asker read `path`? Readable are the role's read globs plus whatever the
    /// role may write (a role that can write its own notes can read them back).
    pub fn check_read(&self, path: &str) -> Result<(), RolePathError> {
        if self.platform_private.is_match(path) {
            return Err(RolePathError::PlatformPrivate {
                path: path.to_string(),
            });
        }
        if let Some(skill) = path
            .strip_prefix(WORKSPACE_SKILLS)
            .and_then(|rest| rest.strip_prefix('/'))
            .and_then(|rest| rest.split('/').next())
            .filter(|skill| !skill.is_empty())
            && !role_allows(&self.skills, skill)
        {
            return Err(RolePathError::ReadDenied {
                path: path.to_string(),
            });
        }
        if self.read.is_match(path) || self.check_write(path).is_ok() {
            return Ok(());
        }
        Err(RolePathError::ReadDenied {
            path: path.to_string(),
        })
    }

    /// May the asker write `path`? Deny always wins: platform-protected first, then the
    /// role's own deny list, then owner files (only through the role's write globs).
    pub fn check_write(&self, path: &str) -> Result<(), RolePathError> {
        let shown = || path.to_string();
        if self.platform_private.is_match(path) {
            return Err(RolePathError::PlatformPrivate { path: shown() });
        }
        if self.platform_protected.is_match(path) {
            return Err(RolePathError::PlatformProtected { path: shown() });
        }
        if self.deny_write.is_match(path) {
            return Err(RolePathError::WriteDenied { path: shown() });
        }
        if self.owner_files.is_match(path) {
            return if self.write.is_match(path) {
                Ok(())
            } else {
                Err(RolePathError::OwnerFile { path: shown() })
            };
        }
        if self.write.is_match(path) || (self.internal && self.self_writable.is_match(path)) {
            return Ok(());
        }
        Err(RolePathError::WriteDenied { path: shown() })
    }

    /// Whether the rules name the asker's slug anywhere (`<self>` in a glob, or the
    /// asker's own writable directory of an internal role): then what the asker may
    /// read differs from what another person of the same role may read.
    pub fn depends_on_asker(role: &RoleConfig) -> bool {
        !role.external
            || [&role.files.read, &role.files.write, &role.files.deny_write]
                .iter()
                .any(|globs| globs.iter().any(|glob| glob.contains(SELF_PLACEHOLDER)))
    }

    /// Whether every path strictly below directory `directory` (workspace-relative,
    /// `""` for the root) is readable, whatever files appear there later. Decided on
    /// the pattern text alone, conservatively: `true` only when a recursive read glob
    /// (`dir/**`, `dir/*`) covers it — or a recursive write glob that no deny-write,
    /// protected or owner-file pattern touches — and no runtime-state pattern reaches
    /// into it. `false` says nothing; callers then look at each entry.
    pub fn covers_subtree(&self, directory: &str) -> bool {
        let patterns = &self.patterns;
        if patterns
            .platform_private
            .iter()
            .any(|pattern| reaches_into(pattern, directory))
        {
            return false;
        }
        let covered_by = |globs: &[String]| {
            globs.iter().any(|pattern| {
                recursive_root(pattern).is_some_and(|root| is_within(directory, root))
            })
        };
        if covered_by(&patterns.read) {
            return true;
        }
        let writable = covered_by(&patterns.write) || covered_by(&patterns.self_writable);
        writable
            && !patterns
                .write_exceptions
                .iter()
                .any(|pattern| reaches_into(pattern, directory))
    }

    /// Whether no path below `directory` can be readable: a runtime-state pattern covers
    /// it whole, or no read or write pattern can match anything below it. Lets a walk
    /// of the workspace skip whole subtrees.
    pub fn excludes_subtree(&self, directory: &str) -> bool {
        let patterns = &self.patterns;
        let private = patterns
            .platform_private
            .iter()
            .any(|pattern| recursive_root(pattern).is_some_and(|root| is_within(directory, root)));
        private
            || ![&patterns.read, &patterns.write, &patterns.self_writable]
                .iter()
                .any(|globs| globs.iter().any(|pattern| reaches_into(pattern, directory)))
    }
}

/// The directory a recursive pattern covers whole (`memory/shared` for
/// `memory/shared/**` or `memory/shared/*`, `""` for `**`), or `None` when the pattern
/// is anything else. `*` matches `/` in these globs, so a trailing `*` is recursive too.
fn recursive_root(pattern: &str) -> Option<&str> {
    let mut root = pattern;
    loop {
        if root == "**" || root == "*" {
            return Some("");
        }
        match root.strip_suffix("/**").or_else(|| root.strip_suffix("/*")) {
            Some(shorter) => root = shorter,
            None => break,
        }
    }
    (root != pattern && literal_prefix(root) == root && !root.is_empty()).then_some(root)
}

/// The part of a pattern before its first glob metacharacter.
fn literal_prefix(pattern: &str) -> &str {
    let end = pattern
        .find(['*', '?', '[', ']', '{', '}', '\\', '!'])
        .unwrap_or(pattern.len());
    &pattern[..end]
}

/// Whether `path` is `directory` or below it (`""` is the root).
fn is_within(path: &str, directory: &str) -> bool {
    directory.is_empty()
        || path == directory
        || path
            .strip_prefix(directory)
            .is_some_and(|rest| rest.starts_with('/'))
}

/// Whether `pattern` could match some path strictly below `directory` (conservative:
/// true whenever its literal prefix and the directory overlap).
fn reaches_into(pattern: &str, directory: &str) -> bool {
    if directory.is_empty() {
        return true;
    }
    let prefix = literal_prefix(pattern);
    let below = format!("{directory}/");
    if prefix.len() == pattern.len() {
        // A literal pattern matches exactly one path.
        return pattern.starts_with(&below);
    }
    prefix.starts_with(&below) || below.starts_with(prefix)
}

/// Globs with `<self>` substituted; globs naming `<self>` are dropped when the slug is
/// not a safe path component.
fn substitute(globs: &[String], slug: &str) -> Vec<String> {
    globs
        .iter()
        .filter_map(|pattern| {
            if !pattern.contains(SELF_PLACEHOLDER) {
                return Some(pattern.trim_start_matches("./").to_string());
            }
            is_safe_component(slug).then(|| {
                pattern
                    .replace(SELF_PLACEHOLDER, &escape_glob(slug))
                    .trim_start_matches("./")
                    .to_string()
            })
        })
        .collect()
}

/// Compiles globs, substituting `<self>` (see [`substitute`]).
fn compile(globs: &[String], slug: &str) -> Result<GlobSet, RolePathError> {
    let mut builder = GlobSetBuilder::new();
    for pattern in substitute(globs, slug) {
        builder.add(glob(&pattern)?);
    }
    builder.build().map_err(|error| RolePathError::BadGlob {
        glob: globs.join(","),
        reason: error.to_string(),
    })
}

fn glob(pattern: &str) -> Result<Glob, RolePathError> {
    let trimmed = pattern.trim_start_matches("./");
    GlobBuilder::new(trimmed)
        .literal_separator(false)
        .backslash_escape(true)
        .build()
        .map_err(|error| RolePathError::BadGlob {
            glob: pattern.to_string(),
            reason: error.to_string(),
        })
}

/// Escapes glob metacharacters so a slug is matched literally.
fn escape_glob(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for character in text.chars() {
        if matches!(character, '*' | '?' | '[' | ']' | '{' | '}' | '\\' | '!') {
            escaped.push('\\');
        }
        escaped.push(character);
    }
    escaped
}

#[cfg(test)]
mod tests {
    use saint_config::{FileGlobs, RoleConfig};

    use super::*;

    fn role(read: &[&str], write: &[&str], deny_write: &[&str], external: bool) -> RoleConfig {
        let strings = |items: &[&str]| items.iter().map(|item| item.to_string()).collect();
        let mut role: RoleConfig = serde_json::from_value(serde_json::json!({})).unwrap();
        role.files = FileGlobs {
            read: strings(read),
            write: strings(write),
            deny_write: strings(deny_write),
        };
        role.external = external;
        role
    }

    fn owner() -> RolePaths {
        RolePaths::new(
            &role(&["*"], &["*"], &[], false),
            &FileAccessConfig::default(),
            "acme-ana",
        )
        .unwrap()
    }

    fn employee() -> RolePaths {
        let role = role(
            &[
                "memory/shared/*",
                "memory/users/<self>/*",
                "data/*",
                "SOUL.md",
            ],
            &["data/*"],
            &[],
            false,
        );
        RolePaths::new(&role, &FileAccessConfig::default(), "acme-ivo").unwrap()
    }

    #[test]
    fn platform_protected_files_are_never_writable_even_for_the_owner() {
        let owner = owner();
        for path in [
            "SOUL.md",
            "IDENTITY.md",
            "AGENTS.md",
            "HEARTBEAT.md",
            "skills/x/SKILL.md",
        ] {
            assert!(
                matches!(
                    owner.check_write(path),
                    Err(RolePathError::PlatformProtected { .. })
                ),
                "{path} must be protected"
            );
        }
        // Reading them is fine for the owner.
        assert!(owner.check_read("SOUL.md").is_ok());
    }

    #[test]
    fn runtime_state_is_neither_readable_nor_writable_even_for_the_owner() {
        let owner = owner();
        for path in [
            "sessions/transcripts.sqlite3",
            ".saint/memory/index.sqlite",
            ".saint/run/porter/porter.sock",
            "logs/usage.jsonl",
            "config/bot-config.json",
        ] {
            assert!(
                matches!(
                    owner.check_read(path),
                    Err(RolePathError::PlatformPrivate { .. })
                ),
                "{path} must not be readable"
            );
            assert!(
                owner.check_write(path).is_err(),
                "{path} must not be writable"
            );
        }
        assert!(
            owner.check_read("data/sessions/notes.md").is_ok(),
            "only top-level state is private"
        );
    }

    #[test]
    fn owner_files_need_the_roles_write_globs() {
        assert!(owner().check_write("COMPANY.md").is_ok());
        assert!(owner().check_write("TOOLS.md").is_ok());
        assert_eq!(
            employee().check_write("COMPANY.md"),
            Err(RolePathError::OwnerFile {
                path: "COMPANY.md".to_string()
            })
        );
    }

    #[test]
    fn self_directory_is_writable_for_internal_roles_only_for_their_own_slug() {
        let employee = employee();
        assert!(
            employee
                .check_write("memory/users/acme-ivo/preferences.md")
                .is_ok()
        );
        assert!(
            employee
                .check_write("memory/users/acme-ivo/deep/notes.md")
                .is_ok()
        );
        assert!(
            employee
                .check_write("memory/users/acme-ana/preferences.md")
                .is_err()
        );
        assert!(
            employee
                .check_write("memory/users/acme-ivo-evil/notes.md")
                .is_err()
        );
        assert!(
            employee
                .check_read("memory/users/acme-ana/preferences.md")
                .is_err()
        );
        assert!(
            employee
                .check_read("memory/users/acme-ivo/preferences.md")
                .is_ok()
        );

        let external = RolePaths::new(
            &role(&[], &[], &[], true),
            &FileAccessConfig::default(),
            "guest",
        )
        .unwrap();
        assert!(external.check_write("memory/users/guest/notes.md").is_err());
        assert!(external.check_read("memory/users/guest/notes.md").is_err());
    }

    #[test]
    fn role_write_globs_and_deny_write_apply() {
        let employee = employee();
        assert!(employee.check_write("data/report.csv").is_ok());
        assert!(employee.check_write("memory/shared/facts.md").is_err());
        assert!(employee.check_read("memory/shared/facts.md").is_ok());
        assert!(employee.check_read("memory/private/finance.md").is_err());

        let paths = RolePaths::new(
            &role(&["*"], &["*"], &["data/locked/*"], false),
            &FileAccessConfig::default(),
            "a",
        )
        .unwrap();
        assert!(matches!(
            paths.check_write("data/locked/x"),
            Err(RolePathError::WriteDenied { .. })
        ));
        assert!(paths.check_write("data/open/x").is_ok());
    }

    #[test]
    fn unsafe_slugs_make_self_globs_match_nothing() {
        for slug in ["..", "a/b", "*", ""] {
            let paths = RolePaths::new(
                &role(&["memory/users/<self>/*"], &[], &[], false),
                &FileAccessConfig::default(),
                slug,
            )
            .unwrap();
            assert!(
                paths.check_write("memory/users/x/notes.md").is_err(),
                "slug {slug:?}"
            );
            assert!(
                paths.check_read("memory/users/x/notes.md").is_err(),
                "slug {slug:?}"
            );
        }
    }
    #[test]
    fn files_of_skills_the_role_does_not_allow_are_not_read() {
        let mut only_pdf = role(&["**"], &[], &[], false);
        only_pdf.skills = Skills::Only(vec!["pdf".to_string()]);
        let paths = RolePaths::new(&only_pdf, &FileAccessConfig::default(), "ivan").unwrap();
        assert!(paths.check_read("skills/pdf/SKILL.md").is_ok());
        assert!(paths.check_read("skills/pdf/templates/a.md").is_ok());
        for refused in [
            "skills/github/SKILL.md",
            "skills/github",
            "skills/pdf-extra/SKILL.md",
        ] {
            assert!(
                matches!(
                    paths.check_read(refused),
                    Err(RolePathError::ReadDenied { .. })
                ),
                "{refused}"
            );
        }
        // Not a skill folder: the read globs decide.
        assert!(paths.check_read("skills").is_ok());
        assert!(paths.check_read("skillset/notes.md").is_ok());
        let mut none = only_pdf.clone();
        none.skills = Skills::None;
        let paths = RolePaths::new(&none, &FileAccessConfig::default(), "ivan").unwrap();
        assert!(paths.check_read("skills/pdf/SKILL.md").is_err());
        let mut all = only_pdf;
        all.skills = Skills::All;
        let paths = RolePaths::new(&all, &FileAccessConfig::default(), "ivan").unwrap();
        assert!(paths.check_read("skills/github/SKILL.md").is_ok());
    }
}
