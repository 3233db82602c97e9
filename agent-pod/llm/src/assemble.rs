//! Turns the normalised deltas both wire formats decode into one [`ChatResponse`].
//! Pure: no I/O.

use crate::{
    LlmError,
    types::{ChatResponse, ChatRole, ContentBlock, Message, StopReason, StreamEvent, Usage},
};

/// A normalised piece of a streamed response; `slot` orders blocks within the message.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Delta {
    /// Text for a text block.
    Text { slot: u64, text: String },
    /// A tool call block starts (the id or name may arrive later on OpenAI).
    ToolStart {
        slot: u64,
        id: Option<String>,
        name: Option<String>,
    },
    /// A fragment of the tool call's input JSON.
    ToolInput { slot: u64, partial_json: String },
    /// Usage so far (providers report input and output at different times; fields that
    /// are `None` keep their earlier value).
    Usage {
        input_tokens: Option<u64>,
        output_tokens: Option<u64>,
    },
    /// Why the model stopped.
    Stop(StopReason),
    /// The stream is complete.
    Done,
}

enum Block {
    Text(String),
    Tool {
        id: String,
        name: String,
        input_json: String,
    },
}

/// Accumulates deltas; yields stream events for the caller as it goes.
#[derive(Default)]
pub(crate) struct Assembler {
    blocks: Vec<(u64, Block)>,
    usage: Usage,
    stop_reason: Option<StopReason>,
    done: bool,
    announced_tools: Vec<u64>,
}

impl Assembler {
    /// Whether the final delta arrived.
    pub(crate) fn is_done(&self) -> bool {
        self.done
    }

    fn block(&mut self, slot: u64, make: impl FnOnce() -> Block) -> &mut Block {
        let position = match self
            .blocks
            .iter()
            .position(|(existing, _)| *existing == slot)
        {
            Some(position) => position,
            None => {
                self.blocks.push((slot, make()));
                self.blocks.len() - 1
            }
        };
        &mut self.blocks[position].1
    }

    /// Applies one delta; returns the events the caller should see now.
    pub(crate) fn apply(&mut self, delta: Delta) -> Vec<StreamEvent> {
        let mut events = Vec::new();
        match delta {
            Delta::Text { slot, text } => {
                if let Block::Text(existing) = self.block(slot, || Block::Text(String::new())) {
                    existing.push_str(&text);
                }
                if !text.is_empty() {
                    events.push(StreamEvent::TextDelta(text));
                }
            }
            Delta::ToolStart { slot, id, name } => {
                let make = || Block::Tool {
                    id: String::new(),
                    name: String::new(),
                    input_json: String::new(),
                };
                if let Block::Tool {
                    id: existing_id,
                    name: existing_name,
                    ..
                } = self.block(slot, make)
                {
                    if let Some(id) = id {
                        existing_id.push_str(&id);
                    }
                    if let Some(name) = name {
                        existing_name.push_str(&name);
                    }
                }
                self.announce(slot, &mut events);
            }
            Delta::ToolInput { slot, partial_json } => {
                let make = || Block::Tool {
                    id: String::new(),
                    name: String::new(),
                    input_json: String::new(),
                };
                if let Block::Tool { input_json, .. } = self.block(slot, make) {
                    input_json.push_str(&partial_json);
                }
                self.announce(slot, &mut events);
            }
            Delta::Usage {
                input_tokens,
                output_tokens,
            } => {
                if let Some(input_tokens) = input_tokens {
                    self.usage.input_tokens = input_tokens;
                }
                if let Some(output_tokens) = output_tokens {
                    self.usage.output_tokens = output_tokens;
                }
            }
            Delta::Stop(reason) => self.stop_reason = Some(reason),
            Delta::Done => self.done = true,
        }
        events
    }

    // A tool call is announced once both its id and name are known.
    fn announce(&mut self, slot: u64, events: &mut Vec<StreamEvent>) {
        if self.announced_tools.contains(&slot) {
            return;
        }
        if let Some((_, Block::Tool { id, name, .. })) =
            self.blocks.iter().find(|(s, _)| *s == slot)
            && !id.is_empty()
            && !name.is_empty()
        {
            events.push(StreamEvent::ToolCallStarted {
                id: id.clone(),
                name: name.clone(),
            });
            self.announced_tools.push(slot);
        }
    }

    /// The assembled response.
    pub(crate) fn finish(mut self) -> Result<ChatResponse, LlmError> {
        self.blocks.sort_by_key(|(slot, _)| *slot);
        let mut content = Vec::with_capacity(self.blocks.len());
        for (_, block) in self.blocks {
            match block {
                Block::Text(text) if text.is_empty() => {}
                Block::Text(text) => content.push(ContentBlock::Text { text }),
                Block::Tool {
                    id,
                    name,
                    input_json,
                } => {
                    if id.is_empty() || name.is_empty() {
                        return Err(LlmError::Protocol(
                            "tool call without id or name".to_string(),
                        ));
                    }
                    // An empty argument string means "no arguments" for both providers.
                    let input = if input_json.trim().is_empty() {
                        serde_json::Value::Object(Default::default())
                    } else {
                        serde_json::from_str(&input_json).map_err(|error| {
                            LlmError::Protocol(format!(
                                "failed to parse tool input of {name}: {error}"
                            ))
                        })?
                    };
                    content.push(ContentBlock::ToolUse { id, name, input });
                }
            }
        }
        let has_tool_calls = content
            .iter()
            .any(|block| matches!(block, ContentBlock::ToolUse { .. }));
        let stop_reason = match self.stop_reason {
            Some(reason) => reason,
            None if has_tool_calls => StopReason::ToolUse,
            None => StopReason::EndTurn,
        };
        Ok(ChatResponse {
            message: Message {
                role: ChatRole::Assistant,
                content,
            },
            usage: self.usage,
            stop_reason,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interleaved_tool_input_fragments_assemble_into_one_call_after_text() {
        let mut assembler = Assembler::default();
        assembler.apply(Delta::ToolStart {
            slot: 2,
            id: Some("call_1".into()),
            name: Some("read".into()),
        });
        assembler.apply(Delta::Text {
            slot: 0,
            text: "Let me ".into(),
        });
        assembler.apply(Delta::ToolInput {
            slot: 2,
            partial_json: "{\"path\":".into(),
        });
        assembler.apply(Delta::Text {
            slot: 0,
            text: "look.".into(),
        });
        assembler.apply(Delta::ToolInput {
            slot: 2,
            partial_json: "\"a.md\"}".into(),
        });
        assembler.apply(Delta::Usage {
            input_tokens: Some(10),
            output_tokens: None,
        });
        assembler.apply(Delta::Usage {
            input_tokens: None,
            output_tokens: Some(5),
        });
        let response = assembler.finish().unwrap();
        assert_eq!(response.message.text(), "Let me look.");
        let calls: Vec<_> = response.message.tool_uses().collect();
        assert_eq!(
            calls,
            vec![("call_1", "read", &serde_json::json!({"path": "a.md"}))]
        );
        assert_eq!(
            response.usage,
            Usage {
                input_tokens: 10,
                output_tokens: 5
            }
        );
        assert_eq!(response.stop_reason, StopReason::ToolUse);
    }

    #[test]
    fn malformed_tool_input_is_a_protocol_error() {
        let mut assembler = Assembler::default();
        assembler.apply(Delta::ToolStart {
            slot: 1,
            id: Some("x".into()),
            name: Some("read".into()),
        });
        assembler.apply(Delta::ToolInput {
            slot: 1,
            partial_json: "{\"path\"".into(),
        });
        assert!(matches!(assembler.finish(), Err(LlmError::Protocol(_))));
    }
}
