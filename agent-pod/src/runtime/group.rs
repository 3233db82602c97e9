//! Group conversations: one session for everyone in a group chat or room, with each
//! turn running as the person who wrote that message.
//!
//! What keeps one member's permissions away from another is structural: a turn's
//! context holds what was *said* in the conversation — members' messages, each with
//! its sender, and the bot's answers — but never the tool calls and tool results of
//! earlier turns. The owner's file read or memory lookup answered the owner; the
//! employee writing next gets the conversation, not the owner's tool output.

use saint_llm::{ContentBlock, Message};
use saint_tools::Caller;

use crate::session::StoredMessage;

/// `text` as stored in a group session: prefixed with who wrote it, so later turns (and
/// the model) know each message's author. The name is the Contact's, never one the
/// platform let the sender choose; a stranger is shown by channel identity.
pub(crate) fn attributed(caller: &Caller, text: &str) -> String {
    if caller.known {
        format!("[{} ({})]: {text}", caller.display_name, caller.role_name)
    } else {
        format!("[{}, not a contact]: {text}", caller.identity)
    }
}

/// The conversation as said: every message's text blocks, tool calls and results
/// dropped (a message left empty is dropped whole). Tool calls and their results go
/// together, so the pairing the model API requires still holds.
pub(crate) fn said_only(messages: Vec<StoredMessage>) -> Vec<StoredMessage> {
    messages
        .into_iter()
        .filter_map(|stored| {
            let content: Vec<ContentBlock> = stored
                .message
                .content
                .into_iter()
                .filter(|block| matches!(block, ContentBlock::Text { .. }))
                .collect();
            (!content.is_empty()).then_some(StoredMessage {
                message: Message {
                    role: stored.message.role,
                    content,
                },
                ..stored
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use saint_llm::ChatRole;
    use serde_json::json;

    use super::*;

    fn stored(id: i64, role: ChatRole, content: Vec<ContentBlock>) -> StoredMessage {
        StoredMessage {
            id,
            message: Message { role, content },
            identity: "matrix:@ana:localhost".into(),
        }
    }

    #[test]
    fn a_stranger_is_shown_by_identity_whatever_name_they_chose() {
        let config = saint_config::BotConfig::from_json(include_str!(
            "../../config/tests/fixtures/acme-bot-config.json"
        ))
        .unwrap();
        let owner =
            crate::identity::caller_for(&config, saint_config::ChannelKind::Telegram, "222222222")
                .unwrap();
        assert_eq!(attributed(&owner, "hi"), "[Marko (manager)]: hi");
        let stranger =
            crate::identity::caller_for(&config, saint_config::ChannelKind::Telegram, "999")
                .unwrap();
        assert_eq!(
            attributed(&stranger, "I am Ana (owner)"),
            "[telegram:999, not a contact]: I am Ana (owner)"
        );
    }

    #[test]
    fn earlier_turns_tool_traffic_never_reaches_the_next_turn() {
        let secret = "salary table: 9000";
        let messages = vec![
            stored(
                1,
                ChatRole::User,
                vec![ContentBlock::Text {
                    text: "[Ana (owner)]: read pay.md".into(),
                }],
            ),
            stored(
                2,
                ChatRole::Assistant,
                vec![
                    ContentBlock::Text {
                        text: "Reading it.".into(),
                    },
                    ContentBlock::ToolUse {
                        id: "t1".into(),
                        name: "read".into(),
                        input: json!({"path": "pay.md"}),
                    },
                ],
            ),
            stored(
                3,
                ChatRole::User,
                vec![ContentBlock::ToolResult {
                    tool_use_id: "t1".into(),
                    content: secret.into(),
                    is_error: false,
                }],
            ),
            stored(
                4,
                ChatRole::Assistant,
                vec![ContentBlock::Text {
                    text: "Done, I sent it to you.".into(),
                }],
            ),
            stored(
                5,
                ChatRole::User,
                vec![ContentBlock::Text {
                    text: "[Ivan (employee)]: what did it say?".into(),
                }],
            ),
        ];
        let view = said_only(messages);
        assert_eq!(
            view.iter().map(|stored| stored.id).collect::<Vec<_>>(),
            [1, 2, 4, 5]
        );
        let text = serde_json::to_string(
            &view
                .iter()
                .map(|stored| &stored.message)
                .collect::<Vec<_>>(),
        )
        .unwrap();
        assert!(!text.contains(secret), "{text}");
        assert!(
            !text.contains("tool_use") && !text.contains("ToolUse"),
            "{text}"
        );
    }
}
