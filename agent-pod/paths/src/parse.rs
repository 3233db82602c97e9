//! Lexical checks on a path a caller named, before anything touches the filesystem:
//! which root it is under, and its components relative to that root.
//!
//! Pure: no I/O. The kernel does the containment itself when the path is opened
//! ([`crate::Workspace`]); these checks refuse what no honest caller sends (`..`,
//! control characters, percent-encoded separators) and keep the path a role check
//! sees equal to the path that is opened.

use std::path::{Component, Path};

use saint_config::sandbox_contract::SANDBOX_WORKSPACE_ROOTS;

use crate::PathError;

/// Longest path (in bytes) accepted.
const MAX_PATH_BYTES: usize = 4_096;

/// Longest single component (in bytes), as on Linux file systems.
const MAX_COMPONENT_BYTES: usize = 255;

/// A path relative to a root, lexically normalised: no `..`, no `.`, no empty
/// components, no NUL, control characters, backslashes or percent-encoded separators.
/// Empty when it names the root itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BeneathPath {
    components: Vec<String>,
    relative: String,
}

impl BeneathPath {
    /// Parses an absolute path under one of `roots` (compared component by component,
    /// so `/workspacefoo` is not under `/workspace`). Returns the index of the root it
    /// is under and the rest of the path.
    pub fn parse_absolute(raw: &str, roots: &[&Path]) -> Result<(usize, Self), PathError> {
        let (root, path) = lexical(raw, roots, false)?;
        Ok((root.expect("an absolute path is under a root"), path))
    }

    /// The normalised relative path (`repo/src`); empty for the root itself.
    pub fn as_str(&self) -> &str {
        &self.relative
    }

    /// Whether the path names the root itself.
    pub fn is_root(&self) -> bool {
        self.components.is_empty()
    }

    pub(crate) fn components(&self) -> &[String] {
        &self.components
    }
}

/// A path to a file relative to the workspace root, lexically normalised (see
/// [`BeneathPath`]); never the root itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkspacePath {
    path: BeneathPath,
}

impl WorkspacePath {
    /// Parses a path the model named. `root` is the real workspace root; absolute paths
    /// are accepted only beneath it or beneath a sandbox name of the workspace
    /// (`/workspace`, `/agent`).
    pub fn parse(raw: &str, root: &Path) -> Result<Self, PathError> {
        let mut roots = vec![root];
        roots.extend(SANDBOX_WORKSPACE_ROOTS.iter().map(Path::new));
        let (_, path) = lexical(raw, &roots, true)?;
        if path.is_root() {
            return Err(PathError::Empty(shown(raw)));
        }
        Ok(Self { path })
    }

    /// The normalised relative path (`memory/users/ana/notes.md`), used for role checks.
    pub fn as_str(&self) -> &str {
        self.path.as_str()
    }

    pub(crate) fn parent_components(&self) -> &[String] {
        let components = self.path.components();
        &components[..components.len() - 1]
    }

    pub(crate) fn file_name(&self) -> &str {
        self.path
            .components()
            .last()
            .expect("a parsed workspace path has at least one component")
    }
}

/// Absolute paths are not echoed back: they may name host locations.
fn shown(raw: &str) -> String {
    if raw.starts_with('/') {
        "<absolute path>".to_string()
    } else {
        raw.to_string()
    }
}

/// The one set of lexical rules. A relative `raw` (when `relative_allowed`) is under no
/// root in particular; an absolute one must be under one of `roots`.
fn lexical(
    raw: &str,
    roots: &[&Path],
    relative_allowed: bool,
) -> Result<(Option<usize>, BeneathPath), PathError> {
    if raw.contains('\0') {
        return Err(PathError::NulByte);
    }
    let shown = shown(raw);
    if raw.len() > MAX_PATH_BYTES {
        return Err(PathError::TooLong(shown));
    }
    if has_suspicious_characters(raw) {
        return Err(PathError::SuspiciousCharacters(shown));
    }
    let path = Path::new(raw);
    let (root, relative_part) = if path.is_absolute() {
        roots
            .iter()
            .enumerate()
            .find_map(|(index, root)| Some((Some(index), path.strip_prefix(root).ok()?)))
            .ok_or_else(|| PathError::OutsideWorkspace(shown.clone()))?
    } else if relative_allowed {
        (None, path)
    } else {
        return Err(PathError::OutsideWorkspace(shown));
    };
    let mut components = Vec::new();
    for component in relative_part.components() {
        match component {
            Component::Normal(name) => {
                let name = name
                    .to_str()
                    .ok_or_else(|| PathError::SuspiciousCharacters(shown.clone()))?;
                if name.len() > MAX_COMPONENT_BYTES {
                    return Err(PathError::TooLong(shown));
                }
                components.push(name.to_string());
            }
            Component::CurDir => {}
            // `..` is refused even when it would stay inside: a path with `..` is never
            // needed, and refusing it keeps the role check and the open on one path.
            Component::ParentDir => return Err(PathError::ParentComponent(shown)),
            Component::RootDir | Component::Prefix(_) => {
                return Err(PathError::OutsideWorkspace(shown));
            }
        }
    }
    let relative = components.join("/");
    Ok((
        root,
        BeneathPath {
            components,
            relative,
        },
    ))
}

fn has_suspicious_characters(raw: &str) -> bool {
    if raw
        .chars()
        .any(|character| character.is_control() || character == '\\')
    {
        return true;
    }
    // Percent-encoded dots, slashes, backslashes and NULs are never decoded by us, but a
    // path carrying them is an escape attempt at some other layer: refuse it outright.
    let lower = raw.to_ascii_lowercase();
    ["%2e", "%2f", "%5c", "%00", "%25"]
        .iter()
        .any(|encoded| lower.contains(encoded))
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROOT: &str = "/srv/acme-ana/workspace";

    fn parse(raw: &str) -> Result<WorkspacePath, PathError> {
        WorkspacePath::parse(raw, Path::new(ROOT))
    }

    #[test]
    fn relative_and_aliased_paths_normalise_to_one_relative_path() {
        for raw in [
            "notes/todo.md",
            "./notes//todo.md",
            "notes/./todo.md/",
            "/workspace/notes/todo.md",
            "/agent/notes/todo.md",
            "/srv/acme-ana/workspace/notes/todo.md",
        ] {
            let path = parse(raw).unwrap();
            assert_eq!(path.as_str(), "notes/todo.md", "{raw}");
            assert_eq!(path.file_name(), "todo.md");
            assert_eq!(path.parent_components(), ["notes".to_string()]);
        }
    }

    #[test]
    fn dot_dots_are_refused_even_when_they_would_stay_inside() {
        for raw in [
            "../etc/passwd",
            "notes/../../etc",
            "notes/../todo.md",
            "/workspace/..",
        ] {
            assert!(
                matches!(parse(raw), Err(PathError::ParentComponent(_))),
                "{raw}: {:?}",
                parse(raw)
            );
        }
    }

    #[test]
    fn encoded_and_control_forms_are_refused() {
        for raw in [
            "%2e%2e/etc/passwd",
            "notes%2Ftodo.md",
            "..%5c..%5cetc",
            "notes%00.md",
            "%252e%252e/etc",
            "notes\\..\\..\\etc",
            "notes/\u{1b}[2Jtodo.md",
            "notes/todo.md\n",
        ] {
            assert!(
                matches!(parse(raw), Err(PathError::SuspiciousCharacters(_))),
                "{raw:?}: {:?}",
                parse(raw)
            );
        }
        assert_eq!(parse("notes/\0todo.md"), Err(PathError::NulByte));
    }

    #[test]
    fn absolute_paths_elsewhere_are_refused_without_echoing_them() {
        for raw in [
            "/etc/passwd",
            "/workspacefoo/notes",
            "/srv/acme-ana/workspace2/x",
        ] {
            assert_eq!(
                parse(raw),
                Err(PathError::OutsideWorkspace("<absolute path>".to_string())),
                "{raw}"
            );
        }
    }

    #[test]
    fn the_root_itself_and_oversized_paths_are_refused() {
        for raw in ["", ".", "/workspace", "/agent/"] {
            assert!(matches!(parse(raw), Err(PathError::Empty(_))), "{raw}");
        }
        assert!(matches!(
            parse(&"a/".repeat(2_100)),
            Err(PathError::TooLong(_))
        ));
        assert!(matches!(
            parse(&"a".repeat(256)),
            Err(PathError::TooLong(_))
        ));
    }

    #[test]
    fn absolute_paths_report_which_root_they_are_under() {
        let roots = [Path::new("/workspace"), Path::new("/agent")];
        let (root, path) = BeneathPath::parse_absolute("/agent/skills/demo/", &roots).unwrap();
        assert_eq!((root, path.as_str()), (1, "skills/demo"));
        let (root, path) = BeneathPath::parse_absolute("/workspace", &roots).unwrap();
        assert_eq!(root, 0);
        assert!(path.is_root());
        for raw in ["workspace/repo", "/etc", "/workspacefoo"] {
            assert!(matches!(
                BeneathPath::parse_absolute(raw, &roots),
                Err(PathError::OutsideWorkspace(_))
            ));
        }
    }
}
