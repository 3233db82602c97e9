//! The Graph API client: `POST /<phone-number-id>/messages` for text and read receipts,
//! `GET /<media-id>` and the media URL for attachments. Errors are classified by the
//! platform's answer: rate limits and server errors are retried (honouring
//! `Retry-After`), a refused token stops the channel, the rest fail the message with
//! the platform's own reason. An approval request is an interactive message with
//! Approve and Reject reply buttons.

use std::time::Duration;

use futures::future::BoxFuture;
use saint_config::{ChannelIdentity, ChannelKind};
use serde::Deserialize;
use serde_json::json;

use super::{CUSTOMER_SERVICE_WINDOW, MAX_TEXT_CHARS, WhatsappSettings};
use crate::{
    buttons,
    format::markdown_to_whatsapp,
    http_client::Download,
    message::{AttachmentRef, FilePayload, InboundMessage, ReplyContext},
    transport::{SendError, Transport},
};

/// Error codes that mean "slow down" (application, account and pair rate limits).
const RATE_LIMIT_CODES: &[i64] = &[4, 80007, 130429, 131048, 131056];
/// The Cloud API's code for a free-form message outside the customer-service window.
const REENGAGEMENT_CODE: i64 = 131047;

/// Longest body of an interactive (button) message.
const MAX_INTERACTIVE_BODY_CHARS: usize = 1_024;

/// The `interactive` object of an approval request: `body` and two reply buttons,
/// Approve and Reject, whose ids carry the code and the decision (titles of at most 20
/// characters, ids of at most 256).
fn approval_interactive(body: &str, code: &str) -> serde_json::Value {
    let buttons: Vec<serde_json::Value> = buttons::buttons(code)
        .iter()
        .map(|button| {
            json!({"type": "reply", "reply": {"id": button.value, "title": button.label()}})
        })
        .collect();
    json!({"type": "button", "body": {"text": body}, "action": {"buttons": buttons}})
}

/// Talks to the Graph API for one channel.
pub struct GraphClient {
    settings: WhatsappSettings,
    http: reqwest::Client,
}

#[derive(Deserialize)]
struct ErrorBody {
    error: GraphError,
}

#[derive(Deserialize)]
struct GraphError {
    message: String,
    #[serde(default)]
    code: i64,
}

#[derive(Deserialize)]
struct SendResponse {
    #[serde(default)]
    messages: Vec<SentMessage>,
}

#[derive(Deserialize)]
struct SentMessage {
    id: String,
}

#[derive(Deserialize)]
struct MediaInfo {
    url: String,
    file_size: Option<u64>,
}

impl GraphClient {
    /// A client for `settings`.
    pub fn new(settings: WhatsappSettings) -> Self {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .timeout(Duration::from_secs(60))
            .build()
            .expect("a client with timeouts builds");
        Self { settings, http }
    }

    fn url(&self, path: &str) -> String {
        format!("{}/{path}", self.settings.api_base_url)
    }

    /// Sends one message; returns its `wamid`.
    async fn send_one(&self, body: serde_json::Value) -> Result<String, SendError> {
        let answer = self.post(body).await?;
        let sent: SendResponse =
            serde_json::from_slice(&answer).map_err(|error| SendError::Retry {
                reason: format!("whatsapp: unreadable answer to a send: {error}"),
                after: None,
            })?;
        sent.messages
            .into_iter()
            .next()
            .map(|message| message.id)
            .ok_or_else(|| SendError::Retry {
                reason: "whatsapp: the answer to a send names no message id".to_string(),
                after: None,
            })
    }

    /// Uploads `file` to `POST /<phone-number-id>/media`; returns the media id.
    async fn upload(&self, file: &FilePayload) -> Result<String, SendError> {
        let (content_type, body) = crate::multipart::Form::new()
            .text("messaging_product", "whatsapp")
            .text("type", &file.mime_type)
            .file("file", &file.file_name, &file.mime_type, &file.bytes)
            .finish();
        let response = self
            .http
            .post(self.url(&format!("{}/media", self.settings.phone_number_id)))
            .bearer_auth(&self.settings.access_token)
            .header(http::header::CONTENT_TYPE, content_type)
            .body(body)
            .send()
            .await
            .map_err(network_error)?;
        let answer = checked(response).await?;
        #[derive(Deserialize)]
        struct Uploaded {
            id: String,
        }
        serde_json::from_slice::<Uploaded>(&answer)
            .map(|uploaded| uploaded.id)
            .map_err(|error| SendError::Retry {
                reason: format!("whatsapp: unreadable answer to a media upload: {error}"),
                after: None,
            })
    }

    async fn post(&self, body: serde_json::Value) -> Result<bytes::Bytes, SendError> {
        let response = self
            .http
            .post(self.url(&format!("{}/messages", self.settings.phone_number_id)))
            .bearer_auth(&self.settings.access_token)
            .json(&body)
            .send()
            .await
            .map_err(network_error)?;
        checked(response).await
    }
}

fn network_error(error: reqwest::Error) -> SendError {
    crate::http_client::unreachable("whatsapp: graph api", error)
}

/// The body of a successful answer, or the error classified.
async fn checked(response: reqwest::Response) -> Result<bytes::Bytes, SendError> {
    let status = response.status();
    let retry_after = crate::http_client::retry_after(response.headers());
    let body = response.bytes().await.map_err(network_error)?;
    if status.is_success() {
        return Ok(body);
    }
    let error = serde_json::from_slice::<ErrorBody>(&body)
        .ok()
        .map(|body| body.error);
    let (code, message) = match &error {
        Some(error) => (error.code, error.message.clone()),
        None => (
            0,
            String::from_utf8_lossy(&body).chars().take(200).collect(),
        ),
    };
    let reason = format!(
        "whatsapp: {message} (HTTP {}, code {code})",
        status.as_u16()
    );
    Err(classify(status.as_u16(), code, reason, retry_after))
}

fn classify(status: u16, code: i64, reason: String, after: Option<Duration>) -> SendError {
    if status == 429 || RATE_LIMIT_CODES.contains(&code) || status >= 500 {
        return SendError::Retry { reason, after };
    }
    if status == 401 || code == 190 {
        return SendError::Credentials { reason };
    }
    if code == REENGAGEMENT_CODE {
        return SendError::Permanent {
            reason: format!(
                "{reason}: more than 24 hours since this person last wrote, so WhatsApp takes \
                 only an approved template message"
            ),
        };
    }
    SendError::Permanent { reason }
}

// The Cloud API wants the number without `+`.
fn wa_number(identity: &ChannelIdentity) -> &str {
    identity.peer().trim_start_matches('+')
}

impl Transport for GraphClient {
    fn kind(&self) -> ChannelKind {
        ChannelKind::Whatsapp
    }

    fn max_chars(&self) -> usize {
        MAX_TEXT_CHARS
    }

    fn render(&self, markdown: &str) -> String {
        markdown_to_whatsapp(markdown)
    }

    fn send<'a>(
        &'a self,
        to: &'a ChannelIdentity,
        text: &'a str,
        context: &'a ReplyContext,
        part: usize,
    ) -> BoxFuture<'a, Result<String, SendError>> {
        Box::pin(async move {
            let mut body = json!({
                "messaging_product": "whatsapp",
                "recipient_type": "individual",
                "to": wa_number(to),
                "type": "text",
                "text": {"preview_url": false, "body": text},
            });
            // Only the first part quotes the message it answers.
            if let Some(reply_to) = context.reply_to.as_deref().filter(|_| part == 0) {
                body["context"] = json!({"message_id": reply_to});
            }
            let Some(code) = &context.approval else {
                return self.send_one(body).await;
            };
            // An approval request gets reply buttons. A button message's body holds at
            // most 1,024 characters: a longer request goes as text first, then a short
            // button message naming its code (a retry may repeat the text).
            let ask = if text.chars().count() <= MAX_INTERACTIVE_BODY_CHARS {
                text.to_string()
            } else {
                self.send_one(body.clone()).await?;
                format!("Request {code}: approve or reject?")
            };
            body["type"] = json!("interactive");
            body["interactive"] = approval_interactive(&ask, code);
            if let Some(fields) = body.as_object_mut() {
                fields.remove("text");
            }
            self.send_one(body).await
        })
    }

    fn send_file<'a>(
        &'a self,
        to: &'a ChannelIdentity,
        file: &'a FilePayload,
        context: &'a ReplyContext,
    ) -> BoxFuture<'a, Result<String, SendError>> {
        let _ = context;
        Box::pin(async move {
            // Uploaded first, then sent by its id as `type: audio` (an Opus-in-Ogg file
            // shows as a voice message). A retry after a lost answer uploads again: an
            // unused upload expires on its own.
            let media = self.upload(file).await?;
            self.send_one(json!({
                "messaging_product": "whatsapp",
                "recipient_type": "individual",
                "to": wa_number(to),
                "type": "audio",
                "audio": {"id": media},
            }))
            .await
        })
    }

    fn mark_read<'a>(
        &'a self,
        message: &'a InboundMessage,
    ) -> BoxFuture<'a, Result<(), SendError>> {
        Box::pin(async move {
            self.post(json!({
                "messaging_product": "whatsapp",
                "status": "read",
                "message_id": message.platform_id,
            }))
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
            // Media ids are opaque tokens from a verified delivery; refuse anything that
            // would change the path.
            if attachment.id.is_empty()
                || !attachment.id.bytes().all(|byte| {
                    byte.is_ascii_alphanumeric() || byte == b'_' || byte == b'-' || byte == b'.'
                })
                || attachment.id.contains("..")
            {
                return Err(SendError::Permanent {
                    reason: format!("whatsapp: media id {:?} is not a media id", attachment.id),
                });
            }
            let response = self
                .http
                .get(self.url(&attachment.id))
                .bearer_auth(&self.settings.access_token)
                .send()
                .await
                .map_err(network_error)?;
            let info: MediaInfo =
                serde_json::from_slice(&checked(response).await?).map_err(|error| {
                    SendError::Permanent {
                        reason: format!("whatsapp: unreadable media description: {error}"),
                    }
                })?;
            let download = Download::of("whatsapp", attachment, max_bytes);
            if let Some(size) = info.file_size.filter(|size| *size > max_bytes) {
                return Err(download.too_big(size));
            }
            let response = self
                .http
                .get(&info.url)
                .bearer_auth(&self.settings.access_token)
                .send()
                .await
                .map_err(network_error)?;
            if !response.status().is_success() {
                return checked(response).await.map(|body| body.to_vec());
            }
            // The declared size is the sender's word; count what actually arrives.
            download.read(response).await
        })
    }

    fn reply_window(&self) -> Option<Duration> {
        Some(CUSTOMER_SERVICE_WINDOW)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn platform_answers_are_classified() {
        let reason = || "r".to_string();
        assert!(matches!(
            classify(429, 0, reason(), None),
            SendError::Retry { .. }
        ));
        assert!(matches!(
            classify(400, 131056, reason(), None),
            SendError::Retry { .. }
        ));
        assert!(matches!(
            classify(503, 0, reason(), None),
            SendError::Retry { .. }
        ));
        assert!(matches!(
            classify(401, 190, reason(), None),
            SendError::Credentials { .. }
        ));
        match classify(400, REENGAGEMENT_CODE, reason(), None) {
            SendError::Permanent { reason } => assert!(reason.contains("template")),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            classify(400, 100, reason(), None),
            SendError::Permanent { .. }
        ));
    }
}
