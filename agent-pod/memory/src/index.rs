//! The memory index of one bot: keeps the database in step with the markdown files
//! (incremental, by content hash) and hands out read connections for searches.
//! Writes only the database; reads only memory files (see `memory_paths`).

use std::{
    collections::{BTreeSet, HashMap},
    path::{Path, PathBuf},
    sync::Arc,
    time::{Instant, UNIX_EPOCH},
};

use rusqlite::{Connection, OptionalExtension, Transaction, params};
use sha2::{Digest, Sha256};

use crate::{
    chunking::{Chunk, ChunkingOptions, chunk_markdown},
    database::{self, DatabaseError, vector_to_blob},
    embeddings::{Embedder, EmbeddingError},
    memory_paths::{MEMORY_DIRECTORY, is_memory_file, list_memory_files, relative_to_workspace},
    vector_codes,
};
use parking_lot::{Mutex, MutexGuard};

/// Where the index lives inside the workspace unless configured otherwise.
pub const DEFAULT_DATABASE_PATH: &str = ".saint/memory/index.sqlite";

/// Why indexing or searching failed.
#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    /// The database could not be opened.
    #[error(transparent)]
    Database(#[from] DatabaseError),
    /// A query or write failed.
    #[error("failed to {action}")]
    Sqlite {
        /// What was being done.
        action: &'static str,
        /// The cause.
        source: rusqlite::Error,
    },
    /// Texts could not be embedded.
    #[error(transparent)]
    Embedding(#[from] EmbeddingError),
    /// The workspace is unusable.
    #[error("failed to open the workspace {path}")]
    Workspace {
        /// The workspace path.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// Stored vector codes do not have the expected shape: a damaged database (it is
    /// derived data; deleting the file makes the next start rebuild it).
    #[error("failed to read the memory index")]
    Corrupt(#[from] crate::vector_codes::MalformedCodes),
}

pub(crate) fn sqlite(action: &'static str) -> impl FnOnce(rusqlite::Error) -> IndexError {
    move |source| IndexError::Sqlite { action, source }
}

/// How the index is set up.
#[derive(Clone, Debug)]
pub struct IndexOptions {
    /// The bot's workspace (memory files live under it).
    pub workspace: PathBuf,
    /// The SQLite file.
    pub database: PathBuf,
    /// Chunk sizes.
    pub chunking: ChunkingOptions,
    /// A whole-workspace reindex logs progress every this many files.
    pub progress_every: usize,
    /// Files larger than this are left out of the index (with a warning).
    pub max_file_bytes: u64,
}

impl IndexOptions {
    /// Defaults for `workspace`, with the database at [`DEFAULT_DATABASE_PATH`].
    pub fn new(workspace: impl Into<PathBuf>) -> Self {
        let workspace = workspace.into();
        let database = workspace.join(DEFAULT_DATABASE_PATH);
        Self {
            workspace,
            database,
            chunking: ChunkingOptions::default(),
            progress_every: 100,
            max_file_bytes: 4 << 20,
        }
    }
}

/// What a reindex did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReindexReport {
    /// Files looked at.
    pub files_seen: usize,
    /// Files whose chunks were rewritten.
    pub files_indexed: usize,
    /// Files skipped because their content hash did not change.
    pub files_unchanged: usize,
    /// Files whose chunks were removed (deleted, no longer regular, too large).
    pub files_removed: usize,
    /// Chunks written.
    pub chunks_written: usize,
    /// Chunks that needed a new embedding (the rest reused an identical chunk's).
    pub chunks_embedded: usize,
}

impl ReindexReport {
    fn add(&mut self, outcome: FileOutcome) {
        self.files_seen += 1;
        match outcome {
            FileOutcome::Unchanged => self.files_unchanged += 1,
            FileOutcome::Removed => self.files_removed += 1,
            FileOutcome::Absent => {}
            FileOutcome::Indexed { chunks, embedded } => {
                self.files_indexed += 1;
                self.chunks_written += chunks;
                self.chunks_embedded += embedded;
            }
        }
    }
}

enum FileOutcome {
    Unchanged,
    Removed,
    Absent,
    Indexed { chunks: usize, embedded: usize },
}

/// Counts for status and benchmarks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IndexStats {
    /// Indexed files.
    pub files: usize,
    /// Indexed chunks.
    pub chunks: usize,
}

/// The memory index of one bot. Share it behind an `Arc`: indexing is serialised on
/// one writer connection, searches run concurrently on read-only connections.
pub struct MemoryIndex {
    pub(crate) workspace: PathBuf,
    pub(crate) options: IndexOptions,
    pub(crate) embedder: Arc<dyn Embedder>,
    writer: Mutex<Connection>,
    readers: Mutex<Vec<Connection>>,
}

impl std::fmt::Debug for MemoryIndex {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("MemoryIndex")
            .field("workspace", &self.workspace)
            .field("database", &self.options.database)
            .finish_non_exhaustive()
    }
}

/// A read connection borrowed from the pool; returned to it on drop.
pub(crate) struct PooledReader<'a> {
    connection: Option<Connection>,
    pool: &'a Mutex<Vec<Connection>>,
}

impl std::ops::Deref for PooledReader<'_> {
    type Target = Connection;
    fn deref(&self) -> &Connection {
        self.connection.as_ref().expect("present until drop")
    }
}

impl std::ops::DerefMut for PooledReader<'_> {
    fn deref_mut(&mut self) -> &mut Connection {
        self.connection.as_mut().expect("present until drop")
    }
}

impl Drop for PooledReader<'_> {
    fn drop(&mut self) {
        if let Some(connection) = self.connection.take() {
            self.pool.lock().push(connection);
        }
    }
}

fn content_hash(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

impl MemoryIndex {
    /// Opens (or creates) the index. Does not scan the workspace: call
    /// [`MemoryIndex::reindex_all`] once at startup.
    pub fn open(options: IndexOptions, embedder: Arc<dyn Embedder>) -> Result<Self, IndexError> {
        let workspace =
            options
                .workspace
                .canonicalize()
                .map_err(|source| IndexError::Workspace {
                    path: options.workspace.display().to_string(),
                    source,
                })?;
        let writer = database::open_writer(
            &options.database,
            &embedder.model_id(),
            embedder.dimensions(),
        )?;
        Ok(Self {
            workspace,
            options,
            embedder,
            writer: Mutex::new(writer),
            readers: Mutex::new(Vec::new()),
        })
    }

    /// The canonical workspace root.
    pub fn workspace(&self) -> &Path {
        &self.workspace
    }

    /// The embedder in use.
    pub fn embedder(&self) -> &Arc<dyn Embedder> {
        &self.embedder
    }

    pub(crate) fn reader(&self) -> Result<PooledReader<'_>, IndexError> {
        let pooled = self.readers.lock().pop();
        let connection = match pooled {
            Some(connection) => connection,
            None => database::open_reader(&self.options.database)?,
        };
        Ok(PooledReader {
            connection: Some(connection),
            pool: &self.readers,
        })
    }

    fn writer(&self) -> MutexGuard<'_, Connection> {
        self.writer.lock()
    }

    /// Number of indexed files and chunks.
    pub fn stats(&self) -> Result<IndexStats, IndexError> {
        let reader = self.reader()?;
        let count = |sql: &str| -> Result<usize, IndexError> {
            reader
                .query_row(sql, [], |row| row.get::<_, i64>(0))
                .map(|value| value as usize)
                .map_err(sqlite("count"))
        };
        Ok(IndexStats {
            files: count("SELECT count(*) FROM files")?,
            chunks: count("SELECT count(*) FROM chunks")?,
        })
    }

    /// Checks the database: SQLite's `integrity_check`, FTS5's own check, and that
    /// chunks, keyword index and vectors hold the same rows. Returns the problems
    /// found (empty when healthy).
    pub fn check_integrity(&self) -> Result<Vec<String>, IndexError> {
        let writer = self.writer();
        let mut problems = Vec::new();
        let mut statement = writer
            .prepare("PRAGMA integrity_check")
            .map_err(sqlite("check integrity"))?;
        let rows = statement
            .query_map([], |row| row.get::<_, String>(0))
            .map_err(sqlite("check integrity"))?;
        for row in rows {
            let line = row.map_err(sqlite("check integrity"))?;
            if line != "ok" {
                problems.push(line);
            }
        }
        if let Err(error) = writer.execute(
            "INSERT INTO chunks_fts (chunks_fts) VALUES ('integrity-check')",
            [],
        ) {
            problems.push(format!("keyword index: {error}"));
        }
        let count = |sql: &str| -> Result<i64, IndexError> {
            writer
                .query_row(sql, [], |row| row.get(0))
                .map_err(sqlite("count rows"))
        };
        let chunks = count("SELECT count(*) FROM chunks")?;
        let vectors = count("SELECT count(*) FROM chunks_vec")?;
        let unmatched =
            count("SELECT count(*) FROM chunks WHERE id NOT IN (SELECT rowid FROM chunks_vec)")?;
        if chunks != vectors || unmatched != 0 {
            problems.push(format!(
                "{chunks} chunks but {vectors} vectors ({unmatched} chunks without one)"
            ));
        }
        let orphans =
            count("SELECT count(*) FROM chunks WHERE path NOT IN (SELECT path FROM files)")?;
        if orphans != 0 {
            problems.push(format!("{orphans} chunks of files that are not recorded"));
        }
        let coded = count("SELECT coalesce(sum(length(chunk_ids) / 8), 0) FROM file_vectors")?;
        let uncoded = count(
            "SELECT count(*) FROM files WHERE chunk_count > 0 AND path NOT IN (SELECT path FROM file_vectors)",
        )?;
        if chunks != coded || uncoded != 0 {
            problems.push(format!(
                "{chunks} chunks but {coded} vector codes ({uncoded} files without codes)"
            ));
        }
        Ok(problems)
    }

    /// Brings the whole index in step with the workspace: indexes new and changed
    /// files, drops files that are gone, and logs progress every
    /// `options.progress_every` files.
    pub fn reindex_all(&self) -> Result<ReindexReport, IndexError> {
        let started = Instant::now();
        let writer = self.writer();
        let on_disk = list_memory_files(&self.workspace, "");
        let indexed = indexed_paths(&writer, "")?;
        let on_disk_set: BTreeSet<&String> = on_disk.iter().collect();
        let gone: Vec<String> = indexed
            .into_iter()
            .filter(|path| !on_disk_set.contains(path))
            .collect();
        let total = on_disk.len() + gone.len();
        tracing::info!(files = total, "memory reindex started");
        let mut report = ReindexReport::default();
        for (position, relative) in gone.iter().chain(on_disk.iter()).enumerate() {
            report.add(self.reindex_file(&writer, relative)?);
            let done = position + 1;
            if self.options.progress_every > 0
                && done % self.options.progress_every == 0
                && done < total
            {
                tracing::info!(
                    done,
                    total,
                    indexed = report.files_indexed,
                    unchanged = report.files_unchanged,
                    chunks_embedded = report.chunks_embedded,
                    "memory reindex progress"
                );
            }
        }
        tracing::info!(
            files = report.files_seen,
            indexed = report.files_indexed,
            unchanged = report.files_unchanged,
            removed = report.files_removed,
            chunks_embedded = report.chunks_embedded,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "memory reindex finished"
        );
        Ok(report)
    }

    /// Re-indexes the given paths (files or directories, workspace-relative or
    /// absolute under the workspace): what the agent calls after its own writes, and
    /// what the watcher calls for changes made by others. Paths that are not memory
    /// are ignored; deleted files lose their chunks.
    pub fn reindex_paths<P: AsRef<Path>>(&self, paths: &[P]) -> Result<ReindexReport, IndexError> {
        let writer = self.writer();
        let mut targets = BTreeSet::new();
        for path in paths {
            let path = path.as_ref();
            let relative = relative_to_workspace(&self.workspace, path)
                .or_else(|| relative_to_workspace(&self.options.workspace, path));
            let Some(relative) = relative else { continue };
            if is_memory_file(&relative) {
                targets.insert(relative);
            } else if relative == MEMORY_DIRECTORY || relative.starts_with("memory/") {
                // A directory (created, renamed, removed): everything under it on disk
                // and everything the index holds under it.
                targets.extend(list_memory_files(&self.workspace, &relative));
                targets.extend(indexed_paths(&writer, &relative)?);
            }
        }
        let mut report = ReindexReport::default();
        for relative in &targets {
            report.add(self.reindex_file(&writer, relative)?);
        }
        if report.files_indexed + report.files_removed > 0 {
            tracing::debug!(
                indexed = report.files_indexed,
                removed = report.files_removed,
                "memory paths reindexed"
            );
        }
        Ok(report)
    }

    /// Makes the index match one file: unchanged content is skipped, changed content
    /// re-chunked and re-embedded (reusing vectors of identical chunks), a missing or
    /// non-regular file removed. One transaction covers chunks, FTS and vectors.
    fn reindex_file(&self, writer: &Connection, relative: &str) -> Result<FileOutcome, IndexError> {
        let full_path = self.workspace.join(relative);
        let metadata = std::fs::symlink_metadata(&full_path)
            .ok()
            .filter(|metadata| metadata.file_type().is_file());
        let too_large = metadata
            .as_ref()
            .is_some_and(|metadata| metadata.len() > self.options.max_file_bytes);
        if too_large {
            tracing::warn!(path = %relative, limit = self.options.max_file_bytes, "memory file too large to index; leaving it out");
        }
        let content = match metadata.as_ref().filter(|_| !too_large) {
            Some(_) => std::fs::read(&full_path).ok(),
            None => None,
        };
        let Some(content) = content else {
            return if remove_file(writer, relative)? {
                Ok(FileOutcome::Removed)
            } else {
                Ok(FileOutcome::Absent)
            };
        };
        let hash = content_hash(&content);
        let stored: Option<String> = writer
            .query_row(
                "SELECT hash FROM files WHERE path = ?1",
                [relative],
                |row| row.get(0),
            )
            .optional()
            .map_err(sqlite("read file hashes"))?;
        if stored.as_deref() == Some(hash.as_str()) {
            return Ok(FileOutcome::Unchanged);
        }

        let text = String::from_utf8_lossy(&content);
        let chunks = chunk_markdown(&text, self.options.chunking);
        let chunk_hashes: Vec<String> = chunks
            .iter()
            .map(|chunk| content_hash(chunk.text.as_bytes()))
            .collect();

        let (vectors, embedded) = self.chunk_vectors(writer, relative, &chunks, &chunk_hashes)?;
        let mtime = metadata
            .and_then(|metadata| metadata.modified().ok())
            .and_then(|time| time.duration_since(UNIX_EPOCH).ok())
            .map(|duration| duration.as_millis() as i64)
            .unwrap_or(0);
        let transaction = writer
            .unchecked_transaction()
            .map_err(sqlite("begin a transaction"))?;
        write_chunks(&transaction, relative, &chunks, &chunk_hashes, &vectors)?;
        transaction
            .execute(
                "INSERT OR REPLACE INTO files (path, hash, mtime, size, chunk_count) VALUES (?1, ?2, ?3, ?4, ?5)",
                params![relative, hash, mtime, content.len() as i64, chunks.len() as i64],
            )
            .map_err(sqlite("write file hashes"))?;
        transaction.commit().map_err(sqlite("commit a file"))?;
        Ok(FileOutcome::Indexed {
            chunks: chunks.len(),
            embedded,
        })
    }

    /// A vector for each of `chunks`, by chunk hash, and how many were embedded anew:
    /// the file's stored vectors are reused for chunks whose text is unchanged (an
    /// edit usually leaves most as they were), the rest are embedded in one batch.
    fn chunk_vectors(
        &self,
        writer: &Connection,
        relative: &str,
        chunks: &[Chunk],
        chunk_hashes: &[String],
    ) -> Result<(HashMap<String, Vec<u8>>, usize), IndexError> {
        let mut reusable: HashMap<String, Vec<u8>> = HashMap::new();
        {
            let mut statement = writer
                .prepare_cached("SELECT c.hash, v.embedding FROM chunks c JOIN chunks_vec v ON v.rowid = c.id WHERE c.path = ?1")
                .map_err(sqlite("read stored vectors"))?;
            let rows = statement
                .query_map([relative], |row| {
                    Ok((row.get::<_, String>(0)?, row.get::<_, Vec<u8>>(1)?))
                })
                .map_err(sqlite("read stored vectors"))?;
            for row in rows {
                let (chunk_hash, blob) = row.map_err(sqlite("read stored vectors"))?;
                reusable.insert(chunk_hash, blob);
            }
        }
        let missing: Vec<usize> = (0..chunks.len())
            .filter(|index| !reusable.contains_key(&chunk_hashes[*index]))
            .collect();
        let missing_texts: Vec<&str> = missing
            .iter()
            .map(|index| chunks[*index].text.as_str())
            .collect();
        let new_vectors = if missing_texts.is_empty() {
            Vec::new()
        } else {
            self.embedder.embed(&missing_texts)?
        };
        let dimensions = self.embedder.dimensions();
        for (index, vector) in missing.iter().zip(new_vectors) {
            if vector.len() != dimensions {
                return Err(EmbeddingError::WrongDimensions {
                    expected: dimensions,
                    actual: vector.len(),
                }
                .into());
            }
            reusable.insert(chunk_hashes[*index].clone(), vector_to_blob(&vector));
        }

        Ok((reusable, missing.len()))
    }
}

/// Replaces the file's chunks, keyword rows, vectors and vector codes with `chunks`
/// (each chunk's vector found in `vectors` by its hash), inside the caller's
/// transaction.
fn write_chunks(
    transaction: &Transaction<'_>,
    relative: &str,
    chunks: &[Chunk],
    chunk_hashes: &[String],
    vectors: &HashMap<String, Vec<u8>>,
) -> Result<(), IndexError> {
    delete_chunks(transaction, relative)?;
    {
        let mut insert_chunk = transaction
            .prepare_cached("INSERT INTO chunks (path, start_line, end_line, hash, text) VALUES (?1, ?2, ?3, ?4, ?5)")
            .map_err(sqlite("write chunks"))?;
        let mut insert_fts = transaction
            .prepare_cached("INSERT INTO chunks_fts (rowid, text) VALUES (?1, ?2)")
            .map_err(sqlite("write the keyword index"))?;
        let mut insert_vector = transaction
            .prepare_cached("INSERT INTO chunks_vec (rowid, embedding) VALUES (?1, ?2)")
            .map_err(sqlite("write vectors"))?;
        let mut file_chunks: Vec<(i64, Vec<f32>)> = Vec::with_capacity(chunks.len());
        for (chunk, chunk_hash) in chunks.iter().zip(chunk_hashes) {
            insert_chunk
                .execute(params![
                    relative,
                    chunk.start_line as i64,
                    chunk.end_line as i64,
                    chunk_hash,
                    chunk.text
                ])
                .map_err(sqlite("write chunks"))?;
            let id = transaction.last_insert_rowid();
            insert_fts
                .execute(params![id, chunk.text])
                .map_err(sqlite("write the keyword index"))?;
            let blob = &vectors[chunk_hash];
            insert_vector
                .execute(params![id, blob])
                .map_err(sqlite("write vectors"))?;
            file_chunks.push((id, database::blob_to_vector(blob)));
        }
        if !file_chunks.is_empty() {
            let borrowed: Vec<(i64, &[f32])> = file_chunks
                .iter()
                .map(|(id, vector)| (*id, vector.as_slice()))
                .collect();
            let (chunk_ids, codes) = vector_codes::encode_file(&borrowed);
            transaction
                .execute(
                    "INSERT INTO file_vectors (path, chunk_ids, codes) VALUES (?1, ?2, ?3)",
                    params![relative, chunk_ids, codes],
                )
                .map_err(sqlite("write vector codes"))?;
        }
    }
    Ok(())
}

/// Paths in the index, all or under `prefix` (a directory, relative).
fn indexed_paths(connection: &Connection, prefix: &str) -> Result<Vec<String>, IndexError> {
    let mut statement = connection
        .prepare_cached("SELECT path FROM files ORDER BY path")
        .map_err(sqlite("list files"))?;
    let rows = statement
        .query_map([], |row| row.get::<_, String>(0))
        .map_err(sqlite("list files"))?;
    let directory = format!("{prefix}/");
    let mut paths = Vec::new();
    for row in rows {
        let path = row.map_err(sqlite("list files"))?;
        if prefix.is_empty() || path.starts_with(&directory) {
            paths.push(path);
        }
    }
    Ok(paths)
}

/// Deletes a file's chunks, keyword entries, vectors and vector codes (inside the
/// caller's transaction).
pub(crate) fn delete_chunks(connection: &Connection, relative: &str) -> Result<(), IndexError> {
    let mut select = connection
        .prepare_cached("SELECT id, text FROM chunks WHERE path = ?1")
        .map_err(sqlite("read chunks"))?;
    let old: Vec<(i64, String)> = select
        .query_map([relative], |row| Ok((row.get(0)?, row.get(1)?)))
        .map_err(sqlite("read chunks"))?
        .collect::<Result<_, _>>()
        .map_err(sqlite("read chunks"))?;
    let mut delete_fts = connection
        .prepare_cached(
            "INSERT INTO chunks_fts (chunks_fts, rowid, text) VALUES ('delete', ?1, ?2)",
        )
        .map_err(sqlite("delete from the keyword index"))?;
    let mut delete_vector = connection
        .prepare_cached("DELETE FROM chunks_vec WHERE rowid = ?1")
        .map_err(sqlite("delete vectors"))?;
    for (id, text) in &old {
        // External-content FTS5 needs the old text to remove its terms.
        delete_fts
            .execute(params![id, text])
            .map_err(sqlite("delete from the keyword index"))?;
        delete_vector
            .execute([id])
            .map_err(sqlite("delete vectors"))?;
    }
    connection
        .execute("DELETE FROM file_vectors WHERE path = ?1", [relative])
        .map_err(sqlite("delete vector codes"))?;
    connection
        .execute("DELETE FROM chunks WHERE path = ?1", [relative])
        .map_err(sqlite("delete chunks"))?;
    Ok(())
}

/// Removes a file from the index in one transaction; false if it was not indexed.
fn remove_file(connection: &Connection, relative: &str) -> Result<bool, IndexError> {
    let known: Option<i64> = connection
        .query_row("SELECT 1 FROM files WHERE path = ?1", [relative], |row| {
            row.get(0)
        })
        .optional()
        .map_err(sqlite("read file hashes"))?;
    let has_chunks: Option<i64> = connection
        .query_row(
            "SELECT 1 FROM chunks WHERE path = ?1 LIMIT 1",
            [relative],
            |row| row.get(0),
        )
        .optional()
        .map_err(sqlite("read chunks"))?;
    if known.is_none() && has_chunks.is_none() {
        return Ok(false);
    }
    let transaction = connection
        .unchecked_transaction()
        .map_err(sqlite("begin a transaction"))?;
    delete_chunks(&transaction, relative)?;
    transaction
        .execute("DELETE FROM files WHERE path = ?1", [relative])
        .map_err(sqlite("delete file hashes"))?;
    transaction.commit().map_err(sqlite("commit a removal"))?;
    Ok(true)
}
