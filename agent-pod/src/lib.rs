//! `saint-agent`: the runtime in each bot's `agent` container.

pub mod channel;
pub mod config_watch;
pub mod guard;
pub mod identity;
pub mod local_porter;
pub mod metering;
pub mod policy;
pub mod prompt;
pub mod runtime;
pub mod sandbox;
pub mod session;
pub mod tools;
