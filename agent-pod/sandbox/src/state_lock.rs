//! One agent per local state directory. The directory holds the bot's sandboxes, their
//! runner sockets and one-machine mode's Porter; a second agent started on it (the same
//! bot name, or the same `SAINT_SANDBOX_STATE`) would reap the first one's sandboxes and
//! replace its Porter. The first agent holds an advisory lock on `agent.lock` for its
//! whole life; the second is refused at start, naming the directory and the holder.
//!
//! The kernel drops the lock when its holder exits, however it exits, so a crash never
//! leaves a stale lock behind.

use std::{
    fs::{self, File, OpenOptions},
    io::{self, Read, Seek, Write},
    path::{Path, PathBuf},
};

use rustix::fs::{FlockOperation, flock};

/// The lock file inside the state directory.
pub const LOCK_FILE_NAME: &str = "agent.lock";

/// The held lock; released when dropped or when the process exits.
#[derive(Debug)]
pub struct StateLock {
    _file: File,
}

/// Why the state directory could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum StateLockError {
    #[error(
        "another saint-agent ({holder}) is using the sandbox state directory {}: stop it, or give this bot its own with SAINT_SANDBOX_STATE",
        directory.display()
    )]
    InUse { directory: PathBuf, holder: String },
    #[error("failed to lock the sandbox state directory {}", directory.display())]
    Io {
        directory: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// Takes `directory` (creating it) for this process, or says who has it.
pub fn lock_state_directory(directory: &Path) -> Result<StateLock, StateLockError> {
    let failed = |source: io::Error| StateLockError::Io {
        directory: directory.to_path_buf(),
        source,
    };
    fs::create_dir_all(directory).map_err(failed)?;
    let mut file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(directory.join(LOCK_FILE_NAME))
        .map_err(failed)?;
    match flock(&file, FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => {
            // The holder's pid, for the message the next agent prints.
            file.set_len(0).map_err(failed)?;
            file.rewind().map_err(failed)?;
            write!(file, "{}", std::process::id()).map_err(failed)?;
            Ok(StateLock { _file: file })
        }
        Err(rustix::io::Errno::WOULDBLOCK) => {
            let mut pid = String::new();
            let _ = file.read_to_string(&mut pid);
            let holder = match pid.trim() {
                "" => "pid unknown".to_string(),
                pid => format!("pid {pid}"),
            };
            Err(StateLockError::InUse {
                directory: directory.to_path_buf(),
                holder,
            })
        }
        Err(errno) => Err(failed(errno.into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_holder_is_refused_naming_the_directory_and_the_first_until_it_lets_go() {
        let base = tempfile::tempdir().unwrap();
        let directory = base.path().join("state/my-bot");
        let first = lock_state_directory(&directory).unwrap();
        // A lock is per open file: a second open in this process conflicts as a second
        // agent's would.
        let refused = lock_state_directory(&directory).unwrap_err();
        let message = refused.to_string();
        assert!(
            matches!(&refused, StateLockError::InUse { directory: named, .. } if named == &directory),
            "{message}"
        );
        assert!(
            message.contains(&format!("pid {}", std::process::id())),
            "{message}"
        );
        assert!(message.contains("SAINT_SANDBOX_STATE"), "{message}");
        drop(first);
        lock_state_directory(&directory).expect("free once the first holder let go");
    }
}
