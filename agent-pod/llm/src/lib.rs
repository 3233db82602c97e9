//! `saint-llm`: streaming clients for the Anthropic Messages API and OpenAI-compatible
//! Chat Completions behind one provider-neutral message model. (The scripted server
//! speaking both wire formats for tests is `saint-scripted`'s.)

mod anthropic;
mod assemble;
mod client;
mod openai;
mod types;

pub use crate::{
    client::{ClientOptions, Endpoint, LlmClient, LlmError, Provider},
    types::{
        ChatRequest, ChatResponse, ChatRole, ContentBlock, Message, StopReason, StreamEvent,
        ToolSpec, Usage,
    },
};
pub use tokio_util::sync::CancellationToken;
