//! Argument grammar: finds a call's command path wherever the CLI's global options
//! stand, refuses commands outside an allowlist, and checks the command's own
//! arguments for options that run code, print or redirect the credential, or read
//! files outside the working directory.
//!
//! Pure: parses argument lists; no I/O. The shipped grammars are in `profiles`.
//!
//! The parser errs towards refusing: an option before the command that the grammar
//! does not know is refused (it could take the next word as its value and shift the
//! command path), and in a command's own arguments an unknown short option is read as
//! a flag, so the rest of its cluster is still checked.

/// One option of a grammar.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OptionSpec {
    /// `--name`, with the dashes.
    pub long: Option<String>,
    /// `-x`, without the dash.
    pub short: Option<char>,
    /// Whether it takes a value (`--name value`, `--name=value`, `-xvalue`).
    pub takes_value: bool,
}

impl OptionSpec {
    /// An option from its spellings (`"--repo"`, `"-R"` or `"-R|--repo"`).
    pub fn new(spellings: &str, takes_value: bool) -> Self {
        let mut spec = Self {
            long: None,
            short: None,
            takes_value,
        };
        for spelling in spellings.split('|') {
            if let Some(long) = spelling.strip_prefix("--") {
                spec.long = Some(format!("--{long}"));
            } else if let Some(short) = spelling.strip_prefix('-') {
                spec.short = short.chars().next();
            }
        }
        spec
    }
}

/// A test on one argument or option value; `true` refuses.
pub type Predicate = fn(&str) -> bool;

/// What a command's own arguments may not contain.
#[derive(Clone, Debug)]
pub enum Check {
    /// The option in any spelling (`--name`, `--name=v`, a unique prefix where the
    /// grammar expands prefixes, `-x`, `-x` inside a cluster).
    DenyOption {
        option: OptionSpec,
        why: &'static str,
    },
    /// The option's value fails `refuse` (the value may be attached or the next word).
    DenyValue {
        option: OptionSpec,
        refuse: Predicate,
        why: &'static str,
    },
    /// Any word that is not an option's value fails `refuse`.
    DenyWord {
        refuse: Predicate,
        why: &'static str,
    },
    /// The option's value (or, without an option, every word that is not an option's
    /// value) may name a file the CLI reads: `file` extracts the path, if any. Porter
    /// checks each such path against the workspace once the working directory is known
    /// ([`Parsed::files`]); a symlink out of the workspace is refused there.
    ReadsFile {
        option: Option<OptionSpec>,
        file: FilePart,
    },
}

/// The path inside an argument that names a file (`key=@path` → `path`), if any.
pub type FilePart = fn(&str) -> Option<&str>;

/// One allowed command path.
#[derive(Clone, Debug)]
pub struct CommandSpec {
    pub words: Vec<String>,
    /// Options of this command that take a value: their values are skipped by
    /// [`Check::DenyWord`] (a commit message is not a path).
    pub values: Vec<OptionSpec>,
    pub checks: Vec<Check>,
}

impl CommandSpec {
    /// A command path (`"pr list"`) with no checks.
    pub fn new(path: &str) -> Self {
        Self {
            words: path.split_whitespace().map(str::to_owned).collect(),
            values: Vec::new(),
            checks: Vec::new(),
        }
    }

    pub fn check(mut self, check: Check) -> Self {
        self.checks.push(check);
        self
    }

    pub fn values(mut self, spellings: &[&str]) -> Self {
        self.values.extend(
            spellings
                .iter()
                .map(|spelling| OptionSpec::new(spelling, true)),
        );
        self
    }
}

/// A CLI's grammar.
#[derive(Clone, Debug, Default)]
pub struct Grammar {
    /// Used in refusal messages (`gh`).
    pub name: String,
    /// Options accepted before the command.
    pub global: Vec<OptionSpec>,
    /// The allowlist; empty: any command (only the global options are checked).
    pub commands: Vec<CommandSpec>,
    /// Checks on every command's arguments.
    pub everywhere: Vec<Check>,
    /// Long options may be abbreviated to a prefix (git's parse-options): a prefix of a
    /// denied option is denied.
    pub abbreviations: bool,
}

/// A call as the grammar reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Parsed {
    /// The command path (`["pr", "list"]`); empty for a bare call (`gh --version`).
    pub path: Vec<String>,
    /// The command's own arguments, as given.
    pub rest: Vec<String>,
    /// Paths of files the call names for the CLI to read, relative to the working
    /// directory (see [`Check::ReadsFile`]).
    pub files: Vec<String>,
}

impl Parsed {
    /// The path followed by the command's arguments: what argument patterns see.
    pub fn normalized(&self) -> Vec<String> {
        self.path.iter().chain(&self.rest).cloned().collect()
    }
}

/// Why the grammar refused a call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GrammarRefusal(pub String);

impl std::fmt::Display for GrammarRefusal {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(&self.0)
    }
}

fn refuse(message: impl Into<String>) -> Result<Parsed, GrammarRefusal> {
    Err(GrammarRefusal(message.into()))
}

impl Grammar {
    fn global_long(&self, name: &str) -> Option<&OptionSpec> {
        self.global
            .iter()
            .find(|spec| spec.long.as_deref() == Some(name))
    }

    fn global_short(&self, short: char) -> Option<&OptionSpec> {
        self.global.iter().find(|spec| spec.short == Some(short))
    }

    /// Parses and checks a call.
    pub fn parse(&self, arguments: &[String]) -> Result<Parsed, GrammarRefusal> {
        let mut path: Vec<String> = Vec::new();
        let mut index = 0;
        let command = loop {
            // Complete as soon as the path names an allowed command.
            if let Some(command) = self.commands.iter().find(|command| command.words == path) {
                break Some(command);
            }
            if self.commands.is_empty() && !path.is_empty() {
                break None;
            }
            let Some(argument) = arguments.get(index) else {
                if path.is_empty() {
                    // `gh`, `git --version`: help and version only.
                    return Ok(Parsed {
                        path,
                        rest: Vec::new(),
                        files: Vec::new(),
                    });
                }
                return refuse(format!(
                    "`{} {}` is not an allowed command",
                    self.name,
                    path.join(" ")
                ));
            };
            index += 1;
            if argument == "--" {
                return refuse(format!("`--` before the {} command", self.name));
            }
            if let Some(long) = argument.strip_prefix("--") {
                let (name, attached) = match long.split_once('=') {
                    Some((name, value)) => (format!("--{name}"), Some(value)),
                    None => (argument.clone(), None),
                };
                let Some(spec) = self.global_long(&name) else {
                    return refuse(format!(
                        "option {name} is not allowed before the {} command (put command options after the command)",
                        self.name
                    ));
                };
                match (spec.takes_value, attached) {
                    (true, None) if index >= arguments.len() => {
                        return refuse(format!("option {name} needs a value"));
                    }
                    (true, None) => index += 1,
                    (false, Some(_)) => {
                        return refuse(format!("option {name} takes no value"));
                    }
                    _ => {}
                }
            } else if argument.len() > 1 && argument.starts_with('-') {
                let cluster: Vec<char> = argument[1..].chars().collect();
                for (position, short) in cluster.iter().enumerate() {
                    let Some(spec) = self.global_short(*short) else {
                        return refuse(format!(
                            "option -{short} is not allowed before the {} command (put command options after the command)",
                            self.name
                        ));
                    };
                    if spec.takes_value {
                        if position + 1 == cluster.len() {
                            if index >= arguments.len() {
                                return refuse(format!("option -{short} needs a value"));
                            }
                            index += 1;
                        }
                        break;
                    }
                }
            } else {
                path.push(argument.clone());
                let known = self.commands.is_empty()
                    || self
                        .commands
                        .iter()
                        .any(|command| command.words.starts_with(&path));
                if !known {
                    return refuse(format!(
                        "`{} {}` is not an allowed command",
                        self.name,
                        path.join(" ")
                    ));
                }
            }
        };
        let mut parsed = Parsed {
            path,
            rest: arguments[index..].to_vec(),
            files: Vec::new(),
        };
        parsed.files = self.check_rest(command, &parsed)?;
        Ok(parsed)
    }

    /// Runs the command's and the grammar-wide checks over the command's arguments;
    /// returns the files they name.
    fn check_rest(
        &self,
        command: Option<&CommandSpec>,
        parsed: &Parsed,
    ) -> Result<Vec<String>, GrammarRefusal> {
        let checks: Vec<&Check> = command
            .map(|command| command.checks.iter())
            .into_iter()
            .flatten()
            .chain(&self.everywhere)
            .collect();
        let values: &[OptionSpec] = command.map(|command| &command.values[..]).unwrap_or(&[]);
        let rest = &parsed.rest;
        let denied = |why: &str, argument: &str| {
            Err(GrammarRefusal(format!(
                "`{} {}`: {argument:?} {why}",
                self.name,
                parsed.path.join(" ")
            )))
        };
        let mut files = Vec::new();
        let mut index = 0;
        while index < rest.len() {
            let argument = &rest[index];
            let next = rest.get(index + 1).map(String::as_str);
            let mut skip_next = false;
            if let Some(long) = argument.strip_prefix("--").filter(|long| !long.is_empty()) {
                let (name, attached) = match long.split_once('=') {
                    Some((name, value)) => (format!("--{name}"), Some(value)),
                    None => (argument.clone(), None),
                };
                let names = |spec: &OptionSpec| {
                    spec.long.as_deref().is_some_and(|long| {
                        long == name || (self.abbreviations && long.starts_with(&name))
                    })
                };
                for check in &checks {
                    match check {
                        Check::DenyOption { option, why } if names(option) => {
                            return denied(why, argument);
                        }
                        Check::DenyValue {
                            option,
                            refuse,
                            why,
                        } if names(option) => {
                            let value = attached.or(next).unwrap_or_default();
                            if refuse(value) {
                                return denied(why, value);
                            }
                            skip_next |= attached.is_none();
                        }
                        Check::ReadsFile {
                            option: Some(option),
                            file,
                        } if names(option) => {
                            let value = attached.or(next).unwrap_or_default();
                            files.extend(file(value).map(str::to_owned));
                            skip_next |= attached.is_none();
                        }
                        _ => {}
                    }
                }
                if attached.is_none()
                    && values
                        .iter()
                        .any(|spec| spec.long.as_deref() == Some(&name))
                {
                    skip_next = true;
                }
            } else if argument.len() > 1 && argument.starts_with('-') && argument != "--" {
                let cluster = &argument[1..];
                for (position, short) in cluster.char_indices() {
                    let after = &cluster[position + short.len_utf8()..];
                    let value = if after.is_empty() {
                        next.unwrap_or_default()
                    } else {
                        after
                    };
                    let mut takes_value = false;
                    for check in &checks {
                        match check {
                            Check::DenyOption { option, why } if option.short == Some(short) => {
                                return denied(why, argument);
                            }
                            Check::DenyValue {
                                option,
                                refuse,
                                why,
                            } if option.short == Some(short) => {
                                if refuse(value) {
                                    return denied(why, value);
                                }
                                takes_value = true;
                            }
                            Check::ReadsFile {
                                option: Some(option),
                                file,
                            } if option.short == Some(short) => {
                                files.extend(file(value).map(str::to_owned));
                                takes_value = true;
                            }
                            _ => {}
                        }
                    }
                    takes_value |= values.iter().any(|spec| spec.short == Some(short));
                    if takes_value {
                        skip_next = after.is_empty();
                        break;
                    }
                }
            } else {
                for check in &checks {
                    match check {
                        Check::DenyWord { refuse, why } if refuse(argument) => {
                            return denied(why, argument);
                        }
                        Check::ReadsFile { option: None, file } => {
                            files.extend(file(argument).map(str::to_owned));
                        }
                        _ => {}
                    }
                }
            }
            index += if skip_next { 2 } else { 1 };
        }
        Ok(files)
    }
}

/// A path that leaves the working directory: absolute, or with a `..` component.
pub fn leaves_cwd(word: &str) -> bool {
    word.starts_with('/') || word.split('/').any(|component| component == "..")
}

/// A git URL that runs a program or reads Porter's own files: a remote helper
/// (`ext::sh -c …`, `fd::`, any `<transport>::`) or a local `file:` / path URL.
pub fn runs_or_reads_locally(word: &str) -> bool {
    word.contains("::") || word.to_ascii_lowercase().starts_with("file:") || leaves_cwd(word)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(line: &str) -> Vec<String> {
        line.split_whitespace().map(str::to_owned).collect()
    }

    fn grammar() -> Grammar {
        Grammar {
            name: "tool".into(),
            global: vec![
                OptionSpec::new("-a|--account", true),
                OptionSpec::new("-v|--verbose", false),
            ],
            commands: vec![
                CommandSpec::new("mail search")
                    .values(&["-m|--message"])
                    .check(Check::ReadsFile {
                        option: Some(OptionSpec::new("-b|--body-file", true)),
                        file: |value| (value != "-").then_some(value),
                    }),
                CommandSpec::new("mail send")
                    .check(Check::DenyOption {
                        option: OptionSpec::new("-u|--upload-pack", true),
                        why: "runs a program",
                    })
                    .check(Check::DenyWord {
                        refuse: leaves_cwd,
                        why: "leaves the working directory",
                    }),
            ],
            everywhere: vec![],
            abbreviations: true,
        }
    }

    #[test]
    fn the_command_is_found_wherever_global_options_stand() {
        let grammar = grammar();
        for line in [
            "mail search x",
            "--account me mail search x",
            "-a me -v mail search x",
            "-vame mail search x",
            "--account=me mail search x",
        ] {
            assert_eq!(
                grammar.parse(&words(line)).map(|parsed| parsed.path),
                Ok(words("mail search")),
                "{line}"
            );
        }
        assert_eq!(
            grammar.parse(&words("-v")).unwrap().path,
            Vec::<String>::new()
        );
    }

    #[test]
    fn unknown_commands_and_options_before_the_command_are_refused() {
        let grammar = grammar();
        for line in [
            "mail",
            "mail delete",
            "alias set x",
            "--hostname x mail search",
            "mail --hostname x search",
            "-x mail search",
            "-- mail search",
            "--verbose=yes mail search",
            "--account",
        ] {
            assert!(
                grammar.parse(&words(line)).is_err(),
                "{line} must be refused"
            );
        }
    }

    #[test]
    fn denied_options_are_found_in_every_spelling() {
        let grammar = grammar();
        for line in [
            "mail send -u evil",
            "mail send -uevil",
            "mail send -qu evil",
            "mail send --upload-pack=evil",
            "mail send --upload-pac=evil",
            "mail send --up evil",
            "mail send ../x",
            "mail send /etc/passwd",
        ] {
            assert!(
                grammar.parse(&words(line)).is_err(),
                "{line} must be refused"
            );
        }
        assert!(grammar.parse(&words("mail send -q to@x")).is_ok());
        // A value is not a word to check: a message may name a path.
        assert!(grammar.parse(&words("mail search -m /etc x")).is_ok());
        // Files named for reading are reported, in every spelling, for Porter to check.
        assert_eq!(
            grammar
                .parse(&words(
                    "mail search -b a.txt --body-file=b.txt -bc.txt -b -"
                ))
                .unwrap()
                .files,
            ["a.txt", "b.txt", "c.txt"]
        );
    }
}
