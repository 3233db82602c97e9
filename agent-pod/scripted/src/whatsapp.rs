//! A scripted WhatsApp Cloud API for tests: a real HTTP server on loopback that speaks
//! the Graph API as Meta documents it (send and read-receipt answers, media lookups,
//! error bodies with their codes), checks the bearer token, records every request, and
//! answers from a queue of scripted failures before succeeding. Interactive reply-button
//! messages are checked against the Cloud API's limits (body of at most 1,024
//! characters, one to three buttons with titles of at most 20 characters and unique ids
//! of at most 256). Also builds webhook deliveries signed the way Meta signs them, a
//! button reply among them.

use std::{
    collections::{HashMap, VecDeque},
    net::SocketAddr,
    sync::{Arc, Mutex},
};

use axum::{
    Json, Router,
    body::Bytes,
    extract::{Path, State},
    http::{HeaderMap, StatusCode, header},
    response::{IntoResponse, Response},
    routing::{get, post},
};
use hmac::{Hmac, Mac};
use serde_json::{Value, json};
use sha2::Sha256;

/// The Graph API version in the scripted server's paths.
pub const API_VERSION: &str = "v21.0";

/// One request the server received.
#[derive(Clone, Debug)]
pub struct GraphRequest {
    /// `GET` or `POST`.
    pub method: String,
    /// Path, version included.
    pub path: String,
    /// The bearer token presented, if any.
    pub bearer: Option<String>,
    /// The JSON body (`null` for none).
    pub body: Value,
    /// When it arrived.
    pub at: std::time::Instant,
}

impl GraphRequest {
    /// The text of a text-message send, if this is one.
    pub fn sent_text(&self) -> Option<&str> {
        (self.body["type"] == "text")
            .then(|| self.body["text"]["body"].as_str())
            .flatten()
    }

    /// The recipient of a send.
    pub fn to(&self) -> Option<&str> {
        self.body["to"].as_str()
    }

    /// The body text of an interactive send, if this is one.
    pub fn interactive_text(&self) -> Option<&str> {
        (self.body["type"] == "interactive")
            .then(|| self.body["interactive"]["body"]["text"].as_str())
            .flatten()
    }

    /// The reply buttons of an interactive send, as (id, title).
    pub fn reply_buttons(&self) -> Vec<(String, String)> {
        self.body["interactive"]["action"]["buttons"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|button| {
                let text = |value: &Value| value.as_str().unwrap_or_default().to_string();
                (
                    text(&button["reply"]["id"]),
                    text(&button["reply"]["title"]),
                )
            })
            .collect()
    }

    /// The `wamid` the server gave a send that succeeded.
    pub fn message_id(&self) -> Option<&str> {
        self.body["delivered_id"].as_str()
    }
}

/// A scripted failure.
#[derive(Clone, Debug)]
pub struct Failure {
    status: u16,
    code: i64,
    message: String,
    retry_after: Option<u64>,
}

impl Failure {
    /// 429 with the Cloud API's throughput error (code 130429).
    pub fn rate_limited(retry_after_seconds: Option<u64>) -> Self {
        Self {
            status: 429,
            code: 130429,
            message: "(#130429) Rate limit hit".to_string(),
            retry_after: retry_after_seconds,
        }
    }

    /// 500 with the API's generic unknown error (code 1).
    pub fn server_error() -> Self {
        Self {
            status: 500,
            code: 1,
            message: "An unknown error occurred".to_string(),
            retry_after: None,
        }
    }

    /// 400 with code 131047: the 24-hour window has closed.
    pub fn reengagement() -> Self {
        Self {
            status: 400,
            code: 131047,
            message: "(#131047) Re-engagement message".to_string(),
            retry_after: None,
        }
    }

    /// 400 with code 100 (an invalid parameter).
    pub fn invalid_parameter() -> Self {
        Self {
            status: 400,
            code: 100,
            message: "(#100) Invalid parameter".to_string(),
            retry_after: None,
        }
    }

    fn response(&self) -> Response {
        let body = json!({"error": {
            "message": self.message,
            "type": "OAuthException",
            "code": self.code,
            "fbtrace_id": "AbCdEfGhIjK",
        }});
        let mut response = (
            StatusCode::from_u16(self.status).expect("scripted statuses are valid"),
            Json(body),
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

#[derive(Default)]
struct Script {
    requests: Vec<GraphRequest>,
    send_failures: VecDeque<Failure>,
    media: HashMap<String, (String, Vec<u8>)>,
    /// Media uploaded to `/<phone-id>/media`, as (id, bytes), in order.
    uploads: Vec<(String, Vec<u8>)>,
    sent: u64,
}

#[derive(Clone)]
struct Shared {
    sent: Arc<tokio::sync::Notify>,
    script: Arc<Mutex<Script>>,
    token: Arc<Mutex<String>>,
    base: String,
}

/// The server; stops when dropped.
pub struct ScriptedGraph {
    shared: Shared,
    address: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ScriptedGraph {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ScriptedGraph {
    /// Starts on a free loopback port, accepting `access_token`.
    pub async fn start(access_token: &str) -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let address = listener.local_addr()?;
        let shared = Shared {
            sent: Arc::default(),
            script: Arc::default(),
            token: Arc::new(Mutex::new(access_token.to_string())),
            base: format!("http://{address}"),
        };
        let router = Router::new()
            .route("/{version}/{id}/messages", post(messages))
            .route("/{version}/{id}/media", post(upload))
            .route("/{version}/{id}", get(media_info))
            .route("/media-download/{id}", get(media_download))
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

    /// The base URL to put in `settings.apiBaseUrl` (version included).
    pub fn base_url(&self) -> String {
        format!("http://{}/{API_VERSION}", self.address)
    }

    /// Answers the next sends with `failures`, in order, before succeeding again.
    pub fn fail_next_sends(&self, failures: impl IntoIterator<Item = Failure>) {
        self.lock().send_failures.extend(failures);
    }

    /// Serves `data` as media `id`.
    pub fn add_media(&self, id: &str, mime_type: &str, data: Vec<u8>) {
        self.lock()
            .media
            .insert(id.to_string(), (mime_type.to_string(), data));
    }

    /// Accepts only `token` from now on (to script a revoked token).
    pub fn set_token(&self, token: &str) {
        *self.shared.token.lock().expect("token lock") = token.to_string();
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<GraphRequest> {
        self.lock().requests.clone()
    }

    /// Media uploaded so far, as (media id, bytes), in order.
    pub fn uploads(&self) -> Vec<(String, Vec<u8>)> {
        self.lock().uploads.clone()
    }

    /// Sends that succeeded (any type), their bodies in order.
    pub fn delivered(&self) -> Vec<Value> {
        self.lock()
            .requests
            .iter()
            .filter(|request| request.body["delivered"] == true)
            .map(|request| request.body.clone())
            .collect()
    }

    /// Text sends that succeeded, as (recipient, text), in order.
    pub fn delivered_texts(&self) -> Vec<(String, String)> {
        self.lock()
            .requests
            .iter()
            .filter(|request| request.body["delivered"] == true)
            .filter_map(|request| {
                Some((request.to()?.to_string(), request.sent_text()?.to_string()))
            })
            .collect()
    }

    /// Waits until `count` text sends succeeded in all, or `timeout` passed; returns
    /// whether they did.
    pub async fn wait_for_sent(&self, count: u64, timeout: std::time::Duration) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let notified = self.shared.sent.notified();
            if self.lock().sent >= count {
                return true;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return self.lock().sent >= count;
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Script> {
        self.shared.script.lock().expect("script lock")
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

fn invalid_token() -> Response {
    Failure {
        status: 401,
        code: 190,
        message: "Invalid OAuth access token - Cannot parse access token".to_string(),
        retry_after: None,
    }
    .response()
}

// Records the request; `Err` carries the answer when the token is wrong.
fn record(
    shared: &Shared,
    method: &str,
    path: String,
    headers: &HeaderMap,
    body: Value,
) -> Result<usize, Box<Response>> {
    let bearer = bearer(headers);
    let authorised = bearer.as_deref() == Some(shared.token.lock().expect("token lock").as_str());
    let mut script = shared.script.lock().expect("script lock");
    script.requests.push(GraphRequest {
        method: method.to_string(),
        path,
        bearer,
        body,
        at: std::time::Instant::now(),
    });
    if authorised {
        Ok(script.requests.len() - 1)
    } else {
        Err(Box::new(invalid_token()))
    }
}

async fn messages(
    State(shared): State<Shared>,
    Path((version, id)): Path<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let parsed: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let index = match record(
        &shared,
        "POST",
        format!("/{version}/{id}/messages"),
        &headers,
        parsed.clone(),
    ) {
        Ok(index) => index,
        Err(response) => return *response,
    };
    if parsed["messaging_product"] != "whatsapp" {
        return Failure::invalid_parameter().response();
    }
    if parsed["status"] == "read" {
        return Json(json!({"success": true})).into_response();
    }
    let mut script = shared.script.lock().expect("script lock");
    if let Some(failure) = script.send_failures.pop_front() {
        return failure.response();
    }
    let Some(to) = parsed["to"].as_str().map(str::to_string) else {
        return Failure::invalid_parameter().response();
    };
    if parsed["type"] == "text"
        && parsed["text"]["body"]
            .as_str()
            .is_none_or(|text| text.chars().count() > 4_096 || text.is_empty())
    {
        return Failure::invalid_parameter().response();
    }
    if parsed["type"] == "interactive" && !reply_buttons_fit(&parsed["interactive"]) {
        return Failure::invalid_parameter().response();
    }
    // Audio is sent by the id of an upload (or a link, not scripted here).
    if parsed["type"] == "audio"
        && parsed["audio"]["id"]
            .as_str()
            .is_none_or(|id| !script.media.contains_key(id))
    {
        return Failure::invalid_parameter().response();
    }
    script.sent += 1;
    let message_id = format!("wamid.OUT{:06}", script.sent);
    script.requests[index].body["delivered"] = json!(true);
    script.requests[index].body["delivered_id"] = json!(message_id);
    shared.sent.notify_waiters();
    Json(json!({
        "messaging_product": "whatsapp",
        "contacts": [{"input": to, "wa_id": to}],
        "messages": [{"id": message_id}],
    }))
    .into_response()
}

/// `POST /<phone-id>/media`: a multipart upload with `messaging_product=whatsapp`, the
/// `file` and its `type`; answers the new media id, which `GET /<id>` then serves.
async fn upload(
    State(shared): State<Shared>,
    Path((version, id)): Path<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default();
    let form = crate::form_parameters(content_type, &body);
    let mut recorded = form.clone();
    if let Some(file) = recorded.get_mut("file").and_then(Value::as_object_mut) {
        // The bytes are kept in `uploads`; the request record stays small.
        file.remove("base64");
    }
    if let Err(response) = record(
        &shared,
        "POST",
        format!("/{version}/{id}/media"),
        &headers,
        recorded,
    ) {
        return *response;
    }
    let data = crate::file_bytes(&form["file"]);
    let (Some(data), true) = (data, form["messaging_product"] == "whatsapp") else {
        return Failure::invalid_parameter().response();
    };
    let mime_type = form["file"]["contentType"]
        .as_str()
        .unwrap_or("application/octet-stream")
        .to_string();
    let mut script = shared.script.lock().expect("script lock");
    let media_id = format!("{}", 900_000_000_000_000u64 + script.uploads.len() as u64);
    script
        .media
        .insert(media_id.clone(), (mime_type, data.clone()));
    script.uploads.push((media_id.clone(), data));
    Json(json!({"id": media_id})).into_response()
}

async fn media_info(
    State(shared): State<Shared>,
    Path((version, id)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    if let Err(response) = record(
        &shared,
        "GET",
        format!("/{version}/{id}"),
        &headers,
        Value::Null,
    ) {
        return *response;
    }
    let script = shared.script.lock().expect("script lock");
    match script.media.get(&id) {
        Some((mime_type, data)) => Json(json!({
            "messaging_product": "whatsapp",
            "url": format!("{}/media-download/{id}", shared.base),
            "mime_type": mime_type,
            "sha256": hex::encode(<Sha256 as sha2::Digest>::digest(data)),
            "file_size": data.len(),
            "id": id,
        }))
        .into_response(),
        None => Failure {
            status: 404,
            code: 100,
            message: "Unsupported get request.".to_string(),
            retry_after: None,
        }
        .response(),
    }
}

async fn media_download(
    State(shared): State<Shared>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    if let Err(response) = record(
        &shared,
        "GET",
        format!("/media-download/{id}"),
        &headers,
        Value::Null,
    ) {
        return *response;
    }
    let script = shared.script.lock().expect("script lock");
    match script.media.get(&id) {
        Some((mime_type, data)) => {
            ([(header::CONTENT_TYPE, mime_type.clone())], data.clone()).into_response()
        }
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

/// The `X-Hub-Signature-256` value Meta sends for `body`.
/// Whether an `interactive` object is a reply-button message within the Cloud API's
/// limits.
fn reply_buttons_fit(interactive: &Value) -> bool {
    let length = |value: &Value| value.as_str().map_or(0, |text| text.chars().count());
    let buttons = interactive["action"]["buttons"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let mut ids: Vec<&str> = buttons
        .iter()
        .filter_map(|button| button["reply"]["id"].as_str())
        .collect();
    ids.sort_unstable();
    ids.dedup();
    interactive["type"] == "button"
        && (1..=1_024).contains(&length(&interactive["body"]["text"]))
        && (1..=3).contains(&buttons.len())
        && ids.len() == buttons.len()
        && buttons.iter().all(|button| {
            button["type"] == "reply"
                && (1..=256).contains(&length(&button["reply"]["id"]))
                && (1..=20).contains(&length(&button["reply"]["title"]))
        })
}

pub fn signature(app_secret: &str, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(app_secret.as_bytes()).expect("any key length");
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// A webhook delivery of one text message, as the Cloud API sends it.
pub fn text_delivery(phone_number_id: &str, from: &str, message_id: &str, text: &str) -> Value {
    delivery(
        phone_number_id,
        from,
        json!({"from": from, "id": message_id, "timestamp": jiff::Timestamp::now().as_second().to_string(),
               "type": "text", "text": {"body": text}}),
    )
}

/// A webhook delivery of `from` pressing the reply button `id` (titled `title`) of the
/// bot's message `answered` (its `wamid`), as the Cloud API sends it.
pub fn button_reply_delivery(
    phone_number_id: &str,
    from: &str,
    message_id: &str,
    answered: &str,
    id: &str,
    title: &str,
) -> Value {
    delivery(
        phone_number_id,
        from,
        json!({"context": {"from": "15550783881", "id": answered},
               "from": from, "id": message_id,
               "timestamp": jiff::Timestamp::now().as_second().to_string(),
               "type": "interactive",
               "interactive": {"type": "button_reply", "button_reply": {"id": id, "title": title}}}),
    )
}

/// A webhook delivery of one media message (`kind`: image, document, audio).
pub fn media_delivery(
    phone_number_id: &str,
    from: &str,
    message_id: &str,
    kind: &str,
    media: Value,
) -> Value {
    let mut message = json!({"from": from, "id": message_id,
        "timestamp": jiff::Timestamp::now().as_second().to_string(), "type": kind});
    message[kind] = media;
    delivery(phone_number_id, from, message)
}

/// A delivery wrapping `message` from `from`.
pub fn delivery(phone_number_id: &str, from: &str, message: Value) -> Value {
    json!({
        "object": "whatsapp_business_account",
        "entry": [{
            "id": "102290129340398",
            "changes": [{
                "field": "messages",
                "value": {
                    "messaging_product": "whatsapp",
                    "metadata": {"display_phone_number": "15550783881", "phone_number_id": phone_number_id},
                    "contacts": [{"profile": {"name": "Test Sender"}, "wa_id": from}],
                    "messages": [message],
                },
            }],
        }],
    })
}
