//! The AVX-512 tiles of Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 and the K-quants: two weight groups
//! side by side in one 512-bit vector, each lane computing what its lane of the 256-bit
//! tile computes, in the same order (so the same bits), with half the instructions per
//! product: every activation broadcast, scale product and conversion serves sixteen
//! weight rows.
//! A pair tile runs from two activation rows up (K-quants from five); `avx512_vnni.rs`
//! decides, and runs an odd last group on its 256-bit tile.

use super::prefetch::{prefetch_lines, starts_line, AHEAD};
use super::ymm::{chunk_bits, f16x4, k_quants, CHUNKS};
use crate::kernels::quant::activations::{check_rows, XRow};
use crate::kernels::quant::group::{check_group, Group};
use crate::kernels::quant::quant_matrix::QuantMatrix;
use crate::kernels::quant::tile::{Tile, TileOut};
use crate::kernels::quant::weight_format::WeightFormat;
use crate::kernels::quant::{BLOCK, K_NR, MR, NR, SUB};
use std::arch::x86_64::*;
use std::ops::Range;

/// Every pair of groups of `groups` against `R` activation rows, two groups at a time;
/// returns where it stopped, an odd last group left to the caller's 256-bit tile. In
/// Q4_0/Q4_1 only the task's `first` row tile, which brings the weights from memory,
/// prefetches: the later ones read them from cache, where prefetches only take issue
/// slots.
///
/// # Safety
/// The CPU must support AVX-512 F/BW/VL and VNNI (with AVX2, FMA and F16C).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(super) unsafe fn tiles<const R: usize>(
    m: &QuantMatrix,
    groups: Range<usize>,
    x: &[XRow; MR],
    first: bool,
    emit: &mut impl FnMut(usize, &TileOut),
) -> usize {
    let (format, blocks) = (m.format, m.cols / BLOCK);
    check_rows::<R>(x, blocks, format);
    let mut g = groups.start;
    while g + 1 < groups.end {
        let (a, b) = (m.group(g), m.group(g + 1));
        // SAFETY: the CPU supports this path (caller's contract); the rows were
        // checked for `blocks` blocks, and each kernel checks its groups.
        let (ta, tb) = unsafe {
            match (format, first) {
                (WeightFormat::Q8_0, _) => q8_0::<R>(a, b, x, blocks),
                (WeightFormat::Q4_0, true) => q4::<R, false, false, true>(a, b, x, blocks),
                (WeightFormat::Q4_0, false) => q4::<R, false, false, false>(a, b, x, blocks),
                (WeightFormat::Q5_0, true) => q4::<R, false, true, true>(a, b, x, blocks),
                (WeightFormat::Q5_0, false) => q4::<R, false, true, false>(a, b, x, blocks),
                (WeightFormat::Q5_1, true) => q4::<R, true, true, true>(a, b, x, blocks),
                (WeightFormat::Q5_1, false) => q4::<R, true, true, false>(a, b, x, blocks),
                (WeightFormat::Q4K, true) => q4k::<R, false, true>(a, b, x, blocks),
                (WeightFormat::Q4K, false) => q4k::<R, false, false>(a, b, x, blocks),
                (WeightFormat::Q5K, true) => q4k::<R, true, true>(a, b, x, blocks),
                (WeightFormat::Q5K, false) => q4k::<R, true, false>(a, b, x, blocks),
                (WeightFormat::Q6K, true) => q6k::<R, true>(a, b, x, blocks),
                (WeightFormat::Q6K, false) => q6k::<R, false>(a, b, x, blocks),
                (_, true) => q4::<R, true, false, true>(a, b, x, blocks),
                (_, false) => q4::<R, true, false, false>(a, b, x, blocks),
            }
        };
        emit(g, &ta);
        emit(g + 1, &tb);
        g += 2;
    }
    g
}

/// Blocks ahead of the one being read that the pair tiles prefetch: as many bytes
/// ahead as [`AHEAD`] is for one group, as each step reads two.
const PAIR_AHEAD: usize = AHEAD / 2;

/// Prefetches what the pair tile reads [`PAIR_AHEAD`] blocks past block `k`. Groups
/// `a` and `b` advance together, and the task's next pair follows `b` in memory (the
/// groups of one matrix lie end to end, [`Group::follows`]), so `b`'s values `k +
/// PAIR_AHEAD` blocks on are the stream's, and the other half is one group before
/// them (`a`'s) or, once they are past `b`'s end, one group after them (the next
/// pair's second group). Each group prefetched past itself, as the 256-bit tile
/// does, fetched `b`'s current lines from `a`'s stream and left the next pair's
/// second group to the hardware.
#[inline(always)]
fn prefetch_pair<T>(b: &[T], per_block: usize, k: usize, blocks: usize) {
    let bytes = per_block * size_of::<T>();
    if b.is_empty() || !starts_line(bytes, k) {
        return;
    }
    let p = b.as_ptr().wrapping_add((k + PAIR_AHEAD) * per_block) as *const i8;
    let group = blocks * bytes;
    let other = if k + PAIR_AHEAD < blocks {
        p.wrapping_sub(group)
    } else {
        p.wrapping_add(group)
    };
    prefetch_lines(p, bytes);
    prefetch_lines(other, bytes);
}

/// [`check_group`] for both groups of a pair tile, and (in debug builds) that `b`
/// lies right after `a`, as [`prefetch_pair`] assumes.
#[inline(always)]
fn check_pair(a: &Group, b: &Group, blocks: usize, format: WeightFormat) {
    check_group(a, blocks, format);
    check_group(b, blocks, format);
    debug_assert!(b.follows(a), "a pair tile's groups lie end to end");
}

/// Group `a`'s 32 bytes at `pa` in the low half, group `b`'s at `pb` in the high.
///
/// # Safety
/// Both pointers must point at 32 readable bytes.
#[inline]
#[target_feature(enable = "avx2,avx512f")]
unsafe fn both(pa: *const __m256i, pb: *const __m256i) -> __m512i {
    // SAFETY: the caller's contract; unaligned loads.
    unsafe {
        _mm512_inserti64x4::<1>(
            _mm512_castsi256_si512(_mm256_loadu_si256(pa)),
            _mm256_loadu_si256(pb),
        )
    }
}

/// Eight f16 values at `pa` then eight at `pb`, as f32.
///
/// # Safety
/// Both pointers must point at eight readable u16s.
#[inline]
#[target_feature(enable = "avx2,f16c,avx512f")]
unsafe fn f16x16(pa: *const u16, pb: *const u16) -> __m512 {
    // SAFETY: the caller's contract; unaligned 16-byte reads.
    unsafe {
        _mm512_cvtph_ps(_mm256_inserti128_si256::<1>(
            _mm256_castsi128_si256(_mm_loadu_si128(pa as *const __m128i)),
            _mm_loadu_si128(pb as *const __m128i),
        ))
    }
}

/// Both groups' tiles from the per-row accumulators (group `a` in the low eight
/// lanes, `b` in the high), plus Q4_1's minimum term.
#[inline]
#[target_feature(enable = "avx2,avx512f")]
fn finish<const R: usize>(acc: &[__m512; R], mn: Option<&[__m512; R]>) -> (Tile, Tile) {
    let (mut ta, mut tb): (Tile, Tile) = Default::default();
    for r in 0..R {
        let rows = match mn {
            Some(mn) => _mm512_add_ps(acc[r], mn[r]),
            None => acc[r],
        };
        let mut lanes = [0f32; 2 * NR];
        // SAFETY: `lanes` is 16 f32s; storeu has no alignment requirement.
        unsafe { _mm512_storeu_ps(lanes.as_mut_ptr(), rows) };
        ta[r].copy_from_slice(&lanes[..NR]);
        tb[r].copy_from_slice(&lanes[NR..]);
    }
    (ta, tb)
}

/// Every chunk's fifth bits of two Q5 blocks side by side, each at bit 4 of its byte, as
/// `ymm.rs`'s `q5_high` moves one block's (the same shifts and mask, so nothing leaks
/// between bytes). Spelled out chunk by chunk, so no shift depends on a loop index.
#[inline]
#[target_feature(enable = "avx2,avx512f,avx512bw")]
fn q5_highs_pair(h: __m512i) -> [__m512i; CHUNKS] {
    let bit = _mm512_set1_epi8(0x10);
    [
        _mm512_and_si512(_mm512_slli_epi16::<4>(h), bit),
        _mm512_and_si512(_mm512_slli_epi16::<3>(h), bit),
        _mm512_and_si512(_mm512_slli_epi16::<2>(h), bit),
        _mm512_and_si512(_mm512_slli_epi16::<1>(h), bit),
        _mm512_and_si512(h, bit),
        _mm512_and_si512(_mm512_srli_epi16::<1>(h), bit),
        _mm512_and_si512(_mm512_srli_epi16::<2>(h), bit),
        _mm512_and_si512(_mm512_srli_epi16::<3>(h), bit),
    ]
}

/// The 256-bit `q4` (stamped by `ymm.rs`'s `simd_path!`) over groups `a` and `b` at once:
/// Q4_0, Q4_1 (`MIN`), or with `HIGH` Q5_0 and Q5_1, whose fifth bits are one more load
/// per group and block.
///
/// # Safety
/// The CPU must support the path's features.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn q4<const R: usize, const MIN: bool, const HIGH: bool, const PREFETCH: bool>(
    a: Group,
    b: Group,
    x: &[XRow; MR],
    blocks: usize,
) -> (Tile, Tile) {
    let format = match (MIN, HIGH) {
        (false, false) => WeightFormat::Q4_0,
        (true, false) => WeightFormat::Q4_1,
        (false, true) => WeightFormat::Q5_0,
        (true, true) => WeightFormat::Q5_1,
    };
    check_pair(&a, &b, blocks, format);
    let qb = format.quant_bytes();
    let nib = _mm512_set1_epi8(0x0F);
    let mut acc = [_mm512_setzero_ps(); R];
    for k in 0..blocks {
        // SAFETY: `check_rows` and `check_group` keep every load in bounds.
        unsafe {
            let pa = a.quants.as_ptr().add(k * NR * qb) as *const __m256i;
            let pb = b.quants.as_ptr().add(k * NR * qb) as *const __m256i;
            // The pair's stream, [`PAIR_AHEAD`] blocks ahead: one prefetch covers both
            // groups, which lie side by side, where a prefetch per group would issue twice.
            if PREFETCH {
                prefetch_pair(b.quants, NR * qb, k, blocks);
                prefetch_pair(b.scales, NR, k, blocks);
                prefetch_pair(b.mins, NR, k, blocks);
            }
            let mut q: [__m512i; CHUNKS] = std::array::from_fn(|c| {
                let raw = both(pa.add(c / 2), pb.add(c / 2));
                if c % 2 == 0 {
                    _mm512_and_si512(raw, nib)
                } else {
                    _mm512_and_si512(_mm512_srli_epi16::<4>(raw), nib)
                }
            });
            if HIGH {
                // Q5's fifth bits, after each block's four nibble vectors.
                let high = q5_highs_pair(both(pa.add(CHUNKS / 2), pb.add(CHUNKS / 2)));
                for (q, high) in q.iter_mut().zip(high) {
                    *q = _mm512_or_si512(*q, high);
                }
            }
            let dw = f16x16(a.scales.as_ptr().add(k * NR), b.scales.as_ptr().add(k * NR));
            for r in 0..R {
                let xp = x[r].quants.as_ptr().add(k * BLOCK);
                // Q4_0's offset of 8 (Q5_0's 16), exactly: the dot starts from −8Σx
                // (−16Σx).
                let mut h = if MIN {
                    _mm512_setzero_si512()
                } else {
                    _mm512_set1_epi32(x[r].offsets.get_unchecked(k)[0])
                };
                for (c, &q) in q.iter().enumerate() {
                    h = _mm512_dpbusd_epi32(h, q, _mm512_set1_epi32(chunk_bits(xp, c)));
                }
                let s = _mm512_mul_ps(_mm512_set1_ps(*x[r].scales.get_unchecked(k)), dw);
                acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(h), s, acc[r]);
            }
        }
    }
    if !MIN {
        return finish(&acc, None);
    }
    // The minimum term in a second pass over the (cached) minimums, so the main
    // loop keeps its registers; each element sees the same sequence.
    let mut mn = [_mm512_setzero_ps(); R];
    for k in 0..blocks {
        // SAFETY: `check_rows` and `check_group` keep every load in bounds.
        unsafe {
            let mw = f16x16(a.mins.as_ptr().add(k * NR), b.mins.as_ptr().add(k * NR));
            for r in 0..R {
                let sum = _mm512_set1_ps(*x[r].sums.get_unchecked(k));
                mn[r] = _mm512_fmadd_ps(mw, sum, mn[r]);
            }
        }
    }
    finish(&acc, Some(&mn))
}

/// The 256-bit `q4k` (stamped by `ymm.rs`'s `simd_path!`) over K-quant groups `a` and `b`
/// at once (Q4K, or Q5K with `HIGH`): each 256-bit vector of the one-group tile becomes the
/// low half (`a`) and high half (`b`) of one 512-bit vector, so a row's block takes four
/// `vpdpbusd` for eight weight rows instead of four for four. Lanes `2j` and `2j + 1` of
/// each half hold weight row `j`'s half-block sums, paired as there; per lane the same
/// float steps, so the same bits.
///
/// # Safety
/// The CPU must support the path's features.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn q4k<const R: usize, const HIGH: bool, const PREFETCH: bool>(
    a: Group,
    b: Group,
    x: &[XRow; MR],
    blocks: usize,
) -> (Tile, Tile) {
    let format = if HIGH {
        WeightFormat::Q5K
    } else {
        WeightFormat::Q4K
    };
    check_pair(&a, &b, blocks, format);
    let qb = format.quant_bytes();
    let pairs = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3);
    let mut acc = [_mm512_setzero_ps(); R];
    let mut mn = [_mm256_setzero_ps(); R];
    let (mut da, mut db) = (_mm_setzero_ps(), _mm_setzero_ps());
    for k in 0..blocks {
        // SAFETY: `check_rows` and `check_group` keep every load in bounds.
        unsafe {
            if PREFETCH {
                prefetch_pair(b.quants, K_NR * qb, k, blocks);
                prefetch_pair(b.sub, 2 * K_NR, k, blocks);
            }
            let q = if HIGH {
                k_pair_quants::<1>(&a, &b, k * K_NR * qb)
            } else {
                k_pair_quants::<0>(&a, &b, k * K_NR * qb)
            };
            // Each group's `d₀..d₃`, once per super-block.
            if k % SUB == 0 {
                let at = (k / SUB) * K_NR;
                (da, db) = (
                    f16x4(a.scales.as_ptr().add(at)),
                    f16x4(b.scales.as_ptr().add(at)),
                );
            }
            // Each group's `dw₀..dw₃ = d·sc`, as the one-group tile forms them, in
            // the lanes of their half sums.
            let scaled = |g: &Group, d: __m128| {
                let sc = _mm_cvtepi32_ps(_mm_cvtepu8_epi32(_mm_cvtsi32_si128(
                    std::ptr::read_unaligned(g.sub.as_ptr().add(k * 2 * K_NR) as *const i32),
                )));
                _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_mul_ps(d, sc)), pairs)
            };
            let dw =
                _mm512_insertf32x8::<1>(_mm512_castps256_ps512(scaled(&a, da)), scaled(&b, db));
            for r in 0..R {
                let h = k_pair_dot(&q, x[r].copy.as_ptr().add(k * BLOCK));
                let whole = _mm512_add_epi32(h, _mm512_shuffle_epi32::<0b10_11_00_01>(h));
                let s = _mm512_mul_ps(_mm512_set1_ps(*x[r].scales.get_unchecked(k)), dw);
                acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(whole), s, acc[r]);
            }
        }
    }
    // The minimum term in a second pass over the (cached) scales, so the main loop
    // keeps its registers; each element sees the same sequence.
    let (mut ma, mut mb) = (_mm_setzero_ps(), _mm_setzero_ps());
    for k in 0..blocks {
        // SAFETY: as above.
        unsafe {
            // Each group's `dmin₀..dmin₃`, once per super-block.
            if k % SUB == 0 {
                let at = (k / SUB) * K_NR;
                (ma, mb) = (
                    f16x4(a.mins.as_ptr().add(at)),
                    f16x4(b.mins.as_ptr().add(at)),
                );
            }
            let m = |g: &Group| {
                _mm_cvtepi32_ps(_mm_cvtepu8_epi32(_mm_cvtsi32_si128(
                    std::ptr::read_unaligned(g.sub.as_ptr().add(k * 2 * K_NR + K_NR) as *const i32),
                )))
            };
            let mw = _mm256_set_m128(_mm_mul_ps(mb, m(&b)), _mm_mul_ps(ma, m(&a)));
            for r in 0..R {
                let sum = _mm256_set1_ps(*x[r].sums.get_unchecked(k));
                mn[r] = _mm256_fmadd_ps(mw, sum, mn[r]);
            }
        }
    }
    finish_k_pair(&acc, &mn)
}

/// Block quants of K-quant groups `a` (low halves) and `b` (high) at byte `at` of
/// each, as [`k_quants`] widens one group's.
///
/// # Safety
/// Both groups must hold a block's quants at `at`.
#[inline]
#[target_feature(enable = "avx2,avx512f")]
unsafe fn k_pair_quants<const EXTRA: usize>(a: &Group, b: &Group, at: usize) -> [__m512i; 4] {
    // SAFETY: the caller's contract.
    let (qa, qb) = unsafe {
        (
            k_quants::<EXTRA>(a.quants.as_ptr().add(at)),
            k_quants::<EXTRA>(b.quants.as_ptr().add(at)),
        )
    };
    std::array::from_fn(|c| _mm512_inserti64x4::<1>(_mm512_castsi256_si512(qa[c]), qb[c]))
}

/// One activation block (its four arranged chunks of eight at `xp`) against a K-quant
/// pair's block: per lane the half-block sums, as `chunk4` gives one group's.
///
/// # Safety
/// `xp` must point at 32 readable bytes.
#[inline]
#[target_feature(enable = "avx2,avx512f,avx512vnni")]
unsafe fn k_pair_dot(q: &[__m512i; 4], xp: *const i8) -> __m512i {
    let xp = xp as *const i64;
    let mut h = _mm512_setzero_si512();
    for (c, &qc) in q.iter().enumerate() {
        // SAFETY: the caller's contract; unaligned 8-byte reads.
        let xc = _mm512_set1_epi64(unsafe { std::ptr::read_unaligned(xp.add(c)) });
        h = _mm512_dpbusd_epi32(h, qc, xc);
    }
    h
}

/// Both K-quant groups' tiles: weight row `j`'s lane `2j` of each half of `acc`
/// less its minimum term (`a`'s four in `mn`'s low lanes, `b`'s in the high).
#[inline]
#[target_feature(enable = "avx2,avx512f")]
fn finish_k_pair<const R: usize>(acc: &[__m512; R], mn: &[__m256; R]) -> (Tile, Tile) {
    let (mut ta, mut tb): (Tile, Tile) = Default::default();
    for r in 0..R {
        let (mut lanes, mut m) = ([0f32; 16], [0f32; 8]);
        // SAFETY: `lanes` is 16 f32s and `m` 8; storeu has no alignment requirement.
        unsafe {
            _mm512_storeu_ps(lanes.as_mut_ptr(), acc[r]);
            _mm256_storeu_ps(m.as_mut_ptr(), mn[r]);
        }
        for j in 0..K_NR {
            ta[r][j] = lanes[2 * j] - m[j];
            tb[r][j] = lanes[8 + 2 * j] - m[K_NR + j];
        }
    }
    (ta, tb)
}

/// The 256-bit `q6k` (stamped by `ymm.rs`'s `simd_path!`) over Q6K groups `a` and `b` at
/// once, as [`q4k`] widens the Q4K tile: per lane the same integer halves, offsets,
/// sub-scale products and float steps, so the same bits.
///
/// # Safety
/// The CPU must support the path's features.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn q6k<const R: usize, const PREFETCH: bool>(
    a: Group,
    b: Group,
    x: &[XRow; MR],
    blocks: usize,
) -> (Tile, Tile) {
    check_pair(&a, &b, blocks, WeightFormat::Q6K);
    let qb = WeightFormat::Q6K.quant_bytes();
    let pairs = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3);
    // Sub-scales `[lo₀..lo₃, hi₀..hi₃]` into the half sums' lane order.
    let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    let mut acc = [_mm512_setzero_ps(); R];
    let mut dw = _mm512_setzero_ps();
    for k in 0..blocks {
        // SAFETY: `check_rows` and `check_pair` keep every load in bounds.
        unsafe {
            if PREFETCH {
                prefetch_pair(b.quants, K_NR * qb, k, blocks);
                prefetch_pair(b.sub, 2 * K_NR, k, blocks);
            }
            let q = k_pair_quants::<2>(&a, &b, k * K_NR * qb);
            let sc_of = |g: &Group| {
                _mm256_permutevar8x32_epi32(
                    _mm256_cvtepi8_epi32(_mm_loadl_epi64(
                        g.sub.as_ptr().add(k * 2 * K_NR) as *const __m128i
                    )),
                    order,
                )
            };
            let sc = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(sc_of(&a)), sc_of(&b));
            if k % SUB == 0 {
                let at = (k / SUB) * K_NR;
                let d = |g: &Group| {
                    _mm256_permutevar8x32_ps(
                        _mm256_castps128_ps256(f16x4(g.scales.as_ptr().add(at))),
                        pairs,
                    )
                };
                dw = _mm512_insertf32x8::<1>(_mm512_castps256_ps512(d(&a)), d(&b));
            }
            for r in 0..R {
                let h = k_pair_dot(&q, x[r].copy.as_ptr().add(k * BLOCK));
                // [−32Σx_lo, −32Σx_hi] repeated: the offset of 32, exactly.
                let off = std::ptr::read_unaligned(x[r].offsets.as_ptr().add(k) as *const i64);
                let halves = _mm512_add_epi32(h, _mm512_set1_epi64(off));
                let prod = _mm512_mullo_epi32(halves, sc);
                let whole = _mm512_add_epi32(prod, _mm512_shuffle_epi32::<0b10_11_00_01>(prod));
                let s = _mm512_mul_ps(_mm512_set1_ps(*x[r].scales.get_unchecked(k)), dw);
                acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(whole), s, acc[r]);
            }
        }
    }
    finish_k_pair(&acc, &[_mm256_setzero_ps(); R])
}

/// The 256-bit `q8_0` (stamped by `ymm.rs`'s `simd_path!`) over groups `a` and `b` at once.
///
/// # Safety
/// The CPU must support the path's features.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn q8_0<const R: usize>(a: Group, b: Group, x: &[XRow; MR], blocks: usize) -> (Tile, Tile) {
    check_pair(&a, &b, blocks, WeightFormat::Q8_0);
    let mut acc = [_mm512_setzero_ps(); R];
    for k in 0..blocks {
        // SAFETY: `check_rows` and `check_group` keep every load in bounds.
        unsafe {
            let pa = a.quants.as_ptr().add(k * NR * BLOCK) as *const __m256i;
            let pb = b.quants.as_ptr().add(k * NR * BLOCK) as *const __m256i;
            // Every row tile prefetches here: the prefetches also keep LLVM from
            // interleaving the rows' dots and spilling their broadcasts.
            prefetch_pair(b.quants, NR * BLOCK, k, blocks);
            prefetch_pair(b.scales, NR, k, blocks);
            prefetch_pair(b.sums, NR, k, blocks);
            let wv: [__m512i; CHUNKS] = std::array::from_fn(|c| both(pa.add(c), pb.add(c)));
            let sw = _mm512_cvtepi16_epi32(_mm256_inserti128_si256::<1>(
                _mm256_castsi128_si256(_mm_loadu_si128(
                    a.sums.as_ptr().add(k * NR) as *const __m128i
                )),
                _mm_loadu_si128(b.sums.as_ptr().add(k * NR) as *const __m128i),
            ));
            // The biased activations' extra `128·Σw`, taken back from the start.
            let back = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32::<7>(sw));
            let dw = f16x16(a.scales.as_ptr().add(k * NR), b.scales.as_ptr().add(k * NR));
            for r in 0..R {
                let xp = x[r].copy.as_ptr().add(k * BLOCK);
                let mut h = back;
                for (c, &w) in wv.iter().enumerate() {
                    h = _mm512_dpbusd_epi32(h, _mm512_set1_epi32(chunk_bits(xp, c)), w);
                }
                let s = _mm512_mul_ps(_mm512_set1_ps(*x[r].scales.get_unchecked(k)), dw);
                acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(h), s, acc[r]);
            }
        }
    }
    finish(&acc, None)
}

/// Whether `format` has 512-bit tiles (of [`MR`] activation rows).
pub(super) fn has_zmm_tile(format: WeightFormat) -> bool {
    matches!(
        format,
        WeightFormat::Q8_0
            | WeightFormat::Q4_0
            | WeightFormat::Q4_1
            | WeightFormat::Q5_0
            | WeightFormat::Q5_1
            | WeightFormat::Q4K
            | WeightFormat::Q5K
            | WeightFormat::Q6K
    )
}
