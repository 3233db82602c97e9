//! The `write` tool: creates or replaces a workspace file the caller's role may write.
//!
//! Touches only the workspace, through [`crate::guard::paths`] (atomic replace).

use futures::future::BoxFuture;
use schemars::JsonSchema;
use serde::Deserialize;

use super::{
    Permit, ToolContext, ToolError, ToolOutput, TypedTool,
    files::{FileAccess, MAX_FILE_BYTES, blocking, path_error},
};
use crate::guard::paths::WriteOutcome;

/// Writes files.
#[derive(Clone, Copy, Debug, Default)]
pub struct WriteTool;

/// What `write` takes.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct WriteInput {
    /// File path relative to the workspace
    #[serde(alias = "file_path", alias = "filePath")]
    pub path: String,
    /// The whole new file content
    pub content: String,
}

impl TypedTool for WriteTool {
    type Input = WriteInput;
    const NAME: &'static str = "write";
    const DESCRIPTION: &'static str = "Create or overwrite a text file in the workspace with `content`. `path` is relative \
         to the workspace; missing directories are created.";

    fn run<'a>(
        &'a self,
        _permit: &'a Permit,
        context: &'a ToolContext,
        input: WriteInput,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            let WriteInput { path: raw, content } = input;
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
