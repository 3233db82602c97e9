//! Matrix products for the model, on borrowed slices with explicit strides so weights
//! are used where they lie (transposed by stride, not by copy).
//!
//! The `gemm` crate does the arithmetic (the same kernels candle uses, picked for the
//! CPU at run time). Its entry point takes raw pointers; [`product`] checks that every
//! element the strides can reach lies inside its slice before handing them over, which
//! is all the soundness the call needs (the destination is a `&mut`, so it aliases
//! neither input).

use gemm::Parallelism;

/// A read-only matrix view: element `(row, column)` is
/// `data[row * row_stride + column * column_stride]`.
#[derive(Clone, Copy)]
pub(super) struct View<'a> {
    pub data: &'a [f32],
    pub rows: usize,
    pub columns: usize,
    pub row_stride: usize,
    pub column_stride: usize,
}

impl<'a> View<'a> {
    /// A row-major `rows × columns` matrix.
    pub fn rows(data: &'a [f32], rows: usize, columns: usize) -> Self {
        Self {
            data,
            rows,
            columns,
            row_stride: columns,
            column_stride: 1,
        }
    }

    /// The transpose, by stride.
    pub fn transposed(self) -> Self {
        Self {
            rows: self.columns,
            columns: self.rows,
            row_stride: self.column_stride,
            column_stride: self.row_stride,
            ..self
        }
    }

    /// Whether every element lies inside a slice of `length`, with strides that fit
    /// `isize` (what the kernel takes); arithmetic that would overflow does not fit.
    fn fits(&self, length: usize) -> bool {
        if self.rows == 0 || self.columns == 0 {
            return true;
        }
        let strides_fit =
            isize::try_from(self.row_stride).is_ok() && isize::try_from(self.column_stride).is_ok();
        let last = (self.rows - 1)
            .checked_mul(self.row_stride)
            .zip((self.columns - 1).checked_mul(self.column_stride))
            .and_then(|(rows, columns)| rows.checked_add(columns));
        strides_fit && last.is_some_and(|last| last < length)
    }
}

/// `output (rows × columns, row stride output_stride) = left × right`, overwriting.
/// `parallel` spreads one product over the rayon pool (worth it for the dense layers,
/// not for one attention head).
pub(super) fn product(
    output: &mut [f32],
    output_stride: usize,
    left: View<'_>,
    right: View<'_>,
    parallel: bool,
) {
    let (rows, inner, columns) = (left.rows, left.columns, right.columns);
    assert_eq!(inner, right.rows, "inner dimensions differ");
    assert!(left.fits(left.data.len()), "left matrix exceeds its slice");
    assert!(
        right.fits(right.data.len()),
        "right matrix exceeds its slice"
    );
    let destination = View {
        data: output,
        rows,
        columns,
        row_stride: output_stride,
        column_stride: 1,
    };
    assert!(destination.fits(output.len()), "output exceeds its slice");
    if rows == 0 || columns == 0 {
        return;
    }
    let parallelism = match rayon::current_num_threads() {
        threads if parallel && threads > 1 => Parallelism::Rayon(threads),
        _ => Parallelism::None,
    };
    call_gemm(output, output_stride, left, right, parallelism);
}

#[allow(unsafe_code)]
fn call_gemm(
    output: &mut [f32],
    output_stride: usize,
    left: View<'_>,
    right: View<'_>,
    parallelism: Parallelism,
) {
    // `product` checked that every stride fits `isize`.
    let stride = |value: usize| value as isize;
    // SAFETY: `product` checked that every index the shapes and strides reach is inside
    // its slice; `output` is exclusively borrowed, so it overlaps neither input; with
    // `read_dst` false the output's previous contents are not read.
    unsafe {
        gemm::gemm(
            left.rows,
            right.columns,
            left.columns,
            output.as_mut_ptr(),
            1,
            stride(output_stride),
            false,
            left.data.as_ptr(),
            stride(left.column_stride),
            stride(left.row_stride),
            right.data.as_ptr(),
            stride(right.column_stride),
            stride(right.row_stride),
            0.0,
            1.0,
            false,
            false,
            false,
            parallelism,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive(left: View<'_>, right: View<'_>) -> Vec<f32> {
        let mut result = vec![0.0; left.rows * right.columns];
        for row in 0..left.rows {
            for column in 0..right.columns {
                result[row * right.columns + column] = (0..left.columns)
                    .map(|inner| {
                        left.data[row * left.row_stride + inner * left.column_stride]
                            * right.data[inner * right.row_stride + column * right.column_stride]
                    })
                    .sum();
            }
        }
        result
    }

    #[test]
    fn strided_products_match_the_definition() {
        let left: Vec<f32> = (0..35).map(|value| value as f32 * 0.5 - 3.0).collect();
        let right: Vec<f32> = (0..42).map(|value| (value % 7) as f32 - 2.5).collect();
        // 5×7 by the transpose of a 6×7 (a dense layer's weight layout).
        let left_view = View::rows(&left, 5, 7);
        let right_view = View::rows(&right, 6, 7).transposed();
        for parallel in [false, true] {
            let mut output = vec![f32::NAN; 30];
            product(&mut output, 6, left_view, right_view, parallel);
            assert_eq!(output, naive(left_view, right_view));
        }
        // Into every other column of a wider output (an attention head's slot).
        let mut wide = vec![7.0; 5 * 12];
        product(&mut wide[3..], 12, left_view, right_view, false);
        let expected = naive(left_view, right_view);
        for row in 0..5 {
            assert_eq!(
                &wide[row * 12 + 3..row * 12 + 9],
                &expected[row * 6..row * 6 + 6]
            );
            assert_eq!(wide[row * 12], 7.0, "outside the slot is untouched");
        }
    }

    #[test]
    #[should_panic(expected = "right matrix exceeds its slice")]
    fn a_view_past_its_slice_is_refused() {
        let data = vec![1.0; 12];
        let mut output = vec![0.0; 9];
        let short = View::rows(&data[..11], 4, 3);
        product(&mut output, 3, View::rows(&data, 3, 4), short, false);
    }

    #[test]
    #[should_panic(expected = "left matrix exceeds its slice")]
    fn strides_that_overflow_are_refused() {
        let data = vec![1.0; 4];
        let mut output = vec![0.0; 4];
        let wrapping = View {
            data: &data,
            rows: 2,
            columns: 2,
            row_stride: usize::MAX / 2 + 2,
            column_stride: usize::MAX / 2 + 2,
        };
        product(&mut output, 2, wrapping, View::rows(&data, 2, 2), false);
    }

    #[test]
    #[should_panic(expected = "left matrix exceeds its slice")]
    fn a_stride_past_isize_is_refused_even_where_it_is_never_used() {
        let data = vec![1.0; 4];
        let mut output = vec![0.0; 4];
        let one_row = View {
            data: &data,
            rows: 1,
            columns: 2,
            row_stride: usize::MAX,
            column_stride: 1,
        };
        product(&mut output, 2, one_row, View::rows(&data, 2, 2), false);
    }

    #[test]
    #[should_panic(expected = "output exceeds its slice")]
    fn an_output_too_small_is_refused() {
        let data = vec![1.0; 12];
        let mut output = vec![0.0; 8];
        product(
            &mut output,
            3,
            View::rows(&data, 3, 4),
            View::rows(&data, 4, 3),
            false,
        );
    }
}
