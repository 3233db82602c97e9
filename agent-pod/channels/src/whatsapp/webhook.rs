//! The webhook: Meta's verification handshake (GET) and signed deliveries (POST).
//!
//! A delivery counts only if `X-Hub-Signature-256` is `sha256=` + the hex HMAC-SHA256 of
//! the raw body under the app secret, compared in constant time; nothing is parsed
//! before that. Parsing keeps only messages addressed to the configured phone number
//! and turns each into an [`InboundMessage`]; status callbacks and message types the
//! bot does not handle are reported, not stored. A press of one of the bot's approval
//! reply buttons (`interactive` / `button_reply`) is the presser's typed answer.

use hmac::{Hmac, Mac};
use saint_config::{ChannelIdentity, ChannelKind};
use serde::Deserialize;
use sha2::Sha256;
use subtle::ConstantTimeEq;

use super::WhatsappSettings;
use crate::{
    buttons,
    message::{AttachmentRef, InboundMessage},
};

/// Why a webhook request was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WebhookError {
    #[error("missing X-Hub-Signature-256 header")]
    MissingSignature,
    #[error("X-Hub-Signature-256 does not match the body")]
    BadSignature,
    #[error("verification request has the wrong mode or token")]
    BadVerification,
    #[error("body is not a WhatsApp webhook payload: {0}")]
    Malformed(String),
}

/// Answers Meta's GET handshake: the challenge when `hub.mode` is `subscribe` and
/// `hub.verify_token` matches.
pub fn verify_challenge(
    settings: &WhatsappSettings,
    mode: Option<&str>,
    token: Option<&str>,
    challenge: Option<&str>,
) -> Result<String, WebhookError> {
    let token_matches = token
        .is_some_and(|token| bool::from(token.as_bytes().ct_eq(settings.verify_token.as_bytes())));
    match (mode, challenge) {
        (Some("subscribe"), Some(challenge)) if token_matches => Ok(challenge.to_string()),
        _ => Err(WebhookError::BadVerification),
    }
}

/// Checks a delivery's signature header against the raw body.
pub fn verify_signature(
    app_secret: &str,
    header: Option<&str>,
    body: &[u8],
) -> Result<(), WebhookError> {
    let header = header.ok_or(WebhookError::MissingSignature)?;
    let presented = header
        .strip_prefix("sha256=")
        .and_then(|hex_digest| hex::decode(hex_digest.trim()).ok())
        .ok_or(WebhookError::BadSignature)?;
    let mut mac = Hmac::<Sha256>::new_from_slice(app_secret.as_bytes())
        .expect("HMAC takes keys of any length");
    mac.update(body);
    // `verify_slice` compares in constant time.
    mac.verify_slice(&presented)
        .map_err(|_| WebhookError::BadSignature)
}

/// What one delivery held.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Delivery {
    /// Messages for the inbox.
    pub messages: Vec<InboundMessage>,
    /// Things left out, one line each (unknown types, other numbers, bad senders).
    pub skipped: Vec<String>,
    /// Delivery status callbacks (`sent`, `delivered`, `read`, `failed`) seen.
    pub statuses: usize,
}

#[derive(Deserialize)]
struct Payload {
    object: String,
    #[serde(default)]
    entry: Vec<Entry>,
}

#[derive(Deserialize)]
struct Entry {
    #[serde(default)]
    changes: Vec<Change>,
}

#[derive(Deserialize)]
struct Change {
    field: String,
    value: Value,
}

#[derive(Deserialize)]
struct Value {
    metadata: Option<Metadata>,
    #[serde(default)]
    contacts: Vec<Contact>,
    #[serde(default)]
    messages: Vec<Message>,
    #[serde(default)]
    statuses: Vec<serde_json::Value>,
}

#[derive(Deserialize)]
struct Metadata {
    phone_number_id: String,
}

#[derive(Deserialize)]
struct Contact {
    wa_id: String,
    profile: Option<Profile>,
}

#[derive(Deserialize)]
struct Profile {
    name: Option<String>,
}

#[derive(Deserialize)]
struct Message {
    from: String,
    id: String,
    timestamp: String,
    #[serde(rename = "type")]
    kind: String,
    text: Option<Text>,
    image: Option<Media>,
    document: Option<Media>,
    audio: Option<Media>,
    video: Option<Media>,
    sticker: Option<Media>,
    interactive: Option<Interactive>,
}

/// An interactive reply: `button_reply` for a reply button pressed.
#[derive(Deserialize)]
struct Interactive {
    #[serde(rename = "type")]
    kind: String,
    button_reply: Option<ButtonReply>,
}

#[derive(Deserialize)]
struct ButtonReply {
    id: String,
}

#[derive(Deserialize)]
struct Text {
    body: String,
}

#[derive(Deserialize)]
struct Media {
    id: String,
    mime_type: Option<String>,
    caption: Option<String>,
    filename: Option<String>,
}

/// Parses a verified delivery for the channel of `settings`.
pub fn parse_delivery(settings: &WhatsappSettings, body: &[u8]) -> Result<Delivery, WebhookError> {
    let payload: Payload =
        serde_json::from_slice(body).map_err(|error| WebhookError::Malformed(error.to_string()))?;
    if payload.object != "whatsapp_business_account" {
        return Err(WebhookError::Malformed(format!(
            "object is {:?}, not \"whatsapp_business_account\"",
            payload.object
        )));
    }
    let mut delivery = Delivery::default();
    for change in payload.entry.into_iter().flat_map(|entry| entry.changes) {
        if change.field != "messages" {
            delivery
                .skipped
                .push(format!("field {:?} ignored", change.field));
            continue;
        }
        let value = change.value;
        delivery.statuses += value.statuses.len();
        let number = value
            .metadata
            .as_ref()
            .map(|metadata| metadata.phone_number_id.as_str());
        if number != Some(settings.phone_number_id.as_str()) {
            if !value.messages.is_empty() {
                delivery.skipped.push(format!(
                    "{} message(s) for phone number id {:?}, not this channel's",
                    value.messages.len(),
                    number.unwrap_or("")
                ));
            }
            continue;
        }
        for message in value.messages {
            match normalise(settings, &value.contacts, message) {
                Ok(message) => delivery.messages.push(message),
                Err(skipped) => delivery.skipped.push(skipped),
            }
        }
    }
    Ok(delivery)
}

fn normalise(
    settings: &WhatsappSettings,
    contacts: &[Contact],
    message: Message,
) -> Result<InboundMessage, String> {
    // `from` is the sender's number in international form without `+`.
    let sender = ChannelIdentity::parse(ChannelKind::Whatsapp, &format!("+{}", message.from))
        .map_err(|error| {
            format!(
                "message {} skipped: sender {:?}: {error}",
                message.id, message.from
            )
        })?;
    let sent_at = message
        .timestamp
        .parse::<i64>()
        .ok()
        .and_then(|seconds| jiff::Timestamp::from_second(seconds).ok())
        .unwrap_or_else(jiff::Timestamp::now)
        .to_string();
    let mut pressed = false;
    let (text, attachments) = match message.kind.as_str() {
        "text" => (
            message.text.map(|text| text.body).unwrap_or_default(),
            Vec::new(),
        ),
        // A reply button pressed: only the bot's approval buttons are read, as the
        // presser's typed answer (see `crate::buttons`).
        "interactive" => {
            let reply = message
                .interactive
                .filter(|interactive| interactive.kind == "button_reply")
                .and_then(|interactive| interactive.button_reply)
                .ok_or_else(|| {
                    format!(
                        "message {} skipped: an interactive reply that is not a button reply",
                        message.id
                    )
                })?;
            let text = buttons::pressed_text(&reply.id).ok_or_else(|| {
                format!(
                    "message {} skipped: button {:?} is not one of the bot's buttons",
                    message.id, reply.id
                )
            })?;
            pressed = true;
            (text, Vec::new())
        }
        kind @ ("image" | "document" | "audio" | "video" | "sticker") => {
            let media = match kind {
                "image" => message.image,
                "document" => message.document,
                "audio" => message.audio,
                "video" => message.video,
                _ => message.sticker,
            }
            .ok_or_else(|| {
                format!(
                    "message {} skipped: {kind} without its {kind} object",
                    message.id
                )
            })?;
            let attachment = AttachmentRef {
                id: media.id,
                kind: kind.to_string(),
                mime_type: media
                    .mime_type
                    .unwrap_or_else(|| "application/octet-stream".to_string()),
                file_name: media.filename,
            };
            (media.caption.unwrap_or_default(), vec![attachment])
        }
        other => {
            return Err(format!(
                "message {} skipped: type {other:?} is not handled (text, image, document, audio, video and sticker are)",
                message.id
            ));
        }
    };
    let display_name = contacts
        .iter()
        .find(|contact| contact.wa_id == message.from)
        .and_then(|contact| contact.profile.as_ref()?.name.clone());
    Ok(InboundMessage {
        channel: settings.channel.clone(),
        kind: ChannelKind::Whatsapp,
        platform_id: message.id.clone(),
        sender,
        // Meta authenticates the number and signs the delivery.
        sender_verified: true,
        unverified_origin: None,
        display_name,
        text,
        attachments,
        sent_at,
        context: crate::message::ReplyContext {
            reply_to: Some(message.id),
            ..Default::default()
        },
        conversation: None,
        pressed,
    })
}
