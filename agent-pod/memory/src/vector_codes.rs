//! Compact per-file vector codes for the search's vector scan. Pure: encodes,
//! decodes and scores bytes, knows nothing about SQLite.
//!
//! Each indexed file has one `file_vectors` row holding its chunks' ids and one code
//! per chunk: the chunk's vector normalised to length 1 and quantised to `i8` with
//! its own scale (`[scale: f32 LE][dimensions × i8]`). A query is quantised the same
//! way; `scale_q × scale_c × Σ q_i·c_i` then approximates the cosine similarity to
//! within about 1e-3 for 384 dimensions, which is far below the gaps between ranks,
//! so pre-selecting a few times the wanted count by this score and rescoring those
//! exactly (from the float vectors in `chunks_vec`) gives the exact top list in
//! practice (the benchmark measures it against sqlite-vec's exact KNN).
//!
//! Why not vec0's own KNN: it is a brute-force scan whose top-k selection costs
//! O(rows × k) and whose float distance loop is not vectorised; at 100k chunks of 384
//! dimensions its exact cosine KNN alone takes ~57 ms on this project's 2-core
//! machine, and its sign-bit KNN needs a pre-selection so wide (and slow) for decent
//! recall that it is no better. Scanning these codes reads 4× fewer bytes than float
//! vectors, keeps the scope a plain `WHERE path …` on the rows it reads, and keeps
//! the top list in a heap (O(rows × log k)).

use std::{cmp::Reverse, collections::BinaryHeap};

/// Bytes of one chunk's code for vectors of `dimensions`.
pub fn code_length(dimensions: usize) -> usize {
    4 + dimensions
}

/// A query (or chunk) vector quantised for scanning.
#[derive(Clone, Debug, PartialEq)]
pub struct QueryCode {
    scale: f32,
    components: Vec<i8>,
}

impl QueryCode {
    /// Quantises `vector`; a zero vector gets scale 0 and so scores 0 against all.
    pub fn new(vector: &[f32]) -> Self {
        let (scale, components) = quantise(vector);
        Self { scale, components }
    }
}

/// Normalises `vector` and quantises it: the scale and the `i8` components, such that
/// `scale × component_i ≈ vector_i / |vector|`.
fn quantise(vector: &[f32]) -> (f32, Vec<i8>) {
    let norm = vector.iter().map(|value| value * value).sum::<f32>().sqrt();
    let largest = vector
        .iter()
        .fold(0.0_f32, |largest, value| largest.max(value.abs()));
    if norm == 0.0 || largest == 0.0 || !norm.is_finite() {
        return (0.0, vec![0; vector.len()]);
    }
    let to_code = 127.0 / largest;
    let components = vector
        .iter()
        .map(|value| (value * to_code).round().clamp(-127.0, 127.0) as i8)
        .collect();
    (largest / 127.0 / norm, components)
}

/// The `chunk_ids` and `codes` blobs of one file's row, chunks in the given order.
pub fn encode_file(chunks: &[(i64, &[f32])]) -> (Vec<u8>, Vec<u8>) {
    let mut ids = Vec::with_capacity(chunks.len() * 8);
    let mut codes = Vec::with_capacity(chunks.iter().map(|(_, v)| code_length(v.len())).sum());
    for (id, vector) in chunks {
        ids.extend_from_slice(&id.to_le_bytes());
        let (scale, components) = quantise(vector);
        codes.extend_from_slice(&scale.to_le_bytes());
        codes.extend(components.iter().map(|component| *component as u8));
    }
    (ids, codes)
}

/// Why a stored row could not be read as codes (a damaged or foreign database).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "file_vectors row has {id_bytes} id bytes and {code_bytes} code bytes, not 8 and {code_length} per chunk"
)]
pub struct MalformedCodes {
    id_bytes: usize,
    code_bytes: usize,
    code_length: usize,
}

/// Number of chunks in a row, checking that both blobs agree with each other and
/// with the dimensions.
pub fn chunk_count(ids: &[u8], codes: &[u8], dimensions: usize) -> Result<usize, MalformedCodes> {
    let code_length = code_length(dimensions);
    let count = ids.len() / 8;
    if !ids.len().is_multiple_of(8) || codes.len() != count * code_length {
        return Err(MalformedCodes {
            id_bytes: ids.len(),
            code_bytes: codes.len(),
            code_length,
        });
    }
    Ok(count)
}

/// The best `capacity` (chunk id, approximate similarity) pairs seen so far.
pub struct TopScores {
    capacity: usize,
    // A min-heap on score: the root is the weakest kept entry, replaced when beaten.
    heap: BinaryHeap<Reverse<Scored>>,
}

#[derive(Clone, Copy, Debug, PartialEq)]
struct Scored {
    score: f32,
    id: i64,
}

impl Eq for Scored {}

impl Ord for Scored {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        // Higher score first; on equal scores the lower id wins, so results are stable.
        self.score
            .total_cmp(&other.score)
            .then_with(|| other.id.cmp(&self.id))
    }
}

impl PartialOrd for Scored {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl TopScores {
    /// Keeps at most `capacity` entries.
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity,
            heap: BinaryHeap::with_capacity(capacity + 1),
        }
    }

    fn offer(&mut self, candidate: Scored) {
        if self.heap.len() < self.capacity {
            self.heap.push(Reverse(candidate));
        } else if let Some(mut weakest) = self.heap.peek_mut()
            && candidate > weakest.0
        {
            *weakest = Reverse(candidate);
        }
    }

    /// Scores every chunk of one row against `query` and keeps the best.
    pub fn scan_file(
        &mut self,
        query: &QueryCode,
        ids: &[u8],
        codes: &[u8],
    ) -> Result<(), MalformedCodes> {
        let dimensions = query.components.len();
        chunk_count(ids, codes, dimensions)?;
        if self.capacity == 0 {
            return Ok(());
        }
        for (id, code) in ids
            .chunks_exact(8)
            .zip(codes.chunks_exact(code_length(dimensions)))
        {
            let (scale, components) = code.split_at(4);
            let scale = f32::from_le_bytes([scale[0], scale[1], scale[2], scale[3]]);
            let score = scale * query.scale * dot(&query.components, components) as f32;
            let id = i64::from_le_bytes([id[0], id[1], id[2], id[3], id[4], id[5], id[6], id[7]]);
            self.offer(Scored { score, id });
        }
        Ok(())
    }

    /// Offers every entry `other` kept (the best of two shares of one scan).
    pub fn merge(&mut self, other: TopScores) {
        for entry in other.heap {
            self.offer(entry.0);
        }
    }

    /// Keeps `(id, score)` if it is among the best `capacity` offered so far.
    pub fn offer_score(&mut self, id: i64, score: f32) {
        self.offer(Scored { score, id });
    }

    /// The weakest kept score once `capacity` entries are kept (what a new entry must
    /// beat), else `None`.
    pub fn weakest_when_full(&self) -> Option<f32> {
        (self.capacity > 0 && self.heap.len() == self.capacity)
            .then(|| self.heap.peek().map(|weakest| weakest.0.score))
            .flatten()
    }

    /// The kept `(chunk id, score)` pairs, best first (equal scores: lower id first).
    pub fn into_scored(self) -> Vec<(i64, f32)> {
        let mut kept: Vec<Scored> = self.heap.into_iter().map(|entry| entry.0).collect();
        kept.sort_by(|left, right| right.cmp(left));
        kept.into_iter()
            .map(|scored| (scored.id, scored.score))
            .collect()
    }
}

/// Σ query_i × code_i, the code's bytes read as `i8`: with AVX2 when the CPU has it,
/// else a loop compiled for the baseline. `query` holds components of a [`QueryCode`],
/// which never include -128 (the AVX2 kernel relies on it).
fn dot(query: &[i8], code: &[u8]) -> i32 {
    debug_assert!(
        !query.contains(&i8::MIN),
        "query components are within ±127"
    );
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        return dot_avx2(query, code);
    }
    dot_lanes(query, code)
}

/// The AVX2 dot product, 32 components per step in four instructions: `|code|` as
/// unsigned bytes times `query × sign(code)` as signed bytes (`vpmaddubsw`, adjacent
/// pairs summed into i16), then the pairs widened and summed into i32 (`vpmaddwd` by
/// ones). No step can saturate: with |query| ≤ 127 and |code| ≤ 128 a pair is at most
/// 2 × 127 × 128 = 32,512 < 32,767, and `query × sign(code)` stays within ±127. A
/// compiler left to widen each byte to i32 itself (as `dot_lanes` is) does about a
/// fifth of the work per instruction.
#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
fn dot_avx2(query: &[i8], code: &[u8]) -> i32 {
    use std::arch::x86_64::{
        _mm_add_epi32, _mm_cvtsi128_si32, _mm_shuffle_epi32, _mm256_abs_epi8, _mm256_add_epi32,
        _mm256_castsi256_si128, _mm256_extracti128_si256, _mm256_loadu_si256, _mm256_madd_epi16,
        _mm256_maddubs_epi16, _mm256_set1_epi16, _mm256_setzero_si256, _mm256_sign_epi8,
    };

    const STEP: usize = 32;

    #[target_feature(enable = "avx2")]
    fn steps(query: &[i8], code: &[u8]) -> i32 {
        let length = query.len().min(code.len());
        let count = length / STEP;
        let ones = _mm256_set1_epi16(1);
        let mut sums = _mm256_setzero_si256();
        for step in 0..count {
            // SAFETY: (step + 1) × STEP ≤ the shorter slice's length, so both 32-byte
            // unaligned loads read inside their slices.
            let (query_bytes, code_bytes) = unsafe {
                (
                    _mm256_loadu_si256(query.as_ptr().add(step * STEP).cast()),
                    _mm256_loadu_si256(code.as_ptr().add(step * STEP).cast()),
                )
            };
            let magnitudes = _mm256_abs_epi8(code_bytes);
            let signed_query = _mm256_sign_epi8(query_bytes, code_bytes);
            let pairs = _mm256_maddubs_epi16(magnitudes, signed_query);
            sums = _mm256_add_epi32(sums, _mm256_madd_epi16(pairs, ones));
        }
        let half = _mm_add_epi32(
            _mm256_castsi256_si128(sums),
            _mm256_extracti128_si256::<1>(sums),
        );
        let quarter = _mm_add_epi32(half, _mm_shuffle_epi32::<0b01_00_11_10>(half));
        let total = _mm_add_epi32(quarter, _mm_shuffle_epi32::<0b10_11_00_01>(quarter));
        let done = count * STEP;
        _mm_cvtsi128_si32(total) + dot_lanes(&query[done..length], &code[done..length])
    }
    // SAFETY: only called after `is_x86_feature_detected!("avx2")`, the one target
    // feature `steps` is compiled for.
    unsafe { steps(query, code) }
}

/// The portable dot product (CPUs without AVX2, and the AVX2 kernel's tail): blocks
/// of independent lanes, so the compiler vectorises it for the baseline.
#[inline(always)]
fn dot_lanes(query: &[i8], code: &[u8]) -> i32 {
    const LANES: usize = 32;
    let mut sums = [0_i32; LANES];
    let mut query_blocks = query.chunks_exact(LANES);
    let mut code_blocks = code.chunks_exact(LANES);
    for (query_block, code_block) in (&mut query_blocks).zip(&mut code_blocks) {
        for lane in 0..LANES {
            sums[lane] += i32::from(query_block[lane]) * i32::from(code_block[lane] as i8);
        }
    }
    let tail: i32 = query_blocks
        .remainder()
        .iter()
        .zip(code_blocks.remainder())
        .map(|(left, right)| i32::from(*left) * i32::from(*right as i8))
        .sum();
    sums.iter().sum::<i32>() + tail
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cosine(left: &[f32], right: &[f32]) -> f32 {
        let dot: f32 = left.iter().zip(right).map(|(a, b)| a * b).sum();
        let norm = |v: &[f32]| v.iter().map(|x| x * x).sum::<f32>().sqrt();
        dot / (norm(left) * norm(right))
    }

    fn pseudo_random(seed: u64, dimensions: usize) -> Vec<f32> {
        let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..dimensions)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                (state >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
            })
            .collect()
    }

    #[test]
    fn quantised_scores_approximate_cosine_similarity() {
        let query = pseudo_random(1, 384);
        let code = QueryCode::new(&query);
        for seed in 2..50 {
            let mut vector = pseudo_random(seed, 384);
            // Mix in the query so similarities spread over a range, not just ~0.
            let mix = (seed % 10) as f32 / 10.0;
            for (value, q) in vector.iter_mut().zip(&query) {
                *value = *value * (1.0 - mix) + q * mix * 3.0;
            }
            let (ids, codes) = encode_file(&[(seed as i64, &vector)]);
            let mut top = TopScores::new(1);
            top.scan_file(&code, &ids, &codes).expect("scan");
            let exact = cosine(&query, &vector);
            let (scale, components) = codes.split_at(4);
            let scale = f32::from_le_bytes(scale.try_into().expect("4 bytes"));
            let approximate = scale * code.scale * dot(&code.components, components) as f32;
            assert!(
                (approximate - exact).abs() < 3e-3,
                "seed {seed}: {approximate} vs {exact}"
            );
        }
    }

    fn ids_of(top: TopScores) -> Vec<i64> {
        top.into_scored().into_iter().map(|(id, _)| id).collect()
    }

    #[test]
    fn the_heap_keeps_the_best_scores_in_order() {
        let query = [1.0_f32, 0.0, 0.0, 0.0];
        let vectors: Vec<(i64, Vec<f32>)> = (0..20)
            .map(|index| {
                let angle = index as f32 * 0.15;
                (100 + index, vec![angle.cos(), angle.sin(), 0.0, 0.0])
            })
            .collect();
        let borrowed: Vec<(i64, &[f32])> =
            vectors.iter().map(|(id, v)| (*id, v.as_slice())).collect();
        // Split over two "files", the better half in the second, to cross rows.
        let (first_ids, first_codes) = encode_file(&borrowed[10..]);
        let (second_ids, second_codes) = encode_file(&borrowed[..10]);
        let mut top = TopScores::new(3);
        let code = QueryCode::new(&query);
        top.scan_file(&code, &first_ids, &first_codes)
            .expect("scan");
        top.scan_file(&code, &second_ids, &second_codes)
            .expect("scan");
        assert_eq!(ids_of(top), [100, 101, 102]);
    }

    #[test]
    fn the_weakest_kept_score_is_known_once_full() {
        let mut top = TopScores::new(2);
        assert_eq!(top.weakest_when_full(), None);
        top.offer_score(1, 0.5);
        assert_eq!(top.weakest_when_full(), None);
        top.offer_score(2, 0.9);
        assert_eq!(top.weakest_when_full(), Some(0.5));
        top.offer_score(3, 0.7);
        assert_eq!(top.weakest_when_full(), Some(0.7));
        top.offer_score(4, 0.1);
        // Equal scores: the lower id is the better one.
        top.offer_score(0, 0.7);
        assert_eq!(top.into_scored(), [(2, 0.9), (0, 0.7)]);
        assert_eq!(TopScores::new(0).weakest_when_full(), None);
    }

    #[test]
    fn zero_vectors_and_malformed_rows() {
        let (ids, codes) = encode_file(&[(7, &[0.0, 0.0][..])]);
        assert_eq!(codes.len(), code_length(2));
        let mut top = TopScores::new(1);
        top.scan_file(&QueryCode::new(&[1.0, 0.0]), &ids, &codes)
            .expect("scan");
        assert_eq!(ids_of(top), [7]);
        let mut top = TopScores::new(1);
        let error = top
            .scan_file(&QueryCode::new(&[1.0, 0.0, 0.0]), &ids, &codes)
            .expect_err("3 dimensions against a 2-dimension row");
        assert!(error.to_string().contains("code bytes"), "{error}");
        assert!(chunk_count(&ids[..7], &codes, 2).is_err());
        assert_eq!(chunk_count(&ids, &codes, 2), Ok(1));
    }

    #[test]
    fn dot_matches_a_plain_sum_across_block_boundaries() {
        for length in [0_i32, 1, 31, 32, 33, 384, 385] {
            let query: Vec<i8> = (0..length).map(|i| (i * 37 % 255 - 127) as i8).collect();
            let code: Vec<u8> = (0..length).map(|i: i32| (i * 91 % 255) as u8).collect();
            let plain: i32 = query
                .iter()
                .zip(&code)
                .map(|(a, b)| i32::from(*a) * i32::from(*b as i8))
                .sum();
            assert_eq!(dot(&query, &code), plain, "length {length}");
            assert_eq!(dot_lanes(&query, &code), plain, "portable, length {length}");
        }
        // The extremes: -128 codes (byte 0x80) against ±127 queries.
        let query = vec![-127_i8; 384];
        let code = vec![0x80_u8; 384];
        assert_eq!(dot(&query, &code), 384 * 127 * 128);
        assert_eq!(dot(&vec![127_i8; 384], &code), -384 * 127 * 128);
    }

    #[test]
    #[cfg(target_arch = "x86_64")]
    fn the_avx2_kernel_is_exact_on_every_byte_value_and_length() {
        assert!(
            std::arch::is_x86_feature_detected!("avx2"),
            "this test checks the AVX2 kernel, which needs a CPU with AVX2"
        );
        let plain = |query: &[i8], code: &[u8]| -> i32 {
            query
                .iter()
                .zip(code)
                .map(|(a, b)| i32::from(*a) * i32::from(*b as i8))
                .sum()
        };
        let mut state = 0x9E37_79B9_7F4A_7C15_u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for length in (0..=100).chain([383, 384, 385, 1024]) {
            for _ in 0..8 {
                // Queries over all of ±127; codes over every byte, 0x80 included.
                let query: Vec<i8> = (0..length)
                    .map(|_| ((next() % 255) as i32 - 127) as i8)
                    .collect();
                let code: Vec<u8> = (0..length).map(|_| next() as u8).collect();
                assert_eq!(
                    dot_avx2(&query, &code),
                    plain(&query, &code),
                    "length {length}"
                );
            }
            // The largest pair sums, both signs: each vpmaddubsw pair is ±2 × 127 × 128.
            for (query_value, code_byte) in
                [(127_i8, 0x80_u8), (-127, 0x80), (127, 0x7F), (-127, 0x81)]
            {
                let query = vec![query_value; length];
                let code = vec![code_byte; length];
                assert_eq!(
                    dot_avx2(&query, &code),
                    plain(&query, &code),
                    "length {length}"
                );
            }
        }
        // Slices of different lengths: the shorter decides, as with `zip`.
        let query = vec![3_i8; 70];
        let code = vec![2_u8; 40];
        assert_eq!(dot_avx2(&query, &code), 240);
        assert_eq!(dot_avx2(&query[..33], &code), 198);
    }
}
