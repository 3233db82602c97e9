//! Background processes in a sandbox runner: the requests that start one and act on it
//! later (`spawn`, `poll`, `write`, `kill`, `list`, carried in the `Request` frame), and
//! the runner's typed answer (the `Process` frame).
//!
//! A `poll` or `kill` answer is the new output as `Stdout`/`Stderr` frames, then one
//! `Process` frame; `spawn`, `write` and `list` answer with the `Process` frame alone.
//! Refusals are `Error` frames, as for `exec`.
//!
//! Every request names an `owner` (chosen by the agent for the person asking): a runner
//! shows and touches only the owner's own processes, so two people sharing one sandbox
//! never see or kill each other's.
//!
//! Pure: shapes and checks only; the runner decides whether a request is allowed.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// Most bytes in an owner tag (the agent sends a short digest).
pub const MAX_OWNER_LEN: usize = 128;

/// Most bytes in a process id (the runner hands out short ones).
pub const MAX_PROCESS_ID_LEN: usize = 32;

/// Most bytes of a process's command line a `Process` frame repeats.
pub const MAX_SHOWN_COMMAND: usize = 200;

/// Largest `Process` frame payload: a listing of every process of one owner fits.
pub const MAX_PROCESS_REPLY: usize = 64 * 1024;

/// Start `command` in the background: `sh -c` in a new process group, like `exec`, but
/// the call returns at once with the process's id and the runner keeps its output.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SpawnRequest {
    /// The command line, run as `sh -c <command>`.
    pub command: String,
    /// The working directory inside the sandbox.
    pub cwd: String,
    /// The command's environment beyond the runner's minimal base.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Seconds before the runner kills the process group; none: the runner's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_seconds: Option<u64>,
    /// The runner's caller token.
    #[serde(default)]
    pub token: String,
    /// Whose process this is.
    pub owner: String,
    /// The most processes of this owner that may run at once, this one included.
    pub max_running: u32,
    /// Unread bytes kept per stream; older unread bytes are dropped and counted.
    pub buffer_bytes: u32,
}

/// One of the owner's processes (`poll`, `kill`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProcessTarget {
    #[serde(default)]
    pub token: String,
    pub owner: String,
    pub id: String,
}

/// Bytes for a process's stdin (`write`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WriteRequest {
    #[serde(default)]
    pub token: String,
    pub owner: String,
    pub id: String,
    /// Text written to stdin as is (add the newline a line needs).
    #[serde(default)]
    pub data: String,
    /// Close stdin after writing (the process sees end of input).
    #[serde(default)]
    pub close: bool,
}

/// Every process of one owner (`list`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OwnerRequest {
    #[serde(default)]
    pub token: String,
    pub owner: String,
}

/// Where a background process stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ProcessState {
    /// Still running.
    Running,
    /// Ended by itself with `exitCode` (128 + n for signal n).
    Exited,
    /// Ended by a `kill`.
    Killed,
    /// Killed by the runner at its timeout.
    TimedOut,
}

/// One process as the runner reports it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProcessStatus {
    pub id: String,
    /// The command line, cut to [`MAX_SHOWN_COMMAND`] bytes.
    pub command: String,
    pub state: ProcessState,
    /// Set once the process ended by itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// Seconds since it started.
    pub seconds: u64,
    /// Bytes it wrote to stdout and stderr since it started.
    pub output_bytes: u64,
    /// Unread bytes dropped at the buffer cap since the last poll (oldest first).
    pub dropped_bytes: u64,
}

/// The runner's answer to a process request: the last frame of the exchange.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase", deny_unknown_fields)]
pub enum ProcessReply {
    /// `spawn`: the process runs under this id.
    Started { id: String },
    /// `poll`, `write`, `kill`: the process after the call.
    Status { status: ProcessStatus },
    /// `list`: the owner's processes, oldest first.
    Listed { processes: Vec<ProcessStatus> },
}

/// Why a `Process` frame payload was refused.
#[derive(Debug, Error)]
pub enum ProcessReplyError {
    #[error("failed to parse process reply")]
    Json(#[source] serde_json::Error),
}

impl ProcessReply {
    /// Parses a `Process` frame payload (its size is bounded by the frame layer).
    pub fn parse(payload: &[u8]) -> Result<Self, ProcessReplyError> {
        serde_json::from_slice(payload).map_err(ProcessReplyError::Json)
    }

    /// Serialises the payload.
    pub fn to_payload(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("process reply is always serialisable")
    }
}

/// `command` cut to [`MAX_SHOWN_COMMAND`] bytes on a char boundary, for a status.
pub fn shown_command(command: &str) -> String {
    let mut end = command.len().min(MAX_SHOWN_COMMAND);
    while !command.is_char_boundary(end) {
        end -= 1;
    }
    command[..end].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_round_trip_with_camel_case_fields() {
        let reply = ProcessReply::Status {
            status: ProcessStatus {
                id: "p1".into(),
                command: "sleep 5; echo done".into(),
                state: ProcessState::Exited,
                exit_code: Some(0),
                seconds: 5,
                output_bytes: 5,
                dropped_bytes: 0,
            },
        };
        let payload = reply.to_payload();
        let text = String::from_utf8_lossy(&payload);
        assert!(text.contains(r#""kind":"status""#), "{text}");
        assert!(text.contains(r#""exitCode":0"#), "{text}");
        assert_eq!(ProcessReply::parse(&payload).unwrap(), reply);
        assert!(ProcessReply::parse(br#"{"kind":"started"}"#).is_err());
    }

    #[test]
    fn shown_commands_are_cut_on_a_char_boundary() {
        let long = "é".repeat(MAX_SHOWN_COMMAND);
        let shown = shown_command(&long);
        assert!(shown.len() <= MAX_SHOWN_COMMAND);
        assert!(long.starts_with(&shown));
        assert_eq!(shown_command("ls"), "ls");
    }
}
