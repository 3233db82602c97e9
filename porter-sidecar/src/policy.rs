//! Argument policy: which argument vectors a caller of a given role may run. The CLI's
//! grammar (`argv`, `profiles`) finds the command and refuses what is not allowed;
//! registry patterns then narrow it by role (deny wins).
//!
//! Pure: compiles registry patterns and matches argument lists; no I/O.

use globset::{Glob, GlobBuilder, GlobMatcher};
use porter_protocol::registry::{ArgPolicy, CliEntry, OptionArity, Profile};
use thiserror::Error;

use crate::{
    argv::{CommandSpec, Grammar, OptionSpec},
    profiles,
};

/// Why a pattern could not be compiled.
#[derive(Debug, Error)]
pub enum PolicyError {
    #[error("failed to compile argument pattern {pattern:?}")]
    Glob {
        pattern: String,
        #[source]
        source: globset::Error,
    },
    #[error("{0}")]
    Grammar(String),
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

/// The full policy of one CLI: its grammar (a shipped profile or the entry's own
/// `globalOptions`/`commands`), then the base patterns and per-role layers, which see
/// the command path and the command's arguments with global options taken out.
#[derive(Clone, Debug, Default)]
pub struct CliPolicy {
    profile: Option<Profile>,
    grammar: Option<Grammar>,
    base: CompiledPolicy,
    by_role: Vec<(String, CompiledPolicy)>,
}

/// Why a call was refused by the argument policy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The grammar refused it (unknown command, denied option, bad option order).
    Grammar { message: String },
    /// A deny pattern matched.
    Denied { pattern: String },
    /// An allow list exists and nothing in it matched.
    NotAllowed { role: Option<String> },
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Grammar { message } => write!(formatter, "arguments refused: {message}"),
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

/// The profile an entry runs under: its `profile` field, else (for registries written
/// before the field) the profile of the name the CLI is registered under. Never the
/// binary's file name: a binary is named by whoever installed it, and a renamed `gh`
/// must not lose its grammar while a script called `git` must not borrow one.
pub fn effective_profile(name: &str, entry: &CliEntry) -> Option<Profile> {
    entry.profile.or_else(|| Profile::named(name))
}

fn custom_grammar(name: &str, entry: &CliEntry) -> Option<Grammar> {
    if entry.global_options.is_empty() && entry.commands.is_empty() {
        return None;
    }
    let global = entry
        .global_options
        .iter()
        .map(|(spelling, arity)| OptionSpec::new(spelling, *arity == OptionArity::Value))
        .collect();
    let commands = entry
        .commands
        .iter()
        .map(|path| CommandSpec::new(path.trim_end_matches("**")))
        .collect();
    Some(Grammar {
        name: name.to_owned(),
        global,
        commands,
        everywhere: Vec::new(),
        abbreviations: false,
    })
}

impl CliPolicy {
    /// Compiles the policy for a CLI registered as `name`.
    pub fn compile(name: &str, entry: &CliEntry) -> Result<Self, PolicyError> {
        let profile = effective_profile(name, entry);
        if profile.is_some() && custom_grammar(name, entry).is_some() {
            return Err(PolicyError::Grammar(
                "globalOptions and commands are for CLIs without a profile; narrow a profile with args.allow".into(),
            ));
        }
        if let Some(option) = entry.global_options.keys().find(|spelling| {
            let long = spelling.len() > 2 && spelling.starts_with("--");
            let short = spelling.len() == 2 && spelling.starts_with('-') && *spelling != "--";
            !(long || short) || spelling.contains('=')
        }) {
            return Err(PolicyError::Grammar(format!(
                "globalOptions: {option:?} is not an option (--name or -x)"
            )));
        }
        if let Some(path) = entry.commands.iter().find(|path| {
            let words: Vec<&str> = path.split_whitespace().collect();
            words.is_empty()
                || words[..words.len() - 1]
                    .iter()
                    .chain(words.last().filter(|last| **last != "**"))
                    .any(|word| word.starts_with('-') || word.contains('*'))
        }) {
            return Err(PolicyError::Grammar(format!(
                "commands: {path:?} is not a command path (words, optionally ending in **)"
            )));
        }
        Ok(Self {
            profile,
            grammar: profile
                .map(profiles::grammar)
                .or_else(|| custom_grammar(name, entry)),
            base: CompiledPolicy::compile(&entry.args)?,
            by_role: entry
                .role_args
                .iter()
                .map(|(role, policy)| Ok((role.clone(), CompiledPolicy::compile(policy)?)))
                .collect::<Result<_, PolicyError>>()?,
        })
    }

    /// The profile this CLI runs under.
    pub fn profile(&self) -> Option<Profile> {
        self.profile
    }

    /// Files a call names for the CLI to read (relative to its working directory), for
    /// Porter to check against the workspace; empty when the grammar refuses the call.
    pub fn files_read(&self, arguments: &[String]) -> Vec<String> {
        self.grammar
            .as_ref()
            .and_then(|grammar| grammar.parse(arguments).ok())
            .map(|parsed| parsed.files)
            .unwrap_or_default()
    }

    /// Decides a call. The grammar goes first; then deny wins over allow at every
    /// layer; the role layer (if the caller has a role with an entry) adds its denies
    /// and its allow list on top of the base policy, so a role can narrow but never
    /// widen what the base allows.
    pub fn check(&self, role: Option<&str>, arguments: &[String]) -> Result<(), Refusal> {
        let normalized = match &self.grammar {
            Some(grammar) => grammar
                .parse(arguments)
                .map_err(|refusal| Refusal::Grammar { message: refusal.0 })?
                .normalized(),
            None => arguments.to_vec(),
        };
        let arguments = &normalized[..];
        let role_layer = role
            .and_then(|role| self.by_role.iter().find(|(name, _)| name == role))
            .map(|(_, policy)| policy);
        for layer in [Some(&self.base), role_layer].into_iter().flatten() {
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
    fn the_profile_comes_from_the_field_or_the_name_and_refuses_escapes() {
        // Registered under another name with a renamed binary: the field decides.
        let mut renamed = entry("/opt/tools/github-cli");
        renamed.profile = Some(Profile::Gh);
        let policy = CliPolicy::compile("github", &renamed).unwrap();
        assert_eq!(policy.profile(), Some(Profile::Gh));
        for denied in [
            "auth token",
            "auth --hostname github.com token",
            "alias set x !printenv",
            "extension install .",
        ] {
            assert!(
                matches!(
                    policy.check(None, &arguments(denied)),
                    Err(Refusal::Grammar { .. })
                ),
                "{denied} must be refused"
            );
        }
        assert_eq!(policy.check(None, &arguments("pr list")), Ok(()));
        // Older registries: the registered name still brings the profile...
        let by_name = CliPolicy::compile("git", &entry("/opt/vendor/scm")).unwrap();
        assert_eq!(by_name.profile(), Some(Profile::Git));
        assert!(by_name.check(None, &arguments("-c a=b status")).is_err());
        // ...the binary's file name never does.
        let by_binary = CliPolicy::compile("company-git", &entry("/usr/bin/git")).unwrap();
        assert_eq!(by_binary.profile(), None);
        assert_eq!(
            CliPolicy::compile("tool", &entry("/usr/bin/tool"))
                .unwrap()
                .profile(),
            None
        );
    }

    #[test]
    fn patterns_see_the_command_path_with_global_options_taken_out() {
        let mut git = entry("/usr/bin/git");
        git.args.deny = vec!["push **".into()];
        let policy = CliPolicy::compile("git", &git).unwrap();
        assert!(matches!(
            policy.check(None, &arguments("--no-pager push origin")),
            Err(Refusal::Denied { .. })
        ));
        assert_eq!(policy.check(None, &arguments("--no-pager log -1")), Ok(()));
    }

    #[test]
    fn a_custom_grammar_finds_commands_and_bad_declarations_fail_the_load() {
        let mut tool = entry("/usr/bin/tool");
        tool.global_options = BTreeMap::from([
            ("--account".into(), OptionArity::Value),
            ("-v".into(), OptionArity::Flag),
        ]);
        tool.commands = vec!["calendar list".into(), "gmail **".into()];
        let policy = CliPolicy::compile("tool", &tool).unwrap();
        assert_eq!(
            policy.check(None, &arguments("--account me -v calendar list")),
            Ok(())
        );
        assert_eq!(policy.check(None, &arguments("gmail search x")), Ok(()));
        assert!(policy.check(None, &arguments("auth export")).is_err());
        assert!(
            policy
                .check(None, &arguments("--token x gmail search"))
                .is_err()
        );

        let mut bad = tool.clone();
        bad.commands = vec!["gmail --all".into()];
        assert!(CliPolicy::compile("tool", &bad).is_err());
        let mut bad = tool.clone();
        bad.global_options = BTreeMap::from([("account".into(), OptionArity::Value)]);
        assert!(CliPolicy::compile("tool", &bad).is_err());
        let mut both = tool;
        both.profile = Some(Profile::Gog);
        assert!(CliPolicy::compile("tool", &both).is_err());
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
        // An owner allow entry cannot lift the profile's refusal.
        assert!(matches!(
            policy.check(Some("owner"), &arguments("auth token")),
            Err(Refusal::Grammar { .. })
        ));
        assert!(matches!(
            policy.check(None, &arguments("issue list")),
            Err(Refusal::NotAllowed { role: None })
        ));
    }
}
