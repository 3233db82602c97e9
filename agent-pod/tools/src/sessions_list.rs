//! The `sessions_list` tool: lists the sessions the caller's role may see.
//!
//! Touches only the [`SessionDirectory`] it is given.

use std::sync::Arc;

use futures::future::BoxFuture;
use schemars::JsonSchema;
use serde::Deserialize;

use super::{
    Permit, ToolContext, ToolError, ToolOutput, TypedTool,
    files::blocking,
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

/// What `sessions_list` takes.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct SessionsListInput {
    /// Most sessions to list
    #[schemars(range(min = 1))]
    pub limit: Option<u64>,
}

impl TypedTool for SessionsListTool {
    type Input = SessionsListInput;
    const NAME: &'static str = "sessions_list";
    const DESCRIPTION: &'static str =
        "List conversations you may see: session key, person, message count, last activity.";

    fn run<'a>(
        &'a self,
        _permit: &'a Permit,
        context: &'a ToolContext,
        input: SessionsListInput,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            let limit = input.limit.unwrap_or(50).clamp(1, 500) as usize;
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
