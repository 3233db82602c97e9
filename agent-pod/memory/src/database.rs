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
    #[error("failed to create the memory database directory {path}")]
    CreateDirectory {
        /// The directory.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// SQLite refused.
    #[error("failed to {action} the memory database")]
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

/// Every table but the vector tables, created if missing.
const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
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
    -- Bumped by every change to `chunks` (so by every indexing transaction):
    -- two read connections that see the same generation see the same
    -- snapshot, which lets one search run its halves on two of them.
    INSERT OR IGNORE INTO meta (key, value) VALUES ('generation', 0);
    CREATE TRIGGER IF NOT EXISTS generation_on_insert AFTER INSERT ON chunks BEGIN
        UPDATE meta SET value = value + 1 WHERE key = 'generation';
    END;
    CREATE TRIGGER IF NOT EXISTS generation_on_update AFTER UPDATE ON chunks BEGIN
        UPDATE meta SET value = value + 1 WHERE key = 'generation';
    END;
    CREATE TRIGGER IF NOT EXISTS generation_on_delete AFTER DELETE ON chunks BEGIN
        UPDATE meta SET value = value + 1 WHERE key = 'generation';
    END;
    CREATE VIRTUAL TABLE IF NOT EXISTS chunks_fts USING fts5 (
        text, content = 'chunks', content_rowid = 'id',
        tokenize = 'unicode61 remove_diacritics 2'
    );
    -- Each term's document count, read to leave the commonest query words
    -- out of keyword searches.
    CREATE VIRTUAL TABLE IF NOT EXISTS chunks_fts_vocab USING fts5vocab (chunks_fts, row);";

/// Opens (creating if needed) the database for writing and makes the schema match
/// `model_id` and `dimensions`; a different model or size drops every chunk so the
/// index is rebuilt with the new vectors rather than mixing two vector spaces.
pub fn open_writer(
    path: &Path,
    model_id: &str,
    dimensions: usize,
) -> Result<Connection, DatabaseError> {
    sqlite_vec_extension::ensure_registered()?;
    let connection = open_configured(path)?;
    connection
        .execute_batch(SCHEMA)
        .map_err(sqlite("create the schema of"))?;
    match_vectors(&connection, model_id, dimensions)?;
    Ok(connection)
}

/// Opens (creating if needed) the database file, configured for one writer.
fn open_configured(path: &Path) -> Result<Connection, DatabaseError> {
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
    Ok(connection)
}

/// Makes the vector tables match `model_id` and `dimensions`: kept when they do, moved
/// from the version 2 table when only the schema changed, else dropped with every chunk.
fn match_vectors(
    connection: &Connection,
    model_id: &str,
    dimensions: usize,
) -> Result<(), DatabaseError> {
    let stored = |key: &str| -> Result<Option<String>, DatabaseError> {
        connection
            .query_row("SELECT value FROM meta WHERE key = ?1", [key], |row| {
                row.get(0)
            })
            .optional()
            .map_err(sqlite("read"))
    };
    let dimensions_text = dimensions.to_string();
    let same_vectors = stored("model_id")?.as_deref() == Some(model_id)
        && stored("dimensions")?.as_deref() == Some(dimensions_text.as_str());
    let version = stored("schema_version")?;
    if same_vectors && version.as_deref() == Some(SCHEMA_VERSION) {
        return Ok(());
    }
    let transaction = connection
        .unchecked_transaction()
        .map_err(sqlite("begin a transaction on"))?;
    let has_version_2_vectors = version.as_deref() == Some("2")
        && connection
            .query_row(
                "SELECT count(*) FROM sqlite_master WHERE name = 'chunk_vectors'",
                [],
                |row| row.get::<_, i64>(0),
            )
            .map_err(sqlite("read"))?
            == 1;
    if same_vectors && has_version_2_vectors {
        // Version 2 kept the same float vectors in a plain table: move them over
        // instead of embedding the whole memory again (minutes per thousand chunks).
        migrate_from_version_2(&transaction, dimensions)?;
    } else {
        transaction
            .execute_batch(
                "DROP TABLE IF EXISTS chunks_vec;
                 DROP TABLE IF EXISTS chunk_vectors;
                 DROP TABLE IF EXISTS file_vectors;
                 INSERT INTO chunks_fts (chunks_fts) VALUES ('delete-all');
                 DELETE FROM chunks;
                 DELETE FROM files;",
            )
            .map_err(sqlite("reset"))?;
        create_vector_tables(&transaction, dimensions)?;
    }
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
    transaction.commit().map_err(sqlite("commit to"))
}

fn create_vector_tables(connection: &Connection, dimensions: usize) -> Result<(), DatabaseError> {
    connection
        .execute_batch(&format!(
            "CREATE VIRTUAL TABLE chunks_vec USING vec0 (
                 embedding float[{dimensions}] distance_metric=cosine
             );
             CREATE TABLE file_vectors (
                 path TEXT PRIMARY KEY,
                 chunk_ids BLOB NOT NULL,
                 codes BLOB NOT NULL
             );"
        ))
        .map_err(sqlite("create the vector tables of"))
}

/// Version 2 → 3, inside the caller's transaction: the float vectors move from the
/// plain `chunk_vectors` table into the vec0 table (replacing v2's sign-bit one) and
/// each file's codes are built from them. Chunks, keyword index and files stay.
fn migrate_from_version_2(connection: &Connection, dimensions: usize) -> Result<(), DatabaseError> {
    connection
        .execute_batch("DROP TABLE IF EXISTS chunks_vec; DROP TABLE IF EXISTS file_vectors;")
        .map_err(sqlite("migrate"))?;
    create_vector_tables(connection, dimensions)?;
    connection
        .execute_batch(
            "INSERT INTO chunks_vec (rowid, embedding)
                 SELECT id, embedding FROM chunk_vectors WHERE id IN (SELECT id FROM chunks);",
        )
        .map_err(sqlite("migrate the vectors of"))?;
    let mut statement = connection
        .prepare(
            "SELECT c.path, c.id, v.embedding FROM chunks AS c
             JOIN chunk_vectors AS v ON v.id = c.id ORDER BY c.path, c.id",
        )
        .map_err(sqlite("migrate"))?;
    let mut rows = statement.query([]).map_err(sqlite("migrate"))?;
    let mut insert = connection
        .prepare("INSERT INTO file_vectors (path, chunk_ids, codes) VALUES (?1, ?2, ?3)")
        .map_err(sqlite("migrate"))?;
    let mut flush = |path: &str, chunks: &[(i64, Vec<f32>)]| -> Result<(), DatabaseError> {
        let borrowed: Vec<(i64, &[f32])> = chunks
            .iter()
            .map(|(id, vector)| (*id, vector.as_slice()))
            .collect();
        let (ids, codes) = crate::vector_codes::encode_file(&borrowed);
        insert
            .execute(params![path, ids, codes])
            .map(|_| ())
            .map_err(sqlite("migrate"))
    };
    let mut current: Option<String> = None;
    let mut chunks: Vec<(i64, Vec<f32>)> = Vec::new();
    while let Some(row) = rows.next().map_err(sqlite("migrate"))? {
        let path: String = row.get(0).map_err(sqlite("migrate"))?;
        let id: i64 = row.get(1).map_err(sqlite("migrate"))?;
        let blob: Vec<u8> = row.get(2).map_err(sqlite("migrate"))?;
        if current.as_deref() != Some(path.as_str()) {
            if let Some(previous) = current.take() {
                flush(&previous, &chunks)?;
            }
            chunks.clear();
            current = Some(path);
        }
        chunks.push((id, blob_to_vector(&blob)));
    }
    if let Some(previous) = current {
        flush(&previous, &chunks)?;
    }
    drop(rows);
    drop(statement);
    connection
        .execute_batch("DROP TABLE chunk_vectors;")
        .map_err(sqlite("migrate"))?;
    tracing::info!("memory index migrated from schema version 2 to {SCHEMA_VERSION}");
    Ok(())
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

/// The database's generation, inside the caller's read transaction: it changes with
/// every committed change to the chunks, so two connections reading the same value
/// read the same state. `None` for a database no writer of this version has opened.
pub fn generation(connection: &Connection) -> rusqlite::Result<Option<i64>> {
    connection
        .query_row(
            "SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'generation'",
            [],
            |row| row.get(0),
        )
        .optional()
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
    fn a_version_2_index_is_migrated_without_embedding_again() {
        let directory = tempfile::tempdir().expect("tempdir");
        let path = directory.path().join("index.sqlite");
        // Version 2's layout, as that release wrote it: float vectors in a plain
        // table, sign bits in vec0.
        let connection = open_writer(&path, "model-a", 8).expect("create");
        connection
            .execute_batch(
                "DROP TABLE chunks_vec; DROP TABLE file_vectors;
                 CREATE TABLE chunk_vectors (id INTEGER PRIMARY KEY, embedding BLOB NOT NULL);
                 CREATE VIRTUAL TABLE chunks_vec USING vec0 (embedding bit[8]);
                 UPDATE meta SET value = '2' WHERE key = 'schema_version';",
            )
            .expect("version 2 layout");
        let chunks = [
            (
                "memory/a.md",
                "alpha note",
                [1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
            ),
            (
                "memory/a.md",
                "beta note",
                [0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
            ),
            (
                "memory/b.md",
                "gamma note",
                [0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0],
            ),
        ];
        for (path, text, vector) in chunks {
            connection
                .execute(
                    "INSERT INTO chunks (path, start_line, end_line, hash, text) VALUES (?1, 1, 1, '', ?2)",
                    params![path, text],
                )
                .expect("chunk");
            let id = connection.last_insert_rowid();
            connection
                .execute(
                    "INSERT INTO chunks_fts (rowid, text) VALUES (?1, ?2)",
                    params![id, text],
                )
                .expect("fts");
            connection
                .execute(
                    "INSERT INTO chunk_vectors (id, embedding) VALUES (?1, ?2)",
                    params![id, vector_to_blob(&vector)],
                )
                .expect("vector");
            connection
                .execute(
                    "INSERT OR IGNORE INTO files (path, hash, mtime, size, chunk_count) VALUES (?1, '', 0, 0, 1)",
                    [path],
                )
                .expect("file");
        }
        drop(connection);

        let connection = open_writer(&path, "model-a", 8).expect("migrate");
        let number =
            |sql: &str| -> i64 { connection.query_row(sql, [], |row| row.get(0)).expect(sql) };
        assert_eq!(number("SELECT count(*) FROM chunks"), 3, "chunks kept");
        assert_eq!(
            number("SELECT count(*) FROM chunks_fts WHERE chunks_fts MATCH 'gamma'"),
            1,
            "keyword index kept"
        );
        assert_eq!(
            number("SELECT count(*) FROM sqlite_master WHERE name = 'chunk_vectors'"),
            0
        );
        let stored: Vec<u8> = connection
            .query_row(
                "SELECT embedding FROM chunks_vec WHERE rowid = (SELECT id FROM chunks WHERE text = 'beta note')",
                [],
                |row| row.get(0),
            )
            .expect("moved vector");
        assert_eq!(blob_to_vector(&stored)[1], 1.0);
        let mut statement = connection
            .prepare("SELECT path, chunk_ids, codes FROM file_vectors ORDER BY path")
            .expect("prepare");
        let rows: Vec<(String, usize)> = statement
            .query_map([], |row| {
                let ids: Vec<u8> = row.get(1)?;
                let codes: Vec<u8> = row.get(2)?;
                Ok((
                    row.get(0)?,
                    crate::vector_codes::chunk_count(&ids, &codes, 8).expect("well formed"),
                ))
            })
            .expect("query")
            .collect::<Result<_, _>>()
            .expect("rows");
        assert_eq!(
            rows,
            [
                ("memory/a.md".to_string(), 2),
                ("memory/b.md".to_string(), 1)
            ]
        );
        assert_eq!(
            connection
                .query_row(
                    "SELECT value FROM meta WHERE key = 'schema_version'",
                    [],
                    |row| row.get::<_, String>(0)
                )
                .expect("version"),
            SCHEMA_VERSION
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
