//! Channels: how messages reach the runtime. Only the HTTP channel lives in this crate;
//! `startup` says at start which declared channels cannot work.

pub mod http;
pub mod startup;
