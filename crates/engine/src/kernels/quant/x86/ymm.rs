//! The 256-bit tile body every x86 instruction set shares: `simd_path!` stamps one tile per
//! format (Q8_0, Q4_0/Q4_1/Q5_0/Q5_1, Q4K/Q5K, Q6K) into the file that invokes it, with that
//! instruction set's target features and integer dot; the helpers here load, widen and
//! store what every stamp reads the same way.
//!
//! On AVX2 the integer dots are `maddubs` (u8 × i8 pairs into i16) summed over a block's
//! chunks in i16 while that cannot overflow (Q4_0/Q4_1: the whole block, sixteen products
//! of ≤ 15·127 per lane; Q5_0/Q5_1 eight of ≤ 31·127; K-quant nibbles eight, Q5K ≤ 31;
//! Q6K four at a time; Q8_0 none, as `|w| ≤ 127`), then widened by `madd`: exactly the
//! integers VNNI's `vpdpbusd` accumulates.

use crate::kernels::quant::tile::Tile;
use crate::kernels::quant::{BLOCK, K_NR};
use std::arch::x86_64::*;

/// Chunks of four elements in a 32-block: one per 32-bit lane of a dot product.
pub(super) const CHUNKS: usize = BLOCK / 4;

/// Chunk `c` of the block at `p`: its four bytes as one i32, to broadcast to every lane.
///
/// # Safety
/// `p` must point at a readable block of 32 bytes and `c < CHUNKS`.
#[inline(always)]
pub(super) unsafe fn chunk_bits(p: *const i8, c: usize) -> i32 {
    // SAFETY: the caller's contract; an unaligned 4-byte read.
    unsafe { std::ptr::read_unaligned(p.add(4 * c) as *const i32) }
}

/// [`chunk_bits`] broadcast to a 256-bit vector.
///
/// # Safety
/// As [`chunk_bits`].
#[inline]
#[target_feature(enable = "avx2")]
pub(super) unsafe fn chunk_of(p: *const i8, c: usize) -> __m256i {
    // SAFETY: the caller's contract.
    _mm256_set1_epi32(unsafe { chunk_bits(p, c) })
}

/// Eight f16 values (a group's block scales or minimums) as f32.
///
/// # Safety
/// `p` must point at eight readable u16s.
#[inline]
#[target_feature(enable = "avx2,f16c")]
pub(super) unsafe fn f16x8(p: *const u16) -> __m256 {
    // SAFETY: the caller's contract; an unaligned 16-byte read.
    _mm256_cvtph_ps(unsafe { _mm_loadu_si128(p as *const __m128i) })
}

/// The tile of the 256-bit Q4/Q8 kernels: lane `j` of row `r`'s accumulator is weight
/// row `j`, plus Q4_1's minimum term.
#[inline]
#[target_feature(enable = "avx2")]
pub(super) fn tile_of<const R: usize>(acc: &[__m256; R], mn: Option<&[__m256; R]>) -> Tile {
    let mut out: Tile = Default::default();
    for r in 0..R {
        let row = match mn {
            Some(mn) => _mm256_add_ps(acc[r], mn[r]),
            None => acc[r],
        };
        // SAFETY: a row is 8 f32s; storeu has no alignment requirement.
        unsafe { _mm256_storeu_ps(out[r].as_mut_ptr(), row) };
    }
    out
}

/// One activation block's four chunks of eight, each broadcast to every row's place.
///
/// # Safety
/// `p` must point at 32 readable bytes.
#[inline]
#[target_feature(enable = "avx2")]
pub(super) unsafe fn chunks_of(p: *const i8) -> [__m256i; 4] {
    let p = p as *const i64;
    // SAFETY: the caller's contract; unaligned 8-byte reads.
    unsafe {
        [
            _mm256_set1_epi64x(std::ptr::read_unaligned(p)),
            _mm256_set1_epi64x(std::ptr::read_unaligned(p.add(1))),
            _mm256_set1_epi64x(std::ptr::read_unaligned(p.add(2))),
            _mm256_set1_epi64x(std::ptr::read_unaligned(p.add(3))),
        ]
    }
}

/// A K-quant block's four 32-byte vectors, chunks 0..4 of the four rows (eight
/// elements each, as `k_quants` splits a block), each byte a whole quant: the nibble plus
/// `EXTRA` high bits (0: Q4K, 1: Q5K, 2: Q6K) from where `k_quants` lays them out.
///
/// # Safety
/// `p` must point at one block's `K_NR · quant_bytes` readable bytes.
#[inline]
#[target_feature(enable = "avx2")]
pub(super) unsafe fn k_quants<const EXTRA: usize>(p: *const u8) -> [__m256i; 4] {
    let nib = _mm256_set1_epi8(0x0F);
    // SAFETY (all loads): the caller's contract; 64 nibble bytes, then the high bits.
    let (r01, r23) = unsafe {
        let wp = p as *const __m256i;
        (_mm256_loadu_si256(wp), _mm256_loadu_si256(wp.add(1)))
    };
    let q = [
        _mm256_and_si256(r01, nib),
        _mm256_and_si256(_mm256_srli_epi16::<4>(r01), nib),
        _mm256_and_si256(r23, nib),
        _mm256_and_si256(_mm256_srli_epi16::<4>(r23), nib),
    ];
    // The epi16 shifts below move at most 4 bits, and the masks keep one byte's own
    // bits, so nothing leaks between bytes.
    let h = match EXTRA {
        1 => {
            // Byte p's bit c (lane 0) or c + 4 (lane 1) is vector c's fifth bit; shift
            // lane 1 down 4, then bit c up to bit 4.
            let h = _mm256_broadcastsi128_si256(unsafe {
                _mm_loadu_si128(p.add(K_NR * BLOCK / 2) as *const __m128i)
            });
            let h = _mm256_srlv_epi32(h, _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4));
            let bit = _mm256_set1_epi8(0x10);
            [
                _mm256_and_si256(_mm256_slli_epi16::<4>(h), bit),
                _mm256_and_si256(_mm256_slli_epi16::<3>(h), bit),
                _mm256_and_si256(_mm256_slli_epi16::<2>(h), bit),
                _mm256_and_si256(_mm256_slli_epi16::<1>(h), bit),
            ]
        }
        2 => {
            // Byte p's bits 2c..2c+2 are vector c's top two bits, moved to bits 4..6.
            let h = unsafe { _mm256_loadu_si256(p.add(K_NR * BLOCK / 2) as *const __m256i) };
            let top = _mm256_set1_epi8(0x30);
            [
                _mm256_and_si256(_mm256_slli_epi16::<4>(h), top),
                _mm256_and_si256(_mm256_slli_epi16::<2>(h), top),
                _mm256_and_si256(h, top),
                _mm256_and_si256(_mm256_srli_epi16::<2>(h), top),
            ]
        }
        _ => return q,
    };
    std::array::from_fn(|c| _mm256_or_si256(q[c], h[c]))
}

/// Chunk `c`'s fifth bits of a Q5_0/Q5_1 block at bit 4 of each byte, ready to OR onto the
/// chunk's nibbles: `h` is the block's 32 bytes of them, byte `4j + p` holding chunk `c`'s
/// at bit `c` (`group.rs`'s `q5_high_at`). The epi16 shifts move at most 4 bits and the
/// mask keeps bit 4 of each byte, which comes from the same byte, so nothing leaks
/// between bytes. `c` is a constant once the chunk loop is unrolled.
#[inline]
#[target_feature(enable = "avx2")]
pub(super) fn q5_high(h: __m256i, c: usize) -> __m256i {
    let at4 = match c {
        0 => _mm256_slli_epi16::<4>(h),
        1 => _mm256_slli_epi16::<3>(h),
        2 => _mm256_slli_epi16::<2>(h),
        3 => _mm256_slli_epi16::<1>(h),
        4 => h,
        5 => _mm256_srli_epi16::<1>(h),
        6 => _mm256_srli_epi16::<2>(h),
        _ => _mm256_srli_epi16::<3>(h),
    };
    _mm256_and_si256(at4, _mm256_set1_epi8(0x10))
}

/// Four f16 values (a group's super-block scales) as f32.
///
/// # Safety
/// `p` must point at four readable u16s.
#[inline]
#[target_feature(enable = "avx2,f16c")]
pub(super) unsafe fn f16x4(p: *const u16) -> __m128 {
    // SAFETY: the caller's contract; loadl reads 8 bytes unaligned.
    _mm_cvtph_ps(unsafe { _mm_loadl_epi64(p as *const __m128i) })
}

/// The whole block's integer per weight row from the half sums
/// `[r0lo r0hi r1lo r1hi | r2lo r2hi r3lo r3hi]`: each pair added, twice over.
#[inline]
#[target_feature(enable = "avx2")]
pub(super) fn pair_sums(halves: __m256i) -> __m256i {
    _mm256_add_epi32(halves, _mm256_shuffle_epi32::<0b10_11_00_01>(halves))
}

/// The K-quant tiles' result: row j's lane of `acc` (lane `2j` after `pair_sums`)
/// minus its minimum term.
#[inline]
#[target_feature(enable = "avx2")]
pub(super) fn finish_k(acc: __m256, mn: __m128) -> [f32; K_NR] {
    let (mut lanes, mut m) = ([0f32; 8], [0f32; K_NR]);
    // SAFETY: `lanes` is 8 f32s and `m` 4; storeu has no alignment requirement.
    unsafe {
        _mm256_storeu_ps(lanes.as_mut_ptr(), acc);
        _mm_storeu_ps(m.as_mut_ptr(), mn);
    }
    std::array::from_fn(|j| lanes[2 * j] - m[j])
}

/// The tiles of one instruction set: `$features` its target features, `$vnni` whether its
/// dot accumulates in i32 (so a block's products need no i16 stage), `$dp` its dot of
/// four adjacent u8×i8 products into i32 lanes, `$chunk4` of four chunks of them and
/// `$chunk4w` that for 6-bit quants. The stamped code names the tile types, the checks,
/// the prefetch and these helpers, which the invoking file imports (a macro's paths
/// resolve where it is stamped).
macro_rules! simd_path {
    ($features:literal, $vnni:expr, $dp:ident, $chunk4:ident, $chunk4w:ident) => {
        /// Every group of `groups` against `R` activation rows, each tile handed
        /// to `emit`.
        ///
        /// # Safety
        /// The CPU must support the path's features.
        #[target_feature(enable = $features)]
        unsafe fn tiles<const R: usize>(
            m: &QuantMatrix,
            groups: Range<usize>,
            x: &[XRow; MR],
            emit: &mut impl FnMut(usize, &TileOut),
        ) {
            let (format, blocks) = (m.format, m.cols / BLOCK);
            check_rows::<R>(x, blocks, format);
            // SAFETY: the CPU supports this path (caller's contract); the rows were
            // checked for `blocks` blocks, and each kernel checks its group.
            unsafe {
                for g in groups {
                    let w = m.group(g);
                    let tile = match format {
                        WeightFormat::Q8_0 => q8_0::<R>(w, x, blocks),
                        WeightFormat::Q4_0 => q4::<R, false, false>(w, x, blocks),
                        WeightFormat::Q4_1 => q4::<R, true, false>(w, x, blocks),
                        WeightFormat::Q5_0 => q4::<R, false, true>(w, x, blocks),
                        WeightFormat::Q5_1 => q4::<R, true, true>(w, x, blocks),
                        WeightFormat::Q4K => q4k::<R, false>(w, x, blocks),
                        WeightFormat::Q5K => q4k::<R, true>(w, x, blocks),
                        WeightFormat::Q6K => q6k::<R>(w, x, blocks),
                    };
                    emit(g, &tile);
                }
            }
        }

        /// `R` activation rows against one Q8_0 weight group, one weight row per
        /// lane, each lane a whole block's integer dot. With VNNI and several rows
        /// the activations come biased to u8 (`x + 128`) against the signed
        /// weights, and the tile takes `128·Σw` back (`Σw` kept per row and block
        /// since load, [`QuantMatrix::sums`]); otherwise `|w|` meets the activations signed
        /// by `w`, which costs fewer instructions for one row (decode's output
        /// layer: 0.83–0.90× the speed biased).
        ///
        /// # Safety
        /// The CPU must support the path's features.
        #[inline]
        #[target_feature(enable = $features)]
        unsafe fn q8_0<const R: usize>(w: Group, x: &[XRow; MR], blocks: usize) -> Tile {
            check_group(&w, blocks, WeightFormat::Q8_0);
            let mut acc = [_mm256_setzero_ps(); R];
            for b in 0..blocks {
                // SAFETY: `check_rows` and `check_group` keep every load in bounds.
                unsafe {
                    let wp = w.quants.as_ptr().add(b * NR * BLOCK) as *const __m256i;
                    prefetch_quants(wp as *const u8, NR * BLOCK);
                    prefetch_per_block(w.scales, NR, b);
                    let wv: [__m256i; CHUNKS] =
                        std::array::from_fn(|c| _mm256_loadu_si256(wp.add(c)));
                    let dw = f16x8(w.scales.as_ptr().add(b * NR));
                    let mut h = [_mm256_setzero_si256(); R];
                    if $vnni && R > 1 {
                        let sw = _mm256_cvtepi16_epi32(_mm_loadu_si128(
                            w.sums.as_ptr().add(b * NR) as *const __m128i,
                        ));
                        let back =
                            _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32::<7>(sw));
                        for r in 0..R {
                            let xp = x[r].copy.as_ptr().add(b * BLOCK);
                            let mut i = back;
                            for c in 0..CHUNKS {
                                i = $dp(i, chunk_of(xp, c), wv[c]);
                            }
                            h[r] = i;
                        }
                    } else {
                        for c in 0..CHUNKS {
                            let wa = _mm256_abs_epi8(wv[c]);
                            for r in 0..R {
                                let xc = chunk_of(x[r].quants.as_ptr().add(b * BLOCK), c);
                                h[r] = $dp(h[r], wa, _mm256_sign_epi8(xc, wv[c]));
                            }
                        }
                    }
                    for r in 0..R {
                        let s = _mm256_mul_ps(_mm256_set1_ps(*x[r].scales.get_unchecked(b)), dw);
                        acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(h[r]), s, acc[r]);
                    }
                }
            }
            tile_of(&acc, None)
        }

        /// `R` activation rows against one Q4_0 (`MIN = false`) or Q4_1 group, or with
        /// `HIGH` one Q5_0 or Q5_1 group. One 32-byte load holds two chunks of all eight
        /// rows' block (low and high nibbles, see `q4_at`); a Q5 block's fifth bits are
        /// one more load (`q5_high_at`), each chunk's moved onto its nibbles. A chunk
        /// meets the row's four activations broadcast, each lane summing its weight row's
        /// whole block. Without VNNI the chunks' `maddubs` pairs add up in i16 before a
        /// widening `madd`: all eight chunks of nibbles (≤ 8·2·15·127 < 2¹⁵), four at a
        /// time of 5-bit quants (≤ 4·2·31·127 < 2¹⁵).
        ///
        /// # Safety
        /// The CPU must support the path's features.
        #[inline]
        #[target_feature(enable = $features)]
        unsafe fn q4<const R: usize, const MIN: bool, const HIGH: bool>(
            w: Group,
            x: &[XRow; MR],
            blocks: usize,
        ) -> Tile {
            let format = match (MIN, HIGH) {
                (false, false) => WeightFormat::Q4_0,
                (true, false) => WeightFormat::Q4_1,
                (false, true) => WeightFormat::Q5_0,
                (true, true) => WeightFormat::Q5_1,
            };
            check_group(&w, blocks, format);
            let qb = format.quant_bytes();
            let nib = _mm256_set1_epi8(0x0F);
            let ones = _mm256_set1_epi16(1);
            let mut acc = [_mm256_setzero_ps(); R];
            let mut mn = [_mm256_setzero_ps(); R];
            // Q4_1's (Q5_1's) minimum term is its own chain of fmas. With few rows the
            // main loop has registers to spare and that chain alone would be latency
            // bound, so it runs inside the main loop; with more rows it gets a
            // second pass over the (cached) minimums, so the main loop keeps its
            // registers. Either way each element sees the same sequence.
            let inline_min = MIN && R <= 2;
            for b in 0..blocks {
                // SAFETY: `check_rows` and `check_group` keep every load in bounds.
                unsafe {
                    let wp = w.quants.as_ptr().add(b * NR * qb) as *const __m256i;
                    prefetch_quants(wp as *const u8, NR * qb);
                    prefetch_per_block(w.scales, NR, b);
                    prefetch_per_block(w.mins, NR, b);
                    let dw = f16x8(w.scales.as_ptr().add(b * NR));
                    // Q4_0's offset of 8 (Q5_0's 16), exactly: the dot starts from −8Σx
                    // (−16Σx).
                    let start: [__m256i; R] = std::array::from_fn(|r| {
                        if MIN {
                            _mm256_setzero_si256()
                        } else {
                            _mm256_set1_epi32(x[r].offsets.get_unchecked(b)[0])
                        }
                    });
                    // Q5's fifth bits, after the block's four nibble vectors.
                    let high = if HIGH {
                        _mm256_loadu_si256(wp.add(CHUNKS / 2))
                    } else {
                        _mm256_setzero_si256()
                    };
                    let mut h = if $vnni {
                        start
                    } else {
                        [_mm256_setzero_si256(); R]
                    };
                    // Without VNNI, 5-bit quants' first four chunks, widened to i32.
                    let mut first_half = [_mm256_setzero_si256(); R];
                    for v in 0..CHUNKS / 2 {
                        let raw = _mm256_loadu_si256(wp.add(v));
                        let mut q = [
                            _mm256_and_si256(raw, nib),
                            _mm256_and_si256(_mm256_srli_epi16::<4>(raw), nib),
                        ];
                        if HIGH {
                            q[0] = _mm256_or_si256(q[0], q5_high(high, 2 * v));
                            q[1] = _mm256_or_si256(q[1], q5_high(high, 2 * v + 1));
                        }
                        for r in 0..R {
                            let xp = x[r].quants.as_ptr().add(b * BLOCK);
                            for (half, &q) in q.iter().enumerate() {
                                let xc = chunk_of(xp, 2 * v + half);
                                h[r] = if $vnni {
                                    $dp(h[r], q, xc)
                                } else {
                                    _mm256_add_epi16(h[r], _mm256_maddubs_epi16(q, xc))
                                };
                            }
                        }
                        if HIGH && !$vnni && v == CHUNKS / 4 - 1 {
                            for r in 0..R {
                                first_half[r] = _mm256_madd_epi16(h[r], ones);
                                h[r] = _mm256_setzero_si256();
                            }
                        }
                    }
                    for r in 0..R {
                        let i = if $vnni {
                            h[r]
                        } else {
                            let wide = _mm256_madd_epi16(h[r], ones);
                            let wide = if HIGH {
                                _mm256_add_epi32(wide, first_half[r])
                            } else {
                                wide
                            };
                            _mm256_add_epi32(wide, start[r])
                        };
                        let s = _mm256_mul_ps(_mm256_set1_ps(*x[r].scales.get_unchecked(b)), dw);
                        acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i), s, acc[r]);
                    }
                    if inline_min {
                        let mw = f16x8(w.mins.as_ptr().add(b * NR));
                        for r in 0..R {
                            let sum = _mm256_set1_ps(*x[r].sums.get_unchecked(b));
                            mn[r] = _mm256_fmadd_ps(mw, sum, mn[r]);
                        }
                    }
                }
            }
            if MIN && !inline_min {
                for b in 0..blocks {
                    // SAFETY: `check_rows` and `check_group` keep every load in bounds.
                    unsafe {
                        let mw = f16x8(w.mins.as_ptr().add(b * NR));
                        for r in 0..R {
                            let sum = _mm256_set1_ps(*x[r].sums.get_unchecked(b));
                            mn[r] = _mm256_fmadd_ps(mw, sum, mn[r]);
                        }
                    }
                }
            }
            tile_of(&acc, MIN.then_some(&mn))
        }

        /// `R` activation rows against one Q4K (`HIGH = false`) or Q5K group: the
        /// integer half-block sums (one lane per row and half, `k_quants`'s
        /// layout), added per block, times `d_x · (d·sc)`; the
        /// minimum term `(dmin·m) · (d_x·Σx)` kept apart and subtracted at the end.
        ///
        /// # Safety
        /// The CPU must support the path's features.
        #[inline]
        #[target_feature(enable = $features)]
        unsafe fn q4k<const R: usize, const HIGH: bool>(
            w: Group,
            x: &[XRow; MR],
            blocks: usize,
        ) -> Tile {
            let format = if HIGH {
                WeightFormat::Q5K
            } else {
                WeightFormat::Q4K
            };
            check_group(&w, blocks, format);
            let qb = format.quant_bytes();
            let pairs = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3);
            let mut acc = [_mm256_setzero_ps(); R];
            let mut mn = [_mm_setzero_ps(); R];
            let mut d = _mm256_setzero_ps();
            for b in 0..blocks {
                // SAFETY: `check_rows` and `check_group` keep every load in bounds.
                unsafe {
                    let p = w.quants.as_ptr().add(b * K_NR * qb);
                    prefetch_quants(p, K_NR * qb);
                    prefetch_per_block(w.sub, 2 * K_NR, b);
                    let q = if HIGH {
                        k_quants::<1>(p)
                    } else {
                        k_quants::<0>(p)
                    };
                    // `[d₀..d₃, dmin₀..dmin₃]`, converted once per super-block.
                    if b % SUB == 0 {
                        let at = (b / SUB) * K_NR;
                        d = _mm256_set_m128(
                            f16x4(w.mins.as_ptr().add(at)),
                            f16x4(w.scales.as_ptr().add(at)),
                        );
                    }
                    // `[sc₀..sc₃, m₀..m₃]` times `d`: exact products (11-bit and
                    // 6-bit significands), `[dw₀..dw₃, mw₀..mw₃]`.
                    let sub = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(
                        w.sub.as_ptr().add(b * 2 * K_NR) as *const __m128i,
                    )));
                    let scaled = _mm256_mul_ps(d, sub);
                    let dw = _mm256_permutevar8x32_ps(scaled, pairs);
                    let mw = _mm256_extractf128_ps::<1>(scaled);
                    for r in 0..R {
                        let xc = chunks_of(x[r].copy.as_ptr().add(b * BLOCK));
                        let whole = pair_sums($chunk4(q, xc));
                        let s = _mm256_mul_ps(_mm256_set1_ps(*x[r].scales.get_unchecked(b)), dw);
                        acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(whole), s, acc[r]);
                        mn[r] = _mm_fmadd_ps(mw, _mm_set1_ps(*x[r].sums.get_unchecked(b)), mn[r]);
                    }
                }
            }
            let mut out: Tile = Default::default();
            for r in 0..R {
                out[r][..K_NR].copy_from_slice(&finish_k(acc[r], mn[r]));
            }
            out
        }

        /// `R` activation rows against one Q6K group: per 16-element half the
        /// integer dot less `32·Σx`, times its int8 scale, both halves added as
        /// integers (|Σ| < 2²⁴, exact in f32), then one fma with `d_x · d`.
        ///
        /// # Safety
        /// The CPU must support the path's features.
        #[inline]
        #[target_feature(enable = $features)]
        unsafe fn q6k<const R: usize>(w: Group, x: &[XRow; MR], blocks: usize) -> Tile {
            check_group(&w, blocks, WeightFormat::Q6K);
            let qb = WeightFormat::Q6K.quant_bytes();
            let pairs = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3);
            // Scales `[lo₀..lo₃, hi₀..hi₃]` into the half sums' lane order.
            let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
            let mut acc = [_mm256_setzero_ps(); R];
            let mut dw = _mm256_setzero_ps();
            for b in 0..blocks {
                // SAFETY: `check_rows` and `check_group` keep every load in bounds.
                unsafe {
                    let p = w.quants.as_ptr().add(b * K_NR * qb);
                    prefetch_quants(p, K_NR * qb);
                    prefetch_per_block(w.sub, 2 * K_NR, b);
                    let q = k_quants::<2>(p);
                    let sc = _mm256_cvtepi8_epi32(_mm_loadl_epi64(
                        w.sub.as_ptr().add(b * 2 * K_NR) as *const __m128i,
                    ));
                    let sc = _mm256_permutevar8x32_epi32(sc, order);
                    if b % SUB == 0 {
                        let d4 = f16x4(w.scales.as_ptr().add((b / SUB) * K_NR));
                        dw = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(d4), pairs);
                    }
                    for r in 0..R {
                        let xc = chunks_of(x[r].copy.as_ptr().add(b * BLOCK));
                        let halves = $chunk4w(q, xc);
                        // [−32Σx_lo, −32Σx_hi] repeated: the offset of 32, exactly.
                        let off =
                            std::ptr::read_unaligned(x[r].offsets.as_ptr().add(b) as *const i64);
                        let halves = _mm256_add_epi32(halves, _mm256_set1_epi64x(off));
                        let whole = pair_sums(_mm256_mullo_epi32(halves, sc));
                        let s = _mm256_mul_ps(_mm256_set1_ps(*x[r].scales.get_unchecked(b)), dw);
                        acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(whole), s, acc[r]);
                    }
                }
            }
            let mut out: Tile = Default::default();
            for r in 0..R {
                out[r][..K_NR].copy_from_slice(&finish_k(acc[r], _mm_setzero_ps()));
            }
            out
        }
    };
}

// Each instruction set's file stamps the tiles with `simd_path!`.
pub(super) use simd_path;
