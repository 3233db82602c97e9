//! Argument policy: which argument vectors a caller of a given role may run (deny wins).
//!
//! Pure: compiles registry patterns and matches argument lists; no I/O.

use globset::{Glob, GlobBuilder, GlobMatcher};
use porter_protocol::registry::{ArgPolicy, CliEntry, builtin_deny};
use thiserror::Error;

/// Why a pattern could not be compiled.
#[derive(Debug, Error)]
pub enum PolicyError {
    #[error("failed to compile argument pattern {pattern:?}: {source}")]
    Glob {
        pattern: String,
        #[source]
        source: globset::Error,
    },
}

/// One word of a pattern.
#[derive(Clone, Debug)]
enum Word {
    /// `**`: any number of arguments (including none).
    AnyArguments,
    /// A glob over exactly one argument.
    Glob(GlobMatcher),
}

/// A compiled pattern: words matched against the leading arguments.
#[derive(Clone, Debug)]
pub struct Pattern {
    source: String,
    words: Vec<Word>,
}

impl Pattern {
    /// Compiles a pattern (see `ArgPolicy` for the language).
    pub fn compile(source: &str) -> Result<Self, PolicyError> {
        let words = source
            .split_whitespace()
            .map(|word| {
                if word == "**" {
                    return Ok(Word::AnyArguments);
                }
                GlobBuilder::new(word)
                    .literal_separator(false)
                    .backslash_escape(true)
                    .build()
                    .map(|glob: Glob| Word::Glob(glob.compile_matcher()))
                    .map_err(|error| PolicyError::Glob {
                        pattern: source.to_owned(),
                        source: error,
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            source: source.to_owned(),
            words,
        })
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// Whether the argument list matches: every word consumes its arguments and the
    /// list must be used up unless the pattern ends in `**`.
    pub fn matches(&self, arguments: &[String]) -> bool {
        matches_from(&self.words, arguments)
    }
}

fn matches_from(words: &[Word], arguments: &[String]) -> bool {
    match words.split_first() {
        None => arguments.is_empty(),
        Some((Word::AnyArguments, rest)) => {
            (0..=arguments.len()).any(|skip| matches_from(rest, &arguments[skip..]))
        }
        Some((Word::Glob(glob), rest)) => match arguments.split_first() {
            Some((first, remaining)) => glob.is_match(first) && matches_from(rest, remaining),
            None => false,
        },
    }
}

/// A compiled allow/deny pair.
#[derive(Clone, Debug, Default)]
pub struct CompiledPolicy {
    allow: Vec<Pattern>,
    deny: Vec<Pattern>,
}

impl CompiledPolicy {
    fn compile(policy: &ArgPolicy) -> Result<Self, PolicyError> {
        Ok(Self {
            allow: policy
                .allow
                .iter()
                .map(|pattern| Pattern::compile(pattern))
                .collect::<Result<_, _>>()?,
            deny: policy
                .deny
                .iter()
                .map(|pattern| Pattern::compile(pattern))
                .collect::<Result<_, _>>()?,
        })
    }

    fn denied_by(&self, arguments: &[String]) -> Option<&Pattern> {
        self.deny.iter().find(|pattern| pattern.matches(arguments))
    }

    fn allows(&self, arguments: &[String]) -> bool {
        self.allow.is_empty() || self.allow.iter().any(|pattern| pattern.matches(arguments))
    }
}

/// The full policy of one CLI: built-in denies, the base policy and per-role layers.
#[derive(Clone, Debug, Default)]
pub struct CliPolicy {
    builtin: CompiledPolicy,
    base: CompiledPolicy,
    by_role: Vec<(String, CompiledPolicy)>,
}

/// Why a call was refused by the argument policy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// A deny pattern matched.
    Denied { pattern: String },
    /// An allow list exists and nothing in it matched.
    NotAllowed { role: Option<String> },
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Denied { pattern } => {
                write!(formatter, "arguments denied by policy ({pattern})")
            }
            Refusal::NotAllowed { role: Some(role) } => {
                write!(formatter, "arguments not allowed for role {role}")
            }
            Refusal::NotAllowed { role: None } => write!(formatter, "arguments not allowed"),
        }
    }
}

impl CliPolicy {
    /// Compiles the policy for a CLI registered as `name`.
    pub fn compile(name: &str, entry: &CliEntry) -> Result<Self, PolicyError> {
        let binary_name = std::path::Path::new(&entry.bin)
            .file_name()
            .and_then(|file| file.to_str())
            .unwrap_or_default();
        let mut builtin = ArgPolicy::default();
        builtin.deny.extend(
            builtin_deny(name)
                .iter()
                .map(|pattern| (*pattern).to_owned()),
        );
        if binary_name != name {
            builtin.deny.extend(
                builtin_deny(binary_name)
                    .iter()
                    .map(|pattern| (*pattern).to_owned()),
            );
        }
        Ok(Self {
            builtin: CompiledPolicy::compile(&builtin)?,
            base: CompiledPolicy::compile(&entry.args)?,
            by_role: entry
                .role_args
                .iter()
                .map(|(role, policy)| Ok((role.clone(), CompiledPolicy::compile(policy)?)))
                .collect::<Result<_, PolicyError>>()?,
        })
    }

    /// Decides a call. Deny wins over allow at every layer; the role layer (if the
    /// caller has a role with an entry) adds its denies and its allow list on top of
    /// the base policy, so a role can narrow but never widen what the base allows.
    pub fn check(&self, role: Option<&str>, arguments: &[String]) -> Result<(), Refusal> {
        let role_layer = role
            .and_then(|role| self.by_role.iter().find(|(name, _)| name == role))
            .map(|(_, policy)| policy);
        for layer in [Some(&self.builtin), Some(&self.base), role_layer]
            .into_iter()
            .flatten()
        {
            if let Some(pattern) = layer.denied_by(arguments) {
                return Err(Refusal::Denied {
                    pattern: pattern.as_str().to_owned(),
                });
            }
        }
        if !self.base.allows(arguments) {
            return Err(Refusal::NotAllowed { role: None });
        }
        if let Some(layer) = role_layer
            && !layer.allows(arguments)
        {
            return Err(Refusal::NotAllowed {
                role: role.map(str::to_owned),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn arguments(line: &str) -> Vec<String> {
        line.split_whitespace().map(str::to_owned).collect()
    }

    fn entry(bin: &str) -> CliEntry {
        CliEntry {
            bin: bin.into(),
            ..CliEntry::default()
        }
    }

    #[test]
    fn patterns_match_leading_words_and_double_star_anywhere() {
        let exact = Pattern::compile("pr list").unwrap();
        assert!(exact.matches(&arguments("pr list")));
        assert!(!exact.matches(&arguments("pr list --limit 5")));
        let open = Pattern::compile("pr list **").unwrap();
        assert!(open.matches(&arguments("pr list --limit 5")));
        let anywhere = Pattern::compile("** --upload-pack* **").unwrap();
        assert!(anywhere.matches(&arguments("fetch --upload-pack=evil origin")));
        assert!(anywhere.matches(&arguments("--upload-pack")));
        assert!(!anywhere.matches(&arguments("fetch origin")));
        assert!(
            !Pattern::compile("-C **")
                .unwrap()
                .matches(&arguments("-c x"))
        );
    }

    #[test]
    fn gh_escape_hatches_are_denied_by_default() {
        let policy = CliPolicy::compile("gh", &entry("/usr/bin/gh")).unwrap();
        for denied in [
            "auth token",
            "auth token --hostname github.com",
            "auth status --show-token",
            "auth status -t",
            "auth status --hostname github.com -t",
            "alias set x --shell 'cat /etc/passwd'",
            "alias set x -s y",
            "extension install owner/ext",
            "ext exec x",
            "api user --hostname evil.example",
            "config set pager less",
        ] {
            assert!(
                policy.check(None, &arguments(denied)).is_err(),
                "{denied} must be denied"
            );
        }
        for allowed in [
            "pr list",
            "auth status",
            "--version",
            "api repos/o/r/issues",
            "alias set co 'pr checkout'",
        ] {
            assert_eq!(
                policy.check(None, &arguments(allowed)),
                Ok(()),
                "{allowed} must be allowed"
            );
        }
    }

    #[test]
    fn git_pass_through_escapes_are_denied_by_binary_name_too() {
        // Registered under another name: the binary's file name still brings the denies.
        let policy = CliPolicy::compile("company-git", &entry("/usr/bin/git")).unwrap();
        for denied in [
            "-c core.sshCommand=touch%20/tmp/x fetch",
            "-c core.SSHCOMMAND=x fetch",
            "-c protocol.ext.allow=always clone ext::sh",
            "clone ext::sh%20-c%20id repo",
            "fetch --upload-pack=evil origin",
            "clone -u evil https://example.invalid/r",
            "push --receive-pack=evil",
            "-C /etc status",
            "credential fill",
            "config core.hooksPath hooks",
            "rebase -i -x id main",
        ] {
            assert!(
                policy.check(None, &arguments(denied)).is_err(),
                "{denied} must be denied"
            );
        }
        for allowed in [
            "status",
            "switch -c feature",
            "log --oneline -5",
            "clone https://example.invalid/r",
        ] {
            assert_eq!(
                policy.check(None, &arguments(allowed)),
                Ok(()),
                "{allowed} must be allowed"
            );
        }
    }

    #[test]
    fn role_layers_narrow_the_base_and_deny_wins() {
        let mut cli = entry("/usr/bin/gh");
        cli.args.allow = vec![
            "pr list **".into(),
            "pr view **".into(),
            "pr merge **".into(),
        ];
        cli.role_args = BTreeMap::from([
            (
                "employee".into(),
                ArgPolicy {
                    allow: vec![],
                    deny: vec!["pr merge **".into()],
                },
            ),
            (
                "owner".into(),
                ArgPolicy {
                    allow: vec!["pr merge **".into(), "auth token".into()],
                    deny: vec![],
                },
            ),
        ]);
        let policy = CliPolicy::compile("gh", &cli).unwrap();
        assert_eq!(
            policy.check(Some("employee"), &arguments("pr list")),
            Ok(())
        );
        assert!(matches!(
            policy.check(Some("employee"), &arguments("pr merge 7")),
            Err(Refusal::Denied { .. })
        ));
        assert_eq!(
            policy.check(Some("owner"), &arguments("pr merge 7")),
            Ok(())
        );
        assert!(matches!(
            policy.check(Some("owner"), &arguments("pr list")),
            Err(Refusal::NotAllowed { .. })
        ));
        // An owner allow entry cannot lift a built-in deny.
        assert!(matches!(
            policy.check(Some("owner"), &arguments("auth token")),
            Err(Refusal::Denied { .. })
        ));
        assert!(matches!(
            policy.check(None, &arguments("issue list")),
            Err(Refusal::NotAllowed { role: None })
        ));
    }
}
