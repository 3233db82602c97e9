//! all-MiniLM-L6-v2 run in process on the CPU: the BERT forward pass on the
//! memory-mapped weights ([`super::bert`]), mean pooling over real tokens (attention
//! mask), L2 normalisation — the same steps as sentence-transformers. Reads only the
//! three files in the model directory; the weights stay in the page cache, shared by
//! every process on the node that maps the same file.

use std::path::{Path, PathBuf};

use saint_config::{ErrorChain, ModelWeights};
use tokenizers::{PaddingParams, PaddingStrategy, Tokenizer, TruncationParams};

use super::{
    Embedder, EmbeddingError,
    bert::{Batch, Bert, BertShape, Precision},
    mapped_weights::MappedWeights,
    normalise,
};

/// The model's sequence window in sentence-transformers (`max_seq_length`). The
/// shipped `tokenizer.json` pads and truncates everything to 128 instead; padding is
/// replaced by per-batch padding (masked out when pooling) and truncation raised to
/// this window so chunks of ~250 tokens are embedded whole.
pub(super) const MAX_TOKENS: usize = 256;

/// Texts per forward pass: big enough to keep both cores busy, small enough that one
/// long text does not pad many short ones (texts are sorted by length first).
pub(super) const BATCH_SIZE: usize = 32;

/// all-MiniLM-L6-v2 loaded from `model.safetensors`, `config.json`, `tokenizer.json`.
pub struct LocalMiniLm {
    model: Bert,
    tokenizer: Tokenizer,
    weights: ModelWeights,
}

impl std::fmt::Debug for LocalMiniLm {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("LocalMiniLm")
            .field("dimensions", &self.model.hidden_size())
            .field("weights", &self.weights)
            .finish_non_exhaustive()
    }
}

/// The three files of the model and the errors that name them.
pub(super) struct ModelFiles {
    weights: PathBuf,
    config: PathBuf,
    tokenizer: PathBuf,
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

impl ModelFiles {
    /// The files in `directory`; every missing one is a clear error.
    pub(super) fn find(directory: &Path) -> Result<Self, EmbeddingError> {
        Ok(Self {
            weights: required_file(directory, "model.safetensors")?,
            config: required_file(directory, "config.json")?,
            tokenizer: required_file(directory, "tokenizer.json")?,
        })
    }

    pub(super) fn config_text(&self) -> Result<String, EmbeddingError> {
        std::fs::read_to_string(&self.config).map_err(|error| invalid(&self.config, error))
    }

    pub(super) fn invalid_config(&self, reason: impl std::fmt::Display) -> EmbeddingError {
        invalid(&self.config, reason)
    }

    pub(super) fn invalid_weights(&self, reason: impl std::fmt::Display) -> EmbeddingError {
        invalid(&self.weights, reason)
    }

    /// The weights file, memory-mapped.
    pub(super) fn mapped_weights(&self) -> Result<MappedWeights, EmbeddingError> {
        MappedWeights::open(&self.weights)
            .map_err(|error| invalid(&self.weights, ErrorChain(&error)))
    }

    /// The tokenizer, padding each batch to its longest text and truncating at
    /// [`MAX_TOKENS`].
    pub(super) fn tokenizer(&self) -> Result<Tokenizer, EmbeddingError> {
        let mut tokenizer = Tokenizer::from_file(&self.tokenizer)
            .map_err(|error| invalid(&self.tokenizer, error))?;
        tokenizer.with_padding(Some(PaddingParams {
            strategy: PaddingStrategy::BatchLongest,
            ..PaddingParams::default()
        }));
        tokenizer
            .with_truncation(Some(TruncationParams {
                max_length: MAX_TOKENS,
                ..TruncationParams::default()
            }))
            .map_err(|error| invalid(&self.tokenizer, error))?;
        Ok(tokenizer)
    }
}

/// A tokenised batch: token ids, token type ids and attention mask, each
/// `batch × length` row-major (every text padded to the longest).
pub(super) struct Tokens {
    pub ids: Vec<u32>,
    pub type_ids: Vec<u32>,
    pub mask: Vec<u32>,
    pub batch: usize,
    pub length: usize,
}

/// Tokenises a batch.
pub(super) fn tokens(tokenizer: &Tokenizer, texts: &[&str]) -> Result<Tokens, EmbeddingError> {
    let encodings = tokenizer
        .encode_batch(texts.to_vec(), true)
        .map_err(|error| EmbeddingError::Inference(format!("tokenizer: {error}")))?;
    let batch = encodings.len();
    let length = encodings
        .first()
        .map(|encoding| encoding.get_ids().len())
        .unwrap_or(0);
    let mut tokens = Tokens {
        ids: Vec::with_capacity(batch * length),
        type_ids: Vec::with_capacity(batch * length),
        mask: Vec::with_capacity(batch * length),
        batch,
        length,
    };
    for encoding in &encodings {
        tokens.ids.extend_from_slice(encoding.get_ids());
        tokens.type_ids.extend_from_slice(encoding.get_type_ids());
        tokens.mask.extend_from_slice(encoding.get_attention_mask());
    }
    Ok(tokens)
}

/// Embeds `texts` in batches of [`BATCH_SIZE`] sorted by length (so each batch pads to
/// similar lengths), returning vectors in the callers' order.
pub(super) fn embed_in_batches(
    texts: &[&str],
    embed_batch: impl Fn(&[&str]) -> Result<Vec<Vec<f32>>, EmbeddingError>,
) -> Result<Vec<Vec<f32>>, EmbeddingError> {
    let mut order: Vec<usize> = (0..texts.len()).collect();
    order.sort_by_key(|index| texts[*index].len());
    let mut result = vec![Vec::new(); texts.len()];
    for batch in order.chunks(BATCH_SIZE) {
        let batch_texts: Vec<&str> = batch.iter().map(|index| texts[*index]).collect();
        for (index, vector) in batch.iter().zip(embed_batch(&batch_texts)?) {
            result[*index] = vector;
        }
    }
    Ok(result)
}

impl LocalMiniLm {
    /// Loads the model from `directory`; every missing file, and every tensor missing
    /// from the weights or of the wrong shape, is a clear error naming it.
    pub fn load(directory: &Path) -> Result<Self, EmbeddingError> {
        Self::load_with(directory, ModelWeights::F32)
    }

    /// Loads the model with its dense layers computed as `weights` says: f32 on the
    /// shared mapped file, or int16 (faster, about 21 MB of packed weights in this
    /// process; refused on a CPU without AVX2 and FMA).
    pub fn load_with(directory: &Path, weights: ModelWeights) -> Result<Self, EmbeddingError> {
        let files = ModelFiles::find(directory)?;
        let shape: BertShape = serde_json::from_str(&files.config_text()?)
            .map_err(|error| files.invalid_config(error))?;
        shape.check().map_err(|error| files.invalid_config(error))?;
        let tokenizer = files.tokenizer()?;
        let precision = match weights {
            ModelWeights::F32 => Precision::F32,
            ModelWeights::Int16 => Precision::Int16,
        };
        let model = Bert::new(files.mapped_weights()?, shape, precision)
            .map_err(|error| files.invalid_weights(ErrorChain(&error)))?;
        Ok(Self {
            model,
            tokenizer,
            weights,
        })
    }

    fn embed_batch(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbeddingError> {
        let tokens = tokens(&self.tokenizer, texts)?;
        if tokens.length == 0 {
            // No tokens at all (not even the special ones): nothing to pool.
            return Ok(vec![vec![0.0; self.model.hidden_size()]; texts.len()]);
        }
        let hidden = self
            .model
            .encode(&Batch {
                ids: &tokens.ids,
                type_ids: &tokens.type_ids,
                mask: &tokens.mask,
                batch: tokens.batch,
                length: tokens.length,
            })
            .map_err(|error| EmbeddingError::Inference(ErrorChain(&error).to_string()))?;
        let size = self.model.hidden_size();
        Ok(hidden
            .chunks(tokens.length * size)
            .zip(tokens.mask.chunks(tokens.length))
            .map(|(states, mask)| {
                // Mean over real tokens only: without the mask every text would be
                // averaged with the same padding states.
                let mut pooled = vec![0.0f32; size];
                let mut count = 0.0f32;
                for (state, _) in states
                    .chunks(size)
                    .zip(mask)
                    .filter(|(_, real)| **real != 0)
                {
                    pooled
                        .iter_mut()
                        .zip(state)
                        .for_each(|(sum, value)| *sum += value);
                    count += 1.0;
                }
                for sum in &mut pooled {
                    *sum /= count.max(1.0);
                }
                normalise(&mut pooled);
                pooled
            })
            .collect())
    }
}

impl Embedder for LocalMiniLm {
    fn model_id(&self) -> String {
        // int16's vectors differ slightly from f32's: an index built with one is
        // re-embedded by the other rather than mixing the two.
        match self.weights {
            ModelWeights::F32 => format!("local:all-MiniLM-L6-v2:{MAX_TOKENS}"),
            ModelWeights::Int16 => format!("local:all-MiniLM-L6-v2:{MAX_TOKENS}:int16"),
        }
    }

    fn dimensions(&self) -> usize {
        self.model.hidden_size()
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbeddingError> {
        embed_in_batches(texts, |batch| self.embed_batch(batch))
    }
}
