//! Chat channels: how people reach a bot where they already talk.
//!
//! A channel is one transport (inbound: webhook, long poll or connection;
//! outbound: send) plus the platform rules that go with it. Inbound messages
//! are normalised to the typed channel identity and made durable in the
//! [`queue`] before the platform is acknowledged; replies leave through the
//! same database's outbox, written in the transaction that stores the answer.
//!
//! This crate holds what is pure or platform-specific: the wire types, the
//! queue's SQL, splitting and formatting, and each platform's protocol. The
//! agent wires them to its HTTP server, its turn loop and its metrics.

pub mod attachments;
pub mod buttons;
pub mod discord;
pub mod email;
pub mod format;
pub mod matrix;
pub mod message;
pub mod multipart;
pub mod open;
pub mod queue;
pub mod settings;
pub mod slack;
pub mod telegram;
pub mod transport;
pub mod whatsapp;

#[cfg(feature = "scripted")]
pub mod scripted;

pub use message::{
    AttachmentRef, Conversation, FileKind, FilePayload, InboundMessage, OutboundBody, OutboundFile,
    ReplyContext,
};
pub use settings::SettingsError;
pub use transport::{
    ChannelState, Connection, GroupPolicy, GroupRules, InboxSink, OpenError, OpenedChannel,
    ReplyLimit, SendError, Transport, Webhook, WebhookDelivery, WebhookRefusal,
};
