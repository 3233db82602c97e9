//! The `sessions_list` tool: lists the sessions the caller's role may see.
//!
//! Touches only the [`SessionDirectory`] it is given.

use std::sync::Arc;

use futures::future::BoxFuture;

use super::{
    Tool, ToolContext, ToolError, ToolOutput,
    files::{blocking, integer_field, require_tool},
    session_directory::{SessionDirectory, may_see},
};

/// Lists sessions.
#[derive(Clone)]
pub struct SessionsListTool {
    directory: Arc<dyn SessionDirectory>,
}

impl std::fmt::Debug for SessionsListTool {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("SessionsListTool")
            .finish_non_exhaustive()
    }
}

impl SessionsListTool {
    /// A tool reading `directory`.
    pub fn new(directory: Arc<dyn SessionDirectory>) -> Self {
        Self { directory }
    }
}

impl Tool for SessionsListTool {
    fn name(&self) -> &'static str {
        "sessions_list"
    }

    fn description(&self) -> &'static str {
        "List conversations you may see: session key, person, message count, last activity."
    }

    fn input_schema(&self) -> serde_json::Value {
        serde_json::json!({
            "type": "object",
            "properties": {
                "limit": {"type": "integer", "description": "Most sessions to list", "minimum": 1}
            }
        })
    }

    fn call<'a>(
        &'a self,
        context: &'a ToolContext,
        input: serde_json::Value,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            require_tool(context, self.name())?;
            let limit = integer_field(&input, &["limit"])?
                .unwrap_or(50)
                .clamp(1, 500) as usize;
            let directory = self.directory.clone();
            let sessions = blocking(move || {
                directory
                    .list()
                    .map_err(|error| ToolError::Failed(error.to_string()))
            })
            .await?;
            let visible: Vec<String> = sessions
                .iter()
                .filter(|session| may_see(&context.caller, &context.config, session))
                .take(limit)
                .map(|session| {
                    format!(
                        "{} — {} ({} messages, last {})",
                        session.key, session.contact, session.message_count, session.updated_at
                    )
                })
                .collect();
            let content = if visible.is_empty() {
                "No sessions.".to_string()
            } else {
                visible.join("\n")
            };
            Ok(ToolOutput::text(content))
        })
    }
}
