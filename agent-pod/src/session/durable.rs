//! How the agent opens a SQLite database whose rows must survive a crash (transcripts,
//! the channel queue, scheduled jobs): one place for the settings that make a commit
//! durable.

use std::path::{Path, PathBuf};

use rusqlite::Connection;

/// Why a durable database could not be opened.
#[derive(Debug)]
pub enum OpenFailure {
    /// Its directory could not be created.
    Directory {
        path: PathBuf,
        source: std::io::Error,
    },
    /// SQLite refused to open it, set it up or create its tables.
    Open(rusqlite::Error),
}

/// Opens (creating it and its directory) the database at `path` and runs each of
/// `schemas`: write-ahead log with `synchronous = FULL` (a commit that returned is on
/// disk), foreign keys enforced, and a 5 s wait for a lock another connection holds.
pub fn open_durable(path: &Path, schemas: &[&str]) -> Result<Connection, OpenFailure> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|source| OpenFailure::Directory {
            path: parent.to_path_buf(),
            source,
        })?;
    }
    let connection = Connection::open(path).map_err(OpenFailure::Open)?;
    connection
        .pragma_update(None, "journal_mode", "WAL")
        .and_then(|()| connection.pragma_update(None, "synchronous", "FULL"))
        .and_then(|()| connection.pragma_update(None, "foreign_keys", "ON"))
        .and_then(|()| connection.busy_timeout(std::time::Duration::from_secs(5)))
        .map_err(OpenFailure::Open)?;
    for schema in schemas {
        connection
            .execute_batch(schema)
            .map_err(OpenFailure::Open)?;
    }
    Ok(connection)
}
