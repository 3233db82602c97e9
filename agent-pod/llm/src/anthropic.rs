//! The Anthropic Messages API wire format: request bodies and streamed event decoding.
//! Pure: no I/O (the client sends, this module translates).

use serde_json::{Value, json};

use crate::{
    LlmError,
    assemble::Delta,
    types::{ChatRequest, ChatRole, ContentBlock, StopReason},
};

/// The API version header value this module speaks.
pub const API_VERSION: &str = "2023-06-01";

/// The streaming request body.
pub fn request_body(request: &ChatRequest) -> Value {
    let messages: Vec<Value> = request
        .messages
        .iter()
        .map(|message| {
            let role = match message.role {
                ChatRole::User => "user",
                ChatRole::Assistant => "assistant",
            };
            let content: Vec<Value> = message
                .content
                .iter()
                .map(|block| match block {
                    ContentBlock::Text { text } => json!({"type": "text", "text": text}),
                    ContentBlock::Image { media_type, data } => json!({
                        "type": "image",
                        "source": {"type": "base64", "media_type": media_type, "data": data},
                    }),
                    ContentBlock::ToolUse { id, name, input } => {
                        json!({"type": "tool_use", "id": id, "name": name, "input": input})
                    }
                    ContentBlock::ToolResult {
                        tool_use_id,
                        content,
                        is_error,
                    } => json!({
                        "type": "tool_result",
                        "tool_use_id": tool_use_id,
                        "content": content,
                        "is_error": is_error,
                    }),
                })
                .collect();
            json!({"role": role, "content": content})
        })
        .collect();
    let mut body = json!({
        "model": request.model,
        "max_tokens": request.max_tokens,
        "messages": messages,
        "stream": true,
    });
    if !request.system.is_empty() {
        body["system"] = json!(request.system);
    }
    if !request.tools.is_empty() {
        body["tools"] = request
            .tools
            .iter()
            .map(|tool| {
                json!({"name": tool.name, "description": tool.description, "input_schema": tool.input_schema})
            })
            .collect();
    }
    body
}

fn stop_reason(text: &str) -> StopReason {
    match text {
        "end_turn" | "stop_sequence" => StopReason::EndTurn,
        "tool_use" => StopReason::ToolUse,
        "max_tokens" => StopReason::MaxTokens,
        other => StopReason::Other(other.to_string()),
    }
}

/// Decodes one server-sent event (`event:` name and `data:` JSON).
pub(crate) fn decode(event: &str, data: &str) -> Result<Vec<Delta>, LlmError> {
    if event == "ping" {
        return Ok(Vec::new());
    }
    let value: Value = serde_json::from_str(data).map_err(|error| {
        LlmError::Protocol(format!("failed to parse anthropic event {event}: {error}"))
    })?;
    // The event name is repeated in the payload's `type`; trust the payload if present.
    let kind = value.get("type").and_then(Value::as_str).unwrap_or(event);
    let slot = value.get("index").and_then(Value::as_u64).unwrap_or(0);
    let deltas = match kind {
        "message_start" => {
            let usage = &value["message"]["usage"];
            vec![Delta::Usage {
                input_tokens: usage["input_tokens"].as_u64(),
                output_tokens: usage["output_tokens"].as_u64(),
            }]
        }
        "content_block_start" => {
            let block = &value["content_block"];
            match block["type"].as_str() {
                Some("tool_use") => vec![Delta::ToolStart {
                    slot,
                    id: block["id"].as_str().map(str::to_string),
                    name: block["name"].as_str().map(str::to_string),
                }],
                Some("text") => {
                    vec![Delta::Text {
                        slot,
                        text: block["text"].as_str().unwrap_or_default().to_string(),
                    }]
                }
                // Thinking and other block kinds are not part of the conversation we keep.
                _ => Vec::new(),
            }
        }
        "content_block_delta" => {
            let delta = &value["delta"];
            match delta["type"].as_str() {
                Some("text_delta") => {
                    vec![Delta::Text {
                        slot,
                        text: delta["text"].as_str().unwrap_or_default().to_string(),
                    }]
                }
                Some("input_json_delta") => vec![Delta::ToolInput {
                    slot,
                    partial_json: delta["partial_json"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                }],
                _ => Vec::new(),
            }
        }
        "message_delta" => {
            let mut deltas = Vec::new();
            if let Some(reason) = value["delta"]["stop_reason"].as_str() {
                deltas.push(Delta::Stop(stop_reason(reason)));
            }
            let usage = &value["usage"];
            if usage.is_object() {
                deltas.push(Delta::Usage {
                    input_tokens: usage["input_tokens"].as_u64(),
                    output_tokens: usage["output_tokens"].as_u64(),
                });
            }
            deltas
        }
        "message_stop" => vec![Delta::Done],
        "error" => {
            let error = &value["error"];
            let error_type = error["type"].as_str().unwrap_or("error").to_string();
            let message = error["message"].as_str().unwrap_or_default().to_string();
            return Err(LlmError::Provider {
                retryable: matches!(
                    error_type.as_str(),
                    "overloaded_error" | "rate_limit_error" | "api_error"
                ),
                kind: error_type,
                message,
            });
        }
        _ => Vec::new(),
    };
    Ok(deltas)
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;

    use super::*;
    use crate::types::{Message, ToolSpec};

    #[test]
    fn request_body_carries_system_tools_and_tool_results() {
        let request = ChatRequest {
            model: "claude-haiku-4-5".into(),
            system: "be brief".into(),
            messages: vec![
                Message::user_text("hi"),
                Message {
                    role: ChatRole::Assistant,
                    content: vec![ContentBlock::ToolUse {
                        id: "t1".into(),
                        name: "read".into(),
                        input: json!({"path": "a"}),
                    }],
                },
                Message {
                    role: ChatRole::User,
                    content: vec![ContentBlock::ToolResult {
                        tool_use_id: "t1".into(),
                        content: "permission denied: x".into(),
                        is_error: true,
                    }],
                },
            ],
            tools: vec![ToolSpec {
                name: "read".into(),
                description: "reads".into(),
                input_schema: json!({"type": "object"}),
            }],
            max_tokens: 100,
        };
        assert_eq!(
            request_body(&request),
            json!({
                "model": "claude-haiku-4-5",
                "max_tokens": 100,
                "stream": true,
                "system": "be brief",
                "messages": [
                    {"role": "user", "content": [{"type": "text", "text": "hi"}]},
                    {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "read", "input": {"path": "a"}}]},
                    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "permission denied: x", "is_error": true}]},
                ],
                "tools": [{"name": "read", "description": "reads", "input_schema": {"type": "object"}}],
            })
        );
    }

    #[test]
    fn an_image_is_a_base64_image_block() {
        let request = ChatRequest {
            model: "claude-haiku-4-5".into(),
            system: String::new(),
            messages: vec![Message {
                role: ChatRole::User,
                content: vec![
                    ContentBlock::Text {
                        text: "what is this?".into(),
                    },
                    ContentBlock::Image {
                        media_type: "image/png".into(),
                        data: "iVBORw0=".into(),
                    },
                ],
            }],
            tools: Vec::new(),
            max_tokens: 100,
        };
        assert_eq!(
            request_body(&request)["messages"],
            json!([{"role": "user", "content": [
                {"type": "text", "text": "what is this?"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0="}},
            ]}])
        );
    }

    #[test]
    fn overloaded_error_event_is_retryable_provider_error() {
        let error = decode(
            "error",
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
        )
        .unwrap_err();
        assert!(
            matches!(
                error,
                LlmError::Provider {
                    retryable: true,
                    ..
                }
            ),
            "{error:?}"
        );
    }
}
