//! Long polling: `getMe` once per session (the bot's id and username, and a check of
//! the token), then `getUpdates` with the saved offset, again and again. Each batch's
//! messages and the next offset are committed to the inbox in one transaction, and only
//! then is the new offset asked for — which is what tells Telegram to forget the batch.
//! The batch's button presses are acknowledged (`answerCallbackQuery`) once stored.
//! A crash before the commit gets the same updates again; the inbox's unique message
//! ids make that harmless. Failures reconnect with backoff (at least Telegram's
//! `retry_after`); a refused token waits a minute and tries again.
//!
//! Webhook mode uses [`IdentityCheck`]: `getMe` alone, so the token is checked and the
//! webhook learns the username mentions are recognised by.

use std::{
    convert::Infallible,
    sync::{Arc, OnceLock},
    time::Duration,
};

use serde_json::json;

use super::{
    api::{ApiError, BotApi, BotUser},
    update::{BotIdentity, Received, Update, read_update},
};
use crate::{
    reconnect::{Backoff, Policy, SessionEnd, Sessions},
    transport::{ChannelState, InboxSink},
};

/// How long one `getUpdates` waits for updates.
pub const POLL_TIMEOUT: Duration = Duration::from_secs(30);

impl From<ApiError> for SessionEnd {
    fn from(error: ApiError) -> Self {
        // 404 is what the Bot API answers for a token that is not even well-formed.
        if matches!(error.status, 401 | 404) {
            return Self::CredentialsRefused(error.to_string());
        }
        let reason = if error.status == 409 {
            format!(
                "{error}: a webhook is set for this bot, so getUpdates is refused; delete it \
                 (deleteWebhook) or use settings.mode: webhook"
            )
        } else {
            error.to_string()
        };
        Self::Failed {
            reason,
            after: error.retry_after,
        }
    }
}

/// The `getUpdates` loop of a polling channel.
pub struct Poller {
    api: Arc<BotApi>,
    poll_timeout: Duration,
}

impl Poller {
    /// A poller on `api`.
    pub fn new(api: Arc<BotApi>) -> Self {
        Self {
            api,
            poll_timeout: POLL_TIMEOUT,
        }
    }

    async fn session(
        &self,
        sink: &dyn InboxSink,
        backoff: &mut Backoff,
    ) -> Result<Infallible, SessionEnd> {
        let settings = self.api.settings();
        let channel = settings.channel.as_str();
        let me = self.api.get_me().await?;
        let bot = BotIdentity {
            id: me.id,
            username: me.username.clone(),
        };
        let mut offset: Option<i64> = sink
            .cursor(channel)
            .await
            .map_err(|error| SessionEnd::Failed {
                reason: format!("failed to read the saved update offset: {error}"),
                after: None,
            })?
            .and_then(|cursor| cursor.parse().ok());
        let mut reported_up = false;
        loop {
            let mut request = json!({
                "timeout": self.poll_timeout.as_secs(),
                // Button presses (`callback_query`) answer approval requests.
                "allowed_updates": ["message", "callback_query"],
            });
            if let Some(offset) = offset {
                request["offset"] = json!(offset);
            }
            let updates: Vec<serde_json::Value> = self
                .api
                .call(
                    "getUpdates",
                    &request,
                    self.poll_timeout + Duration::from_secs(15),
                )
                .await?;
            if !reported_up {
                sink.report(channel, ChannelState::Up);
                reported_up = true;
            }
            let Some(last) = updates
                .iter()
                .filter_map(|update| update["update_id"].as_i64())
                .max()
            else {
                backoff.reset();
                continue;
            };
            let mut messages = Vec::new();
            let mut presses = Vec::new();
            for raw in updates {
                // Every press is acknowledged, even one whose update cannot be read.
                presses.extend(raw["callback_query"]["id"].as_str().map(str::to_string));
                let update: Update = match serde_json::from_value(raw) {
                    Ok(update) => update,
                    Err(error) => {
                        tracing::warn!(channel, %error, "telegram: an unreadable update is skipped");
                        continue;
                    }
                };
                match read_update(channel, &update, &bot, &settings.group_rules, &|identity| {
                    sink.is_contact(identity)
                }) {
                    Received::Message(message) => messages.push((*message, None)),
                    Received::Skipped(reason) => tracing::debug!(channel, "telegram: {reason}"),
                }
            }
            let next = last + 1;
            // The offset that confirms this batch is asked for only once it is stored.
            sink.commit(channel, messages, next.to_string())
                .await
                .map_err(|error| SessionEnd::Failed {
                    reason: format!("failed to store received messages: {error}"),
                    after: None,
                })?;
            offset = Some(next);
            // Stored: the pressers' clients may stop waiting (best effort; a failure
            // leaves a spinner, nothing else).
            for press in presses {
                if let Err(error) = self.api.answer_callback_query(&press).await {
                    tracing::debug!(channel, %error, "telegram: a button press was not acknowledged");
                }
            }
            // Reset only once a batch is stored: an inbox that keeps failing backs off.
            backoff.reset();
        }
    }
}

impl Sessions for Poller {
    const POLICY: Policy = Policy::quiet()
        .refused("telegram: the bot token was refused")
        .failed("telegram: polling failed; retrying");

    fn channel(&self) -> &str {
        &self.api.settings().channel
    }

    async fn run_session(&self, sink: &dyn InboxSink, backoff: &mut Backoff) -> SessionEnd {
        let Err(end) = self.session(sink, backoff).await;
        end
    }
}

/// Webhook mode's connection: `getMe` until it answers (reporting a refused token),
/// then nothing but waiting for `stop`.
pub struct IdentityCheck {
    api: Arc<BotApi>,
    identity: Arc<OnceLock<BotUser>>,
}

impl IdentityCheck {
    /// Checks `api`'s token and fills `identity`.
    pub fn new(api: Arc<BotApi>, identity: Arc<OnceLock<BotUser>>) -> Self {
        Self { api, identity }
    }
}

impl Sessions for IdentityCheck {
    // Nothing is logged: the state reported says it.
    const POLICY: Policy = Policy::quiet();

    fn channel(&self) -> &str {
        &self.api.settings().channel
    }

    // `getMe` until it answers; then the session serves until the connection stops.
    async fn run_session(&self, sink: &dyn InboxSink, _: &mut Backoff) -> SessionEnd {
        match self.api.get_me().await {
            Ok(user) => {
                let _ = self.identity.set(user);
                sink.report(self.channel(), ChannelState::Up);
                std::future::pending().await
            }
            Err(error) => error.into(),
        }
    }
}
