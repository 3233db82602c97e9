//! Channels: how messages reach the runtime. The HTTP channel (and the chat page on top
//! of it) answers in the request; the other channels go through the durable inbox and
//! outbox (`hub`, `webhook`, `dispatch`, `sender`). `startup` says at start which
//! declared channels cannot work; `host_guard` refuses requests for names the
//! listeners do not serve.

pub mod chat_page;
pub mod dispatch;
pub mod events;
pub mod host_guard;
pub mod http;
pub mod hub;
pub mod outbox;
pub mod sender;
pub mod startup;
pub mod webhook;
