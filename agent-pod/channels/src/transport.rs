//! The one trait every outbound transport implements. Inbound is platform-shaped (a
//! webhook handler, a poller, a connection) and lives in each platform's module; what
//! it produces is always an [`InboundMessage`] for the inbox.

use std::{sync::Arc, time::Duration};

use futures::future::BoxFuture;
use http::HeaderMap;
use saint_config::{ChannelIdentity, ChannelKind, ErrorChain};
use tokio::sync::watch;

use crate::{
    channel_settings::{SettingsError, SettingsReader},
    message::{AttachmentRef, FilePayload, InboundMessage, ReplyContext},
};

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

    /// Sends a file (a voice note) to `to` as its own message; returns the platform's
    /// id for it. A channel that cannot carry files refuses it for good, with a reason
    /// naming the channel kind, so a reply's audio is never dropped in silence.
    fn send_file<'a>(
        &'a self,
        to: &'a ChannelIdentity,
        file: &'a FilePayload,
        context: &'a ReplyContext,
    ) -> BoxFuture<'a, Result<String, SendError>> {
        let _ = (to, context);
        let reason = format!(
            "{} channels cannot send {:?} files ({}): the voice note was not sent",
            self.kind().prefix(),
            file.kind,
            file.mime_type
        );
        Box::pin(async move { Err(SendError::Permanent { reason }) })
    }

    /// Tells the platform the message was read (best effort). Platforms without read
    /// receipts (Discord and Slack for bots, e-mail) do nothing: the default.
    fn mark_read<'a>(
        &'a self,
        message: &'a InboundMessage,
    ) -> BoxFuture<'a, Result<(), SendError>> {
        let _ = message;
        Box::pin(async { Ok(()) })
    }

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

    /// How many messages of one correspondent the bot answers per window, Contacts
    /// included, if the channel caps it: two robots answering each other (an
    /// out-of-office notice that does not say it is automatic) stop there.
    fn reply_limit(&self) -> Option<ReplyLimit> {
        None
    }
}

/// At most `replies` answered messages per correspondent in any `window`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplyLimit {
    /// Messages answered per window.
    pub replies: u32,
    /// The sliding window.
    pub window: Duration,
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

/// Why the inbox could not read a channel's position or store what it received. The
/// channel reports it and tries again; nothing was acknowledged to the platform.
#[derive(Debug, thiserror::Error)]
pub enum InboxError {
    /// The task that holds the database ended without an answer.
    #[error("the storage task failed")]
    TaskFailed,
    /// The database refused. Shown with its causes, as one line: it has no `source`, so
    /// the causes are printed once.
    #[error("{}", ErrorChain(.0.as_ref()))]
    Storage(Box<dyn std::error::Error + Send + Sync>),
}

impl InboxError {
    /// A storage failure: an error, or a message.
    pub fn storage(error: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        Self::Storage(error.into())
    }
}

/// Where a polling channel (IMAP, long polling) puts what it received: the agent's
/// inbox, with the channel's position saved in the same transaction.
pub trait InboxSink: Send + Sync {
    /// The channel's saved position, if any.
    fn cursor<'a>(&'a self, channel: &'a str) -> BoxFuture<'a, Result<Option<String>, InboxError>>;

    /// Stores `messages` (each with a reason not to answer it, if it is not to be
    /// answered) and the new position, in one transaction.
    fn commit<'a>(
        &'a self,
        channel: &'a str,
        messages: Vec<(InboundMessage, Option<String>)>,
        cursor: String,
    ) -> BoxFuture<'a, Result<(), InboxError>>;

    /// Like [`InboxSink::commit`], also recording that the senders withdrew (redacted,
    /// deleted) the messages with platform ids `withdrawn`, in the same transaction: one
    /// not yet answered never is, and the text of every one leaves the transcript. A sink
    /// that keeps no transcript stores the messages only.
    fn commit_with_withdrawals<'a>(
        &'a self,
        channel: &'a str,
        messages: Vec<(InboundMessage, Option<String>)>,
        withdrawn: Vec<String>,
        cursor: String,
    ) -> BoxFuture<'a, Result<(), InboxError>> {
        let _ = withdrawn;
        self.commit(channel, messages, cursor)
    }

    /// Reports the connection's state.
    fn report(&self, channel: &str, state: ChannelState);

    /// Whether `identity` belongs to a Contact, by the bot's current config (for group
    /// policies and for accepting invitations).
    fn is_contact(&self, identity: &ChannelIdentity) -> bool;
}

/// A channel's inbound side that connects out — long polling, a socket, a sync loop —
/// so the bot needs no public endpoint. It receives until `stop` turns true, puts what
/// it receives in `sink` (with its position, in one transaction) and only then tells
/// the platform it has it, reporting its state as it goes.
pub trait Connection: Send + Sync {
    /// Runs the connection until `stop` is set (or the sender side is dropped).
    fn run(
        self: Arc<Self>,
        sink: Arc<dyn InboxSink>,
        stop: watch::Receiver<bool>,
    ) -> BoxFuture<'static, ()>;
}

/// A channel's inbound side as platform deliveries to `/channels/<name>/webhook`.
pub trait Webhook: Send + Sync {
    /// Answers a `GET` verification handshake from its query parameters (WhatsApp's
    /// `hub.challenge`); platforms without one refuse it.
    fn handshake(&self, query: &[(String, String)]) -> Result<String, WebhookRefusal> {
        let _ = query;
        Err(WebhookRefusal::NotFound)
    }

    /// Authenticates a `POST` (headers and the raw body, already size-limited) and
    /// reads the messages in it. Nothing is stored when this refuses. `is_contact` says
    /// whether an identity belongs to a Contact by the bot's current config (for
    /// contacts-only group policies).
    fn receive(
        &self,
        headers: &HeaderMap,
        body: &[u8],
        is_contact: &(dyn Fn(&ChannelIdentity) -> bool + Sync),
    ) -> Result<WebhookDelivery, WebhookRefusal>;
}

/// What an authenticated webhook delivery held.
#[derive(Debug, Default)]
pub struct WebhookDelivery {
    /// Messages for the inbox.
    pub messages: Vec<InboundMessage>,
    /// What was skipped and why, for the log.
    pub skipped: Vec<String>,
    /// A body the platform expects back (Slack's `url_verification` challenge) as
    /// (content type, body); `None`: an empty 200.
    pub response: Option<(&'static str, String)>,
    /// Platform ids of messages their senders deleted (Slack `message_deleted`).
    pub withdrawn: Vec<String>,
}

/// Why a webhook request was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WebhookRefusal {
    /// Not signed by the platform (a wrong signature or secret, a stale timestamp): 401.
    #[error("{0}")]
    Unauthorized(String),
    /// A handshake with the wrong verify token: 403.
    #[error("{0}")]
    Forbidden(String),
    /// Signed but unreadable: 400.
    #[error("{0}")]
    BadRequest(String),
    /// This channel takes no such request: 404.
    #[error("no such endpoint on this channel")]
    NotFound,
}

/// What one channel brings when it is opened: its transport, and how messages come in.
pub struct OpenedChannel {
    /// Sends, read receipts, media.
    pub transport: Arc<dyn Transport>,
    /// An outbound connection feeding the inbox, for channels that connect out.
    pub connection: Option<Arc<dyn Connection>>,
    /// Webhook deliveries, for channels the platform calls.
    pub webhook: Option<Arc<dyn Webhook>>,
}

/// Why a channel could not be opened. Both name the channel.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OpenError {
    /// Its settings or secrets are incomplete or wrong.
    #[error(transparent)]
    Settings(#[from] SettingsError),
    /// Complete settings, but a part could not be built (a TLS setup, a resolver).
    #[error("channel {channel:?}: {reason}")]
    Start { channel: String, reason: String },
}

/// Whether the bot serves group conversations on a channel (`settings.groupPolicy`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum GroupPolicy {
    /// Anyone in a group the bot is in may address it (strangers get the default role).
    #[default]
    Open,
    /// Only people who are Contacts are answered in groups.
    Contacts,
    /// Group messages are never answered; direct messages only.
    Disabled,
}

/// Which group messages a channel answers: its policy and whether a message must
/// address the bot (mention it, reply to it). Direct messages are always answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GroupRules {
    /// `settings.groupPolicy`.
    pub policy: GroupPolicy,
    /// `settings.requireMention` (default true).
    pub require_mention: bool,
}

impl Default for GroupRules {
    fn default() -> Self {
        Self {
            policy: GroupPolicy::Open,
            require_mention: true,
        }
    }
}

impl GroupRules {
    /// Reads `groupPolicy` and `requireMention` (both optional).
    pub fn read(reader: &SettingsReader<'_>) -> Result<Self, SettingsError> {
        let policy = match reader.optional("groupPolicy").map(str::trim) {
            None | Some("open") => GroupPolicy::Open,
            Some("contacts") => GroupPolicy::Contacts,
            Some("disabled") => GroupPolicy::Disabled,
            Some(other) => {
                return Err(reader.invalid(
                    "groupPolicy",
                    format!("is {other:?}; use open, contacts or disabled"),
                ));
            }
        };
        let require_mention = match reader.optional("requireMention").map(str::trim) {
            None | Some("true") => true,
            Some("false") => false,
            Some(other) => {
                return Err(
                    reader.invalid("requireMention", format!("is {other:?}; use true or false"))
                );
            }
        };
        Ok(Self {
            policy,
            require_mention,
        })
    }

    /// Why a group message is not to be answered, if it is not: `addressed` says
    /// whether it mentions or replies to the bot, `known` whether its sender is a
    /// Contact ([`InboxSink::is_contact`]).
    pub fn skip_reason(&self, addressed: bool, known: bool) -> Option<&'static str> {
        match self.policy {
            GroupPolicy::Disabled => Some("group messages are not served on this channel"),
            GroupPolicy::Contacts if !known => {
                Some("the sender is not a contact and this channel answers only contacts in groups")
            }
            _ if self.require_mention && !addressed => Some("not addressed to the bot"),
            _ => None,
        }
    }
}
