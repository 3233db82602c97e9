//! The one trait every outbound transport implements. Inbound is platform-shaped (a
//! webhook handler, a poller, a connection) and lives in each platform's module; what
//! it produces is always an [`InboundMessage`] for the inbox.

use std::time::Duration;

use futures::future::BoxFuture;
use saint_config::{ChannelIdentity, ChannelKind};

use crate::message::{AttachmentRef, InboundMessage};

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

    /// Sends one part to `to`; returns the platform's id for it.
    fn send<'a>(
        &'a self,
        to: &'a ChannelIdentity,
        text: &'a str,
        reply_to: Option<&'a str>,
    ) -> BoxFuture<'a, Result<String, SendError>>;

    /// Tells the platform the message was read (best effort; platforms without read
    /// receipts do nothing).
    fn mark_read<'a>(&'a self, message: &'a InboundMessage) -> BoxFuture<'a, Result<(), SendError>>;

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
