//! The Events API (`mode: events`): Slack posts each event to the bot's webhook, signed.
//!
//! A request counts only if `X-Slack-Signature` is `v0=` + the hex HMAC-SHA256, under
//! the signing secret, of `v0:<X-Slack-Request-Timestamp>:<raw body>` (compared in
//! constant time) and the timestamp is within five minutes of now, so a captured
//! request cannot be replayed later; nothing is parsed before that. Slack's
//! `url_verification` is answered with its challenge.

use hmac::{Hmac, Mac};
use http::HeaderMap;
use serde_json::Value;
use sha2::Sha256;

use super::{
    Mode, SlackSettings,
    events::{EventOutcome, EventReader, parse_event},
};
use crate::transport::{Webhook, WebhookDelivery, WebhookRefusal};

/// How far a request's timestamp may be from now.
pub const MAX_CLOCK_SKEW_SECONDS: i64 = 5 * 60;

/// The webhook of a channel in events mode.
pub struct EventsWebhook {
    settings: SlackSettings,
    signing_secret: String,
}

impl EventsWebhook {
    /// The webhook for `settings` (which must be in events mode to accept anything).
    pub fn new(settings: SlackSettings) -> Self {
        let signing_secret = match &settings.mode {
            Mode::Events { signing_secret } => signing_secret.clone(),
            // Never reached through `open`; an empty secret would verify nothing.
            Mode::Socket { .. } => String::new(),
        };
        Self {
            settings,
            signing_secret,
        }
    }
}

/// Checks a request's signature and timestamp against `now` (Unix seconds).
pub fn verify_request(
    signing_secret: &str,
    headers: &HeaderMap,
    body: &[u8],
    now: i64,
) -> Result<(), String> {
    if signing_secret.is_empty() {
        return Err("no signing secret is configured".to_string());
    }
    let header = |name: &str| headers.get(name).and_then(|value| value.to_str().ok());
    let timestamp =
        header("x-slack-request-timestamp").ok_or("missing X-Slack-Request-Timestamp header")?;
    let signature = header("x-slack-signature").ok_or("missing X-Slack-Signature header")?;
    let seconds: i64 = timestamp
        .trim()
        .parse()
        .map_err(|_| "X-Slack-Request-Timestamp is not a number".to_string())?;
    if (now - seconds).abs() > MAX_CLOCK_SKEW_SECONDS {
        return Err(format!(
            "X-Slack-Request-Timestamp is {}s from now (at most {MAX_CLOCK_SKEW_SECONDS}s): a stale or replayed request",
            now - seconds
        ));
    }
    let presented = signature
        .trim()
        .strip_prefix("v0=")
        .and_then(|digest| hex::decode(digest).ok())
        .ok_or("X-Slack-Signature is not a v0 signature")?;
    let mut mac = Hmac::<Sha256>::new_from_slice(signing_secret.as_bytes())
        .expect("HMAC takes keys of any length");
    mac.update(format!("v0:{}:", timestamp.trim()).as_bytes());
    mac.update(body);
    // `verify_slice` compares in constant time.
    mac.verify_slice(&presented)
        .map_err(|_| "X-Slack-Signature does not match the request".to_string())
}

impl Webhook for EventsWebhook {
    fn receive(
        &self,
        headers: &HeaderMap,
        body: &[u8],
        is_contact: &(dyn Fn(&saint_config::ChannelIdentity) -> bool + Sync),
    ) -> Result<WebhookDelivery, WebhookRefusal> {
        verify_request(
            &self.signing_secret,
            headers,
            body,
            jiff::Timestamp::now().as_second(),
        )
        .map_err(WebhookRefusal::Unauthorized)?;
        let payload: Value = serde_json::from_slice(body)
            .map_err(|error| WebhookRefusal::BadRequest(format!("body is not JSON: {error}")))?;
        let mut delivery = WebhookDelivery::default();
        match payload["type"].as_str() {
            Some("url_verification") => {
                let challenge = payload["challenge"].as_str().ok_or_else(|| {
                    WebhookRefusal::BadRequest("url_verification without a challenge".to_string())
                })?;
                delivery.response = Some(("text/plain", challenge.to_string()));
            }
            Some("event_callback") => {
                let reader = EventReader {
                    channel: &self.settings.channel,
                    bot_user_id: None,
                    rules: self.settings.groups,
                    is_contact,
                };
                match parse_event(&reader, &payload) {
                    EventOutcome::Message(message) => delivery.messages.push(*message),
                    EventOutcome::Withdrawn(platform_id) => delivery.withdrawn.push(platform_id),
                    EventOutcome::Skipped(reason) => {
                        delivery.skipped.push(format!("slack: {reason}"))
                    }
                }
            }
            other => delivery
                .skipped
                .push(format!("slack: request type {other:?} is not handled")),
        }
        Ok(delivery)
    }
}
