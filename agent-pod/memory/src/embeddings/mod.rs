//! The embedding contract and its two implementations: all-MiniLM-L6-v2 in process
//! (the default) and an OpenAI-compatible `/v1/embeddings` endpoint.
//!
//! Embedders are blocking: indexing runs on its own thread and searches on a blocking
//! pool, so neither needs an async runtime. Every vector an embedder returns is
//! L2-normalised, which the index relies on (cosine distance = 1 − dot product).

mod bert;
mod int16;
mod local_minilm;
mod mapped_weights;
mod matmul;
mod openai;

use std::{path::Path, sync::Arc};

pub use local_minilm::LocalMiniLm;
pub use openai::OpenAiEmbedder;
use saint_config::EmbeddingsConfig;

/// Why texts could not be embedded, or an embedder not be built.
#[derive(Debug, thiserror::Error)]
pub enum EmbeddingError {
    /// A model file is missing: the local model was never installed.
    #[error(
        "failed to load the embedding model: {path} is missing (install it with agent-pod/memory/fetch-model.sh or set the model directory)"
    )]
    ModelFileMissing {
        /// The missing file.
        path: String,
    },
    /// A model file exists but cannot be used.
    #[error("failed to load the embedding model from {path}: {reason}")]
    ModelInvalid {
        /// The file.
        path: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The model failed while running.
    #[error("failed to run the embedding model: {0}")]
    Inference(String),
    /// The remote endpoint failed or answered something unusable.
    #[error("failed to embed with the remote endpoint: {0}")]
    Remote(String),
    /// The API key environment variable is not set.
    #[error("failed to read the embeddings API key: environment variable {0} is not set")]
    MissingApiKey(String),
    /// A vector had the wrong length.
    #[error("failed to embed: expected {expected} dimensions, got {actual}")]
    WrongDimensions {
        /// Configured dimensions.
        expected: usize,
        /// What came back.
        actual: usize,
    },
}

/// Turns texts into unit vectors.
pub trait Embedder: Send + Sync {
    /// Identifies the model; a change forces a full re-embed of the index.
    fn model_id(&self) -> String;
    /// Length of every vector.
    fn dimensions(&self) -> usize;
    /// Embeds `texts`, returning one L2-normalised vector per text, in order.
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbeddingError>;
}

/// Builds the embedder the bot config asks for. A missing local model is an error
/// here, at startup: the index never falls back to keyword-only search.
pub fn embedder_from_config(
    config: &EmbeddingsConfig,
) -> Result<Arc<dyn Embedder>, EmbeddingError> {
    match config {
        EmbeddingsConfig::Local { model_dir, weights } => Ok(Arc::new(LocalMiniLm::load_with(
            Path::new(model_dir),
            *weights,
        )?)),
        EmbeddingsConfig::Openai {
            base_url,
            model,
            api_key_env,
            dimensions,
        } => {
            let api_key = match api_key_env {
                Some(name) => Some(
                    std::env::var(name).map_err(|_| EmbeddingError::MissingApiKey(name.clone()))?,
                ),
                None => None,
            };
            Ok(Arc::new(OpenAiEmbedder::new(
                base_url,
                model,
                api_key,
                *dimensions as usize,
            )?))
        }
    }
}

/// Scales `vector` to unit length (a zero vector stays zero).
pub fn normalise(vector: &mut [f32]) {
    let norm = vector.iter().map(|value| value * value).sum::<f32>().sqrt();
    if norm > 0.0 {
        for value in vector.iter_mut() {
            *value /= norm;
        }
    }
}

/// Cosine similarity of two vectors of equal length.
pub fn cosine_similarity(left: &[f32], right: &[f32]) -> f32 {
    let dot: f32 = left.iter().zip(right).map(|(a, b)| a * b).sum();
    let left_norm = left.iter().map(|value| value * value).sum::<f32>().sqrt();
    let right_norm = right.iter().map(|value| value * value).sum::<f32>().sqrt();
    if left_norm == 0.0 || right_norm == 0.0 {
        0.0
    } else {
        dot / (left_norm * right_norm)
    }
}

#[cfg(test)]
mod tests {
    use saint_config::ModelWeights;

    use super::*;

    #[test]
    fn normalise_gives_unit_length_and_keeps_zero() {
        let mut vector = vec![3.0, 4.0];
        normalise(&mut vector);
        assert_eq!(vector, vec![0.6, 0.8]);
        let mut zero = vec![0.0, 0.0];
        normalise(&mut zero);
        assert_eq!(zero, vec![0.0, 0.0]);
    }

    #[test]
    fn cosine_of_orthogonal_and_parallel_vectors() {
        assert_eq!(cosine_similarity(&[1.0, 0.0], &[0.0, 2.0]), 0.0);
        assert!((cosine_similarity(&[1.0, 1.0], &[2.0, 2.0]) - 1.0).abs() < 1e-6);
    }

    #[test]
    fn missing_local_model_is_a_startup_error_naming_the_fetch_script() {
        let directory = tempfile::tempdir().expect("tempdir");
        for weights in [ModelWeights::F32, ModelWeights::Int16] {
            let config = EmbeddingsConfig::Local {
                model_dir: directory.path().display().to_string(),
                weights,
            };
            let error = embedder_from_config(&config).err().expect("must fail");
            let message = error.to_string();
            assert!(message.contains("fetch-model.sh"), "{message}");
            assert!(message.contains("is missing"), "{message}");
        }
    }
}
