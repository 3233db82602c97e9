//! Chat channels: how people reach a bot where they already talk.
//!
//! A channel is one transport (inbound: webhook, long poll or connection;
//! outbound: send) plus the platform rules that go with it. Inbound messages
//! are normalised to the typed channel identity and made durable before the
//! platform is acknowledged; replies leave through a durable outbox.
