//! The `message` tool: sends a message to a contact on a channel, and the [`Outbox`] the
//! runtime provides for delivery.
//!
//! Touches nothing but the outbox it is given (and, for [`FileOutbox`], one JSON-lines
//! file). Role rules: the role must allow `message`; external roles never send; the
//! recipient must be a known contact (by slug or one of their identities) and the
//! channel must be one the bot has configured. Arbitrary numbers or addresses of people
//! outside the contact list are refused, so the bot cannot be used to spam strangers.

use std::{io::Write, path::PathBuf, sync::Arc};

use futures::future::BoxFuture;
use saint_config::{BotConfig, ChannelIdentity, ContactConfig};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Permit, ToolContext, ToolError, ToolOutput, TypedTool};
use parking_lot::Mutex;

/// Longest message body, in characters.
const MAX_MESSAGE_CHARS: usize = 4_000;

/// One outbound message, as the tool hands it to the outbox.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OutboundMessage {
    /// Slug of the person who asked for it.
    pub requested_by: String,
    /// Their role.
    pub requested_by_role: String,
    /// Session the request came from.
    pub session_key: String,
    /// Channel name (from the config's `channels[].name`).
    pub channel: String,
    /// Recipient identity (`whatsapp:+385…`).
    pub recipient: String,
    /// Recipient contact slug.
    pub recipient_slug: String,
    /// The text.
    pub text: String,
}

/// What happened to a message.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum DeliveryStatus {
    /// The platform took it.
    Sent,
    /// In the durable outbox; the channel's sender delivers it (retrying if the platform
    /// asks to wait). `last_error` is the last failed attempt's reason, if any.
    Queued { last_error: Option<String> },
}

/// Why the outbox could not take a message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("failed to deliver the message: {0}")]
pub struct OutboxError(pub String);

/// Delivers outbound messages; provided by the runtime (channels without a transport
/// record the message instead).
pub trait Outbox: Send + Sync {
    /// Delivers or records `message`.
    fn deliver(
        &self,
        message: OutboundMessage,
    ) -> BoxFuture<'_, Result<DeliveryStatus, OutboxError>>;
}

/// An outbox that appends every message to a JSON-lines file (e.g. `logs/outbox.jsonl`)
/// — the record for channels without a transport.
#[derive(Debug)]
pub struct FileOutbox {
    path: PathBuf,
    lock: Mutex<()>,
}

impl FileOutbox {
    /// An outbox appending to `path` (created on first use, parent included).
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            lock: Mutex::new(()),
        }
    }

    /// Every message recorded so far.
    pub fn recorded(&self) -> Result<Vec<OutboundMessage>, OutboxError> {
        let text = match std::fs::read_to_string(&self.path) {
            Ok(text) => text,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(error) => return Err(OutboxError(error.to_string())),
        };
        text.lines()
            .map(|line| serde_json::from_str(line).map_err(|error| OutboxError(error.to_string())))
            .collect()
    }
}

impl Outbox for FileOutbox {
    fn deliver(
        &self,
        message: OutboundMessage,
    ) -> BoxFuture<'_, Result<DeliveryStatus, OutboxError>> {
        Box::pin(async move {
            let line =
                serde_json::to_string(&message).map_err(|error| OutboxError(error.to_string()))?;
            let _guard = self.lock.lock();
            if let Some(parent) = self.path.parent() {
                std::fs::create_dir_all(parent)
                    .map_err(|_| OutboxError("outbox unavailable".to_string()))?;
            }
            let mut file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.path)
                .map_err(|_| OutboxError("outbox unavailable".to_string()))?;
            writeln!(file, "{line}").map_err(|_| OutboxError("outbox unavailable".to_string()))?;
            file.sync_data()
                .map_err(|_| OutboxError("outbox unavailable".to_string()))?;
            Ok(DeliveryStatus::Queued { last_error: None })
        })
    }
}

/// Sends messages to contacts.
#[derive(Clone)]
pub struct MessageTool {
    outbox: Arc<dyn Outbox>,
}

impl std::fmt::Debug for MessageTool {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("MessageTool")
            .finish_non_exhaustive()
    }
}

impl MessageTool {
    /// A tool delivering through `outbox`.
    pub fn new(outbox: Arc<dyn Outbox>) -> Self {
        Self { outbox }
    }
}

/// What `message` takes.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct MessageInput {
    /// Contact slug, name or identity
    #[serde(alias = "recipient")]
    pub to: String,
    /// Channel name or kind (optional)
    pub channel: Option<String>,
    /// Message text
    #[serde(alias = "message")]
    pub text: String,
}

impl TypedTool for MessageTool {
    type Input = MessageInput;
    const NAME: &'static str = "message";
    const DESCRIPTION: &'static str = "Send a message to a known contact. `to` is the contact's name/slug or one of their \
         identities (e.g. `email:ana@example.com`); `channel` optionally picks the channel.";

    fn run<'a>(
        &'a self,
        _permit: &'a Permit,
        context: &'a ToolContext,
        input: MessageInput,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            if context.caller.role.external || !context.caller.known {
                return Err(ToolError::Denied(
                    "messages can only be sent for internal contacts".to_string(),
                ));
            }
            let MessageInput { to, channel, text } = input;
            if text.trim().is_empty() {
                return Err(ToolError::InvalidInput(
                    "text must not be empty".to_string(),
                ));
            }
            if text.chars().count() > MAX_MESSAGE_CHARS {
                return Err(ToolError::InvalidInput(format!(
                    "text is longer than {MAX_MESSAGE_CHARS} characters"
                )));
            }
            let (contact, channel_name, identity) =
                route(&context.config, &to, channel.as_deref())?;
            if let Some(allowed) = &context.caller.may_message
                && !allowed.iter().any(|slug| contact.slug == *slug)
            {
                return Err(ToolError::Denied(format!(
                    "this turn may message only {}",
                    if allowed.is_empty() {
                        "nobody".to_string()
                    } else {
                        allowed.join(", ")
                    }
                )));
            }
            let message = OutboundMessage {
                requested_by: context.caller.slug.clone(),
                requested_by_role: context.caller.role_name.clone(),
                session_key: context.caller.session_key.clone(),
                channel: channel_name,
                recipient: identity.clone(),
                recipient_slug: contact.slug.to_string(),
                text,
            };
            let status = self
                .outbox
                .deliver(message)
                .await
                .map_err(|error| ToolError::Failed(error.to_string()))?;
            let status = match status {
                DeliveryStatus::Sent => "sent".to_string(),
                DeliveryStatus::Queued { last_error: None } => {
                    "queued (it goes out as soon as the channel takes it)".to_string()
                }
                DeliveryStatus::Queued {
                    last_error: Some(error),
                } => format!("queued; the last attempt failed and is retried: {error}"),
            };
            let mut output = ToolOutput::text(format!(
                "message to {} via {identity}: {status}",
                contact.name
            ));
            output
                .metering
                .insert("recipient".to_string(), contact.slug.to_string().into());
            Ok(output)
        })
    }
}

/// Finds the contact, the channel and the identity to send to: the identity `to` names,
/// else the contact's first identity on a configured channel (`channel` narrows it).
pub fn route<'c>(
    config: &'c BotConfig,
    to: &str,
    channel: Option<&str>,
) -> Result<(&'c ContactConfig, String, String), ToolError> {
    let wanted = to.trim().to_lowercase();
    // An identity the model named goes through the same parser as inbound senders, so
    // `whatsapp:+385 99 123 4567` and `slack:u024be7lh` find their contact too.
    let named: Option<ChannelIdentity> = to.trim().parse().ok();
    let names_identity = |contact: &ContactConfig| {
        named
            .as_ref()
            .is_some_and(|named| contact.identities.contains(named))
    };
    let contact = config
        .contacts
        .iter()
        .find(|contact| {
            contact.slug.as_str().to_lowercase() == wanted
                || contact.name.to_lowercase() == wanted
                || names_identity(contact)
        })
        .ok_or_else(|| {
            ToolError::Denied(format!(
                "{to:?} is not a known contact; messages go only to contacts"
            ))
        })?;
    // The identity the model named, or the first one on a configured channel.
    let candidates: Vec<&ChannelIdentity> = match &named {
        Some(named) if contact.identities.contains(named) => vec![named],
        _ => contact.identities.iter().collect(),
    };
    for identity in candidates {
        let prefix = identity.kind().prefix();
        let configured = config.channels.iter().find(|configured| {
            configured.kind == identity.kind()
                && channel.is_none_or(|wanted| wanted == configured.name || wanted == prefix)
        });
        if let Some(configured) = configured {
            return Ok((contact, configured.name.clone(), identity.to_string()));
        }
    }
    Err(ToolError::InvalidInput(format!(
        "{} has no identity on {}",
        contact.name,
        channel.map_or("any configured channel".to_string(), |channel| format!(
            "channel {channel:?}"
        ))
    )))
}
