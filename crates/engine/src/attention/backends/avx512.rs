//! `avx2.rs`'s chunk fold on 512-bit registers: a chunk's sixteen positions fill one
//! register instead of two halves, so the fold issues half the instructions (on cores with
//! full-width units, such as Zen 5, half the cycles). Per head and lane the same float
//! operations in the same order, and the horizontal max and sum take the 256-bit halves in
//! `avx2`'s order, so the same bits. Needs a head dim that is a multiple of 64 (four
//! registers of accumulator per head); others take the `avx2` fold.

use super::avx2::{
    prefetch_ahead, F16Chunk, F32Chunk, HeadStates, ScaledChunk, ScaledKind, Source, E4M3_F16_MASK,
    F16, F32, FP8, Q8,
};
use crate::attention::exp2::{exp2, EXP2_C};
use crate::attention::lanes::Lanes;
use crate::attention::CHUNK;
use crate::kv::q8_slab::Q8_BLOCK;
use std::arch::x86_64::*;

const _: () = assert!(CHUNK == 16, "one 16-lane register per chunk");

/// The AVX-512 fold runs for this head dim.
pub(super) fn covers(d: usize) -> bool {
    d.is_multiple_of(64)
}

/// [`super::avx2::fold_heads_f16`] on 512-bit registers.
///
/// # Safety
/// The CPU must have AVX-512F, AVX2, FMA and F16C; `covers(d)`.
#[inline]
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
pub(super) unsafe fn fold_heads_f16(
    queries: &[f32],
    chunk: &F16Chunk,
    d: usize,
    lanes: Lanes,
    heads: HeadStates,
) {
    assert!(covers(d));
    // SAFETY: the CPU has the features (caller's contract); `Source::f16` bounds the chunk.
    unsafe { fold_heads::<F16>(queries, Source::f16(chunk, d, lanes), d, lanes, heads) }
}

/// [`super::avx2::fold_heads_scaled`] on 512-bit registers.
///
/// # Safety
/// The CPU must have AVX-512F, AVX2, FMA and F16C; `covers(d)`.
#[inline]
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
pub(super) unsafe fn fold_heads_scaled<Q: ScaledKind>(
    queries: &[f32],
    chunk: &ScaledChunk<Q>,
    d: usize,
    lanes: Lanes,
    heads: HeadStates,
) {
    assert!(covers(d));
    let src = Source::scaled(chunk, d, lanes);
    // SAFETY: the CPU has the features (caller's contract); `Source::scaled` bounds the chunk.
    unsafe {
        if Q::KIND == Q8 {
            fold_heads::<Q8>(queries, src, d, lanes, heads)
        } else {
            fold_heads::<FP8>(queries, src, d, lanes, heads)
        }
    }
}

/// [`super::avx2::fold_heads_f32`] on 512-bit registers.
///
/// # Safety
/// The CPU must have AVX-512F, AVX2, FMA and F16C; `covers(d)`.
#[inline]
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
pub(super) unsafe fn fold_heads_f32(
    queries: &[f32],
    chunk: &F32Chunk,
    d: usize,
    lanes: Lanes,
    heads: HeadStates,
) {
    assert!(covers(d));
    // SAFETY: the CPU has the features (caller's contract); `Source::f32` bounds the chunk.
    unsafe { fold_heads::<F32>(queries, Source::f32(chunk, d, lanes), d, lanes, heads) }
}

/// # Safety
/// As the two entry points above, which bound `src`.
#[inline]
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
unsafe fn fold_heads<const KIND: u8>(
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
        let take = run_len(g - h);
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
                1 => heads.fold::<1, KIND>(src, d, lanes),
                2 => heads.fold::<2, KIND>(src, d, lanes),
                3 => heads.fold::<3, KIND>(src, d, lanes),
                _ => heads.fold::<4, KIND>(src, d, lanes),
            }
        }
        h += take;
    }
}

/// Heads in the next run when `left` remain: four fill the 32 registers (16 partial
/// sums or accumulators, 4 weights); a three and a two beat a four and a one.
#[inline(always)]
fn run_len(left: usize) -> usize {
    if left == 5 {
        3
    } else {
        left.min(4)
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
    #[target_feature(enable = "avx512f,avx2,fma,f16c")]
    // One index walks several register arrays at once (heads, lanes).
    #[allow(clippy::needless_range_loop)]
    unsafe fn fold<const G: usize, const KIND: u8>(self, c: Source, d: usize, lanes: Lanes) {
        assert!(self.q.len() == G * d && self.acc.len() == G * d && self.max.len() == G);
        // SAFETY: the caller bounds `c`'s reads; the assert above bounds `q` and `acc`.
        unsafe {
            let s = scores::<G, KIND>(self.q.as_ptr(), &c, d);
            let mut alpha = [0.0f32; G];
            let mut w = [[0.0f32; CHUNK]; G];
            for h in 0..G {
                (alpha[h], w[h]) = softmax_step(s[h], lanes, &mut self.max[h], &mut self.sum[h]);
            }
            accumulate::<G, KIND>(self.acc.as_mut_ptr(), &c, d, lanes, (&alpha, &w));
        }
    }
}

/// Key row `e`'s sixteen lanes, widened; a `q8_0` or `fp8` code times its `scale` (exact).
///
/// # Safety
/// The caller bounds the read within the chunk `c` names.
#[inline(always)]
unsafe fn key<const KIND: u8>(c: &Source, e: usize, scale: __m512) -> __m512 {
    let at = e * c.key_stride;
    // SAFETY: the caller's contract.
    unsafe {
        match KIND {
            F32 => _mm512_loadu_ps(c.keys32.add(at)),
            F16 => _mm512_cvtph_ps(_mm256_loadu_si256(c.keys16.add(at) as *const __m256i)),
            Q8 => _mm512_mul_ps(widen_i8(c.keys8.add(at)), scale),
            _ => _mm512_mul_ps(widen_e4m3(c.keys8.add(at)), scale),
        }
    }
}

/// The `q8_0` scales of the sixteen lanes of key rows `32 · block..`, widened (`fp8`: the
/// head's, times 2^8 for [`widen_e4m3`]; zero for other kinds).
///
/// # Safety
/// The caller bounds the read within the chunk `c` names.
#[inline(always)]
unsafe fn key_scales<const KIND: u8>(c: &Source, block: usize) -> __m512 {
    // SAFETY: the caller's contract.
    unsafe {
        if KIND == Q8 {
            let at = c.key_scales.add(block * c.key_stride);
            _mm512_cvtph_ps(_mm256_loadu_si256(at as *const __m256i))
        } else if KIND == FP8 {
            let scales = _mm512_cvtph_ps(_mm256_loadu_si256(c.key_scales as *const __m256i));
            _mm512_mul_ps(scales, _mm512_set1_ps(256.0))
        } else {
            _mm512_setzero_ps()
        }
    }
}

/// Value elements `at..at + 16` (of position `j`), widened; a `q8_0` or `fp8` code times
/// its block's scale, read here (the sixteen share one block).
///
/// # Safety
/// The caller bounds the read within the chunk `c` names.
#[inline(always)]
unsafe fn value<const KIND: u8>(c: &Source, j: usize, at: usize) -> __m512 {
    // SAFETY: the caller's contract.
    unsafe {
        match KIND {
            F32 => _mm512_loadu_ps(c.values32.add(at)),
            F16 => _mm512_cvtph_ps(_mm256_loadu_si256(c.values16.add(at) as *const __m256i)),
            Q8 => {
                let bits = *c.value_scales.add(at / Q8_BLOCK);
                let scale = _mm512_cvtph_ps(_mm256_set1_epi16(bits as i16));
                _mm512_mul_ps(widen_i8(c.values8.add(at)), scale)
            }
            _ => {
                let bits = *c.value_scales.add(j);
                let scale = _mm512_cvtph_ps(_mm256_set1_epi16(bits as i16));
                let scale = _mm512_mul_ps(scale, _mm512_set1_ps(256.0));
                _mm512_mul_ps(widen_e4m3(c.values8.add(at)), scale)
            }
        }
    }
}

/// Sixteen int8s at `p` as f32 (exact).
///
/// # Safety
/// `p..p + 16` is readable.
#[inline(always)]
unsafe fn widen_i8(p: *const i8) -> __m512 {
    // SAFETY: the caller's contract.
    unsafe { _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(p as *const __m128i))) }
}

/// Sixteen e4m3 bytes at `p` as f32, each its value times 2^-8 (exact), as
/// [`super::avx2`]'s `widen_e4m3`.
///
/// # Safety
/// `p..p + 16` is readable.
#[inline(always)]
unsafe fn widen_e4m3(p: *const i8) -> __m512 {
    // SAFETY: the caller's contract.
    unsafe {
        let b = _mm256_cvtepi8_epi16(_mm_loadu_si128(p as *const __m128i));
        let h = _mm256_and_si256(_mm256_slli_epi16::<7>(b), _mm256_set1_epi16(E4M3_F16_MASK));
        _mm512_cvtph_ps(h)
    }
}

/// Scores of the chunk's sixteen positions for the `G` query heads at `q` (`[G, d]`):
/// per head four partial sums over the head dim (dims ≡ u mod 4), as `chunk_scores`.
///
/// Inlined into the caller's target features (out of line, each call returned its
/// registers through memory).
///
/// # Safety
/// `q` holds `G · d` floats; `c` bounds `d` key rows of `CHUNK`.
#[inline(always)]
unsafe fn scores<const G: usize, const KIND: u8>(
    q: *const f32,
    c: &Source,
    d: usize,
) -> [__m512; G] {
    // SAFETY: the caller's contract bounds every read.
    unsafe {
        let mut part = [[_mm512_setzero_ps(); 4]; G];
        // A block of 32 dims at a time, which share their `q8_0` scales.
        for block in 0..d / 32 {
            let scale = key_scales::<KIND>(c, block);
            for e in 32 * block..32 * (block + 1) {
                let u = e % 4;
                prefetch_ahead::<KIND>(c, e, d);
                let k = key::<KIND>(c, e, scale);
                for (h, p) in part.iter_mut().enumerate() {
                    let qe = _mm512_set1_ps(*q.add(h * d + e));
                    p[u] = _mm512_fmadd_ps(qe, k, p[u]);
                }
            }
        }
        std::array::from_fn(|h| {
            let p = &part[h];
            _mm512_add_ps(_mm512_add_ps(p[0], p[1]), _mm512_add_ps(p[2], p[3]))
        })
    }
}

/// `acc = acc · alpha + Σ_j w_j v_j` for the `G` heads' accumulators at `acc` (`[G, d]`),
/// positions `j` in order, 64 lanes at a time.
///
/// Inlined into the caller's target features, as [`scores`].
///
/// # Safety
/// `acc` holds `G · d` floats; `c` bounds value rows of `d` up to the last of `lanes`.
#[inline(always)]
// One index walks several register arrays at once (heads, lanes).
#[allow(clippy::needless_range_loop)]
unsafe fn accumulate<const G: usize, const KIND: u8>(
    acc: *mut f32,
    c: &Source,
    d: usize,
    lanes: Lanes,
    (alpha, w): (&[f32; G], &[[f32; CHUNK]; G]),
) {
    // SAFETY: the caller's contract bounds every read and write.
    unsafe {
        for base in (0..d).step_by(64) {
            let mut a: [[__m512; 4]; G] = std::array::from_fn(|h| {
                let al = _mm512_set1_ps(alpha[h]);
                std::array::from_fn(|i| {
                    _mm512_mul_ps(_mm512_loadu_ps(acc.add(h * d + base + 16 * i)), al)
                })
            });
            for j in lanes.first..lanes.end {
                let row = j * c.value_stride + base;
                let wb: [__m512; G] = std::array::from_fn(|h| _mm512_set1_ps(w[h][j]));
                for i in 0..4 {
                    let v = value::<KIND>(c, j, row + 16 * i);
                    for h in 0..G {
                        a[h][i] = _mm512_fmadd_ps(wb[h], v, a[h][i]);
                    }
                }
            }
            for (h, ah) in a.iter().enumerate() {
                for (i, x) in ah.iter().enumerate() {
                    _mm512_storeu_ps(acc.add(h * d + base + 16 * i), *x);
                }
            }
        }
    }
}

/// Most query heads [`fold_batch_f32`] takes at once (a 16-row prefill tile of two-head
/// groups).
pub(super) const BATCH: usize = 32;

/// [`fold_heads_f32`] for a chunk every one of the (up to [`BATCH`]) heads sees whole,
/// phase by phase: every head's scores, then every head's softmax step, then every
/// head's values. Each head performs the same operations in the same order as in
/// [`fold_heads_f32`], so the same bits; but the softmax steps, chains of dependent
/// reductions and `exp2`, no longer sit between a run of heads' multiply-adds and the
/// next's, where each run waited for its own.
///
/// # Safety
/// As [`fold_heads_f32`].
#[inline]
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
pub(super) unsafe fn fold_batch_f32(
    queries: &[f32],
    chunk: &F32Chunk,
    d: usize,
    state: HeadStates,
) {
    assert!(covers(d));
    let n = queries.len() / d;
    assert!(queries.len() == n * d && n <= BATCH);
    assert!(state.max.len() == n && state.sum.len() == n && state.acc.len() == n * d);
    let c = Source::f32(chunk, d, Lanes::WHOLE);
    let (q, acc) = (queries.as_ptr(), state.acc.as_mut_ptr());
    let mut s = [_mm512_setzero_ps(); BATCH];
    let mut h = 0;
    while h < n {
        let t = run_len(n - h);
        // SAFETY: `Source::f32` bounds the chunk; the asserts bound `q` for `n` heads,
        // and this run reads its own `t`.
        unsafe {
            let q = q.add(h * d);
            match t {
                1 => s[h..h + 1].copy_from_slice(&scores::<1, F32>(q, &c, d)),
                2 => s[h..h + 2].copy_from_slice(&scores::<2, F32>(q, &c, d)),
                3 => s[h..h + 3].copy_from_slice(&scores::<3, F32>(q, &c, d)),
                _ => s[h..h + 4].copy_from_slice(&scores::<4, F32>(q, &c, d)),
            }
        }
        h += t;
    }
    let mut alpha = [0.0f32; BATCH];
    let mut w = [[0.0f32; CHUNK]; BATCH];
    for h in 0..n {
        (alpha[h], w[h]) = softmax_step(s[h], Lanes::WHOLE, &mut state.max[h], &mut state.sum[h]);
    }
    let mut h = 0;
    while h < n {
        let t = run_len(n - h);
        macro_rules! run {
            ($g:literal) => {
                // SAFETY: as above, for `acc`.
                unsafe {
                    accumulate::<$g, F32>(
                        acc.add(h * d),
                        &c,
                        d,
                        Lanes::WHOLE,
                        (
                            alpha[h..h + $g].try_into().expect("a run's alphas"),
                            w[h..h + $g].try_into().expect("a run's weights"),
                        ),
                    )
                }
            };
        }
        match t {
            1 => run!(1),
            2 => run!(2),
            3 => run!(3),
            _ => run!(4),
        }
        h += t;
    }
}

/// [`super::avx2`]'s softmax step on one register of scores: the max and the sum fold
/// the two 256-bit halves as `avx2` folds its two registers, low half first.
#[inline]
#[target_feature(enable = "avx512f,avx2,fma")]
fn softmax_step(s: __m512, lanes: Lanes, max: &mut f32, sum: &mut f32) -> (f32, [f32; CHUNK]) {
    let live: __mmask16 = lanes.mask();
    let m = _mm512_mask_blend_ps(live, _mm512_set1_ps(f32::NEG_INFINITY), s);
    let m = _mm256_max_ps(_mm512_castps512_ps256(m), upper(m));
    let m = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps::<1>(m));
    let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    let m = _mm_max_ss(m, _mm_shuffle_ps::<1>(m, m));
    let new_max = max.max(_mm_cvtss_f32(m));
    let alpha = exp2(*max - new_max);
    let p = _mm512_maskz_mov_ps(live, exp2_v(_mm512_sub_ps(s, _mm512_set1_ps(new_max))));
    // The weights' sum in `lane_sum`'s tree: halves, quarters, then pairs.
    let h = _mm256_add_ps(_mm512_castps512_ps256(p), upper(p));
    let qs = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps::<1>(h));
    let r = _mm_add_ps(qs, _mm_movehl_ps(qs, qs));
    let total = _mm_cvtss_f32(_mm_add_ss(r, _mm_shuffle_ps::<1>(r, r)));
    *sum = sum.mul_add(alpha, total);
    *max = new_max;
    let mut w = [0.0f32; CHUNK];
    // SAFETY: `w` holds one 16-lane store.
    unsafe { _mm512_storeu_ps(w.as_mut_ptr(), p) };
    (alpha, w)
}

/// Lanes 8..16 (AVX-512F alone has no 32-bit-lane extract).
#[inline]
#[target_feature(enable = "avx512f,avx2")]
fn upper(x: __m512) -> __m256 {
    _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(x)))
}

/// [`exp2`] on sixteen lanes, step for step.
#[inline]
#[target_feature(enable = "avx512f,avx2,fma")]
fn exp2_v(x: __m512) -> __m512 {
    const ROUND: f32 = 12_582_912.0;
    let c = EXP2_C;
    let lo = _mm512_set1_ps(-126.0);
    // `f32::max(x, -126)`: a NaN `x` gives −126, as `maxps` with −126 second does.
    let xc = _mm512_max_ps(x, lo);
    let round = _mm512_set1_ps(ROUND);
    let t = _mm512_add_ps(xc, round);
    let n = _mm512_sub_ps(t, round);
    let f = _mm512_sub_ps(xc, n);
    let mut p = _mm512_set1_ps(c[6]);
    for &k in c[..6].iter().rev() {
        p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(k));
    }
    let ni = _mm512_sub_epi32(
        _mm512_castps_si512(t),
        _mm512_set1_epi32(ROUND.to_bits() as i32),
    );
    let scale = _mm512_slli_epi32::<23>(_mm512_add_epi32(ni, _mm512_set1_epi32(127)));
    let v = _mm512_mul_ps(p, _mm512_castsi512_ps(scale));
    // x < −126 gives exactly 0.
    let below = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(x, lo);
    _mm512_maskz_mov_ps(!below, v)
}
