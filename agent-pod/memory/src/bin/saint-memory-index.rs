//! `saint-memory-index`: indexes a workspace's memory from the command line (first
//! build of a large memory, checking an index, the crash-safety test).

use std::{path::PathBuf, sync::Arc};

use anyhow::Context;
use clap::Parser;
use saint_memory::{IndexOptions, LocalMiniLm, MemoryIndex, default_model_dir};

/// Index MEMORY.md and memory/**/*.md of a workspace into its memory database.
#[derive(Debug, Parser)]
#[command(version)]
struct Arguments {
    /// The bot workspace.
    #[arg(long, env = "SAINT_WORKSPACE")]
    workspace: PathBuf,
    /// The SQLite file (default: <workspace>/.saint/memory/index.sqlite).
    #[arg(long)]
    database: Option<PathBuf>,
    /// Directory with model.safetensors, config.json and tokenizer.json
    /// (default: $SAINT_MODEL_DIR or ~/.cache/saint/models/all-MiniLM-L6-v2).
    #[arg(long)]
    model_dir: Option<PathBuf>,
    /// Log progress every this many files.
    #[arg(long, default_value_t = 100)]
    progress_every: usize,
}

fn main() -> anyhow::Result<()> {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    saint_memory::allocator::return_large_blocks_at_free();
    let arguments = Arguments::parse();
    let model_dir = arguments.model_dir.unwrap_or_else(default_model_dir);
    let embedder = LocalMiniLm::load(&model_dir).context("failed to load the embedding model")?;
    let mut options = IndexOptions::new(&arguments.workspace);
    if let Some(database) = arguments.database {
        options.database = database;
    }
    options.progress_every = arguments.progress_every;
    let index = MemoryIndex::open(options, Arc::new(embedder))
        .context("failed to open the memory index")?;
    let report = index.reindex_all().context("failed to reindex")?;
    let stats = index.stats()?;
    println!(
        "files_seen={} files_indexed={} files_unchanged={} files_removed={} chunks_embedded={} total_files={} total_chunks={}",
        report.files_seen,
        report.files_indexed,
        report.files_unchanged,
        report.files_removed,
        report.chunks_embedded,
        stats.files,
        stats.chunks
    );
    Ok(())
}
