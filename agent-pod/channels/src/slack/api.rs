//! The Web API client: `auth.test`, `apps.connections.open`, `chat.postMessage`,
//! `conversations.open`, and file downloads, all with a bearer token.
//!
//! Slack answers most failures with HTTP 200 and `{"ok": false, "error": "<code>"}`;
//! rate limits come as HTTP 429 with `Retry-After`. Each is classified by what the
//! sender should do next: retry (honouring the wait), stop the channel until the
//! credentials are fixed, or give the message up with Slack's own code as the reason.

use std::{collections::HashMap, time::Duration};

use futures::future::BoxFuture;
use saint_config::{ChannelIdentity, ChannelKind};
use serde_json::{Value, json};

use super::{
    MAX_TEXT_CHARS, SlackSettings, interaction::approval_blocks, render::markdown_to_mrkdwn,
};
use crate::{
    http_client::Download,
    message::{AttachmentRef, FilePayload, ReplyContext},
    transport::{SendError, Transport},
};
use parking_lot::Mutex;

/// Error codes that mean the token itself is refused: nothing goes out until it is fixed.
const CREDENTIAL_ERRORS: &[&str] = &[
    "not_authed",
    "invalid_auth",
    "token_revoked",
    "token_expired",
    "account_inactive",
    "not_allowed_token_type",
    "missing_scope",
    "no_permission",
    "org_login_required",
    "ekm_access_denied",
];

/// Error codes for a passing trouble on Slack's side.
const TRANSIENT_ERRORS: &[&str] = &[
    "ratelimited",
    "rate_limited",
    "internal_error",
    "fatal_error",
    "service_unavailable",
    "request_timeout",
];

/// The bot as `auth.test` describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BotIdentity {
    /// The bot user's member id (how mentions name it: `<@U…>`).
    pub user_id: String,
    /// The bot's id (`B…`), which its own messages carry as `bot_id`.
    pub bot_id: Option<String>,
}

/// Talks to the Web API for one channel.
pub struct SlackApi {
    channel: String,
    base: String,
    bot_token: String,
    http: reqwest::Client,
    /// Direct-message channel (`D…`) of each user written to first, from
    /// `conversations.open` (stable for a user and the bot).
    direct_channels: Mutex<HashMap<String, String>>,
}

enum Body {
    Json(Value),
    /// Arguments form-encoded (the methods that take no JSON).
    Form(Vec<(&'static str, String)>),
    Empty,
}

impl SlackApi {
    /// A client for `settings`.
    pub fn new(settings: &SlackSettings) -> Self {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .timeout(Duration::from_secs(60))
            .build()
            .expect("a client with timeouts builds");
        Self {
            channel: settings.channel.clone(),
            base: settings.api_base_url.clone(),
            bot_token: settings.bot_token.clone(),
            http,
            direct_channels: Mutex::default(),
        }
    }

    async fn call(&self, method: &str, token: &str, body: Body) -> Result<Value, SendError> {
        let request = self
            .http
            .post(format!("{}/{method}", self.base))
            .bearer_auth(token);
        let request = match body {
            // Slack wants the charset named on JSON bodies.
            Body::Json(body) => request
                .header(
                    http::header::CONTENT_TYPE,
                    "application/json; charset=utf-8",
                )
                .body(body.to_string()),
            Body::Form(arguments) => {
                let mut encoded = reqwest::Url::parse("http://form/").expect("a valid URL");
                encoded.query_pairs_mut().extend_pairs(arguments);
                request
                    .header(
                        http::header::CONTENT_TYPE,
                        "application/x-www-form-urlencoded",
                    )
                    .body(encoded.query().unwrap_or_default().to_string())
            }
            Body::Empty => request.header(
                http::header::CONTENT_TYPE,
                "application/x-www-form-urlencoded",
            ),
        };
        let response = request
            .send()
            .await
            .map_err(|error| network_error(method, error))?;
        let status = response.status();
        let retry_after = response
            .headers()
            .get(http::header::RETRY_AFTER)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        let bytes = response
            .bytes()
            .await
            .map_err(|error| network_error(method, error))?;
        if status.as_u16() == 429 {
            return Err(SendError::Retry {
                reason: format!("slack: {method} rate limited (HTTP 429)"),
                after: retry_after,
            });
        }
        if status.is_server_error() {
            return Err(SendError::Retry {
                reason: format!("slack: {method} answered HTTP {}", status.as_u16()),
                after: retry_after,
            });
        }
        let answer: Value = serde_json::from_slice(&bytes).map_err(|_| {
            let reason = format!(
                "slack: {method} answered HTTP {} with a body that is not JSON",
                status.as_u16()
            );
            // A 4xx page (a wrong apiBaseUrl) will not change by waiting.
            if status.is_client_error() {
                SendError::Permanent { reason }
            } else {
                SendError::Retry {
                    reason,
                    after: None,
                }
            }
        })?;
        if answer["ok"] == true {
            return Ok(answer);
        }
        let code = answer["error"].as_str().unwrap_or("unknown_error");
        Err(classify_error(method, code, retry_after))
    }

    /// `auth.test` with the bot token: who the bot is.
    pub async fn auth_test(&self) -> Result<BotIdentity, SendError> {
        let answer = self.call("auth.test", &self.bot_token, Body::Empty).await?;
        let user_id = answer["user_id"]
            .as_str()
            .filter(|id| !id.is_empty())
            .ok_or_else(|| SendError::Retry {
                reason: "slack: auth.test named no user_id".to_string(),
                after: None,
            })?;
        Ok(BotIdentity {
            user_id: user_id.to_string(),
            bot_id: answer["bot_id"].as_str().map(str::to_string),
        })
    }

    /// `apps.connections.open` with the app-level token: a Socket Mode URL (one use).
    pub async fn open_connection(&self, app_token: &str) -> Result<String, SendError> {
        let answer = self
            .call("apps.connections.open", app_token, Body::Empty)
            .await?;
        answer["url"]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| SendError::Retry {
                reason: "slack: apps.connections.open named no url".to_string(),
                after: None,
            })
    }

    /// Where a message to `to` goes: a reply where the message was said, a message the
    /// bot starts in the person's direct-message channel.
    async fn channel_for(
        &self,
        to: &ChannelIdentity,
        context: &ReplyContext,
    ) -> Result<String, SendError> {
        match &context.chat {
            Some(chat) => Ok(chat.clone()),
            None => self.direct_channel(to.peer()).await,
        }
    }

    /// The direct-message channel with `user`, opened once and remembered.
    async fn direct_channel(&self, user: &str) -> Result<String, SendError> {
        if let Some(channel) = self.lock().get(user) {
            return Ok(channel.clone());
        }
        let answer = self
            .call(
                "conversations.open",
                &self.bot_token,
                Body::Json(json!({"users": user})),
            )
            .await?;
        let channel = answer["channel"]["id"]
            .as_str()
            .ok_or_else(|| SendError::Retry {
                reason: "slack: conversations.open named no channel".to_string(),
                after: None,
            })?
            .to_string();
        self.lock().insert(user.to_string(), channel.clone());
        Ok(channel)
    }

    fn lock(&self) -> parking_lot::MutexGuard<'_, HashMap<String, String>> {
        self.direct_channels.lock()
    }

    /// Whether the bot token may be sent to `url`: only Slack's own hosts over HTTPS or
    /// the configured API's own host (a file URL comes from an event, and the token
    /// must never go anywhere else).
    fn may_fetch(&self, url: &reqwest::Url) -> bool {
        let api = reqwest::Url::parse(&self.base).ok();
        let same_as_api = api.as_ref().is_some_and(|api| {
            api.scheme() == url.scheme()
                && api.host_str() == url.host_str()
                && api.port_or_known_default() == url.port_or_known_default()
        });
        let slack_files = url.scheme() == "https"
            && url
                .host_str()
                .is_some_and(|host| host == "slack.com" || host.ends_with(".slack.com"));
        same_as_api || slack_files
    }
}

fn network_error(method: &str, error: reqwest::Error) -> SendError {
    crate::http_client::unreachable(&format!("slack: {method}"), error)
}

/// Classifies an `ok: false` answer's error code.
pub fn classify_error(method: &str, code: &str, after: Option<Duration>) -> SendError {
    let reason = format!("slack: {method} refused: {code}");
    if TRANSIENT_ERRORS.contains(&code) {
        return SendError::Retry { reason, after };
    }
    if CREDENTIAL_ERRORS.contains(&code) {
        let hint = match code {
            "not_allowed_token_type" => {
                " (the bot token is xoxb-…, the app-level token for Socket Mode xapp-…)"
            }
            "missing_scope" => " (add the scope to the Slack app and reinstall it)",
            _ => "",
        };
        return SendError::Credentials {
            reason: format!("{reason}{hint}"),
        };
    }
    SendError::Permanent { reason }
}

impl Transport for SlackApi {
    fn kind(&self) -> ChannelKind {
        ChannelKind::Slack
    }

    fn max_chars(&self) -> usize {
        MAX_TEXT_CHARS
    }

    fn render(&self, markdown: &str) -> String {
        markdown_to_mrkdwn(markdown)
    }

    fn send<'a>(
        &'a self,
        to: &'a ChannelIdentity,
        text: &'a str,
        context: &'a ReplyContext,
        _part: usize,
    ) -> BoxFuture<'a, Result<String, SendError>> {
        Box::pin(async move {
            let channel = self.channel_for(to, context).await?;
            let mut body = json!({"channel": channel, "text": text, "mrkdwn": true});
            if let Some(code) = &context.approval {
                body["blocks"] = approval_blocks(text, code);
            }
            if let Some(thread) = &context.thread {
                body["thread_ts"] = json!(thread);
            }
            let answer = self
                .call("chat.postMessage", &self.bot_token, Body::Json(body))
                .await?;
            let ts = answer["ts"].as_str().ok_or_else(|| SendError::Retry {
                reason: "slack: chat.postMessage named no ts".to_string(),
                after: None,
            })?;
            let posted_in = answer["channel"].as_str().unwrap_or(&channel);
            Ok(format!("{posted_in}:{ts}"))
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
            // The external upload: ask for a URL, post the bytes there, then share it.
            let answer = self
                .call(
                    "files.getUploadURLExternal",
                    &self.bot_token,
                    Body::Form(vec![
                        ("filename", file.file_name.clone()),
                        ("length", file.bytes.len().to_string()),
                    ]),
                )
                .await?;
            let (Some(upload_url), Some(file_id)) =
                (answer["upload_url"].as_str(), answer["file_id"].as_str())
            else {
                return Err(SendError::Retry {
                    reason: "slack: files.getUploadURLExternal named no upload_url or file_id"
                        .to_string(),
                    after: None,
                });
            };
            // The upload URL takes no token; it must still be Slack's (or the API's own
            // host), so a forged answer cannot make the bot post the file elsewhere.
            let url = reqwest::Url::parse(upload_url)
                .ok()
                .filter(|url| self.may_fetch(url))
                .ok_or_else(|| SendError::Permanent {
                    reason: "slack: the upload URL is not on Slack's hosts".to_string(),
                })?;
            let response = self
                .http
                .post(url)
                .header(http::header::CONTENT_TYPE, &file.mime_type)
                .body(file.bytes.clone())
                .send()
                .await
                .map_err(|error| network_error("the file upload", error))?;
            let status = response.status();
            if !status.is_success() {
                let reason = format!("slack: the file upload answered HTTP {}", status.as_u16());
                return Err(if status.is_server_error() || status.as_u16() == 429 {
                    SendError::Retry {
                        reason,
                        after: None,
                    }
                } else {
                    SendError::Permanent { reason }
                });
            }
            let mut complete = json!({
                "files": [{"id": file_id, "title": file.file_name}],
                "channel_id": channel,
            });
            if let Some(thread) = &context.thread {
                complete["thread_ts"] = json!(thread);
            }
            self.call(
                "files.completeUploadExternal",
                &self.bot_token,
                Body::Json(complete),
            )
            .await?;
            Ok(format!("{channel}:{file_id}"))
        })
    }

    // `mark_read`: the default, nothing (bots have no read receipts on Slack).

    fn fetch_attachment<'a>(
        &'a self,
        attachment: &'a AttachmentRef,
        max_bytes: u64,
    ) -> BoxFuture<'a, Result<Vec<u8>, SendError>> {
        Box::pin(async move {
            let permanent = |reason: String| SendError::Permanent { reason };
            let url = reqwest::Url::parse(&attachment.id).map_err(|_| {
                permanent(format!(
                    "slack: file {:?} is not a download URL",
                    attachment.id
                ))
            })?;
            if !self.may_fetch(&url) {
                return Err(permanent(format!(
                    "slack: file URL {url} is not on Slack's file host; the bot token is not sent there"
                )));
            }
            let response = self
                .http
                .get(url)
                .bearer_auth(&self.bot_token)
                .send()
                .await
                .map_err(|error| network_error("file download", error))?;
            let status = response.status();
            if status.as_u16() == 429 || status.is_server_error() {
                return Err(SendError::Retry {
                    reason: format!("slack: file download answered HTTP {}", status.as_u16()),
                    after: None,
                });
            }
            if matches!(status.as_u16(), 401 | 403) {
                return Err(SendError::Credentials {
                    reason: format!(
                        "slack: file download refused (HTTP {}): the bot token needs files:read",
                        status.as_u16()
                    ),
                });
            }
            if !status.is_success() {
                return Err(permanent(format!(
                    "slack: file download answered HTTP {}",
                    status.as_u16()
                )));
            }
            let download = Download::of("slack", attachment, max_bytes);
            let data = download.read(response).await?;
            tracing::debug!(channel = %self.channel, bytes = data.len(), "slack: file downloaded");
            Ok(data)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_codes_are_classified() {
        assert!(matches!(
            classify_error("chat.postMessage", "ratelimited", Some(Duration::from_secs(3))),
            SendError::Retry { after: Some(after), .. } if after == Duration::from_secs(3)
        ));
        for code in ["invalid_auth", "token_revoked", "account_inactive"] {
            assert!(matches!(
                classify_error("chat.postMessage", code, None),
                SendError::Credentials { .. }
            ));
        }
        for code in [
            "channel_not_found",
            "not_in_channel",
            "msg_too_long",
            "is_archived",
        ] {
            match classify_error("chat.postMessage", code, None) {
                SendError::Permanent { reason } => assert!(reason.contains(code)),
                other => panic!("{code}: {other:?}"),
            }
        }
    }
}
