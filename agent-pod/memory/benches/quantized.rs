//! The 8-bit model against fp32 on real English text (the licence paragraphs every
//! Debian system ships in /usr/share/common-licenses): ingest throughput, medians of
//! three runs each in one process, and the vectors' agreement.
//!
//! cargo bench -p saint-memory --bench quantized

use std::time::{Duration, Instant};

use saint_memory::{Embedder, LocalMiniLm, QuantizedMiniLm, default_model_dir};

fn corpus() -> Vec<String> {
    let mut paths: Vec<_> = std::fs::read_dir("/usr/share/common-licenses")
        .expect("/usr/share/common-licenses (Debian base-files) is needed")
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| path.is_file())
        .collect();
    paths.sort();
    let mut paragraphs = std::collections::BTreeSet::new();
    for path in paths {
        for paragraph in std::fs::read_to_string(&path)
            .unwrap_or_default()
            .split("\n\n")
        {
            let paragraph = paragraph.split_whitespace().collect::<Vec<_>>().join(" ");
            if paragraph.split(' ').count() >= 12 {
                paragraphs.insert(paragraph);
            }
        }
    }
    paragraphs.into_iter().collect()
}

fn median_run(embedder: &dyn Embedder, texts: &[&str]) -> (Duration, Vec<Vec<f32>>) {
    let mut times = Vec::new();
    let mut vectors = Vec::new();
    for _ in 0..3 {
        let started = Instant::now();
        vectors = embedder.embed(texts).unwrap();
        times.push(started.elapsed());
    }
    times.sort();
    (times[1], vectors)
}

fn main() {
    if std::env::args().any(|argument| argument == "--list") {
        return;
    }
    let directory = default_model_dir();
    let fp32 = LocalMiniLm::load(&directory).expect("the model (agent-pod/memory/fetch-model.sh)");
    let q8 = QuantizedMiniLm::load(&directory).unwrap();
    let corpus = corpus();
    let texts: Vec<&str> = corpus.iter().map(String::as_str).collect();
    let words: usize = texts.iter().map(|text| text.split(' ').count()).sum();
    let (fp32_time, exact) = median_run(&fp32, &texts);
    let (q8_time, approximate) = median_run(&q8, &texts);
    let lowest = exact
        .iter()
        .zip(&approximate)
        .map(|(left, right)| left.iter().zip(right).map(|(a, b)| a * b).sum::<f32>())
        .fold(1.0f32, f32::min);
    println!(
        "quantized: {} licence paragraphs ({words} words), median of 3 runs",
        texts.len()
    );
    for (name, time) in [("f32 (baseline)", fp32_time), ("q8", q8_time)] {
        println!(
            "  {name:<15} {:>8.1} ms  {:>7.1} paragraphs/s  {:>8.0} words/s  ({:.2}x baseline time)",
            time.as_secs_f64() * 1000.0,
            texts.len() as f64 / time.as_secs_f64(),
            words as f64 / time.as_secs_f64(),
            time.as_secs_f64() / fp32_time.as_secs_f64()
        );
    }
    println!("  lowest cosine between the two models' vectors: {lowest:.4}");
    // Recall@10: the opening words of every tenth paragraph as queries, each model
    // searching its own vectors, against fp32's exact neighbours.
    let queries: Vec<String> = corpus
        .iter()
        .step_by(10)
        .map(|paragraph| paragraph.split(' ').take(8).collect::<Vec<_>>().join(" "))
        .collect();
    let query_texts: Vec<&str> = queries.iter().map(String::as_str).collect();
    let exact_queries = fp32.embed(&query_texts).unwrap();
    let approximate_queries = q8.embed(&query_texts).unwrap();
    let nearest = |vectors: &[Vec<f32>], query: &[f32]| -> Vec<usize> {
        let mut scored: Vec<(usize, f32)> = vectors
            .iter()
            .enumerate()
            .map(|(index, vector)| (index, vector.iter().zip(query).map(|(a, b)| a * b).sum()))
            .collect();
        scored.sort_by(|left, right| right.1.total_cmp(&left.1));
        scored
            .into_iter()
            .take(10)
            .map(|(index, _)| index)
            .collect()
    };
    let mut found = 0;
    for (exact_query, approximate_query) in exact_queries.iter().zip(&approximate_queries) {
        let truth = nearest(&exact, exact_query);
        found += nearest(&approximate, approximate_query)
            .iter()
            .filter(|index| truth.contains(index))
            .count();
    }
    println!(
        "  q8 recall@10 against f32's exact neighbours: {:.3} ({} queries)",
        found as f64 / (10 * queries.len()) as f64,
        queries.len()
    );
}
