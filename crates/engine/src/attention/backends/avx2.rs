//! `online_softmax::fold_chunk` written in AVX2 intrinsics for a run of query heads at
//! once: the same float operations in the same order per head and lane (so the same bits),
//! but the chunk's scores and weights stay in registers, each key and value vector is
//! loaded once for up to three heads, and the max is a vector tree (the max of numbers does
//! not depend on the order; a NaN score makes the row NaN either way).

use crate::attention::exp2::{exp2, EXP2_C};
use crate::attention::lanes::Lanes;
use crate::attention::CHUNK;
use crate::kv::fp8_slab::E4m3;
use crate::kv::q8_slab::Q8_BLOCK;
use crate::kv::scaled_slab::{Code, ScaledSlab};
use std::arch::x86_64::*;

/// What a fold reads (its `KIND`): a widened f32 chunk, or the f16, `q8_0` or `fp8` cache in
/// place.
pub(super) const F32: u8 = 0;
pub(super) const F16: u8 = 1;
pub(super) const Q8: u8 = 2;
pub(super) const FP8: u8 = 3;
const _: () = assert!(Q8_BLOCK == 32, "a key block's scales serve 32 key rows");

/// A quantized code's fold `KIND`.
pub(super) trait ScaledKind: Code {
    const KIND: u8;
}

impl ScaledKind for i8 {
    const KIND: u8 = Q8;
}

impl ScaledKind for E4m3 {
    const KIND: u8 = FP8;
}

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

/// Where one chunk of one KV head sits in a `q8_0` or `fp8` cache: as [`F16Chunk`], the
/// codes at the same element offsets (keys `CHUNK`-position rows a block apart, as the block
/// size is the key stride), each times its block's scale ([`ScaledSlab::scale_index`]).
pub(in crate::attention) struct ScaledChunk<'a, Q> {
    pub keys: &'a ScaledSlab<Q>,
    pub first_key: usize,
    pub values: &'a ScaledSlab<Q>,
    pub first_value: usize,
    pub value_stride: usize,
    /// As [`F16Chunk::next`].
    pub next: Option<(usize, usize)>,
}

/// A chunk a lone row's fold reads in place.
pub(in crate::attention) enum DirectChunk<'a> {
    F16(F16Chunk<'a>),
    Q8(ScaledChunk<'a, i8>),
    Fp8(ScaledChunk<'a, E4m3>),
}

impl DirectChunk<'_> {
    /// Names `next` (the same head's next chunk) as the one to prefetch.
    pub fn set_next(&mut self, next: &DirectChunk) {
        let at = match next {
            DirectChunk::F16(n) => (n.first_key, n.first_value),
            DirectChunk::Q8(n) => (n.first_key, n.first_value),
            DirectChunk::Fp8(n) => (n.first_key, n.first_value),
        };
        match self {
            DirectChunk::F16(c) => c.next = Some(at),
            DirectChunk::Q8(c) => c.next = Some(at),
            DirectChunk::Fp8(c) => c.next = Some(at),
        }
    }
}

/// A prefill tile's widened chunk: keys `[d, CHUNK]` (transposed), values `[CHUNK, d]`.
pub(in crate::attention) struct F32Chunk<'a> {
    pub keys_t: &'a [f32],
    pub values: &'a [f32],
}

/// Where one chunk's keys and values start and how far apart their rows are, in
/// elements; the fold's `KIND` picks which pointers are read (the others are never used).
/// A `q8_0` chunk's key row `e`, lane `j` has its scale at `key_scales[(e / 32) ·
/// key_stride + j]`, and its value element at `at` its scale at `value_scales[at / 32]`;
/// an `fp8` chunk's (one block a head's row) at `key_scales[j]` and, position `j`'s values,
/// at `value_scales[j]`. `keys8`/`values8` point at either kind's bytes.
#[derive(Clone, Copy)]
pub(super) struct Source {
    pub keys16: *const u16,
    pub values16: *const u16,
    pub keys32: *const f32,
    pub values32: *const f32,
    pub keys8: *const i8,
    pub values8: *const i8,
    pub key_scales: *const u16,
    pub value_scales: *const u16,
    pub key_stride: usize,
    pub value_stride: usize,
    /// The next chunk's keys and values, to prefetch while this one folds.
    pub ahead: Option<Ahead>,
}

/// The next chunk's first bytes of keys, values and (`q8_0`, `fp8`) their scales.
#[derive(Clone, Copy)]
pub(super) struct Ahead {
    keys: *const u8,
    values: *const u8,
    key_scales: *const u8,
    value_scales: *const u8,
}

/// A [`Source`] with no pointers, for the constructors to fill.
const NO_SOURCE: Source = Source {
    keys16: std::ptr::null(),
    values16: std::ptr::null(),
    keys32: std::ptr::null(),
    values32: std::ptr::null(),
    keys8: std::ptr::null(),
    values8: std::ptr::null(),
    key_scales: std::ptr::null(),
    value_scales: std::ptr::null(),
    key_stride: 0,
    value_stride: 0,
    ahead: None,
};

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
            key_stride: c.key_stride,
            value_stride: c.value_stride,
            // Prefetch addresses need not be in bounds: a prefetch never faults.
            ahead: c.next.map(|(k, v)| Ahead {
                keys: c.keys.as_ptr().wrapping_add(k).cast(),
                values: c.values.as_ptr().wrapping_add(v).cast(),
                key_scales: std::ptr::null(),
                value_scales: std::ptr::null(),
            }),
            ..NO_SOURCE
        }
    }

    /// Panics unless the chunk holds `d` key rows of `CHUNK` and value rows up to the last
    /// of `lanes`, with their scales, in blocks of `Q::KIND`'s length (32, or the head).
    pub(super) fn scaled<Q: ScaledKind>(c: &ScaledChunk<Q>, d: usize, lanes: Lanes) -> Self {
        assert!(d.is_multiple_of(32) && lanes.first < lanes.end && lanes.end <= CHUNK);
        let (keys, values) = (c.keys, c.values);
        let (stride, block) = (keys.stride, if Q::KIND == Q8 { Q8_BLOCK } else { d });
        assert!(keys.block == block && values.block == block && c.value_stride == d);
        assert!(values.stride == 1 && c.first_value.is_multiple_of(block));
        let first_key_scale = keys.scale_index(c.first_key);
        let last_key = c.first_key + (d - 1) * stride;
        assert!(keys.qs.len() >= last_key + CHUNK);
        assert!(keys.scales.len() >= keys.scale_index(last_key) + CHUNK);
        let values_end = c.first_value + (lanes.end - 1) * c.value_stride + d;
        assert!(values.qs.len() >= values_end);
        assert!(values.scales.len() > values.scale_index(values_end - 1));
        Self {
            keys8: keys.qs[c.first_key..].as_ptr().cast(),
            values8: values.qs[c.first_value..].as_ptr().cast(),
            key_scales: keys.scales[first_key_scale..].as_ptr(),
            value_scales: values.scales[values.scale_index(c.first_value)..].as_ptr(),
            key_stride: stride,
            value_stride: c.value_stride,
            // Prefetch addresses need not be in bounds: a prefetch never faults.
            ahead: c.next.map(|(k, v)| Ahead {
                keys: keys.qs.as_ptr().wrapping_add(k).cast(),
                values: values.qs.as_ptr().wrapping_add(v).cast(),
                key_scales: keys
                    .scales
                    .as_ptr()
                    .wrapping_add(keys.scale_index(k))
                    .cast(),
                value_scales: values
                    .scales
                    .as_ptr()
                    .wrapping_add(values.scale_index(v))
                    .cast(),
            }),
            ..NO_SOURCE
        }
    }

    /// Panics unless the chunk holds `d` key rows of `CHUNK` and `CHUNK` value rows.
    pub(super) fn f32(c: &F32Chunk, d: usize, lanes: Lanes) -> Self {
        assert!(d.is_multiple_of(32) && lanes.first < lanes.end && lanes.end <= CHUNK);
        assert!(c.keys_t.len() >= d * CHUNK && c.values.len() >= CHUNK * d);
        Self {
            keys32: c.keys_t.as_ptr(),
            values32: c.values.as_ptr(),
            key_stride: CHUNK,
            value_stride: d,
            ..NO_SOURCE
        }
    }
}

/// Asks for line `e` of the next chunk `c.ahead` names (if any): for the f16 cache its
/// `d / 2` key lines at even `e`, its `d / 2` value lines at odd, so a fold that calls this
/// once per key row it reads (`e` in `0..d`) spreads the next chunk's requests over its own
/// work. (Asked for all at once before each head's fold, Qwen3-0.6B's 16-sequence decode
/// attention read 0.39–0.56 ms a layer cold, and SmolLM2's 64-sequence one 0.40–0.49;
/// this way 0.41–0.46 and 0.32–0.36, `attention_bench --rows 1 --cold`.) A `q8_0` chunk
/// is half the lines: its `d / 4` key lines at `e ≡ 0 (mod 4)`, value lines at `e ≡ 2`,
/// and a line of each 32 key rows' scales and of its values' scales at `e ≡ 1, 3 (mod 32)`;
/// an `fp8` chunk the same bytes, and one line of key and of value scales (`e` = 1, 3).
#[inline(always)]
pub(super) fn prefetch_ahead<const KIND: u8>(c: &Source, e: usize, d: usize) {
    let Some(a) = c.ahead else {
        return;
    };
    let line = if KIND == Q8 || KIND == FP8 {
        // A line holds four key rows of `CHUNK` bytes (a block of 16 positions' keys are
        // `[d][16]`), and a chunk's values of one head are `16 · d` contiguous bytes.
        match (e % 4, e % 32) {
            (0, _) => a.keys.wrapping_add(e * c.key_stride),
            (2, _) => a.values.wrapping_add(e / 4 * 64),
            (_, 1) if KIND == Q8 || e == 1 => a.key_scales.wrapping_add(e / 32 * c.key_stride * 2),
            (_, 3) if KIND == Q8 || e == 3 => a.value_scales.wrapping_add(e / 32 * 64),
            _ => return,
        }
    } else if e.is_multiple_of(2) {
        // A line holds two key rows of `CHUNK` f16s (a block's keys are `[d][CHUNK]`), or
        // 32 elements of one position's values.
        a.keys.wrapping_add(e * c.key_stride * 2)
    } else {
        let (l, per_row) = (e / 2, d / 32);
        a.values
            .wrapping_add((l / per_row * c.value_stride + l % per_row * 32) * 2)
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
    unsafe { fold_heads::<F16>(queries, Source::f16(chunk, d, lanes), d, lanes, heads) }
}

/// [`fold_heads_f16`] from a `q8_0` or `fp8` cache: each code is widened and multiplied by
/// its block's scale in a register, which is exact, so the same floats as the widened copy
/// and the same bits.
///
/// # Safety
/// As [`fold_heads_f16`].
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn fold_heads_scaled<Q: ScaledKind>(
    queries: &[f32],
    chunk: &ScaledChunk<Q>,
    d: usize,
    lanes: Lanes,
    heads: HeadStates,
) {
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
    unsafe { fold_heads::<F32>(queries, Source::f32(chunk, d, lanes), d, lanes, heads) }
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
                1 => heads.fold::<1, KIND>(src, d, lanes),
                2 => heads.fold::<2, KIND>(src, d, lanes),
                _ => heads.fold::<3, KIND>(src, d, lanes),
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
    unsafe fn fold<const G: usize, const KIND: u8>(self, c: Source, d: usize, lanes: Lanes) {
        assert!(self.q.len() == G * d && self.acc.len() == G * d && self.max.len() == G);
        // SAFETY: the caller bounds `c`'s reads; the assert above bounds `q` and `acc`.
        unsafe {
            // Scores, eight positions at a time: per head four partial sums over the
            // head dim (dims ≡ u mod 4), as `chunk_scores`; a block of 32 dims at a time,
            // which share their `q8_0` scales.
            let q = self.q.as_ptr();
            let mut s = [[_mm256_setzero_ps(); 2]; G];
            for half in 0..2 {
                let mut part = [[_mm256_setzero_ps(); 4]; G];
                for block in 0..d / 32 {
                    let scale = key_scales::<KIND>(&c, block, 8 * half);
                    for e in 32 * block..32 * (block + 1) {
                        let u = e % 4;
                        if half == 0 {
                            prefetch_ahead::<KIND>(&c, e, d);
                        }
                        let k = key::<KIND>(&c, e, 8 * half, scale);
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
                    let scale = value_scale::<KIND>(&c, j, row);
                    let wb: [__m256; G] = std::array::from_fn(|h| _mm256_set1_ps(w[h][j]));
                    for i in 0..4 {
                        let v = value::<KIND>(&c, row + 8 * i, scale);
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

/// The `q8_0` scales of lanes `lane..lane + 8` of key rows `32 · block..`, widened (`fp8`:
/// the head's, times 2^8 for [`widen_e4m3`]'s 2^-8; zero for other kinds, which do not use
/// them).
///
/// # Safety
/// The caller bounds the read within the chunk `c` names.
#[inline(always)]
unsafe fn key_scales<const KIND: u8>(c: &Source, block: usize, lane: usize) -> __m256 {
    // SAFETY: the caller's contract.
    unsafe {
        if KIND == Q8 {
            let at = c.key_scales.add(block * c.key_stride + lane);
            _mm256_cvtph_ps(_mm_loadu_si128(at as *const __m128i))
        } else if KIND == FP8 {
            let at = c.key_scales.add(lane);
            let scales = _mm256_cvtph_ps(_mm_loadu_si128(at as *const __m128i));
            _mm256_mul_ps(scales, _mm256_set1_ps(256.0))
        } else {
            _mm256_setzero_ps()
        }
    }
}

/// Lanes `lane..lane + 8` of key row `e`, widened; a `q8_0` or `fp8` code times its
/// `scale` (exact).
///
/// # Safety
/// The caller bounds the read within the chunk `c` names.
#[inline(always)]
unsafe fn key<const KIND: u8>(c: &Source, e: usize, lane: usize, scale: __m256) -> __m256 {
    let at = e * c.key_stride + lane;
    // SAFETY: the caller's contract.
    unsafe {
        match KIND {
            F32 => _mm256_loadu_ps(c.keys32.add(at)),
            F16 => _mm256_cvtph_ps(_mm_loadu_si128(c.keys16.add(at) as *const __m128i)),
            Q8 => _mm256_mul_ps(widen_i8(c.keys8.add(at)), scale),
            _ => _mm256_mul_ps(widen_e4m3(c.keys8.add(at)), scale),
        }
    }
}

/// The `q8_0` scale of value element `at` (of position `j`) in every lane; `fp8`'s of
/// position `j`'s row, times 2^8 for [`widen_e4m3`] (zero for other kinds).
///
/// # Safety
/// The caller bounds the read within the chunk `c` names.
#[inline(always)]
unsafe fn value_scale<const KIND: u8>(c: &Source, j: usize, at: usize) -> __m256 {
    // SAFETY: the caller's contract.
    unsafe {
        match KIND {
            Q8 => _mm256_cvtph_ps(_mm_set1_epi16(*c.value_scales.add(at / Q8_BLOCK) as i16)),
            FP8 => _mm256_mul_ps(
                _mm256_cvtph_ps(_mm_set1_epi16(*c.value_scales.add(j) as i16)),
                _mm256_set1_ps(256.0),
            ),
            _ => _mm256_setzero_ps(),
        }
    }
}

/// Value elements `at..at + 8`, widened; a `q8_0` or `fp8` code times `scale` (exact).
///
/// # Safety
/// The caller bounds the read within the chunk `c` names.
#[inline(always)]
unsafe fn value<const KIND: u8>(c: &Source, at: usize, scale: __m256) -> __m256 {
    // SAFETY: the caller's contract.
    unsafe {
        match KIND {
            F32 => _mm256_loadu_ps(c.values32.add(at)),
            F16 => _mm256_cvtph_ps(_mm_loadu_si128(c.values16.add(at) as *const __m128i)),
            Q8 => _mm256_mul_ps(widen_i8(c.values8.add(at)), scale),
            _ => _mm256_mul_ps(widen_e4m3(c.values8.add(at)), scale),
        }
    }
}

/// Eight int8s at `p` as f32 (exact).
///
/// # Safety
/// `p..p + 8` is readable.
#[inline(always)]
unsafe fn widen_i8(p: *const i8) -> __m256 {
    // SAFETY: the caller's contract.
    unsafe { _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(p as *const __m128i))) }
}

/// Eight e4m3 bytes at `p` as f32, each its value times 2^-8 (exact): sign-extended to 16
/// bits, shifted left 7 and masked, a byte's sign, exponent and mantissa land in an f16's
/// places ([`E4m3::f16_bits`]), which `vcvtph2ps` widens, subnormals included.
///
/// # Safety
/// `p..p + 8` is readable.
#[inline(always)]
unsafe fn widen_e4m3(p: *const i8) -> __m256 {
    // SAFETY: the caller's contract.
    unsafe {
        let b = _mm_cvtepi8_epi16(_mm_loadl_epi64(p as *const __m128i));
        let h = _mm_and_si128(_mm_slli_epi16::<7>(b), _mm_set1_epi16(E4M3_F16_MASK));
        _mm256_cvtph_ps(h)
    }
}

/// The bits a sign-extended e4m3 byte shifted left 7 keeps: the sign (bit 15; the sign
/// extension's copy in bit 14 is cleared) and the exponent and mantissa (bits 7..=13).
pub(super) const E4M3_F16_MASK: i16 = 0xBF80u16 as i16;

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
