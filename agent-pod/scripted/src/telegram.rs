//! A scripted Telegram Bot API for tests: a real HTTP server on loopback that answers
//! `<base>/bot<token>/<method>` the way the Bot API documents it (`{"ok": true,
//! "result": …}`, or `{"ok": false, "error_code", "description", "parameters"}`),
//! checks the token in the path, and records every request.
//!
//! `getUpdates` long-polls like Telegram: it returns the queued updates whose
//! `update_id` is at least `offset` (waiting up to `timeout` seconds when there are
//! none) and forgets every update below `offset` for good. `sendMessage` checks its
//! HTML as Telegram does (unbalanced or unknown tags and stray `&`, `<`, `>` are
//! refused with "can't parse entities"; more than 4,096 characters of text with
//! "message is too long"). Failures can be scripted per method.
//!
//! Inline keyboards (`reply_markup`) are checked as Telegram checks them
//! (`callback_data` of 1 to 64 bytes, else "BUTTON_DATA_INVALID") and kept with the
//! message; a test presses a button as a person would: a `callback_query` update naming
//! the presser, the message and the button's data, delivered only to a poller whose
//! `allowed_updates` lists it. `answerCallbackQuery` takes each press's id once.

use std::{
    collections::{HashMap, HashSet, VecDeque},
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use axum::{
    Json, Router,
    body::Bytes,
    extract::{Path, RawQuery, State},
    http::{HeaderMap, StatusCode, header},
    response::{IntoResponse, Response},
    routing::{any, get},
};
use serde_json::{Value, json};

/// The bot's username the server reports in `getMe`.
pub const BOT_USERNAME: &str = "acme_saint_bot";

/// One request the server received.
#[derive(Clone, Debug)]
pub struct BotRequest {
    /// The Bot API method (`getUpdates`, `sendMessage`), or `file/<path>` for a download.
    pub method: String,
    /// Whether the path carried the right token.
    pub authorised: bool,
    /// The parameters (JSON body or query), `null` for none.
    pub body: Value,
    /// The HTTP status answered.
    pub status: u16,
    /// When it arrived.
    pub at: Instant,
}

/// A scripted failure.
#[derive(Clone, Debug)]
pub struct Failure {
    status: u16,
    description: String,
    retry_after: Option<u64>,
}

impl Failure {
    /// 429 with `parameters.retry_after`.
    pub fn too_many_requests(retry_after_seconds: u64) -> Self {
        Self {
            status: 429,
            description: format!("Too Many Requests: retry after {retry_after_seconds}"),
            retry_after: Some(retry_after_seconds),
        }
    }

    /// 502, as the Bot API answers when its backend is down.
    pub fn bad_gateway() -> Self {
        Self {
            status: 502,
            description: "Bad Gateway".to_string(),
            retry_after: None,
        }
    }

    /// 403: the person blocked the bot.
    pub fn blocked_by_user() -> Self {
        Self {
            status: 403,
            description: "Forbidden: bot was blocked by the user".to_string(),
            retry_after: None,
        }
    }

    /// 400: no such chat.
    pub fn chat_not_found() -> Self {
        Self {
            status: 400,
            description: "Bad Request: chat not found".to_string(),
            retry_after: None,
        }
    }

    /// 409: `getUpdates` while a webhook is set.
    pub fn webhook_conflict() -> Self {
        Self {
            status: 409,
            description: "Conflict: can't use getUpdates method while webhook is active; use \
                          deleteWebhook to delete the webhook first"
                .to_string(),
            retry_after: None,
        }
    }

    fn response(&self) -> Response {
        error_response(self.status, &self.description, self.retry_after)
    }
}

fn error_response(status: u16, description: &str, retry_after: Option<u64>) -> Response {
    let mut body = json!({"ok": false, "error_code": status, "description": description});
    if let Some(seconds) = retry_after {
        body["parameters"] = json!({"retry_after": seconds});
    }
    (
        StatusCode::from_u16(status).expect("scripted statuses are valid"),
        Json(body),
    )
        .into_response()
}

fn ok(result: Value) -> Response {
    Json(json!({"ok": true, "result": result})).into_response()
}

/// A person on Telegram.
#[derive(Clone, Debug)]
pub struct Person {
    /// User id.
    pub id: i64,
    /// First name.
    pub first_name: String,
}

impl Person {
    /// `id`, called `first_name`.
    pub fn new(id: i64, first_name: &str) -> Self {
        Self {
            id,
            first_name: first_name.to_string(),
        }
    }

    fn user(&self) -> Value {
        json!({"id": self.id, "is_bot": false, "first_name": self.first_name, "language_code": "en"})
    }
}

/// A group chat.
#[derive(Clone, Debug)]
pub struct Group {
    /// Chat id (negative: `-100…` for a supergroup).
    pub id: i64,
    /// Title.
    pub title: String,
}

impl Group {
    /// A supergroup `id` titled `title`.
    pub fn new(id: i64, title: &str) -> Self {
        Self {
            id,
            title: title.to_string(),
        }
    }
}

/// A private text message from `from` (message id assigned when pushed).
pub fn private_text(from: &Person, text: &str) -> Value {
    json!({
        "from": from.user(),
        "chat": {"id": from.id, "type": "private", "first_name": from.first_name},
        "text": text,
        "entities": entities(text),
    })
}

/// A text message from `from` in `group`, with `mention` and `bot_command` entities for
/// every `@name` and leading `/command` in it, as Telegram marks them.
pub fn group_text(group: &Group, from: &Person, text: &str) -> Value {
    json!({
        "from": from.user(),
        "chat": {"id": group.id, "type": "supergroup", "title": group.title},
        "text": text,
        "entities": entities(text),
    })
}

/// `message` as a reply to message `replied_id`, which `replied_from` (a user value,
/// see [`ScriptedTelegram::bot_user`]) wrote.
pub fn replying_to(mut message: Value, replied_id: i64, replied_from: Value) -> Value {
    message["reply_to_message"] = json!({
        "message_id": replied_id,
        "from": replied_from,
        "chat": message["chat"].clone(),
        "date": 1_700_000_000,
        "text": "an earlier message",
    });
    message
}

/// A photo (three sizes; `file_id` is the largest) with `caption`, in `chat` (a
/// message's `chat` value) from `from`.
pub fn photo(chat: Value, from: &Person, file_id: &str, caption: &str) -> Value {
    json!({
        "from": from.user(),
        "chat": chat,
        "caption": caption,
        "caption_entities": entities(caption),
        "photo": [
            {"file_id": format!("{file_id}-s"), "file_unique_id": "AQADs", "width": 90, "height": 67, "file_size": 1_204},
            {"file_id": format!("{file_id}-m"), "file_unique_id": "AQADm", "width": 320, "height": 240, "file_size": 15_320},
            {"file_id": file_id, "file_unique_id": "AQADx", "width": 1280, "height": 960, "file_size": 98_112},
        ],
    })
}

/// The `chat` value of a private chat with `person`.
pub fn private_chat(person: &Person) -> Value {
    json!({"id": person.id, "type": "private", "first_name": person.first_name})
}

/// Entities Telegram would mark in `text`: `@mentions` anywhere and a `/command`
/// (with its `@bot` suffix) at the start. Offsets and lengths in UTF-16 units.
pub fn entities(text: &str) -> Value {
    let mut found = Vec::new();
    let units = |part: &str| part.encode_utf16().count();
    let is_name = |character: char| character.is_ascii_alphanumeric() || character == '_';
    let mut index = 0;
    while index < text.len() {
        let rest = &text[index..];
        let character = rest.chars().next().expect("inside the text");
        let starts_word = text[..index]
            .chars()
            .next_back()
            .is_none_or(|before| !is_name(before) && before != '@' && before != '/');
        if starts_word && (character == '@' || (character == '/' && index == 0)) {
            let body_end = rest[1..]
                .find(|next: char| !(is_name(next) || (character == '/' && next == '@')))
                .map_or(rest.len(), |end| end + 1);
            if body_end > 1 {
                let kind = if character == '@' {
                    "mention"
                } else {
                    "bot_command"
                };
                found.push(json!({"type": kind, "offset": units(&text[..index]),
                                  "length": units(&rest[..body_end])}));
                index += body_end;
                continue;
            }
        }
        index += character.len_utf8();
    }
    Value::Array(found)
}

/// Checks `text` as Telegram parses `parse_mode: HTML`: only its tags, properly nested
/// and closed, `&` only in the entities `&lt;` `&gt;` `&amp;` `&quot;` and numeric ones,
/// no stray `<` or `>`. Returns the length of the text it shows, in characters.
pub fn check_html(text: &str) -> Result<usize, String> {
    parse_html(text).map(|shown| shown.chars().count())
}

// The text `text` shows once its tags and entities are parsed.
fn parse_html(text: &str) -> Result<String, String> {
    const TAGS: &[&str] = &[
        "b",
        "strong",
        "i",
        "em",
        "u",
        "ins",
        "s",
        "strike",
        "del",
        "span",
        "tg-spoiler",
        "a",
        "code",
        "pre",
        "blockquote",
        "tg-emoji",
    ];
    let mut stack: Vec<String> = Vec::new();
    let mut shown = String::new();
    let mut rest = text;
    while let Some(character) = rest.chars().next() {
        match character {
            '<' => {
                let end = rest
                    .find('>')
                    .ok_or_else(|| format!("unclosed start tag at {:?}", head(rest)))?;
                let tag = &rest[1..end];
                if let Some(name) = tag.strip_prefix('/') {
                    match stack.pop() {
                        Some(open) if open == name.trim() => {}
                        _ => {
                            return Err(format!(
                                "can't find end tag corresponding to start tag {name:?}"
                            ));
                        }
                    }
                } else {
                    let name = tag
                        .split(|c: char| c.is_whitespace())
                        .next()
                        .unwrap_or_default();
                    if !TAGS.contains(&name) {
                        return Err(format!("unsupported start tag {name:?}"));
                    }
                    if tag.matches('"').count() % 2 == 1 {
                        return Err(format!("unclosed attribute value in {tag:?}"));
                    }
                    if matches!(stack.last().map(String::as_str), Some("code"))
                        || (matches!(stack.last().map(String::as_str), Some("pre"))
                            && name != "code")
                    {
                        return Err(format!("tag {name:?} inside a code entity"));
                    }
                    stack.push(name.to_string());
                }
                rest = &rest[end + 1..];
            }
            '>' => return Err(format!("unexpected '>' at {:?}", head(rest))),
            '&' => {
                let end = rest
                    .find(';')
                    .filter(|&end| end <= 10)
                    .ok_or_else(|| format!("unsupported HTML entity at {:?}", head(rest)))?;
                let name = &rest[1..end];
                let known = matches!(name, "lt" | "gt" | "amp" | "quot")
                    || name.strip_prefix('#').is_some_and(|digits| {
                        !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
                    });
                if !known {
                    return Err(format!("unsupported HTML entity &{name};"));
                }
                shown.push('&');
                rest = &rest[end + 1..];
            }
            other => {
                shown.push(other);
                rest = &rest[other.len_utf8()..];
            }
        }
    }
    match stack.pop() {
        Some(open) => Err(format!(
            "can't find end tag corresponding to start tag {open:?}"
        )),
        None => Ok(shown),
    }
}

fn head(text: &str) -> String {
    text.chars().take(20).collect()
}

impl Script {
    /// `sendMessage` requests answered 200, the same set [`ScriptedTelegram::sent`] lists.
    fn sent_count(&self) -> u64 {
        let sent = self
            .requests
            .iter()
            .filter(|request| request.method == "sendMessage" && request.status == 200);
        sent.count() as u64
    }
}

#[derive(Default)]
struct Script {
    requests: Vec<BotRequest>,
    updates: Vec<Value>,
    next_update_id: i64,
    next_message_id: i64,
    failures: HashMap<String, VecDeque<Failure>>,
    files: HashMap<String, (String, Vec<u8>)>,
    webhook: Option<String>,
    blocked: HashSet<String>,
    /// Messages sent, as `sendMessage` answered them (with their `reply_markup`).
    messages: Vec<Value>,
    /// Callback query ids pushed and not yet answered.
    open_presses: HashSet<String>,
    next_press: u64,
}

#[derive(Clone)]
struct Shared {
    script: Arc<Mutex<Script>>,
    changed: Arc<tokio::sync::Notify>,
    token: Arc<Mutex<String>>,
    bot_id: i64,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Script> {
        self.script.lock().expect("script lock")
    }
}

/// The server; stops when dropped.
pub struct ScriptedTelegram {
    shared: Shared,
    address: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ScriptedTelegram {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ScriptedTelegram {
    /// Starts on a free loopback port, accepting `bot_token` (`<bot id>:<secret>`).
    pub async fn start(bot_token: &str) -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let address = listener.local_addr()?;
        let bot_id = bot_token
            .split_once(':')
            .and_then(|(id, _)| id.parse().ok())
            .unwrap_or(1);
        let shared = Shared {
            script: Arc::new(Mutex::new(Script {
                next_update_id: 800_000_000,
                next_message_id: 1_000,
                ..Script::default()
            })),
            changed: Arc::default(),
            token: Arc::new(Mutex::new(bot_token.to_string())),
            bot_id,
        };
        let router = Router::new()
            .route("/file/{bot}/{*path}", get(download))
            .route("/{bot}/{method}", any(method))
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
    pub fn base_url(&self) -> String {
        format!("http://{}", self.address)
    }

    /// The bot's id (the number before the token's colon).
    pub fn bot_id(&self) -> i64 {
        self.shared.bot_id
    }

    /// The bot as the `from` of its own messages.
    pub fn bot_user(&self) -> Value {
        json!({"id": self.shared.bot_id, "is_bot": true, "first_name": "Acme Assistant",
               "username": BOT_USERNAME})
    }

    /// Queues `message` as a new update (a message id and date are added when it has
    /// none); returns (update id, message id).
    pub fn push_message(&self, mut message: Value) -> (i64, i64) {
        let (update_id, message_id) = {
            let mut script = self.shared.lock();
            if message["message_id"].is_null() {
                script.next_message_id += 1;
                message["message_id"] = json!(script.next_message_id);
            }
            if message["date"].is_null() {
                message["date"] = json!(jiff::Timestamp::now().as_second());
            }
            script.next_update_id += 1;
            let update_id = script.next_update_id;
            let message_id = message["message_id"].as_i64().unwrap_or_default();
            script
                .updates
                .push(json!({"update_id": update_id, "message": message}));
            (update_id, message_id)
        };
        self.shared.changed.notify_waiters();
        (update_id, message_id)
    }

    /// Queues `update` as it is (its `update_id` included: a redelivery).
    pub fn push_update(&self, update: Value) {
        self.shared.lock().updates.push(update);
        self.shared.changed.notify_waiters();
    }

    /// Messages sent so far as `sendMessage` answered them, each with its `reply_markup`.
    pub fn messages(&self) -> Vec<Value> {
        self.shared.lock().messages.clone()
    }

    /// `from` presses the inline button labelled `label` under `message` (one of
    /// [`ScriptedTelegram::messages`]); returns the callback query id. Panics when the
    /// message has no such button.
    pub fn press(&self, from: &Person, message: &Value, label: &str) -> String {
        let data = message["reply_markup"]["inline_keyboard"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|row| row.as_array().cloned().unwrap_or_default())
            .find(|button| button["text"] == label)
            .and_then(|button| button["callback_data"].as_str().map(str::to_string))
            .unwrap_or_else(|| panic!("no button {label:?} under {message}"));
        self.press_data(from, message, &data)
    }

    /// A `callback_query` update from `from` on `message` carrying `data`, whatever the
    /// message's buttons are (a forged or stale press); returns the callback query id.
    pub fn press_data(&self, from: &Person, message: &Value, data: &str) -> String {
        let id = {
            let mut script = self.shared.lock();
            script.next_press += 1;
            let id = format!("{}{:08}", from.id, script.next_press);
            script.open_presses.insert(id.clone());
            script.next_update_id += 1;
            let update_id = script.next_update_id;
            script
                .updates
                .push(json!({"update_id": update_id, "callback_query": {
                    "id": id, "from": from.user(), "message": message,
                    "chat_instance": format!("-{}", message["chat"]["id"]), "data": data,
                }}));
            id
        };
        self.shared.changed.notify_waiters();
        id
    }

    /// Updates not yet confirmed by an `offset` past them.
    pub fn pending_updates(&self) -> Vec<Value> {
        self.shared.lock().updates.clone()
    }

    /// Answers the next calls of `method` with `failures`, in order, before succeeding.
    pub fn fail_next(&self, method: &str, failures: impl IntoIterator<Item = Failure>) {
        self.shared
            .lock()
            .failures
            .entry(method.to_string())
            .or_default()
            .extend(failures);
    }

    /// Serves `data` as file `file_id` at `file_path`.
    pub fn add_file(&self, file_id: &str, file_path: &str, data: Vec<u8>) {
        self.shared
            .lock()
            .files
            .insert(file_id.to_string(), (file_path.to_string(), data));
    }

    /// Sends to `chat` fail from now on as if its person blocked the bot.
    pub fn block(&self, chat: &str) {
        self.shared.lock().blocked.insert(chat.to_string());
    }

    /// Accepts only `token` from now on (a revoked token).
    pub fn set_token(&self, token: &str) {
        *self.shared.token.lock().expect("token lock") = token.to_string();
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<BotRequest> {
        self.shared.lock().requests.clone()
    }

    /// Requests of `method` so far.
    pub fn requests_of(&self, method: &str) -> Vec<BotRequest> {
        self.shared
            .lock()
            .requests
            .iter()
            .filter(|request| request.method == method)
            .cloned()
            .collect()
    }

    /// `sendMessage` bodies that succeeded, in order.
    pub fn sent(&self) -> Vec<Value> {
        self.requests_of("sendMessage")
            .into_iter()
            .filter(|request| request.status == 200)
            .map(|request| request.body)
            .collect()
    }

    /// Waits until `count` messages were sent in all, or `timeout` passed; returns
    /// whether they were. It counts what [`Self::sent`] lists (a send counts once its
    /// answer is recorded), so a count taken from `sent()` before a turn and this wait
    /// after it agree.
    pub async fn wait_for_sent(&self, count: u64, timeout: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let notified = self.shared.changed.notified();
            if self.shared.lock().sent_count() >= count {
                return true;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return self.shared.lock().sent_count() >= count;
            }
        }
    }

    /// Waits until `done` holds for the recorded requests, or `timeout` passed; returns
    /// whether it did.
    pub async fn wait_for_requests(
        &self,
        timeout: Duration,
        done: impl Fn(&[BotRequest]) -> bool,
    ) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let notified = self.shared.changed.notified();
            if done(&self.shared.lock().requests) {
                return true;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return done(&self.shared.lock().requests);
            }
        }
    }
}

fn parameters(headers: &HeaderMap, query: Option<&str>, body: &[u8]) -> Value {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default();
    if content_type.starts_with("application/json") {
        return serde_json::from_slice(body).unwrap_or(Value::Null);
    }
    if content_type.starts_with("multipart/form-data") {
        return crate::form_parameters(content_type, body);
    }
    let pairs = match query {
        Some(query) if !query.is_empty() => query.to_string(),
        _ => String::from_utf8_lossy(body).into_owned(),
    };
    let object: serde_json::Map<String, Value> = pairs
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .map(|(key, value)| {
            let value = serde_json::from_str(value).unwrap_or(Value::String(value.to_string()));
            (key.to_string(), value)
        })
        .collect();
    Value::Object(object)
}

fn record(shared: &Shared, method: String, authorised: bool, body: Value) -> usize {
    let mut script = shared.lock();
    script.requests.push(BotRequest {
        method,
        authorised,
        body,
        status: 0,
        at: Instant::now(),
    });
    shared.changed.notify_waiters();
    script.requests.len() - 1
}

fn answered(shared: &Shared, index: usize, response: Response) -> Response {
    shared.lock().requests[index].status = response.status().as_u16();
    shared.changed.notify_waiters();
    response
}

async fn method(
    State(shared): State<Shared>,
    Path((bot, method)): Path<(String, String)>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let parameters = parameters(&headers, query.as_deref(), &body);
    let authorised =
        bot.strip_prefix("bot") == Some(shared.token.lock().expect("token lock").as_str());
    let index = record(&shared, method.clone(), authorised, parameters.clone());
    let response = if authorised {
        answer(&shared, &method, &parameters).await
    } else {
        error_response(401, "Unauthorized", None)
    };
    answered(&shared, index, response)
}

async fn answer(shared: &Shared, method: &str, parameters: &Value) -> Response {
    if let Some(failure) = shared
        .lock()
        .failures
        .get_mut(method)
        .and_then(VecDeque::pop_front)
    {
        return failure.response();
    }
    match method {
        "getMe" => ok(
            json!({"id": shared.bot_id, "is_bot": true, "first_name": "Acme Assistant",
                             "username": BOT_USERNAME, "can_join_groups": true,
                             "can_read_all_group_messages": false, "supports_inline_queries": false}),
        ),
        "getUpdates" => get_updates(shared, parameters).await,
        "sendMessage" => send_message(shared, parameters),
        "sendChatAction" => ok(json!(true)),
        "sendVoice" => send_voice(shared, parameters),
        "answerCallbackQuery" => {
            let id = parameters["callback_query_id"].as_str().unwrap_or_default();
            if shared.lock().open_presses.remove(id) {
                ok(json!(true))
            } else {
                error_response(
                    400,
                    "Bad Request: query is too old and response timeout expired or query ID is invalid",
                    None,
                )
            }
        }
        "getFile" => {
            let file_id = parameters["file_id"].as_str().unwrap_or_default();
            match shared.lock().files.get(file_id) {
                Some((path, data)) => ok(json!({"file_id": file_id, "file_unique_id": "AgADx",
                                                "file_size": data.len(), "file_path": path})),
                None => error_response(400, "Bad Request: invalid file_id", None),
            }
        }
        "setWebhook" => {
            shared.lock().webhook = parameters["url"].as_str().map(str::to_string);
            ok(json!(true))
        }
        "deleteWebhook" => {
            shared.lock().webhook = None;
            ok(json!(true))
        }
        _ => error_response(404, "Not Found", None),
    }
}

async fn get_updates(shared: &Shared, parameters: &Value) -> Response {
    if shared.lock().webhook.is_some() {
        return Failure::webhook_conflict().response();
    }
    let offset = parameters["offset"].as_i64();
    let limit = parameters["limit"].as_u64().unwrap_or(100).clamp(1, 100) as usize;
    let timeout = Duration::from_secs(parameters["timeout"].as_u64().unwrap_or(0).min(60));
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let notified = shared.changed.notified();
        {
            let mut script = shared.lock();
            // An offset confirms every update below it: they are gone for good.
            if let Some(offset) = offset {
                script
                    .updates
                    .retain(|update| update["update_id"].as_i64().unwrap_or_default() >= offset);
            }
            // Only the update kinds the poller asked for (all when it named none).
            let allowed: Vec<String> = parameters["allowed_updates"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|kind| kind.as_str().map(str::to_string))
                .collect();
            let wanted = |update: &&Value| {
                allowed.is_empty()
                    || update.as_object().is_some_and(|fields| {
                        fields
                            .keys()
                            .any(|key| allowed.iter().any(|kind| kind == key))
                    })
            };
            let mut batch: Vec<Value> = script
                .updates
                .iter()
                .filter(wanted)
                .take(limit)
                .cloned()
                .collect();
            batch.sort_by_key(|update| update["update_id"].as_i64());
            if !batch.is_empty() {
                return ok(Value::Array(batch));
            }
        }
        if tokio::time::timeout_at(deadline, notified).await.is_err() {
            return ok(json!([]));
        }
    }
}

fn send_message(shared: &Shared, parameters: &Value) -> Response {
    let chat = match &parameters["chat_id"] {
        Value::String(chat) => chat.clone(),
        Value::Number(chat) => chat.to_string(),
        _ => return error_response(400, "Bad Request: chat_id is empty", None),
    };
    let text = parameters["text"].as_str().unwrap_or_default();
    if text.trim().is_empty() {
        return error_response(400, "Bad Request: message text is empty", None);
    }
    let shown = if parameters["parse_mode"] == "HTML" {
        match parse_html(text) {
            Ok(shown) => shown,
            Err(problem) => {
                return error_response(
                    400,
                    &format!("Bad Request: can't parse entities: {problem}"),
                    None,
                );
            }
        }
    } else {
        text.to_string()
    };
    if shown.trim().is_empty() {
        return error_response(400, "Bad Request: message text is empty", None);
    }
    if shown.chars().count() > 4_096 {
        return error_response(400, "Bad Request: message is too long", None);
    }
    if let Err(problem) = check_keyboard(&parameters["reply_markup"]) {
        return error_response(400, &format!("Bad Request: {problem}"), None);
    }
    let mut script = shared.lock();
    if script.blocked.contains(&chat) {
        return Failure::blocked_by_user().response();
    }
    script.next_message_id += 1;
    let message_id = script.next_message_id;
    let chat_id = chat.parse::<i64>().unwrap_or_default();
    // A user's private chat has their (positive) id; groups have negative ones.
    let chat_type = if chat_id > 0 { "private" } else { "supergroup" };
    let mut message = json!({
        "message_id": message_id,
        "from": {"id": shared.bot_id, "is_bot": true, "first_name": "Acme Assistant", "username": BOT_USERNAME},
        "chat": {"id": chat_id, "type": chat_type},
        "date": jiff::Timestamp::now().as_second(),
        "text": text,
    });
    if !parameters["reply_markup"].is_null() {
        message["reply_markup"] = parameters["reply_markup"].clone();
    }
    script.messages.push(message.clone());
    ok(message)
}

/// `sendVoice`: a multipart upload whose `voice` is Opus in Ogg (Telegram shows other
/// formats as a document, so the server refuses them here).
fn send_voice(shared: &Shared, parameters: &Value) -> Response {
    let chat = match &parameters["chat_id"] {
        Value::String(chat) => chat.clone(),
        Value::Number(chat) => chat.to_string(),
        _ => return error_response(400, "Bad Request: chat_id is empty", None),
    };
    let voice = &parameters["voice"];
    let Some(data) = crate::file_bytes(voice) else {
        return error_response(400, "Bad Request: there is no voice in the request", None);
    };
    if !data.starts_with(b"OggS") {
        return error_response(
            400,
            "Bad Request: VOICE_MESSAGES_FORBIDDEN or not OGG/OPUS",
            None,
        );
    }
    let mut script = shared.lock();
    if script.blocked.contains(&chat) {
        return Failure::blocked_by_user().response();
    }
    script.next_message_id += 1;
    let message_id = script.next_message_id;
    let chat_id = chat.parse::<i64>().unwrap_or_default();
    ok(json!({
        "message_id": message_id,
        "from": {"id": shared.bot_id, "is_bot": true, "first_name": "Acme Assistant", "username": BOT_USERNAME},
        "chat": {"id": chat_id, "type": if chat_id > 0 { "private" } else { "supergroup" }},
        "date": jiff::Timestamp::now().as_second(),
        "voice": {"file_id": format!("AwACAgIAAxk-voice-{message_id}"), "file_unique_id": "AgADvoice",
                  "duration": 1, "mime_type": "audio/ogg", "file_size": data.len()},
    }))
}

/// Checks an inline keyboard as Telegram does: rows of buttons, each with a text and
/// `callback_data` of 1 to 64 bytes (or a `url`).
fn check_keyboard(markup: &Value) -> Result<(), String> {
    if markup.is_null() {
        return Ok(());
    }
    let rows = markup["inline_keyboard"]
        .as_array()
        .ok_or("field \"inline_keyboard\" of the InlineKeyboardMarkup must be an Array")?;
    for button in rows
        .iter()
        .flat_map(|row| row.as_array().cloned().unwrap_or_default())
    {
        if button["text"].as_str().is_none_or(str::is_empty) {
            return Err("BUTTON_TEXT_INVALID".to_string());
        }
        match button["callback_data"].as_str() {
            Some(data) if (1..=64).contains(&data.len()) => {}
            None if button["url"].is_string() => {}
            _ => return Err("BUTTON_DATA_INVALID".to_string()),
        }
    }
    Ok(())
}

async fn download(
    State(shared): State<Shared>,
    Path((bot, path)): Path<(String, String)>,
) -> Response {
    let authorised =
        bot.strip_prefix("bot") == Some(shared.token.lock().expect("token lock").as_str());
    let index = record(&shared, format!("file/{path}"), authorised, Value::Null);
    let file = shared
        .lock()
        .files
        .values()
        .find(|(file_path, _)| *file_path == path)
        .map(|(_, data)| data.clone());
    let response = match file {
        Some(data) if authorised => data.into_response(),
        _ => error_response(404, "Not Found", None),
    };
    answered(&shared, index, response)
}
