//! Skills: `<name>/SKILL.md` folders of instructions a role may load on demand.
//!
//! Sources: each directory of the config's `skills.directories` (in order; the first
//! holding a name wins) and the workspace's `skills/`; a declared directory's skill wins
//! over the workspace's of the same name, and a declared skill that is refused
//! (malformed, too large, a symlink) is left out without the workspace's copy standing
//! in for it, as with persona files.
//!
//! A skill file starts with front matter between two `---` lines holding `name` (absent,
//! or equal to the folder name) and `description` (required). Its parser is a small
//! strict `key: value` reader (no YAML crate in this crate): plain, single- or
//! double-quoted values, `>`/`|` blocks and indented continuation lines; other keys are
//! ignored. The description is folded to one line and cut to
//! [`MAX_DESCRIPTION_CHARS`]; the body (everything after the closing `---`) is what the
//! `skill` tool returns. The system prompt lists names and descriptions only.
//!
//! Every file is read beneath its root through saint-paths (no symlink followed, hard
//! links refused, size-capped). A declared directory may be a Kubernetes ConfigMap
//! volume: the kubelet puts the files in a timestamped directory and points `..data` at
//! it, with one symlink per key. As for the persona directory, the per-key symlinks are
//! never followed: `..data` is read with readlink, its target accepted only when it is a
//! plain name inside the directory, and the files are opened beneath the mount as
//! `<target>/…`. This is done at the directory's top (one ConfigMap holding
//! `<name>/SKILL.md` items) and in each skill folder (one ConfigMap per skill mounted at
//! `<dir>/<name>`). A read racing a volume update fails for that skill, which is then
//! left out of that turn only.
//!
//! Malformed skills are skipped with a warning (logged once per distinct problem, not
//! every turn); nothing here panics on file contents.

use std::{
    collections::{BTreeMap, HashSet},
    fs, io,
    path::Path,
    sync::OnceLock,
};

use futures::future::BoxFuture;
use saint_config::{BotConfig, Skills};
use saint_paths::{BeneathPath, PathError, Workspace, WorkspacePath};
use schemars::JsonSchema;
use serde::Deserialize;

use crate::{Permit, ToolContext, ToolError, ToolOutput, TypedTool, files::blocking};
use parking_lot::Mutex;

/// The workspace folder holding skills.
pub const WORKSPACE_SKILLS: &str = "skills";
/// The file each skill folder holds.
pub const SKILL_FILE: &str = "SKILL.md";
/// Largest skill file read, in bytes; larger skills are skipped.
pub const MAX_SKILL_BYTES: u64 = 64 * 1024;
/// Largest front matter (between the two `---` lines), in bytes.
pub const MAX_FRONT_MATTER_BYTES: usize = 8 * 1024;
/// Longest description listed in the prompt, in characters (longer ones are cut).
pub const MAX_DESCRIPTION_CHARS: usize = 160;
/// Longest skill (folder) name.
pub const MAX_NAME_CHARS: usize = 64;
/// Most skills one catalogue holds (each source is read in name order; the rest are
/// skipped with a warning), so a crowded directory cannot flood every prompt.
pub const MAX_SKILLS: usize = 200;

/// The kubelet's name for the symlink to the current version of a ConfigMap volume.
const DATA_LINK: &str = "..data";

/// Whether `name` may name a skill: 1 to [`MAX_NAME_CHARS`] lowercase ASCII letters,
/// digits, `-` or `_`, starting with a letter or digit. No dots, so no `..`, no
/// hidden or kubelet-internal (`..data`) entries, and nothing path-like.
pub fn is_skill_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= MAX_NAME_CHARS
        && (bytes[0].is_ascii_lowercase() || bytes[0].is_ascii_digit())
        && bytes.iter().all(|byte| {
            byte.is_ascii_lowercase() || byte.is_ascii_digit() || matches!(byte, b'-' | b'_')
        })
}

/// Whether the role's `skills` setting lets it use the skill `name`.
pub fn role_allows(skills: &Skills, name: &str) -> bool {
    match skills {
        Skills::All => true,
        Skills::Only(names) => names.iter().any(|allowed| allowed == name),
        Skills::None => false,
    }
}

/// Where a skill was read from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SkillSource {
    /// The workspace's `skills/<name>/`.
    Workspace,
    /// A declared directory (`skills.directories`).
    Directory(String),
}

/// One installed skill.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Skill {
    /// The folder name (equal to the front matter's `name` when it has one).
    pub name: String,
    /// One line, at most [`MAX_DESCRIPTION_CHARS`] characters.
    pub description: String,
    /// The instructions after the front matter.
    pub body: String,
    /// Where it came from.
    pub source: SkillSource,
}

/// Why a skill file was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SkillError {
    #[error("it does not start with a `---` front matter line")]
    NoFrontMatter,
    #[error("its front matter has no closing `---` line within {MAX_FRONT_MATTER_BYTES} bytes")]
    UnclosedFrontMatter,
    #[error("front matter line {line}: {reason}")]
    Malformed { line: usize, reason: String },
    #[error("front matter key {0:?} appears twice")]
    DuplicateKey(String),
    #[error("front matter name {found:?} differs from the folder name {folder:?}")]
    NameMismatch { folder: String, found: String },
    #[error("front matter has no description")]
    NoDescription,
    #[error(
        "the folder name {0:?} is not a skill name (lowercase letters, digits, - and _, at most {MAX_NAME_CHARS})"
    )]
    BadFolderName(String),
}

/// The front matter and body of a skill file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParsedSkill {
    /// The description, folded to one line and cut.
    pub description: String,
    /// Everything after the closing `---` line, without leading blank lines.
    pub body: String,
}

/// Parses the skill file `text` of folder `folder`.
pub fn parse_skill(folder: &str, text: &str) -> Result<ParsedSkill, SkillError> {
    if !is_skill_name(folder) {
        return Err(SkillError::BadFolderName(folder.to_string()));
    }
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut lines = text.split_inclusive('\n');
    let first = lines.next().unwrap_or("");
    if trim_line_end(first) != "---" {
        return Err(SkillError::NoFrontMatter);
    }
    let mut consumed = first.len();
    let mut header: Vec<&str> = Vec::new();
    let mut closed = false;
    for line in lines {
        consumed += line.len();
        if consumed > MAX_FRONT_MATTER_BYTES {
            break;
        }
        if trim_line_end(line) == "---" {
            closed = true;
            break;
        }
        header.push(trim_line_end(line));
    }
    if !closed {
        return Err(SkillError::UnclosedFrontMatter);
    }
    let keys = parse_front_matter(&header)?;
    if let Some(name) = keys.get("name")
        && name != folder
    {
        return Err(SkillError::NameMismatch {
            folder: folder.to_string(),
            found: name.chars().take(MAX_NAME_CHARS + 8).collect(),
        });
    }
    let description = keys
        .get("description")
        .map(|description| one_line(description, MAX_DESCRIPTION_CHARS))
        .filter(|description| !description.is_empty())
        .ok_or(SkillError::NoDescription)?;
    let body = text[consumed..]
        .trim_start_matches(['\r', '\n'])
        .to_string();
    Ok(ParsedSkill { description, body })
}

fn trim_line_end(line: &str) -> &str {
    line.trim_end_matches(['\n', '\r', ' ', '\t'])
}

/// The front matter's top-level `key: value` pairs (values unquoted, continuation and
/// block lines joined with spaces or newlines). Comments and blank lines are skipped;
/// a line that is neither a key, a continuation nor a comment is an error.
fn parse_front_matter(lines: &[&str]) -> Result<BTreeMap<String, String>, SkillError> {
    let mut keys: BTreeMap<String, String> = BTreeMap::new();
    let mut current: Option<String> = None;
    for (index, line) in lines.iter().enumerate() {
        let number = index + 2;
        let malformed = |reason: &str| SkillError::Malformed {
            line: number,
            reason: reason.to_string(),
        };
        if line.trim().is_empty() || line.trim_start().starts_with('#') {
            continue;
        }
        if line.starts_with([' ', '\t']) || line.starts_with("- ") {
            // A continuation of the previous key (block scalar, folded plain scalar, or
            // a nested value of a key this parser ignores).
            let Some(key) = &current else {
                return Err(malformed("indented line before any key"));
            };
            let value = keys.get_mut(key).expect("current key is stored");
            if !value.is_empty() {
                value.push('\n');
            }
            value.push_str(line.trim());
            continue;
        }
        let Some((key, value)) = line.split_once(':') else {
            return Err(malformed("expected `key: value`"));
        };
        let key = key.trim();
        if key.is_empty()
            || !key.chars().all(|character| {
                character.is_ascii_alphanumeric() || matches!(character, '-' | '_')
            })
        {
            return Err(malformed("a key is letters, digits, - and _"));
        }
        if !value.is_empty() && !value.starts_with([' ', '\t']) {
            return Err(malformed("expected a space after `:`"));
        }
        if keys.contains_key(key) {
            return Err(SkillError::DuplicateKey(key.to_string()));
        }
        let value = unquote(value.trim()).map_err(malformed)?;
        keys.insert(key.to_string(), value);
        current = Some(key.to_string());
    }
    Ok(keys)
}

/// A scalar value: quoted (`"…"` with `\"`/`\\` escapes, or `'…'` with `''`), a block
/// indicator (`>`, `|`, optionally with `-`/`+`: the lines follow), or plain text.
fn unquote(value: &str) -> Result<String, &'static str> {
    if matches!(value, ">" | ">-" | ">+" | "|" | "|-" | "|+") {
        return Ok(String::new());
    }
    if let Some(inner) = value.strip_prefix('"') {
        let Some(inner) = inner.strip_suffix('"') else {
            return Err("unterminated double quote");
        };
        let mut unquoted = String::with_capacity(inner.len());
        let mut characters = inner.chars();
        while let Some(character) = characters.next() {
            match character {
                '\\' => match characters.next() {
                    Some('n') => unquoted.push('\n'),
                    Some('t') => unquoted.push('\t'),
                    Some(escaped @ ('"' | '\\' | '/')) => unquoted.push(escaped),
                    _ => return Err("unsupported escape in a double-quoted value"),
                },
                '"' => return Err("unescaped double quote inside a double-quoted value"),
                other => unquoted.push(other),
            }
        }
        return Ok(unquoted);
    }
    if let Some(inner) = value.strip_prefix('\'') {
        let Some(inner) = inner.strip_suffix('\'') else {
            return Err("unterminated single quote");
        };
        if inner.replace("''", "").contains('\'') {
            return Err("unescaped single quote inside a single-quoted value");
        }
        return Ok(inner.replace("''", "'"));
    }
    // A plain value ends at a ` #` comment, as in YAML.
    let plain = value.split(" #").next().unwrap_or("").trim_end();
    Ok(plain.to_string())
}

/// Text folded to one line: control characters and runs of whitespace become one
/// space; cut to `max` characters with `…`.
fn one_line(text: &str, max: usize) -> String {
    let folded = text
        .split(|character: char| character.is_whitespace() || character.is_control())
        .filter(|word| !word.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    match folded.char_indices().nth(max.saturating_sub(1)) {
        Some((cut, _)) if folded.chars().count() > max => {
            format!("{}…", folded[..cut].trim_end())
        }
        _ => folded,
    }
}

/// The skills installed for this bot, by name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SkillCatalog {
    skills: BTreeMap<String, Skill>,
    /// Skills left out, with why (already logged).
    pub problems: Vec<String>,
}

impl SkillCatalog {
    /// Reads every source: the declared directories of `config.skills`, then the
    /// workspace's `skills/` for names no directory declared.
    pub fn load(workspace: &Path, config: &BotConfig) -> Self {
        let mut catalog = Self::default();
        // Names a declared directory holds, usable or not: the workspace's copy never
        // stands in for a declared skill that was refused.
        let mut declared: HashSet<String> = HashSet::new();
        for directory in &config.skills.directories {
            let source = SkillSource::Directory(directory.clone());
            match read_source(Path::new(directory), "", true) {
                Ok(folders) => catalog.add(folders, &source, &mut declared),
                Err(problem) => catalog.problem(format!("skills directory {directory}: {problem}")),
            }
        }
        match read_source(workspace, WORKSPACE_SKILLS, false) {
            Ok(folders) => catalog.add(folders, &SkillSource::Workspace, &mut declared),
            Err(ReadError::NoDirectory) => {}
            Err(problem) => catalog.problem(format!("workspace {WORKSPACE_SKILLS}/: {problem}")),
        }
        catalog
    }

    fn add(&mut self, folders: Vec<SkillFolder>, source: &SkillSource, seen: &mut HashSet<String>) {
        let shown = match source {
            SkillSource::Workspace => format!("{WORKSPACE_SKILLS}/"),
            SkillSource::Directory(directory) => format!("{directory}/"),
        };
        for (name, read) in folders {
            if !seen.insert(name.clone()) {
                continue;
            }
            if self.skills.len() >= MAX_SKILLS {
                self.problem(format!(
                    "skill {shown}{name} skipped: more than {MAX_SKILLS} skills are installed"
                ));
                continue;
            }
            let parsed =
                read.and_then(|text| parse_skill(&name, &text).map_err(ReadError::Refused));
            match parsed {
                Ok(parsed) => {
                    self.skills.insert(
                        name.clone(),
                        Skill {
                            name,
                            description: parsed.description,
                            body: parsed.body,
                            source: source.clone(),
                        },
                    );
                }
                Err(problem) => {
                    self.problem(format!("skill {shown}{name} skipped: {problem}"));
                }
            }
        }
    }

    fn problem(&mut self, problem: String) {
        warn_once(&problem);
        self.problems.push(problem);
    }

    /// Every installed skill, by name.
    pub fn all(&self) -> impl Iterator<Item = &Skill> {
        self.skills.values()
    }

    /// The installed skills `skills` allows, by name.
    pub fn allowed<'a>(&'a self, skills: &'a Skills) -> impl Iterator<Item = &'a Skill> + 'a {
        self.skills
            .values()
            .filter(move |skill| role_allows(skills, &skill.name))
    }

    /// Whether any installed skill is one `skills` allows (the `skill` tool is offered
    /// only then: see `policy::without_idle_skill_tool`).
    pub fn allows_any(&self, skills: &Skills) -> bool {
        self.allowed(skills).next().is_some()
    }

    /// The installed skill `name`.
    pub fn get(&self, name: &str) -> Option<&Skill> {
        self.skills.get(name)
    }

    /// How many skills are installed.
    pub fn len(&self) -> usize {
        self.skills.len()
    }

    /// Whether no skill is installed.
    pub fn is_empty(&self) -> bool {
        self.skills.is_empty()
    }
}

/// Why a skills source, or one skill in it, was left out (logged with its name).
#[derive(Debug, thiserror::Error)]
enum ReadError {
    #[error("no such directory")]
    NoDirectory,
    #[error("not a readable directory")]
    NotReadable,
    #[error("the folder is a symbolic link; symbolic links are not followed")]
    SymbolicLink,
    #[error("it has no {SKILL_FILE}")]
    NoSkillFile,
    #[error("{SKILL_FILE} is larger than {0} bytes")]
    TooLarge(u64),
    #[error("{0}")]
    Path(PathError),
    #[error("failed to read its {DATA_LINK} link: {0}")]
    DataLink(io::Error),
    /// The link's target, shown.
    #[error(
        "refused its {DATA_LINK} link: the target {0:?} is not a plain name inside the directory"
    )]
    DataLinkTarget(String),
    #[error("{0}")]
    Refused(SkillError),
}

/// One folder of a source: its name, and its skill file's text or why it could not be
/// read.
type SkillFolder = (String, Result<String, ReadError>);

/// The skill folders of one source, in name order: each folder name with its skill
/// file's text or why it could not be read. `base` is the folder below `root` holding
/// the skills (`skills` in the workspace, the root itself for a declared directory);
/// `volume` says whether ConfigMap `..data` links are honoured.
fn read_source(root: &Path, base: &str, volume: bool) -> Result<Vec<SkillFolder>, ReadError> {
    let workspace = Workspace::open(root).map_err(|_| {
        if root.exists() {
            ReadError::NotReadable
        } else {
            ReadError::NoDirectory
        }
    })?;
    let top = if volume {
        resolve_data_link(&workspace, base)?
    } else {
        base.to_string()
    };
    let entries = match list_directory(&workspace, &top) {
        Ok(entries) => entries,
        Err(PathError::NotFound(_)) if !base.is_empty() => return Err(ReadError::NoDirectory),
        Err(error) => return Err(ReadError::Path(error)),
    };
    let mut folders = Vec::new();
    for (name, file_type) in entries {
        // Files beside the folders (a README) are not skills.
        if !file_type.is_dir() && !file_type.is_symlink() {
            continue;
        }
        if !is_skill_name(&name) {
            if !name.starts_with('.') {
                warn_once(&format!(
                    "skill folder {name:?} in {} skipped: {}",
                    root.join(base).display(),
                    SkillError::BadFolderName(name.clone())
                ));
            }
            continue;
        }
        let folder = join(&top, &name);
        let read = if file_type.is_symlink() {
            Err(ReadError::SymbolicLink)
        } else {
            read_skill_file(&workspace, &folder, volume)
        };
        folders.push((name, read));
    }
    Ok(folders)
}

fn read_skill_file(workspace: &Workspace, folder: &str, volume: bool) -> Result<String, ReadError> {
    let folder = if volume {
        resolve_data_link(workspace, folder)?
    } else {
        folder.to_string()
    };
    let relative = join(&folder, SKILL_FILE);
    let path = WorkspacePath::parse(&relative, workspace.root_path()).map_err(ReadError::Path)?;
    match workspace.read_text(&path, MAX_SKILL_BYTES) {
        Ok(text) => Ok(text),
        Err(PathError::NotFound(_)) => Err(ReadError::NoSkillFile),
        Err(PathError::TooLarge(_, limit)) => Err(ReadError::TooLarge(limit)),
        Err(error) => Err(ReadError::Path(error)),
    }
}

fn join(directory: &str, name: &str) -> String {
    if directory.is_empty() {
        name.to_string()
    } else {
        format!("{directory}/{name}")
    }
}

/// `directory` itself, or `directory/<target>` when it holds a `..data` link whose
/// target is a plain name (read with readlink, never followed).
fn resolve_data_link(workspace: &Workspace, directory: &str) -> Result<String, ReadError> {
    let link = workspace.root_path().join(join(directory, DATA_LINK));
    let target = match fs::read_link(&link) {
        Ok(target) => target,
        Err(error)
            if matches!(
                error.kind(),
                io::ErrorKind::NotFound | io::ErrorKind::InvalidInput
            ) =>
        {
            return Ok(directory.to_string());
        }
        Err(error) => return Err(ReadError::DataLink(error)),
    };
    match target.to_str() {
        Some(name) if saint_paths::is_safe_component(name) && name != DATA_LINK => {
            Ok(join(directory, name))
        }
        _ => Err(ReadError::DataLinkTarget(target.display().to_string())),
    }
}

/// The entries of `directory` (beneath the root, opened without following a symlink),
/// sorted by name, with their types as `lstat` sees them.
fn list_directory(
    workspace: &Workspace,
    directory: &str,
) -> Result<Vec<(String, fs::FileType)>, PathError> {
    let absolute = workspace.root_path().join(directory);
    let shown = if directory.is_empty() { "." } else { directory };
    let (_, beneath) = BeneathPath::parse_absolute(
        absolute
            .to_str()
            .ok_or_else(|| PathError::NotFound(shown.to_string()))?,
        &[workspace.root_path()],
    )?;
    let opened = workspace.open_directory(&beneath, shown)?;
    let io_error = |error: io::Error| PathError::Io {
        path: shown.to_string(),
        reason: error.to_string(),
    };
    let mut entries = Vec::new();
    // Listed through the checked descriptor, so a component swapped for a symlink
    // after the check is not listed instead.
    for entry in fs::read_dir(opened.entry_path()).map_err(io_error)? {
        let entry = entry.map_err(io_error)?;
        let Some(name) = entry.file_name().to_str().map(str::to_string) else {
            continue;
        };
        // `file_type` does not follow a symlink.
        if let Ok(file_type) = entry.file_type() {
            entries.push((name, file_type));
        }
    }
    entries.sort_by(|left, right| left.0.cmp(&right.0));
    Ok(entries)
}

/// Logs a warning the first time this exact text is seen (the catalogue is read every
/// turn; one broken skill should not fill the log).
fn warn_once(problem: &str) {
    static SEEN: OnceLock<Mutex<HashSet<String>>> = OnceLock::new();
    let mut seen = SEEN.get_or_init(Default::default).lock();
    if seen.len() >= 1024 {
        seen.clear();
    }
    if seen.insert(problem.to_string()) {
        tracing::warn!(%problem, "skill left out");
    }
}

/// The `skill` tool: returns the instructions of a skill the caller's role may use.
#[derive(Clone, Copy, Debug, Default)]
pub struct SkillTool;

/// What `skill` takes.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct SkillInput {
    /// The skill's name, as listed under "Skills" in your instructions
    pub name: String,
}

impl TypedTool for SkillTool {
    type Input = SkillInput;
    const NAME: &'static str = "skill";
    const DESCRIPTION: &'static str = "Load the full instructions of one of the skills listed in your \
         instructions, by `name`. Load a skill before following it.";

    fn run<'a>(
        &'a self,
        _permit: &'a Permit,
        context: &'a ToolContext,
        input: SkillInput,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            let name = input.name.trim().to_string();
            if !is_skill_name(&name) {
                return Err(ToolError::InvalidInput(format!(
                    "{:?} is not a skill name (lowercase letters, digits, - and _)",
                    name.chars().take(MAX_NAME_CHARS + 8).collect::<String>()
                )));
            }
            let context = context.clone();
            let skills = context.caller.role.skills.clone();
            let catalog =
                blocking(move || Ok(SkillCatalog::load(&context.workspace, &context.config)))
                    .await?;
            // A skill the role may not use is answered exactly like one that is not
            // installed, so the names of skills a role cannot see cannot be probed.
            let Some(skill) = catalog.get(&name).filter(|_| role_allows(&skills, &name)) else {
                return Err(ToolError::NotFound(not_found(&name, &catalog, &skills)));
            };
            let mut output = ToolOutput::text(skill.body.clone());
            output.metering.insert("skill".to_string(), name.into());
            Ok(output)
        })
    }
}

/// The answer for a skill `name` the caller cannot load, whether it is not installed or
/// their role may not use it: the same words either way, naming only the skills the role
/// may use.
fn not_found(name: &str, catalog: &SkillCatalog, skills: &Skills) -> String {
    let usable: Vec<&str> = catalog
        .allowed(skills)
        .map(|skill| skill.name.as_str())
        .collect();
    if usable.is_empty() {
        format!("no skill named {name:?}; no skills are available to you")
    } else {
        format!(
            "no skill named {name:?}; the skills you may use are: {}",
            usable.join(", ")
        )
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

    use super::*;

    fn skill_text(name: Option<&str>, description: &str, body: &str) -> String {
        let name = name
            .map(|name| format!("name: {name}\n"))
            .unwrap_or_default();
        format!("---\n{name}description: {description}\n---\n{body}")
    }

    #[test]
    fn front_matter_gives_the_description_and_the_body() {
        let parsed = parse_skill(
            "pdf",
            "---\nname: pdf\ndescription: Fill and merge PDF forms.\nlicense: MIT\nmetadata:\n  version: 2\n---\n\n# PDF\nUse pdftk.\n",
        )
        .unwrap();
        assert_eq!(parsed.description, "Fill and merge PDF forms.");
        assert_eq!(parsed.body, "# PDF\nUse pdftk.\n");
        // The name may be absent.
        let parsed = parse_skill("pdf", &skill_text(None, "x", "body")).unwrap();
        assert_eq!(
            (parsed.description.as_str(), parsed.body.as_str()),
            ("x", "body")
        );
    }

    #[test]
    fn quoted_block_and_folded_descriptions_become_one_line() {
        for (value, expected) in [
            ("\"Say \\\"hi\\\": politely\"", "Say \"hi\": politely"),
            ("'It''s: fine'", "It's: fine"),
            (">\n  Two lines\n  folded.", "Two lines folded."),
            ("|-\n  Keep\n  going", "Keep going"),
            ("starts here\n  and continues", "starts here and continues"),
            ("plain # a comment", "plain"),
        ] {
            let text = format!("---\ndescription: {value}\n---\nbody");
            assert_eq!(
                parse_skill("x", &text).map(|parsed| parsed.description),
                Ok(expected.to_string()),
                "{value:?}"
            );
        }
    }

    #[test]
    fn crlf_and_a_byte_order_mark_are_accepted() {
        let parsed = parse_skill(
            "crlf",
            "\u{feff}---\r\nname: crlf\r\ndescription: Windows line ends\r\n---\r\nBody line\r\n",
        )
        .unwrap();
        assert_eq!(parsed.description, "Windows line ends");
        assert_eq!(parsed.body, "Body line\r\n");
    }

    #[test]
    fn hostile_front_matter_is_refused_with_a_reason() {
        let huge = "a".repeat(MAX_FRONT_MATTER_BYTES * 4);
        let cases: Vec<(&str, String, SkillError)> = vec![
            ("x", "no front matter\n".into(), SkillError::NoFrontMatter),
            ("x", String::new(), SkillError::NoFrontMatter),
            (
                "x",
                "---\ndescription: never closed\nbody".into(),
                SkillError::UnclosedFrontMatter,
            ),
            (
                "x",
                format!("---\ndescription: {huge}\n---\nbody"),
                SkillError::UnclosedFrontMatter,
            ),
            (
                "x",
                format!("---\n{}---\nbody", "k: v\n".repeat(MAX_FRONT_MATTER_BYTES)),
                SkillError::UnclosedFrontMatter,
            ),
            (
                "x",
                skill_text(Some("other"), "d", "b"),
                SkillError::NameMismatch {
                    folder: "x".into(),
                    found: "other".into(),
                },
            ),
            (
                "x",
                skill_text(Some("../x"), "d", "b"),
                SkillError::NameMismatch {
                    folder: "x".into(),
                    found: "../x".into(),
                },
            ),
            (
                "x",
                "---\nname: x\n---\nbody".into(),
                SkillError::NoDescription,
            ),
            (
                "x",
                "---\ndescription: \"\"\n---\nbody".into(),
                SkillError::NoDescription,
            ),
            (
                "x",
                "---\ndescription: a\ndescription: b\n---\n".into(),
                SkillError::DuplicateKey("description".into()),
            ),
            (
                "../x",
                skill_text(None, "d", "b"),
                SkillError::BadFolderName("../x".into()),
            ),
            (
                "X",
                skill_text(None, "d", "b"),
                SkillError::BadFolderName("X".into()),
            ),
            (
                "..data",
                skill_text(None, "d", "b"),
                SkillError::BadFolderName("..data".into()),
            ),
            (
                "a/b",
                skill_text(None, "d", "b"),
                SkillError::BadFolderName("a/b".into()),
            ),
        ];
        for (folder, text, expected) in cases {
            assert_eq!(
                parse_skill(folder, &text),
                Err(expected.clone()),
                "{folder}: {}",
                text.chars().take(60).collect::<String>()
            );
        }
        for malformed in [
            "---\n  indented first\n---\n",
            "---\njust words\n---\n",
            "---\ndescription:\"no space\"\n---\n",
            "---\ndescription: \"unterminated\n---\n",
            "---\nbad key!: v\n---\n",
        ] {
            assert!(
                matches!(
                    parse_skill("x", malformed),
                    Err(SkillError::Malformed { .. })
                ),
                "{malformed:?}: {:?}",
                parse_skill("x", malformed)
            );
        }
    }

    #[test]
    fn long_and_unicode_descriptions_are_cut_on_a_character_boundary() {
        let long = "č".repeat(1_000);
        let parsed = parse_skill("x", &skill_text(None, &long, "b")).unwrap();
        assert_eq!(parsed.description.chars().count(), MAX_DESCRIPTION_CHARS);
        assert!(parsed.description.ends_with('…'));
        let parsed = parse_skill(
            "x",
            &skill_text(None, "tab\there\u{7}bell — ünïcødé 🦀", "b"),
        )
        .unwrap();
        assert_eq!(parsed.description, "tab here bell — ünïcødé 🦀");
    }

    fn config(directories: &[&Path]) -> BotConfig {
        let mut config = crate::test_fixtures::company_config();
        config.skills.directories = directories
            .iter()
            .map(|directory| directory.to_str().unwrap().to_string())
            .collect();
        config
    }

    fn write_skill(root: &Path, name: &str, description: &str) {
        fs::create_dir_all(root.join(name)).unwrap();
        fs::write(
            root.join(name).join(SKILL_FILE),
            skill_text(
                Some(name),
                description,
                &format!("body of {name} ({description})"),
            ),
        )
        .unwrap();
    }

    #[test]
    fn a_declared_directory_wins_and_the_workspace_fills_the_rest() {
        let workspace = tempfile::tempdir().unwrap();
        let declared = tempfile::tempdir().unwrap();
        write_skill(
            &workspace.path().join("skills"),
            "shared",
            "from the workspace",
        );
        write_skill(&workspace.path().join("skills"), "local", "only local");
        write_skill(declared.path(), "shared", "declared");
        let catalog = SkillCatalog::load(workspace.path(), &config(&[declared.path()]));
        assert_eq!(catalog.get("shared").unwrap().description, "declared");
        assert_eq!(
            catalog.get("shared").unwrap().source,
            SkillSource::Directory(declared.path().to_str().unwrap().to_string())
        );
        assert_eq!(catalog.get("local").unwrap().source, SkillSource::Workspace);
        assert_eq!(catalog.len(), 2);
    }

    #[test]
    fn refused_skills_are_skipped_and_a_refused_declared_one_is_not_replaced() {
        let workspace = tempfile::tempdir().unwrap();
        let declared = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        write_skill(outside.path(), "secret", "TOP SECRET OUTSIDE");
        let skills = workspace.path().join("skills");
        write_skill(&skills, "good", "fine");
        write_skill(&skills, "broken", "x");
        fs::write(skills.join("broken/SKILL.md"), "no front matter").unwrap();
        write_skill(&skills, "big", "x");
        fs::write(
            skills.join("big/SKILL.md"),
            skill_text(None, "big", &"x".repeat(MAX_SKILL_BYTES as usize)),
        )
        .unwrap();
        symlink(outside.path().join("secret"), skills.join("linked")).unwrap();
        fs::create_dir(skills.join("filelink")).unwrap();
        symlink(
            outside.path().join("secret/SKILL.md"),
            skills.join("filelink/SKILL.md"),
        )
        .unwrap();
        fs::create_dir(skills.join("Bad.Name")).unwrap();
        // Declared but refused: the workspace's `good`-like copy must not stand in.
        write_skill(&skills, "shadow", "workspace copy");
        fs::create_dir(declared.path().join("shadow")).unwrap();
        fs::write(
            declared.path().join("shadow/SKILL.md"),
            "---\nname: other\ndescription: d\n---\n",
        )
        .unwrap();

        let catalog = SkillCatalog::load(workspace.path(), &config(&[declared.path()]));
        let names: Vec<&str> = catalog.all().map(|skill| skill.name.as_str()).collect();
        assert_eq!(names, ["good"]);
        let problems = catalog.problems.join("\n");
        for expected in [
            "skills/broken skipped",
            "skills/big skipped: SKILL.md is larger than",
            "skills/linked skipped: the folder is a symbolic link",
            "skills/filelink skipped",
            "shadow skipped: front matter name \"other\"",
        ] {
            assert!(problems.contains(expected), "{expected} in:\n{problems}");
        }
        assert!(!format!("{catalog:?}").contains("TOP SECRET OUTSIDE"));
    }

    /// A ConfigMap volume as the kubelet lays it out, at `mount`.
    fn kubelet_volume(mount: &Path, files: &[(&str, &str)]) {
        let version = "..2026_11_23_12_00_00.123456789";
        for (relative, text) in files {
            let path = mount.join(version).join(relative);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(path, text).unwrap();
            let top = relative.split('/').next().unwrap();
            if !mount.join(top).exists() {
                symlink(format!("{DATA_LINK}/{top}"), mount.join(top)).unwrap();
            }
        }
        symlink(version, mount.join(DATA_LINK)).unwrap();
    }

    #[test]
    fn configmap_volumes_are_read_through_their_data_links() {
        let workspace = tempfile::tempdir().unwrap();
        // One ConfigMap holding `<name>/SKILL.md` items.
        let one = tempfile::tempdir().unwrap();
        kubelet_volume(
            one.path(),
            &[(
                "alpha/SKILL.md",
                &skill_text(Some("alpha"), "a", "alpha body"),
            )],
        );
        // One ConfigMap per skill, each mounted at `<dir>/<name>`.
        let per_skill = tempfile::tempdir().unwrap();
        fs::create_dir(per_skill.path().join("beta")).unwrap();
        kubelet_volume(
            &per_skill.path().join("beta"),
            &[("SKILL.md", &skill_text(None, "b", "beta body"))],
        );
        // A `..data` naming a directory outside is refused.
        let outside = tempfile::tempdir().unwrap();
        write_skill(outside.path(), "gamma", "TOP SECRET OUTSIDE");
        let escaping = tempfile::tempdir().unwrap();
        fs::create_dir(escaping.path().join("gamma")).unwrap();
        symlink(
            outside.path().join("gamma"),
            escaping.path().join("gamma").join(DATA_LINK),
        )
        .unwrap();

        let catalog = SkillCatalog::load(
            workspace.path(),
            &config(&[one.path(), per_skill.path(), escaping.path()]),
        );
        assert_eq!(catalog.get("alpha").unwrap().body, "alpha body");
        assert_eq!(catalog.get("beta").unwrap().body, "beta body");
        assert!(catalog.get("gamma").is_none());
        assert!(
            catalog
                .problems
                .join("\n")
                .contains("refused its ..data link")
        );
    }

    #[test]
    fn a_missing_source_is_no_problem_and_an_unreadable_one_is_named() {
        let workspace = tempfile::tempdir().unwrap();
        let catalog = SkillCatalog::load(workspace.path(), &config(&[]));
        assert!(catalog.is_empty() && catalog.problems.is_empty());
        let catalog = SkillCatalog::load(
            workspace.path(),
            &config(&[Path::new("/nonexistent/saint-skills")]),
        );
        assert_eq!(catalog.problems.len(), 1, "{:?}", catalog.problems);
    }

    #[tokio::test]
    async fn a_skill_the_role_may_not_use_is_answered_like_a_missing_one() {
        use crate::test_fixtures::CallPermitted;
        let workspace = tempfile::tempdir().unwrap();
        let skills = workspace.path().join(WORKSPACE_SKILLS);
        write_skill(&skills, "allowed", "fine");
        write_skill(&skills, "hidden", "not for this role");
        let mut context = crate::test_fixtures::context(workspace.path(), "acme-ana");
        let mut role = (*context.caller.role).clone();
        role.skills = Skills::Only(vec!["allowed".into()]);
        context.caller.role = std::sync::Arc::new(role);
        let load = |name: &str| {
            let context = context.clone();
            let name = name.to_string();
            async move {
                SkillTool
                    .call_permitted(&context, serde_json::json!({ "name": name }))
                    .await
            }
        };
        let hidden = load("hidden").await.unwrap_err();
        let absent = load("absent").await.unwrap_err();
        assert_eq!(
            hidden,
            ToolError::NotFound(
                "no skill named \"hidden\"; the skills you may use are: allowed".to_string()
            )
        );
        assert_eq!(
            absent,
            ToolError::NotFound(
                "no skill named \"absent\"; the skills you may use are: allowed".to_string()
            )
        );
        let allowed = load("allowed").await.unwrap();
        assert!(allowed.content.contains("body of allowed"), "{allowed:?}");
    }

    #[test]
    fn role_rules_allow_what_they_name() {
        assert!(role_allows(&Skills::All, "x"));
        assert!(!role_allows(&Skills::None, "x"));
        let only = Skills::Only(vec!["a".into()]);
        assert!(role_allows(&only, "a") && !role_allows(&only, "b"));
    }
}
