//! The BERT encoder of all-MiniLM-L6-v2 computed directly on the mapped weights
//! ([`MappedWeights`]): embeddings, then per layer self-attention and the feed-forward
//! block, each followed by a residual sum and layer norm — the post-norm BERT that
//! sentence-transformers runs. Activations are the only memory it allocates, per call,
//! unless the dense layers run in int16 ([`Precision::Int16`]): their weights are then
//! rounded and packed once, in the process's own memory.

use rayon::prelude::*;

use super::{
    int16::{self, PackError, PackedInt16},
    mapped_weights::{MappedWeights, WeightsError},
    matmul::{View, product},
};

/// Why a `config.json` shape cannot be run.
#[derive(Debug, thiserror::Error)]
pub(super) enum ShapeError {
    #[error("hidden_size, intermediate_size and vocab_size must be above 0")]
    Empty,
    #[error("hidden_size is not a multiple of num_attention_heads")]
    Heads,
    #[error("hidden_act {activation:?} is not supported (only \"gelu\")")]
    Activation { activation: String },
}

/// Why the encoder cannot be built on its weights, or cannot encode a batch.
#[derive(Debug, thiserror::Error)]
pub(super) enum BertError {
    #[error(transparent)]
    Shape(#[from] ShapeError),
    /// A tensor the forward pass reads is missing or malformed.
    #[error(transparent)]
    Weights(#[from] WeightsError),
    #[error(
        "int16 weights need an x86-64 CPU with AVX2 and FMA, which this one lacks; use f32 weights"
    )]
    Int16Unsupported,
    #[error(transparent)]
    Pack(#[from] PackError),
    #[error("{tokens} tokens exceed the model's {positions} positions")]
    TooManyTokens { tokens: usize, positions: usize },
    #[error("token {id} (type {kind}) is outside the vocabulary")]
    OutsideVocabulary { id: usize, kind: usize },
}

/// How the dense layers (all but attention's small products) compute.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Precision {
    /// f32 on the mapped weights, shared with every process that maps the file.
    F32,
    /// 13-bit integer weights and activations with exact integer sums (see
    /// [`super::int16`]).
    Int16,
}

/// The model's shape, read from `config.json`.
#[derive(Clone, Debug, serde::Deserialize)]
pub(super) struct BertShape {
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_attention_heads: usize,
    pub num_hidden_layers: usize,
    pub vocab_size: usize,
    pub max_position_embeddings: usize,
    pub type_vocab_size: usize,
    #[serde(default = "default_eps")]
    pub layer_norm_eps: f32,
    #[serde(default = "default_activation")]
    pub hidden_act: String,
}

fn default_eps() -> f32 {
    1e-12
}

fn default_activation() -> String {
    "gelu".to_string()
}

impl BertShape {
    /// Why this shape cannot be run, if it cannot.
    pub fn check(&self) -> Result<(), ShapeError> {
        if self.hidden_size == 0 || self.intermediate_size == 0 || self.vocab_size == 0 {
            return Err(ShapeError::Empty);
        }
        if self.num_attention_heads == 0
            || !self.hidden_size.is_multiple_of(self.num_attention_heads)
        {
            return Err(ShapeError::Heads);
        }
        if self.hidden_act != "gelu" {
            return Err(ShapeError::Activation {
                activation: self.hidden_act.clone(),
            });
        }
        Ok(())
    }
}

/// A dense layer's weight (`out × in`, as stored) and bias, and the weight packed in
/// int16 when the model runs so.
struct Dense<'a> {
    weight: &'a [f32],
    bias: &'a [f32],
    inputs: usize,
    outputs: usize,
    packed: Option<&'a PackedInt16>,
}

impl Dense<'_> {
    /// `output (rows × outputs) = input (rows × inputs) × weightᵀ + bias`.
    fn apply(&self, input: &[f32], rows: usize, output: &mut Vec<f32>) {
        output.clear();
        output.resize(rows * self.outputs, 0.0);
        if let Some(packed) = self.packed {
            packed.apply(input, rows, self.bias, output);
            return;
        }
        product(
            output,
            self.outputs,
            View::rows(input, rows, self.inputs),
            View::rows(self.weight, self.outputs, self.inputs).transposed(),
            true,
        );
        output.par_chunks_mut(self.outputs).for_each(|row| {
            row.iter_mut()
                .zip(self.bias)
                .for_each(|(value, bias)| *value += bias)
        });
    }
}

struct Norm<'a> {
    weight: &'a [f32],
    bias: &'a [f32],
    eps: f32,
}

impl Norm<'_> {
    /// Layer norm of every row of `values`, after adding `residual` to it.
    fn add_and_normalise(&self, values: &mut [f32], residual: &[f32]) {
        let width = self.weight.len();
        values
            .par_chunks_mut(width)
            .zip(residual.par_chunks(width))
            .for_each(|(row, residual)| {
                row.iter_mut()
                    .zip(residual)
                    .for_each(|(value, add)| *value += add);
                self.normalise_row(row);
            });
    }

    fn normalise_row(&self, row: &mut [f32]) {
        let width = row.len() as f32;
        let mean = row.iter().sum::<f32>() / width;
        let variance = row.iter().map(|value| (value - mean).powi(2)).sum::<f32>() / width;
        let scale = 1.0 / (variance + self.eps).sqrt();
        for ((value, weight), bias) in row.iter_mut().zip(self.weight).zip(self.bias) {
            *value = (*value - mean) * scale * weight + bias;
        }
    }
}

/// Token ids, token types and attention mask of a batch, each `batch × length`.
pub(super) struct Batch<'a> {
    pub ids: &'a [u32],
    pub type_ids: &'a [u32],
    pub mask: &'a [u32],
    pub batch: usize,
    pub length: usize,
}

/// The encoder over mapped weights.
pub(super) struct Bert {
    weights: MappedWeights,
    shape: BertShape,
    /// Per layer, its dense weights in int16 ([`Precision::Int16`]; empty for f32).
    packed: Vec<PackedLayer>,
}

/// A layer's dense weights in int16, in [`Layer`]'s order.
struct PackedLayer {
    query: PackedInt16,
    key: PackedInt16,
    value: PackedInt16,
    attention_output: PackedInt16,
    intermediate: PackedInt16,
    output: PackedInt16,
}

impl Bert {
    /// Checks that every tensor the forward pass reads is in `weights` with the shape
    /// `shape` implies, so a wrong file fails here with the tensor's name; for int16,
    /// that the CPU can run it, then packs the dense weights.
    pub fn new(
        weights: MappedWeights,
        shape: BertShape,
        precision: Precision,
    ) -> Result<Self, BertError> {
        shape.check()?;
        let mut bert = Self {
            weights,
            shape,
            packed: Vec::new(),
        };
        bert.embeddings()?;
        for layer in 0..bert.shape.num_hidden_layers {
            bert.layer(layer)?;
        }
        if precision == Precision::Int16 {
            if !int16::supported() {
                return Err(BertError::Int16Unsupported);
            }
            let packed = (0..bert.shape.num_hidden_layers)
                .map(|index| Ok(bert.layer(index)?.packed()?))
                .collect::<Result<Vec<_>, BertError>>()?;
            bert.packed = packed;
        }
        Ok(bert)
    }

    pub fn hidden_size(&self) -> usize {
        self.shape.hidden_size
    }

    fn dense(
        &self,
        prefix: &str,
        outputs: usize,
        inputs: usize,
    ) -> Result<Dense<'_>, WeightsError> {
        Ok(Dense {
            weight: self
                .weights
                .tensor(&format!("{prefix}.weight"), &[outputs, inputs])?,
            bias: self.weights.tensor(&format!("{prefix}.bias"), &[outputs])?,
            inputs,
            outputs,
            packed: None,
        })
    }

    fn norm(&self, prefix: &str) -> Result<Norm<'_>, WeightsError> {
        let size = self.shape.hidden_size;
        Ok(Norm {
            weight: self.weights.tensor(&format!("{prefix}.weight"), &[size])?,
            bias: self.weights.tensor(&format!("{prefix}.bias"), &[size])?,
            eps: self.shape.layer_norm_eps,
        })
    }

    #[allow(clippy::type_complexity)]
    fn embeddings(&self) -> Result<(&[f32], &[f32], &[f32], Norm<'_>), WeightsError> {
        let shape = &self.shape;
        let hidden = shape.hidden_size;
        Ok((
            self.weights.tensor(
                "embeddings.word_embeddings.weight",
                &[shape.vocab_size, hidden],
            )?,
            self.weights.tensor(
                "embeddings.position_embeddings.weight",
                &[shape.max_position_embeddings, hidden],
            )?,
            self.weights.tensor(
                "embeddings.token_type_embeddings.weight",
                &[shape.type_vocab_size, hidden],
            )?,
            self.norm("embeddings.LayerNorm")?,
        ))
    }

    fn layer(&self, index: usize) -> Result<Layer<'_>, WeightsError> {
        let prefix = format!("encoder.layer.{index}");
        let (hidden, intermediate) = (self.shape.hidden_size, self.shape.intermediate_size);
        let mut layer = Layer {
            query: self.dense(&format!("{prefix}.attention.self.query"), hidden, hidden)?,
            key: self.dense(&format!("{prefix}.attention.self.key"), hidden, hidden)?,
            value: self.dense(&format!("{prefix}.attention.self.value"), hidden, hidden)?,
            attention_output: self.dense(
                &format!("{prefix}.attention.output.dense"),
                hidden,
                hidden,
            )?,
            attention_norm: self.norm(&format!("{prefix}.attention.output.LayerNorm"))?,
            intermediate: self.dense(
                &format!("{prefix}.intermediate.dense"),
                intermediate,
                hidden,
            )?,
            output: self.dense(&format!("{prefix}.output.dense"), hidden, intermediate)?,
            output_norm: self.norm(&format!("{prefix}.output.LayerNorm"))?,
        };
        if let Some(packed) = self.packed.get(index) {
            layer.query.packed = Some(&packed.query);
            layer.key.packed = Some(&packed.key);
            layer.value.packed = Some(&packed.value);
            layer.attention_output.packed = Some(&packed.attention_output);
            layer.intermediate.packed = Some(&packed.intermediate);
            layer.output.packed = Some(&packed.output);
        }
        Ok(layer)
    }

    /// The last layer's hidden states, `(batch × length) × hidden`, row-major.
    pub fn encode(&self, input: &Batch<'_>) -> Result<Vec<f32>, BertError> {
        let shape = &self.shape;
        let hidden = shape.hidden_size;
        let rows = input.batch * input.length;
        if input.length > shape.max_position_embeddings {
            return Err(BertError::TooManyTokens {
                tokens: input.length,
                positions: shape.max_position_embeddings,
            });
        }
        if rows == 0 {
            return Ok(Vec::new());
        }
        let (words, positions, types, embeddings_norm) = self.embeddings()?;
        let mut states = vec![0.0f32; rows * hidden];
        for (row, state) in states.chunks_mut(hidden).enumerate() {
            let id = input.ids[row] as usize;
            let kind = input.type_ids[row] as usize;
            if id >= shape.vocab_size || kind >= shape.type_vocab_size {
                return Err(BertError::OutsideVocabulary { id, kind });
            }
            let position = row % input.length;
            let word = &words[id * hidden..(id + 1) * hidden];
            let place = &positions[position * hidden..(position + 1) * hidden];
            let kind = &types[kind * hidden..(kind + 1) * hidden];
            for (index, value) in state.iter_mut().enumerate() {
                *value = word[index] + place[index] + kind[index];
            }
            embeddings_norm.normalise_row(state);
        }
        // Padding keys get no attention (softmax weight zero).
        let real_keys: Vec<bool> = input.mask.iter().map(|&real| real != 0).collect();
        let mut scratch = Scratch::default();
        for index in 0..shape.num_hidden_layers {
            self.layer(index)?
                .apply(&mut states, &real_keys, input, shape, &mut scratch);
        }
        Ok(states)
    }
}

#[derive(Default)]
struct Scratch {
    query: Vec<f32>,
    key: Vec<f32>,
    value: Vec<f32>,
    context: Vec<f32>,
    attended: Vec<f32>,
    expanded: Vec<f32>,
    output: Vec<f32>,
}

struct Layer<'a> {
    query: Dense<'a>,
    key: Dense<'a>,
    value: Dense<'a>,
    attention_output: Dense<'a>,
    attention_norm: Norm<'a>,
    intermediate: Dense<'a>,
    output: Dense<'a>,
    output_norm: Norm<'a>,
}

impl Layer<'_> {
    /// The layer's dense weights, rounded to int16 and packed.
    fn packed(&self) -> Result<PackedLayer, PackError> {
        let pack = |dense: &Dense<'_>| PackedInt16::pack(dense.weight, dense.outputs, dense.inputs);
        Ok(PackedLayer {
            query: pack(&self.query)?,
            key: pack(&self.key)?,
            value: pack(&self.value)?,
            attention_output: pack(&self.attention_output)?,
            intermediate: pack(&self.intermediate)?,
            output: pack(&self.output)?,
        })
    }

    fn apply(
        &self,
        states: &mut Vec<f32>,
        real_keys: &[bool],
        input: &Batch<'_>,
        shape: &BertShape,
        scratch: &mut Scratch,
    ) {
        let rows = input.batch * input.length;
        let hidden = shape.hidden_size;
        self.query.apply(states, rows, &mut scratch.query);
        self.key.apply(states, rows, &mut scratch.key);
        self.value.apply(states, rows, &mut scratch.value);
        scratch.context.clear();
        scratch.context.resize(rows * hidden, 0.0);
        let sequence = input.length * hidden;
        let heads = shape.num_attention_heads;
        let head_size = hidden / heads;
        let scale = 1.0 / (head_size as f32).sqrt();
        let (query, key, value) = (&scratch.query, &scratch.key, &scratch.value);
        scratch
            .context
            .par_chunks_mut(sequence)
            .enumerate()
            .for_each(|(text, context)| {
                let span = text * sequence..(text + 1) * sequence;
                let real = &real_keys[text * input.length..(text + 1) * input.length];
                attend(
                    context,
                    &query[span.clone()],
                    &key[span.clone()],
                    &value[span],
                    real,
                    Heads {
                        length: input.length,
                        hidden,
                        heads,
                        head_size,
                        scale,
                    },
                );
            });
        self.attention_output
            .apply(&scratch.context, rows, &mut scratch.attended);
        self.attention_norm
            .add_and_normalise(&mut scratch.attended, states);
        self.intermediate
            .apply(&scratch.attended, rows, &mut scratch.expanded);
        scratch
            .expanded
            .par_chunks_mut(shape.intermediate_size)
            .for_each(|row| row.iter_mut().for_each(|value| *value = gelu(*value)));
        self.output
            .apply(&scratch.expanded, rows, &mut scratch.output);
        self.output_norm
            .add_and_normalise(&mut scratch.output, &scratch.attended);
        std::mem::swap(states, &mut scratch.output);
    }
}

#[derive(Clone, Copy)]
struct Heads {
    length: usize,
    hidden: usize,
    heads: usize,
    head_size: usize,
    scale: f32,
}

/// Self-attention of one text: for each head, softmax(q·kᵀ·scale) over the real keys,
/// times v, into the head's columns of `context`.
fn attend(
    context: &mut [f32],
    query: &[f32],
    key: &[f32],
    value: &[f32],
    real_keys: &[bool],
    shape: Heads,
) {
    let length = shape.length;
    let mut scores = vec![0.0f32; length * length];
    for head in 0..shape.heads {
        let columns = head * shape.head_size..;
        let head_view = |data: &[f32]| -> Vec<f32> {
            // Gathered once per head: the strided view would do, but a compact copy
            // keeps the small products on the fast contiguous path.
            let mut view = Vec::with_capacity(length * shape.head_size);
            for row in data.chunks(shape.hidden) {
                view.extend_from_slice(&row[columns.start..columns.start + shape.head_size]);
            }
            view
        };
        let (q, k, v) = (head_view(query), head_view(key), head_view(value));
        product(
            &mut scores,
            length,
            View::rows(&q, length, shape.head_size),
            View::rows(&k, length, shape.head_size).transposed(),
            false,
        );
        for row in scores.chunks_mut(length) {
            let mut largest = f32::NEG_INFINITY;
            for (score, real) in row.iter_mut().zip(real_keys) {
                if *real {
                    *score *= shape.scale;
                    largest = largest.max(*score);
                }
            }
            // Padding keys get weight zero (not the exponential of a large negative
            // score, which underflows to the same zero on a slow path).
            let mut total = 0.0;
            for (score, real) in row.iter_mut().zip(real_keys) {
                *score = if *real { (*score - largest).exp() } else { 0.0 };
                total += *score;
            }
            if total > 0.0 {
                for score in &mut *row {
                    *score /= total;
                }
            }
        }
        product(
            &mut context[columns.start..],
            shape.hidden,
            View::rows(&scores, length, length),
            View::rows(&v, length, shape.head_size),
            false,
        );
    }
}

/// GELU with the error function, as BERT defines it.
fn gelu(value: f32) -> f32 {
    0.5 * value * (1.0 + erf(value * std::f32::consts::FRAC_1_SQRT_2))
}

/// The error function to within 1.5e-7 (Abramowitz and Stegun 7.1.26; under 6e-7
/// with f32 arithmetic), below f32's own rounding of GELU's result near 1. A general-purpose `erff` spends a quarter of the
/// model's time here (two exponentials and an underflow path in its tail); this is one
/// exponential, and none past |x| = 4, where erf is ±1 in f32.
fn erf(value: f32) -> f32 {
    let magnitude = value.abs();
    if magnitude >= 4.0 {
        return value.signum();
    }
    let t = 1.0 / (1.0 + 0.327_591_1 * magnitude);
    let polynomial = t
        * (0.254_829_6
            + t * (-0.284_496_74 + t * (1.421_413_7 + t * (-1.453_152 + t * 1.061_405_4))));
    let result = 1.0 - polynomial * (-magnitude * magnitude).exp();
    result.copysign(value)
}

#[cfg(test)]
mod tests {
    /// The fast erf and GELU against double-precision references over GELU's whole
    /// useful range, both tails and the cut at 4 included: off by less than f32's own
    /// rounding of a value near 1 (a few units of 2⁻²⁴) in absolute terms.
    #[test]
    fn erf_and_gelu_are_within_f32_rounding_of_the_exact_functions() {
        let (mut erf_worst, mut gelu_worst) = ((0.0f64, 0.0f32), (0.0f64, 0.0f32));
        for step in -80_000..=80_000 {
            let value = step as f32 * 1e-4;
            let exact = f64::from(value);
            let erf_error = (f64::from(super::erf(value)) - libm::erf(exact)).abs();
            if erf_error > erf_worst.0 {
                erf_worst = (erf_error, value);
            }
            let gelu = 0.5 * exact * (1.0 + libm::erf(exact / std::f64::consts::SQRT_2));
            let gelu_error = (f64::from(super::gelu(value)) - gelu).abs();
            if gelu_error > gelu_worst.0 {
                gelu_worst = (gelu_error, value);
            }
        }
        assert!(
            erf_worst.0 < 6e-7,
            "erf is off by {} at {}",
            erf_worst.0,
            erf_worst.1
        );
        assert!(
            gelu_worst.0 < 1e-6,
            "gelu is off by {} at {}",
            gelu_worst.0,
            gelu_worst.1
        );
        assert_eq!(super::erf(-9.0), -1.0);
        assert_eq!(super::gelu(-20.0), 0.0);
    }
}
