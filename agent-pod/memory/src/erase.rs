//! Forgetting memory files for good (erasure of a person, retention): their chunks,
//! keyword entries, vectors and vector codes leave the index, and the database is
//! rewritten so no freed page, old keyword segment or vector slot still holds them.
//! Needs no embedder; touches only the database file (never the memory files).

use std::{path::Path, time::Duration};

use rusqlite::{Connection, params};

use crate::{
    index::{IndexError, delete_chunks, sqlite},
    sqlite_vec_extension,
};

/// The indexed paths under `directory` (workspace-relative, `memory/users/ana`), from
/// the database at `database`; empty when it does not exist.
pub fn indexed_under(database: &Path, directory: &str) -> Result<Vec<String>, IndexError> {
    if !database.exists() {
        return Ok(Vec::new());
    }
    let connection = open(database)?;
    let prefix = format!("{}/", directory.trim_end_matches('/'));
    let mut statement = connection
        .prepare(
            "SELECT path FROM files WHERE substr(path, 1, length(?1)) = ?1
             UNION SELECT path FROM chunks WHERE substr(path, 1, length(?1)) = ?1",
        )
        .map_err(sqlite("list files"))?;
    let paths = statement
        .query_map([&prefix], |row| row.get(0))
        .map_err(sqlite("list files"))?
        .collect::<Result<Vec<String>, _>>()
        .map_err(sqlite("list files"))?;
    Ok(paths)
}

/// Removes `paths` (workspace-relative) from the index at `database` and rewrites it
/// so nothing of them is left in the file; returns how many chunks were removed.
pub fn forget_files(database: &Path, paths: &[String]) -> Result<usize, IndexError> {
    if paths.is_empty() || !database.exists() {
        return Ok(0);
    }
    let connection = open(database)?;
    let transaction = connection
        .unchecked_transaction()
        .map_err(sqlite("begin a transaction"))?;
    let mut chunks = 0;
    for path in paths {
        chunks += transaction
            .query_row(
                "SELECT count(*) FROM chunks WHERE path = ?1",
                [path],
                |row| row.get::<_, i64>(0),
            )
            .map_err(sqlite("read chunks"))? as usize;
        delete_chunks(&transaction, path)?;
        transaction
            .execute("DELETE FROM files WHERE path = ?1", [path])
            .map_err(sqlite("delete file hashes"))?;
    }
    // A keyword 'delete' only adds a tombstone; the old segments keep the terms until
    // rebuilt from what is left.
    transaction
        .execute("INSERT INTO chunks_fts (chunks_fts) VALUES ('rebuild')", [])
        .map_err(sqlite("rebuild the keyword index"))?;
    rebuild_vectors(&transaction)?;
    transaction.commit().map_err(sqlite("commit a removal"))?;
    compact(&connection)?;
    Ok(chunks)
}

/// vec0 marks a deleted vector's slot free but may leave its bytes: the table is
/// rebuilt from the vectors that remain.
fn rebuild_vectors(connection: &Connection) -> Result<(), IndexError> {
    let dimensions: String = connection
        .query_row(
            "SELECT value FROM meta WHERE key = 'dimensions'",
            [],
            |row| row.get(0),
        )
        .map_err(sqlite("read the vector size"))?;
    let dimensions: usize = dimensions.parse().unwrap_or(0);
    let kept: Vec<(i64, Vec<u8>)> = {
        let mut statement = connection
            .prepare("SELECT rowid, embedding FROM chunks_vec ORDER BY rowid")
            .map_err(sqlite("read vectors"))?;
        statement
            .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
            .map_err(sqlite("read vectors"))?
            .collect::<Result<_, _>>()
            .map_err(sqlite("read vectors"))?
    };
    connection
        .execute_batch(&format!(
            "DROP TABLE chunks_vec;
             CREATE VIRTUAL TABLE chunks_vec USING vec0 (
                 embedding float[{dimensions}] distance_metric=cosine
             );"
        ))
        .map_err(sqlite("rebuild the vector table"))?;
    let mut insert = connection
        .prepare("INSERT INTO chunks_vec (rowid, embedding) VALUES (?1, ?2)")
        .map_err(sqlite("rebuild the vector table"))?;
    for (id, embedding) in kept {
        insert
            .execute(params![id, embedding])
            .map_err(sqlite("rebuild the vector table"))?;
    }
    Ok(())
}

/// Rewrites the file without free pages, then empties the write-ahead log.
fn compact(connection: &Connection) -> Result<(), IndexError> {
    connection
        .execute_batch("VACUUM;")
        .map_err(sqlite("vacuum"))?;
    connection
        .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .map_err(sqlite("checkpoint"))?;
    Ok(())
}

fn open(database: &Path) -> Result<Connection, IndexError> {
    sqlite_vec_extension::ensure_registered().map_err(crate::DatabaseError::from)?;
    let connection = Connection::open(database).map_err(sqlite("open"))?;
    connection
        .busy_timeout(Duration::from_secs(10))
        .map_err(sqlite("configure"))?;
    // Deleted content is overwritten with zeros, not only unlinked.
    connection
        .execute_batch("PRAGMA secure_delete = ON;")
        .map_err(sqlite("configure"))?;
    Ok(connection)
}
