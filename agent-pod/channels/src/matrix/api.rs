//! The client-server API calls the channel makes, and the transport built on them:
//! `PUT /rooms/{room}/send/m.room.message/{txnId}` for replies (the transaction id is
//! derived from the reply, so the homeserver drops a send repeated after a crash),
//! direct rooms found or created for messages to a person, read receipts, and
//! authenticated media downloads. Errors are classified by the homeserver's `errcode`:
//! rate limits and server errors are retried (after `retry_after_ms`), a refused token
//! stops the channel, the rest fail the message with the homeserver's reason.

use std::{
    collections::{HashMap, HashSet},
    time::Duration,
};

use futures::future::BoxFuture;
use reqwest::{Method, Url};
use saint_config::{ChannelIdentity, ChannelKind};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::{MAX_TEXT_CHARS, MatrixSettings, render};
use crate::{
    http_client::Download,
    message::{AttachmentRef, FileKind, FilePayload, InboundMessage, ReplyContext},
    transport::{SendError, Transport},
};
use parking_lot::Mutex;

/// Most bytes of text (`body` and `formatted_body` together) in one event, leaving
/// room under the homeserver's 65,536-byte event limit for the rest of the event.
const MAX_CONTENT_BYTES: usize = 60_000;

/// Event ids of the bot's own messages remembered, to recognise replies to the bot
/// without asking the homeserver (older ones are looked up).
const REMEMBERED_SENT: usize = 4_096;

/// Talks to one homeserver as the bot account.
pub struct MatrixApi {
    pub(crate) settings: MatrixSettings,
    http: reqwest::Client,
    /// Direct rooms found or created, by the other person's user id.
    direct_rooms: Mutex<HashMap<String, String>>,
    /// Event ids the bot sent recently.
    sent: Mutex<HashSet<String>>,
    /// The bot's `m.direct` account data: the rooms marked direct, by the other
    /// person's user id.
    marked_direct: Mutex<HashMap<String, HashSet<String>>>,
    /// Held while the bot's `m.direct` account data is read and rewritten.
    direct_update: tokio::sync::Mutex<()>,
}

/// The transaction id of part `part` of a reply with `text` into `room`: the same
/// outbox row always gets the same id, so the homeserver treats a retried send (after
/// a crash between sending and recording it) as the same event, and two rows with the
/// same text (a reminder sent twice) are two events.
pub fn transaction_id(room: &str, text: &str, part: usize, context: &ReplyContext) -> String {
    let mut hash = Sha256::new();
    for field in [
        room,
        text,
        &part.to_string(),
        &context
            .outbox_id
            .map(|id| id.to_string())
            .unwrap_or_default(),
        context.reply_to.as_deref().unwrap_or(""),
        context.thread.as_deref().unwrap_or(""),
    ] {
        hash.update(field.as_bytes());
        hash.update([0]);
    }
    format!("saint-{}", &hex::encode(hash.finalize())[..32])
}

fn network_error(error: reqwest::Error) -> SendError {
    crate::http_client::unreachable("matrix: homeserver", error)
}

/// The homeserver's answer classified: `errcode` first, then the status.
pub(crate) fn classify(status: u16, body: &[u8], retry_after: Option<Duration>) -> SendError {
    let error: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let errcode = error["errcode"].as_str().unwrap_or("");
    let message = error["error"].as_str().map_or_else(
        || String::from_utf8_lossy(body).chars().take(200).collect(),
        str::to_string,
    );
    let reason = match errcode {
        "" => format!("matrix: {message} (HTTP {status})"),
        errcode => format!("matrix: {message} (HTTP {status}, {errcode})"),
    };
    if status == 429 || errcode == "M_LIMIT_EXCEEDED" {
        let after = error["retry_after_ms"]
            .as_u64()
            .map(Duration::from_millis)
            .or(retry_after);
        return SendError::Retry { reason, after };
    }
    if matches!(errcode, "M_UNKNOWN_TOKEN" | "M_MISSING_TOKEN") || status == 401 {
        return SendError::Credentials { reason };
    }
    if status >= 500 {
        return SendError::Retry {
            reason,
            after: retry_after,
        };
    }
    SendError::Permanent { reason }
}

impl MatrixApi {
    /// A client for `settings` (no I/O).
    pub fn new(settings: MatrixSettings) -> Self {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .build()
            .expect("a client with timeouts builds");
        Self {
            settings,
            http,
            direct_rooms: Mutex::new(HashMap::new()),
            sent: Mutex::new(HashSet::new()),
            marked_direct: Mutex::new(HashMap::new()),
            direct_update: tokio::sync::Mutex::new(()),
        }
    }

    /// `<homeserver>/_matrix/client/<version>/<segments…>`, each segment escaped.
    pub(crate) fn url(&self, version: &str, segments: &[&str]) -> Url {
        let mut url = Url::parse(&self.settings.homeserver_url).expect("checked when read");
        url.path_segments_mut()
            .expect("an http(s) URL has a path")
            .pop_if_empty()
            .extend(["_matrix", "client", version])
            .extend(segments);
        url
    }

    /// One request: the status, body and `Retry-After`, or a network failure.
    pub(crate) async fn call_raw(
        &self,
        method: Method,
        url: Url,
        body: Option<&Value>,
        timeout: Duration,
    ) -> Result<(u16, bytes::Bytes, Option<Duration>), SendError> {
        let mut request = self
            .http
            .request(method, url)
            .bearer_auth(&self.settings.access_token)
            .timeout(timeout);
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request.send().await.map_err(network_error)?;
        let status = response.status().as_u16();
        let retry_after = retry_after(response.headers());
        let body = response.bytes().await.map_err(network_error)?;
        Ok((status, body, retry_after))
    }

    /// One request; the JSON answer, or the error classified.
    pub(crate) async fn call(
        &self,
        method: Method,
        url: Url,
        body: Option<&Value>,
        timeout: Duration,
    ) -> Result<Value, SendError> {
        let (status, body, retry_after) = self.call_raw(method, url, body, timeout).await?;
        if !(200..300).contains(&status) {
            return Err(classify(status, &body, retry_after));
        }
        serde_json::from_slice(&body).map_err(|error| SendError::Retry {
            reason: format!("matrix: unreadable answer from the homeserver: {error}"),
            after: None,
        })
    }

    /// A room's state event content of `event_type` (empty state key), `None` if the
    /// room has none.
    pub(crate) async fn state(
        &self,
        room: &str,
        event_type: &str,
    ) -> Result<Option<Value>, SendError> {
        let (status, body, retry_after) = self
            .call_raw(
                Method::GET,
                self.url("v3", &["rooms", room, "state", event_type]),
                None,
                Duration::from_secs(60),
            )
            .await?;
        match status {
            200..300 => serde_json::from_slice(&body)
                .map(Some)
                .map_err(|error| SendError::Retry {
                    reason: format!("matrix: unreadable room state: {error}"),
                    after: None,
                }),
            404 => Ok(None),
            _ => Err(classify(status, &body, retry_after)),
        }
    }

    pub(crate) async fn get(&self, segments: &[&str]) -> Result<Value, SendError> {
        self.call(
            Method::GET,
            self.url("v3", segments),
            None,
            Duration::from_secs(60),
        )
        .await
    }

    pub(crate) async fn post(&self, segments: &[&str], body: &Value) -> Result<Value, SendError> {
        self.call(
            Method::POST,
            self.url("v3", segments),
            Some(body),
            Duration::from_secs(60),
        )
        .await
    }

    /// Sends `content` as an `m.room.message` with transaction id `transaction`;
    /// returns the event id.
    pub(crate) async fn send_message(
        &self,
        room: &str,
        transaction: &str,
        content: &Value,
    ) -> Result<String, SendError> {
        let answer = self
            .call(
                Method::PUT,
                self.url(
                    "v3",
                    &["rooms", room, "send", "m.room.message", transaction],
                ),
                Some(content),
                Duration::from_secs(60),
            )
            .await?;
        let event_id = answer_text(&answer, "event_id", "a send names no event id")?;
        self.remember_sent(&event_id);
        Ok(event_id)
    }

    /// Uploads `file` to the media repository (`POST /_matrix/media/v3/upload`);
    /// returns its `mxc://` URI.
    async fn upload(&self, file: &FilePayload) -> Result<String, SendError> {
        let mut url = Url::parse(&self.settings.homeserver_url).expect("checked when read");
        url.path_segments_mut()
            .expect("an http(s) URL has a path")
            .pop_if_empty()
            .extend(["_matrix", "media", "v3", "upload"]);
        url.query_pairs_mut()
            .append_pair("filename", &file.file_name);
        let response = self
            .http
            .post(url)
            .bearer_auth(&self.settings.access_token)
            .header(http::header::CONTENT_TYPE, &file.mime_type)
            .body(file.bytes.clone())
            .timeout(Duration::from_secs(300))
            .send()
            .await
            .map_err(network_error)?;
        let status = response.status().as_u16();
        let after = retry_after(response.headers());
        let body = response.bytes().await.map_err(network_error)?;
        if !(200..300).contains(&status) {
            return Err(classify(status, &body, after));
        }
        let answer: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        answer["content_uri"]
            .as_str()
            .filter(|uri| media_parts(uri).is_some())
            .map(str::to_string)
            .ok_or_else(|| SendError::Retry {
                reason: "matrix: the answer to an upload names no mxc:// content_uri".to_string(),
                after: None,
            })
    }

    pub(crate) fn remember_sent(&self, event_id: &str) {
        let mut sent = self.sent.lock();
        if sent.len() >= REMEMBERED_SENT {
            sent.clear();
        }
        sent.insert(event_id.to_string());
    }

    /// Whether the bot sent event `event_id` in `room` (remembered, else asked).
    pub(crate) async fn sent_by_bot(&self, room: &str, event_id: &str) -> bool {
        if self.sent.lock().contains(event_id) {
            return true;
        }
        match self.get(&["rooms", room, "event", event_id]).await {
            Ok(event) => event["sender"].as_str() == Some(self.settings.user()),
            Err(error) => {
                tracing::debug!(channel = %self.settings.channel, %room, %event_id, %error, "matrix: the replied-to event could not be read");
                false
            }
        }
    }

    /// Users who joined or are invited to `room`.
    pub(crate) async fn present_members(&self, room: &str) -> Result<Vec<String>, SendError> {
        let answer = self.get(&["rooms", room, "members"]).await?;
        Ok(answer["chunk"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|event| {
                matches!(
                    event["content"]["membership"].as_str(),
                    Some("join" | "invite")
                )
            })
            .filter_map(|event| event["state_key"].as_str().map(str::to_string))
            .collect())
    }

    /// A room for messages between the bot and `user` alone: one marked direct with
    /// that person that the bot is in with only them (joined or invited), else a new
    /// direct room inviting them.
    async fn direct_room(&self, user: &str) -> Result<(String, bool), SendError> {
        if let Some(room) = self.direct_rooms.lock().get(user) {
            return Ok((room.clone(), true));
        }
        let joined = self.get(&["joined_rooms"]).await?;
        for room in joined["joined_rooms"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .filter(|room| self.is_marked_direct(user, room))
        {
            let mut members = self.present_members(room).await?;
            members.sort();
            let mut expected = vec![user.to_string(), self.settings.user().to_string()];
            expected.sort();
            if members == expected {
                self.remember_direct(user, room);
                return Ok((room.to_string(), false));
            }
        }
        let created = self
            .post(
                &["createRoom"],
                &json!({"is_direct": true, "invite": [user], "preset": "trusted_private_chat"}),
            )
            .await?;
        let room = answer_text(&created, "room_id", "createRoom names no room")?;
        tracing::info!(channel = %self.settings.channel, %user, %room, "matrix: opened a direct room");
        // Best effort: the room is remembered in this process either way.
        if let Err(error) = self.mark_direct(user, &room).await {
            tracing::warn!(channel = %self.settings.channel, %user, %room, %error, "matrix: could not mark a new room direct in the account data");
        }
        self.remember_direct(user, &room);
        Ok((room, false))
    }

    fn remember_direct(&self, user: &str, room: &str) {
        self.direct_rooms
            .lock()
            .insert(user.to_string(), room.to_string());
    }

    /// Forgets the direct room found for anyone in `room` (its members changed): the
    /// next message to them looks again.
    pub(crate) fn forget_direct_room(&self, room: &str) {
        self.direct_rooms.lock().retain(|_, cached| cached != room);
    }

    /// Whether the bot's `m.direct` account data marks `room` direct with `user`.
    pub(crate) fn is_marked_direct(&self, user: &str, room: &str) -> bool {
        self.marked_direct
            .lock()
            .get(user)
            .is_some_and(|rooms| rooms.contains(room))
    }

    /// Takes `content` (an `m.direct` account data event's) as the rooms marked direct.
    pub(crate) fn set_marked_direct(&self, content: &Value) {
        *self.marked_direct.lock() = direct_marks(content);
    }

    /// Reads the bot's `m.direct` account data (none yet is none marked).
    pub(crate) async fn load_marked_direct(&self) -> Result<(), SendError> {
        let content = self.account_direct().await?;
        self.set_marked_direct(&content);
        Ok(())
    }

    async fn account_direct(&self) -> Result<Value, SendError> {
        let user = self.settings.user();
        let (status, body, retry_after) = self
            .call_raw(
                Method::GET,
                self.url("v3", &["user", user, "account_data", "m.direct"]),
                None,
                Duration::from_secs(60),
            )
            .await?;
        match status {
            200..300 => serde_json::from_slice(&body).map_err(|error| SendError::Retry {
                reason: format!("matrix: unreadable m.direct account data: {error}"),
                after: None,
            }),
            404 => Ok(json!({})),
            _ => Err(classify(status, &body, retry_after)),
        }
    }

    /// Marks `room` direct with `user`: in this process, and in the bot's `m.direct`
    /// account data (read afresh and written back), where it outlives a restart.
    pub(crate) async fn mark_direct(&self, user: &str, room: &str) -> Result<(), SendError> {
        self.marked_direct
            .lock()
            .entry(user.to_string())
            .or_default()
            .insert(room.to_string());
        let _held = self.direct_update.lock().await;
        let mut content = self.account_direct().await?;
        if !content.is_object() {
            content = json!({});
        }
        let rooms = content[user].as_array().cloned().unwrap_or_default();
        if rooms.iter().any(|listed| listed == room) {
            return Ok(());
        }
        let mut rooms = rooms;
        rooms.push(json!(room));
        content[user] = Value::Array(rooms);
        self.call(
            Method::PUT,
            self.url(
                "v3",
                &["user", self.settings.user(), "account_data", "m.direct"],
            ),
            Some(&content),
            Duration::from_secs(60),
        )
        .await?;
        self.set_marked_direct(&content);
        Ok(())
    }
}

/// The rooms an `m.direct` content marks direct, by user id.
fn direct_marks(content: &Value) -> HashMap<String, HashSet<String>> {
    content
        .as_object()
        .into_iter()
        .flatten()
        .map(|(user, rooms)| {
            let rooms = rooms
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect();
            (user.clone(), rooms)
        })
        .collect()
}

use crate::http_client::retry_after;

/// `mxc://<server>/<media id>` split, refusing anything that would change the path.
fn media_parts(uri: &str) -> Option<(&str, &str)> {
    let (server, media) = uri.strip_prefix("mxc://")?.split_once('/')?;
    let server_ok = !server.is_empty()
        && server
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || b".-:[]".contains(&byte));
    let media_ok = !media.is_empty()
        && media
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || byte == b'_' || byte == b'-');
    (server_ok && media_ok).then_some((server, media))
}

/// The message content of one part of a reply.
pub(crate) fn reply_content(
    text: &str,
    context: &ReplyContext,
    part: usize,
    to: Option<&str>,
) -> Value {
    let body = render::plain_body(text);
    let formatted = render::markdown_to_html(text);
    let mut content = if body.len() + formatted.len() <= MAX_CONTENT_BYTES {
        json!({
            "msgtype": "m.text",
            "body": body,
            "format": "org.matrix.custom.html",
            "formatted_body": formatted,
        })
    } else {
        // Text of many-byte characters can make both together exceed an event's size
        // limit: the plain text alone always fits.
        json!({"msgtype": "m.text", "body": body})
    };
    let reply_to = context.reply_to.as_deref().filter(|_| part == 0);
    if let Some(thread) = context.thread.as_deref() {
        content["m.relates_to"] = in_thread(thread, context);
    } else if let Some(reply_to) = reply_to {
        content["m.relates_to"] = json!({"m.in_reply_to": {"event_id": reply_to}});
    }
    // Only the first part of a reply mentions the person answered.
    content["m.mentions"] = match (reply_to, to) {
        (Some(_), Some(user)) => json!({"user_ids": [user]}),
        _ => json!({}),
    };
    content
}

/// `answer[key]` as text; its absence (`"<request> names no <what>"`) is retried.
fn answer_text(answer: &Value, key: &str, absent: &str) -> Result<String, SendError> {
    let text = answer[key].as_str().map(str::to_string);
    text.ok_or_else(|| SendError::Retry {
        reason: format!("matrix: the answer to {absent}"),
        after: None,
    })
}

/// The relation of a message in `thread`; clients without threads see a reply to the
/// message answered (or to the thread's root).
fn in_thread(thread: &str, context: &ReplyContext) -> Value {
    json!({
        "rel_type": "m.thread",
        "event_id": thread,
        "is_falling_back": true,
        "m.in_reply_to": {"event_id": context.reply_to.as_deref().unwrap_or(thread)},
    })
}

impl Transport for MatrixApi {
    fn kind(&self) -> ChannelKind {
        ChannelKind::Matrix
    }

    fn max_chars(&self) -> usize {
        MAX_TEXT_CHARS
    }

    fn render(&self, markdown: &str) -> String {
        render::render(markdown)
    }

    fn send<'a>(
        &'a self,
        to: &'a ChannelIdentity,
        text: &'a str,
        context: &'a ReplyContext,
        part: usize,
    ) -> BoxFuture<'a, Result<String, SendError>> {
        Box::pin(async move {
            let (room, cached) = match context.chat.as_deref() {
                Some(room) => (room.to_string(), false),
                None => self.direct_room(to.peer()).await?,
            };
            let content = reply_content(text, context, part, Some(to.peer()));
            let sent = self
                .send_message(&room, &transaction_id(&room, text, part, context), &content)
                .await;
            match sent {
                // The remembered direct room is no longer the bot's (it left or was
                // removed): forget it and look again on the next attempt.
                Err(SendError::Permanent { reason })
                    if cached && reason.contains("M_FORBIDDEN") =>
                {
                    self.forget_direct_room(&room);
                    Err(SendError::Retry {
                        reason: format!("{reason}; the direct room will be looked up again"),
                        after: None,
                    })
                }
                sent => sent,
            }
        })
    }

    fn send_file<'a>(
        &'a self,
        to: &'a ChannelIdentity,
        file: &'a FilePayload,
        context: &'a ReplyContext,
    ) -> BoxFuture<'a, Result<String, SendError>> {
        Box::pin(async move {
            let room = match context.chat.as_deref() {
                Some(room) => room.to_string(),
                None => self.direct_room(to.peer()).await?.0,
            };
            // Uploaded first (a retry may upload again; the event is sent once: its
            // transaction id is the row's and the file's).
            let uri = self.upload(file).await?;
            let mut content = json!({
                "msgtype": "m.audio",
                "body": file.file_name,
                "filename": file.file_name,
                "url": uri,
                "info": {"mimetype": file.mime_type, "size": file.bytes.len()},
            });
            if file.kind == FileKind::Voice {
                // MSC3245: clients show it as a voice message.
                content["org.matrix.msc3245.voice"] = json!({});
                content["org.matrix.msc1767.audio"] = json!({});
            }
            if let Some(thread) = context.thread.as_deref() {
                content["m.relates_to"] = in_thread(thread, context);
            }
            let digest = hex::encode(Sha256::digest(&file.bytes));
            let transaction = transaction_id(&room, &digest, usize::MAX, context);
            self.send_message(&room, &transaction, &content).await
        })
    }

    fn mark_read<'a>(
        &'a self,
        message: &'a InboundMessage,
    ) -> BoxFuture<'a, Result<(), SendError>> {
        Box::pin(async move {
            let Some(room) = message.context.chat.as_deref() else {
                return Ok(());
            };
            self.post(
                &["rooms", room, "receipt", "m.read", &message.platform_id],
                &json!({}),
            )
            .await
            .map(drop)
        })
    }

    fn fetch_attachment<'a>(
        &'a self,
        attachment: &'a AttachmentRef,
        max_bytes: u64,
    ) -> BoxFuture<'a, Result<Vec<u8>, SendError>> {
        Box::pin(async move {
            let (server, media) =
                media_parts(&attachment.id).ok_or_else(|| SendError::Permanent {
                    reason: format!("matrix: {:?} is not an mxc:// media URI", attachment.id),
                })?;
            // Authenticated media (Matrix 1.11): the token is required.
            let response = self
                .http
                .get(self.url("v1", &["media", "download", server, media]))
                .bearer_auth(&self.settings.access_token)
                .timeout(Duration::from_secs(300))
                .send()
                .await
                .map_err(network_error)?;
            let status = response.status().as_u16();
            if !(200..300).contains(&status) {
                let after = retry_after(response.headers());
                let body = response.bytes().await.map_err(network_error)?;
                return Err(classify(status, &body, after));
            }
            let download = Download::of("matrix", attachment, max_bytes);
            download.read(response).await
        })
    }
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;

    use super::*;

    #[test]
    fn homeserver_answers_are_classified_by_errcode() {
        let limited = classify(
            429,
            br#"{"errcode":"M_LIMIT_EXCEEDED","error":"Too Many Requests","retry_after_ms":2500}"#,
            None,
        );
        assert_eq!(
            limited,
            SendError::Retry {
                reason: "matrix: Too Many Requests (HTTP 429, M_LIMIT_EXCEEDED)".into(),
                after: Some(Duration::from_millis(2500)),
            }
        );
        assert!(matches!(
            classify(
                401,
                br#"{"errcode":"M_UNKNOWN_TOKEN","error":"Invalid access token passed."}"#,
                None
            ),
            SendError::Credentials { .. }
        ));
        assert!(matches!(
            classify(
                403,
                br#"{"errcode":"M_FORBIDDEN","error":"not in room"}"#,
                None
            ),
            SendError::Permanent { .. }
        ));
        assert!(matches!(
            classify(502, b"Bad Gateway", Some(Duration::from_secs(3))),
            SendError::Retry { after: Some(after), .. } if after == Duration::from_secs(3)
        ));
    }

    #[test]
    fn transaction_ids_are_stable_per_reply_part_and_distinct_otherwise() {
        let context = ReplyContext {
            reply_to: Some("$event".into()),
            ..ReplyContext::default()
        };
        let id = transaction_id("!room:x", "hello", 0, &context);
        assert_eq!(id, transaction_id("!room:x", "hello", 0, &context));
        assert!(id.starts_with("saint-") && id.len() == 38);
        assert_ne!(id, transaction_id("!room:x", "hello", 1, &context));
        assert_ne!(id, transaction_id("!other:x", "hello", 0, &context));
        // The same text from another outbox row is another message.
        let next_row = ReplyContext {
            outbox_id: Some(context.outbox_id.unwrap_or(0) + 1),
            ..context.clone()
        };
        assert_ne!(id, transaction_id("!room:x", "hello", 0, &next_row));
        assert_ne!(
            id,
            transaction_id("!room:x", "hello", 0, &ReplyContext::default())
        );
    }

    #[test]
    fn replies_quote_on_the_first_part_and_stay_in_their_thread() {
        let context = ReplyContext {
            reply_to: Some("$asked".into()),
            thread: Some("$root".into()),
            ..ReplyContext::default()
        };
        let first = reply_content("**hi**", &context, 0, Some("@ana:x"));
        assert_eq!(first["formatted_body"], "<p><strong>hi</strong></p>");
        assert_eq!(first["body"], "**hi**");
        assert_eq!(
            first["m.relates_to"],
            json!({"rel_type": "m.thread", "event_id": "$root", "is_falling_back": true,
                   "m.in_reply_to": {"event_id": "$asked"}})
        );
        assert_eq!(first["m.mentions"], json!({"user_ids": ["@ana:x"]}));
        let plain = ReplyContext {
            reply_to: Some("$asked".into()),
            ..ReplyContext::default()
        };
        assert_eq!(
            reply_content("a", &plain, 0, None)["m.relates_to"],
            json!({"m.in_reply_to": {"event_id": "$asked"}})
        );
        let second = reply_content("b", &plain, 1, Some("@ana:x"));
        assert!(second.get("m.relates_to").is_none());
        assert_eq!(second["m.mentions"], json!({}));
    }

    #[test]
    fn a_part_too_big_with_its_html_is_sent_as_plain_text() {
        let emoji = "😀".repeat(MAX_TEXT_CHARS);
        let content = reply_content(&emoji, &ReplyContext::default(), 0, None);
        assert_eq!(content["body"], emoji.as_str());
        assert!(content.get("formatted_body").is_none());
        assert!(content.get("format").is_none());
        let ascii = "a".repeat(MAX_TEXT_CHARS);
        let content = reply_content(&ascii, &ReplyContext::default(), 0, None);
        assert_eq!(content["format"], "org.matrix.custom.html");
    }

    #[test]
    fn only_plain_mxc_uris_are_fetched() {
        assert_eq!(
            media_parts("mxc://localhost/AbC_12-x"),
            Some(("localhost", "AbC_12-x"))
        );
        for bad in [
            "mxc://localhost/../admin",
            "mxc://localhost/a/b",
            "https://x/y",
            "mxc:///x",
            "mxc://host/",
            "mxc://ho st/x",
        ] {
            assert_eq!(media_parts(bad), None, "{bad}");
        }
    }
}
