//! Which workspace files are memory, how their paths are written, and how to list them.
//! Reads directory entries only; never follows symlinks and never opens files.
//!
//! Memory is `MEMORY.md` plus `memory/**/*.md`. Symlinks are skipped on purpose: a
//! link `memory/shared/x.md → ../private/plan.md` would otherwise put private text
//! into the index under a shared path, where an employee's search would find it.

use std::path::{Component, Path};

/// The top-level memory file.
pub const MEMORY_FILE: &str = "MEMORY.md";
/// The memory directory.
pub const MEMORY_DIRECTORY: &str = "memory";

/// Whether `relative` (normalised, `/`-separated) names a file the index covers.
#[expect(
    clippy::case_sensitive_file_extension_comparisons,
    reason = "memory files are `*.md` exactly, as the role scopes' globs say; `NOTES.MD` is not one"
)]
pub fn is_memory_file(relative: &str) -> bool {
    relative == MEMORY_FILE
        || (relative.starts_with("memory/")
            && relative.ends_with(".md")
            && !relative
                .split('/')
                .any(|part| part.is_empty() || part.starts_with('.')))
}

/// Normalises a workspace-relative path: `/`-separated, no `.`, no empty parts.
/// Refuses absolute paths, `..` and NUL, so the result can never leave the workspace.
pub fn normalise_relative(path: &str) -> Option<String> {
    if path.contains('\0') {
        return None;
    }
    let mut parts = Vec::new();
    for component in Path::new(path).components() {
        match component {
            Component::Normal(part) => parts.push(part.to_str()?.to_string()),
            Component::CurDir => {}
            Component::ParentDir | Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    if parts.is_empty() {
        None
    } else {
        Some(parts.join("/"))
    }
}

/// Converts a path to workspace-relative form: absolute paths must lie under
/// `workspace` (as given or canonical), relative ones are normalised.
pub fn relative_to_workspace(workspace: &Path, path: &Path) -> Option<String> {
    let relative = if path.is_absolute() {
        path.strip_prefix(workspace).ok()?
    } else {
        path
    };
    normalise_relative(relative.to_str()?)
}

/// Lists memory files under `start` (workspace-relative, `""` for everything), sorted.
/// Unreadable directories are skipped with a warning rather than failing the listing.
pub fn list_memory_files(workspace: &Path, start: &str) -> Vec<String> {
    let mut found = Vec::new();
    if start.is_empty() {
        if is_regular_file(&workspace.join(MEMORY_FILE)) {
            found.push(MEMORY_FILE.to_string());
        }
        walk(workspace, MEMORY_DIRECTORY, &mut found);
    } else {
        walk(workspace, start, &mut found);
    }
    found.sort();
    found
}

fn is_regular_file(path: &Path) -> bool {
    std::fs::symlink_metadata(path)
        .map(|metadata| metadata.file_type().is_file())
        .unwrap_or(false)
}

fn walk(workspace: &Path, relative_directory: &str, found: &mut Vec<String>) {
    let directory = workspace.join(relative_directory);
    match std::fs::symlink_metadata(&directory) {
        Ok(metadata) if metadata.file_type().is_dir() => {}
        Ok(metadata) if metadata.file_type().is_file() => {
            if is_memory_file(relative_directory) {
                found.push(relative_directory.to_string());
            }
            return;
        }
        _ => return,
    }
    let entries = match std::fs::read_dir(&directory) {
        Ok(entries) => entries,
        Err(error) => {
            tracing::warn!(directory = %relative_directory, %error, "failed to list a memory directory; skipping it");
            return;
        }
    };
    for entry in entries.flatten() {
        let Some(name) = entry.file_name().to_str().map(str::to_string) else {
            continue;
        };
        if name.starts_with('.') {
            continue;
        }
        let relative = format!("{relative_directory}/{name}");
        // `DirEntry::file_type` does not follow symlinks: links are neither.
        match entry.file_type() {
            Ok(kind) if kind.is_dir() => walk(workspace, &relative, found),
            Ok(kind) if kind.is_file() && is_memory_file(&relative) => found.push(relative),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_files_are_memory_md_and_markdown_under_memory() {
        assert!(is_memory_file("MEMORY.md"));
        assert!(is_memory_file("memory/shared/prices.md"));
        assert!(!is_memory_file("memory/shared/prices.txt"));
        assert!(!is_memory_file("memory/.git/x.md"));
        assert!(!is_memory_file("COMPANY.md"));
        assert!(!is_memory_file("sessions/memory/x.md"));
    }

    #[test]
    fn normalise_refuses_escapes() {
        assert_eq!(
            normalise_relative("./memory//shared/a.md").as_deref(),
            Some("memory/shared/a.md")
        );
        assert_eq!(normalise_relative("memory/../etc/passwd"), None);
        assert_eq!(normalise_relative("/etc/passwd"), None);
        assert_eq!(normalise_relative(""), None);
        assert_eq!(normalise_relative("a\0b"), None);
    }

    #[test]
    fn listing_skips_symlinks_hidden_and_other_files() {
        let workspace = tempfile::tempdir().expect("tempdir");
        let root = workspace.path();
        std::fs::create_dir_all(root.join("memory/shared")).expect("mkdir");
        std::fs::create_dir_all(root.join("memory/private")).expect("mkdir");
        std::fs::create_dir_all(root.join("memory/.hidden")).expect("mkdir");
        std::fs::write(root.join("MEMORY.md"), "top").expect("write");
        std::fs::write(root.join("memory/shared/a.md"), "a").expect("write");
        std::fs::write(root.join("memory/shared/b.txt"), "b").expect("write");
        std::fs::write(root.join("memory/private/plan.md"), "secret").expect("write");
        std::fs::write(root.join("memory/.hidden/h.md"), "h").expect("write");
        std::os::unix::fs::symlink("../private/plan.md", root.join("memory/shared/leak.md"))
            .expect("symlink");
        std::os::unix::fs::symlink("private", root.join("memory/linked-dir")).expect("symlink");
        assert_eq!(
            list_memory_files(root, ""),
            ["MEMORY.md", "memory/private/plan.md", "memory/shared/a.md"]
        );
        assert_eq!(
            list_memory_files(root, "memory/shared"),
            ["memory/shared/a.md"]
        );
    }
}
