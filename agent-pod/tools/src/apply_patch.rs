//! The `apply_patch` tool: applies a patch (one or more files) to the workspace.
//!
//! Touches only the workspace, through [`crate::guard::paths`]. Two formats:
//! - the `*** Begin Patch` format (`*** Add File: <path>` with `+` lines, `*** Delete
//!   File: <path>`, `*** Update File: <path>` with `@@` hunks of ` `/`-`/`+` lines,
//!   `*** End Patch`), which models trained on it write naturally;
//! - standard unified diff as `diff -u` or `git diff` prints it — per file `--- a/<path>`,
//!   `+++ b/<path>` and `@@` hunks; `/dev/null` as the old path creates a file, as the
//!   new path deletes one.
//!
//! Renames and moves are not supported. Every path is checked against the role before
//! anything is read or written, and all hunks are applied in memory first, so a patch
//! either applies completely or not at all (up to a crash between file writes).

use futures::future::BoxFuture;
use schemars::JsonSchema;
use serde::Deserialize;

use super::{
    Permit, ToolContext, ToolError, ToolOutput, TypedTool,
    files::{FileAccess, MAX_FILE_BYTES, blocking, path_error, role_error},
};
use crate::guard::paths::WorkspacePath;

/// One file's part of a patch.
#[derive(Clone, Debug, PartialEq, Eq)]
struct FilePatch {
    old_path: Option<String>,
    new_path: Option<String>,
    body: PatchBody,
}

/// How a file changes.
#[derive(Clone, Debug, PartialEq, Eq)]
enum PatchBody {
    /// A unified-diff section (headers and hunks), applied with `diffy`.
    Unified(String),
    /// `*** Add File`: the whole new content.
    Contents(String),
    /// `*** Delete File`.
    Delete,
    /// `*** Update File`: hunks of context, removed and added lines.
    Hunks(Vec<Hunk>),
}

/// One `@@` hunk of the `*** Begin Patch` format.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Hunk {
    old_lines: Vec<String>,
    new_lines: Vec<String>,
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

/// What `apply_patch` takes.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct ApplyPatchInput {
    /// The unified diff
    #[serde(alias = "input")]
    pub patch: String,
}

impl TypedTool for ApplyPatchTool {
    type Input = ApplyPatchInput;
    const NAME: &'static str = "apply_patch";
    const DESCRIPTION: &'static str = "Apply a patch to workspace files, either in the `*** Begin Patch` format \
         (`*** Add File: <path>`, `*** Update File: <path>` with `@@` hunks, `*** Delete File: \
         <path>`, then `*** End Patch`) or as a unified diff (`--- a/<path>`, `+++ b/<path>`, \
         `@@` hunks). All files change or none.";

    fn run<'a>(
        &'a self,
        _permit: &'a Permit,
        context: &'a ToolContext,
        input: ApplyPatchInput,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            let patch = input.patch;
            let files = if patch.trim_start().starts_with(BEGIN_PATCH) {
                parse_begin_patch(&patch)?
            } else {
                split_patch(&patch)?
            };
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
        let patched = patched_text(&file.body, &base, path.as_str())?;
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
    let mut touched = Vec::new();
    for change in changes {
        match change {
            Change::Write { path, contents } => {
                access
                    .workspace
                    .write(&path, contents.as_bytes(), true)
                    .map_err(path_error)?;
                summary.push(format!("M {}", path.as_str()));
                touched.push(serde_json::Value::from(path.as_str()));
            }
            Change::Remove { path } => {
                access.workspace.remove(&path).map_err(path_error)?;
                summary.push(format!("D {}", path.as_str()));
                touched.push(serde_json::Value::from(path.as_str()));
            }
        }
    }
    let mut output = ToolOutput::text(format!("applied patch:\n{}", summary.join("\n")));
    // Written and removed files, for the usage log and the memory write observer.
    output
        .metering
        .insert("paths".to_string(), serde_json::Value::Array(touched));
    Ok(output)
}

const BEGIN_PATCH: &str = "*** Begin Patch";

/// The new content of one file.
fn patched_text(body: &PatchBody, base: &str, shown: &str) -> Result<String, ToolError> {
    match body {
        PatchBody::Unified(text) => {
            let parsed = diffy::Patch::from_str(text).map_err(|error| {
                ToolError::InvalidInput(format!("failed to parse the patch for {shown}: {error}"))
            })?;
            diffy::apply(base, &parsed).map_err(|error| {
                ToolError::InvalidInput(format!("failed to apply the patch to {shown}: {error}"))
            })
        }
        PatchBody::Contents(contents) => Ok(contents.clone()),
        PatchBody::Delete => Ok(String::new()),
        PatchBody::Hunks(hunks) => apply_hunks(base, hunks, shown),
    }
}

/// Applies `*** Update File` hunks in order: each hunk's old lines (context and removed)
/// must appear after the previous hunk; exact match first, then ignoring trailing and
/// then surrounding whitespace (models often get indentation of blank lines wrong).
fn apply_hunks(base: &str, hunks: &[Hunk], shown: &str) -> Result<String, ToolError> {
    let mut lines: Vec<String> = base.lines().map(str::to_string).collect();
    let mut cursor = 0;
    for hunk in hunks {
        if hunk.old_lines.is_empty() {
            lines.extend(hunk.new_lines.iter().cloned());
            cursor = lines.len();
            continue;
        }
        let comparisons: [fn(&str, &str) -> bool; 3] = [
            |left, right| left == right,
            |left, right| left.trim_end() == right.trim_end(),
            |left, right| left.trim() == right.trim(),
        ];
        let found = comparisons.iter().find_map(|same| {
            (cursor..=lines.len().saturating_sub(hunk.old_lines.len())).find(|&start| {
                start + hunk.old_lines.len() <= lines.len()
                    && hunk
                        .old_lines
                        .iter()
                        .zip(&lines[start..])
                        .all(|(old, line)| same(old, line))
            })
        });
        let Some(start) = found else {
            return Err(ToolError::InvalidInput(format!(
                "failed to apply the patch to {shown}: the lines of a hunk were not found: {:?}",
                hunk.old_lines
                    .first()
                    .map(String::as_str)
                    .unwrap_or_default()
            )));
        };
        lines.splice(
            start..start + hunk.old_lines.len(),
            hunk.new_lines.iter().cloned(),
        );
        cursor = start + hunk.new_lines.len();
    }
    if lines.is_empty() {
        return Ok(String::new());
    }
    Ok(lines.join("\n") + "\n")
}

/// Parses the `*** Begin Patch` … `*** End Patch` format.
fn parse_begin_patch(text: &str) -> Result<Vec<FilePatch>, ToolError> {
    let invalid = |message: String| ToolError::InvalidInput(format!("invalid patch: {message}"));
    let mut lines = text.trim().lines().peekable();
    if lines.next().map(str::trim_end) != Some(BEGIN_PATCH) {
        return Err(invalid(format!("it must start with {BEGIN_PATCH:?}")));
    }
    let mut files = Vec::new();
    let mut ended = false;
    while let Some(line) = lines.next() {
        let line = line.trim_end();
        if line == "*** End Patch" {
            ended = true;
            break;
        }
        if let Some(path) = line.strip_prefix("*** Add File: ") {
            let mut contents = String::new();
            while let Some(next) = lines.peek() {
                let Some(added) = next.strip_prefix('+') else {
                    break;
                };
                contents.push_str(added);
                contents.push('\n');
                lines.next();
            }
            files.push(FilePatch {
                old_path: None,
                new_path: Some(path.trim().to_string()),
                body: PatchBody::Contents(contents),
            });
        } else if let Some(path) = line.strip_prefix("*** Delete File: ") {
            files.push(FilePatch {
                old_path: Some(path.trim().to_string()),
                new_path: None,
                body: PatchBody::Delete,
            });
        } else if let Some(path) = line.strip_prefix("*** Update File: ") {
            if lines
                .peek()
                .is_some_and(|next| next.starts_with("*** Move to: "))
            {
                return Err(invalid("moving files is not supported".to_string()));
            }
            let mut hunks: Vec<Hunk> = Vec::new();
            let mut current = Hunk::default();
            while let Some(next) = lines.peek() {
                let next = next.trim_end_matches('\r');
                if next.starts_with("*** ") && next != "*** End of File" {
                    break;
                }
                lines.next();
                if next.starts_with("@@") {
                    if current != Hunk::default() {
                        hunks.push(std::mem::take(&mut current));
                    }
                } else if next == "*** End of File" {
                } else if let Some(removed) = next.strip_prefix('-') {
                    current.old_lines.push(removed.to_string());
                } else if let Some(added) = next.strip_prefix('+') {
                    current.new_lines.push(added.to_string());
                } else {
                    let context = next.strip_prefix(' ').unwrap_or(next);
                    current.old_lines.push(context.to_string());
                    current.new_lines.push(context.to_string());
                }
            }
            if current != Hunk::default() {
                hunks.push(current);
            }
            if hunks.is_empty() {
                return Err(invalid(format!(
                    "the update of {} has no hunks",
                    path.trim()
                )));
            }
            let path = path.trim().to_string();
            files.push(FilePatch {
                old_path: Some(path.clone()),
                new_path: Some(path),
                body: PatchBody::Hunks(hunks),
            });
        } else if !line.is_empty() {
            return Err(invalid(format!("unexpected line {line:?}")));
        }
    }
    if !ended {
        return Err(invalid("it must end with \"*** End Patch\"".to_string()));
    }
    if files.is_empty() {
        return Err(invalid("it changes no file".to_string()));
    }
    Ok(files)
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
            body: PatchBody::Unified(body),
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
        assert!(!unified(&files[0]).contains("diff --git"));
        assert_eq!(
            diffy::apply(
                "old\n",
                &diffy::Patch::from_str(unified(&files[0])).unwrap()
            )
            .unwrap(),
            "new\n"
        );
        assert_eq!(
            diffy::apply("", &diffy::Patch::from_str(unified(&files[1])).unwrap()).unwrap(),
            "fresh\n"
        );
    }

    fn unified(file: &FilePatch) -> &str {
        match &file.body {
            PatchBody::Unified(text) => text,
            other => panic!("not a unified diff: {other:?}"),
        }
    }

    #[test]
    fn begin_patch_format_adds_updates_and_deletes() {
        let patch = "*** Begin Patch\n*** Add File: data/new.txt\n+first\n+second\n*** Update File: data/a.txt\n@@ fn main\n alpha\n-beta\n+BETA\n gamma\n@@\n-omega\n+OMEGA\n+end\n*** Delete File: data/old.txt\n*** End Patch\n";
        let files = parse_begin_patch(patch).unwrap();
        assert_eq!(files.len(), 3);
        assert_eq!(
            files[0].body,
            PatchBody::Contents("first\nsecond\n".to_string())
        );
        assert_eq!(
            (files[2].old_path.as_deref(), &files[2].body),
            (Some("data/old.txt"), &PatchBody::Delete)
        );
        let base = "alpha\nbeta\ngamma\ndelta\nomega\n";
        let updated = patched_text(&files[1].body, base, "data/a.txt").unwrap();
        assert_eq!(updated, "alpha\nBETA\ngamma\ndelta\nOMEGA\nend\n");
        assert!(matches!(
            patched_text(&files[1].body, "unrelated\n", "data/a.txt"),
            Err(ToolError::InvalidInput(_))
        ));
        assert!(
            parse_begin_patch(
                "*** Begin Patch\n*** Update File: a\n*** Move to: b\n@@\n-x\n+y\n*** End Patch"
            )
            .is_err()
        );
        assert!(
            parse_begin_patch("*** Begin Patch\n*** Add File: a\n+x\n").is_err(),
            "missing end marker"
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
