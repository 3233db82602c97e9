//! Makes a stored transcript valid to send to a model again. Pure.
//!
//! A turn killed between a tool call and its result leaves an assistant `tool_use` with
//! no matching `tool_result`; both APIs reject that. Each such call gets an error result
//! saying it was interrupted, so the model knows it did not complete.

use saint_llm::{ChatRole, ContentBlock, Message};

/// The message every unanswered tool call is given.
pub const INTERRUPTED: &str = "the call was interrupted before it returned a result";

/// Returns messages where every tool call is answered in the next message.
pub fn repair_tool_pairing(messages: Vec<Message>) -> Vec<Message> {
    let mut repaired: Vec<Message> = Vec::with_capacity(messages.len());
    let mut iterator = messages.into_iter().peekable();
    while let Some(message) = iterator.next() {
        let call_ids: Vec<String> = message
            .tool_uses()
            .map(|(id, _, _)| id.to_string())
            .collect();
        repaired.push(message);
        if call_ids.is_empty() {
            continue;
        }
        let answered: Vec<String> = match iterator.peek() {
            Some(next) if next.role == ChatRole::User => next
                .content
                .iter()
                .filter_map(|block| match block {
                    ContentBlock::ToolResult { tool_use_id, .. } => Some(tool_use_id.clone()),
                    _ => None,
                })
                .collect(),
            _ => Vec::new(),
        };
        let missing: Vec<ContentBlock> = call_ids
            .into_iter()
            .filter(|id| !answered.contains(id))
            .map(|id| ContentBlock::ToolResult {
                tool_use_id: id,
                content: INTERRUPTED.to_string(),
                is_error: true,
            })
            .collect();
        if missing.is_empty() {
            continue;
        }
        match iterator.peek_mut() {
            // Results go first in the user message, as both APIs expect.
            Some(next) if next.role == ChatRole::User => {
                let mut content = missing;
                content.append(&mut next.content);
                next.content = content;
            }
            _ => repaired.push(Message {
                role: ChatRole::User,
                content: missing,
            }),
        }
    }
    repaired
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn call(id: &str) -> Message {
        Message {
            role: ChatRole::Assistant,
            content: vec![ContentBlock::ToolUse {
                id: id.into(),
                name: "read".into(),
                input: json!({}),
            }],
        }
    }

    #[test]
    fn unanswered_call_followed_by_a_new_question_gets_an_error_result_first() {
        let repaired = repair_tool_pairing(vec![
            Message::user_text("a"),
            call("t1"),
            Message::user_text("b"),
        ]);
        assert_eq!(repaired.len(), 3);
        assert_eq!(
            repaired[2].content[0],
            ContentBlock::ToolResult {
                tool_use_id: "t1".into(),
                content: INTERRUPTED.into(),
                is_error: true
            }
        );
        assert_eq!(repaired[2].text(), "b");
    }

    #[test]
    fn trailing_unanswered_call_gets_its_own_result_message_and_answered_calls_are_untouched() {
        let answered = Message {
            role: ChatRole::User,
            content: vec![ContentBlock::ToolResult {
                tool_use_id: "t1".into(),
                content: "x".into(),
                is_error: false,
            }],
        };
        let input = vec![
            Message::user_text("a"),
            call("t1"),
            answered.clone(),
            call("t2"),
        ];
        let repaired = repair_tool_pairing(input);
        assert_eq!(repaired[2], answered);
        assert_eq!(repaired.len(), 5);
        assert_eq!(repaired[4].role, ChatRole::User);
    }
}
