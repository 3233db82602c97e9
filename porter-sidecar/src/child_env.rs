//! The environment a CLI child gets: a minimal base, the CLI's declared variables, and
//! the caller's harmless presentation hints — nothing else from Porter or the caller.
//!
//! Pure: builds a map; the registry store resolves file and passthrough values.

use std::collections::BTreeMap;

/// PATH for every child (the CLI's `env` may override it).
pub const CHILD_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// Caller hints every CLI accepts: presentation only, none changes what runs.
pub const DEFAULT_HINTS: &[&str] = &["TERM", "COLUMNS", "LINES", "NO_COLOR", "CLICOLOR", "TZ"];

/// Names no hint may set, whatever the registry says: they load code or redirect
/// where programs and config come from.
const NEVER_HINTED: &[&str] = &["PATH", "HOME", "LANG", "SHELL", "IFS", "ENV", "BASH_ENV"];
const NEVER_HINTED_PREFIXES: &[&str] = &["LD_", "GIT_", "GH_", "SSH_"];

/// Builds the child's environment.
///
/// `declared` are the CLI's resolved variables (literal, from files, passthrough);
/// `request_env` and `protected_env` come from the registry entry; `hints` from the
/// request. A hint is taken only if its name is accepted and not declared or protected.
pub fn build(
    home: &str,
    declared: &BTreeMap<String, String>,
    request_env: &[String],
    protected_env: &[String],
    hints: &BTreeMap<String, String>,
) -> (BTreeMap<String, String>, Vec<String>) {
    let mut environment = BTreeMap::from([
        ("PATH".to_owned(), CHILD_PATH.to_owned()),
        ("HOME".to_owned(), home.to_owned()),
        ("LANG".to_owned(), "C.UTF-8".to_owned()),
    ]);
    let mut dropped = Vec::new();
    for (name, value) in hints {
        let accepted = DEFAULT_HINTS.contains(&name.as_str()) || request_env.contains(name);
        let forbidden = declared.contains_key(name)
            || protected_env.contains(name)
            || NEVER_HINTED.contains(&name.as_str())
            || NEVER_HINTED_PREFIXES
                .iter()
                .any(|prefix| name.starts_with(prefix));
        if accepted && !forbidden {
            environment.insert(name.clone(), value.clone());
        } else {
            dropped.push(name.clone());
        }
    }
    // Declared variables last: they win over the base.
    environment.extend(
        declared
            .iter()
            .map(|(name, value)| (name.clone(), value.clone())),
    );
    (environment, dropped)
}

/// Config forced on every `git` child through `GIT_CONFIG_COUNT`/`KEY`/`VALUE`, which
/// git reads after the repository's own `.git/config`: a workspace repository (which the
/// agent may have written) must not run programs inside Porter through hooks, fsmonitor,
/// the pager or the `ext::` transport. `GIT_SSH_COMMAND` still wins over
/// `core.sshCommand` for operators that need their own.
pub const GIT_HARDENING: &[(&str, &str)] = &[
    ("core.hooksPath", "/dev/null"),
    ("core.fsmonitor", "false"),
    ("core.pager", "cat"),
    ("core.sshCommand", "ssh"),
    ("protocol.ext.allow", "never"),
    ("protocol.fd.allow", "never"),
    ("uploadpack.packObjectsHook", ""),
    ("diff.external", ""),
    // A workspace directory that merely looks like a bare repository is not one.
    ("safe.bareRepository", "explicit"),
];

/// Adds [`GIT_HARDENING`] to the environment of a git (or gh, which runs git) child,
/// replacing any `GIT_CONFIG_*` counts it had, so nothing can shift the indices. System
/// and global config are off (the per-call home has none anyway), and repository
/// discovery stops at the workspace root (`ceiling` is its parent), so git never reads
/// a repository config that `git_guard` did not check.
pub fn harden_git(environment: &mut BTreeMap<String, String>, ceiling: &std::path::Path) {
    environment.retain(|name, _| {
        !name.starts_with("GIT_CONFIG_KEY_") && !name.starts_with("GIT_CONFIG_VALUE_")
    });
    environment.insert(
        "GIT_CONFIG_COUNT".to_owned(),
        GIT_HARDENING.len().to_string(),
    );
    environment.insert("GIT_CONFIG_NOSYSTEM".to_owned(), "1".to_owned());
    environment.insert("GIT_CONFIG_GLOBAL".to_owned(), "/dev/null".to_owned());
    environment.insert(
        "GIT_CEILING_DIRECTORIES".to_owned(),
        ceiling.to_string_lossy().into_owned(),
    );
    for (index, (key, value)) in GIT_HARDENING.iter().enumerate() {
        environment.insert(format!("GIT_CONFIG_KEY_{index}"), (*key).to_owned());
        environment.insert(format!("GIT_CONFIG_VALUE_{index}"), (*value).to_owned());
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn git_children_get_config_overrides_that_replace_any_given() {
        let mut environment = BTreeMap::from([
            ("GIT_CONFIG_COUNT".to_owned(), "1".to_owned()),
            ("GIT_CONFIG_KEY_0".to_owned(), "core.sshCommand".to_owned()),
            ("GIT_CONFIG_VALUE_0".to_owned(), "evil".to_owned()),
        ]);
        harden_git(&mut environment, std::path::Path::new("/var/lib/saint"));
        assert_eq!(environment["GIT_CONFIG_GLOBAL"], "/dev/null");
        assert_eq!(
            environment["GIT_CONFIG_COUNT"],
            GIT_HARDENING.len().to_string()
        );
        assert_eq!(environment["GIT_CONFIG_KEY_0"], "core.hooksPath");
        assert!(!environment.values().any(|value| value == "evil"));
    }

    use super::*;

    #[test]
    fn only_the_base_declared_and_accepted_hints_reach_the_child() {
        let declared = BTreeMap::from([("GH_TOKEN".to_owned(), "secret".to_owned())]);
        let hints = BTreeMap::from([
            ("TERM".to_owned(), "xterm".to_owned()),
            ("GH_TOKEN".to_owned(), "attacker".to_owned()),
            ("LD_PRELOAD".to_owned(), "/tmp/x.so".to_owned()),
            ("PAGER".to_owned(), "sh".to_owned()),
            ("GH_HOST".to_owned(), "evil".to_owned()),
            ("COLUMNS".to_owned(), "80".to_owned()),
        ]);
        let (environment, mut dropped) = build(
            "/home/porter",
            &declared,
            &["GH_HOST".to_owned()],
            &["COLUMNS".to_owned()],
            &hints,
        );
        assert_eq!(
            environment.keys().map(String::as_str).collect::<Vec<_>>(),
            ["GH_TOKEN", "HOME", "LANG", "PATH", "TERM"]
        );
        assert_eq!(environment["GH_TOKEN"], "secret");
        dropped.sort();
        assert_eq!(
            dropped,
            ["COLUMNS", "GH_HOST", "GH_TOKEN", "LD_PRELOAD", "PAGER"]
        );
    }
}
