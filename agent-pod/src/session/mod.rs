//! Conversation sessions: transcripts and spend in SQLite on the workspace volume.

mod durable;
mod history;
mod session_directory;
mod store;

pub use self::{
    durable::{OpenFailure, open_durable},
    history::repair_tool_pairing,
    store::{SessionError, SessionInfo, SessionStore, StoredMessage, Transcript},
    store::{WITHDRAWN_MESSAGE, withdraw_message},
};
