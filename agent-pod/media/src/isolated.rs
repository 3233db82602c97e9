//! The agent's side of extraction: runs the child (`crate::child`) on one file,
//! kills it at the wall-clock limit, and names the limit that stopped it. Blocking:
//! async callers run it on a blocking thread.

use std::{
    ffi::OsString,
    io::{Read, Write},
    os::unix::process::ExitStatusExt,
    path::{Path, PathBuf},
    process::{Child, Command, ExitStatus, Stdio},
    thread,
    time::{Duration, Instant},
};

use nix::sys::signal::Signal;

use crate::{
    documents::{DocumentCaps, Extracted},
    image_prep::{ImageLimits, PreparedImage},
    job::{Answer, ChildLimits, Job, Refusal, Reply, Task},
};

/// Stderr kept from the child, for the reason of a crash.
const MAX_STDERR_BYTES: u64 = 16 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum IsolatedError {
    #[error("failed to start the extractor {program}: {source}")]
    Spawn {
        program: PathBuf,
        source: std::io::Error,
    },
    #[error("refused: {0}")]
    Refused(Refusal),
    #[error("refused: parsing the file needed more than the {limit_mib} MiB memory limit")]
    MemoryLimit { limit_mib: u64 },
    #[error("refused: parsing the file needed more than the {seconds}-second CPU limit")]
    CpuLimit { seconds: u64 },
    #[error("refused: the file was not read within {seconds} seconds")]
    TimedOut { seconds: u64 },
    #[error("the extractor failed ({status}): {stderr}")]
    Crashed { status: String, stderr: String },
    #[error("the extractor's reply was unreadable: {0}")]
    Protocol(String),
}

/// What one run of the child cost.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// From spawn to reaped.
    pub wall: Duration,
    /// The child's own peak resident memory, as it reported it; `None` when it did
    /// not answer (a child stopped by a limit is bounded by that limit instead).
    pub peak_memory_kib: Option<u64>,
}

/// How to start the child: a binary and the arguments that make it call
/// [`crate::child_main`].
#[derive(Clone, Debug)]
pub struct Extractor {
    program: PathBuf,
    arguments: Vec<OsString>,
    limits: ChildLimits,
}

impl Extractor {
    pub fn new(
        program: impl Into<PathBuf>,
        arguments: impl IntoIterator<Item = impl Into<OsString>>,
    ) -> Self {
        Self {
            program: program.into(),
            arguments: arguments.into_iter().map(Into::into).collect(),
            limits: ChildLimits::default(),
        }
    }

    pub fn with_limits(mut self, limits: ChildLimits) -> Self {
        self.limits = limits;
        self
    }

    pub fn limits(&self) -> &ChildLimits {
        &self.limits
    }

    /// The text of the document at `path`; `file_name` is the name it was sent under.
    pub fn document(
        &self,
        path: &Path,
        file_name: &str,
        caps: &DocumentCaps,
    ) -> Result<Extracted, IsolatedError> {
        self.document_with_usage(path, file_name, caps).0
    }

    /// [`Extractor::document`], with what the child cost.
    pub fn document_with_usage(
        &self,
        path: &Path,
        file_name: &str,
        caps: &DocumentCaps,
    ) -> (Result<Extracted, IsolatedError>, Usage) {
        let task = Task::Document {
            file_name: file_name.to_owned(),
            caps: caps.clone(),
        };
        let (reply, usage) = self.run(path, task);
        let result = reply.and_then(|answer| match answer {
            Answer::Document { result } => result.map_err(IsolatedError::Refused),
            Answer::Image { .. } => Err(IsolatedError::Protocol("an image for a document".into())),
        });
        (result, usage)
    }

    /// The image at `path`, prepared for a provider.
    pub fn image(&self, path: &Path, limits: &ImageLimits) -> Result<PreparedImage, IsolatedError> {
        self.image_with_usage(path, limits).0
    }

    /// [`Extractor::image`], with what the child cost.
    pub fn image_with_usage(
        &self,
        path: &Path,
        limits: &ImageLimits,
    ) -> (Result<PreparedImage, IsolatedError>, Usage) {
        let task = Task::Image {
            limits: limits.clone(),
        };
        let (reply, usage) = self.run(path, task);
        let result = reply.and_then(|answer| match answer {
            Answer::Image { result } => result.map_err(IsolatedError::Refused),
            Answer::Document { .. } => {
                Err(IsolatedError::Protocol("a document for an image".into()))
            }
        });
        (result, usage)
    }

    fn run(&self, path: &Path, task: Task) -> (Result<Answer, IsolatedError>, Usage) {
        let started = Instant::now();
        let reply = self.run_child(path, task);
        let usage = Usage {
            wall: started.elapsed(),
            peak_memory_kib: reply.as_ref().ok().and_then(|reply| reply.peak_memory_kib),
        };
        (reply.map(|reply| reply.answer), usage)
    }

    fn run_child(&self, path: &Path, task: Task) -> Result<Reply, IsolatedError> {
        let job = Job {
            path: path.to_owned(),
            limits: self.limits.clone(),
            task,
        };
        let job =
            serde_json::to_vec(&job).map_err(|error| IsolatedError::Protocol(error.to_string()))?;
        let mut child = Command::new(&self.program)
            .args(&self.arguments)
            // The agent's environment holds keys; a parser of hostile files needs none.
            .env_clear()
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|source| IsolatedError::Spawn {
                program: self.program.clone(),
                source,
            })?;
        // The job is far smaller than a pipe's buffer: this never blocks.
        if let Some(mut stdin) = child.stdin.take() {
            _ = stdin.write_all(&job);
        }
        let stdout = child
            .stdout
            .take()
            .map(|pipe| drain(pipe, self.limits.max_reply_bytes + 1));
        let stderr = child
            .stderr
            .take()
            .map(|pipe| drain(pipe, MAX_STDERR_BYTES));

        let started = Instant::now();
        let status = wait_until(
            &mut child,
            started + Duration::from_secs(self.limits.wall_seconds),
        );
        let stdout = stdout
            .and_then(|reader| reader.join().ok())
            .unwrap_or_default();
        let stderr = stderr
            .and_then(|reader| reader.join().ok())
            .unwrap_or_default();
        let Some(status) = status else {
            return Err(IsolatedError::TimedOut {
                seconds: self.limits.wall_seconds,
            });
        };
        if !status.success() {
            return Err(self.stopped_by(status, &String::from_utf8_lossy(&stderr)));
        }
        if stdout.len() as u64 > self.limits.max_reply_bytes {
            return Err(IsolatedError::Protocol(format!(
                "reply over {} bytes",
                self.limits.max_reply_bytes
            )));
        }
        serde_json::from_slice(&stdout).map_err(|error| IsolatedError::Protocol(error.to_string()))
    }

    /// Names the limit behind an abnormal exit. An allocation the address-space limit
    /// refused aborts the child with Rust's "memory allocation … failed" line; the
    /// CPU limit arrives as SIGXCPU, or SIGKILL once past the hard limit.
    fn stopped_by(&self, status: ExitStatus, stderr: &str) -> IsolatedError {
        let signal = status
            .signal()
            .and_then(|number| Signal::try_from(number).ok());
        let out_of_memory = stderr.contains("memory allocation of")
            || stderr.contains("capacity overflow")
            || stderr.contains("out of memory");
        match signal {
            Some(Signal::SIGABRT) if out_of_memory => IsolatedError::MemoryLimit {
                limit_mib: self.limits.address_space_bytes / (1024 * 1024),
            },
            Some(Signal::SIGXCPU | Signal::SIGKILL) => IsolatedError::CpuLimit {
                seconds: self.limits.cpu_seconds,
            },
            _ => IsolatedError::Crashed {
                status: status.to_string(),
                stderr: stderr.trim().chars().take(500).collect(),
            },
        }
    }
}

/// Reads a pipe to its end on a thread (a child blocked on a full pipe would never
/// exit), keeping at most `limit` bytes and discarding the rest.
fn drain(pipe: impl Read + Send + 'static, limit: u64) -> thread::JoinHandle<Vec<u8>> {
    thread::spawn(move || {
        let mut pipe = pipe;
        let mut kept = Vec::new();
        _ = (&mut pipe).take(limit).read_to_end(&mut kept);
        _ = std::io::copy(&mut pipe, &mut std::io::sink());
        kept
    })
}

/// Waits for the child until `deadline`, then kills and reaps it: `None`. Polls with
/// a backoff, since std has no wait with a timeout and reaping must stay with `child`
/// (a signal sent by pid after another thread reaped it could hit a reused pid).
fn wait_until(child: &mut Child, deadline: Instant) -> Option<ExitStatus> {
    let mut pause = Duration::from_millis(1);
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) if Instant::now() < deadline => {
                thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(20));
            }
            Ok(None) | Err(_) => {
                _ = child.kill();
                _ = child.wait();
                return None;
            }
        }
    }
}
