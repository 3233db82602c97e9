//! all-MiniLM-L6-v2 run in process on the CPU with candle: BERT forward pass, mean
//! pooling over real tokens (attention mask), L2 normalisation — the same steps as
//! sentence-transformers. Reads only the three files in the model directory.

use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::{BertModel, Config};
use tokenizers::{PaddingParams, PaddingStrategy, Tokenizer, TruncationParams};

use super::{Embedder, EmbeddingError, normalise};

/// The model's sequence window in sentence-transformers (`max_seq_length`). The
/// shipped `tokenizer.json` pads and truncates everything to 128 instead; padding is
/// replaced by per-batch padding (masked out when pooling) and truncation raised to
/// this window so chunks of ~250 tokens are embedded whole.
const MAX_TOKENS: usize = 256;

/// Texts per forward pass: big enough to keep both cores busy, small enough that one
/// long text does not pad many short ones (texts are sorted by length first).
const BATCH_SIZE: usize = 32;

/// all-MiniLM-L6-v2 loaded from `model.safetensors`, `config.json`, `tokenizer.json`.
pub struct LocalMiniLm {
    model: BertModel,
    tokenizer: Tokenizer,
    dimensions: usize,
    device: Device,
}

impl std::fmt::Debug for LocalMiniLm {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("LocalMiniLm")
            .field("dimensions", &self.dimensions)
            .finish_non_exhaustive()
    }
}

fn required_file(directory: &Path, name: &str) -> Result<PathBuf, EmbeddingError> {
    let path = directory.join(name);
    if path.is_file() {
        Ok(path)
    } else {
        Err(EmbeddingError::ModelFileMissing {
            path: path.display().to_string(),
        })
    }
}

fn invalid(path: &Path, reason: impl std::fmt::Display) -> EmbeddingError {
    EmbeddingError::ModelInvalid {
        path: path.display().to_string(),
        reason: reason.to_string(),
    }
}

impl LocalMiniLm {
    /// Loads the model from `directory`; every missing file is a clear error.
    pub fn load(directory: &Path) -> Result<Self, EmbeddingError> {
        let weights_path = required_file(directory, "model.safetensors")?;
        let config_path = required_file(directory, "config.json")?;
        let tokenizer_path = required_file(directory, "tokenizer.json")?;

        let config_text =
            std::fs::read_to_string(&config_path).map_err(|error| invalid(&config_path, error))?;
        let config: Config =
            serde_json::from_str(&config_text).map_err(|error| invalid(&config_path, error))?;
        let dimensions = serde_json::from_str::<serde_json::Value>(&config_text)
            .ok()
            .and_then(|value| value.get("hidden_size").and_then(serde_json::Value::as_u64))
            .ok_or_else(|| invalid(&config_path, "no hidden_size"))?
            as usize;

        let mut tokenizer = Tokenizer::from_file(&tokenizer_path)
            .map_err(|error| invalid(&tokenizer_path, error))?;
        tokenizer.with_padding(Some(PaddingParams {
            strategy: PaddingStrategy::BatchLongest,
            ..PaddingParams::default()
        }));
        tokenizer
            .with_truncation(Some(TruncationParams {
                max_length: MAX_TOKENS,
                ..TruncationParams::default()
            }))
            .map_err(|error| invalid(&tokenizer_path, error))?;

        let device = Device::Cpu;
        // Read into memory rather than mmap: the mmap loader is `unsafe` (the file
        // could change underneath), and 90 MB is read once at startup.
        let weights =
            std::fs::read(&weights_path).map_err(|error| invalid(&weights_path, error))?;
        let variables = VarBuilder::from_buffered_safetensors(weights, DType::F32, &device)
            .map_err(|error| invalid(&weights_path, error))?;
        let model =
            BertModel::load(variables, &config).map_err(|error| invalid(&weights_path, error))?;
        Ok(Self {
            model,
            tokenizer,
            dimensions,
            device,
        })
    }

    fn embed_batch(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbeddingError> {
        let inference = |error: candle_core::Error| EmbeddingError::Inference(error.to_string());
        let encodings = self
            .tokenizer
            .encode_batch(texts.to_vec(), true)
            .map_err(|error| EmbeddingError::Inference(format!("tokenizer: {error}")))?;
        let batch = encodings.len();
        let length = encodings
            .first()
            .map(|encoding| encoding.get_ids().len())
            .unwrap_or(0);
        let mut ids = Vec::with_capacity(batch * length);
        let mut type_ids = Vec::with_capacity(batch * length);
        let mut mask = Vec::with_capacity(batch * length);
        for encoding in &encodings {
            ids.extend_from_slice(encoding.get_ids());
            type_ids.extend_from_slice(encoding.get_type_ids());
            mask.extend_from_slice(encoding.get_attention_mask());
        }
        let ids = Tensor::from_vec(ids, (batch, length), &self.device).map_err(inference)?;
        let type_ids =
            Tensor::from_vec(type_ids, (batch, length), &self.device).map_err(inference)?;
        let mask = Tensor::from_vec(mask, (batch, length), &self.device).map_err(inference)?;

        let hidden = self
            .model
            .forward(&ids, &type_ids, Some(&mask))
            .map_err(inference)?;
        // Mean over real tokens only: padding positions get weight zero. Without the
        // mask every text would be averaged with the same padding states.
        let weights = mask
            .to_dtype(DType::F32)
            .and_then(|mask| mask.unsqueeze(2))
            .map_err(inference)?;
        let summed = hidden
            .broadcast_mul(&weights)
            .and_then(|masked| masked.sum(1))
            .map_err(inference)?;
        let counts = weights.sum(1).map_err(inference)?;
        let pooled = summed.broadcast_div(&counts).map_err(inference)?;
        let mut vectors: Vec<Vec<f32>> = pooled.to_vec2().map_err(inference)?;
        for vector in &mut vectors {
            normalise(vector);
        }
        Ok(vectors)
    }
}

impl Embedder for LocalMiniLm {
    fn model_id(&self) -> String {
        format!("local:all-MiniLM-L6-v2:{MAX_TOKENS}")
    }

    fn dimensions(&self) -> usize {
        self.dimensions
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbeddingError> {
        // Sort by length so each batch pads to similar lengths, then restore order.
        let mut order: Vec<usize> = (0..texts.len()).collect();
        order.sort_by_key(|index| texts[*index].len());
        let mut result = vec![Vec::new(); texts.len()];
        for batch in order.chunks(BATCH_SIZE) {
            let batch_texts: Vec<&str> = batch.iter().map(|index| texts[*index]).collect();
            for (index, vector) in batch.iter().zip(self.embed_batch(&batch_texts)?) {
                result[*index] = vector;
            }
        }
        Ok(result)
    }
}
