//! Dense layers in bfloat16: the model's fast path on CPUs with AVX-512 BF16.
//!
//! bfloat16 keeps f32's exponent and 8 bits of its mantissa, so rounding a weight or an
//! activation to it changes the value by at most 2⁻⁹ of itself, whatever its magnitude
//! (an outlier costs its neighbours nothing, unlike an 8-bit integer scale). The CPU's
//! `vdpbf16ps` multiplies 32 bf16 pairs per instruction into 16 f32 sums, twice the
//! work of an f32 fused multiply-add; the sums stay f32.
//!
//! Weights are rounded and packed once when the model loads: groups of [`GROUP`]
//! output rows, laid out so one 64-byte load gives 16 outputs × 2 consecutive inputs,
//! which is the instruction's operand shape. Activations are rounded per call.

use rayon::prelude::*;

/// Output rows per packed group: four 16-lane vectors, the kernel's width.
const GROUP: usize = 64;
/// Rows of activations one kernel call keeps in registers (6 × 4 accumulators).
const BLOCK: usize = 6;
/// Rows one parallel task computes: its activations stay in L2 while every weight
/// group is applied to them.
const TASK_ROWS: usize = 96;

/// Whether this CPU runs the bf16 kernel.
pub(super) fn supported() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bf16")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// One input pair `(x[2k], x[2k+1])` in bf16, the lower-indexed value in the low half
/// (the instruction's element order).
fn pair(low: f32, high: f32) -> u32 {
    u32::from(half::bf16::from_f32(low).to_bits())
        | (u32::from(half::bf16::from_f32(high).to_bits()) << 16)
}

/// A dense layer's weight (`outputs × inputs`, as stored), rounded to bf16 and packed.
pub(super) struct PackedBf16 {
    /// `[group][input pair][64 outputs]`.
    pairs: Vec<u32>,
    inputs: usize,
    outputs: usize,
}

impl PackedBf16 {
    /// Packs `weight`; the kernel needs `outputs` a multiple of 64 and `inputs` even.
    pub fn pack(weight: &[f32], outputs: usize, inputs: usize) -> Result<Self, String> {
        if !outputs.is_multiple_of(GROUP) || !inputs.is_multiple_of(2) || inputs == 0 {
            return Err(format!(
                "a {outputs} × {inputs} layer cannot run in bf16 (outputs must be a multiple of {GROUP}, inputs even)"
            ));
        }
        if weight.len() != outputs * inputs {
            return Err(format!(
                "{} weights for a {outputs} × {inputs} layer",
                weight.len()
            ));
        }
        let half_inputs = inputs / 2;
        let mut pairs = Vec::with_capacity(outputs * half_inputs);
        for group in 0..outputs / GROUP {
            for input_pair in 0..half_inputs {
                for lane in 0..GROUP {
                    let row = &weight[(group * GROUP + lane) * inputs..][..inputs];
                    pairs.push(pair(row[2 * input_pair], row[2 * input_pair + 1]));
                }
            }
        }
        Ok(Self {
            pairs,
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
        activations
            .par_chunks_mut(half_inputs)
            .zip(input.par_chunks(self.inputs))
            .for_each(|(packed, row)| {
                for (slot, values) in packed.iter_mut().zip(row.chunks_exact(2)) {
                    *slot = pair(values[0], values[1]);
                }
            });
        output
            .par_chunks_mut(TASK_ROWS * self.outputs)
            .zip(activations.par_chunks(TASK_ROWS * half_inputs))
            .for_each(|(output, activations)| self.task(activations, bias, output));
    }

    /// Every weight group over one task's rows, [`BLOCK`] rows per kernel call.
    fn task(&self, activations: &[u32], bias: &[f32], output: &mut [f32]) {
        let half_inputs = self.inputs / 2;
        let group_size = GROUP * half_inputs;
        for (group, weights) in self.pairs.chunks_exact(group_size).enumerate() {
            let bias = &bias[group * GROUP..][..GROUP];
            for (block, rows) in activations.chunks(BLOCK * half_inputs).enumerate() {
                let count = rows.len() / half_inputs;
                let start = block * BLOCK * self.outputs + group * GROUP;
                let end = start + (count - 1) * self.outputs + GROUP;
                let tile = Tile {
                    activations: rows,
                    weights,
                    bias,
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

/// One kernel call's operands: `ROWS` rows of activation pairs, one weight group, the
/// group's bias, and the output tile (row `r`, lane `j` at `r * output_stride + j`).
struct Tile<'a> {
    activations: &'a [u32],
    weights: &'a [u32],
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
        "the bf16 kernel ran on a CPU without AVX-512 BF16"
    );
    assert_eq!(tile.activations.len(), ROWS * tile.half_inputs);
    assert_eq!(tile.weights.len(), GROUP * tile.half_inputs);
    assert_eq!(tile.bias.len(), GROUP);
    assert!(tile.output_stride >= GROUP);
    assert_eq!(
        tile.output.len(),
        (ROWS - 1) * tile.output_stride + GROUP,
        "output tile"
    );
    #[cfg(target_arch = "x86_64")]
    avx512::kernel::<ROWS>(tile);
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::{
        __m512, __m512bh, __m512i, _mm512_add_ps, _mm512_dpbf16_ps, _mm512_loadu_ps,
        _mm512_loadu_si512, _mm512_set1_epi32, _mm512_setzero_ps, _mm512_storeu_ps,
    };

    use super::{GROUP, Tile};

    /// The checked entry: [`super::kernel`] asserted the CPU features and extents.
    #[allow(unsafe_code)]
    pub(super) fn kernel<const ROWS: usize>(tile: Tile<'_>) {
        // SAFETY: the caller checked that the CPU has AVX-512F and AVX-512 BF16 (the
        // target features) and that every slice holds exactly what `block` reads and
        // writes: ROWS × half_inputs activation pairs, 64 × half_inputs weight pairs,
        // 64 biases, and output rows 0..ROWS of 64 lanes each at `output_stride`.
        unsafe { block::<ROWS>(tile) }
    }

    #[allow(unsafe_code)]
    #[target_feature(enable = "avx512f,avx512bf16")]
    unsafe fn block<const ROWS: usize>(tile: Tile<'_>) {
        let as_bf16 = |vector: __m512i| -> __m512bh {
            // SAFETY: both are 512 bits of plain data; bf16 pairs are reinterpreted,
            // not converted.
            unsafe { std::mem::transmute::<__m512i, __m512bh>(vector) }
        };
        let mut sums = [[_mm512_setzero_ps(); 4]; ROWS];
        let weights = tile.weights.as_ptr();
        // One slice per row, each exactly `half_inputs` long, so the loop's reads need
        // no bounds checks.
        let rows: [&[u32]; ROWS] = std::array::from_fn(|row| {
            &tile.activations[row * tile.half_inputs..][..tile.half_inputs]
        });
        for input_pair in 0..tile.half_inputs {
            // SAFETY: `input_pair < half_inputs` and the weight slice holds
            // 64 × half_inputs pairs, so the four 16-pair loads stay inside it.
            let columns: [__m512bh; 4] = std::array::from_fn(|vector| {
                as_bf16(unsafe {
                    _mm512_loadu_si512(weights.add(input_pair * GROUP + vector * 16).cast())
                })
            });
            for (row, row_sums) in rows.iter().zip(sums.iter_mut()) {
                let value = row[input_pair];
                let broadcast = as_bf16(_mm512_set1_epi32(value as i32));
                for (sum, column) in row_sums.iter_mut().zip(columns) {
                    *sum = _mm512_dpbf16_ps(*sum, broadcast, column);
                }
            }
        }
        let output = tile.output.as_mut_ptr();
        for (row, row_sums) in sums.iter().enumerate() {
            for (vector, sum) in row_sums.iter().enumerate() {
                // SAFETY: bias holds 64 values; output row `row` starts at
                // row × output_stride and its 64 lanes are inside the checked tile.
                unsafe {
                    let bias: __m512 = _mm512_loadu_ps(tile.bias.as_ptr().add(vector * 16));
                    _mm512_storeu_ps(
                        output.add(row * tile.output_stride + vector * 16),
                        _mm512_add_ps(*sum, bias),
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

    fn rounded(value: f32) -> f64 {
        f64::from(half::bf16::from_f32(value).to_f32())
    }

    /// The product equals the exact product of the bf16-rounded operands (to f32
    /// summation error) for every row count around the block and task sizes, so every
    /// kernel width and every partial tile is exercised.
    #[test]
    fn matches_the_rounded_product_for_every_tile_shape() {
        if !supported() {
            panic!("this test needs a CPU with AVX-512 BF16 (the machine CI runs on has it)");
        }
        let (outputs, inputs) = (128, 86);
        let weight = values(outputs * inputs, 1);
        let bias = values(outputs, 2);
        let packed = PackedBf16::pack(&weight, outputs, inputs).unwrap();
        for rows in [1, 2, 5, 6, 7, 12, 13, 95, 96, 97, 200] {
            let input = values(rows * inputs, rows as u64 + 3);
            let mut output = vec![f32::NAN; rows * outputs];
            packed.apply(&input, rows, &bias, &mut output);
            for row in 0..rows {
                for column in 0..outputs {
                    let exact: f64 = (0..inputs)
                        .map(|k| {
                            rounded(input[row * inputs + k]) * rounded(weight[column * inputs + k])
                        })
                        .sum::<f64>()
                        + f64::from(bias[column]);
                    let got = f64::from(output[row * outputs + column]);
                    assert!(
                        (got - exact).abs() <= 1e-4 * (1.0 + exact.abs()),
                        "rows {rows}: ({row}, {column}) is {got}, expected {exact}"
                    );
                }
            }
        }
    }

    #[test]
    fn refuses_shapes_the_kernel_cannot_run() {
        let weight = vec![0.0; 60 * 4];
        let error = PackedBf16::pack(&weight, 60, 4).err().unwrap();
        assert!(error.contains("60 × 4"), "{error}");
        let error = PackedBf16::pack(&vec![0.0; 64 * 3], 64, 3).err().unwrap();
        assert!(error.contains("inputs even"), "{error}");
        let error = PackedBf16::pack(&weight, 64, 4).err().unwrap();
        assert!(error.contains("240 weights"), "{error}");
    }
}
