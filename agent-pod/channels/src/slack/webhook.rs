//! The Events API (`mode: events`): Slack posts each event to the bot's webhook, signed.
//!
//! A request counts only if `X-Slack-Signature` is `v0=` + the hex HMAC-SHA256, under
//! the signing secret, of `v0:<X-Slack-Request-Timestamp>:<raw body>` (compared in
//! constant time) and the timestamp is within five minutes of now, so a captured
//! request cannot be replayed later; nothing is parsed before that. Slack's
//! `url_verification` is answered with its challenge. The app's Interactivity request
//! URL may point here too: a button press comes as a signed form (`payload=…`).

use hmac::{Hmac, Mac};
use http::HeaderMap;
use serde_json::Value;
use sha2::Sha256;

use super::{
    Mode, SlackSettings,
    event_callback::{EventOutcome, EventReader, parse_event},
    interaction::parse_interaction,
};
use crate::transport::{Webhook, WebhookDelivery, WebhookRefusal};

/// How far a request's timestamp may be from now.
pub const MAX_CLOCK_SKEW_SECONDS: i64 = 5 * 60;

/// Why a request to the Events API webhook is not Slack's.
#[derive(Debug, thiserror::Error)]
pub enum SignatureError {
    #[error("no signing secret is configured")]
    NoSecret,
    #[error("missing {header} header")]
    MissingHeader { header: &'static str },
    #[error("X-Slack-Request-Timestamp is not a number")]
    Timestamp,
    #[error(
        "X-Slack-Request-Timestamp is {skew}s from now (at most {MAX_CLOCK_SKEW_SECONDS}s): a stale or replayed request"
    )]
    Stale { skew: i64 },
    #[error("X-Slack-Signature is not a v0 signature")]
    Malformed,
    #[error("X-Slack-Signature does not match the request")]
    Mismatch,
}

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
) -> Result<(), SignatureError> {
    if signing_secret.is_empty() {
        return Err(SignatureError::NoSecret);
    }
    // Looked up by the lower-case name, named in the error as Slack spells it.
    let header = |name: &str, header: &'static str| {
        headers
            .get(name)
            .and_then(|value| value.to_str().ok())
            .ok_or(SignatureError::MissingHeader { header })
    };
    let timestamp = header("x-slack-request-timestamp", "X-Slack-Request-Timestamp")?;
    let signature = header("x-slack-signature", "X-Slack-Signature")?;
    let seconds: i64 = timestamp
        .trim()
        .parse()
        .map_err(|_| SignatureError::Timestamp)?;
    if (now - seconds).abs() > MAX_CLOCK_SKEW_SECONDS {
        return Err(SignatureError::Stale {
            skew: now - seconds,
        });
    }
    let presented = signature
        .trim()
        .strip_prefix("v0=")
        .and_then(|digest| hex::decode(digest).ok())
        .ok_or(SignatureError::Malformed)?;
    let mut mac = Hmac::<Sha256>::new_from_slice(signing_secret.as_bytes())
        .expect("HMAC takes keys of any length");
    mac.update(format!("v0:{}:", timestamp.trim()).as_bytes());
    mac.update(body);
    // `verify_slice` compares in constant time.
    mac.verify_slice(&presented)
        .map_err(|_| SignatureError::Mismatch)
}

/// The `payload` field of a form body (`payload=%7B…`), if the body is such a form.
fn form_payload(body: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(body).ok()?;
    if !text.starts_with("payload=") {
        return None;
    }
    let url = reqwest::Url::parse(&format!("http://form/?{text}")).ok()?;
    url.query_pairs()
        .find(|(key, _)| key == "payload")
        .map(|(_, value)| value.into_owned())
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
        .map_err(|error| WebhookRefusal::Unauthorized(error.to_string()))?;
        let reader = EventReader {
            channel: &self.settings.channel,
            bot_user_id: None,
            rules: self.settings.groups,
            is_contact,
        };
        let mut delivery = WebhookDelivery::default();
        // The Interactivity request URL (a button pressed) posts `payload=<JSON>` as a
        // form, signed like the events.
        if let Some(interaction) = form_payload(body) {
            let payload: Value = serde_json::from_str(&interaction).map_err(|error| {
                WebhookRefusal::BadRequest(format!("interaction payload is not JSON: {error}"))
            })?;
            match parse_interaction(&reader, &payload) {
                EventOutcome::Message(message) => delivery.messages.push(*message),
                EventOutcome::Skipped(reason) => delivery.skipped.push(format!("slack: {reason}")),
                EventOutcome::Withdrawn(_) => {}
            }
            return Ok(delivery);
        }
        let payload: Value = serde_json::from_slice(body)
            .map_err(|error| WebhookRefusal::BadRequest(format!("body is not JSON: {error}")))?;
        match payload["type"].as_str() {
            Some("url_verification") => {
                let challenge = payload["challenge"].as_str().ok_or_else(|| {
                    WebhookRefusal::BadRequest("url_verification without a challenge".to_string())
                })?;
                delivery.response = Some(("text/plain", challenge.to_string()));
            }
            Some("event_callback") => match parse_event(&reader, &payload) {
                EventOutcome::Message(message) => delivery.messages.push(*message),
                EventOutcome::Withdrawn(platform_id) => delivery.withdrawn.push(platform_id),
                EventOutcome::Skipped(reason) => delivery.skipped.push(format!("slack: {reason}")),
            },
            other => delivery
                .skipped
                .push(format!("slack: request type {other:?} is not handled")),
        }
        Ok(delivery)
    }
}

#[cfg(test)]
mod tests {
    use saint_config::ChannelConfig;

    use super::*;

    const SECRET: &str = "signing-secret-for-presses";

    fn webhook() -> EventsWebhook {
        let channel = ChannelConfig {
            name: "slack".to_string(),
            kind: saint_config::ChannelKind::Slack,
            settings: [("mode".to_string(), "events".to_string())].into(),
            secret_env: [
                ("botToken".to_string(), "BOT".to_string()),
                ("signingSecret".to_string(), "SECRET".to_string()),
            ]
            .into(),
        };
        let settings = SlackSettings::read(&channel, &|variable| {
            Some(
                if variable == "SECRET" {
                    SECRET
                } else {
                    "xoxb-1"
                }
                .to_string(),
            )
        })
        .unwrap();
        EventsWebhook::new(settings)
    }

    fn signed(body: &[u8]) -> HeaderMap {
        let now = jiff::Timestamp::now().as_second();
        let mut mac = Hmac::<Sha256>::new_from_slice(SECRET.as_bytes()).unwrap();
        mac.update(format!("v0:{now}:").as_bytes());
        mac.update(body);
        let mut headers = HeaderMap::new();
        headers.insert("x-slack-request-timestamp", now.into());
        let signature = format!("v0={}", hex::encode(mac.finalize().into_bytes()));
        headers.insert("x-slack-signature", signature.parse().unwrap());
        headers
    }

    #[test]
    fn a_signed_interactivity_post_is_a_press_and_an_unsigned_one_is_refused() {
        let payload = serde_json::json!({"type": "block_actions", "user": {"id": "U0ANA"},
            "container": {"type": "message", "message_ts": "1.2", "channel_id": "D0ANA"},
            "actions": [{"type": "button", "action_id": "approval.reject",
                         "value": "reject:K7QX2P", "action_ts": "1700000000.1"}]});
        let body = format!(
            "payload={}",
            reqwest::Url::parse_with_params("http://x/", [("p", payload.to_string())])
                .unwrap()
                .query()
                .unwrap()
                .trim_start_matches("p=")
        );
        let delivery = webhook()
            .receive(&signed(body.as_bytes()), body.as_bytes(), &|_| false)
            .unwrap();
        assert_eq!(delivery.messages.len(), 1, "{:?}", delivery.skipped);
        assert_eq!(delivery.messages[0].text, "reject K7QX2P");
        assert!(delivery.messages[0].pressed);
        let refused = webhook().receive(&HeaderMap::new(), body.as_bytes(), &|_| false);
        assert!(matches!(refused, Err(WebhookRefusal::Unauthorized(_))));
    }
}
