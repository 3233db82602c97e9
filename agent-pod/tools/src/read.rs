//! The `read` tool: reads a workspace text file the caller's role may read.
//!
//! Touches only the workspace, through [`crate::guard::paths`].

use futures::future::BoxFuture;
use schemars::JsonSchema;
use serde::Deserialize;

use super::{
    Permit, ToolContext, ToolError, ToolOutput, TypedTool,
    files::{FileAccess, MAX_FILE_BYTES, blocking, path_error},
};

/// Longest output returned to the model, in characters.
const MAX_OUTPUT_CHARS: usize = 100_000;

/// Reads text files.
#[derive(Clone, Copy, Debug, Default)]
pub struct ReadTool;

/// What `read` takes.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct ReadInput {
    /// File path relative to the workspace
    #[serde(alias = "file_path", alias = "filePath")]
    pub path: String,
    /// First line to return (1-based)
    #[schemars(range(min = 1))]
    pub offset: Option<u64>,
    /// Number of lines to return
    #[schemars(range(min = 1))]
    pub limit: Option<u64>,
}

impl TypedTool for ReadTool {
    type Input = ReadInput;
    const NAME: &'static str = "read";
    const DESCRIPTION: &'static str = "Read a text file from the workspace. `path` is relative to the workspace. \
         Optionally `offset` (first line, 1-based) and `limit` (number of lines).";

    fn run<'a>(
        &'a self,
        _permit: &'a Permit,
        context: &'a ToolContext,
        input: ReadInput,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            let raw = input.path;
            let offset = input.offset.unwrap_or(1).max(1) as usize;
            let limit = input.limit.map(|limit| limit as usize);
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
