//! Memory on real text (run with `cargo bench -p saint-memory --bench real_text`): the
//! corpus of Debian's Python, Perl, Git and Django documentation cut into note sections
//! (`real_text/corpus.rs`), embedded once with the real model and cached under
//! `~/.cache/saint/corpus/` (about an hour on two cores the first time; resumable).
//!
//! In one run:
//! - ingest throughput in tokens/s of the fp32 model (the baseline) and the int16 one,
//!   medians of three runs over the same sections, and the int16 model's recall@10
//!   against fp32's neighbours, with the documents' headings as queries;
//! - hybrid search at 10k and 100k sections: p50/p95 over every path and under a 5%
//!   scope, and the vector side's recall@10 against sqlite-vec's exact KNN.
//!
//! `-- models` or `-- search` runs one half; `-- --prepare` only builds the cache. `SAINT_CORPUS_PARTIAL=1` measures with the
//! sections embedded so far (the larger size is then what the cache holds).

#[path = "real_text/corpus.rs"]
mod corpus;
#[path = "common/search.rs"]
mod search;

use std::{
    collections::HashMap,
    sync::Arc,
    time::{Duration, Instant},
};

use saint_memory::{
    Embedder, EmbeddingError, IndexOptions, LocalMiniLm, MemoryIndex, default_model_dir,
};
use search::{database_bytes, hybrid_latency, median, milliseconds, scopes, vector_side};

/// Sections the throughput runs embed (each of three runs, per model).
const THROUGHPUT_SECTIONS: usize = 256;
/// Sections the int16 model's recall is measured over.
const RECALL_SECTIONS: usize = 1_000;

/// The corpus's cached vectors, served by text: the index embeds exactly the chunk texts
/// the cache was built from (and the queries), so a miss is a bug and panics.
struct CachedEmbedder {
    rows: HashMap<String, usize>,
    vectors: Vec<Vec<f32>>,
    model_id: String,
}

impl Embedder for CachedEmbedder {
    fn model_id(&self) -> String {
        self.model_id.clone()
    }
    fn dimensions(&self) -> usize {
        self.vectors[0].len()
    }
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbeddingError> {
        Ok(texts
            .iter()
            .map(|text| {
                let row = self
                    .rows
                    .get(*text)
                    .unwrap_or_else(|| panic!("no cached vector for {text:?}"));
                self.vectors[*row].clone()
            })
            .collect())
    }
}

fn tokens(texts: &[&str]) -> usize {
    let mut tokenizer =
        tokenizers::Tokenizer::from_file(default_model_dir().join("tokenizer.json"))
            .expect("tokenizer.json");
    tokenizer
        .with_truncation(Some(tokenizers::TruncationParams {
            max_length: 256,
            ..Default::default()
        }))
        .expect("truncation");
    tokenizer
        .encode_batch(texts.to_vec(), true)
        .expect("tokenise")
        .iter()
        .map(|encoding| encoding.get_ids().len())
        .sum()
}

fn median_run(embedder: &dyn Embedder, texts: &[&str]) -> Duration {
    let mut runs: Vec<Duration> = (0..3)
        .map(|_| {
            let started = Instant::now();
            embedder.embed(texts).expect("embed");
            started.elapsed()
        })
        .collect();
    median(&mut runs)
}

fn nearest(vectors: &[Vec<f32>], query: &[f32], count: usize) -> Vec<usize> {
    let mut scored: Vec<(usize, f32)> = vectors
        .iter()
        .enumerate()
        .map(|(index, vector)| (index, vector.iter().zip(query).map(|(a, b)| a * b).sum()))
        .collect();
    scored.sort_by(|left, right| right.1.total_cmp(&left.1));
    scored
        .into_iter()
        .take(count)
        .map(|(index, _)| index)
        .collect()
}

fn bench_models(fp32: &LocalMiniLm, corpus: &corpus::Corpus) {
    let int16 = LocalMiniLm::load_with(&default_model_dir(), saint_config::ModelWeights::Int16)
        .expect("the int16 model (it needs an x86-64 CPU with AVX2 and FMA)");
    let texts: Vec<String> = corpus.sections[..RECALL_SECTIONS]
        .iter()
        .map(corpus::Section::chunk_text)
        .collect();
    let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
    let sample = &texts[..THROUGHPUT_SECTIONS];
    let sample_tokens = tokens(sample);
    fp32.embed(&sample[..8]).expect("warm up");
    let fp32_time = median_run(fp32, sample);
    let int16_time = median_run(&int16, sample);
    println!(
        "ingest: {THROUGHPUT_SECTIONS} real sections ({sample_tokens} tokens), median of 3 runs, {} threads",
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    for (label, time) in [("f32 (baseline)", fp32_time), ("int16", int16_time)] {
        println!(
            "  {label:<15} {:>8.0} tokens/s  {:>6.1} sections/s  ({:.2}x baseline time)",
            sample_tokens as f64 / time.as_secs_f64(),
            THROUGHPUT_SECTIONS as f64 / time.as_secs_f64(),
            time.as_secs_f64() / fp32_time.as_secs_f64()
        );
    }

    // Recall: each heading's 10 nearest sections by the int16 model against fp32's.
    let exact_sections = &corpus.vectors[..RECALL_SECTIONS];
    let int16_sections = int16.embed(&texts).expect("embed with int16");
    let queries: Vec<&str> = corpus.queries.iter().map(String::as_str).collect();
    let int16_queries = int16.embed(&queries).expect("embed queries with int16");
    let lowest = exact_sections
        .iter()
        .zip(&int16_sections)
        .map(|(exact, approximate)| saint_memory::embeddings::cosine_similarity(exact, approximate))
        .fold(f32::INFINITY, f32::min);
    let mut recall = 0.0;
    for (exact_query, int16_query) in corpus.query_vectors.iter().zip(&int16_queries) {
        let reference = nearest(exact_sections, exact_query, 10);
        let found = nearest(&int16_sections, int16_query, 10);
        recall += reference
            .iter()
            .filter(|index| found.contains(index))
            .count() as f64
            / 10.0;
    }
    recall /= queries.len() as f64;
    println!(
        "  int16 recall@10 against f32's neighbours: {recall:.3} ({} heading queries over {RECALL_SECTIONS} sections); lowest cosine to f32 {lowest:.4}",
        queries.len()
    );
}

fn bench_search(size: usize, corpus: &corpus::Corpus, model_id: &str) {
    let workspace = tempfile::tempdir().expect("tempdir");
    corpus.write_files(workspace.path(), size);
    let mut rows = HashMap::new();
    let mut vectors = Vec::with_capacity(size + corpus.queries.len());
    for (section, vector) in corpus.sections[..size].iter().zip(&corpus.vectors) {
        rows.insert(section.chunk_text(), vectors.len());
        vectors.push(vector.clone());
    }
    for (query, vector) in corpus.queries.iter().zip(&corpus.query_vectors) {
        rows.insert(query.clone(), vectors.len());
        vectors.push(vector.clone());
    }
    let embedder = Arc::new(CachedEmbedder {
        rows,
        vectors,
        model_id: model_id.to_string(),
    });
    let mut options = IndexOptions::new(workspace.path());
    options.chunking = corpus::chunking();
    options.progress_every = 0;
    let database = options.database.clone();
    let index = MemoryIndex::open(options, embedder).expect("open the index");
    let started = Instant::now();
    index.reindex_all().expect("index the corpus");
    let build = started.elapsed();
    let stats = index.stats().expect("stats");
    assert_eq!(stats.chunks, size, "one chunk per section");

    let (everything, five_percent) = scopes();
    let queries: Vec<(String, Vec<f32>)> = corpus
        .queries
        .iter()
        .cloned()
        .zip(corpus.query_vectors.iter().cloned())
        .collect();
    let vectors = vector_side(&index, &database, &everything, &corpus.query_vectors);
    let (all_p50, all_p95, all_hits) = hybrid_latency(&index, &everything, false, &queries);
    let (scoped_p50, scoped_p95, scoped_hits) =
        hybrid_latency(&index, &five_percent, true, &queries);
    println!(
        "{size:>7} real sections: index build {:.1} s (vectors cached), database {:.1} MB",
        build.as_secs_f64(),
        database_bytes(&database) as f64 / 1e6
    );
    println!(
        "          hybrid k=10, all paths : p50 {:>6.2} ms  p95 {:>6.2} ms  ({} heading queries, {all_hits} hits each)",
        milliseconds(all_p50),
        milliseconds(all_p95),
        queries.len()
    );
    println!(
        "          hybrid k=10, 5% scope  : p50 {:>6.2} ms  p95 {:>6.2} ms  ({scoped_hits} hits each)",
        milliseconds(scoped_p50),
        milliseconds(scoped_p95)
    );
    println!(
        "          vector side (k=40): p50 {:>6.2} ms; sqlite-vec exact KNN (baseline) p50 {:>6.2} ms; ratio {:.2}",
        milliseconds(vectors.ours),
        milliseconds(vectors.vec0),
        vectors.ours.as_secs_f64() / vectors.vec0.as_secs_f64()
    );
    println!(
        "          vector recall@10 vs sqlite-vec exact KNN: {:.3} (heading queries), {:.3} (stored vectors)",
        vectors.recall_queries, vectors.recall_stored
    );
}

fn main() {
    if std::env::args().any(|argument| argument == "--list") {
        return;
    }
    let model = LocalMiniLm::load(&default_model_dir())
        .expect("the embedding model (agent-pod/memory/fetch-model.sh)");
    let partial = std::env::var_os("SAINT_CORPUS_PARTIAL").is_some();
    let corpus = corpus::load_or_prepare(&model, partial);
    eprintln!(
        "corpus: {} sections, {} queries in {}",
        corpus.sections.len(),
        corpus.queries.len(),
        corpus.directory.display()
    );
    if std::env::args().any(|argument| argument == "--prepare") {
        return;
    }
    // `models` or `search` runs that half alone.
    let only = |part: &str| {
        let parts: Vec<String> = std::env::args()
            .skip(1)
            .filter(|argument| argument == "models" || argument == "search")
            .collect();
        parts.is_empty() || parts.iter().any(|argument| argument == part)
    };
    if only("models") {
        bench_models(&model, &corpus);
    }
    if only("search") {
        for size in [corpus::SECTIONS / 10, corpus.sections.len()] {
            bench_search(size, &corpus, &model.model_id());
        }
    }
}
