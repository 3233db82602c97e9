//! Memory benchmark (run with `cargo bench -p saint-memory`): embedding throughput of
//! the local model, index build time and size, and hybrid search latency at 1k, 10k
//! and 100k chunks, unfiltered and with a scope matching 5% of the paths.
//!
//! The 1k index is embedded with the real model. The 10k and 100k indexes use a
//! synthetic embedder (deterministic random unit vectors from each text's hash):
//! embedding 100k chunks for real would take over an hour on two cores and would not
//! change the search cost, which depends only on vector count and dimensions. Their
//! build times therefore measure chunking, FTS5 and vec0 writes, not the model.
//! The vector side alone is also timed against sqlite-vec's exact KNN over the same
//! vectors (the baseline), which is also the reference for its recall.
//! Search latency is measured with the query vector already computed (the query's own
//! embedding time with the real model is reported separately), so every size measures
//! the same thing: the two scoped SQL queries and the merge.

#[path = "common/search.rs"]
mod search;

use std::{
    path::Path,
    sync::Arc,
    time::{Duration, Instant},
};

use saint_memory::{
    Embedder, EmbeddingError, IndexOptions, LocalMiniLm, MemoryIndex, default_model_dir,
};
use search::{
    RECALL_QUERIES, database_bytes, hybrid_latency, median, milliseconds, scopes, vector_side,
};

/// Distinct user directories; one of them is the 5% filter.
const USER_DIRECTORIES: usize = 20;
/// Chunks per generated file (one per `##` section).
const CHUNKS_PER_FILE: usize = 10;

/// Deterministic pseudo-random numbers (xorshift64*), so every run indexes the same text.
struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, limit: usize) -> usize {
        (self.next() % limit as u64) as usize
    }
    fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
    }
}

/// Random unit vectors keyed by the text's hash: same text, same vector.
struct SyntheticEmbedder {
    dimensions: usize,
}

impl Embedder for SyntheticEmbedder {
    fn model_id(&self) -> String {
        format!("synthetic:{}", self.dimensions)
    }
    fn dimensions(&self) -> usize {
        self.dimensions
    }
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbeddingError> {
        Ok(texts
            .iter()
            .map(|text| synthetic_vector(text, self.dimensions))
            .collect())
    }
}

fn synthetic_vector(text: &str, dimensions: usize) -> Vec<f32> {
    let seed = text.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x100_0000_01b3)
    });
    let mut random = Random(seed | 1);
    let mut vector: Vec<f32> = (0..dimensions).map(|_| random.unit()).collect();
    saint_memory::embeddings::normalise(&mut vector);
    vector
}

fn vocabulary() -> Vec<String> {
    let syllables = [
        "ka", "lo", "mi", "ter", "van", "bro", "si", "ne", "dor", "pu", "gal", "ri", "zen", "mo",
        "ta",
    ];
    let mut random = Random(7);
    (0..3000)
        .map(|_| {
            (0..2 + random.below(3))
                .map(|_| syllables[random.below(syllables.len())])
                .collect()
        })
        .collect()
}

/// Writes files under `memory/users/uXX/` so that each user directory holds 5% of the
/// paths; each file has `CHUNKS_PER_FILE` sections of ~900 characters (one chunk each).
fn write_corpus(root: &Path, chunks: usize, words: &[String]) {
    let files = chunks / CHUNKS_PER_FILE;
    let mut random = Random(42);
    for file in 0..files {
        let mut text = format!("# Note {file}\n\n");
        for section in 0..CHUNKS_PER_FILE {
            text.push_str(&format!("## Section {section}\n\n"));
            let mut paragraph = String::new();
            while paragraph.len() < 880 {
                paragraph.push_str(&words[random.below(words.len())]);
                paragraph.push(' ');
            }
            text.push_str(paragraph.trim_end());
            text.push_str(".\n\n");
        }
        let path = root.join(format!(
            "memory/users/u{:02}/note-{file:05}.md",
            file % USER_DIRECTORIES
        ));
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(path, text).expect("write");
    }
}

fn load_model() -> Arc<LocalMiniLm> {
    match LocalMiniLm::load(&default_model_dir()) {
        Ok(model) => Arc::new(model),
        Err(error) => {
            eprintln!("benchmark needs the model: {error}; run agent-pod/memory/fetch-model.sh");
            std::process::exit(1);
        }
    }
}

fn bench_embedding(model: &LocalMiniLm, words: &[String]) {
    let mut random = Random(3);
    let chunks: Vec<String> = (0..128)
        .map(|_| {
            let mut text = String::new();
            while text.len() < 880 {
                text.push_str(&words[random.below(words.len())]);
                text.push(' ');
            }
            text
        })
        .collect();
    let texts: Vec<&str> = chunks.iter().map(String::as_str).collect();
    model.embed(&texts[..8]).expect("warm up");
    let mut runs: Vec<Duration> = (0..3)
        .map(|_| {
            let started = Instant::now();
            model.embed(&texts).expect("embed");
            started.elapsed()
        })
        .collect();
    let batch = median(&mut runs);
    let mut queries: Vec<Duration> = (0..20)
        .map(|index| {
            let query = format!("where did we store spare part {index} for the city bikes");
            let started = Instant::now();
            model.embed(&[query.as_str()]).expect("embed");
            started.elapsed()
        })
        .collect();
    println!(
        "embedding (all-MiniLM-L6-v2 on its mapped weights, CPU, {} threads available):",
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    println!(
        "  chunks of ~880 chars, batches of 32: median {:.1} chunks/s ({} chunks in {:.2} s, median of 3 runs)",
        texts.len() as f64 / batch.as_secs_f64(),
        texts.len(),
        batch.as_secs_f64()
    );
    println!(
        "  one short query: median {:.1} ms (20 runs)",
        milliseconds(median(&mut queries))
    );
}

fn bench_size(
    chunks: usize,
    embedder: Arc<dyn Embedder>,
    label: &str,
    words: &[String],
    queries: usize,
) {
    let directory = tempfile::tempdir().expect("tempdir");
    write_corpus(directory.path(), chunks, words);
    let mut options = IndexOptions::new(directory.path());
    options.progress_every = 0;
    let database = options.database.clone();
    let index = MemoryIndex::open(options, Arc::clone(&embedder)).expect("open");
    let started = Instant::now();
    let report = index.reindex_all().expect("index");
    let build = started.elapsed();
    let stats = index.stats().expect("stats");
    assert_eq!(
        stats.chunks, chunks,
        "the corpus must produce exactly {chunks} chunks"
    );

    let (everything, five_percent) = scopes();
    let mut random = Random(99);
    let queries: Vec<(String, Vec<f32>)> = (0..queries)
        .map(|_| {
            let text = (0..3)
                .map(|_| words[random.below(words.len())].as_str())
                .collect::<Vec<_>>()
                .join(" ");
            let vector = synthetic_vector(&text, embedder.dimensions());
            (text, vector)
        })
        .collect();
    let random_queries: Vec<Vec<f32>> = (0..RECALL_QUERIES)
        .map(|_| (0..embedder.dimensions()).map(|_| random.unit()).collect())
        .collect();
    let vectors = vector_side(&index, &database, &everything, &random_queries);
    let (all_p50, all_p95, all_hits) = hybrid_latency(&index, &everything, false, &queries);
    let (filtered_p50, filtered_p95, filtered_hits) =
        hybrid_latency(&index, &five_percent, true, &queries);
    let queries = queries.len();
    println!(
        "{chunks:>7} chunks ({label}): build {:.1} s ({:.0} chunks/s, {} files), database {:.1} MB",
        build.as_secs_f64(),
        chunks as f64 / build.as_secs_f64(),
        report.files_indexed,
        database_bytes(&database) as f64 / 1e6
    );
    println!(
        "          hybrid k=10, all paths : p50 {:>7.2} ms  p95 {:>7.2} ms  ({queries} queries, {all_hits} hits each)",
        milliseconds(all_p50),
        milliseconds(all_p95)
    );
    println!(
        "          hybrid k=10, 5% filter : p50 {:>7.2} ms  p95 {:>7.2} ms  ({filtered_hits} hits each)  ratio to all paths {:.2}",
        milliseconds(filtered_p50),
        milliseconds(filtered_p95),
        filtered_p50.as_secs_f64() / all_p50.as_secs_f64()
    );
    println!(
        "          vector side alone (k=40, all paths): p50 {:>7.2} ms; sqlite-vec exact KNN p50 {:>7.2} ms; ratio {:.2}",
        milliseconds(vectors.ours),
        milliseconds(vectors.vec0),
        vectors.ours.as_secs_f64() / vectors.vec0.as_secs_f64()
    );
    println!(
        "          vector recall@10 vs sqlite-vec exact KNN: {:.3} (stored vectors as queries), {:.3} (random queries); {RECALL_QUERIES} each",
        vectors.recall_stored, vectors.recall_queries
    );
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` would pass nothing
    // useful either, so any argument list is accepted and ignored.
    let words = vocabulary();
    let model = load_model();
    bench_embedding(&model, &words);
    bench_size(1_000, model.clone(), "real embeddings", &words, 200);
    let synthetic: Arc<dyn Embedder> = Arc::new(SyntheticEmbedder { dimensions: 384 });
    bench_size(
        10_000,
        Arc::clone(&synthetic),
        "synthetic vectors",
        &words,
        200,
    );
    bench_size(100_000, synthetic, "synthetic vectors", &words, 60);
}
