//! The time the scheduler and the heartbeat go by.
//!
//! Normally the system's. Tests run the real binary against a clock they move
//! themselves: with `SAINT_CLOCK_FILE` set, "now" is the RFC 3339 timestamp in that
//! file, so a weekly job can be made due without waiting a week. Only scheduling reads
//! this clock; transcripts, budgets and logs keep the system time.

use std::{path::PathBuf, time::Duration};

use jiff::Timestamp;
use parking_lot::Mutex;
use tokio::sync::Notify;

/// The environment variable naming a clock file (tests only).
pub const CLOCK_FILE_ENV: &str = "SAINT_CLOCK_FILE";

/// Longest the system clock sleeps before looking again (a changed wall clock, a job
/// added without a wake-up, are noticed within this).
const SYSTEM_WAIT_CAP: Duration = Duration::from_secs(30);

/// How often a file clock is read while waiting.
const FILE_POLL: Duration = Duration::from_millis(25);

/// Where "now" comes from, and when this process started by it.
#[derive(Debug)]
pub struct Clock {
    source: Source,
    started: Timestamp,
}

#[derive(Debug)]
enum Source {
    /// The system clock.
    System,
    /// A file holding an RFC 3339 timestamp; the last readable value is kept when a
    /// read fails (a test rewriting it).
    File {
        /// The file.
        path: PathBuf,
        /// The last value read.
        last: Mutex<Timestamp>,
    },
}

/// Why a clock file cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("{CLOCK_FILE_ENV}={path}: {reason}")]
pub struct ClockError {
    path: String,
    reason: ReadError,
}

/// Why a clock file gave no time.
#[derive(Debug, thiserror::Error)]
enum ReadError {
    #[error("{0}")]
    Io(std::io::Error),
    #[error("not an RFC 3339 timestamp: {0}")]
    Timestamp(jiff::Error),
}

impl Clock {
    /// The clock `lookup` asks for: a file clock when [`CLOCK_FILE_ENV`] is set (its
    /// file must hold a timestamp already), else the system clock.
    pub fn from_env(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, ClockError> {
        let Some(path) = lookup(CLOCK_FILE_ENV).filter(|path| !path.is_empty()) else {
            return Ok(Clock {
                source: Source::System,
                started: Timestamp::now(),
            });
        };
        let path = PathBuf::from(path);
        let first = read_file(&path).map_err(|reason| ClockError {
            path: path.display().to_string(),
            reason,
        })?;
        tracing::warn!(path = %path.display(), "scheduling follows the clock file, not the system clock");
        Ok(Clock {
            source: Source::File {
                path,
                last: Mutex::new(first),
            },
            started: first,
        })
    }

    /// When this process started, by this clock (read once, when the clock was made).
    pub fn started(&self) -> Timestamp {
        self.started
    }

    /// The current time by this clock.
    pub fn now(&self) -> Timestamp {
        match &self.source {
            Source::System => Timestamp::now(),
            Source::File { path, last } => {
                let mut last = last.lock();
                if let Ok(now) = read_file(path) {
                    *last = now;
                }
                *last
            }
        }
    }

    /// Waits until `at` by this clock (`None`: until woken), until `wake` is notified,
    /// or at most a while, whichever comes first; callers look at the time again after.
    pub async fn wait_until(&self, at: Option<Timestamp>, wake: &Notify) {
        match &self.source {
            Source::System => {
                let wait = at.map_or(SYSTEM_WAIT_CAP, |at| {
                    let millis = at.as_millisecond() - Timestamp::now().as_millisecond();
                    Duration::from_millis(millis.max(0) as u64).min(SYSTEM_WAIT_CAP)
                });
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = wake.notified() => {}
                }
            }
            Source::File { .. } => {
                let woken = wake.notified();
                tokio::pin!(woken);
                loop {
                    if at.is_some_and(|at| self.now() >= at) {
                        return;
                    }
                    tokio::select! {
                        _ = tokio::time::sleep(FILE_POLL) => {}
                        _ = &mut woken => return,
                    }
                    if at.is_none() {
                        // Nothing scheduled: a moved clock is still worth a look.
                        return;
                    }
                }
            }
        }
    }
}

fn read_file(path: &std::path::Path) -> Result<Timestamp, ReadError> {
    let text = std::fs::read_to_string(path).map_err(ReadError::Io)?;
    text.trim()
        .parse::<Timestamp>()
        .map_err(ReadError::Timestamp)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_clock_reads_the_file_and_keeps_the_last_good_value() {
        let directory = tempfile::tempdir().unwrap();
        let path = directory.path().join("now");
        std::fs::write(&path, "2026-03-02T08:59:00Z\n").unwrap();
        let lookup = |name: &str| (name == CLOCK_FILE_ENV).then(|| path.display().to_string());
        let clock = Clock::from_env(lookup).unwrap();
        assert_eq!(clock.now().to_string(), "2026-03-02T08:59:00Z");
        std::fs::write(&path, "2026-03-02T09:00:00Z").unwrap();
        assert_eq!(clock.now().to_string(), "2026-03-02T09:00:00Z");
        std::fs::write(&path, "half-writ").unwrap();
        assert_eq!(clock.now().to_string(), "2026-03-02T09:00:00Z");
    }

    #[test]
    fn an_unreadable_clock_file_is_refused_at_start() {
        let error = Clock::from_env(|_| Some("/nonexistent/now".to_string())).unwrap_err();
        assert!(
            error
                .to_string()
                .starts_with("SAINT_CLOCK_FILE=/nonexistent/now"),
            "{error}"
        );
        assert!(matches!(
            Clock::from_env(|_| None).unwrap().source,
            Source::System
        ));
    }
}
