//! The `edit` tool: replaces exact text in a workspace file the caller may read and write.
//!
//! Touches only the workspace, through [`crate::guard::paths`].

use futures::future::BoxFuture;

use super::{
    Tool, ToolContext, ToolError, ToolOutput,
    files::{FileAccess, MAX_FILE_BYTES, blocking, path_error, require_tool, required_string},
};

/// Edits files by exact string replacement.
#[derive(Clone, Copy, Debug, Default)]
pub struct EditTool;

impl Tool for EditTool {
    fn name(&self) -> &'static str {
        "edit"
    }

    fn description(&self) -> &'static str {
        "Replace `old_string` with `new_string` in a workspace file. `old_string` must occur \
         exactly once unless `replace_all` is true."
    }

    fn input_schema(&self) -> serde_json::Value {
        serde_json::json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "File path relative to the workspace"},
                "old_string": {"type": "string", "description": "Exact text to replace"},
                "new_string": {"type": "string", "description": "Replacement text"},
                "replace_all": {"type": "boolean", "description": "Replace every occurrence"}
            },
            "required": ["path", "old_string", "new_string"]
        })
    }

    fn call<'a>(
        &'a self,
        context: &'a ToolContext,
        input: serde_json::Value,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            require_tool(context, self.name())?;
            let raw = required_string(&input, &["path", "file_path", "filePath"])?;
            let old = required_string(&input, &["old_string", "oldString", "oldText", "old_text"])?;
            let new = required_string(&input, &["new_string", "newString", "newText", "new_text"])?;
            let replace_all = input
                .get("replace_all")
                .or_else(|| input.get("replaceAll"))
                .and_then(serde_json::Value::as_bool)
                .unwrap_or(false);
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
