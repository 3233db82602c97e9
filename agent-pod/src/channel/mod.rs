//! Channels: how messages reach the runtime. Only the HTTP channel lives in this crate.

pub mod http;
