//! Channels: how messages reach the runtime. The HTTP channel (and the chat page on top
//! of it) answers in the request, and records each message's outcome (`http_outcomes`);
//! the other channels go through the durable inbox and outbox (`hub`, `webhook`,
//! `dispatch`, `sender`), and what they give up on is told to the owners
//! (`dead_letters`). `startup` says at start which declared channels cannot work;
//! `host_guard` refuses requests for names the listeners do not serve.
//!
//! Imports go one way: `workers` starts the tasks (`dispatch`, `sender`,
//! `dead_letters`) over the `hub`; the HTTP routes (`http`, `webhook`, `chat_page`)
//! share `state`, and `http` assembles them into the router.

pub mod chat_page;
pub mod dead_letters;
pub mod dispatch;
pub mod events;
pub mod host_guard;
pub mod http;
pub mod http_outcomes;
pub mod hub;
pub mod outbox;
pub mod sender;
pub mod startup;
pub mod state;
pub mod webhook;
pub mod workers;
