//! Starts the memory subsystem for the agent: embedder from the bot config (a missing
//! model fails here), index, watcher, and the first whole-workspace reindex on a
//! background thread so the agent answers while a large memory is still indexing.

use std::{path::Path, sync::Arc, thread::JoinHandle, time::Duration};

use saint_config::{ErrorChain, MemoryConfig};

use crate::{
    embeddings::{EmbeddingError, embedder_from_config},
    index::{IndexError, IndexOptions, MemoryIndex},
    watcher::{MemoryWatcher, WatchError, watch},
};

/// How long the watcher waits for a burst of changes to settle.
const WATCH_DEBOUNCE: Duration = Duration::from_millis(500);

/// Why memory could not start; each is fatal for the agent (no keyword-only fallback).
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The embedder could not be built (missing model, missing API key).
    #[error(transparent)]
    Embedding(#[from] EmbeddingError),
    /// The database could not be opened.
    #[error(transparent)]
    Index(#[from] IndexError),
    /// The watcher could not start.
    #[error(transparent)]
    Watch(#[from] WatchError),
    /// The background reindex thread could not start.
    #[error("failed to start the memory reindex thread: {0}")]
    Thread(std::io::Error),
}

/// The running memory subsystem. Keep it alive for the agent's lifetime; dropping it
/// stops the watcher.
#[derive(Debug)]
pub struct Memory {
    /// The index the tools search and read.
    pub index: Arc<MemoryIndex>,
    /// The watcher for changes made outside the agent.
    pub watcher: MemoryWatcher,
    /// The first whole-workspace reindex (logs its own progress and errors).
    pub initial_reindex: JoinHandle<()>,
}

/// Starts memory for the workspace at `workspace` with the database at its default
/// place (`.saint/memory/index.sqlite`).
pub fn start(workspace: &Path, config: &MemoryConfig) -> Result<Memory, StartError> {
    start_with_options(IndexOptions::new(workspace), config)
}

/// [`start`] with explicit index options.
pub fn start_with_options(
    options: IndexOptions,
    config: &MemoryConfig,
) -> Result<Memory, StartError> {
    let embedder = embedder_from_config(&config.embeddings)?;
    let index = Arc::new(MemoryIndex::open(options, embedder)?);
    // Watch first, so a change made during the first reindex is not missed.
    let watcher = watch(Arc::clone(&index), WATCH_DEBOUNCE)?;
    let reindex_index = Arc::clone(&index);
    let initial_reindex = std::thread::Builder::new()
        .name("memory-reindex".to_string())
        .spawn(move || {
            if let Err(error) = reindex_index.reindex_all() {
                tracing::error!(error = %ErrorChain(&error), "failed to index the memory files");
            }
        })
        .map_err(StartError::Thread)?;
    Ok(Memory {
        index,
        watcher,
        initial_reindex,
    })
}
