//! AVX2 ([`Avx2`]): the 256-bit tiles with `maddubs` + `madd` as the integer dot, exact
//! while the i16 pair sums cannot saturate (`ymm.rs`'s module doc says when).

// What the stamped tiles name (a macro's paths resolve where it is stamped).
use super::prefetch::{prefetch_per_block, prefetch_quants};
use super::ymm::{
    chunk_of, chunks_of, f16x4, f16x8, finish_k, k_quants, pair_sums, q5_high, simd_path, tile_of,
    CHUNKS,
};
use crate::kernels::quant::activations::{check_rows, XRow};
use crate::kernels::quant::group::{check_group, Group};
use crate::kernels::quant::quant_matrix::QuantMatrix;
use crate::kernels::quant::tile::{Rows, Tile, TileKernel, TileOut};
use crate::kernels::quant::weight_format::WeightFormat;
use crate::kernels::quant::{BLOCK, K_NR, MR, NR, SUB};
use std::arch::x86_64::*;
use std::ops::Range;

/// `acc` plus eight i32 sums of four adjacent u8×i8 products (lane `l` covers bytes
/// `4l..4l+4`). With the unsigned side ≤ 127 (|w|) or ≤ 15 (nibbles) the i16 pair sums
/// of maddubs cannot saturate, so this equals the exact VNNI result; the biased u8
/// activations (≤ 255) are for VNNI only.
#[inline]
#[target_feature(enable = "avx2")]
fn dp_avx2(acc: __m256i, u: __m256i, s: __m256i) -> __m256i {
    _mm256_add_epi32(
        acc,
        _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)),
    )
}

/// Eight i32 sums, over four chunks, of four adjacent u8×i8 products (lane `l` covers
/// bytes `4l..4l+4` of every chunk). For nibbles (≤ 15) an i16 lane of the four
/// chunks' `maddubs` sums eight products, |Σ| ≤ 8·15·127 < 2¹⁵, so one widening `madd`
/// ends it, exactly as VNNI's accumulation.
#[inline]
#[target_feature(enable = "avx2")]
fn chunk4_avx2(w: [__m256i; 4], x: [__m256i; 4]) -> __m256i {
    let (a, b) = chunk_pairs_avx2(w, x);
    _mm256_madd_epi16(_mm256_add_epi16(a, b), _mm256_set1_epi16(1))
}

/// The i16 `maddubs` sums of chunks 0 + 1 and of chunks 2 + 3.
#[inline]
#[target_feature(enable = "avx2")]
fn chunk_pairs_avx2(w: [__m256i; 4], x: [__m256i; 4]) -> (__m256i, __m256i) {
    let m: [__m256i; 4] = [
        _mm256_maddubs_epi16(w[0], x[0]),
        _mm256_maddubs_epi16(w[1], x[1]),
        _mm256_maddubs_epi16(w[2], x[2]),
        _mm256_maddubs_epi16(w[3], x[3]),
    ];
    (_mm256_add_epi16(m[0], m[1]), _mm256_add_epi16(m[2], m[3]))
}

/// [`chunk4_avx2`] for 6-bit quants (Q6K, ≤ 63): two chunks' `maddubs` per i16 lane
/// (four products, |Σ| ≤ 4·63·127 < 2¹⁵) before each widening `madd`.
#[inline]
#[target_feature(enable = "avx2")]
fn chunk4w_avx2(w: [__m256i; 4], x: [__m256i; 4]) -> __m256i {
    let ones = _mm256_set1_epi16(1);
    let (a, b) = chunk_pairs_avx2(w, x);
    _mm256_add_epi32(_mm256_madd_epi16(a, ones), _mm256_madd_epi16(b, ones))
}

simd_path!("avx2,fma,f16c", false, dp_avx2, chunk4_avx2, chunk4w_avx2);

/// The AVX2 tiles behind [`TileKernel`].
pub(in crate::kernels::quant) struct Avx2;

impl TileKernel for Avx2 {
    /// # Safety
    /// The CPU must support AVX2, FMA and F16C.
    unsafe fn tiles(
        m: &QuantMatrix,
        groups: Range<usize>,
        rows: Rows,
        emit: &mut impl FnMut(usize, &TileOut),
    ) {
        let x = rows.x;
        // SAFETY: the CPU supports this path (the caller's contract).
        unsafe {
            match rows.mr {
                1 => tiles::<1>(m, groups, x, emit),
                2 => tiles::<2>(m, groups, x, emit),
                3 => tiles::<3>(m, groups, x, emit),
                _ => tiles::<4>(m, groups, x, emit),
            }
        }
    }
}
