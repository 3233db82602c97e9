//! The session store as the session tools see it ([`SessionDirectory`]): listings and
//! readable history. Visibility is decided by the tools, not here.

use saint_config::{ErrorChain, SessionKey};
use saint_llm::{ChatRole, ContentBlock};

use super::store::SessionStore;
use saint_tools::session_directory::{
    HistoryEntry, SessionDirectory, SessionDirectoryError, SessionSummary,
};

impl SessionDirectory for SessionStore {
    fn list(&self) -> Result<Vec<SessionSummary>, SessionDirectoryError> {
        let sessions = SessionStore::list(self)
            .map_err(|error| SessionDirectoryError(ErrorChain(&error).to_string()))?;
        sessions
            .into_iter()
            .map(|session| {
                let members = if SessionKey::is_conversation(&session.key) {
                    self.writers(&session.key)
                        .map_err(|error| SessionDirectoryError(ErrorChain(&error).to_string()))?
                } else {
                    Vec::new()
                };
                Ok(SessionSummary {
                    key: session.key,
                    contact: session.contact,
                    role: session.role,
                    message_count: session.message_count,
                    updated_at: session.updated_at,
                    members,
                })
            })
            .collect()
    }

    fn history(
        &self,
        key: &str,
        limit: usize,
    ) -> Result<Option<Vec<HistoryEntry>>, SessionDirectoryError> {
        let messages = self
            .all_messages(key)
            .map_err(|error| SessionDirectoryError(ErrorChain(&error).to_string()))?;
        if messages.is_empty() {
            return Ok(None);
        }
        let mut entries = Vec::new();
        for stored in messages {
            // An assistant message that called a tool was never posted: its text is the
            // model narrating its work, not something said in the conversation.
            let posted = stored.message.tool_uses().next().is_none();
            for block in stored.message.content {
                let entry = match (stored.message.role, block) {
                    (ChatRole::User, ContentBlock::Text { text }) => HistoryEntry {
                        speaker: "user".into(),
                        text,
                        said: true,
                    },
                    (ChatRole::Assistant, ContentBlock::Text { text }) => HistoryEntry {
                        speaker: "assistant".into(),
                        text,
                        said: posted,
                    },
                    (_, ContentBlock::ToolUse { name, .. }) => HistoryEntry {
                        speaker: "assistant".into(),
                        text: format!("[called {name}]"),
                        said: false,
                    },
                    // Only people send images; the history names it, not its bytes.
                    (_, ContentBlock::Image { media_type, .. }) => HistoryEntry {
                        speaker: "user".into(),
                        text: format!("[an image, {media_type}]"),
                        said: true,
                    },
                    (
                        _,
                        ContentBlock::ToolResult {
                            content, is_error, ..
                        },
                    ) => HistoryEntry {
                        speaker: "tool".into(),
                        text: if is_error {
                            format!("[error] {content}")
                        } else {
                            content
                        },
                        said: false,
                    },
                };
                entries.push(entry);
            }
        }
        let skip = entries.len().saturating_sub(limit);
        Ok(Some(entries.split_off(skip)))
    }
}

#[cfg(test)]
mod tests {
    use saint_llm::Message;

    use super::*;

    #[test]
    fn history_returns_the_last_entries_and_none_for_unknown_sessions() {
        let directory = tempfile::tempdir().unwrap();
        let store = SessionStore::open(directory.path().join("db.sqlite3")).unwrap();
        for text in ["one", "two", "three"] {
            store
                .append(
                    "person:ivan",
                    "ivan",
                    "employee",
                    "telegram:1",
                    &Message::user_text(text),
                )
                .unwrap();
        }
        let history = SessionDirectory::history(&store, "person:ivan", 2)
            .unwrap()
            .unwrap();
        let texts: Vec<_> = history.iter().map(|entry| entry.text.as_str()).collect();
        assert_eq!(texts, vec!["two", "three"]);
        assert_eq!(
            SessionDirectory::history(&store, "person:nobody", 5).unwrap(),
            None
        );
        assert_eq!(SessionDirectory::list(&store).unwrap()[0].message_count, 3);
    }
}

#[cfg(test)]
mod said_tests {
    use saint_llm::{ContentBlock, Message};
    use serde_json::json;

    use super::*;

    #[test]
    fn the_narration_of_a_turn_that_called_a_tool_is_not_marked_said() {
        let directory = tempfile::tempdir().unwrap();
        let store = SessionStore::open(directory.path().join("db.sqlite3")).unwrap();
        let key = "group:slack:C1/1";
        let append = |role: ChatRole, content: Vec<ContentBlock>| {
            store
                .append(key, "ana", "owner", "slack:U1", &Message { role, content })
                .unwrap();
        };
        append(
            ChatRole::User,
            vec![ContentBlock::Text {
                text: "[Ana (owner)]: read it".into(),
            }],
        );
        append(
            ChatRole::Assistant,
            vec![
                ContentBlock::Text {
                    text: "It says 9000.".into(),
                },
                ContentBlock::ToolUse {
                    id: "t".into(),
                    name: "read".into(),
                    input: json!({}),
                },
            ],
        );
        append(
            ChatRole::User,
            vec![ContentBlock::ToolResult {
                tool_use_id: "t".into(),
                content: "9000".into(),
                is_error: false,
            }],
        );
        append(
            ChatRole::Assistant,
            vec![ContentBlock::Text {
                text: "Sent.".into(),
            }],
        );
        let said: Vec<(String, bool)> = SessionDirectory::history(&store, key, 10)
            .unwrap()
            .unwrap()
            .into_iter()
            .map(|entry| (entry.text, entry.said))
            .collect();
        assert_eq!(
            said,
            [
                ("[Ana (owner)]: read it".to_string(), true),
                ("It says 9000.".to_string(), false),
                ("[called read]".to_string(), false),
                ("9000".to_string(), false),
                ("Sent.".to_string(), true),
            ]
        );
        assert_eq!(store.writers(key).unwrap(), ["slack:U1"]);
    }
}
