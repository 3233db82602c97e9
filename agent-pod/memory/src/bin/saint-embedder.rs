//! `saint-embedder`: the embedding model served once for many bots
//! (OpenAI-compatible `POST /v1/embeddings`, batched). Point a bot at it with the
//! `openai` embeddings backend: `baseUrl` this service, `model` any name, `dimensions`
//! 384.

use std::{net::SocketAddr, path::PathBuf, sync::Arc, time::Duration};

use anyhow::Context;
use clap::Parser;
use saint_config::ModelWeights;
use saint_memory::{Embedder, LocalMiniLm, default_model_dir, embedder_service};

/// Serve all-MiniLM-L6-v2 embeddings over HTTP for many bots at once.
#[derive(Debug, Parser)]
#[command(version)]
struct Arguments {
    /// Address to listen on.
    #[arg(long, env = "SAINT_EMBEDDER_LISTEN", default_value = "127.0.0.1:8090")]
    listen: SocketAddr,
    /// Directory with model.safetensors, config.json and tokenizer.json
    /// (default: $SAINT_MODEL_DIR or ~/.cache/saint/models/all-MiniLM-L6-v2).
    #[arg(long, env = "SAINT_MODEL_DIR")]
    model_dir: Option<PathBuf>,
    /// How the dense layers compute: `f32` as published, or `int16` (13-bit integer
    /// matmuls, faster; needs an x86-64 CPU with AVX2 and FMA, and holds ~21 MB of
    /// packed weights).
    #[arg(long, value_enum, default_value = "f32")]
    weights: Weights,
    /// Most texts embedded in one model run.
    #[arg(long, default_value_t = 64)]
    max_batch: usize,
    /// How long a request waits for others to share its model run, in milliseconds.
    #[arg(long, default_value_t = 3)]
    batch_window_ms: u64,
    /// Environment variable holding a bearer token callers must present (unset: none).
    #[arg(long, default_value = "SAINT_EMBEDDER_TOKEN")]
    token_env: String,
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum Weights {
    F32,
    Int16,
}

fn main() -> std::process::ExitCode {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    saint_memory::allocator::return_large_blocks_at_free();
    match serve(Arguments::parse()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("saint-embedder: {error:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn serve(arguments: Arguments) -> anyhow::Result<()> {
    if arguments.max_batch == 0 {
        anyhow::bail!("--max-batch must be at least 1");
    }
    let model_dir = arguments.model_dir.unwrap_or_else(default_model_dir);
    let weights = match arguments.weights {
        Weights::F32 => ModelWeights::F32,
        Weights::Int16 => ModelWeights::Int16,
    };
    let embedder: Arc<dyn Embedder> = Arc::new(LocalMiniLm::load_with(&model_dir, weights)?);
    let options = embedder_service::ServiceOptions {
        max_batch: arguments.max_batch,
        batch_window: Duration::from_millis(arguments.batch_window_ms),
        token: std::env::var(&arguments.token_env)
            .ok()
            .filter(|token| !token.is_empty()),
        ..embedder_service::ServiceOptions::default()
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .context("failed to start tokio")?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(arguments.listen)
            .await
            .with_context(|| format!("failed to listen on {}", arguments.listen))?;
        let address = listener.local_addr()?;
        // Tests and scripts read this line to learn the port.
        println!("saint-embedder listening http={address}");
        tracing::info!(%address, model = %model_dir.display(), "serving embeddings");
        axum::serve(listener, embedder_service::router(embedder, options))
            .with_graceful_shutdown(async {
                let _ = tokio::signal::ctrl_c().await;
            })
            .await
            .context("embedder server failed")
    })
}
