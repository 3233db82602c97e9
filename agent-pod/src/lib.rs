//! `saint-agent`: the runtime in each bot's `agent` container.

pub mod guard;
pub mod policy;
pub mod prompt;
pub mod tools;
