//! The local model reproduces the published sentence-transformers figures for
//! all-MiniLM-L6-v2, which only holds with correct mean pooling over the attention mask.

mod support;

use saint_memory::{Embedder, embeddings::cosine_similarity};

fn cosine(left: &str, right: &str) -> f32 {
    let vectors = support::model().embed(&[left, right]).expect("embed");
    cosine_similarity(&vectors[0], &vectors[1])
}

fn round3(value: f32) -> f32 {
    (value * 1000.0).round() / 1000.0
}

#[test]
fn similar_sentences_match_the_published_cosine() {
    let similarity = cosine("The new movie is awesome", "The new movie is so great");
    assert_eq!(
        round3(similarity),
        0.894,
        "cosine was {similarity}; published 0.8939"
    );
    assert!(
        (similarity - 0.8939).abs() < 0.0005,
        "cosine was {similarity}; published 0.8939"
    );
}

#[test]
fn unrelated_sentences_match_the_published_cosine() {
    let similarity = cosine("A man is playing guitar", "A woman watches TV");
    assert!(
        (similarity - -0.0327).abs() < 0.0005,
        "cosine was {similarity}; published -0.0327"
    );
}

#[test]
fn vectors_are_unit_length_with_384_dimensions_and_batch_independent() {
    let model = support::model();
    assert_eq!(model.dimensions(), 384);
    let alone = model.embed(&["A man is playing guitar"]).expect("embed");
    // In a batch with a much longer text the short one is padded; the mask keeps its
    // vector the same.
    let long = "A very long sentence about bicycles and repairs and spare parts ".repeat(8);
    let batched = model
        .embed(&[long.as_str(), "A man is playing guitar"])
        .expect("embed");
    let norm: f32 = alone[0]
        .iter()
        .map(|value| value * value)
        .sum::<f32>()
        .sqrt();
    assert!((norm - 1.0).abs() < 1e-5, "norm {norm}");
    assert!(cosine_similarity(&alone[0], &batched[1]) > 0.9999);
}
