//! `saint-agent`: the runtime in each bot's `agent` container.

pub mod tools;
