//! A scripted LLM server for tests: a real HTTP server on 127.0.0.1 that speaks the
//! Anthropic Messages and OpenAI Chat Completions streaming wire formats, replays
//! scripted replies (text, tool calls, rate limits, overload) in order, and records
//! every request so tests can assert what the agent sent. Test support only: it never
//! runs in production and binds loopback, or an address of a network the test made.

use std::{
    collections::VecDeque,
    convert::Infallible,
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::Duration,
};

use axum::{
    Router,
    body::Body,
    extract::State,
    http::{HeaderMap, StatusCode},
    response::Response,
    routing::post,
};
use futures::StreamExt;
use serde_json::{Value, json};
use tokio::sync::oneshot;

use saint_llm::Usage;

/// Which wire format a request used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wire {
    /// `POST /v1/messages`.
    Anthropic,
    /// `POST /v1/chat/completions`.
    Openai,
}

#[derive(Clone, Debug)]
enum ReplyKind {
    Answer {
        text: String,
        calls: Vec<(String, Value)>,
    },
    Failure {
        status: u16,
        retry_after: Option<u64>,
        error_type: String,
        message: String,
    },
}

/// One scripted model answer.
#[derive(Clone, Debug)]
pub struct Reply {
    kind: ReplyKind,
    usage: Usage,
    delay: Duration,
    chunk_delay: Duration,
    /// Held until the test releases it: the event a test waits on, never a sleep.
    gate: Option<Gate>,
    /// Text characters streamed before the stream is cut (`None`: the whole answer).
    cut_after: Option<usize>,
}

/// A reply held until [`Gate::open`]: the test decides when the model answers.
#[derive(Clone, Debug)]
pub struct Gate(std::sync::Arc<tokio::sync::Semaphore>);

impl Default for Gate {
    fn default() -> Self {
        Self::new()
    }
}

impl Gate {
    /// A closed gate.
    pub fn new() -> Self {
        Self(std::sync::Arc::new(tokio::sync::Semaphore::new(0)))
    }

    /// Lets the held reply go.
    pub fn open(&self) {
        self.0.add_permits(1);
    }

    async fn wait(&self) {
        if let Ok(permit) = self.0.acquire().await {
            permit.forget();
        }
    }
}

impl Reply {
    fn answer(text: String, calls: Vec<(String, Value)>) -> Self {
        Self {
            kind: ReplyKind::Answer { text, calls },
            usage: Usage {
                input_tokens: 100,
                output_tokens: 20,
            },
            delay: Duration::ZERO,
            chunk_delay: Duration::ZERO,
            gate: None,
            cut_after: None,
        }
    }

    /// A plain text answer.
    pub fn text(text: impl Into<String>) -> Self {
        Self::answer(text.into(), Vec::new())
    }

    /// One tool call.
    pub fn tool_call(name: impl Into<String>, input: Value) -> Self {
        Self::answer(String::new(), vec![(name.into(), input)])
    }

    /// Several tool calls in one answer.
    pub fn tool_calls(calls: Vec<(String, Value)>) -> Self {
        Self::answer(String::new(), calls)
    }

    /// Adds text before the tool calls.
    pub fn with_text(mut self, text: impl Into<String>) -> Self {
        if let ReplyKind::Answer { text: existing, .. } = &mut self.kind {
            *existing = text.into();
        }
        self
    }

    /// HTTP 429 with a `retry-after` header in seconds.
    pub fn rate_limited(retry_after_seconds: u64) -> Self {
        Self::failure(
            429,
            Some(retry_after_seconds),
            "rate_limit_error",
            "rate limited",
        )
    }

    /// The provider is overloaded: 529 for Anthropic, 503 for OpenAI.
    pub fn overloaded() -> Self {
        Self::failure(529, None, "overloaded_error", "Overloaded")
    }

    /// An arbitrary error status.
    pub fn failure(status: u16, retry_after: Option<u64>, error_type: &str, message: &str) -> Self {
        Self {
            kind: ReplyKind::Failure {
                status,
                retry_after,
                error_type: error_type.to_string(),
                message: message.to_string(),
            },
            usage: Usage::default(),
            delay: Duration::ZERO,
            chunk_delay: Duration::ZERO,
            gate: None,
            cut_after: None,
        }
    }

    /// Token usage to report.
    pub fn with_usage(mut self, input_tokens: u64, output_tokens: u64) -> Self {
        self.usage = Usage {
            input_tokens,
            output_tokens,
        };
        self
    }

    /// Waits before sending response headers (a slow model).
    pub fn with_delay(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }

    /// Holds the answer (after the request is recorded) until `gate` opens.
    pub fn held_until(mut self, gate: &Gate) -> Self {
        self.gate = Some(gate.clone());
        self
    }

    /// Streams only the first `characters` characters of the answer's text, then ends
    /// the stream without finishing the message (a connection cut mid-answer).
    pub fn cut_after(mut self, characters: usize) -> Self {
        self.cut_after = Some(characters);
        self
    }

    /// Waits before each stream event (a slowly streaming model).
    pub fn with_chunk_delay(mut self, delay: Duration) -> Self {
        self.chunk_delay = delay;
        self
    }
}

/// A request the server received.
#[derive(Clone, Debug)]
pub struct RecordedRequest {
    /// Wire format used.
    pub wire: Wire,
    /// Request headers.
    pub headers: HeaderMap,
    /// JSON body.
    pub body: Value,
}

impl RecordedRequest {
    /// The `model` field.
    pub fn model(&self) -> String {
        self.body["model"].as_str().unwrap_or_default().to_string()
    }

    /// The system prompt (Anthropic `system`, OpenAI first `system` message).
    pub fn system(&self) -> String {
        match self.wire {
            Wire::Anthropic => match &self.body["system"] {
                Value::String(text) => text.clone(),
                Value::Array(blocks) => blocks
                    .iter()
                    .filter_map(|block| block["text"].as_str())
                    .collect(),
                _ => String::new(),
            },
            Wire::Openai => self.body["messages"]
                .as_array()
                .and_then(|messages| messages.iter().find(|message| message["role"] == "system"))
                .and_then(|message| message["content"].as_str())
                .unwrap_or_default()
                .to_string(),
        }
    }

    /// Names of the tools offered to the model, sorted.
    pub fn tool_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.body["tools"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|tool| match self.wire {
                Wire::Anthropic => tool["name"].as_str(),
                Wire::Openai => tool["function"]["name"].as_str(),
            })
            .map(str::to_string)
            .collect();
        names.sort();
        names
    }

    /// Tool results sent back to the model: `(content, is_error)`. OpenAI has no error
    /// flag, so there an error is a result whose content starts with `Error:`.
    pub fn tool_results(&self) -> Vec<(String, bool)> {
        let messages = self.body["messages"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        match self.wire {
            Wire::Anthropic => messages
                .iter()
                .flat_map(|message| message["content"].as_array().cloned().unwrap_or_default())
                .filter(|block| block["type"] == "tool_result")
                .map(|block| {
                    (
                        block["content"].as_str().unwrap_or_default().to_string(),
                        block["is_error"] == true,
                    )
                })
                .collect(),
            Wire::Openai => messages
                .iter()
                .filter(|message| message["role"] == "tool")
                .map(|message| {
                    let content = message["content"].as_str().unwrap_or_default().to_string();
                    let is_error = content.starts_with("Error:");
                    (content, is_error)
                })
                .collect(),
        }
    }

    /// All user-authored text in the conversation, in order.
    pub fn user_texts(&self) -> Vec<String> {
        let messages = self.body["messages"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let mut texts = Vec::new();
        for message in messages.iter().filter(|message| message["role"] == "user") {
            match &message["content"] {
                Value::String(text) => texts.push(text.clone()),
                Value::Array(blocks) => texts.extend(
                    blocks
                        .iter()
                        .filter(|block| block["type"] == "text")
                        .filter_map(|block| block["text"].as_str().map(str::to_string)),
                ),
                _ => {}
            }
        }
        texts
    }
}

#[derive(Default)]
struct Shared {
    script: Mutex<VecDeque<Reply>>,
    fallback: Mutex<Option<Reply>>,
    requests: Mutex<Vec<RecordedRequest>>,
    counter: Mutex<u64>,
    /// Models listed by `GET /api/tags` (Ollama) and `GET /v1/models` (OpenAI).
    models: Mutex<Vec<String>>,
    /// Requests the client closed before their answer was complete, and a wake-up for
    /// tests waiting on one.
    closed: std::sync::atomic::AtomicUsize,
    closed_changed: tokio::sync::Notify,
}

/// Counts its request as closed by the client unless the answer finished first.
struct CloseWatch {
    shared: Option<Arc<Shared>>,
}

impl CloseWatch {
    fn finished(mut self) {
        self.shared = None;
    }
}

impl Drop for CloseWatch {
    fn drop(&mut self) {
        if let Some(shared) = self.shared.take() {
            shared
                .closed
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            shared.closed_changed.notify_waiters();
        }
    }
}

/// The running server; stops when dropped.
pub struct ScriptedLlm {
    address: SocketAddr,
    shared: Arc<Shared>,
    shutdown: Option<oneshot::Sender<()>>,
}

impl ScriptedLlm {
    /// Binds 127.0.0.1 on a free port and starts serving. Needs a tokio runtime.
    pub async fn start() -> std::io::Result<Self> {
        Self::start_on(std::net::Ipv4Addr::LOCALHOST.into()).await
    }

    /// Binds `address` on a free port: the gateway of a pod network the test made, so
    /// pods reach the server the way they reach a model server on their node.
    pub async fn start_on(address: std::net::IpAddr) -> std::io::Result<Self> {
        let shared = Arc::new(Shared::default());
        let listener = tokio::net::TcpListener::bind((address, 0)).await?;
        let address = listener.local_addr()?;
        let router = Router::new()
            .route("/v1/messages", post(anthropic_handler))
            .route("/v1/chat/completions", post(openai_handler))
            .route("/api/tags", axum::routing::get(ollama_tags_handler))
            .route("/v1/models", axum::routing::get(openai_models_handler))
            .with_state(shared.clone());
        let (shutdown, stopped) = oneshot::channel::<()>();
        tokio::spawn(async move {
            let _ = axum::serve(listener, router)
                .with_graceful_shutdown(async {
                    let _ = stopped.await;
                })
                .await;
        });
        Ok(Self {
            address,
            shared,
            shutdown: Some(shutdown),
        })
    }

    /// `http://<address>:<port>`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.address)
    }

    /// Queues the next reply.
    pub fn push(&self, reply: Reply) {
        self.shared
            .script
            .lock()
            .expect("script lock")
            .push_back(reply);
    }

    /// The reply used when the script is empty (without one, an empty script answers 500).
    pub fn set_fallback(&self, reply: Reply) {
        *self.shared.fallback.lock().expect("fallback lock") = Some(reply);
    }

    /// Replies still queued.
    pub fn pending(&self) -> usize {
        self.shared.script.lock().expect("script lock").len()
    }

    /// Lists `models` the way Ollama (`GET /api/tags`) and OpenAI-compatible servers
    /// (`GET /v1/models`) do; empty by default.
    pub fn set_models(&self, models: &[&str]) {
        *self.shared.models.lock().expect("models lock") =
            models.iter().map(|model| model.to_string()).collect();
    }

    /// Every request received so far.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared.requests.lock().expect("requests lock").clone()
    }

    /// How many requests were received.
    pub fn request_count(&self) -> usize {
        self.shared.requests.lock().expect("requests lock").len()
    }

    /// How many requests the client closed before their answer was complete (a
    /// cancelled turn, a client that gave up).
    pub fn closed_count(&self) -> usize {
        self.shared.closed.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Waits until at least `count` requests were closed early; false after `timeout`.
    pub async fn wait_closed(&self, count: usize, timeout: Duration) -> bool {
        let wait = async {
            loop {
                let changed = self.shared.closed_changed.notified();
                if self.closed_count() >= count {
                    return;
                }
                changed.await;
            }
        };
        tokio::time::timeout(timeout, wait).await.is_ok()
    }
}

impl Drop for ScriptedLlm {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
    }
}

async fn anthropic_handler(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: String,
) -> Response {
    respond(shared, Wire::Anthropic, headers, body).await
}

async fn openai_handler(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: String,
) -> Response {
    respond(shared, Wire::Openai, headers, body).await
}

async fn respond(shared: Arc<Shared>, wire: Wire, headers: HeaderMap, body: String) -> Response {
    let body: Value = match serde_json::from_str(&body) {
        Ok(body) => body,
        Err(error) => return plain(400, &format!("invalid json: {error}")),
    };
    let model = body["model"].as_str().unwrap_or_default().to_string();
    let include_usage = body["stream_options"]["include_usage"] == true;
    shared
        .requests
        .lock()
        .expect("requests lock")
        .push(RecordedRequest {
            wire,
            headers,
            body,
        });
    let next = shared.script.lock().expect("script lock").pop_front();
    let Some(reply) = next.or_else(|| shared.fallback.lock().expect("fallback lock").clone())
    else {
        return plain(500, "scripted llm: script exhausted");
    };
    let call_number = {
        let mut counter = shared.counter.lock().expect("counter lock");
        *counter += 1;
        *counter
    };
    // Dropped with this future when the client hangs up while the answer is held.
    let watch = CloseWatch {
        shared: Some(shared.clone()),
    };
    if let Some(gate) = &reply.gate {
        gate.wait().await;
    }
    if !reply.delay.is_zero() {
        tokio::time::sleep(reply.delay).await;
    }
    match &reply.kind {
        ReplyKind::Failure {
            status,
            retry_after,
            error_type,
            message,
        } => {
            let status = if *status == 529 && wire == Wire::Openai {
                503
            } else {
                *status
            };
            let body = match wire {
                Wire::Anthropic => {
                    json!({"type": "error", "error": {"type": error_type, "message": message}})
                }
                Wire::Openai => json!({"error": {"type": error_type, "message": message}}),
            };
            let mut response = Response::builder()
                .status(status)
                .header("content-type", "application/json");
            if let Some(seconds) = retry_after {
                response = response.header("retry-after", seconds.to_string());
            }
            watch.finished();
            response
                .body(Body::from(body.to_string()))
                .expect("valid response")
        }
        ReplyKind::Answer { text, calls } => {
            // A cut answer streams the start of its text, then the connection ends.
            let text: String = match reply.cut_after {
                Some(characters) => text.chars().take(characters).collect(),
                None => text.clone(),
            };
            let mut events = match wire {
                Wire::Anthropic => anthropic_events(&model, &text, calls, reply.usage, call_number),
                Wire::Openai => openai_events(
                    &model,
                    &text,
                    calls,
                    reply.usage,
                    call_number,
                    include_usage,
                ),
            };
            if reply.cut_after.is_some() {
                // Keep the start and the text deltas; drop what finishes the message.
                events.retain(|event| match wire {
                    Wire::Anthropic => {
                        event.starts_with("event: message_start")
                            || event.starts_with("event: content_block_start")
                            || event.contains("text_delta")
                    }
                    Wire::Openai => event.contains("\"content\""),
                });
            }
            let chunk_delay = reply.chunk_delay;
            let last = events.len();
            // The watch rides along with the body until its last event is sent.
            let watch = Arc::new(Mutex::new(Some(watch)));
            let stream = futures::stream::iter(events.into_iter().enumerate()).then(
                move |(index, event)| {
                    let watch = watch.clone();
                    async move {
                        if !chunk_delay.is_zero() {
                            tokio::time::sleep(chunk_delay).await;
                        }
                        if index + 1 == last
                            && let Some(watch) = watch.lock().expect("watch lock").take()
                        {
                            watch.finished();
                        }
                        Ok::<_, Infallible>(event)
                    }
                },
            );
            Response::builder()
                .status(200)
                .header("content-type", "text/event-stream")
                .header("cache-control", "no-cache")
                .body(Body::from_stream(stream))
                .expect("valid response")
        }
    }
}

fn plain(status: u16, text: &str) -> Response {
    Response::builder()
        .status(StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR))
        .body(Body::from(text.to_string()))
        .expect("valid response")
}

// Splits text into a few pieces so clients must concatenate deltas.
fn pieces(text: &str, count: usize) -> Vec<String> {
    let characters: Vec<char> = text.chars().collect();
    if characters.is_empty() {
        return Vec::new();
    }
    let size = characters.len().div_ceil(count).max(1);
    characters
        .chunks(size)
        .map(|chunk| chunk.iter().collect())
        .collect()
}

fn sse(event: &str, data: &Value) -> String {
    format!("event: {event}\ndata: {data}\n\n")
}

fn anthropic_events(
    model: &str,
    text: &str,
    calls: &[(String, Value)],
    usage: Usage,
    call_number: u64,
) -> Vec<String> {
    let mut events = vec![sse(
        "message_start",
        &json!({"type": "message_start", "message": {
            "id": format!("msg_{call_number}"), "type": "message", "role": "assistant", "model": model,
            "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": usage.input_tokens, "output_tokens": 1},
        }}),
    )];
    let mut index = 0;
    if !text.is_empty() {
        events.push(sse(
            "content_block_start",
            &json!({"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}}),
        ));
        events.push(sse("ping", &json!({"type": "ping"})));
        for piece in pieces(text, 3) {
            events.push(sse(
                "content_block_delta",
                &json!({"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": piece}}),
            ));
        }
        events.push(sse(
            "content_block_stop",
            &json!({"type": "content_block_stop", "index": index}),
        ));
        index += 1;
    }
    for (call_index, (name, input)) in calls.iter().enumerate() {
        events.push(sse(
            "content_block_start",
            &json!({"type": "content_block_start", "index": index, "content_block": {
                "type": "tool_use", "id": format!("toolu_{call_number}_{call_index}"), "name": name, "input": {},
            }}),
        ));
        for piece in pieces(&input.to_string(), 2) {
            events.push(sse(
                "content_block_delta",
                &json!({"type": "content_block_delta", "index": index, "delta": {"type": "input_json_delta", "partial_json": piece}}),
            ));
        }
        events.push(sse(
            "content_block_stop",
            &json!({"type": "content_block_stop", "index": index}),
        ));
        index += 1;
    }
    let stop_reason = if calls.is_empty() {
        "end_turn"
    } else {
        "tool_use"
    };
    events.push(sse(
        "message_delta",
        &json!({"type": "message_delta", "delta": {"stop_reason": stop_reason, "stop_sequence": null}, "usage": {"output_tokens": usage.output_tokens}}),
    ));
    events.push(sse("message_stop", &json!({"type": "message_stop"})));
    events
}

fn openai_events(
    model: &str,
    text: &str,
    calls: &[(String, Value)],
    usage: Usage,
    call_number: u64,
    include_usage: bool,
) -> Vec<String> {
    let id = format!("chatcmpl-{call_number}");
    let chunk = |delta: Value, finish_reason: Value| {
        let body = json!({
            "id": id, "object": "chat.completion.chunk", "created": 0, "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
        });
        format!("data: {body}\n\n")
    };
    let mut events = vec![chunk(
        json!({"role": "assistant", "content": ""}),
        Value::Null,
    )];
    for piece in pieces(text, 3) {
        events.push(chunk(json!({"content": piece}), Value::Null));
    }
    for (call_index, (name, input)) in calls.iter().enumerate() {
        events.push(chunk(
            json!({"tool_calls": [{"index": call_index, "id": format!("call_{call_number}_{call_index}"), "type": "function", "function": {"name": name, "arguments": ""}}]}),
            Value::Null,
        ));
        for piece in pieces(&input.to_string(), 2) {
            events.push(chunk(
                json!({"tool_calls": [{"index": call_index, "function": {"arguments": piece}}]}),
                Value::Null,
            ));
        }
    }
    let finish_reason = if calls.is_empty() {
        "stop"
    } else {
        "tool_calls"
    };
    events.push(chunk(json!({}), json!(finish_reason)));
    if include_usage {
        let body = json!({
            "id": id, "object": "chat.completion.chunk", "created": 0, "model": model, "choices": [],
            "usage": {"prompt_tokens": usage.input_tokens, "completion_tokens": usage.output_tokens,
                      "total_tokens": usage.input_tokens + usage.output_tokens},
        });
        events.push(format!("data: {body}\n\n"));
    }
    events.push("data: [DONE]\n\n".to_string());
    events
}

// Ollama's model list, shaped as its API documents it (name, model, size, digest, details).
async fn ollama_tags_handler(State(shared): State<Arc<Shared>>) -> axum::response::Response {
    let models: Vec<Value> = shared
        .models
        .lock()
        .expect("models lock")
        .iter()
        .map(|name| {
            serde_json::json!({
                "name": name,
                "model": name,
                "modified_at": "2026-11-01T00:00:00Z",
                "size": 2_019_393_189_u64,
                "digest": "a80c4f17acd55265feec403c7aef86be0c25983ab279d83f3bcd3abbcb5b8b72",
                "details": {"format": "gguf", "family": "llama", "parameter_size": "3.2B", "quantization_level": "Q4_K_M"}
            })
        })
        .collect();
    axum::response::IntoResponse::into_response(axum::Json(json!({"models": models})))
}

// OpenAI's model list (`object: list` of `object: model`).
async fn openai_models_handler(State(shared): State<Arc<Shared>>) -> axum::response::Response {
    let data: Vec<Value> = shared
        .models
        .lock()
        .expect("models lock")
        .iter()
        .map(|id| serde_json::json!({"id": id, "object": "model", "created": 1_762_000_000, "owned_by": "scripted"}))
        .collect();
    axum::response::IntoResponse::into_response(axum::Json(json!({"object": "list", "data": data})))
}
