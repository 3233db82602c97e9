//! The one trait every outbound transport implements. Inbound is platform-shaped (a
//! webhook handler, a poller, a connection) and lives in each platform's module; what
//! it produces is always an [`InboundMessage`] for the inbox.

use std::time::Duration;

use futures::future::BoxFuture;
use saint_config::{ChannelIdentity, ChannelKind};

use crate::message::{AttachmentRef, InboundMessage, ReplyContext};

/// Why a send failed, classified by what the sender should do next.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    /// Try again later: a rate limit, a server error, a network failure. `after` is the
    /// platform's own wait, when it gave one.
    #[error("{reason} (will retry)")]
    Retry {
        reason: String,
        after: Option<Duration>,
    },
    /// The platform refused this message for good (the reason is the platform's).
    #[error("{reason}")]
    Permanent { reason: String },
    /// The platform refused the bot's credentials: nothing on this channel can go out
    /// until they are fixed. Rows stay queued.
    #[error("{reason}")]
    Credentials { reason: String },
}

/// Sends on one channel.
pub trait Transport: Send + Sync {
    /// The channel kind.
    fn kind(&self) -> ChannelKind;

    /// Longest text part the platform takes, in characters.
    fn max_chars(&self) -> usize;

    /// The model's Markdown in the platform's markup.
    fn render(&self, markdown: &str) -> String;

    /// Sends part `part` (from 0) of a reply to `to`; returns the platform's id for it.
    fn send<'a>(
        &'a self,
        to: &'a ChannelIdentity,
        text: &'a str,
        context: &'a ReplyContext,
        part: usize,
    ) -> BoxFuture<'a, Result<String, SendError>>;

    /// Tells the platform the message was read (best effort; platforms without read
    /// receipts do nothing).
    fn mark_read<'a>(&'a self, message: &'a InboundMessage)
    -> BoxFuture<'a, Result<(), SendError>>;

    /// Downloads an attachment, refusing more than `max_bytes`.
    fn fetch_attachment<'a>(
        &'a self,
        attachment: &'a AttachmentRef,
        max_bytes: u64,
    ) -> BoxFuture<'a, Result<Vec<u8>, SendError>>;

    /// How long after a person last wrote the bot may still write to them, if the
    /// platform limits it (WhatsApp's customer-service window).
    fn reply_window(&self) -> Option<Duration> {
        None
    }
}

/// What a channel's connection is doing, as `/readyz` and `saint_channel_up` show it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ChannelState {
    /// Serving.
    Up,
    /// The last attempt failed and is being retried (the reason).
    Retrying(String),
    /// The platform refused the bot's credentials; nothing moves until they are fixed.
    CredentialsRefused(String),
}

/// Where a polling channel (IMAP, long polling) puts what it received: the agent's
/// inbox, with the channel's position saved in the same transaction.
pub trait InboxSink: Send + Sync {
    /// The channel's saved position, if any.
    fn cursor<'a>(&'a self, channel: &'a str) -> BoxFuture<'a, Result<Option<String>, String>>;

    /// Stores `messages` (each with a reason not to answer it, if it is not to be
    /// answered) and the new position, in one transaction.
    fn commit<'a>(
        &'a self,
        channel: &'a str,
        messages: Vec<(InboundMessage, Option<String>)>,
        cursor: String,
    ) -> BoxFuture<'a, Result<(), String>>;

    /// Reports the connection's state.
    fn report(&self, channel: &str, state: ChannelState);
}
