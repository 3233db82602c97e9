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
//!
//! Each platform folder names the same role the same way; inbound files keep the
//! platform's own word for how messages arrive.
//!
//! | role | discord | matrix | slack | telegram | whatsapp | email |
//! | --- | --- | --- | --- | --- | --- | --- |
//! | the platform's API client, sends | `api.rs` | `api.rs` | `api.rs` | `api.rs` | `api.rs` | `smtp.rs` |
//! | Markdown in the platform's markup | `render.rs` | `render.rs` | `render.rs` | `render.rs` | (plain) | (plain) |
//! | inbound | `gateway.rs` | `sync.rs` | `socket.rs`, `event_callback.rs`, `webhook.rs` | `poll.rs`, `update.rs` | `webhook.rs` | `imap.rs`, `inbound.rs` |
//! | button presses | `interaction.rs` | | `interaction.rs` | (in `update.rs`) | (in `webhook.rs`) | |
//!
//! What every client shares — an unreachable server reported without its URL,
//! `Retry-After`, the capped attachment download — is [`http_client`]; the reconnect loop
//! every connection runs (backoff, waits, reported states) is [`reconnect`].

pub mod attachments;
pub mod buttons;
pub mod channel_settings;
pub mod discord;
pub mod email;
pub mod format;
pub mod http_client;
pub mod matrix;
pub mod message;
pub mod multipart;
pub mod open;
pub mod queue;
pub mod reconnect;
pub mod slack;
pub mod telegram;
pub mod transport;
pub mod whatsapp;

pub use channel_settings::SettingsError;
pub use message::{
    AttachmentRef, Conversation, FileKind, FilePayload, InboundMessage, OutboundBody, OutboundFile,
    ReplyContext,
};
pub use transport::{
    ChannelState, Connection, GroupPolicy, GroupRules, InboxError, InboxSink, OpenError,
    OpenedChannel, ReplyLimit, SendError, Transport, Webhook, WebhookDelivery, WebhookRefusal,
};
