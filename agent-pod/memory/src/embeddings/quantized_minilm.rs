//! all-MiniLM-L6-v2 with 8-bit weights: the same BERT forward pass, pooling and
//! normalisation as [`super::LocalMiniLm`], with every dense layer's weights held as
//! Q8_0 blocks (32 weights per scale) and the matrix products run on 8-bit integers;
//! layer norms, attention scores and the softmax stay in f32. The token embeddings
//! (half the model) stay f32 and are read from the memory-mapped file like the fp32
//! model's, so only the rows of tokens seen are resident and they are shared.
//!
//! Vectors differ slightly from the fp32 model's, so an index built with one is
//! re-embedded when the other is configured (the model id differs).

use std::path::Path;

use candle_core::{
    D, DType, Device, Module, Tensor,
    quantized::{GgmlDType, QMatMul, QTensor},
};
use tokenizers::Tokenizer;

use super::{
    Embedder, EmbeddingError,
    local_minilm::{MAX_TOKENS, ModelFiles, embed_in_batches, mean_pool_normalised, tokenise},
    mapped_weights::MappedWeights,
};

/// Copies tensor `name` of `shape` out of the mapped file into a candle tensor (the
/// dense layers are quantised from it and the copy dropped).
fn tensor(
    weights: &MappedWeights,
    name: &str,
    shape: &[usize],
    device: &Device,
) -> candle_core::Result<Tensor> {
    let values = weights
        .tensor(name, shape)
        .map_err(candle_core::Error::msg)?;
    Tensor::from_slice(values, shape, device)
}

/// A dense layer: 8-bit weight, f32 bias.
struct Dense {
    weight: QMatMul,
    bias: Tensor,
}

impl Dense {
    fn load(
        weights: &MappedWeights,
        prefix: &str,
        out_size: usize,
        in_size: usize,
        device: &Device,
    ) -> candle_core::Result<Self> {
        let weight = tensor(
            weights,
            &format!("{prefix}.weight"),
            &[out_size, in_size],
            device,
        )?;
        Ok(Self {
            weight: QMatMul::from_qtensor(QTensor::quantize(&weight, GgmlDType::Q8_0)?)?,
            bias: tensor(weights, &format!("{prefix}.bias"), &[out_size], device)?,
        })
    }

    fn forward(&self, input: &Tensor) -> candle_core::Result<Tensor> {
        self.weight.forward(input)?.broadcast_add(&self.bias)
    }
}

struct Norm {
    weight: Tensor,
    bias: Tensor,
}

impl Norm {
    fn load(
        weights: &MappedWeights,
        prefix: &str,
        size: usize,
        device: &Device,
    ) -> candle_core::Result<Self> {
        Ok(Self {
            weight: tensor(weights, &format!("{prefix}.weight"), &[size], device)?,
            bias: tensor(weights, &format!("{prefix}.bias"), &[size], device)?,
        })
    }

    fn forward(&self, input: &Tensor) -> candle_core::Result<Tensor> {
        candle_nn::ops::layer_norm(input, &self.weight, &self.bias, LAYER_NORM_EPS)
    }
}

const LAYER_NORM_EPS: f32 = 1e-12;

struct Layer {
    query: Dense,
    key: Dense,
    value: Dense,
    attention_output: Dense,
    attention_norm: Norm,
    intermediate: Dense,
    output: Dense,
    output_norm: Norm,
}

/// The model's shape, read from `config.json`.
#[derive(serde::Deserialize)]
struct Shape {
    hidden_size: usize,
    intermediate_size: usize,
    num_attention_heads: usize,
    num_hidden_layers: usize,
    vocab_size: usize,
    max_position_embeddings: usize,
    type_vocab_size: usize,
}

/// all-MiniLM-L6-v2 with Q8_0 weights.
pub struct QuantizedMiniLm {
    /// The mapped file; the token embeddings are read from it in place.
    mapped: MappedWeights,
    vocab_size: usize,
    position_embeddings: Tensor,
    token_type_embeddings: Tensor,
    embeddings_norm: Norm,
    layers: Vec<Layer>,
    heads: usize,
    head_size: usize,
    tokenizer: Tokenizer,
    dimensions: usize,
    device: Device,
}

impl std::fmt::Debug for QuantizedMiniLm {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("QuantizedMiniLm")
            .field("dimensions", &self.dimensions)
            .finish_non_exhaustive()
    }
}

impl QuantizedMiniLm {
    /// Loads the fp32 files from `directory` and quantises the weights once.
    pub fn load(directory: &Path) -> Result<Self, EmbeddingError> {
        let files = ModelFiles::find(directory)?;
        let shape: Shape = serde_json::from_str(&files.config_text()?)
            .map_err(|error| files.invalid_config(error))?;
        if shape.num_attention_heads == 0
            || !shape.hidden_size.is_multiple_of(shape.num_attention_heads)
        {
            return Err(files.invalid_config("hidden_size is not a multiple of the head count"));
        }
        let tokenizer = files.tokenizer()?;
        let device = Device::Cpu;
        let mapped = files.mapped_weights()?;
        let (hidden, intermediate) = (shape.hidden_size, shape.intermediate_size);
        let load = || -> candle_core::Result<(Tensor, Tensor, Norm, Vec<Layer>)> {
            // Checked here so a wrong file fails at load, not at the first text.
            mapped
                .tensor(
                    "embeddings.word_embeddings.weight",
                    &[shape.vocab_size, hidden],
                )
                .map_err(candle_core::Error::msg)?;
            let position_embeddings = tensor(
                &mapped,
                "embeddings.position_embeddings.weight",
                &[shape.max_position_embeddings, hidden],
                &device,
            )?;
            let token_type_embeddings = tensor(
                &mapped,
                "embeddings.token_type_embeddings.weight",
                &[shape.type_vocab_size, hidden],
                &device,
            )?;
            let embeddings_norm = Norm::load(&mapped, "embeddings.LayerNorm", hidden, &device)?;
            let mut layers = Vec::with_capacity(shape.num_hidden_layers);
            for index in 0..shape.num_hidden_layers {
                let layer = format!("encoder.layer.{index}");
                let dense = |name: &str, out_size: usize, in_size: usize| {
                    Dense::load(
                        &mapped,
                        &format!("{layer}.{name}"),
                        out_size,
                        in_size,
                        &device,
                    )
                };
                layers.push(Layer {
                    query: dense("attention.self.query", hidden, hidden)?,
                    key: dense("attention.self.key", hidden, hidden)?,
                    value: dense("attention.self.value", hidden, hidden)?,
                    attention_output: dense("attention.output.dense", hidden, hidden)?,
                    attention_norm: Norm::load(
                        &mapped,
                        &format!("{layer}.attention.output.LayerNorm"),
                        hidden,
                        &device,
                    )?,
                    intermediate: dense("intermediate.dense", intermediate, hidden)?,
                    output: dense("output.dense", hidden, intermediate)?,
                    output_norm: Norm::load(
                        &mapped,
                        &format!("{layer}.output.LayerNorm"),
                        hidden,
                        &device,
                    )?,
                });
            }
            Ok((
                position_embeddings,
                token_type_embeddings,
                embeddings_norm,
                layers,
            ))
        };
        let (position_embeddings, token_type_embeddings, embeddings_norm, layers) =
            load().map_err(|error| files.invalid_weights(error))?;
        Ok(Self {
            mapped,
            vocab_size: shape.vocab_size,
            position_embeddings,
            token_type_embeddings,
            embeddings_norm,
            layers,
            heads: shape.num_attention_heads,
            head_size: shape.hidden_size / shape.num_attention_heads,
            tokenizer,
            dimensions: shape.hidden_size,
            device,
        })
    }

    /// The token embeddings of `ids` (`batch × length`), gathered from the mapped file.
    fn word_embeddings(&self, ids: &Tensor) -> candle_core::Result<Tensor> {
        let (batch, length) = ids.dims2()?;
        let table = self
            .mapped
            .tensor(
                "embeddings.word_embeddings.weight",
                &[self.vocab_size, self.dimensions],
            )
            .map_err(candle_core::Error::msg)?;
        let mut rows = Vec::with_capacity(batch * length * self.dimensions);
        for id in ids.flatten_all()?.to_vec1::<u32>()? {
            let id = id as usize;
            if id >= self.vocab_size {
                candle_core::bail!("token {id} is outside the vocabulary");
            }
            rows.extend_from_slice(&table[id * self.dimensions..(id + 1) * self.dimensions]);
        }
        Tensor::from_vec(rows, (batch, length, self.dimensions), &self.device)
    }

    /// Hidden states of the last layer, `(batch, length, hidden)`.
    fn encode(
        &self,
        ids: &Tensor,
        type_ids: &Tensor,
        mask: &Tensor,
    ) -> candle_core::Result<Tensor> {
        let (batch, length) = ids.dims2()?;
        let positions = self.position_embeddings.narrow(0, 0, length)?;
        let types = self
            .token_type_embeddings
            .index_select(&type_ids.flatten_all()?, 0)?
            .reshape((batch, length, self.dimensions))?;
        let words = self.word_embeddings(ids)?;
        let mut hidden = self
            .embeddings_norm
            .forward(&words.add(&types)?.broadcast_add(&positions)?)?;
        // Padding keys get a large negative score before the softmax.
        let key_bias =
            ((mask.to_dtype(DType::F32)? - 1.0)? * 1e4)?.reshape((batch, 1, 1, length))?;
        let scale = (self.head_size as f64).powf(-0.5);
        for layer in &self.layers {
            let split = |tensor: Tensor| -> candle_core::Result<Tensor> {
                tensor
                    .reshape((batch, length, self.heads, self.head_size))?
                    .transpose(1, 2)?
                    .contiguous()
            };
            let query = split(layer.query.forward(&hidden)?)?;
            let key = split(layer.key.forward(&hidden)?)?;
            let value = split(layer.value.forward(&hidden)?)?;
            let scores = (query.matmul(&key.t()?)? * scale)?.broadcast_add(&key_bias)?;
            let probabilities = candle_nn::ops::softmax_last_dim(&scores)?;
            let context = probabilities.matmul(&value)?.transpose(1, 2)?.reshape((
                batch,
                length,
                self.dimensions,
            ))?;
            let attended = layer
                .attention_norm
                .forward(&layer.attention_output.forward(&context)?.add(&hidden)?)?;
            let expanded = layer.intermediate.forward(&attended)?.gelu_erf()?;
            hidden = layer
                .output_norm
                .forward(&layer.output.forward(&expanded)?.add(&attended)?)?;
        }
        debug_assert_eq!(hidden.dim(D::Minus1)?, self.dimensions);
        Ok(hidden)
    }

    fn embed_batch(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbeddingError> {
        let inference = |error: candle_core::Error| EmbeddingError::Inference(error.to_string());
        let (ids, type_ids, mask) = tokenise(&self.tokenizer, texts, &self.device)?;
        let hidden = self.encode(&ids, &type_ids, &mask).map_err(inference)?;
        mean_pool_normalised(&hidden, &mask)
    }
}

impl Embedder for QuantizedMiniLm {
    fn model_id(&self) -> String {
        format!("local:all-MiniLM-L6-v2:{MAX_TOKENS}:q8_0-dense")
    }

    fn dimensions(&self) -> usize {
        self.dimensions
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbeddingError> {
        embed_in_batches(texts, |batch| self.embed_batch(batch))
    }
}
