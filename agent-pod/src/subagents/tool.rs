//! The `sessions_spawn` tool: decodes the spawn and hands it to the registry, which
//! starts the child and answers at once.

use std::sync::Arc;

use futures::future::BoxFuture;
use saint_tools::{Permit, Tool, ToolContext, ToolError, ToolOutput, typed};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Subagents, rules::SPAWN_TOOL};

/// Longest task text, in characters: the task is the child's whole brief, not a file.
pub const MAX_TASK_CHARS: usize = 20_000;

/// What the model sends.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SpawnInput {
    /// The whole task.
    pub task: String,
    /// The tools the child may use at most.
    #[serde(default)]
    pub tools: Option<Vec<String>>,
    /// Another model, no more expensive than the role's.
    #[serde(default)]
    pub model: Option<String>,
    /// A shorter time limit than the role's.
    #[serde(default, alias = "timeout_seconds")]
    pub timeout_seconds: Option<u64>,
}

/// Starts sub-agents through the registry it belongs to.
pub struct SpawnTool {
    pub(super) subagents: Arc<Subagents>,
}

impl Tool for SpawnTool {
    fn name(&self) -> &'static str {
        SPAWN_TOOL
    }

    fn description(&self) -> &str {
        "Start a sub-agent: a background helper that does one task as you, with your tools or fewer, \
         and reports back. Returns at once with its id; its result is added to this conversation when it \
         ends (and sent to the person when they are on a channel that can receive it). It sees nothing of \
         this conversation, so give the whole task. It never gets a tool you lack, and gets cron or message \
         only when you name them in tools."
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "task": {
                    "type": "string",
                    "description": "What the sub-agent should do, in full: it sees nothing of this conversation",
                },
                "tools": {
                    "type": "array",
                    "items": {"type": "string"},
                    "description": "The tools it may use at most (names, group:<name> or globs such as web_*); default: the ones you have, except cron and message, which it gets only when named here",
                },
                "model": {
                    "type": "string",
                    "description": "Another model for it (default: yours); allowed only when the bot's price list shows it costs no more than yours, for input and for output tokens",
                },
                "timeoutSeconds": {
                    "type": "integer",
                    "minimum": 1,
                    "description": "Stop it after this many seconds (at most your role's limit, which is also the default)",
                },
            },
            "required": ["task"],
            "additionalProperties": false,
        })
    }

    fn call<'a>(
        &'a self,
        permit: &'a Permit,
        context: &'a ToolContext,
        input: Value,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            // A permit for another tool or another role proves nothing about this call.
            permit.covers(SPAWN_TOOL, &context.caller)?;
            let input: SpawnInput = typed::decode(input)?;
            let task = input.task.trim().to_string();
            if task.is_empty() {
                return Err(ToolError::InvalidInput(
                    "task must not be empty".to_string(),
                ));
            }
            if task.chars().count() > MAX_TASK_CHARS {
                return Err(ToolError::InvalidInput(format!(
                    "task is longer than {MAX_TASK_CHARS} characters; put the material in a file the sub-agent can read"
                )));
            }
            let request = super::rules::SpawnRequest {
                tools: input.tools,
                model: input.model,
                timeout_seconds: input.timeout_seconds,
                approved: permit.approval().is_some(),
            };
            self.subagents
                .spawn(context, task, request)
                .map(ToolOutput::text)
        })
    }
}
