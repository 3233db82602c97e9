//! The `apply_patch` tool: applies a unified diff (one or more files) to the workspace.
//!
//! Touches only the workspace, through [`crate::guard::paths`]. Format: standard unified
//! diff as `diff -u` or `git diff` prints it — per file a `--- a/<path>` line, a
//! `+++ b/<path>` line and `@@` hunks; `/dev/null` as the old path creates a file, as the
//! new path deletes one. Renames are not supported. Every path is checked against the
//! role before anything is written, and all hunks are applied in memory first, so a
//! patch either applies completely or not at all (up to a crash between file writes).

use futures::future::BoxFuture;

use super::{
    Tool, ToolContext, ToolError, ToolOutput,
    files::{
        FileAccess, MAX_FILE_BYTES, blocking, path_error, require_tool, required_string, role_error,
    },
};
use crate::guard::paths::WorkspacePath;

/// One file's part of a patch.
#[derive(Clone, Debug, PartialEq, Eq)]
struct FilePatch {
    old_path: Option<String>,
    new_path: Option<String>,
    text: String,
}

/// What to do with one file.
enum Change {
    Write {
        path: WorkspacePath,
        contents: String,
    },
    Remove {
        path: WorkspacePath,
    },
}

/// Applies unified diffs.
#[derive(Clone, Copy, Debug, Default)]
pub struct ApplyPatchTool;

impl Tool for ApplyPatchTool {
    fn name(&self) -> &'static str {
        "apply_patch"
    }

    fn description(&self) -> &'static str {
        "Apply a unified diff to workspace files. Each file starts with `--- a/<path>` and \
         `+++ b/<path>` lines followed by `@@` hunks; use `/dev/null` as the old path to \
         create a file and as the new path to delete one. All files change or none."
    }

    fn input_schema(&self) -> serde_json::Value {
        serde_json::json!({
            "type": "object",
            "properties": {
                "patch": {"type": "string", "description": "The unified diff"}
            },
            "required": ["patch"]
        })
    }

    fn call<'a>(
        &'a self,
        context: &'a ToolContext,
        input: serde_json::Value,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            require_tool(context, self.name())?;
            let patch = required_string(&input, &["patch", "input"])?;
            let files = split_patch(&patch)?;
            let context = context.clone();
            blocking(move || apply(&context, &files)).await
        })
    }
}

fn apply(context: &ToolContext, files: &[FilePatch]) -> Result<ToolOutput, ToolError> {
    let access = FileAccess::for_caller(context)?;
    // Check every path before reading or writing anything.
    let mut targets = Vec::new();
    for file in files {
        let (old, new) = match (&file.old_path, &file.new_path) {
            (Some(old), Some(new)) if old != new => {
                return Err(ToolError::InvalidInput(format!(
                    "renaming {old} to {new} is not supported"
                )));
            }
            (None, None) => {
                return Err(ToolError::InvalidInput(
                    "a file patch names no file".to_string(),
                ));
            }
            (old, new) => (old.clone(), new.clone()),
        };
        let name = new
            .clone()
            .or(old.clone())
            .expect("one side names the file");
        let path = access.writable(context, &name)?;
        if old.is_some() {
            access.rules.check_read(path.as_str()).map_err(role_error)?;
        }
        targets.push((path, old.is_some(), new.is_some(), file));
    }
    let mut changes = Vec::new();
    for (path, has_old, has_new, file) in targets {
        let base = if has_old {
            access
                .workspace
                .read_text(&path, MAX_FILE_BYTES)
                .map_err(path_error)?
        } else {
            if access.workspace.exists(&path).map_err(path_error)? {
                return Err(ToolError::InvalidInput(format!(
                    "{} already exists",
                    path.as_str()
                )));
            }
            String::new()
        };
        let parsed = diffy::Patch::from_str(&file.text).map_err(|error| {
            ToolError::InvalidInput(format!(
                "failed to parse the patch for {}: {error}",
                path.as_str()
            ))
        })?;
        let patched = diffy::apply(&base, &parsed).map_err(|error| {
            ToolError::InvalidInput(format!(
                "failed to apply the patch to {}: {error}",
                path.as_str()
            ))
        })?;
        if has_new {
            changes.push(Change::Write {
                path,
                contents: patched,
            });
        } else if patched.is_empty() {
            changes.push(Change::Remove { path });
        } else {
            return Err(ToolError::InvalidInput(format!(
                "the deletion patch for {} does not remove all of its content",
                path.as_str()
            )));
        }
    }
    let mut summary = Vec::new();
    for change in changes {
        match change {
            Change::Write { path, contents } => {
                access
                    .workspace
                    .write(&path, contents.as_bytes(), true)
                    .map_err(path_error)?;
                summary.push(format!("M {}", path.as_str()));
            }
            Change::Remove { path } => {
                access.workspace.remove(&path).map_err(path_error)?;
                summary.push(format!("D {}", path.as_str()));
            }
        }
    }
    Ok(ToolOutput::text(format!(
        "applied patch:\n{}",
        summary.join("\n")
    )))
}

/// Splits a multi-file unified diff into per-file patches.
fn split_patch(text: &str) -> Result<Vec<FilePatch>, ToolError> {
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    let starts: Vec<usize> = (0..lines.len().saturating_sub(1))
        .filter(|&index| lines[index].starts_with("--- ") && lines[index + 1].starts_with("+++ "))
        .collect();
    if starts.is_empty() {
        return Err(ToolError::InvalidInput(
            "the patch has no file headers; expected `--- a/<path>` and `+++ b/<path>` lines"
                .to_string(),
        ));
    }
    let mut files = Vec::new();
    for (position, &start) in starts.iter().enumerate() {
        let end = starts.get(position + 1).copied().unwrap_or(lines.len());
        let body: String = lines[start..end]
            .iter()
            .filter(|line| !is_git_metadata(line))
            .copied()
            .collect();
        files.push(FilePatch {
            old_path: header_path(lines[start], "--- "),
            new_path: header_path(lines[start + 1], "+++ "),
            text: body,
        });
    }
    Ok(files)
}

fn is_git_metadata(line: &str) -> bool {
    [
        "diff --git ",
        "index ",
        "new file mode",
        "deleted file mode",
        "similarity index",
        "old mode",
        "new mode",
    ]
    .iter()
    .any(|prefix| line.starts_with(prefix))
}

fn header_path(line: &str, prefix: &str) -> Option<String> {
    let rest = line.strip_prefix(prefix)?.trim_end_matches(['\n', '\r']);
    let path = rest.split('\t').next().unwrap_or_default().trim();
    if path == "/dev/null" || path.is_empty() {
        return None;
    }
    let path = path
        .strip_prefix("a/")
        .or_else(|| path.strip_prefix("b/"))
        .unwrap_or(path);
    Some(path.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_git_style_multi_file_patches() {
        let patch = "diff --git a/data/a.txt b/data/a.txt\nindex 1..2 100644\n--- a/data/a.txt\n+++ b/data/a.txt\n@@ -1 +1 @@\n-old\n+new\ndiff --git a/data/b.txt b/data/b.txt\nnew file mode 100644\n--- /dev/null\n+++ b/data/b.txt\n@@ -0,0 +1 @@\n+fresh\n";
        let files = split_patch(patch).unwrap();
        assert_eq!(files.len(), 2);
        assert_eq!(files[0].old_path.as_deref(), Some("data/a.txt"));
        assert_eq!(files[1].old_path, None);
        assert_eq!(files[1].new_path.as_deref(), Some("data/b.txt"));
        assert!(!files[0].text.contains("diff --git"));
        assert_eq!(
            diffy::apply("old\n", &diffy::Patch::from_str(&files[0].text).unwrap()).unwrap(),
            "new\n"
        );
        assert_eq!(
            diffy::apply("", &diffy::Patch::from_str(&files[1].text).unwrap()).unwrap(),
            "fresh\n"
        );
    }

    #[test]
    fn refuses_text_without_headers() {
        assert!(matches!(
            split_patch("@@ -1 +1 @@\n-a\n+b\n"),
            Err(ToolError::InvalidInput(_))
        ));
    }
}
