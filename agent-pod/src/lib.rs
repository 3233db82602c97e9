//! `saint-agent`: the runtime in each bot's `agent` container — channels, the turn
//! loop, sessions, metering and `main`. The tools and their guards are `saint-tools`;
//! the sandboxes `exec` runs in are `saint-sandbox`.

pub mod approvals;
pub mod budget;
pub mod channel;
pub mod clock;
pub mod config_watch;
pub mod erasure;
pub mod heartbeat;
pub mod identity;
pub mod image_tool;
pub mod ledger;
pub mod mcp_servers;
pub mod metering;
pub mod model_discovery;
pub mod persona;
pub mod prompt;
pub mod runtime;
pub mod schedule;
pub mod session;
pub mod starter;
pub mod subagents;
pub mod telemetry;
pub mod top_up;
pub mod transcription;
pub mod tts_tool;
pub mod up;
