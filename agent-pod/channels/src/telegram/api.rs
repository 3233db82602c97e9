//! The Bot API client: `POST <base>/bot<token>/<method>` with a JSON body, answers
//! `{"ok": true, "result": …}` or `{"ok": false, "error_code", "description",
//! "parameters": {"retry_after"}}`. Errors are classified by what the caller should do:
//! wait (429 with the platform's `retry_after`, server errors, network failures), stop
//! until the token is fixed (401), or give up with Telegram's own description. The
//! token is part of every URL, so no URL ever reaches an error message or the log.
//! An approval request is sent with an inline keyboard of Approve and Reject.

use std::time::Duration;

use futures::future::BoxFuture;
use saint_config::{ChannelIdentity, ChannelKind};
use serde::{Deserialize, de::DeserializeOwned};
use serde_json::{Value, json};

use super::{
    TelegramSettings,
    render::{MAX_TEXT_CHARS, markdown_to_telegram_html},
};
use crate::{
    buttons,
    http_client::Download,
    message::{AttachmentRef, FileKind, FilePayload, InboundMessage, ReplyContext},
    transport::{SendError, Transport},
};

/// A Bot API call that failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiError {
    /// HTTP status, or 0 when no answer came.
    pub status: u16,
    /// What went wrong, in Telegram's words where it gave any.
    pub description: String,
    /// The wait Telegram asked for (`parameters.retry_after`).
    pub retry_after: Option<Duration>,
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.status == 0 {
            write!(formatter, "telegram: {}", self.description)
        } else {
            write!(
                formatter,
                "telegram: {} (HTTP {})",
                self.description, self.status
            )
        }
    }
}

impl ApiError {
    /// What a sender does about it.
    pub fn classify(&self) -> SendError {
        let reason = self.to_string();
        match self.status {
            0 | 429 | 500.. => SendError::Retry {
                reason,
                after: self.retry_after,
            },
            401 => SendError::Credentials { reason },
            _ => SendError::Permanent { reason },
        }
    }
}

#[derive(Deserialize)]
struct Answer {
    ok: bool,
    #[serde(default)]
    result: Value,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    parameters: Option<Parameters>,
}

#[derive(Deserialize)]
struct Parameters {
    #[serde(default)]
    retry_after: Option<u64>,
    #[serde(default)]
    migrate_to_chat_id: Option<i64>,
}

/// The bot itself, as `getMe` describes it.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
pub struct BotUser {
    /// The bot's user id.
    pub id: i64,
    /// Its `@username`, without the `@`.
    #[serde(default)]
    pub username: Option<String>,
}

#[derive(Deserialize)]
struct FileInfo {
    #[serde(default)]
    file_size: Option<u64>,
    #[serde(default)]
    file_path: Option<String>,
}

/// Talks to the Bot API for one channel.
pub struct BotApi {
    settings: TelegramSettings,
    http: reqwest::Client,
}

fn network_error(error: reqwest::Error) -> ApiError {
    ApiError {
        status: 0,
        // The URL holds the token: the shared layer never prints it.
        description: crate::http_client::unreachable_reason("bot api", error),
        retry_after: None,
    }
}

impl BotApi {
    /// A client for `settings`.
    pub fn new(settings: TelegramSettings) -> Self {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .build()
            .expect("a client with timeouts builds");
        Self { settings, http }
    }

    /// The channel's settings.
    pub fn settings(&self) -> &TelegramSettings {
        &self.settings
    }

    /// Calls `method` with `body`, allowing `timeout` for the whole exchange.
    pub async fn call<T: DeserializeOwned>(
        &self,
        method: &str,
        body: &Value,
        timeout: Duration,
    ) -> Result<T, ApiError> {
        self.answer(method, self.request(method).json(body).timeout(timeout))
            .await
    }

    /// Calls `method` with a `multipart/form-data` body (an upload).
    pub async fn call_form<T: DeserializeOwned>(
        &self,
        method: &str,
        form: crate::multipart::Form,
        timeout: Duration,
    ) -> Result<T, ApiError> {
        let (content_type, body) = form.finish();
        let request = self
            .request(method)
            .header(reqwest::header::CONTENT_TYPE, content_type)
            .body(body)
            .timeout(timeout);
        self.answer(method, request).await
    }

    fn request(&self, method: &str) -> reqwest::RequestBuilder {
        let url = format!(
            "{}/bot{}/{method}",
            self.settings.api_base_url, self.settings.bot_token
        );
        self.http.post(url)
    }

    async fn answer<T: DeserializeOwned>(
        &self,
        method: &str,
        request: reqwest::RequestBuilder,
    ) -> Result<T, ApiError> {
        let response = request.send().await.map_err(network_error)?;
        let status = response.status().as_u16();
        let bytes = response.bytes().await.map_err(network_error)?;
        let answer: Option<Answer> = serde_json::from_slice(&bytes).ok();
        match answer {
            Some(answer) if answer.ok && (200..300).contains(&status) => {
                serde_json::from_value(answer.result).map_err(|error| ApiError {
                    status,
                    description: format!("unreadable answer to {method}: {error}"),
                    retry_after: None,
                })
            }
            Some(answer) => {
                let parameters = answer.parameters.as_ref();
                let mut description = answer
                    .description
                    .unwrap_or_else(|| format!("{method} failed"));
                if let Some(chat) = parameters.and_then(|parameters| parameters.migrate_to_chat_id)
                {
                    description.push_str(&format!(" (the group is now the supergroup {chat})"));
                }
                Err(ApiError {
                    status: if status == 200 { 400 } else { status },
                    description,
                    retry_after: parameters
                        .and_then(|parameters| parameters.retry_after)
                        .map(Duration::from_secs),
                })
            }
            None => Err(ApiError {
                status,
                description: format!(
                    "{method}: unreadable answer: {}",
                    String::from_utf8_lossy(&bytes)
                        .chars()
                        .take(200)
                        .collect::<String>()
                ),
                retry_after: None,
            }),
        }
    }

    /// `getMe`.
    pub async fn get_me(&self) -> Result<BotUser, ApiError> {
        self.call("getMe", &json!({}), Duration::from_secs(30))
            .await
    }

    /// `answerCallbackQuery`: tells the presser's client the press arrived (it shows a
    /// spinner until then); the decision itself is answered as a message.
    pub async fn answer_callback_query(&self, id: &str) -> Result<(), ApiError> {
        self.call::<Value>(
            "answerCallbackQuery",
            &json!({"callback_query_id": id}),
            Duration::from_secs(20),
        )
        .await
        .map(drop)
    }
}

/// The inline keyboard of an approval request: Approve and Reject in one row, each
/// carrying the code and the decision as its `callback_data` (at most 64 bytes).
fn approval_keyboard(code: &str) -> Value {
    let row: Vec<Value> = buttons::buttons(code)
        .iter()
        .map(|button| json!({"text": button.label(), "callback_data": button.value}))
        .collect();
    json!({"inline_keyboard": [row]})
}

impl Transport for BotApi {
    fn kind(&self) -> ChannelKind {
        ChannelKind::Telegram
    }

    fn max_chars(&self) -> usize {
        MAX_TEXT_CHARS
    }

    fn render(&self, markdown: &str) -> String {
        markdown_to_telegram_html(markdown)
    }

    fn send<'a>(
        &'a self,
        to: &'a ChannelIdentity,
        text: &'a str,
        context: &'a ReplyContext,
        part: usize,
    ) -> BoxFuture<'a, Result<String, SendError>> {
        Box::pin(async move {
            // A group's chat when the context names one; a person's private chat has
            // their user id.
            let chat = context.chat.as_deref().unwrap_or(to.peer());
            let mut body = json!({"chat_id": chat, "text": text, "parse_mode": "HTML"});
            if let Some(thread) = context
                .thread
                .as_deref()
                .and_then(|thread| thread.parse::<i64>().ok())
            {
                body["message_thread_id"] = json!(thread);
            }
            // In a group the first part quotes the message it answers, so everyone
            // sees whom it answers.
            let quoted = context
                .reply_to
                .as_deref()
                .filter(|_| part == 0 && context.chat.is_some())
                .and_then(|reply_to| reply_to.parse::<i64>().ok());
            if let Some(message_id) = quoted {
                body["reply_parameters"] =
                    json!({"message_id": message_id, "allow_sending_without_reply": true});
            }
            if let Some(code) = &context.approval {
                body["reply_markup"] = approval_keyboard(code);
            }
            let sent: Value = self
                .call("sendMessage", &body, Duration::from_secs(60))
                .await
                .map_err(|error| error.classify())?;
            let message_id = sent["message_id"]
                .as_i64()
                .ok_or_else(|| SendError::Retry {
                    reason: "telegram: the answer to sendMessage names no message_id".to_string(),
                    after: None,
                })?;
            Ok(format!("{chat}:{message_id}"))
        })
    }

    fn send_file<'a>(
        &'a self,
        to: &'a ChannelIdentity,
        file: &'a FilePayload,
        context: &'a ReplyContext,
    ) -> BoxFuture<'a, Result<String, SendError>> {
        Box::pin(async move {
            let chat = context.chat.as_deref().unwrap_or(to.peer());
            // A voice note is `sendVoice` (Opus in Ogg, shown as a voice message); other
            // audio is `sendAudio` (a music player).
            let (method, field) = match file.kind {
                FileKind::Voice => ("sendVoice", "voice"),
                FileKind::Audio => ("sendAudio", "audio"),
            };
            let mut form = crate::multipart::Form::new().text("chat_id", chat);
            if let Some(thread) = context
                .thread
                .as_deref()
                .filter(|thread| thread.parse::<i64>().is_ok())
            {
                form = form.text("message_thread_id", thread);
            }
            let form = form.file(field, &file.file_name, &file.mime_type, &file.bytes);
            let sent: Value = self
                .call_form(method, form, Duration::from_secs(120))
                .await
                .map_err(|error| error.classify())?;
            let message_id = sent["message_id"]
                .as_i64()
                .ok_or_else(|| SendError::Retry {
                    reason: format!("telegram: the answer to {method} names no message_id"),
                    after: None,
                })?;
            Ok(format!("{chat}:{message_id}"))
        })
    }

    fn mark_read<'a>(
        &'a self,
        message: &'a InboundMessage,
    ) -> BoxFuture<'a, Result<(), SendError>> {
        // Telegram has no read receipts; "typing…" tells the person the bot is on it.
        Box::pin(async move {
            let chat = message
                .context
                .chat
                .as_deref()
                .unwrap_or(message.sender.peer());
            let mut body = json!({"chat_id": chat, "action": "typing"});
            if let Some(thread) = message
                .context
                .thread
                .as_deref()
                .and_then(|thread| thread.parse::<i64>().ok())
            {
                body["message_thread_id"] = json!(thread);
            }
            self.call::<Value>("sendChatAction", &body, Duration::from_secs(20))
                .await
                .map(drop)
                .map_err(|error| error.classify())
        })
    }

    fn fetch_attachment<'a>(
        &'a self,
        attachment: &'a AttachmentRef,
        max_bytes: u64,
    ) -> BoxFuture<'a, Result<Vec<u8>, SendError>> {
        Box::pin(async move {
            let info: FileInfo = self
                .call(
                    "getFile",
                    &json!({"file_id": attachment.id}),
                    Duration::from_secs(30),
                )
                .await
                .map_err(|error| error.classify())?;
            let download = Download::of("telegram", attachment, max_bytes);
            if let Some(size) = info.file_size.filter(|size| *size > max_bytes) {
                return Err(download.too_big(size));
            }
            let path = info.file_path.ok_or_else(|| SendError::Permanent {
                reason: "telegram: getFile gave no file_path (the file cannot be downloaded)"
                    .to_string(),
            })?;
            // The path comes from Telegram (`photos/file_0.jpg`); anything that would
            // leave the file directory is refused.
            if path
                .split('/')
                .any(|segment| segment == ".." || segment.is_empty())
                || path.contains(['?', '#', '\\'])
            {
                return Err(SendError::Permanent {
                    reason: format!("telegram: getFile gave an unusable file_path {path:?}"),
                });
            }
            let url = format!(
                "{}/file/bot{}/{path}",
                self.settings.api_base_url, self.settings.bot_token
            );
            let response = self
                .http
                .get(url)
                .timeout(Duration::from_secs(120))
                .send()
                .await
                .map_err(|error| network_error(error).classify())?;
            let status = response.status().as_u16();
            if !response.status().is_success() {
                return Err(ApiError {
                    status,
                    description: format!("downloading {} failed", attachment.kind),
                    retry_after: None,
                }
                .classify());
            }
            // The declared size is the sender's word; count what actually arrives.
            download.read(response).await
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(status: u16) -> ApiError {
        ApiError {
            status,
            description: "d".to_string(),
            retry_after: Some(Duration::from_secs(3)),
        }
    }

    #[test]
    fn platform_answers_are_classified() {
        assert_eq!(
            error(429).classify(),
            SendError::Retry {
                reason: "telegram: d (HTTP 429)".to_string(),
                after: Some(Duration::from_secs(3))
            }
        );
        assert!(matches!(error(502).classify(), SendError::Retry { .. }));
        assert!(matches!(error(0).classify(), SendError::Retry { .. }));
        assert!(matches!(
            error(401).classify(),
            SendError::Credentials { .. }
        ));
        assert!(matches!(error(403).classify(), SendError::Permanent { .. }));
        assert!(matches!(error(400).classify(), SendError::Permanent { .. }));
    }
}
