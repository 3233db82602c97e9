//! The fp32 model runs on its memory-mapped weights: the vectors are candle's BERT's
//! (the reference implementation) to float rounding, the weights stay file-backed
//! pages shared through the page cache (no private copy), and a weights file that is
//! not this model is refused naming the tensor.

mod support;

use std::path::Path;

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::{BertModel, Config};
use saint_memory::{Embedder, LocalMiniLm, default_model_dir, embeddings::cosine_similarity};

/// Texts of very different lengths in one batch, including one past the 256-token
/// window (truncated) and one of a single character.
fn texts() -> Vec<String> {
    let mut texts: Vec<String> = [
        "A man is playing guitar",
        "x",
        "The deploy key for the staging cluster rotates every ninety days; ask Ivana.",
        "Kubernetes reconciles desired state: a controller watches objects and acts on differences.",
        "Ünïcødé, emoji 🎉 and CJK 漢字 survive tokenisation.",
        "SELECT rowid FROM chunks WHERE embedding MATCH ?1 AND k = ?2 ORDER BY distance",
    ]
    .iter()
    .map(|text| text.to_string())
    .collect();
    texts.push("The quarterly report lists revenue, churn and hiring plans. ".repeat(40));
    texts
}

/// The same texts through candle's BertModel with the same tokenizer and pooling.
fn candle_vectors(texts: &[&str]) -> Vec<Vec<f32>> {
    let directory = default_model_dir();
    let config: Config = serde_json::from_str(
        &std::fs::read_to_string(directory.join("config.json")).expect("config.json"),
    )
    .expect("config");
    let device = Device::Cpu;
    let weights = std::fs::read(directory.join("model.safetensors")).expect("weights");
    let variables =
        VarBuilder::from_buffered_safetensors(weights, DType::F32, &device).expect("weights");
    let model = BertModel::load(variables, &config).expect("candle BERT");
    let mut tokenizer =
        tokenizers::Tokenizer::from_file(directory.join("tokenizer.json")).expect("tokenizer");
    tokenizer.with_padding(Some(tokenizers::PaddingParams::default()));
    tokenizer
        .with_truncation(Some(tokenizers::TruncationParams {
            max_length: 256,
            ..Default::default()
        }))
        .expect("truncation");
    let encodings = tokenizer
        .encode_batch(texts.to_vec(), true)
        .expect("encode");
    let length = encodings[0].get_ids().len();
    let stack = |pick: fn(&tokenizers::Encoding) -> &[u32]| -> Tensor {
        let values: Vec<u32> = encodings.iter().flat_map(|e| pick(e).to_vec()).collect();
        Tensor::from_vec(values, (texts.len(), length), &device).expect("tensor")
    };
    let ids = stack(|encoding| encoding.get_ids());
    let types = stack(|encoding| encoding.get_type_ids());
    let mask = stack(|encoding| encoding.get_attention_mask());
    let hidden = model.forward(&ids, &types, Some(&mask)).expect("forward");
    let weights = mask.to_dtype(DType::F32).unwrap().unsqueeze(2).unwrap();
    let pooled = hidden
        .broadcast_mul(&weights)
        .unwrap()
        .sum(1)
        .unwrap()
        .broadcast_div(&weights.sum(1).unwrap())
        .unwrap();
    let mut vectors: Vec<Vec<f32>> = pooled.to_vec2().unwrap();
    for vector in &mut vectors {
        saint_memory::embeddings::normalise(vector);
    }
    vectors
}

#[test]
fn vectors_equal_candle_bert_to_float_rounding() {
    let texts = texts();
    let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
    let ours = support::model().embed(&texts).expect("embed");
    let reference = candle_vectors(&texts);
    for ((text, ours), reference) in texts.iter().zip(&ours).zip(&reference) {
        let similarity = cosine_similarity(ours, reference);
        assert!(
            similarity > 0.99999,
            "cosine {similarity} for {:?}",
            &text[..text.len().min(40)]
        );
    }
    // Each text alone gives the same vector as in the padded batch.
    for (text, batched) in texts.iter().zip(&ours) {
        let alone = support::model().embed(&[text]).expect("embed");
        assert!(cosine_similarity(&alone[0], batched) > 0.99999);
    }
}

/// `(rss_kib, private_dirty_kib, anonymous_kib)` summed over this process's mappings
/// of `file`, or `None` when it is not mapped.
fn mapping_of(file: &Path) -> Option<(u64, u64, u64)> {
    let smaps = std::fs::read_to_string("/proc/self/smaps").expect("/proc/self/smaps");
    let name = file.canonicalize().expect("canonical path");
    let name = name.to_string_lossy();
    let mut totals: Option<(u64, u64, u64)> = None;
    let mut inside = false;
    for line in smaps.lines() {
        // A mapping's header: `start-end perms offset device inode [path]`.
        let is_header = line.split_whitespace().next().is_some_and(|range| {
            range.contains('-') && range.chars().all(|c| c.is_ascii_hexdigit() || c == '-')
        });
        if is_header {
            inside = line.ends_with(name.as_ref());
            if inside {
                totals.get_or_insert((0, 0, 0));
            }
            continue;
        }
        let Some(totals) = totals.as_mut().filter(|_| inside) else {
            continue;
        };
        let mut parts = line.split_whitespace();
        let (Some(key), Some(value)) = (
            parts.next(),
            parts.next().and_then(|v| v.parse::<u64>().ok()),
        ) else {
            continue;
        };
        match key {
            "Rss:" => totals.0 += value,
            "Private_Dirty:" => totals.1 += value,
            "Anonymous:" => totals.2 += value,
            _ => {}
        }
    }
    totals
}

#[test]
fn weights_are_read_in_place_from_the_mapped_file() {
    let weights = default_model_dir().join("model.safetensors");
    let model = support::model();
    model
        .embed(&["The weights are touched by this forward pass."])
        .expect("embed");
    let (resident, private_dirty, anonymous) =
        mapping_of(&weights).expect("model.safetensors is mapped into the process");
    let file_kib = std::fs::metadata(&weights).expect("stat").len() / 1024;
    // Every layer's weights were read (the word embeddings only for this text's
    // tokens), straight from the file's pages.
    assert!(
        resident > file_kib / 3,
        "only {resident} KiB of the {file_kib} KiB weights resident after a forward pass"
    );
    assert_eq!(
        (private_dirty, anonymous),
        (0, 0),
        "the mapped weights were written or copied"
    );
}

fn model_directory_with(weights: &[u8]) -> tempfile::TempDir {
    let directory = tempfile::tempdir().expect("tempdir");
    for name in ["config.json", "tokenizer.json"] {
        std::fs::copy(default_model_dir().join(name), directory.path().join(name)).expect("copy");
    }
    std::fs::write(directory.path().join("model.safetensors"), weights).expect("write");
    directory
}

#[test]
fn weights_of_another_model_are_refused_naming_the_tensor() {
    let real = std::fs::read(default_model_dir().join("model.safetensors")).expect("weights");
    let parsed = safetensors::SafeTensors::deserialize(&real).expect("parse");

    // One tensor missing.
    let without: Vec<(String, safetensors::tensor::TensorView<'_>)> = parsed
        .tensors()
        .into_iter()
        .filter(|(name, _)| name != "encoder.layer.3.intermediate.dense.weight")
        .collect();
    let bytes = safetensors::serialize(without, None).expect("serialise");
    let error = LocalMiniLm::load(model_directory_with(&bytes).path())
        .expect_err("a missing tensor must be refused")
        .to_string();
    assert!(
        error.contains("encoder.layer.3.intermediate.dense.weight")
            && error.contains("model.safetensors"),
        "{error}"
    );

    // One tensor of the wrong shape (a 384×384 matrix where 1536×384 belongs).
    let query = parsed
        .tensor("encoder.layer.0.attention.self.query.weight")
        .expect("query");
    let swapped: Vec<(String, safetensors::tensor::TensorView<'_>)> = parsed
        .tensors()
        .into_iter()
        .map(|(name, view)| {
            if name == "encoder.layer.5.intermediate.dense.weight" {
                (name, query.clone())
            } else {
                (name, view)
            }
        })
        .collect();
    let bytes = safetensors::serialize(swapped, None).expect("serialise");
    let error = LocalMiniLm::load(model_directory_with(&bytes).path())
        .expect_err("a wrong shape must be refused")
        .to_string();
    assert!(
        error.contains("encoder.layer.5.intermediate.dense.weight")
            && error.contains("[384, 384]")
            && error.contains("[1536, 384]"),
        "{error}"
    );

    // A truncated file.
    let error = LocalMiniLm::load(model_directory_with(&real[..real.len() / 2]).path())
        .expect_err("a truncated file must be refused")
        .to_string();
    assert!(error.contains("model.safetensors"), "{error}");
}
