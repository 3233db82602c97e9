//! The `sessions_history` tool: shows recent messages of a session the caller may see.
//!
//! Touches only the [`SessionDirectory`] it is given. A session the caller may not see
//! is reported exactly like a missing one, so its existence does not leak.

use std::sync::Arc;

use futures::future::BoxFuture;
use saint_config::{SessionKey, SessionsVisibility};
use schemars::JsonSchema;
use serde::Deserialize;

use super::{
    Permit, ToolContext, ToolError, ToolOutput, TypedTool,
    files::blocking,
    read::truncate_chars,
    session_directory::{SessionDirectory, may_see},
};

/// Shows session transcripts.
#[derive(Clone)]
pub struct SessionsHistoryTool {
    directory: Arc<dyn SessionDirectory>,
}

impl std::fmt::Debug for SessionsHistoryTool {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("SessionsHistoryTool")
            .finish_non_exhaustive()
    }
}

impl SessionsHistoryTool {
    /// A tool reading `directory`.
    pub fn new(directory: Arc<dyn SessionDirectory>) -> Self {
        Self { directory }
    }
}

/// What `sessions_history` takes.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct SessionsHistoryInput {
    /// Key from sessions_list
    #[serde(alias = "sessionKey", alias = "key")]
    pub session_key: String,
    /// Most messages to show
    #[schemars(range(min = 1))]
    pub limit: Option<u64>,
}

impl TypedTool for SessionsHistoryTool {
    type Input = SessionsHistoryInput;
    const NAME: &'static str = "sessions_history";
    const DESCRIPTION: &'static str =
        "Show the most recent messages of a conversation you may see, by session key.";

    fn run<'a>(
        &'a self,
        _permit: &'a Permit,
        context: &'a ToolContext,
        input: SessionsHistoryInput,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            let key = input.session_key;
            let limit = input.limit.unwrap_or(20).clamp(1, 200) as usize;
            let not_found = || ToolError::NotFound(format!("no session {key:?}"));
            let directory = self.directory.clone();
            let sessions = blocking(move || {
                directory
                    .list()
                    .map_err(|error| ToolError::Failed(error.to_string()))
            })
            .await?;
            let Some(session) = sessions.into_iter().find(|session| session.key == key) else {
                return Err(not_found());
            };
            if !may_see(&context.caller, &context.config, &session) {
                return Err(not_found());
            }
            let directory = self.directory.clone();
            let wanted = key.clone();
            let entries = blocking(move || {
                directory
                    .history(&wanted, limit)
                    .map_err(|error| ToolError::Failed(error.to_string()))
            })
            .await?
            .ok_or_else(not_found)?;
            // In a group conversation, members saw what was said; the tool calls and
            // results of each member's turns stay theirs (only `all` visibility shows
            // them).
            let said_only = SessionKey::is_conversation(&key)
                && !matches!(
                    context.caller.role.sessions_visibility,
                    SessionsVisibility::All
                );
            let text = entries
                .iter()
                .filter(|entry| entry.said || !said_only)
                .map(|entry| format!("[{}] {}", entry.speaker, entry.text))
                .collect::<Vec<_>>()
                .join("\n");
            Ok(ToolOutput::text(truncate_chars(&text, 50_000)))
        })
    }
}
