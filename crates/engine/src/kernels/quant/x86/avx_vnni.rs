//! AVX-VNNI ([`AvxVnni`]): the 256-bit tiles with VEX `vpdpbusd` as the integer dot.

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

#[inline]
#[target_feature(enable = "avx2,avxvnni")]
fn dp_avx_vnni(acc: __m256i, u: __m256i, s: __m256i) -> __m256i {
    _mm256_dpbusd_avx_epi32(acc, u, s)
}

#[inline]
#[target_feature(enable = "avx2,avxvnni")]
fn chunk4_avx_vnni(w: [__m256i; 4], x: [__m256i; 4]) -> __m256i {
    let acc = _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), w[0], x[0]);
    let acc = _mm256_dpbusd_avx_epi32(acc, w[1], x[1]);
    let acc = _mm256_dpbusd_avx_epi32(acc, w[2], x[2]);
    _mm256_dpbusd_avx_epi32(acc, w[3], x[3])
}

// VNNI accumulates in i32, so 6-bit quants need no wider variant.
simd_path!(
    "avx2,fma,f16c,avxvnni",
    true,
    dp_avx_vnni,
    chunk4_avx_vnni,
    chunk4_avx_vnni
);

/// The AVX-VNNI tiles behind [`TileKernel`].
pub(in crate::kernels::quant) struct AvxVnni;

impl TileKernel for AvxVnni {
    /// # Safety
    /// The CPU must support AVX-VNNI (with AVX2, FMA and F16C).
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
