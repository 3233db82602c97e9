//! The REST client: `POST /channels/{id}/messages` for replies (opening a DM channel
//! with `POST /users/@me/channels` when the bot writes to a person first),
//! `GET /gateway/bot` for the Gateway's address, and attachment downloads. Rate limits
//! are kept per route: an answer saying none remain makes the next send on that route
//! wait for the bucket to refill, and a 429 is retried after Discord's `retry_after`.
//!
//! Each part of a reply carries a `nonce` derived from its outbox row, with
//! `enforce_nonce`: Discord then creates no second message for a send repeated within a
//! few minutes (a retry after the agent died between Discord taking the message and the
//! outbox recording it), and answers with the message it made the first time.

use std::{collections::HashMap, time::Duration};

use futures::future::BoxFuture;
use http::{HeaderMap, Method};
use saint_config::{ChannelIdentity, ChannelKind};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::time::Instant;

use super::{
    DiscordSettings, MAX_TEXT_CHARS,
    interaction::{Interaction, approval_components},
    render::markdown_to_discord,
};
use crate::{
    http_client::Download,
    message::{AttachmentRef, FilePayload, ReplyContext},
    transport::{SendError, Transport},
};
use parking_lot::Mutex;

/// Talks to Discord's REST API for one channel.
pub struct RestClient {
    settings: DiscordSettings,
    http: reqwest::Client,
    /// Route → when its bucket refills, after an answer said nothing remains in it.
    exhausted: Mutex<HashMap<String, Instant>>,
    /// User id → the DM channel opened with them.
    direct_channels: Mutex<HashMap<String, String>>,
}

#[derive(Deserialize)]
struct ErrorBody {
    #[serde(default)]
    message: String,
    #[serde(default)]
    code: i64,
    #[serde(default)]
    retry_after: Option<f64>,
}

#[derive(Deserialize)]
struct Created {
    id: String,
}

#[derive(Deserialize)]
struct GatewayBot {
    url: String,
}

impl RestClient {
    /// A client for `settings`.
    pub fn new(settings: DiscordSettings) -> Self {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .timeout(Duration::from_secs(60))
            // Discord asks bots to name themselves this way.
            .user_agent(concat!(
                "DiscordBot (https://github.com/saint-work/saint, ",
                env!("CARGO_PKG_VERSION"),
                ")"
            ))
            .build()
            .expect("a client with timeouts builds");
        Self {
            settings,
            http,
            exhausted: Mutex::default(),
            direct_channels: Mutex::default(),
        }
    }

    /// The Gateway's address (`GET /gateway/bot`).
    pub async fn gateway_url(&self) -> Result<String, SendError> {
        let answer = self
            .request(Method::GET, "GET /gateway/bot", "gateway/bot", None)
            .await?;
        let gateway: GatewayBot =
            serde_json::from_value(answer).map_err(|error| SendError::Retry {
                reason: format!("discord: unreadable answer from /gateway/bot: {error}"),
                after: None,
            })?;
        Ok(gateway.url)
    }

    /// Acknowledges a button press (callback type 6, a deferred update: the message
    /// stays as it is; the decision is answered as a message of its own).
    pub async fn acknowledge(&self, interaction: &Interaction) -> Result<(), SendError> {
        let id = snowflake(&interaction.id)?;
        // The token goes into the path: only URL-safe characters.
        if interaction.token.is_empty()
            || !interaction
                .token
                .bytes()
                .all(|byte| byte.is_ascii_alphanumeric() || b"-_.".contains(&byte))
        {
            return Err(SendError::Permanent {
                reason: "discord: an interaction token that is not URL-safe".to_string(),
            });
        }
        self.request(
            Method::POST,
            "POST /interactions/{id}/{token}/callback",
            &format!("interactions/{id}/{}/callback", interaction.token),
            Some(json!({"type": 6})),
        )
        .await
        .map(drop)
    }

    /// One authenticated call; `route` keys its rate-limit bucket.
    async fn request(
        &self,
        method: Method,
        route: &str,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value, SendError> {
        self.request_with(method, route, path, |request| match &body {
            Some(body) => request.json(body),
            None => request,
        })
        .await
    }

    /// One authenticated call whose body `body` sets (JSON, or a multipart upload).
    async fn request_with(
        &self,
        method: Method,
        route: &str,
        path: &str,
        body: impl FnOnce(reqwest::RequestBuilder) -> reqwest::RequestBuilder,
    ) -> Result<Value, SendError> {
        let refill = self.exhausted.lock().get(route).copied();
        if let Some(refill) = refill.filter(|refill| *refill > Instant::now()) {
            tracing::debug!(channel = %self.settings.channel, route, wait_ms = (refill - Instant::now()).as_millis() as u64,
                "discord: rate-limit bucket empty; waiting for it to refill");
            tokio::time::sleep_until(refill).await;
        }
        let mut request = self
            .http
            .request(method, format!("{}/{path}", self.settings.api_base_url))
            .header(
                http::header::AUTHORIZATION,
                format!("Bot {}", self.settings.bot_token),
            );
        request = body(request);
        let response = request.send().await.map_err(network_error)?;
        let status = response.status().as_u16();
        self.note_bucket(route, response.headers());
        let retry_after = seconds(response.headers(), "retry-after");
        let body = response.bytes().await.map_err(network_error)?;
        if (200..300).contains(&status) {
            return Ok(serde_json::from_slice(&body).unwrap_or(Value::Null));
        }
        let error = serde_json::from_slice::<ErrorBody>(&body).ok();
        let message = error.as_ref().map_or_else(
            || String::from_utf8_lossy(&body).chars().take(200).collect(),
            |error| error.message.clone(),
        );
        let code = error.as_ref().map_or(0, |error| error.code);
        let after = error
            .as_ref()
            .and_then(|error| error.retry_after)
            .filter(|seconds| seconds.is_finite() && *seconds >= 0.0)
            .map(Duration::from_secs_f64)
            .or(retry_after);
        Err(classify(
            status,
            format!("discord: {message} (HTTP {status}, code {code})"),
            after,
        ))
    }

    // Remembers when an exhausted bucket refills.
    fn note_bucket(&self, route: &str, headers: &HeaderMap) {
        let remaining = headers
            .get("x-ratelimit-remaining")
            .and_then(|value| value.to_str().ok())
            .map(str::trim);
        let mut exhausted = self.exhausted.lock();
        match (remaining, seconds(headers, "x-ratelimit-reset-after")) {
            (Some("0"), Some(reset_after)) => {
                let bucket = headers
                    .get("x-ratelimit-bucket")
                    .and_then(|value| value.to_str().ok())
                    .unwrap_or("?");
                tracing::debug!(channel = %self.settings.channel, route, bucket, reset_after_ms = reset_after.as_millis() as u64,
                    "discord: rate-limit bucket exhausted");
                exhausted.insert(route.to_string(), Instant::now() + reset_after);
            }
            (Some(_), _) => {
                exhausted.remove(route);
            }
            _ => {}
        }
    }

    /// Where a message to `to` goes: the channel of the message it answers, else the
    /// person's DM channel.
    async fn channel_for(
        &self,
        to: &ChannelIdentity,
        context: &ReplyContext,
    ) -> Result<String, SendError> {
        match context.chat.as_deref() {
            Some(chat) => Ok(snowflake(chat)?.to_string()),
            None => self.direct_channel(snowflake(to.peer())?).await,
        }
    }

    /// The DM channel with user `user_id`, opened once.
    async fn direct_channel(&self, user_id: &str) -> Result<String, SendError> {
        if let Some(channel) = self.direct_channels.lock().get(user_id).cloned() {
            return Ok(channel);
        }
        let answer = self
            .request(
                Method::POST,
                "POST /users/@me/channels",
                "users/@me/channels",
                Some(json!({"recipient_id": user_id})),
            )
            .await?;
        let channel = created_id(answer, "opening a DM")?;
        self.direct_channels
            .lock()
            .insert(user_id.to_string(), channel.clone());
        Ok(channel)
    }
}

fn seconds(headers: &HeaderMap, name: &str) -> Option<Duration> {
    crate::http_client::header_seconds(headers, name)
}

fn network_error(error: reqwest::Error) -> SendError {
    crate::http_client::unreachable("discord api", error)
}

fn classify(status: u16, reason: String, after: Option<Duration>) -> SendError {
    match status {
        429 | 500.. => SendError::Retry { reason, after },
        401 => SendError::Credentials { reason },
        // 403 Missing Access / Missing Permissions, 404 Unknown Channel, 400 invalid body.
        _ => SendError::Permanent { reason },
    }
}

/// The `nonce` of part `part` of a reply with `text` into Discord channel `channel`: the
/// same outbox row always gets the same one, so with `enforce_nonce` Discord makes one
/// message of a send repeated after a crash; two rows with the same text (a reminder
/// sent twice) are two messages. Decimal digits within a signed 64-bit integer: Discord
/// takes a string or integer of at most 25 characters and prefers snowflake-like ones.
pub fn nonce(channel: &str, text: &str, part: usize, context: &ReplyContext) -> Option<String> {
    use sha2::{Digest, Sha256};
    let outbox_id = context.outbox_id?;
    let mut hash = Sha256::new();
    for field in [
        channel,
        text,
        &part.to_string(),
        &outbox_id.to_string(),
        context.reply_to.as_deref().unwrap_or(""),
    ] {
        hash.update(field.as_bytes());
        hash.update([0]);
    }
    let digest = hash.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    Some((u64::from_be_bytes(first) >> 1).to_string())
}

// Snowflakes only: anything else would change the request path.
fn snowflake(id: &str) -> Result<&str, SendError> {
    if !id.is_empty() && id.len() <= 20 && id.bytes().all(|byte| byte.is_ascii_digit()) {
        Ok(id)
    } else {
        Err(SendError::Permanent {
            reason: format!(
                "discord: {id:?} is not a Discord id (a user is reached by numeric id, not by handle)"
            ),
        })
    }
}

/// The id of the message Discord's `answer` to `request` created.
fn created_id(answer: Value, request: &str) -> Result<String, SendError> {
    let created: Created = serde_json::from_value(answer).map_err(|error| SendError::Retry {
        reason: format!("discord: unreadable answer to {request}: {error}"),
        after: None,
    })?;
    Ok(created.id)
}

impl Transport for RestClient {
    fn kind(&self) -> ChannelKind {
        ChannelKind::Discord
    }

    fn max_chars(&self) -> usize {
        MAX_TEXT_CHARS
    }

    fn render(&self, markdown: &str) -> String {
        markdown_to_discord(markdown)
    }

    fn send<'a>(
        &'a self,
        to: &'a ChannelIdentity,
        text: &'a str,
        context: &'a ReplyContext,
        part: usize,
    ) -> BoxFuture<'a, Result<String, SendError>> {
        Box::pin(async move {
            let channel = self.channel_for(to, context).await?;
            let mut body = json!({
                "content": text,
                // Model text never pings anyone, whatever it contains.
                "allowed_mentions": {"parse": []},
            });
            // Only the first part quotes the message it answers (set for guild messages).
            if let Some(reply_to) = context.reply_to.as_deref().filter(|_| part == 0) {
                body["message_reference"] =
                    json!({"message_id": reply_to, "fail_if_not_exists": false});
            }
            if let Some(code) = &context.approval {
                body["components"] = approval_components(code);
            }
            // A repeat of this part (after a crash before it was recorded) is one message.
            if let Some(nonce) = nonce(&channel, text, part, context) {
                body["nonce"] = json!(nonce);
                body["enforce_nonce"] = json!(true);
            }
            let answer = self
                .request(
                    Method::POST,
                    &format!("POST /channels/{channel}/messages"),
                    &format!("channels/{channel}/messages"),
                    Some(body),
                )
                .await?;
            created_id(answer, "a send")
        })
    }

    fn send_file<'a>(
        &'a self,
        to: &'a ChannelIdentity,
        file: &'a FilePayload,
        context: &'a ReplyContext,
    ) -> BoxFuture<'a, Result<String, SendError>> {
        Box::pin(async move {
            let channel = self.channel_for(to, context).await?;
            // An attachment (`files[0]`, described in `payload_json`); Discord shows
            // audio with a player.
            let mut payload = json!({
                "allowed_mentions": {"parse": []},
                "attachments": [{"id": 0, "filename": file.file_name}],
            });
            // The nonce of a file part is keyed on its bytes: one message per row.
            let digest = {
                use sha2::{Digest, Sha256};
                hex::encode(Sha256::digest(&file.bytes))
            };
            if let Some(nonce) = nonce(&channel, &digest, usize::MAX, context) {
                payload["nonce"] = json!(nonce);
                payload["enforce_nonce"] = json!(true);
            }
            let (content_type, body) = crate::multipart::Form::new()
                .text("payload_json", &payload.to_string())
                .file("files[0]", &file.file_name, &file.mime_type, &file.bytes)
                .finish();
            let answer = self
                .request_with(
                    Method::POST,
                    &format!("POST /channels/{channel}/messages"),
                    &format!("channels/{channel}/messages"),
                    |request| {
                        request
                            .header(http::header::CONTENT_TYPE, content_type)
                            .body(body)
                    },
                )
                .await?;
            created_id(answer, "a file send")
        })
    }

    // `mark_read`: the default, nothing (bots have no read receipts on Discord).

    fn fetch_attachment<'a>(
        &'a self,
        attachment: &'a AttachmentRef,
        max_bytes: u64,
    ) -> BoxFuture<'a, Result<Vec<u8>, SendError>> {
        Box::pin(async move {
            let url = reqwest::Url::parse(&attachment.id)
                .ok()
                .filter(|url| matches!(url.scheme(), "https" | "http"))
                .ok_or_else(|| SendError::Permanent {
                    reason: format!("discord: attachment {:?} is not a URL", attachment.id),
                })?;
            // Attachment URLs are signed CDN links: the bot's token is never sent there.
            let response = self.http.get(url).send().await.map_err(network_error)?;
            let status = response.status().as_u16();
            if !(200..300).contains(&status) {
                return Err(classify(
                    status,
                    format!("discord: attachment download failed (HTTP {status})"),
                    None,
                ));
            }
            let download = Download::of("discord", attachment, max_bytes);
            download.read(response).await
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_classified() {
        let reason = || "r".to_string();
        assert!(matches!(
            classify(429, reason(), None),
            SendError::Retry { .. }
        ));
        assert!(matches!(
            classify(502, reason(), None),
            SendError::Retry { .. }
        ));
        assert!(matches!(
            classify(401, reason(), None),
            SendError::Credentials { .. }
        ));
        for status in [400, 403, 404] {
            assert!(matches!(
                classify(status, reason(), None),
                SendError::Permanent { .. }
            ));
        }
        assert!(snowflake("../users").is_err() && snowflake("").is_err());
        assert_eq!(snowflake("80351110224678912").unwrap(), "80351110224678912");
    }

    #[test]
    fn nonces_are_stable_per_reply_part_and_distinct_otherwise() {
        let row = |id| ReplyContext {
            outbox_id: Some(id),
            reply_to: Some("1300000000000000001".into()),
            ..ReplyContext::default()
        };
        let first = nonce("1200", "hello", 0, &row(7)).unwrap();
        assert_eq!(Some(&first), nonce("1200", "hello", 0, &row(7)).as_ref());
        assert!(first.len() <= 19 && first.bytes().all(|byte| byte.is_ascii_digit()));
        assert!(first.parse::<i64>().is_ok());
        for other in [
            nonce("1200", "hello", 1, &row(7)),
            nonce("1201", "hello", 0, &row(7)),
            nonce("1200", "hello!", 0, &row(7)),
            // The same text from another outbox row is another message.
            nonce("1200", "hello", 0, &row(8)),
        ] {
            assert_ne!(other.unwrap(), first);
        }
        // Not from the outbox (no row to key on): no nonce, Discord dedupes nothing.
        assert_eq!(nonce("1200", "hello", 0, &ReplyContext::default()), None);
    }
}
