//! The OpenAI Chat Completions wire format (also Ollama, vLLM): request bodies and
//! streamed chunk decoding. Pure: no I/O.

use serde_json::{Value, json};

use crate::{
    LlmError,
    assemble::Delta,
    types::{ChatRequest, ChatRole, ContentBlock, StopReason},
};

// Text goes in slot 0; tool call `i` in slot `i + 1`, so text always precedes calls.
const TOOL_SLOT_OFFSET: u64 = 1;

/// The streaming request body.
pub fn request_body(request: &ChatRequest) -> Value {
    let mut messages = Vec::with_capacity(request.messages.len() + 1);
    if !request.system.is_empty() {
        messages.push(json!({"role": "system", "content": request.system}));
    }
    for message in &request.messages {
        match message.role {
            ChatRole::User => {
                // Tool results become `tool` messages; the remaining text one `user` message,
                // whose content is a list of parts when it carries images.
                let mut text = String::new();
                let mut images = Vec::new();
                for block in &message.content {
                    match block {
                        ContentBlock::Text { text: part } => text.push_str(part),
                        ContentBlock::Image { media_type, data } => images.push(json!({
                            "type": "image_url",
                            "image_url": {"url": format!("data:{media_type};base64,{data}")},
                        })),
                        ContentBlock::ToolResult {
                            tool_use_id,
                            content,
                            is_error,
                        } => {
                            // Chat Completions has no error flag: say it in the content.
                            let content = if *is_error {
                                format!("Error: {content}")
                            } else {
                                content.clone()
                            };
                            messages.push(json!({"role": "tool", "tool_call_id": tool_use_id, "content": content}));
                        }
                        ContentBlock::ToolUse { .. } => {}
                    }
                }
                if !images.is_empty() {
                    let mut parts = Vec::with_capacity(images.len() + 1);
                    if !text.is_empty() {
                        parts.push(json!({"type": "text", "text": text}));
                    }
                    parts.extend(images);
                    messages.push(json!({"role": "user", "content": parts}));
                } else if !text.is_empty() {
                    messages.push(json!({"role": "user", "content": text}));
                }
            }
            ChatRole::Assistant => {
                let text = message.text();
                let calls: Vec<Value> = message
                    .tool_uses()
                    .map(|(id, name, input)| {
                        json!({"id": id, "type": "function", "function": {"name": name, "arguments": input.to_string()}})
                    })
                    .collect();
                let mut entry = json!({"role": "assistant", "content": if text.is_empty() { Value::Null } else { json!(text) }});
                if !calls.is_empty() {
                    entry["tool_calls"] = json!(calls);
                }
                messages.push(entry);
            }
        }
    }
    let mut body = json!({
        "model": request.model,
        "max_tokens": request.max_tokens,
        "messages": messages,
        "stream": true,
        "stream_options": {"include_usage": true},
    });
    if !request.tools.is_empty() {
        body["tools"] = request
            .tools
            .iter()
            .map(|tool| {
                json!({"type": "function", "function": {"name": tool.name, "description": tool.description, "parameters": tool.input_schema}})
            })
            .collect();
    }
    body
}

fn stop_reason(text: &str) -> StopReason {
    match text {
        "stop" => StopReason::EndTurn,
        "tool_calls" | "function_call" => StopReason::ToolUse,
        "length" => StopReason::MaxTokens,
        other => StopReason::Other(other.to_string()),
    }
}

/// Decodes one `data:` payload.
pub(crate) fn decode(data: &str) -> Result<Vec<Delta>, LlmError> {
    if data.trim() == "[DONE]" {
        return Ok(vec![Delta::Done]);
    }
    let value: Value = serde_json::from_str(data)
        .map_err(|error| LlmError::Protocol(format!("failed to parse openai chunk: {error}")))?;
    if let Some(error) = value.get("error") {
        let kind = error["type"]
            .as_str()
            .or(error["code"].as_str())
            .unwrap_or("error")
            .to_string();
        return Err(LlmError::Provider {
            retryable: kind.contains("overload")
                || kind.contains("rate_limit")
                || kind == "server_error",
            kind,
            message: error["message"].as_str().unwrap_or_default().to_string(),
        });
    }
    let mut deltas = Vec::new();
    for choice in value["choices"].as_array().into_iter().flatten() {
        let delta = &choice["delta"];
        if let Some(text) = delta["content"].as_str() {
            deltas.push(Delta::Text {
                slot: 0,
                text: text.to_string(),
            });
        }
        for call in delta["tool_calls"].as_array().into_iter().flatten() {
            let slot = call["index"].as_u64().unwrap_or(0) + TOOL_SLOT_OFFSET;
            let function = &call["function"];
            let id = call["id"].as_str().map(str::to_string);
            let name = function["name"].as_str().map(str::to_string);
            if id.is_some() || name.is_some() {
                deltas.push(Delta::ToolStart { slot, id, name });
            }
            if let Some(arguments) = function["arguments"].as_str() {
                deltas.push(Delta::ToolInput {
                    slot,
                    partial_json: arguments.to_string(),
                });
            }
        }
        if let Some(reason) = choice["finish_reason"].as_str() {
            deltas.push(Delta::Stop(stop_reason(reason)));
        }
    }
    let usage = &value["usage"];
    if usage.is_object() {
        deltas.push(Delta::Usage {
            input_tokens: usage["prompt_tokens"].as_u64(),
            output_tokens: usage["completion_tokens"].as_u64(),
        });
    }
    Ok(deltas)
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;

    use super::*;
    use crate::types::{Message, ToolSpec};

    #[test]
    fn request_body_maps_tool_results_to_tool_messages_and_asks_for_usage() {
        let request = ChatRequest {
            model: "gpt-x".into(),
            system: "sys".into(),
            messages: vec![
                Message::user_text("hi"),
                Message {
                    role: ChatRole::Assistant,
                    content: vec![ContentBlock::ToolUse {
                        id: "c1".into(),
                        name: "web_fetch".into(),
                        input: json!({"url": "u"}),
                    }],
                },
                Message {
                    role: ChatRole::User,
                    content: vec![ContentBlock::ToolResult {
                        tool_use_id: "c1".into(),
                        content: "nope".into(),
                        is_error: true,
                    }],
                },
            ],
            tools: vec![ToolSpec {
                name: "web_fetch".into(),
                description: "d".into(),
                input_schema: json!({"type": "object"}),
            }],
            max_tokens: 10,
        };
        assert_eq!(
            request_body(&request),
            json!({
                "model": "gpt-x",
                "max_tokens": 10,
                "stream": true,
                "stream_options": {"include_usage": true},
                "messages": [
                    {"role": "system", "content": "sys"},
                    {"role": "user", "content": "hi"},
                    {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "web_fetch", "arguments": "{\"url\":\"u\"}"}}]},
                    {"role": "tool", "tool_call_id": "c1", "content": "Error: nope"},
                ],
                "tools": [{"type": "function", "function": {"name": "web_fetch", "description": "d", "parameters": {"type": "object"}}}],
            })
        );
    }

    #[test]
    fn an_image_makes_the_user_content_a_list_of_parts_with_a_data_url() {
        let request = ChatRequest {
            model: "gpt-x".into(),
            system: String::new(),
            messages: vec![Message {
                role: ChatRole::User,
                content: vec![
                    ContentBlock::Text {
                        text: "what is this?".into(),
                    },
                    ContentBlock::Image {
                        media_type: "image/jpeg".into(),
                        data: "/9j/AA==".into(),
                    },
                ],
            }],
            tools: Vec::new(),
            max_tokens: 10,
        };
        assert_eq!(
            request_body(&request)["messages"],
            json!([{"role": "user", "content": [
                {"type": "text", "text": "what is this?"},
                {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,/9j/AA=="}},
            ]}])
        );
    }

    #[test]
    fn tool_call_fragments_decode_into_slots_after_text() {
        let deltas = decode(r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"c2","type":"function","function":{"name":"read","arguments":"{\"pa"}}]}}]}"#).unwrap();
        assert_eq!(
            deltas,
            vec![
                Delta::ToolStart {
                    slot: 2,
                    id: Some("c2".into()),
                    name: Some("read".into())
                },
                Delta::ToolInput {
                    slot: 2,
                    partial_json: "{\"pa".into()
                },
            ]
        );
        assert_eq!(decode("[DONE]").unwrap(), vec![Delta::Done]);
    }
}
