//! `saint-llm`: streaming clients for the Anthropic Messages API and OpenAI-compatible
//! Chat Completions behind one provider-neutral message model, plus (feature `scripted`)
//! a scripted server speaking both wire formats for tests.

mod anthropic;
mod assemble;
mod client;
mod openai;
#[cfg(feature = "scripted")]
pub mod scripted;
mod types;

pub use crate::{
    client::{ClientOptions, Endpoint, LlmClient, LlmError, Provider},
    types::{
        ChatRequest, ChatResponse, ChatRole, ContentBlock, Message, StopReason, StreamEvent,
        ToolSpec, Usage,
    },
};
pub use tokio_util::sync::CancellationToken;
