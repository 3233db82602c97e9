//! The `exec` tool until a sandbox exists: every call is refused (fail closed).
//!
//! Touches nothing. The policy never shows `exec` to any role; this tool exists so a
//! model that names it anyway gets a refusal rather than an unsandboxed command.

use futures::future::BoxFuture;

use super::{Tool, ToolContext, ToolError, ToolOutput};

/// `exec` without a sandbox: refuses everything.
#[derive(Clone, Copy, Debug, Default)]
pub struct ExecUnavailableTool;

impl Tool for ExecUnavailableTool {
    fn name(&self) -> &'static str {
        "exec"
    }

    fn description(&self) -> &'static str {
        "Run a shell command in the sandbox."
    }

    fn input_schema(&self) -> serde_json::Value {
        serde_json::json!({
            "type": "object",
            "properties": {"command": {"type": "string", "description": "Shell command"}},
            "required": ["command"]
        })
    }

    fn call<'a>(
        &'a self,
        _context: &'a ToolContext,
        _input: serde_json::Value,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async { Err(ToolError::Denied("commands cannot be run: no sandbox is available".to_string())) })
    }
}
