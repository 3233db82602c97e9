//! The `read` tool: reads a workspace text file the caller's role may read.
//!
//! Touches only the workspace, through [`crate::guard::paths`].

use futures::future::BoxFuture;

use super::{
    Tool, ToolContext, ToolError, ToolOutput,
    files::{
        FileAccess, MAX_FILE_BYTES, blocking, integer_field, path_error, require_tool,
        required_string,
    },
};

/// Longest output returned to the model, in characters.
const MAX_OUTPUT_CHARS: usize = 100_000;

/// Reads text files.
#[derive(Clone, Copy, Debug, Default)]
pub struct ReadTool;

impl Tool for ReadTool {
    fn name(&self) -> &'static str {
        "read"
    }

    fn description(&self) -> &'static str {
        "Read a text file from the workspace. `path` is relative to the workspace. \
         Optionally `offset` (first line, 1-based) and `limit` (number of lines)."
    }

    fn input_schema(&self) -> serde_json::Value {
        serde_json::json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "File path relative to the workspace"},
                "offset": {"type": "integer", "description": "First line to return (1-based)", "minimum": 1},
                "limit": {"type": "integer", "description": "Number of lines to return", "minimum": 1}
            },
            "required": ["path"]
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
            let offset = integer_field(&input, &["offset"])?.unwrap_or(1).max(1) as usize;
            let limit = integer_field(&input, &["limit"])?.map(|limit| limit as usize);
            let context = context.clone();
            let (shown, text) = blocking(move || {
                let access = FileAccess::for_caller(&context)?;
                let path = access.readable(&context, &raw)?;
                let text = access
                    .workspace
                    .read_text(&path, MAX_FILE_BYTES)
                    .map_err(path_error)?;
                Ok((path.as_str().to_string(), text))
            })
            .await?;
            let selected: String = match limit {
                None if offset == 1 => text,
                _ => text
                    .lines()
                    .skip(offset - 1)
                    .take(limit.unwrap_or(usize::MAX))
                    .collect::<Vec<_>>()
                    .join("\n"),
            };
            let mut output = ToolOutput::text(truncate_chars(&selected, MAX_OUTPUT_CHARS));
            output.metering.insert("path".to_string(), shown.into());
            Ok(output)
        })
    }
}

/// Cuts text to `max` characters, saying so.
pub(crate) fn truncate_chars(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        None => text.to_string(),
        Some((cut, _)) => format!("{}\n[… truncated at {max} characters]", &text[..cut]),
    }
}
