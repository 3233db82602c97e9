//! What the parent asks the extraction child and what it answers: one JSON value
//! each way, on the child's stdin and stdout.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::{
    documents::{DocumentCaps, DocumentError, Extracted},
    image_prep::{ImageError, ImageLimits, PreparedImage},
};

/// Bounds the child puts on itself before it reads the file.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct ChildLimits {
    /// RLIMIT_AS: the child's whole address space, code and stacks included.
    pub address_space_bytes: u64,
    /// RLIMIT_CPU: SIGXCPU at this many seconds, SIGKILL a second later.
    pub cpu_seconds: u64,
    /// Enforced by the parent, which kills the child: covers time spent blocked
    /// (a FIFO in place of a file), which CPU time does not.
    pub wall_seconds: u64,
    /// The reply read from the child's stdout; more is a protocol error.
    pub max_reply_bytes: u64,
}

impl Default for ChildLimits {
    fn default() -> Self {
        Self {
            // Room for the largest decode ImageLimits allows (200 MiB) plus a
            // resize's buffers, and for a 32 MiB PDF's object graph.
            address_space_bytes: 768 * 1024 * 1024,
            cpu_seconds: 10,
            wall_seconds: 20,
            max_reply_bytes: 16 * 1024 * 1024,
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Job {
    pub path: PathBuf,
    pub limits: ChildLimits,
    pub task: Task,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "task")]
pub enum Task {
    /// `file_name` is what the sender called it: with the content it decides the kind.
    Document {
        file_name: String,
        caps: DocumentCaps,
    },
    Image {
        limits: ImageLimits,
    },
}

/// The child's reply: its answer and what it cost.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Reply {
    pub answer: Answer,
    /// The child's own peak resident memory (`VmHWM`), since its exec. Not
    /// `getrusage`: Linux carries the spawning process's peak across exec into it.
    pub peak_memory_kib: Option<u64>,
}

/// A refusal is an answer too.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "answer")]
pub enum Answer {
    Document {
        result: Result<Extracted, Refusal>,
    },
    Image {
        result: Result<PreparedImage, Refusal>,
    },
}

/// Why the child read nothing from the file. An I/O error crosses the pipe as its text.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[serde(rename_all = "snake_case")]
pub enum Refusal {
    #[error("failed to open {}: {reason}", .path.display())]
    Open { path: PathBuf, reason: String },
    #[error("failed to read {}: {reason}", .path.display())]
    Read { path: PathBuf, reason: String },
    #[error("file is over the {limit}-byte limit")]
    OverLimit { limit: usize },
    #[error("not a document kind this agent reads")]
    NotADocument,
    #[error(transparent)]
    Document(#[from] DocumentError),
    #[error(transparent)]
    Image(#[from] ImageError),
    /// The parser panicked; the panic's message, if it had one.
    #[error("the parser failed on this file ({0})")]
    ParserPanicked(String),
}
