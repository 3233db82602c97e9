//! The caller's view of the workspace, as the agent registered it with the call's token:
//! the folders and files their role may read (what their sandbox shows at `/agent`).
//! A CLI runs on the real workspace, so without this check a command could point it at
//! what the sandbox never shows — the sessions database, another person's notes.
//!
//! Pure: compares canonical paths, touches no file.

use std::path::{Component, Path, PathBuf};

/// Folders and files below the workspace root a caller may read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct View {
    entries: Vec<PathBuf>,
}

impl View {
    /// The view of `entries` (workspace-relative, `/`-separated) below `workspace_root`.
    /// An entry that is absolute or has `.`/`..` components is dropped: it names nothing
    /// the agent could have meant, and dropping it only narrows the view.
    pub fn new(workspace_root: &Path, entries: &[String]) -> Self {
        let entries = entries
            .iter()
            .map(Path::new)
            .filter(|entry| {
                !entry.as_os_str().is_empty()
                    && entry
                        .components()
                        .all(|component| matches!(component, Component::Normal(_)))
            })
            .map(|entry| workspace_root.join(entry))
            .collect();
        Self { entries }
    }

    /// Whether `path` (canonical) is one of the entries or lies below one.
    pub fn contains(&self, path: &Path) -> bool {
        self.entries.iter().any(|entry| path.starts_with(entry))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_inside_an_entry_are_in_the_view_and_nothing_else_is() {
        let root = Path::new("/srv/ws");
        let view = View::new(
            root,
            &[
                "memory/shared".into(),
                "SOUL.md".into(),
                "../etc".into(),
                "/etc".into(),
                "".into(),
                "memory/./x".into(),
            ],
        );
        assert!(view.contains(Path::new("/srv/ws/memory/shared")));
        assert!(view.contains(Path::new("/srv/ws/memory/shared/deep/a.md")));
        assert!(view.contains(Path::new("/srv/ws/SOUL.md")));
        // Component-wise, not by string prefix.
        assert!(!view.contains(Path::new("/srv/ws/memory/shared-private/a.md")));
        assert!(!view.contains(Path::new("/srv/ws/SOUL.md.bak")));
        assert!(!view.contains(Path::new("/srv/ws/sessions/transcripts.sqlite3")));
        assert!(!view.contains(Path::new("/srv/ws")));
        assert!(!view.contains(Path::new("/etc/passwd")));
        assert!(!view.contains(Path::new("/srv/etc")));
        assert!(View::new(root, &[]).entries.is_empty());
    }
}
