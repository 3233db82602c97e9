//! Refuses a call whose working directory is inside a git repository whose config
//! defines keys that make git run a program (diff drivers, textconv, clean/smudge
//! filters, merge drivers, credential helpers, fsmonitor, hooks path, pager, editor,
//! askpass, ssh command, aliases, includes …) or reach a remote helper (`ext::`). The
//! sandbox can write every repository in the workspace; Porter's git and gh children
//! must not run what it wrote there.
//!
//! Reads the repository's config files (following `.git` files and `commondir` of
//! worktrees) with git's own parser (`git config --file … --no-includes --list -z`), so
//! no spelling git accepts is missed. Never writes anything.
//!
//! A writer racing the check can still change the file between the check and git's
//! own read; the environment overrides in `child_env::GIT_HARDENING` cover the
//! fixed-name keys even then, and injection mode keeps the secret out of git entirely.

use std::path::{Path, PathBuf};

use thiserror::Error;

use crate::argv::runs_or_reads_locally;

/// Why a repository was refused.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum GuardError {
    #[error("repository config {file} sets {key}, which {why}")]
    Dangerous {
        file: String,
        key: String,
        why: &'static str,
    },
    #[error("repository {0} points outside the workspace")]
    Outside(String),
    #[error("failed to read repository config {file}: {message}")]
    Unreadable { file: String, message: String },
}

/// Checks the repository (if any) that git would find from `cwd`, stopping at
/// `workspace_root` (the child gets `GIT_CEILING_DIRECTORIES` to match).
pub fn check(git: &Path, workspace_root: &Path, cwd: &Path) -> Result<(), GuardError> {
    let display = |path: &Path| {
        path.strip_prefix(workspace_root)
            .map(|relative| format!("/workspace/{}", relative.display()))
            .unwrap_or_else(|_| path.display().to_string())
    };
    let mut directory = cwd.to_owned();
    loop {
        let dot_git = directory.join(".git");
        let git_dir = match std::fs::symlink_metadata(&dot_git) {
            Ok(metadata) if metadata.is_file() => Some(follow_git_file(&dot_git, &directory)),
            Ok(_) => Some(dot_git),
            Err(_) => None,
        };
        if let Some(git_dir) = git_dir {
            return check_git_dir(git, workspace_root, &git_dir, &display);
        }
        if directory == workspace_root || !directory.pop() || !directory.starts_with(workspace_root)
        {
            return Ok(());
        }
    }
}

/// `.git` as a file (worktrees, submodules): `gitdir: <path>`, relative to its folder.
fn follow_git_file(file: &Path, directory: &Path) -> PathBuf {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    let target = text
        .lines()
        .next()
        .and_then(|line| line.strip_prefix("gitdir:"))
        .map(str::trim)
        .unwrap_or_default();
    directory.join(target)
}

fn inside(workspace_root: &Path, path: &Path) -> Option<PathBuf> {
    path.canonicalize()
        .ok()
        .filter(|resolved| resolved.starts_with(workspace_root))
}

fn check_git_dir(
    git: &Path,
    workspace_root: &Path,
    git_dir: &Path,
    display: &dyn Fn(&Path) -> String,
) -> Result<(), GuardError> {
    let git_dir =
        inside(workspace_root, git_dir).ok_or_else(|| GuardError::Outside(display(git_dir)))?;
    let mut files = vec![git_dir.join("config"), git_dir.join("config.worktree")];
    if let Ok(common) = std::fs::read_to_string(git_dir.join("commondir")) {
        let common = git_dir.join(common.trim());
        let common =
            inside(workspace_root, &common).ok_or_else(|| GuardError::Outside(display(&common)))?;
        files.extend([common.join("config"), common.join("config.worktree")]);
    }
    for file in files.iter().filter(|file| file.exists()) {
        for (key, value) in read_config(git, file, display)? {
            if let Some(why) = dangerous(&key, &value) {
                return Err(GuardError::Dangerous {
                    file: display(file),
                    key,
                    why,
                });
            }
        }
    }
    Ok(())
}

fn read_config(
    git: &Path,
    file: &Path,
    display: &dyn Fn(&Path) -> String,
) -> Result<Vec<(String, String)>, GuardError> {
    let unreadable = |message: String| GuardError::Unreadable {
        file: display(file),
        message,
    };
    let output = std::process::Command::new(git)
        .args(["config", "--no-includes", "--list", "-z", "--file"])
        .arg(file)
        .env_clear()
        .env("PATH", crate::child_env::CHILD_PATH)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("HOME", "/nonexistent")
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|error| unreadable(error.to_string()))?;
    if !output.status.success() {
        return Err(unreadable(
            String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        ));
    }
    Ok(output
        .stdout
        .split(|byte| *byte == 0)
        .filter(|entry| !entry.is_empty())
        .map(|entry| {
            let entry = String::from_utf8_lossy(entry);
            match entry.split_once('\n') {
                Some((key, value)) => (key.to_owned(), value.to_owned()),
                None => (entry.into_owned(), String::new()),
            }
        })
        .collect())
}

/// Why a config entry is refused, if it is. Section and variable names are
/// case-insensitive; subsections (`diff."<driver>"`) are kept as written.
pub fn dangerous(key: &str, value: &str) -> Option<&'static str> {
    const RUNS: &str = "runs a program";
    let (section, rest) = key.split_once('.')?;
    let section = section.to_ascii_lowercase();
    let (subsection, name) = match rest.rsplit_once('.') {
        Some((subsection, name)) => (Some(subsection), name.to_ascii_lowercase()),
        None => (None, rest.to_ascii_lowercase()),
    };
    match (section.as_str(), subsection, name.as_str()) {
        ("alias", ..) => Some("defines an alias (`!` aliases run programs)"),
        ("include" | "includeif", ..) => Some("includes other config"),
        ("filter", ..) => Some("defines a clean/smudge filter, which runs a program"),
        ("credential", ..) => Some("configures a credential helper"),
        (
            "pager" | "gpg" | "difftool" | "mergetool" | "sendemail" | "browser" | "man" | "web"
            | "instaweb" | "sequence" | "uploadpack" | "receivepack",
            ..,
        ) => Some(RUNS),
        (
            "core",
            None,
            "sshcommand"
            | "fsmonitor"
            | "hookspath"
            | "pager"
            | "editor"
            | "askpass"
            | "gitproxy"
            | "alternaterefscommand",
        ) => Some(RUNS),
        ("core", None, "worktree") => Some("moves the work tree outside the checked directory"),
        ("diff", None, "external") => Some(RUNS),
        ("diff", Some(_), "command" | "textconv") => {
            Some("defines a diff driver, which runs a program")
        }
        ("merge", Some(_), "driver") => Some("defines a merge driver, which runs a program"),
        ("protocol", _, "allow") => Some("allows transports that run programs"),
        ("remote", Some(_), "uploadpack" | "receivepack") => Some(RUNS),
        ("remote", Some(_), "url" | "pushurl") if value.contains("::") => {
            Some("uses a remote helper, which runs a program")
        }
        ("url", Some(base), "insteadof" | "pushinsteadof") if runs_or_reads_locally(base) => {
            Some("rewrites URLs to a remote helper or a local path")
        }
        ("submodule", Some(_), "update") if value.starts_with('!') => Some(RUNS),
        ("init", None, "templatedir") => Some("installs hooks from a template"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn git_init(directory: &Path) {
        let status = std::process::Command::new("git")
            .args(["init", "-q"])
            .arg(directory)
            .env_clear()
            .env("PATH", crate::child_env::CHILD_PATH)
            .env("HOME", directory)
            .status()
            .expect("git is installed (apt-get install git)");
        assert!(status.success());
    }

    #[test]
    fn command_running_keys_in_any_spelling_are_refused() {
        for (key, value) in [
            ("diff.b64.textconv", "sh -c x"),
            ("DIFF.b64.Command", "x"),
            ("filter.x.clean", "x"),
            ("merge.x.driver", "x"),
            ("core.fsmonitor", "x"),
            ("core.hooksPath", "x"),
            ("core.sshCommand", "x"),
            ("core.editor", "x"),
            ("credential.helper", "x"),
            ("credential.https://x.helper", "x"),
            ("includeIf.gitdir:/x.path", "x"),
            ("include.path", "x"),
            ("alias.st", "!x"),
            ("protocol.ext.allow", "always"),
            ("uploadpack.packObjectsHook", "x"),
            ("remote.origin.url", "ext::sh -c x"),
            ("remote.origin.uploadpack", "x"),
            ("url.ext::sh -c x.insteadOf", "https://"),
            ("gpg.program", "x"),
            ("pager.log", "x"),
        ] {
            assert!(dangerous(key, value).is_some(), "{key}={value}");
        }
        for (key, value) in [
            ("core.bare", "false"),
            ("remote.origin.url", "https://github.com/o/r"),
            ("user.name", "x"),
            ("diff.renames", "true"),
            ("branch.main.merge", "refs/heads/main"),
        ] {
            assert_eq!(dangerous(key, value), None, "{key}={value}");
        }
    }

    #[test]
    fn repositories_are_found_upwards_and_through_git_files() {
        let directory = tempfile::tempdir().unwrap();
        let root = directory.path().canonicalize().unwrap();
        let repo = root.join("repo");
        git_init(&repo);
        std::fs::create_dir_all(repo.join("src/deep")).unwrap();
        let git = Path::new("/usr/bin/git");
        assert_eq!(check(git, &root, &repo.join("src/deep")), Ok(()));

        let config = repo.join(".git/config");
        let mut text = std::fs::read_to_string(&config).unwrap();
        // Quoted, continued and upper-cased: git's own parser reads it all.
        text.push_str("[Diff \"b64\"]\n\ttextconv = \"sh -c \\\n 'base64'\"\n");
        std::fs::write(&config, text).unwrap();
        assert!(matches!(
            check(git, &root, &repo.join("src/deep")),
            Err(GuardError::Dangerous { .. })
        ));

        // A worktree-style `.git` file leads to the same config.
        let linked = root.join("linked");
        std::fs::create_dir_all(&linked).unwrap();
        std::fs::write(linked.join(".git"), "gitdir: ../repo/.git\n").unwrap();
        assert!(matches!(
            check(git, &root, &linked),
            Err(GuardError::Dangerous { .. })
        ));
        // …and one pointing out of the workspace is refused outright.
        let outside = tempfile::tempdir().unwrap();
        git_init(outside.path());
        std::fs::write(
            linked.join(".git"),
            format!("gitdir: {}/.git\n", outside.path().display()),
        )
        .unwrap();
        assert!(matches!(
            check(git, &root, &linked),
            Err(GuardError::Outside(_))
        ));
        // No repository at all: nothing to check.
        std::fs::create_dir_all(root.join("plain")).unwrap();
        assert_eq!(check(git, &root, &root.join("plain")), Ok(()));
    }
}
