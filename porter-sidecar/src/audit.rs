//! The audit log: one JSON line per proxy decision and per key issued or revoked.
//! Never holds a header value, a query string or a secret.
//!
//! Appends to the one file it is given (outside anything a sandbox can write).

use std::{
    fs::{File, OpenOptions},
    io::Write,
    path::{Path, PathBuf},
};

use parking_lot::Mutex;
use serde::Serialize;
use thiserror::Error;

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

    /// Appends one record as one line; a failure is logged, never fatal for the request.
    pub fn write_json(&self, line: &impl Serialize) {
        let mut text = serde_json::to_string(line).expect("audit line is always serialisable");
        text.push('\n');
        let mut file = self.file.lock();
        if let Err(error) = file.write_all(text.as_bytes()) {
            tracing::error!(%error, "failed to write audit line");
        }
    }
}
