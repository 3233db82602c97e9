//! Compaction: when a session's context nears the model's window, older turns are
//! summarised by the model and replaced by the summary, and the turn continues.
//! The choice of what to summarise is pure; the caller runs the model call and stores.

use saint_llm::{ChatRequest, ChatRole, ContentBlock, Message};

use crate::session::StoredMessage;

/// What an image counts as in [`estimate_tokens`]: 1,600 tokens of 4 characters.
const IMAGE_CHARACTERS: usize = 6_400;

/// Rough token estimate (4 characters per token, the usual rule of thumb for English;
/// only used to decide *when* to compact, well before the real limit).
pub fn estimate_tokens(request: &ChatRequest) -> u64 {
    let mut characters = request.system.len();
    for message in &request.messages {
        for block in &message.content {
            characters += match block {
                ContentBlock::Text { text } => text.len(),
                // Providers bill an image by its pixels, not its base64: Anthropic's
                // ~1,600 tokens for the 1568-pixel images saint-media prepares.
                ContentBlock::Image { .. } => IMAGE_CHARACTERS,
                ContentBlock::ToolUse { name, input, .. } => name.len() + input.to_string().len(),
                ContentBlock::ToolResult { content, .. } => content.len(),
            };
        }
    }
    for tool in &request.tools {
        characters +=
            tool.name.len() + tool.description.len() + tool.input_schema.to_string().len();
    }
    (characters / 4) as u64
}

/// Where to cut: the number of leading messages to summarise, keeping at least
/// `keep_recent` messages and starting the kept part on a plain user message (so no tool
/// result is separated from its call). `None` if nothing can be cut.
pub fn split_point(messages: &[StoredMessage], keep_recent: usize) -> Option<usize> {
    let latest_allowed = messages.len().checked_sub(keep_recent.max(1))?;
    (1..=latest_allowed).rev().find(|&index| {
        let message = &messages[index].message;
        message.role == ChatRole::User
            && !message
                .content
                .iter()
                .any(|block| matches!(block, ContentBlock::ToolResult { .. }))
    })
}

const SUMMARY_INSTRUCTIONS: &str = "You summarise conversations between an assistant and the person it helps. \
Write a concise summary of the conversation below that keeps every fact, decision, commitment, open task and \
stated preference needed to continue it. Write plain text, no preamble.";

const MAX_RENDERED_RESULT: usize = 2_000;

/// The model request that summarises `older` (folding in an earlier summary).
pub fn summary_request(
    model: &str,
    previous_summary: &str,
    older: &[StoredMessage],
    max_tokens: u32,
) -> ChatRequest {
    let mut transcript = String::new();
    if !previous_summary.is_empty() {
        transcript.push_str(&format!(
            "Summary of what came before:\n{previous_summary}\n\n"
        ));
    }
    for stored in older {
        for block in &stored.message.content {
            let line = match (stored.message.role, block) {
                (ChatRole::User, ContentBlock::Text { text }) => format!("Person: {text}"),
                (ChatRole::Assistant, ContentBlock::Text { text }) => format!("Assistant: {text}"),
                (_, ContentBlock::Image { media_type, .. }) => {
                    format!("Person sent an image ({media_type})")
                }
                (_, ContentBlock::ToolUse { name, input, .. }) => {
                    format!("Assistant called {name} with {input}")
                }
                (
                    _,
                    ContentBlock::ToolResult {
                        content, is_error, ..
                    },
                ) => {
                    let shown: String = content.chars().take(MAX_RENDERED_RESULT).collect();
                    format!(
                        "Tool {}: {shown}",
                        if *is_error { "error" } else { "result" }
                    )
                }
            };
            transcript.push_str(&line);
            transcript.push('\n');
        }
    }
    ChatRequest {
        model: model.to_string(),
        system: SUMMARY_INSTRUCTIONS.to_string(),
        messages: vec![Message::user_text(format!(
            "Conversation:\n\n{transcript}\nWrite the summary now."
        ))],
        tools: Vec::new(),
        max_tokens,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn stored(id: i64, message: Message) -> StoredMessage {
        StoredMessage {
            id,
            message,
            identity: "x".into(),
        }
    }

    #[test]
    fn split_never_separates_a_tool_result_from_its_call() {
        let call = Message {
            role: ChatRole::Assistant,
            content: vec![ContentBlock::ToolUse {
                id: "t".into(),
                name: "read".into(),
                input: json!({}),
            }],
        };
        let result = Message {
            role: ChatRole::User,
            content: vec![ContentBlock::ToolResult {
                tool_use_id: "t".into(),
                content: "r".into(),
                is_error: false,
            }],
        };
        let messages = vec![
            stored(1, Message::user_text("q1")),
            stored(2, Message::assistant_text("a1")),
            stored(3, Message::user_text("q2")),
            stored(4, call),
            stored(5, result),
            stored(6, Message::assistant_text("a2")),
        ];
        // Keeping 3 would start at the tool result (index 4); the cut moves back to q2.
        assert_eq!(split_point(&messages, 3), Some(2));
        assert_eq!(split_point(&messages, 6), None);
        let request = summary_request("m", "earlier", &messages[..2], 500);
        assert!(
            request.messages[0]
                .text()
                .contains("Summary of what came before:\nearlier")
        );
        assert!(
            request.messages[0]
                .text()
                .contains("Person: q1\nAssistant: a1")
        );
        assert!(request.tools.is_empty());
    }
}
