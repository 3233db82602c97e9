//! The provider-neutral conversation model: messages, tool specs, requests, responses and
//! stream events. Pure data; the wire formats live in `anthropic` and `openai`.

use serde::{Deserialize, Serialize};

/// Who said a message. System text is not a message: it travels in [`ChatRequest::system`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChatRole {
    /// The person (and tool results, which the APIs attribute to the user side).
    User,
    /// The model.
    Assistant,
}

/// One piece of a message.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentBlock {
    /// Plain text.
    Text {
        /// The text.
        text: String,
    },
    /// The model asks for a tool call.
    ToolUse {
        /// Provider-issued call id, echoed back in the result.
        id: String,
        /// Tool name.
        name: String,
        /// Input object.
        input: serde_json::Value,
    },
    /// An image the person sent, prepared within the provider's limits (saint-media).
    /// Only user messages carry images; both wire formats send it as base64 inline.
    Image {
        /// `image/jpeg`, `image/png`, `image/gif` or `image/webp`.
        media_type: String,
        /// The encoded image, base64 (standard alphabet, padded).
        data: String,
    },
    /// The result of a tool call, sent back to the model.
    ToolResult {
        /// The id of the [`ContentBlock::ToolUse`] this answers.
        tool_use_id: String,
        /// Result text (or the error message).
        content: String,
        /// Whether the call failed; the model sees it as an error result.
        #[serde(default)]
        is_error: bool,
    },
}

/// One conversation message.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Message {
    /// Speaker.
    pub role: ChatRole,
    /// Content blocks, in order.
    pub content: Vec<ContentBlock>,
}

impl Message {
    /// A user message with one text block.
    pub fn user_text(text: impl Into<String>) -> Self {
        Self {
            role: ChatRole::User,
            content: vec![ContentBlock::Text { text: text.into() }],
        }
    }

    /// An assistant message with one text block.
    pub fn assistant_text(text: impl Into<String>) -> Self {
        Self {
            role: ChatRole::Assistant,
            content: vec![ContentBlock::Text { text: text.into() }],
        }
    }

    /// The concatenated text blocks.
    pub fn text(&self) -> String {
        let mut out = String::new();
        for block in &self.content {
            if let ContentBlock::Text { text } = block {
                out.push_str(text);
            }
        }
        out
    }

    /// The tool calls this message asks for.
    pub fn tool_uses(&self) -> impl Iterator<Item = (&str, &str, &serde_json::Value)> {
        self.content.iter().filter_map(|block| match block {
            ContentBlock::ToolUse { id, name, input } => Some((id.as_str(), name.as_str(), input)),
            _ => None,
        })
    }
}

/// A tool as the model sees it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// Name the model calls.
    pub name: String,
    /// What it does.
    pub description: String,
    /// JSON Schema of the input object.
    pub input_schema: serde_json::Value,
}

/// One model call.
#[derive(Clone, Debug, PartialEq)]
pub struct ChatRequest {
    /// Model name.
    pub model: String,
    /// System prompt.
    pub system: String,
    /// Conversation so far; must start with a user message.
    pub messages: Vec<Message>,
    /// Tools the model may call (already filtered by policy).
    pub tools: Vec<ToolSpec>,
    /// Output token cap.
    pub max_tokens: u32,
}

/// Token counts reported by the provider.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Prompt tokens.
    pub input_tokens: u64,
    /// Completion tokens.
    pub output_tokens: u64,
}

impl std::ops::Add for Usage {
    type Output = Usage;

    /// Component-wise sum.
    fn add(self, other: Usage) -> Usage {
        Usage {
            input_tokens: self.input_tokens + other.input_tokens,
            output_tokens: self.output_tokens + other.output_tokens,
        }
    }
}

/// Why the model stopped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// Finished its answer.
    EndTurn,
    /// Wants tool results.
    ToolUse,
    /// Hit the output token cap.
    MaxTokens,
    /// Anything else the provider reported.
    Other(String),
}

/// An assembled model answer.
#[derive(Clone, Debug, PartialEq)]
pub struct ChatResponse {
    /// The assistant message.
    pub message: Message,
    /// Tokens used by this call.
    pub usage: Usage,
    /// Why it stopped.
    pub stop_reason: StopReason,
}

/// Incremental output, delivered while the response streams in.
#[derive(Clone, Debug, PartialEq)]
pub enum StreamEvent {
    /// More assistant text.
    TextDelta(String),
    /// The model started a tool call.
    ToolCallStarted {
        /// Call id.
        id: String,
        /// Tool name.
        name: String,
    },
    /// An attempt failed before any output and another follows after `delay`: what a
    /// person waiting on the answer is told at once, not after the last retry.
    Retrying {
        /// Why the attempt failed.
        error: String,
        /// How long until the next attempt.
        delay: std::time::Duration,
        /// The attempt that failed (1 for the first).
        attempt: usize,
    },
}
