//! The int16 model against the f32 model on real English text (the licence texts every
//! Debian system ships): vectors nearly identical, and the same nearest neighbours.

mod support;

use std::collections::BTreeSet;

use saint_config::ModelWeights;
use saint_memory::{Embedder, LocalMiniLm, default_model_dir};
use support::model;

/// Paragraphs of the licences in /usr/share/common-licenses (from Debian's base-files).
fn corpus() -> Vec<String> {
    let directory = std::path::Path::new("/usr/share/common-licenses");
    let mut names: Vec<_> = std::fs::read_dir(directory)
        .unwrap_or_else(|error| panic!("{} is needed for this test: {error}", directory.display()))
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| path.is_file())
        .collect();
    names.sort();
    let mut paragraphs = BTreeSet::new();
    for path in names {
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        for paragraph in text.split("\n\n") {
            let paragraph = paragraph.split_whitespace().collect::<Vec<_>>().join(" ");
            if paragraph.split(' ').count() >= 12 {
                paragraphs.insert(paragraph);
            }
        }
    }
    paragraphs.into_iter().collect()
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

#[test]
fn the_int16_model_finds_the_fp32_models_neighbours_on_real_text() {
    let fp32 = model();
    let quantised = LocalMiniLm::load_with(&default_model_dir(), ModelWeights::Int16)
        .expect("load the int16 model (this test needs an x86-64 CPU with AVX2 and FMA)");
    assert_ne!(quantised.model_id(), fp32.model_id());
    // Every third paragraph keeps the test near half a minute; the bench uses them all.
    let corpus: Vec<String> = corpus().into_iter().step_by(3).collect();
    assert!(corpus.len() >= 150, "only {} paragraphs", corpus.len());
    let texts: Vec<&str> = corpus.iter().map(String::as_str).collect();
    let started = std::time::Instant::now();
    let exact = fp32.embed(&texts).unwrap();
    let fp32_time = started.elapsed();
    let started = std::time::Instant::now();
    let approximate = quantised.embed(&texts).unwrap();
    let quantised_time = started.elapsed();
    let mut lowest = 1.0f32;
    for (left, right) in exact.iter().zip(&approximate) {
        let cosine: f32 = left.iter().zip(right).map(|(a, b)| a * b).sum();
        lowest = lowest.min(cosine);
    }
    assert!(
        lowest > 0.995,
        "lowest cosine between the two models' vectors: {lowest}"
    );

    // Queries: the opening words of every fourth paragraph, embedded by each model.
    let queries: Vec<String> = corpus
        .iter()
        .step_by(4)
        .map(|paragraph| paragraph.split(' ').take(8).collect::<Vec<_>>().join(" "))
        .collect();
    let query_texts: Vec<&str> = queries.iter().map(String::as_str).collect();
    let exact_queries = fp32.embed(&query_texts).unwrap();
    let approximate_queries = quantised.embed(&query_texts).unwrap();
    let (mut found, mut wanted) = (0, 0);
    for (exact_query, approximate_query) in exact_queries.iter().zip(&approximate_queries) {
        let truth: BTreeSet<usize> = nearest(&exact, exact_query, 10).into_iter().collect();
        let got = nearest(&approximate, approximate_query, 10);
        found += got.iter().filter(|index| truth.contains(index)).count();
        wanted += truth.len();
    }
    let recall = found as f64 / wanted as f64;
    println!(
        "int16 vs fp32 on {} paragraphs, {} queries: recall@10 {recall:.3}, lowest cosine {lowest:.4} (embedding took {fp32_time:?} fp32, {quantised_time:?} int16)",
        corpus.len(),
        queries.len()
    );
    assert!(recall >= 0.98, "recall@10 {recall:.3}");
}
