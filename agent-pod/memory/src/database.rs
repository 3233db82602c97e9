//! Opens the per-bot memory database and keeps its schema: files, chunks, the FTS5
//! index, the vec0 table of the chunks' float vectors (`chunks_vec`, the vectors of
//! record) and one row of compact vector codes per file (`file_vectors`, what the
//! search's vector scan reads; see `vector_codes`). Knows nothing about markdown or
//! embeddings.
//!
//! The FTS5 table is an external-content index over `chunks.text`; `chunks_vec` is
//! keyed by `chunks.id` and `file_vectors` by `files.path`; the indexer changes all
//! of them only inside one transaction per file, so a crash (even `kill -9`) leaves
//! either the old or the new state of that file. WAL lets searches read on their own
//! connections while indexing writes.

use std::{path::Path, time::Duration};

use rusqlite::{Connection, OpenFlags, OptionalExtension, params};

use crate::sqlite_vec_extension::{self, ExtensionError};

/// Bumped when the schema changes incompatibly; a mismatch rebuilds the index.
const SCHEMA_VERSION: &str = "3";

/// How much of the database file a read connection may memory-map. Searches read
/// the vector codes and keyword postings of every chunk in scope; mapped pages are
/// read in place from the OS page cache instead of being copied through SQLite's
/// small per-connection cache (about half the search time at 100k chunks). Address
/// space only: memory use is the page cache the reads need anyway.
const READER_MMAP_BYTES: i64 = 1 << 30;

/// Why the database could not be opened or prepared.
#[derive(Debug, thiserror::Error)]
pub enum DatabaseError {
    /// sqlite-vec is not available.
    #[error(transparent)]
    Extension(#[from] ExtensionError),
    /// The directory for the database could not be created.
    #[error("failed to create the memory database directory {path}: {source}")]
    CreateDirectory {
        /// The directory.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// SQLite refused.
    #[error("failed to {action} the memory database: {source}")]
    Sqlite {
        /// What was being done.
        action: &'static str,
        /// The cause.
        source: rusqlite::Error,
    },
}

fn sqlite(action: &'static str) -> impl FnOnce(rusqlite::Error) -> DatabaseError {
    move |source| DatabaseError::Sqlite { action, source }
}

/// Opens (creating if needed) the database for writing and makes the schema match
/// `model_id` and `dimensions`; a different model or size drops every chunk so the
/// index is rebuilt with the new vectors rather than mixing two vector spaces.
pub fn open_writer(
    path: &Path,
    model_id: &str,
    dimensions: usize,
) -> Result<Connection, DatabaseError> {
    sqlite_vec_extension::ensure_registered()?;
    if let Some(parent) = path
        .parent()
        .filter(|parent| !parent.as_os_str().is_empty())
    {
        std::fs::create_dir_all(parent).map_err(|source| DatabaseError::CreateDirectory {
            path: parent.display().to_string(),
            source,
        })?;
    }
    let connection = Connection::open(path).map_err(sqlite("open"))?;
    connection
        .busy_timeout(Duration::from_secs(10))
        .map_err(sqlite("configure"))?;
    // WAL: readers never block the writer; NORMAL sync is durable against a killed
    // process (the WAL is in the OS page cache), only a power cut may lose the last
    // commits — never consistency.
    // vec0 keeps vectors in ~1.5 MB blobs (1,024 per vec0 chunk) and `file_vectors`
    // rows are a few KB each; larger pages make their overflow chains 4× shorter.
    // Only takes effect when the file is created.
    connection
        .execute_batch("PRAGMA page_size = 16384;")
        .map_err(sqlite("configure"))?;
    connection
        .execute_batch("PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL;")
        .map_err(sqlite("configure"))?;
    connection
        .execute_batch(
            "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
             CREATE TABLE IF NOT EXISTS files (
                 path TEXT PRIMARY KEY,
                 hash TEXT NOT NULL,
                 mtime INTEGER NOT NULL,
                 size INTEGER NOT NULL,
                 chunk_count INTEGER NOT NULL
             );
             CREATE TABLE IF NOT EXISTS chunks (
                 id INTEGER PRIMARY KEY,
                 path TEXT NOT NULL,
                 start_line INTEGER NOT NULL,
                 end_line INTEGER NOT NULL,
                 hash TEXT NOT NULL,
                 text TEXT NOT NULL
             );
             CREATE INDEX IF NOT EXISTS chunks_by_path ON chunks (path);
             CREATE VIRTUAL TABLE IF NOT EXISTS chunks_fts USING fts5 (
                 text, content = 'chunks', content_rowid = 'id',
                 tokenize = 'unicode61 remove_diacritics 2'
             );",
        )
        .map_err(sqlite("create the schema of"))?;

    let stored = |key: &str| -> Result<Option<String>, DatabaseError> {
        connection
            .query_row("SELECT value FROM meta WHERE key = ?1", [key], |row| {
                row.get(0)
            })
            .optional()
            .map_err(sqlite("read"))
    };
    let dimensions_text = dimensions.to_string();
    let matches = stored("schema_version")?.as_deref() == Some(SCHEMA_VERSION)
        && stored("model_id")?.as_deref() == Some(model_id)
        && stored("dimensions")?.as_deref() == Some(dimensions_text.as_str());
    if !matches {
        let transaction = connection
            .unchecked_transaction()
            .map_err(sqlite("begin a transaction on"))?;
        transaction
            .execute_batch(
                "DROP TABLE IF EXISTS chunks_vec;
                 DROP TABLE IF EXISTS chunk_vectors;
                 DROP TABLE IF EXISTS file_vectors;
                 INSERT INTO chunks_fts (chunks_fts) VALUES ('delete-all');
                 DELETE FROM chunks;
                 DELETE FROM files;
                 CREATE TABLE file_vectors (
                     path TEXT PRIMARY KEY,
                     chunk_ids BLOB NOT NULL,
                     codes BLOB NOT NULL
                 );",
            )
            .map_err(sqlite("reset"))?;
        transaction
            .execute(
                &format!(
                    "CREATE VIRTUAL TABLE chunks_vec USING vec0 (embedding float[{dimensions}] distance_metric=cosine)"
                ),
                [],
            )
            .map_err(sqlite("create the vector table of"))?;
        for (key, value) in [
            ("schema_version", SCHEMA_VERSION),
            ("model_id", model_id),
            ("dimensions", dimensions_text.as_str()),
        ] {
            transaction
                .execute(
                    "INSERT OR REPLACE INTO meta (key, value) VALUES (?1, ?2)",
                    params![key, value],
                )
                .map_err(sqlite("write"))?;
        }
        transaction.commit().map_err(sqlite("commit to"))?;
    }
    Ok(connection)
}

/// Opens a read-only connection for searches; it never writes, so it cannot disturb
/// the indexer.
pub fn open_reader(path: &Path) -> Result<Connection, DatabaseError> {
    sqlite_vec_extension::ensure_registered()?;
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY
        | OpenFlags::SQLITE_OPEN_NO_MUTEX
        | OpenFlags::SQLITE_OPEN_URI;
    let connection = Connection::open_with_flags(path, flags).map_err(sqlite("open"))?;
    connection
        .busy_timeout(Duration::from_secs(10))
        .map_err(sqlite("configure"))?;
    connection
        .pragma_update(None, "mmap_size", READER_MMAP_BYTES)
        .map_err(sqlite("configure"))?;
    Ok(connection)
}

/// Encodes a vector the way vec0 stores `float[N]`: little-endian f32s.
pub fn vector_to_blob(vector: &[f32]) -> Vec<u8> {
    vector
        .iter()
        .flat_map(|value| value.to_le_bytes())
        .collect()
}

/// Cosine similarity of a vector and a stored `float[N]` blob; `None` when the blob
/// has another length or either vector is zero.
pub fn cosine_similarity(vector: &[f32], blob: &[u8]) -> Option<f32> {
    if blob.len() != vector.len() * 4 {
        return None;
    }
    let (mut dot, mut left, mut right) = (0.0_f32, 0.0_f32, 0.0_f32);
    for (value, bytes) in vector.iter().zip(blob.chunks_exact(4)) {
        let other = f32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
        dot += value * other;
        left += value * value;
        right += other * other;
    }
    let norms = left.sqrt() * right.sqrt();
    (norms > 0.0).then(|| dot / norms)
}

/// Decodes a vec0 `float[N]` blob.
pub fn blob_to_vector(blob: &[u8]) -> Vec<f32> {
    blob.chunks_exact(4)
        .map(|bytes| f32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opening_twice_keeps_data_and_a_new_model_resets_it() {
        let directory = tempfile::tempdir().expect("tempdir");
        let path = directory.path().join("nested/index.sqlite");
        let connection = open_writer(&path, "model-a", 4).expect("open");
        connection
            .execute("INSERT INTO files (path, hash, mtime, size, chunk_count) VALUES ('MEMORY.md', 'h', 0, 0, 0)", [])
            .expect("insert");
        drop(connection);
        let count = |connection: &Connection| -> i64 {
            connection
                .query_row("SELECT count(*) FROM files", [], |row| row.get(0))
                .expect("count")
        };
        let connection = open_writer(&path, "model-a", 4).expect("reopen");
        assert_eq!(count(&connection), 1);
        drop(connection);
        let connection = open_writer(&path, "model-b", 8).expect("reopen with another model");
        assert_eq!(count(&connection), 0);
        let journal: String = connection
            .query_row("PRAGMA journal_mode", [], |row| row.get(0))
            .expect("pragma");
        assert_eq!(journal, "wal");
        // The vector table now takes 8 dimensions and refuses 16.
        connection
            .execute(
                "INSERT INTO chunks_vec (rowid, embedding) VALUES (1, ?1)",
                [vector_to_blob(&[0.5; 8])],
            )
            .expect("8 dims");
        assert!(
            connection
                .execute(
                    "INSERT INTO chunks_vec (rowid, embedding) VALUES (2, ?1)",
                    [vector_to_blob(&[0.5; 16])]
                )
                .is_err()
        );
    }

    #[test]
    fn cosine_of_a_vector_and_a_blob() {
        let similarity = cosine_similarity(&[1.0, 0.0], &vector_to_blob(&[0.6, 0.8]));
        assert!((similarity.expect("some") - 0.6).abs() < 1e-6);
        assert_eq!(
            cosine_similarity(&[1.0], &vector_to_blob(&[0.6, 0.8])),
            None
        );
        assert_eq!(
            cosine_similarity(&[0.0, 0.0], &vector_to_blob(&[0.6, 0.8])),
            None
        );
    }

    #[test]
    fn blobs_round_trip() {
        let vector = vec![0.25, -1.5, 3.0];
        assert_eq!(blob_to_vector(&vector_to_blob(&vector)), vector);
    }
}
