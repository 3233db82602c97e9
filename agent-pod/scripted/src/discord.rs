//! A scripted Discord for tests: one loopback server with the REST API
//! (`/api/v10/gateway/bot`, channel messages, DM channels — the `Bot` token checked,
//! Discord's error bodies and rate-limit headers) and a Gateway WebSocket that speaks
//! the opcodes as Discord documents them: Hello, heartbeats and their ACKs, Identify
//! (token and intents checked: 4004, 4014), READY, dispatches with increasing
//! sequence numbers, Resume with a replay from a per-session event log, Reconnect,
//! Invalid Session, close codes. Create Message honours `nonce` with `enforce_nonce` as
//! Discord documents it: a second message with the same nonce within a few minutes
//! ([`NONCE_WINDOW`]) creates nothing and is answered with the first one. A test presses
//! a posted message's button (INTERACTION_CREATE), and the interaction's callback is
//! taken once. Every request
//! and frame is recorded; tests script drops, failures and answers that never come.

use std::{
    collections::{HashMap, VecDeque},
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use axum::{
    Json, Router,
    body::Bytes,
    extract::{
        Path, RawQuery, State,
        ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade},
    },
    http::{HeaderMap, HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
    routing::{get, post},
};
use serde_json::{Value, json};
use tokio::sync::{Notify, mpsc};

/// The scripted bot's own user id.
pub const BOT_USER_ID: &str = "1100000000000000001";
/// The scripted bot's user name.
pub const BOT_USERNAME: &str = "acme-assistant";
/// MESSAGE_CONTENT, the privileged intent the channel needs.
const MESSAGE_CONTENT: u64 = 1 << 15;
/// How long an enforced nonce is remembered ("the past few minutes", in Discord's words).
pub const NONCE_WINDOW: Duration = Duration::from_secs(5 * 60);

/// One REST request the server received.
#[derive(Clone, Debug)]
pub struct RestRequest {
    /// `GET` or `POST`.
    pub method: String,
    /// Path, `/api/v10` included.
    pub path: String,
    /// The `Authorization` header as sent.
    pub authorization: Option<String>,
    /// The JSON body (`null` for none).
    pub body: Value,
    /// The status answered.
    pub status: u16,
    /// When it arrived.
    pub at: Instant,
}

/// A message the REST API accepted.
#[derive(Clone, Debug, PartialEq)]
pub struct Posted {
    /// The channel it was posted in.
    pub channel_id: String,
    /// Its id.
    pub id: String,
    /// The body as sent (`content`, `message_reference`, `allowed_mentions`).
    pub body: Value,
}

impl Posted {
    /// The text.
    pub fn content(&self) -> &str {
        self.body["content"].as_str().unwrap_or_default()
    }
}

/// A scripted REST failure.
#[derive(Clone, Debug)]
pub struct Failure {
    status: u16,
    body: Value,
    retry_after: Option<f64>,
}

impl Failure {
    /// 429 with Discord's body and both header sets.
    pub fn rate_limited(retry_after_seconds: f64) -> Self {
        Self {
            status: 429,
            body: json!({"message": "You are being rate limited.", "retry_after": retry_after_seconds, "global": false}),
            retry_after: Some(retry_after_seconds),
        }
    }

    /// 403 Missing Access (code 50001).
    pub fn missing_access() -> Self {
        Self {
            status: 403,
            body: json!({"message": "Missing Access", "code": 50001}),
            retry_after: None,
        }
    }

    /// 404 Unknown Channel (code 10003).
    pub fn unknown_channel() -> Self {
        Self {
            status: 404,
            body: json!({"message": "Unknown Channel", "code": 10003}),
            retry_after: None,
        }
    }

    /// 502 from Discord's edge.
    pub fn server_error() -> Self {
        Self {
            status: 502,
            body: json!({"message": "502: Bad Gateway", "code": 0}),
            retry_after: None,
        }
    }

    fn unauthorized() -> Self {
        Self {
            status: 401,
            body: json!({"message": "401: Unauthorized", "code": 0}),
            retry_after: None,
        }
    }

    fn invalid_body(problem: &str) -> Self {
        Self::invalid_field("content", "BASE_TYPE_BAD_LENGTH", problem)
    }

    fn invalid_field(field: &str, code: &str, problem: &str) -> Self {
        Self {
            status: 400,
            body: json!({"message": "Invalid Form Body", "code": 50035,
                         "errors": {field: {"_errors": [{"code": code, "message": problem}]}}}),
            retry_after: None,
        }
    }

    fn response(&self, bucket: &str) -> Response {
        let mut response = (
            StatusCode::from_u16(self.status).expect("scripted statuses are valid"),
            Json(self.body.clone()),
        )
            .into_response();
        if let Some(seconds) = self.retry_after {
            let headers = response.headers_mut();
            headers.insert(
                header::RETRY_AFTER,
                header_value(&format!("{}", seconds.ceil() as u64)),
            );
            rate_limit_headers(headers, bucket, 0, seconds);
            headers.insert("x-ratelimit-scope", HeaderValue::from_static("user"));
        }
        response
    }
}

fn header_value(text: &str) -> HeaderValue {
    HeaderValue::from_str(text).expect("a valid header value")
}

fn rate_limit_headers(headers: &mut HeaderMap, bucket: &str, remaining: u32, reset_after: f64) {
    let reset = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64()
        + reset_after;
    headers.insert("x-ratelimit-limit", HeaderValue::from_static("5"));
    headers.insert(
        "x-ratelimit-remaining",
        header_value(&remaining.to_string()),
    );
    headers.insert("x-ratelimit-reset", header_value(&format!("{reset:.3}")));
    headers.insert(
        "x-ratelimit-reset-after",
        header_value(&format!("{reset_after:.3}")),
    );
    headers.insert("x-ratelimit-bucket", header_value(bucket));
}

/// What the Gateway saw, for assertions.
#[derive(Clone, Debug, Default)]
pub struct GatewayLog {
    /// WebSocket connections opened, with their query strings.
    pub connections: Vec<String>,
    /// Identify payloads (`d`).
    pub identifies: Vec<Value>,
    /// Resume payloads (`d`).
    pub resumes: Vec<Value>,
    /// Heartbeats: when, and the sequence number sent.
    pub heartbeats: Vec<(Instant, Value)>,
    /// Sessions started by an accepted Identify.
    pub sessions_started: usize,
    /// Close codes the server sent.
    pub closes_sent: Vec<u16>,
}

// A command for the live socket.
enum Command {
    Send(Value),
    Close(u16),
    Drop,
}

struct Session {
    id: String,
    /// Every dispatch of the session, as (sequence number, payload).
    events: Vec<(u64, Value)>,
}

struct Live {
    connection: usize,
    session: String,
    commands: mpsc::UnboundedSender<Command>,
}

struct Script {
    requests: Vec<RestRequest>,
    posted: Vec<Posted>,
    send_failures: VecDeque<Failure>,
    gateway_failures: VecDeque<Failure>,
    /// After the next successful send, the bucket is empty for this long.
    exhaust_bucket: Option<f64>,
    /// When the emptied bucket refills.
    bucket_empty_until: Option<Instant>,
    direct_channels: HashMap<String, String>,
    next_id: u64,
    /// Enforced nonces of the bot's messages: when each was first used, and the answer.
    nonces: HashMap<String, (Instant, Value)>,
    /// The next accepted send is made, and its answer never sent.
    withhold_next_answer: bool,
    gateway: GatewayLog,
    sessions: HashMap<String, Session>,
    /// The session new dispatches belong to (the last one identified).
    current: Option<String>,
    live: Option<Live>,
    acknowledge_heartbeats: bool,
    allowed_intents: u64,
    refuse_resumes: bool,
    /// Interactions dispatched and not yet answered: id → token.
    open_interactions: HashMap<String, String>,
}

#[derive(Clone)]
struct Shared {
    script: Arc<Mutex<Script>>,
    changed: Arc<Notify>,
    token: Arc<Mutex<String>>,
    gateway_url: String,
    heartbeat_interval: Duration,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Script> {
        self.script.lock().expect("script lock")
    }
}

/// The server; stops when dropped.
pub struct ScriptedDiscord {
    shared: Shared,
    address: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ScriptedDiscord {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ScriptedDiscord {
    /// Starts on a free loopback port, accepting `bot_token`, with Hello announcing
    /// `heartbeat_interval`.
    pub async fn start(bot_token: &str, heartbeat_interval: Duration) -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let address = listener.local_addr()?;
        let shared = Shared {
            script: Arc::new(Mutex::new(Script {
                requests: Vec::new(),
                posted: Vec::new(),
                send_failures: VecDeque::new(),
                gateway_failures: VecDeque::new(),
                exhaust_bucket: None,
                bucket_empty_until: None,
                direct_channels: HashMap::new(),
                next_id: 1_300_000_000_000_000_000,
                nonces: HashMap::new(),
                withhold_next_answer: false,
                gateway: GatewayLog::default(),
                sessions: HashMap::new(),
                current: None,
                live: None,
                acknowledge_heartbeats: true,
                allowed_intents: u64::MAX,
                refuse_resumes: false,
                open_interactions: HashMap::new(),
            })),
            changed: Arc::default(),
            token: Arc::new(Mutex::new(bot_token.to_string())),
            gateway_url: format!("ws://{address}/gateway"),
            heartbeat_interval,
        };
        let router = Router::new()
            .route("/api/v10/gateway/bot", get(gateway_bot))
            .route("/api/v10/channels/{channel}/messages", post(create_message))
            .route("/api/v10/users/@me/channels", post(create_dm))
            .route(
                "/api/v10/interactions/{id}/{token}/callback",
                post(interaction_callback),
            )
            .route("/gateway", get(gateway))
            .route("/cdn/{name}", get(cdn))
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

    /// The base URL for `settings.apiBaseUrl`.
    pub fn api_base_url(&self) -> String {
        format!("http://{}/api/v10", self.address)
    }

    /// A URL on the scripted CDN (it serves `size` bytes of `x` for any name).
    pub fn cdn_url(&self, name: &str, size: usize) -> String {
        format!("http://{}/cdn/{name}?size={size}", self.address)
    }

    /// Accepts only `token` from now on.
    pub fn set_token(&self, token: &str) {
        *self.shared.token.lock().expect("token lock") = token.to_string();
    }

    /// Whether heartbeats are acknowledged (off: the connection looks dead to the bot).
    pub fn acknowledge_heartbeats(&self, acknowledge: bool) {
        self.lock().acknowledge_heartbeats = acknowledge;
    }

    /// Turns the Message Content intent off for the bot, as in the Developer Portal:
    /// an Identify asking for it is closed with 4014.
    pub fn disable_message_content_intent(&self) {
        self.lock().allowed_intents = !MESSAGE_CONTENT;
    }

    /// Whether Resume is refused (with Invalid Session, `d: false`).
    pub fn refuse_resumes(&self, refuse: bool) {
        self.lock().refuse_resumes = refuse;
    }

    /// Answers the next sends with `failures`, in order, before succeeding again.
    pub fn fail_next_sends(&self, failures: impl IntoIterator<Item = Failure>) {
        self.lock().send_failures.extend(failures);
    }

    /// Answers the next `GET /gateway/bot` calls with `failures`, in order. A 429 there
    /// comes as a global limit: `Retry-After` and `retry_after`, no bucket headers.
    pub fn fail_next_gateway_requests(&self, failures: impl IntoIterator<Item = Failure>) {
        self.lock().gateway_failures.extend(failures);
    }

    /// Makes the next accepted send's message but never answers the request, as if the
    /// bot died between Discord taking the message and the bot reading the answer.
    pub fn withhold_next_answer(&self) {
        self.lock().withhold_next_answer = true;
    }

    /// The next successful send answers `X-RateLimit-Remaining: 0` with a reset after
    /// `seconds`; a send before then is answered 429, as Discord does.
    pub fn exhaust_bucket_after_next_send(&self, seconds: f64) {
        self.lock().exhaust_bucket = Some(seconds);
    }

    /// Dispatches MESSAGE_CREATE with `message` on the current session (kept in its
    /// log for a resume when no socket is connected); returns its sequence number.
    pub fn dispatch_message(&self, message: Value) -> Option<u64> {
        self.dispatch("MESSAGE_CREATE", message)
    }

    /// Dispatches event `name` with `data` on the current session.
    pub fn dispatch(&self, name: &str, data: Value) -> Option<u64> {
        let mut script = self.lock();
        let current = script.current.clone()?;
        let seq = {
            let session = script.sessions.get_mut(&current)?;
            let seq = session.events.last().map_or(1, |(seq, _)| seq + 1);
            let payload = json!({"op": 0, "s": seq, "t": name, "d": data});
            session.events.push((seq, payload));
            seq
        };
        if let Some(live) = script.live.as_ref().filter(|live| live.session == current) {
            let payload = script.sessions[&current]
                .events
                .last()
                .map(|(_, payload)| payload.clone());
            let _ = live
                .commands
                .send(Command::Send(payload.expect("just pushed")));
        }
        Some(seq)
    }

    /// `user_id` presses the button `custom_id` under `posted`, as Discord delivers it: an
    /// INTERACTION_CREATE of type 3 (MESSAGE_COMPONENT) in the message's channel, the
    /// presser as `user` (a DM); returns the interaction id. Pressing a button the
    /// message does not have is a forged press: test one with
    /// [`ScriptedDiscord::press_any`].
    pub fn press(&self, posted: &Posted, user_id: &str, custom_id: &str) -> String {
        let has_button = posted.body["components"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|row| row["components"].as_array().cloned().unwrap_or_default())
            .any(|button| button["custom_id"] == custom_id);
        assert!(has_button, "no button {custom_id:?} under {posted:?}");
        self.press_any(posted, user_id, custom_id)
    }

    /// A press of `custom_id` under `posted` by `user_id`, whatever its buttons are.
    pub fn press_any(&self, posted: &Posted, user_id: &str, custom_id: &str) -> String {
        let (id, token) = {
            let mut script = self.lock();
            script.next_id += 1;
            let id = script.next_id.to_string();
            let token = format!("aW50ZXJhY3Rpb246{id}");
            script.open_interactions.insert(id.clone(), token.clone());
            (id, token)
        };
        self.dispatch(
            "INTERACTION_CREATE",
            json!({
                "id": id, "application_id": BOT_USER_ID, "type": 3, "token": token, "version": 1,
                "channel_id": posted.channel_id,
                "channel": {"id": posted.channel_id, "type": 1},
                "user": {"id": user_id, "username": format!("user{user_id}"), "global_name": null,
                         "discriminator": "0", "avatar": null},
                "data": {"custom_id": custom_id, "component_type": 2},
                "message": {"id": posted.id, "channel_id": posted.channel_id,
                            "content": posted.body["content"],
                            "components": posted.body["components"],
                            "author": {"id": BOT_USER_ID, "username": BOT_USERNAME, "bot": true}},
                "locale": "en-US", "entitlements": [],
            }),
        );
        id
    }

    /// Drops the live socket without a close frame (a network failure).
    pub fn drop_connection(&self) {
        self.command(Command::Drop);
    }

    /// Sends op 7 Reconnect.
    pub fn send_reconnect(&self) {
        self.command(Command::Send(json!({"op": 7, "d": null})));
    }

    /// Sends op 9 Invalid Session.
    pub fn send_invalid_session(&self, resumable: bool) {
        self.command(Command::Send(json!({"op": 9, "d": resumable})));
    }

    /// Closes the live socket with `code`.
    pub fn close_with(&self, code: u16) {
        self.command(Command::Close(code));
    }

    fn command(&self, command: Command) {
        if let Some(live) = self.lock().live.as_ref() {
            let _ = live.commands.send(command);
        }
    }

    /// Whether a socket is bound to a session (after READY or RESUMED).
    pub fn connected(&self) -> bool {
        self.lock().live.is_some()
    }

    /// What the Gateway saw so far.
    pub fn gateway_log(&self) -> GatewayLog {
        self.lock().gateway.clone()
    }

    /// Every REST request so far.
    pub fn requests(&self) -> Vec<RestRequest> {
        self.lock().requests.clone()
    }

    /// Messages the REST API accepted, in order.
    pub fn posted(&self) -> Vec<Posted> {
        self.lock().posted.clone()
    }

    /// Waits until `count` messages were accepted, or `timeout` passed; whether they were.
    pub async fn wait_for_posted(&self, count: usize, timeout: Duration) -> bool {
        self.wait_until(timeout, |discord| discord.posted().len() >= count)
            .await
    }

    /// Waits until `done` holds, or `timeout` passed; whether it held.
    pub async fn wait_until(&self, timeout: Duration, done: impl Fn(&Self) -> bool) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let notified = self.shared.changed.notified();
            if done(self) {
                return true;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return done(self);
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Script> {
        self.shared.lock()
    }
}

/// A DM as Discord dispatches it (no `guild_id`).
pub fn direct_message(id: &str, channel_id: &str, author_id: &str, content: &str) -> Value {
    json!({
        "id": id, "channel_id": channel_id, "type": 0, "content": content,
        "timestamp": "2026-11-25T10:00:00.000000+00:00", "edited_timestamp": null,
        "tts": false, "mention_everyone": false, "mentions": [], "mention_roles": [],
        "attachments": [], "embeds": [], "pinned": false, "flags": 0,
        "author": {"id": author_id, "username": format!("user{author_id}"), "global_name": null,
                   "discriminator": "0", "avatar": null},
    })
}

/// A guild channel message; `mentions` are user ids (their `<@id>` is not added to the
/// text — put it there as a client would).
pub fn guild_message(
    id: &str,
    guild_id: &str,
    channel_id: &str,
    author_id: &str,
    content: &str,
    mentions: &[&str],
) -> Value {
    let mut message = direct_message(id, channel_id, author_id, content);
    message["guild_id"] = json!(guild_id);
    message["member"] =
        json!({"nick": null, "roles": [], "joined_at": "2026-01-01T00:00:00+00:00"});
    message["mentions"] = mentions
        .iter()
        .map(|user| json!({"id": user, "username": format!("user{user}"), "discriminator": "0"}))
        .collect();
    message
}

fn authorised(shared: &Shared, headers: &HeaderMap) -> (Option<String>, bool) {
    let authorization = headers
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .map(str::to_string);
    let expected = format!("Bot {}", shared.token.lock().expect("token lock"));
    let ok = authorization.as_deref() == Some(expected.as_str());
    (authorization, ok)
}

fn record(
    shared: &Shared,
    method: &str,
    path: String,
    headers: &HeaderMap,
    body: Value,
    status: u16,
) {
    let (authorization, _) = authorised(shared, headers);
    shared.lock().requests.push(RestRequest {
        method: method.to_string(),
        path,
        authorization,
        body,
        status,
        at: Instant::now(),
    });
    shared.changed.notify_waiters();
}

async fn gateway_bot(State(shared): State<Shared>, headers: HeaderMap) -> Response {
    let path = "/api/v10/gateway/bot".to_string();
    if !authorised(&shared, &headers).1 {
        record(&shared, "GET", path, &headers, Value::Null, 401);
        return Failure::unauthorized().response("gateway");
    }
    let failure = shared.lock().gateway_failures.pop_front();
    if let Some(failure) = failure {
        record(&shared, "GET", path, &headers, Value::Null, failure.status);
        let mut response = failure.response("gateway");
        let answer = response.headers_mut();
        for bucket_header in [
            "x-ratelimit-limit",
            "x-ratelimit-remaining",
            "x-ratelimit-reset",
            "x-ratelimit-reset-after",
            "x-ratelimit-bucket",
        ] {
            answer.remove(bucket_header);
        }
        if failure.status == 429 {
            answer.insert("x-ratelimit-global", HeaderValue::from_static("true"));
            answer.insert("x-ratelimit-scope", HeaderValue::from_static("global"));
        }
        return response;
    }
    record(&shared, "GET", path, &headers, Value::Null, 200);
    Json(json!({
        "url": shared.gateway_url,
        "shards": 1,
        "session_start_limit": {"total": 1000, "remaining": 999, "reset_after": 14_400_000, "max_concurrency": 1},
    }))
    .into_response()
}

async fn create_message(
    State(shared): State<Shared>,
    Path(channel): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default();
    // A message with files is multipart: `payload_json` and `files[n]` parts (the
    // files are recorded under `files`, in order).
    let parsed: Value = if content_type.starts_with("multipart/form-data") {
        let form = crate::form_parameters(content_type, &body);
        let mut parsed = match &form["payload_json"] {
            Value::String(text) => serde_json::from_str(text).unwrap_or(Value::Null),
            object @ Value::Object(_) => object.clone(),
            _ => Value::Null,
        };
        let files: Vec<Value> = (0..10)
            .map_while(|index| form.get(format!("files[{index}]")).cloned())
            .collect();
        if parsed.is_object() && !files.is_empty() {
            parsed["files"] = Value::Array(files);
        }
        parsed
    } else {
        serde_json::from_slice(&body).unwrap_or(Value::Null)
    };
    let path = format!("/api/v10/channels/{channel}/messages");
    let bucket = format!("bucket-{channel}");
    if !authorised(&shared, &headers).1 {
        record(&shared, "POST", path, &headers, parsed, 401);
        return Failure::unauthorized().response(&bucket);
    }
    let now = Instant::now();
    let enforced_nonce = match (&parsed["nonce"], parsed["enforce_nonce"].as_bool()) {
        (Value::String(nonce), Some(true)) => Some(nonce.clone()),
        (Value::Number(nonce), Some(true)) => Some(nonce.to_string()),
        _ => None,
    };
    let (failure, status, earlier) = {
        let mut script = shared.lock();
        script
            .nonces
            .retain(|_, (first, _)| now.duration_since(*first) < NONCE_WINDOW);
        let failure = if let Some(until) = script.bucket_empty_until.filter(|until| *until > now) {
            Some(Failure::rate_limited((until - now).as_secs_f64()))
        } else if let Some(failure) = script.send_failures.pop_front() {
            Some(failure)
        } else if nonce_too_long(&parsed["nonce"]) {
            Some(Failure::invalid_field(
                "nonce",
                "NONCE_TYPE_TOO_LONG",
                "Must be 25 or fewer in length.",
            ))
        } else {
            let has_files = parsed["files"]
                .as_array()
                .is_some_and(|files| !files.is_empty());
            match parsed["content"].as_str() {
                None | Some("") if has_files => None,
                None | Some("") => Some(Failure::invalid_body(
                    "Must be between 1 and 2000 in length.",
                )),
                Some(text) if text.chars().count() > 2_000 => {
                    Some(Failure::invalid_body("Must be 2000 or fewer in length."))
                }
                Some(_) => None,
            }
        };
        let status = failure.as_ref().map_or(200, |failure| failure.status);
        // The same author's enforced nonce within the window: the first message again.
        let earlier = enforced_nonce
            .as_ref()
            .filter(|_| failure.is_none())
            .and_then(|nonce| script.nonces.get(nonce))
            .map(|(_, answer)| answer.clone());
        (failure, status, earlier)
    };
    record(&shared, "POST", path, &headers, parsed.clone(), status);
    if let Some(failure) = failure {
        return failure.response(&bucket);
    }
    if let Some(answer) = earlier {
        shared.changed.notify_waiters();
        let mut response = Json(answer).into_response();
        rate_limit_headers(response.headers_mut(), &bucket, 4, 5.0);
        return response;
    }
    let (answer, exhaust, withhold) = {
        let mut script = shared.lock();
        script.next_id += 1;
        let id = script.next_id.to_string();
        script.posted.push(Posted {
            channel_id: channel.clone(),
            id: id.clone(),
            body: parsed.clone(),
        });
        let exhaust = script.exhaust_bucket.take();
        if let Some(seconds) = exhaust {
            script.bucket_empty_until = Some(Instant::now() + Duration::from_secs_f64(seconds));
        }
        let answer = json!({
            "id": id, "channel_id": channel, "type": if parsed["message_reference"].is_null() { 0 } else { 19 },
            "content": parsed["content"], "timestamp": "2026-11-25T10:00:01.000000+00:00",
            "author": {"id": BOT_USER_ID, "username": BOT_USERNAME, "bot": true},
            "mentions": [], "attachments": [], "embeds": [],
            "nonce": parsed.get("nonce").cloned().unwrap_or(Value::Null),
        });
        if let Some(nonce) = enforced_nonce {
            script.nonces.insert(nonce, (now, answer.clone()));
        }
        let withhold = std::mem::take(&mut script.withhold_next_answer);
        (answer, exhaust, withhold)
    };
    shared.changed.notify_waiters();
    if withhold {
        // The message exists; the bot never hears so.
        return std::future::pending().await;
    }
    let mut response = Json(answer).into_response();
    match exhaust {
        Some(seconds) => rate_limit_headers(response.headers_mut(), &bucket, 0, seconds),
        None => rate_limit_headers(response.headers_mut(), &bucket, 4, 5.0),
    }
    response
}

/// The initial response to an interaction: once per interaction, with its own token
/// (no bot token needed), else 404 Unknown interaction as Discord answers.
async fn interaction_callback(
    State(shared): State<Shared>,
    Path((id, token)): Path<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let parsed: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let path = format!("/api/v10/interactions/{id}/{token}/callback");
    let known = {
        let mut script = shared.lock();
        let known = script.open_interactions.get(&id) == Some(&token)
            && matches!(parsed["type"].as_u64(), Some(4..=7));
        if known {
            script.open_interactions.remove(&id);
        }
        known
    };
    let status = if known { 204 } else { 404 };
    record(&shared, "POST", path, &headers, parsed, status);
    if known {
        StatusCode::NO_CONTENT.into_response()
    } else {
        (
            StatusCode::NOT_FOUND,
            Json(json!({"message": "Unknown interaction", "code": 10062})),
        )
            .into_response()
    }
}

/// Discord takes a nonce of at most 25 characters (a string, or an integer's digits).
fn nonce_too_long(nonce: &Value) -> bool {
    match nonce {
        Value::String(nonce) => nonce.chars().count() > 25,
        Value::Number(nonce) => nonce.to_string().len() > 25,
        _ => false,
    }
}

async fn create_dm(State(shared): State<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    let parsed: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let path = "/api/v10/users/@me/channels".to_string();
    if !authorised(&shared, &headers).1 {
        record(&shared, "POST", path, &headers, parsed, 401);
        return Failure::unauthorized().response("dm");
    }
    let Some(recipient) = parsed["recipient_id"].as_str().map(str::to_string) else {
        record(&shared, "POST", path, &headers, parsed, 400);
        return Failure::invalid_body("recipient_id is required").response("dm");
    };
    record(&shared, "POST", path, &headers, parsed, 200);
    let id = {
        let mut script = shared.lock();
        let next = script.next_id + 1;
        let id = script
            .direct_channels
            .entry(recipient.clone())
            .or_insert_with(|| next.to_string())
            .clone();
        if id == next.to_string() {
            script.next_id = next;
        }
        id
    };
    Json(json!({
        "id": id, "type": 1, "last_message_id": null, "flags": 0,
        "recipients": [{"id": recipient, "username": format!("user{recipient}"), "discriminator": "0"}],
    }))
    .into_response()
}

async fn cdn(RawQuery(query): RawQuery) -> Response {
    let size = query
        .as_deref()
        .and_then(|query| query.strip_prefix("size="))
        .and_then(|size| size.parse::<usize>().ok())
        .unwrap_or(0);
    (
        [(header::CONTENT_TYPE, "application/octet-stream")],
        vec![b'x'; size],
    )
        .into_response()
}

async fn gateway(
    State(shared): State<Shared>,
    RawQuery(query): RawQuery,
    upgrade: WebSocketUpgrade,
) -> Response {
    upgrade.on_upgrade(move |socket| serve_socket(shared, query.unwrap_or_default(), socket))
}

async fn serve_socket(shared: Shared, query: String, mut socket: WebSocket) {
    let (commands, mut receiver) = mpsc::unbounded_channel();
    let connection = {
        let mut script = shared.lock();
        script.gateway.connections.push(query.clone());
        script.gateway.connections.len()
    };
    shared.changed.notify_waiters();
    // Discord takes API version 10 with JSON here; anything else is refused at once.
    let parameters: Vec<&str> = query.split('&').collect();
    if !parameters.contains(&"v=10") || !parameters.contains(&"encoding=json") {
        let code = if parameters.contains(&"v=10") {
            4002
        } else {
            4012
        };
        close(&shared, &mut socket, code).await;
        return;
    }
    let hello = json!({"op": 10, "d": {"heartbeat_interval": shared.heartbeat_interval.as_millis() as u64}});
    if socket.send(Message::text(hello.to_string())).await.is_err() {
        return;
    }
    loop {
        let incoming = tokio::select! {
            incoming = socket.recv() => incoming,
            command = receiver.recv() => {
                match command {
                    Some(Command::Send(payload)) => {
                        if socket.send(Message::text(payload.to_string())).await.is_err() { break; }
                        continue;
                    }
                    Some(Command::Close(code)) => {
                        close(&shared, &mut socket, code).await;
                        break;
                    }
                    Some(Command::Drop) | None => break,
                }
            }
        };
        let Some(Ok(Message::Text(text))) = incoming else {
            match incoming {
                Some(Ok(_)) => continue,
                _ => break,
            }
        };
        let payload: Value = serde_json::from_str(text.as_str()).unwrap_or(Value::Null);
        let answer = handle_frame(&shared, connection, &commands, &payload);
        let mut ended = false;
        for reply in answer {
            match reply {
                Command::Send(payload) => {
                    if socket
                        .send(Message::text(payload.to_string()))
                        .await
                        .is_err()
                    {
                        ended = true;
                        break;
                    }
                }
                Command::Close(code) => {
                    close(&shared, &mut socket, code).await;
                    ended = true;
                    break;
                }
                Command::Drop => {
                    ended = true;
                    break;
                }
            }
        }
        shared.changed.notify_waiters();
        if ended {
            break;
        }
    }
    let mut script = shared.lock();
    if script
        .live
        .as_ref()
        .is_some_and(|live| live.connection == connection)
    {
        script.live = None;
    }
    drop(script);
    shared.changed.notify_waiters();
}

async fn close(shared: &Shared, socket: &mut WebSocket, code: u16) {
    shared.lock().gateway.closes_sent.push(code);
    let reason = match code {
        4004 => "Authentication failed.",
        4014 => "Disallowed intent(s).",
        _ => "Closed.",
    };
    let _ = socket
        .send(Message::Close(Some(CloseFrame {
            code,
            reason: reason.into(),
        })))
        .await;
}

// The server's answer to one client frame; binds the socket to a session on
// Identify and Resume (under the lock, so no dispatch slips between replay and bind).
fn handle_frame(
    shared: &Shared,
    connection: usize,
    commands: &mpsc::UnboundedSender<Command>,
    payload: &Value,
) -> Vec<Command> {
    let token = shared.token.lock().expect("token lock").clone();
    let mut script = shared.lock();
    let data = &payload["d"];
    match payload["op"].as_u64() {
        Some(1) => {
            script
                .gateway
                .heartbeats
                .push((Instant::now(), data.clone()));
            if script.acknowledge_heartbeats {
                vec![Command::Send(json!({"op": 11}))]
            } else {
                Vec::new()
            }
        }
        Some(2) => {
            script.gateway.identifies.push(data.clone());
            if data["token"].as_str() != Some(token.as_str()) {
                return vec![Command::Close(4004)];
            }
            if !data["properties"].is_object() {
                // Discord cannot decode an Identify without its connection properties.
                return vec![Command::Close(4002)];
            }
            let intents = data["intents"].as_u64().unwrap_or(0);
            // A privileged intent not enabled in the portal is refused; stricter than
            // Discord, so is an Identify without Message Content (the channel would
            // receive every message with empty content).
            if intents & !script.allowed_intents != 0 || intents & MESSAGE_CONTENT == 0 {
                return vec![Command::Close(4014)];
            }
            script.gateway.sessions_started += 1;
            let session_id = format!("session-{}", script.gateway.sessions_started);
            let ready = json!({"op": 0, "s": 1, "t": "READY", "d": {
                "v": 10,
                "user": {"id": BOT_USER_ID, "username": BOT_USERNAME, "bot": true, "discriminator": "0"},
                "guilds": [],
                "session_id": session_id,
                "resume_gateway_url": shared.gateway_url,
                "application": {"id": BOT_USER_ID, "flags": 0},
            }});
            script.sessions.insert(
                session_id.clone(),
                Session {
                    id: session_id.clone(),
                    events: vec![(1, ready.clone())],
                },
            );
            script.current = Some(session_id.clone());
            script.live = Some(Live {
                connection,
                session: session_id,
                commands: commands.clone(),
            });
            vec![Command::Send(ready)]
        }
        Some(6) => {
            script.gateway.resumes.push(data.clone());
            if data["token"].as_str() != Some(token.as_str()) {
                return vec![Command::Close(4004)];
            }
            let session_id = data["session_id"].as_str().unwrap_or_default().to_string();
            let after = data["seq"].as_u64().unwrap_or(0);
            let refuse = script.refuse_resumes;
            let Some(session) = script.sessions.get_mut(&session_id).filter(|_| !refuse) else {
                return vec![Command::Send(json!({"op": 9, "d": false}))];
            };
            let mut replies: Vec<Command> = session
                .events
                .iter()
                .filter(|(seq, _)| *seq > after)
                .map(|(_, payload)| Command::Send(payload.clone()))
                .collect();
            let seq = session.events.last().map_or(1, |(seq, _)| seq + 1);
            let resumed = json!({"op": 0, "s": seq, "t": "RESUMED", "d": null});
            session.events.push((seq, resumed.clone()));
            replies.push(Command::Send(resumed));
            let id = session.id.clone();
            script.current = Some(id.clone());
            script.live = Some(Live {
                connection,
                session: id,
                commands: commands.clone(),
            });
            replies
        }
        _ => Vec::new(),
    }
}
