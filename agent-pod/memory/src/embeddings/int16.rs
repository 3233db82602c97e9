//! Dense layers in 16-bit integers: the model's fast path on x86-64 CPUs with AVX2.
//!
//! Each output's weights share one scale and each input row's activations another;
//! both are rounded to 13-bit integers (±4095), so a value changes by at most half a
//! step of 1/8190 of its row's largest magnitude. The CPU's `vpmaddwd` multiplies 16
//! pairs of 16-bit integers per instruction into 8 exact 32-bit sums, twice the
//! multiply-adds of an f32 fused multiply-add on the same vector width.
//!
//! No sum can overflow: a pair contributes at most 2 × 4095² < 2²⁵, and every
//! [`FLUSH`] pairs (2²⁵ × 32 < 2³¹) the integer sums are moved into f32 totals.
//!
//! Weights are rounded and packed once when the model loads: groups of [`GROUP`]
//! output rows, laid out so one 32-byte load gives 8 outputs × 2 consecutive inputs,
//! which is the instruction's operand shape. Activations are rounded per call.

use rayon::prelude::*;

/// Output rows per packed group: two 8-lane vectors, the kernel's width.
const GROUP: usize = 16;
/// Rows of activations one kernel call keeps in registers (6 × 2 accumulators).
const BLOCK: usize = 6;
/// Rows one parallel task computes: its activations stay in L2 while every weight
/// group is applied to them.
const TASK_ROWS: usize = 96;
/// Largest rounded magnitude: 13 bits with the sign.
const LIMIT: f32 = 4095.0;
/// Input pairs summed in 32-bit integers before the sums move into f32.
const FLUSH: usize = 32;

/// Whether this CPU runs the integer kernel.
pub(super) fn supported() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// The scale that maps `values`' largest magnitude to [`LIMIT`] (0 for all zeros).
fn scale_of(values: &[f32]) -> f32 {
    values
        .iter()
        .fold(0f32, |largest, value| largest.max(value.abs()))
        / LIMIT
}

/// `(low, high)` rounded with `scale`, as one pair, the lower-indexed value in the low
/// half (the instruction's element order).
fn pair(low: f32, high: f32, scale: f32) -> u32 {
    let round = |value: f32| {
        if scale == 0.0 {
            0
        } else {
            // Clamped: the largest value divided by its own scale may round past LIMIT.
            (value / scale).round().clamp(-LIMIT, LIMIT) as i16 as u16
        }
    };
    u32::from(round(low)) | (u32::from(round(high)) << 16)
}

/// Why a dense layer cannot be packed for the integer kernel.
#[derive(Debug, thiserror::Error)]
pub(super) enum PackError {
    #[error(
        "a {outputs} × {inputs} layer cannot run in int16 (outputs must be a multiple of {GROUP}, inputs even)"
    )]
    Shape { outputs: usize, inputs: usize },
    #[error("{weights} weights for a {outputs} × {inputs} layer")]
    Length {
        weights: usize,
        outputs: usize,
        inputs: usize,
    },
}

/// A dense layer's weight (`outputs × inputs`, as stored), rounded and packed.
pub(super) struct PackedInt16 {
    /// `[group][input pair][16 outputs]`.
    pairs: Vec<u32>,
    /// Per output, the value of one integer step of its weights.
    scales: Vec<f32>,
    inputs: usize,
    outputs: usize,
}

impl PackedInt16 {
    /// Packs `weight`; the kernel needs `outputs` a multiple of 16 and `inputs` even.
    pub fn pack(weight: &[f32], outputs: usize, inputs: usize) -> Result<Self, PackError> {
        if !outputs.is_multiple_of(GROUP) || !inputs.is_multiple_of(2) || inputs == 0 {
            return Err(PackError::Shape { outputs, inputs });
        }
        if weight.len() != outputs * inputs {
            return Err(PackError::Length {
                weights: weight.len(),
                outputs,
                inputs,
            });
        }
        let scales: Vec<f32> = weight.chunks_exact(inputs).map(scale_of).collect();
        let half_inputs = inputs / 2;
        let mut pairs = Vec::with_capacity(outputs * half_inputs);
        for group in 0..outputs / GROUP {
            for input_pair in 0..half_inputs {
                for lane in 0..GROUP {
                    let output = group * GROUP + lane;
                    let row = &weight[output * inputs..][..inputs];
                    pairs.push(pair(
                        row[2 * input_pair],
                        row[2 * input_pair + 1],
                        scales[output],
                    ));
                }
            }
        }
        Ok(Self {
            pairs,
            scales,
            inputs,
            outputs,
        })
    }

    /// `output (rows × outputs) = input (rows × inputs) × weightᵀ + bias`, overwriting.
    pub fn apply(&self, input: &[f32], rows: usize, bias: &[f32], output: &mut [f32]) {
        assert_eq!(
            input.len(),
            rows * self.inputs,
            "input is not rows × inputs"
        );
        assert_eq!(
            output.len(),
            rows * self.outputs,
            "output is not rows × outputs"
        );
        assert_eq!(bias.len(), self.outputs, "bias is not one per output");
        if rows == 0 {
            return;
        }
        let half_inputs = self.inputs / 2;
        let mut activations = vec![0u32; rows * half_inputs];
        let mut row_scales = vec![0f32; rows];
        activations
            .par_chunks_mut(half_inputs)
            .zip(row_scales.par_iter_mut())
            .zip(input.par_chunks(self.inputs))
            .for_each(|((packed, row_scale), row)| {
                *row_scale = scale_of(row);
                for (slot, values) in packed.iter_mut().zip(row.chunks_exact(2)) {
                    *slot = pair(values[0], values[1], *row_scale);
                }
            });
        output
            .par_chunks_mut(TASK_ROWS * self.outputs)
            .zip(activations.par_chunks(TASK_ROWS * half_inputs))
            .zip(row_scales.par_chunks(TASK_ROWS))
            .for_each(|((output, activations), row_scales)| {
                self.task(activations, row_scales, bias, output)
            });
    }

    /// Every weight group over one task's rows, [`BLOCK`] rows per kernel call.
    fn task(&self, activations: &[u32], row_scales: &[f32], bias: &[f32], output: &mut [f32]) {
        let half_inputs = self.inputs / 2;
        let group_size = GROUP * half_inputs;
        for (group, weights) in self.pairs.chunks_exact(group_size).enumerate() {
            let columns = group * GROUP..(group + 1) * GROUP;
            for (block, (rows, row_scales)) in activations
                .chunks(BLOCK * half_inputs)
                .zip(row_scales.chunks(BLOCK))
                .enumerate()
            {
                let count = row_scales.len();
                let start = block * BLOCK * self.outputs + group * GROUP;
                let end = start + (count - 1) * self.outputs + GROUP;
                let tile = Tile {
                    activations: rows,
                    row_scales,
                    weights,
                    weight_scales: &self.scales[columns.clone()],
                    bias: &bias[columns.clone()],
                    output: &mut output[start..end],
                    half_inputs,
                    output_stride: self.outputs,
                };
                match count {
                    1 => kernel::<1>(tile),
                    2 => kernel::<2>(tile),
                    3 => kernel::<3>(tile),
                    4 => kernel::<4>(tile),
                    5 => kernel::<5>(tile),
                    _ => kernel::<BLOCK>(tile),
                }
            }
        }
    }
}

/// One kernel call's operands: `ROWS` rows of activation pairs and their scales, one
/// weight group with its scales and bias, and the output tile (row `r`, lane `j` at
/// `r * output_stride + j`).
struct Tile<'a> {
    activations: &'a [u32],
    row_scales: &'a [f32],
    weights: &'a [u32],
    weight_scales: &'a [f32],
    bias: &'a [f32],
    output: &'a mut [f32],
    half_inputs: usize,
    output_stride: usize,
}

/// Checks the tile's extents, then runs the vector kernel: everything it reads or
/// writes is inside the slices checked here.
fn kernel<const ROWS: usize>(tile: Tile<'_>) {
    assert!(
        supported(),
        "the int16 kernel ran on a CPU without AVX2 and FMA"
    );
    assert_eq!(tile.activations.len(), ROWS * tile.half_inputs);
    assert_eq!(tile.row_scales.len(), ROWS);
    assert_eq!(tile.weights.len(), GROUP * tile.half_inputs);
    assert_eq!(tile.weight_scales.len(), GROUP);
    assert_eq!(tile.bias.len(), GROUP);
    assert!(tile.output_stride >= GROUP);
    assert_eq!(
        tile.output.len(),
        (ROWS - 1) * tile.output_stride + GROUP,
        "output tile"
    );
    #[cfg(target_arch = "x86_64")]
    avx2::kernel::<ROWS>(tile);
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::{
        __m256, __m256i, _mm256_add_epi32, _mm256_add_ps, _mm256_cvtepi32_ps, _mm256_fmadd_ps,
        _mm256_loadu_ps, _mm256_loadu_si256, _mm256_madd_epi16, _mm256_mul_ps, _mm256_set1_epi32,
        _mm256_set1_ps, _mm256_setzero_ps, _mm256_setzero_si256, _mm256_storeu_ps,
    };

    use super::{FLUSH, GROUP, Tile};

    /// The checked entry: [`super::kernel`] asserted the CPU features and extents.
    #[allow(unsafe_code)]
    pub(super) fn kernel<const ROWS: usize>(tile: Tile<'_>) {
        // SAFETY: the caller checked that the CPU has AVX2 and FMA (the target
        // features) and that every slice holds exactly what `block` reads and writes:
        // ROWS × half_inputs activation pairs and ROWS scales, 16 × half_inputs weight
        // pairs, 16 weight scales and biases, and output rows 0..ROWS of 16 lanes each
        // at `output_stride`.
        unsafe { block::<ROWS>(tile) }
    }

    #[allow(unsafe_code)]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn block<const ROWS: usize>(tile: Tile<'_>) {
        let mut totals: [[__m256; 2]; ROWS] = [[_mm256_setzero_ps(); 2]; ROWS];
        let weights = tile.weights.as_ptr();
        // One slice per row, each exactly `half_inputs` long, so the loop's reads need
        // no bounds checks.
        let rows: [&[u32]; ROWS] = std::array::from_fn(|row| {
            &tile.activations[row * tile.half_inputs..][..tile.half_inputs]
        });
        let mut start = 0;
        while start < tile.half_inputs {
            let end = (start + FLUSH).min(tile.half_inputs);
            let mut sums: [[__m256i; 2]; ROWS] = [[_mm256_setzero_si256(); 2]; ROWS];
            for input_pair in start..end {
                // SAFETY: `input_pair < half_inputs` and the weight slice holds
                // 16 × half_inputs pairs, so the two 8-pair loads stay inside it.
                let columns: [__m256i; 2] = std::array::from_fn(|vector| unsafe {
                    _mm256_loadu_si256(weights.add(input_pair * GROUP + vector * 8).cast())
                });
                for (row, row_sums) in rows.iter().zip(sums.iter_mut()) {
                    let broadcast = _mm256_set1_epi32(row[input_pair] as i32);
                    for (sum, column) in row_sums.iter_mut().zip(columns) {
                        *sum = _mm256_add_epi32(*sum, _mm256_madd_epi16(broadcast, column));
                    }
                }
            }
            for (row_totals, row_sums) in totals.iter_mut().zip(&sums) {
                for (total, sum) in row_totals.iter_mut().zip(row_sums) {
                    *total = _mm256_add_ps(*total, _mm256_cvtepi32_ps(*sum));
                }
            }
            start = end;
        }
        let output = tile.output.as_mut_ptr();
        for (row, row_totals) in totals.iter().enumerate() {
            let row_scale = _mm256_set1_ps(tile.row_scales[row]);
            for (vector, total) in row_totals.iter().enumerate() {
                // SAFETY: weight scales and bias hold 16 values; output row `row`
                // starts at row × output_stride and its 16 lanes are inside the
                // checked tile.
                unsafe {
                    let weight_scale = _mm256_loadu_ps(tile.weight_scales.as_ptr().add(vector * 8));
                    let bias = _mm256_loadu_ps(tile.bias.as_ptr().add(vector * 8));
                    _mm256_storeu_ps(
                        output.add(row * tile.output_stride + vector * 8),
                        _mm256_fmadd_ps(*total, _mm256_mul_ps(row_scale, weight_scale), bias),
                    );
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic values in [-1, 1) with a few large outliers, as real activations
    /// have.
    fn values(count: usize, seed: u64) -> Vec<f32> {
        let mut state = seed;
        (0..count)
            .map(|index| {
                state = state
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                let unit = (state >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0;
                if index % 97 == 0 { unit * 40.0 } else { unit }
            })
            .collect()
    }

    /// The bound rounding to nearest allows on one output: each operand moves by at
    /// most half its row's step, so the product moves by at most
    /// Σ (|x|·½sw + |w|·½sx + ¼·sx·sw), plus f32 summation error.
    fn bound(input: &[f32], weight: &[f32], exact: f64) -> f64 {
        let step_input = f64::from(scale_of(input));
        let step_weight = f64::from(scale_of(weight));
        let rounding: f64 = input
            .iter()
            .zip(weight)
            .map(|(x, w)| {
                f64::from(x.abs()) * step_weight / 2.0
                    + f64::from(w.abs()) * step_input / 2.0
                    + step_input * step_weight / 4.0
            })
            .sum();
        rounding + 1e-5 * (1.0 + exact.abs())
    }

    fn check(packed: &PackedInt16, weight: &[f32], bias: &[f32], input: &[f32], rows: usize) {
        let (outputs, inputs) = (packed.outputs, packed.inputs);
        let mut output = vec![f32::NAN; rows * outputs];
        packed.apply(input, rows, bias, &mut output);
        for row in 0..rows {
            let x = &input[row * inputs..][..inputs];
            for column in 0..outputs {
                let w = &weight[column * inputs..][..inputs];
                let exact: f64 = x
                    .iter()
                    .zip(w)
                    .map(|(x, w)| f64::from(*x) * f64::from(*w))
                    .sum::<f64>()
                    + f64::from(bias[column]);
                let got = f64::from(output[row * outputs + column]);
                assert!(
                    (got - exact).abs() <= bound(x, w, exact),
                    "rows {rows}: ({row}, {column}) is {got}, expected {exact} ± {}",
                    bound(x, w, exact)
                );
            }
        }
    }

    /// Every row count around the block and task sizes, so every kernel width and
    /// every partial tile is exercised, within the bound rounding allows.
    #[test]
    fn matches_the_exact_product_for_every_tile_shape() {
        assert!(
            supported(),
            "this test needs an x86-64 CPU with AVX2 and FMA"
        );
        let (outputs, inputs) = (48, 86);
        let weight = values(outputs * inputs, 1);
        let bias = values(outputs, 2);
        let packed = PackedInt16::pack(&weight, outputs, inputs).unwrap();
        for rows in [1, 2, 5, 6, 7, 12, 13, 95, 96, 97, 200] {
            let input = values(rows * inputs, rows as u64 + 3);
            check(&packed, &weight, &bias, &input, rows);
        }
    }

    /// Long rows of same-signed largest values: their 32-bit sums would overflow
    /// without the flushes into f32 (768 pairs × 2 × 4095² > 2³¹).
    #[test]
    fn long_rows_of_largest_values_do_not_overflow() {
        assert!(
            supported(),
            "this test needs an x86-64 CPU with AVX2 and FMA"
        );
        let (outputs, inputs, rows) = (16, 1536, 7);
        let mut weight = vec![1.0f32; outputs * inputs];
        // One output all negative, one of mixed magnitude.
        weight[..inputs].iter_mut().for_each(|w| *w = -1.0);
        for (index, w) in weight[inputs..2 * inputs].iter_mut().enumerate() {
            *w = if index % 3 == 0 { 1.0 } else { 0.25 };
        }
        let bias = vec![0.5f32; outputs];
        let input = vec![3.0f32; rows * inputs];
        let packed = PackedInt16::pack(&weight, outputs, inputs).unwrap();
        check(&packed, &weight, &bias, &input, rows);
        let mut output = vec![0f32; rows * outputs];
        packed.apply(&input, rows, &bias, &mut output);
        // Exact but for the f32 rounding of the scales' product.
        for (got, expected) in [
            (output[0], -3.0 * 1536.0 + 0.5),
            (output[2], 3.0 * 1536.0 + 0.5),
        ] {
            assert!(
                (got - expected).abs() <= 1e-6 * expected.abs(),
                "{got} != {expected}"
            );
        }
    }

    /// All-zero rows and outputs (scale 0) give exactly the bias.
    #[test]
    fn zero_rows_and_zero_weights_give_the_bias() {
        assert!(
            supported(),
            "this test needs an x86-64 CPU with AVX2 and FMA"
        );
        let (outputs, inputs, rows) = (32, 10, 3);
        let mut weight = values(outputs * inputs, 9);
        weight[..inputs].iter_mut().for_each(|w| *w = 0.0);
        let bias = values(outputs, 10);
        let mut input = values(rows * inputs, 11);
        input[inputs..2 * inputs].iter_mut().for_each(|x| *x = 0.0);
        let packed = PackedInt16::pack(&weight, outputs, inputs).unwrap();
        let mut output = vec![f32::NAN; rows * outputs];
        packed.apply(&input, rows, &bias, &mut output);
        for row in 0..rows {
            assert_eq!(output[row * outputs], bias[0], "row {row}, zero weights");
        }
        assert_eq!(&output[outputs..2 * outputs], &bias[..], "zero row");
    }

    #[test]
    fn refuses_shapes_the_kernel_cannot_run() {
        let error = PackedInt16::pack(&[0.0; 24 * 4], 24, 4).err().unwrap();
        assert!(error.to_string().contains("multiple of 16"), "{error}");
        let error = PackedInt16::pack(&[0.0; 16 * 3], 16, 3).err().unwrap();
        assert!(error.to_string().contains("inputs even"), "{error}");
        let error = PackedInt16::pack(&[0.0; 10], 16, 4).err().unwrap();
        assert_eq!(error.to_string(), "10 weights for a 16 × 4 layer");
    }
}
