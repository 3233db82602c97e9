//! A scripted Slack for tests: a real HTTP server on loopback serving the Web API
//! methods the channel calls (`auth.test`, `apps.connections.open`, `chat.postMessage`,
//! `conversations.open`, file downloads) with JSON or form bodies, bearer tokens checked
//! and `ok: false` error bodies as Slack documents them, plus the Socket Mode WebSocket
//! that `apps.connections.open` points at: it says `hello`, pushes scripted envelopes,
//! records acknowledgements, sends `disconnect` or drops the socket on cue, and delivers
//! every unacknowledged envelope again on the next connection with `retry_attempt`
//! counted up, as Slack does. Block Kit `blocks` are checked against Slack's limits and
//! recorded, and a test presses a posted button as a person would: an `interactive`
//! envelope with the `block_actions` payload Slack sends. Also builds Events API
//! requests signed the way Slack signs them.

use std::{
    collections::{HashMap, HashSet, VecDeque},
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::Duration,
};

use axum::{
    Json, Router,
    body::Bytes,
    extract::{
        Path, Query, State,
        ws::{Message, WebSocket, WebSocketUpgrade},
    },
    http::{HeaderMap, StatusCode, header},
    response::{IntoResponse, Response},
    routing::{get, post},
};
use hmac::{Hmac, Mac};
use serde_json::{Value, json};
use sha2::Sha256;
use tokio::sync::watch;

/// The bot user's member id `auth.test` answers with (how mentions name the bot).
pub const BOT_USER_ID: &str = "U0SAINTBOT";
/// The bot's id, which its own messages carry as `bot_id`.
pub const BOT_ID: &str = "B0SAINTBOT";
/// The workspace.
pub const TEAM_ID: &str = "T0ACME";
/// The Slack app.
pub const APP_ID: &str = "A0SAINT";

/// One request the server received.
#[derive(Clone, Debug)]
pub struct SlackRequest {
    /// The Web API method (`chat.postMessage`), or `GET <path>` for a file.
    pub method: String,
    /// The bearer token presented, if any.
    pub bearer: Option<String>,
    /// The body as JSON (a form body as an object of strings; `null` for none).
    pub body: Value,
    /// The request's content type.
    pub content_type: Option<String>,
}

/// A file `files.completeUploadExternal` shared.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SharedFile {
    /// Its id (`F…`).
    pub id: String,
    /// The `channel_id` it was shared in.
    pub channel: String,
    /// The thread it was shared in.
    pub thread_ts: Option<String>,
    /// The name given to `files.getUploadURLExternal`.
    pub file_name: String,
    /// The bytes posted to the upload URL.
    pub data: Vec<u8>,
}

/// A message `chat.postMessage` accepted.
#[derive(Clone, Debug)]
pub struct Posted {
    /// The `channel` it was posted to.
    pub channel: String,
    /// Its text.
    pub text: String,
    /// The thread it was posted in.
    pub thread_ts: Option<String>,
    /// The `ts` Slack gave it.
    pub ts: String,
    /// Its Block Kit `blocks`, if it had any (an approval request's buttons).
    pub blocks: Option<Value>,
}

impl Posted {
    /// The buttons of its `actions` blocks as (`action_id`, label, `value`).
    pub fn buttons(&self) -> Vec<(String, String, String)> {
        let Some(blocks) = self.blocks.as_ref().and_then(Value::as_array) else {
            return Vec::new();
        };
        blocks
            .iter()
            .filter(|block| block["type"] == "actions")
            .flat_map(|block| block["elements"].as_array().cloned().unwrap_or_default())
            .filter(|element| element["type"] == "button")
            .map(|button| {
                let text = |value: &Value| value.as_str().unwrap_or_default().to_string();
                (
                    text(&button["action_id"]),
                    text(&button["text"]["text"]),
                    text(&button["value"]),
                )
            })
            .collect()
    }
}

/// A scripted failure of a Web API call.
#[derive(Clone, Debug)]
pub struct Failure {
    status: u16,
    error: String,
    retry_after: Option<u64>,
}

impl Failure {
    /// HTTP 429 with `Retry-After`, as Slack rate-limits a method.
    pub fn rate_limited(retry_after_seconds: u64) -> Self {
        Self {
            status: 429,
            error: "ratelimited".to_string(),
            retry_after: Some(retry_after_seconds),
        }
    }

    /// HTTP 200 with `{"ok": false, "error": code}` (`channel_not_found`,
    /// `token_revoked`, …).
    pub fn error(code: &str) -> Self {
        Self {
            status: 200,
            error: code.to_string(),
            retry_after: None,
        }
    }

    /// HTTP 503, as when Slack is having trouble.
    pub fn server_error() -> Self {
        Self {
            status: 503,
            error: "service_unavailable".to_string(),
            retry_after: None,
        }
    }

    fn response(&self) -> Response {
        let mut response = (
            StatusCode::from_u16(self.status).expect("scripted statuses are valid"),
            Json(json!({"ok": false, "error": self.error})),
        )
            .into_response();
        if let Some(seconds) = self.retry_after {
            response.headers_mut().insert(
                header::RETRY_AFTER,
                seconds.to_string().parse().expect("digits"),
            );
        }
        response
    }
}

struct ScriptedEnvelope {
    id: String,
    payload: Value,
    deliveries: u64,
    acked: bool,
}

#[derive(Default)]
struct Script {
    requests: Vec<SlackRequest>,
    failures: HashMap<String, VecDeque<Failure>>,
    posted: Vec<Posted>,
    files: HashMap<String, Vec<u8>>,
    /// Uploads asked for by `files.getUploadURLExternal`: file id → (name, length,
    /// the bytes once posted to the upload URL).
    uploads: HashMap<String, (String, u64, Option<Vec<u8>>)>,
    /// Files shared by `files.completeUploadExternal`, in order.
    shared_files: Vec<SharedFile>,
    envelopes: Vec<ScriptedEnvelope>,
    acks: Vec<String>,
    tickets: HashSet<String>,
    issued: u64,
    connections: u64,
    open_sockets: u64,
    disconnects: (u64, String),
    drops: u64,
    next_envelope: u64,
}

#[derive(Clone)]
struct Shared {
    script: Arc<Mutex<Script>>,
    changed: watch::Sender<u64>,
    bot_token: Arc<Mutex<String>>,
    app_token: String,
    base: String,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Script> {
        self.script.lock().expect("script lock")
    }

    fn bump(&self) {
        self.changed.send_modify(|version| *version += 1);
    }
}

/// The server; stops when dropped.
pub struct ScriptedSlack {
    shared: Shared,
    address: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ScriptedSlack {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ScriptedSlack {
    /// Starts on a free loopback port, accepting `bot_token` for the Web API and
    /// `app_token` for `apps.connections.open`.
    pub async fn start(bot_token: &str, app_token: &str) -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let address = listener.local_addr()?;
        let shared = Shared {
            script: Arc::default(),
            changed: watch::Sender::new(0),
            bot_token: Arc::new(Mutex::new(bot_token.to_string())),
            app_token: app_token.to_string(),
            base: format!("http://{address}"),
        };
        let router = Router::new()
            .route("/api/{method}", post(api))
            .route("/files/{id}/download/{name}", get(download))
            .route("/upload/{id}", post(upload))
            .route("/link/", get(link))
            .with_state(shared.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, router).await;
        });
        Ok(Self {
            shared,
            address,
            task,
        })
    }

    /// The base URL to put in `settings.apiBaseUrl`.
    pub fn api_url(&self) -> String {
        format!("http://{}/api", self.address)
    }

    /// Pushes `event` (a `message`, an `app_mention`) in an `events_api` envelope to the
    /// sockets, now and on every connection until it is acknowledged; returns the
    /// envelope id.
    pub fn push_event(&self, event: Value) -> String {
        self.push_payload("events_api", event_callback(event))
    }

    /// Pushes an envelope of `kind` (`events_api`, `slash_commands`, …) with `payload`.
    pub fn push_payload(&self, kind: &str, payload: Value) -> String {
        let id = {
            let mut script = self.shared.lock();
            script.next_envelope += 1;
            let id = format!(
                "{:08x}-57ac-4e1d-9a3b-{:012x}",
                script.next_envelope, script.next_envelope
            );
            script.envelopes.push(ScriptedEnvelope {
                id: id.clone(),
                payload: json!({"kind": kind, "payload": payload}),
                deliveries: 0,
                acked: false,
            });
            id
        };
        self.shared.bump();
        id
    }

    /// `user` presses the button `action_id` of the posted message `ts`, as Slack
    /// delivers it: an `interactive` envelope with a `block_actions` payload naming the
    /// presser, the button's own `value` and the message's container; returns the
    /// envelope id. Panics when the message has no such button.
    pub fn press(&self, ts: &str, user: &str, action_id: &str) -> String {
        let posted = self
            .posted()
            .into_iter()
            .find(|posted| posted.ts == ts)
            .unwrap_or_else(|| panic!("no message {ts} was posted"));
        let (_, _, value) = posted
            .buttons()
            .into_iter()
            .find(|(id, _, _)| id == action_id)
            .unwrap_or_else(|| panic!("message {ts} has no button {action_id}: {posted:?}"));
        self.push_payload(
            "interactive",
            block_actions(&posted.channel, ts, user, action_id, &value),
        )
    }

    /// Sends `{"type": "disconnect", "reason": reason}` on the open sockets.
    pub fn disconnect(&self, reason: &str) {
        {
            let mut script = self.shared.lock();
            script.disconnects = (script.disconnects.0 + 1, reason.to_string());
        }
        self.shared.bump();
    }

    /// Drops the open sockets without a close frame (a network failure).
    pub fn drop_sockets(&self) {
        self.shared.lock().drops += 1;
        self.shared.bump();
    }

    /// Answers the next calls of `method` with `failures`, in order.
    pub fn fail_next(&self, method: &str, failures: impl IntoIterator<Item = Failure>) {
        self.shared
            .lock()
            .failures
            .entry(method.to_string())
            .or_default()
            .extend(failures);
    }

    /// Accepts only `token` as the bot token from now on (a revoked token).
    pub fn set_bot_token(&self, token: &str) {
        *self.shared.bot_token.lock().expect("token lock") = token.to_string();
    }

    /// Serves `data` as a file; returns the file object an event carries for it.
    pub fn add_file(&self, name: &str, mime_type: &str, data: Vec<u8>) -> Value {
        let mut script = self.shared.lock();
        let id = format!("F0{:06}", script.files.len() + 1);
        let size = data.len();
        script.files.insert(id.clone(), data);
        json!({
            "id": id, "name": name, "title": name, "mimetype": mime_type,
            "filetype": name.rsplit('.').next().unwrap_or("bin"), "size": size,
            "mode": "hosted", "is_external": false,
            "url_private": format!("{}/files/{id}/{name}", self.shared.base),
            "url_private_download": format!("{}/files/{id}/download/{name}", self.shared.base),
        })
    }

    /// Every Web API and file request so far.
    pub fn requests(&self) -> Vec<SlackRequest> {
        self.shared.lock().requests.clone()
    }

    /// Messages `chat.postMessage` accepted, in order.
    pub fn posted(&self) -> Vec<Posted> {
        self.shared.lock().posted.clone()
    }

    /// Files shared by `files.completeUploadExternal`, in order.
    pub fn shared_files(&self) -> Vec<SharedFile> {
        self.shared.lock().shared_files.clone()
    }

    /// Waits until `count` files were shared, or `timeout` passed; whether they were.
    pub async fn wait_for_shared_files(&self, count: usize, timeout: Duration) -> bool {
        self.wait_until(timeout, |script| script.shared_files.len() >= count)
            .await
    }

    /// Envelope ids acknowledged, in order (a redelivery acknowledged again repeats).
    pub fn acks(&self) -> Vec<String> {
        self.shared.lock().acks.clone()
    }

    /// Whether envelope `id` was acknowledged.
    pub fn acked(&self, id: &str) -> bool {
        self.shared.lock().acks.iter().any(|ack| ack == id)
    }

    /// How many times envelope `id` was sent (first delivery and redeliveries).
    pub fn deliveries(&self, id: &str) -> u64 {
        self.shared
            .lock()
            .envelopes
            .iter()
            .find(|envelope| envelope.id == id)
            .map_or(0, |envelope| envelope.deliveries)
    }

    /// Socket connections accepted so far.
    pub fn connections(&self) -> u64 {
        self.shared.lock().connections
    }

    /// Waits until `count` messages were posted in all, or `timeout` passed; returns
    /// whether they were.
    pub async fn wait_for_posted(&self, count: usize, timeout: Duration) -> bool {
        self.wait_until(timeout, |script| script.posted.len() >= count)
            .await
    }

    /// Waits until envelope `id` is acknowledged.
    pub async fn wait_for_ack(&self, id: &str, timeout: Duration) -> bool {
        self.wait_until(timeout, |script| script.acks.iter().any(|ack| ack == id))
            .await
    }

    /// Waits until `count` socket connections were made in all.
    pub async fn wait_for_connections(&self, count: u64, timeout: Duration) -> bool {
        self.wait_until(timeout, |script| script.connections >= count)
            .await
    }

    /// Waits until envelope `id` was sent `count` times in all.
    pub async fn wait_for_deliveries(&self, id: &str, count: u64, timeout: Duration) -> bool {
        self.wait_until(timeout, |script| {
            script
                .envelopes
                .iter()
                .any(|envelope| envelope.id == id && envelope.deliveries >= count)
        })
        .await
    }

    async fn wait_until(&self, timeout: Duration, done: impl Fn(&Script) -> bool) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut changes = self.shared.changed.subscribe();
        loop {
            changes.mark_unchanged();
            if done(&self.shared.lock()) {
                return true;
            }
            if tokio::time::timeout_at(deadline, changes.changed())
                .await
                .is_err()
            {
                return done(&self.shared.lock());
            }
        }
    }
}

fn bearer(headers: &HeaderMap) -> Option<String> {
    headers
        .get(header::AUTHORIZATION)?
        .to_str()
        .ok()?
        .strip_prefix("Bearer ")
        .map(str::to_string)
}

// JSON or form bodies, as the Web API takes both.
fn read_body(content_type: Option<&str>, body: &[u8]) -> Value {
    if body.is_empty() {
        return Value::Null;
    }
    if content_type.is_some_and(|content_type| content_type.starts_with("application/json")) {
        return serde_json::from_slice(body).unwrap_or(Value::Null);
    }
    let text = String::from_utf8_lossy(body);
    let pairs = reqwest::Url::parse(&format!("http://form/?{text}"))
        .map(|url| {
            url.query_pairs()
                .map(|(key, value)| (key.into_owned(), Value::String(value.into_owned())))
                .collect::<serde_json::Map<_, _>>()
        })
        .unwrap_or_default();
    Value::Object(pairs)
}

fn ok_false(error: &str) -> Response {
    Json(json!({"ok": false, "error": error})).into_response()
}

async fn api(
    State(shared): State<Shared>,
    Path(method): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .map(str::to_string);
    let parsed = read_body(content_type.as_deref(), &body);
    let token = bearer(&headers);
    let bot_token = shared.bot_token.lock().expect("token lock").clone();
    let mut script = shared.lock();
    script.requests.push(SlackRequest {
        method: method.clone(),
        bearer: token.clone(),
        body: parsed.clone(),
        content_type,
    });
    drop(script);
    shared.bump();
    let wants_app_token = method == "apps.connections.open";
    match token.as_deref() {
        None => return ok_false("not_authed"),
        Some(token) if wants_app_token && token == bot_token => {
            return ok_false("not_allowed_token_type");
        }
        Some(token) if !wants_app_token && token == shared.app_token => {
            return ok_false("not_allowed_token_type");
        }
        Some(token) if wants_app_token && token != shared.app_token => {
            return ok_false("invalid_auth");
        }
        Some(token) if !wants_app_token && token != bot_token => return ok_false("invalid_auth"),
        Some(_) => {}
    }
    let mut script = shared.lock();
    if let Some(failure) = script
        .failures
        .get_mut(&method)
        .and_then(VecDeque::pop_front)
    {
        return failure.response();
    }
    match method.as_str() {
        "auth.test" => Json(json!({
            "ok": true, "url": "https://acme.slack.com/", "team": "Acme", "user": "saint",
            "team_id": TEAM_ID, "user_id": BOT_USER_ID, "bot_id": BOT_ID,
            "is_enterprise_install": false,
        }))
        .into_response(),
        "apps.connections.open" => {
            script.issued += 1;
            let ticket = format!("ticket-{:04}", script.issued);
            script.tickets.insert(ticket.clone());
            let url = format!(
                "ws://{}/link/?ticket={ticket}&app_id={APP_ID}",
                shared.base.trim_start_matches("http://")
            );
            Json(json!({"ok": true, "url": url})).into_response()
        }
        "conversations.open" => {
            let users = parsed["users"].as_str().unwrap_or_default();
            if users.is_empty() || users.contains(',') {
                return ok_false(if users.is_empty() {
                    "users_list_not_supplied"
                } else {
                    "not_enough_users"
                });
            }
            if !users.starts_with('U') && !users.starts_with('W') {
                return ok_false("user_not_found");
            }
            Json(json!({"ok": true, "channel": {"id": format!("D{}", &users[1..])}}))
                .into_response()
        }
        "chat.postMessage" => {
            let channel = parsed["channel"].as_str().unwrap_or_default().to_string();
            let text = parsed["text"].as_str().unwrap_or_default().to_string();
            if channel.is_empty() {
                return ok_false("channel_not_found");
            }
            if text.trim().is_empty() {
                return ok_false("no_text");
            }
            if text.chars().count() > 40_000 {
                return ok_false("msg_too_long");
            }
            let blocks = match &parsed["blocks"] {
                Value::Null => None,
                blocks => match check_blocks(blocks) {
                    Ok(()) => Some(blocks.clone()),
                    Err(reason) => {
                        tracing::debug!(%reason, "scripted slack: invalid blocks");
                        return ok_false("invalid_blocks");
                    }
                },
            };
            let ts = format!("1700009000.{:06}", script.posted.len() + 1);
            let thread_ts = parsed["thread_ts"].as_str().map(str::to_string);
            script.posted.push(Posted {
                channel: channel.clone(),
                text: text.clone(),
                thread_ts: thread_ts.clone(),
                ts: ts.clone(),
                blocks,
            });
            drop(script);
            shared.bump();
            let mut message = json!({"type": "message", "subtype": "bot_message", "text": text,
                "ts": ts, "bot_id": BOT_ID, "user": BOT_USER_ID});
            if let Some(thread_ts) = thread_ts {
                message["thread_ts"] = json!(thread_ts);
            }
            Json(json!({"ok": true, "channel": channel, "ts": ts, "message": message}))
                .into_response()
        }
        "files.getUploadURLExternal" => {
            let file_name = parsed["filename"].as_str().unwrap_or_default().to_string();
            let length = match &parsed["length"] {
                Value::String(length) => length.parse::<u64>().ok(),
                Value::Number(length) => length.as_u64(),
                _ => None,
            };
            let Some(length) = length.filter(|length| *length > 0) else {
                return ok_false("invalid_arguments");
            };
            if file_name.is_empty() {
                return ok_false("invalid_arguments");
            }
            let id = format!("F0TTS{:05}", script.uploads.len() + 1);
            script.uploads.insert(id.clone(), (file_name, length, None));
            Json(
                json!({"ok": true, "upload_url": format!("{}/upload/{id}", shared.base),
                        "file_id": id}),
            )
            .into_response()
        }
        "files.completeUploadExternal" => {
            let files = match &parsed["files"] {
                Value::String(text) => serde_json::from_str(text).unwrap_or(Value::Null),
                files => files.clone(),
            };
            let channel = parsed["channel_id"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let Some(files) = files.as_array().filter(|files| !files.is_empty()) else {
                return ok_false("invalid_arguments");
            };
            let mut shared_now = Vec::new();
            for file in files {
                let id = file["id"].as_str().unwrap_or_default();
                match script.uploads.get(id) {
                    Some((name, _, Some(data))) => shared_now.push(SharedFile {
                        id: id.to_string(),
                        channel: channel.clone(),
                        thread_ts: parsed["thread_ts"].as_str().map(str::to_string),
                        file_name: name.clone(),
                        data: data.clone(),
                    }),
                    // Completed before its bytes arrived, or never asked for.
                    _ => return ok_false("file_not_found"),
                }
            }
            let answer: Vec<Value> = shared_now
                .iter()
                .map(|file| json!({"id": file.id, "title": file.file_name}))
                .collect();
            script.shared_files.extend(shared_now);
            drop(script);
            shared.bump();
            Json(json!({"ok": true, "files": answer})).into_response()
        }
        _ => ok_false("unknown_method"),
    }
}

/// The upload URL `files.getUploadURLExternal` gave: takes the bytes (raw, or a
/// multipart form's file), exactly the length announced.
async fn upload(
    State(shared): State<Shared>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let data = if content_type.starts_with("multipart/form-data") {
        let form = crate::form_parameters(&content_type, &body);
        form.as_object()
            .and_then(|fields| fields.values().find_map(crate::file_bytes))
            .unwrap_or_default()
    } else {
        body.to_vec()
    };
    let mut script = shared.lock();
    script.requests.push(SlackRequest {
        method: format!("POST /upload/{id}"),
        bearer: bearer(&headers),
        body: json!({"size": data.len()}),
        content_type: Some(content_type),
    });
    let answer = match script.uploads.get_mut(&id) {
        Some((_, length, stored)) if *length == data.len() as u64 => {
            *stored = Some(data);
            (StatusCode::OK, format!("OK - {length}")).into_response()
        }
        Some(_) => (StatusCode::BAD_REQUEST, "length mismatch").into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    };
    drop(script);
    shared.bump();
    answer
}

async fn download(
    State(shared): State<Shared>,
    Path((id, name)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    let token = bearer(&headers);
    let bot_token = shared.bot_token.lock().expect("token lock").clone();
    let mut script = shared.lock();
    script.requests.push(SlackRequest {
        method: format!("GET /files/{id}/download/{name}"),
        bearer: token.clone(),
        body: Value::Null,
        content_type: None,
    });
    if token.as_deref() != Some(bot_token.as_str()) {
        return StatusCode::FORBIDDEN.into_response();
    }
    match script.files.get(&id) {
        Some(data) => data.clone().into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

async fn link(
    State(shared): State<Shared>,
    Query(query): Query<HashMap<String, String>>,
    upgrade: WebSocketUpgrade,
) -> Response {
    let ticket = query.get("ticket").cloned().unwrap_or_default();
    // Each URL from apps.connections.open is good for one connection.
    if !shared.lock().tickets.remove(&ticket) {
        return (StatusCode::UNAUTHORIZED, "unknown or used ticket").into_response();
    }
    upgrade.on_upgrade(move |socket| serve_socket(socket, shared))
}

async fn serve_socket(mut socket: WebSocket, shared: Shared) {
    let (number, mut disconnects_seen, drops_seen) = {
        let mut script = shared.lock();
        script.connections += 1;
        script.open_sockets += 1;
        (script.connections, script.disconnects.0, script.drops)
    };
    shared.bump();
    let mut changes = shared.changed.subscribe();
    let hello = json!({"type": "hello", "num_connections": 1,
        "debug_info": {"host": "applink-scripted", "build_number": 1, "approximate_connection_time": 18060},
        "connection_info": {"app_id": APP_ID}});
    let mut sent_here = HashSet::new();
    if socket
        .send(Message::Text(hello.to_string().into()))
        .await
        .is_ok()
    {
        loop {
            changes.mark_unchanged();
            let (frames, dropped, disconnect) = {
                let mut script = shared.lock();
                let mut frames = Vec::new();
                for envelope in &mut script.envelopes {
                    if envelope.acked || !sent_here.insert(envelope.id.clone()) {
                        continue;
                    }
                    let retry = envelope.deliveries;
                    envelope.deliveries += 1;
                    frames.push(json!({
                        "envelope_id": envelope.id,
                        "payload": envelope.payload["payload"],
                        "type": envelope.payload["kind"],
                        "accepts_response_payload": false,
                        "retry_attempt": retry,
                        "retry_reason": if retry > 0 { "timeout" } else { "" },
                    }));
                }
                let disconnect =
                    (script.disconnects.0 > disconnects_seen).then(|| script.disconnects.1.clone());
                disconnects_seen = script.disconnects.0;
                (frames, script.drops > drops_seen, disconnect)
            };
            if dropped {
                break;
            }
            if !frames.is_empty() {
                shared.bump();
            }
            let mut failed = false;
            for frame in frames {
                failed |= socket
                    .send(Message::Text(frame.to_string().into()))
                    .await
                    .is_err();
            }
            if let Some(reason) = disconnect {
                let frame = json!({"type": "disconnect", "reason": reason,
                    "debug_info": {"host": "applink-scripted"}});
                failed |= socket
                    .send(Message::Text(frame.to_string().into()))
                    .await
                    .is_err();
            }
            if failed {
                break;
            }
            tokio::select! {
                incoming = socket.recv() => match incoming {
                    Some(Ok(Message::Text(text))) => {
                        let Ok(ack) = serde_json::from_str::<Value>(&text) else { continue };
                        if let Some(id) = ack["envelope_id"].as_str() {
                            let mut script = shared.lock();
                            script.acks.push(id.to_string());
                            if let Some(envelope) = script.envelopes.iter_mut().find(|envelope| envelope.id == id) {
                                envelope.acked = true;
                            }
                            drop(script);
                            shared.bump();
                        }
                    }
                    Some(Ok(Message::Close(_)) | Err(_)) | None => break,
                    Some(Ok(_)) => {}
                },
                _ = changes.changed() => {}
            }
        }
    }
    tracing::debug!(connection = number, "scripted slack: socket closed");
    shared.lock().open_sockets -= 1;
    shared.bump();
}

/// An `event_callback` payload around `event`, as Slack wraps every event.
pub fn event_callback(event: Value) -> Value {
    let event_time = jiff::Timestamp::now().as_second();
    let event_id = format!(
        "Ev0{}",
        hex::encode(<Sha256 as sha2::Digest>::digest(
            event.to_string().as_bytes()
        ))[..8]
            .to_uppercase()
    );
    json!({
        "token": "XXYYZZ", "team_id": TEAM_ID, "api_app_id": APP_ID,
        "event": event, "type": "event_callback", "event_id": event_id, "event_time": event_time,
        "authorizations": [{"enterprise_id": null, "team_id": TEAM_ID, "user_id": BOT_USER_ID,
                            "is_bot": true, "is_enterprise_install": false}],
        "is_ext_shared_channel": false, "event_context": "4-eyJldCI6Im1lc3NhZ2UifQ",
    })
}

/// A `message` event: `channel_type` is `im` for a direct message, `channel`, `group`
/// or `mpim` in a conversation.
pub fn message_event(channel: &str, channel_type: &str, user: &str, ts: &str, text: &str) -> Value {
    json!({"type": "message", "channel": channel, "channel_type": channel_type, "user": user,
           "text": text, "ts": ts, "event_ts": ts, "team": TEAM_ID,
           "blocks": [{"type": "rich_text", "block_id": "b1", "elements": []}]})
}

/// The `block_actions` payload Slack sends when `user` presses button `action_id`
/// (carrying `value`) of message `message_ts` in `channel`.
pub fn block_actions(
    channel: &str,
    message_ts: &str,
    user: &str,
    action_id: &str,
    value: &str,
) -> Value {
    let action_ts = format!(
        "{}.{:06}",
        jiff::Timestamp::now().as_second(),
        jiff::Timestamp::now().subsec_microsecond()
    );
    json!({
        "type": "block_actions",
        "user": {"id": user, "username": user.to_lowercase(), "name": user.to_lowercase(),
                 "team_id": TEAM_ID},
        "api_app_id": APP_ID, "token": "XXYYZZ",
        "container": {"type": "message", "message_ts": message_ts, "channel_id": channel,
                      "is_ephemeral": false},
        "trigger_id": format!("{}.{}", jiff::Timestamp::now().as_millisecond(), "98765"),
        "team": {"id": TEAM_ID, "domain": "acme"},
        "enterprise": null, "is_enterprise_install": false,
        "channel": {"id": channel, "name": "directmessage"},
        "message": {"type": "message", "ts": message_ts, "bot_id": BOT_ID, "user": BOT_USER_ID},
        "state": {"values": {}},
        "response_url": format!("https://hooks.slack.com/actions/{TEAM_ID}/1/scripted"),
        "actions": [{"type": "button", "action_id": action_id, "block_id": "scripted",
                     "text": {"type": "plain_text", "text": action_id, "emoji": true},
                     "value": value, "action_ts": action_ts}],
    })
}

/// Checks `blocks` against the Block Kit limits Slack enforces on the blocks the bot
/// sends (`section` text at most 3,000 characters; a button's `action_id` at most 255,
/// its label at most 75, its `value` at most 2,000; at most 25 elements an `actions`).
fn check_blocks(blocks: &Value) -> Result<(), String> {
    let blocks = blocks.as_array().ok_or("blocks is not an array")?;
    if blocks.is_empty() || blocks.len() > 50 {
        return Err(format!("{} blocks (1 to 50)", blocks.len()));
    }
    let length = |value: &Value| value.as_str().map(|text| text.chars().count());
    for block in blocks {
        match block["type"].as_str() {
            Some("section") => match length(&block["text"]["text"]) {
                Some(1..=3_000) => {}
                other => return Err(format!("section text of {other:?} characters")),
            },
            Some("actions") => {
                let elements = block["elements"]
                    .as_array()
                    .ok_or("actions without elements")?;
                if elements.is_empty() || elements.len() > 25 {
                    return Err(format!("actions of {} elements", elements.len()));
                }
                for element in elements {
                    if element["type"] != "button" {
                        continue;
                    }
                    let fits = |value: &Value, limit: usize| {
                        length(value).is_some_and(|count| (1..=limit).contains(&count))
                    };
                    if !fits(&element["action_id"], 255)
                        || !fits(&element["text"]["text"], 75)
                        || element["text"]["type"] != "plain_text"
                        || !(element["value"].is_null() || fits(&element["value"], 2_000))
                    {
                        return Err(format!("button {element} breaks a limit"));
                    }
                }
            }
            Some(_) => {}
            None => return Err("a block without a type".to_string()),
        }
    }
    Ok(())
}

/// An `app_mention` event (it carries no `channel_type`).
pub fn app_mention_event(channel: &str, user: &str, ts: &str, text: &str) -> Value {
    json!({"type": "app_mention", "channel": channel, "user": user, "text": text, "ts": ts,
           "event_ts": ts, "team": TEAM_ID})
}

/// The `X-Slack-Signature` Slack sends for `body` at `timestamp` (Unix seconds).
pub fn signature(signing_secret: &str, timestamp: i64, body: &[u8]) -> String {
    let mut mac =
        Hmac::<Sha256>::new_from_slice(signing_secret.as_bytes()).expect("any key length");
    mac.update(format!("v0:{timestamp}:").as_bytes());
    mac.update(body);
    format!("v0={}", hex::encode(mac.finalize().into_bytes()))
}

/// The headers of an Events API request of `body`, signed at `timestamp`.
pub fn signed_headers(signing_secret: &str, timestamp: i64, body: &[u8]) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(
        header::CONTENT_TYPE,
        "application/json".parse().expect("valid"),
    );
    headers.insert(
        "x-slack-request-timestamp",
        timestamp.to_string().parse().expect("digits"),
    );
    headers.insert(
        "x-slack-signature",
        signature(signing_secret, timestamp, body)
            .parse()
            .expect("hex"),
    );
    headers
}
