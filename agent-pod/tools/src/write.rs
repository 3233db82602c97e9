//! The `write` tool: creates or replaces a workspace file the caller's role may write.
//!
//! Touches only the workspace, through [`crate::guard::paths`] (atomic replace).

use futures::future::BoxFuture;

use super::{
    Tool, ToolContext, ToolError, ToolOutput,
    files::{FileAccess, MAX_FILE_BYTES, blocking, path_error, require_tool, required_string},
};
use crate::guard::paths::WriteOutcome;

/// Writes files.
#[derive(Clone, Copy, Debug, Default)]
pub struct WriteTool;

impl Tool for WriteTool {
    fn name(&self) -> &'static str {
        "write"
    }

    fn description(&self) -> &'static str {
        "Create or overwrite a text file in the workspace with `content`. `path` is relative \
         to the workspace; missing directories are created."
    }

    fn input_schema(&self) -> serde_json::Value {
        serde_json::json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "File path relative to the workspace"},
                "content": {"type": "string", "description": "The whole new file content"}
            },
            "required": ["path", "content"]
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
            let content = required_string(&input, &["content"])?;
            if content.len() as u64 > MAX_FILE_BYTES {
                return Err(ToolError::InvalidInput(format!(
                    "content is larger than {MAX_FILE_BYTES} bytes"
                )));
            }
            let context = context.clone();
            blocking(move || {
                let access = FileAccess::for_caller(&context)?;
                let path = access.writable(&context, &raw)?;
                let outcome = access
                    .workspace
                    .write(&path, content.as_bytes(), true)
                    .map_err(path_error)?;
                let verb = match outcome {
                    WriteOutcome::Created => "created",
                    WriteOutcome::Replaced => "replaced",
                };
                let mut output = ToolOutput::text(format!(
                    "{verb} {} ({} bytes)",
                    path.as_str(),
                    content.len()
                ));
                output
                    .metering
                    .insert("path".to_string(), path.as_str().into());
                Ok(output)
            })
            .await
        })
    }
}
