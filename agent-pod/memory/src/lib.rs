//! `saint-memory`: the bot's markdown memory (`MEMORY.md`, `memory/**/*.md`) indexed
//! into one SQLite database (FTS5 + sqlite-vec) and searched by meaning and keyword,
//! filtered by the asker's role inside the SQL.
//!
//! ```text
//! files ──chunking──► chunks ──Embedder──► vectors
//!                        │                    │
//!     one transaction:  chunks + chunks_fts + chunks_vec (vec0) + file_vectors   (database)
//!
//! query ──► scan of file_vectors codes (path GLOB scope) ─► exact cosine from vec0 ─┐
//!       └─► FTS5 bm25 (rarer words, rowid IN chunks in scope) ──────────────────────┴─►
//!           0.7·vector + 0.3·keyword ─► top k  (search; the scan is shared with a
//!           second connection of the same snapshot, which also runs the FTS5 side)
//! ```
//!
//! Typical use: [`start`] once at agent startup (embedder from the bot config — a
//! missing model is an error —, index, watcher, first reindex in the background);
//! [`MemoryIndex::reindex_paths`] after the agent's own writes to memory files;
//! [`MemoryIndex::search`] and [`MemoryIndex::read_memory_file`] for the tools, with a
//! [`Scope`] built by [`Scope::for_role`].

pub mod allocator;
pub mod chunking;
mod database;
pub mod embedder_service;
pub mod embeddings;
pub mod erase;
mod index;
mod memory_file;
pub mod memory_paths;
pub mod scope;
mod search;
mod sqlite_vec_extension;
mod startup;
mod vector_codes;
mod watcher;

pub use chunking::{Chunk, ChunkingOptions, chunk_markdown};
pub use database::DatabaseError;
pub use embeddings::{Embedder, EmbeddingError, LocalMiniLm, OpenAiEmbedder, embedder_from_config};
pub use index::{
    DEFAULT_DATABASE_PATH, IndexError, IndexOptions, IndexStats, MemoryIndex, ReindexReport,
};
pub use memory_file::{MAX_LINES, MemoryFileError, MemoryText};
pub use scope::{Scope, ScopeError};
pub use search::{
    KEYWORD_WEIGHT, MAX_RESULTS, SNIPPET_CHARS, SearchHit, SearchOutcome, SearchRequest,
    VECTOR_WEIGHT, fts_query,
};
pub use startup::{Memory, StartError, start, start_with_options};
pub use watcher::{MemoryWatcher, WatchError, watch};

/// Environment variable naming the local model directory in tests, benchmarks and the
/// `saint-memory-index` tool.
pub const MODEL_DIR_ENV: &str = "SAINT_MODEL_DIR";

/// The model directory tests and tools use: `$SAINT_MODEL_DIR`, else
/// `~/.cache/saint/models/all-MiniLM-L6-v2` (where `fetch-model.sh` puts it).
pub fn default_model_dir() -> std::path::PathBuf {
    if let Some(directory) = std::env::var_os(MODEL_DIR_ENV) {
        return directory.into();
    }
    let home = std::env::var_os("HOME").unwrap_or_default();
    std::path::Path::new(&home).join(".cache/saint/models/all-MiniLM-L6-v2")
}
