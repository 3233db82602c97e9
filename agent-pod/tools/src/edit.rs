//! The `edit` tool: replaces exact text in a workspace file the caller may read and write.
//!
//! Touches only the workspace, through [`crate::guard::paths`].

use futures::future::BoxFuture;
use schemars::JsonSchema;
use serde::Deserialize;

use super::{
    Permit, ToolContext, ToolError, ToolOutput, TypedTool,
    files::{FileAccess, MAX_FILE_BYTES, blocking, path_error},
};

/// Edits files by exact string replacement.
#[derive(Clone, Copy, Debug, Default)]
pub struct EditTool;

/// What `edit` takes.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct EditInput {
    /// File path relative to the workspace
    #[serde(alias = "file_path", alias = "filePath")]
    pub path: String,
    /// Exact text to replace
    #[serde(alias = "oldString", alias = "oldText", alias = "old_text")]
    pub old_string: String,
    /// Replacement text
    #[serde(alias = "newString", alias = "newText", alias = "new_text")]
    pub new_string: String,
    /// Replace every occurrence
    #[serde(alias = "replaceAll")]
    pub replace_all: Option<bool>,
}

impl TypedTool for EditTool {
    type Input = EditInput;
    const NAME: &'static str = "edit";
    const DESCRIPTION: &'static str = "Replace `old_string` with `new_string` in a workspace file. `old_string` must occur \
         exactly once unless `replace_all` is true.";

    fn run<'a>(
        &'a self,
        _permit: &'a Permit,
        context: &'a ToolContext,
        input: EditInput,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            let EditInput {
                path: raw,
                old_string: old,
                new_string: new,
                replace_all,
            } = input;
            let replace_all = replace_all.unwrap_or(false);
            if old.is_empty() {
                return Err(ToolError::InvalidInput(
                    "old_string must not be empty".to_string(),
                ));
            }
            let context = context.clone();
            blocking(move || {
                let access = FileAccess::for_caller(&context)?;
                let path = access.writable(&context, &raw)?;
                access.rules.check_read(path.as_str()).map_err(super::files::role_error)?;
                let text = access.workspace.read_text(&path, MAX_FILE_BYTES).map_err(path_error)?;
                let count = text.matches(old.as_str()).count();
                let updated = match (count, replace_all) {
                    (0, _) => {
                        return Err(ToolError::InvalidInput(format!("old_string was not found in {}", path.as_str())));
                    }
                    (1, _) | (_, true) => text.replace(old.as_str(), &new),
                    (many, false) => {
                        return Err(ToolError::InvalidInput(format!(
                            "old_string occurs {many} times in {}; give more context or set replace_all",
                            path.as_str()
                        )));
                    }
                };
                access.workspace.write(&path, updated.as_bytes(), false).map_err(path_error)?;
                let mut output = ToolOutput::text(format!("edited {} ({count} replacement(s))", path.as_str()));
                output.metering.insert("path".to_string(), path.as_str().into());
                Ok(output)
            })
            .await
        })
    }
}
