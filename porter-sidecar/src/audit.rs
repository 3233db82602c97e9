//! The audit log: one JSON line per call in `logs/porter.jsonl`. Never holds an
//! environment value; arguments and messages are redacted before they get here.
//!
//! Appends to the one file it is given.

use std::{
    fs::{File, OpenOptions},
    io::Write,
    path::{Path, PathBuf},
    sync::Mutex,
};

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// The caller's kernel-reported identity (`SO_PEERCRED`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Peer {
    pub uid: u32,
    pub gid: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid: Option<i32>,
}

/// One call.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditLine {
    pub ts: String,
    pub session: String,
    pub contact: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    pub cli: String,
    pub args: Vec<String>,
    pub cwd: String,
    /// The child's exit code (128 + signal if killed), if it ran and exited.
    pub exit: Option<i32>,
    pub duration_ms: u64,
    pub bytes_stdout: u64,
    pub bytes_stderr: u64,
    pub bytes_stdin: u64,
    /// `ok`, `exit_nonzero`, `disconnected`, `shutdown`, or the error code's name.
    pub outcome: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub peer: Peer,
    /// Names (never values) of caller environment hints that were dropped.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub dropped_env: Vec<String>,
}

/// Why the audit log could not be written.
#[derive(Debug, Error)]
pub enum AuditError {
    #[error("failed to open audit log {path}")]
    Open {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// The append-only audit log.
#[derive(Debug)]
pub struct AuditLog {
    file: Mutex<File>,
}

impl AuditLog {
    /// Opens (creating parent directories) the log for appending.
    pub fn open(path: &Path) -> Result<Self, AuditError> {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|source| AuditError::Open {
                path: path.to_owned(),
                source,
            })?;
        }
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|source| AuditError::Open {
                path: path.to_owned(),
                source,
            })?;
        Ok(Self {
            file: Mutex::new(file),
        })
    }

    /// Appends one line; a failure is logged, never fatal for the call.
    pub fn write(&self, line: &AuditLine) {
        self.write_json(line);
    }

    /// Appends any serialisable record as one line (the proxy's request decisions).
    pub fn write_json(&self, line: &impl Serialize) {
        let mut text = serde_json::to_string(line).expect("audit line is always serialisable");
        text.push('\n');
        let mut file = self.file.lock().expect("audit log lock");
        if let Err(error) = file.write_all(text.as_bytes()) {
            tracing::error!(%error, "failed to write audit line");
        }
    }
}
