//! The soak's model: an Anthropic Messages server on loopback (streaming, as the
//! agent calls it) that answers every turn with the marker of the message it answers
//! and the role it was asked to answer under, so the reply a platform receives says by
//! itself which message it answers and in which role:
//!
//! `Answer to soak-000042 as manager (tools of manager).`
//!
//! Every `exec_every`-th message of each channel (markers go round the six channels),
//! when its role has `exec`, first gets an `exec` tool call
//! (`echo soak-…`, run in the caller's sandbox with a Porter key registered for it), and
//! its answer once the result is back: so turns use Porter while Porter is being killed.
//!
//! The marker is the last `soak-NNNNNN` in the newest user text of the request (the
//! message the turn answers). The role is read twice, independently: from the system
//! prompt's person line ("You are talking to Marko (manager)", or "an unknown contact",
//! which gets the default role `external`) and from the tools offered (only the owner
//! gets `write`; owner and manager `sessions_list`; every internal role `read`; the
//! external role only the web tools). `saint_scripted::llm::ScriptedLlm` answers from a
//! fixed script and keeps every request body, which for ten thousand turns with their
//! whole conversations is gigabytes; this one keeps a few numbers per message.

use std::{
    collections::HashMap,
    convert::Infallible,
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::Instant,
};

use axum::{Router, body::Body, extract::State, response::Response, routing::post};
use serde_json::{Value, json};

/// What the model saw of one message's turns.
#[derive(Clone, Debug, Default)]
pub struct Seen {
    /// Model requests whose newest user text carried this marker.
    pub requests: u32,
    /// Roles read from the system prompt, one per request.
    pub prompt_roles: Vec<String>,
    /// Roles read from the tools offered, one per request.
    pub tool_roles: Vec<String>,
    pub first: Option<Instant>,
}

#[derive(Default)]
struct Shared {
    seen: Mutex<HashMap<u64, Seen>>,
    requests: Mutex<u64>,
    unmarked: Mutex<u64>,
    exec_every: u64,
    /// `exec` calls asked for, and their results: (ok, error).
    exec_calls: Mutex<(u64, u64, u64)>,
}

pub struct EchoModel {
    pub address: SocketAddr,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl EchoModel {
    /// `exec_every`: every that many messages (by marker) run `exec` first; 0 never.
    pub async fn start(exec_every: u64) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let shared = Arc::new(Shared {
            exec_every,
            ..Shared::default()
        });
        let router = Router::new()
            .route("/v1/messages", post(answer))
            .with_state(shared.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, router).await;
        });
        Self {
            address,
            shared,
            task,
        }
    }

    pub fn base_url(&self) -> String {
        format!("http://{}", self.address)
    }

    pub fn seen(&self) -> HashMap<u64, Seen> {
        self.shared.seen.lock().unwrap().clone()
    }

    pub fn request_count(&self) -> u64 {
        *self.shared.requests.lock().unwrap()
    }

    /// Requests without a marker (none are expected: every message carries one).
    pub fn unmarked(&self) -> u64 {
        *self.shared.unmarked.lock().unwrap()
    }

    /// `exec` calls asked for, results that came back without an error, with one.
    pub fn exec_calls(&self) -> (u64, u64, u64) {
        *self.shared.exec_calls.lock().unwrap()
    }
}

impl Drop for EchoModel {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The number after the last `soak-` in `text`.
pub fn last_marker(text: &str) -> Option<u64> {
    text.rmatch_indices("soak-").find_map(|(index, _)| {
        let digits: String = text[index + 5..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        digits.parse().ok()
    })
}

/// The marker a reply says it answers, with the two roles it names:
/// `Answer to soak-N as ROLE (tools of ROLE).`
pub fn parse_answer(text: &str) -> Option<(u64, String, String)> {
    let start = text.find("Answer to soak-")?;
    let rest = &text[start + "Answer to soak-".len()..];
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    let marker = digits.parse().ok()?;
    let rest = rest[digits.len()..].strip_prefix(" as ")?;
    let prompt_role: String = rest
        .chars()
        .take_while(char::is_ascii_alphanumeric)
        .collect();
    let rest = rest[prompt_role.len()..].strip_prefix(" (tools of ")?;
    let tool_role: String = rest
        .chars()
        .take_while(char::is_ascii_alphanumeric)
        .collect();
    Some((marker, prompt_role, tool_role))
}

fn system_text(body: &Value) -> String {
    match &body["system"] {
        Value::String(text) => text.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|block| block["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// The role the system prompt's person line names.
fn prompt_role(system: &str) -> String {
    if system.contains("You are talking to an unknown contact") {
        return "external".to_string();
    }
    let Some(start) = system.find("You are talking to ") else {
        return "none".to_string();
    };
    let line = &system[start..];
    let line = &line[..line.find('\n').unwrap_or(line.len())];
    // "You are talking to Marko (manager)." or "…, an external contact (external)."
    line.find('(')
        .and_then(|open| {
            let role: String = line[open + 1..]
                .chars()
                .take_while(|character| *character != ')')
                .collect();
            (!role.is_empty()).then_some(role)
        })
        .unwrap_or_else(|| "none".to_string())
}

/// The role the offered tools belong to, by the fixture company's role definitions.
fn tool_role(body: &Value) -> String {
    let names: Vec<&str> = body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|tool| tool["name"].as_str())
        .collect();
    let has = |name: &str| names.contains(&name);
    if has("write") && has("sessions_list") {
        "owner"
    } else if has("sessions_list") {
        "manager"
    } else if has("read") {
        "employee"
    } else if has("web_search") && names.iter().all(|name| name.starts_with("web_")) {
        "external"
    } else {
        "unknown"
    }
    .to_string()
}

/// Whether the conversation ends with a tool result (the model's call came back), and
/// whether that result is an error.
fn ends_with_tool_result(body: &Value) -> Option<bool> {
    let last = body["messages"].as_array()?.last()?;
    let blocks = last["content"].as_array()?;
    let result = blocks.iter().find(|block| block["type"] == "tool_result")?;
    Some(result["is_error"] == true)
}

/// The newest user message's text (its text blocks; tool results are not the person's).
fn newest_user_text(body: &Value) -> String {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    for message in messages.iter().rev() {
        if message["role"] != "user" {
            continue;
        }
        let text = match &message["content"] {
            Value::String(text) => text.clone(),
            Value::Array(blocks) => blocks
                .iter()
                .filter(|block| block["type"] == "text")
                .filter_map(|block| block["text"].as_str())
                .collect::<Vec<_>>()
                .join("\n"),
            _ => String::new(),
        };
        if !text.is_empty() {
            return text;
        }
    }
    String::new()
}

async fn answer(State(shared): State<Arc<Shared>>, body: String) -> Response {
    let body: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    let number = {
        let mut requests = shared.requests.lock().unwrap();
        *requests += 1;
        *requests
    };
    let mut call: Option<Value> = None;
    let text = match last_marker(&newest_user_text(&body)) {
        Some(marker) => {
            let prompt_role = prompt_role(&system_text(&body));
            let tool_role = tool_role(&body);
            {
                let mut seen = shared.seen.lock().unwrap();
                let entry = seen.entry(marker).or_default();
                entry.requests += 1;
                entry.prompt_roles.push(prompt_role.clone());
                entry.tool_roles.push(tool_role.clone());
                entry.first.get_or_insert_with(Instant::now);
            }
            let offers_exec = body["tools"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|tool| tool["name"] == "exec");
            match ends_with_tool_result(&body) {
                Some(error) => {
                    let mut calls = shared.exec_calls.lock().unwrap();
                    if error {
                        calls.2 += 1;
                    } else {
                        calls.1 += 1;
                    }
                }
                None if shared.exec_every > 0
                    && (marker / 6) % shared.exec_every == 0
                    && offers_exec =>
                {
                    shared.exec_calls.lock().unwrap().0 += 1;
                    call = Some(json!({"command": format!("echo soak-{marker:06}")}));
                }
                None => {}
            }
            format!("Answer to soak-{marker:06} as {prompt_role} (tools of {tool_role}).")
        }
        None => {
            *shared.unmarked.lock().unwrap() += 1;
            "Noted.".to_string()
        }
    };
    if let Some(input) = call {
        return tool_call(&body, input, number);
    }
    let model = body["model"].as_str().unwrap_or("claude").to_string();
    if body["stream"] != true {
        let message = json!({
            "id": "msg_soak", "type": "message", "role": "assistant", "model": model,
            "content": [{"type": "text", "text": text}], "stop_reason": "end_turn",
            "stop_sequence": null, "usage": {"input_tokens": 100, "output_tokens": 20},
        });
        return Response::builder()
            .status(200)
            .header("content-type", "application/json")
            .body(Body::from(message.to_string()))
            .unwrap();
    }
    let sse = |event: &str, data: Value| format!("event: {event}\ndata: {data}\n\n");
    let events = vec![
        sse(
            "message_start",
            json!({"type": "message_start", "message": {"id": "msg_soak", "type": "message",
                "role": "assistant", "model": model, "content": [], "stop_reason": null,
                "stop_sequence": null, "usage": {"input_tokens": 100, "output_tokens": 1}}}),
        ),
        sse(
            "content_block_start",
            json!({"type": "content_block_start", "index": 0,
                "content_block": {"type": "text", "text": ""}}),
        ),
        sse(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0,
                "delta": {"type": "text_delta", "text": text}}),
        ),
        sse(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 0}),
        ),
        sse(
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": "end_turn",
                "stop_sequence": null}, "usage": {"output_tokens": 20}}),
        ),
        sse("message_stop", json!({"type": "message_stop"})),
    ];
    let stream = futures::stream::iter(events.into_iter().map(Ok::<_, Infallible>));
    Response::builder()
        .status(200)
        .header("content-type", "text/event-stream")
        .header("cache-control", "no-cache")
        .body(Body::from_stream(stream))
        .unwrap()
}

/// An `exec` tool call, streamed.
fn tool_call(body: &Value, input: Value, number: u64) -> Response {
    let model = body["model"].as_str().unwrap_or("claude").to_string();
    let id = format!("toolu_soak_{number}");
    let sse = |event: &str, data: Value| format!("event: {event}\ndata: {data}\n\n");
    let events = vec![
        sse(
            "message_start",
            json!({"type": "message_start", "message": {"id": "msg_soak", "type": "message",
                "role": "assistant", "model": model, "content": [], "stop_reason": null,
                "stop_sequence": null, "usage": {"input_tokens": 100, "output_tokens": 1}}}),
        ),
        sse(
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block": {
                "type": "tool_use", "id": id, "name": "exec", "input": {}}}),
        ),
        sse(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0,
                "delta": {"type": "input_json_delta", "partial_json": input.to_string()}}),
        ),
        sse(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 0}),
        ),
        sse(
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use",
                "stop_sequence": null}, "usage": {"output_tokens": 20}}),
        ),
        sse("message_stop", json!({"type": "message_stop"})),
    ];
    let stream = futures::stream::iter(events.into_iter().map(Ok::<_, Infallible>));
    Response::builder()
        .status(200)
        .header("content-type", "text/event-stream")
        .header("cache-control", "no-cache")
        .body(Body::from_stream(stream))
        .unwrap()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_and_answers_are_read_back() {
        assert_eq!(last_marker("[Ana] soak-000001 and soak-000042?"), Some(42));
        assert_eq!(last_marker("no marker"), None);
        assert_eq!(
            parse_answer("> quoted\nAnswer to soak-000042 as manager (tools of manager)."),
            Some((42, "manager".to_string(), "manager".to_string()))
        );
        assert_eq!(
            prompt_role("Hi.\nYou are talking to Marko (manager). Senior employee.\n"),
            "manager"
        );
        assert_eq!(
            prompt_role("You are talking to an unknown contact. Do not reveal"),
            "external"
        );
    }
}
