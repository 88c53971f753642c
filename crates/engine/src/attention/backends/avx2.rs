//! `online_softmax::fold_chunk` written in AVX2 intrinsics for a run of query heads at
//! once: the same float operations in the same order per head and lane (so the same bits),
//! but the chunk's scores and weights stay in registers, each key and value vector is
//! loaded once for up to three heads, and the max is a vector tree (the max of numbers does
//! not depend on the order; a NaN score makes the row NaN either way).

use crate::attention::exp2::{exp2, EXP2_C};
use crate::attention::lanes::Lanes;
use crate::attention::CHUNK;
use std::arch::x86_64::*;

const _: () = assert!(CHUNK == 16, "two 8-lane registers per chunk");

/// One chunk's online-softmax update of one (row, head) from its scores `s`: masks the
/// lanes outside `lanes`, raises the running max, rescales the sum; returns the
/// accumulator's rescale factor and the chunk's weights (zero outside `lanes`).
#[inline]
#[target_feature(enable = "avx2,fma")]
fn softmax_step(s: [__m256; 2], lanes: Lanes, max: &mut f32, sum: &mut f32) -> (f32, [f32; CHUNK]) {
    // Lanes outside `lanes` out of the max, and weight zero.
    let lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    let live: [__m256; 2] = std::array::from_fn(|h| {
        let end = _mm256_set1_epi32(lanes.end as i32 - 8 * h as i32);
        let first = _mm256_set1_epi32(lanes.first as i32 - 8 * h as i32 - 1);
        _mm256_castsi256_ps(_mm256_and_si256(
            _mm256_cmpgt_epi32(end, lane),
            _mm256_cmpgt_epi32(lane, first),
        ))
    });
    let ninf = _mm256_set1_ps(f32::NEG_INFINITY);
    let m = _mm256_max_ps(
        _mm256_blendv_ps(ninf, s[0], live[0]),
        _mm256_blendv_ps(ninf, s[1], live[1]),
    );
    let m = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps::<1>(m));
    let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    let m = _mm_max_ss(m, _mm_shuffle_ps::<1>(m, m));
    let new_max = max.max(_mm_cvtss_f32(m));
    let alpha = exp2(*max - new_max);
    let nm = _mm256_set1_ps(new_max);
    let p: [__m256; 2] =
        std::array::from_fn(|h| _mm256_and_ps(exp2_v(_mm256_sub_ps(s[h], nm)), live[h]));
    // The weights' sum in `lane_sum`'s tree: halves, quarters, then pairs.
    let h = _mm256_add_ps(p[0], p[1]);
    let qs = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps::<1>(h));
    let r = _mm_add_ps(qs, _mm_movehl_ps(qs, qs));
    let total = _mm_cvtss_f32(_mm_add_ss(r, _mm_shuffle_ps::<1>(r, r)));
    *sum = sum.mul_add(alpha, total);
    *max = new_max;
    let mut w = [0.0f32; CHUNK];
    // SAFETY: `w` holds two 8-lane stores.
    unsafe {
        _mm256_storeu_ps(w.as_mut_ptr(), p[0]);
        _mm256_storeu_ps(w.as_mut_ptr().add(8), p[1]);
    }
    (alpha, w)
}

/// Where one chunk of one KV head sits in an f16 cache: key element `e` of the chunk's
/// `CHUNK` positions at `keys[first_key + e * key_stride..][..CHUNK]`, position `j`'s
/// values at `values[first_value + j * value_stride..][..head_dim]`.
pub(in crate::attention) struct F16Chunk<'a> {
    pub keys: &'a [u16],
    pub first_key: usize,
    pub key_stride: usize,
    pub values: &'a [u16],
    pub first_value: usize,
    pub value_stride: usize,
    /// The next chunk's first key and value elements (same head, same slabs), which
    /// the fold asks for line by line as it goes ([`prefetch_ahead`]).
    pub next: Option<(usize, usize)>,
}

/// A prefill tile's widened chunk: keys `[d, CHUNK]` (transposed), values `[CHUNK, d]`.
pub(in crate::attention) struct F32Chunk<'a> {
    pub keys_t: &'a [f32],
    pub values: &'a [f32],
}

/// Where one chunk's keys and values start and how far apart their rows are, in
/// elements; `F16` picks which pair of pointers is read (the other is never used).
#[derive(Clone, Copy)]
pub(super) struct Source {
    pub keys16: *const u16,
    pub values16: *const u16,
    pub keys32: *const f32,
    pub values32: *const f32,
    pub key_stride: usize,
    pub value_stride: usize,
    /// The next chunk's keys and values, to prefetch while this one folds.
    pub ahead: Option<(*const u16, *const u16)>,
}

impl Source {
    /// Panics unless the chunk holds `d` key rows of `CHUNK` and value rows up to the last
    /// of `lanes`.
    pub(super) fn f16(c: &F16Chunk, d: usize, lanes: Lanes) -> Self {
        assert!(d.is_multiple_of(32) && lanes.first < lanes.end && lanes.end <= CHUNK);
        assert!(c.keys.len() >= c.first_key + (d - 1) * c.key_stride + CHUNK);
        assert!(c.values.len() >= c.first_value + (lanes.end - 1) * c.value_stride + d);
        Self {
            keys16: c.keys[c.first_key..].as_ptr(),
            values16: c.values[c.first_value..].as_ptr(),
            keys32: std::ptr::null(),
            values32: std::ptr::null(),
            key_stride: c.key_stride,
            value_stride: c.value_stride,
            // Prefetch addresses need not be in bounds: a prefetch never faults.
            ahead: c.next.map(|(k, v)| {
                (
                    c.keys.as_ptr().wrapping_add(k),
                    c.values.as_ptr().wrapping_add(v),
                )
            }),
        }
    }

    /// Panics unless the chunk holds `d` key rows of `CHUNK` and `CHUNK` value rows.
    pub(super) fn f32(c: &F32Chunk, d: usize, lanes: Lanes) -> Self {
        assert!(d.is_multiple_of(32) && lanes.first < lanes.end && lanes.end <= CHUNK);
        assert!(c.keys_t.len() >= d * CHUNK && c.values.len() >= CHUNK * d);
        Self {
            keys16: std::ptr::null(),
            values16: std::ptr::null(),
            keys32: c.keys_t.as_ptr(),
            values32: c.values.as_ptr(),
            key_stride: CHUNK,
            value_stride: d,
            ahead: None,
        }
    }
}

/// Asks for line `e` of the next chunk `c.ahead` names (if any): its `d / 2` key lines
/// at even `e`, its `d / 2` value lines at odd, so a fold that calls this once per key
/// row it reads (`e` in `0..d`) spreads the next chunk's requests over its own work.
/// (Asked for all at once before each head's fold, Qwen3-0.6B's 16-sequence decode
/// attention read 0.39–0.56 ms a layer cold, and SmolLM2's 64-sequence one 0.40–0.49;
/// this way 0.41–0.46 and 0.32–0.36, `attention_bench --rows 1 --cold`.)
#[inline(always)]
pub(super) fn prefetch_ahead(c: &Source, e: usize, d: usize) {
    let Some((keys, values)) = c.ahead else {
        return;
    };
    // A line holds two key rows of `CHUNK` f16s (a block's keys are `[d][CHUNK]`), or
    // 32 elements of one position's values.
    let line = if e.is_multiple_of(2) {
        keys.wrapping_add(e * c.key_stride)
    } else {
        let (l, per_row) = (e / 2, d / 32);
        values.wrapping_add(l / per_row * c.value_stride + l % per_row * 32)
    };
    // SAFETY: a prefetch reads nothing architecturally and never faults.
    unsafe { _mm_prefetch::<_MM_HINT_T1>(line as *const i8) };
}

/// Folds one chunk, read straight from an f16 cache, into every query head of one
/// decode row's GQA group (`heads` holds exactly those heads). Per head it performs
/// [`fold_chunk`]'s operations in its order (f16→f32 is exact), so the same bits; but
/// no widened copy of the chunk is stored and read back, and each key and value vector
/// is widened once for up to three heads at a time.
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C; the head dim `d` is a multiple of 32.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn fold_heads_f16(
    queries: &[f32],
    chunk: &F16Chunk,
    d: usize,
    lanes: Lanes,
    heads: HeadStates,
) {
    // SAFETY: the CPU has the features (caller's contract); `Source::f16` bounds the chunk.
    unsafe { fold_heads::<true>(queries, Source::f16(chunk, d, lanes), d, lanes, heads) }
}

/// [`fold_chunk`] for every query head of one prefill row's GQA group at once, from the
/// tile's widened chunk: each key and value vector is loaded once for up to three heads
/// instead of once per head, and the heads' softmax steps overlap. Per head the same
/// operations in the same order, so the same bits.
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C; the head dim `d` is a multiple of 32.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn fold_heads_f32(
    queries: &[f32],
    chunk: &F32Chunk,
    d: usize,
    lanes: Lanes,
    heads: HeadStates,
) {
    // SAFETY: the CPU has the features (caller's contract); `Source::f32` bounds the chunk.
    unsafe { fold_heads::<false>(queries, Source::f32(chunk, d, lanes), d, lanes, heads) }
}

/// The fold state of a run of query heads: per head max, sum, and `d` accumulators.
pub(in crate::attention) struct HeadStates<'a> {
    pub max: &'a mut [f32],
    pub sum: &'a mut [f32],
    pub acc: &'a mut [f32],
}

/// # Safety
/// The CPU must have AVX2, FMA and F16C; `src` must bound `d` key rows of `CHUNK` and
/// value rows of `d` up to the last of `lanes`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn fold_heads<const F16: bool>(
    queries: &[f32],
    src: Source,
    d: usize,
    lanes: Lanes,
    state: HeadStates,
) {
    let g = queries.len() / d;
    assert!(queries.len() == g * d);
    assert!(state.max.len() == g && state.sum.len() == g && state.acc.len() == g * d);
    let mut h = 0;
    while h < g {
        // Three heads fill the registers; two twos beat a three and a one.
        let take = match g - h {
            1 => 1,
            2 | 4 => 2,
            _ => 3,
        };
        let heads = Heads {
            q: &queries[h * d..(h + take) * d],
            max: &mut state.max[h..h + take],
            sum: &mut state.sum[h..h + take],
            acc: &mut state.acc[h * d..(h + take) * d],
        };
        // The next chunk is asked for once, by the first run of heads.
        let src = if h == 0 {
            src
        } else {
            Source { ahead: None, ..src }
        };
        // SAFETY: the caller bounds every read of `src`; `heads` is `take` heads.
        unsafe {
            match take {
                1 => heads.fold::<1, F16>(src, d, lanes),
                2 => heads.fold::<2, F16>(src, d, lanes),
                _ => heads.fold::<3, F16>(src, d, lanes),
            }
        }
        h += take;
    }
}

/// `G` query heads' slices of the fold state.
struct Heads<'a> {
    q: &'a [f32],
    max: &'a mut [f32],
    sum: &'a mut [f32],
    acc: &'a mut [f32],
}

impl Heads<'_> {
    /// # Safety
    /// As [`fold_heads`], whose caller bounds the chunk; `self` holds `G` heads.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    // One index walks several register arrays at once (heads, halves, lanes).
    #[allow(clippy::needless_range_loop)]
    unsafe fn fold<const G: usize, const F16: bool>(self, c: Source, d: usize, lanes: Lanes) {
        assert!(self.q.len() == G * d && self.acc.len() == G * d && self.max.len() == G);
        // Eight elements at `at` of the key rows (`keys`) or value rows, widened.
        let load = |p16: *const u16, p32: *const f32, at: usize| {
            // SAFETY: the caller bounds every `at` this fold forms.
            unsafe {
                if F16 {
                    _mm256_cvtph_ps(_mm_loadu_si128(p16.add(at) as *const __m128i))
                } else {
                    _mm256_loadu_ps(p32.add(at))
                }
            }
        };
        // SAFETY: the caller bounds `c`'s reads; the assert above bounds `q` and `acc`.
        unsafe {
            // Scores, eight positions at a time: per head four partial sums over the
            // head dim (dims ≡ u mod 4), as `chunk_scores`.
            let q = self.q.as_ptr();
            let mut s = [[_mm256_setzero_ps(); 2]; G];
            for half in 0..2 {
                let mut part = [[_mm256_setzero_ps(); 4]; G];
                for quad in 0..d / 4 {
                    for u in 0..4 {
                        let e = 4 * quad + u;
                        if half == 0 {
                            prefetch_ahead(&c, e, d);
                        }
                        let k = load(c.keys16, c.keys32, e * c.key_stride + 8 * half);
                        for (h, p) in part.iter_mut().enumerate() {
                            let qe = _mm256_set1_ps(*q.add(h * d + e));
                            p[u] = _mm256_fmadd_ps(qe, k, p[u]);
                        }
                    }
                }
                for (h, p) in part.iter().enumerate() {
                    s[h][half] =
                        _mm256_add_ps(_mm256_add_ps(p[0], p[1]), _mm256_add_ps(p[2], p[3]));
                }
            }
            let mut alpha = [0.0f32; G];
            let mut w = [[0.0f32; CHUNK]; G];
            for h in 0..G {
                (alpha[h], w[h]) = softmax_step(s[h], lanes, &mut self.max[h], &mut self.sum[h]);
            }
            // acc = acc · alpha + Σ_j p_j v_j per head, j in order, 32 lanes at a time.
            let acc = self.acc.as_mut_ptr();
            for base in (0..d).step_by(32) {
                let mut a: [[__m256; 4]; G] = std::array::from_fn(|h| {
                    let al = _mm256_set1_ps(alpha[h]);
                    std::array::from_fn(|i| {
                        _mm256_mul_ps(_mm256_loadu_ps(acc.add(h * d + base + 8 * i)), al)
                    })
                });
                for j in lanes.first..lanes.end {
                    let row = j * c.value_stride + base;
                    let wb: [__m256; G] = std::array::from_fn(|h| _mm256_set1_ps(w[h][j]));
                    for i in 0..4 {
                        let v = load(c.values16, c.values32, row + 8 * i);
                        for h in 0..G {
                            a[h][i] = _mm256_fmadd_ps(wb[h], v, a[h][i]);
                        }
                    }
                }
                for (h, ah) in a.iter().enumerate() {
                    for (i, x) in ah.iter().enumerate() {
                        _mm256_storeu_ps(acc.add(h * d + base + 8 * i), *x);
                    }
                }
            }
        }
    }
}

/// [`exp2`] on eight lanes, step for step.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn exp2_v(x: __m256) -> __m256 {
    const ROUND: f32 = 12_582_912.0;
    let c = EXP2_C;
    let lo = _mm256_set1_ps(-126.0);
    // `f32::max(x, -126)`: a NaN `x` gives −126, as `maxps` with −126 second does.
    let xc = _mm256_max_ps(x, lo);
    let round = _mm256_set1_ps(ROUND);
    let t = _mm256_add_ps(xc, round);
    let n = _mm256_sub_ps(t, round);
    let f = _mm256_sub_ps(xc, n);
    let mut p = _mm256_set1_ps(c[6]);
    for &k in c[..6].iter().rev() {
        p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(k));
    }
    let ni = _mm256_sub_epi32(
        _mm256_castps_si256(t),
        _mm256_set1_epi32(ROUND.to_bits() as i32),
    );
    let scale = _mm256_slli_epi32::<23>(_mm256_add_epi32(ni, _mm256_set1_epi32(127)));
    let v = _mm256_mul_ps(p, _mm256_castsi256_ps(scale));
    // x < −126 gives exactly 0.
    _mm256_andnot_ps(_mm256_cmp_ps::<_CMP_LT_OQ>(x, lo), v)
}
