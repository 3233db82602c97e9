//! Conversation sessions: transcripts and spend in SQLite on the workspace volume.

mod directory;
mod history;
mod store;

pub use self::{
    history::repair_tool_pairing,
    store::{SessionError, SessionInfo, SessionStore, StoredMessage, Transcript},
};
