//! Channels: how messages reach the runtime. The HTTP channel (and the chat page on top
//! of it) lives in this crate; `startup` says at start which declared channels cannot
//! work.

pub mod chat_page;
pub mod http;
pub mod startup;
