//! `saint-tools`: the tools the model can call, the deterministic guards they apply
//! (paths, SSRF, the sandbox view) and the policy that picks what a role sees.
//!
//! The tool contract: what every tool the model can call implements.
//!
//! Whether a role may call a tool at all is decided once, by the runtime through
//! [`policy`], and reaches the tool as a [`Permit`] it cannot be called without. A tool
//! enforces only its own finer rules (paths, URLs, scopes) inside `call`. Tools declare
//! their input as a typed struct ([`TypedTool`]); the schema the model sees is
//! generated from it. Refusals are ordinary [`ToolError`]s, returned to the model as
//! error results, never panics.

pub mod apply_patch;
pub mod browser;
pub mod catalog;
pub mod edit;
pub mod exec;
pub mod files;
pub mod guard;
pub mod mcp;
pub mod memory_get;
pub mod memory_search;
pub mod message;
#[cfg(test)]
mod path_vectors;
pub mod policy;
pub mod process;
pub mod read;
pub mod session_directory;
pub mod sessions_history;
pub mod sessions_list;
pub mod skills;
#[cfg(test)]
mod ssrf_vectors;
#[cfg(any(test, feature = "fixtures"))]
pub mod test_fixtures;
#[cfg(test)]
mod tool_tests;
pub mod toolset;
pub mod typed;
pub mod untrusted;
pub mod web_fetch;
pub mod web_search;
pub mod write;
pub mod write_observer;

use std::{path::PathBuf, sync::Arc};

use futures::future::BoxFuture;
use saint_config::{BotConfig, RoleConfig};

pub use crate::{policy::Permit, typed::TypedTool};

/// Who is asking, resolved by deterministic code before the model runs.
#[derive(Clone, Debug)]
pub struct Caller {
    /// Canonical contact slug, or a sanitised sender id for unknown senders.
    pub slug: String,
    /// Display name ("Ana"), or the raw identity for unknown senders.
    pub display_name: String,
    /// Role name.
    pub role_name: String,
    /// The role itself.
    pub role: Arc<RoleConfig>,
    /// Whether the sender matched a Contact.
    pub known: bool,
    /// The channel identity the message came from (`whatsapp:+385…`).
    pub identity: String,
    /// The session this turn belongs to.
    pub session_key: String,
    /// What started the turn: a message, or work the person set going earlier.
    pub trigger: Trigger,
    /// How many sub-agents deep this turn runs (0: not a sub-agent).
    pub depth: u32,
    /// When set, the only contacts (slugs) this turn's `message` tool may reach, on top
    /// of the role's rules (the heartbeat notifies only whom the bot names).
    pub may_message: Option<Arc<[String]>>,
}

/// What started a turn. Every turn runs with, and is metered to, the person it belongs
/// to (the heartbeat's to the bot); the trigger only says how it began.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Trigger {
    /// A person wrote.
    #[default]
    Message,
    /// A scheduled job came due.
    Cron,
    /// The bot's heartbeat.
    Heartbeat,
    /// A sub-agent started by `sessions_spawn`.
    Subagent,
}

impl Trigger {
    /// The label in the usage log and metrics.
    pub fn label(self) -> &'static str {
        match self {
            Trigger::Message => "message",
            Trigger::Cron => "cron",
            Trigger::Heartbeat => "heartbeat",
            Trigger::Subagent => "subagent",
        }
    }
}

/// Everything a tool call may read.
#[derive(Clone, Debug)]
pub struct ToolContext {
    /// The asker.
    pub caller: Caller,
    /// The real workspace root (canonical path).
    pub workspace: PathBuf,
    /// The config in force for this turn.
    pub config: Arc<BotConfig>,
}

/// A successful tool result.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ToolOutput {
    /// Text returned to the model.
    pub content: String,
    /// Whether the content is untrusted external content (web pages, search results).
    pub untrusted: bool,
    /// Facts for the usage log (e.g. `{"porter": true}`); never shown to the model.
    pub metering: serde_json::Map<String, serde_json::Value>,
    /// An image for the model to look at (the `image` tool), sent beside the result.
    pub image: Option<ToolImage>,
    /// A voice note for the person (the `tts` tool), sent with the turn's reply.
    pub audio: Option<ToolAudio>,
}

/// An audio file made for the person, waiting under the workspace's runtime state
/// (never a sandbox's view) until the reply carrying it is sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolAudio {
    /// Workspace-relative path of the file.
    pub path: String,
    /// `audio/ogg` (Opus in Ogg).
    pub mime_type: String,
}

/// An image prepared within the provider's limits, as both wire formats carry it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolImage {
    /// `image/jpeg` or `image/png`.
    pub media_type: String,
    /// The encoded image, base64 (standard alphabet, padded).
    pub base64: String,
}

impl ToolOutput {
    /// Plain trusted text.
    pub fn text(content: impl Into<String>) -> Self {
        Self {
            content: content.into(),
            ..Self::default()
        }
    }
}

/// Why a tool call failed; the message is what the model sees.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolError {
    /// The caller's role does not allow this (path, URL, command, scope).
    #[error("permission denied: {0}")]
    Denied(String),
    /// The arguments are malformed.
    #[error("invalid input: {0}")]
    InvalidInput(String),
    /// The target does not exist.
    #[error("not found: {0}")]
    NotFound(String),
    /// The call ran out of time.
    #[error("timed out after {0} s")]
    Timeout(u64),
    /// Anything else; the message must not leak internals (paths outside the workspace,
    /// credentials, model or platform details).
    #[error("{0}")]
    Failed(String),
}

impl ToolError {
    /// Short outcome label for metering and metrics.
    pub fn outcome(&self) -> &'static str {
        match self {
            ToolError::Denied(_) => "denied",
            ToolError::InvalidInput(_) => "invalid_input",
            ToolError::NotFound(_) => "not_found",
            ToolError::Timeout(_) => "timeout",
            ToolError::Failed(_) => "error",
        }
    }
}

/// A tool the model can call, as a [`toolset::ToolSet`] holds it. Tools implement
/// [`TypedTool`] and get this by the adaptor in [`typed`]; wrappers (e.g. the write
/// observer) implement it directly and pass the permit on.
pub trait Tool: Send + Sync {
    /// The name the model uses (one of `saint_config::KNOWN_TOOLS`).
    fn name(&self) -> &'static str;
    /// One paragraph for the model.
    fn description(&self) -> &str;
    /// JSON Schema of the input object.
    fn input_schema(&self) -> serde_json::Value;
    /// Runs the call the policy allowed (`permit`). Enforces the tool's own finer
    /// rules (paths, URLs, scopes) itself. The typed adaptor refuses a permit issued
    /// for another tool or role ([`Permit::covers`]); a wrapper implementing this
    /// directly passes the permit on to the tool it wraps.
    fn call<'a>(
        &'a self,
        permit: &'a Permit,
        context: &'a ToolContext,
        input: serde_json::Value,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>>;
}
